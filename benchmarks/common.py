"""Helpers for the benchmarks (``benchmarks/``): best-of-N timing (wall and this process's CPU
time), the measured matmul rate, and tables headed by the machine they were measured on (CPU
model, cores, matrix-unit flags, torch version and threads, the measured bfloat16 speed-up and
what ``auto`` precision picks from it).

The benchmarks run as scripts (``python benchmarks/extract.py``), so this folder is on ``sys.path``
and they import these helpers as ``from common import ...``."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from bertology.runtime import AUTO_MIN_SPEEDUP, cpu_info, low_precision_speedup


def timed(fn: Callable, *args, repeat: int = 1, **kwargs):
    """(result of the last call, best wall seconds over ``repeat`` calls)."""
    out, wall, _ = timed_cpu(fn, *args, repeat=repeat, **kwargs)
    return out, wall


def timed_cpu(fn: Callable, *args, repeat: int = 1, **kwargs):
    """(result of the last call, best wall seconds, CPU seconds of this process in that same call).

    On a shared machine the wall time moves with other people's load; the CPU time (every thread
    of this process) much less, so both are reported."""
    best, cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn(*args, **kwargs)
        wall, used = time.perf_counter() - t0, time.process_time() - c0
        if wall < best:
            best, cpu = wall, used
    return out, best, cpu


def matmul_flops_per_second(n: int = 1024, repeat: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Measured GEMM rate of this machine (FLOP/s) with torch's threads, in ``dtype`` (best of
    ``repeat`` single products, after one warm-up)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def machine_line() -> str:
    """One line naming the machine every figure of a table was measured on."""
    speedup = low_precision_speedup(torch.bfloat16, "cpu")
    auto = "bfloat16" if speedup >= AUTO_MIN_SPEEDUP else "float32"
    return (
        f"CPU: {cpu_info().describe()}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"bfloat16 matmul measured {speedup:.2f}x float32 -> auto precision = {auto}"
    )


def print_table(rows: list[dict], title: str) -> None:
    """A plain-text table; the title is followed by :func:`machine_line`."""
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in cols}
    print(f"\n{title}")
    print(f"[{machine_line()}]")
    print("  ".join(c.ljust(widths[c]) for c in cols))
    print("  ".join("-" * widths[c] for c in cols))
    for r in rows:
        print("  ".join(_fmt(r[c]).ljust(widths[c]) for c in cols))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)
