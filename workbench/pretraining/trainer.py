"""Pretrain small BERT encoders with masked language modelling (optionally + NSP or SOP).

A plain training loop you can read top to bottom: ``PretrainConfig`` (YAML/TOML, validated) ->
tokenizer (trained if none is given) -> packed sequences -> ``BertForMaskedLM`` (or
``BertForPreTraining`` with NSP/SOP) -> AdamW with linear warm-up and decay, gradient
accumulation, bf16 autocast on CUDA -> checkpoints in HF format, written atomically.

Multi-process data parallelism is torch ``DistributedDataParallel`` (gloo on CPU, nccl on GPU),
started by ``torchrun --nproc_per_node N -m bertology.pretraining.trainer --config FILE``.

Run layout (``paths.models_dir() / <run_name>``)::

    run.json                     config, seed, corpus hash, world size
    metrics.jsonl                one JSON object per log/eval event (see ``read_metrics``)
    tokenizer/                   the tokenizer (trained here unless the config names one)
    data/                        tokenised corpus cache (safetensors)
    checkpoint-<step>/           config.json, model.safetensors, tokenizer files, trainer state

Resumption is exact: the data order and the masks are functions of ``(seed, position)``, and the
checkpoint holds the optimizer, scheduler and RNG states, so a run stopped after a checkpoint and
resumed ends with the same weights as an uninterrupted run. Resuming with another ``max_steps``
changes the learning-rate schedule, so it is refused unless asked for as a new *phase*
(``new_phase=True``, recorded in ``run.json``; every checkpoint kept so far stays).

A non-finite training loss (or gradient norm) stops the run at once with
``TrainingDivergedError``, before the optimizer step, so no NaN weights reach a checkpoint; under
DDP the processes agree on the stop through an all-reduce.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import sys
import time
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bertology import paths
from bertology.checkpoints import (
    atomic_dir, latest_resumable, list_checkpoints, load_trainer_state, read_json_file, read_trainer_state,
    remove_partial_writes, rng_state, save_trainer_state, set_rng_state,
)
from bertology.errors import CheckpointError, ConfigError, WorkbenchError
from bertology.pretraining.masking import (
    IGNORE_INDEX, MaskingConfig, encode_pair, make_sentence_pairs, mask_batch, mix_seed,
    random_token_pool, special_tokens_mask,
)
from bertology.pretraining.objectives import (
    OWN_EVALUATION, PretrainingLoss, evaluate_variant, make_loss, pair_task, perplexity, teacher_directory,
    tied_parameter_names, validate_objective,
)
from bertology.pretraining.objectives import build_model as build_objective_model

__all__ = ["PretrainConfig", "load_config", "run_pretraining", "read_metrics", "list_checkpoints", "unigram_baseline",
           "heldout_loss", "TrainingDivergedError",
           "BUNDLED_CORPUS"]

BUNDLED_CORPUS = "brown"  # name for workbench/data/brown.txt.gz
# Fields that may change when resuming (they do not alter the optimisation trajectory).
# (max_steps is checked on its own: a change is a new phase of the schedule, see run_pretraining.)
_OBJECTIVE_FIELD_DEFAULTS = {"architecture": "bert", "embedding_size": None, "num_hidden_groups": 1,
                             "generator_size": 0.25, "rtd_weight": 50.0, "sbo_weight": 1.0, "teacher": None,
                             "distill_temperature": 2.0, "distill_kl_weight": 1.0, "distill_mlm_weight": 0.0,
                             "distill_cosine_weight": 0.0, "distill_positions": "masked"}
RESUMABLE_CHANGES = {"progress", "eval_every", "log_every", "save_every", "keep_steps", "keep_last",
                     "device", "output_root", "num_threads", "max_steps"}


class TrainingDivergedError(WorkbenchError):
    """The training loss (or gradient norm) became NaN or infinite; the run stopped before saving it."""


@dataclass
class PretrainConfig:
    """Everything a pretraining run depends on. Loaded from YAML/TOML by ``load_config``."""

    run_name: str = "bert-small-brown"
    # data
    corpus: str = BUNDLED_CORPUS          # "brown" (bundled) or a text file / directory
    max_documents: int | None = None      # read only the first N documents (quick runs)
    heldout_fraction: float = 0.02        # share of documents held out for eval loss
    heldout_corpus: str | None = None     # a separate held-out text file / directory (then the whole
                                          # ``corpus`` trains and heldout_fraction is not used)
    # tokenizer
    tokenizer: str | None = None          # an existing tokenizer directory; None = train one
    tokenizer_kind: str = "wordpiece"     # wordpiece | bpe
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
    objective: str = "mlm"                # mlm | mlm+nsp | mlm+sop | mlm+sbo (SpanBERT) | electra | distill
    architecture: str = "bert"            # bert | albert (factorised embedding, shared layers)
    embedding_size: int | None = None     # ALBERT / ELECTRA embedding width E (None = hidden_size)
    num_hidden_groups: int = 1            # ALBERT: distinct layer modules (1 = every layer shares one)
    generator_size: float = 0.25          # ELECTRA: generator width / discriminator width (hidden, heads, FFN)
    rtd_weight: float = 50.0              # ELECTRA: lambda of the replaced-token-detection loss
    sbo_weight: float = 1.0               # SpanBERT: weight of the span boundary objective
    teacher: str | None = None            # distill: registry name or directory of an MLM-headed teacher
    distill_temperature: float = 2.0      # distill: softmax temperature T (loss scaled by T^2)
    distill_kl_weight: float = 1.0        # distill: weight of T^2 KL(teacher || student)
    distill_mlm_weight: float = 0.0       # distill: weight of the student's own MLM loss on the gold tokens
    distill_cosine_weight: float = 0.0    # distill: weight of 1 - cos(student, teacher) last hidden states
    distill_positions: str = "masked"     # distill: KL over the masked positions (DistilBERT) or all tokens
    masking: str = "token"                # token | whole_word | span
    mlm_probability: float = 0.15
    dynamic_masking: bool = True          # RoBERTa dynamic (True) or static per-sequence masks
    random_token_pool: str = "vocab"      # the 10% random replacements: "vocab" (BERT: whole vocabulary)
                                          # or "non_special" (special tokens never drawn)
    # optimisation
    batch_size: int = 32                  # sequences per process per micro-step
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
    # evaluation, logging, checkpoints
    eval_every: int = 100
    eval_batches: int | None = 20
    log_every: int = 10
    save_every: int = 100
    keep_steps: list[int] = field(default_factory=lambda: [0])
    keep_last: int = 1                    # rolling checkpoints kept besides keep_steps and final
    # runtime
    device: str = "auto"                  # auto | cpu | cuda
    bf16: bool | None = None              # None = bf16 autocast on CUDA only
    num_threads: int | None = None        # CPU threads per process (None = torch default)
    output_root: str | None = None        # default: bertology.paths.models_dir()
    progress: bool = True

    def __post_init__(self) -> None:
        validate_config(self)

    @property
    def run_dir(self) -> Path:
        root = Path(self.output_root) if self.output_root else paths.models_dir()
        return root / self.run_name

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _check_type(name: str, value: Any, hint: Any) -> Any:
    """Coerce/validate one field against its type hint; raise ConfigError naming the field."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _check_type(name, value, inner[0])
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config field '{name}': expected a list, got {value!r}")
        return [_check_type(f"{name}[{i}]", v, args[0]) for i, v in enumerate(value)]
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config field '{name}': expected true/false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config field '{name}': expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config field '{name}': expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"config field '{name}': expected a string, got {value!r}")
        return value
    return value


