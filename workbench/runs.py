"""Result runs: a config, a seed, provenance, resumable steps, one manifest schema.

``StudyContext`` is what an analysis receives (its config, seed, run directory, and resumable
``step`` / ``steps`` / ``extra`` writers); ``run_analysis`` runs one analysis into a run directory
and writes the manifest. The studies (``bertology.studies``) and the CLI both go through it.

Run ids hash the config, the seed, the content of every model / corpus / file the config names
(:func:`bertology.fingerprints.input_fingerprints`) and the workbench version: a re-run with
identical inputs resumes (steps already saved are read back, not recomputed), edited inputs get a
new run. A run directory records what its steps were computed from (``inputs.json``); when a run
is pointed at a directory made from other inputs (an explicit run id), its saved steps are
discarded and recomputed, never mixed. ``force`` recomputes every step.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from bertology import __version__, atomic, paths, results
from bertology.errors import ConfigError, WorkbenchError
from bertology.numbering import NUMBERING
from bertology.validation import as_float, as_int, check_values, load_yaml

INPUTS_FILE = "inputs.json"


def validate_config(
    defaults: dict[str, Any], overrides: dict[str, Any], source: str, *, replaced: Any = ()
) -> dict[str, Any]:
    """Merge overrides into defaults; refuse unknown fields and wrong types, naming the field.

    ``replaced``: fields a later layer of the config gives anew (the command line's options over a
    config file): their values here are type-checked but not range-checked (a default model that is
    not installed is no error when ``--model`` names another)."""
    config = dict(defaults)
    for key, value in (overrides or {}).items():
        if key not in defaults:
            raise ConfigError(f"{source}: unknown field {key!r}; known fields: {', '.join(sorted(defaults))}")
        default = defaults[key]
        value = _as_default_number(default, value)
        if default is not None and value is not None:
            ok_types: tuple[type, ...] = (type(default),)
            if isinstance(default, float):
                ok_types = (float, int)
            if isinstance(default, (list, tuple)):
                ok_types = (list, tuple)
            if isinstance(default, bool) != isinstance(value, bool) or not isinstance(value, ok_types):
                what = {"float": "a number (e.g. 0.5, 5e-4)", "int": "an integer"}.get(
                    type(default).__name__, type(default).__name__
                )
                raise ConfigError(f"{source}: field {key!r} must be {what}, got {value!r}")
        config[key] = value
    skip = set(replaced)
    check_values({k: v for k, v in config.items() if k not in skip}, source)  # value ranges, per field
    return config


def _as_default_number(default: Any, value: Any) -> Any:
    """``value`` read as a number where the field's default is one (:func:`bertology.validation.as_float`
    for a float, :func:`~bertology.validation.as_int` for an int, item by item for a list of numbers):
    ``"5e-4"`` -> 0.0005, ``1e3`` -> 1000 for an int field. Anything else is returned unchanged (and
    refused by the type check, naming the field)."""

    def one(default_item: Any, item: Any) -> Any:
        if isinstance(default_item, bool) or isinstance(item, bool) or isinstance(item, int):
            return item  # an int stays an int (a float field takes it as it is)
        number = (
            as_float(item)
            if isinstance(default_item, float)
            else as_int(item)
            if isinstance(default_item, int)
            else None
        )
        return item if number is None else number

    if isinstance(default, (list, tuple)) and default and isinstance(value, (list, tuple)):
        return [one(default[0], item) for item in value]
    return one(default, value)


def read_config_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        data = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of field: value")
    return data


@dataclass
class StudyContext:
    """What a study's ``run`` receives: its config, seed, run directory and cached steps."""

    name: str
    config: dict[str, Any]
    seed: int
    run_dir: Path
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    log: Callable[[str], None] = print
    force: bool = False  # the run was asked to recompute: stores are fully verified too

    def step(self, name: str, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        """A resumable step: the table ``name`` is read back if a previous run saved it."""
        path = self.run_dir / f"{name}.parquet"
        if path.is_file():
            df = results.read_table(self.run_dir, name)
            self.log(f"  {name}: reused from {path}")
        else:
            self.log(f"  {name} ...")  # a line before a step that may take minutes
            started = time.perf_counter()
            df = compute()
            results.write_table(self.run_dir, name, df)
            self.log(f"  {name}: {len(df)} rows in {time.perf_counter() - started:.1f}s")
        self.tables[name] = df
        return df

    def steps(self, names: list[str], compute: Callable[[], dict[str, pd.DataFrame]]) -> dict[str, pd.DataFrame]:
        """A resumable step that makes several tables at once: ``compute`` runs only if one is missing."""
        if all((self.run_dir / f"{name}.parquet").is_file() for name in names):
            return {name: self.step(name, lambda: pd.DataFrame()) for name in names}
        self.log(f"  {', '.join(names)} ...")
        started = time.perf_counter()
        made = compute()
        missing = [name for name in names if name not in made]
        if missing:
            raise WorkbenchError(f"study {self.name}: step produced no table {missing}")
        for name in names:
            results.write_table(self.run_dir, name, made[name])
            self.tables[name] = made[name]
        self.log(f"  {', '.join(names)}: {time.perf_counter() - started:.1f}s")
        return {name: made[name] for name in names}

    def extra(self, name: str, compute: Callable[[], Any]) -> Any:
        """A resumable JSON artefact (plot-ready data)."""
        path = self.run_dir / f"{name}.json"
        if path.is_file():
            obj = json.loads(path.read_text())
        else:
            obj = compute()
            atomic.write_json(path, obj)
        self.extras[name] = obj
        return obj

    def record(self, **provenance: Any) -> None:
        """Add provenance (model and corpus fingerprints, store paths...) to the manifest."""
        self.provenance.update(provenance)


InputsFn = Callable[[dict[str, Any]], dict[str, Any]]


def reads_inputs(fingerprint: InputsFn) -> Callable[[Callable], Callable]:
    """Mark an analysis whose config names inputs that :func:`bertology.fingerprints.input_fingerprints`
    cannot see (a spaCy vector package by language, a FreeDict dictionary by language pair).

    ``fingerprint(config) -> {name: digest}`` (digests as
    :func:`bertology.fingerprints.files_input_digest` makes them) is called before the run starts;
    its digests join the run id and the manifest's ``inputs`` (:func:`analysis_inputs`).
    """

    def mark(analysis: Callable) -> Callable:
        vars(analysis)["fingerprint_inputs"] = fingerprint  # a function attribute, read by analysis_inputs
        return analysis

    return mark


def analysis_inputs(analysis: Callable, config: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Digests of the inputs ``analysis`` declared with :func:`reads_inputs` (``{}`` when none).

    An input that cannot be read (a vector package that is not installed) is a ``ConfigError``
    here, before any run folder exists, prefixed with ``source`` (the config's study and file)."""
    fingerprint = getattr(analysis, "fingerprint_inputs", None)
    if fingerprint is None:
        return {}
    try:
        return dict(fingerprint(config))
    except (WorkbenchError, OSError) as exc:
        raise ConfigError(f"{source}: {exc}" if source else str(exc)) from None


def _content_only(inputs: dict[str, Any]) -> dict[str, Any]:
    """Input digests without their paths: moving a model, corpus or dictionary does not change a run
    (everything else a digest holds -- kind, sha256, a package's name and version -- does)."""

    def strip(d):
        return None if d is None else {k: v for k, v in d.items() if k != "path"}

    return {k: [strip(d) for d in v] if isinstance(v, list) else strip(v) for k, v in inputs.items()}


def run_record(config: dict[str, Any], seed: int, inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a run's results depend on: config, seed, input contents (no paths), workbench version and
    the tables' layer and head numbering (:data:`bertology.numbering.NUMBERING`: steps saved under an
    older numbering are recomputed, never mixed with new ones)."""
    return {
        "config": config,
        "seed": seed,
        "inputs": _content_only(inputs or {}),
        "code_version": __version__,
        "numbering": NUMBERING,
    }


def config_hash(config: dict[str, Any], seed: int, inputs: dict[str, Any] | None = None) -> str:
    """sha256 of :func:`run_record`: the default run id is its first 10 digits and the seed."""
    record = run_record(config, seed, inputs)
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def _what_changed(before: dict[str, Any], now: dict[str, Any]) -> str:
    changes = []
    for section in ("config", "inputs"):
        old, new = before.get(section) or {}, now.get(section) or {}
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                changes.append(f"{section} {key!r}")
    for key in ("seed", "code_version", "numbering"):
        if before.get(key) != now.get(key):
            changes.append(f"{key} {before.get(key)!r} -> {now.get(key)!r}")
    return ", ".join(changes) or "the record"


def _clear_run_dir(run_dir: Path) -> int:
    """Delete a run directory's saved steps and manifest (everything but its lock); return how many."""
    import shutil

    n = 0
    for entry in run_dir.iterdir():
        if entry.name == atomic.LOCK_NAME:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        n += 1
    return n


def run_analysis(
    name: str,
    description: str,
    run: Callable[[StudyContext], None],
    config: dict[str, Any],
    *,
    seed: int,
    run_dir: Path,
    config_file: str | None = None,
    force: bool = False,
    log: Callable[[str], None] = print,
    inputs: dict[str, Any] | None = None,
) -> Path:
    """Run (or resume) one analysis into ``run_dir`` and write its manifest; return ``run_dir``.

    The one place a run's manifest is made: studies and the CLI both come through here, so every
    run, whichever way it was started, has the same manifest schema (study, run_id, config, seed,
    input fingerprints, code version, wall time, provenance recorded by the analysis, tables,
    extras, versions, git commit).

    inputs: fingerprints of what the config names (:func:`bertology.fingerprints.input_fingerprints`).
    Saved steps are reused only when config, seed, inputs and code version equal those recorded in
    the directory's ``inputs.json``; otherwise (or with ``force``) they are deleted and recomputed.
    A second process running the same directory waits for the first (a folder lock).
    """
    run_dir = Path(run_dir)
    refuse_linked_run_folder(run_dir)
    record = {"study": name, **run_record(config, seed, inputs)}
    fresh = not run_dir.exists()
    failed_before_any_step = False
    try:
        return _run_locked(
            name,
            description,
            run,
            config,
            seed=seed,
            run_dir=run_dir,
            config_file=config_file,
            force=force,
            log=log,
            inputs=inputs,
            record=record,
        )
    except BaseException:
        # a failed start (an unknown model, a corpus too small...) leaves no run folder behind
        failed_before_any_step = (
            fresh
            and run_dir.is_dir()
            and not any(p.name not in (atomic.LOCK_NAME, INPUTS_FILE) for p in run_dir.iterdir())
        )
        raise
    finally:
        if failed_before_any_step:
            import shutil

            shutil.rmtree(run_dir, ignore_errors=True)
            if run_dir.parent.is_dir() and not any(run_dir.parent.iterdir()):
                run_dir.parent.rmdir()


def refuse_linked_run_folder(run_dir: Path) -> None:
    """``ConfigError`` when the run folder or its study folder is a symbolic link: a run is never
    written through one (``study list`` and ``study clean`` do not follow them either), so nothing
    lands outside the results folder."""
    import os

    for folder, what in ((run_dir.parent, "study folder"), (run_dir, "run folder")):
        if folder.is_symlink():
            raise ConfigError(
                f"{folder}: the {what} is a symbolic link (to {os.readlink(folder)}); runs are not written "
                "through a link (study list and study clean do not follow it either): remove the link, or "
                "use a results folder that holds the study folder itself"
            )


def _run_locked(
    name: str,
    description: str,
    run: Callable[[StudyContext], None],
    config: dict[str, Any],
    *,
    seed: int,
    run_dir: Path,
    config_file: str | None,
    force: bool,
    log: Callable[[str], None],
    inputs: dict[str, Any] | None,
    record: dict[str, Any],
) -> Path:
    """:func:`run_analysis` under the run folder's lock."""
    with atomic.folder_lock(run_dir, on_wait=log):
        atomic.remove_stale_temporaries(run_dir)
        try:
            previous = json.loads((run_dir / INPUTS_FILE).read_text())
        except (OSError, ValueError):
            previous = None
        saved = [p for p in run_dir.iterdir() if p.name != atomic.LOCK_NAME]
        if force and saved:
            log(f"{name}: --force: discarding {_clear_run_dir(run_dir)} saved files in {run_dir}, recomputing")
        elif saved and previous is None:
            log(
                f"{name}: {run_dir} has no record of the inputs its steps were computed from; "
                f"discarding {_clear_run_dir(run_dir)} saved files and recomputing"
            )
        elif saved and previous != record:
            changed = _what_changed(previous, record)
            log(
                f"{name}: inputs changed since the steps in {run_dir} were computed ({changed}); "
                f"discarding {_clear_run_dir(run_dir)} saved files and recomputing"
            )
        elif (run_dir / "manifest.json").is_file():
            log(f"{name}: complete run found at {run_dir} (use --force to recompute)")
            return run_dir
        atomic.write_json(run_dir / INPUTS_FILE, record)
        ctx = StudyContext(name, config, seed, run_dir, log=log, force=force)
        log(f"{name}: running into {run_dir}")
        started = time.perf_counter()
        run(ctx)
        manifest = {
            "study": name,
            "description": description,
            "run_id": run_dir.name,
            "config": config,
            "config_file": config_file,
            "seed": seed,
            "inputs": inputs or {},
            "code_version": __version__,
            "numbering": NUMBERING,  # layers 1..L, heads 1..H in the tables (bertology.numbering)
            "wall_seconds": round(time.perf_counter() - started, 2),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **ctx.provenance,
        }
        results.write_results(run_dir, {}, manifest | {"tables": sorted(ctx.tables), "extras": sorted(ctx.extras)})
    log(f"{name}: done in {manifest['wall_seconds']}s → {run_dir}")
    return run_dir


def list_runs(results_root: str | Path | None = None) -> pd.DataFrame:
    """Every run directory under the results root: study, run_id, path, complete, status
    (``complete``; ``running`` while a process holds its lock; ``incomplete``: stopped before its
    manifest was written; ``unreadable: <why>``: a manifest that cannot be read; ``linked: <target>``:
    a study or run folder that is a symbolic link -- never followed, so nothing outside the results
    root is read, locked or removed; a linked study folder is one row with an empty run_id)."""
    root = Path(results_root or paths.results_dir())
    rows = []

    def row(study: Path, run: Path | None, status: str) -> dict[str, Any]:
        path = run if run is not None else study
        return {
            "study": study.name,
            "run_id": run.name if run is not None else "",
            "path": str(path),
            "complete": status == "complete",
            "status": status,
        }

    for study in sorted(root.glob("*")):  # as glob("*/*") did: hidden names left out
        if study.name == paths.SWEEPS_FOLDER and not study.is_symlink():
            continue  # sweeps' own tables (bertology.sweeps), not runs: never listed nor cleaned
        if study.is_symlink():
            if study.is_dir():
                rows.append(row(study, None, _linked(study)))
            continue
        if not study.is_dir():
            continue
        for d in sorted(study.glob("*")):
            if d.is_symlink():
                if d.is_dir():
                    rows.append(row(study, d, _linked(d)))
            elif d.is_dir():
                rows.append(row(study, d, run_status(d)))
    return pd.DataFrame(rows, columns=["study", "run_id", "path", "complete", "status"])


def _linked(path: Path) -> str:
    """The status of a study or run folder that is a symbolic link (see :func:`list_runs`)."""
    import os

    return f"linked: a symbolic link to {os.readlink(path)}, not followed"


def is_linked(status: str) -> bool:
    """Whether a :func:`list_runs` status is that of a symbolic link (never followed)."""
    return status.startswith("linked")


def removable(status: str) -> bool:
    """Whether ``study clean`` removes a run of this :func:`list_runs` status: incomplete or
    unreadable; never a complete, running or linked one."""
    return status == "incomplete" or status.startswith("unreadable")


def run_status(run_dir: Path) -> str:
    """``complete``, ``running``, ``incomplete`` or ``unreadable: <why>`` (see :func:`list_runs`)."""
    if (run_dir / "manifest.json").is_file():
        try:
            results.read_manifest(run_dir)
            return "complete"
        except results.ResultError as exc:
            return f"unreadable: {exc}"
    try:
        with atomic.folder_lock(run_dir, wait=False):
            return "incomplete"
    except atomic.LockHeld:
        return "running"


def remove_unfinished_runs(
    results_root: str | Path | None = None, *, on_skip: Callable[[Path, str], None] | None = None
) -> list[Path]:
    """Delete every incomplete or unreadable run folder under the results root (never a running
    one: each is removed under its lock; never a symbolic link, nor anything it points to); returns
    the folders removed. A folder that cannot be removed is passed to ``on_skip(path, why)`` and the
    others are still removed."""
    import shutil

    removed = []
    for row in list_runs(results_root).itertuples():
        path = Path(row.path)
        if is_linked(row.status):
            if on_skip is not None:
                on_skip(path, row.status)
            continue
        if not removable(row.status):
            continue
        if path.is_symlink() or path.parent.is_symlink():  # made a link since it was listed
            if on_skip is not None:
                on_skip(path, "a symbolic link, not followed")
            continue
        try:
            with atomic.folder_lock(path, wait=False):
                shutil.rmtree(path)
        except atomic.LockHeld:
            continue
        except OSError as exc:
            if on_skip is not None:
                on_skip(path, f"cannot remove it: {exc.strerror or exc}")
            continue
        removed.append(path)
    return removed


def model_corpus_store(
    ctx: StudyContext,
    *,
    attentions: bool = False,
    limit_key: str = "limit",
    check_corpus: Callable[[Any], None] | None = None,
):
    """``(LoadedModel, Corpus, FeatureStore)`` for ``ctx.config['model' | 'corpus' | limit_key]``
    (and ``'pooling'``; the model on ``'device'``, cpu when absent, and the store extracted there),
    recorded in the run's provenance. The store is cached on disk.
    ``check_corpus(corpus)`` runs before anything is extracted: an analysis that needs a minimum
    of cases refuses a corpus too small for it there (naming the option), not after computing."""
    from bertology.corpus import load_corpus
    from bertology.models import load_model, resolve_device
    from bertology.store import extract

    cfg = ctx.config
    # the config's ``device`` (cpu by default): where the model runs, so where the store is extracted
    lm = load_model(cfg["model"], attentions=True, device=resolve_device(cfg.get("device") or "cpu"))
    corpus = load_corpus(cfg["corpus"], limit=cfg.get(limit_key))
    if check_corpus is not None:
        check_corpus(corpus)
    store = extract(lm, corpus, attentions=attentions, pooling=cfg.get("pooling", "first"), verify=ctx.force)
    ctx.record(
        model={**lm.record(), "tokenizer_fingerprint": store.manifest["model"].get("tokenizer_fingerprint")},
        corpus={
            "name": corpus.name,
            "path": corpus.path,
            "fingerprint": corpus.fingerprint,
            "sentences": len(corpus),
            "words": corpus.n_words,
            "sources": corpus.sources,
            "licence": corpus.licence,
        },
        store=str(store.path),
        compute=compute_record(next(lm.model.parameters()).device, store.manifest["settings"]),
    )
    return lm, corpus, store


def compute_record(device: Any, settings: dict[str, Any]) -> dict[str, str]:
    """``{"device", "precision", "storage"}`` a store was computed with: the model's device, the forward's
    dtype (float32, or the autocast dtype) and the on-disk dtype -- what the manifest's machine line shows."""
    return {
        "device": str(device),
        "precision": settings.get("amp_dtype") or "float32",
        "storage": settings.get("storage", "float32"),
    }
