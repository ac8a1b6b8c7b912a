"""The fine-tuning run: :func:`run_finetuning` trains a classifier on a pretrained encoder, or resumes it.

It reads top to bottom: task and splits, pretrained model and tokenizer, mode (which parameters
train), optimiser and schedule, restore; then the optimizer steps run in the loop pretraining uses
(:func:`bertology.pretraining.loop.run_steps`: accumulation, clipping, divergence stop, DDP,
progress bar), with a dev evaluation and a checkpoint once per epoch; last, the checkpoint best on
dev is scored on test and becomes the run's model directory.

Run layout (``paths.models_dir() / <run_name>``)::

    run.json                     config, task (splits, labels, source), model, schedule; at the end "result"
    metrics.jsonl                loss, lr, tokens_per_s per log window; dev_loss, dev_accuracy per evaluation
    checkpoint-<step>/           during the run: HF model + tokenizer + trainer state (resumable);
                                 at the end only the best on dev is kept, with README.md (model card)
    test_predictions.json        at the end: per test example its id, document, correct and scored items

The finished model is a registry model (``<run>@<step>``, or ``<run>``): every analysis of the
workbench loads its encoder. Resumption is exact (same weights as an uninterrupted run): the data
order is a function of (seed, position) and the checkpoint holds optimizer, scheduler and RNG state.
"""

from __future__ import annotations

import hashlib
import math
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist

from bertology import models
from bertology.atomic import write_json, write_text
from bertology.checkpoints import (
    latest_resumable,
    list_checkpoints,
    read_json_file,
    remove_partial_writes,
    run_folder_lock,
)
from bertology.errors import CheckpointError, ConfigError
from bertology.finetuning.config import RESUMABLE_CHANGES, FinetuneConfig
from bertology.finetuning.data import IGNORE_INDEX, EncodedSplit, collate, encode_split
from bertology.finetuning.heads import load_classifier, load_tokenizer
from bertology.finetuning.masks import apply_weight_masks, load_masks, weight_sparsity
from bertology.finetuning.modes import apply_mode
from bertology.finetuning.tasks import Example, FinetuneTask, build_task
from bertology.hub import snapshot_commit
from bertology.pretraining.checkpoint import (
    record_replica_digests,
    restore_checkpoint,
    save_checkpoint,
    saved_log_window,
)
from bertology.pretraining.data import stream_indices
from bertology.pretraining.flops import classifier_flops_per_token, peak_flops
from bertology.pretraining.loop import StepLoop, run_steps
from bertology.pretraining.masking import mix_seed
from bertology.pretraining.metrics import MetricsLog, read_metric_events
from bertology.pretraining.optimization import linear_schedule, make_optimizer
from bertology.pretraining.runtime import Runtime, run_machine, setup_runtime
from bertology.uncertainty import ratio_bootstrap

__all__ = [
    "run_finetuning",
    "Schedule",
    "evaluate_split",
    "read_test_predictions",
    "TEST_PREDICTIONS",
    "config_differences",
]


@dataclass(frozen=True)
class Schedule:
    """The step counts a run derives from its config and training-set size (the names
    ``restore_checkpoint`` reads): ``steps_per_epoch``, ``max_steps``, ``warmup_steps``, ``eval_every``."""

    steps_per_epoch: int
    max_steps: int
    warmup_steps: int
    eval_every: int


def make_schedule(cfg: FinetuneConfig, n_train: int, world_size: int) -> Schedule:
    """``ceil(n_train / examples per step)`` steps an epoch; ``epochs`` of them unless ``max_steps``."""
    per_step = cfg.batch_size * cfg.grad_accum_steps * world_size
    steps_per_epoch = max(1, math.ceil(n_train / per_step))
    max_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    return Schedule(
        steps_per_epoch, max_steps, int(round(cfg.warmup_fraction * max_steps)), cfg.eval_every or steps_per_epoch
    )


