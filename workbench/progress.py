"""Progress bars for every step longer than a few seconds, in a terminal and in a notebook, with one
switch to turn them all off.

:func:`progress_bar` wraps ``tqdm.auto`` (a widget in Jupyter, a text bar on a terminal, written to
standard error). The switch: :func:`set_progress` (``bertology.set_progress(False)`` in a notebook),
the environment variable ``BERTOLOGY_PROGRESS=0``, or ``bertology --no-progress ...``. A caller's own
``progress=False`` argument (e.g. :func:`bertology.store.extract`) turns a single bar off.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

_enabled: bool | None = None  # None: follow BERTOLOGY_PROGRESS


def set_progress(enabled: bool | None) -> None:
    """Turn every progress bar on or off for this process (``None``: back to ``BERTOLOGY_PROGRESS``)."""
    global _enabled
    _enabled = enabled


def progress_enabled() -> bool:
    """Whether bars are shown: :func:`set_progress`'s choice, else ``BERTOLOGY_PROGRESS`` (on unless
    ``0``, ``false``, ``no`` or ``off``)."""
    if _enabled is not None:
        return _enabled
    return os.environ.get("BERTOLOGY_PROGRESS", "1").strip().lower() not in ("0", "false", "no", "off")


def progress_bar(
    iterable: Iterable[Any] | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    enabled: bool = True,
    **kwargs: Any,
) -> Any:
    """A ``tqdm.auto`` bar over ``iterable`` (or a manual one of ``total`` steps: ``update``/``close``),
    shown unless the switch is off or ``enabled`` is False; it disappears when done (``leave=False``
    unless given)."""
    from tqdm.auto import tqdm

    kwargs.setdefault("leave", False)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=not (enabled and progress_enabled()), **kwargs)
