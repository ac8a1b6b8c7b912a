"""The feature store: every layer's word vectors (and attention maps) of a model over a corpus, on disk.

Layout of a store directory ``<stores_dir>/<key>/`` where ``key`` hashes (model fingerprint,
corpus fingerprint, settings):

- ``plan.json``: settings, fingerprints and the shard plan (which sentences each shard holds);
- ``shard-00000.safetensors`` …: ``sentence_ids [S]``, ``word_counts [S]``,
  ``hidden [L+1, words, D]`` and, with attentions, ``attention [L, H, Σ w²]`` (each sentence's
  ``[w, w]`` word attention flattened), ``special [L, H, words, 2]`` (attention to the first and
  other special tokens) and ``token_offsets [S, L, H, 2, 2K+2]`` (int32: per sentence, layer and
  head, how many query tokens -- word pieces, special tokens -- have their token-level attention
  argmax at relative token offset ``-K..K`` or elsewhere; Voita et al.'s positional heads are a
  token-level property, and full token maps would be too big to keep);
- ``manifest.json``: written last; its presence means the store is complete.

Every file is written atomically. Sentences are sorted by length into shards, so a shard's
content is fixed by the plan: a killed extraction resumes by computing only missing or corrupt
shards and gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator, Literal, Sequence

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tqdm.auto import tqdm

from bertology import atomic, paths
from bertology.corpus import Corpus
from bertology.errors import StoreError
from bertology.features import (LongPolicy, Pooling, Segment, forward_segments, low_precision_linears,
                                model_max_tokens, segment_sentence, token_offset_bins, tokenize_sentences)
from bertology.models import LoadedModel
from bertology.runtime import resolve_precision

# 2: shards with attentions also hold token-level argmax offset counts (``token_offsets``)
STORE_VERSION = 2
TOKEN_OFFSET_WINDOW = 8
TokenQueries = Literal["all", "words", "special"]


@dataclass(frozen=True)
class ExtractionSettings:
    """What determines a store's content besides the model and the corpus."""

    pooling: Pooling = "first"
    attentions: bool = True
    long_policy: LongPolicy = "error"
    batch_tokens: int = 1024
    shard_size: int = 256
    amp_dtype: str | None = None  # compute: None = float32; "bfloat16" / "float16" = autocast
    storage: str = "float32"      # on-disk dtype of hidden states and attention: float32 | float16
    token_offset_window: int = TOKEN_OFFSET_WINDOW  # token-level argmax offsets counted in bins -K..K (+ other)
    version: int = STORE_VERSION

    def validate(self) -> None:
        if self.pooling not in ("first", "last", "mean"):
            raise StoreError(f"pooling must be first, last or mean, not {self.pooling!r}")
        if self.long_policy not in ("error", "window"):
            raise StoreError(f"long_policy must be 'error' or 'window', not {self.long_policy!r}")
        if self.batch_tokens < 1 or self.shard_size < 1:
            raise StoreError("batch_tokens and shard_size must be positive")
        if self.amp_dtype not in (None, "bfloat16", "float16"):
            raise StoreError(f"amp_dtype must be None, 'bfloat16' or 'float16', not {self.amp_dtype!r}")
        if self.storage not in ("float32", "float16"):
            raise StoreError(f"storage must be 'float32' or 'float16', not {self.storage!r}")
        if self.token_offset_window < 1:
            raise StoreError(f"token_offset_window must be positive, not {self.token_offset_window!r}")


