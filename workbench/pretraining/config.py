"""``PretrainConfig``: everything a pretraining run depends on, validated when it is made, and the
recipes shipped in ``configs/``.

Every check of a field is one row of a table -- :data:`FIELD_CHECKS` here, and
``bertology.pretraining.objectives.OBJECTIVE_CHECKS`` for the objective and architecture fields --
and :func:`validate_config` runs them in order after checking each field's type. An error is one
``ConfigError`` naming the field (and, from :func:`load_config`, the file).

This module imports neither torch nor transformers, so the command line can list the shipped
recipes (:func:`shipped_configs`) at start-up.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import tomllib

from bertology import paths
from bertology.errors import ConfigError
from bertology.validation import as_float, as_int, load_yaml

__all__ = [
    "PretrainConfig",
    "FieldCheck",
    "FIELD_CHECKS",
    "validate_config",
    "shipped_configs",
    "resolve_config",
    "load_config",
    "BUNDLED_CORPUS",
]

BUNDLED_CORPUS = "brown"  # name for workbench/data/brown.txt.gz


@dataclass
class PretrainConfig:
    """Everything a pretraining run depends on. Loaded from YAML/TOML by ``load_config``."""

    run_name: str = "bert-small-brown"
    # data
    corpus: str = BUNDLED_CORPUS  # "brown" (bundled) or a text file / directory
    max_documents: int | None = None  # read only the first N documents (quick runs)
    heldout_fraction: float = 0.02  # share of documents held out for eval loss
    heldout_corpus: str | None = None  # a separate held-out text file / directory (then the whole
    # ``corpus`` trains and heldout_fraction is not used)
    packing: str = "doc_sentences"  # single-segment objectives: doc_sentences (sequences stay within one
    # document) | full_sentences (RoBERTa: across documents, an extra
    # [SEP] between them) | token_blocks (the token stream cut into
    # full blocks, sentences split at block ends)
    # continued pretraining ("don't stop pretraining", Gururangan et al. 2020)
    init_from: str | None = None  # a registry name, folder or hub name of a BERT encoder: start from its weights
    # and tokenizer (an MLM head it lacks is initialised as BERT's); the
    # model-size fields must then equal that model's (the error names them)
    # tokenizer
    tokenizer: str | None = None  # an existing tokenizer directory; None = train one
    tokenizer_kind: str = "wordpiece"  # wordpiece | bpe
    vocab_size: int = 8000
    lowercase: bool = True
    # model (BERT)
    num_hidden_layers: int = 4
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    max_seq_len: int = 128
    dropout: float = 0.1
    # objective (bertology.pretraining.objectives; docs/pretraining.md "After BERT")
    objective: str = "mlm"  # mlm | mlm+nsp | mlm+sop | mlm+sbo (SpanBERT) | electra | distill
    architecture: str = "bert"  # bert | albert (factorised embedding, shared layers)
    embedding_size: int | None = None  # ALBERT / ELECTRA embedding width E (None = hidden_size)
    num_hidden_groups: int = 1  # ALBERT: distinct layer modules (1 = every layer shares one)
    generator_size: float = 0.25  # ELECTRA: generator width / discriminator width (hidden, heads, FFN)
    rtd_weight: float = 50.0  # ELECTRA: lambda of the replaced-token-detection loss
    sbo_weight: float = 1.0  # SpanBERT: weight of the span boundary objective
    teacher: str | None = None  # distill: registry name, folder or hub name of an MLM-headed teacher
    distill_temperature: float = 2.0  # distill: softmax temperature T (loss scaled by T^2)
    distill_kl_weight: float = 1.0  # distill: weight of T^2 KL(teacher || student)
    distill_mlm_weight: float = 0.0  # distill: weight of the student's own MLM loss on the gold tokens
    distill_cosine_weight: float = 0.0  # distill: weight of 1 - cos(student, teacher) last hidden states
    distill_positions: str = "all"  # distill: KL over every token (DistilBERT, Hinton) or "masked" only
    distill_init: str = "random"  # distill: "random" (HF's init) or "every_other" (DistilBERT: student
    # layer i <- teacher layer 2i, + embeddings and MLM head)
    masking: str = "token"  # token | whole_word | span (SpanBERT) | ngram (ALBERT, n <= 3)
    replacement_unit: str | None = None  # 80/10/10 drawn per "token" or per "span"; None = the masking's
    # paper (per span for span masking, per token otherwise)
    mlm_probability: float = 0.15
    dynamic_masking: bool = True  # RoBERTa dynamic (True) or static per-sequence masks
    random_token_pool: str = "vocab"  # the 10% random replacements: "vocab" (BERT: whole vocabulary)
    # or "non_special" (special tokens never drawn)
    # optimisation
    batch_size: int = 32  # sequences per process per micro-step
    grad_accum_steps: int = 1
    learning_rate: float = 5e-4
    weight_decay: float = 0.01
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    max_grad_norm: float = 1.0
    warmup_steps: int = 100
    max_steps: int = 1000
    seed: int = 0
    stream_start: int = 0  # sequences of the shuffled training stream skipped before step 0: a
    # later stretch (init_from an earlier run's last checkpoint, same seed)
    # starts where that run's stream ended instead of re-reading its text
    # evaluation, logging, checkpoints
    eval_every: int = 100
    eval_batches: int | None = 20
    log_every: int = 10
    save_every: int = 100
    keep_steps: list[int] = field(default_factory=lambda: [0])
    keep_last: int = 1  # rolling checkpoints kept besides keep_steps and final
    # divergence (docs/pretraining.md "When training goes wrong"): stop when the training loss stays
    # above divergence_factor x max(ln V, the first loss) for divergence_window consecutive steps
    divergence_factor: float = 1.5
    divergence_window: int = 20  # 0 = only NaN/inf losses stop a run
    # runtime
    device: str = "auto"  # auto | cpu | cuda
    bf16: bool | None = None  # None = bf16 autocast on CUDA only
    num_threads: int | None = None  # CPU threads per process (None = torch default)
    compile: bool = False  # torch.compile the training forward (a GPU speed-up after a minute or
    # so of compilation; evaluation and checkpoints use the plain model)
    output_root: str | None = None  # default: bertology.paths.models_dir()
    progress: bool = True

    def __post_init__(self) -> None:
        validate_config(self)

    @property
    def run_dir(self) -> Path:
        root = Path(self.output_root) if self.output_root else paths.models_dir()
        return root / self.run_name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------- validation


class FieldCheck(typing.NamedTuple):
    """One check of a config: ``ok(config)`` must hold, else the error names ``field`` and says
    ``must`` (text, or a function of the config that gives it). ``OBJECTIVE_CHECKS`` holds plain
    ``(field, ok, must)`` tuples of the same shape (that module does not import this one)."""

    field: str
    ok: Callable[[Any], bool]
    must: str | Callable[[Any], str]


def _at_least_one(name: str) -> Callable[[Any], bool]:
    """The check that config field ``name`` is >= 1."""
    return lambda c: getattr(c, name) >= 1


def _is_folder_name(name: str) -> bool:
    return bool(name) and "/" not in name and "@" not in name and not name.startswith(".")


_AT_LEAST_ONE = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "batch_size",
    "grad_accum_steps",
    "max_steps",
    "eval_every",
    "log_every",
    "save_every",
)

# The value checks of the data, tokenizer, model-size, optimisation and runtime fields, in the order
# they run (a size is known to be >= 1 before it divides another).
FIELD_CHECKS: tuple[FieldCheck, ...] = (
    FieldCheck("run_name", lambda c: _is_folder_name(c.run_name), "a non-empty folder name without '/', '@'"),
    FieldCheck("tokenizer_kind", lambda c: c.tokenizer_kind in ("wordpiece", "bpe"), "must be wordpiece or bpe"),
    FieldCheck(
        "masking",
        lambda c: c.masking in ("token", "whole_word", "span", "ngram"),
        "must be token, whole_word, span or ngram",
    ),
    FieldCheck(
        "replacement_unit",
        lambda c: c.replacement_unit in (None, "token", "span"),
        "must be token, span or null (the masking strategy's paper)",
    ),
    FieldCheck(
        "random_token_pool", lambda c: c.random_token_pool in ("vocab", "non_special"), "must be vocab or non_special"
    ),
    FieldCheck("device", lambda c: c.device in ("auto", "cpu", "cuda"), "must be auto, cpu or cuda"),
    FieldCheck(
        "packing",
        lambda c: c.packing in ("doc_sentences", "full_sentences", "token_blocks"),
        "must be doc_sentences, full_sentences or token_blocks",
    ),
    FieldCheck("mlm_probability", lambda c: 0.0 < c.mlm_probability < 1.0, "must be in (0, 1)"),
    FieldCheck("heldout_fraction", lambda c: 0.0 <= c.heldout_fraction < 1.0, "must be in [0, 1)"),
    FieldCheck("dropout", lambda c: 0.0 <= c.dropout < 1.0, "must be in [0, 1)"),
    FieldCheck("vocab_size", lambda c: c.vocab_size >= 50, "must be >= 50"),
    *(FieldCheck(name, _at_least_one(name), "must be >= 1") for name in _AT_LEAST_ONE),
    FieldCheck(
        "hidden_size",
        lambda c: c.hidden_size % c.num_attention_heads == 0,
        lambda c: f"must be divisible by num_attention_heads ({c.num_attention_heads})",
    ),
    FieldCheck("max_seq_len", lambda c: c.max_seq_len >= 8, "must be >= 8"),
    FieldCheck("learning_rate", lambda c: c.learning_rate > 0, "must be > 0"),
    FieldCheck("weight_decay", lambda c: c.weight_decay >= 0, "must be >= 0"),
    FieldCheck("adam_beta1", lambda c: 0 <= c.adam_beta1 < 1, "must be in [0, 1)"),
    FieldCheck("adam_beta2", lambda c: 0 <= c.adam_beta2 < 1, "must be in [0, 1)"),
    FieldCheck("adam_eps", lambda c: c.adam_eps > 0, "must be > 0"),
    FieldCheck("max_grad_norm", lambda c: c.max_grad_norm >= 0, "must be >= 0 (0 = no clipping)"),
    FieldCheck("warmup_steps", lambda c: c.warmup_steps >= 0, "must be >= 0"),
    FieldCheck("keep_last", lambda c: c.keep_last >= 0, "must be >= 0"),
    FieldCheck("divergence_factor", lambda c: c.divergence_factor > 1, "must be > 1"),
    FieldCheck("divergence_window", lambda c: c.divergence_window >= 0, "must be >= 0 (0 = off)"),
    FieldCheck("keep_steps", lambda c: all(s >= 0 for s in c.keep_steps), "steps must be >= 0"),
    FieldCheck("max_documents", lambda c: c.max_documents is None or c.max_documents >= 1, "must be >= 1"),
    FieldCheck("eval_batches", lambda c: c.eval_batches is None or c.eval_batches >= 1, "must be >= 1"),
    FieldCheck("num_threads", lambda c: c.num_threads is None or c.num_threads >= 1, "must be >= 1"),
)


def _coerce_field(name: str, value: Any, hint: Any) -> Any:
    """``value`` checked against the type hint of field ``name``, numbers read as people write them
    (:func:`bertology.validation.as_float` / ``as_int``: ints become floats where a float is
    expected, ``"5e-4"`` a float, ``1e3`` an int); ``ConfigError`` naming the field otherwise."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce_field(name, value, inner[0])
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config field '{name}': expected a list, got {value!r}")
        return [_coerce_field(f"{name}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config field '{name}': expected true/false, got {value!r}")
        return value
    if hint is int:
        number = as_int(value)  # 1000, 1e3, "1_000"
        if number is None:
            raise ConfigError(f"config field '{name}': expected an integer, got {value!r}")
        return number
    if hint is float:
        real = as_float(value)  # 5e-4, 5E-4, .5, 1, "5e-4"
        if real is None:
            raise ConfigError(f"config field '{name}': expected a finite number (e.g. 0.1, 5e-4), got {value!r}")
        return real
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"config field '{name}': expected a string, got {value!r}")
        return value
    return value


