"""The data of a pretraining run: the corpus read, split into training and held-out documents,
tokenised and packed into sequences (cached in the run folder), the run's tokenizer, the shuffled
stream of training rows and their masked batches, and the held-out batches evaluation scores.

Everything here is a function of the config and the seed -- the data order of ``(seed, position)``
(:func:`stream_indices`), a mask of ``(seed, row, epoch)`` (:class:`Masker`) -- so a resumed run
sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import torch

from bertology import paths
from bertology.atomic import atomic_path
from bertology.checkpoints import atomic_dir
from bertology.errors import CheckpointError, ConfigError
from bertology.pretraining.config import BUNDLED_CORPUS, PretrainConfig
from bertology.pretraining.masking import (
    IGNORE_INDEX,
    MaskingConfig,
    ReplacementUnit,
    Strategy,
    encode_pair,
    make_sentence_pairs,
    mask_batch,
    mix_seed,
    random_token_pool,
    special_tokens_mask,
)
from bertology.pretraining.objectives import initial_model_directory, pair_task, teacher_directory
from bertology.pretraining.runtime import Runtime
from bertology.pretraining.text_corpus import corpus_hash, pack_documents, read_documents, tokenize_documents

if TYPE_CHECKING:  # (the tokenizers package is imported where a tokenizer is trained)
    from bertology.pretraining.tokenizer import TokenizerKind

__all__ = [
    "corpus_path",
    "heldout_path",
    "SequenceSet",
    "build_sequences",
    "load_sequences",
    "run_tokenizer",
    "stream_indices",
    "Masker",
    "masked_batch",
    "pad_width",
    "heldout_batches",
    "read_run_data",
]


# --------------------------------------------------------------------------- corpus -> sequences


# what a padding position holds in each [B, T] tensor of a batch (input_ids: the tokenizer's pad
# id): outside the attention mask, in no word, scored nowhere -- shared by SequenceSet.collate and
# pad_width
PAD_FILL = {"attention_mask": 0, "token_type_ids": 0, "word_ids": -1, "labels": IGNORE_INDEX}


@dataclass
class SequenceSet:
    """Variable-length sequences stored flat: row i is ``ids[offsets[i]:offsets[i+1]]``."""

    ids: torch.Tensor  # long [n_tokens]
    words: torch.Tensor  # long [n_tokens], -1 = special token
    types: torch.Tensor  # long [n_tokens] token_type_ids
    offsets: torch.Tensor  # long [n + 1]
    pair_labels: torch.Tensor  # long [n] NSP/SOP labels (-100 when unused)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def from_lists(
        cls, ids: list[list[int]], words: list[list[int]], types: list[list[int]] | None, labels: list[int] | None
    ) -> SequenceSet:
        lens = torch.tensor([len(x) for x in ids], dtype=torch.long)
        offsets = torch.zeros(len(ids) + 1, dtype=torch.long)
        offsets[1:] = torch.cumsum(lens, 0)
        flat = lambda xs: torch.tensor([t for x in xs for t in x], dtype=torch.long)  # noqa: E731
        return cls(
            flat(ids),
            flat(words),
            flat(types) if types else torch.zeros(int(offsets[-1]), dtype=torch.long),
            offsets,
            torch.tensor(labels if labels else [IGNORE_INDEX] * len(ids), dtype=torch.long),
        )

    def tensors(self, prefix: str) -> dict[str, torch.Tensor]:
        return {f"{prefix}.{k}": getattr(self, k) for k in ("ids", "words", "types", "offsets", "pair_labels")}

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor], prefix: str) -> SequenceSet:
        return cls(*(t[f"{prefix}.{k}"] for k in ("ids", "words", "types", "offsets", "pair_labels")))

    def collate(self, rows: list[int], pad_id: int) -> dict[str, torch.Tensor]:
        """Pad rows into a batch: input_ids, attention_mask, token_type_ids, word_ids [B, T]; pair labels [B]."""
        lens = [int(self.offsets[r + 1] - self.offsets[r]) for r in rows]
        T = max(lens)
        B = len(rows)
        out = {
            key: torch.full((B, T), pad_id if key == "input_ids" else PAD_FILL[key], dtype=torch.long)
            for key in ("input_ids", "attention_mask", "token_type_ids", "word_ids")
        }
        for b, (r, n) in enumerate(zip(rows, lens)):
            s = int(self.offsets[r])
            out["input_ids"][b, :n] = self.ids[s : s + n]
            out["attention_mask"][b, :n] = 1
            out["token_type_ids"][b, :n] = self.types[s : s + n]
            out["word_ids"][b, :n] = self.words[s : s + n]
        out["pair_labels"] = self.pair_labels[rows]
        return out


def corpus_path(cfg: PretrainConfig) -> Path:
    """The corpus file/dir a config names (``"brown"`` = the bundled Brown text)."""
    if cfg.corpus == BUNDLED_CORPUS:
        p = paths.package_data() / "brown.txt.gz"
        if not p.is_file():
            raise ConfigError(f"config field 'corpus': the bundled corpus {p} is missing")
        return p
    p = Path(cfg.corpus).expanduser()
    if not p.exists():
        raise ConfigError(_missing_corpus("corpus", p))
    return p


def _missing_corpus(field: str, p: Path) -> str:
    """The error for a corpus path that does not exist; for the train/ or heldout/ split of a corpus
    folder (the layout ``bertology build-corpus`` writes), how to build it."""
    message = f"config field {field!r}: {p} does not exist"
    if p.name in ("train", "heldout") and not (p.parent / "manifest.json").is_file():
        message += (
            f" (the {p.name} split of a corpus the builder makes: `bertology build-corpus --out {p.parent}`, "
            "with the --sources the recipe's comment names)"
        )
    return message


def heldout_path(cfg: PretrainConfig) -> Path | None:
    """The separate held-out corpus a config names, or None (held-out documents drawn from ``corpus``)."""
    if cfg.heldout_corpus is None:
        return None
    p = Path(cfg.heldout_corpus).expanduser()
    if not p.exists():
        raise ConfigError(_missing_corpus("heldout_corpus", p))
    return p


def _read_docs(source: Path, limit: int | None) -> list[list[str]]:
    """The first ``limit`` documents of ``source`` (all when None), each a list of sentences."""
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
    label = (
        (lambda what: f"tokenising {what} (once; cached in the run folder)") if cfg.progress else (lambda what: None)
    )
    tdocs = tokenize_documents(_read_docs(source, cfg.max_documents), tokenizer, progress=label(f"{source.name}"))
    separate = heldout_path(cfg)
    if separate is not None:
        splits = (tdocs, tokenize_documents(_read_docs(separate, None), tokenizer, progress=label(separate.name)))
    else:
        n_eval = math.ceil(cfg.heldout_fraction * len(tdocs)) if cfg.heldout_fraction > 0 and len(tdocs) > 1 else 0
        g = torch.Generator().manual_seed(mix_seed(cfg.seed, 1))
        order = torch.randperm(len(tdocs), generator=g).tolist()
        eval_set = set(order[:n_eval])
        splits = (
            [d for i, d in enumerate(tdocs) if i not in eval_set],
            [d for i, d in enumerate(tdocs) if i in eval_set],
        )
    out = []
    if cfg.progress:
        print(
            f"packing {sum(len(p) for p in splits):,} documents into sequences of {cfg.max_seq_len} tokens "
            f"({cfg.packing})",
            file=sys.stderr,
            flush=True,
        )
    pairing = pair_task(cfg.objective)
    for k, part in enumerate(splits):
        if pairing is None:
            ids, words = pack_documents(
                part,
                max_seq_len=cfg.max_seq_len,
                cls_id=tokenizer.cls_token_id,
                sep_id=tokenizer.sep_token_id,
                packing=cfg.packing,
            )
            out.append(SequenceSet.from_lists(ids, words, None, None))
        else:
            pairs = make_sentence_pairs(
                part,
                objective=pairing,
                max_seq_len=cfg.max_seq_len,
                generator=torch.Generator().manual_seed(mix_seed(cfg.seed, 2, k)),
            )
            enc = [encode_pair(p, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id) for p in pairs]
            out.append(
                SequenceSet.from_lists(
                    [e[0] for e in enc], [e[2] for e in enc], [e[1] for e in enc], [p.label for p in pairs]
                )
            )
    if len(out[0]) == 0:
        raise ConfigError(f"config field 'corpus': {source} yields no training sequences")
    return out[0], out[1]


# --------------------------------------------------------------------------- the run's tokenizer and sequence cache


def tokenizer_directory(cfg: PretrainConfig, run_dir: Path) -> Path:
    """Where a run's tokenizer lives: the config's ``tokenizer``, the ``init_from`` model's, a
    distillation teacher's, else the one the run trains into ``run_dir/tokenizer``."""
    if cfg.tokenizer:
        return Path(cfg.tokenizer).expanduser()
    if cfg.init_from:
        return initial_model_directory(cfg)
    if cfg.objective == "distill":  # a student reads with its teacher's tokenizer
        return teacher_directory(cfg)
    return run_dir / "tokenizer"


