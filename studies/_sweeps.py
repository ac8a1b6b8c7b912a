"""A sweep's cells as study runs: what :mod:`bertology.sweeps` (the sweep file, the local and Ray
backends, the tables) runs for each cell.

:func:`load_sweep` reads a sweep file against its study's config fields; :func:`prepare_cells`
validates every cell with the study's own rules (:func:`bertology.studies.prepare_run`) before any
runs; :func:`run_cell` runs one as an ordinary study run (the run folder, manifest and tables of
``bertology study run``); :func:`extract_store` extracts the feature store a group of cells reads,
once, before them; :func:`run_sweep` ties them together. ``run_cell`` and ``extract_store`` are what
Ray runs on its workers (imported there by name).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from bertology import paths, sweeps
from bertology.errors import ConfigError, WorkbenchError
from bertology.runs import read_config_file
from bertology.sweeps import Cell, Sweep, WorkerContext

STORE_READERS: dict[str, bool] = {
    "edge_probing": False,
    "feature_combinations": False,
    "structural_probe": False,
    "contextuality": False,
    "head_types": True,
    "pruning": True,
}
"""Studies that read the feature store of their config's ``model`` over ``corpus`` (first
``limit`` sentences, ``pooling``, on ``device``) through :func:`bertology.runs.model_corpus_store`,
and whether with attention maps: a sweep extracts each such store once, before its cells."""


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file (YAML); errors name the file and the field."""
    path = Path(path)
    return parse_sweep(read_config_file(path), source=str(path), base=path.parent)


def parse_sweep(data: dict[str, Any], *, source: str = "<sweep>", base: Path | None = None) -> Sweep:
    """:func:`bertology.sweeps.parse_sweep` with the fields of the study ``data`` names."""
    from bertology.studies import load_study

    study = data.get("study") if isinstance(data, dict) else None
    fields: set[str] = set()
    if isinstance(study, str):
        try:
            fields = set(load_study(study).DEFAULTS)
        except WorkbenchError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    return sweeps.parse_sweep(data, fields=fields, source=source, base=base)


def store_key(study: str, config: dict[str, Any]) -> tuple[Any, ...] | None:
    """What identifies the feature store a cell of ``study`` reads (model, corpus, limit, pooling,
    device, attentions), or None when it reads none this module knows of (:data:`STORE_READERS`)."""
    if study not in STORE_READERS:
        return None
    if study == "edge_probing":
        from bertology.probes.probing.analysis import is_task_file

        if all(is_task_file(t) for t in config.get("tasks", [])):
            return None  # task files bring their own sentences and stores
    return (
        config["model"],
        config["corpus"],
        config.get("limit"),
        config.get("pooling", "first"),
        config.get("device") or "cpu",
        STORE_READERS[study],
    )


def prepare_cells(sweep: Sweep, results_root: str | Path | None = None) -> list[Cell]:
    """Every cell of the sweep, validated with the study's own rules and identified by its run
    folder, before anything runs: the first invalid cell is a ``ConfigError`` naming the sweep, the
    cell's grid values and the field; two cells that are the same run are refused."""
    from bertology.studies import prepare_run

    root = Path(results_root or paths.results_dir()).resolve()
    context = sweeps.worker_context(sweep)
    folder = sweeps.sweep_dir(sweep.name, root)
    cells: list[Cell] = []
    by_run: dict[Path, Cell] = {}
    for index, values in enumerate(sweeps.expand_grid(sweep.grid)):
        overrides = {**sweep.config, **{k: v for k, v in values.items() if k != "seed"}}
        seed = values.get("seed")
        label = sweeps.cell_label(values)
        try:
            prepared = prepare_run(
                sweep.study, config_file=sweep.config_file, overrides=overrides, seed=seed, results_root=root
            )
        except WorkbenchError as exc:
            raise ConfigError(f"sweep {sweep.name} ({sweep.source}), cell {label}: {exc}") from None
        key = store_key(sweep.study, prepared.config)
        on_cuda = str(prepared.config.get("device") or "cpu").startswith("cuda")
        log_file = str(folder / "logs" / f"{prepared.run_dir.name}.log")
        cell = Cell(
            index,
            values,
            prepared.run_dir,
            args=(sweep.study, sweep.config_file, overrides, seed, str(root), log_file, context),
            store=key,
            store_args=(prepared.config, bool(key[5]), context) if key else (),
            gpus=sweep.gpus if sweep.gpus is not None else (1.0 if on_cuda else 0.0),
        )
        if prepared.run_dir in by_run:
            raise ConfigError(
                f"sweep {sweep.name}: cells {by_run[prepared.run_dir].label()} and {label} are the same run "
                f"({cell.run}): a grid value changes nothing"
            )
        by_run[prepared.run_dir] = cell
        cells.append(cell)
    return cells