def validate_config(cfg: PretrainConfig) -> None:
    """Check every field's type (in place: ints given for floats become floats), then run
    :data:`FIELD_CHECKS` and the objectives' ``OBJECTIVE_CHECKS``; the first failure raises
    ``ConfigError`` naming the field."""
    # the objectives module loads torch: imported here, so that importing this module stays light
    from bertology.pretraining.objectives import OBJECTIVE_CHECKS

    hints = typing.get_type_hints(PretrainConfig)
    for f in dataclasses.fields(cfg):
        setattr(cfg, f.name, _coerce_field(f.name, getattr(cfg, f.name), hints[f.name]))
    for name, ok, must in (*FIELD_CHECKS, *OBJECTIVE_CHECKS):
        if not ok(cfg):
            what = must(cfg) if callable(must) else must
            raise ConfigError(f"config field '{name}': {what}, got {getattr(cfg, name)!r}")


# --------------------------------------------------------------------------- recipes and files


def shipped_configs() -> dict[str, Path]:
    """The recipes shipped inside the package: ``{name: path}`` (``default``, ``bert_base_gpu``, ...),
    one per ``configs/pretrain_<name>.yaml``."""
    folder = Path(__file__).resolve().parent / "configs"
    return {p.stem.removeprefix("pretrain_"): p for p in sorted(folder.glob("*.yaml"))}


