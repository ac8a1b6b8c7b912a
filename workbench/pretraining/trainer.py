"""The pretraining loop: :func:`run_pretraining` trains an encoder from scratch, or resumes it.

It reads top to bottom: resume plan, data, model and optimiser, restore; then, per optimizer step,
data -> forward -> backward (``grad_accum_steps`` micro-batches) -> step -> log -> eval ->
checkpoint. What is specific to an objective comes from :mod:`bertology.pretraining.objectives`
through one interface -- ``build_model(cfg, ...)``, ``make_loss(cfg, model)`` and a loss module
called as ``loss, mlm_loss, extras = loss_module(input_ids, attention_mask, token_type_ids, labels,
pair_labels)`` -- and the held-out metrics of :mod:`bertology.pretraining.evaluation`. The pieces
the loop names live beside it: ``loop`` (the optimizer-step loop itself, shared with fine-tuning),
``config`` (``PretrainConfig``), ``data``, ``runtime`` (device, DDP),
``optimization``, ``checkpoint`` (save, prune, restore, resume plan, ``run.json``), ``metrics``.

Run layout (``paths.models_dir() / <run_name>``)::

    run.json                     config, seed, corpus hash, world size
    metrics.jsonl                one JSON object per log/eval event (see ``read_metrics``)
    tokenizer/                   the tokenizer (trained here unless the config names one)
    data/                        tokenised corpus cache (safetensors)
    checkpoint-<step>/           config.json, model.safetensors, tokenizer files, trainer state

Resumption is exact: the data order and the masks are functions of ``(seed, position)``, and the
checkpoint holds the optimizer, scheduler and RNG states, so a run stopped after a checkpoint and
resumed ends with the same weights as an uninterrupted run. Resuming with another ``max_steps``
changes the learning-rate schedule, so it is refused unless asked for as a new *phase*
(``new_phase=True``, recorded in ``run.json``; every checkpoint kept so far stays).

A non-finite training loss (or gradient norm) stops the run at once with
``TrainingDivergedError``, before the optimizer step, so no NaN weights reach a checkpoint. So does
a finite loss that stays far up (:class:`~bertology.pretraining.metrics.DivergenceMonitor`: above
``divergence_factor`` x max(ln V, the first loss) for ``divergence_window`` steps); the checkpoints
saved during that streak are set aside as ``diverged-checkpoint-<step>``, so the last one left is
the last good one. Under DDP the processes agree on the stop through an all-reduce (both checks
live in the shared loop, :func:`bertology.pretraining.loop.run_steps`).

Launched by ``bertology pretrain --config FILE``, or for DDP (gloo on CPU, nccl on GPU) by the same
command under torchrun: ``torchrun --nproc_per_node N -m bertology.pretraining --config FILE``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from bertology.checkpoints import latest_resumable, list_checkpoints, remove_partial_writes, run_folder_lock
from bertology.errors import CheckpointError
from bertology.pretraining.checkpoint import (
    plan_resume,
    prune_checkpoints,
    record_phase,
    record_replica_digests,
    restore_checkpoint,
    save_checkpoint,
    saved_log_window,
    write_run_record,
)
from bertology.pretraining.config import PretrainConfig
from bertology.pretraining.data import (
    Masker,
    SequenceSet,
    corpus_path,
    load_sequences,
    masked_batch,
    pad_width,
    run_tokenizer,
    stream_indices,
)
from bertology.pretraining.evaluation import evaluate as _evaluate
from bertology.pretraining.flops import peak_flops, pretraining_flops_per_token
from bertology.pretraining.loop import StepLoop, TrainingDivergedError, run_steps
from bertology.pretraining.masking import mix_seed
from bertology.pretraining.metrics import DivergenceMonitor, MetricsLog
from bertology.pretraining.objectives import PretrainingLoss, build_model, make_loss, pair_task, target_positions
from bertology.pretraining.optimization import make_optimizer, make_scheduler
from bertology.pretraining.runtime import Runtime, setup_runtime
from bertology.pretraining.text_corpus import corpus_hash

__all__ = ["run_pretraining", "TrainingDivergedError"]


def run_pretraining(config: PretrainConfig, *, resume: bool = True, new_phase: bool = False) -> Path:
    """Train according to ``config``; return the run directory.

    ``resume=True`` continues from the last checkpoint of ``config.run_name`` if there is one
    (the config must match the saved one except for logging/checkpoint fields); ``resume=False``
    refuses to overwrite a run that has checkpoints. A ``max_steps`` other than the run's is refused
    unless ``new_phase=True``: the run then continues from its last checkpoint under the linear
    schedule recomputed for the new ``max_steps`` (run.json ``phases`` records where and how the
    learning-rate multiplier changed), and no checkpoint of the earlier phases is pruned.

    Raises ``TrainingDivergedError`` at the first NaN/inf loss or gradient norm (nothing of that
    step is saved) and ``CheckpointError`` when a checkpoint cannot be written (disk full) or read.
    A second run into the same run folder waits for the first (:func:`run_folder_lock`).
    """
    with run_folder_lock(config.run_dir):
        return _run_pretraining(config, resume=resume, new_phase=new_phase)


def _run_pretraining(config: PretrainConfig, *, resume: bool, new_phase: bool) -> Path:
    """:func:`run_pretraining` under the run folder's lock."""
    cfg = config
    rt = setup_runtime(cfg)
    run_dir, source = cfg.run_dir, corpus_path(cfg)

    # resume plan: from scratch, or from the last checkpoint (same config and corpus content)
    checkpoint = latest_resumable(run_dir) if resume else None
    if not resume and list_checkpoints(run_dir):
        raise CheckpointError(f"{run_dir}: run already has checkpoints; resume it or choose another run_name")
    corpus_sha = corpus_hash(source)
    plan = plan_resume(cfg, checkpoint, new_phase=new_phase, corpus_sha=corpus_sha)
    if plan.step >= cfg.max_steps:
        rt.close()
        return run_dir  # already finished: nothing to do
    if rt.is_main:
        if resume and run_dir.is_dir():
            remove_partial_writes(run_dir)  # folders and files of a save that a kill interrupted
        run_dir.mkdir(parents=True, exist_ok=True)
    rt.barrier()

    # data: the tokenizer, the tokenised sequences (cached in the run folder), the masker
    tokenizer = run_tokenizer(cfg, run_dir, source, rt)
    train, heldout = load_sequences(cfg, run_dir, source, tokenizer, rt, corpus_sha)
    masker = Masker(cfg, tokenizer)

    # model, optimizer, schedule
    torch.manual_seed(cfg.seed)  # model initialisation draws from the global RNG (as in HF)
    model = build_model(cfg, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id).to(rt.device)
    optimizer = make_optimizer(model, cfg)
    scheduler = make_scheduler(optimizer, cfg)
    torch.manual_seed(mix_seed(cfg.seed, 5, rt.rank))  # dropout stream, distinct per process
    metrics = MetricsLog(run_dir / "metrics.jsonl", enabled=rt.is_main)

    # restore the checkpoint (and record a new schedule phase), or start the run record
    if plan.checkpoint is not None:
        start_step = restore_checkpoint(plan.checkpoint, model, optimizer, scheduler, cfg, rt)
        log_window = saved_log_window(plan.checkpoint)
        metrics.truncate_after(start_step)
        if plan.new_phase is not None and rt.is_main:
            record_phase(run_dir, plan.new_phase)
    else:
        start_step, log_window = 0, {}
        if rt.is_main:
            write_run_record(
                cfg,
                rt,
                source,
                corpus_sha,
                n_train_sequences=len(train),
                n_eval_sequences=len(heldout),
                n_parameters=sum(p.numel() for p in model.parameters()),
            )

    # the objective's loss module around the model (the teacher too, for distillation); DDP wraps it,
    # and torch.compile the training forward (``compile: true``; evaluation and checkpoints use ``model``)
    loss_module: torch.nn.Module = make_loss(cfg, model, rt.device)
    peak = peak_flops(rt.device)
    flops_per_token = pretraining_flops_per_token(cfg, len(tokenizer), loss_module) if peak else None
    target_index = isinstance(loss_module, PretrainingLoss)
    if rt.world_size > 1:
        loss_module = torch.nn.parallel.DistributedDataParallel(
            loss_module, device_ids=[rt.device.index] if rt.device.type == "cuda" else None
        )
    # (torch.compile of a module returns a module, an OptimizedModule; its stub says a callable)
    forward_module = cast(torch.nn.Module, torch.compile(loss_module)) if cfg.compile else loss_module

    _train(
        _Training(
            cfg,
            rt,
            tokenizer,
            train,
            heldout,
            masker,
            model,
            loss_module,
            forward_module,
            optimizer,
            scheduler,
            metrics,
            plan.phase_start,
            target_index,
            flops_per_token,
            peak,
            log_window,
        ),
        start_step,
    )

    if rt.world_size > 1:
        record_replica_digests(run_dir, model, rt)
    rt.close()
    return run_dir


