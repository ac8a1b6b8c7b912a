"""What a store's content depends on besides the model and the corpus, and the key that names it.

A store lives in ``<stores_dir>/<key>/`` where ``key`` (:func:`store_key`) hashes the model's
weights and config, its tokenizer, the corpus content and the :class:`ExtractionSettings` (with
:data:`STORE_VERSION`, bumped when the computation changes): the same inputs find the same folder.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from bertology.errors import StoreError
from bertology.features import LongPolicy, Pooling
from bertology.fingerprints import tokenizer_fingerprint
from bertology.models import LoadedModel

# 2: shards with attentions also hold token-level argmax offset counts (``token_offsets``)
# 3: per-shard sha256 files, shard sizes and checksums in a self-checksummed manifest; the key
#    covers the tokenizer
STORE_VERSION = 3
TOKEN_OFFSET_WINDOW = 8


@dataclass(frozen=True)
class ExtractionSettings:
    """What determines a store's content besides the model and the corpus."""

    pooling: Pooling = "first"
    attentions: bool = True
    long_policy: LongPolicy = "error"
    batch_tokens: int = 1024
    shard_size: int = 256
    amp_dtype: str | None = None  # compute: None = float32; "bfloat16" / "float16" = autocast
    storage: str = "float32"  # on-disk dtype of hidden states and attention: float32 | float16
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


def key_record(
    lm: LoadedModel, corpus_fingerprint: str, settings: ExtractionSettings, tokenizer: str | None = None
) -> dict[str, Any]:
    """Everything a store's content depends on: the model's weights and config (``lm.fingerprint``),
    its tokenizer (:func:`bertology.fingerprints.tokenizer_fingerprint`), the corpus content and
    the settings (with the store version, which changes when the computation does)."""
    return {
        "model": lm.fingerprint,
        "tokenizer": tokenizer or tokenizer_fingerprint(lm.tokenizer),
        "corpus": corpus_fingerprint,
        "settings": asdict(settings),
    }


def store_key(
    lm: LoadedModel, corpus_fingerprint: str, settings: ExtractionSettings, *, tokenizer: str | None = None
) -> str:
    """The store's folder name: a hash of :func:`key_record` (``tokenizer``: its fingerprint, if known)."""
    payload = json.dumps(key_record(lm, corpus_fingerprint, settings, tokenizer), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]
