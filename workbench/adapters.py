"""Houlsby et al. (2019) bottleneck adapters on BERT-style encoders: attaching them, and restoring
them from saved weights (so the registry loads a fine-tune made with adapters as it was trained).

An adapter ``h + W_up f(W_down h)`` (``f`` = GELU, width ``size``) sits right after each layer's
attention output projection and after its FFN output projection, before the residual sum and
LayerNorm. It is the submodule ``adapter`` of the output block (``...attention.output.adapter``,
``...output.adapter``) and is applied by a forward hook on the block's ``dense`` projection, so the
pretrained weight names are unchanged and the adapter weights are saved beside them. Initialised
near the identity (both matrices drawn with std 1e-3, zero biases).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from bertology.errors import ModelError

__all__ = ["Adapter", "attach_adapters", "adapter_count", "restore_adapters", "ADAPTER_INIT_STD"]

ADAPTER_INIT_STD = 1e-3


class Adapter(nn.Module):
    """Houlsby bottleneck: ``h + up(gelu(down(h)))``; ``h`` ``[..., hidden]``."""

    def __init__(self, hidden: int, size: int):
        super().__init__()
        self.down = nn.Linear(hidden, size)
        self.up = nn.Linear(size, hidden)
        for layer in (self.down, self.up):
            nn.init.normal_(layer.weight, std=ADAPTER_INIT_STD)
            nn.init.zeros_(layer.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.up(nn.functional.gelu(self.down(hidden)))


def _apply_adapter(module: nn.Module, inputs: object, output: torch.Tensor) -> torch.Tensor:
    """Forward hook of an output block's ``dense``: its output through the block's adapter."""
    return cast(Adapter, module._bertology_adapter)(output)


def _output_blocks(model: nn.Module) -> list[nn.Module]:
    """The attention-output and FFN-output blocks (each with ``dense`` + ``LayerNorm``) of every layer."""
    base = getattr(model, "base_model", model)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if layers is None:
        raise ModelError(
            f"adapters need BERT-style layers (encoder.layer.N.attention.output."
            f"dense, .output.dense); {type(base).__name__} has none"
        )
    blocks = []
    for layer in layers:
        for block in (getattr(getattr(layer, "attention", None), "output", None), getattr(layer, "output", None)):
            if block is None or not isinstance(getattr(block, "dense", None), nn.Linear):
                raise ModelError(f"adapters need BERT-style output blocks; {type(layer).__name__} has none")
            blocks.append(block)
    return blocks


def attach_adapters(model: nn.Module, size: int) -> int:
    """Add a Houlsby adapter after both output projections of every layer; returns how many.
    Idempotent: blocks that already hold one keep it."""
    count = 0
    for block in _output_blocks(model):
        if not hasattr(block, "adapter"):
            dense = cast(nn.Linear, block.dense)  # an nn.Linear (checked by _output_blocks)
            block.adapter = Adapter(dense.out_features, size).to(dense.weight.device, dense.weight.dtype)
            object.__setattr__(dense, "_bertology_adapter", block.adapter)  # plain attribute: no second registration
            dense.register_forward_hook(_apply_adapter)
        count += 1
    return count


def adapter_count(model: nn.Module) -> int:
    """How many adapters ``model`` holds."""
    return sum(isinstance(m, Adapter) for m in model.modules())


def restore_adapters(model: nn.Module, weights: dict[str, torch.Tensor]) -> int:
    """Attach and load the adapters named in ``weights`` (a saved state dict: names may carry the
    task model's base-model prefix, e.g. ``bert.``) into ``model`` (base encoder or task model);
    returns how many. No adapter names, nothing done (0)."""
    marker = ".adapter."
    named = {k: v for k, v in weights.items() if marker in k}
    if not named:
        return 0
    size = next(v.shape[0] for k, v in named.items() if k.endswith(".adapter.down.weight"))
    attach_adapters(model, size)
    own = {n for n, _ in model.named_parameters() if marker in n}
    prefix = f"{getattr(model, 'base_model_prefix', '')}."
    renamed = {}
    for key, value in named.items():
        name = key if key in own else key.removeprefix(prefix)
        if name not in own:
            raise ModelError(f"adapter weight {key!r} does not fit this model's layers")
        renamed[name] = value
    missing = own - set(renamed)
    if missing:
        raise ModelError(f"adapter weights missing for {len(missing)} parameters (e.g. {sorted(missing)[0]})")
    model.load_state_dict(renamed, strict=False)
    return adapter_count(model)
