"""Sweeps: one study run per cell of a grid (models × config values × seeds), locally or on Ray.

A sweep file names a study, the config every cell shares and a grid::

    name: tiny
    study: edge_probing
    config: {tasks: [pos], limit: 100}   # over the study's shipped config (or `config_file:`)
    grid:
      model: [minilm-l6, bert-mini-english]
      seed: [0, 1]                       # the run seed, as `bertology study run --seed`
    resources: {cpus: 1, gpus: 0}        # per cell (gpus: 1 by default where a cell's device is cuda)
    max_retries: 2                       # a cell whose worker dies or that raises unexpectedly

Each cell is an ordinary study run (:func:`bertology.studies.prepare_run` /
:func:`~bertology.studies.run_prepared`): the same run folder, manifest and tables as
``bertology study run``, identified by its content (config, seed, inputs, version), so a rerun of a
sweep skips the cells already complete and resumes an interrupted one from its saved steps. Every
cell is validated with the study's own rules before any cell runs.

Backends: ``local`` runs the cells one after another in this process; ``ray`` runs them as Ray
tasks with resource requests and ``max_retries``. A model's feature store is extracted once, by
its own task, before the cells that read it (a dependency; the store's folder lock is the
backstop). A cell that fails is recorded with its error and the other cells go on.

Tables (written atomically after every cell, so ``bertology sweep status`` and the dashboard see
progress): ``<results>/sweeps/<name>/cells.parquet`` (one row per cell: ``cell``, the grid values,
``status`` complete / failed / pending, ``run`` = ``<study>/<run_id>``, ``seconds``, ``error``)
and ``summary.parquet`` (each complete cell's headline figures, :func:`headline`: the grid values,
``run``, ``item``, ``figure``, ``value``, ``low``, ``high``). ``sweep.json`` holds the sweep as
run and ``logs/<run_id>.log`` each cell's log.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bertology import atomic, paths, results
from bertology.errors import ConfigError

__all__ = [
    "Sweep",
    "Cell",
    "WorkerContext",
    "parse_sweep",
    "expand_grid",
    "check_backend",
    "run_cells",
    "worker_context",
    "entered",
    "wall_seconds",
    "is_complete",
    "sweep_dir",
    "cells_table",
    "summary_table",
    "read_sweep_tables",
    "headline",
    "live_status",
    "ray_available",
    "BACKENDS",
]

BACKENDS = ("local", "ray")
SWEEP_FIELDS = ("name", "study", "description", "config", "config_file", "grid", "resources", "max_retries")
CELL_STATUSES = ("complete", "failed", "pending")


@dataclass(frozen=True)
class Sweep:
    """A sweep file, validated (:func:`parse_sweep`). ``grid``: ``{field: [values]}`` in the file's
    order (``seed`` is the run seed, any other key a config field of the study); ``cpus`` /
    ``gpus``: what each cell asks of Ray (``gpus`` None: 1 for a cell on cuda, else 0)."""

    name: str
    study: str
    config: dict[str, Any]
    grid: dict[str, list[Any]]
    config_file: str | None = None
    description: str = ""
    cpus: float = 1.0
    gpus: float | None = None
    max_retries: int = 2
    source: str = "<sweep>"


@dataclass
class Cell:
    """One cell of a sweep: its position in the grid, its grid values, its run folder and what the
    sweep's cell function takes (``run_cell(*args, store=...)``), the feature store it reads
    (``store``: a key shared by the cells that read the same store; ``store_args``: what
    ``extract_store(*store_args)`` takes) and the GPUs it asks of Ray."""

    index: int
    values: dict[str, Any]
    run_dir: Path
    args: tuple[Any, ...] = field(repr=False, default=())
    store: tuple[Any, ...] | None = None
    store_args: tuple[Any, ...] = field(repr=False, default=())
    gpus: float = 0.0

    @property
    def run(self) -> str:
        """``<study>/<run_id>``: the run folder relative to the results folder."""
        return f"{self.run_dir.parent.name}/{self.run_dir.name}"

    def label(self) -> str:
        return cell_label(self.values)


def cell_label(values: dict[str, Any]) -> str:
    """``model=a, seed=0``: a cell's grid values as a log line or an error names them."""
    return ", ".join(f"{k}={_shown(v)}" for k, v in values.items())


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


