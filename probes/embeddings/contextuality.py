"""How contextual are contextual word vectors? (Ethayarajh 2019), per layer.

- self-similarity: mean pairwise cosine of a word's vectors across its occurrences (words with
  ``>= min_occurrences`` occurrences), averaged over words;
- intra-sentence similarity: mean cosine of each word's vector to its sentence's mean vector,
  averaged over sentences (sentences of >= 2 words);
- maximum explainable variance (MEV): the share of the variance of a word's occurrence vectors
  that their first principal component explains, averaged over words. Default (``centering =
  "centred"``, Ethayarajh's reference code: PCA): ``σ1² / Σ σi²`` of the occurrence matrix with
  the word's mean vector subtracted; a word whose occurrences are all one vector counts 1.
  ``"uncentred"`` (the workbench's earlier definition): the same ratio of the raw matrix, which
  mostly measures how far the vectors share a direction (close to self-similarity);
- anisotropy baselines: mean cosine of uniformly random word pairs from different sentences (for
  the two similarities) and the MEV (same centring) of groups of random word occurrences of the
  layer with the same sizes as the words' groups (for MEV); ``adjusted = raw − baseline``.

Everything is vectorised: sums over groups (``np.add.reduceat``), batched Gram eigenvalues. A
store's layers (a :class:`~bertology.store.read.LayerView`) are never read whole: intra-sentence
similarity goes shard by shard (a shard holds whole sentences), and the other measures read only
the rows they use (the sampled occurrences, the random pairs), in blocks of at most
:data:`BLOCK_BYTES` of float32 rows; the figures equal those of the whole layer in memory to the
last bit (the same arithmetic on the same rows, per word and per sentence).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from bertology.errors import WorkbenchError
from bertology.probes.embeddings.static_vectors import unit_rows
from bertology.runtime import release_free_memory
from bertology.store.read import LayerView
from bertology.uncertainty import MIN_WORD_TYPES

METRICS = ("self_similarity", "intra_sentence_similarity", "mev")

BLOCK_BYTES = 32 * 2**20
"""What the streamed measures read and hold of a layer at once: float32 rows of this many bytes
(one shard for intra-sentence similarity)."""

GROUP_BATCH = 256
"""Groups (words) whose Gram matrices MEV stacks at once; a row block holds whole batches."""


def _check(layers: Any, words: Sequence[str], offsets: np.ndarray) -> tuple[Any, np.ndarray]:
    """``layers`` as ``[n_layers, n_words, dim]`` float32 (a :class:`~bertology.store.read.LayerView`
    stays lazy: the measures go layer by layer, one layer in memory at a time) and checked offsets."""
    if not isinstance(layers, LayerView):
        layers = np.asarray(layers, dtype=np.float32)
        if layers.ndim == 2:
            layers = layers[None]
    offsets = np.asarray(offsets, dtype=np.int64)
    if layers.ndim != 3 or layers.shape[1] != len(words):
        raise WorkbenchError(f"contextuality: layers {layers.shape} must be [n_layers, {len(words)} words, dim]")
    if offsets[0] != 0 or offsets[-1] != len(words) or np.any(np.diff(offsets) < 0):
        raise WorkbenchError(f"contextuality: sentence offsets must rise from 0 to {len(words)}")
    if isinstance(layers, LayerView) and not np.array_equal(offsets, layers.store.sentence_offsets):
        raise WorkbenchError("contextuality: the sentence offsets must be the store's (store.sentence_offsets)")
    return layers, offsets


class _Layer:
    """One layer of :func:`contextuality`'s input: row ``j`` of an ``[n_layers, n_words, dim]`` array,
    or layer ``j`` of a :class:`~bertology.store.read.LayerView`, read only where used (:meth:`rows`,
    :meth:`sentence_blocks`)."""

    def __init__(self, layers: Any, j: int):
        self.view: LayerView | None = layers if isinstance(layers, LayerView) else None
        self.array: np.ndarray | None = None if self.view is not None else layers[j]
        self.j = j
        self.n_words, self.dim = int(layers.shape[1]), int(layers.shape[2])
        self.block_rows = max(1, BLOCK_BYTES // (4 * self.dim))

    def rows(self, words: np.ndarray) -> np.ndarray:
        """``[len(words), dim]`` float32: the layer's vectors of flat word indices ``words``."""
        if self.array is not None:
            return np.asarray(self.array[words], dtype=np.float32)
        assert self.view is not None
        return self.view.rows(self.j, words)

    def sentence_blocks(self, offsets: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """``(sentence ids [m], their words' vectors [n, dim], their offsets [m + 1])``: the whole
        layer at once for an array, one shard at a time for a store."""
        if self.array is not None:
            yield np.arange(len(offsets) - 1), np.asarray(self.array, dtype=np.float32), offsets
            return
        assert self.view is not None
        store = self.view.store
        lengths = np.diff(offsets)
        for k in range(store.n_shards):
            ids = np.asarray(store.shard_sentences(k), dtype=np.int64)
            local = np.concatenate([[0], np.cumsum(lengths[ids])]).astype(np.int64)
            yield ids, self.view.shard(k, [self.j])[0], local


def occurrence_groups(
    words: Sequence[str], lower: bool = True, min_occurrences: int = 5, max_occurrences: int | None = 50, seed: int = 0
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Group word positions by word type.

    Returns ``(types, positions, starts)``: ``positions[starts[i]:starts[i+1]]`` are the flat word
    positions of ``types[i]`` (each type has ``>= min_occurrences``; at most ``max_occurrences``,
    sampled with ``seed``). ``starts`` has ``len(types) + 1`` entries.
    """
    keys = np.array([w.lower() if lower else w for w in words], dtype=object)
    vocab, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.random(len(keys)), inverse))  # by type, random within a type
    group = inverse[order]
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(len(order)) - first[group]
    cap = np.inf if max_occurrences is None else max_occurrences
    keep = (counts[group] >= min_occurrences) & (rank < cap)
    positions, group = order[keep], group[keep]
    kept_types, sizes = np.unique(group, return_counts=True)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return [str(vocab[t]) for t in kept_types], positions.astype(np.int64), starts


def self_similarity_per_word(vectors: np.ndarray, positions: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Mean pairwise cosine within each group, ``[n_types]``: ``(||Σu||² − n) / (n(n−1))``."""
    u = unit_rows(vectors[positions])
    sums = np.add.reduceat(u.astype(np.float64), starts[:-1], axis=0)
    n = np.diff(starts).astype(np.float64)
    return (np.einsum("ij,ij->i", sums, sums) - n) / (n * (n - 1))


MEV_CENTERINGS = ("centred", "uncentred")


def _check_centering(centering: str) -> None:
    if centering not in MEV_CENTERINGS:
        raise WorkbenchError(f"MEV centering must be one of {', '.join(MEV_CENTERINGS)}, got {centering!r}")


def mev_per_group(
    vectors: np.ndarray,
    positions: np.ndarray,
    starts: np.ndarray,
    batch: int = 256,
    centering: str = "centred",
    n_max: int | None = None,
) -> np.ndarray:
    """Share of variance explained by the first principal component of each group, ``[n_groups]``.

    ``centering="centred"`` (default; PCA, as Ethayarajh's code): ``σ1² / Σ σi²`` of the group's
    occurrence matrix minus its mean row, i.e. PCA's explained-variance ratio of the first
    component; a group without variance (all rows equal) gets 1. ``"uncentred"``: the same ratio of
    the raw matrix (a static space gives 1, but so, nearly, does any set of vectors sharing a
    direction).

    Groups are zero-padded to the largest size (or to ``n_max``; zero rows add no singular value) and
    the top eigenvalue of each ``[n, n]`` Gram matrix is found in batches of ``batch`` groups.
    """
    _check_centering(centering)
    sizes = np.diff(starts)
    n_max = int(sizes.max()) if n_max is None else int(n_max)
    slot = np.arange(len(positions)) - np.repeat(starts[:-1], sizes)
    group = np.repeat(np.arange(len(sizes)), sizes)
    out = np.empty(len(sizes))
    x = torch.from_numpy(np.asarray(vectors, dtype=np.float32))
    for b0 in range(0, len(sizes), batch):
        sel = (group >= b0) & (group < b0 + batch)
        n_b = min(batch, len(sizes) - b0)
        rows = x[positions[sel]].double()
        g = torch.from_numpy(group[sel] - b0)
        raw_total = torch.zeros(n_b, dtype=torch.float64).index_add_(0, g, (rows * rows).sum(1))
        if centering == "centred":
            sums = torch.zeros(n_b, x.shape[1], dtype=torch.float64).index_add_(0, g, rows)
            rows = rows - (sums / torch.from_numpy(sizes[b0 : b0 + n_b]).double()[:, None])[g]
        padded = torch.zeros(n_b, n_max, x.shape[1], dtype=torch.float64)
        padded[g, torch.from_numpy(slot[sel])] = rows
        gram = padded @ padded.transpose(1, 2)
        eig = torch.linalg.eigvalsh(gram)
        total = eig.sum(dim=1)
        ratio = eig[:, -1] / total.clamp_min(1e-300)
        if centering == "centred":  # no variance left after centring: one vector explains it all
            ratio = torch.where(total <= 1e-12 * raw_total, torch.ones_like(ratio), ratio)
        else:
            ratio = torch.where(total > 0, ratio, torch.zeros_like(ratio))
        out[b0 : b0 + n_b] = ratio.numpy()
    return out


def random_groups(n_words: int, starts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Positions for the MEV baseline: groups of the same sizes as ``starts`` describes, filled with
    distinct word occurrences drawn uniformly (without replacement) from all ``n_words`` positions."""
    return rng.choice(n_words, size=int(starts[-1]), replace=False).astype(np.int64)


def intra_sentence_per_sentence(vectors: np.ndarray, offsets: np.ndarray, block_words: int = 16384) -> np.ndarray:
    """Mean cosine of each word to its sentence's mean vector, for sentences of >= 2 words.

    Computed over blocks of whole sentences of about ``block_words`` words (the same arithmetic,
    sentence by sentence, as one block of the whole corpus): memory holds a block's float64 copy,
    not the layer's."""
    lengths = np.diff(offsets)
    ok = lengths >= 2
    starts = offsets[:-1][ok]
    lens = lengths[ok]
    out = np.empty(len(lens))
    ends = np.cumsum(lens)
    first = 0
    while first < len(lens):
        before = ends[first] - lens[first]
        last = max(first + 1, int(np.searchsorted(ends, before + block_words, side="right")))
        s, n = starts[first:last], lens[first:last]
        idx = np.concatenate([np.arange(a, a + m) for a, m in zip(s, n)])
        x = vectors[idx].astype(np.float64)
        group_starts = np.concatenate([[0], np.cumsum(n)[:-1]])
        means = np.add.reduceat(x, group_starts, axis=0) / n[:, None]
        cos = np.einsum("ij,ij->i", unit_rows(x), unit_rows(np.repeat(means, n, axis=0)))
        out[first:last] = np.add.reduceat(cos, group_starts) / n
        first = last
    return out


def random_pairs(
    n_words: int, offsets: np.ndarray, n_pairs: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Up to ``n_pairs`` uniformly random word pairs ``(i [m], j [m])`` from different sentences."""
    sentence = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    i = rng.integers(0, n_words, size=2 * n_pairs)
    j = rng.integers(0, n_words, size=2 * n_pairs)
    ok = sentence[i] != sentence[j]
    return i[ok][:n_pairs], j[ok][:n_pairs]


def random_pair_similarity(vectors: np.ndarray, offsets: np.ndarray, n_pairs: int, rng: np.random.Generator) -> float:
    """Mean cosine of uniformly random word pairs from different sentences (anisotropy)."""
    i, j = random_pairs(vectors.shape[0], offsets, n_pairs, rng)
    if len(i) == 0:
        return float("nan")
    return float(np.mean(np.einsum("ij,ij->i", unit_rows(vectors[i]), unit_rows(vectors[j]))))


def _pair_similarity(layer: _Layer, i: np.ndarray, j: np.ndarray) -> float:
    """:func:`random_pair_similarity` of the pairs ``(i, j)``, reading ``block_rows`` rows at a time
    (each pair's cosine as before; their mean over the same array)."""
    if len(i) == 0:
        return float("nan")
    step = max(1, layer.block_rows // 2)
    cos = np.empty(len(i), dtype=np.float32)
    for a in range(0, len(i), step):
        rows = layer.rows(np.concatenate([i[a : a + step], j[a : a + step]]))
        m = len(rows) // 2
        cos[a : a + m] = np.einsum("ij,ij->i", unit_rows(rows[:m]), unit_rows(rows[m:]))
    return float(np.mean(cos))


def _intra_sentence(layer: _Layer, offsets: np.ndarray) -> np.ndarray:
    """:func:`intra_sentence_per_sentence` of the whole layer, computed block by block (a store's
    shards): per sentence of >= 2 words, in corpus order."""
    lengths = np.diff(offsets)
    out = np.full(len(lengths), np.nan)
    for ids, vectors, local in layer.sentence_blocks(offsets):
        out[ids[lengths[ids] >= 2]] = intra_sentence_per_sentence(vectors, local)
    return out[lengths >= 2]


def _word_measures(
    layer: _Layer, positions: np.ndarray, starts: np.ndarray, centering: str, self_similarity: bool = True
) -> tuple[np.ndarray | None, np.ndarray]:
    """``(self-similarity or None, MEV)`` per group (:func:`self_similarity_per_word`,
    :func:`mev_per_group`), reading the groups' rows in blocks of whole batches of 256 groups and
    about ``layer.block_rows`` rows; every group padded to the largest group's size as in one call."""
    batch = GROUP_BATCH
    n_groups = len(starts) - 1
    n_max = int(np.diff(starts).max())
    ss = np.empty(n_groups) if self_similarity else None
    mev = np.empty(n_groups)
    g0 = 0
    while g0 < n_groups:
        g1 = min(g0 + batch, n_groups)
        while g1 < n_groups and starts[min(g1 + batch, n_groups)] - starts[g0] <= layer.block_rows:
            g1 = min(g1 + batch, n_groups)
        local = starts[g0 : g1 + 1] - starts[g0]
        rows = layer.rows(positions[starts[g0] : starts[g1]])
        at = np.arange(len(rows), dtype=np.int64)
        if ss is not None:
            for b0 in range(g0, g1, batch):  # a batch's float64 copy at a time
                b1 = min(b0 + batch, g1)
                lo, hi = int(local[b0 - g0]), int(local[b1 - g0])
                ss[b0:b1] = self_similarity_per_word(rows[lo:hi], at[: hi - lo], local[b0 - g0 : b1 - g0 + 1] - lo)
        mev[g0:g1] = mev_per_group(rows, at, local, batch=batch, centering=centering, n_max=n_max)
        del rows
        g0 = g1
    return ss, mev


def contextuality(
    layers: np.ndarray | LayerView,
    words: Sequence[str],
    offsets: np.ndarray,
    lower: bool = True,
    min_occurrences: int = 5,
    max_occurrences: int | None = 50,
    n_baseline_pairs: int = 20000,
    seed: int = 0,
    layer_ids: Sequence[int] | None = None,
    mev_centering: str = "centred",
) -> pd.DataFrame:
    """Ethayarajh's three measures per layer with anisotropy baselines.

    ``layers`` ``[n_layers, n_words, dim]`` (``FeatureStore.layers()``), ``words`` the flat word
    strings, ``offsets`` ``[n_sentences + 1]``. ``mev_centering``: see :func:`mev_per_group`.
    Returns one row per ``(layer, metric)`` with columns ``layer, metric, raw, baseline, adjusted,
    n_items, occurrences_min, occurrences_mean, occurrences_max, seed``: ``n_items`` is the number
    of sentences (intra-sentence similarity) or of words (self-similarity, MEV), and the
    ``occurrences_*`` columns give how many occurrences per word those words' figures rest on
    (after the ``max_occurrences`` cap; NaN for intra-sentence similarity).
    """
    _check_centering(mev_centering)
    layers, offsets = _check(layers, words, offsets)
    layer_ids = list(range(len(layers))) if layer_ids is None else list(layer_ids)
    types, positions, starts = occurrence_groups(words, lower, min_occurrences, max_occurrences, seed)
    sizes = np.diff(starts)
    occ = (int(sizes.min()), float(sizes.mean()), int(sizes.max())) if len(sizes) else (np.nan,) * 3
    rows: list[tuple] = []
    for j, li in enumerate(layer_ids):
        layer = _Layer(layers, j)  # a store's layer is read shard by shard and row block by row block
        rng = np.random.default_rng([seed, li])
        aniso = _pair_similarity(layer, *random_pairs(layer.n_words, offsets, n_baseline_pairs, rng))
        intra = _intra_sentence(layer, offsets)
        no_occ = (np.nan,) * 3
        rows.append(
            ("intra_sentence_similarity", float(intra.mean()) if len(intra) else np.nan, aniso, len(intra), *no_occ)
        )
        if types:
            ss, mev = _word_measures(layer, positions, starts, mev_centering)
            assert ss is not None
            base = random_groups(layer.n_words, starts, rng)
            _, mev_base = _word_measures(layer, base, starts, mev_centering, self_similarity=False)
            rows.append(("self_similarity", float(ss.mean()), aniso, len(types), *occ))
            rows.append(("mev", float(mev.mean()), float(mev_base.mean()), len(types), *occ))
        else:
            rows.append(("self_similarity", np.nan, aniso, 0, *no_occ))
            rows.append(("mev", np.nan, np.nan, 0, *no_occ))
        rows[-3:] = [(li, *r) for r in rows[-3:]]
        del layer
        release_free_memory()  # the blocks and their float64 copies: pages back before the next layer
    occ_cols = ["occurrences_min", "occurrences_mean", "occurrences_max"]
    df = pd.DataFrame(rows, columns=["layer", "metric", "raw", "baseline", "n_items", *occ_cols])
    df["adjusted"] = df["raw"] - df["baseline"]
    df["seed"] = seed
    df["metric"] = pd.Categorical(df["metric"], categories=list(METRICS))
    df = df.sort_values(["layer", "metric"]).reset_index(drop=True)
    df["metric"] = df["metric"].astype(str)
    return df[["layer", "metric", "raw", "baseline", "adjusted", "n_items", *occ_cols, "seed"]]


WORD_LEVEL = ("self_similarity", "mev")


def few_words_warning(table: pd.DataFrame, minimum: int | None = None) -> str | None:
    """A warning when a ``contextuality`` table's per-word measures (self-similarity, MEV) rest on
    fewer distinct words than ``minimum`` (default :data:`bertology.uncertainty.MIN_WORD_TYPES`):
    ``"too few words: ..."``; None when they rest on enough (or the table does not say)."""
    minimum = MIN_WORD_TYPES if minimum is None else minimum
    rows = table[table["metric"].isin(WORD_LEVEL)] if {"metric", "n_items"} <= set(table.columns) else table.iloc[0:0]
    if rows.empty or int(rows["n_items"].min()) >= minimum:
        return None
    return (
        f"warning: too few words: self-similarity and MEV rest on {int(rows['n_items'].min())} distinct words "
        f"(need {minimum}), the corpus's most frequent -- mostly function words; read them as those words, "
        "not the model: use more sentences (--limit) or a lower --min-occurrences"
    )


def contextuality_by_word(
    layers: np.ndarray | LayerView,
    words: Sequence[str],
    offsets: np.ndarray,
    lower: bool = True,
    min_occurrences: int = 5,
    max_occurrences: int | None = 50,
    seed: int = 0,
    mev_centering: str = "centred",
) -> pd.DataFrame:
    """Per word and layer: ``layer, word, n_occurrences, self_similarity, mev`` (``mev_centering``:
    see :func:`mev_per_group`)."""
    _check_centering(mev_centering)
    layers, offsets = _check(layers, words, offsets)
    types, positions, starts = occurrence_groups(words, lower, min_occurrences, max_occurrences, seed)
    if not types:
        return pd.DataFrame(columns=["layer", "word", "n_occurrences", "self_similarity", "mev"])
    frames = []
    for li in range(len(layers)):
        ss, mev = _word_measures(_Layer(layers, li), positions, starts, mev_centering)  # the words' rows only
        frames.append(
            pd.DataFrame(
                {"layer": li, "word": types, "n_occurrences": np.diff(starts), "self_similarity": ss, "mev": mev}
            )
        )
        release_free_memory()
    return pd.concat(frames, ignore_index=True)


def to_long(df: pd.DataFrame) -> pd.DataFrame:
    """``(layer, metric, raw, baseline, adjusted)`` -> long ``(layer, metric, kind, value)``."""
    return df.melt(
        id_vars=["layer", "metric"], value_vars=["raw", "baseline", "adjusted"], var_name="kind", value_name="value"
    )