@dataclass
class _Training:
    """What the loop works on, built once by :func:`run_pretraining`."""

    cfg: PretrainConfig
    rt: Runtime
    tokenizer: Any
    train: SequenceSet
    heldout: SequenceSet
    masker: Masker
    model: torch.nn.Module  # what checkpoints save
    loss_module: torch.nn.Module  # the objective's loss around ``model`` (DDP-wrapped under torchrun)
    forward_module: torch.nn.Module  # what the training forward calls: ``loss_module``, compiled for ``compile: true``
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    metrics: MetricsLog
    phase_start: int  # first step of the current schedule phase (checkpoints up to it stay)
    target_index: bool = False  # batches carry the MLM targets' positions (PretrainingLoss)
    flops_per_token: float | None = None  # model FLOPs of training on one token (for MFU)
    peak_flops: float | None = None  # of one device (None: no MFU)
    log_window: dict[str, float] = field(default_factory=dict)  # the loop's window in progress (checkpointed)


def _train(t: _Training, start_step: int) -> None:
    """Optimizer steps ``start_step + 1`` .. ``max_steps`` through the shared loop
    (:func:`bertology.pretraining.loop.run_steps`), each logged, evaluated and saved at the
    config's intervals (and at the end)."""
    cfg = t.cfg
    evaluate = None
    if len(t.heldout):

        def evaluate() -> dict[str, float]:
            return _evaluate(t.model, t.heldout, t.masker, cfg, t.rt, t.tokenizer.pad_token_id)

    run_steps(
        StepLoop(
            run_name=cfg.run_name,
            run_dir=cfg.run_dir,
            max_steps=cfg.max_steps,
            grad_accum_steps=cfg.grad_accum_steps,
            max_grad_norm=cfg.max_grad_norm,
            log_every=cfg.log_every,
            eval_every=cfg.eval_every,
            save_every=cfg.save_every,
            keep_steps=cfg.keep_steps,
            progress=cfg.progress,
            rt=t.rt,
            model=t.model,
            train_module=t.loss_module,
            optimizer=t.optimizer,
            scheduler=t.scheduler,
            metrics=t.metrics,
            micro_batch=lambda step, micro: _train_batch(t, step, micro),
            forward=lambda batch: _forward(t, batch),
            save=lambda step: _save(t, step),
            end_of_step=lambda step: _end_of_step(step),
            evaluate=evaluate,
            eval_key="eval_loss",
            divergence=DivergenceMonitor(len(t.tokenizer), cfg.divergence_factor, cfg.divergence_window),
            flops_per_token=t.flops_per_token,
            peak_flops=t.peak_flops,
            log_window=t.log_window,
        ),
        start_step,
    )


