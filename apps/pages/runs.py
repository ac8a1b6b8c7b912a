"""The Runs page: every study run under the results folder, complete or not, with its seed,
model, the machine it was computed on and its tables."""

from __future__ import annotations

import streamlit as st

from bertology.apps.locations import HIDDEN_HINT, find_runs, runs_overview, shown_root, split_runs
from bertology.apps.pages.page import Page


def runs_page(page: Page) -> None:
    every = find_runs(include_unfinished=True)
    complete, hidden = split_runs(every)
    show_all = bool(hidden) and st.checkbox(f"show the {len(hidden)} incomplete or unreadable run(s)", value=False)
    runs = every if show_all else complete
    if hidden and not show_all:
        st.caption(f"{len(hidden)} incomplete or unreadable run(s) hidden on every page; {HIDDEN_HINT}")
    if not runs:
        st.info(f"No results under {shown_root()}. Create some with `bertology study run quickstart`.")
        return
    st.dataframe(runs_overview(runs), width="stretch", hide_index=True)


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Runs",
    title="Runs",
    intro="Every study run under the results folder, newest first: its seed, model, the machine it was "
    "computed on and its tables. "
    "A run whose manifest cannot be read says why; the other runs still show.",
    render=runs_page,
    min_tables=1,
)
