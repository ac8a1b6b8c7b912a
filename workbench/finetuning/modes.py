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
  train; everything else stays bit-identical. The adapters live in core (:mod:`bertology.adapters`)
  so that the registry re-attaches them when it loads a fine-tuned model.
"""

from __future__ import annotations

from torch import nn

from bertology.adapters import Adapter, adapter_count, attach_adapters
from bertology.errors import ConfigError

__all__ = ["Adapter", "attach_adapters", "adapter_count", "apply_mode", "encoder_parameter_names"]


def encoder_parameter_names(model: nn.Module) -> set[str]:
    """Names (in ``model.named_parameters()``) of the encoder's pretrained parameters: the base
    model's, without its pooler and without adapters."""
    base = getattr(model, "base_model", model)
    prefix = getattr(model, "base_model_prefix", "")
    prefix = f"{prefix}." if base is not model and prefix else ""
    return {
        prefix + n for n, _ in base.named_parameters() if not n.startswith("pooler.") and ".adapter." not in f".{n}"
    }


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
    return {
        "trainable_parameters": sum(p.numel() for p in params if p.requires_grad),
        "total_parameters": sum(p.numel() for p in params),
        "adapters": n_adapters,
    }
