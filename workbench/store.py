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
- ``shard-00000.safetensors.sha256``: the shard's sha256 (``sha256sum -c`` format), written right
  after the shard;
- ``manifest.json``: written last; its presence means the store is complete. It lists every
  shard's size and sha256 and carries its own checksum (``manifest_sha256``), so an edited count
  is refused, not misread;
- ``.lock``: the lock an extraction holds while it writes (:func:`bertology.atomic.folder_lock`).

Every file is written atomically. Sentences are sorted by length into shards, so a shard's
content is fixed by the plan: a killed extraction resumes by computing only missing or damaged
shards and gives byte-identical files.

Integrity (what is checked when):

- opening a store (:class:`FeatureStore`, and :func:`extract` finding a complete store): the
  manifest's fields and checksum, and every shard's size (one ``stat`` each: cheap at any size);
- the first read of a shard in a process: its sha256 (so a store is hashed at most once per
  process, and only the shards an analysis touches; ``FeatureStore(path, verify="size")`` skips it,
  ``verify="full"`` hashes every shard at open);
- resuming an extraction: every finished shard's sha256 against its ``.sha256`` file;
- ``extract(..., verify=True)`` / ``bertology extract --verify`` / :func:`verify_store`: every shard.

:func:`extract` recomputes what is missing, truncated or altered and then reports success; a
reader that finds damage raises :class:`~bertology.errors.StoreError` naming the shards.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

import numpy as np
import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from bertology import atomic, distributed, paths
from bertology.corpus import Corpus
from bertology.errors import StoreError
from bertology.fingerprints import tokenizer_fingerprint
from bertology.features import (LongPolicy, Pooling, Segment, forward_segments, low_precision_linears,
                                model_max_tokens, segment_sentence, token_offset_bins, tokenize_sentences)
from bertology.models import LoadedModel, file_sha256
from bertology.runtime import resolve_precision

