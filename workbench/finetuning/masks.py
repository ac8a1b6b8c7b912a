"""Weight masks for fine-tuning a sparse sub-network: magnitude and random masks over the encoder's
weight matrices, kept at zero while the rest trains (the lottery-ticket experiments, Frankle &
Carbin 2019; Chen et al. 2020 for pre-trained BERT).

What is prunable: the weight matrices of every ``nn.Linear`` inside the encoder's layer list (the
architecture table's ``layers``: attention projections and both feed-forward projections) and, with
``include_pooler``, the pooler's (``bert.pooler.dense.weight`` for BERT: Chen et al.'s released
``LT_glue.py`` prunes it with the encoder; a token classifier has no pooler); embeddings, biases,
LayerNorms and the classifier stay dense. A mask is ``{parameter name: bool tensor}`` (True = kept),
named as in ``model.named_parameters()`` of the classifier, saved as a safetensors file (uint8).

:func:`apply_weight_masks` zeroes the removed weights in place and registers a gradient hook that
zeroes their gradients, so clipping sees only the sub-network's gradients, AdamW never moves them
(zero gradient, zero moments, decoupled decay of 0 is 0) and every checkpoint stores them as 0.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertology.architectures import architecture_for, get_module
from bertology.errors import ConfigError, ModelError

__all__ = [
    "prunable_weight_names",
    "pooler_weight_names",
    "maskable_parameter_names",
    "magnitude_masks",
    "MAGNITUDE_SCOPES",
    "random_masks",
    "random_masks_like",
    "structured_masks",
    "mask_sparsity",
    "weight_sparsity",
    "save_masks",
    "load_masks",
    "apply_weight_masks",
    "Masks",
]

Masks = dict[str, torch.Tensor]


def prunable_weight_names(model: nn.Module, *, include_pooler: bool = False) -> list[str]:
    """``<module>.weight`` names (``model.named_parameters()`` order) of every ``nn.Linear`` in the
    encoder's layer list, then (``include_pooler``) those of the pooler (:func:`pooler_weight_names`)."""
    arch = architecture_for(model)
    base = getattr(model, "base_model", model)
    layers = get_module(base, arch.layers)
    if layers is None:
        raise ModelError(f"{type(model).__name__}: no layer list at {arch.layers!r}")
    inside = {id(m) for m in layers.modules() if isinstance(m, nn.Linear)}
    names = [f"{name}.weight" for name, m in model.named_modules() if id(m) in inside]
    if not names:
        raise ModelError(f"{type(model).__name__}: no Linear layer in the encoder's layers")
    return names + (pooler_weight_names(model) if include_pooler else [])


def pooler_weight_names(model: nn.Module) -> list[str]:
    """``<module>.weight`` names of the ``nn.Linear`` layers of the base model's pooler (BERT's
    ``bert.pooler.dense.weight``); empty when the model has none (token classifiers, ModernBERT)."""
    pooler = getattr(getattr(model, "base_model", model), "pooler", None)
    if not isinstance(pooler, nn.Module):
        return []
    inside = {id(m) for m in pooler.modules() if isinstance(m, nn.Linear)}
    return [f"{name}.weight" for name, m in model.named_modules() if id(m) in inside]


def maskable_parameter_names(model: nn.Module) -> list[str]:
    """What a mask file may name: the weights of :func:`prunable_weight_names` and the biases of the
    same Linear layers (a structured mask removes a feed-forward block's bias with its weights), and
    the pooler's weights (:func:`pooler_weight_names`)."""
    params = dict(model.named_parameters())
    names = []
    for weight in prunable_weight_names(model):
        names.append(weight)
        bias = weight[: -len("weight")] + "bias"
        if bias in params:
            names.append(bias)
    return names + pooler_weight_names(model)


