"""Full-batch L-BFGS for linear probes on fixed pooled inputs (scikit-learn's objective).

A linear probe whose pooled inputs do not change during training (width-1 spans or mean pooling,
per-layer or fixed mixing) is a multinomial (or, multi-label, per-label binary) logistic
regression: :func:`_fit_lbfgs` minimises the L2-regularised loss ``mean loss + ||W||^2 / (2 C n)``
of all ``P`` probes at once with L-BFGS (strong-Wolfe line search), scoring dev on the way.

Its design, the pooled inputs ``[P, n, F]`` of the training and dev rows, is one tensor when the
span features are cached in memory (per-layer probes: a view of the cache, no copy). When they are
not (spilled beside the store, above ``ProbeConfig.cache_mb``) it is built chunk by chunk into a
:class:`~bertology.spill.Spill` (in memory while small, else an unnamed temporary file beside the
store) and every evaluation of the objective passes over the chunks, adding up their losses and
gradients: memory holds one chunk, not the corpus.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from bertology.errors import ConfigError
from bertology.probes.probing._config import ProbeConfig
from bertology.probes.probing._model import JointProbes
from bertology.probes.probing._spans import SpanFeatures
from bertology.runtime import resolve_precision
from bertology.spill import DEFAULT_CACHE_BYTES, Spill

CHUNK_BYTES = 64e6
"""Rows per chunk of a streamed design: about this many bytes of pooled inputs (fewer, larger
chunks: each costs a handful of ops per evaluation)."""
READ_BYTES = 32e6
"""A chunk is pooled from reads of about this many bytes of span features."""
SPILL_CACHE_BYTES = DEFAULT_CACHE_BYTES
"""A streamed design is held in memory (one tensor, as if cached) up to this many bytes; above it
its chunks go to the :class:`~bertology.spill.Spill`'s file."""


def _uses_lbfgs(config: ProbeConfig, learned_mix: bool, max_span: int) -> bool:
    """Full-batch L-BFGS applies when the probe is linear and its pooled inputs are fixed."""
    fixed_inputs = config.probe == "linear" and not learned_mix and (max_span == 1 or config.pooling == "mean")
    if config.solver == "lbfgs" and not fixed_inputs:
        raise ConfigError(
            "solver 'lbfgs' needs a linear probe on fixed inputs (width-1 or mean-pooled "
            "spans, per-layer or fixed mixing)"
        )
    return fixed_inputs and config.solver != "adam"


def _pool(data: SpanFeatures, mixing: np.ndarray, idx: torch.Tensor) -> torch.Tensor:
    """Pooled, mixed span features ``[P, B, S * D]`` float32 of the examples ``idx [B]`` (mean
    pooling; mixing one-hot ``[P, L]`` bool or fixed float weights)."""
    device = data.device
    g, m = data(idx)  # [L, B, S, M, D]
    if g.shape[3] == 1:
        pooled = g[:, :, :, 0]
    else:
        w = (m / m.sum(-1, keepdim=True)).to(g.dtype)
        pooled = torch.einsum("bsm,lbsmd->lbsd", w, g)
    if mixing.dtype == bool:
        pooled = pooled[torch.as_tensor(mixing.argmax(1), device=device)]
    else:
        pooled = torch.einsum("pl,lbsd->pbsd", torch.as_tensor(mixing, device=device), pooled)
    return pooled.reshape(pooled.shape[0], pooled.shape[1], -1)


def _pooled_inputs(data: SpanFeatures, mixing: np.ndarray, chunk: int = 4096) -> torch.Tensor:
    """Pooled, mixed span features ``[P, n, S * D]`` of every example (mean pooling; mixing one-hot
    ``[P, L]`` bool or fixed float weights)."""
    mixing = np.asarray(mixing)
    n, S, M = data.tokens.shape
    device = data.device
    L = data.shape[0]
    if (
        data.cached is not None
        and M == 1
        and mixing.dtype == bool
        and len(mixing) == L
        and (mixing.argmax(1) == np.arange(L)).all()
    ):
        return data.cached.view(L, n, -1)  # per-layer probes: no copy
    parts = [
        _pool(data, mixing, torch.arange(start, min(start + chunk, n), device=device)) for start in range(0, n, chunk)
    ]
    return torch.cat(parts, dim=1)


