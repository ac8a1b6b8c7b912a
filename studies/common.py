"""Helpers the study scripts share."""

from __future__ import annotations

from typing import Any


def probe_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """ProbeConfig keyword arguments a study config may set."""
    return {"max_epochs": cfg["max_epochs"], "probe": cfg["probe"], "pooling": cfg["span_pooling"]}
