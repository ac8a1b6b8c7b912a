"""Sharded extraction over ``torch.distributed``: one process per GPU (NCCL) or CPU processes (gloo).

Launched by ``torchrun``, every process runs the same :func:`bertology.store.extract`; the store's
shards are split across the ranks (:func:`assign_shards`), each rank writes its own shards
atomically with their checksums, and rank 0 -- which holds the store's lock for the whole run --
plans, cleans up and writes the one manifest at the end. Shards are computed exactly as a single
process computes them, so the store is byte-identical to a single-process one, and a run killed
on any rank resumes like a single-process run (finished shards are verified and kept).

Single node, 4 GPUs::

    torchrun --standalone --nproc_per_node 4 -m bertology.cli extract --model minilm-l6 --corpus my.conllu

CPU processes (gloo), e.g. 4 processes of 4 threads on a 16-core machine::

    OMP_NUM_THREADS=4 torchrun --standalone --nproc_per_node 4 -m bertology.cli extract --device cpu ...

Two nodes of 8 GPUs (run on each node, with its ``--node_rank``; the store root must be a folder
both nodes see, e.g. a shared file system)::

    torchrun --nnodes 2 --node_rank 0 --nproc_per_node 8 --rdzv_backend c10d \\
        --rdzv_endpoint host0:29500 -m bertology.cli extract --root /shared/stores ...
"""

from __future__ import annotations

import datetime
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from bertology.errors import StoreError, WorkbenchError

T = TypeVar("T")


@dataclass(frozen=True)
class Group:
    """The processes extracting one store together: ``world_size`` 1 = a plain single process."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if self.world_size == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if self.world_size == 1:
            return [obj]
        out: list[Any] = [None] * self.world_size
        torch.distributed.all_gather_object(out, obj)
        return out

    def run_on_main(self, compute: Callable[[], T]) -> T:
        """Rank 0 runs ``compute`` and every rank returns its result. When it raises, rank 0 raises
        that error and every other rank a :class:`StoreError` quoting it (no rank is left waiting)."""
        if self.world_size == 1:
            return compute()
        result, error = None, None
        if self.is_main:
            try:
                result = compute()
            except Exception as exc:  # noqa: BLE001 -- told to every rank, then raised
                error = exc
        shared_result, shared_error = self.broadcast((result, None if error is None else str(error)))
        if error is not None:
            raise error
        if shared_error is not None:
            raise StoreError(f"rank 0: {shared_error}")
        return shared_result

    def raise_if_any_failed(self, error: BaseException | None) -> None:
        """Every rank tells the others whether its part of the extraction failed (``error``); then a
        rank that failed raises its own error and the others a :class:`StoreError` naming the first
        rank that failed. Returns on every rank when none did."""
        failures = self.gather(None if error is None else f"{type(error).__name__}: {error}")
        if error is not None:
            raise error
        failed = [(rank, message) for rank, message in enumerate(failures) if message is not None]
        if failed:
            raise StoreError(f"extraction failed on rank {failed[0][0]}: {failed[0][1]}")


def current_group() -> Group:
    """The initialised default process group, or a single process when there is none."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return Group(dist.get_rank(), dist.get_world_size())
    return Group()


def launched_by_torchrun() -> bool:
    """True inside a process that ``torchrun`` started as one of several (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def init_from_env(device: str | None = None) -> tuple[Group, str]:
    """Join the process group ``torchrun`` described in the environment (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR`` / ``MASTER_PORT``); return ``(group, device)``.

    device: ``"cpu"`` -> gloo; ``None`` or ``"cuda"`` with GPUs present -> NCCL on ``cuda:LOCAL_RANK``.
    Outside torchrun (or with one process) nothing is initialised: ``(Group(), device or "cpu")``.
    """
    if device is not None and not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise WorkbenchError(f"--device must be cpu, cuda or cuda:N, got {device!r}")
    if device is not None and device.startswith("cuda") and not torch.cuda.is_available():
        raise WorkbenchError(f"--device {device}: no CUDA device is available here (use --device cpu)")
    if not launched_by_torchrun():
        return Group(), device or "cpu"
    dist = torch.distributed
    if not dist.is_available():
        raise WorkbenchError("this torch build has no torch.distributed; run extract without torchrun")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() and (device is None or device.startswith("cuda"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return current_group(), device or "cpu"


def shutdown(timeout_s: float = 120.0) -> None:
    """Leave the process group (if one was joined), all ranks together.

    Ranks first meet at a barrier (gloo: ``monitored_barrier``, which gives up after ``timeout_s``
    when a rank died), so no rank tears its connections down while a peer still uses them: a
    gloo rank whose peer had already left could abort in ``destroy_process_group`` ("terminate
    called without an active exception", seen once in CI).
    """
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s))
        else:
            dist.barrier()
    except Exception:  # noqa: BLE001 -- a dead peer: leave anyway, the error that killed it is reported
        pass
    dist.destroy_process_group()


def assign_shards(shards: list[int], costs: list[int], world_size: int) -> list[list[int]]:
    """Split shard indices ``shards`` (with ``costs``, e.g. padded tokens) over ``world_size`` ranks:
    the costliest shard first, each to the rank with the least work so far (ties: lowest rank).
    Deterministic; ``[rank] -> its shards``, each list in increasing shard order."""
    load = [0] * world_size
    per_rank: list[list[int]] = [[] for _ in range(world_size)]
    for k, cost in sorted(zip(shards, costs), key=lambda shard_cost: (-shard_cost[1], shard_cost[0])):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        per_rank[rank].append(k)
        load[rank] += cost
    return [sorted(assigned) for assigned in per_rank]
