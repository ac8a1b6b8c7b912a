"""Trees and scores of the structural probe (Hewitt & Manning 2019): parse-tree distances and
depths from a sentence's heads, the minimum spanning tree of predicted distances and its UUAS,
row-wise Spearman correlations, root accuracy, and the paper's average over sentence lengths 5-50.

Everything here is a pure function of NumPy arrays (one sentence at a time, or per-sentence values
of a whole split); :mod:`bertology.probes.probing.structural` trains the probes that predict the
distances and depths scored here. Definitions and where they depart from the paper's released code:
docs/METHODS.md, "Structural probe".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.stats import rankdata

from bertology.errors import CorpusError

PUNCT_UPOS = frozenset({"PUNCT"})
"""UPOS tags left out of UUAS and root accuracy (the paper's evaluation ignores punctuation)."""

LENGTH_RANGE = (5, 50)
"""Sentence lengths (words, punctuation included) the Spearman scores average over, as the paper."""


Ints = Sequence[int] | np.ndarray  # word indices, heads or lengths: a list or an integer array
Floats = Sequence[float] | np.ndarray


def parent_indices(heads: Ints, where: str = "sentence") -> np.ndarray:
    """0-based parent of each word ``[n]`` (-1 for the root) from UD heads (1-based, 0 = root).

    Refuses (:class:`CorpusError`, naming ``where``) heads outside ``0..n``, a word that is its own
    head, no root or several roots, and cycles: the structural probe needs one tree per sentence.
    """
    h = np.asarray(heads, dtype=np.int64)
    n = h.size
    if n == 0:
        raise CorpusError(f"{where}: no words")
    if h.min() < 0 or h.max() > n:
        raise CorpusError(f"{where}: heads must be in 0..{n} (1-based, 0 = root), got {h.tolist()}")
    if np.any(h == np.arange(1, n + 1)):
        raise CorpusError(f"{where}: word {int(np.flatnonzero(h == np.arange(1, n + 1))[0]) + 1} is its own head")
    roots = np.flatnonzero(h == 0)
    if roots.size != 1:
        raise CorpusError(f"{where}: a tree needs exactly one root (head 0), found {roots.size}")
    parent = h - 1
    for start in range(n):  # walking up from every word must reach the root within n steps
        node, steps = start, 0
        while parent[node] >= 0 and steps <= n:
            node, steps = int(parent[node]), steps + 1
        if steps > n:
            raise CorpusError(f"{where}: the heads form a cycle through word {start + 1}")
    return parent


def tree_distances(heads: Ints, where: str = "sentence") -> np.ndarray:
    """Path lengths between every two words of the sentence's tree ``[n, n]`` (int64; 0 on the
    diagonal), from UD heads (1-based, 0 = root)."""
    return parent_distances(parent_indices(heads, where))


def parent_distances(parent: np.ndarray) -> np.ndarray:
    """Path lengths ``[n, n]`` (int64) of a tree given as 0-based parents ``[n]`` (-1 for the root;
    :func:`parent_indices`' output, not checked again): with ``A`` the 0/1 matrix of each word's
    ancestors and itself, ``|A_i|`` is word i's depth + 1 and ``A_i · A_j`` the depth + 1 of the two
    words' lowest common ancestor, so their distance is ``|A_i| + |A_j| - 2 A_i · A_j`` (the same
    integers as a breadth-first search, several times faster, so the probe can recompute a batch's
    distances instead of holding every sentence's)."""
    parent = np.asarray(parent, dtype=np.int64)
    n = parent.size
    ancestors = np.eye(n, dtype=np.int64)
    rows, up = np.arange(n), parent.copy()
    while (live := up >= 0).any():  # one step up the tree for every word at once
        ancestors[rows[live], up[live]] = 1
        up = np.where(live, parent[np.maximum(up, 0)], -1)
    size = ancestors.sum(1)
    return size[:, None] + size[None, :] - 2 * (ancestors @ ancestors.T)


def tree_depths(heads: Ints, where: str = "sentence") -> np.ndarray:
    """Each word's number of edges from the root ``[n]`` (the root 0)."""
    parent = parent_indices(heads, where)
    return tree_distances(heads, where)[int(np.flatnonzero(parent < 0)[0])]


def punctuation_mask(upos: Sequence[str] | None, n: int) -> np.ndarray:
    """``[n]`` True for punctuation words (UPOS in :data:`PUNCT_UPOS`); all False without tags."""
    if upos is None:
        return np.zeros(n, dtype=bool)
    return np.array([tag in PUNCT_UPOS for tag in upos], dtype=bool)


def mst_edges(distances: np.ndarray, keep: np.ndarray | None = None) -> set[tuple[int, int]]:
    """Undirected edges ``(i, j)``, ``i < j``, of the minimum spanning tree of a distance matrix
    ``[n, n]`` over the words where ``keep`` ``[n]`` is True (default all).

    Uses :func:`scipy.sparse.csgraph.minimum_spanning_tree`, which reads a zero as "no edge": every
    off-diagonal weight is first shifted by the same constant so that all are positive, which leaves
    the minimum spanning tree unchanged (every spanning tree has the same number of edges)."""
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"distances must be a square matrix [n, n], got shape {d.shape}")
    kept = np.arange(d.shape[0]) if keep is None else np.flatnonzero(np.asarray(keep, dtype=bool))
    if kept.size < 2:
        return set()
    sub = (d[np.ix_(kept, kept)] + d[np.ix_(kept, kept)].T) / 2  # symmetric, whatever rounding did
    sub = sub - sub.min() + 1.0
    np.fill_diagonal(sub, 0.0)
    tree = minimum_spanning_tree(sub).tocoo()
    return {(int(min(kept[a], kept[b])), int(max(kept[a], kept[b]))) for a, b in zip(tree.row, tree.col)}