def validate_config(cfg: PretrainConfig) -> None:
    """Type-check and range-check every field (in place); errors name the field."""
    hints = typing.get_type_hints(PretrainConfig)
    for f in dataclasses.fields(cfg):
        setattr(cfg, f.name, _check_type(f.name, getattr(cfg, f.name), hints[f.name]))

    def need(ok: bool, name: str, what: str) -> None:
        if not ok:
            raise ConfigError(f"config field '{name}': {what}, got {getattr(cfg, name)!r}")

    need(bool(cfg.run_name) and "/" not in cfg.run_name and "@" not in cfg.run_name
         and not cfg.run_name.startswith("."), "run_name", "a non-empty folder name without '/', '@'")
    need(cfg.tokenizer_kind in ("wordpiece", "bpe"), "tokenizer_kind", "must be wordpiece or bpe")
    need(cfg.masking in ("token", "whole_word", "span"), "masking", "must be token, whole_word or span")
    need(cfg.random_token_pool in ("vocab", "non_special"), "random_token_pool", "must be vocab or non_special")
    need(cfg.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")
    need(0.0 < cfg.mlm_probability < 1.0, "mlm_probability", "must be in (0, 1)")
    need(0.0 <= cfg.heldout_fraction < 1.0, "heldout_fraction", "must be in [0, 1)")
    need(0.0 <= cfg.dropout < 1.0, "dropout", "must be in [0, 1)")
    need(cfg.vocab_size >= 50, "vocab_size", "must be >= 50")
    for name in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                 "batch_size", "grad_accum_steps", "max_steps", "eval_every", "log_every", "save_every"):
        need(getattr(cfg, name) >= 1, name, "must be >= 1")
    need(cfg.hidden_size % cfg.num_attention_heads == 0, "hidden_size",
         f"must be divisible by num_attention_heads ({cfg.num_attention_heads})")
    need(cfg.max_seq_len >= 8, "max_seq_len", "must be >= 8")
    need(cfg.learning_rate > 0, "learning_rate", "must be > 0")
    need(cfg.weight_decay >= 0, "weight_decay", "must be >= 0")
    need(0 <= cfg.adam_beta1 < 1, "adam_beta1", "must be in [0, 1)")
    need(0 <= cfg.adam_beta2 < 1, "adam_beta2", "must be in [0, 1)")
    need(cfg.adam_eps > 0, "adam_eps", "must be > 0")
    need(cfg.max_grad_norm >= 0, "max_grad_norm", "must be >= 0 (0 = no clipping)")
    need(cfg.warmup_steps >= 0, "warmup_steps", "must be >= 0")
    need(cfg.keep_last >= 0, "keep_last", "must be >= 0")
    need(all(s >= 0 for s in cfg.keep_steps), "keep_steps", "steps must be >= 0")
    need(cfg.max_documents is None or cfg.max_documents >= 1, "max_documents", "must be >= 1")
    need(cfg.eval_batches is None or cfg.eval_batches >= 1, "eval_batches", "must be >= 1")
    need(cfg.num_threads is None or cfg.num_threads >= 1, "num_threads", "must be >= 1")
    validate_objective(cfg)


def shipped_configs() -> dict[str, Path]:
    """The recipes shipped inside the package: ``{name: path}`` (``default``, ``bert_base_gpu``, ...)."""
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


