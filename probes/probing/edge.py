"""Edge probing (Tenney et al. 2019): span probes on frozen features, all layers trained jointly.

Fast path: :func:`fit_joint` trains ``P`` independent probes in one vectorised pass. Every
parameter has a leading probe axis ``P`` (batched matmuls over ``[P, batch, ...]``), so probing
all layers costs one training loop, not one per layer. What each probe sees is set by a layer
mixing spec over the ``L`` input layers:

* ``per_layer``: probe ``p`` reads layer ``p`` only;
* ``mix``: one probe reads a learned scalar mix ``h = gamma * sum_l softmax(a)_l h_l`` (ELMo);
* ``cumulative``: probe ``p`` reads a learned scalar mix of layers ``0..p`` (Tenney's cumulative
  scoring);
* ``fixed``: given weights ``[P, L]`` (e.g. sum of the last four layers), not learned.

MLP probe: project token vectors ``D -> proj_dim`` (separately for span 1 and span 2), pool each
span (self-attentive: a learned score per token, softmax within the span, weighted sum; or mean),
concatenate the spans, then Linear, tanh, LayerNorm, dropout, Linear. Linear probe: pool the raw
token vectors the same way, concatenate, one linear layer (no projection, no hidden layer).
Loss: softmax cross-entropy (single label) or sigmoid BCE (multi-label), early stopping on dev
loss, keeping each probe's best parameters. Linear probes whose pooled inputs are fixed (width-1
spans, or mean pooling; per-layer or fixed mixing) train full-batch with L-BFGS on the
L2-regularised logistic loss (scikit-learn's objective, ``C``); everything else with minibatch
Adam (fused update where torch has it). Both compute their matmuls in bfloat16 (float32
parameters, optimiser state, losses and predictions) only where a measured micro-benchmark finds
bfloat16 faster than float32 (``precision="auto"``, :func:`bertology.runtime.resolve_precision`:
AMX / AVX512-BF16 CPUs, GPUs); elsewhere in float32. Width-1 spans skip attention pooling.

Input features: ``[L, n_words, D]`` (``FeatureStore.layers()``), words in corpus order, with
``sentence_offsets [n_sentences + 1]`` giving each sentence's first word.

:class:`EdgeProbe` is the scikit-learn estimator on already pooled features ``X [n, d]``;
:func:`probe_layers` is the study-level entry point returning a tidy DataFrame.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from bertology.runtime import resolve_precision
from bertology.probes.probing.tasks import EdgeTask, TaskError, build_task, split_by_sentence

MODES = ("per_layer", "mix", "cumulative", "fixed")
SCORE_COLUMNS = ["task", "mode", "probe", "pooling", "control", "layer", "seed", "split", "metric", "value"]


@dataclass(frozen=True)
class ProbeConfig:
    """Probe hyper-parameters (plain data)."""

    probe: str = "mlp"            # "mlp" | "linear"
    pooling: str = "attention"    # "attention" | "mean"
    proj_dim: int = 256           # MLP probes only; 0 = no projection
    hidden_dim: int = 256
    dropout: float = 0.2
    lr: float = 1e-3
    mix_lr: float = 0.05          # scalar-mix logits and gamma learn faster than the probe
    weight_decay: float = 0.0
    batch_size: int = 512
    max_epochs: int = 40
    patience: int = 3
    min_batches_per_epoch: int = 10   # tiny training sets (MDL's first blocks) pass several times
    standardize: bool = True      # z-score each layer's dimensions (so mix weights compare layers)
    device: str = "cpu"
    solver: str = "auto"          # "auto" | "adam" | "lbfgs"; auto: full-batch L-BFGS for linear
                                  # probes on fixed pooled features (width-1 or mean-pooled spans,
                                  # per-layer or fixed mixing), minibatch Adam otherwise
    C: float = 1.0                # L-BFGS: inverse L2 strength, as scikit-learn's LogisticRegression
    lbfgs_steps: int = 5          # L-BFGS iterations per "epoch" (one dev check)
    precision: str = "auto"       # training matmuls (L-BFGS and Adam): "float32" | "bfloat16" | "auto"
                                  # (bfloat16 where a measured micro-benchmark finds it faster:
                                  # bertology.runtime); predictions and metrics are float32

    def __post_init__(self) -> None:
        if self.probe not in ("mlp", "linear"):
            raise TaskError(f"probe must be 'mlp' or 'linear', got {self.probe!r}")
        if self.pooling not in ("attention", "mean"):
            raise TaskError(f"pooling must be 'attention' or 'mean', got {self.pooling!r}")
        if self.solver not in ("auto", "adam", "lbfgs"):
            raise TaskError(f"solver must be 'auto', 'adam' or 'lbfgs', got {self.solver!r}")
        if self.precision not in ("auto", "float32", "bfloat16"):
            raise TaskError(f"precision must be 'auto', 'float32' or 'bfloat16', got {self.precision!r}")


# --- span indexing ----------------------------------------------------------------------------

def span_index(task: EdgeTask, sentence_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global word indices of every span token, padded.

    Returns ``tokens [n, S, M]`` int64 (indices into the flat word axis) and ``mask [n, S, M]``
    bool, where ``S`` = spans per example and ``M`` = longest span.
    """
    offsets = np.asarray(sentence_offsets, dtype=np.int64)
    n_spans = task.n_spans
    spans = [(e.span1,) if n_spans == 1 else (e.span1, e.span2) for e in task.examples]
    longest = max(end - start for sp in spans for start, end in sp)
    tokens = np.zeros((len(spans), n_spans, longest), dtype=np.int64)
    mask = np.zeros((len(spans), n_spans, longest), dtype=bool)
    for i, (e, sp) in enumerate(zip(task.examples, spans)):
        if e.sentence + 1 >= len(offsets):
            raise TaskError(f"task {task.name!r}: example {i} refers to sentence {e.sentence}, "
                            f"features hold {len(offsets) - 1} sentences")
        base, n_words = offsets[e.sentence], offsets[e.sentence + 1] - offsets[e.sentence]
        for s, (start, end) in enumerate(sp):
            if end > n_words:
                raise TaskError(f"task {task.name!r}: example {i} span [{start}, {end}) outside "
                                f"sentence {e.sentence} ({n_words} words in the features)")
            tokens[i, s, :end - start] = np.arange(base + start, base + end)
            mask[i, s, :end - start] = True
    return tokens, mask


