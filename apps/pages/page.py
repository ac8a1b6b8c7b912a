"""One dashboard page's registry entry, :class:`Page`: what the dashboard, the screenshot driver and
the tests know of a page. Each page module defines its own entry, ``PAGE``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    """One dashboard page.

    ``key``: its name in the sidebar and in deep links (``?page=<key>``); ``title``: its header;
    ``intro``: the line under the header; ``render``: draws the rest of the page, given this entry;
    ``study``: the study whose runs it shows (None: a page over every study); ``main_table``: the
    table of that study "Compare runs" puts side by side; ``compare``: the page can show a second
    run of its study beside the first (``?compare=<study>/<run>``). ``min_charts``/``min_tables``:
    the Plotly charts and tables it shows at least on the quickstart's results (the screenshot
    driver and the browser tests wait for them), ``compare_charts`` its charts with a second run
    (None: ``min_charts``).
    """

    key: str
    title: str
    intro: str
    render: Callable[[Page], None]
    study: str | None = None
    main_table: str | None = None
    compare: bool = False
    min_charts: int = 0
    min_tables: int = 0
    compare_charts: int | None = None