# 2: shards with attentions also hold token-level argmax offset counts (``token_offsets``)
# 3: per-shard sha256 files, shard sizes and checksums in a self-checksummed manifest; the key
#    covers the tokenizer
STORE_VERSION = 3
TOKEN_OFFSET_WINDOW = 8
TokenQueries = Literal["all", "words", "special"]
VerifyLevel = Literal["lazy", "full", "size"]
logger = logging.getLogger(__name__)


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
    ``verify``: ``"lazy"`` (default) checks the manifest and every shard's size at open and each
    shard's sha256 at its first read in this process; ``"full"`` hashes every shard at open;
    ``"size"`` never hashes.
    """

    def __init__(self, path: str | Path, *, verify: VerifyLevel = "lazy"):
        self.path = Path(path)
        if verify not in ("lazy", "full", "size"):
            raise StoreError(f"verify must be 'lazy', 'full' or 'size', not {verify!r}")
        self.manifest: dict = read_manifest(self.path)
        problems = shard_problems(self.path, self.manifest, full=verify == "full")
        if problems:
            raise StoreError(_damage_message(self.path, problems))
        self._verify = verify
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

    def verify(self) -> None:
        """Hash every shard now; raise :class:`StoreError` naming the damaged ones."""
        problems = shard_problems(self.path, self.manifest, full=True)
        if problems:
            raise StoreError(_damage_message(self.path, problems))

    def __repr__(self) -> str:
        return (f"FeatureStore({self.manifest['model']['name']!r} × {self.manifest['corpus']['name']!r}: "
                f"{self.n_sentences} sentences, {self.n_words} words, {self.n_layers} layers × {self.dim} dims"
                f"{', attention' if self.has_attention else ''})")

    def _open(self, k: int):
        if k not in self._handles:
            shard = self._shards[k]
            if self._verify == "lazy":
                problem = _shard_problem(shard, self.manifest, full=True)
                if problem:
                    _mark_damaged(self.path, [(shard.name, problem)])
                    raise StoreError(_damage_message(self.path, [(shard.name, problem)]))
            try:
                handle = safe_open(str(shard), framework="pt")
                counts = handle.get_tensor("word_counts").tolist()
            except Exception as exc:
                raise StoreError(_damage_message(self.path, [(shard.name, f"unreadable ({exc})")])) from exc
            if counts != self.word_counts[self.manifest["plan"][k]].tolist():
                raise StoreError(_damage_message(self.path, [(shard.name, "word counts differ from the manifest's")]))
            self._handles[k] = handle
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


# --------------------------------------------------------------------------- integrity

SHARD_NAME = re.compile(r"^shard-\d{5}\.safetensors$")
CHECKSUM_SUFFIX = ".sha256"
_verified: dict[tuple[str, int, int, int], str] = {}  # shards hashed by this process: (path, size, mtime, inode)


def _manifest_checksum(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def _is_int(value: object, minimum: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _validate_manifest(m: object, file: Path) -> None:
    """Refuse a manifest whose fields are missing, mistyped, inconsistent or edited, naming the field."""
    redo = "run extract again with the same model, corpus and settings to rebuild it"

    def bad(field: str, why: str) -> StoreError:
        return StoreError(f"{file}: field {field!r} {why}; {redo}")

    if not isinstance(m, dict):
        raise StoreError(f"{file}: expected a JSON object, found {type(m).__name__}; {redo}")
    for field in ("version", "n_layers", "n_heads", "dim", "n_sentences", "settings", "word_counts", "shards",
                  "plan", "model", "corpus"):
        if field not in m:
            raise bad(field, "is missing")
    for field in ("version", "n_layers", "n_heads", "dim", "n_sentences"):
        if not _is_int(m[field], 1):
            raise bad(field, f"must be a positive integer, not {m[field]!r}")
    if not isinstance(m["settings"], dict) or not isinstance(m["settings"].get("attentions"), bool):
        raise bad("settings", "must be an object with a boolean 'attentions'")
    counts, shards, plan = m["word_counts"], m["shards"], m["plan"]
    if not isinstance(counts, list) or len(counts) != m["n_sentences"] or not all(_is_int(c) for c in counts):
        raise bad("word_counts", f"must list one non-negative count per sentence ({m['n_sentences']})")
    if not isinstance(shards, list) or not all(isinstance(n, str) and SHARD_NAME.match(n) for n in shards):
        raise bad("shards", "must list file names shard-NNNNN.safetensors")
    if (not isinstance(plan, list) or len(plan) != len(shards)
            or not all(isinstance(p, list) and all(_is_int(i) for i in p) for p in plan)
            or sorted(i for p in plan for i in p) != list(range(m["n_sentences"]))):
        raise bad("plan", "must split the sentences 0..n_sentences-1 into one list per shard")
    if m["version"] >= 3:  # checksummed stores
        for field in ("shard_sha256", "shard_bytes", "manifest_sha256"):
            if field not in m:
                raise bad(field, "is missing")
        if (not isinstance(m["shard_sha256"], dict) or set(m["shard_sha256"]) != set(shards)
                or not isinstance(m["shard_bytes"], dict) or set(m["shard_bytes"]) != set(shards)
                or not all(_is_int(v) for v in m["shard_bytes"].values())):
            raise bad("shard_sha256", "and 'shard_bytes' must name every shard")
        if m["manifest_sha256"] != _manifest_checksum(m):
            raise StoreError(f"{file}: edited or damaged (its content no longer matches its checksum "
                             f"'manifest_sha256', e.g. a changed count); {redo}")


def read_manifest(path: str | Path) -> dict:
    """The validated manifest of the store at ``path`` (:class:`StoreError` naming the field otherwise)."""
    file = Path(path) / "manifest.json"
    if not file.is_file():
        raise StoreError(f"{Path(path)}: not a complete feature store (no manifest.json)")
    try:
        manifest = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise StoreError(f"{file}: corrupt manifest: {exc}; run extract again to rebuild it") from exc
    _validate_manifest(manifest, file)
    return manifest


def _read_checksum(shard: Path) -> str | None:
    try:
        digest = (shard.parent / (shard.name + CHECKSUM_SUFFIX)).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return digest if re.fullmatch(r"[0-9a-f]{64}", digest) else None


def _verification_key(shard: Path) -> tuple[str, int, int, int]:
    """What must stay the same for a shard this process hashed to count as verified."""
    stat = shard.stat()
    return str(shard.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino


def _verified_digest(shard: Path) -> str:
    """sha256 of a shard, hashed at most once per process while its size and mtime stay the same."""
    key = _verification_key(shard)
    if key not in _verified:
        _verified[key] = file_sha256(shard)
    return _verified[key]


def _shard_problem(shard: Path, manifest: dict, *, full: bool, fresh: bool = False) -> str | None:
    """What is wrong with one shard of a complete store, or None: missing, wrong size, or (``full``)
    a sha256 that differs from the manifest's (``fresh``: re-read even if this process hashed it)."""
    if not shard.is_file():
        return "missing"
    if "shard_bytes" not in manifest:  # a store written before checksums (version < 3)
        return None
    size, expected = shard.stat().st_size, manifest["shard_bytes"][shard.name]
    if size != expected:
        return f"{size} bytes instead of {expected} (truncated or overwritten)"
    digest = (file_sha256(shard) if fresh else _verified_digest(shard)) if full else None
    if full and digest != manifest["shard_sha256"][shard.name]:
        return "contents altered (sha256 differs from the manifest's)"
    return None