def structured_masks(model: nn.Module, heads: list[tuple[int, int]], ffn_layers: list[int]) -> Masks:
    """Masks that remove whole attention heads and feed-forward blocks (Prasanna et al. 2020): head
    ``(l, h)`` by its input columns of layer ``l``'s attention output projection (the head then adds
    nothing, and no gradient reaches its query, key and value rows), the block of layer ``l`` by its
    output projection's weight and bias. Refused where layers share parameters (ALBERT)."""
    from bertology.architectures import attention_layers, ffn_outputs, num_heads

    layers = attention_layers(model)
    if len({id(layer.output) for layer in layers}) < len(layers):
        raise ModelError(
            f"{type(model).__name__}: structured masks need one module per layer (shared layers would "
            "remove a head or block at every position)"
        )
    names = {id(m): name for name, m in model.named_modules()}
    params = dict(model.named_parameters())
    out: Masks = {}
    n_heads = num_heads(model.config)
    for layer, head in heads:
        output = layers[layer].output
        width = output.in_features // n_heads
        name = f"{names[id(output)]}.weight"
        keep = out.setdefault(name, torch.ones_like(params[name], dtype=torch.bool))
        keep[:, head * width : (head + 1) * width] = False
    ffn = ffn_outputs(model)
    for layer in ffn_layers:
        module = ffn[layer]
        for kind in ("weight", "bias"):
            name = f"{names[id(module)]}.{kind}"
            if name in params:
                out[name] = torch.zeros_like(params[name], dtype=torch.bool)
    return out


def _weights(model: nn.Module, include_pooler: bool = False) -> dict[str, torch.Tensor]:
    params = dict(model.named_parameters())
    return {name: params[name] for name in prunable_weight_names(model, include_pooler=include_pooler)}


def _split(flat: torch.Tensor, weights: dict[str, torch.Tensor]) -> Masks:
    """One flat keep-vector over every weight (in ``weights``' order) cut back into per-tensor masks."""
    out, start = {}, 0
    for name, w in weights.items():
        out[name] = flat[start : start + w.numel()].view_as(w).clone()
        start += w.numel()
    return out


MAGNITUDE_SCOPES = ("global", "per_matrix")


def magnitude_masks(
    model: nn.Module,
    share: float,
    previous: Masks | None = None,
    *,
    scope: str = "global",
    include_pooler: bool = False,
) -> Masks:
    """One round of iterative magnitude pruning (Frankle & Carbin 2019): of the weights ``previous``
    keeps (all when None), remove the ``share`` with the smallest ``|w|`` -- ``round(share * kept)``,
    the count torch's ``prune.L1Unstructured`` removes from the unpruned entries (what Chen et al.'s
    code calls). ``include_pooler``: the pooler's weights are prunable too (:func:`prunable_weight_names`).

    ``scope="global"`` (the default, as Chen et al. 2020 prune pre-trained BERT) ranks every
    prunable matrix's weights together, so matrices lose different shares; ``"per_matrix"`` removes
    ``share`` of each matrix's remaining weights (layer-wise pruning, Frankle & Carbin's small
    networks). Ties at the cut are broken by position (a stable sort), so the count removed is exact.
    Returns the new masks (a subset of ``previous``)."""
    if not 0 < share < 1:
        raise ConfigError(f"magnitude_masks: share must be in (0, 1), not {share!r}")
    if scope not in MAGNITUDE_SCOPES:
        raise ConfigError(f"magnitude_masks: scope must be one of {MAGNITUDE_SCOPES}, not {scope!r}")
    weights = _weights(model, include_pooler)
    keep = {
        n: (previous[n].bool() if previous is not None else torch.ones_like(w, dtype=torch.bool))
        for n, w in weights.items()
    }
    if scope == "per_matrix":
        return {
            n: _drop_smallest(w.detach().abs().flatten().float(), keep[n].flatten(), share).view_as(w).clone()
            for n, w in weights.items()
        }
    scores = torch.cat([w.detach().abs().flatten().float() for w in weights.values()])
    alive = torch.cat([keep[n].flatten() for n in weights])
    return _split(_drop_smallest(scores, alive, share), weights)


def _drop_smallest(scores: torch.Tensor, alive: torch.Tensor, share: float) -> torch.Tensor:
    """``alive`` ``[n]`` (bool) less ``round(share * alive.sum())`` of its entries with the smallest ``scores``."""
    n_remove = int(round(share * int(alive.sum())))
    candidates = torch.nonzero(alive).flatten()
    order = torch.argsort(scores[candidates], stable=True)
    removed = torch.zeros_like(alive)
    removed[candidates[order[:n_remove]]] = True
    return alive & ~removed