def run_tokenizer(cfg: PretrainConfig, run_dir: Path, source: Path, rt: Runtime):
    """The run's fast tokenizer: the config's ``tokenizer`` directory, a distillation teacher's, or
    one trained on ``source`` into ``run_dir/tokenizer`` (by rank 0, once; the others wait)."""
    from transformers import AutoTokenizer

    tok_dir = tokenizer_directory(cfg, run_dir)
    if tok_dir != run_dir / "tokenizer":
        if not (tok_dir / "tokenizer.json").is_file():
            raise ConfigError(f"config field 'tokenizer': {tok_dir} holds no tokenizer.json")
    else:
        if rt.is_main and not (tok_dir / "tokenizer.json").is_file():
            from bertology.pretraining.tokenizer import train_tokenizer

            with atomic_dir(tok_dir) as tmp:
                train_tokenizer(
                    source,
                    tmp,
                    kind=cast("TokenizerKind", cfg.tokenizer_kind),  # checked by PretrainConfig
                    vocab_size=cfg.vocab_size,
                    lowercase=cfg.lowercase,
                    model_max_length=cfg.max_seq_len,
                )
        rt.barrier()
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    if tok.mask_token_id is None or tok.pad_token_id is None or tok.cls_token_id is None:
        raise ConfigError(f"config field 'tokenizer': {tok_dir} lacks mask/pad/cls special tokens")
    return tok


