"""Where the workbench keeps models, feature stores and results.

``BERTOLOGY_HOME`` (default ``./.cache/bertology``) holds feature stores and trained models;
``BERTOLOGY_RESULTS`` (default ``./results``) holds study runs.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from bertology.errors import ConfigError

_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]{0,199}$")


def home() -> Path:
    return Path(os.environ.get("BERTOLOGY_HOME", Path.cwd() / ".cache" / "bertology"))


def stores_dir() -> Path:
    return home() / "stores"


def models_dir() -> Path:
    """Root of the project's own trained models: ``<models_dir>/<run>/checkpoint-<step>/``."""
    return Path(os.environ.get("BERTOLOGY_MODELS", home() / "models"))


SWEEPS_FOLDER = "sweeps"
"""``<results>/sweeps/<name>/``: a sweep's own tables (:mod:`bertology.sweeps`), not a study's runs."""


def results_dir() -> Path:
    return Path(os.environ.get("BERTOLOGY_RESULTS", Path.cwd() / "results"))


def package_data() -> Path:
    return Path(__file__).resolve().parent / "data"


def shipped_models_dir() -> Path:
    """Models the workbench made itself and ships in the package (release folders, see
    ``bertology.pretraining.release``)."""
    return package_data() / "models"


def plain_name(value: object, what: str) -> str:
    """``value`` if it is a plain folder name (letters, digits and ``. _ - @ + =``, starting with a
    letter or digit: no ``/``, ``\\``, ``..`` or absolute path), else a :class:`ConfigError` naming
    ``what`` -- so a run id or a study name can never point outside its folder."""
    if not isinstance(value, str) or not _PLAIN_NAME.match(value):
        raise ConfigError(
            f"{what} {value!r} is not a plain name: use letters, digits and . _ - @ + = only "
            "(no path separators, no leading dot), so nothing is written outside its folder"
        )
    return value


def run_dir(results_root: str | os.PathLike, study: str, run_id: str) -> Path:
    """``<results_root>/<study>/<run_id>``, both names checked with :func:`plain_name`."""
    return Path(results_root) / plain_name(study, "study name") / plain_name(run_id, "run id")


def relative_if_inside(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when it lies inside it (a run recording its own sub-folders, so
    the run folder can move), else absolute as given."""
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def dashboard_command(port: int) -> list[str]:
    """The command that serves the dashboard shipped in the package (``bertology/apps/dashboard.py``)
    on ``127.0.0.1:port``: headless, no usage statistics, the viewer's toolbar. ``bertology
    dashboard`` and the browser tests start it."""
    import sys
    from importlib import resources

    return [
        sys.executable,
        "-m",
        "bertology.apps.serve",
        "run",
        str(resources.files("bertology.apps") / "dashboard.py"),
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]