def gold_edges(heads: Ints, keep: np.ndarray | None = None) -> set[tuple[int, int]]:
    """The tree's undirected edges ``(i, j)``, ``i < j`` (0-based), between words both kept."""
    parent = parent_indices(heads)
    keep = np.ones(parent.size, dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    return {(int(min(i, p)), int(max(i, p))) for i, p in enumerate(parent) if p >= 0 and keep[i] and keep[p]}


def uuas_counts(predicted: np.ndarray, heads: Ints, punct: np.ndarray | None = None) -> tuple[int, int]:
    """``(correct, total)`` for one sentence: gold edges between non-punctuation words (``total``)
    and how many of them the minimum spanning tree of ``predicted`` distances ``[n, n]`` over the
    non-punctuation words holds. UUAS over a split = sum of correct / sum of total."""
    keep = None if punct is None else ~np.asarray(punct, dtype=bool)
    gold = gold_edges(heads, keep)
    return len(gold & mst_edges(predicted, keep)), len(gold)


def spearman_rows(predicted: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Spearman correlation of each row of ``predicted`` with the same row of ``gold`` (both
    ``[m, k]``; ranks with ties averaged) ``[m]``; NaN for a row where either side is constant."""
    p, g = np.atleast_2d(np.asarray(predicted, float)), np.atleast_2d(np.asarray(gold, float))
    if p.shape != g.shape:
        raise ValueError(f"predicted {p.shape} and gold {g.shape} must have one shape")
    if p.shape[1] < 2:
        return np.full(p.shape[0], np.nan)
    rp, rg = rankdata(p, axis=1), rankdata(g, axis=1)
    rp, rg = rp - rp.mean(1, keepdims=True), rg - rg.mean(1, keepdims=True)
    den = np.sqrt((rp**2).sum(1) * (rg**2).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rp * rg).sum(1) / np.where(den > 0, den, 1.0), np.nan)


def distance_spearman(predicted: np.ndarray, gold: np.ndarray) -> float:
    """DSpr of one sentence: for each word, the Spearman correlation of its predicted and gold
    distances to every *other* word (``[n, n]`` matrices, diagonal left out), averaged over the
    words where it is defined (NaN when none is, e.g. fewer than 3 words)."""
    p, g = np.asarray(predicted, float), np.asarray(gold, float)
    n = p.shape[0]
    if p.shape != (n, n) or g.shape != (n, n):
        raise ValueError(f"predicted {p.shape} and gold {g.shape} must both be [n, n]")
    if n < 3:
        return float("nan")
    off = ~np.eye(n, dtype=bool)
    rows = spearman_rows(p[off].reshape(n, n - 1), g[off].reshape(n, n - 1))
    return float(np.nanmean(rows)) if np.isfinite(rows).any() else float("nan")


def depth_spearman(predicted: np.ndarray, gold: np.ndarray) -> float:
    """NSpr of one sentence: Spearman correlation of predicted and gold depths ``[n]`` (NaN when
    either is constant)."""
    return float(spearman_rows(np.asarray(predicted)[None], np.asarray(gold)[None])[0])


def root_correct(predicted_depths: np.ndarray, heads: Ints, punct: np.ndarray | None = None) -> int | None:
    """1 when the non-punctuation word of smallest predicted depth ``[n]`` is the gold root, 0 when
    not; None when the sentence has no non-punctuation word or its root is punctuation."""
    parent = parent_indices(heads)
    keep = np.ones(parent.size, dtype=bool) if punct is None else ~np.asarray(punct, dtype=bool)
    root = int(np.flatnonzero(parent < 0)[0])
    if not keep.any() or not keep[root]:
        return None
    candidates = np.flatnonzero(keep)
    return int(candidates[np.argmin(np.asarray(predicted_depths)[candidates])] == root)


def length_average(values: Floats, lengths: Ints, length_range: tuple[int, int] = LENGTH_RANGE) -> float:
    """The paper's Spearman summary: per-sentence ``values`` ``[S]`` averaged within each sentence
    length ``[S]`` (NaN values skipped), then over the lengths in ``length_range`` (inclusive)
    that hold a value; NaN when none does."""
    v, n = np.asarray(values, float), np.asarray(lengths, dtype=np.int64)
    ok = np.isfinite(v) & (n >= length_range[0]) & (n <= length_range[1])
    if not ok.any():
        return float("nan")
    by_length = [v[ok & (n == k)].mean() for k in np.unique(n[ok])]
    return float(np.mean(by_length))


def length_average_bootstrap(
    values: Floats,
    lengths: Ints,
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    length_range: tuple[int, int] = LENGTH_RANGE,
) -> tuple[float, float, float]:
    """``(estimate, low, high)``: :func:`length_average` with a percentile interval from
    resampling sentences (``values``, ``lengths``: ``[S]``); NaN bounds with fewer than 2 usable
    sentences."""
    v, n = np.asarray(values, float), np.asarray(lengths, dtype=np.int64)
    estimate = length_average(v, n, length_range)
    ok = np.isfinite(v) & (n >= length_range[0]) & (n <= length_range[1])
    if ok.sum() < 2:
        return estimate, float("nan"), float("nan")
    v, n = v[ok], n[ok]
    groups = (n[:, None] == np.unique(n)[None, :]).astype(float)  # [S, G] one column per length
    rng = np.random.default_rng(seed)
    w = rng.multinomial(v.size, np.full(v.size, 1.0 / v.size), size=n_resamples).astype(float)  # [R, S]
    with np.errstate(invalid="ignore", divide="ignore"):
        per_length = (w @ (groups * v[:, None])) / (w @ groups)  # [R, G]; NaN where a length was not drawn
    samples = np.nanmean(per_length, axis=1)
    low, high = np.quantile(samples, [(1 - confidence) / 2, (1 + confidence) / 2])
    return estimate, float(low), float(high)


__all__ = [
    "PUNCT_UPOS",
    "LENGTH_RANGE",
    "parent_indices",
    "tree_distances",
    "parent_distances",
    "tree_depths",
    "punctuation_mask",
    "mst_edges",
    "gold_edges",
    "uuas_counts",
    "spearman_rows",
    "distance_spearman",
    "depth_spearman",
    "root_correct",
    "length_average",
    "length_average_bootstrap",
]