def load_config(path: str | Path | None = None, **overrides: Any) -> PretrainConfig:
    """Read a YAML (``.yaml``/``.yml``) or TOML (``.toml``) config; ``overrides`` win (None ignored).

    ``path`` is a file or the name of a shipped recipe (:func:`shipped_configs`). Unknown keys and
    bad values raise ``ConfigError`` naming the file and field.
    """
    data: dict[str, Any] = {}
    if path is not None:
        path = resolve_config(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix == ".toml":
                data = tomllib.loads(text)
            else:
                import yaml
                data = yaml.safe_load(text) or {}
        except Exception as exc:  # yaml.YAMLError / tomllib.TOMLDecodeError
            raise ConfigError(f"{path}: cannot parse config ({exc})") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of field: value at the top level")
    data.update({k: v for k, v in overrides.items() if v is not None})
    known = {f.name for f in dataclasses.fields(PretrainConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path or 'config'}: unknown field(s) {', '.join(map(repr, unknown))}; "
                          f"known fields: {', '.join(sorted(known))}")
    try:
        return PretrainConfig(**data)
    except ConfigError as exc:
        raise ConfigError(f"{path or 'config'}: {exc}") from None


# --------------------------------------------------------------------------- data

def corpus_path(cfg: PretrainConfig) -> Path:
    """The corpus file/dir a config names (``"brown"`` = the bundled Brown text)."""
    if cfg.corpus == BUNDLED_CORPUS:
        p = paths.package_data() / "brown.txt.gz"
        if not p.is_file():
            raise ConfigError(f"config field 'corpus': the bundled corpus {p} is missing")
        return p
    p = Path(cfg.corpus).expanduser()
    if not p.exists():
        raise ConfigError(f"config field 'corpus': {p} does not exist")
    return p


@dataclass
class SequenceSet:
    """Variable-length sequences stored flat: row i is ``ids[offsets[i]:offsets[i+1]]``."""

    ids: torch.Tensor            # long [n_tokens]
    words: torch.Tensor          # long [n_tokens], -1 = special token
    types: torch.Tensor          # long [n_tokens] token_type_ids
    offsets: torch.Tensor        # long [n + 1]
    pair_labels: torch.Tensor    # long [n] NSP/SOP labels (-100 when unused)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def from_lists(cls, ids: list[list[int]], words: list[list[int]], types: list[list[int]] | None,
                   labels: list[int] | None) -> "SequenceSet":
        lens = torch.tensor([len(x) for x in ids], dtype=torch.long)
        offsets = torch.zeros(len(ids) + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(lens, 0)
        flat = lambda xs: torch.tensor([t for x in xs for t in x], dtype=torch.long)  # noqa: E731
        return cls(flat(ids), flat(words), flat(types) if types else torch.zeros(int(offsets[-1]), dtype=torch.long),
                   offsets, torch.tensor(labels if labels else [IGNORE_INDEX] * len(ids), dtype=torch.long))

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}.{k}": getattr(self, k) for k in ("ids", "words", "types", "offsets", "pair_labels")}

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor], prefix: str) -> "SequenceSet":
        return cls(*(t[f"{prefix}.{k}"] for k in ("ids", "words", "types", "offsets", "pair_labels")))

    def collate(self, rows: list[int], pad_id: int) -> dict[str, torch.Tensor]:
        """Pad rows into a batch: input_ids, attention_mask, token_type_ids, word_ids [B, T]; pair labels [B]."""
        lens = [int(self.offsets[r + 1] - self.offsets[r]) for r in rows]
        T = max(lens)
        B = len(rows)
        out = {"input_ids": torch.full((B, T), pad_id, dtype=torch.long),
               "attention_mask": torch.zeros((B, T), dtype=torch.long),
               "token_type_ids": torch.zeros((B, T), dtype=torch.long),
               "word_ids": torch.full((B, T), -1, dtype=torch.long)}
        for b, (r, n) in enumerate(zip(rows, lens)):
            s = int(self.offsets[r])
            out["input_ids"][b, :n] = self.ids[s:s + n]
            out["attention_mask"][b, :n] = 1
            out["token_type_ids"][b, :n] = self.types[s:s + n]
            out["word_ids"][b, :n] = self.words[s:s + n]
        out["pair_labels"] = self.pair_labels[rows]
        return out


def heldout_path(cfg: PretrainConfig) -> Path | None:
    """The separate held-out corpus a config names, or None (held-out documents drawn from ``corpus``)."""
    if cfg.heldout_corpus is None:
        return None
    p = Path(cfg.heldout_corpus).expanduser()
    if not p.exists():
        raise ConfigError(f"config field 'heldout_corpus': {p} does not exist")
    return p


def _read_docs(source: Path, limit: int | None) -> list:
    from bertology.pretraining.text_corpus import read_documents

    docs = []
    for doc in read_documents(source):
        docs.append(doc)
        if limit and len(docs) >= limit:
            break
    return docs


def build_sequences(cfg: PretrainConfig, tokenizer, source: Path) -> tuple[SequenceSet, SequenceSet]:
    """Read, split, tokenise and pack: ``(train, eval)``.

    Held-out documents come from ``cfg.heldout_corpus`` when it is set (a split made by the corpus
    builder), else ``heldout_fraction`` of the documents of ``source``, chosen by the seed.
    """
    from bertology.pretraining.text_corpus import pack_documents, tokenize_documents

    tdocs = tokenize_documents(_read_docs(source, cfg.max_documents), tokenizer)
    separate = heldout_path(cfg)
    if separate is not None:
        splits = (tdocs, tokenize_documents(_read_docs(separate, None), tokenizer))
    else:
        n_eval = math.ceil(cfg.heldout_fraction * len(tdocs)) if cfg.heldout_fraction > 0 and len(tdocs) > 1 else 0
        g = torch.Generator().manual_seed(mix_seed(cfg.seed, 1))
        order = torch.randperm(len(tdocs), generator=g).tolist()
        eval_set = set(order[:n_eval])
        splits = ([d for i, d in enumerate(tdocs) if i not in eval_set],
                  [d for i, d in enumerate(tdocs) if i in eval_set])
    out = []
    for k, part in enumerate(splits):
        if pair_task(cfg.objective) is None:
            ids, words = pack_documents(part, max_seq_len=cfg.max_seq_len,
                                        cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id)
            out.append(SequenceSet.from_lists(ids, words, None, None))
        else:
            pairs = make_sentence_pairs(part, objective=pair_task(cfg.objective), max_seq_len=cfg.max_seq_len,
                                        generator=torch.Generator().manual_seed(mix_seed(cfg.seed, 2, k)))
            enc = [encode_pair(p, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id) for p in pairs]
            out.append(SequenceSet.from_lists([e[0] for e in enc], [e[2] for e in enc], [e[1] for e in enc],
                                              [p.label for p in pairs]))
    if len(out[0]) == 0:
        raise ConfigError(f"config field 'corpus': {source} yields no training sequences")
    return out[0], out[1]


# --------------------------------------------------------------------------- distributed

@dataclass
class Runtime:
    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    autocast_dtype: torch.dtype | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()


def setup_runtime(cfg: PretrainConfig) -> Runtime:
    """Pick the device and, under torchrun (WORLD_SIZE > 1), join the process group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise ConfigError("config field 'device': cuda requested but no CUDA device is available")
    device = torch.device(f"cuda:{local}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    elif world > 1 and not use_cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    bf16 = cfg.bf16 if cfg.bf16 is not None else use_cuda and torch.cuda.is_bf16_supported()
    return Runtime(device, rank, world, local, torch.bfloat16 if bf16 else None)


# --------------------------------------------------------------------------- trainer helpers

def linear_schedule(warmup: int, total: int):
    """LR multiplier: linear warm-up over ``warmup`` steps, then linear decay to 0 at ``total``."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return factor


