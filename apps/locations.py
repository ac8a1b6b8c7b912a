"""Where the dashboard finds result runs and how it names them on screen (no Streamlit here).

The results folder is ``$BERTOLOGY_RESULTS`` (default ``./results``), laid out
``<results>/<study>/<run-id>/`` with a ``manifest.json`` and one ``<table>.parquet`` per table.
Nothing shown on a page carries an absolute machine path: :func:`clean` rewrites them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from bertology import paths
from bertology.results import ResultError, read_manifest


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


def find_runs(study: str | None = None) -> list[Path]:
    """Run folders of ``study`` (every study when None), newest first."""
    root = results_root()
    pattern = f"{study}/*" if study else "*/*"
    return sorted((p for p in root.glob(pattern) if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)


def run_label(path: Path) -> str:
    """``study/run-id`` of a run folder."""
    return f"{path.parent.name}/{path.name}"


def model_name(manifest: dict[str, Any]) -> str | None:
    """The model a manifest names (``model.name`` or a plain ``model`` string), if any."""
    model = manifest.get("model")
    if isinstance(model, dict):
        return None if model.get("name") is None else str(model.get("name"))
    return None if model is None else str(model)


def describe(run: Path) -> str:
    """``study/run · model`` for a run picker (the model only when its manifest says)."""
    try:
        name = model_name(read_manifest(run))
    except ResultError:
        name = None
    return run_label(run) + (f" · {name}" if name else "")


def runs_overview(runs: list[Path]) -> pd.DataFrame:
    """One row per run: ``study, run, seed, model, tables, seconds, status``; a run whose manifest
    cannot be read has only ``study, run`` and ``status = "unreadable: <why>"``."""
    rows = []
    for r in runs:
        try:
            m = read_manifest(r)
            tables = m.get("tables")
            rows.append({"study": r.parent.name, "run": r.name, "seed": None if m.get("seed") is None else str(m.get("seed")),
                         "model": model_name(m),
                         "tables": ", ".join(map(str, tables)) if isinstance(tables, list) else clean(tables or ""),
                         "seconds": m.get("wall_seconds") if isinstance(m.get("wall_seconds"), (int, float)) else None,
                         "status": "complete"})
        except ResultError as exc:
            rows.append({"study": r.parent.name, "run": r.name, "status": f"unreadable: {clean(exc)}"})
    return pd.DataFrame(rows)