def load_sequences(
    cfg: PretrainConfig, run_dir: Path, source: Path, tokenizer, rt: Runtime, corpus_sha: str
) -> tuple[SequenceSet, SequenceSet]:
    """``(train, heldout)`` sequences, cached in ``run_dir/data`` under a key of everything they
    depend on (``corpus_sha`` = the corpus content); built by rank 0, read by all."""
    from safetensors.torch import load_file, save_file

    separate = heldout_path(cfg)
    heldout_key = corpus_hash(separate) if separate is not None else cfg.heldout_fraction
    key = hashlib.sha256(
        json.dumps(
            [
                corpus_sha,
                tokenizer.backend_tokenizer.to_str(),
                cfg.max_documents,
                heldout_key,
                cfg.max_seq_len,
                cfg.objective,
                cfg.seed,
                *([cfg.packing] if cfg.packing != "doc_sentences" else []),
            ]
        ).encode()
    ).hexdigest()[:16]
    cache = run_dir / "data" / f"sequences-{key}.safetensors"
    if rt.is_main and not cache.is_file():
        train, heldout = build_sequences(cfg, tokenizer, source)
        with atomic_path(cache) as tmp:
            save_file({**train.tensors("train"), **heldout.tensors("eval")}, str(tmp))
    rt.barrier()
    t = load_file(str(cache))
    return SequenceSet.from_tensors(t, "train"), SequenceSet.from_tensors(t, "eval")


