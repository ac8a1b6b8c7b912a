"""Semantic change between two slices of documents ("1900 vs 1990", "left vs right") with scores
that hold up on small corpora.

Per comparison of slice A with slice B (docs/METHODS.md, "Semantic change"):

1. **Replicates.** Word2vec neighbours on a few hundred thousand words change from seed to seed
   (Antoniak & Mimno 2018), so every score is computed ``replicates`` times, each time on a
   bootstrap resample of each slice's *documents* (drawn with replacement) and, for word2vec,
   with its own training seed. A word's score is the mean over replicates, its interval the
   percentile interval over replicates.
2. **Scores** for each word both slices hold at least ``min_count`` times:
   ``cosine_distance`` = 1 − cos between the word's vector in A mapped by orthogonal Procrustes
   onto B and its vector in B (Hamilton et al. 2016a), the map fitted on the ``anchors`` most
   frequent shared words (optionally leaving out the words under test); ``neighbourhood_distance``
   = the second-order measure of Hamilton et al. (2016b): the cosine distance between the word's
   similarities to the union of its ``k`` nearest neighbours in A and in B, each computed in its
   own space (needs no alignment).
3. **A frequency-matched control.** Each slice's documents are split at random into two halves,
   both halves get a space, and the same scores are computed between the halves: how far words
   move when nothing changed. Words are binned by frequency (``frequency_bins`` quantile bins of
   their lower count in the two slices); a word ``moved`` when the lower end of its interval is
   above its bin's ``control_threshold``: the control's ``1 − (1 − control_quantile) / m``
   quantile for the ``m`` words of the bin (``control_quantile`` 0.95: a family-wise 5% within the
   bin, Bonferroni, as far as the control's size resolves it, else the control's maximum), and
   ``stable`` when the upper end is below the control's median.

A space is built by a :data:`SpaceBuilder`: ``build(document_indices, seed) -> StaticVectors``, so
word2vec (:func:`word2vec_builder`) and type-level contextual vectors (the mean of a word's
contextual vectors per slice, :func:`contextual_builder`, resampled without re-running the model)
share the procedure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bertology.errors import WorkbenchError
from bertology.probes.embeddings.alignment import neighbour_names, procrustes, topk_cosine
from bertology.probes.embeddings.static_vectors import StaticVectors, train_word2vec, unit_rows

SpaceBuilder = Callable[[np.ndarray, int], StaticVectors]
"""``build(document_indices [n] (repeats allowed), seed) -> StaticVectors`` of one slice."""

CHANGE_COLUMNS = [
    "comparison",
    "word",
    "count_a",
    "count_b",
    "frequency_bin",
    "cosine_distance",
    "low",
    "high",
    "neighbourhood_distance",
    "neighbourhood_low",
    "neighbourhood_high",
    "n_replicates",
    "control_threshold",
    "control_median",
    "moved",
    "stable",
    "neighbours_a",
    "neighbours_b",
]


@dataclass(frozen=True)
class ChangeSettings:
    """The knobs of :func:`semantic_change` (defaults in docs/METHODS.md, "Semantic change")."""

    replicates: int = 10  # document bootstraps (word2vec: each with its own seed)
    control_replicates: int = 3  # random half splits of each slice
    min_count: int = 20  # a word is scored when both slices hold it this often
    anchors: int = 2000  # Procrustes anchors: the most frequent shared words
    exclude_tested: bool = False  # leave the words under test out of the anchors
    tested: tuple[str, ...] = ()  # the words under test (scored; with exclude_tested not anchors)
    k: int = 10  # neighbours of the second-order measure
    frequency_bins: int = 5
    control_quantile: float = 0.95
    confidence: float = 0.95
    n_neighbours: int = 5  # neighbours listed per word and side
    seed: int = 0


def word_counts(sentences: Sequence[Sequence[Sequence[str]]]) -> Counter:
    """Word counts of a slice given as ``[documents][sentences][words]``."""
    return Counter(w for doc in sentences for s in doc for w in s)


def word2vec_builder(
    sentences: Sequence[Sequence[Sequence[str]]],
    *,
    dim: int = 100,
    window: int = 5,
    min_count: int = 5,
    epochs: int = 5,
    name: str = "slice",
) -> SpaceBuilder:
    """Word2vec (skip-gram, one worker, so a seed gives the same vectors) on the chosen documents."""

    def build(indices: np.ndarray, seed: int) -> StaticVectors:
        chosen = [s for i in indices for s in sentences[int(i)]]
        return train_word2vec(chosen, dim=dim, window=window, min_count=min_count, epochs=epochs, seed=seed, name=name)

    return build


def contextual_builder(
    document_sums: Sequence[dict[str, np.ndarray]],
    document_counts: Sequence[Counter],
    *,
    min_count: int = 5,
    name: str = "slice",
) -> SpaceBuilder:
    """Type-level vectors from a contextual model: a word's vector is the mean of its contextual
    vectors over its occurrences in the chosen documents. ``document_sums[d][word]``: the sum
    ``[dim]`` of that word's vectors in document ``d`` (one model pass over the slice, at one
    layer); ``document_counts[d][word]``: its occurrences. A resample only re-weights the sums."""

    def build(indices: np.ndarray, seed: int) -> StaticVectors:
        sums: dict[str, np.ndarray] = {}
        counts: Counter = Counter()
        for i in indices:
            for word, vector in document_sums[int(i)].items():
                sums[word] = sums[word] + vector if word in sums else vector.astype(np.float64).copy()
            counts.update(document_counts[int(i)])
        words = sorted((w for w in sums if counts[w] >= min_count), key=lambda w: (-counts[w], w))
        if not words:
            raise WorkbenchError(f"{name}: no word occurs {min_count} times in the chosen documents")
        matrix = np.stack([sums[w] / counts[w] for w in words]).astype(np.float32)
        return StaticVectors(words, matrix, name, {"source": "contextual type vectors", "min_count": min_count})

    return build


def _centred_unit(space: StaticVectors, centre_words: Sequence[str]) -> np.ndarray:
    """Unit rows, centred on the mean of ``centre_words`` (the anchors: words under test left out of
    the anchors do not move the centre), unit rows again."""
    x = unit_rows(space.matrix)
    return unit_rows(x - x[space.indices(centre_words)].mean(0, keepdims=True))


def change_scores(
    a: StaticVectors, b: StaticVectors, words: Sequence[str], anchor_words: Sequence[str], k: int = 10
) -> pd.DataFrame:
    """``word, cosine_distance, neighbourhood_distance`` of each of ``words`` (all in both spaces):
    Procrustes on ``anchor_words`` for the first, Hamilton et al.'s second-order measure with
    ``k`` neighbours per side for the second (module docstring)."""
    anchors = [w for w in anchor_words if w in a and w in b]
    if len(anchors) < 2:
        raise WorkbenchError("change_scores: fewer than two anchor words shared by the two spaces")
    xa, xb = _centred_unit(a, anchors), _centred_unit(b, anchors)
    w = procrustes(xa[a.indices(anchors)], xb[b.indices(anchors)])
    ia, ib = a.indices(list(words)), b.indices(list(words))
    mapped = unit_rows(xa[ia] @ w)
    cosine = 1.0 - np.sum(mapped * xb[ib], axis=1)
    # second order: similarities to the union of both sides' k nearest neighbours, in each own space
    _, na = topk_cosine(xa[ia], xa, k + 1)
    _, nb = topk_cosine(xb[ib], xb, k + 1)
    second = np.empty(len(words))
    for row, word in enumerate(words):
        union = {a.words[j] for j in na[row]} | {b.words[j] for j in nb[row]}
        union = [u for u in union if u != word and u in a and u in b]
        if not union:
            second[row] = np.nan
            continue
        sa = xa[a.indices(union)] @ xa[ia[row]]
        sb = xb[b.indices(union)] @ xb[ib[row]]
        second[row] = 1.0 - float(sa @ sb / max(np.linalg.norm(sa) * np.linalg.norm(sb), 1e-12))
    return pd.DataFrame({"word": list(words), "cosine_distance": cosine, "neighbourhood_distance": second})


def _pair_scores(
    build_a: SpaceBuilder,
    build_b: SpaceBuilder,
    idx_a: np.ndarray,
    idx_b: np.ndarray,
    seed: int,
    words: Sequence[str],
    anchor_words: Sequence[str],
    k: int,
) -> pd.DataFrame:
    """Scores of one replicate: both spaces built (in two threads: gensim releases the GIL)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(lambda job: job[0](job[1], seed), [(build_a, idx_a), (build_b, idx_b)])
    present = [w for w in words if w in a and w in b]
    if not present:
        return pd.DataFrame(columns=["word", "cosine_distance", "neighbourhood_distance"])
    return change_scores(a, b, present, anchor_words, k)