def shard_problems(path: str | Path, manifest: dict, *, full: bool, fresh: bool = False) -> list[tuple[str, str]]:
    """``[(shard name, problem)]`` of a complete store: sizes only, or every sha256 with ``full``
    (``fresh``: re-read every byte, whatever this process hashed before)."""
    path = Path(path)
    out = []
    for name in manifest["shards"]:
        problem = _shard_problem(path / name, manifest, full=full, fresh=fresh)
        if problem:
            out.append((name, problem))
    return out


DAMAGED_MARK = ".damaged"


def _mark_damaged(path: Path, problems: list[tuple[str, str]]) -> None:
    """Leave a note for the next :func:`extract`, which then hashes every shard and repairs (best
    effort: a read-only store just stays unmarked)."""
    try:
        atomic.write_text(path / DAMAGED_MARK, "".join(f"{name}: {problem}\n" for name, problem in problems))
    except OSError:
        pass


def _damage_message(path: Path, problems: list[tuple[str, str]]) -> str:
    listed = "; ".join(f"{name}: {problem}" for name, problem in problems[:5])
    more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
    return (f"{path}: damaged feature store -- {listed}{more}. Run extract again with the same model, "
            f"corpus and settings (bertology extract ...; add --verify / verify=True to hash every shard): it "
            f"recomputes exactly the damaged shards")


def verify_store(path: str | Path) -> list[tuple[str, str]]:
    """Check a store completely (manifest, then every shard's size and sha256); ``[(file, problem)]``,
    empty when sound. Repair with :func:`extract` (same model, corpus and settings)."""
    path = Path(path)
    try:
        manifest = read_manifest(path)
    except StoreError as exc:
        return [("manifest.json", str(exc))]
    problems = shard_problems(path, manifest, full=True, fresh=True)
    if problems:
        _mark_damaged(path, problems)
    return problems


def _write_checksum(shard: Path, digest: str) -> None:
    atomic.write_text(shard.parent / (shard.name + CHECKSUM_SUFFIX), f"{digest}  {shard.name}\n")


def _remove_shard(shard: Path) -> None:
    shard.unlink(missing_ok=True)
    (shard.parent / (shard.name + CHECKSUM_SUFFIX)).unlink(missing_ok=True)


