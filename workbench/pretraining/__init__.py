"""Pretraining BERT encoders from scratch: tokenizer training, masking (80/10/10, whole-word, span),
NSP/SOP pairs, and the trainer (AdamW, warm-up + linear decay, atomic checkpoints, exact resume,
torchrun DDP). Run ``python -m bertology.pretraining --config default`` or ``bertology pretrain``.

Public API (imported lazily so that ``import bertology.pretraining`` stays light)::

    from bertology.pretraining import PretrainConfig, load_config, run_pretraining, read_metrics
"""

from __future__ import annotations

__all__ = ["PretrainConfig", "load_config", "run_pretraining", "read_metrics", "shipped_configs",
           "train_tokenizer", "MaskingConfig", "mask_batch"]

_HOMES = {"PretrainConfig": "trainer", "load_config": "trainer", "run_pretraining": "trainer",
          "read_metrics": "trainer", "shipped_configs": "trainer", "train_tokenizer": "tokenizer",
          "MaskingConfig": "masking", "mask_batch": "masking"}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