class FeatureStore:
    """Read access to a complete store. All arrays float32 (whatever the storage dtype), word
    level, corpus order.

    ``n_layers`` counts hidden-state layers including the embeddings (``num_hidden_layers + 1``).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        manifest_file = self.path / "manifest.json"
        if not manifest_file.is_file():
            raise StoreError(f"{self.path}: not a complete feature store (no manifest.json)")
        try:
            self.manifest: dict = json.loads(manifest_file.read_text())
        except json.JSONDecodeError as exc:
            raise StoreError(f"{manifest_file}: corrupt manifest: {exc}") from exc
        m = self.manifest
        self.n_layers: int = m["n_layers"]
        self.n_heads: int = m["n_heads"]
        self.dim: int = m["dim"]
        self.n_sentences: int = m["n_sentences"]
        self.has_attention: bool = m["settings"]["attentions"]
        window = m["settings"].get("token_offset_window")
        self.has_token_offsets: bool = self.has_attention and window is not None
        self.token_offset_window: int | None = int(window) if window is not None else None
        self.word_counts = np.asarray(m["word_counts"], dtype=np.int64)
        self.sentence_offsets = np.concatenate([[0], np.cumsum(self.word_counts)]).astype(np.int64)
        self.n_words = int(self.sentence_offsets[-1])
        # where each sentence lives: shard index, row within shard, word offset, attention offset
        self._shards = [self.path / name for name in m["shards"]]
        self._where = np.zeros((self.n_sentences, 4), dtype=np.int64)
        for k, sids in enumerate(m["plan"]):
            counts = self.word_counts[sids]
            word_off = np.concatenate([[0], np.cumsum(counts)[:-1]])
            att_off = np.concatenate([[0], np.cumsum(counts**2)[:-1]])
            self._where[sids] = np.stack([np.full(len(sids), k), np.arange(len(sids)), word_off, att_off], 1)
        self._handles: dict[int, object] = {}

    def __repr__(self) -> str:
        return (f"FeatureStore({self.manifest['model']['name']!r} × {self.manifest['corpus']['name']!r}: "
                f"{self.n_sentences} sentences, {self.n_words} words, {self.n_layers} layers × {self.dim} dims"
                f"{', attention' if self.has_attention else ''})")

    def _open(self, k: int):
        if k not in self._handles:
            try:
                self._handles[k] = safe_open(str(self._shards[k]), framework="pt")
            except Exception as exc:
                raise StoreError(f"{self._shards[k]}: corrupt shard ({exc}); delete the store to re-extract") from exc
        return self._handles[k]

    def hidden(self, i: int) -> np.ndarray:
        """Sentence ``i``'s word vectors of every layer: ``[n_layers, words_i, dim]``."""
        k, _, off, _ = self._where[i]
        w = self.word_counts[i]
        return self._open(int(k)).get_slice("hidden")[:, int(off) : int(off + w)].float().numpy()

    def attention(self, i: int, *, normalise: bool = True) -> np.ndarray:
        """Sentence ``i``'s word-to-word attention ``[n_layers - 1, heads, words_i, words_i]``.

        With ``normalise`` each row is divided by the mass it puts on words (so rows sum to 1);
        otherwise the raw mass (the rest went to special tokens: :meth:`special_attention`).
        """
        if not self.has_attention:
            raise StoreError(f"{self.path}: extracted without attentions")
        k, _, _, aoff = self._where[i]
        w = int(self.word_counts[i])
        flat = self._open(int(k)).get_slice("attention")[:, :, int(aoff) : int(aoff) + w * w].float().numpy()
        att = flat.reshape(flat.shape[0], flat.shape[1], w, w)
        if normalise:
            att = att / np.clip(att.sum(-1, keepdims=True), 1e-12, None)
        return att

    def special_attention(self, i: int) -> np.ndarray:
        """Attention of each word to ``[CLS]``-like (index 0) and ``[SEP]``-like (index 1) tokens:
        ``[n_layers - 1, heads, words_i, 2]``."""
        if not self.has_attention:
            raise StoreError(f"{self.path}: extracted without attentions")
        k, _, off, _ = self._where[i]
        w = self.word_counts[i]
        return self._open(int(k)).get_slice("special")[:, :, int(off) : int(off + w)].float().numpy()

    @property
    def token_offset_bins(self) -> list[int | str]:
        """Labels of the last axis of :meth:`token_offsets`: offsets ``-K..K``, then ``"other"``."""
        self._need_token_offsets()
        return token_offset_bins(int(self.token_offset_window))

    def _need_token_offsets(self) -> None:
        if not self.has_attention:
            raise StoreError(f"{self.path}: extracted without attentions")
        if not self.has_token_offsets:
            raise StoreError(f"{self.path}: store version {self.manifest.get('version')} has no token-level "
                             f"argmax offsets (added in store version 2); extract again (a new store key)")

    def token_offsets(self, i: int, *, queries: TokenQueries = "all") -> np.ndarray:
        """Sentence ``i``'s token-level argmax offset counts ``[n_layers - 1, heads, 2K+2]`` (int64).

        Entry ``[l, h, b]``: how many query tokens of the sentence have head ``(l, h)``'s attention
        argmax (over every token, special tokens included) at relative token offset
        :attr:`token_offset_bins` ``[b]`` (the last bin: further than ``K``). ``queries``: ``"all"``
        query tokens (default; ``counts.sum(-1)`` = the sentence's token count), only ``"words"``
        (word pieces) or only ``"special"`` (``[CLS]``/``[SEP]``-like tokens).
        """
        self._need_token_offsets()
        k, row, _, _ = self._where[i]
        counts = self._open(int(k)).get_slice("token_offsets")[int(row) : int(row) + 1].numpy()[0].astype(np.int64)
        return _select_queries(counts, queries)

    def token_offset_totals(self, *, queries: TokenQueries = "all") -> np.ndarray:
        """:meth:`token_offsets` summed over every sentence of the store: ``[n_layers - 1, heads, 2K+2]``."""
        self._need_token_offsets()
        total = None
        for k in range(len(self._shards)):
            block = self._open(k).get_tensor("token_offsets").numpy().astype(np.int64).sum(0)
            total = block if total is None else total + block
        return _select_queries(total, queries)

    def layers(self, layers: Sequence[int] | None = None) -> np.ndarray:
        """Word vectors of the chosen layers, corpus order: ``[len(layers), n_words, dim]``."""
        layers = list(range(self.n_layers)) if layers is None else [int(l) for l in layers]
        for l in layers:
            if not -self.n_layers <= l < self.n_layers:
                raise StoreError(f"layer {l} out of range: the store has layers 0..{self.n_layers - 1}")
        out = np.empty((len(layers), self.n_words, self.dim), dtype=np.float32)
        for k, sids in enumerate(self.manifest["plan"]):
            block = self._open(k).get_slice("hidden")
            rows = np.concatenate([np.arange(self.sentence_offsets[s], self.sentence_offsets[s + 1]) for s in sids])
            for j, l in enumerate(layers):
                out[j, rows] = block[l].float().numpy()
        return out

    def layer(self, l: int) -> np.ndarray:
        """One layer's word vectors ``[n_words, dim]`` (0 = embeddings)."""
        return self.layers([l])[0]

    def iter_attention(self, *, normalise: bool = True) -> Iterator[tuple[int, np.ndarray]]:
        """``(i, attention(i))`` for every sentence in corpus order."""
        for i in range(self.n_sentences):
            yield i, self.attention(i, normalise=normalise)


