"""A finished fine-tune, reloaded for analysis: its classifier (the head included), its tokenizer, its
task and the encoded train / dev / test splits of its seed -- what pruning, lottery tickets and
quantization of a fine-tuned model measure on (the task's own loss and metric, the same test
examples the run was scored on).

The splits are rebuilt from the run's recorded config (:func:`bertology.finetuning.tasks.build_task`
is a function of the task, the corpus and the seed), and checked against the counts ``run.json``
recorded, so a changed corpus or task file is an error rather than a silently different test set.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from bertology.adapters import restore_adapters
from bertology.checkpoints import list_checkpoints, read_json_file
from bertology.errors import CheckpointError
from bertology.finetuning.data import EncodedSplit, collate, encode_split
from bertology.finetuning.heads import load_classifier, load_tokenizer
from bertology.finetuning.tasks import FinetuneTask, build_task

__all__ = ["FinishedFinetune", "load_finished_finetune", "finished_run_directory", "finetuned_model_dir"]

SPLIT_NAMES = ("train", "dev", "test")


@dataclass
class FinishedFinetune:
    """A finished fine-tune: ``model`` (``*ForTokenClassification`` / ``*ForSequenceClassification``,
    float32, eval mode; adapters restored where the run trained them), ``tokenizer``, ``task`` and
    ``splits`` (``train``, ``dev``, ``test``: :class:`EncodedSplit`), ``config`` (the run's config
    dict), ``model_dir`` (the kept, best-on-dev checkpoint) and ``result`` (run.json's test figure)."""

    run_dir: Path
    model_dir: Path
    model: torch.nn.Module
    tokenizer: Any
    task: FinetuneTask
    splits: dict[str, EncodedSplit]
    config: dict[str, Any]
    result: dict[str, Any]

    @property
    def description(self) -> str:
        """One line: the task, its label source, the mode and the metric."""
        unit = "words" if self.task.kind == "token" else "examples"
        return (
            f"{self.task.name} ({self.task.source}), fine-tuned {self.config['mode']} from "
            f"{self.config['model']}; metric: accuracy over test {unit}"
        )

    def batches(
        self, split: str, batch_size: int = 32, limit: int | None = None, seed: int | None = None
    ) -> list[dict[str, torch.Tensor]]:
        """``limit`` examples (all by default) of ``split`` as padded batches: the first ones in split
        order, or with ``seed`` a random sample of them (in split order): ``input_ids``,
        ``token_type_ids``, ``attention_mask`` ``[batch, tokens]`` and ``labels`` (``[batch, tokens]``,
        -100 off first sub-words, for token tasks; ``[batch]`` otherwise)."""
        data = self.splits[split]
        n = len(data) if limit is None else min(limit, len(data))
        if seed is None or n == len(data):
            rows = list(range(n))
        else:
            rows = sorted(torch.randperm(len(data), generator=torch.Generator().manual_seed(seed))[:n].tolist())
        return [
            collate(data, rows[i : i + batch_size], self.tokenizer.pad_token_id)
            for i in range(0, len(rows), batch_size)
        ]


def finetuned_model_dir(run_dir: Path) -> Path:
    """The one checkpoint a finished fine-tune keeps (the registry model of the run);
    ``CheckpointError`` when there is not exactly one."""
    checkpoints = list_checkpoints(run_dir)
    if len(checkpoints) != 1:
        raise CheckpointError(f"{run_dir}: a finished fine-tune keeps exactly one checkpoint, found {len(checkpoints)}")
    return checkpoints[0][1]


def finished_run_directory(run: str | Path) -> Path:
    """The folder of a fine-tune run: a directory, or a run name under ``paths.models_dir()``."""
    from bertology import paths

    path = Path(run).expanduser()
    if not path.is_dir():
        path = paths.models_dir() / str(run)
    if not (path / "run.json").is_file():
        raise CheckpointError(
            f"{path}: not a fine-tune run folder (no run.json); give a run name under "
            f"{paths.models_dir()} or the run's directory"
        )
    return path


def load_finished_finetune(run: str | Path) -> FinishedFinetune:
    """Reload the finished fine-tune ``run`` (a run folder or name): ``CheckpointError`` when it did
    not finish, keeps no single checkpoint, or its rebuilt splits do not match the recorded counts."""
    run_dir = finished_run_directory(run)
    info = read_json_file(run_dir / "run.json", "run record")
    if not isinstance(info, dict) or "result" not in info or info.get("kind") != "finetune":
        raise CheckpointError(
            f"{run_dir / 'run.json'}: not a finished fine-tune (no 'result'); finish it first "
            "(re-run the same `bertology finetune` command)"
        )
    model_dir = finetuned_model_dir(run_dir)
    cfg = info["config"]
    task = build_task(
        cfg["task"],
        corpus=cfg["corpus"],
        label_column=cfg["label_column"],
        max_examples=cfg["max_examples"],
        dev_fraction=cfg["dev_fraction"],
        test_fraction=cfg["test_fraction"],
        seed=cfg["seed"],
    )
    recorded = info.get("task", {})
    rebuilt = task.summary()
    differ = [
        f"{k} {rebuilt[k]} (run.json: {recorded.get(k)})"
        for k in ("n_train", "n_dev", "n_test", "labels")
        if recorded.get(k) != rebuilt[k]
    ]
    if differ:
        raise CheckpointError(
            f"{run_dir / 'run.json'}: the task {cfg['task']!r} rebuilt today differs from the "
            f"one the run trained on: {'; '.join(map(str, differ))}"
        )
    tokenizer = load_tokenizer(model_dir)
    model = load_classifier(model_dir, task.kind, task.labels)
    restore_adapters(model, load_file(str(model_dir / "model.safetensors")))  # none saved: nothing done
    model.eval()
    splits = {s: encode_split(task.split(s), task, tokenizer, cfg["max_seq_len"]) for s in SPLIT_NAMES}
    return FinishedFinetune(run_dir, model_dir, model, tokenizer, task, splits, cfg, info["result"])
