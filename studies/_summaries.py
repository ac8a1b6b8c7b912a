"""The headline figures of a finished study run, read back from its tables: what the README quotes
for each study (best layers with their intervals, head types, P@1, accuracy per fine-tuning mode,
removable heads...). :func:`bertology.studies.run_study` prints them when it finds a run already
complete, so a rerun says more than "complete run found"; the quickstart and the tour list each of
their sub-runs' figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from bertology.results import ResultError, read_manifest, read_table


def interval(value: float | None, low: float | None, high: float | None, digits: int = 3) -> str:
    """``0.921 [0.862, 0.978]``, or ``0.921 (no interval)`` when a bound is missing (one seed);
    ``n/a`` for a missing score (NaN or None: nothing to score)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (low, high)):
        return f"{value:.{digits}f} (no interval)"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def _table(run_dir: Path, name: str) -> pd.DataFrame | None:
    try:
        return read_table(run_dir, name)
    except ResultError:
        return None


def edge_probing_lines(run_dir: Path) -> list[str]:
    """Per task: the best layer (chosen on dev) and its test score with its interval."""
    summary = _table(run_dir, "summary")
    if summary is None or "best_layer" not in summary:
        return []
    lines = []
    for r in summary.dropna(subset=["best_layer"]).itertuples():
        line = f"{r.task}: best layer {int(r.best_layer)}"
        if hasattr(r, "best_layer_score"):
            line += f", test {interval(r.best_layer_score, getattr(r, 'best_layer_low', None), getattr(r, 'best_layer_high', None))}"
        if getattr(r, "small_sample", False):
            line += f" (small sample: {int(r.n_test)} test items)"
        lines.append(line)
    return lines


