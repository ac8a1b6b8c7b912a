"""The Feature combinations page (Devlin et al. 2019, Table 7): the score of each way of feeding
frozen layers to a task model."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import tables
from bertology.apps.figures import esc, zoomed_range
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, pick_run
from bertology.results import mean_ci


def combinations_page(page: Page) -> None:
    run = pick_run(page.study, "combo_run")
    if run is None:
        return
    df = load_table(run, "combinations")
    if has_columns_or_explain(df, ["combination", "task", "metric", "value"], "combinations", run):
        with guard("the combinations", run):
            metric = st.selectbox("metric", sorted(df["metric"].unique()))
            means = combination_means(df, metric)
            st.plotly_chart(combinations_figure(means, metric), width="stretch")
            st.dataframe(tables.paper_table(means), width="stretch", hide_index=True)


# --------------------------------------------------------------------------- data shaping


def combination_means(combinations: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One metric of the ``combinations`` table (``combination, task, metric, value``), mean over
    seeds per task and combination: ``task, combination, mean, sd, n, ci95``, best first within
    each task."""
    means = mean_ci(combinations[combinations["metric"] == metric], ["task", "combination"])
    return means.sort_values(["task", "mean"], ascending=[True, False], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- figures


def combinations_figure(means: pd.DataFrame, metric: str) -> go.Figure:
    """Horizontal bars with 95% error bars: the score of each feature combination, one colour per
    task, best combination (mean over tasks) on top; the axis covers the scores' range, not 0..1,
    and says where it starts. ``means``: ``task, combination, mean, ci95`` (:func:`combination_means`)."""
    shown = means.assign(task=means["task"].map(esc), combination=means["combination"].map(esc))
    order = list(shown.groupby("combination")["mean"].mean().sort_values(ascending=False).index)
    ci = shown["ci95"].fillna(0) if "ci95" in shown else 0
    axis = zoomed_range(
        (shown["mean"] - ci).clip(lower=0) if shown["mean"].min() >= 0 else shown["mean"] - ci, shown["mean"] + ci
    )
    fig = px.bar(
        shown,
        y="combination",
        x="mean",
        error_x="ci95" if "ci95" in shown else None,
        color="task",
        barmode="group",
        orientation="h",
        text=shown["mean"].map(lambda v: f"{v:.3f}"),
        category_orders={"combination": order},
        title=f"{esc(metric)} by feature combination (best on top)",
    )
    fig.update_layout(
        xaxis=dict(range=axis, title=f"{esc(metric)} (axis starts at {axis[0]:.3f}, not 0)"),
        yaxis_title="",
        height=160 + 34 * len(order) * max(1, shown["task"].nunique()),
    )
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Feature combinations",
    title="Feature-based combinations (Devlin et al. 2019, Table 7)",
    intro="Which layers to feed a task model when BERT stays frozen: last layer, sums and "
    "concatenations of the last four... Devlin et al. 2019, *BERT*, Table 7.",
    render=combinations_page,
    study="feature_combinations",
    main_table="combinations",
    min_charts=1,
    min_tables=1,
)