# --------------------------------------------------------------------------- batches


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


class Masker:
    """Applies MLM masking to collated batches (masks from per-sequence seeded generators)."""

    def __init__(self, cfg: PretrainConfig, tokenizer):
        self.cfg = cfg
        self.special = list(tokenizer.all_special_ids)
        self.mask_id = tokenizer.mask_token_id
        self.pool = random_token_pool(len(tokenizer), self.special, pool=cfg.random_token_pool)
        self.mcfg = MaskingConfig(  # the config's checks hold masking and replacement_unit to these names
            probability=cfg.mlm_probability,
            strategy=cast(Strategy, cfg.masking),
            replacement_unit=cast("ReplacementUnit | None", cfg.replacement_unit),
        )

    def __call__(
        self, batch: dict[str, torch.Tensor], rows: list[int], epoch: int, seed: int, dynamic: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked ``input_ids [B, T]`` and ``labels [B, T]`` of a collated batch of ``rows`` (special
        and padding positions never chosen); masks drawn from ``(seed, row, epoch)``."""
        special = special_tokens_mask(batch["input_ids"], self.special) | (batch["attention_mask"] == 0)
        return mask_batch(
            batch["input_ids"],
            special,
            sequence_indices=rows,
            seed=seed,
            epoch=epoch,
            dynamic=dynamic,
            mask_token_id=self.mask_id,
            random_token_ids=self.pool,
            word_ids=batch["word_ids"],
            config=self.mcfg,
        )


def masked_batch(
    data: SequenceSet, rows: list[int], epochs: list[int], masker: Masker, cfg: PretrainConfig, pad_id: int
) -> dict[str, torch.Tensor]:
    """The training batch of ``rows`` (seen in ``epochs``): :meth:`SequenceSet.collate`'s tensors
    with ``input_ids`` masked and ``labels [B, T]`` added (``IGNORE_INDEX`` where nothing is scored)."""
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


def pad_width(batch: dict[str, torch.Tensor], width: int, pad_id: int) -> dict[str, torch.Tensor]:
    """``batch``'s ``[B, T]`` tensors padded on the right to ``[B, width]`` (``width`` >= T): pad
    tokens outside the attention mask, scored nowhere (``labels`` = ``IGNORE_INDEX``), so every loss
    and gradient is that of the unpadded batch. ``[B]`` tensors (pair labels) are kept as they are.

    The trainer pads to the config's ``max_seq_len`` under ``compile: true`` (one shape: a batch one
    token narrower, e.g. at a document's end, would otherwise make torch.compile build the graph
    again, ~45 s on an H100) and to a multiple of 8 on CUDA (tensor-core and attention-kernel
    alignment)."""
    T = batch["input_ids"].shape[1]
    if width <= T:
        return batch
    out = {}
    for key, value in batch.items():
        if value.dim() == 2 and value.shape[1] == T:
            fill = pad_id if key == "input_ids" else PAD_FILL.get(key, 0)
            value = torch.nn.functional.pad(value, (0, width - T), value=fill)
        out[key] = value
    return out


@torch.no_grad()
def heldout_batches(
    data: SequenceSet, masker: Masker, cfg: PretrainConfig, pad_id: int, rank: int = 0, world_size: int = 1
):
    """The held-out batches evaluation scores (static masks): yields ``(rows, batch, masked
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


def read_run_data(run_dir: Path):
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
    tok = AutoTokenizer.from_pretrained(str(tokenizer_directory(cfg, run_dir)))
    return cfg, tok, SequenceSet.from_tensors(tensors, "train"), SequenceSet.from_tensors(tensors, "eval")
