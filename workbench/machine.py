"""The machine a result was computed on, for every run's manifest and run record.

Figures move a little between machines: float32 kernels differ between CPU kinds (Intel with AMX,
AMD with AVX-512 bf16, AMD with AVX2 only) and GPUs, so reduction orders differ, a probe trains to a
slightly different optimum and a choice made on dev (the best layer) can flip between two layers
whose intervals overlap. A reader comparing two runs needs to see where each came from: the CPU
(model name and the instruction-set extensions that pick torch's kernels), the cores, the GPU, the
device and precision the run actually used, and the torch / transformers versions (in the manifest's
``packages``).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

# the extensions that decide which float32 / bfloat16 kernels torch runs on an x86 CPU
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


def _cpuinfo(path: Path = Path("/proc/cpuinfo")) -> tuple[str | None, set[str]]:
    """(model name, flags) of the first processor in ``/proc/cpuinfo``; (None, set()) where there is none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None, set()
    model: str | None = None
    flags: set[str] = set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
        if model is not None and flags:
            break
    return model, flags


def isa_kind(isa: list[str]) -> str:
    """The CPU kind as the docs name them: ``AMX``, ``AVX-512 bf16``, ``AVX-512``, ``AVX2`` or ``other``."""
    if "amx_bf16" in isa:
        return "AMX"
    if "avx512_bf16" in isa:
        return "AVX-512 bf16"
    if "avx512f" in isa:
        return "AVX-512"
    return "AVX2" if "avx2" in isa else "other"


def _gpu() -> str | None:
    """``"<n> x <name>"`` of the CUDA devices when torch is loaded and sees one; None otherwise (this
    never imports torch itself: a process that did not load it computed nothing on a GPU)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    count = torch.cuda.device_count()
    return f"{count} x {torch.cuda.get_device_name(0)}"


def describe_machine(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """``{"cpu", "isa", "kind", "cores", "gpu", "platform"}`` of this process's machine: the CPU model,
    its kernel-relevant extensions (:data:`ISA_FLAGS` present), its kind (:func:`isa_kind`), the cores
    this process may use, the CUDA devices (None without), and the OS / architecture."""
    model, flags = _cpuinfo(cpuinfo)
    isa = [f for f in ISA_FLAGS if f in flags]
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return {
        "cpu": model or platform.processor() or platform.machine(),
        "isa": isa,
        "kind": isa_kind(isa),
        "cores": cores,
        "gpu": _gpu(),
        "platform": f"{platform.system()} {platform.machine()}",
    }


def machine_summary(machine: dict[str, Any], compute: dict[str, Any] | None = None) -> str:
    """One line for tables and the dashboard's Runs page, e.g. ``Intel(R) Xeon(R) Processor (AVX-512),
    2 cores; cpu, float32``: the CPU and its kind, the cores, the GPU if any, then the device and
    precision a run used (``compute``: ``{"device", "precision"}``) where it recorded them."""
    text = f"{machine.get('cpu', '?')} ({machine.get('kind', '?')}), {machine.get('cores', '?')} cores"
    if machine.get("gpu"):
        text += f", GPU {machine['gpu']}"
    if compute:
        text += "; " + ", ".join(str(compute[k]) for k in ("device", "precision") if compute.get(k))
    return text