@dataclass
class _Run:
    """What the loop's functions work on."""

    cfg: FinetuneConfig
    rt: Runtime
    task: FinetuneTask
    schedule: Schedule
    tokenizer: Any
    train: EncodedSplit
    dev: EncodedSplit
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    log_window: dict[str, float] = field(default_factory=dict)  # the loop's window in progress (checkpointed)


def run_finetuning(config: FinetuneConfig, *, resume: bool = True) -> Path:
    """Fine-tune according to ``config``; return the run directory (see the module docstring).

    ``resume=True`` continues from the last checkpoint of ``config.run_name`` (the config must
    match run.json's except for logging/runtime fields); a finished run returns at once.
    Raises ``ConfigError`` / ``CorpusError`` / ``ModelError`` for bad input (naming the field, file
    or model), ``TrainingDivergedError`` on a non-finite loss, ``CheckpointError`` for a broken run folder.
    A second fine-tune into the same run folder waits for the first (:func:`run_folder_lock`).
    """
    models.resolve(config.model)  # a name that is no model: one line before any folder is made
    with run_folder_lock(config.run_dir):
        return _run_finetuning(config, resume=resume)


def _run_finetuning(config: FinetuneConfig, *, resume: bool) -> Path:
    """:func:`run_finetuning` under the run folder's lock."""
    cfg = config
    run_dir = cfg.run_dir
    if (run_dir / "run.json").is_file() and "result" in read_json_file(run_dir / "run.json", "run record"):
        if resume:
            _check_same_config(cfg, run_dir)
            return run_dir  # finished
        raise CheckpointError(f"{run_dir}: the run is finished; choose another run_name")
    rt = setup_runtime(cfg)

    # task, pretrained model, tokenizer, encoded splits
    inputs = _prepare_inputs(cfg, rt)
    # resume plan
    checkpoint = _plan_resume(cfg, run_dir, rt, resume)
    # model (head initialised from the seed), mode, optimizer, schedule
    model, sizes = _build_model(cfg, inputs, rt)
    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, linear_schedule(inputs.schedule.warmup_steps, inputs.schedule.max_steps)
    )
    torch.manual_seed(mix_seed(cfg.seed, 5, rt.rank))  # dropout stream, distinct per process
    metrics = MetricsLog(run_dir / "metrics.jsonl", enabled=rt.is_main)
    # restore the checkpoint, or record the new run
    start_step, log_window = _restore_or_record(
        cfg, rt, inputs, checkpoint, model, optimizer, scheduler, metrics, sizes
    )
    run = _Run(
        cfg,
        rt,
        inputs.task,
        inputs.schedule,
        inputs.tokenizer,
        inputs.train,
        inputs.dev,
        model,
        optimizer,
        scheduler,
        log_window,
    )
    # the optimizer steps, with a dev evaluation and a checkpoint every eval_every steps
    _train(run, metrics, start_step)
    # the best checkpoint on dev, scored on test, becomes the run's model
    if rt.world_size > 1:
        record_replica_digests(run_dir, model, rt)
    if rt.is_main:
        _finish(run)
    rt.barrier()
    rt.close()
    return run_dir


@dataclass
class _Inputs:
    """What a run reads before it builds its model: the task, the pretrained model's name and folder,
    its tokenizer, the encoded train and dev splits and the schedule they give."""

    task: FinetuneTask
    model_name: str
    model_path: Path
    tokenizer: Any
    train: EncodedSplit
    dev: EncodedSplit
    schedule: Schedule


def _prepare_inputs(cfg: FinetuneConfig, rt: Runtime) -> _Inputs:
    """Resolve the pretrained model (first: before the task file is read), build the task, load the
    model's tokenizer, encode train and dev."""
    model_name, model_path = models.resolve(cfg.model)  # a hub name: its snapshot folder (bertology.hub)
    task = build_task(
        cfg.task,
        corpus=cfg.corpus,
        label_column=cfg.label_column,
        max_examples=cfg.max_examples,
        dev_fraction=cfg.dev_fraction,
        test_fraction=cfg.test_fraction,
        seed=cfg.seed,
    )
    tokenizer = load_tokenizer(model_path)
    train, dev = (encode_split(task.split(s), task, tokenizer, cfg.max_seq_len) for s in ("train", "dev"))
    schedule = make_schedule(cfg, len(train), rt.world_size)
    return _Inputs(task, model_name, model_path, tokenizer, train, dev, schedule)