class _Chunks:
    """A design ``[P, N, F]`` (``N`` rows: the training rows, then the dev rows) kept as chunks of
    rows in a :class:`~bertology.spill.Spill`, each chunk all training or all dev rows.

    Iterating yields ``(start, X_k [P', B_k, F])`` on ``device`` in ``dtype`` (``P'``: the probes
    ``probes``, all when None), one chunk at a time, read back from the spill when it is a file.
    """

    def __init__(
        self,
        spill: Spill,
        sizes: list[int],
        shape: tuple[int, int, int],
        dtype: torch.dtype,
        device: torch.device,
        probes: torch.Tensor | None = None,
    ):
        self.spill, self.sizes, self.dtype, self.device, self.probes = spill, sizes, dtype, device, probes
        P, N, F_ = shape
        self.shape = (P if probes is None else len(probes), N, F_)
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()

    def index_select(self, dim: int, probes: torch.Tensor) -> _Chunks:
        """The same rows for the probes ``probes`` only (``dim`` 0; the chunks are not copied)."""
        assert dim == 0 and self.probes is None
        return _Chunks(self.spill, self.sizes, self.shape, self.dtype, self.device, probes)

    def __iter__(self) -> Iterator[tuple[int, torch.Tensor]]:
        for k, start in enumerate(self.starts[:-1]):
            block = torch.from_numpy(self.spill[k])
            if self.dtype == torch.bfloat16:  # numpy has no bfloat16: kept as its bits
                block = block.view(torch.bfloat16)
            block = block.to(self.device)
            yield start, block if self.probes is None else block.index_select(0, self.probes)


