"""Training ``P`` probes jointly: :func:`fit_joint` and its two solvers.

Linear probes whose pooled inputs are fixed (width-1 spans, or mean pooling; per-layer or fixed
mixing) train full-batch with L-BFGS on the L2-regularised logistic loss (:mod:`._lbfgs`);
everything else with minibatch Adam (:func:`_fit_adam`, fused update where torch has it). Both
stop early on dev loss, each probe keeping its own best parameters, and compute their matmuls in
bfloat16 (float32 parameters, optimiser state, losses and predictions) only where a measured
micro-benchmark finds bfloat16 faster than float32 (``precision="auto"``,
:func:`bertology.runtime.resolve_precision`: AMX / AVX512-BF16 CPUs, GPUs); elsewhere in float32.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from bertology.probes.probing._config import ProbeConfig
from bertology.probes.probing._lbfgs import _fit_lbfgs, _uses_lbfgs
from bertology.probes.probing._model import JointProbes
from bertology.probes.probing._spans import GATHER_BYTES, SpanFeatures
from bertology.progress import progress_bar
from bertology.runtime import release_free_memory, resolve_precision

# buffers with a leading probe axis that describe the mixing, not learned state
_MIXING_BUFFERS = ("layer_of_probe", "mix_mask", "fixed_weights")


@dataclass
class JointFit:
    """Result of :func:`fit_joint`: the probes (best dev state) and training facts."""

    model: JointProbes
    mix_weights: np.ndarray  # [P, L] softmax weights (one-hot for per-layer probes)
    gamma: np.ndarray  # [P]
    epochs: int
    best_dev_loss: np.ndarray  # [P]
    seconds: float


def _loss(logits: torch.Tensor, y: torch.Tensor, multilabel: bool) -> torch.Tensor:
    """Per-probe mean loss ``[P]`` for logits ``[P, B, K]``."""
    if multilabel:
        return (
            F.binary_cross_entropy_with_logits(logits, y.expand(logits.shape[0], -1, -1), reduction="none")
            .sum(-1)
            .mean(-1)
        )
    P, B, K = logits.shape
    return F.cross_entropy(logits.reshape(P * B, K), y.repeat(P), reduction="none").view(P, B).mean(1)


def predict_logits(
    model: JointProbes,
    data: SpanFeatures,
    idx: np.ndarray | torch.Tensor,
    batch_size: int = 2048,
    active: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits ``[P, n, K]`` for examples ``idx`` (``active``: only those probes), ``batch_size``
    examples at a time, or fewer where a batch's features would pass ~64 MB (BERT-large's 25 x 1024
    features: 625 examples)."""
    model.eval()
    batch_size = int(max(32, min(batch_size, GATHER_BYTES // data.example_bytes)))
    idx = torch.as_tensor(idx, device=data.device)
    outs = []
    with torch.no_grad():
        for start in range(0, len(idx), batch_size):
            g, m = data(idx[start : start + batch_size])
            outs.append(model(g, m, active))
    return torch.cat(outs, dim=1) if outs else torch.zeros(0)


def fit_joint(
    data: SpanFeatures,
    y: np.ndarray,
    train_idx: np.ndarray,
    dev_idx: np.ndarray,
    *,
    n_labels: int,
    mixing: np.ndarray,
    learned_mix: bool,
    config: ProbeConfig,
    seed: int,
    multilabel: bool = False,
    progress: str | None = None,
) -> JointFit:
    """Train ``P = len(mixing)`` probes jointly, early stopping on dev loss.

    Linear probes on fixed pooled inputs (width-1 or mean-pooled spans, per-layer or fixed mixing)
    train full-batch with L-BFGS on the L2-regularised logistic loss (``config.solver``); all
    others with minibatch Adam.

    ``y``: ``[n]`` int label ids, or ``[n, K]`` 0/1 for multi-label. Each probe keeps the
    parameters of its own best dev epoch; training stops once every probe has run out of patience.
    ``progress``: the description of a progress bar over epochs (:func:`bertology.progress.progress_bar`;
    ``None``: no bar).
    """
    t0 = time.perf_counter()
    device = data.device
    L, _, D = data.shape
    P, S = len(mixing), data.tokens.shape[1]
    model = JointProbes(P, L, D, S, n_labels, mixing, learned_mix, config, seed).to(device)
    yt = torch.as_tensor(y, device=device)
    yt = yt.float() if multilabel else yt.long()
    train = torch.as_tensor(train_idx, device=device)
    dev = torch.as_tensor(dev_idx, device=device)
    if _uses_lbfgs(config, learned_mix, data.tokens.shape[2]):
        epochs, best_loss = _fit_lbfgs(data, yt, train, dev, model, mixing, config, multilabel)
        model.eval()
        weights = (
            np.eye(L, dtype=np.float32)[np.asarray(mixing).argmax(1)]
            if model.one_hot
            else np.asarray(mixing, dtype=np.float32)
        )
        gamma = np.ones(P, dtype=np.float32)
    else:
        epochs, best_loss = _fit_adam(data, yt, train, dev, model, config, seed, multilabel, progress)
        weights, gamma = _mixing_of(model)
    return JointFit(model, weights, gamma, epochs, best_loss.cpu().numpy(), time.perf_counter() - t0)


# --- minibatch Adam -------------------------------------------------------------------------------


def _fused(device: torch.device) -> dict[str, Any]:
    """``fused=True`` for Adam where torch has the fused kernel (one pass over all parameters
    instead of a dozen ops per tensor: the update dominates small probes' steps on a CPU)."""
    return {"fused": True} if device.type in ("cpu", "cuda") else {}


def _adam(model: JointProbes, config: ProbeConfig, device: torch.device) -> torch.optim.Adam:
    """Adam over the probes' parameters; the scalar-mix logits and gamma learn at ``mix_lr``
    without weight decay."""
    mix_params = [p for n, p in model.named_parameters() if n in ("mix_logits", "gamma")]
    other = [p for n, p in model.named_parameters() if n not in ("mix_logits", "gamma")]
    groups = [{"params": other}] + (
        [{"params": mix_params, "lr": config.mix_lr, "weight_decay": 0.0}] if mix_params else []
    )
    return torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay, **_fused(device))


def _batch_size(data: SpanFeatures, n_probes: int, config: ProbeConfig) -> int:
    """``config.batch_size``, lowered so that a gathered batch stays around a few tens of MB."""
    L, _, D = data.shape
    _, S, M = data.tokens.shape
    per_example = (L + 2 * n_probes) * S * M * max(D, config.proj_dim) * 4
    return int(max(32, min(config.batch_size, 64e6 // per_example)))


def _fit_adam(
    data: SpanFeatures,
    yt: torch.Tensor,
    train: torch.Tensor,
    dev: torch.Tensor,
    model: JointProbes,
    config: ProbeConfig,
    seed: int,
    multilabel: bool,
    progress: str | None = None,
) -> tuple[int, torch.Tensor]:
    """Train ``model`` with minibatch Adam, early stopping on dev loss per probe.

    An epoch passes over the training examples (in a fresh order drawn from ``seed + 1``) at
    least ``min_batches_per_epoch`` batches' worth, then scores dev. A probe keeps the parameters
    of its best dev epoch; once out of patience it stops costing compute, and training ends when
    every probe is. ``model`` is left in its best state, in eval mode. Returns (epochs run, best
    dev loss ``[P]``).
    """
    device = data.device
    P = len(model.b2)
    opt = _adam(model, config, device)
    # bfloat16 matmuls (autocast: parameters, gradients and Adam's state stay float32) only where
    # measured faster; the loss, dev scores and predictions are float32
    lowp = resolve_precision(config.precision, device, what="MLP probes")
    gen = torch.Generator().manual_seed(seed + 1)
    step = min(_batch_size(data, P, config), len(train))
    repeats = max(1, math.ceil(config.min_batches_per_epoch * step / max(len(train), 1)))
    best_loss = torch.full((P,), float("inf"), device=device)
    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    stale = torch.zeros(P, dtype=torch.long, device=device)
    active: torch.Tensor | None = None  # probes still training (None: all)
    epoch = 0
    bar = progress_bar(total=config.max_epochs, desc=progress or "", unit="epoch", enabled=progress is not None)
    for epoch in range(1, config.max_epochs + 1):  # noqa: B007  (returned: the epochs run)
        # train: one pass (or several, for tiny training sets) in a fresh order
        model.train()
        order = torch.cat([train[torch.randperm(len(train), generator=gen).to(device)] for _ in range(repeats)])
        for start in range(0, len(order), step):
            batch = order[start : start + step]
            g, m = data(batch, lowp)
            with torch.autocast(device.type, dtype=lowp or torch.bfloat16, enabled=lowp is not None):
                logits = model(g, m, active)
            loss = _loss(logits.float(), yt[batch], multilabel).sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        # evaluate on dev; keep each improved probe's parameters
        dev_loss = torch.full((P,), float("inf"), device=device)
        rows = slice(None) if active is None else active
        dev_loss[rows] = _loss(predict_logits(model, data, dev, active=active), yt[dev], multilabel)
        improved = dev_loss < best_loss - 1e-4
        best_loss = torch.where(improved, dev_loss, best_loss)
        stale = torch.where(improved, torch.zeros_like(stale), stale + 1)
        if improved.any():
            _keep_improved(best_state, model, improved)
        # probes out of patience stop costing compute (their best state is kept)
        running = stale < config.patience
        active = None if bool(running.all()) else torch.nonzero(running).flatten()
        if data.cached is None:
            # batches read from the spill file come and go in several sizes (training, dev, the last
            # of each): hand the freed pages back once an epoch, or the heap keeps them
            release_free_memory()
        bar.update()
        bar.set_postfix(training=f"{int(running.sum())}/{P} probes", refresh=False)
        if bool((stale >= config.patience).all()):
            break
    bar.close()
    model.load_state_dict(best_state)
    model.eval()
    return epoch, best_loss


def _keep_improved(best_state: dict[str, torch.Tensor], model: JointProbes, improved: torch.Tensor) -> None:
    """Copy the current parameters of the probes marked in ``improved [P]`` into ``best_state``."""
    P = len(improved)
    for k, v in model.state_dict().items():
        if v.dim() and v.shape[0] == P and not k.endswith(_MIXING_BUFFERS):
            sel = improved.view(-1, *([1] * (v.dim() - 1)))
            best_state[k] = torch.where(sel, v.detach(), best_state[k])


def _mixing_of(model: JointProbes) -> tuple[np.ndarray, np.ndarray]:
    """The trained probes' layer weights ``[P, L]`` (one-hot for per-layer probes) and gamma ``[P]``."""
    P, L = len(model.b2), model.n_layers
    with torch.no_grad():
        if model.one_hot:
            return np.eye(L, dtype=np.float32)[model.layer_of_probe.cpu().numpy()], np.ones(P, dtype=np.float32)
        if hasattr(model, "fixed_weights"):
            return model.fixed_weights.cpu().numpy(), np.ones(P, dtype=np.float32)
        return model.layer_weights().cpu().numpy(), model.gamma.cpu().numpy()