def build_model(cfg: PretrainConfig, tokenizer) -> torch.nn.Module:
    """A freshly initialised model for the config's objective and architecture
    (:func:`bertology.pretraining.objectives.build_model`: ``BertForMaskedLM``, ``BertForPreTraining``
    for NSP/SOP, ALBERT, SpanBERT, ELECTRA generator + discriminator)."""
    return build_objective_model(cfg, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)


def make_optimizer(model: torch.nn.Module, cfg: PretrainConfig) -> torch.optim.AdamW:
    """AdamW; no weight decay on biases and LayerNorm weights (as in BERT)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                             foreach=True)


def stream_indices(n: int, seed: int, start: int, count: int) -> tuple[list[int], list[int]]:
    """Positions ``start..start+count-1`` of the endless shuffled stream: ``(indices, epochs)``.

    Epoch e visits the n sequences in ``randperm(n)`` drawn from a generator seeded by (seed, e).
    """
    idx, ep, cache = [], [], {}
    for pos in range(start, start + count):
        e = pos // n
        if e not in cache:
            cache[e] = torch.randperm(n, generator=torch.Generator().manual_seed(mix_seed(seed, 3, e))).tolist()
        idx.append(cache[e][pos % n])
        ep.append(e)
    return idx, ep


class _Masker:
    """Applies MLM masking to collated batches (masks from per-sequence seeded generators)."""

    def __init__(self, cfg: PretrainConfig, tokenizer):
        self.cfg = cfg
        self.special = list(tokenizer.all_special_ids)
        self.mask_id = tokenizer.mask_token_id
        self.pool = random_token_pool(len(tokenizer), self.special, pool=cfg.random_token_pool)
        self.mcfg = MaskingConfig(probability=cfg.mlm_probability, strategy=cfg.masking)

    def __call__(self, batch: dict[str, torch.Tensor], rows: list[int], epoch: int, seed: int,
                 dynamic: bool) -> tuple[torch.Tensor, torch.Tensor]:
        special = special_tokens_mask(batch["input_ids"], self.special) | (batch["attention_mask"] == 0)
        return mask_batch(batch["input_ids"], special, sequence_indices=rows, seed=seed, epoch=epoch,
                          dynamic=dynamic, mask_token_id=self.mask_id, random_token_ids=self.pool,
                          word_ids=batch["word_ids"], config=self.mcfg)


def _masked_batches(data: SequenceSet, rows: list[int], epochs: list[int], masker: _Masker,
                    cfg: PretrainConfig, pad_id: int) -> dict[str, torch.Tensor]:
    batch = data.collate(rows, pad_id)
    ids = torch.empty_like(batch["input_ids"])
    labels = torch.empty_like(batch["input_ids"])
    # rows of one batch may straddle an epoch boundary: mask each row with its own epoch
    for e in sorted(set(epochs)):
        sel = [i for i, x in enumerate(epochs) if x == e]
        sub = {k: v[sel] for k, v in batch.items()}
        ids[sel], labels[sel] = masker(sub, [rows[i] for i in sel], e, cfg.seed, cfg.dynamic_masking)
    batch["input_ids"], batch["labels"] = ids, labels
    return batch


@torch.no_grad()
def heldout_batches(data: SequenceSet, masker: _Masker, cfg: PretrainConfig, pad_id: int, rank: int = 0,
                    world_size: int = 1):
    """The held-out batches :func:`evaluate` scores (static masks): yields ``(rows, batch, masked
    input ids [B, T], labels [B, T])``, labels ``IGNORE_INDEX`` where nothing is scored."""
    n = len(data)
    n_batches = math.ceil(n / cfg.batch_size)
    if cfg.eval_batches:
        n_batches = min(n_batches, cfg.eval_batches)
    for b in range(rank, n_batches, world_size):
        rows = list(range(b * cfg.batch_size, min(n, (b + 1) * cfg.batch_size)))
        batch = data.collate(rows, pad_id)
        ids, labels = masker(batch, rows, 0, mix_seed(cfg.seed, 4), False)
        yield rows, batch, ids, labels


def _run_data(run_dir: Path):
    """``(config, tokenizer, train, heldout)`` of a finished or running run (its run.json and cache)."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    saved = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["config"]
    known = {f.name for f in dataclasses.fields(PretrainConfig)}
    cfg = PretrainConfig(**{k: v for k, v in saved.items() if k in known})
    caches = sorted((run_dir / "data").glob("sequences-*.safetensors"))
    if len(caches) != 1:
        raise CheckpointError(f"{run_dir / 'data'}: expected one tokenised-sequence cache, found {len(caches)}")
    tensors = load_file(str(caches[0]))
    tok = AutoTokenizer.from_pretrained(str(Path(cfg.tokenizer).expanduser() if cfg.tokenizer else run_dir / "tokenizer"))
    return cfg, tok, SequenceSet.from_tensors(tensors, "train"), SequenceSet.from_tensors(tensors, "eval")


def heldout_loss(run_dir: str | Path, model_dir: str | Path) -> float:
    """The held-out MLM loss (nats per masked token, float32) of the model in ``model_dir`` on the
    run's evaluation targets: what :func:`evaluate` logs, for any checkpoint or exported copy."""
    from transformers import AutoModelForMaskedLM

    cfg, tok, _, heldout = _run_data(Path(run_dir))
    model = AutoModelForMaskedLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    objective = PretrainingLoss(model)
    total, n = 0.0, 0
    with torch.inference_mode():
        for _, batch, ids, labels in heldout_batches(heldout, _Masker(cfg, tok), cfg, tok.pad_token_id):
            _, mlm_sum, _ = objective(ids, batch["attention_mask"], batch["token_type_ids"], labels, None,
                                      reduction="sum")
            total += float(mlm_sum)
            n += int((labels != IGNORE_INDEX).sum())
    return total / n


