"""Process-level settings that make long CPU jobs faster, and the choice of compute precision.

Precision: :func:`resolve_precision` turns ``"auto"`` into bfloat16 on a CUDA GPU with bfloat16
tensor cores (compute capability 8.0+) and, on a CPU, only where a short measured micro-benchmark
(:func:`low_precision_speedup`, cached per machine) finds it faster than float32, and warns when
bfloat16 / float16 is asked for where it is slower; :func:`cpu_info` names the CPU
and its matrix-unit flags for the benchmarks.

Allocator (opt-in, called by the ``bertology`` CLI):

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
import json
import math
import os
import platform
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from bertology import atomic, paths

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


# --------------------------------------------------------------------------- precision

# CPU flags that decide low-precision matmul speed (shown beside every benchmark figure):
# AMX tiles (bf16 / int8 matrix units), AVX512-BF16 / AVX512-FP16 dot products, and the plain
# float32 vector widths
MATRIX_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_fp16", "avx512f", "avx2", "fma")
# auto precision picks a low-precision dtype only when the measured workload runs at least this
# much faster than in float32: it loses digits, so a marginal gain does not pay for it
AUTO_MIN_SPEEDUP = 1.25
PRECISION_CACHE_VERSION = 2

_LOW = {"bfloat16": torch.bfloat16, "float16": torch.float16}
_speedups: dict[str, float] = {}


class PrecisionWarning(UserWarning):
    """A low-precision dtype was asked for where it was measured to be slower than float32."""


@dataclass(frozen=True)
class CpuInfo:
    """What the benchmarks print beside every figure: the CPU model, its core count and which of
    :data:`MATRIX_FLAGS` it has."""

    model: str
    cores: int
    flags: tuple[str, ...]

    def describe(self) -> str:
        """E.g. ``"AMD EPYC, 2 cores, avx512_bf16 avx512f avx2 fma, no AMX"``."""
        amx = "AMX" if any(f.startswith("amx") for f in self.flags) else "no AMX"
        shown = " ".join(f for f in self.flags if not f.startswith("amx")) or "no AVX2"
        return f"{self.model}, {self.cores} cores, {shown}, {amx}"


def cpu_info() -> CpuInfo:
    """The CPU model and its matrix-unit flags (from ``/proc/cpuinfo`` on Linux)."""
    model, flags = "", set[str]()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    return CpuInfo(model, os.cpu_count() or 1, tuple(f for f in MATRIX_FLAGS if f in flags))


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        info = cpu_info()
        return f"{info.model} [{' '.join(info.flags)}]"
    return device.type


ISA_LIMITS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
"""Environment variables that cap the instruction set torch's kernels use (e.g. AVX2 only on an
AVX-512 CPU): part of the cached measurement's key, since they change what bfloat16 costs."""


def _cache_key(dtype_name: str, device: torch.device) -> str:
    key = f"v{PRECISION_CACHE_VERSION} | {dtype_name} | {device.type} | {_device_name(device)} | torch {torch.__version__}"
    limits = [f"{name}={os.environ[name]}" for name in ISA_LIMITS if os.environ.get(name)]
    return key + (" | " + " ".join(limits) if limits and device.type == "cpu" else "")


def _cache_file() -> Path:
    return paths.home() / "runtime" / "precision.json"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_speedup(dtype: torch.dtype, device: torch.device | str = "cpu", *, repeat: int = 10) -> float:
    """Measured speed of a ``dtype`` matmul workload relative to float32 on ``device`` (> 1: faster).

    The workload is what autocast does in a BERT layer and in the probes: the float32 input is cast
    to ``dtype`` and multiplied by weights already in ``dtype`` (``[256, 384] x [384, 1536]``, 0.3
    GFLOP), against the same product in float32; best of ``repeat`` interleaved runs each (on CPU:
    one thread, timed in thread CPU time, so load from other processes does not enter). A ``dtype`` run slower than 4x float32 ends the measurement early (CPUs without bf16 units take
    about a second per call). Not cached: see :func:`low_precision_speedup`.
    """
    device = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 384, generator=gen).to(device)
    w = torch.randn(1536, 384, generator=gen).to(device)
    w_low = w.to(dtype)

    # CPU: one thread, timed in that thread's CPU time, so that other processes' load (which
    # deschedules us) does not enter the ratio; the per-core ratio carries over to more threads
    cpu = device.type == "cpu"
    clock = time.thread_time if cpu else time.perf_counter

    def once(fn) -> float:
        _sync(device)
        t0 = clock()
        fn()
        _sync(device)
        return clock() - t0

    threads = torch.get_num_threads()
    if cpu:
        torch.set_num_threads(1)
    try:
        F.linear(x, w)
        F.linear(x.to(dtype), w_low)  # first calls: kernel selection
        # interleaved, so that anything else going on hits both sides alike
        t32 = t_low = float("inf")
        for _ in range(repeat):
            t32 = min(t32, once(lambda: F.linear(x, w)))
            t_low = min(t_low, once(lambda: F.linear(x.to(dtype), w_low)))
            if t_low > 4 * t32:
                break
    except RuntimeError:  # no kernel for dtype on this device
        return 0.0
    finally:
        torch.set_num_threads(threads)
    return t32 / max(t_low, 1e-9)


