"""``FinetuneConfig``: everything a fine-tuning run depends on, checked when it is made (each error a
``ConfigError`` naming the field).

The defaults are the lectures' recipe (Devlin et al. 2019, appendix A.3): 3 epochs, batch 32,
AdamW with linear warm-up over the first 10% of steps and linear decay to 0, and a learning rate
chosen per mode when none is given (:data:`DEFAULT_LEARNING_RATES`; docs/METHODS.md says why).
The field names the pretraining pieces read (``learning_rate``, ``weight_decay``, ``adam_*``,
``device``, ``bf16``, ``num_threads``, ``compile``) are the same as
:class:`~bertology.pretraining.config.PretrainConfig`'s, so ``make_optimizer`` and ``setup_runtime``
take this config as they are.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertology import paths
from bertology.errors import ConfigError

__all__ = ["FinetuneConfig", "MODES", "TASK_KINDS", "DEFAULT_LEARNING_RATES", "BUILTIN_TASKS"]

MODES = ("full", "frozen", "bitfit", "adapters")
TASK_KINDS = ("token", "sentence", "pair")
# Devlin et al.: 2e-5..5e-5 for full fine-tuning; Ben Zaken et al. 2022 (BitFit): 1e-4..1e-3 (BERT-base
# GLUE: 1e-3 for most tasks); Houlsby et al. 2019: 1e-5..1e-3 swept, 1e-4 typical; a frozen encoder
# trains only a fresh head, which tolerates (and needs) the larger rate.
DEFAULT_LEARNING_RATES = {"full": 3e-5, "frozen": 1e-3, "bitfit": 1e-3, "adapters": 1e-4}
BUILTIN_TASKS = ("pos", "ner", "genre", "sotu-party", "sotu-decade")  # gold UPOS, silver entities, gold Brown
# genre, gold State of the Union party / decade (see tasks)


def names_a_task(value: Any) -> bool:
    """Whether ``value`` names a fine-tuning task: a built-in one (:data:`BUILTIN_TASKS`) or a file
    (what :func:`bertology.finetuning.tasks.build_task` accepts), checked with a study's config."""
    return isinstance(value, str) and (value in BUILTIN_TASKS or Path(value).is_file())


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class FinetuneConfig:
    """A fine-tuning run. ``task``: ``pos`` / ``ner`` / ``genre`` on ``corpus`` (a registry corpus or
    a CoNLL-U file), or a CoNLL-U / JSONL / CSV file of labelled examples (docs/finetuning.md)."""

    run_name: str = "finetune"
    model: str = "minilm-l6"  # registry name, model folder or hub name (org/name[@revision])
    task: str = "pos"
    corpus: str = "brown-sample"  # for the built-in tasks
    label_column: str = "upos"  # CoNLL-U files: the word-level label (upos | xpos | deprel)
    max_examples: int | None = None  # keep the first N examples (quick runs)
    dev_fraction: float = 0.1  # share of documents for dev (model selection)
    test_fraction: float = 0.1  # share of documents for test (the reported figure)
    mode: str = "full"  # full | frozen | bitfit | adapters
    adapter_size: int = 64  # adapters: bottleneck width m (Houlsby et al.: 8..256)
    weight_mask: str | None = None  # a safetensors file of 0/1 masks over the encoder's weight matrices
    # (finetuning.masks): the removed weights stay 0 (lottery tickets)
    max_seq_len: int = 128
    # optimisation (the lectures' recipe)
    epochs: int = 3
    max_steps: int | None = None  # None = epochs over the training set
    batch_size: int = 32  # examples per process per micro-step
    grad_accum_steps: int = 1
    learning_rate: float | None = None  # None = DEFAULT_LEARNING_RATES[mode]
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0
    warmup_fraction: float = 0.1
    seed: int = 0
    # evaluation, logging, checkpoints
    eval_every: int | None = None  # steps between dev evaluations; None = once per epoch
    log_every: int = 10
    keep_last: int = 1  # rolling checkpoints kept besides the best (on dev) and the final
    # runtime
    device: str = "auto"  # auto | cpu | cuda
    bf16: bool | None = None  # None = bf16 autocast on CUDA only
    num_threads: int | None = None
    compile: bool = False  # torch.compile the training forward (GPU speed; dev/test use the plain model)
    output_root: str | None = None  # default: bertology.paths.models_dir()
    progress: bool = True

    def __post_init__(self) -> None:
        _validate(self)
        if self.learning_rate is None:  # the mode's default, recorded in run.json as used
            self.learning_rate = DEFAULT_LEARNING_RATES[self.mode]

    @property
    def run_dir(self) -> Path:
        root = Path(self.output_root) if self.output_root else paths.models_dir()
        return root / self.run_name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Fields a resumed run may change (they do not alter the optimisation trajectory).
