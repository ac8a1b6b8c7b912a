"""Reproducible studies: one module per classic experiment, with a config file and a seed.

A study is a module ``bertology.studies.<name>`` defining ``DESCRIPTION`` (one line), ``DEFAULTS``
(the config schema with default values) and ``run(ctx: StudyContext) -> None``, a thin layer over
one library function per analysis. Its config ``configs/<name>.yaml`` (shipped inside the package)
overrides the defaults; unknown or mistyped fields are refused with the field named. Runs land in
``results/<study>/<run-id>/`` through :func:`bertology.runs.run_analysis`, which writes the one
manifest schema shared with the CLI's analysis commands.

The default run id hashes the config, the seed, the content of every model, corpus and file the
config names, the content of what the analysis declares it reads (:func:`bertology.runs.reads_inputs`:
vector packages, dictionaries) and the workbench version (:func:`bertology.runs.config_hash`): identical inputs
resume the same run, an edited corpus or model starts a new one. Study names and run ids are plain
names (no path separators), so a run never writes outside ``<results>/<study>/``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import ModuleType
from typing import Any

from bertology import paths
from bertology.errors import WorkbenchError
from bertology.fingerprints import input_fingerprints
from bertology.runs import analysis_inputs, config_hash, read_config_file, run_analysis, validate_config

__all__ = [
    "list_studies",
    "load_study",
    "run_study",
    "prepare_run",
    "run_prepared",
    "PreparedRun",
    "load_sweep",
    "run_sweep",
    "prepare_cells",
    "config_dir",
    "default_config_file",
    "resolve_config_file",
]


def config_dir() -> Path:
    """The folder of the shipped study configs (inside the installed package)."""
    return Path(str(resources.files(__name__) / "configs"))


def default_config_file(name: str, variant: str | None = None) -> Path:
    """``configs/<name>.yaml`` or ``configs/<variant>/<name>.yaml`` (e.g. the quickstart's sizes)."""
    return config_dir() / (f"{variant}/{name}.yaml" if variant else f"{name}.yaml")


SOURCE_CONFIG_PREFIX = "studies/configs/"  # where the shipped configs sit in a source checkout


def resolve_config_file(config_file: str | Path) -> Path:
    """``config_file`` as given when it is a file; else a shipped config by its name under
    ``configs/`` (``tour/feature_combinations``, ``quickstart/compression.yaml``, or the checkout's
    path ``studies/configs/patching.yaml``), so that the commands the docs and the dashboard suggest
    work from any folder of an installed package. A name that is neither is returned as given (the
    reader then says that no such file exists)."""
    path = Path(config_file)
    if path.is_file():
        return path
    name = str(config_file).replace("\\", "/")
    name = name[len(SOURCE_CONFIG_PREFIX) :] if name.startswith(SOURCE_CONFIG_PREFIX) else name
    shipped = config_dir() / (name if name.endswith((".yaml", ".yml")) else f"{name}.yaml")
    return shipped if name and ".." not in Path(name).parts and shipped.is_file() else path


def _names() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def list_studies() -> dict[str, str]:
    """``{name: description}`` of every study module."""
    return {name: load_study(name).DESCRIPTION for name in _names()}


def load_study(name: str) -> ModuleType:
    """The study module ``name``; an unknown name is refused with the list of studies."""
    paths.plain_name(name, "study name")
    if name not in _names():
        raise WorkbenchError(f"unknown study {name!r}; available: {', '.join(_names())}")
    module = importlib.import_module(f"{__name__}.{name}")
    for attr in ("DEFAULTS", "DESCRIPTION", "run"):
        if not hasattr(module, attr):
            raise WorkbenchError(f"study {name}: a study must define {attr}")
    return module


@dataclass(frozen=True)
class PreparedRun:
    """A study run validated and identified, not started (:func:`prepare_run`): its module, merged
    config, run seed, input fingerprints, config source and run folder."""

    name: str
    module: ModuleType
    config: dict[str, Any]
    seed: int
    inputs: dict[str, Any]
    source: str
    run_dir: Path


def prepare_run(
    name: str,
    *,
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    seed: int | None = None,
    run_id: str | None = None,
    results_root: str | Path | None = None,
) -> PreparedRun:
    """Everything :func:`run_study` does before any work: load the study, merge and validate its
    config (refusing a bad field with its name), fingerprint its inputs and name its run folder.
    A sweep prepares every cell this way before running any (:mod:`bertology.sweeps`)."""
    module = load_study(name)
    if run_id is not None:
        paths.plain_name(run_id, "run id")
    default_file = default_config_file(name)
    config_file = resolve_config_file(config_file) if config_file else None
    file_cfg = (
        read_config_file(config_file)
        if config_file
        else (read_config_file(default_file) if default_file.is_file() else {})
    )
    source = str(config_file or default_file)
    overrides = overrides or {}
    # the file's values are range-checked (the model resolved...) only where no override replaces
    # them: `--model DIR` works where the file's default model is not installed
    config = validate_config(module.DEFAULTS, file_cfg, f"{name}: {source}", replaced=overrides)
    config = validate_config(module.DEFAULTS, {**config, **overrides}, f"{name}: command line")
    seed = int(config.get("seed", 0) if seed is None else seed)
    # what the config names (models, corpora, files) and what the analysis declares it reads
    # (vector packages, dictionaries: bertology.runs.reads_inputs)
    inputs = {**input_fingerprints(config), **analysis_inputs(module.run, config, f"{name}: {source}")}
    run_id = run_id or f"{config_hash(config, seed, inputs)[:10]}-seed{seed}"
    run_dir = paths.run_dir(results_root or paths.results_dir(), name, run_id)
    return PreparedRun(name, module, config, seed, inputs, source, run_dir)


def run_study(
    name: str,
    *,
    config_file: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
    seed: int | None = None,
    run_id: str | None = None,
    results_root: str | Path | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
) -> Path:
    """Run (or resume) a study; return its run directory ``<results_root>/<name>/<run_id>``.

    Config: the study's ``DEFAULTS``, then ``config_file`` (default: the shipped
    ``configs/<name>.yaml``), then ``overrides`` (the CLI's options), each validated field by field.
    ``run_id``: a plain name (default: hash of config, seed, input contents and version + seed).
    ``force``: recompute every step (and fully verify the feature stores it reads).
    """
    prepared = prepare_run(
        name, config_file=config_file, overrides=overrides, seed=seed, run_id=run_id, results_root=results_root
    )
    return run_prepared(prepared, force=force, log=log)


def run_prepared(prepared: PreparedRun, *, force: bool = False, log: Callable[[str], None] = print) -> Path:
    """Run (or resume) a run made by :func:`prepare_run`; return its run directory."""
    name, module = prepared.name, prepared.module
    before = _manifest_time(prepared.run_dir)
    run_dir = run_analysis(
        name,
        module.DESCRIPTION,
        module.run,
        prepared.config,
        seed=prepared.seed,
        run_dir=prepared.run_dir,
        config_file=prepared.source,
        force=force,
        log=log,
        inputs=prepared.inputs,
    )
    if before is not None and _manifest_time(run_dir) == before:  # found complete, not recomputed
        from bertology.studies._summaries import summary_lines

        for line in summary_lines(name, run_dir):
            log(line)
    return run_dir


def _manifest_time(run_dir: Path) -> int | None:
    """When a run folder's manifest was last written (ns), None when it has none."""
    try:
        return (Path(run_dir) / "manifest.json").stat().st_mtime_ns
    except OSError:
        return None


# sweeps: grids of study runs, locally or on Ray (the engine and tables are bertology.sweeps)
from bertology.studies._sweeps import load_sweep, prepare_cells, run_sweep  # noqa: E402
