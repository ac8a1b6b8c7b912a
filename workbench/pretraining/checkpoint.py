"""Checkpoints and the run record of a pretraining run: saving, pruning and restoring checkpoints,
the plan of where a run resumes (and whether it may), its schedule phases, and ``run.json``.

A checkpoint ``run_dir/checkpoint-<step>/`` is an HF model directory (``config.json``,
``model.safetensors``, tokenizer files) plus the trainer state to resume from (optimizer,
scheduler, RNG, ``trainer_state.json``), written atomically. Resumption is exact: restored from a
checkpoint, a run ends with the weights of an uninterrupted one. Resuming with another
``max_steps`` changes the learning-rate schedule, so it is refused unless asked for as a new
*phase*, recorded in ``run.json``'s ``phases``; no checkpoint of an earlier phase is pruned.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bertology.atomic import write_json
from bertology.checkpoints import (
    atomic_dir,
    list_checkpoints,
    load_trainer_state,
    read_json_file,
    read_trainer_state,
    rng_state,
    save_trainer_state,
    set_rng_state,
)
from bertology.errors import CheckpointError, ConfigError
from bertology.pretraining.config import PretrainConfig
from bertology.pretraining.objectives import tied_parameter_names
from bertology.pretraining.optimization import linear_schedule
from bertology.pretraining.runtime import Runtime, run_machine

__all__ = [
    "RESUMABLE_CHANGES",
    "save_checkpoint",
    "prune_checkpoints",
    "set_aside_checkpoints",
    "ResumePlan",
    "plan_resume",
    "check_resumable",
    "phases",
    "restore_checkpoint",
    "write_run_record",
    "record_phase",
    "record_replica_digests",
    "weights_sha256",
]

# Fields that may change when resuming (they do not alter the optimisation trajectory).
# (max_steps is checked on its own: a change is a new phase of the schedule, see check_resumable.)
RESUMABLE_CHANGES = {
    "progress",
    "eval_every",
    "log_every",
    "save_every",
    "keep_steps",
    "keep_last",
    "device",
    "output_root",
    "num_threads",
    "max_steps",
    "divergence_factor",
    "divergence_window",
    "compile",
}
# What runs made before the post-BERT objectives existed had, by their absence, in their run.json.
_OBJECTIVE_FIELD_DEFAULTS = {
    "architecture": "bert",
    "embedding_size": None,
    "num_hidden_groups": 1,
    "generator_size": 0.25,
    "rtd_weight": 50.0,
    "sbo_weight": 1.0,
    "teacher": None,
    "distill_temperature": 2.0,
    "distill_kl_weight": 1.0,
    "distill_mlm_weight": 0.0,
    "distill_cosine_weight": 0.0,
    "distill_positions": "all",
    "distill_init": "random",
}


# --------------------------------------------------------------------------- saving and pruning


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, optimizer, scheduler, state: dict[str, Any]) -> Path:
    """Write ``run_dir/checkpoint-<step>`` atomically: the model and tokenizer in HF format, and the
    optimizer, scheduler, RNG and ``state`` (``trainer_state.json``) to resume from. A write that
    fails (disk full) leaves nothing behind and raises ``CheckpointError``."""
    from transformers.utils import logging as hf_logging

    final = run_dir / f"checkpoint-{step}"
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar per checkpoint
    try:
        with atomic_dir(final) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            save_trainer_state(tmp, optimizer=optimizer, scheduler=scheduler, state=state, rng=rng_state())
    except OSError as exc:  # disk full, quota, permissions: atomic_dir has removed the partial folder
        done = [s for s, _ in list_checkpoints(run_dir)]
        raise CheckpointError(
            f"{final}: cannot write the checkpoint ({exc.strerror or exc}); nothing of it was left behind, "
            f"the run keeps its checkpoints at steps {done}; free space and re-run to resume from step "
            f"{max(done) if done else 0}"
        ) from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return final


def prune_checkpoints(run_dir: Path, cfg: PretrainConfig, phase_start: int = 0) -> None:
    """Delete rolling checkpoints beyond ``keep_last``; ``keep_steps``, the final one and every
    checkpoint up to the start of the current phase (``phase_start``: kept by an earlier phase) stay."""
    rolling = [
        (s, p)
        for s, p in list_checkpoints(run_dir)
        if s not in cfg.keep_steps and s != cfg.max_steps and s > phase_start
    ]
    for _, p in rolling[: max(0, len(rolling) - max(cfg.keep_last, 1))]:
        shutil.rmtree(p, ignore_errors=True)


def set_aside_checkpoints(run_dir: Path, from_step: int) -> list[Path]:
    """Rename the checkpoints of steps >= ``from_step`` to ``diverged-checkpoint-<step>`` (weights
    of a diverged run: out of the registry and of resumption, kept for a look); returns the new paths."""
    moved = []
    for step, path in list_checkpoints(run_dir):
        if step >= from_step:
            target = run_dir / f"diverged-{path.name}"
            shutil.rmtree(target, ignore_errors=True)
            path.rename(target)
            moved.append(target)
    return moved


# --------------------------------------------------------------------------- the resume plan


def phases(info: dict[str, Any]) -> list[dict[str, Any]]:
    """The schedule phases of a run (``run.json``): ``[{"start_step", "max_steps"}, ...]``; one phase
    (from step 0, the config's max_steps) for a run that never changed its max_steps."""
    return info.get("phases") or [{"start_step": 0, "max_steps": info["config"]["max_steps"]}]


@dataclass(frozen=True)
class ResumePlan:
    """Where a run starts: from scratch (``checkpoint`` None, step 0) or from ``checkpoint``, whose
    trainer state is at ``step``. ``phase_start``: the first step of the current schedule phase
    (checkpoints up to it are never pruned); ``new_phase``: the record to add to run.json's
    ``phases`` when this resume starts a new phase."""

    checkpoint: Path | None = None
    step: int = 0
    phase_start: int = 0
    new_phase: dict[str, Any] | None = None


def plan_resume(
    cfg: PretrainConfig, checkpoint: Path | None, *, new_phase: bool, corpus_sha: str | None = None
) -> ResumePlan:
    """The plan for ``cfg`` resuming at ``checkpoint`` (its run's last resumable one, or None for a
    fresh start), after :func:`check_resumable` allowed it."""
    if checkpoint is None:
        return ResumePlan()
    step, record = check_resumable(cfg, cfg.run_dir, checkpoint, new_phase, corpus_sha)
    if record is not None:
        phase_start = record["start_step"]
    else:
        phase_start = int(phases(read_json_file(cfg.run_dir / "run.json", "run record"))[-1]["start_step"])
    return ResumePlan(checkpoint, step, phase_start, record)


def check_resumable(
    cfg: PretrainConfig, run_dir: Path, resume_from: Path, new_phase: bool, corpus_sha: str | None = None
) -> tuple[int, dict | None]:
    """Check that ``cfg`` may resume the run at ``resume_from``; ``(step, new phase record or None)``.

    The corpus must be the same content (``corpus_sha``, when given, against run.json's
    ``corpus_sha256``): the same path with edited text would otherwise continue, or count as
    finished, on other data than the run records."""
    info = read_json_file(run_dir / "run.json", "run record")
    if not isinstance(info, dict) or not isinstance(info.get("config"), dict):
        raise CheckpointError(f"{run_dir / 'run.json'}: broken run record (no 'config' object)")
    recorded = info.get("corpus_sha256")
    if corpus_sha is not None and recorded is not None and recorded != corpus_sha:
        raise ConfigError(
            f"{run_dir}: cannot resume: the corpus {info.get('corpus', cfg.corpus)} changed since the "
            f"run started (sha256 {recorded[:12]}... then, {corpus_sha[:12]}... now); "
            "train under another run_name"
        )
    saved = info["config"]
    saved.setdefault("random_token_pool", "non_special")  # runs made before the field drew from that pool
    saved = {**_OBJECTIVE_FIELD_DEFAULTS, **saved}  # runs made before the post-BERT objectives existed
    changed = sorted(k for k, v in cfg.to_dict().items() if k not in RESUMABLE_CHANGES and saved.get(k) != v)
    if changed:
        raise ConfigError(f"{run_dir}: cannot resume, config field(s) differ from run.json: {', '.join(changed)}")
    step = int(read_trainer_state(resume_from)["step"])
    current = int(phases(info)[-1]["max_steps"])
    if cfg.max_steps == current:
        return step, None
    if not new_phase:
        raise ConfigError(
            f"{run_dir}: cannot resume with max_steps {cfg.max_steps}: the run's schedule ends at {current}, and "
            f"another max_steps changes the learning rate (linear decay to 0 at max_steps) from step {step} on. "
            f"Keep max_steps {current}, or continue as a new phase (new_phase=True, CLI --new-phase): the "
            f"schedule is then recomputed for max_steps {cfg.max_steps}, recorded in run.json, and every "
            f"checkpoint kept so far stays"
        )
    if cfg.max_steps <= step:
        raise ConfigError(
            f"{run_dir}: a new phase must end after the last checkpoint (step {step}); "
            f"max_steps {cfg.max_steps} does not"
        )
    old, new = linear_schedule(cfg.warmup_steps, current), linear_schedule(cfg.warmup_steps, cfg.max_steps)
    return step, {
        "start_step": step,
        "max_steps": cfg.max_steps,
        "previous_max_steps": current,
        "lr_multiplier_before": round(old(step), 6),
        "lr_multiplier_after": round(new(step), 6),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


# --------------------------------------------------------------------------- restoring


def _load_weights(checkpoint: Path, model: torch.nn.Module, device: torch.device) -> None:
    """``checkpoint/model.safetensors`` into ``model``; only tied names (saved once) may be missing."""
    from safetensors.torch import load_file

    try:
        weights = load_file(str(checkpoint / "model.safetensors"), device=str(device))
    except Exception as exc:
        raise CheckpointError(
            f"{checkpoint / 'model.safetensors'}: corrupt checkpoint weights ({exc}); "
            "delete this checkpoint folder to resume from the one before"
        ) from exc
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = tied_parameter_names(model)  # saved once, under the name they are tied to
    if unexpected or any(k not in tied for k in missing):
        raise CheckpointError(
            f"{checkpoint}: weights do not match the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )


def saved_log_window(checkpoint: Path) -> dict[str, float]:
    """The loop's log window in progress when ``checkpoint`` was saved (``loss`` sum and ``steps``);
    empty for a checkpoint written before it was kept (its run's first window then starts afresh)."""
    window = read_trainer_state(checkpoint).get("log_window")
    if not isinstance(window, dict):
        return {}
    return {"loss": float(window.get("loss", 0.0)), "steps": float(window.get("steps", 0))}


def restore_checkpoint(
    checkpoint: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LambdaLR,
    cfg: PretrainConfig,
    rt: Runtime,
) -> int:
    """Load weights, optimizer, scheduler and (same number of processes only) RNG state of
    ``checkpoint`` into the freshly built objects; return its step. The schedule continues as the
    config's (:func:`~bertology.pretraining.optimization.linear_schedule` to ``cfg.max_steps``): a new
    phase's learning rate applies from this step on."""
    _load_weights(checkpoint, model, rt.device)
    opt_state, sched_state, state, rng = load_trainer_state(checkpoint)
    try:
        optimizer.load_state_dict(opt_state)
        scheduler.load_state_dict(sched_state)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise CheckpointError(
            f"{checkpoint}: optimizer/scheduler state does not fit the model ({exc}); "
            "delete this checkpoint folder to resume from the one before"
        ) from exc
    scheduler.lr_lambdas = [linear_schedule(cfg.warmup_steps, cfg.max_steps)] * len(optimizer.param_groups)
    # the saved learning rate is the old schedule's; a new phase's schedule applies from this step on
    for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
        group["lr"] = base * factor(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    if state.get("world_size", 1) == rt.world_size:
        set_rng_state(rng)
    return int(state["step"])


# --------------------------------------------------------------------------- run.json


def write_run_record(
    cfg: PretrainConfig,
    rt: Runtime,
    source: Path,
    corpus_sha: str,
    n_train_sequences: int,
    n_eval_sequences: int,
    n_parameters: int,
) -> None:
    """Start ``run.json``: the config, seed, corpus (path and content hash), world size and sizes."""
    write_json(
        cfg.run_dir / "run.json",
        {
            "config": cfg.to_dict(),
            "seed": cfg.seed,
            "corpus": str(source),
            "corpus_sha256": corpus_sha,
            "heldout_corpus": cfg.heldout_corpus,
            "world_size": rt.world_size,
            "n_train_sequences": n_train_sequences,
            "n_eval_sequences": n_eval_sequences,
            "n_parameters": n_parameters,
            "objective": cfg.objective,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "machine": run_machine(rt),
        },
    )


def record_phase(run_dir: Path, record: dict[str, Any]) -> None:
    """Append a new schedule phase (:func:`check_resumable`'s record) to ``run.json``'s ``phases``."""
    info = read_json_file(run_dir / "run.json", "run record")
    info["phases"] = phases(info) + [record]
    write_json(run_dir / "run.json", info)


def record_divergence(run_dir: Path, record: dict[str, Any]) -> None:
    """Keep why and where a run diverged in ``run.json`` (``diverged``: step, reason, learning rate,
    last good checkpoint, checkpoints set aside), so the run's record -- and what reads it: ``bertology
    models``, the emergence study, the dashboard -- says so, not only the exit message. A run folder
    without ``run.json`` gets one holding just this record."""
    file = run_dir / "run.json"
    info = read_json_file(file, "run record") if file.is_file() else {}
    info["diverged"] = record
    write_json(file, info)


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 hex over the model's state dict (names and raw bytes, in name order)."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def record_replica_digests(run_dir: Path, model: torch.nn.Module, rt: Runtime) -> None:
    """Under DDP: every process's :func:`weights_sha256` of its final replica, gathered into
    ``run.json`` as ``final_weights_sha256_per_rank`` (equal when DDP kept the replicas identical)."""
    digests: list[Any] = [None] * rt.world_size
    dist.all_gather_object(digests, weights_sha256(model))
    if rt.is_main:
        info = json.loads((run_dir / "run.json").read_text())
        info["final_weights_sha256_per_rank"] = digests
        write_json(run_dir / "run.json", info)
    rt.barrier()