RESUMABLE_CHANGES = {"progress", "log_every", "keep_last", "device", "output_root", "num_threads", "compile"}

_CHECKS: list[tuple[str, Any, str]] = [
    ("run_name", lambda c: bool(_NAME.match(c.run_name)), "be a plain name (letters, digits, . _ -)"),
    ("mode", lambda c: c.mode in MODES, f"be one of {', '.join(MODES)}"),
    ("label_column", lambda c: c.label_column in ("upos", "xpos", "deprel"), "be upos, xpos or deprel"),
    ("max_examples", lambda c: c.max_examples is None or c.max_examples >= 3, "be >= 3 (train, dev and test)"),
    ("dev_fraction", lambda c: 0 < c.dev_fraction < 1, "be in (0, 1)"),
    (
        "test_fraction",
        lambda c: 0 < c.test_fraction < 1 and c.dev_fraction + c.test_fraction < 1,
        "be in (0, 1), with dev_fraction + test_fraction < 1",
    ),
    ("adapter_size", lambda c: c.adapter_size >= 1, "be >= 1"),
    ("max_seq_len", lambda c: c.max_seq_len >= 8, "be >= 8"),
    ("epochs", lambda c: c.epochs >= 1, "be >= 1"),
    ("max_steps", lambda c: c.max_steps is None or c.max_steps >= 1, "be >= 1 (or null: epochs decide)"),
    ("batch_size", lambda c: c.batch_size >= 1, "be >= 1"),
    ("grad_accum_steps", lambda c: c.grad_accum_steps >= 1, "be >= 1"),
    ("learning_rate", lambda c: c.learning_rate is None or c.learning_rate > 0, "be > 0 (or null: the mode's)"),
    ("weight_decay", lambda c: c.weight_decay >= 0, "be >= 0"),
    ("max_grad_norm", lambda c: c.max_grad_norm >= 0, "be >= 0 (0 = no clipping)"),
    ("warmup_fraction", lambda c: 0 <= c.warmup_fraction < 1, "be in [0, 1)"),
    ("eval_every", lambda c: c.eval_every is None or c.eval_every >= 1, "be >= 1 (or null: once per epoch)"),
    ("log_every", lambda c: c.log_every >= 1, "be >= 1"),
    ("keep_last", lambda c: c.keep_last >= 0, "be >= 0"),
    ("device", lambda c: c.device in ("auto", "cpu", "cuda"), "be auto, cpu or cuda"),
]


def _validate(cfg: FinetuneConfig) -> None:
    """Check every field's type, then the rows of ``_CHECKS``; the first failure is a ``ConfigError``."""
    hints = {f.name: f.type for f in dataclasses.fields(cfg)}
    for name, hint in hints.items():
        value = getattr(cfg, name)
        ok = _type_ok(value, str(hint))
        if not ok:
            raise ConfigError(f"config field {name!r}: expected {hint}, got {value!r}")
    for name, ok, must in _CHECKS:
        if not ok(cfg):
            raise ConfigError(f"config field {name!r} must {must}; got {getattr(cfg, name)!r}")


def _type_ok(value: Any, hint: str) -> bool:
    """Whether ``value`` fits a simple annotation string (``int``, ``float | None``, ``str``, ``bool``)."""
    allowed = [h.strip() for h in hint.split("|")]
    if value is None:
        return "None" in allowed
    if isinstance(value, bool):
        return "bool" in allowed
    if isinstance(value, int):
        return "int" in allowed or "float" in allowed
    if isinstance(value, float):
        return "float" in allowed
    if isinstance(value, str):
        return "str" in allowed
    return False
