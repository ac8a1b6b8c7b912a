"""Training checkpoints: atomic directory writes, listing, and trainer-state save/load.

A checkpoint is ``<run_dir>/checkpoint-<step>/`` holding a standard HF model
(``config.json`` + ``model.safetensors``), the tokenizer files, and the trainer state:
``optimizer.pt`` / ``scheduler.pt`` (``torch.save``, loaded with ``weights_only=True``),
``rng.safetensors`` (uint8 RNG state tensors) and ``trainer_state.json`` (step, data position).
The directory is written under a temporary name and renamed into place, so a reader (or a
resumed run) never sees a half-written checkpoint; :func:`remove_partial_writes` clears the
temporary folders and files a killed write leaves behind (a resumed run calls it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from bertology import atomic
from bertology.errors import CheckpointError

_CKPT = re.compile(r"^checkpoint-(\d+)$")
STATE_FILE = "trainer_state.json"


# Names that atomic_dir / bertology.atomic.atomic_path give their temporary entries: ".<name>.<random>.tmp"
# (and ".<name>.<random>.old" for a replaced directory on its way out).
@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``path``; on success it replaces ``path``.

    On error the temporary directory is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():  # os.replace cannot overwrite a non-empty directory: swap via a trash name
            trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, trash / "old")
            os.replace(tmp, path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def run_folder_lock(run_dir: str | os.PathLike) -> Any:
    """The lock a trainer (fine-tuning, pretraining) holds on its run folder for the whole run, as
    studies hold theirs (:func:`bertology.atomic.locked_output_folder`): a second run into the same
    folder waits (saying so on stderr) until the first exits, then resumes or finds it finished,
    instead of both training and writing every ``metrics.jsonl`` line twice. Under torchrun the
    process of rank 0 holds it (the others wait for rank 0 at its barriers)."""
    import sys

    if int(os.environ.get("RANK", "0")) != 0:
        return nullcontext()
    return atomic.locked_output_folder(run_dir, on_wait=lambda message: print(message, file=sys.stderr, flush=True))


def remove_partial_writes(folder: str | os.PathLike, *, recursive_into: tuple[str, ...] = ("data",)) -> list[Path]:
    """Delete the temporary entries a killed atomic write left in ``folder`` (and its ``recursive_into``
    sub-folders): ``.checkpoint-40.x8k2.tmp/``, ``.run.json.a1b2.tmp``, ... Returns what was removed.

    Only names of the form ``.<name>.<random>.tmp`` / ``.old`` are touched. Call it when no other
    process writes into ``folder`` (a resumed run, before it starts).
    """
    folder = Path(folder)
    removed: list[Path] = []
    for d in [folder, *(folder / sub for sub in recursive_into)]:
        removed += atomic.remove_stale_temporaries(d)
    return removed


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``[(step, path), ...]`` of the complete checkpoints of a run (config + weights), by step."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    out = []
    for p in run_dir.iterdir():
        m = _CKPT.match(p.name)
        weights = (p / "model.safetensors").is_file() or (p / "model.safetensors.index.json").is_file()
        if m and p.is_dir() and (p / "config.json").is_file() and weights:
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_resumable(run_dir: str | os.PathLike) -> Path | None:
    """The last checkpoint that also carries a trainer state (so training can resume from it)."""
    for _, path in reversed(list_checkpoints(run_dir)):
        if (path / STATE_FILE).is_file():
            return path
    return None


def rng_state() -> dict[str, torch.Tensor]:
    """The global torch RNG states (CPU and CUDA) that dropout draws from, as uint8 tensors."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            state[f"cuda{i}"] = s
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["cpu"])
    if torch.cuda.is_available():
        cuda = [state[k] for k in sorted(state) if k.startswith("cuda")]
        if cuda:
            torch.cuda.set_rng_state_all(cuda)


def save_trainer_state(
    ckpt_dir: Path,
    *,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: dict[str, Any],
    rng: dict[str, torch.Tensor],
) -> None:
    """Write optimizer, scheduler, RNG and JSON trainer state into ``ckpt_dir`` (a temp dir)."""
    torch.save(optimizer.state_dict(), ckpt_dir / "optimizer.pt")
    torch.save(scheduler.state_dict(), ckpt_dir / "scheduler.pt")
    save_file({k: v.contiguous() for k, v in rng.items()}, str(ckpt_dir / "rng.safetensors"))
    (ckpt_dir / STATE_FILE).write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")


def read_json_file(path: Path, what: str) -> Any:
    """A JSON file's content; a missing, unreadable or broken file raises ``CheckpointError`` naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read the {what} ({exc})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}:{exc.lineno}: broken {what} (not JSON: {exc.msg})") from None


def read_trainer_state(ckpt_dir: Path) -> dict[str, Any]:
    """``trainer_state.json`` of a checkpoint, checked to hold a step (``CheckpointError`` otherwise)."""
    path = Path(ckpt_dir) / STATE_FILE
    state = read_json_file(path, "trainer state")
    if not isinstance(state, dict) or not isinstance(state.get("step"), int) or state["step"] < 0:
        raise CheckpointError(
            f"{path}: broken trainer state (expected an object with a non-negative integer "
            f"'step', got {str(state)[:80]})"
        )
    return state


def load_trainer_state(ckpt_dir: Path) -> tuple[dict, dict, dict[str, Any], dict[str, torch.Tensor]]:
    """``(optimizer_state, scheduler_state, trainer_state, rng_state)``; loads with weights_only.

    A missing, truncated or garbage file raises ``CheckpointError`` naming it and saying how to go on.
    """
    ckpt_dir = Path(ckpt_dir)
    hint = "delete this checkpoint folder to resume from the one before"
    loaded: dict[str, Any] = {}
    for name in ("optimizer.pt", "scheduler.pt"):
        try:
            loaded[name] = torch.load(ckpt_dir / name, map_location="cpu", weights_only=True)
        except Exception as exc:  # OSError, UnpicklingError, RuntimeError ("invalid load key"), EOFError...
            raise CheckpointError(
                f"{ckpt_dir / name}: corrupt or unreadable trainer state "
                f"({type(exc).__name__}: {str(exc)[:200]}); {hint}"
            ) from exc
        if not isinstance(loaded[name], dict):
            raise CheckpointError(
                f"{ckpt_dir / name}: expected a state dict, found {type(loaded[name]).__name__}; {hint}"
            )
    try:
        rng = load_file(str(ckpt_dir / "rng.safetensors"))
    except Exception as exc:  # safetensors raises its own error types for truncated headers
        raise CheckpointError(f"{ckpt_dir / 'rng.safetensors'}: corrupt RNG state ({exc}); {hint}") from exc
    if "cpu" not in rng:
        raise CheckpointError(f"{ckpt_dir / 'rng.safetensors'}: no 'cpu' RNG state; {hint}")
    state = read_trainer_state(ckpt_dir)
    return loaded["optimizer.pt"], loaded["scheduler.pt"], state, rng
