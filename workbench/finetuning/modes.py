"""Which parameters a fine-tune trains: full, frozen encoder, BitFit, adapters.

The *encoder* is the base model (embeddings and transformer layers) without its pooler; the
*head* is everything else -- the classifier and, for sentence and pair tasks, the pooler over
[CLS] (new in the project's MLM checkpoints, which have none). The head always trains.

- ``full``: every parameter (Devlin et al. 2019).
- ``frozen``: the encoder stays bit-identical, the head trains: the feature-based column.
- ``bitfit``: only the encoder's bias terms (attention query/key/value/output, both FFN
  projections, both LayerNorms' shifts) and the head (Ben Zaken et al. 2022).
- ``adapters``: Houlsby et al. (2019): in every layer a bottleneck adapter ``h + W_up f(W_down h)``
  (``f`` = GELU, width ``adapter_size``) right after the attention output projection and after the
  FFN output projection, before each residual sum and LayerNorm; near-identity at the start (both
  matrices drawn with std 1e-3, zero biases). Adapters, the layers' LayerNorms and the head
  train; everything else stays bit-identical. The adapters are submodules ``adapter`` of the two
  output blocks (``...attention.output.adapter``, ``...output.adapter``), applied by forward hooks
  on their ``dense`` projections, so the pretrained weight names are unchanged.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bertology.errors import ConfigError

__all__ = ["Adapter", "attach_adapters", "adapter_count", "apply_mode", "encoder_parameter_names"]

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


def _apply_adapter(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
    """Forward hook of an output block's ``dense``: its output through the block's adapter."""
    return module._bertology_adapter(output)


def _output_blocks(model: nn.Module) -> list[nn.Module]:
    """The attention-output and FFN-output blocks (each with ``dense`` + ``LayerNorm``) of every layer."""
    base = getattr(model, "base_model", model)
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    if layers is None:
        raise ConfigError(f"config field 'mode': adapters need BERT-style layers (encoder.layer.N.attention.output."
                          f"dense, .output.dense); {type(base).__name__} has none")
    blocks = []
    for layer in layers:
        for block in (getattr(getattr(layer, "attention", None), "output", None), getattr(layer, "output", None)):
            if block is None or not isinstance(getattr(block, "dense", None), nn.Linear):
                raise ConfigError(f"config field 'mode': adapters need BERT-style output blocks; "
                                  f"{type(layer).__name__} has none")
            blocks.append(block)
    return blocks


def attach_adapters(model: nn.Module, size: int) -> int:
    """Add a Houlsby adapter after both output projections of every layer; returns how many.
    Idempotent: blocks that already hold one keep it."""
    count = 0
    for block in _output_blocks(model):
        if not hasattr(block, "adapter"):
            dense = block.dense
            block.adapter = Adapter(dense.out_features, size).to(dense.weight.device, dense.weight.dtype)
            object.__setattr__(dense, "_bertology_adapter", block.adapter)  # plain attribute: no second registration
            dense.register_forward_hook(_apply_adapter)
        count += 1
    return count


def adapter_count(model: nn.Module) -> int:
    """How many adapters ``model`` holds."""
    return sum(isinstance(m, Adapter) for m in model.modules())


def encoder_parameter_names(model: nn.Module) -> set[str]:
    """Names (in ``model.named_parameters()``) of the encoder's pretrained parameters: the base
    model's, without its pooler and without adapters."""
    base = getattr(model, "base_model", model)
    prefix = getattr(model, "base_model_prefix", "")
    prefix = f"{prefix}." if base is not model and prefix else ""
    return {prefix + n for n, _ in base.named_parameters()
            if not n.startswith("pooler.") and ".adapter." not in f".{n}"}


def apply_mode(model: nn.Module, mode: str, adapter_size: int = 64) -> dict[str, int]:
    """Set ``requires_grad`` for ``mode`` (attaching adapters first for ``adapters``); returns
    ``{"trainable_parameters", "total_parameters", "adapters"}``."""
    n_adapters = attach_adapters(model, adapter_size) if mode == "adapters" else 0
    encoder = encoder_parameter_names(model)
    for name, p in model.named_parameters():
        if name not in encoder:  # head (classifier, pooler) and adapters
            p.requires_grad_(True)
        elif mode == "full":
            p.requires_grad_(True)
        elif mode == "frozen":
            p.requires_grad_(False)
        elif mode == "bitfit":
            p.requires_grad_(name.endswith("bias"))
        elif mode == "adapters":
            p.requires_grad_(".LayerNorm." in name and ".layer." in name)
        else:
            raise ConfigError(f"config field 'mode': unknown mode {mode!r}")
    params = list(model.parameters())
    return {"trainable_parameters": sum(p.numel() for p in params if p.requires_grad),
            "total_parameters": sum(p.numel() for p in params), "adapters": n_adapters}
