"""Static vs contextual neighbours of a word, and its sense clusters across contexts.

The seeds' "play" table (Peters et al. 2018): a static space lists words near "play" (game,
playing, ...); a contextual layer lists the *contexts* nearest to one occurrence of "play", and
those share its sense. ``sense_clusters`` projects all occurrences of a word with UMAP.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bertology.errors import WorkbenchError
from bertology.probes.embeddings.static_vectors import StaticVectors, unit_rows
from bertology.store.read import LayerView


def _rows(vectors: np.ndarray | LayerView, positions: np.ndarray) -> np.ndarray:
    """``vectors[positions]`` ``[len(positions), dim]`` float32: of one layer ``[n_words, dim]``, or of a
    one-layer :class:`~bertology.store.read.LayerView` (``store.view([l])``), whose only those rows are read."""
    if isinstance(vectors, LayerView):
        if len(vectors) != 1:
            raise WorkbenchError(f"a view of one layer, not {len(vectors)}")
        return vectors.rows(0, positions)
    return np.asarray(np.asarray(vectors)[positions], dtype=np.float32)


def _occurrences(word: str, words: Sequence[str], lower: bool) -> np.ndarray:
    key = word.lower() if lower else word
    return np.array([i for i, w in enumerate(words) if (w.lower() if lower else w) == key], dtype=np.int64)


def context_snippet(position: int, words: Sequence[str], offsets: np.ndarray, window: int = 8) -> str:
    """The sentence around flat word ``position``, the word marked ``[[word]]``, ``window`` words each side."""
    s = int(np.searchsorted(offsets, position, side="right") - 1)
    start, end = int(offsets[s]), int(offsets[s + 1])
    lo, hi = max(start, position - window), min(end, position + window + 1)
    toks = [f"[[{words[i]}]]" if i == position else words[i] for i in range(lo, hi)]
    return ("… " if lo > start else "") + " ".join(toks) + (" …" if hi < end else "")


def static_vs_contextual_neighbours(
    word: str,
    static: StaticVectors,
    vectors: np.ndarray | LayerView,
    words: Sequence[str],
    offsets: np.ndarray,
    occurrence: int = 0,
    k: int = 5,
    same_word: bool = True,
    lower: bool = True,
) -> pd.DataFrame:
    """Nearest static words vs nearest contexts of one occurrence of ``word``.

    ``vectors`` ``[n_words, dim]`` is one contextual layer (or a store's, ``store.view([l])``: only
    the rows compared are read), ``words`` the flat word strings,
    ``offsets`` ``[n_sentences + 1]``. Contextual neighbours are other occurrences of the same
    word (``same_word``) or any other token, from other sentences. Returns rows
    ``(space, rank, neighbour, similarity, sentence, query_context)`` with ``space`` in
    ``{"static", "contextual"}``; for contextual rows ``neighbour`` is the marked context.
    """
    offsets = np.asarray(offsets)
    occ = _occurrences(word, words, lower)
    if len(occ) == 0:
        raise WorkbenchError(f"{word!r} does not occur in the corpus")
    if not 0 <= occurrence < len(occ):
        raise WorkbenchError(f"{word!r} occurs {len(occ)} times; occurrence {occurrence} is out of range")
    pos = int(occ[occurrence])
    query_context = context_snippet(pos, words, offsets)
    rows = []
    key = word.lower() if lower and word.lower() in static else word
    if key in static:
        for r in static.most_similar(key, k).itertuples():
            rows.append(("static", r.rank, r.word, r.similarity, -1))
    sentence = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    candidates = occ if same_word else np.arange(len(words))
    candidates = candidates[sentence[candidates] != sentence[pos]]
    if len(candidates):
        read = _rows(vectors, np.concatenate([candidates, [pos]]))  # the candidates' rows, then the query's
        sims = unit_rows(read[:-1]) @ unit_rows(read[-1:])[0]
        top = np.argsort(-sims, kind="stable")[:k]
        for rank, t in enumerate(top, start=1):
            p = int(candidates[t])
            rows.append(("contextual", rank, context_snippet(p, words, offsets), float(sims[t]), int(sentence[p])))
    df = pd.DataFrame(rows, columns=["space", "rank", "neighbour", "similarity", "sentence"])
    df["query_context"] = query_context
    return df


def sense_clusters(
    word: str,
    vectors: np.ndarray | LayerView,
    words: Sequence[str],
    offsets: np.ndarray,
    n_clusters: int = 2,
    seed: int = 0,
    n_neighbors: int = 15,
    lower: bool = True,
) -> pd.DataFrame:
    """Occurrences of ``word`` clustered (k-means on the layer vectors) and projected with UMAP.

    ``vectors``: one layer ``[n_words, dim]``, or a store's (``store.view([l])``: only the word's
    rows are read). Returns one row per occurrence: ``(x, y, position, sentence, context, cluster)``.
    """
    from sklearn.cluster import KMeans

    occ = _occurrences(word, words, lower)
    if len(occ) < 3:
        raise WorkbenchError(f"{word!r} occurs {len(occ)} times; sense clusters need at least 3 occurrences")
    offsets = np.asarray(offsets)
    x = unit_rows(_rows(vectors, occ))
    clusters = KMeans(n_clusters=min(n_clusters, len(occ)), n_init=10, random_state=seed).fit_predict(x)
    xy = _umap_2d(x, seed, n_neighbors)
    sentence = np.searchsorted(offsets, occ, side="right") - 1
    return pd.DataFrame(
        {
            "x": xy[:, 0],
            "y": xy[:, 1],
            "position": occ,
            "sentence": sentence,
            "context": [context_snippet(int(p), words, offsets) for p in occ],
            "cluster": clusters.astype(int),
        }
    )


@functools.cache
def _cache_umap_kernels() -> int:
    """Turn on numba's on-disk cache for every compiled kernel of umap-learn and pynndescent that
    does not cache itself (the k-nearest-neighbour and fuzzy-set kernels are compiled without
    ``cache=True``, with ``parallel=True``: ~16 s of compilation in every new process on a 2-core CPU).
    Cached, a later process loads them in well under a second; the machine code, so the output, is the
    same. Where no cache folder is writable numba refuses and the kernel compiles as before. Once per
    process (``functools.cache``); returns how many kernels it turned on."""
    import sys

    import umap  # noqa: F401  (imports pynndescent and the kernels' modules)
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    enabled = 0
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("umap", "pynndescent")):
            continue
        for kernel in list(vars(module).values()):
            if isinstance(kernel, Dispatcher) and isinstance(getattr(kernel, "_cache", None), NullCache):
                try:
                    kernel.enable_caching()
                    enabled += 1
                except RuntimeError:  # no writable cache location for this kernel's source file
                    pass
    return enabled


def _umap_2d(x: np.ndarray, seed: int, n_neighbors: int) -> np.ndarray:
    import warnings

    import umap

    _cache_umap_kernels()
    n = len(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # umap warns that a random_state disables parallelism
        reducer = umap.UMAP(
            n_components=2,
            n_neighbors=max(2, min(n_neighbors, n - 1)),
            random_state=seed,
            metric="cosine",
            init="random" if n < 10 else "spectral",
        )
        return reducer.fit_transform(x).astype(np.float32)


def compile_umap() -> float:
    """Fill numba's on-disk cache for the UMAP code :func:`sense_clusters` runs (a tiny fit of
    both initialisations; :func:`_cache_umap_kernels` adds the kernels umap-learn leaves uncached),
    so the first real fit after installation does not compile it: ~16 s on a 2-core CPU.
    ``scripts/setup.sh`` calls it once. Returns the seconds it took."""
    import time

    started = time.perf_counter()
    x = np.random.default_rng(0).normal(size=(40, 16)).astype(np.float32)
    _umap_2d(x, 0, 15)  # spectral initialisation
    _umap_2d(x[:8], 0, 15)  # random initialisation (fewer than 10 points)
    return time.perf_counter() - started


def sense_cluster_figure(df: pd.DataFrame, word: str = "") -> Any:
    """Plotly scatter of ``sense_clusters`` output, coloured by cluster, context on hover."""
    import plotly.express as px

    fig = px.scatter(
        df.assign(cluster=df["cluster"].astype(str)),
        x="x",
        y="y",
        color="cluster",
        hover_data={"context": True, "sentence": True, "x": False, "y": False},
        title=f"Occurrences of {word!r} (UMAP)" if word else "Occurrences (UMAP)",
    )
    fig.update_layout(xaxis_title="UMAP 1", yaxis_title="UMAP 2")
    return fig
