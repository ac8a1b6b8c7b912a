"""Aligning two vector spaces with a linear map, and word retrieval across them.

- Orthogonal Procrustes: ``W = U Vᵀ`` from ``U Σ Vᵀ = SVD(Xᵀ Y)`` minimises ``||X W − Y||_F`` over
  orthogonal ``W`` (closed form, exact).
- Least squares (Mikolov et al. 2013): unconstrained ``W = argmin ||X W − Y||²``, for comparison.
- Self-learning (Artetxe et al. 2017): from a tiny seed dictionary, alternate Procrustes and
  dictionary induction by nearest neighbour (or CSLS) until the mean similarity stops improving.
- CSLS (Conneau et al. 2018): ``2 cos(Wx, y) − r_T(Wx) − r_S(y)``, ``r`` = mean cosine to the
  ``k`` nearest neighbours in the other space; removes hubs.

All retrieval is over the whole target vocabulary in batches (``batch_size`` query rows at a time,
``torch.topk`` per batch), so memory stays ``O(batch_size × n_target)``, never ``n × m``.
Convention: rows are vectors, a source row ``x`` maps to ``x @ W``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from bertology.errors import WorkbenchError
from bertology.probes.embeddings.static_vectors import StaticVectors, unit_rows
from bertology.progress import progress_bar
from bertology.runtime import resolve_precision

NORMALIZATIONS = {
    "none": (),
    "unit": ("unit",),
    "center": ("center",),
    "unit-center-unit": ("unit", "center", "unit"),
}


class AlignmentError(WorkbenchError):
    """Bad alignment input: empty dictionary, mismatched shapes, unknown method."""


# --- preprocessing -----------------------------------------------------------------------------
def normalize_embeddings(
    x: np.ndarray, steps: Sequence[str] = ("unit", "center", "unit"), means: Sequence[np.ndarray] | None = None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Apply ``steps`` (``"unit"``: rows to length 1; ``"center"``: subtract the column mean).

    ``x`` ``[n, d]``. Returns the result and the means used by each ``"center"`` step; pass
    ``means`` back to transform other rows with the same statistics.
    """
    out = np.asarray(x, dtype=np.float32)
    used: list[np.ndarray] = []
    means = list(means) if means is not None else None
    for step in steps:
        if step == "unit":
            out = unit_rows(out)
        elif step == "center":
            mean = means.pop(0) if means else out.mean(axis=0)
            out = out - mean
            used.append(np.asarray(mean, dtype=np.float32))
        else:
            raise AlignmentError(f"unknown normalisation step {step!r} (use 'unit' or 'center')")
    return np.ascontiguousarray(out, dtype=np.float32), used


def _steps(normalization: str | Sequence[str] | None) -> tuple[str, ...]:
    if normalization is None:
        return ()
    if isinstance(normalization, str):
        if normalization not in NORMALIZATIONS:
            raise AlignmentError(f"unknown normalisation {normalization!r}; choose from {sorted(NORMALIZATIONS)}")
        return NORMALIZATIONS[normalization]
    return tuple(normalization)


# --- maps ---------------------------------------------------------------------------------------
def procrustes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Orthogonal ``W`` ``[d_s, d_t]`` minimising ``||x W − y||_F``; ``x`` ``[n, d_s]``, ``y`` ``[n, d_t]``."""
    x, y = _paired(x, y)
    u, _, vt = np.linalg.svd(x.astype(np.float64).T @ y.astype(np.float64), full_matrices=False)
    return (u @ vt).astype(np.float32)


def lstsq_map(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Unconstrained least-squares ``W`` ``[d_s, d_t]`` minimising ``||x W − y||²`` (Mikolov et al. 2013)."""
    x, y = _paired(x, y)
    w, *_ = np.linalg.lstsq(x.astype(np.float64), y.astype(np.float64), rcond=None)
    return w.astype(np.float32)


