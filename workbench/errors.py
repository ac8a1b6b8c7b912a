"""Errors the workbench raises for bad input: each message names the file, line or sentence."""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base class: a user-facing error with a message that says what was looked for."""


class CorpusError(WorkbenchError):
    """Malformed or missing corpus input (names the file and line)."""


class ModelError(WorkbenchError):
    """Unknown model name or broken model directory."""


class StoreError(WorkbenchError):
    """Corrupt or incompatible feature store."""


class ConfigError(WorkbenchError):
    """Invalid configuration file (names the field)."""


class CheckpointError(WorkbenchError):
    """Missing or corrupt checkpoint."""
