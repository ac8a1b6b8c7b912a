"""The optimizer-step loop that pretraining and fine-tuning share: :func:`run_steps`.

Per optimizer step it runs data -> forward -> backward over ``grad_accum_steps`` micro-batches
(DDP all-reduces the gradients once, at the last one), clips, stops on a non-finite loss or
gradient norm before the weights change, steps the optimizer and schedule, then logs, evaluates
and checkpoints at the intervals it is given, with a progress bar. What differs between the
trainers -- where a micro-batch comes from, what the loss is, what the held-out metrics are, what
a checkpoint holds -- comes in as functions of a :class:`StepLoop`.

The kill-and-resume tests stop a run after a given step through ``end_of_step`` (each trainer
passes its own module-level hook, which the tests replace).

Speed on a GPU: the micro-batches (masking, collation; pinned for a copy to the GPU that does not
block) are built ahead by worker processes (on CUDA by default, not on the CPU, where they would
compete with torch's own threads), in the same order and from the same ``(step, micro)`` as
without them, so the batches, and a resumed run, do not depend on timing. A
step reads the device once: its micro-batch losses and the gradient norm together, one transfer
(the divergence checks need them before the weights change); token counts come from the batch on
the CPU. Under DDP the processes then agree through one all-reduce.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bertology.checkpoints import list_checkpoints
from bertology.errors import ConfigError, WorkbenchError
from bertology.models import to_device
from bertology.pretraining.checkpoint import record_divergence, set_aside_checkpoints
from bertology.pretraining.metrics import DivergenceMonitor, MetricsLog
from bertology.pretraining.runtime import Runtime

__all__ = ["StepLoop", "run_steps", "TrainingDivergedError", "Prefetcher", "default_prefetch"]


class TrainingDivergedError(WorkbenchError):
    """The training loss (or gradient norm) became NaN or infinite, or stayed far above where it
    started (:class:`~bertology.pretraining.metrics.DivergenceMonitor`); the run stopped before saving it."""


@dataclass
class StepLoop:
    """Everything :func:`run_steps` needs: the schedule of steps and events, the model and its
    optimizer, and the trainer's own pieces as functions.

    ``model`` is what is clipped, checked for finite weights and saved; ``train_module`` is what
    ``forward`` calls (``model`` or a module around it, DDP-wrapped under torchrun: its ``no_sync``
    defers the gradient all-reduce). ``micro_batch(step, micro)`` returns this process's batch on
    the device (with an ``attention_mask`` ``[batch, tokens]`` for the token count);
    ``forward(batch)`` returns the scalar training loss; ``evaluate()`` the held-out metrics (None:
    no held-out set), ``eval_key`` the one shown on the progress bar; ``save(step)`` writes
    checkpoint ``step`` on the main process; ``end_of_step(step)`` is called after each step;
    ``divergence`` (None: off) stops a run whose finite loss stays far above where it started.
    ``log_window``: the training loss summed over the log window in progress and its steps
    (``loss``, ``steps``), updated before each checkpoint so that a trainer's ``save`` keeps it in
    the checkpoint; a resumed run passes the saved one, and its first log line then averages the
    same steps as an uninterrupted run's (not only those since the restart).
    ``prefetch``: worker processes building micro-batches ahead (0: none, built in the step;
    None: :func:`default_prefetch` of the device). ``flops_per_token`` (model FLOPs of training on
    one token) and ``peak_flops`` (of one device) add ``mfu`` to the log rows when both are known.
    """

    run_name: str
    run_dir: Path
    max_steps: int
    grad_accum_steps: int
    max_grad_norm: float
    log_every: int
    eval_every: int
    save_every: int
    keep_steps: Collection[int]
    progress: bool
    rt: Runtime
    model: torch.nn.Module
    train_module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    metrics: MetricsLog
    micro_batch: Callable[[int, int], dict[str, torch.Tensor]]
    forward: Callable[[dict[str, torch.Tensor]], torch.Tensor]
    save: Callable[[int], None]
    end_of_step: Callable[[int], None]
    evaluate: Callable[[], dict[str, float]] | None = None
    eval_key: str = "eval_loss"
    divergence: DivergenceMonitor | None = None
    prefetch: int | None = None
    flops_per_token: float | None = None
    peak_flops: float | None = None
    log_window: dict[str, float] = field(default_factory=dict)


@dataclass
class _LogWindow:
    """Training loss and tokens (all processes) since the last log line, and the clock that times them."""

    loss: float = 0.0
    steps: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)

    def event(self, lr: float, loop: StepLoop) -> dict[str, float]:
        elapsed = time.perf_counter() - self.started
        out = {"loss": self.loss / self.steps, "lr": lr, "tokens_per_s": self.tokens / max(elapsed, 1e-9)}
        if loop.flops_per_token and loop.peak_flops:  # model FLOP/s of one process / its peak
            out["mfu"] = loop.flops_per_token * out["tokens_per_s"] / loop.rt.world_size / loop.peak_flops
        return out


PREFETCH_ENV = "BERTOLOGY_PREFETCH_WORKERS"


def default_prefetch(device: torch.device) -> int:
    """Worker processes building micro-batches ahead, by default: 2 on CUDA (masking and collation
    off the GPU's critical path), 0 on the CPU (there they would take cores from the step's own
    computation: the batches are built in the step, as before); ``$BERTOLOGY_PREFETCH_WORKERS``
    (an integer >= 0) overrides it on any device."""
    env = os.environ.get(PREFETCH_ENV, "").strip()
    if env:
        if not env.isdigit():
            raise ConfigError(f"environment variable {PREFETCH_ENV}: expected an integer >= 0, got {env!r}")
        return int(env)
    return 2 if device.type == "cuda" else 0


class Prefetcher:
    """``build(*item)`` of each of ``items``, in order, in a background thread, at most ``depth``
    results ahead of :meth:`get` (a bounded queue). ``get(item)`` returns the next result, which
    must be ``item``'s; an exception raised by ``build`` is raised there. The results are those of
    calling ``build`` in order in the caller's thread, whatever the timing, as long as ``build``
    depends on its arguments only. :meth:`close` stops the thread (it builds at most one more)."""

    def __init__(self, build: Callable, items, depth: int, device: torch.device | None = None):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(build, iter(items), device), name="bertology-prefetch", daemon=True
        )
        self._thread.start()

    def _run(self, build: Callable, items, device: torch.device | None) -> None:
        if device is not None and device.type == "cuda":
            torch.cuda.set_device(device)  # the thread's current device (pinned memory, copies)
        for item in items:
            if self._stop.is_set():
                return
            out: tuple[Any, Any, BaseException | None]  # (item, result, what build raised)
            try:
                out = (item, build(*item), None)
            except BaseException as exc:  # handed to the consumer, raised there
                out = (item, None, exc)
            while not self._stop.is_set():
                try:
                    self._queue.put(out, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if out[2] is not None:
                return

    def get(self, item):
        while True:
            try:
                got, value, exc = self._queue.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError(f"the batch prefetcher stopped before {item}") from None
        if exc is not None:
            raise exc
        if got != item:
            raise RuntimeError(f"the batch prefetcher gave {got} where {item} was due")
        return value

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class _StepBatches(torch.utils.data.Dataset):
    """Item ``i`` of a run's micro-batches from ``start_step``: ``build(step, micro)`` of
    ``step = start_step + i // accum``, ``micro = i % accum`` (for a ``DataLoader``'s workers)."""

    def __init__(self, build: Callable, start_step: int, max_steps: int, accum: int):
        self.build, self.start_step, self.accum = build, start_step, accum
        self.length = (max_steps - start_step) * accum

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int):
        return self.build(self.start_step + i // self.accum, i % self.accum)


class _Batches:
    """The loop's micro-batches ``(batch on the device, tokens of all processes)`` for
    ``(step, micro)``: built when asked, or ahead by ``prefetch`` worker processes (a
    ``DataLoader`` over :class:`_StepBatches`, forked, in order, pinned on CUDA; the masking is
    Python, which in a thread of this process would hold the lock the step's own Python needs),
    or where processes cannot be forked by a :class:`Prefetcher` thread."""

    def __init__(self, loop: StepLoop, start_step: int):
        import multiprocessing

        self.loop = loop
        self.prefetcher = self.loader = None
        self.position = (start_step, 0)
        workers = default_prefetch(loop.rt.device) if loop.prefetch is None else loop.prefetch
        if workers <= 0 or start_step >= loop.max_steps:
            return
        if "fork" in multiprocessing.get_all_start_methods():
            dataset = _StepBatches(self.build_cpu, start_step, loop.max_steps, loop.grad_accum_steps)
            self.loader = iter(
                torch.utils.data.DataLoader(
                    dataset,
                    batch_size=None,
                    shuffle=False,
                    num_workers=workers,
                    prefetch_factor=2,
                    pin_memory=loop.rt.device.type == "cuda",
                    multiprocessing_context="fork",
                    generator=torch.Generator(),
                )
            )  # the workers' seeds: not drawn from the run's global RNG
        else:
            items = ((s, m) for s in range(start_step, loop.max_steps) for m in range(loop.grad_accum_steps))
            self.prefetcher = Prefetcher(self.build, items, 2 * workers, loop.rt.device)

    def build_cpu(self, step: int, micro: int) -> tuple[dict[str, torch.Tensor], int]:
        batch = self.loop.micro_batch(step, micro)
        return batch, int(batch["attention_mask"].sum()) * self.loop.rt.world_size  # on the CPU: no device sync

    def build(self, step: int, micro: int) -> tuple[dict[str, torch.Tensor], int]:
        batch, tokens = self.build_cpu(step, micro)
        return to_device(batch, self.loop.rt.device, non_blocking=True), tokens

    def get(self, step: int, micro: int) -> tuple[dict[str, torch.Tensor], int]:
        if self.prefetcher is not None:
            return self.prefetcher.get((step, micro))
        if self.loader is None:
            return self.build(step, micro)
        if (step, micro) != self.position:
            raise RuntimeError(f"micro-batch {(step, micro)} asked for where {self.position} was due")
        self.position = (step, micro + 1) if micro + 1 < self.loop.grad_accum_steps else (step + 1, 0)
        batch, tokens = next(self.loader)
        return to_device(batch, self.loop.rt.device, non_blocking=True), tokens

    def close(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()
        if self.loader is not None:
            shutdown = getattr(self.loader, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            self.loader = None


def run_steps(loop: StepLoop, start_step: int) -> None:
    """Optimizer steps ``start_step + 1`` .. ``max_steps``, each logged, evaluated and saved at the
    loop's intervals (and at the end). Raises ``TrainingDivergedError`` at the first non-finite
    loss or gradient norm (nothing of that step is applied or saved)."""
    from bertology.progress import progress_bar

    rt = loop.rt
    if start_step == 0 and 0 in loop.keep_steps:
        checkpoint(loop, 0)
    loop.model.train()
    bar = progress_bar(  # off with the config's progress: false, or the one switch (bertology.progress)
        total=loop.max_steps,
        initial=start_step,
        enabled=loop.progress and rt.is_main,
        desc=loop.run_name,
        unit="step",
        leave=True,
        file=sys.stderr,
    )
    batches = _Batches(loop, start_step)
    try:
        _steps(loop, start_step, batches, bar)
    finally:
        batches.close()
        bar.close()


def _steps(loop: StepLoop, start_step: int, batches: _Batches, bar) -> None:
    rt = loop.rt
    window = _LogWindow(loss=float(loop.log_window.get("loss", 0.0)), steps=int(loop.log_window.get("steps", 0)))
    shown: dict[str, str] = {}
    for step in range(start_step, loop.max_steps):
        # data, forward, backward: the step's micro-batches, gradients accumulated
        losses, tokens = accumulate_gradients(loop, step, batches.get)
        window.tokens += tokens

        # step: clip; stop on a non-finite loss before the weights change; update
        norm = None
        if loop.max_grad_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(loop.model.parameters(), loop.max_grad_norm)
        values = _read(losses, norm)  # the step's one read of the device
        loss = 0.0
        for value in values[: len(losses)]:
            loss += value / loop.grad_accum_steps
        grad_norm = values[-1] if norm is not None else 0.0
        lr = float(loop.scheduler.get_last_lr()[0])
        diverged = loop.divergence is not None and loop.divergence.update(step, loss, final=step + 1 == loop.max_steps)
        if not rt.all_finite(loss + grad_norm + (math.inf if diverged else 0.0)):
            bar.close()
            _stop_diverged(loop, step, loss, grad_norm, lr)
        loop.optimizer.step()
        loop.scheduler.step()
        loop.optimizer.zero_grad(set_to_none=True)
        done = step + 1
        window.loss += loss
        window.steps += 1
        shown.update(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
        bar.set_postfix(shown, refresh=False)
        bar.update(1)

        # log
        if done % loop.log_every == 0 or done == loop.max_steps:
            event = window.event(lr, loop)
            loop.metrics.log(step=done, **event)
            if "mfu" in event:
                shown["mfu"] = f"{event['mfu']:.1%}"
            window = _LogWindow()
        # eval
        if loop.evaluate is not None and (done % loop.eval_every == 0 or done == loop.max_steps):
            scores = loop.evaluate()
            loop.metrics.log(step=done, **scores)
            shown[loop.eval_key] = f"{scores[loop.eval_key]:.3f}"
            bar.set_postfix(shown)
            window.started = time.perf_counter()  # evaluation time does not count against training tokens/s
        # checkpoint
        if done % loop.save_every == 0 or done in loop.keep_steps or done == loop.max_steps:
            loop.log_window.update(loss=window.loss, steps=window.steps)  # saved with the checkpoint
            checkpoint(loop, done)
            window.started = time.perf_counter()
        loop.end_of_step(done)


def _read(losses: list[torch.Tensor], norm: torch.Tensor | None) -> list[float]:
    """The micro-batch losses and the gradient norm as Python floats, in one transfer from the
    device (float64 holds each float32 / bfloat16 value exactly: the same numbers as ``float()``)."""
    parts = [x.detach().reshape(1).double() for x in losses]
    if norm is not None:
        parts.append(norm.detach().reshape(1).double())
    return torch.cat(parts).tolist()


def _no_sync(module: torch.nn.Module) -> contextlib.AbstractContextManager:
    """DDP's ``no_sync()`` of ``module`` (the train module of a run of several processes is DDP-wrapped)."""
    if not isinstance(module, torch.nn.parallel.DistributedDataParallel):
        raise WorkbenchError(
            f"a run of several processes trains a DistributedDataParallel module, not {type(module).__name__}"
        )
    return module.no_sync()


def accumulate_gradients(loop: StepLoop, step: int, batch=None) -> tuple[list[torch.Tensor], int]:
    """Forward and backward of this process's ``grad_accum_steps`` micro-batches of ``step``, each
    loss scaled by ``1 / grad_accum_steps``; returns ``(the micro-batch losses, on the device, not
    read; tokens of all processes)``. ``batch(step, micro)`` gives ``(batch on the device, tokens)``
    (default: built here)."""
    rt, accum = loop.rt, loop.grad_accum_steps
    if batch is None:
        batch = _Batches(loop, loop.max_steps).get  # no prefetching
    losses, tokens = [], 0
    for micro in range(accum):
        data, n_tokens = batch(step, micro)
        last = micro == accum - 1
        # DDP all-reduces the gradients in backward: once per step, at its last micro-batch
        deferred_grad_sync = contextlib.nullcontext() if last or rt.world_size == 1 else _no_sync(loop.train_module)
        with deferred_grad_sync:
            loss = loop.forward(data)
            (loss / accum).backward()
        losses.append(loss.detach())
        tokens += n_tokens
    return losses, tokens


def checkpoint(loop: StepLoop, step: int) -> None:
    """Save checkpoint ``step`` (``loop.save`` on the main process); non-finite weights stop the run."""
    rt = loop.rt
    flags = [torch.isfinite(p).all() for p in loop.model.parameters()]
    finite = bool(torch.stack(flags).all()) if flags else True  # one read of the device
    if not rt.all_finite(0.0 if finite else math.inf):  # finite losses can still leave inf weights
        rt.close()
        raise TrainingDivergedError(
            f"{loop.run_dir}: non-finite weights at step {step}; checkpoint not written. "
            "Lower learning_rate and start a new run_name"
        )
    if rt.is_main:
        loop.save(step)
    rt.barrier()


def _stop_diverged(loop: StepLoop, step: int, loss: float, grad_norm: float, lr: float) -> None:
    """Raise ``TrainingDivergedError`` for step ``step + 1`` (nothing of it saved), naming the last
    checkpoint: its weights are finite, and for a finite divergence the checkpoints saved since the
    loss went up are first set aside (``diverged-checkpoint-<step>``), so it is the last good one."""
    rt, monitor = loop.rt, loop.divergence
    set_aside: list[str] = []
    if math.isfinite(loss + grad_norm) and monitor is not None and monitor.streak_start is not None:
        why = f"loss {loss:.4g} stayed {monitor.describe()}"
        if rt.is_main:
            set_aside = [p.name for p in set_aside_checkpoints(loop.run_dir, monitor.streak_start)]
    else:
        why = f"loss {loss} (gradient norm {grad_norm}) on at least one process"
    rt.barrier()
    last = [s for s, _ in list_checkpoints(loop.run_dir)]
    if rt.is_main:
        record = {"step": step + 1, "reason": why, "learning_rate": lr, "last_good_checkpoint": max(last, default=None)}
        record_divergence(loop.run_dir, record | {"set_aside": set_aside})
    rt.close()
    raise TrainingDivergedError(
        f"{loop.run_dir}: training diverged at step {step + 1}: {why}, learning rate {lr:.3g}. Stopped without "
        f"saving this step; the last good checkpoint is step {max(last) if last else 'none'}. Lower "
        f"learning_rate (or raise warmup_steps) and start a new run_name"
    )