def _paired(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise AlignmentError(f"paired rows needed: x {x.shape}, y {y.shape}")
    if x.shape[0] == 0:
        raise AlignmentError("no training pairs: the dictionary has no pair with both words in the vocabularies")
    return x, y


# --- batched nearest neighbours ------------------------------------------------------------------
RESCORE_MARGIN = 32
"""Extra candidates per row when similarities are screened in bfloat16: the best ``k + 32`` by the
bfloat16 product are rescored exactly in float32 and the best ``k`` of those kept."""


def _low_precision(precision: str | None) -> torch.dtype | None:
    """The dtype similarity blocks are screened in (None: exact float32 products only)."""
    return resolve_precision(precision, "cpu", what="similarity search")


class _Keys:
    """Key rows ``[m, d]`` (float32), an optional per-key ``bias [m]`` subtracted from every score,
    and, with a low-precision dtype, one copy of both in that dtype (the bias as a last column)."""

    def __init__(self, keys: np.ndarray, low: torch.dtype | None, bias: torch.Tensor | None = None):
        self.exact = torch.from_numpy(np.ascontiguousarray(keys, dtype=np.float32))
        self.bias = bias
        self.low: torch.Tensor | None = None
        if low is not None:
            self.low = (self.exact if bias is None else torch.cat([self.exact, bias[:, None]], dim=1)).to(low)

    def _screen(self, q: torch.Tensor) -> torch.Tensor:
        """``q @ keysᵀ - bias`` in the low dtype, ``[b, m]``: the bias rides along as one more column
        of the product (accumulated in float32, rounded once), the block is never copied to float32."""
        if self.low is None:
            raise AssertionError("_screen needs the low-precision copy (made when a low dtype is given)")
        if self.bias is not None:
            q = torch.cat([q, torch.full((q.shape[0], 1), -1.0)], dim=1)
        return q.to(self.low.dtype) @ self.low.T

    def block_topk(
        self, q: torch.Tensor, k: int, *, scale: float = 1.0, exclude: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` of ``scale * (q @ keysᵀ) - bias`` per row of ``q [b, d]`` -> ``(values [b, k],
        indices [b, k])``, best first; ``exclude [b]``: a key index each row may not pick.

        Exact float32 products; with a low-precision copy, the block is screened in that dtype and
        the best ``k + RESCORE_MARGIN`` candidates of each row are rescored in float32, so the
        result is float32's unless more than ``RESCORE_MARGIN`` keys sit within bfloat16's error of
        the ``k``-th best.
        """
        if scale != 1.0:
            q = q * scale
        screen = self.low is not None and k + RESCORE_MARGIN < self.exact.shape[0]
        if screen:
            sims = self._screen(q)
        else:
            sims = q @ self.exact.T
            if self.bias is not None:
                sims.sub_(self.bias[None, :])
        if exclude is not None:
            sims[torch.arange(q.shape[0]), exclude] = -float("inf")
        if not screen:
            return torch.topk(sims, k, dim=1)
        _, cand = torch.topk(sims, k + RESCORE_MARGIN, dim=1)  # [b, c]
        exact = torch.einsum("bd,bcd->bc", q, self.exact[cand])
        if self.bias is not None:
            exact -= self.bias[cand]
        if exclude is not None:
            exact.masked_fill_(cand == exclude[:, None], -float("inf"))
        values, order = torch.topk(exact, k, dim=1)
        return values, cand.gather(1, order)


def topk_cosine(
    queries: np.ndarray,
    keys: np.ndarray,
    k: int,
    batch_size: int = 4096,
    exclude_self: bool = False,
    precision: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` dot products of each query row with all key rows, in query batches.

    Rows are expected unit length (dot = cosine). ``queries`` ``[n, d]``, ``keys`` ``[m, d]`` ->
    ``(scores [n, k] float32, indices [n, k] int64)``, best first. Peak extra memory
    ``batch_size × m`` floats. ``exclude_self`` drops ``keys[i]`` for query ``i`` (same matrix).
    ``precision``: ``"auto"`` screens each block in bfloat16 where a micro-benchmark measures it
    faster (:func:`bertology.runtime.resolve_precision`) and rescores the best ``k +``
    :data:`RESCORE_MARGIN` candidates in float32; ``"float32"``: exact products only.
    """
    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    kk = _Keys(keys, _low_precision(precision))
    k = min(k, kk.exact.shape[0] - int(exclude_self))
    scores = np.empty((q.shape[0], k), np.float32)
    idx = np.empty((q.shape[0], k), np.int64)
    with torch.no_grad():
        for start in range(0, q.shape[0], batch_size):
            block = q[start : start + batch_size]
            exclude = torch.arange(start, start + len(block)) if exclude_self else None
            s, i = kk.block_topk(block, k, exclude=exclude)
            scores[start : start + len(s)] = s.numpy()
            idx[start : start + len(s)] = i.numpy()
    return scores, idx


def mean_topk_cosine(
    queries: np.ndarray, keys: np.ndarray, k: int = 10, batch_size: int = 4096, precision: str = "auto"
) -> np.ndarray:
    """``r`` of CSLS: mean cosine of each query to its ``k`` nearest keys, ``[n]`` (batched)."""
    scores, _ = topk_cosine(queries, keys, k, batch_size, precision=precision)
    return scores.mean(axis=1)


def _mutual_mean_topk(
    queries: np.ndarray, target: np.ndarray, k: int, batch_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """``r_T`` ``[n]`` and ``r_S`` ``[m]`` when the source pool is the queries, in one pass.

    Each query batch's similarity block ``[b, m]`` gives the rows' top-k directly and updates a
    running column top-k ``[m, k]`` (merged with ``torch.topk``), so the block is computed once.
    Always float32: screening would need ``k + RESCORE_MARGIN`` running column candidates per
    target, whose merges cost more than bfloat16 saves when the queries are few.
    """
    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    t = torch.from_numpy(np.ascontiguousarray(target, dtype=np.float32))
    kq, kt = min(k, t.shape[0]), min(k, q.shape[0])
    r_target = np.empty(q.shape[0], np.float32)
    running = torch.full((t.shape[0], kt), -float("inf"))
    with torch.no_grad():
        for start in range(0, q.shape[0], batch_size):
            sims = q[start : start + batch_size] @ t.T
            r_target[start : start + len(sims)] = torch.topk(sims, kq, dim=1).values.mean(dim=1).numpy()
            col = torch.topk(sims.T, min(kt, sims.shape[0]), dim=1).values
            running = torch.topk(torch.cat([running, col], dim=1), kt, dim=1).values
    return r_target, running.mean(dim=1).numpy()


def retrieve(
    queries: np.ndarray,
    target: np.ndarray,
    k: int = 10,
    method: str = "csls",
    csls_k: int = 10,
    source_pool: np.ndarray | None = None,
    r_source: np.ndarray | None = None,
    batch_size: int = 4096,
    precision: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` target rows for each mapped query by ``"nn"`` (cosine) or ``"csls"``.

    ``queries`` ``[n, d]`` (mapped source, unit rows), ``target`` ``[m, d]`` (unit rows).
    CSLS needs ``r_S(y)`` for every target row: the mean cosine of ``y`` to its ``csls_k``
    nearest rows of ``source_pool`` (the whole mapped source vocabulary; default ``queries``),
    or pass ``r_source`` ``[m]`` precomputed. Returns ``(scores [n, k], indices [n, k])``.
    ``precision``: as :func:`topk_cosine` (bfloat16 screening where faster, float32 rescoring).
    """
    pool_is_queries = source_pool is queries  # one pass then gives both r_T and r_S
    queries = unit_rows(queries)
    target = unit_rows(target)
    if method == "nn":
        return topk_cosine(queries, target, k, batch_size, precision=precision)
    if method != "csls":
        raise AlignmentError(f"unknown retrieval {method!r} (use 'nn' or 'csls')")
    if pool_is_queries:
        source_pool = None
    if r_source is None and source_pool is None:
        r_target, r_source = _mutual_mean_topk(queries, target, csls_k, batch_size)
    else:
        if r_source is None and source_pool is not None:
            r_source = mean_topk_cosine(target, unit_rows(source_pool), csls_k, batch_size, precision)
        r_target = mean_topk_cosine(queries, target, csls_k, batch_size, precision)
    q = torch.from_numpy(queries)
    rs = torch.from_numpy(np.asarray(r_source, dtype=np.float32))
    keys = _Keys(target, _low_precision(precision), bias=rs)
    k = min(k, target.shape[0])
    scores = np.empty((len(queries), k), np.float32)
    idx = np.empty((len(queries), k), np.int64)
    with torch.no_grad():
        for start in range(0, len(queries), batch_size):
            s, i = keys.block_topk(q[start : start + batch_size], k, scale=2.0)
            scores[start : start + len(s)] = s.numpy() - r_target[start : start + len(s), None]
            idx[start : start + len(s)] = i.numpy()
    return scores, idx


# --- dictionaries --------------------------------------------------------------------------------
def as_pairs(pairs: pd.DataFrame | Iterable[tuple[str, str]] | None) -> pd.DataFrame:
    """Pairs as a DataFrame with columns ``source``, ``target`` (duplicates dropped)."""
    if pairs is None:
        return pd.DataFrame({"source": [], "target": []}, dtype=object)
    if isinstance(pairs, pd.DataFrame):
        missing = {"source", "target"} - set(pairs.columns)
        if missing:
            raise AlignmentError(f"pairs DataFrame lacks columns {sorted(missing)}")
        df = pairs[["source", "target"]]
    else:
        df = pd.DataFrame(list(pairs), columns=["source", "target"])
    return df.drop_duplicates().reset_index(drop=True)


def identical_pairs(
    source: StaticVectors, target: StaticVectors, numerals_only: bool = False, exclude: Iterable[str] = ()
) -> pd.DataFrame:
    """Seed dictionary of words spelled the same in both spaces (or only numerals ``\\d+``)."""
    exclude = set(exclude)
    numeral = re.compile(r"^\d+$")
    words = [
        w for w in source.words if w in target and w not in exclude and (numeral.match(w) if numerals_only else True)
    ]
    return pd.DataFrame({"source": words, "target": words})


def _pair_indices(source: StaticVectors, target: StaticVectors, pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    keep = pairs["source"].map(source.__contains__) & pairs["target"].map(target.__contains__)
    kept = pairs[keep]
    return source.indices(kept["source"]), target.indices(kept["target"])


# --- results -------------------------------------------------------------------------------------
@dataclass
class AlignmentResult:
    """A learned map ``W`` ``[d_s, d_t]`` and how the spaces were preprocessed before it."""

    W: np.ndarray
    method: str
    normalization: tuple[str, ...]
    source_means: list[np.ndarray]
    target_means: list[np.ndarray]
    history: pd.DataFrame
    train_pairs: pd.DataFrame
    info: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"AlignmentResult({self.method}: W {self.W.shape[0]}×{self.W.shape[1]}, "
            f"{len(self.train_pairs)} training pairs, normalisation {'-'.join(self.normalization) or 'none'}, "
            f"{len(self.history)} iterations)"
        )

    def map_source(self, x: StaticVectors | np.ndarray) -> np.ndarray:
        """Source vectors preprocessed then mapped: ``[n, d_t]``, unit rows."""
        m = x.matrix if isinstance(x, StaticVectors) else x
        xn, _ = normalize_embeddings(m, self.normalization, self.source_means)
        return unit_rows(xn @ self.W)

    def prepare_target(self, y: StaticVectors | np.ndarray) -> np.ndarray:
        m = y.matrix if isinstance(y, StaticVectors) else y
        yn, _ = normalize_embeddings(m, self.normalization, self.target_means)
        return unit_rows(yn)

    def translate(
        self,
        words: Sequence[str],
        source: StaticVectors,
        target: StaticVectors,
        k: int = 5,
        retrieval: str = "csls",
        csls_k: int = 10,
        batch_size: int = 4096,
    ) -> pd.DataFrame:
        """Top-``k`` translations -> DataFrame ``(source, rank, target, score, retrieval)``."""
        words = [w for w in words if w in source]
        mapped_all = self.map_source(source)
        tgt = self.prepare_target(target)
        r_source = mean_topk_cosine(tgt, mapped_all, csls_k, batch_size) if retrieval == "csls" else None
        scores, idx = retrieve(
            mapped_all[source.indices(words)], tgt, k, retrieval, csls_k, r_source=r_source, batch_size=batch_size
        )
        rows = [
            (w, r + 1, target.words[idx[i, r]], float(scores[i, r]), retrieval)
            for i, w in enumerate(words)
            for r in range(idx.shape[1])
        ]
        return pd.DataFrame(rows, columns=["source", "rank", "target", "score", "retrieval"])

    def evaluate(
        self,
        source: StaticVectors,
        target: StaticVectors,
        test_pairs: pd.DataFrame,
        retrieval: Sequence[str] = ("nn", "csls"),
        ks: Sequence[int] = (1, 5, 10),
        csls_k: int = 10,
        batch_size: int = 4096,
        hits: list[pd.DataFrame] | None = None,
    ) -> pd.DataFrame:
        return evaluate_alignment(self, source, target, test_pairs, retrieval, ks, csls_k, batch_size, hits=hits)


def align(
    source: StaticVectors,
    target: StaticVectors,
    train_pairs: pd.DataFrame | Iterable[tuple[str, str]] | None = None,
    method: str = "procrustes",
    normalization: str | Sequence[str] | None = "unit-center-unit",
    seed_dictionary: str = "identical",
    exclude_from_seed: Iterable[str] = (),
    max_iter: int = 30,
    tol: float = 1e-4,
    induction: str = "nn",
    direction: str = "forward",
    vocab_cutoff: int | None = 20000,
    csls_k: int = 10,
    batch_size: int = 4096,
) -> AlignmentResult:
    """Learn a map from ``source`` to ``target`` (two languages, layers, models or corpora).

    ``method``: ``"procrustes"`` | ``"lstsq"`` | ``"self-learning"``. Supervised methods use
    ``train_pairs`` (default: every word present in both spaces — the same-vocabulary case).
    Self-learning starts from ``train_pairs`` when given, else from the ``seed_dictionary``
    (``"identical"`` strings or ``"numerals"``), minus ``exclude_from_seed`` (held-out words), and
    induces a dictionary over the first ``vocab_cutoff`` words of each space until the mean
    similarity of the induced pairs improves by no more than ``tol``.
    """
    steps = _steps(normalization)
    xs, s_means = normalize_embeddings(source.matrix, steps)
    zt, t_means = normalize_embeddings(target.matrix, steps)
    pairs = as_pairs(train_pairs)
    if method in ("procrustes", "lstsq"):
        if train_pairs is None:
            pairs = identical_pairs(source, target)
        si, ti = _pair_indices(source, target, pairs)
        fit = procrustes if method == "procrustes" else lstsq_map
        w = fit(xs[si], zt[ti])
        objective = float(np.mean(np.sum(unit_rows(xs[si] @ w) * unit_rows(zt[ti]), axis=1)))
        history = pd.DataFrame([{"iteration": 0, "n_pairs": len(si), "objective": objective, "improvement": np.nan}])
        used = pd.DataFrame({"source": [source.words[i] for i in si], "target": [target.words[i] for i in ti]})
    elif method == "self-learning":
        if train_pairs is None:
            if seed_dictionary not in ("identical", "numerals"):
                raise AlignmentError(
                    f"unknown seed dictionary {seed_dictionary!r} (use 'identical', 'numerals' or pass train_pairs)"
                )
            pairs = identical_pairs(
                source, target, numerals_only=seed_dictionary == "numerals", exclude=exclude_from_seed
            )
        si, ti = _pair_indices(source, target, pairs)
        w, history, si, ti = self_learning(
            xs, zt, si, ti, max_iter, tol, induction, direction, vocab_cutoff, csls_k, batch_size
        )
        used = pd.DataFrame({"source": [source.words[i] for i in si], "target": [target.words[i] for i in ti]})
    else:
        raise AlignmentError(f"unknown method {method!r} (use 'procrustes', 'lstsq' or 'self-learning')")
    return AlignmentResult(
        w,
        method,
        steps,
        s_means,
        t_means,
        history,
        used,
        {"source": source.name, "target": target.name, "n_input_pairs": len(pairs)},
    )


def self_learning(
    xs: np.ndarray,
    zt: np.ndarray,
    seed_source: np.ndarray,
    seed_target: np.ndarray,
    max_iter: int = 30,
    tol: float = 1e-4,
    induction: str = "nn",
    direction: str = "forward",
    vocab_cutoff: int | None = 20000,
    csls_k: int = 10,
    batch_size: int = 4096,
) -> tuple[np.ndarray, pd.DataFrame, np.ndarray, np.ndarray]:
    """Artetxe et al. 2017: ``W ← Procrustes(D)``; ``D ← best matches under W``; repeat.

    ``xs`` ``[n_s, d]``, ``zt`` ``[n_t, d]`` preprocessed spaces; seeds are row indices. The
    objective is the mean similarity (cosine, or CSLS with ``induction="csls"``) of the induced
    pairs; stop when it improves by ``<= tol``. ``direction``: ``"forward"`` (each source word
    picks a target) or ``"union"`` (both directions). Returns ``(W, history, source_idx,
    target_idx)`` with the dictionary that produced the returned ``W``; history rows:
    ``(iteration, n_pairs, objective, improvement)``.
    """
    if len(seed_source) == 0:
        raise AlignmentError("self-learning needs at least one seed pair present in both vocabularies")
    if direction not in ("forward", "union"):
        raise AlignmentError(f"unknown direction {direction!r} (use 'forward' or 'union')")
    ns = len(xs) if vocab_cutoff is None else min(vocab_cutoff, len(xs))
    nt = len(zt) if vocab_cutoff is None else min(vocab_cutoff, len(zt))
    xs_c, zt_c = unit_rows(xs[:ns]), unit_rows(zt[:nt])
    src, tgt = np.asarray(seed_source), np.asarray(seed_target)
    best, w_best, src_best, tgt_best = -np.inf, None, src, tgt
    rows = []
    # a bar over the iterations (at most max_iter: it stops early when the objective stops improving)
    for it in progress_bar(range(1, max_iter + 1), desc="self-learning", unit="iteration"):
        w = procrustes(xs[src], zt[tgt])
        mapped = unit_rows(xs_c @ w)
        s_f, i_f = retrieve(mapped, zt_c, 1, induction, csls_k, source_pool=mapped, batch_size=batch_size)
        new_src, new_tgt, objs = [np.arange(ns)], [i_f[:, 0]], [s_f[:, 0]]
        if direction == "union":
            s_b, i_b = retrieve(zt_c, mapped, 1, induction, csls_k, source_pool=zt_c, batch_size=batch_size)
            new_src.append(i_b[:, 0])
            new_tgt.append(np.arange(nt))
            objs.append(s_b[:, 0])
        objective = float(np.concatenate(objs).mean())
        improvement = objective - best
        rows.append(
            {
                "iteration": it,
                "n_pairs": len(src),
                "objective": objective,
                "improvement": improvement if np.isfinite(improvement) else np.nan,
            }
        )
        if improvement <= tol:
            break  # this W is no better than the last: keep the last
        best, w_best, src_best, tgt_best = objective, w, src, tgt
        pairs = np.unique(np.stack([np.concatenate(new_src), np.concatenate(new_tgt)], axis=1), axis=0)
        src, tgt = pairs[:, 0], pairs[:, 1]
    if w_best is None:  # cannot happen: the first iteration improves on -inf
        raise AlignmentError("self-learning found no mapping")
    return w_best, pd.DataFrame(rows), src_best, tgt_best


# --- evaluation ----------------------------------------------------------------------------------
def evaluate_alignment(
    result: AlignmentResult,
    source: StaticVectors,
    target: StaticVectors,
    test_pairs: pd.DataFrame | Iterable[tuple[str, str]],
    retrieval: Sequence[str] = ("nn", "csls"),
    ks: Sequence[int] = (1, 5, 10),
    csls_k: int = 10,
    batch_size: int = 4096,
    hits: list[pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Precision@k of translating held-out source words over the WHOLE target vocabulary.

    A source word with several gold translations is a hit when any is in the top k. Source words
    absent from the source space, or with no gold word in the target space, are not queried
    (``coverage`` = queried / distinct test source words). Returns one row per
    ``(retrieval, k)``: ``retrieval, k, metric ("precision"), value, n_queries, coverage, low, high``
    (``low``/``high``: 95% bootstrap interval over the queried words,
    :func:`bertology.uncertainty.ratio_bootstrap`). ``hits``, when given, receives one frame per
    retrieval method: ``retrieval, source, first_hit`` (rank of the first gold word, ``max(ks)``
    when none is in the top ``max(ks)``), so methods can be compared word by word.
    """
    from bertology.uncertainty import ratio_bootstrap

    pairs = as_pairs(test_pairs)
    n_sources = pairs["source"].nunique()
    pairs = pairs[pairs["source"].map(source.__contains__) & pairs["target"].map(target.__contains__)]
    gold = pairs.groupby("source", sort=True)["target"].agg(lambda t: set(target.indices(t).tolist()))
    queries = list(gold.index)
    if not queries:
        raise AlignmentError("no test pair has both words in the vocabularies")
    mapped_all = result.map_source(source)
    tgt = result.prepare_target(target)
    q = mapped_all[source.indices(queries)]
    kmax = max(ks)
    rows = []
    for method in retrieval:
        r_source = mean_topk_cosine(tgt, mapped_all, csls_k, batch_size) if method == "csls" else None
        _, idx = retrieve(q, tgt, kmax, method, csls_k, r_source=r_source, batch_size=batch_size)
        first_hit = np.array([next((r for r, j in enumerate(row) if j in g), kmax) for row, g in zip(idx, gold)])
        if hits is not None:
            hits.append(pd.DataFrame({"retrieval": method, "source": queries, "first_hit": first_hit}))
        for k in ks:
            interval = ratio_bootstrap((first_hit < k).astype(float))
            rows.append(
                {
                    "retrieval": method,
                    "k": int(k),
                    "metric": "precision",
                    "value": float(np.mean(first_hit < k)),
                    "n_queries": len(queries),
                    "coverage": len(queries) / max(n_sources, 1),
                    "low": interval.low,
                    "high": interval.high,
                }
            )
    return pd.DataFrame(rows)


def compare_methods(hits: pd.DataFrame, ks: Sequence[int] = (1,)) -> pd.DataFrame:
    """Every pair of alignment methods scored on the same held-out words: per retrieval and k, the
    precision of each, their difference with a paired bootstrap interval over words
    (:func:`bertology.uncertainty.paired_bootstrap`) and the exact McNemar p-value.

    ``hits``: ``method, retrieval, source, first_hit`` (:func:`evaluate_alignment`'s ``hits``).
    Returns ``retrieval, k, method_a, method_b, precision_a, precision_b, difference, low, high,
    p_value, mcnemar_p, n_queries, small_sample``.
    """
    from itertools import combinations

    from bertology.uncertainty import is_small_sample, mcnemar_p, paired_bootstrap

    rows = []
    for retrieval, part in hits.groupby("retrieval", sort=False):
        wide = part.pivot(index="source", columns="method", values="first_hit").dropna()
        methods = list(dict.fromkeys(part["method"]))
        for k in ks:
            for a, b in combinations(methods, 2):
                hit_a, hit_b = (wide[a] < k).to_numpy(float), (wide[b] < k).to_numpy(float)
                diff = paired_bootstrap(hit_a, hit_b)
                rows.append(
                    {
                        "retrieval": retrieval,
                        "k": int(k),
                        "method_a": a,
                        "method_b": b,
                        "precision_a": float(hit_a.mean()),
                        "precision_b": float(hit_b.mean()),
                        "difference": diff.difference,
                        "low": diff.low,
                        "high": diff.high,
                        "p_value": diff.p_value,
                        "mcnemar_p": mcnemar_p(hit_a, hit_b),
                        "n_queries": len(wide),
                        "small_sample": is_small_sample(len(wide)),
                    }
                )
    return pd.DataFrame(
        rows,
        columns=[
            "retrieval",
            "k",
            "method_a",
            "method_b",
            "precision_a",
            "precision_b",
            "difference",
            "low",
            "high",
            "p_value",
            "mcnemar_p",
            "n_queries",
            "small_sample",
        ],
    )


def most_moved_words(
    source: StaticVectors,
    target: StaticVectors,
    W: np.ndarray | AlignmentResult,
    k: int = 20,
    words: Iterable[str] | None = None,
    n_neighbours: int = 5,
) -> pd.DataFrame:
    """Words whose aligned vectors differ most between two spaces sharing a vocabulary.

    The "1900 vs 1990" use case: for each common word (or ``words``), cosine between its mapped
    source vector and its target vector; the ``k`` lowest are returned with their neighbours in
    each space. ``W`` is an ``AlignmentResult`` or a bare ``[d, d]`` matrix (unit rows then).
    Returns ``(rank, word, similarity, source_neighbours, target_neighbours)``.
    """
    common = [w for w in (words if words is not None else source.words) if w in source and w in target]
    if not common:
        raise AlignmentError("the two spaces share no word")
    if isinstance(W, AlignmentResult):
        xs_all, zt_all = W.map_source(source), W.prepare_target(target)
    else:
        xs_all, zt_all = unit_rows(unit_rows(source.matrix) @ W), unit_rows(target.matrix)
    si, ti = source.indices(common), target.indices(common)
    sims = np.sum(xs_all[si] * zt_all[ti], axis=1)
    order = np.argsort(sims, kind="stable")[:k]
    sel = [common[i] for i in order]
    return pd.DataFrame(
        {
            "rank": np.arange(1, len(sel) + 1),
            "word": sel,
            "similarity": sims[order].astype(float),
            "source_neighbours": neighbour_names(source, sel, n_neighbours),
            "target_neighbours": neighbour_names(target, sel, n_neighbours),
        }
    )


def neighbour_names(space: StaticVectors, words: Sequence[str], n: int) -> list[str]:
    """The ``n`` nearest neighbours (cosine) of each of ``words`` in ``space``, the word itself left
    out, as one comma-separated string per word (``""`` for a word the space lacks)."""
    present = [w for w in words if w in space]
    out = {w: "" for w in words}
    if present:
        unit = space.unit()
        _, idx = topk_cosine(unit[space.indices(present)], unit, n + 1)
        for row, w in enumerate(present):
            out[w] = ", ".join([space.words[j] for j in idx[row] if space.words[j] != w][:n])
    return [out[w] for w in words]