def head_types_lines(run_dir: Path) -> list[str]:
    """Heads per type, and the attention probe's held-out UAS per method with its interval."""
    types = _table(run_dir, "head_types")
    lines = []
    if types is not None and "type" in types:
        counts = types["type"].value_counts()
        lines.append(f"head types ({len(types)} heads): " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    probe = _table(run_dir, "attention_probe")
    if probe is not None and "uas" in probe:
        with_interval = {"uas_low", "uas_high"} <= set(probe.columns)  # runs before the interval: the value
        parts = [
            f"{r.method} {interval(r.uas, r.uas_low, r.uas_high, 2) if with_interval else f'{r.uas:.2f}'}"
            for r in probe.itertuples()
        ]
        lines.append("attention-probe UAS: " + "; ".join(parts))
    return lines


def contextuality_lines(run_dir: Path) -> list[str]:
    """Each measure (anisotropy-adjusted) at the first and the last layer, with the words it rests on."""
    table = _table(run_dir, "contextuality")
    if table is None or not {"layer", "metric", "adjusted"} <= set(table.columns):
        return []
    lines = []
    for metric, part in table.sort_values("layer").groupby("metric", sort=False):
        first, last = part.iloc[0], part.iloc[-1]
        words = (
            f" ({int(first['n_items'])} words)" if "n_items" in part and metric != "intra_sentence_similarity" else ""
        )
        lines.append(
            f"{metric} (adjusted): {first['adjusted']:.2f} (layer {int(first['layer'])}) → "
            f"{last['adjusted']:.2f} (layer {int(last['layer'])}){words}"
        )
    return lines


def alignment_lines(run_dir: Path) -> list[str]:
    """P@1 of each method and retrieval with its interval."""
    precision = _table(run_dir, "precision")
    if precision is None or not {"k", "value", "retrieval"} <= set(precision.columns):
        return []
    at1 = precision[precision["k"] == precision["k"].min()]
    return [
        f"P@{int(r.k)} {getattr(r, 'method', 'mapping')} / {r.retrieval}: "
        f"{interval(r.value, getattr(r, 'low', None), getattr(r, 'high', None))}"
        for r in at1.itertuples()
    ]


def finetuning_lines(run_dir: Path) -> list[str]:
    """Test accuracy of each task and mode with its interval, and each mode against full."""
    scores = _table(run_dir, "finetune_scores")
    lines = []
    if scores is not None and {"task", "mode", "accuracy"} <= set(scores.columns):
        lines += [
            f"{r.task} / {r.mode}: test accuracy {interval(r.accuracy, r.low, r.high)}" for r in scores.itertuples()
        ]
    comparisons = _table(run_dir, "finetune_comparisons")
    if comparisons is not None and {"difference", "low", "high"} <= set(comparisons.columns):
        lines += [
            f"{r.task} / {r.mode} − {getattr(r, 'reference', 'full')}: {interval(r.difference, r.low, r.high)}"
            for r in comparisons.itertuples()
        ]
    return lines


def pruning_lines(run_dir: Path) -> list[str]:
    """The share of heads each order removes before the dev metric worsens by each tolerance."""
    summary = _table(run_dir, "pruning_threshold_summary")
    if summary is None or not {"method", "tolerance", "removable_share"} <= set(summary.columns):
        return []
    return [
        f"{r.method}: {r.removable_share:.0%} of heads removable at {r.tolerance:.0%} tolerance"
        for r in summary.itertuples()
    ]


def emergence_lines(run_dir: Path) -> list[str]:
    """Per task: the best-layer test accuracy at the first and the last checkpoint."""
    best = _table(run_dir, "best_layers")
    if best is None or not {"step", "task", "best_layer_score"} <= set(best.columns):
        return []
    lines = []
    for task, part in best.sort_values("step").groupby("task"):
        first, last = part.iloc[0], part.iloc[-1]
        lines.append(
            f"{task}: best-layer accuracy {first['best_layer_score']:.3f} (step {int(first['step'])}) → "
            f"{last['best_layer_score']:.3f} (step {int(last['step'])})"
        )
    return lines


STRUCTURAL_METRICS = {"uuas": "UUAS", "dspr": "DSpr.", "root_acc": "root%", "nspr": "NSpr."}


def structural_probe_lines(run_dir: Path) -> list[str]:
    """Per probe (distance, depth): the layer chosen on dev and each metric's test score with its
    interval, with the LINEAR baseline's score beside it where the run has one."""
    summary = _table(run_dir, "summary")
    if summary is None or not {"probe", "best_layer", "metric", "score"} <= set(summary.columns):
        return []
    baselines = _table(run_dir, "baselines")
    linear: dict[tuple[str, str], float] = {}
    if baselines is not None and {"encoder", "probe", "metric", "score"} <= set(baselines.columns):
        for r in baselines[baselines["encoder"] == "linear"].itertuples():
            linear[(str(r.probe), str(r.metric))] = math.nan if r.score is None else float(r.score)
    if "encoder" in summary.columns:
        summary = summary[summary["encoder"] == "trained"]
    lines = []
    for probe, part in summary.groupby("probe", sort=False):
        parts = []
        for r in part.itertuples():
            text = f"{STRUCTURAL_METRICS.get(str(r.metric), r.metric)} "
            text += interval(
                None if r.score is None else float(r.score), getattr(r, "low", None), getattr(r, "high", None)
            )
            if (str(probe), str(r.metric)) in linear:
                text += f" (LINEAR {linear[(str(probe), str(r.metric))]:.3f})"
            if getattr(r, "small_sample", False):
                text += f" (small sample: {int(r.n_test)} test items)"
            parts.append(text)
        lines.append(f"{probe} probe, layer {int(part['best_layer'].iloc[0])}: " + ", ".join(parts))
    return lines


SUMMARIES: dict[str, Callable[[Path], list[str]]] = {
    "edge_probing": edge_probing_lines,
    "head_types": head_types_lines,
    "contextuality": contextuality_lines,
    "alignment": alignment_lines,
    "finetuning": finetuning_lines,
    "pruning": pruning_lines,
    "emergence": emergence_lines,
    "structural_probe": structural_probe_lines,
}


def subrun_lines(run_dir: Path) -> list[str]:
    """The figures of each sub-run of a runner study (quickstart, tour: its ``subruns`` table)."""
    subruns = _table(run_dir, "subruns")
    if subruns is None or "run_dir" not in subruns:
        return []
    lines = []
    for r in subruns.itertuples():
        sub = Path(str(r.run_dir))
        if not sub.is_absolute():
            sub = run_dir.parents[1] / sub
        lines += summary_lines(str(r.study), sub)
    return lines


def summary_lines(study: str, run_dir: Path) -> list[str]:
    """The headline figures of a finished run of ``study`` (``"<study>: <figure>"`` lines); a
    runner study's sub-runs' figures; only the run's tables for a study without a summary here.
    [] when the run has no readable manifest."""
    try:
        manifest = read_manifest(run_dir)
    except ResultError:
        return []
    if study in SUMMARIES:
        return [f"{study}: {line}" for line in SUMMARIES[study](run_dir)]
    lines = subrun_lines(run_dir)
    if lines:
        return lines
    tables = manifest.get("tables")
    return [f"{study}: tables {', '.join(map(str, tables))}"] if isinstance(tables, list) and tables else []