def _select_queries(counts: np.ndarray, queries: str) -> np.ndarray:
    """``[..., 2, bins]`` counts by query kind (0 word pieces, 1 special tokens) -> ``[..., bins]``."""
    if queries == "all":
        return counts.sum(-2)
    if queries == "words":
        return counts[..., 0, :]
    if queries == "special":
        return counts[..., 1, :]
    raise StoreError(f"queries must be 'all', 'words' or 'special', not {queries!r}")


# --------------------------------------------------------------------------- extraction

def store_key(lm: LoadedModel, corpus_fingerprint: str, settings: ExtractionSettings) -> str:
    payload = json.dumps({"model": lm.fingerprint, "corpus": corpus_fingerprint, "settings": asdict(settings)},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def _plan_shards(segments_per_sentence: list[list[Segment]], shard_size: int) -> list[list[int]]:
    lengths = [max(s.n_tokens for s in segs) for segs in segments_per_sentence]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[i : i + shard_size] for i in range(0, len(order), shard_size)]


def _batches(segments: list[Segment], batch_tokens: int) -> Iterator[list[Segment]]:
    """Consecutive groups whose padded size (count × longest) stays within ``batch_tokens``."""
    batch: list[Segment] = []
    longest = 0
    for seg in sorted(segments, key=lambda s: (s.n_tokens, s.sentence, s.word_start)):
        new_longest = max(longest, seg.n_tokens)
        if batch and new_longest * (len(batch) + 1) > batch_tokens:
            yield batch
            batch, new_longest = [], seg.n_tokens
        batch.append(seg)
        longest = new_longest
    if batch:
        yield batch