def _plan_resume(cfg: FinetuneConfig, run_dir: Path, rt: Runtime, resume: bool) -> Path | None:
    """The checkpoint to resume from (None: a fresh run); the run folder made, its partial writes removed.

    ``CheckpointError`` when ``resume=False`` finds checkpoints; ``ConfigError`` when a resumed
    run's config changes the training."""
    checkpoint = latest_resumable(run_dir) if resume else None
    if not resume and list_checkpoints(run_dir):
        raise CheckpointError(f"{run_dir}: run already has checkpoints; resume it or choose another run_name")
    if checkpoint is not None:
        _check_same_config(cfg, run_dir)
    if rt.is_main:
        if run_dir.is_dir():
            remove_partial_writes(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
    rt.barrier()
    return checkpoint


def _build_model(cfg: FinetuneConfig, inputs: _Inputs, rt: Runtime) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The classifier (head initialised from ``cfg.seed``) in its mode, masked when ``weight_mask`` is
    set, on the run's device; and the sizes run.json records (trainable parameters, the mask)."""
    torch.manual_seed(cfg.seed)
    model = load_classifier(inputs.model_path, inputs.task.kind, inputs.task.labels)
    sizes: dict[str, Any] = apply_mode(model, cfg.mode, cfg.adapter_size)  # plus the weight mask's record
    if cfg.weight_mask:  # a sparse sub-network: removed weights zeroed, their gradients kept at zero
        masks = load_masks(Path(cfg.weight_mask), model)
        apply_weight_masks(model, masks)
        sizes["weight_mask"] = {
            "path": str(cfg.weight_mask),
            "sparsity": weight_sparsity(model, masks),
            "sha256": hashlib.sha256(Path(cfg.weight_mask).read_bytes()).hexdigest(),
            "matrices": len(masks),
            "pooler": any("pooler" in name for name in masks),
        }
    model.to(rt.device)
    return model, sizes


def _restore_or_record(
    cfg: FinetuneConfig,
    rt: Runtime,
    inputs: _Inputs,
    checkpoint: Path | None,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
    metrics: MetricsLog,
    sizes: dict[str, Any],
) -> tuple[int, dict[str, float]]:
    """Restore ``checkpoint`` (weights, optimizer, scheduler, RNG; metrics after it dropped), or write
    a fresh run's run.json; return the step to start at and the log window in progress."""
    if checkpoint is not None:
        start_step = restore_checkpoint(checkpoint, model, optimizer, scheduler, inputs.schedule, rt)  # type: ignore[arg-type]
        log_window = saved_log_window(checkpoint)
        metrics.truncate_after(start_step)
        return start_step, log_window
    metrics.truncate_after(0)  # events of an attempt killed before its first checkpoint
    if rt.is_main:
        write_json(
            cfg.run_dir / "run.json",
            {
                "kind": "finetune",
                "config": cfg.to_dict(),
                "seed": cfg.seed,
                "task": inputs.task.summary(),
                "model": {
                    "name": inputs.model_name,
                    "path": str(inputs.model_path),
                    "revision": snapshot_commit(inputs.model_path),
                },
                "schedule": inputs.schedule.__dict__,
                "world_size": rt.world_size,
                "words_truncated": {"train": inputs.train.words_truncated, "dev": inputs.dev.words_truncated},
                **sizes,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                "machine": run_machine(rt),
            },
        )
    return 0, {}


def _train(run: _Run, metrics: MetricsLog, start_step: int) -> None:
    """Run the optimizer steps from ``start_step`` in pretraining's loop (DDP when several processes,
    ``torch.compile`` of the training forward when ``compile: true``)."""
    cfg, rt, model = run.cfg, run.rt, run.model
    train_module: torch.nn.Module = model
    if rt.world_size > 1:
        train_module = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[rt.device.index] if rt.device.type == "cuda" else None
        )
    # ``compile: true``: torch.compile the training forward only (dev, test and checkpoints use ``model``)
    # (torch.compile of a module returns a module, an OptimizedModule; its stub says a callable)
    forward_module = cast(torch.nn.Module, torch.compile(train_module)) if cfg.compile else train_module
    peak = peak_flops(rt.device)
    run_steps(
        StepLoop(
            run_name=cfg.run_name,
            run_dir=cfg.run_dir,
            max_steps=run.schedule.max_steps,
            grad_accum_steps=cfg.grad_accum_steps,
            max_grad_norm=cfg.max_grad_norm,
            log_every=cfg.log_every,
            eval_every=run.schedule.eval_every,
            save_every=run.schedule.eval_every,
            keep_steps=(),
            progress=cfg.progress,
            rt=rt,
            model=model,
            train_module=train_module,
            optimizer=run.optimizer,
            scheduler=run.scheduler,
            metrics=metrics,
            micro_batch=lambda step, micro: _micro_batch(run, step, micro),
            forward=lambda batch: _loss(forward_module, batch, rt),
            save=lambda step: _save(run, step),
            end_of_step=lambda step: _end_of_step(step),
            evaluate=lambda: _dev_scores(run),
            eval_key="dev_accuracy",
            peak_flops=peak,
            flops_per_token=classifier_flops_per_token(model, cfg.max_seq_len) if peak else None,
            log_window=run.log_window,
        ),
        start_step,
    )