def resolve_config(spec: str | Path) -> Path:
    """A config file path, or the name of a shipped recipe (``default`` or ``pretrain_default.yaml``)."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path
    shipped = shipped_configs()
    name = path.name.removesuffix(".yaml").removeprefix("pretrain_")
    if name in shipped and (len(path.parts) == 1 or path.parent.name == "configs"):
        return shipped[name]
    raise ConfigError(f"{spec}: config file not found (shipped recipes: {', '.join(shipped)})")


def _read_config_file(path: Path) -> dict[str, Any]:
    """The ``field: value`` mapping of a YAML (``.yaml``/``.yml``) or TOML (``.toml``) file."""
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        else:
            data = load_yaml(text) or {}  # 5e-4 is a number here, as in YAML 1.2
    except Exception as exc:  # yaml.YAMLError / tomllib.TOMLDecodeError
        raise ConfigError(f"{path}: cannot parse config ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value at the top level")
    return data


def load_config(path: str | Path | None = None, **overrides: Any) -> PretrainConfig:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) config; ``overrides`` win (None ignored).

    ``path`` is a file or the name of a shipped recipe (:func:`shipped_configs`). Unknown keys and
    bad values raise ``ConfigError`` naming the file and field.
    """
    data: dict[str, Any] = {}
    if path is not None:
        path = resolve_config(path)
        data = _read_config_file(path)
    data.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in dataclasses.fields(PretrainConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"{path or 'config'}: unknown field(s) {', '.join(map(repr, unknown))}; "
            f"known fields: {', '.join(sorted(known))}"
        )
    try:
        return PretrainConfig(**data)
    except ConfigError as exc:
        raise ConfigError(f"{path or 'config'}: {exc}") from None