def _shard_valid(path: Path, sentence_ids: list[int]) -> bool:
    try:
        with safe_open(str(path), framework="pt") as f:
            return f.get_tensor("sentence_ids").tolist() == sentence_ids
    except Exception:
        return False


class _ShardBuffers:
    """Output arrays reused from shard to shard (flat, sized for the largest shard): a new
    allocation per shard would fault in fresh pages every time, which costs more than the copy."""

    def __init__(self, lm: LoadedModel, settings: ExtractionSettings, max_words: int, max_pairs: int):
        self.shape = (lm.num_layers + 1, lm.num_layers, lm.num_heads, lm.hidden_size)
        L1, L, H, D = self.shape
        dtype = getattr(torch, settings.storage)
        self.hidden = torch.empty(L1 * max_words * D, dtype=dtype)
        self.attention = torch.empty(L * H * max_pairs if settings.attentions else 0, dtype=dtype)
        self.special = torch.empty(L * H * max_words * 2 if settings.attentions else 0, dtype=dtype)

    def views(self, n_words: int, n_pairs: int, attentions: bool):
        """Contiguous ``hidden [L+1, n, D]``, ``attention [L, H, pairs]``, ``special [L, H, n, 2]``."""
        L1, L, H, D = self.shape
        hidden = self.hidden[: L1 * n_words * D].view(L1, n_words, D)
        if not attentions:
            return hidden, None, None
        return (hidden, self.attention[: L * H * n_pairs].view(L, H, n_pairs),
                self.special[: L * H * n_words * 2].view(L, H, n_words, 2))