def config_differences(cfg: FinetuneConfig, run_dir: Path, *, ignore: frozenset[str] = frozenset()) -> list[str]:
    """The fields of ``cfg`` that the run in ``run_dir`` recorded differently in its run.json, sorted;
    the runtime fields a resume may change (``RESUMABLE_CHANGES``) and ``ignore`` aside.
    ``CheckpointError`` for a run.json without a config."""
    info = read_json_file(run_dir / "run.json", "run record")
    if not isinstance(info, dict) or not isinstance(info.get("config"), dict):
        raise CheckpointError(f"{run_dir / 'run.json'}: broken run record (no 'config' object)")
    skipped = RESUMABLE_CHANGES | ignore
    return sorted(k for k, v in cfg.to_dict().items() if k not in skipped and info["config"].get(k) != v)


def _check_same_config(cfg: FinetuneConfig, run_dir: Path) -> None:
    """Refuse to resume ``run_dir`` with a config that changes the training (``ConfigError`` naming the fields)."""
    changed = config_differences(cfg, run_dir)
    if changed:
        raise ConfigError(f"{run_dir}: cannot resume, config field(s) differ from run.json: {', '.join(changed)}")


# --------------------------------------------------------------------------- the loop's pieces


def _micro_batch(run: _Run, step: int, micro: int) -> dict[str, torch.Tensor]:
    """This process's micro-batch ``micro`` of ``step``, on the CPU (the loop moves it to the
    device): positions of the endless shuffled stream of training examples (steps, micro-batches,
    ranks), so a resumed run draws the same batches."""
    cfg, rt = run.cfg, run.rt
    position = (step * cfg.grad_accum_steps + micro) * cfg.batch_size * rt.world_size + rt.rank * cfg.batch_size
    rows, _ = stream_indices(len(run.train), cfg.seed, position, cfg.batch_size)
    return collate(run.train, rows, run.tokenizer.pad_token_id)


def _loss(module: torch.nn.Module, batch: dict[str, torch.Tensor], rt: Runtime) -> torch.Tensor:
    """The classifier's cross-entropy on one batch (HF's ``labels=`` path), under autocast."""
    with rt.autocast():
        return module(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
            labels=batch["labels"],
        ).loss