def unigram_baseline(run_dir: str | Path) -> dict[str, float]:
    """The held-out loss of predicting every masked token by its training-set frequency.

    Frequencies: token counts of the run's tokenised training sequences (add-one smoothed over the
    non-special vocabulary). Scored on exactly the masked targets :func:`evaluate` scores, so it
    compares with ``eval_loss``; also over every non-special held-out token. Nats per token.
    """
    cfg, tok, train, heldout = _run_data(Path(run_dir))
    vocab = len(tok)
    special = torch.tensor(sorted(tok.all_special_ids))
    ordinary = torch.ones(vocab, dtype=torch.bool)
    ordinary[special] = False
    counts = torch.bincount(train.ids, minlength=vocab).double()
    counts[~ordinary] = 0
    logp = torch.full((vocab,), -math.inf, dtype=torch.float64)
    logp[ordinary] = ((counts[ordinary] + 1) / (counts[ordinary] + 1).sum()).log()
    total, n = 0.0, 0
    for _, _, _, labels in heldout_batches(heldout, _Masker(cfg, tok), cfg, tok.pad_token_id):
        targets = labels[labels != IGNORE_INDEX]
        total += float(-logp[targets].sum())
        n += targets.numel()
    every = heldout.ids[ordinary[heldout.ids]]
    return {"unigram_eval_loss": total / n, "eval_targets": n,
            "unigram_loss_all_heldout_tokens": float(-logp[every].mean()), "heldout_tokens": int(every.numel()),
            "train_tokens": int(counts.sum())}


@torch.no_grad()
def evaluate(model, data: SequenceSet, masker: _Masker, cfg: PretrainConfig, rt: Runtime,
             pad_id: int) -> dict[str, float]:
    """Held-out MLM loss (mean over masked tokens, nats), perplexity, and NSP/SOP accuracy.

    Masks are static (seeded by ``seed`` and the row), so evaluations at different steps compare.
    Rows are sharded across processes and the sums all-reduced.
    """
    if cfg.objective in OWN_EVALUATION:  # ELECTRA and SpanBERT report their extra terms
        return evaluate_variant(cfg, model, heldout_batches(data, masker, cfg, pad_id, rt.rank, rt.world_size),
                                rt.device, rt.autocast_dtype, rt.world_size, seed=mix_seed(cfg.seed, 6))
    was_training = model.training
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64)  # loss sum, masked count, pair correct, pair count
    objective = PretrainingLoss(model)
    for rows, batch, ids, labels in heldout_batches(data, masker, cfg, pad_id, rt.rank, rt.world_size):
        with torch.autocast(rt.device.type, dtype=rt.autocast_dtype or torch.float32,
                            enabled=rt.autocast_dtype is not None):
            _, mlm_sum, pair_logits = objective(
                ids.to(rt.device), batch["attention_mask"].to(rt.device), batch["token_type_ids"].to(rt.device),
                labels.to(rt.device), batch["pair_labels"].to(rt.device) if pair_task(cfg.objective) else None,
                reduction="sum")
        sums[0] += float(mlm_sum)
        sums[1] += float((labels != IGNORE_INDEX).sum())
        if pair_logits is not None:
            sums[2] += float((pair_logits.argmax(-1).cpu() == batch["pair_labels"]).sum())
            sums[3] += len(rows)
    if rt.world_size > 1:
        dist.all_reduce(sums)
    model.train(was_training)
    loss = float(sums[0] / sums[1]) if sums[1] > 0 else float("nan")
    res = {"eval_loss": loss, "perplexity": perplexity(loss)}
    if pair_task(cfg.objective) and sums[3] > 0:
        res["eval_pair_accuracy"] = float(sums[2] / sums[3])
    return res


def _all_finite(value: float, rt: Runtime) -> bool:
    """Whether ``value`` is finite on every process (an all-reduce under DDP, so all stop together)."""
    bad = torch.tensor([0.0 if math.isfinite(value) else 1.0], device=rt.device)
    if rt.world_size > 1:
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
    return float(bad) == 0.0