# --------------------------------------------------------------------------- extraction

def _key_record(lm: LoadedModel, corpus_fingerprint: str, settings: ExtractionSettings,
                tokenizer: str | None = None) -> dict[str, Any]:
    """Everything a store's content depends on: the model's weights and config (``lm.fingerprint``),
    its tokenizer (:func:`bertology.fingerprints.tokenizer_fingerprint`), the corpus content and
    the settings (with the store version, which changes when the computation does)."""
    return {"model": lm.fingerprint, "tokenizer": tokenizer or tokenizer_fingerprint(lm.tokenizer),
            "corpus": corpus_fingerprint, "settings": asdict(settings)}


def store_key(lm: LoadedModel, corpus_fingerprint: str, settings: ExtractionSettings, *,
              tokenizer: str | None = None) -> str:
    """The store's folder name: a hash of :func:`_key_record` (``tokenizer``: its fingerprint, if known)."""
    payload = json.dumps(_key_record(lm, corpus_fingerprint, settings, tokenizer), sort_keys=True)
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
    """A finished shard of an unfinished store: its bytes match its ``.sha256`` file (read afresh)
    and it holds the planned sentences."""
    expected = _read_checksum(path)
    if expected is None or not path.is_file() or file_sha256(path) != expected:
        return False
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


# safetensors' names of the dtypes a shard holds, in the order its writer lays tensors out (larger
# alignment first; ties by name): safetensors sorts by its Dtype enum, descending
_SAFETENSORS_DTYPES = {torch.int64: "I64", torch.float32: "F32", torch.int32: "I32", torch.bfloat16: "BF16",
                       torch.float16: "F16"}
_SAFETENSORS_RANK = {name: rank for rank, name in enumerate(reversed(_SAFETENSORS_DTYPES.values()))}


def save_safetensors(tensors: dict[str, torch.Tensor], file: Path) -> str:
    """Write ``tensors`` (CPU; dtypes of :data:`_SAFETENSORS_DTYPES`) to ``file`` in the safetensors
    format, byte for byte what ``safetensors.torch.save_file`` writes, and return the file's sha256.

    Each tensor's memory goes to the file as it is (one ``write`` per tensor, hashed on the way),
    where ``save_file`` first copies every tensor into a Python bytes object and the hash would
    read the file back (``benchmarks/extract.py`` times both)."""
    if sys.byteorder != "little":
        raise StoreError("feature stores are written on little-endian machines only")
    names = {}
    for name, t in tensors.items():
        if t.dtype not in _SAFETENSORS_DTYPES or t.device.type != "cpu":
            raise StoreError(f"shard tensor {name!r}: {t.dtype} on {t.device} cannot be written")
        names[name] = _SAFETENSORS_DTYPES[t.dtype]
    order = sorted(tensors, key=lambda n: (-_SAFETENSORS_RANK[names[n]], n))
    header, offset = {}, 0
    for name in order:
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": names[name], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    digest = hashlib.sha256()
    with open(file, "wb") as out:
        for chunk in [len(head).to_bytes(8, "little"), head]:
            out.write(chunk)
            digest.update(chunk)
        for name in order:
            data = memoryview(tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy())
            out.write(data)          # both release the GIL: the compute thread runs meanwhile
            digest.update(data)
    return digest.hexdigest()


