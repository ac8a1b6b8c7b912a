"""The classifier on top of the encoder: transformers' ``AutoModelForTokenClassification`` (token
tasks: a linear layer on every token, read at each word's first sub-word) or
``AutoModelForSequenceClassification`` (sentence and pair tasks: the pooler over [CLS], then a
linear layer), loaded from a local safetensors model directory (never remote code).

The pretrained model comes from the registry (``minilm-l6``, ``<run>@<step>``, a shipped release)
or a directory. Its encoder weights must all be present (a missing one would be a random
initialisation); the head (classifier, and the pooler where the checkpoint has none) is new,
initialised from the global RNG, which the trainer seeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bertology.architectures import architecture_for
from bertology.errors import ModelError

__all__ = ["load_classifier", "load_tokenizer", "HEAD_PREFIXES"]

HEAD_PREFIXES = ("classifier.", "pooler.", "score.")  # names of new head weights (within or beside the base)


def load_tokenizer(path: Path) -> Any:
    """The fast tokenizer of a model directory (word alignment needs ``word_ids``)."""
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
        kwargs: dict[str, Any] = {"use_fast": True, "trust_remote_code": False}
        if architecture_for(config).prefix_space:
            kwargs["add_prefix_space"] = True
        tokenizer = AutoTokenizer.from_pretrained(path, **kwargs)
    except ModelError as exc:
        raise ModelError(f"{path}: {exc}") from None
    except Exception as exc:
        raise ModelError(f"{path}: cannot load the tokenizer ({exc})") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise ModelError(f"{path}: a fast tokenizer (tokenizer.json) is needed for word-level labels")
    return tokenizer


def load_classifier(path: Path, kind: str, labels: list[str]) -> torch.nn.Module:
    """``*ForTokenClassification`` (``kind`` token) or ``*ForSequenceClassification`` (sentence,
    pair) with ``len(labels)`` outputs, float32, from ``path``. Raises ``ModelError`` when encoder
    weights are missing, the directory holds no safetensors, or the type is not supported."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoModelForTokenClassification
    from transformers.utils import logging as hf_logging

    if not (path / "model.safetensors").is_file() and not (path / "model.safetensors.index.json").is_file():
        raise ModelError(f"{path}: no model.safetensors; only safetensors weights are loaded")
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
        architecture_for(config)
    except ModelError as exc:
        raise ModelError(f"{path}: {exc}") from None
    except Exception as exc:
        raise ModelError(f"{path / 'config.json'}: cannot read config: {exc}") from exc
    cls = AutoModelForTokenClassification if kind == "token" else AutoModelForSequenceClassification
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # "newly initialised" is expected for the head, checked below
    hf_logging.disable_progress_bar()
    try:
        model, info = cls.from_pretrained(
            path,
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)},
            use_safetensors=True,
            trust_remote_code=False,
            dtype=torch.float32,
            output_loading_info=True,
        )
    except Exception as exc:
        raise ModelError(f"{path}: cannot build a {cls.__name__} ({exc})") from exc
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    prefix = f"{model.base_model_prefix}."
    missing = [k for k in info.get("missing_keys") or [] if not k.removeprefix(prefix).startswith(HEAD_PREFIXES)]
    if missing:
        raise ModelError(
            f"{path}: encoder weights missing for {len(missing)} parameters (e.g. "
            f"{', '.join(sorted(missing)[:3])}); they would be randomly initialised"
        )
    return model
