"""Process-level settings that make long CPU jobs faster; opt-in, called by the ``bertology`` CLI.

On Linux with glibc, tensors above the allocator's mmap threshold (about 128 KiB at first) get
fresh pages from the kernel on every allocation and give them back when freed, so a job that
allocates one batch after another pays a page fault per 4 KiB each time. On virtual machines
that is slow: in ``benchmarks/extract.py`` it costs the feature store 15-30% of its time.
:func:`keep_freed_memory` makes glibc serve large blocks from its heap and keep freed memory for
reuse instead. Peak memory is unchanged; memory freed late in a job is not returned until exit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_done = False


def keep_freed_memory() -> bool:
    """Tune glibc's allocator for batch jobs (once per process). Returns whether it applied
    (False off Linux/glibc, where it does nothing)."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, 1 << 30)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 1 << 31))
    except (OSError, AttributeError):  # not glibc (e.g. musl)
        return False
    _done = ok
    return ok
