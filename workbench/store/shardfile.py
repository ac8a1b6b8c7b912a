"""Reading slices of a safetensors shard with ``pread``, not a memory map.

``safetensors.safe_open`` maps the whole file: every page a reader touches stays resident (and
counts in the process's RSS) for as long as the handle is open, so walking a store's sentences
grew memory with the store's size. :class:`ShardFile` parses the safetensors header itself (8 bytes
of little-endian header length, a JSON header ``{name: {dtype, shape, data_offsets}}``, then the
data) and reads only the bytes asked for into fresh arrays: memory is what the caller keeps.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

_DTYPES: dict[str, np.dtype] = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # widened to float32 by a shift (numpy has no bfloat16)
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


class ShardFile:
    """One safetensors file, read by slices: ``read(name, axis, start, stop)``.

    ``shape(name)`` gives a tensor's shape. Opened on construction, closed by :meth:`close` (or on
    garbage collection); a malformed header raises ``ValueError`` naming the file.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        try:
            (length,) = struct.unpack("<Q", os.pread(self._fd, 8, 0))
            size = os.fstat(self._fd).st_size
            if length > size - 8:
                raise ValueError(f"{self.path}: safetensors header length {length} exceeds the file")
            header = json.loads(os.pread(self._fd, length, 8))
            self._data_start = 8 + length
            self._tensors = {k: v for k, v in header.items() if k != "__metadata__"}
            for name, info in self._tensors.items():
                if info["dtype"] not in _DTYPES:
                    raise ValueError(f"{self.path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        except Exception:
            os.close(self._fd)
            raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def keys(self) -> list[str]:
        return list(self._tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self._info(name)["shape"])

    def _info(self, name: str) -> dict:
        if name not in self._tensors:
            raise KeyError(f"{self.path}: no tensor {name!r}")
        return self._tensors[name]

    def read(
        self,
        name: str,
        axis: int = 0,
        start: int = 0,
        stop: int | None = None,
        *,
        first: Sequence[int] | None = None,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Tensor ``name`` sliced ``[start:stop]`` along ``axis`` (everything else whole), as stored
        (``BF16`` widened to float32): one read per index of the axes before ``axis``.

        ``first`` (with ``axis >= 1``): only these indices of axis 0, in this order (e.g. the chosen
        layers of ``[L, W, D]`` hidden states): ``read(name, axis, start, stop, first=ids)`` equals
        ``read(name, axis, start, stop)[ids]`` and reads only those bytes.

        ``out``: a C-contiguous float32 array of the result's shape to read into (and return), so
        that a caller reading many shards reuses one buffer instead of allocating one per read.
        """
        info = self._info(name)
        shape = tuple(int(d) for d in info["shape"])
        dtype = _DTYPES[info["dtype"]]
        stop = shape[axis] if stop is None else stop
        if not 0 <= start <= stop <= shape[axis]:
            raise IndexError(f"{self.path}: {name}[{start}:{stop}] on axis {axis} of shape {shape}")
        chosen: Sequence[int]
        if first is None:
            chosen = range(shape[0]) if axis else range(1)
        else:
            if axis == 0:
                raise IndexError(f"{self.path}: first= selects axis 0, so it needs axis >= 1, not {axis}")
            chosen = [int(i) for i in first]
            if any(not 0 <= i < shape[0] for i in chosen):
                raise IndexError(f"{self.path}: {name} indices {list(chosen)} outside axis 0 of shape {shape}")
        middle, inner = math.prod(shape[1:axis]), math.prod(shape[axis + 1 :])
        lead = (len(chosen), *shape[1:axis]) if axis else ()
        result_shape = (*lead, stop - start, *shape[axis + 1 :])
        target = out
        if target is not None and (
            target.shape != result_shape or target.dtype != np.float32 or not target.flags.c_contiguous
        ):
            raise ValueError(
                f"{self.path}: out= must be C-contiguous float32 {result_shape}, got {target.dtype} {target.shape}"
            )
        out = target if target is not None and dtype == np.float32 else np.empty(result_shape, dtype=dtype)
        rows = [i * middle + j for i in chosen for j in range(middle)] if axis else [0]
        flat = out.reshape(len(rows), (stop - start) * inner)
        row_bytes = shape[axis] * inner * dtype.itemsize
        base = self._data_start + int(info["data_offsets"][0]) + start * inner * dtype.itemsize
        nbytes = flat.shape[1] * dtype.itemsize
        for r, row in enumerate(rows):
            if nbytes and os.preadv(self._fd, [memoryview(flat[r]).cast("B")], base + row * row_bytes) != nbytes:
                raise ValueError(f"{self.path}: tensor {name!r} is truncated")
        if info["dtype"] == "BF16":
            widened = out.astype(np.uint32)
            widened <<= 16
            if target is None:
                return widened.view(np.float32)
            target[...] = widened.view(np.float32)
            return target
        if target is not None and out is not target:  # a stored dtype other than float32 and BF16
            target[...] = out
            return target
        return out
