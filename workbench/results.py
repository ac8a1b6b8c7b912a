"""Result runs: tidy tables as parquet plus a JSON manifest, written atomically; read back safely.

A run directory holds ``<table>.parquet`` files, optional ``<name>.json`` extras (plot-ready data)
and ``manifest.json`` (written last, so its presence means the run is complete).
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from bertology import atomic
from bertology.errors import WorkbenchError
from bertology.machine import describe_machine, machine_summary

TRACKED_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "scikit-learn",
    "numpy",
    "pandas",
    "spacy",
    "umap-learn",
    "bertology-workbench",
)


class ResultError(WorkbenchError):
    """A missing or corrupt result file."""


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _is_source_checkout(folder: Path) -> bool:
    """True when the package runs from the files of a git checkout (an editable install)."""
    return (folder.parent / "pyproject.toml").is_file() and "site-packages" not in folder.parts


def git_commit(cwd: str | Path | None = None) -> str | None:
    """The commit of the code that made a result.

    From a source checkout (editable install, or ``cwd`` given): ``git rev-parse HEAD`` there, with
    ``+dirty`` when tracked files are modified. From an installed wheel: the commit recorded in the
    package version at build time (setuptools-scm's ``+g<hash>``); None if neither is known.
    """
    folder = Path(cwd) if cwd else Path(__file__).resolve().parent
    if cwd or _is_source_checkout(folder):
        try:
            head = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5
            ).stdout.strip()
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            if head:
                return head + ("+dirty" if dirty else "")
        except Exception:
            pass
    try:
        version = metadata.version("bertology-workbench")
    except metadata.PackageNotFoundError:
        return None
    match = re.search(r"\+g([0-9a-f]{7,40})", version)
    return match.group(1) if match else None


def mean_ci(df: pd.DataFrame, by: list[str], value: str = "value") -> pd.DataFrame:
    """Mean over seeds with a Student-t 95% interval, per group ``by``: columns ``[*by], mean, sd,
    n, ci95, low, high`` with ``ci95 = t_{0.975, n-1} * sd / sqrt(n)`` (a half width) and
    ``low``/``high = mean ∓ ci95``. One seed: ``sd``, ``ci95``, ``low``, ``high`` are NaN (no
    interval from one value), never 0. Seed variation only: a test score's sampling error is not
    in it (docs/METHODS.md, "Intervals, selection and comparisons")."""
    from scipy import stats

    out = df.groupby(by, dropna=False)[value].agg(mean="mean", sd="std", n="count").reset_index()
    n = out["n"].astype(float)
    quantile = pd.Series(stats.t.ppf(0.975, (n - 1).where(n > 1)), index=out.index)
    out["ci95"] = quantile * out["sd"] / n.clip(lower=1) ** 0.5
    out["low"] = out["mean"] - out["ci95"]
    out["high"] = out["mean"] + out["ci95"]
    return out


def write_table(run_dir: str | Path, name: str, df: pd.DataFrame) -> Path:
    path = Path(run_dir) / f"{name}.parquet"
    with atomic.atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return path


def write_results(
    run_dir: str | Path, tables: dict[str, pd.DataFrame], manifest: dict[str, Any], extras: dict[str, Any] | None = None
) -> Path:
    """Write tables (parquet), extras (JSON) and finally ``manifest.json`` with provenance added: package
    versions, git commit, argv and ``machine`` (:func:`bertology.machine.describe_machine`, with a one-line
    ``summary`` that adds the manifest's ``compute`` -- device and precision -- where the run recorded it)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        write_table(run_dir, name, df)
    for name, obj in (extras or {}).items():
        atomic.write_json(run_dir / f"{name}.json", obj)
    full = dict(manifest)
    full.setdefault("tables", sorted(tables))
    full.setdefault("extras", sorted(extras or {}))
    full.setdefault("packages", package_versions())
    full.setdefault("git_commit", git_commit())
    full.setdefault("argv", sys.argv)
    machine = full.setdefault("machine", describe_machine())
    machine.setdefault("summary", machine_summary(machine, full.get("compute")))
    atomic.write_json(run_dir / "manifest.json", full)
    return run_dir


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "manifest.json"
    if not path.is_file():
        raise ResultError(f"{run_dir}: no manifest.json (the run is missing or did not finish)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultError(f"{path}: corrupt manifest ({exc})") from exc
    if not isinstance(manifest, dict):
        kind = _JSON_KINDS.get(type(manifest), type(manifest).__name__)
        raise ResultError(
            f"{path}: corrupt manifest: holds {kind} ({str(manifest)[:40]!r}), not a JSON object of run fields"
        )
    return manifest


_JSON_KINDS = {
    type(None): "null",
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
}


def read_table(run_dir: str | Path, name: str) -> pd.DataFrame:
    path = Path(run_dir) / f"{name}.parquet"
    if not path.is_file():
        raise ResultError(f"{path}: table {name!r} is missing from this run")
    try:
        return pd.read_parquet(path)
    except Exception as exc:
        raise ResultError(f"{path}: corrupt table ({type(exc).__name__}: {exc})") from exc


def read_extra(run_dir: str | Path, name: str) -> Any:
    path = Path(run_dir) / f"{name}.json"
    if not path.is_file():
        raise ResultError(f"{path}: {name!r} is missing from this run")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}: corrupt JSON ({exc})") from exc


def read_results(run_dir: str | Path) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    """Manifest and every table of a run."""
    manifest = read_manifest(run_dir)
    return manifest, {name: read_table(run_dir, name) for name in manifest.get("tables", [])}
