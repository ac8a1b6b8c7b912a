"""Writing a store's shards: safetensors' exact bytes straight from the shard's buffers, hashed on
the way, each shard atomically followed by its checksum file; and what a failed write says."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from bertology import atomic
from bertology.errors import StoreError
from bertology.models import LoadedModel
from bertology.store.settings import ExtractionSettings
from bertology.store.verify import checksum_file, remember_verified, write_checksum

# safetensors' names of the dtypes a shard holds, in the order its writer lays tensors out (larger
# alignment first; ties by name): safetensors sorts by its Dtype enum, descending
_SAFETENSORS_DTYPES = {
    torch.int64: "I64",
    torch.float32: "F32",
    torch.int32: "I32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
}
_SAFETENSORS_RANK = {name: rank for rank, name in enumerate(reversed(_SAFETENSORS_DTYPES.values()))}


_HASH_CHUNK = 16 << 20


def save_safetensors(tensors: dict[str, torch.Tensor], file: Path, *, hash_beside: bool = False) -> str:
    """Write ``tensors`` (CPU; dtypes of :data:`_SAFETENSORS_DTYPES`) to ``file`` in the safetensors
    format, byte for byte what ``safetensors.torch.save_file`` writes, and return the file's sha256.

    Each tensor's memory goes to the file as it is (one ``write`` per tensor, hashed on the way),
    where ``save_file`` first copies every tensor into a Python bytes object and the hash would
    read the file back (``benchmarks/extract.py`` times both). ``hash_beside``: hash in a second
    thread while this one writes (16 MiB pieces, in order; both release the GIL), for machines
    with cores to spare: sha256 alone runs at about the speed of a fast disk."""
    if sys.byteorder != "little":
        raise StoreError("feature stores are written on little-endian machines only")
    dtype_names = {}
    for name, t in tensors.items():
        if t.dtype not in _SAFETENSORS_DTYPES or t.device.type != "cpu":
            raise StoreError(f"shard tensor {name!r}: {t.dtype} on {t.device} cannot be written")
        dtype_names[name] = _SAFETENSORS_DTYPES[t.dtype]
    order = sorted(tensors, key=lambda n: (-_SAFETENSORS_RANK[dtype_names[n]], n))
    header, offset = {}, 0
    for name in order:
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": dtype_names[name], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    digest = hashlib.sha256()
    hasher = ThreadPoolExecutor(max_workers=1) if hash_beside else None
    try:
        with open(file, "wb") as out:
            for chunk in [len(head).to_bytes(8, "little"), head]:
                out.write(chunk)
                digest.update(chunk)
            for name in order:
                raw = tensors[name].contiguous().reshape(-1).view(torch.uint8).numpy()
                data = memoryview(raw)  # type: ignore[arg-type]  # an ndarray is a buffer; its stubs lack __buffer__
                if hasher is None:
                    out.write(data)  # both release the GIL: the compute thread runs meanwhile
                    digest.update(data)
                    continue
                for at in range(0, len(data), _HASH_CHUNK):
                    piece = data[at : at + _HASH_CHUNK]
                    hasher.submit(digest.update, piece)  # one worker: the pieces are hashed in order
                    out.write(piece)
    finally:
        if hasher is not None:
            hasher.shutdown(wait=True)
    return digest.hexdigest()


def write_shard(path: Path, tensors: dict[str, torch.Tensor], *, hash_beside: bool = False) -> None:
    """Write a shard atomically, then its sha256 file; a shard whose checksum could not be written
    is removed (it would be recomputed anyway). The digest, computed from the bytes written, also
    counts as this process's verification of the shard (no re-read on first use). ``hash_beside``:
    see :func:`save_safetensors`."""
    with atomic.atomic_path(path) as tmp:
        digest = save_safetensors(tensors, tmp, hash_beside=hash_beside)
    try:
        write_checksum(path, digest)
    except BaseException:
        remove_shard(path)
        raise
    remember_verified(path, digest)


def remove_shard(shard: Path) -> None:
    """Delete a shard and its checksum file (either may be missing)."""
    shard.unlink(missing_ok=True)
    checksum_file(shard).unlink(missing_ok=True)


def estimated_bytes(lm: LoadedModel, settings: ExtractionSettings, counts: list[np.ndarray]) -> int:
    """Disk size of shards holding ``counts`` (word counts per sentence of each shard)."""
    itemsize = 2 if settings.storage == "float16" else 4
    L, H, D = lm.num_layers, lm.num_heads, lm.hidden_size
    n_bins = 2 * settings.token_offset_window + 2
    total = 0
    for shard_counts in counts:
        words, pairs, sentences = int(shard_counts.sum()), int((shard_counts**2).sum()), len(shard_counts)
        total += (L + 1) * words * D * itemsize + 16 * sentences
        if settings.attentions:
            total += L * H * (pairs + 2 * words) * itemsize + sentences * L * H * 2 * n_bins * 4
    return total


def write_error(path: Path, exc: OSError, needed: int) -> StoreError:
    """A clear message for a failed write (a full disk above all); nothing half-written is left."""
    where = exc.filename or path
    if atomic.is_disk_full(exc):
        return StoreError(
            f"disk full while writing {where}: the feature store needs about {needed / 1e6:.0f} MB more. "
            f"Nothing half-written was left behind and the finished shards were kept: free space "
            f"(or pass another root) and run extract again to resume"
        )
    return StoreError(f"cannot write {where}: {exc.strerror or exc}")


def delete_store(path: str | Path) -> None:
    """Remove a store folder and everything in it (nothing happens when it does not exist)."""
    shutil.rmtree(path, ignore_errors=True)