def extract_store(config: dict[str, Any], attentions: bool, context: WorkerContext) -> dict[str, Any]:
    """Extract (or find) the feature store a cell of ``config`` reads, as
    :func:`bertology.runs.model_corpus_store` opens it; ``{"ok": True, "store": path}``, or
    ``{"ok": False, "error": message}`` for a workbench error (a model that does not load): the
    cells that read it are then recorded failed with it."""
    with sweeps.entered(context):
        try:
            from bertology.corpus import load_corpus
            from bertology.models import load_model, resolve_device
            from bertology.store import extract

            lm = load_model(config["model"], attentions=True, device=resolve_device(config.get("device") or "cpu"))
            corpus = load_corpus(config["corpus"], limit=config.get("limit"))
            store = extract(lm, corpus, attentions=attentions, pooling=config.get("pooling", "first"), progress=False)
            return {"ok": True, "store": str(store.path)}
        except WorkbenchError as exc:
            return {"ok": False, "error": f"feature store: {type(exc).__name__}: {exc}"}


def run_cell(
    study: str,
    config_file: str | None,
    overrides: dict[str, Any],
    seed: int | None,
    results_root: str,
    log_file: str,
    context: WorkerContext,
    store: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run (or resume) one cell as an ordinary study run, its log appended to ``log_file``. Returns
    ``{"status", "run_dir", "seconds", "error"}``; a workbench error (bad data, a corpus too small)
    is a failed cell, returned, not raised (retrying would fail the same way); anything else is
    raised, so the backend retries it."""
    from bertology.studies import prepare_run, run_prepared

    if store is not None and not store.get("ok", True):
        return {"status": "failed", "run_dir": None, "seconds": 0.0, "error": store["error"]}
    started = time.perf_counter()
    Path(log_file).parent.mkdir(parents=True, exist_ok=True)
    with sweeps.entered(context), open(log_file, "a", encoding="utf-8") as out:

        def log(line: str) -> None:
            out.write(line + "\n")
            out.flush()

        try:
            prepared = prepare_run(
                study, config_file=config_file, overrides=overrides, seed=seed, results_root=results_root
            )
            run_dir = run_prepared(prepared, log=log)
        except WorkbenchError as exc:
            log(f"failed: {type(exc).__name__}: {exc}")
            seconds = round(time.perf_counter() - started, 2)
            return {"status": "failed", "run_dir": None, "seconds": seconds, "error": f"{type(exc).__name__}: {exc}"}
    return {"status": "complete", "run_dir": str(run_dir), "seconds": sweeps.wall_seconds(run_dir), "error": None}


def run_sweep(
    sweep: Sweep,
    *,
    backend: str | None = None,
    address: str | None = None,
    max_parallel: int | None = None,
    results_root: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Run (or resume) every cell of ``sweep``; return its cells table (:mod:`bertology.sweeps`).

    backend: ``"ray"`` or ``"local"`` (None: ray where it is installed, else local); ``address``: a
    Ray cluster to join; ``max_parallel``: at most this many cells at once on Ray. Every cell is
    validated before any runs; complete cells are skipped."""
    backend = sweeps.check_backend(backend, address, max_parallel)
    root = Path(results_root or paths.results_dir()).resolve()
    cells = prepare_cells(sweep, root)  # every cell valid before anything runs
    return sweeps.run_cells(
        sweep,
        cells,
        run_cell=run_cell,
        extract_store=extract_store,
        backend=backend,
        address=address,
        max_parallel=max_parallel,
        results_root=root,
        log=log,
    )
