"""Pretraining BERT encoders from scratch: tokenizer training, masking (80/10/10, whole-word, span),
NSP/SOP pairs, the objectives after BERT, and the trainer (AdamW, warm-up + linear decay, atomic
checkpoints, exact resume, torchrun DDP). Run ``bertology pretrain --config default`` (or
``python -m bertology.pretraining --config default``: the same command).

Modules: ``config`` (``PretrainConfig``, validation, shipped recipes), ``data`` (sequences, masked
and held-out batches), ``trainer`` (the loop), ``checkpoint`` (save, prune, restore, resume plan,
``run.json``), ``evaluation``, ``metrics``, ``optimization``, ``runtime`` (device, DDP),
``objectives``, ``masking``, ``tokenizer``, ``text_corpus``, ``flops``, ``release``,
``english_corpus`` (builds the offline English pretraining corpus: ``bertology build-corpus``).

Public API (imported lazily so that ``import bertology.pretraining`` stays light)::

    from bertology.pretraining import PretrainConfig, load_config, run_pretraining, read_metrics
"""

from __future__ import annotations

__all__ = [
    "PretrainConfig",
    "load_config",
    "resolve_config",
    "shipped_configs",
    "run_pretraining",
    "TrainingDivergedError",
    "read_metrics",
    "heldout_loss",
    "unigram_baseline",
    "train_tokenizer",
    "MaskingConfig",
    "mask_batch",
    "heldout_sentences",
]

_HOMES = {
    "PretrainConfig": "config",
    "load_config": "config",
    "resolve_config": "config",
    "shipped_configs": "config",
    "run_pretraining": "trainer",
    "TrainingDivergedError": "trainer",
    "read_metrics": "metrics",
    "heldout_loss": "evaluation",
    "unigram_baseline": "evaluation",
    "heldout_sentences": "evaluation",
    "train_tokenizer": "tokenizer",
    "MaskingConfig": "masking",
    "mask_batch": "masking",
}


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