def _write_shard(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Write a shard atomically, then its sha256 file; a shard whose checksum could not be written
    is removed (it would be recomputed anyway). The digest, computed from the bytes written, also
    counts as this process's verification of the shard (no re-read on first use)."""
    with atomic.atomic_path(path) as tmp:
        digest = save_safetensors(tensors, tmp)
    try:
        _write_checksum(path, digest)
    except BaseException:
        _remove_shard(path)
        raise
    _verified[_verification_key(path)] = digest


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


def _estimated_bytes(lm: LoadedModel, settings: ExtractionSettings, counts: list[np.ndarray]) -> int:
    """Disk size of shards holding ``counts`` (word counts per sentence of each shard)."""
    itemsize = 2 if settings.storage == "float16" else 4
    L, H, D = lm.num_layers, lm.num_heads, lm.hidden_size
    total = 0
    for c in counts:
        words, pairs = int(c.sum()), int((c**2).sum())
        total += (L + 1) * words * D * itemsize + 16 * len(c)
        if settings.attentions:
            total += L * H * (pairs + 2 * words) * itemsize + len(c) * L * H * 2 * (2 * settings.token_offset_window + 2) * 4
    return total


def _write_error(path: Path, exc: OSError, needed: int) -> StoreError:
    """A clear message for a failed write (a full disk above all); nothing half-written is left."""
    where = exc.filename or path
    if atomic.is_disk_full(exc):
        return StoreError(f"disk full while writing {where}: the feature store needs about {needed / 1e6:.0f} MB more. "
                          f"Nothing half-written was left behind and the finished shards were kept: free space "
                          f"(or pass another root) and run extract again to resume")
    return StoreError(f"cannot write {where}: {exc.strerror or exc}")


def _prepare(path: Path, plan: list[list[int]], plan_record: dict, shard_names: list[str], *, force: bool,
             verify: bool) -> list[int] | None:
    """Under the store's lock: clean up after killed runs, check a complete store (repairing what is
    damaged) and return the shards still to compute -- None when the store is complete and sound."""
    for stale in atomic.remove_stale_temporaries(path):
        logger.info("removed %s, left by a killed extraction", stale)
    manifest_file = path / "manifest.json"
    if force:
        for f in [manifest_file, path / "plan.json", *path.glob("shard-*")]:
            f.unlink(missing_ok=True)
    if manifest_file.is_file():
        try:
            manifest = read_manifest(path)
            if {k: manifest.get("key", {}).get(k) for k in plan_record} != plan_record:
                raise StoreError(f"{manifest_file}: describes another extraction (model, tokenizer, corpus, "
                                 "settings or plan differ)")
            problems = shard_problems(path, manifest, full=verify, fresh=True)
            if not problems:
                (path / DAMAGED_MARK).unlink(missing_ok=True)
                return None
            logger.warning("%s; recomputing them", _damage_message(path, problems).split(". Run")[0])
            for name, _ in problems:
                _remove_shard(path / name)
        except StoreError as exc:
            logger.warning("%s -- rebuilding it (finished shards are verified and kept)", exc)
        manifest_file.unlink(missing_ok=True)
    plan_file = path / "plan.json"
    if plan_file.is_file():
        try:
            if json.loads(plan_file.read_text()) != plan_record:
                raise StoreError(f"{plan_file}: plan differs from this extraction; delete {path} to start over")
        except json.JSONDecodeError:
            pass  # a corrupt plan is rewritten below
    atomic.write_json(plan_file, plan_record)
    todo = []
    for k, name in enumerate(shard_names):
        if not _shard_valid(path / name, plan[k]):
            _remove_shard(path / name)   # a damaged or unverifiable shard: never trusted later
            todo.append(k)
    return todo


def _agree(group: distributed.Group, compute: Callable[[], Any]) -> Any:
    """Rank 0 runs ``compute``; every rank gets its result, or raises its error."""
    if group.world_size == 1:
        return compute()
    result, error = None, None
    if group.is_main:
        try:
            result = compute()
        except Exception as exc:  # noqa: BLE001 -- told to every rank, then raised
            error = exc
    shared = group.broadcast((result, None if error is None else str(error)))
    if error is not None:
        raise error
    if shared[1] is not None:
        raise StoreError(f"rank 0: {shared[1]}")
    return shared[0]


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
    verify: bool = False,
    force: bool = False,
    wait: bool = True,
) -> FeatureStore:
    """Extract (or reopen) the store of ``lm`` over ``corpus``; resumes a killed run, repairs a damaged one.

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
    verify: hash every shard of an existing store (not just sizes) and recompute what is altered.
    force: delete the store's files and compute it again.
    wait: when another process is extracting the same store, wait for it (default) or raise.
    max_new_shards: stop after computing this many shards (per rank; for tests of resume); returns
    None then.

    The store is keyed on the model's weights and config, its tokenizer, the corpus content and
    the settings. Under ``torchrun`` (an initialised process group) the shards are split across
    the ranks: see :mod:`bertology.distributed`.
    """
    if amp_dtype in ("auto", "bfloat16", "float16"):   # auto: bfloat16 only where measured faster
        low = resolve_precision(amp_dtype, device or next(lm.model.parameters()).device, what="extraction")
        amp_dtype = str(low).removeprefix("torch.") if low is not None else None
        amp_dtype = distributed.current_group().broadcast(amp_dtype)  # under torchrun: rank 0's choice for all
    settings = ExtractionSettings(pooling, attentions, long_policy, batch_tokens, shard_size, amp_dtype,
                                  storage)
    settings.validate()
    if len(corpus) == 0:
        raise StoreError(f"corpus {corpus.name!r} has no sentences")
    if attentions and getattr(lm.config, "_attn_implementation", "eager") != "eager":
        raise StoreError(f"{lm.name}: attention maps need attn_implementation='eager' (load_model(..., attentions=True))")
    root = Path(root) if root is not None else paths.stores_dir()
    corpus_fingerprint = corpus.fingerprint
    key_record = _key_record(lm, corpus_fingerprint, settings)
    key = store_key(lm, corpus_fingerprint, settings, tokenizer=key_record["tokenizer"])
    path = root / key
    group = distributed.current_group()
    verify = verify or (path / DAMAGED_MARK).is_file()   # a reader found an altered shard
    if not (force or verify) and (path / "manifest.json").is_file():
        try:
            return FeatureStore(path)
        except StoreError as exc:
            if group.is_main:
                logger.warning("%s", str(exc).split(". Run")[0])   # repaired below

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
    shard_names = [f"shard-{k:05d}.safetensors" for k in range(len(plan))]
    plan_record = {**key_record, "plan": plan}

    with ExitStack() as stack:
        def take_lock_and_prepare():
            try:
                stack.enter_context(atomic.folder_lock(path, wait=wait, on_wait=logger.warning))
            except atomic.LockHeld as exc:
                raise StoreError(str(exc)) from None
            try:
                return _prepare(path, plan, plan_record, shard_names, force=force, verify=verify)
            except OSError as exc:
                raise _write_error(path, exc, _estimated_bytes(lm, settings, [word_counts[p] for p in plan])) from exc

        todo = _agree(group, take_lock_and_prepare)  # rank 0 holds the lock until the manifest is written
        if todo is None:
            return FeatureStore(path)
        costs = [int(sum(max(seg.n_tokens for seg in segments_per_sentence[i]) for i in plan[k])) for k in todo]
        mine = distributed.assign_shards(todo, costs, group.world_size)[group.rank]
        if max_new_shards is not None:
            mine = mine[:max_new_shards]
        started = time.perf_counter()
        error: BaseException | None = None
        try:
            _compute_shards(lm, segments_per_sentence, plan, mine, word_counts, settings, path, shard_names,
                            device, progress and group.is_main, done=len(corpus) - sum(len(plan[k]) for k in todo))
        except OSError as exc:
            error = _write_error(path, exc, _estimated_bytes(lm, settings, [word_counts[plan[k]] for k in mine]))
            error.__cause__ = exc
        except Exception as exc:  # noqa: BLE001 -- reported on every rank below, then raised
            error = exc
        failures = group.gather(None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        failed = [(r, msg) for r, msg in enumerate(failures) if msg is not None]
        if failed:
            raise StoreError(f"extraction failed on rank {failed[0][0]}: {failed[0][1]}")

        def finish():
            missing = [n for n in shard_names if _read_checksum(path / n) is None or not (path / n).is_file()]
            if missing:
                if max_new_shards is None:
                    raise StoreError(f"{path}: shards {missing[:3]} were not written; run extract again")
                return False
            manifest = {
                "version": STORE_VERSION,
                "key": plan_record,
                "model": {"name": lm.name, "path": str(lm.path) if lm.path else None, "fingerprint": lm.fingerprint,
                          "tokenizer_fingerprint": key_record["tokenizer"]},
                "corpus": {"name": corpus.name, "path": corpus.path, "fingerprint": corpus_fingerprint,
                           "sources": corpus.sources},
                "settings": asdict(settings),
                "n_layers": lm.num_layers + 1,
                "n_heads": lm.num_heads,
                "dim": lm.hidden_size,
                "n_sentences": len(corpus),
                "word_counts": word_counts.tolist(),
                "shards": shard_names,
                "plan": plan,
                "shard_bytes": {n: (path / n).stat().st_size for n in shard_names},
                "shard_sha256": {n: _read_checksum(path / n) for n in shard_names},
                "extract_seconds_last_run": round(time.perf_counter() - started, 3),
                "extract_processes_last_run": group.world_size,
            }
            manifest["manifest_sha256"] = _manifest_checksum(manifest)
            try:
                atomic.write_json(path / "manifest.json", manifest)
            except OSError as exc:
                raise _write_error(path, exc, 1 << 20) from exc
            (path / DAMAGED_MARK).unlink(missing_ok=True)
            return True

        complete = _agree(group, finish)
    return FeatureStore(path) if complete else None  # type: ignore[return-value]


def _compute_shards(lm: LoadedModel, segments_per_sentence: list[list[Segment]], plan: list[list[int]],
                    shards: list[int], word_counts: np.ndarray, settings: ExtractionSettings, path: Path,
                    shard_names: list[str], device: str | None, progress: bool, done: int) -> None:
    """Compute and write the shards ``shards`` of ``plan`` (a background thread writes shard j while
    shard j+1 is computed)."""
    dev = torch.device(device) if device else next(lm.model.parameters()).device
    lm.model.to(dev)
    total = sum(len(p) for p in plan)
    bar = tqdm(total=total, initial=done, desc=f"extract {lm.name}", unit="sent", disable=not progress,
               leave=False)
    # largest shard first (most words and attention pairs): the last write, which nothing overlaps,
    # is then the smallest
    shards = sorted(shards, key=lambda k: (-int((word_counts[plan[k]] ** 2).sum()), k))
    counts = [word_counts[plan[k]] for k in shards]
    sizes = (max((int(c.sum()) for c in counts), default=0), max((int((c**2).sum()) for c in counts), default=0))
    # two buffer sets: shard j is computed into one while shard j-1 is written from the other by
    # a background thread (writing is mostly page-cache copying and fsync, outside the GIL)
    buffers = [_ShardBuffers(lm, settings, *sizes) for _ in range(min(2, len(shards)))]
    amp = settings.amp_dtype
    try:
        with ThreadPoolExecutor(max_workers=1) as writer, \
                low_precision_linears(lm.model, getattr(torch, amp) if amp else None):
            pending = None
            for j, k in enumerate(shards):
                tensors = _compute_shard(lm, segments_per_sentence, plan[k], settings, dev, bar, buffers[j % 2],
                                         counts[j])
                if pending is not None:
                    pending.result()
                pending = writer.submit(_write_shard, path / shard_names[k], tensors)
            if pending is not None:
                pending.result()
    finally:
        bar.close()


def open_store(path: str | Path) -> FeatureStore:
    return FeatureStore(path)


def delete_store(path: str | Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