def _frequency_bins(low_counts: pd.Series, n_bins: int) -> pd.Series:
    """Quantile bins (0 = rarest) of the words' log counts; fewer bins when counts tie."""
    ranks = np.log(low_counts.astype(float)).rank(method="first")
    return pd.qcut(ranks, q=min(n_bins, len(low_counts)), labels=False, duplicates="drop").astype(int)


def _control(
    build: SpaceBuilder,
    n_docs: int,
    settings: ChangeSettings,
    words: Sequence[str],
    anchor_words: Sequence[str],
    rng: np.random.Generator,
) -> pd.DataFrame:
    """Scores between two random halves of one slice's documents, ``control_replicates`` times."""
    if n_docs < 2:
        raise WorkbenchError("semantic change control: a slice needs at least two documents to split in halves")
    frames = []
    for r in range(settings.control_replicates):
        order = rng.permutation(n_docs)
        half = n_docs // 2
        seed = int(rng.integers(2**31))
        frames.append(
            _pair_scores(build, build, order[:half], order[half:], seed, words, anchor_words, settings.k).assign(
                replicate=r
            )
        )
    return pd.concat(frames, ignore_index=True)


def semantic_change(
    build_a: SpaceBuilder,
    build_b: SpaceBuilder,
    counts_a: Counter,
    counts_b: Counter,
    n_docs: tuple[int, int],
    settings: ChangeSettings = ChangeSettings(),
    *,
    comparison: str = "a vs b",
    progress: Callable[[str], None] | None = None,
) -> dict[str, pd.DataFrame]:
    """Semantic change from slice A to slice B with replicate intervals and a frequency-matched
    control (module docstring). ``counts_*``: word counts of each whole slice; ``n_docs``: the
    slices' document counts (what the builders' indices range over).

    Returns ``word_change`` (:data:`CHANGE_COLUMNS`, most moved first), ``replicates`` (``replicate,
    word, cosine_distance, neighbourhood_distance``) and ``control`` (``frequency_bin, words,
    control_threshold, control_level, control_median, n_control_scores`` per bin)."""
    shared = [w for w, c in counts_a.items() if c >= settings.min_count and counts_b.get(w, 0) >= settings.min_count]
    if not shared:
        raise WorkbenchError(
            f"{comparison}: no word occurs min_count={settings.min_count} times in both slices (option min_count)"
        )
    shared.sort(key=lambda w: (-min(counts_a[w], counts_b[w]), w))
    tested = set(settings.tested)
    anchor_pool = [w for w in shared if not (settings.exclude_tested and w in tested)]
    anchor_words = anchor_pool[: settings.anchors]
    rng = np.random.default_rng(settings.seed)
    frames = []
    for r in range(settings.replicates):
        if progress:
            progress(f"    {comparison}: replicate {r + 1}/{settings.replicates}")
        idx_a, idx_b = rng.integers(0, n_docs[0], n_docs[0]), rng.integers(0, n_docs[1], n_docs[1])
        frames.append(
            _pair_scores(
                build_a, build_b, idx_a, idx_b, int(rng.integers(2**31)), shared, anchor_words, settings.k
            ).assign(replicate=r)
        )
    reps = pd.concat(frames, ignore_index=True)
    if progress:
        progress(f"    {comparison}: control (random halves of each slice)")
    control = pd.concat(
        [
            _control(build, n, settings, shared, anchor_words, rng).assign(slice=name)
            for build, n, name in ((build_a, n_docs[0], "a"), (build_b, n_docs[1], "b"))
        ],
        ignore_index=True,
    )
    table, bins = _summarise(reps, control, counts_a, counts_b, shared, settings, comparison)
    final_a, final_b = build_a(np.arange(n_docs[0]), settings.seed), build_b(np.arange(n_docs[1]), settings.seed)
    table["neighbours_a"] = neighbour_names(final_a, list(table["word"]), settings.n_neighbours)
    table["neighbours_b"] = neighbour_names(final_b, list(table["word"]), settings.n_neighbours)
    return {
        "word_change": table[CHANGE_COLUMNS],
        "replicates": reps.assign(comparison=comparison),
        "control": bins.assign(comparison=comparison),
    }