def evaluate_split(
    model: torch.nn.Module,
    split: EncodedSplit,
    rt: Runtime,
    pad_id: int,
    *,
    batch_size: int = 64,
    rows: list[int] | None = None,
) -> tuple[float, np.ndarray, np.ndarray]:
    """``(loss sum, correct [examples], scored [examples])`` of ``model`` on ``rows`` of ``split``
    (all by default): per example, labelled words (token tasks) or 1 (sentence tasks), and how many
    of them the argmax got right."""
    rows = list(range(len(split))) if rows is None else rows
    correct, scored, loss_sum = np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64), 0.0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            batch = {k: v.to(rt.device) for k, v in collate(split, chunk, pad_id).items()}
            with rt.autocast():
                logits = model(
                    input_ids=batch["input_ids"],
                    attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"],
                ).logits.float()
            labels = batch["labels"]
            loss_sum += float(
                torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
                )
            )
            hit = (logits.argmax(-1) == labels) & (labels != IGNORE_INDEX)
            valid = labels != IGNORE_INDEX
            if labels.ndim == 2:
                hit, valid = hit.sum(1), valid.sum(1)
            correct[start : start + len(chunk)] = hit.long().cpu().numpy()
            scored[start : start + len(chunk)] = valid.long().cpu().numpy()
    model.train(was_training)
    return loss_sum, correct, scored


def _dev_scores(run: _Run) -> dict[str, float]:
    """Dev loss (per scored item) and accuracy; rows sharded over processes, sums all-reduced."""
    rt = run.rt
    rows = list(range(rt.rank, len(run.dev), rt.world_size))
    loss_sum, correct, scored = evaluate_split(run.model, run.dev, rt, run.tokenizer.pad_token_id, rows=rows)
    sums = torch.tensor([loss_sum, float(correct.sum()), float(scored.sum())], dtype=torch.float64)
    if rt.world_size > 1:
        sums = sums.to(rt.device)
        dist.all_reduce(sums)
        sums = sums.cpu()
    n = max(float(sums[2]), 1.0)
    return {"dev_loss": float(sums[0]) / n, "dev_accuracy": float(sums[1]) / n}


def _save(run: _Run, step: int) -> None:
    """Write checkpoint ``step`` (main process) and prune: the final, the best on dev so far and the
    last ``keep_last`` stay."""
    cfg, rt = run.cfg, run.rt
    state = {
        "step": step,
        "max_steps": run.schedule.max_steps,
        "world_size": rt.world_size,
        "batch_size": cfg.batch_size,
        "grad_accum_steps": cfg.grad_accum_steps,
        "examples_seen": step * cfg.batch_size * cfg.grad_accum_steps * rt.world_size,
        "log_window": dict(run.log_window),
    }
    save_checkpoint(cfg.run_dir, step, run.model, run.tokenizer, run.optimizer, run.scheduler, state)
    best = best_step(cfg.run_dir)
    rolling = [(s, p) for s, p in list_checkpoints(cfg.run_dir) if s not in (best, run.schedule.max_steps)]
    for _, path in rolling[: max(0, len(rolling) - max(cfg.keep_last, 1))]:
        shutil.rmtree(path, ignore_errors=True)


def best_step(run_dir: Path) -> int | None:
    """The step with the highest dev accuracy in ``metrics.jsonl`` (the earliest of ties; lowest dev
    loss breaks them first); None before the first evaluation."""
    path = run_dir / "metrics.jsonl"
    events = [e for e in read_metric_events(path) if "dev_accuracy" in e] if path.is_file() else []
    if not events:
        return None
    return min(events, key=lambda e: (-e["dev_accuracy"], e["dev_loss"], e["step"]))["step"]


def _end_of_step(step: int) -> None:
    """Called once step ``step`` is done. Does nothing: the kill-and-resume tests replace it with one
    that raises after step N, stopping the run there as a kill would."""


# --------------------------------------------------------------------------- the result