def mixing_spec(mode: str, n_layers: int, weights: np.ndarray | None = None
                ) -> tuple[np.ndarray, bool, list[int]]:
    """Which layers each probe reads.

    Returns ``mask [P, L]`` (bool or fixed float weights), ``learned`` (mix weights trained) and
    the layer label of each probe (-1 = all layers).
    """
    if mode == "per_layer":
        return np.eye(n_layers, dtype=bool), False, list(range(n_layers))
    if mode == "mix":
        return np.ones((1, n_layers), dtype=bool), True, [-1]
    if mode == "cumulative":
        return np.tril(np.ones((n_layers, n_layers), dtype=bool)), True, list(range(n_layers))
    if mode == "fixed":
        if weights is None or np.ndim(weights) != 2 or np.shape(weights)[1] != n_layers:
            raise TaskError(f"mode 'fixed' needs weights [P, {n_layers}]")
        return np.asarray(weights, dtype=np.float32), False, [-1] * len(weights)
    raise TaskError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


# --- the jointly trained probes ---------------------------------------------------------------

def _uniform(gen: torch.Generator, shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound


class JointProbes(torch.nn.Module):
    """``P`` independent span probes with stacked parameters (leading axis ``P``)."""

    def __init__(self, n_probes: int, n_layers: int, dim: int, n_spans: int, n_labels: int,
                 mixing: np.ndarray, learned_mix: bool, config: ProbeConfig, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        # a linear probe reads the (pooled) features directly: softmax(W pool(x) + b)
        self.project = config.probe == "mlp" and config.proj_dim > 0
        H = config.proj_dim if self.project else dim
        P, S, Hm, K = n_probes, n_spans, config.hidden_dim, n_labels
        self.config, self.learned_mix, self.n_layers = config, learned_mix, n_layers
        mixing = np.asarray(mixing)
        self.one_hot = mixing.dtype == bool and bool((mixing.sum(1) == 1).all()) and not learned_mix
        if self.one_hot:
            self.register_buffer("layer_of_probe", torch.as_tensor(mixing.argmax(1)))
            self.identity = bool((mixing.argmax(1) == np.arange(n_layers)).all()) and P == n_layers
        elif mixing.dtype == bool:
            self.register_buffer("mix_mask", torch.as_tensor(mixing))
            self.mix_logits = torch.nn.Parameter(torch.zeros(P, n_layers))
            self.gamma = torch.nn.Parameter(torch.ones(P))
        else:
            self.register_buffer("fixed_weights", torch.as_tensor(mixing, dtype=torch.float32))
        if self.project:
            self.proj_w = torch.nn.Parameter(_uniform(gen, (P, S, dim, H), dim))
            self.proj_b = torch.nn.Parameter(torch.zeros(P, S, H))
        self.attn_w = torch.nn.Parameter(_uniform(gen, (P, S, H), H))
        if config.probe == "mlp":
            self.w1 = torch.nn.Parameter(_uniform(gen, (P, S * H, Hm), S * H))
            self.b1 = torch.nn.Parameter(torch.zeros(P, Hm))
            self.w2 = torch.nn.Parameter(_uniform(gen, (P, Hm, K), Hm))
        else:
            self.w2 = torch.nn.Parameter(_uniform(gen, (P, S * H, K), S * H))
        self.b2 = torch.nn.Parameter(torch.zeros(P, K))
        self.dropout_gen = torch.Generator(device=config.device).manual_seed(seed + 2)

    def layer_weights(self) -> torch.Tensor:
        """``[P, L]`` effective weight of each layer for each probe (softmax mix, without gamma)."""
        if self.one_hot:
            return F.one_hot(self.layer_of_probe, self.n_layers).float()
        if hasattr(self, "fixed_weights"):
            return self.fixed_weights
        logits = self.mix_logits.masked_fill(~self.mix_mask, float("-inf"))
        return torch.softmax(logits, dim=-1)

    def mix(self, g: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``g [L, B, S, M, D]`` -> ``[P, B, S, M, D]`` (``P`` = active probes)."""
        sel = _selector(active)
        if self.one_hot:
            return g if self.identity and active is None else g[sel(self.layer_of_probe)]
        if hasattr(self, "fixed_weights"):
            return torch.einsum("pl,lbsmd->pbsmd", sel(self.fixed_weights), g)
        w = sel(self.layer_weights()) * sel(self.gamma)[:, None]
        return torch.einsum("pl,lbsmd->pbsmd", w, g)

    def forward(self, g: torch.Tensor, mask: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``g [L, B, S, M, D]``, ``mask [B, S, M]`` -> logits ``[P, B, K]``.

        ``active``: indices of the probes to run (the others have stopped training); default all.
        """
        sel = _selector(active)
        x = self.mix(g, active)
        P, B, S, M, _ = x.shape
        if self.project:
            z = torch.einsum("pbsmd,psdh->pbsmh", x, sel(self.proj_w)) + sel(self.proj_b)[:, None, :, None, :]
        else:
            z = x
        if M == 1:
            pooled = z[:, :, :, 0]
        else:
            if self.config.pooling == "attention":
                scores = torch.einsum("pbsmh,psh->pbsm", z, sel(self.attn_w))
                scores = scores.masked_fill(~mask, float("-inf"))
                weights = torch.softmax(scores, dim=-1)
            else:
                weights = (mask / mask.sum(-1, keepdim=True)).expand(P, B, S, M)
            pooled = torch.einsum("pbsm,pbsmh->pbsh", weights, z)
        r = pooled.reshape(P, B, -1)
        if self.config.probe == "mlp":
            h = torch.tanh(torch.baddbmm(sel(self.b1)[:, None, :], r, sel(self.w1)))
            h = F.layer_norm(h, h.shape[-1:])
            if self.training and self.config.dropout > 0:
                # own generator: seeded runs repeat exactly (no global RNG)
                keep = torch.rand(h.shape, generator=self.dropout_gen, device=h.device)
                h = h * (keep >= self.config.dropout) / (1 - self.config.dropout)
            r = h
        return torch.baddbmm(sel(self.b2)[:, None, :], r, sel(self.w2))


def _fused(device: torch.device) -> dict[str, bool]:
    """``fused=True`` for Adam where torch has the fused kernel (one pass over all parameters
    instead of a dozen ops per tensor: the update dominates small probes' steps on a CPU)."""
    return {"fused": True} if device.type in ("cpu", "cuda") else {}


def _selector(active: torch.Tensor | None):
    return (lambda t: t) if active is None else (lambda t: t[active])


@dataclass
class JointFit:
    """Result of :func:`fit_joint`: the probes (best dev state) and training facts."""

    model: JointProbes
    mix_weights: np.ndarray      # [P, L] softmax weights (one-hot for per-layer probes)
    gamma: np.ndarray            # [P]
    epochs: int
    best_dev_loss: np.ndarray    # [P]
    seconds: float


class SpanFeatures:
    """Gathers (and standardises) span-token features ``[L, B, S, M, D]`` from ``[L, W, D]``."""

    def __init__(self, features: np.ndarray | torch.Tensor, tokens: np.ndarray, mask: np.ndarray,
                 standardize: bool, device: str, cache_bytes: float = 2e9):
        feats = torch.as_tensor(features)
        if feats.dtype != torch.float32:
            feats = feats.float()
        self.feats = feats.to(device)
        self.tokens = torch.as_tensor(tokens, device=device)
        self.mask = torch.as_tensor(mask, device=device)
        if standardize:
            used = torch.unique(self.tokens[self.mask])
            sample = self.feats[:, used]
            self.mean = sample.mean(1, keepdim=True)[:, :, None, None, :]      # [L,1,1,1,D]
            self.scale = 1.0 / (sample.std(1, keepdim=True)[:, :, None, None, :] + 1e-6)
        else:
            self.mean = self.scale = None
        self.cached: torch.Tensor | None = None
        self.cached_lowp: torch.Tensor | None = None    # low-precision copy of ``cached``, made once
        L, D = self.feats.shape[0], self.feats.shape[2]
        if L * self.tokens.numel() * D * 4 <= cache_bytes:
            # gather + standardise every example once; batches are then one index_select
            chunks = [self._gather(torch.arange(i, min(i + 4096, len(self.tokens)), device=device))
                      for i in range(0, len(self.tokens), 4096)]
            self.cached = torch.cat(chunks, dim=1).contiguous()

    def _gather(self, idx: torch.Tensor) -> torch.Tensor:
        g = self.feats[:, self.tokens[idx]]
        if self.mean is not None:
            g = (g - self.mean) * self.scale
        return g

    def low_precision(self, dtype: torch.dtype) -> torch.Tensor | None:
        """``cached`` in ``dtype`` (made once, shared by every fit on these features), or None
        when the features are not cached."""
        if self.cached is None:
            return None
        if self.cached_lowp is None or self.cached_lowp.dtype != dtype:
            self.cached_lowp = self.cached.to(dtype)
        return self.cached_lowp

    def __call__(self, idx: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[L, B, S, M, D]`` and mask ``[B, S, M]`` of examples ``idx`` (float32, or
        ``dtype`` when given)."""
        if self.cached is not None:
            source = self.cached if dtype in (None, torch.float32) else self.low_precision(dtype)
            return source.index_select(1, idx), self.mask[idx]
        g = self._gather(idx)
        return (g if dtype is None else g.to(dtype)), self.mask[idx]


def _loss(logits: torch.Tensor, y: torch.Tensor, multilabel: bool) -> torch.Tensor:
    """Per-probe mean loss ``[P]`` for logits ``[P, B, K]``."""
    if multilabel:
        return F.binary_cross_entropy_with_logits(
            logits, y.expand(logits.shape[0], -1, -1), reduction="none").sum(-1).mean(-1)
    P, B, K = logits.shape
    return F.cross_entropy(logits.reshape(P * B, K), y.repeat(P), reduction="none").view(P, B).mean(1)


def predict_logits(model: JointProbes, data: SpanFeatures, idx: np.ndarray | torch.Tensor,
                   batch_size: int = 2048, active: torch.Tensor | None = None) -> torch.Tensor:
    """Logits ``[P, n, K]`` for examples ``idx`` (``active``: only those probes)."""
    model.eval()
    idx = torch.as_tensor(idx, device=data.feats.device)
    outs = []
    with torch.no_grad():
        for start in range(0, len(idx), batch_size):
            g, m = data(idx[start:start + batch_size])
            outs.append(model(g, m, active))
    return torch.cat(outs, dim=1) if outs else torch.zeros(0)


# --- full-batch L-BFGS for linear probes --------------------------------------------------------

def _uses_lbfgs(config: ProbeConfig, learned_mix: bool, max_span: int) -> bool:
    """Full-batch L-BFGS applies when the probe is linear and its pooled inputs are fixed."""
    fixed_inputs = config.probe == "linear" and not learned_mix and (max_span == 1 or config.pooling == "mean")
    if config.solver == "lbfgs" and not fixed_inputs:
        raise TaskError("solver 'lbfgs' needs a linear probe on fixed inputs (width-1 or mean-pooled "
                        "spans, per-layer or fixed mixing)")
    return fixed_inputs and config.solver != "adam"


def _pooled_inputs(data: SpanFeatures, mixing: np.ndarray, chunk: int = 4096) -> torch.Tensor:
    """Pooled, mixed span features ``[P, n, S * D]`` of every example (mean pooling; mixing one-hot
    ``[P, L]`` bool or fixed float weights)."""
    mixing = np.asarray(mixing)
    n, S, M = data.tokens.shape
    device = data.feats.device
    L = data.feats.shape[0]
    if (data.cached is not None and M == 1 and mixing.dtype == bool and len(mixing) == L
            and (mixing.argmax(1) == np.arange(L)).all()):
        return data.cached.view(L, n, -1)                  # per-layer probes: no copy
    parts = []
    for start in range(0, n, chunk):
        g, m = data(torch.arange(start, min(start + chunk, n), device=device))   # [L, B, S, M, D]
        if g.shape[3] == 1:
            pooled = g[:, :, :, 0]
        else:
            w = (m / m.sum(-1, keepdim=True)).to(g.dtype)
            pooled = torch.einsum("bsm,lbsmd->lbsd", w, g)
        if mixing.dtype == bool:
            pooled = pooled[torch.as_tensor(mixing.argmax(1), device=device)]
        else:
            pooled = torch.einsum("pl,lbsd->pbsd", torch.as_tensor(mixing, device=device), pooled)
        parts.append(pooled.reshape(pooled.shape[0], pooled.shape[1], -1))
    return torch.cat(parts, dim=1)


def _fit_inputs(data: SpanFeatures, mixing: np.ndarray, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[P, len(rows), F]`` pooled inputs of the examples ``rows`` in ``dtype``.

    The per-layer case reads a ``dtype`` copy of the cached features kept on ``data`` (made once,
    reused across seeds and control tasks), so each fit only gathers its rows.
    """
    X = _pooled_inputs(data, mixing)
    if X.dtype != dtype and data.cached is not None and X.data_ptr() == data.cached.data_ptr():
        X = data.low_precision(dtype).view(X.shape)
    return X.index_select(1, rows).to(dtype)


class _LinearObjective:
    """Mean training loss + ``||W||^2 / (2 C n_train)`` of ``P`` linear probes, with gradients.

    ``X [P, N, F]`` holds the training rows followed by the dev rows (float32, or bfloat16: the
    two matmuls then run in bfloat16 with fp32 accumulation, the rest in float32); each
    evaluation scores the dev rows on the way. Weights are kept transposed, ``Wt [P, K, F]``, so
    that the softmax runs along a short leading axis and its gradient ``G [P, K, N]`` multiplies
    ``X`` without a transpose. The sum over probes is minimised, so gradients separate by probe.
    Loss: softmax cross-entropy, or sigmoid BCE summed over labels (multi-label, ``y [N, K]``).
    """

    def __init__(self, X: torch.Tensor, y: torch.Tensor, n_train: int, multilabel: bool, C: float):
        self.X, self.n, self.multilabel = X, n_train, multilabel
        P, N, _ = X.shape
        if multilabel:
            self.yT = y.t().contiguous()[None]                                       # [1, K, N]
        else:
            self.idx = y.view(1, 1, N).expand(P, 1, N)
            self.minus_one = torch.full((P, 1, N), -1.0, device=X.device)
        self.alpha = 1.0 / (C * n_train) if C > 0 and math.isfinite(C) else 0.0

    def __call__(self, Wt: torch.Tensor, b: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Total training loss (scalar), ``dWt [P, K, F]``, ``db [P, K]``, dev loss ``[P]``."""
        X, n = self.X, self.n
        P, N, _ = X.shape
        logits = torch.bmm(X, Wt.to(X.dtype).transpose(1, 2))                         # [P, N, K]
        z = torch.empty(P, Wt.shape[1], N, device=X.device).copy_(logits.transpose(1, 2))
        z.add_(b[:, :, None])                                                           # [P, K, N]
        if self.multilabel:
            yT = self.yT.expand_as(z)
            rows = F.binary_cross_entropy_with_logits(z, yT, reduction="none").sum(1)
            G = torch.sigmoid(z).sub_(yT)
        else:
            z.sub_(z.amax(1, keepdim=True))
            G = z.exp()
            total = G.sum(1, keepdim=True)
            rows = (total.log() - z.gather(1, self.idx)).squeeze(1)                    # [P, N]
            G.div_(total).scatter_add_(1, self.idx, self.minus_one)
        loss = rows[:, :n].sum(1) / n
        dev_loss = rows[:, n:].mean(1)
        G[:, :, n:] = 0.0          # dev rows: scored, not trained on (a row slice of X is slow)
        dWt = torch.bmm(G.to(X.dtype), X).float().div_(n)                              # [P, K, F]
        db = G.sum(-1).div_(n)
        if self.alpha:
            dWt.add_(Wt, alpha=self.alpha)
            loss = loss + 0.5 * self.alpha * (Wt * Wt).sum((1, 2))
        return loss.sum(), dWt, db, dev_loss


class _Stop(Exception):
    """Raised inside the L-BFGS closure to end a run early."""


def _fit_lbfgs(data: SpanFeatures, yt: torch.Tensor, train: torch.Tensor, dev: torch.Tensor,
               model: JointProbes, mixing: np.ndarray, config: ProbeConfig,
               multilabel: bool) -> tuple[int, torch.Tensor]:
    """Train the linear probes of ``model`` (``w2``, ``b2``) full-batch with L-BFGS (strong-Wolfe
    line search) from zero weights.

    Every function evaluation also scores each probe on dev; a probe keeps its best-dev
    parameters and is done after ``patience`` evaluations without improvement (or at
    convergence, or after ``max_epochs * lbfgs_steps`` iterations). Once at least half of the
    running probes are done, L-BFGS restarts (warm) on the rest only, so finished layers stop
    costing compute. Returns (function evaluations, best dev loss ``[P]``).
    """
    bf16 = resolve_precision(config.precision, data.feats.device, what="linear probes") == torch.bfloat16
    rows = torch.cat([train, dev])
    X = _fit_inputs(data, mixing, rows, torch.bfloat16 if bf16 else torch.float32)   # [P, n, F]
    y = yt[rows]
    P = model.w2.shape[0]
    device = model.w2.device
    Wt_all = torch.zeros_like(model.w2.detach().transpose(1, 2).contiguous())     # [P, K, F]
    b_all = torch.zeros_like(model.b2.detach())
    best_W, best_b = Wt_all.clone(), b_all.clone()
    best_loss = torch.full((P,), float("inf"), device=device)
    stale = torch.zeros(P, dtype=torch.long, device=device)
    done = torch.zeros(P, dtype=torch.bool, device=device)
    evals, budget = 0, config.max_epochs * config.lbfgs_steps
    while not bool(done.all()) and evals < budget:
        active = torch.nonzero(~done).flatten()
        everyone = len(active) == P
        objective = _LinearObjective(X if everyone else X.index_select(0, active), y, len(train),
                                     multilabel, config.C)
        W = Wt_all[active].clone().requires_grad_(True)
        b = b_all[active].clone().requires_grad_(True)
        opt = torch.optim.LBFGS([W, b], lr=1, max_iter=budget - evals, max_eval=2 * (budget - evals),
                                history_size=10, line_search_fn="strong_wolfe",
                                tolerance_grad=1e-6, tolerance_change=1e-9)
        # first step: -gradient with t = 1 (torch's default first step, 1 / |g|_1, is tiny here:
        # standardised inputs make the logistic Hessian's scale about 1)
        numel = W.numel() + b.numel()
        opt.state[W].update(n_iter=1, d=torch.zeros(numel, device=device), t=0.0, old_dirs=[],
                            old_stps=[], ro=[], H_diag=1.0, prev_flat_grad=torch.zeros(numel, device=device))

        def closure() -> torch.Tensor:
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
            done[active] = True                    # converged or out of budget
        except _Stop:
            done[active] |= stale[active] >= config.patience
        with torch.no_grad():
            Wt_all[active], b_all[active] = W.detach(), b.detach()
    with torch.no_grad():
        model.w2.copy_(best_W.transpose(1, 2))
        model.b2.copy_(best_b)
    return evals, best_loss


def fit_joint(data: SpanFeatures, y: np.ndarray, train_idx: np.ndarray, dev_idx: np.ndarray, *,
              n_labels: int, mixing: np.ndarray, learned_mix: bool, config: ProbeConfig,
              seed: int, multilabel: bool = False) -> JointFit:
    """Train ``P = len(mixing)`` probes jointly, early stopping on dev loss.

    Linear probes on fixed pooled inputs (width-1 or mean-pooled spans, per-layer or fixed mixing)
    train full-batch with L-BFGS on the L2-regularised logistic loss (``config.solver``); all
    others with minibatch Adam.

    ``y``: ``[n]`` int label ids, or ``[n, K]`` 0/1 for multi-label. Each probe keeps the
    parameters of its own best dev epoch; training stops once every probe has run out of patience.
    """
    t0 = time.perf_counter()
    device = data.feats.device
    L, _, D = data.feats.shape
    P, S = len(mixing), data.tokens.shape[1]
    model = JointProbes(P, L, D, S, n_labels, mixing, learned_mix, config, seed).to(device)
    yt = torch.as_tensor(y, device=device)
    yt = yt.float() if multilabel else yt.long()
    train = torch.as_tensor(train_idx, device=device)
    dev = torch.as_tensor(dev_idx, device=device)
    if _uses_lbfgs(config, learned_mix, data.tokens.shape[2]):
        epoch, best_loss = _fit_lbfgs(data, yt, train, dev, model, mixing, config, multilabel)
        model.eval()
        weights = (np.eye(L, dtype=np.float32)[np.asarray(mixing).argmax(1)] if model.one_hot
                   else np.asarray(mixing, dtype=np.float32))
        return JointFit(model, weights, np.ones(P, dtype=np.float32), epoch, best_loss.cpu().numpy(),
                        time.perf_counter() - t0)
    mix_params = [p for n, p in model.named_parameters() if n in ("mix_logits", "gamma")]
    other = [p for n, p in model.named_parameters() if n not in ("mix_logits", "gamma")]
    groups = [{"params": other}] + ([{"params": mix_params, "lr": config.mix_lr,
                                      "weight_decay": 0.0}] if mix_params else [])
    opt = torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay, **_fused(device))
    # bfloat16 matmuls (autocast: parameters, gradients and Adam's state stay float32) only where
    # measured faster; the loss, dev scores and predictions are float32
    lowp = resolve_precision(config.precision, device, what="MLP probes")
    gen = torch.Generator().manual_seed(seed + 1)
    # keep the gathered batch around a few tens of MB
    per_example = (L + 2 * P) * S * data.tokens.shape[2] * max(D, config.proj_dim) * 4
    batch = int(max(32, min(config.batch_size, 64e6 // per_example)))
    best_loss = torch.full((P,), float("inf"), device=device)
    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    stale = torch.zeros(P, dtype=torch.long, device=device)
    active: torch.Tensor | None = None
    epoch = 0
    for epoch in range(1, config.max_epochs + 1):
        model.train()
        step = min(batch, len(train))
        repeats = max(1, math.ceil(config.min_batches_per_epoch * step / max(len(train), 1)))
        order = torch.cat([train[torch.randperm(len(train), generator=gen).to(device)]
                           for _ in range(repeats)])
        for start in range(0, len(order), step):
            b = order[start:start + step]
            g, m = data(b, lowp)
            with torch.autocast(device.type, dtype=lowp or torch.bfloat16, enabled=lowp is not None):
                logits = model(g, m, active)
            loss = _loss(logits.float(), yt[b], multilabel).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        dev_loss = torch.full((P,), float("inf"), device=device)
        rows = slice(None) if active is None else active
        dev_loss[rows] = _loss(predict_logits(model, data, dev, active=active), yt[dev], multilabel)
        improved = dev_loss < best_loss - 1e-4
        best_loss = torch.where(improved, dev_loss, best_loss)
        stale = torch.where(improved, torch.zeros_like(stale), stale + 1)
        # probes out of patience stop costing compute (their best state is kept)
        running = stale < config.patience
        active = None if bool(running.all()) else torch.nonzero(running).flatten()
        if improved.any():
            for k, v in model.state_dict().items():
                if v.dim() and v.shape[0] == P and not k.endswith(("layer_of_probe", "mix_mask",
                                                                      "fixed_weights")):
                    sel = improved.view(-1, *([1] * (v.dim() - 1)))
                    best_state[k] = torch.where(sel, v.detach(), best_state[k])
        if bool((stale >= config.patience).all()):
            break
    model.load_state_dict(best_state)
    model.eval()
    with torch.no_grad():
        if model.one_hot:
            weights = np.eye(L, dtype=np.float32)[model.layer_of_probe.cpu().numpy()]
            gamma = np.ones(P, dtype=np.float32)
        elif hasattr(model, "fixed_weights"):
            weights, gamma = model.fixed_weights.cpu().numpy(), np.ones(P, dtype=np.float32)
        else:
            weights = model.layer_weights().cpu().numpy()
            gamma = model.gamma.cpu().numpy()
    return JointFit(model, weights, gamma, epoch, best_loss.cpu().numpy(),
                    time.perf_counter() - t0)


# --- metrics ------------------------------------------------------------------------------------

def classification_metrics(logits: torch.Tensor, y: np.ndarray, multilabel: bool) -> dict[str, np.ndarray]:
    """Per-probe ``accuracy``, ``micro_f1``, ``macro_f1`` (each ``[P]``) from logits ``[P, n, K]``.

    Single label: micro-F1 over all labels equals accuracy. Multi-label: accuracy is exact match,
    F1 counts label decisions (sigmoid > 0.5).
    """
    logits = logits.cpu()
    P, n, K = logits.shape
    if multilabel:
        pred = (logits > 0).numpy()
        gold = np.broadcast_to(np.asarray(y, dtype=bool), pred.shape)
    else:
        pred = F.one_hot(logits.argmax(-1), K).bool().numpy()
        gold = np.broadcast_to(np.eye(K, dtype=bool)[np.asarray(y)], pred.shape)
    tp = (pred & gold).sum(1).astype(float)          # [P, K]
    fp = (pred & ~gold).sum(1).astype(float)
    fn = (~pred & gold).sum(1).astype(float)
    micro = 2 * tp.sum(1) / np.maximum(2 * tp.sum(1) + fp.sum(1) + fn.sum(1), 1)
    present = gold[0].any(0) | pred.any(1)           # labels seen in gold or predicted  [P, K]
    f1 = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
    macro = (f1 * present).sum(1) / np.maximum(present.sum(1), 1)
    accuracy = (pred == gold).all(-1).mean(1)
    return {"accuracy": accuracy, "micro_f1": micro, "macro_f1": macro}


# --- study-level API ----------------------------------------------------------------------------

def label_matrix(task: EdgeTask) -> np.ndarray:
    return task.label_matrix() if task.multilabel else task.label_ids()


def probe_arrays(features: np.ndarray | torch.Tensor, sentence_offsets: np.ndarray, task: EdgeTask,
                 *, mode: str = "per_layer", seeds: Sequence[int] = (0, 1, 2),
                 layer_ids: Sequence[int] | None = None, config: ProbeConfig = ProbeConfig(),
                 split_seed: int | None = 0, fixed_weights: np.ndarray | None = None,
                 control: bool = False) -> pd.DataFrame:
    """Probe features ``[L, n_words, D]`` for ``task``; one vectorised training pass per seed.

    ``layer_ids`` names the ``L`` layers (default ``0..L-1``). ``split_seed``: the sentence split
    (``None``: a new split per seed). Returns a tidy DataFrame with columns
    ``task, mode, probe, pooling, control, layer, seed, split, metric, value`` where ``split`` is
    ``dev``/``test`` for scores (``accuracy``, ``micro_f1``, ``macro_f1``, ``loss``) and ``param``
    for ``mix_weight`` (per layer), ``gamma`` and ``epochs``/``seconds`` (layer -1 = the mix).
    """
    L = features.shape[0]
    layer_ids = list(range(L)) if layer_ids is None else list(layer_ids)
    if len(layer_ids) != L:
        raise TaskError(f"layer_ids has {len(layer_ids)} entries for {L} feature layers")
    mixing, learned, probe_layer = mixing_spec(mode, L, fixed_weights)
    tokens, mask = span_index(task, sentence_offsets)
    data = SpanFeatures(features, tokens, mask, config.standardize, config.device)
    y = label_matrix(task)
    rows: list[dict[str, Any]] = []
    base = {"task": task.name, "mode": mode, "probe": config.probe, "pooling": config.pooling,
            "control": control}
    for seed in seeds:
        split = split_by_sentence(task, seed=seed if split_seed is None else split_seed)
        fit = fit_joint(data, y, split["train"], split["dev"], n_labels=len(task.labels),
                        mixing=mixing, learned_mix=learned, config=config, seed=seed,
                        multilabel=task.multilabel)
        for part in ("dev", "test"):
            logits = predict_logits(fit.model, data, split[part])
            scores = classification_metrics(logits, y[split[part]], task.multilabel)
            gold = torch.as_tensor(y[split[part]], device=logits.device)
            scores["loss"] = _loss(logits, gold.float() if task.multilabel else gold,
                                   task.multilabel).cpu().numpy()
            for metric, values in scores.items():
                for p, value in enumerate(values):
                    layer = layer_ids[probe_layer[p]] if probe_layer[p] >= 0 else -1
                    rows.append({**base, "layer": layer, "seed": seed, "split": part,
                                 "metric": metric, "value": float(value)})
        if mode == "mix":
            for l, w in enumerate(fit.mix_weights[0]):
                rows.append({**base, "layer": layer_ids[l], "seed": seed, "split": "param",
                             "metric": "mix_weight", "value": float(w)})
            rows.append({**base, "layer": -1, "seed": seed, "split": "param", "metric": "gamma",
                         "value": float(fit.gamma[0])})
        rows.append({**base, "layer": -1, "seed": seed, "split": "param", "metric": "epochs",
                     "value": float(fit.epochs)})
        rows.append({**base, "layer": -1, "seed": seed, "split": "param", "metric": "seconds",
                     "value": float(fit.seconds)})
    return pd.DataFrame(rows, columns=SCORE_COLUMNS)


def layer_features(store_or_model: Any, corpus: Any, layers: Any) -> tuple[np.ndarray, np.ndarray, list[int], dict]:
    """Resolve a FeatureStore (anything with ``layers``) or a LoadedModel (extracted with the store)."""
    store = store_or_model
    if not hasattr(store, "layers"):
        from bertology.store import extract  # the store owns caching; import late

        store = extract(store_or_model, corpus, attentions=False, progress=False)
    n_layers = store.n_layers
    layer_ids = list(range(n_layers)) if layers in ("all", None) else [int(l) for l in layers]
    bad = [l for l in layer_ids if not 0 <= l < n_layers]
    if bad:
        raise TaskError(f"layers {bad} outside 0..{n_layers - 1}")
    meta = {"store": str(getattr(store, "path", "")), "manifest": getattr(store, "manifest", {})}
    return store.layers(layer_ids), np.asarray(store.sentence_offsets), layer_ids, meta


def probe_layers(store_or_model: Any, corpus: Any, task: EdgeTask | str, *, layers: Any = "all",
                 mode: str = "per_layer", seeds: Sequence[int] = (0, 1, 2), probe: str = "mlp",
                 pooling: str = "attention", control: bool = False, control_key: str = "span1",
                 split_seed: int | None = 0, fixed_weights: np.ndarray | None = None,
                 **config: Any) -> pd.DataFrame:
    """Probe every requested layer of a store (or a model, extracted over ``corpus``).

    ``task``: an :class:`EdgeTask` or a name/JSONL path for :func:`bertology.probes.probing.tasks.build_task`.
    ``control=True`` also trains on the Hewitt & Liang control task (same seeds), its word type
    given by ``control_key`` (``"span1"``: span 1's text, the paper's word type; ``"pair"``: the
    (span 1, span 2) texts, see :mod:`bertology.probes.probing.controls`), and adds ``selectivity``
    rows (task accuracy - control accuracy) and, per seed, a ``control_key_seen_share`` row
    (``control`` True, layer -1, split ``param``: the share of test examples whose key occurs
    among the training examples). Extra keyword arguments go to :class:`ProbeConfig`. Returns the DataFrame of
    :func:`probe_arrays` (several modes can be concatenated and passed to :func:`summarise`).
    """
    if isinstance(task, str):
        task = build_task(corpus, task)
    cfg = ProbeConfig(probe=probe, pooling=pooling, **config)
    feats, offsets, layer_ids, _ = layer_features(store_or_model, corpus, layers)
    df = probe_arrays(feats, offsets, task, mode=mode, seeds=seeds, layer_ids=layer_ids, config=cfg,
                      split_seed=split_seed, fixed_weights=fixed_weights)
    if not control:
        return df
    from bertology.probes.probing.controls import control_key_seen_share, control_task, selectivity

    words = task.words or [list(s.words) for s in corpus.sentences]
    frames = [df]
    seen = []
    for seed in seeds:
        ctask = control_task(task, words, seed=seed, key=control_key)
        frames.append(probe_arrays(feats, offsets, ctask, mode=mode, seeds=[seed],
                                   layer_ids=layer_ids, config=cfg, split_seed=split_seed,
                                   fixed_weights=fixed_weights, control=True))
        split = split_by_sentence(task, seed=seed if split_seed is None else split_seed)
        seen.append({"task": task.name, "mode": mode, "probe": cfg.probe, "pooling": cfg.pooling,
                     "control": True, "layer": -1, "seed": seed, "split": "param",
                     "metric": "control_key_seen_share",
                     "value": control_key_seen_share(task, words, split, key=control_key)})
    out = pd.concat(frames, ignore_index=True)
    out["task"] = task.name  # control rows carry the task's name, flagged by `control`
    return pd.concat([out, selectivity(out), pd.DataFrame(seen, columns=SCORE_COLUMNS)], ignore_index=True)


# --- summaries ----------------------------------------------------------------------------------

def expected_layer(weights: Sequence[float], layers: Sequence[int] | None = None) -> float:
    """Centre of gravity ``E_s[l] = sum_l l * s_l / sum_l s_l`` of mix weights ``[L]``."""
    w = np.asarray(weights, dtype=float)
    l = np.arange(len(w)) if layers is None else np.asarray(layers, dtype=float)
    return float((l * w).sum() / w.sum())


def cumulative_deltas(scores: Sequence[float]) -> np.ndarray:
    """Differential scores ``Delta(l) = score(P(l)) - score(P(l-1))`` for ``l = 1..L-1`` ``[L-1]``."""
    s = np.asarray(scores, dtype=float)
    return s[1:] - s[:-1]


def cumulative_expected_layer(scores: Sequence[float], layers: Sequence[int] | None = None,
                              clip_negative: bool = False) -> float:
    """``E_Delta[l] = sum_l l * Delta(l) / sum_l Delta(l)`` from cumulative scores ``[L]`` (l >= 1).

    Tenney et al. (2019a): the raw differentials ``Delta(l) = score(l) - score(l-1)``, negative
    ones included (the default). ``sum_l Delta(l)`` telescopes to ``score(L-1) - score(0)``; when
    it is ``<= 0`` (no net gain over layer 0) the expected layer is undefined and NaN is returned.
    With negative differentials the value may fall outside ``[1, L-1]``.

    ``clip_negative=True`` (the workbench's earlier definition): negative differentials count as 0,
    so the expected layer stays inside the layer range; NaN when no layer adds anything.
    """
    delta = cumulative_deltas(scores)
    if clip_negative:
        delta = np.clip(delta, 0, None)
    l = np.arange(1, len(delta) + 1) if layers is None else np.asarray(layers, dtype=float)[1:]
    total = delta.sum()
    return float((l * delta).sum() / total) if total > 0 else float("nan")


def confidence_intervals(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds with a 95% normal interval: columns ``[...keys], mean, sd, n, ci95``
    (``ci95 = 1.96 * sd / sqrt(n)``), keys = every column except ``seed`` and ``value``."""
    from bertology.results import mean_ci

    return mean_ci(df, [c for c in df.columns if c not in ("seed", "value")])


def summarise(df: pd.DataFrame, metric: str = "accuracy", split: str = "test",
              clip_negative: bool = False) -> pd.DataFrame:
    """Tenney-style Table 1 from :func:`probe_layers` rows of several modes.

    One row per task: ``best_layer``, ``best_layer_score`` (+ ``best_layer_ci95``), ``expected_layer_mix``
    (E_s[l] of the mean mix weights), ``mix_score`` (+ ``mix_ci95``), ``expected_layer_cumulative``
    (E_Delta[l] from the mean cumulative scores over seeds, :func:`cumulative_expected_layer` with
    ``clip_negative``; default the paper's raw differentials). Missing modes give NaN. Control rows
    are ignored.
    """
    d = df[~df["control"].astype(bool)] if "control" in df else df
    rows = []
    for task, t in d.groupby("task"):
        row: dict[str, Any] = {"task": task}
        scores = t[(t["metric"] == metric) & (t["split"] == split)]
        per = scores[scores["mode"] == "per_layer"].groupby("layer")["value"]
        if len(per):
            mean, ci = per.mean(), 1.96 * per.std().fillna(0) / np.sqrt(per.count())
            best = int(mean.idxmax())
            row.update(best_layer=best, best_layer_score=float(mean[best]), best_layer_ci95=float(ci[best]))
        mix = scores[scores["mode"] == "mix"]["value"]
        if len(mix):
            row.update(mix_score=float(mix.mean()),
                       mix_ci95=float(1.96 * (mix.std() if len(mix) > 1 else 0) / np.sqrt(len(mix))))
        w = t[(t["mode"] == "mix") & (t["metric"] == "mix_weight")].groupby("layer")["value"].mean()
        if len(w):
            row["expected_layer_mix"] = expected_layer(w.values, w.index.values)
        cum = scores[scores["mode"] == "cumulative"].groupby("layer")["value"].mean().sort_index()
        if len(cum) > 1:
            row["expected_layer_cumulative"] = cumulative_expected_layer(cum.values, cum.index.values,
                                                                         clip_negative=clip_negative)
        rows.append(row)
    cols = ["task", "best_layer", "best_layer_score", "best_layer_ci95", "expected_layer_mix",
            "mix_score", "mix_ci95", "expected_layer_cumulative"]
    return pd.DataFrame(rows).reindex(columns=cols)


# --- scikit-learn estimator ---------------------------------------------------------------------

class EdgeProbe(ClassifierMixin, BaseEstimator):
    """A single probe as a scikit-learn classifier.

    ``X``: ``[n_examples, n_features]`` already pooled span features (e.g. mean-pooled span 1,
    concatenated with span 2 for two-span tasks); ``y``: ``[n_examples]`` labels of any type.
    A random ``validation_fraction`` of the training rows drives early stopping.
    """

    def __init__(self, probe: str = "mlp", hidden_dim: int = 256, proj_dim: int = 256,
                 dropout: float = 0.2, lr: float = 1e-3, weight_decay: float = 0.0,
                 batch_size: int = 256, max_epochs: int = 100, patience: int = 5,
                 validation_fraction: float = 0.1, standardize: bool = True,
                 random_state: int | None = 0):
        self.probe = probe
        self.hidden_dim = hidden_dim
        self.proj_dim = proj_dim
        self.dropout = dropout
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.standardize = standardize
        self.random_state = random_state

    def _config(self) -> ProbeConfig:
        return ProbeConfig(probe=self.probe, pooling="mean", proj_dim=self.proj_dim,
                           hidden_dim=self.hidden_dim, dropout=self.dropout, lr=self.lr,
                           weight_decay=self.weight_decay, batch_size=self.batch_size,
                           max_epochs=self.max_epochs, patience=self.patience,
                           standardize=self.standardize)

    def _data(self, X: np.ndarray) -> SpanFeatures:
        X = np.asarray(X, dtype=np.float32)
        if self.standardize:
            X = (X - self.mean_) * self.scale_       # training-set statistics
        feats = np.ascontiguousarray(X, dtype=np.float32)[None]           # [1, n, d]
        n = feats.shape[1]
        tokens = np.arange(n, dtype=np.int64).reshape(n, 1, 1)
        return SpanFeatures(feats, tokens, np.ones((n, 1, 1), dtype=bool), False, "cpu")

    def fit(self, X: Any, y: Any) -> "EdgeProbe":
        X, y = validate_data(self, X, y, dtype=np.float32)
        check_classification_targets(y)
        self.classes_, y_ids = np.unique(y, return_inverse=True)
        self.mean_ = X.mean(0).astype(np.float32)
        self.scale_ = (1.0 / (X.std(0) + 1e-6)).astype(np.float32)
        n = len(X)
        seed = 0 if self.random_state is None else int(self.random_state)
        order = np.random.default_rng(seed).permutation(n)
        n_dev = int(round(self.validation_fraction * n)) if n >= 10 else 0
        dev, train = (order[:n_dev], order[n_dev:]) if n_dev else (order, order)
        fit = fit_joint(self._data(X), y_ids, train, dev, n_labels=len(self.classes_),
                        mixing=np.ones((1, 1), dtype=bool), learned_mix=False,
                        config=self._config(), seed=seed)
        self.model_ = fit.model
        self.n_epochs_ = fit.epochs
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float32, reset=False)
        logits = predict_logits(self.model_, self._data(X), np.arange(len(X)))[0]
        return torch.softmax(logits, -1).numpy().astype(np.float64)

    def predict(self, X: Any) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]


def pooled_features(features: np.ndarray, sentence_offsets: np.ndarray, task: EdgeTask) -> np.ndarray:
    """Mean-pooled span features for :class:`EdgeProbe`: ``[n_examples, S * D]`` from ``[n_words, D]``."""
    tokens, mask = span_index(task, sentence_offsets)
    g = np.asarray(features)[tokens]                               # [n, S, M, D]
    pooled = (g * mask[..., None]).sum(2) / mask.sum(2)[..., None]
    return pooled.reshape(len(tokens), -1).astype(np.float32)


__all__ = ["ProbeConfig", "JointProbes", "JointFit", "EdgeProbe", "fit_joint", "predict_logits",
           "span_index", "mixing_spec", "classification_metrics", "probe_arrays", "probe_layers",
           "expected_layer", "cumulative_deltas", "cumulative_expected_layer",
           "confidence_intervals", "summarise", "pooled_features"]