def low_precision_speedup(dtype: torch.dtype | str, device: torch.device | str = "cpu") -> float:
    """:func:`measure_speedup`, measured once per machine: cached in this process and in
    ``$BERTOLOGY_HOME/runtime/precision.json`` under the device (CPU model and flags, or GPU name),
    the dtype and the torch version (a new CPU, flag or torch version measures again)."""
    dtype = _LOW[dtype] if isinstance(dtype, str) else dtype
    dtype_name = str(dtype).removeprefix("torch.")
    device = torch.device(device)
    key = _cache_key(dtype_name, device)
    if key in _speedups:
        return _speedups[key]
    cache_file = _cache_file()
    try:
        cached = json.loads(cache_file.read_text())
        if not isinstance(cached, dict):
            cached = {}
    except (OSError, ValueError):
        cached = {}
    value = cached.get(key)
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        value = measure_speedup(dtype, device)
        cached[key] = value
        try:
            atomic.write_json(cache_file, cached)
        except OSError:
            pass  # read-only home: measure per process
    _speedups[key] = float(value)
    return float(value)


def cuda_bf16_supported(device: torch.device | str) -> bool:
    """Whether a CUDA device has bfloat16 tensor cores (compute capability 8.0 or later: A100, H100, ...)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device)[0] >= 8


def resolve_precision(
    requested: str | None,
    device: torch.device | str = "cpu",
    *,
    what: str = "computation",
    default: str | None = "float32",
) -> torch.dtype | None:
    """The low-precision dtype to compute in, or None for float32.

    ``requested``: ``"auto"`` (bfloat16 where :func:`low_precision_speedup` measured it at least
    :data:`AUTO_MIN_SPEEDUP` times faster than float32 -- AMX, fast AVX512-BF16, recent GPUs --
    else float32), ``"float32"`` or None (float32; None means ``default``), ``"bfloat16"`` /
    ``"float16"`` (that dtype; on a device where it was measured slower than float32 a
    :class:`PrecisionWarning` names the measured cost). ``what`` names the computation in the
    warning.
    """
    if requested is None:
        requested = default
    if requested in (None, "float32"):
        return None
    device = torch.device(device)
    if requested not in _LOW and requested != "auto":
        raise ValueError(f"precision must be 'auto', 'float32', 'bfloat16' or 'float16', not {requested!r}")
    if device.type == "cuda":
        # a GPU's tensor cores run bfloat16 several times faster than float32 at any size that
        # matters (H100: 757 against ~50 TFLOP/s); a micro-benchmark small enough for a CPU times
        # kernel launches there, not arithmetic, so the device's capability decides
        supported = cuda_bf16_supported(device)
        if requested == "auto":
            return torch.bfloat16 if supported else None
        if requested == "bfloat16" and not supported:
            warnings.warn(
                f"bfloat16 {what} on {_device_name(device)}: no bfloat16 tensor cores on this GPU "
                f"(compute capability below 8.0); 'auto' picks float32 here",
                PrecisionWarning,
                stacklevel=3,
            )
        return _LOW[requested]
    if requested == "auto":
        return torch.bfloat16 if low_precision_speedup(torch.bfloat16, device) >= AUTO_MIN_SPEEDUP else None
    speedup = low_precision_speedup(_LOW[requested], device)
    if speedup < 1.0:
        where = cpu_info().describe() if device.type == "cpu" else _device_name(device)
        slower = f"{1 / speedup:.1f}x slower" if speedup > 0 else "not supported"
        warnings.warn(
            f"{requested} {what} on {where}: measured {slower} than float32 on this machine; "
            f"'auto' picks the faster of the two",
            PrecisionWarning,
            stacklevel=3,
        )
    return _LOW[requested]


def release_free_memory() -> None:
    """Hand memory the process has freed back to the system (glibc's ``malloc_trim``; nothing
    elsewhere). After a phase that allocated and freed many blocks of a few MB (a store read shard by
    shard, an extraction), glibc keeps them for reuse and the resident size stays at the phase's peak;
    a long run after it would then carry that peak for nothing."""
    import ctypes
    import ctypes.util
    import sys

    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        pass
