"""The optimizer-step loop that pretraining and fine-tuning share: :func:`run_steps`.

Per optimizer step it runs data -> forward -> backward over ``grad_accum_steps`` micro-batches
(DDP all-reduces the gradients once, at the last one), clips, stops on a non-finite loss or
gradient norm before the weights change, steps the optimizer and schedule, then logs, evaluates
and checkpoints at the intervals it is given, with a progress bar. What differs between the
trainers -- where a micro-batch comes from, what the loss is, what the held-out metrics are, what
a checkpoint holds -- comes in as functions of a :class:`StepLoop`.

The kill-and-resume tests stop a run after a given step through ``end_of_step`` (each trainer
passes its own module-level hook, which the tests replace).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

import torch

from bertology.checkpoints import list_checkpoints
from bertology.errors import WorkbenchError
from bertology.pretraining.checkpoint import set_aside_checkpoints
from bertology.pretraining.metrics import DivergenceMonitor, MetricsLog
from bertology.pretraining.runtime import Runtime

__all__ = ["StepLoop", "run_steps", "TrainingDivergedError"]


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


@dataclass
class _LogWindow:
    """Training loss and tokens (all processes) since the last log line, and the clock that times them."""

    loss: float = 0.0
    steps: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.perf_counter)

    def event(self, lr: float) -> dict[str, float]:
        elapsed = time.perf_counter() - self.started
        return {"loss": self.loss / self.steps, "lr": lr, "tokens_per_s": self.tokens / max(elapsed, 1e-9)}


def run_steps(loop: StepLoop, start_step: int) -> None:
    """Optimizer steps ``start_step + 1`` .. ``max_steps``, each logged, evaluated and saved at the
    loop's intervals (and at the end). Raises ``TrainingDivergedError`` at the first non-finite
    loss or gradient norm (nothing of that step is applied or saved)."""
    from tqdm.auto import tqdm

    rt = loop.rt
    if start_step == 0 and 0 in loop.keep_steps:
        checkpoint(loop, 0)
    loop.model.train()
    bar = tqdm(total=loop.max_steps, initial=start_step, disable=not (loop.progress and rt.is_main),
               desc=loop.run_name, dynamic_ncols=True, file=sys.stderr)
    window = _LogWindow()
    for step in range(start_step, loop.max_steps):
        # data, forward, backward: the step's micro-batches, gradients accumulated
        loss, tokens = accumulate_gradients(loop, step)
        window.tokens += tokens

        # step: clip; stop on a non-finite loss before the weights change; update
        grad_norm = 0.0
        if loop.max_grad_norm > 0:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(loop.model.parameters(), loop.max_grad_norm))
        lr = loop.scheduler.get_last_lr()[0]
        diverged = loop.divergence is not None and loop.divergence.update(step, loss,
                                                                           final=step + 1 == loop.max_steps)
        if not rt.all_finite(loss + grad_norm + (math.inf if diverged else 0.0)):
            bar.close()
            _stop_diverged(loop, step, loss, grad_norm, lr)
        loop.optimizer.step()
        loop.scheduler.step()
        loop.optimizer.zero_grad(set_to_none=True)
        done = step + 1
        window.loss += loss
        window.steps += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}")

        # log
        if done % loop.log_every == 0 or done == loop.max_steps:
            loop.metrics.log(step=done, **window.event(lr))
            window = _LogWindow()
        # eval
        if loop.evaluate is not None and (done % loop.eval_every == 0 or done == loop.max_steps):
            scores = loop.evaluate()
            loop.metrics.log(step=done, **scores)
            bar.set_postfix({"loss": f"{loss:.3f}", loop.eval_key: f"{scores[loop.eval_key]:.3f}"})
            window.started = time.perf_counter()  # evaluation time does not count against training tokens/s
        # checkpoint
        if done % loop.save_every == 0 or done in loop.keep_steps or done == loop.max_steps:
            checkpoint(loop, done)
            window.started = time.perf_counter()
        loop.end_of_step(done)
    bar.close()


def accumulate_gradients(loop: StepLoop, step: int) -> tuple[float, int]:
    """Forward and backward of this process's ``grad_accum_steps`` micro-batches of ``step``, each
    loss scaled by ``1 / grad_accum_steps``; returns ``(the step's mean loss, tokens of all processes)``."""
    rt, accum = loop.rt, loop.grad_accum_steps
    loss_sum, tokens = 0.0, 0
    for micro in range(accum):
        batch = loop.micro_batch(step, micro)
        last = micro == accum - 1
        # DDP all-reduces the gradients in backward: once per step, at its last micro-batch
        deferred_grad_sync = contextlib.nullcontext() if last or rt.world_size == 1 else loop.train_module.no_sync()
        with deferred_grad_sync:
            loss = loop.forward(batch)
            (loss / accum).backward()
        loss_sum += float(loss.detach()) / accum
        tokens += int(batch["attention_mask"].sum()) * rt.world_size
    return loss_sum, tokens


def checkpoint(loop: StepLoop, step: int) -> None:
    """Save checkpoint ``step`` (``loop.save`` on the main process); non-finite weights stop the run."""
    rt = loop.rt
    finite = all(bool(torch.isfinite(p).all()) for p in loop.model.parameters())
    if not rt.all_finite(0.0 if finite else math.inf):  # finite losses can still leave inf weights
        rt.close()
        raise TrainingDivergedError(f"{loop.run_dir}: non-finite weights at step {step}; checkpoint not written. "
                                    "Lower learning_rate and start a new run_name")
    if rt.is_main:
        loop.save(step)
    rt.barrier()


def _stop_diverged(loop: StepLoop, step: int, loss: float, grad_norm: float, lr: float) -> None:
    """Raise ``TrainingDivergedError`` for step ``step + 1`` (nothing of it saved), naming the last
    checkpoint: its weights are finite, and for a finite divergence the checkpoints saved since the
    loss went up are first set aside (``diverged-checkpoint-<step>``), so it is the last good one."""
    rt, monitor = loop.rt, loop.divergence
    if math.isfinite(loss + grad_norm) and monitor is not None and monitor.streak_start is not None:
        why = f"loss {loss:.4g} stayed {monitor.describe()}"
        if rt.is_main:
            set_aside_checkpoints(loop.run_dir, monitor.streak_start)
    else:
        why = f"loss {loss} (gradient norm {grad_norm}) on at least one process"
    rt.barrier()
    last = [s for s, _ in list_checkpoints(loop.run_dir)]
    rt.close()
    raise TrainingDivergedError(
        f"{loop.run_dir}: training diverged at step {step + 1}: {why}, learning rate {lr:.3g}. Stopped without "
        f"saving this step; the last good checkpoint is step {max(last) if last else 'none'}. Lower "
        f"learning_rate (or raise warmup_steps) and start a new run_name")