# --------------------------------------------------------------------------- the sweep file


def parse_sweep(
    data: dict[str, Any], *, fields: Collection[str], source: str = "<sweep>", base: Path | None = None
) -> Sweep:
    """A :class:`Sweep` from a sweep file's mapping. ``fields``: the config fields of its study
    (``seed`` is always a grid field); ``base``: the folder ``config_file`` is relative to. Errors
    name the file and the field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of field: value")
    unknown = sorted(set(data) - set(SWEEP_FIELDS))
    if unknown:
        raise ConfigError(f"{source}: unknown field {unknown[0]!r}; known fields: {', '.join(SWEEP_FIELDS)}")
    for required in ("name", "study", "grid"):
        if required not in data:
            raise ConfigError(f"{source}: field {required!r} is required")
    name = paths.plain_name(data["name"], f"{source}: sweep name")
    study = data["study"]
    if not isinstance(study, str):
        raise ConfigError(f"{source}: field 'study' must be a study name, got {study!r}")
    config = data.get("config") or {}
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: field 'config' must be a mapping of field: value, got {config!r}")
    grid = data["grid"]
    if not isinstance(grid, dict) or not grid:
        raise ConfigError(f"{source}: field 'grid' must be a mapping of field: [values] with at least one field")
    known = set(fields) | {"seed"}
    for key, values in grid.items():
        if key not in known:
            raise ConfigError(
                f"{source}: grid field {key!r} is not a field of study {study}; known fields: {', '.join(sorted(known))}"
            )
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{source}: grid field {key!r} must be a non-empty list of values, got {values!r}")
        if key in config:
            raise ConfigError(f"{source}: field {key!r} is both in 'config' and in 'grid'; give it in one")
        seen: list[Any] = []
        for value in values:
            if value in seen:
                raise ConfigError(f"{source}: grid field {key!r} repeats the value {value!r}")
            seen.append(value)
    if "seed" in grid and any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in grid["seed"]):
        raise ConfigError(f"{source}: grid field 'seed' must list integers >= 0, got {grid['seed']!r}")
    config_file = data.get("config_file")
    if config_file is not None:
        if not isinstance(config_file, str):
            raise ConfigError(f"{source}: field 'config_file' must be a path, got {config_file!r}")
        resolved = Path(config_file) if base is None else (base / config_file)
        if not resolved.is_file():
            raise ConfigError(f"{source}: config_file {config_file!r}: no such file ({resolved})")
        config_file = str(resolved.resolve())
    resources = data.get("resources") or {}
    if not isinstance(resources, dict) or set(resources) - {"cpus", "gpus"}:
        raise ConfigError(f"{source}: field 'resources' takes cpus and gpus (per cell), got {resources!r}")
    cpus = _number(resources.get("cpus", 1), f"{source}: resources.cpus", minimum=0, exclusive=True)
    gpus = resources.get("gpus")
    if gpus is not None:
        gpus = _number(gpus, f"{source}: resources.gpus", minimum=0)
    retries = data.get("max_retries", 2)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ConfigError(f"{source}: field 'max_retries' must be an integer >= 0, got {retries!r}")
    description = data.get("description") or ""
    return Sweep(
        name=name,
        study=study,
        config=dict(config),
        grid={k: list(v) for k, v in grid.items()},
        config_file=config_file,
        description=str(description),
        cpus=cpus,
        gpus=gpus,
        max_retries=retries,
        source=source,
    )


def _number(value: Any, what: str, *, minimum: float, exclusive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{what} must be a number, got {value!r}")
    if value < minimum or (exclusive and value == minimum):
        raise ConfigError(f"{what} must be {'>' if exclusive else '>='} {minimum}, got {value!r}")
    return float(value)


def expand_grid(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the last field varying fastest (as nested loops in
    the file's order)."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


# --------------------------------------------------------------------------- what runs on a worker


PASSED_ENVIRONMENT = (
    "BERTOLOGY_MODELS",
    "BERTOLOGY_PROGRESS",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_ENDPOINT",
)
"""The driver's settings a cell's process gets (where set): trained models, progress bars, the
Hugging Face hub's cache, offline switch and address. Never a credential (``HF_TOKEN``): a node
that downloads logs in on its own."""
FOLDER_VARIABLES = frozenset({"BERTOLOGY_MODELS", "HF_HOME", "HF_HUB_CACHE"})


@dataclass(frozen=True)
class WorkerContext:
    """What a cell's process takes from the driver: its folders (``BERTOLOGY_HOME``...: the
    feature stores and models every cell shares), its working folder (relative paths in a config)
    and its torch threads (the sweep's ``cpus`` per cell, on either backend, so both compute alike)."""

    environment: dict[str, str]
    cwd: str
    threads: int


def worker_context(sweep: Sweep) -> WorkerContext:
    """This driver's :class:`WorkerContext` for the cells of ``sweep``."""
    environment = {"BERTOLOGY_HOME": str(paths.home().resolve())}
    for name in PASSED_ENVIRONMENT:
        if os.environ.get(name):
            value = os.environ[name]
            environment[name] = str(Path(value).expanduser().resolve()) if name in FOLDER_VARIABLES else value
    return WorkerContext(environment, str(Path.cwd()), max(1, int(sweep.cpus)))


@contextmanager
def entered(context: WorkerContext) -> Iterator[None]:
    """Run the block in the driver's folders with the cell's thread count (restored after: the
    local backend runs cells in the driver's own process)."""
    import torch

    os.environ.update(context.environment)
    if Path(context.cwd).is_dir() and Path.cwd() != Path(context.cwd):
        os.chdir(context.cwd)  # relative model or corpus paths in the config mean the driver's folder
    before = torch.get_num_threads()
    torch.set_num_threads(context.threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def wall_seconds(run_dir: Path) -> float | None:
    """A complete run's ``wall_seconds`` (its manifest's), None when it has none."""
    try:
        value = results.read_manifest(run_dir).get("wall_seconds")
    except results.ResultError:
        return None
    return float(value) if isinstance(value, (int, float)) else None


def is_complete(run_dir: Path) -> bool:
    """The run folder has a readable manifest (its steps are all saved); never creates the folder."""
    if not (run_dir / "manifest.json").is_file():
        return False
    try:
        results.read_manifest(run_dir)
        return True
    except results.ResultError:
        return False


# --------------------------------------------------------------------------- the driver


def ray_available() -> bool:
    """Whether Ray can be imported (the ``sweep`` extra)."""
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def sweep_dir(name: str, results_root: str | Path | None = None) -> Path:
    """``<results>/sweeps/<name>``."""
    root = Path(results_root or paths.results_dir())
    return root / paths.SWEEPS_FOLDER / paths.plain_name(name, "sweep name")


@dataclass
class _Progress:
    """The sweep's rows as cells finish, written after each (atomically)."""

    sweep: Sweep
    cells: list[Cell]
    folder: Path
    rows: dict[int, dict[str, Any]]
    headlines: dict[str, pd.DataFrame] = field(default_factory=dict)

    def set(self, cell: Cell, status: str, seconds: float | None, error: str | None) -> None:
        self.rows[cell.index] = {"status": status, "seconds": seconds, "error": error}
        self.write()

    def write(self) -> None:
        cells = cells_table(self.sweep, self.cells, self.rows)
        results.write_table(self.folder, "cells", cells)
        results.write_table(
            self.folder, "summary", summary_table(self.sweep, self.cells, cells, self.folder.parents[1], self.headlines)
        )


def check_backend(backend: str | None, address: str | None, max_parallel: int | None) -> str:
    """The backend to use (None: ray where it is installed, else local); a ``ConfigError`` for a
    combination that cannot work (``--address`` without Ray...)."""
    backend = backend or ("ray" if ray_available() else "local")
    if backend not in BACKENDS:
        raise ConfigError(f"backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if backend == "local" and address is not None:
        raise ConfigError("--address joins a Ray cluster: use it with --backend ray")
    if max_parallel is not None and max_parallel < 1:
        raise ConfigError(f"--max-parallel must be >= 1, got {max_parallel}")
    if backend == "ray" and not ray_available():
        raise ConfigError(
            "--backend ray needs Ray: install the sweep extra (pip install -e '.[sweep]'), or use --backend local"
        )
    return backend


def run_cells(
    sweep: Sweep,
    cells: list[Cell],
    *,
    run_cell: Callable[..., dict[str, Any]],
    extract_store: Callable[..., dict[str, Any]],
    backend: str,
    address: str | None = None,
    max_parallel: int | None = None,
    results_root: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Run (or resume) ``cells`` (every one already validated); return the cells table.

    ``run_cell(*cell.args, store=outcome)`` runs one cell and returns ``{"status": "complete" |
    "failed", "seconds", "error"}`` (a failure it can name, returned; anything raised is retried up
    to ``max_retries`` times, then recorded failed); ``extract_store(*cell.store_args)`` makes the
    store a group of cells reads, once, before them, and its outcome is passed to each. On Ray
    (``backend="ray"``) both are Ray tasks with the sweep's resource requests; ``address``: a
    cluster to join (None starts a local Ray, or uses the one this process already started);
    ``max_parallel``: at most this many cells at once. Cells already complete are skipped
    (``"N of M cells complete"``). A sweep run by another driver at the same time is refused (the
    sweep folder's lock)."""
    folder = sweep_dir(sweep.name, results_root)
    folder.mkdir(parents=True, exist_ok=True)
    with atomic.folder_lock(folder, wait=False):
        atomic.remove_stale_temporaries(folder)
        atomic.write_json(folder / "sweep.json", {**asdict(sweep), "backend": backend, "cells": len(cells)})
        rows = {c.index: _initial_row(c) for c in cells}
        done = sum(r["status"] == "complete" for r in rows.values())
        log(f"sweep {sweep.name}: {done} of {len(cells)} cells complete")
        progress = _Progress(sweep, cells, folder, rows)
        progress.write()
        pending = [c for c in cells if rows[c.index]["status"] != "complete"]
        if pending:
            log(f"sweep {sweep.name}: running {len(pending)} cell(s) of {sweep.study} on {backend}")
            if backend == "local":
                _run_local(sweep, pending, progress, run_cell, extract_store, log)
            else:
                _run_ray(sweep, pending, progress, run_cell, extract_store, address, max_parallel, log)
        table = cells_table(sweep, cells, progress.rows)
        complete = int((table["status"] == "complete").sum())
        failed = table[table["status"] == "failed"]
        log(
            f"sweep {sweep.name}: {complete} of {len(cells)} cells complete"
            + (f", {len(failed)} failed" if len(failed) else "")
        )
        for r in failed.itertuples():
            log(f"  failed: {r.run}: {r.error}")
        log(f"tables: {folder / 'cells.parquet'}, {folder / 'summary.parquet'}")
    return table


def _initial_row(cell: Cell) -> dict[str, Any]:
    if is_complete(cell.run_dir):
        return {"status": "complete", "seconds": wall_seconds(cell.run_dir), "error": None}
    return {"status": "pending", "seconds": None, "error": None}


def _stores_needed(cells: list[Cell]) -> dict[tuple[Any, ...], Cell]:
    """The first cell of each feature store the pending cells read."""
    keys: dict[tuple[Any, ...], Cell] = {}
    for cell in cells:
        if cell.store is not None and cell.store not in keys:
            keys[cell.store] = cell
    return keys


def _run_local(
    sweep: Sweep,
    cells: list[Cell],
    progress: _Progress,
    run_cell: Callable[..., dict[str, Any]],
    extract_store: Callable[..., dict[str, Any]],
    log: Callable[[str], None],
) -> None:
    """One cell after another in this process; a cell that raises is tried again up to
    ``max_retries`` times."""
    stores: dict[tuple[Any, ...], dict[str, Any]] = {}
    for n, cell in enumerate(cells, 1):
        if cell.store is not None and cell.store not in stores:
            log(f"  feature store for {cell.label()} ...")
            try:
                stores[cell.store] = extract_store(*cell.store_args)
            except Exception as exc:  # noqa: BLE001 -- the cells that read it fail with it, the others go on
                stores[cell.store] = {"ok": False, "error": f"feature store: {type(exc).__name__}: {exc}"}
        log(f"  cell {n}/{len(cells)}: {cell.label()} -> {cell.run}")
        started = time.perf_counter()
        outcome: dict[str, Any] = {}
        for attempt in range(sweep.max_retries + 1):
            try:
                outcome = run_cell(*cell.args, store=stores.get(cell.store) if cell.store else None)
                break
            except Exception as exc:  # noqa: BLE001 -- any failure of one cell is recorded, the others go on
                if attempt == sweep.max_retries:
                    seconds = round(time.perf_counter() - started, 2)
                    outcome = {"status": "failed", "seconds": seconds, "error": f"{type(exc).__name__}: {exc}"}
                else:
                    log(f"    {type(exc).__name__}: {exc}; retrying ({attempt + 1} of {sweep.max_retries})")
        _record(progress, cell, outcome, log)


def _record(progress: _Progress, cell: Cell, outcome: dict[str, Any], log: Callable[[str], None]) -> None:
    progress.set(cell, outcome["status"], outcome.get("seconds"), outcome.get("error"))
    if outcome["status"] == "failed":
        log(f"    failed: {cell.label()}: {outcome['error']}")


def _run_ray(
    sweep: Sweep,
    cells: list[Cell],
    progress: _Progress,
    run_cell: Callable[..., dict[str, Any]],
    extract_store: Callable[..., dict[str, Any]],
    address: str | None,
    max_parallel: int | None,
    log: Callable[[str], None],
) -> None:
    """Cells as Ray tasks: each store's extraction is a task the cells that read it take as an
    argument (so they start once it is done); at most ``max_parallel`` cells in flight."""
    import ray

    started_here = False
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
        started_here = True
    resources = ray.cluster_resources()
    log(f"  ray: {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs")
    try:
        remote_extract = ray.remote(extract_store)
        remote_cell = ray.remote(run_cell)
        retries = {"max_retries": sweep.max_retries, "retry_exceptions": True}
        store_refs: dict[tuple[Any, ...], Any] = {}
        for key, first in _stores_needed(cells).items():
            store_refs[key] = remote_extract.options(
                num_cpus=sweep.cpus, num_gpus=first.gpus, name=f"store for {first.run}", **retries
            ).remote(*first.store_args)
        queue = list(cells)
        in_flight: dict[Any, tuple[Cell, float]] = {}
        limit = max_parallel or len(cells)
        while queue or in_flight:
            while queue and len(in_flight) < limit:
                cell = queue.pop(0)
                ref = remote_cell.options(num_cpus=sweep.cpus, num_gpus=cell.gpus, name=f"cell {cell.run}", **retries)
                ref = ref.remote(*cell.args, store=store_refs.get(cell.store) if cell.store else None)
                in_flight[ref] = (cell, time.perf_counter())
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                cell, started = in_flight.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 -- retries spent: the cell is failed, the others go on
                    seconds = round(time.perf_counter() - started, 2)
                    outcome = {"status": "failed", "seconds": seconds, "error": _ray_error(exc)}
                log(f"  {outcome['status']}: {cell.label()} -> {cell.run}")
                _record(progress, cell, outcome, log)
    finally:
        if started_here:
            ray.shutdown()


def _ray_error(exc: BaseException) -> str:
    """One line for a Ray task's failure: the cell's own exception where Ray kept it (a task that
    raised), else Ray's reason (a worker or node that died, after the retries)."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}".strip()


# --------------------------------------------------------------------------- tables


def _axis_columns(sweep: Sweep, cells: list[Cell]) -> dict[str, list[Any]]:
    """Each grid field's value per cell as a table column: lists as JSON text, a field of mixed
    value types as text."""
    columns = {}
    for key in sweep.grid:
        values = [c.values[key] for c in cells]
        values = [json.dumps(v) if isinstance(v, (list, dict)) else v for v in values]
        if len({type(v) for v in values} - {type(None)}) > 1:
            values = [None if v is None else str(v) for v in values]
        columns[key] = values
    return columns


def cells_table(sweep: Sweep, cells: list[Cell], rows: dict[int, dict[str, Any]]) -> pd.DataFrame:
    """One row per cell (``cell``, the grid fields, ``status``, ``run``, ``seconds``, ``error``)."""
    table = pd.DataFrame({"cell": [c.index for c in cells], **_axis_columns(sweep, cells)})
    table["status"] = [rows[c.index]["status"] for c in cells]
    table["run"] = [c.run for c in cells]
    table["seconds"] = pd.array([rows[c.index]["seconds"] for c in cells], dtype="Float64").astype(float)
    table["error"] = pd.array([rows[c.index]["error"] for c in cells], dtype="string")
    return table


SUMMARY_COLUMNS = ["run", "item", "figure", "value", "low", "high"]


def summary_table(
    sweep: Sweep,
    cells: list[Cell],
    cells_df: pd.DataFrame,
    results_root: Path,
    cache: dict[str, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """Each complete cell's headline figures (:func:`headline`) beside its grid values; ``cache``:
    figures already read, by run (a complete run's tables do not change)."""
    cache = {} if cache is None else cache
    axes = list(sweep.grid)
    parts = []
    for cell, row in zip(cells, cells_df.to_dict("records"), strict=True):
        if row["status"] != "complete":
            continue
        if cell.run not in cache:
            cache[cell.run] = headline(sweep.study, results_root / cell.run)
        figures = cache[cell.run].copy()
        if figures.empty:
            continue
        figures.insert(0, "run", cell.run)
        for i, key in enumerate(axes):
            figures.insert(i, key, [row[key]] * len(figures))
        parts.append(figures)
    if not parts:
        frame = pd.DataFrame({k: pd.Series(dtype=cells_df[k].dtype) for k in axes})
        for column in SUMMARY_COLUMNS:
            frame[column] = pd.Series(dtype=float if column in ("value", "low", "high") else object)
        return frame
    return pd.concat(parts, ignore_index=True)


def _rows(table: pd.DataFrame, item: str, figures: dict[str, tuple[str, str | None, str | None]]) -> pd.DataFrame:
    out = []
    for r in table.to_dict("records"):
        for figure, (value, low, high) in figures.items():
            if value not in r or r[value] is None or (isinstance(r[value], float) and math.isnan(r[value])):
                continue
            out.append(
                {
                    "item": str(r.get(item, "")) if item else "",
                    "figure": figure,
                    "value": float(r[value]),
                    "low": float(r[low]) if low and r.get(low) is not None else math.nan,
                    "high": float(r[high]) if high and r.get(high) is not None else math.nan,
                }
            )
    return pd.DataFrame(out, columns=["item", "figure", "value", "low", "high"])


def headline(study: str, run_dir: Path) -> pd.DataFrame:
    """A run's headline figures from its study's own tables (those ``bertology study run`` prints
    for a complete run): ``item`` (task, probe, method...), ``figure``, ``value``, ``low``, ``high``
    (the interval; NaN where the run has none). Empty for a study without headline figures here."""

    def table(name: str) -> pd.DataFrame | None:
        try:
            return results.read_table(run_dir, name)
        except results.ResultError:
            return None

    if study == "edge_probing" and (t := table("summary")) is not None:
        return _rows(
            t,
            "task",
            {
                "best_layer_score": ("best_layer_score", "best_layer_low", "best_layer_high"),
                "best_layer": ("best_layer", None, None),
                "mix_score": ("mix_score", "mix_low", "mix_high"),
            },
        )
    if study == "structural_probe" and (t := table("summary")) is not None and {"probe", "metric"} <= set(t.columns):
        if "encoder" in t.columns:
            t = t[t["encoder"] == "trained"]
        t = t.assign(item=t["probe"].astype(str) + " " + t["metric"].astype(str))
        return _rows(t, "item", {"score": ("score", "low", "high")})
    if study == "finetuning" and (t := table("finetune_scores")) is not None and {"task", "mode"} <= set(t.columns):
        t = t.assign(item=t["task"].astype(str) + " / " + t["mode"].astype(str))
        return _rows(t, "item", {"accuracy": ("accuracy", "low", "high")})
    if study == "head_types" and (t := table("attention_probe")) is not None:
        return _rows(t, "method", {"uas": ("uas", "uas_low", "uas_high")})
    if study == "alignment" and (t := table("precision")) is not None and "k" in t.columns:
        t = t[t["k"] == t["k"].min()]
        method = t["method"].astype(str) if "method" in t.columns else "mapping"
        t = t.assign(item=method + " / " + t["retrieval"].astype(str))
        return _rows(t, "item", {f"P@{int(t['k'].min()) if len(t) else 1}": ("value", "low", "high")})
    if study == "pruning" and (t := table("pruning_threshold_summary")) is not None:
        t = t.assign(item=t["method"].astype(str) + " @ " + t["tolerance"].astype(str))
        return _rows(t, "item", {"removable_share": ("removable_share", None, None)})
    if study == "contextuality" and (t := table("contextuality")) is not None and "layer" in t.columns:
        last = t[t["layer"] == t["layer"].max()]
        return _rows(last, "metric", {"adjusted_last_layer": ("adjusted", None, None)})
    return pd.DataFrame(columns=["item", "figure", "value", "low", "high"])


def read_sweep_tables(
    name: str, results_root: str | Path | None = None
) -> tuple[dict[str, Any], pd.DataFrame, pd.DataFrame]:
    """``(sweep.json, cells, summary)`` of a sweep that has run; a ``ConfigError`` naming the sweeps
    there when it has not."""
    folder = sweep_dir(name, results_root)
    if not (folder / "cells.parquet").is_file():
        known = sorted(p.name for p in folder.parent.glob("*") if (p / "cells.parquet").is_file())
        raise ConfigError(
            f"no sweep {name!r} under {folder.parent}"
            + (f"; sweeps there: {', '.join(known)}" if known else "; run one with `bertology sweep run SWEEP.yaml`")
        )
    try:
        spec = json.loads((folder / "sweep.json").read_text())
    except (OSError, ValueError):
        spec = {}
    cells = results.read_table(folder, "cells")
    summary = results.read_table(folder, "summary") if (folder / "summary.parquet").is_file() else pd.DataFrame()
    return spec, cells, summary


def live_status(cells: pd.DataFrame, results_root: str | Path | None = None) -> Iterator[str]:
    """Each pending cell's run folder status now (``running`` while a process holds its lock)."""
    from bertology.runs import run_status

    root = Path(results_root or paths.results_dir())
    for r in cells.itertuples():
        run_dir = root / str(r.run)
        if r.status == "pending" and run_dir.is_dir():
            yield run_status(run_dir)
        else:
            yield str(r.status)
