"""Where the dashboard finds result runs and how it names them on screen (no Streamlit here).

The results folder is ``$BERTOLOGY_RESULTS`` (default ``./results``), laid out
``<results>/<study>/<run-id>/`` with a ``manifest.json`` and one ``<table>.parquet`` per table.
Nothing shown on a page carries an absolute machine path: :func:`clean` rewrites them.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from bertology import paths
from bertology.results import ResultError
from bertology.results import read_manifest as read_manifest_file


def file_stamp(path: Path) -> tuple[int, int] | None:
    """``(modification time in ns, size)`` of a file, None when it cannot be read: the key under
    which what was read from it is kept (a rewritten file is read again)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def read_manifest(run: Path) -> dict[str, Any]:
    """A run's manifest (:func:`bertology.results.read_manifest`, the same errors), read from disk
    again only when ``manifest.json`` changes: every rerun of a page lists, describes and opens the
    same runs. A copy: the caller may change it."""
    return copy.deepcopy(_cached_manifest(str(run), file_stamp(Path(run) / "manifest.json")))


@functools.lru_cache(maxsize=1024)
def _cached_manifest(run: str, stamp: tuple[int, int] | None) -> dict[str, Any]:
    return read_manifest_file(run)  # an error is raised, not kept: the next call reads again


def results_root() -> Path:
    """The results folder the dashboard reads: ``$BERTOLOGY_RESULTS``, else ``./results``."""
    return Path(os.environ.get("BERTOLOGY_RESULTS", Path.cwd() / "results"))


def shown_root() -> str:
    """The results folder as the page shows it: relative to the working folder, or just its name
    (never an absolute machine path)."""
    root = results_root().resolve()
    try:
        return str(root.relative_to(Path.cwd().resolve())) or "."
    except ValueError:
        return root.name


ABSOLUTE_PATH = re.compile(r"(?<![\w.~$:/])(/[^\s/\"',:;()\[\]]+){2,}")


def _last_two_parts(match: re.Match) -> str:
    parts = match.group(0).strip("/").split("/")
    return ".../" + "/".join(parts[-2:]) if len(parts) > 2 else match.group(0)


def clean(text: Any) -> str:
    """A message or value as shown, with no absolute machine path: the results folder, the working
    folder, the workbench home and the user's home become relative names, and any other absolute
    path is cut to its last two parts (``.../folder/file``)."""
    text = str(text)
    root = results_root()
    named = [(root, shown_root()), (paths.home(), "$BERTOLOGY_HOME"), (Path.home(), "~")]
    for folder, name in named:
        for absolute in sorted({str(folder), str(folder.resolve())}, key=len, reverse=True):
            text = text.replace(absolute, name)
    for absolute in {str(Path.cwd()), str(Path.cwd().resolve())}:
        text = text.replace(absolute + os.sep, "")
    return ABSOLUTE_PATH.sub(_last_two_parts, text)


def clean_json(obj: Any) -> Any:
    """``obj`` (JSON-like: dicts, lists, strings...) with every string passed through :func:`clean`."""
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    return clean(obj) if isinstance(obj, str) else obj


def find_runs(study: str | None = None, *, include_unfinished: bool = False) -> list[Path]:
    """Complete run folders of ``study`` (every study when None), newest first; with
    ``include_unfinished`` also those still running, stopped before their manifest, or with an
    unreadable one (:func:`split_runs` tells them apart)."""
    root = results_root()
    pattern = f"{study}/*" if study else "*/*"
    found = (p for p in root.glob(pattern) if p.is_dir() and p.parent.name != paths.SWEEPS_FOLDER)  # not runs
    runs = sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
    return runs if include_unfinished else split_runs(runs)[0]


def split_runs(runs: list[Path]) -> tuple[list[Path], list[Path]]:
    """``(complete, unfinished)`` of ``runs`` in their order, each manifest read once
    (:func:`is_complete`)."""
    complete: list[Path] = []
    unfinished: list[Path] = []
    for run in runs:
        (complete if is_complete(run) else unfinished).append(run)
    return complete, unfinished


def is_complete(run: Path) -> bool:
    """The run wrote a manifest that reads as a JSON object (what every page needs)."""
    try:
        read_manifest(run)
        return True
    except ResultError:
        return False


HIDDEN_HINT = "remove stopped ones with `bertology study clean --yes`"

QUICKSTART = ("bertology study run quickstart", "about 5 minutes on 2 CPU cores")
"""The README's main job and its time: it fills every page whose study is in :data:`QUICKSTART_STUDIES`."""
QUICKSTART_STUDIES = (
    "head_types",
    "edge_probing",
    "structural_probe",
    "contextuality",
    "alignment",
    "finetuning",
    "emergence",
    "pruning",
)
"""The studies ``bertology study run quickstart`` runs (its ``studies`` and ``second_model_studies``)."""
FILL_COMMANDS: dict[str, tuple[str, str]] = {
    "feature_combinations": (
        "bertology study run feature_combinations --config tour/feature_combinations",
        "about 6 minutes on 2 cores: 6.2 CPU-minutes measured",
    ),
    "compression": (
        "bertology study run compression --config quickstart/compression",
        "about 15 minutes on 2 cores, estimated: over 14 CPU-minutes here, to its pruning curves",
    ),
    "patching": (
        "bertology study run patching",
        "minutes on 2 cores: 7.6 minutes wall time measured for its 120 minimal pairs and the random-init "
        "control on minilm-english-mlm, on a machine shared with other jobs",
    ),
    "semantic_change": (
        "bertology build-corpus --out ~/.cache/bertology/english-corpus && "
        "bertology study run semantic_change --config quickstart/semantic_change",
        "the download about a minute, once; the run about a minute on 2 cores: 0.75 CPU-minutes measured",
    ),
}
"""Per study the quickstart does not run, the one command that makes a small run of it (from any
folder of an installed package: shipped configs by name) and its time as measured (the only source of these, for the pages' empty
states; tests check that each command's study and config exist)."""