def random_masks(model: nn.Module, sparsity: float, seed: int = 0, *, include_pooler: bool = False) -> Masks:
    """Random pruning at the same sparsity: exactly ``round(sparsity * total)`` of the prunable
    weights (with ``include_pooler``, the pooler's too) removed, chosen uniformly over all of them with
    ``seed`` (the baseline a ticket is compared with)."""
    if not 0 <= sparsity < 1:
        raise ConfigError(f"random_masks: sparsity must be in [0, 1), not {sparsity!r}")
    weights = _weights(model, include_pooler)
    total = sum(w.numel() for w in weights.values())
    removed = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[: int(round(sparsity * total))]
    flat = torch.ones(total, dtype=torch.bool)
    flat[removed] = False
    return _split(flat, weights)


def random_masks_like(masks: Masks, seed: int = 0) -> Masks:
    """Random pruning with as many weights removed *in each matrix* as ``masks`` removes there (the
    baseline of a per-matrix ticket): each matrix's removed positions drawn uniformly with ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, mask in masks.items():
        flat = torch.ones(mask.numel(), dtype=torch.bool)
        flat[torch.randperm(mask.numel(), generator=generator)[: mask.numel() - int(mask.sum())]] = False
        out[name] = flat.view_as(mask)
    return out


def mask_sparsity(masks: Masks) -> float:
    """Share of the masked weights that are removed."""
    total = sum(m.numel() for m in masks.values())
    return 1.0 - sum(int(m.sum()) for m in masks.values()) / max(total, 1)


def weight_sparsity(model: nn.Module, masks: Masks) -> float:
    """Share of all the prunable weight entries of ``model`` that ``masks`` removes (a mask naming
    only some tensors, e.g. a structured one, counts the others as kept; biases are not counted; the
    pooler's weights count when the mask names one of them)."""
    params = dict(model.named_parameters())
    pooler = any(name in masks for name in pooler_weight_names(model))
    names = prunable_weight_names(model, include_pooler=pooler)
    total = sum(params[n].numel() for n in names)
    removed = sum(int((~masks[n]).sum()) for n in names if n in masks)
    return removed / max(total, 1)


def save_masks(masks: Masks, path: Path) -> str:
    """Write ``masks`` (uint8 safetensors, atomically); returns the file's sha256."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    save_file({name: m.to(torch.uint8).contiguous() for name, m in masks.items()}, str(tmp))
    tmp.replace(path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_masks(path: Path, model: nn.Module) -> Masks:
    """The masks in ``path``, checked against ``model``: every name a prunable weight of it with
    its shape, values 0 / 1 (``ConfigError`` naming the file and the tensor otherwise)."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config field 'weight_mask': {path} does not exist")
    try:
        raw = load_file(str(path))
    except Exception as exc:
        raise ConfigError(f"{path}: not a safetensors mask file ({exc})") from exc
    params = dict(model.named_parameters())
    weights = {name: params[name] for name in maskable_parameter_names(model)}
    out = {}
    for name, m in raw.items():
        if name not in weights:
            raise ConfigError(
                f"{path}: tensor {name!r} is not a maskable parameter of this model (the encoder "
                "layers' Linear weights and biases)"
            )
        if tuple(m.shape) != tuple(weights[name].shape):
            raise ConfigError(
                f"{path}: tensor {name!r} has shape {tuple(m.shape)}, the weight {tuple(weights[name].shape)}"
            )
        if not bool(((m == 0) | (m == 1)).all()):
            raise ConfigError(f"{path}: tensor {name!r} holds values other than 0 and 1")
        out[name] = m.bool()
    return out


def apply_weight_masks(model: nn.Module, masks: Masks) -> list[Any]:
    """Zero the removed weights of ``model`` in place and keep their gradients at zero (see the
    module docstring); returns the hook handles."""
    params = dict(model.named_parameters())
    handles = []
    for name, keep in masks.items():
        p = params[name]
        keep = keep.to(device=p.device)
        with torch.no_grad():
            p.mul_(keep.to(p.dtype))
        handles.append(p.register_hook(_GradientMask(keep.to(p.dtype))))
    return handles


class _GradientMask:
    """A gradient hook multiplying by a 0/1 mask, which follows the gradient to its device and
    dtype (the masks are applied before a trainer moves the model, e.g. to a GPU): moved once, then
    kept there."""

    def __init__(self, factor: torch.Tensor):
        self.factor = factor

    def __call__(self, grad: torch.Tensor) -> torch.Tensor:
        if self.factor.device != grad.device or self.factor.dtype != grad.dtype:
            self.factor = self.factor.to(grad.device, grad.dtype)
        return grad * self.factor
