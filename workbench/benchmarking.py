"""Helpers for the benchmarks (``benchmarks/``): best-of-N timing, the measured matmul rate, tables."""

from __future__ import annotations

import time
from typing import Callable

import torch


def timed(fn: Callable, *args, repeat: int = 1, **kwargs):
    """(result of the last call, best wall seconds over ``repeat`` calls)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t0)
    return out, best


def matmul_flops_per_second(n: int = 1024, repeat: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """Measured GEMM rate of this machine (FLOP/s) with torch's threads, in ``dtype``."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    t0 = time.perf_counter()
    for _ in range(repeat):
        torch.mm(a, b)
    return 2 * n**3 * repeat / (time.perf_counter() - t0)


def print_table(rows: list[dict], title: str) -> None:
    cols = list(rows[0])
    widths = {c: max(len(c), *(len(_fmt(r[c])) for r in rows)) for c in cols}
    print(f"\n{title}")
    print("  ".join(c.ljust(widths[c]) for c in cols))
    print("  ".join("-" * widths[c] for c in cols))
    for r in rows:
        print("  ".join(_fmt(r[c]).ljust(widths[c]) for c in cols))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)