def how_to_fill(study: str) -> str:
    """The sentence an empty page shows: the one command that makes a run of ``study``, and its time."""
    command, took = FILL_COMMANDS.get(study, QUICKSTART if study in QUICKSTART_STUDIES else (None, ""))
    if command is None:
        return f"Run `bertology study run {study}`."
    return f"Run `{command}` ({took}), then reload this page."


_SECOND_MODEL_RUN = re.compile(r"(?P<study>quickstart|tour)-.+-seed(?P<seed>\d+)")


def default_run_index(runs: list[Path]) -> int:
    """Which of ``runs`` (newest first) a page opens on: the newest, except that the quickstart's (or
    the tour's) runs on its second model (``quickstart-<model>-seed<N>``, written after the main ones)
    give way to the same study's main run (``quickstart-seed<N>``, the embedded default model) where
    there is one."""
    second = _SECOND_MODEL_RUN.fullmatch(runs[0].name) if runs else None
    if second:
        main = f"{second['study']}-seed{second['seed']}"
        for i, run in enumerate(runs):
            if run.name == main:
                return i
    return 0


def run_label(path: Path) -> str:
    """``study/run-id`` of a run folder."""
    return f"{path.parent.name}/{path.name}"


def model_name(manifest: dict[str, Any]) -> str | None:
    """The model a manifest names (``model.name`` or a plain ``model`` string), if any."""
    model = manifest.get("model")
    if isinstance(model, dict):
        return None if model.get("name") is None else str(model.get("name"))
    return None if model is None else str(model)


def manifest_config(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest's ``config`` (the study's settings), or ``{}`` where it has none or not a mapping."""
    config = manifest.get("config")
    return config if isinstance(config, dict) else {}


def run_model(manifest: dict[str, Any]) -> str | None:
    """The model of a run: the manifest's (:func:`model_name`), else its config's ``model`` (a
    fine-tuning study records its model in the config only), else None."""
    config = manifest_config(manifest)
    return model_name(manifest) or (str(config["model"]) if config.get("model") else None)


_LIMIT_SUFFIX = re.compile(r"\[:\d+\]$")


def corpus_label(manifest: dict[str, Any]) -> str | None:
    """The corpus of a run as a label: its name with the number of sentences it really held
    (``mine (30 sentences)``, not ``mine[:1500]``, the limit asked of a 30-sentence file); the
    name alone where the manifest does not say how many; None where it names no corpus."""
    corpus = manifest.get("corpus")
    config = manifest_config(manifest)
    name = corpus.get("name") if isinstance(corpus, dict) else config.get("corpus")
    if not name:
        return None
    count = corpus.get("sentences") if isinstance(corpus, dict) else None
    if isinstance(count, int) and not isinstance(count, bool):
        return f"{_LIMIT_SUFFIX.sub('', str(name))} ({count:,} sentences)"
    return str(name)


NOT_RECORDED = "not recorded"


def machine_summary(manifest: dict[str, Any]) -> str:
    """The one-line machine a run was computed on (its manifest's ``machine.summary``, e.g. "Intel
    Xeon (AVX-512), 2 cores, cpu, float32"), or :data:`NOT_RECORDED` for a run made before the
    manifest carried it (or with an unreadable entry)."""
    machine = manifest.get("machine")
    summary = machine.get("summary") if isinstance(machine, dict) else None
    return clean(summary) if isinstance(summary, str) and summary.strip() else NOT_RECORDED


def describe(run: Path) -> str:
    """``study/run · model · corpus · tasks · probe`` for a run picker: what tells two runs apart,
    each part only when the manifest says it (the corpus as the run named it, ``[:N]`` included)."""
    try:
        manifest = read_manifest(run)
    except ResultError:
        return run_label(run) + " · (unreadable)"
    config = manifest_config(manifest)
    corpus_name = corpus_label(manifest)
    tasks = config.get("tasks") or config.get("task")
    parts = [
        run_model(manifest),
        clean(corpus_name) if corpus_name else None,
        ",".join(map(str, tasks)) if isinstance(tasks, list) else (str(tasks) if tasks else None),
        f"{config['probe']} probe" if config.get("probe") else None,
        f"mode {config['mode']}" if isinstance(config.get("mode"), str) else None,
    ]
    return " · ".join([run_label(run), *(p for p in parts if p)])


def runs_overview(runs: list[Path]) -> pd.DataFrame:
    """One row per run: ``study, run, seed, model, machine, tables, seconds, status`` (``model``:
    :func:`run_model`; ``machine``: :func:`machine_summary`); a run whose manifest cannot be read
    has only ``study, run`` and ``status = "unreadable: <why>"``."""
    rows = []
    for r in runs:
        try:
            m = read_manifest(r)
            tables = m.get("tables")
            rows.append(
                {
                    "study": r.parent.name,
                    "run": r.name,
                    "seed": None if m.get("seed") is None else str(m.get("seed")),
                    "model": run_model(m),
                    "machine": machine_summary(m),
                    "tables": ", ".join(map(str, tables)) if isinstance(tables, list) else clean(tables or ""),
                    "seconds": m.get("wall_seconds") if isinstance(m.get("wall_seconds"), (int, float)) else None,
                    "status": "complete",
                }
            )
        except ResultError as exc:
            rows.append({"study": r.parent.name, "run": r.name, "status": f"unreadable: {clean(exc)}"})
    return pd.DataFrame(rows)