def _write_shard(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    with atomic.atomic_path(path) as tmp:
        save_file(tensors, str(tmp))


def _compute_shard(
    lm: LoadedModel,
    segments_per_sentence: list[list[Segment]],
    sentence_ids: list[int],
    settings: ExtractionSettings,
    device: torch.device,
    progress: tqdm | None,
    buffers: _ShardBuffers,
    word_counts: np.ndarray,
) -> dict[str, torch.Tensor]:
    """Run one shard's sentences (``word_counts`` words each) in length-sorted batches, writing
    straight into the buffers."""
    word_off = dict(zip(sentence_ids, np.concatenate([[0], np.cumsum(word_counts)[:-1]]).tolist()))
    att_off = dict(zip(sentence_ids, np.concatenate([[0], np.cumsum(word_counts**2)[:-1]]).tolist()))
    hidden_out, att_out, special_out = buffers.views(int(word_counts.sum()), int((word_counts**2).sum()),
                                                     settings.attentions)
    row_of = {s: r for r, s in enumerate(sentence_ids)}
    L, H = lm.num_layers, lm.num_heads
    n_bins = 2 * settings.token_offset_window + 2
    offsets_out = (torch.zeros(len(sentence_ids), L, H, 2, n_bins, dtype=torch.int32)
                   if settings.attentions else None)
    segs = [s for i in sentence_ids for s in segments_per_sentence[i]]
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    amp = getattr(torch, settings.amp_dtype) if settings.amp_dtype else None
    for batch in _batches(segs, settings.batch_tokens):
        n_words = [seg.n_words for seg in batch]
        starts = [word_off[seg.sentence] + seg.word_start for seg in batch]
        common = dict(pooling=settings.pooling, attentions=settings.attentions, pad_id=pad_id, device=device,
                      amp_dtype=amp, out_dtype=hidden_out.dtype)
        if (all(seg.keep.all() for seg in batch)
                and all(starts[k + 1] == starts[k] + n_words[k] for k in range(len(batch) - 1))):
            # the usual case: the batch's sentences are consecutive in the shard -> write in place
            off, a, n = starts[0], att_off[batch[0].sentence], sum(n_words)
            views = (hidden_out[:, off : off + n],
                     att_out[:, :, a : a + sum(w * w for w in n_words)] if att_out is not None else None,
                     special_out[:, :, off : off + n] if special_out is not None else None)
            batch_offsets = (torch.zeros(len(batch), L, H, 2, n_bins, dtype=torch.int32)
                             if offsets_out is not None else None)
            forward_segments(lm.model, batch, out=views, token_offsets=batch_offsets, **common)
            if batch_offsets is not None:
                offsets_out[[row_of[seg.sentence] for seg in batch]] = batch_offsets
        else:  # sliding windows (hidden states only): copy the words each window owns
            word_hidden, _, _ = forward_segments(lm.model, batch, **common)
            first = 0
            for seg, start in zip(batch, starts):
                owned = np.flatnonzero(seg.keep)
                hidden_out[:, start + owned] = word_hidden[:, first + owned]
                first += seg.n_words
        if progress is not None:
            progress.update(sum(1 for s in batch if s.word_start == 0))
    tensors = {
        "sentence_ids": torch.tensor(sentence_ids, dtype=torch.int64),
        "word_counts": torch.from_numpy(word_counts.astype(np.int64)),
        "hidden": hidden_out,
    }
    if att_out is not None:
        tensors["attention"] = att_out
        tensors["special"] = special_out
        tensors["token_offsets"] = offsets_out
    return tensors


def extract(
    lm: LoadedModel,
    corpus: Corpus,
    *,
    pooling: Pooling = "first",
    attentions: bool = True,
    long_policy: LongPolicy = "error",
    batch_tokens: int = 1024,
    shard_size: int = 256,
    amp_dtype: str | None = None,
    storage: str = "float32",
    root: str | Path | None = None,
    device: str | None = None,
    progress: bool = True,
    max_new_shards: int | None = None,
) -> FeatureStore:
    """Extract (or reopen) the store of ``lm`` over ``corpus``; resumes a killed run.

    pooling: subword→word pooling of hidden states (first / last / mean piece).
    attentions: also keep word-level attention maps and, per sentence and head, the counts of the
    token-level attention argmax's relative offset (:meth:`FeatureStore.token_offsets`; needs an
    eager-attention model).
    long_policy: sentences longer than the model accepts raise (``"error"``, naming the sentence) or
    are split into overlapping sliding windows (``"window"``, hidden states only).
    amp_dtype: compute in ``"bfloat16"`` / ``"float16"`` autocast (linear layers' weights cast once
    for the run; layer norms and softmax stay float32) -- faster on GPUs and CPUs with bf16 units
    (AMX), at about 3 significant digits; ``"auto"``: bfloat16 where a measured micro-benchmark
    finds it faster on this machine, else float32 (:func:`bertology.runtime.resolve_precision`;
    the store records the dtype used); an explicit dtype measured slower than float32 warns. None
    (default) computes in float32, equal to a plain HF forward pass.
    storage: on-disk dtype, ``"float32"`` (default) or ``"float16"`` (half the disk and I/O; reads
    return float32; values beyond float16's range are refused, not clipped).
    max_new_shards: stop after computing this many shards (for tests of resume); returns None then.
    """
    if amp_dtype in ("auto", "bfloat16", "float16"):   # auto: bfloat16 only where measured faster
        low = resolve_precision(amp_dtype, device or next(lm.model.parameters()).device, what="extraction")
        amp_dtype = str(low).removeprefix("torch.") if low is not None else None
    settings = ExtractionSettings(pooling, attentions, long_policy, batch_tokens, shard_size, amp_dtype,
                                  storage)
    settings.validate()
    if len(corpus) == 0:
        raise StoreError(f"corpus {corpus.name!r} has no sentences")
    if attentions and getattr(lm.config, "_attn_implementation", "eager") != "eager":
        raise StoreError(f"{lm.name}: attention maps need attn_implementation='eager' (load_model(..., attentions=True))")
    root = Path(root) if root is not None else paths.stores_dir()
    corpus_fingerprint = corpus.fingerprint
    key = store_key(lm, corpus_fingerprint, settings)
    path = root / key
    if (path / "manifest.json").is_file():
        return FeatureStore(path)

    max_tokens = model_max_tokens(lm.model, lm.tokenizer)
    tokens = tokenize_sentences(lm.tokenizer, [s.words for s in corpus])
    segments_per_sentence = [
        segment_sentence(lm.tokenizer, s.words, i, max_tokens, long_policy, f"{s.sent_id} (#{i} of {corpus.name})",
                         tokens[i])
        for i, s in enumerate(corpus)
    ]
    if attentions:
        for segs, s in zip(segments_per_sentence, corpus):
            if len(segs) > 1:
                raise StoreError(
                    f"sentence {s.sent_id}: too long for the model ({max_tokens} tokens) and attention maps "
                    "cannot be windowed; extract with attentions=False or split the sentence"
                )
    word_counts = np.array([sum(int(s.keep.sum()) for s in segs) for segs in segments_per_sentence],
                           dtype=np.int64)
    plan = _plan_shards(segments_per_sentence, shard_size)
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob(".*.tmp"):      # half-written files of a run that was killed
        stale.unlink(missing_ok=True)
    plan_record = {"settings": asdict(settings), "model": lm.fingerprint, "corpus": corpus_fingerprint, "plan": plan}
    plan_file = path / "plan.json"
    if plan_file.is_file():
        try:
            if json.loads(plan_file.read_text()) != plan_record:
                raise StoreError(f"{plan_file}: plan differs from this extraction; delete {path} to start over")
        except json.JSONDecodeError:
            pass  # a corrupt plan is rewritten below
    atomic.write_json(plan_file, plan_record)

    dev = torch.device(device) if device else next(lm.model.parameters()).device
    lm.model.to(dev)
    shard_names = [f"shard-{k:05d}.safetensors" for k in range(len(plan))]
    todo = [k for k in range(len(plan)) if not _shard_valid(path / shard_names[k], plan[k])]
    done_sentences = len(corpus) - sum(len(plan[k]) for k in todo)
    started = time.perf_counter()
    bar = tqdm(total=len(corpus), initial=done_sentences, desc=f"extract {lm.name}", unit="sent",
               disable=not progress, leave=False)
    if max_new_shards is not None:
        todo = todo[:max_new_shards]
    counts = [word_counts[plan[k]] for k in todo]
    sizes = (max((int(c.sum()) for c in counts), default=0), max((int((c**2).sum()) for c in counts), default=0))
    # two buffer sets: shard j is computed into one while shard j-1 is written from the other by
    # a background thread (writing is mostly page-cache copying and fsync, outside the GIL)
    buffers = [_ShardBuffers(lm, settings, *sizes) for _ in range(min(2, len(todo)))]
    with ThreadPoolExecutor(max_workers=1) as writer, \
            low_precision_linears(lm.model, getattr(torch, amp_dtype) if amp_dtype else None):
        pending = None
        for j, k in enumerate(todo):
            tensors = _compute_shard(lm, segments_per_sentence, plan[k], settings, dev, bar, buffers[j % 2],
                                     counts[j])
            if pending is not None:
                pending.result()
            pending = writer.submit(_write_shard, path / shard_names[k], tensors)
        if pending is not None:
            pending.result()
    bar.close()
    if max_new_shards is not None and any(not (path / shard_names[k]).is_file() for k in range(len(plan))):
        return None  # type: ignore[return-value]

    n_layers = lm.num_layers + 1
    manifest = {
        "version": STORE_VERSION,
        "model": {"name": lm.name, "path": str(lm.path) if lm.path else None, "fingerprint": lm.fingerprint},
        "corpus": {"name": corpus.name, "path": corpus.path, "fingerprint": corpus_fingerprint,
                   "sources": corpus.sources},
        "settings": asdict(settings),
        "n_layers": n_layers,
        "n_heads": lm.num_heads,
        "dim": lm.hidden_size,
        "n_sentences": len(corpus),
        "word_counts": word_counts.tolist(),
        "shards": shard_names,
        "plan": plan,
        "extract_seconds_last_run": round(time.perf_counter() - started, 3),
    }
    atomic.write_json(path / "manifest.json", manifest)
    return FeatureStore(path)


def open_store(path: str | Path) -> FeatureStore:
    return FeatureStore(path)


def delete_store(path: str | Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
