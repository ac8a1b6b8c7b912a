"""The feature store: every layer's word vectors (and attention maps) of a model over a corpus, on disk.

Layout of a store directory ``<stores_dir>/<key>/`` where ``key`` hashes (model fingerprint,
tokenizer, corpus fingerprint, settings):

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

Every file is written atomically. :func:`extract` recomputes what is missing, truncated or
altered and then reports success; a reader that finds damage raises
:class:`~bertology.errors.StoreError` naming the shards.

The modules, in the order data flows through them:

- ``settings``: :class:`ExtractionSettings` and the store's key;
- ``plan``: sentences cut into model inputs, shards and batches; which shards are still to compute;
- ``compute``: one shard through the model into reused buffers; a rank's shards in turn;
- ``write``: safetensors' bytes hashed on the way, atomic shard writes, what a failed write says;
- ``manifest``: the manifest's fields, checksum and validation;
- ``verify``: checksum files, shard checks (what is checked when), damage marks, :func:`verify_store`;
- ``read``: :class:`FeatureStore`;
- ``extraction``: :func:`extract`, the phases above in order.
"""

from __future__ import annotations

from bertology.store.extraction import extract
from bertology.store.manifest import SHARD_NAME, read_manifest
from bertology.store.read import FeatureStore, TokenQueries, VerifyLevel, open_store
from bertology.store.settings import STORE_VERSION, TOKEN_OFFSET_WINDOW, ExtractionSettings, store_key
from bertology.store.verify import CHECKSUM_SUFFIX, DAMAGED_MARK, shard_problems, verify_store
from bertology.store.write import delete_store, save_safetensors

__all__ = [
    "extract",
    "FeatureStore",
    "open_store",
    "delete_store",
    "verify_store",
    "read_manifest",
    "shard_problems",
    "save_safetensors",
    "ExtractionSettings",
    "store_key",
    "STORE_VERSION",
    "TOKEN_OFFSET_WINDOW",
    "TokenQueries",
    "VerifyLevel",
    "SHARD_NAME",
    "CHECKSUM_SUFFIX",
    "DAMAGED_MARK",
]
