"""The Alignment page: P@k of a rotation between two embedding spaces -- per method with its
interval, and over k (the retrieval curve) --, its translations and the words that move most."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import figures, tables
from bertology.apps.figures import category_colours, esc
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_run, searchable_table

TRANSLATIONS_SHOWN = 300  # rows of the translations table on the page


def alignment_page(page: Page) -> None:
    run = pick_run(page.study, "align_run")
    if run is None:
        return
    precision = load_table(run, "precision")
    if has_columns_or_explain(precision, ["retrieval", "k", "value"], "precision", run):
        with guard("the precision charts", run):
            rows = precision_rows(precision)
            experiments = sorted(rows["experiment"].unique())
            if len(experiments) > 1:
                rows = rows[rows["experiment"] == st.selectbox("experiment", experiments, key="align_experiment")]
            colours = category_colours(rows["retrieval"])
            st.plotly_chart(precision_figure(rows, colours), width="stretch")
            if rows["k"].nunique() > 1:
                st.plotly_chart(retrieval_curve(rows), width="stretch")
        st.subheader("P@k on held-out dictionary")
        st.dataframe(tables.paper_table(precision, percent=("value", "coverage")), width="stretch", hide_index=True)
    comparison = optional_table(run, "method_comparison")
    if comparison is not None and not comparison.empty:
        st.caption("Methods compared on the same held-out words (paired bootstrap; McNemar's exact test):")
        st.dataframe(
            tables.paper_table(comparison, percent=("precision_a", "precision_b")), width="stretch", hide_index=True
        )
    translations = optional_table(run, "translations")
    if translations is not None:
        st.subheader("Translations")
        searchable_table(translations, "align_translation_search", "translations", shown=TRANSLATIONS_SHOWN, paper=True)
    moved = optional_table(run, "most_moved")
    if moved is not None:
        st.subheader("Words that move most between the two spaces")
        searchable_table(moved, "align_moved_search", "moved words", paper=True)


# --------------------------------------------------------------------------- data shaping


def precision_rows(precision: pd.DataFrame) -> pd.DataFrame:
    """The ``precision`` table (``retrieval, k, value``; ``method, low, high, experiment`` where
    present) with every one of those columns: ``method`` ``"mapping"`` and ``experiment`` ``""``
    where absent, ``low``/``high`` NaN (no interval); ``line`` = ``"<method> · <retrieval>"``."""
    rows = precision.copy()
    for column, default in (("method", "mapping"), ("experiment", ""), ("low", float("nan")), ("high", float("nan"))):
        if column not in rows.columns:
            rows[column] = default
    rows["method"], rows["retrieval"] = rows["method"].astype(str), rows["retrieval"].astype(str)
    rows["experiment"] = rows["experiment"].astype(str)
    rows["line"] = rows["method"] + " · " + rows["retrieval"]
    return rows.reset_index(drop=True)


# --------------------------------------------------------------------------- figures


def precision_figure(rows: pd.DataFrame, colours: dict[str, str] | None = None) -> go.Figure:
    """P@k at the smallest k (P@1) of each method, one colour per retrieval (nearest neighbour,
    CSLS), a point with its 95% interval and its value above it. ``rows``: :func:`precision_rows`."""
    k = int(rows["k"].min())
    part = rows[rows["k"] == k]
    colours = colours or category_colours(rows["retrieval"])
    fig = go.Figure()
    for retrieval, group in part.groupby("retrieval", sort=True):
        value = group["value"]
        fig.add_trace(
            go.Scatter(
                x=value,
                y=group["method"].map(esc),
                mode="markers+text",
                name=esc(retrieval),
                marker=dict(size=11, color=colours.get(str(retrieval))),
                error_x=dict(
                    type="data",
                    symmetric=False,
                    array=(group["high"].fillna(value) - value).tolist(),
                    arrayminus=(value - group["low"].fillna(value)).tolist(),
                    thickness=2,
                    width=6,
                ),
                text=[tables.format_percent(v) for v in value],
                textposition="top center",
            )
        )
    low, high = part["low"].fillna(part["value"]), part["high"].fillna(part["value"])
    fig.update_layout(
        scattermode="group",
        scattergap=0.5,
        title=f"P@{k} per method (95% interval over the held-out words)",
        xaxis=dict(title=f"P@{k}: share of held-out words translated right", tickformat=".0%"),
        xaxis_range=figures.zoomed_range(low, high),
        yaxis_title="mapping",
        legend_title_text="retrieval",
        height=200 + 70 * part["method"].nunique(),
    )
    return fig


def retrieval_curve(rows: pd.DataFrame) -> go.Figure:
    """P@k over k, one line per method and retrieval with its 95% band. ``rows``: :func:`precision_rows`."""
    fig = figures.line_with_band(
        rows.rename(columns={"value": "mean"}),
        "k",
        "line",
        "retrieval curve: P@k as more target words are searched",
        "P@k",
        x_title="k (nearest target words searched)",
    )
    fig.update_layout(yaxis_tickformat=".0%", legend_title_text="method · retrieval")
    fig.update_xaxes(tickvals=sorted(rows["k"].unique()))
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Alignment",
    title="Rotation alignment (Procrustes, self-learning, CSLS)",
    intro="Two embedding spaces mapped onto each other by a rotation learnt from a seed dictionary, "
    "scored by translation retrieval (P@k, CSLS). Mikolov et al. 2013; Conneau et al. 2018; "
    "Artetxe et al. 2017.",
    render=alignment_page,
    study="alignment",
    main_table="precision",
    min_tables=1,
)