def _finish(run: _Run) -> None:
    """Score the best-on-dev checkpoint on test, keep only it (as a plain model directory with a
    model card), and record the result in run.json."""
    from safetensors.torch import load_file

    cfg, rt, run_dir = run.cfg, run.rt, run.cfg.run_dir
    step = best_step(run_dir) or run.schedule.max_steps
    best_dir = run_dir / f"checkpoint-{step}"
    run.model.load_state_dict(load_file(str(best_dir / "model.safetensors"), device=str(rt.device)), strict=False)
    test = encode_split(run.task.test, run.task, run.tokenizer, cfg.max_seq_len)
    loss_sum, correct, scored = evaluate_split(run.model, test, rt, run.tokenizer.pad_token_id)
    interval = ratio_bootstrap(correct, scored, seed=cfg.seed)  # resamples examples (sentences)
    result = {
        "best_step": step,
        "test_accuracy": interval.estimate,
        "test_low": interval.low,
        "test_high": interval.high,
        "test_items": int(scored.sum()),
        "test_examples": len(test),
        "test_loss": loss_sum / max(int(scored.sum()), 1),
        "test_words_truncated": test.words_truncated,
        "dev_accuracy": _metric_at(run_dir, step, "dev_accuracy"),
    }
    for s, path in list_checkpoints(run_dir):
        if s != step:
            shutil.rmtree(path, ignore_errors=True)
    for name in ("optimizer.pt", "scheduler.pt", "rng.safetensors"):
        (best_dir / name).unlink(missing_ok=True)
    write_test_predictions(run_dir, run.task.test, correct, scored, step)
    info = read_json_file(run_dir / "run.json", "run record")
    info["result"] = result
    write_text(best_dir / "README.md", model_card(info))
    write_json(run_dir / "run.json", info)


TEST_PREDICTIONS = "test_predictions.json"


def write_test_predictions(
    run_dir: Path, test: list[Example], correct: np.ndarray, scored: np.ndarray, step: int
) -> None:
    """``<run>/test_predictions.json`` (atomic): per test example (in the split's order) its id
    (``test-<i>``), document, ``correct`` (right words, or 1/0 for a sentence) and ``scored``
    (labelled words, or 1) -- what a paired comparison of two runs on the same test examples reads
    (:func:`read_test_predictions`)."""
    write_json(
        run_dir / TEST_PREDICTIONS,
        {
            "step": step,
            "example": [f"test-{i}" for i in range(len(correct))],
            "document": [e.document for e in test],
            "correct": [int(c) for c in correct],
            "scored": [int(n) for n in scored],
        },
    )


def read_test_predictions(run_dir: Path) -> dict[str, list]:
    """The per-example test correctness a finished run saved (:func:`write_test_predictions`);
    ``CheckpointError`` naming the file when it is missing or broken (a run finished before it existed)."""
    path = Path(run_dir) / TEST_PREDICTIONS
    if not path.is_file():
        raise CheckpointError(
            f"{path}: no per-example test predictions (the run finished before they were "
            "saved, or did not finish); re-run it under a new run_name"
        )
    data = read_json_file(path, "test predictions")
    keys = ("example", "document", "correct", "scored")
    if (
        not isinstance(data, dict)
        or any(not isinstance(data.get(k), list) for k in keys)
        or len({len(data[k]) for k in keys}) != 1
    ):
        raise CheckpointError(f"{path}: broken test predictions (needs equal-length lists {', '.join(keys)})")
    return data


def _metric_at(run_dir: Path, step: int, metric: str) -> float | None:
    values = [e[metric] for e in read_metric_events(run_dir / "metrics.jsonl") if e["step"] == step and metric in e]
    return values[-1] if values else None