def _fit_inputs(
    data: SpanFeatures, mixing: np.ndarray, rows: torch.Tensor, n_train: int, dtype: torch.dtype
) -> torch.Tensor | _Chunks:
    """``[P, len(rows), F]`` pooled inputs of the examples ``rows`` (``n_train`` training rows, then
    dev rows) in ``dtype``.

    Cached features: one tensor; the per-layer case reads a ``dtype`` copy of the cached features
    kept on ``data`` (made once, reused across seeds and control tasks), so each fit only gathers its
    rows. Features not cached: the rows are pooled chunk by chunk into a :class:`~bertology.spill.Spill`
    beside the store (``data.spill_dir``); a design of at most :data:`SPILL_CACHE_BYTES` comes back
    as one tensor, a larger one as :class:`_Chunks`, so memory holds one chunk of it at a time.
    """
    mixing = np.asarray(mixing)
    if data.cached is not None:
        X = _pooled_inputs(data, mixing)
        if X.dtype != dtype and X.data_ptr() == data.cached.data_ptr():
            low = data.low_precision(dtype)
            assert low is not None  # data.cached exists, so its low-precision copy does
            X = low.view(X.shape)
        return X.index_select(1, rows).to(dtype)
    D, S = data.shape[2], data.tokens.shape[1]
    P, F_ = len(mixing), S * D
    chunk = max(1, int(CHUNK_BYTES // (P * F_ * dtype.itemsize)))
    read = max(1, int(READ_BYTES // data.example_bytes))
    spill = Spill(data.spill_dir, SPILL_CACHE_BYTES)
    sizes: list[int] = []
    for part in (rows[:n_train], rows[n_train:]):  # a chunk is all training or all dev rows
        for start in range(0, len(part), chunk):
            ids = part[start : start + chunk]
            block = torch.empty((P, len(ids), F_), dtype=dtype)
            for a in range(0, len(ids), read):
                block[:, a : a + read] = _pool(data, mixing, ids[a : a + read])
            spill.append((block.view(torch.int16) if dtype == torch.bfloat16 else block).numpy())
            sizes.append(len(ids))
    if not spill.spilled:  # small: one tensor, as from the cache
        parts = [block for _, block in _Chunks(spill, sizes, (P, len(rows), F_), dtype, data.device)]
        spill.close()
        return torch.cat(parts, dim=1) if parts else torch.zeros((P, 0, F_), dtype=dtype, device=data.device)
    return _Chunks(spill, sizes, (P, len(rows), F_), dtype, data.device)


def _row_losses(
    X: torch.Tensor, Wt: torch.Tensor, b: torch.Tensor, labels: tuple[torch.Tensor, ...], multilabel: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row losses ``[P, B]`` of the rows ``X [P, B, F]`` and their gradient with respect to the
    logits, ``G [P, K, B]``. ``labels``: ``(yT [1, K, B],)`` (multi-label) or ``(idx [P, 1, B],
    minus_one [P, 1, B])``."""
    P, N, _ = X.shape
    logits = torch.bmm(X, Wt.to(X.dtype).transpose(1, 2))  # [P, N, K]
    z = torch.empty(P, Wt.shape[1], N, device=X.device).copy_(logits.transpose(1, 2))
    z.add_(b[:, :, None])  # [P, K, N]
    if multilabel:
        yT = labels[0].expand_as(z)
        rows = F.binary_cross_entropy_with_logits(z, yT, reduction="none").sum(1)
        G = torch.sigmoid(z).sub_(yT)
    else:
        idx, minus_one = labels
        z.sub_(z.amax(1, keepdim=True))
        G = z.exp()
        total = G.sum(1, keepdim=True)
        rows = (total.log() - z.gather(1, idx)).squeeze(1)  # [P, N]
        G.div_(total).scatter_add_(1, idx, minus_one)
    return rows, G


class _LinearObjective:
    """Mean training loss + ``||W||^2 / (2 C n_train)`` of ``P`` linear probes, with gradients.

    ``X [P, N, F]`` holds the training rows followed by the dev rows (float32, or bfloat16: the
    two matmuls then run in bfloat16 with fp32 accumulation, the rest in float32); each
    evaluation scores the dev rows on the way. Weights are kept transposed, ``Wt [P, K, F]``, so
    that the softmax runs along a short leading axis and its gradient ``G [P, K, N]`` multiplies
    ``X`` without a transpose. The sum over probes is minimised, so gradients separate by probe.
    Loss: softmax cross-entropy, or sigmoid BCE summed over labels (multi-label, ``y [N, K]``).

    ``X`` is one tensor, or :class:`_Chunks` (a streamed design): each evaluation then passes over
    the chunks one at a time, summing the training chunks' losses and gradients and the dev chunks'
    losses (the same function; only the order of the sums differs).
    """

    def __init__(self, X: torch.Tensor | _Chunks, y: torch.Tensor, n_train: int, multilabel: bool, C: float):
        self.X, self.n, self.multilabel = X, n_train, multilabel
        P, N, _ = X.shape
        self.labels: list[tuple[torch.Tensor, ...]] = []  # per chunk (one for a tensor)
        bounds = list(zip(X.starts[:-1], X.starts[1:])) if isinstance(X, _Chunks) else [(0, N)]
        for start, end in bounds:
            part = y[start:end]
            if multilabel:
                self.labels.append((part.t().contiguous()[None],))  # [1, K, B]
            else:
                B = end - start
                idx = part.view(1, 1, B).expand(P, 1, B)
                self.labels.append((idx, torch.full((P, 1, B), -1.0, device=y.device)))
        self.alpha = 1.0 / (C * n_train) if C > 0 and math.isfinite(C) else 0.0

    def __call__(
        self, Wt: torch.Tensor, b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Total training loss (scalar), ``dWt [P, K, F]``, ``db [P, K]``, dev loss ``[P]``."""
        X, n = self.X, self.n
        if isinstance(X, _Chunks):
            loss, dWt, db, dev_loss = self._chunked(X, Wt, b)
        else:
            rows, G = _row_losses(X, Wt, b, self.labels[0], self.multilabel)
            loss = rows[:, :n].sum(1) / n
            dev_loss = rows[:, n:].mean(1)
            G[:, :, n:] = 0.0  # dev rows: scored, not trained on (a row slice of X is slow)
            dWt = torch.bmm(G.to(X.dtype), X).float().div_(n)  # [P, K, F]
            db = G.sum(-1).div_(n)
        if self.alpha:
            dWt.add_(Wt, alpha=self.alpha)
            loss = loss + 0.5 * self.alpha * (Wt * Wt).sum((1, 2))
        return loss.sum(), dWt, db, dev_loss

    def _chunked(
        self, X: _Chunks, Wt: torch.Tensor, b: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mean training loss ``[P]``, ``dWt``, ``db`` and dev loss ``[P]``, chunk by chunk."""
        n = self.n
        P, N, _ = X.shape
        loss = torch.zeros(P, device=Wt.device)
        dev_total = torch.zeros(P, device=Wt.device)
        dWt = torch.zeros_like(Wt)
        db = torch.zeros_like(b)
        for (start, block), labels in zip(X, self.labels):
            rows, G = _row_losses(block, Wt, b, labels, self.multilabel)
            if start >= n:  # a dev chunk: scored, not trained on
                dev_total += rows.sum(1)
                continue
            loss += rows.sum(1)
            dWt += torch.bmm(G.to(block.dtype), block).float()
            db += G.sum(-1)
        return loss / n, dWt.div_(n), db.div_(n), dev_total / (N - n)


class _Stop(Exception):
    """Raised inside the L-BFGS closure to end a run early."""


def _lbfgs(W: torch.Tensor, b: torch.Tensor, max_iter: int) -> torch.optim.LBFGS:
    """L-BFGS over ``W`` and ``b`` whose first step is the negative gradient with ``t = 1``
    (torch's default first step, ``1 / |g|_1``, is tiny here: standardised inputs make the
    logistic Hessian's scale about 1)."""
    opt = torch.optim.LBFGS(
        [W, b],
        lr=1,
        max_iter=max_iter,
        max_eval=2 * max_iter,
        history_size=10,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-6,
        tolerance_change=1e-9,
    )
    numel, device = W.numel() + b.numel(), W.device
    opt.state[W].update(
        n_iter=1,
        d=torch.zeros(numel, device=device),
        t=0.0,
        old_dirs=[],
        old_stps=[],
        ro=[],
        H_diag=1.0,
        prev_flat_grad=torch.zeros(numel, device=device),
    )
    return opt


def _fit_lbfgs(
    data: SpanFeatures,
    yt: torch.Tensor,
    train: torch.Tensor,
    dev: torch.Tensor,
    model: JointProbes,
    mixing: np.ndarray,
    config: ProbeConfig,
    multilabel: bool,
) -> tuple[int, torch.Tensor]:
    """Train the linear probes of ``model`` (``w2``, ``b2``) full-batch with L-BFGS (strong-Wolfe
    line search) from zero weights.

    Every function evaluation also scores each probe on dev; a probe keeps its best-dev
    parameters and is done after ``patience`` evaluations without improvement (or at
    convergence, or after ``max_epochs * lbfgs_steps`` iterations). Once at least half of the
    running probes are done, L-BFGS restarts (warm) on the rest only, so finished layers stop
    costing compute. Returns (function evaluations, best dev loss ``[P]``).
    """
    bf16 = resolve_precision(config.precision, data.device, what="linear probes") == torch.bfloat16
    rows = torch.cat([train, dev])
    X = _fit_inputs(data, mixing, rows, len(train), torch.bfloat16 if bf16 else torch.float32)  # [P, n, F]
    y = yt[rows]
    P = model.w2.shape[0]
    device = model.w2.device
    Wt_all = torch.zeros_like(model.w2.detach().transpose(1, 2).contiguous())  # [P, K, F]
    b_all = torch.zeros_like(model.b2.detach())
    best_W, best_b = Wt_all.clone(), b_all.clone()
    best_loss = torch.full((P,), float("inf"), device=device)
    stale = torch.zeros(P, dtype=torch.long, device=device)
    done = torch.zeros(P, dtype=torch.bool, device=device)
    evals, budget = 0, config.max_epochs * config.lbfgs_steps
    while not bool(done.all()) and evals < budget:
        # (re)start on the probes still running, from their last weights
        active = torch.nonzero(~done).flatten()
        everyone = len(active) == P
        objective = _LinearObjective(X if everyone else X.index_select(0, active), y, len(train), multilabel, config.C)
        W = Wt_all[active].clone().requires_grad_(True)
        b = b_all[active].clone().requires_grad_(True)
        opt = _lbfgs(W, b, budget - evals)

        def closure(objective=objective, W=W, b=b, active=active) -> torch.Tensor:  # this round's probes
            nonlocal evals
            with torch.no_grad():
                loss, dW, db, dev_loss = objective(W, b)
                improved = dev_loss < best_loss[active] - 1e-4
                best_loss[active] = torch.where(improved, dev_loss, best_loss[active])
                stale[active] = torch.where(improved, 0, stale[active] + 1)
                best_W[active] = torch.where(improved[:, None, None], W, best_W[active])
                best_b[active] = torch.where(improved[:, None], b, best_b[active])
            evals += 1
            if 2 * int((stale[active] >= config.patience).sum()) >= len(active):
                raise _Stop
            W.grad, b.grad = dW, db
            return loss

        try:
            opt.step(closure)
            done[active] = True  # converged or out of budget
        except _Stop:
            done[active] |= stale[active] >= config.patience
        with torch.no_grad():
            Wt_all[active], b_all[active] = W.detach(), b.detach()
    if isinstance(X, _Chunks):
        X.spill.close()
    with torch.no_grad():
        model.w2.copy_(best_W.transpose(1, 2))
        model.b2.copy_(best_b)
    return evals, best_loss
