"""Where the workbench keeps models, feature stores and results.

``BERTOLOGY_HOME`` (default ``./.cache/bertology``) holds feature stores and trained models;
``BERTOLOGY_RESULTS`` (default ``./results``) holds study runs.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("BERTOLOGY_HOME", Path.cwd() / ".cache" / "bertology"))


def stores_dir() -> Path:
    return home() / "stores"


def models_dir() -> Path:
    """Root of the project's own trained models: ``<models_dir>/<run>/checkpoint-<step>/``."""
    return Path(os.environ.get("BERTOLOGY_MODELS", home() / "models"))


def results_dir() -> Path:
    return Path(os.environ.get("BERTOLOGY_RESULTS", Path.cwd() / "results"))


def package_data() -> Path:
    return Path(__file__).resolve().parent / "data"


def shipped_models_dir() -> Path:
    """Models the workbench made itself and ships in the package (release folders, see
    ``bertology.pretraining.release``)."""
    return package_data() / "models"

