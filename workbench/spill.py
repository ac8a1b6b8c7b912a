"""Arrays an analysis writes once and reads back many times (an L-BFGS fit's design, chunk by chunk),
kept in memory while small and in an unnamed temporary file otherwise.

The file is read back with ``pread`` into fresh buffers, never memory-mapped: its pages belong to the
page cache, not to the process's resident set, so a fit that passes over a design of any size many
times holds one chunk at a time.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO

import numpy as np

DEFAULT_CACHE_BYTES = 64e6
"""Chunks kept in memory until their total passes this many bytes; then all of them (and every
later one) go to the temporary file."""


class Spill:
    """An append-only list of arrays: ``spill.append(a)`` then ``spill[k]`` (a fresh array equal to
    the ``k``-th appended, any shape and dtype).

    ``directory``: where the temporary file goes (unnamed where the file system allows, deleted when
    this object is closed or collected, or when the process dies; default: the system's temporary
    folder). ``cache_bytes``: the total held in memory before the chunks move to that file.
    """

    def __init__(self, directory: str | Path | None = None, cache_bytes: float = DEFAULT_CACHE_BYTES):
        self.directory, self.cache_bytes = directory, cache_bytes
        self._memory: list[np.ndarray] = []
        self._chunks: list[tuple[int, tuple[int, ...], np.dtype]] = []  # (offset, shape, dtype) in the file
        self._file: IO[bytes] | None = None
        self._end = 0  # bytes written to the file
        self.nbytes = 0

    @property
    def spilled(self) -> bool:
        """Whether the chunks live in the temporary file."""
        return self._file is not None

    def __len__(self) -> int:
        return len(self._chunks) if self._file is not None else len(self._memory)

    def append(self, array: np.ndarray) -> None:
        """Add one chunk (copied: later changes to ``array`` do not reach it)."""
        array = np.ascontiguousarray(array)
        self.nbytes += array.nbytes
        if self._file is None:
            self._memory.append(array.copy())
            if self.nbytes > self.cache_bytes:
                self._move_to_file()
            return
        self._write(array)

    def __getitem__(self, k: int) -> np.ndarray:
        if self._file is None:
            return self._memory[k]
        offset, shape, dtype = self._chunks[k]
        out = np.empty(shape, dtype=dtype)
        view = memoryview(out.reshape(-1)).cast("B") if out.nbytes else memoryview(bytearray())
        done = 0
        while done < len(view):  # pread returns at most ~2 GB at a time
            got = os.preadv(self._file.fileno(), [view[done:]], offset + done)
            if got <= 0:
                raise OSError(f"spill file: read {done} of {len(view)} bytes of chunk {k}")
            done += got
        return out

    def close(self) -> None:
        """Drop the chunks and delete the file."""
        self._memory, self._chunks = [], []
        if self._file is not None:
            self._file.close()
            self._file = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the OS deletes the unnamed file anyway
            pass

    def _move_to_file(self) -> None:
        self._file = tempfile.TemporaryFile(prefix=".bertology-spill-", dir=self.directory)
        held, self._memory = self._memory, []
        for array in held:
            self._write(array)

    def _write(self, array: np.ndarray) -> None:
        assert self._file is not None
        offset = self._end
        view = memoryview(array.reshape(-1)).cast("B") if array.nbytes else memoryview(b"")
        done = 0
        while done < len(view):
            done += os.pwrite(self._file.fileno(), view[done:], offset + done)
        self._chunks.append((offset, array.shape, array.dtype))
        self._end += array.nbytes
