"""The dashboard's pages: one registry, :data:`PAGES`, read by the dashboard (navigation, dispatch,
"Compare runs"), the screenshot driver and the tests.

One module per page holds all of it: its render function, the data shaping and the figures only
it shows, and its registry entry ``PAGE`` (a :class:`Page`: its name in the sidebar and deep
links, title, "what am I looking at" line, the study whose runs it shows, that study's main table,
and the function that renders the rest of it). Adding a page = writing its module and adding its
``PAGE`` here. Shaping and figures that several pages use are in :mod:`bertology.apps.tables` and
:mod:`bertology.apps.figures`; the Streamlit pieces every page uses in :mod:`bertology.apps.ui`.

Render functions only pick runs and widgets, call the shaping functions and figures, and show the
result; the dashboard has already written the page's title and line.
"""

from __future__ import annotations

from bertology.apps.pages import (
    alignment,
    combinations,
    compare,
    compression,
    embeddings,
    finetuning,
    heads,
    live,
    patching,
    pretraining,
    probing,
    pruning,
    runs,
    semantic_change,
    structural,
    sweeps,
)
from bertology.apps.pages.page import Page

PAGES: tuple[Page, ...] = (
    runs.PAGE,
    live.PAGE,
    probing.PAGE,
    combinations.PAGE,
    structural.PAGE,
    heads.PAGE,
    pruning.PAGE,
    patching.PAGE,
    embeddings.PAGE,
    alignment.PAGE,
    semantic_change.PAGE,
    pretraining.PAGE,
    finetuning.PAGE,
    compression.PAGE,
    compare.PAGE,
    sweeps.PAGE,
)
PAGE_BY_KEY: dict[str, Page] = {p.key: p for p in PAGES}


def main_tables() -> dict[str, str]:
    """``{study: main table}`` of every page over one study (what "Compare runs" shows)."""
    return {p.study: p.main_table for p in PAGES if p.study is not None and p.main_table is not None}