def _train_batch(t: _Training, step: int, micro: int) -> dict[str, torch.Tensor]:
    """This process's masked micro-batch ``micro`` of ``step``, on the CPU (the loop moves it to the
    device, possibly built ahead in another thread): its rows are positions of the endless shuffled
    stream (from ``stream_start``: steps, then micro-batches, then ranks), and its masks functions of
    ``(seed, row, epoch)``, so a resumed run draws exactly the batches an uninterrupted one would."""
    cfg, rt = t.cfg, t.rt
    position = (
        cfg.stream_start
        + (step * cfg.grad_accum_steps + micro) * cfg.batch_size * rt.world_size
        + rt.rank * cfg.batch_size
    )
    rows, epochs = stream_indices(len(t.train), cfg.seed, position, cfg.batch_size)
    batch = masked_batch(t.train, rows, epochs, t.masker, cfg, t.tokenizer.pad_token_id)
    width = batch_width(batch["input_ids"].shape[1], cfg, rt.device)
    batch = pad_width(batch, width, t.tokenizer.pad_token_id)
    if t.target_index:
        batch["target_index"] = target_positions(batch["labels"])
    return batch


def batch_width(width: int, cfg: PretrainConfig, device: torch.device) -> int:
    """The width a training batch of longest row ``width`` is padded to: ``max_seq_len`` under
    ``compile: true`` (one shape for every step), a multiple of 8 on CUDA, else ``width``."""
    if cfg.compile:
        return max(width, cfg.max_seq_len)
    if device.type == "cuda":
        return -(-width // 8) * 8
    return width


def _forward(t: _Training, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The objective's training loss of one batch (pair labels only for NSP/SOP), under autocast."""
    pair_labels = batch["pair_labels"] if pair_task(t.cfg.objective) else None
    extra = {"target_index": batch["target_index"]} if "target_index" in batch else {}
    if t.cfg.compile and "target_index" in batch:
        # the number of MLM targets changes from batch to batch: compiled with a dynamic size from
        # the first step, so torch.compile builds one graph, not a static one and then a dynamic one
        torch._dynamo.maybe_mark_dynamic(batch["target_index"], 0)
    with t.rt.autocast():
        loss, _, _ = t.forward_module(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], batch["labels"], pair_labels, **extra
        )
    return loss


def _save(t: _Training, step: int) -> None:
    """Write checkpoint ``step`` and prune the rolling ones (main process; the loop checks the weights)."""
    cfg, rt = t.cfg, t.rt
    sequences_per_step = cfg.batch_size * rt.world_size * cfg.grad_accum_steps
    state = {
        "step": step,
        "sequences_seen": step * sequences_per_step,
        "world_size": rt.world_size,
        "batch_size": cfg.batch_size,
        "grad_accum_steps": cfg.grad_accum_steps,
        "max_steps": cfg.max_steps,
        "log_window": dict(t.log_window),
    }
    save_checkpoint(cfg.run_dir, step, t.model, t.tokenizer, t.optimizer, t.scheduler, state)
    prune_checkpoints(cfg.run_dir, cfg, t.phase_start)


def _end_of_step(step: int) -> None:
    """Called once step ``step`` is done (logged, evaluated, saved as due). Does nothing: the
    kill-and-resume tests replace it with one that raises after step N, stopping the run there as a
    kill would (``tests/test_pretrain_trainer.py``, ``run_killed_after``)."""


if __name__ == "__main__":
    sys.exit(
        "bertology.pretraining.trainer is the library's training loop, not a command: run "
        "`bertology pretrain --config FILE`, or `torchrun --nproc_per_node N -m bertology.pretraining "
        "--config FILE` for DDP"
    )
