"""The Compare runs page: the main table of two runs of one study side by side (each page over one
study names its main table in its registry entry), what makes them incomparable, and for edge
probing the paired difference of their best layers."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from bertology.apps import figures, tables
from bertology.apps.locations import clean, describe, find_runs, model_name, run_label
from bertology.apps.pages.page import Page
from bertology.apps.pages.probing import paired_difference
from bertology.apps.ui import MISMATCH_WARNING, guard, load_table
from bertology.results import ResultError, read_manifest


def compare_page(page: Page) -> None:
    from bertology.apps.pages import main_tables  # the registry, which imports this module

    tables_of = main_tables()
    studies = sorted({p.parent.name for p in find_runs()} & set(tables_of))
    if not studies:
        st.info("No runs to compare yet.")
        return
    study = st.selectbox("study", studies)
    runs = find_runs(study)
    if len(runs) < 2:
        st.info(f"Only one `{study}` run: run the study again with another model, seed or config to compare.")
    c1, c2 = st.columns(2)
    a = c1.selectbox("run A", runs, index=0, format_func=describe)
    b = c2.selectbox("run B", runs, index=min(1, len(runs) - 1), format_func=describe)
    table = tables_of[study]
    try:
        mismatches = tables.comparison_mismatches(read_manifest(a), read_manifest(b))
    except ResultError:
        mismatches = []  # the side that cannot be read says so below
    if mismatches:
        st.warning(MISMATCH_WARNING + "; ".join(clean(m) for m in mismatches))
    for side, col, run in (("A", c1, a), ("B", c2, b)):
        with col, guard(f"table {table}", run):
            df = load_table(run, table)
            try:
                m = read_manifest(run)
                st.caption(f"model: {model_name(m)} · seed {m.get('seed')}")
            except ResultError as exc:
                st.error(clean(exc))
            if df is not None:
                if study == "edge_probing" and {"task", "layer", "value", "metric"} <= set(df.columns):
                    means = tables.layer_means(accuracy_per_layer(df))
                    st.plotly_chart(
                        figures.line_with_band(means, "layer", "task", run_label(run), "score"),
                        width="stretch",
                        key=f"cmp-{side}-{run_label(run)}",
                    )  # A and B may be one run
                st.dataframe(df, width="stretch")
    if study == "edge_probing" and a != b:
        paired_difference(a, b)


# --------------------------------------------------------------------------- data shaping


def accuracy_per_layer(scores: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``layer_scores`` table a two-run comparison draws: accuracy where the table has
    it (else every metric) and per-layer probes where it has a ``mode`` column with them."""
    part = scores[scores["metric"] == "accuracy"] if "accuracy" in set(scores["metric"]) else scores
    if "mode" in part.columns:
        part = part[part["mode"] == "per_layer"] if "per_layer" in set(part["mode"]) else part
    return part


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Compare runs",
    title="Compare two runs",
    intro="The main table of two runs of one study side by side (another model, seed or config).",
    render=compare_page,
    min_tables=2,
)
