"""Where a pretraining process runs: its device, its rank among the torchrun processes, and the
autocast dtype; the few collective operations the trainer needs.

Multi-process data parallelism is torch ``DistributedDataParallel``: ``torchrun --nproc_per_node N
-m bertology.pretraining --config FILE`` starts N processes; :func:`setup_runtime` joins the process
group (gloo on CPU, nccl on GPU) that torchrun describes in the environment.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist

from bertology.errors import ConfigError

__all__ = ["Runtime", "RuntimeConfig", "setup_runtime"]


class RuntimeConfig(Protocol):
    """The config fields :func:`setup_runtime` reads (``PretrainConfig``'s and ``FinetuneConfig``'s)."""

    @property
    def device(self) -> str: ...  # auto | cpu | cuda

    @property
    def bf16(self) -> bool | None: ...  # None = bf16 autocast on CUDA only

    @property
    def num_threads(self) -> int | None: ...  # CPU threads per process (None = torch default)


@dataclass
class Runtime:
    """One process of a run: ``device``, ``rank`` of ``world_size`` processes (``local_rank`` on its
    node), and ``autocast_dtype`` (bfloat16, or None for float32)."""

    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    autocast_dtype: torch.dtype | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        """Leave the process group (under torchrun), all ranks together after a barrier
        (:func:`bertology.distributed.shutdown`: a gloo rank that tore its connections down while its
        peer still used them aborted once in CI, "terminate called without an active exception");
        nothing for a single process."""
        if self.world_size > 1:
            from bertology.distributed import shutdown

            shutdown()

    def autocast(self) -> contextlib.AbstractContextManager:
        """The autocast context of a forward pass (a no-op without ``autocast_dtype``)."""
        return torch.autocast(
            self.device.type, dtype=self.autocast_dtype or torch.float32, enabled=self.autocast_dtype is not None
        )

    def all_finite(self, value: float) -> bool:
        """Whether ``value`` is finite on every process (an all-reduce under DDP, so all stop together;
        a single process reads nothing from the device)."""
        if self.world_size == 1:
            return math.isfinite(value)
        bad = torch.tensor([0.0 if math.isfinite(value) else 1.0], device=self.device)
        if self.world_size > 1:
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        return float(bad) == 0.0


def setup_runtime(cfg: RuntimeConfig) -> Runtime:
    """Pick the device and, under torchrun (WORLD_SIZE > 1), join the process group."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise ConfigError("config field 'device': cuda requested but no CUDA device is available")
    device = torch.device(f"cuda:{local}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    elif world > 1 and not use_cuda:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    bf16 = cfg.bf16 if cfg.bf16 is not None else use_cuda and torch.cuda.is_bf16_supported()
    return Runtime(device, rank, world, local, torch.bfloat16 if bf16 else None)


def run_machine(rt: Runtime) -> dict[str, Any]:
    """The run record's ``machine``: :func:`bertology.machine.describe_machine` of this process, with
    its one-line ``summary`` naming the device and the precision the steps ran in (autocast dtype or
    float32) -- losses and metrics move a little between CPU kinds and GPUs."""
    from bertology.machine import describe_machine, machine_summary

    machine = describe_machine()
    precision = str(rt.autocast_dtype).removeprefix("torch.") if rt.autocast_dtype is not None else "float32"
    compute = {"device": str(rt.device), "precision": precision}
    return machine | {"compute": compute, "summary": machine_summary(machine, compute)}