def recipe_steps(schedule: dict[str, Any], epochs: int) -> str:
    """The model card's step count: ``"45 steps (3 epochs of 15 steps)"``, or, where ``max_steps``
    stopped the run before its epochs ended, ``"20 steps (1.33 epochs of 15 steps: stopped by
    max_steps before the 3 epochs set)"``."""
    steps, per_epoch = int(schedule["max_steps"]), int(schedule["steps_per_epoch"])
    if steps == epochs * per_epoch:
        return f"{steps} steps ({epochs} epochs of {per_epoch} steps)"
    return (
        f"{steps} steps ({steps / per_epoch:.3g} epochs of {per_epoch} steps: stopped by max_steps "
        f"{'before' if steps < epochs * per_epoch else 'after'} the {epochs} epochs set)"
    )


def masked_matrices(weight_mask: dict) -> str:
    """What a model card says a weight mask covers: the number of masked weight matrices and whether
    the pooler is among them (Chen et al.'s schedule prunes it; runs before this record: "the
    masked weight matrices")."""
    n = weight_mask.get("matrices")
    if not isinstance(n, int):
        return "the masked weight matrices"
    return f"the {n} masked weight matrices ({'the encoder and the pooler' if weight_mask.get('pooler') else 'the encoder'})"


def model_card(info: dict[str, Any]) -> str:
    """The README.md of a finished fine-tune: YAML front matter, then what was trained and scored."""
    cfg, task, result = info["config"], info["task"], info["result"]
    return "\n".join(
        [
            "---",
            f"base_model: {info['model']['name']}",
            "library_name: transformers",
            f"pipeline_tag: {'token-classification' if task['kind'] == 'token' else 'text-classification'}",
            f"tags: [bertology-workbench, fine-tuned, {cfg['mode']}]",
            "model-index:",
            f"- name: {cfg['run_name']}",
            "  results:",
            f"  - task: {{type: {task['kind']}-classification, name: {task['name']}}}",
            "    metrics:",
            f"    - {{type: accuracy, value: {result['test_accuracy']:.4f}, split: test}}",
            "---",
            "",
            f"# {cfg['run_name']}",
            "",
            f"`{info['model']['name']}` fine-tuned by the BERTology workbench (`bertology finetune`) on **{task['name']}** "
            f"({task['kind']} classification, {len(task['labels'])} labels; labels {task['source']}).",
            "",
            f"- mode: `{cfg['mode']}` ({info['trainable_parameters']:,} of {info['total_parameters']:,} parameters "
            f"trained{', ' + str(info['adapters']) + ' adapters of width ' + str(cfg['adapter_size']) if info['adapters'] else ''})"
            + (
                f"; weight mask `{Path(info['weight_mask']['path']).name}`: {info['weight_mask']['sparsity']:.1%} of "
                + masked_matrices(info["weight_mask"])
                + " removed and kept at 0"
                if info.get("weight_mask")
                else ""
            ),
            f"- recipe: {recipe_steps(info['schedule'], cfg['epochs'])}, batch {cfg['batch_size']} x "
            f"{cfg['grad_accum_steps']} x "
            f"{info['world_size']} processes, AdamW lr {cfg['learning_rate']:g}, warm-up {info['schedule']['warmup_steps']} "
            f"steps then linear decay, seed {cfg['seed']}",
            f"- splits by document: {task['n_train']} / {task['n_dev']} / {task['n_test']} examples "
            f"({task['n_train_documents']} / {task['n_dev_documents']} / {task['n_test_documents']} documents)",
            f"- selected on dev: step {result['best_step']} (dev accuracy {result['dev_accuracy']:.4f})",
            f"- **test accuracy {result['test_accuracy']:.4f}** [{result['test_low']:.4f}, {result['test_high']:.4f}] "
            f"(95% bootstrap over test examples; {result['test_items']} scored items)",
            "",
            'The registry loads the encoder of this folder (`bertology models`, `load_model("<run>")`); '
            "the classifier weights are beside it.",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(
        "bertology.finetuning.trainer is the library's fine-tuning run, not a command: run "
        "`bertology finetune ...`, or `torchrun --nproc_per_node N -m bertology.finetuning ...` for DDP"
    )