def _params_sha256(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class _Metrics:
    """Append-only JSON-lines metrics file (rank 0 only)."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled

    def truncate_after(self, step: int) -> None:
        """Drop events logged after ``step`` (by a run killed after its last checkpoint), and a last
        line cut short by the kill."""
        if not (self.enabled and self.path.is_file()):
            return
        from bertology.atomic import write_text
        keep = [json.dumps(ev) for ev in _read_metric_events(self.path) if ev["step"] <= step]
        write_text(self.path, "".join(ln + "\n" for ln in keep))

    def log(self, **event: Any) -> None:
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(event) + "\n")
                fh.flush()
                os.fsync(fh.fileno())


def _read_metric_events(path: Path) -> list[dict[str, Any]]:
    """The events of a ``metrics.jsonl``. A last line without its newline is a write in progress (or
    cut by a kill) and is skipped; any other broken line raises ``CheckpointError`` naming file:line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read the metrics ({exc})") from exc
    lines = text.split("\n")  # the last item is "" when the file ends with a newline
    events = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
            if not isinstance(ev, dict) or not isinstance(ev.get("step"), int):
                raise ValueError("expected an object with an integer 'step'")
            for key, value in ev.items():
                if key != "step" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    raise ValueError(f"metric {key!r} is not a number: {value!r}")
        except ValueError as exc:
            if lineno == len(lines):  # unterminated last line: a write in progress or cut short
                break
            raise CheckpointError(f"{path}:{lineno}: broken metrics line ({exc}): {line[:80]!r}") from None
        events.append(ev)
    return events


def read_metrics(run_dir: str | Path):
    """Metrics of a run as a tidy DataFrame: columns ``run, step, metric, value``.

    Metrics: ``loss`` (training loss, mean of the log window), ``lr``, ``tokens_per_s`` (all
    processes), ``eval_loss`` (held-out MLM loss, nats/token), ``perplexity`` (exp(eval_loss)),
    and ``eval_pair_accuracy`` for NSP/SOP runs. If a step was logged twice, the last value wins.
    """
    import pandas as pd

    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    rows = []
    if path.is_file():
        for ev in _read_metric_events(path):
            step = int(ev.pop("step"))
            rows.extend({"run": run_dir.name, "step": step, "metric": k, "value": float(v)} for k, v in ev.items())
    df = pd.DataFrame(rows, columns=["run", "step", "metric", "value"])
    df = df.drop_duplicates(["step", "metric"], keep="last").sort_values(["metric", "step"]).reset_index(drop=True)
    return df.astype({"step": "int64", "value": "float64"})


def _save_checkpoint(run_dir: Path, step: int, model, tokenizer, optimizer, scheduler,
                     state: dict[str, Any]) -> Path:
    from transformers.utils import logging as hf_logging

    final = run_dir / f"checkpoint-{step}"
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar per checkpoint
    try:
        with atomic_dir(final) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            save_trainer_state(tmp, optimizer=optimizer, scheduler=scheduler, state=state, rng=rng_state())
    except OSError as exc:  # disk full, quota, permissions: atomic_dir has removed the partial folder
        done = [s for s, _ in list_checkpoints(run_dir)]
        raise CheckpointError(
            f"{final}: cannot write the checkpoint ({exc.strerror or exc}); nothing of it was left behind, "
            f"the run keeps its checkpoints at steps {done}; free space and re-run to resume from step "
            f"{max(done) if done else 0}") from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return final


def _prune_checkpoints(run_dir: Path, cfg: PretrainConfig, phase_start: int = 0) -> None:
    """Delete rolling checkpoints beyond ``keep_last``; ``keep_steps``, the final one and every
    checkpoint up to the start of the current phase (``phase_start``: kept by an earlier phase) stay."""
    import shutil

    rolling = [(s, p) for s, p in list_checkpoints(run_dir)
               if s not in cfg.keep_steps and s != cfg.max_steps and s > phase_start]
    for _, p in rolling[:max(0, len(rolling) - max(cfg.keep_last, 1))]:
        shutil.rmtree(p, ignore_errors=True)


def _tokenizer_for(cfg: PretrainConfig, run_dir: Path, source: Path, rt: Runtime):
    from transformers import AutoTokenizer

    if cfg.tokenizer or cfg.objective == "distill":  # a student reads with its teacher's tokenizer
        tok_dir = Path(cfg.tokenizer).expanduser() if cfg.tokenizer else teacher_directory(cfg)
        if not (tok_dir / "tokenizer.json").is_file():
            raise ConfigError(f"config field 'tokenizer': {tok_dir} holds no tokenizer.json")
    else:
        tok_dir = run_dir / "tokenizer"
        if rt.is_main and not (tok_dir / "tokenizer.json").is_file():
            from bertology.pretraining.tokenizer import train_tokenizer
            with atomic_dir(tok_dir) as tmp:
                train_tokenizer(source, tmp, kind=cfg.tokenizer_kind, vocab_size=cfg.vocab_size,
                                lowercase=cfg.lowercase, model_max_length=cfg.max_seq_len)
        rt.barrier()
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    if tok.mask_token_id is None or tok.pad_token_id is None or tok.cls_token_id is None:
        raise ConfigError(f"config field 'tokenizer': {tok_dir} lacks mask/pad/cls special tokens")
    return tok


def _load_data(cfg: PretrainConfig, run_dir: Path, source: Path, tokenizer, rt: Runtime,
               corpus_sha: str) -> tuple[SequenceSet, SequenceSet]:
    """Tokenised sequences, cached in ``run_dir/data`` (built by rank 0, read by all)."""
    from safetensors.torch import load_file, save_file

    from bertology.pretraining.text_corpus import corpus_hash

    separate = heldout_path(cfg)
    heldout_key = corpus_hash(separate) if separate is not None else cfg.heldout_fraction
    key = hashlib.sha256(json.dumps([corpus_sha, tokenizer.backend_tokenizer.to_str(), cfg.max_documents,
                                     heldout_key, cfg.max_seq_len, cfg.objective, cfg.seed]).encode()
                         ).hexdigest()[:16]
    cache = run_dir / "data" / f"sequences-{key}.safetensors"
    if rt.is_main and not cache.is_file():
        train, heldout = build_sequences(cfg, tokenizer, source)
        from bertology.atomic import atomic_path
        with atomic_path(cache) as tmp:
            save_file({**train.tensors("train"), **heldout.tensors("eval")}, str(tmp))
    rt.barrier()
    t = load_file(str(cache))
    return SequenceSet.from_tensors(t, "train"), SequenceSet.from_tensors(t, "eval")


# --------------------------------------------------------------------------- the loop

def _phases(info: dict[str, Any]) -> list[dict[str, Any]]:
    """The schedule phases of a run (``run.json``): ``[{"start_step", "max_steps"}, ...]``; one phase
    (from step 0, the config's max_steps) for a run that never changed its max_steps."""
    return info.get("phases") or [{"start_step": 0, "max_steps": info["config"]["max_steps"]}]


def _resume_plan(cfg: PretrainConfig, run_dir: Path, resume_from: Path, new_phase: bool,
                 corpus_sha: str | None = None) -> tuple[int, dict | None]:
    """Check that ``cfg`` may resume the run at ``resume_from``; ``(step, new phase record or None)``.

    The corpus must be the same content (``corpus_sha``, when given, against run.json's
    ``corpus_sha256``): the same path with edited text would otherwise continue, or count as
    finished, on other data than the run records."""
    info = read_json_file(run_dir / "run.json", "run record")
    if not isinstance(info, dict) or not isinstance(info.get("config"), dict):
        raise CheckpointError(f"{run_dir / 'run.json'}: broken run record (no 'config' object)")
    recorded = info.get("corpus_sha256")
    if corpus_sha is not None and recorded is not None and recorded != corpus_sha:
        raise ConfigError(f"{run_dir}: cannot resume: the corpus {info.get('corpus', cfg.corpus)} changed since the "
                          f"run started (sha256 {recorded[:12]}... then, {corpus_sha[:12]}... now); "
                          "train under another run_name")
    saved = info["config"]
    saved.setdefault("random_token_pool", "non_special")  # runs made before the field drew from that pool
    saved = {**_OBJECTIVE_FIELD_DEFAULTS, **saved}  # runs made before the post-BERT objectives existed
    changed = sorted(k for k, v in cfg.to_dict().items() if k not in RESUMABLE_CHANGES and saved.get(k) != v)
    if changed:
        raise ConfigError(f"{run_dir}: cannot resume, config field(s) differ from run.json: {', '.join(changed)}")
    step = int(read_trainer_state(resume_from)["step"])
    current = int(_phases(info)[-1]["max_steps"])
    if cfg.max_steps == current:
        return step, None
    if not new_phase:
        raise ConfigError(
            f"{run_dir}: cannot resume with max_steps {cfg.max_steps}: the run's schedule ends at {current}, and "
            f"another max_steps changes the learning rate (linear decay to 0 at max_steps) from step {step} on. "
            f"Keep max_steps {current}, or continue as a new phase (new_phase=True, CLI --new-phase): the "
            f"schedule is then recomputed for max_steps {cfg.max_steps}, recorded in run.json, and every "
            f"checkpoint kept so far stays")
    if cfg.max_steps <= step:
        raise ConfigError(f"{run_dir}: a new phase must end after the last checkpoint (step {step}); "
                          f"max_steps {cfg.max_steps} does not")
    old, new = linear_schedule(cfg.warmup_steps, current), linear_schedule(cfg.warmup_steps, cfg.max_steps)
    return step, {"start_step": step, "max_steps": cfg.max_steps, "previous_max_steps": current,
                  "lr_multiplier_before": round(old(step), 6), "lr_multiplier_after": round(new(step), 6),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%S")}


def run_pretraining(config: PretrainConfig, *, resume: bool = True, new_phase: bool = False,
                    _stop_after: int | None = None) -> Path:
    """Train according to ``config``; return the run directory.

    ``resume=True`` continues from the last checkpoint of ``config.run_name`` if there is one
    (the config must match the saved one except for logging/checkpoint fields); ``resume=False``
    refuses to overwrite a run that has checkpoints. A ``max_steps`` other than the run's is refused
    unless ``new_phase=True``: the run then continues from its last checkpoint under the linear
    schedule recomputed for the new ``max_steps`` (run.json ``phases`` records where and how the
    learning-rate multiplier changed), and no checkpoint of the earlier phases is pruned.
    ``_stop_after`` (tests) stops right after the step-N checkpoint, like a kill.

    Raises ``TrainingDivergedError`` at the first NaN/inf loss or gradient norm (nothing of that
    step is saved) and ``CheckpointError`` when a checkpoint cannot be written (disk full) or read.
    """
    from tqdm.auto import tqdm

    from bertology.atomic import write_json
    from bertology.pretraining.text_corpus import corpus_hash

    cfg = config
    rt = setup_runtime(cfg)
    run_dir = cfg.run_dir
    source = corpus_path(cfg)
    resume_from = latest_resumable(run_dir) if resume else None
    if not resume and list_checkpoints(run_dir):
        raise CheckpointError(f"{run_dir}: run already has checkpoints; resume it or choose another run_name")
    phase_record, phase_start = None, 0
    corpus_sha = corpus_hash(source)
    if resume_from is not None:
        resumed_step, phase_record = _resume_plan(cfg, run_dir, resume_from, new_phase, corpus_sha)
        if resumed_step >= cfg.max_steps:
            if rt.world_size > 1:
                dist.destroy_process_group()
            return run_dir  # already finished: nothing to do
        phase_start = phase_record["start_step"] if phase_record else \
            int(_phases(read_json_file(run_dir / "run.json", "run record"))[-1]["start_step"])
    if rt.is_main:
        if resume and run_dir.is_dir():
            remove_partial_writes(run_dir)  # folders and files of a save that a kill interrupted
        run_dir.mkdir(parents=True, exist_ok=True)
    rt.barrier()

    tokenizer = _tokenizer_for(cfg, run_dir, source, rt)
    train, heldout = _load_data(cfg, run_dir, source, tokenizer, rt, corpus_sha)
    masker = _Masker(cfg, tokenizer)
    pad_id = tokenizer.pad_token_id

    torch.manual_seed(cfg.seed)  # model initialisation draws from the global RNG (as in HF)
    model = build_model(cfg, tokenizer).to(rt.device)
    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(cfg.warmup_steps, cfg.max_steps))
    torch.manual_seed(mix_seed(cfg.seed, 5, rt.rank))  # dropout stream, distinct per process
    start_step = 0
    metrics = _Metrics(run_dir / "metrics.jsonl", rt.is_main)
    if resume_from is not None:
        from safetensors.torch import load_file
        try:
            weights = load_file(str(resume_from / "model.safetensors"), device=str(rt.device))
        except Exception as exc:
            raise CheckpointError(f"{resume_from / 'model.safetensors'}: corrupt checkpoint weights ({exc}); "
                                  "delete this checkpoint folder to resume from the one before") from exc
        missing, unexpected = model.load_state_dict(weights, strict=False)
        tied = tied_parameter_names(model)  # saved once, under the name they are tied to
        if unexpected or any(k not in tied for k in missing):
            raise CheckpointError(f"{resume_from}: weights do not match the config "
                                  f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
        opt_state, sched_state, state, rng = load_trainer_state(resume_from)
        try:
            optimizer.load_state_dict(opt_state)
            scheduler.load_state_dict(sched_state)
        except (ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise CheckpointError(f"{resume_from}: optimizer/scheduler state does not fit the model ({exc}); "
                                  "delete this checkpoint folder to resume from the one before") from exc
        scheduler.lr_lambdas = [linear_schedule(cfg.warmup_steps, cfg.max_steps)] * len(optimizer.param_groups)
        # the saved learning rate is the old schedule's; a new phase's schedule applies from this step on
        for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
            group["lr"] = base * factor(scheduler.last_epoch)
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
        if state.get("world_size", 1) == rt.world_size:
            set_rng_state(rng)
        start_step = int(state["step"])
        metrics.truncate_after(start_step)
        if phase_record is not None and rt.is_main:
            info = read_json_file(run_dir / "run.json", "run record")
            info["phases"] = _phases(info) + [phase_record]
            write_json(run_dir / "run.json", info)
    elif rt.is_main:
        write_json(run_dir / "run.json", {
            "config": cfg.to_dict(), "seed": cfg.seed, "corpus": str(source), "corpus_sha256": corpus_sha,
            "heldout_corpus": cfg.heldout_corpus,
            "world_size": rt.world_size, "n_train_sequences": len(train), "n_eval_sequences": len(heldout),
            "n_parameters": sum(p.numel() for p in model.parameters()), "objective": cfg.objective,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")})

    raw_model = model
    loss_module: torch.nn.Module = make_loss(cfg, model, rt.device)
    if rt.world_size > 1:
        loss_module = torch.nn.parallel.DistributedDataParallel(
            loss_module, device_ids=[rt.device.index] if rt.device.type == "cuda" else None)
    per_step = cfg.batch_size * rt.world_size * cfg.grad_accum_steps  # sequences per optimizer step

    def trainer_state(step: int) -> dict[str, Any]:
        return {"step": step, "sequences_seen": step * per_step, "world_size": rt.world_size,
                "batch_size": cfg.batch_size, "grad_accum_steps": cfg.grad_accum_steps, "max_steps": cfg.max_steps}

    def checkpoint(step: int) -> None:
        finite = all(bool(torch.isfinite(p).all()) for p in raw_model.parameters())
        if not _all_finite(0.0 if finite else math.inf, rt):  # finite losses can still leave inf weights
            if rt.world_size > 1:
                dist.destroy_process_group()
            raise TrainingDivergedError(f"{run_dir}: non-finite weights at step {step}; checkpoint not written. "
                                        "Lower learning_rate and start a new run_name")
        if rt.is_main:
            _save_checkpoint(run_dir, step, raw_model, tokenizer, optimizer, scheduler, trainer_state(step))
            _prune_checkpoints(run_dir, cfg, phase_start)
        rt.barrier()

    if start_step == 0 and 0 in cfg.keep_steps:
        checkpoint(0)
    raw_model.train()
    bar = tqdm(total=cfg.max_steps, initial=start_step, disable=not (cfg.progress and rt.is_main),
               desc=cfg.run_name, dynamic_ncols=True, file=sys.stderr)
    window_loss, window_n, window_tokens, t0 = 0.0, 0, 0, time.perf_counter()
    for step in range(start_step, cfg.max_steps):
        loss_sum = 0.0
        for micro in range(cfg.grad_accum_steps):
            pos = (step * cfg.grad_accum_steps + micro) * cfg.batch_size * rt.world_size + rt.rank * cfg.batch_size
            rows, epochs = stream_indices(len(train), cfg.seed, pos, cfg.batch_size)
            batch = {k: v.to(rt.device) for k, v in _masked_batches(train, rows, epochs, masker, cfg, pad_id).items()}
            sync = micro == cfg.grad_accum_steps - 1 or rt.world_size == 1
            ctx = loss_module.no_sync() if not sync else contextlib.nullcontext()
            with ctx:
                with torch.autocast(rt.device.type, dtype=rt.autocast_dtype or torch.float32,
                                    enabled=rt.autocast_dtype is not None):
                    loss, _, _ = loss_module(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"],
                                             batch["labels"], batch["pair_labels"] if pair_task(cfg.objective) else None)
                (loss / cfg.grad_accum_steps).backward()
            loss_sum += float(loss.detach()) / cfg.grad_accum_steps
            window_tokens += int(batch["attention_mask"].sum()) * rt.world_size
        grad_norm = 0.0
        if cfg.max_grad_norm > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.max_grad_norm))
        lr = scheduler.get_last_lr()[0]
        if not _all_finite(loss_sum + grad_norm, rt):  # before the optimizer step: the weights stay good
            bar.close()
            last = [s for s, _ in list_checkpoints(run_dir)]
            if rt.world_size > 1:
                dist.destroy_process_group()
            raise TrainingDivergedError(
                f"{run_dir}: training diverged at step {step + 1}: loss {loss_sum} (gradient norm {grad_norm}) "
                f"on at least one process, learning rate {lr:.3g}. Stopped without saving this step; the last "
                f"checkpoint (finite weights) is step {max(last) if last else 'none'}. Lower learning_rate (or raise "
                f"warmup_steps) and start a new run_name")
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        window_loss += loss_sum
        window_n += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss_sum:.3f}", lr=f"{lr:.2e}")
        if done % cfg.log_every == 0 or done == cfg.max_steps:
            elapsed = time.perf_counter() - t0
            metrics.log(step=done, loss=window_loss / window_n, lr=lr, tokens_per_s=window_tokens / max(elapsed, 1e-9))
            window_loss, window_n, window_tokens, t0 = 0.0, 0, 0, time.perf_counter()
        if len(heldout) and (done % cfg.eval_every == 0 or done == cfg.max_steps):
            ev = evaluate(raw_model, heldout, masker, cfg, rt, pad_id)
            metrics.log(step=done, **ev)
            bar.set_postfix(loss=f"{loss_sum:.3f}", eval_loss=f"{ev['eval_loss']:.3f}")
            t0 = time.perf_counter()  # evaluation time does not count against training tokens/s
        if done % cfg.save_every == 0 or done in cfg.keep_steps or done == cfg.max_steps:
            checkpoint(done)
            t0 = time.perf_counter()
        if _stop_after is not None and done >= _stop_after:
            break
    bar.close()

    if rt.world_size > 1:
        digests: list[Any] = [None] * rt.world_size
        dist.all_gather_object(digests, _params_sha256(raw_model))
        if rt.is_main:
            info = json.loads((run_dir / "run.json").read_text())
            info["final_weights_sha256_per_rank"] = digests
            write_json(run_dir / "run.json", info)
        rt.barrier()
        dist.destroy_process_group()
    return run_dir


def main(argv: list[str] | None = None) -> None:
    """``python -m bertology.pretraining.trainer --config FILE [--output NAME] [--max-steps N [--new-phase]]
    [--no-resume]`` (also the entry point for ``torchrun``)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--config", default=None)
    ap.add_argument("--output", default=None, help="run name (folder under the models dir)")
    ap.add_argument("--output-root", default=None)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--no-resume", action="store_true")
    ap.add_argument("--new-phase", action="store_true",
                    help="resume with another --max-steps as a new schedule phase (recorded in run.json)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    cfg = load_config(args.config, run_name=args.output, max_steps=args.max_steps, output_root=args.output_root,
                      progress=False if args.no_progress else None)
    run_dir = run_pretraining(cfg, resume=not args.no_resume, new_phase=args.new_phase)
    if int(os.environ.get("RANK", "0")) == 0:
        print(run_dir)


if __name__ == "__main__":
    main()
