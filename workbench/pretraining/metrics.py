"""The metrics of a pretraining run: ``metrics.jsonl`` in the run folder, one JSON object per log or
evaluation event, appended as the run goes, and read back as a tidy table (:func:`read_metrics`)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from bertology.atomic import write_text
from bertology.errors import CheckpointError

__all__ = ["MetricsLog", "DivergenceMonitor", "read_metric_events", "read_metrics"]


class MetricsLog:
    """Append-only JSON-lines metrics file: one object per event, ``{"step": N, metric: value, ...}``
    (written by rank 0 only: ``enabled``)."""

    def __init__(self, path: Path, enabled: bool):
        self.path, self.enabled = path, enabled

    def truncate_after(self, step: int) -> None:
        """Drop events logged after ``step`` (by a run killed after its last checkpoint), and a last
        line cut short by the kill."""
        if not (self.enabled and self.path.is_file()):
            return
        keep = [json.dumps(ev) for ev in read_metric_events(self.path) if ev["step"] <= step]
        write_text(self.path, "".join(ln + "\n" for ln in keep))

    def log(self, **event: Any) -> None:
        """Append one event (flushed and synced: a kill loses at most the line being written)."""
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(event) + "\n")
                fh.flush()
                os.fsync(fh.fileno())


class DivergenceMonitor:
    """Tells a diverged-but-finite run from a noisy one: the training loss stayed above ``factor`` x
    max(ln V, the first loss this process saw) for ``window`` consecutive optimizer steps.

    ln V is the loss of predicting uniformly over a V-token vocabulary (where an MLM from scratch
    starts); the first loss covers objectives on another scale (ELECTRA's weighted sum, resumed runs).
    ``window`` 0 turns the check off. :meth:`update` returns whether the run must stop; ``final``
    (the run's last step) asks, when this process trained fewer steps than ``window``, only for
    every step after its first (which sets the scale) -- a short run that ends diverged is not final.
    ``streak_start``: the step whose weights first gave a loss above the threshold in the streak.
    """

    def __init__(self, vocab_size: int, factor: float, window: int):
        self.uniform_loss = math.log(max(vocab_size, 2))
        self.factor, self.window = factor, window
        self.threshold: float | None = None
        self.streak = 0
        self.streak_start: int | None = None
        self.steps_seen = 0

    def update(self, step: int, loss: float, *, final: bool = False) -> bool:
        """Record the training loss of optimizer step ``step`` (computed with the weights after
        ``step`` updates); True when the run has diverged."""
        if self.window == 0 or not math.isfinite(loss):
            return False  # off, or a non-finite loss (stopped by the trainer's own check)
        if self.threshold is None:
            self.threshold = self.factor * max(self.uniform_loss, loss)
        self.steps_seen += 1
        if loss > self.threshold:
            self.streak_start = step if self.streak == 0 else self.streak_start
            self.streak += 1
        else:
            self.streak, self.streak_start = 0, None
        needed = min(self.window, max(self.steps_seen - 1, 1)) if final else self.window
        return self.streak > 0 and self.streak >= needed

    def describe(self) -> str:
        """The rule as the error message states it."""
        return (
            f"above {self.threshold:.4g} = {self.factor:g} x max(ln V = {self.uniform_loss:.4g}, first loss) "
            f"for {self.streak} consecutive steps (divergence_window {self.window})"
        )


def read_metric_events(path: Path) -> list[dict[str, Any]]:
    """The events of a ``metrics.jsonl``. A last line without its newline is a write in progress (or
    cut by a kill) and is skipped; any other broken line raises ``CheckpointError`` naming file:line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read the metrics ({exc})") from exc
    lines = text.split("\n")  # the last item is "" when the file ends with a newline
    events = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
            if not isinstance(ev, dict) or not isinstance(ev.get("step"), int):
                raise ValueError("expected an object with an integer 'step'")
            for key, value in ev.items():
                if key != "step" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                    raise ValueError(f"metric {key!r} is not a number: {value!r}")
        except ValueError as exc:
            if lineno == len(lines):  # unterminated last line: a write in progress or cut short
                break
            raise CheckpointError(f"{path}:{lineno}: broken metrics line ({exc}): {line[:80]!r}") from None
        events.append(ev)
    return events


def read_metrics(run_dir: str | Path):
    """Metrics of a run as a tidy DataFrame: columns ``run, step, metric, value``.

    Metrics: ``loss`` (training loss, mean of the log window), ``lr``, ``tokens_per_s`` (all
    processes), ``mfu`` (model FLOPs utilisation of one device, where its peak is known),
    ``eval_loss`` (held-out MLM loss, nats/token), ``perplexity`` (exp(eval_loss)),
    and ``eval_pair_accuracy`` for NSP/SOP runs. If a step was logged twice, the last value wins.
    """
    import pandas as pd

    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    rows: list[dict[str, object]] = []
    if path.is_file():
        for ev in read_metric_events(path):
            step = int(ev.pop("step"))
            rows.extend({"run": run_dir.name, "step": step, "metric": k, "value": float(v)} for k, v in ev.items())
    df = pd.DataFrame(rows, columns=["run", "step", "metric", "value"])
    df = df.drop_duplicates(["step", "metric"], keep="last").sort_values(["metric", "step"]).reset_index(drop=True)
    return df.astype({"step": "int64", "value": "float64"})