def _summarise(
    reps: pd.DataFrame,
    control: pd.DataFrame,
    counts_a: Counter,
    counts_b: Counter,
    shared: Sequence[str],
    settings: ChangeSettings,
    comparison: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per word: mean and percentile interval over replicates, its frequency bin and that bin's
    control threshold; per bin: the control's quantiles."""
    alpha = (1 - settings.confidence) / 2
    grouped = reps.groupby("word")
    table = pd.DataFrame(
        {
            "cosine_distance": grouped["cosine_distance"].mean(),
            "low": grouped["cosine_distance"].quantile(alpha),
            "high": grouped["cosine_distance"].quantile(1 - alpha),
            "neighbourhood_distance": grouped["neighbourhood_distance"].mean(),
            "neighbourhood_low": grouped["neighbourhood_distance"].quantile(alpha),
            "neighbourhood_high": grouped["neighbourhood_distance"].quantile(1 - alpha),
            "n_replicates": grouped.size(),
        }
    ).reset_index()
    table = table[table["n_replicates"] >= max(2, settings.replicates // 2)].copy()  # scored in most replicates
    table["comparison"] = comparison
    table["count_a"] = table["word"].map(counts_a).astype(int)
    table["count_b"] = table["word"].map(counts_b).astype(int)
    low_counts = pd.Series({w: min(counts_a[w], counts_b[w]) for w in shared})
    bins = _frequency_bins(low_counts, settings.frequency_bins)
    table["frequency_bin"] = table["word"].map(bins).astype(int)
    control = control.assign(frequency_bin=control["word"].map(bins))
    per_bin = control.groupby("frequency_bin")["cosine_distance"]
    words_per_bin = bins.value_counts()
    # family-wise within a bin: the control's 1 - (1 - q) / (words in the bin) quantile (at most its maximum)
    level = {
        b: min(1.0, 1 - (1 - settings.control_quantile) / max(1, int(words_per_bin.get(b, 1)))) for b in per_bin.groups
    }
    thresholds = pd.DataFrame(
        {
            "control_threshold": {b: float(np.quantile(v, level[b])) for b, v in per_bin},
            "control_median": per_bin.median(),
            "n_control_scores": per_bin.size(),
            "control_level": pd.Series(level),
        }
    )
    thresholds.index.name = "frequency_bin"
    thresholds["words"] = words_per_bin.reindex(thresholds.index).fillna(0).astype(int)
    table = table.join(thresholds[["control_threshold", "control_median"]], on="frequency_bin")
    table["moved"] = table["low"] > table["control_threshold"]
    table["stable"] = table["high"] < table["control_median"]
    table = table.sort_values(["cosine_distance", "word"], ascending=[False, True]).reset_index(drop=True)
    return table, thresholds.reset_index()
