"""Compute accounting for comparing pretraining objectives at equal cost.

ELECTRA's claim is about representations "given the same model size, data, and compute": a
comparison has to charge each objective for everything it runs per step (ELECTRA's generator, a
distilled student's teacher, SpanBERT's boundary head). Two counts:

- :func:`measure_step_flops` (the one budgets use): one optimizer step of the real loss module
  (forward + backward, full-length sequences, the config's batch) under
  ``torch.utils.flop_counter.FlopCounterMode``, which counts matrix products (linear layers,
  attention score and value products, scaled-dot-product attention) and not element-wise work
  (softmax, GeLU, LayerNorm, embedding look-ups): a few percent of the total at these sizes.
- :func:`analytic_step_flops`: the textbook count, ``2 x`` multiply-adds forward and ``3 x``
  forward for forward + backward (``6 N`` per token for ``N`` non-embedding weights), plus the
  ``T x T`` attention products and the output layers at the positions they are computed on; the
  teacher of a distillation counts forward only. A cross-check of the measurement (tested).

Model FLOPs utilisation (MFU) in the trainers' log rows: the model FLOPs of the tokens trained per
second on one device over that device's peak. The FLOPs per token: pretraining,
:func:`analytic_step_flops` over the step's full-length tokens; fine-tuning,
:func:`classifier_flops_per_token`. The peak: :func:`peak_flops` (dense bfloat16 of known GPUs,
or ``BERTOLOGY_PEAK_FLOPS``; none on the CPU, where the row has no ``mfu``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from bertology.errors import ConfigError
from bertology.pretraining.masking import IGNORE_INDEX
from bertology.pretraining.objectives import build_model, generator_config, make_loss, pair_task

__all__ = [
    "parameter_counts",
    "measure_step_flops",
    "analytic_step_flops",
    "steps_for_budget",
    "synthetic_batch",
    "GPU_PEAK_FLOPS",
    "PEAK_FLOPS_ENV",
    "gpu_peak_flops",
    "peak_flops",
    "pretraining_flops_per_token",
    "classifier_flops_per_token",
]

_LOOKUP_TABLES = ("word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight")


def parameter_counts(model: torch.nn.Module) -> dict[str, int]:
    """Unique parameters (tied ones once) of a model being trained and of the encoder it saves.

    ``trained``: everything the optimizer updates (ELECTRA: generator + discriminator; SpanBERT:
    with the SBO head); ``encoder``: the base encoder the registry loads (``model.bert`` /
    ``model.albert`` / the ELECTRA discriminator's ``model.electra``); ``encoder_embedding``: its
    look-up tables (word, position, segment); ``encoder_non_embedding``: the rest (an ALBERT's
    ``E -> H`` projection included).
    """

    def unique(params) -> list[torch.nn.Parameter]:
        seen, out = set(), []
        for p in params:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
        return out

    encoder = getattr(model, "base_model", None)
    if encoder is None or encoder is model:
        encoder = next(getattr(model, n) for n in ("electra", "bert", "albert") if hasattr(model, n))
    named = dict(encoder.named_parameters())
    emb = sum(p.numel() for n, p in named.items() if n.endswith(_LOOKUP_TABLES))
    total_encoder = sum(p.numel() for p in unique(named.values()))
    return {
        "trained": sum(p.numel() for p in unique(model.parameters())),
        "encoder": total_encoder,
        "encoder_embedding": emb,
        "encoder_non_embedding": total_encoder - emb,
    }


def synthetic_batch(cfg: Any, vocab_size: int, seed: int = 0) -> dict[str, torch.Tensor | None]:
    """A full-length batch ``[batch_size, max_seq_len]`` with ``round(mlm_probability * (T - 2))``
    masked positions per row in one contiguous span (what the FLOPs depend on: shapes and the
    number of masked positions, not the token values)."""
    B, T = cfg.batch_size, cfg.max_seq_len
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (B, T), generator=g)
    n_masked = max(1, round(cfg.mlm_probability * (T - 2)))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 1 : 1 + n_masked] = ids[:, 1 : 1 + n_masked]
    types = torch.zeros_like(ids)
    if pair_task(cfg.objective):
        types[:, T // 2 :] = 1
    return {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": types,
        "labels": labels,
        "pair_labels": torch.zeros(B, dtype=torch.long) if pair_task(cfg.objective) else None,
    }


def measure_step_flops(cfg: Any, vocab_size: int, pad_token_id: int = 0) -> dict[str, float]:
    """FLOPs of one optimizer step of ``cfg``'s objective, counted by ``FlopCounterMode`` on one
    forward + backward of its loss module over :func:`synthetic_batch`, times ``grad_accum_steps``
    (one process; a DDP run spends this per process).

    Returns ``flops_per_step``, ``tokens_per_step``, ``flops_per_token`` and the
    :func:`parameter_counts` (``params_*``).
    """
    from torch.utils.flop_counter import FlopCounterMode

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, vocab_size, pad_token_id)
        loss_module = make_loss(cfg, model, "cpu")
        model.train()
        b = synthetic_batch(cfg, vocab_size, cfg.seed)
        with FlopCounterMode(display=False) as counter:
            loss, _, _ = loss_module(
                b["input_ids"], b["attention_mask"], b["token_type_ids"], b["labels"], b["pair_labels"]
            )
            loss.backward()
    per_step = float(counter.get_total_flops()) * cfg.grad_accum_steps
    tokens = cfg.batch_size * cfg.max_seq_len * cfg.grad_accum_steps
    return {
        "flops_per_step": per_step,
        "tokens_per_step": tokens,
        "flops_per_token": per_step / tokens,
        **{f"params_{k}": v for k, v in parameter_counts(model).items()},
    }


def _encoder_forward(layers: int, hidden: int, intermediate: int, seq_len: int) -> float:
    """Forward FLOPs per token of ``layers`` transformer layers: Q, K, V, O (``4 H^2``), the FFN
    (``2 H I``) and the two ``T x T`` attention products (``2 T H``), 2 FLOPs per multiply-add."""
    return 2.0 * layers * (4 * hidden * hidden + 2 * hidden * intermediate + 2 * seq_len * hidden)


def analytic_step_flops(cfg: Any, vocab_size: int, teacher_config: Any = None) -> float:
    """The textbook FLOPs of one optimizer step of ``cfg`` (see the module docstring): trained
    parts ``3 x`` forward, a distillation teacher ``1 x``; BERT's MLM transform ``H x H`` + decoder
    ``H x V`` at the masked positions, ALBERT's ``H x E`` + ``E x V`` and its ``E x H`` input
    projection on every token."""
    T = cfg.max_seq_len
    tokens = cfg.batch_size * T * cfg.grad_accum_steps
    targets = cfg.batch_size * max(1, round(cfg.mlm_probability * (T - 2))) * cfg.grad_accum_steps
    H, E = cfg.hidden_size, cfg.embedding_size or cfg.hidden_size
    encoder = _encoder_forward(cfg.num_hidden_layers, H, cfg.intermediate_size, T) * tokens
    if cfg.objective == "electra":
        Hg, _, Ig = generator_config(cfg)
        disc = encoder + 2.0 * tokens * (H * H + H) + (2.0 * tokens * E * H if E != H else 0.0)
        gen = (
            _encoder_forward(cfg.num_hidden_layers, Hg, Ig, T) * tokens
            + 2.0 * tokens * E * Hg
            + 2.0 * targets * (Hg * E + E * vocab_size)
        )
        return 3.0 * (disc + gen)
    if cfg.architecture == "albert":
        head = 2.0 * targets * (H * E + E * vocab_size) + 2.0 * tokens * E * H
    else:
        head = 2.0 * targets * (H * H + H * vocab_size)
    if cfg.objective == "mlm+sbo":
        head += 2.0 * targets * (3 * H * H + H * H + H * vocab_size)
    if pair_task(cfg.objective):  # pooler H x H and the 2-way pair classifier, once per sequence
        head += 2.0 * cfg.batch_size * cfg.grad_accum_steps * (H * H + 2 * H)
    trained = 3.0 * (encoder + head)
    if cfg.objective != "distill":
        return trained
    if cfg.distill_positions == "all":  # the student's logits on every token, not only the masked ones
        trained += (
            3.0
            * 2.0
            * (tokens - targets)
            * ((H * E + E * vocab_size) if cfg.architecture == "albert" else (H * H + H * vocab_size))
        )
    t = teacher_config
    Ht = t.hidden_size
    Et = getattr(t, "embedding_size", None) or Ht
    teacher = _encoder_forward(t.num_hidden_layers, Ht, t.intermediate_size, T) * tokens
    teacher += 2.0 * tokens * ((Ht * Et + Et * vocab_size + Et * Ht) if Et != Ht else (Ht * Ht + Ht * vocab_size))
    return trained + teacher


def steps_for_budget(budget_flops: float, flops_per_step: float) -> int:
    """Optimizer steps a budget buys: ``floor(budget / flops_per_step)`` (at least 1)."""
    if flops_per_step <= 0 or not math.isfinite(budget_flops):
        raise ValueError(f"flops_per_step must be > 0 and the budget finite (got {flops_per_step}, {budget_flops})")
    return max(1, int(budget_flops // flops_per_step))


# --------------------------------------------------------------------------- MFU

# Dense bfloat16 tensor-core peaks (FLOP/s, no sparsity) from the vendors' data sheets, matched in
# order against torch.cuda.get_device_name (first match wins).
GPU_PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIE", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # H100 SXM ("H100 80GB HBM3")
    ("H200", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
)
PEAK_FLOPS_ENV = "BERTOLOGY_PEAK_FLOPS"


def gpu_peak_flops(name: str) -> float | None:
    """The dense bfloat16 peak of the GPU called ``name`` (e.g. ``"NVIDIA H100 80GB HBM3"``), None if unknown."""
    upper = name.upper()
    return next((peak for key, peak in GPU_PEAK_FLOPS if key in upper), None)


def peak_flops(device: torch.device | str) -> float | None:
    """The peak FLOP/s of one ``device`` MFU is measured against: ``$BERTOLOGY_PEAK_FLOPS`` when set
    (any device, e.g. ``989e12``), else :func:`gpu_peak_flops` of a CUDA device, else None (CPU)."""
    env = os.environ.get(PEAK_FLOPS_ENV, "").strip()
    if env:
        try:
            value = float(env)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"environment variable {PEAK_FLOPS_ENV}: expected FLOP/s > 0 (e.g. 989e12), got {env!r}")
        return value
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return gpu_peak_flops(torch.cuda.get_device_name(device))


def pretraining_flops_per_token(cfg: Any, vocab_size: int, loss_module: torch.nn.Module | None = None) -> float:
    """Model FLOPs of training on one token: :func:`analytic_step_flops` (a distillation teacher's
    config from ``loss_module.teacher``) over the step's ``batch_size x max_seq_len x grad_accum_steps``."""
    teacher = getattr(getattr(loss_module, "teacher", None), "config", None)
    tokens = cfg.batch_size * cfg.max_seq_len * cfg.grad_accum_steps
    return analytic_step_flops(cfg, vocab_size, teacher) / tokens


def classifier_flops_per_token(model: torch.nn.Module, seq_len: int) -> float:
    """Model FLOPs of one fine-tuning token of a classifier (the textbook count, as
    :func:`analytic_step_flops`): forward ``2 x`` the weights of its matrix products (look-up
    tables aside) plus the ``T x T`` attention products at ``T = seq_len``; backward the same again
    for the activation gradients when any encoder parameter trains (not for a frozen encoder), plus
    ``2 x`` the trainable matrix weights for their gradients."""
    lookups = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    seen: set[int] = set()
    weights = trainable = 0
    for p in model.parameters():
        if id(p) in seen or id(p) in lookups or p.ndim < 2:
            continue
        seen.add(id(p))
        weights += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    config = getattr(model, "config", None)
    layers, hidden = getattr(config, "num_hidden_layers", 0), getattr(config, "hidden_size", 0)
    forward = 2.0 * weights + 4.0 * layers * seq_len * hidden
    encoder = getattr(model, "base_model", model)
    encoder_trains = any(p.requires_grad for p in encoder.parameters())
    return forward + (forward if encoder_trains else 0.0) + 2.0 * trainable
