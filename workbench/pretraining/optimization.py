"""The optimiser and learning-rate schedule of pretraining: AdamW with BERT's weight-decay groups
(torch's fused kernel for parameters on a GPU, its ``foreach`` one on the CPU), linear warm-up then
linear decay to 0 at ``max_steps``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from bertology.errors import ConfigError
from bertology.pretraining.config import PretrainConfig

__all__ = ["make_optimizer", "OptimizerConfig", "adamw_implementation", "linear_schedule", "make_scheduler"]


class OptimizerConfig(Protocol):
    """The config fields :func:`make_optimizer` reads (``PretrainConfig``'s and ``FinetuneConfig``'s;
    the latter's ``learning_rate`` is None only until its mode's default is filled in)."""

    @property
    def learning_rate(self) -> float | None: ...

    @property
    def weight_decay(self) -> float: ...

    @property
    def adam_beta1(self) -> float: ...

    @property
    def adam_beta2(self) -> float: ...

    @property
    def adam_eps(self) -> float: ...


def adamw_implementation(device: torch.device | str) -> dict[str, bool]:
    """The AdamW kernel for parameters on ``device``: ``{"fused": True}`` on CUDA (one kernel for
    every parameter), ``{"foreach": True}`` elsewhere (the CPU's, as before)."""
    return {"fused": True} if torch.device(device).type == "cuda" else {"foreach": True}


def make_optimizer(model: torch.nn.Module, cfg: OptimizerConfig) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases and LayerNorm weights (as in BERT); the kernel of
    :func:`adamw_implementation` for the parameters' device."""
    if cfg.learning_rate is None:
        raise ConfigError("config field 'learning_rate': not set")
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    devices = {p.device.type for p in decay + no_decay}
    kernel = adamw_implementation("cuda" if devices == {"cuda"} else "cpu")
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.learning_rate,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        eps=cfg.adam_eps,
        **kernel,
    )


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    """LR multiplier: linear warm-up over ``warmup`` steps, then linear decay to 0 at ``total``."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: PretrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """The config's schedule (:func:`linear_schedule` to ``max_steps``), stepped once per optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(cfg.warmup_steps, cfg.max_steps))
