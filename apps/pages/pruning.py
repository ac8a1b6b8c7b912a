"""The Pruning page (Michel et al. 2019, Voita et al. 2019): the metric as heads are removed in
each order, with the thresholds, head importance and L0 gates. :func:`pruning_sections` is also the
first part of the Compression page."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from bertology.apps import figures, tables
from bertology.apps.figures import esc
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_run
from bertology.results import mean_ci


def pruning_page(page: Page) -> None:
    run = pick_run(page.study, "prune_run")
    if run is None:
        return
    sign = pruning_sections(run)
    gates = optional_table(run, "l0_gates")
    if has_columns_or_explain(gates, ["lam", "layer", "head", "p_open", "kept"], "l0_gates", run):
        st.subheader("L0 gates")
        with guard("the L0 gates", run):
            st.plotly_chart(l0_gates_figure(first_seed(gates)), width="stretch")
        evaluation = optional_table(run, "l0_evaluation")
        if evaluation is not None:
            st.caption("what each λ's gates cost, on test with 95% intervals (dev alongside):")
            st.dataframe(shown_table(evaluation, sign), width="stretch", hide_index=True)
        with st.expander("gates table"):
            st.dataframe(tables.paper_table(gates), width="stretch", hide_index=True)


def pruning_sections(run: Path) -> float:
    """The pruning curves with their thresholds, the threshold summary (intervals over random
    orders), the order comparison, the importance map and the real-removal cost of one run, each
    on its metric's own scale (a loss as the loss, :func:`pruning_scale`). Returns that scale's
    sign (-1: the run stores minus a loss)."""
    curves = load_table(run, "pruning_curves")
    thresholds = optional_table(run, "pruning_thresholds")
    sign = pruning_scale(curves)[0] if curves is not None and len(curves) else 1.0
    if has_columns_or_explain(curves, ["method", "share_removed", "value"], "pruning_curves", run):
        with guard("the pruning curves", run):
            sign, y_title = pruning_scale(curves)
            fig = figures.line_with_band(
                on_own_scale(pruning_means(curves), sign),
                "share_removed",
                "method",
                "test metric vs share of heads removed",
                y_title,
            )
            if thresholds is not None and {"method", "tolerance", "removable_share"} <= set(thresholds.columns):
                add_threshold_marks(fig, threshold_marks(thresholds, sign))
            fig.update_xaxes(tickformat=".0%", title="share of heads removed")
            st.plotly_chart(fig, width="stretch")
            st.caption(
                "Markers: how many heads each order removes before the metric on dev worsens by more than "
                "the tolerance (thresholds chosen on dev, the curve and the markers' height read on test)."
            )
    summary = optional_table(run, "pruning_threshold_summary")
    if summary is not None:
        st.subheader("Removable share per order")
        st.caption("Mean over the order's runs (random: one per seed) with a t-interval; one order has none.")
        st.dataframe(shown_table(summary, sign), width="stretch", hide_index=True)
    if thresholds is not None:
        with st.expander("thresholds of every order"):
            st.dataframe(shown_table(thresholds, sign), width="stretch", hide_index=True)
    comparison = optional_table(run, "pruning_order_comparison")
    if comparison is not None:
        st.caption(
            "Orders compared on the same test sentences (paired bootstrap); difference = A − B"
            + (" in loss (negative: A's loss is lower)." if sign < 0 else ".")
        )
        st.dataframe(shown_table(comparison, sign), width="stretch", hide_index=True)
    imp = load_table(run, "importance")
    if has_columns_or_explain(imp, ["layer", "head", "importance"], "importance", run):
        with guard("the importance map", run):
            st.plotly_chart(importance_figure(importance_grid(imp)), width="stretch")
    cost = optional_table(run, "pruning_cost")
    if cost is not None:
        st.subheader("pruning cost")
        if "timing_rounds" in cost.columns:
            st.caption(
                "The heads really removed. Time: one warm-up pass, then the full and the pruned model in turns "
                "for each timing round; seconds are the median over rounds, the time saved its mean with a 95% "
                "interval over rounds (on this run's machine, under its load)."
            )
        else:
            st.caption(
                "Time from a run written before timing was warmed up and repeated in turns: the first pass may "
                "carry start-up cost, so the time saved is not a measurement to rely on."
            )
        st.dataframe(shown_table(cost, sign), width="stretch", hide_index=True)
    return sign


# --------------------------------------------------------------------------- data shaping


def grid_points(curves: pd.DataFrame) -> pd.DataFrame:
    """The ``pruning_curves`` rows on the shared grid of shares: the single-head points added near a
    threshold (``refined``) exist for some methods and seeds only, so they stay out of means."""
    return curves[~curves["refined"].astype(bool)] if "refined" in curves else curves


def pruning_means(curves: pd.DataFrame) -> pd.DataFrame:
    """The ``pruning_curves`` table (``method, share_removed, value``), mean over seeds per method
    and share of heads removed, grid points only: ``method, share_removed, mean, sd, n, ci95``."""
    return mean_ci(grid_points(curves), ["method", "share_removed"])


def pruning_metric(curves: pd.DataFrame) -> str:
    """The name of the metric a ``pruning_curves`` table measures (its ``metric`` column), else ``"metric"``."""
    return str(curves["metric"].iloc[0]) if "metric" in curves else "metric"


def pruning_scale(curves: pd.DataFrame) -> tuple[float, str]:
    """``(sign, axis title)`` putting a ``pruning_curves`` table on its metric's own scale: the
    analysis maximises, so an MLM loss is stored as minus the loss (sign -1: the page shows the
    loss, lower is better); any other metric is shown as stored (higher is better)."""
    name = pruning_metric(curves)
    if "minus eval loss" in name or name.lower().startswith("mlm loss"):
        return -1.0, "held-out MLM loss (nats/token; lower is better)"
    return 1.0, f"{name.replace(', metric: ', ': ')} (higher is better)"


def on_own_scale(means: pd.DataFrame, sign: float) -> pd.DataFrame:
    """:func:`pruning_means` rows multiplied by ``sign`` (``mean``, ``low``, ``high``; the interval's
    ends swap when the sign is negative)."""
    if sign >= 0:
        return means
    out = means.assign(mean=-means["mean"])
    if {"low", "high"} <= set(means.columns):
        out["low"], out["high"] = -means["high"], -means["low"]
    return out


def threshold_marks(thresholds: pd.DataFrame, sign: float) -> pd.DataFrame:
    """Where each order's thresholds fall on its curve: ``method, tolerance, share_removed, value``
    (means over seeds of ``removable_share`` and of the test metric with those heads removed,
    ``value_test``, times ``sign``). ``thresholds``: the ``pruning_thresholds`` table."""
    value = "value_test" if "value_test" in thresholds.columns else "value"
    marks = thresholds.groupby(["method", "tolerance"], as_index=False).agg(
        share_removed=("removable_share", "mean"), value=(value, "mean")
    )
    marks["value"] = sign * marks["value"]
    return marks


# Columns of the pruning tables that hold the metric itself (minus the loss for an MLM loss), and
# interval bounds that flip with it: ``low, high`` only where they bound a ``difference``.
SIGNED_COLUMNS: tuple[str, ...] = ("base", "base_dev", "base_test", "value", "value_dev", "value_test", "value_a")
SIGNED_COLUMNS += ("value_b", "metric_value", "difference")
SIGNED_BOUNDS = (("value_low", "value_high", "value"), ("low", "high", "difference"))
TOLERANCES = ("tolerance", "drop_test")


def metric_table_on_own_scale(table: pd.DataFrame, sign: float) -> pd.DataFrame:
    """A pruning table (thresholds, order comparison, L0 evaluation, cost) with its metric columns
    (:data:`SIGNED_COLUMNS`) times ``sign`` and their intervals' ends swapped when it is negative:
    an MLM loss as the loss (5.16), not as the stored -5.16."""
    if sign >= 0:
        return table
    out = table.copy()
    for column in SIGNED_COLUMNS:
        if column in out.columns and pd.api.types.is_numeric_dtype(out[column]):
            out[column] = -out[column]
    for low, high, estimate in SIGNED_BOUNDS:
        if {low, high, estimate} <= set(table.columns):
            out[low], out[high] = -table[high], -table[low]
    return out


def shown_table(table: pd.DataFrame, sign: float) -> pd.DataFrame:
    """A pruning table as the page shows it: on the metric's own scale
    (:func:`metric_table_on_own_scale`), tolerances as percentages, formatted as a paper prints it
    (:func:`tables.paper_table`)."""
    return tables.paper_table(metric_table_on_own_scale(table, sign), percent=TOLERANCES)


def importance_grid(importance: pd.DataFrame) -> pd.DataFrame:
    """Head importance as a ``[layers, heads]`` grid (mean over seeds and methods).
    ``importance``: ``layer, head, importance``."""
    return importance.groupby(["layer", "head"])["importance"].mean().unstack()


def first_seed(gates: pd.DataFrame) -> pd.DataFrame:
    """The rows of the first seed of each λ of an ``l0_gates`` table (a map shows one gate set)."""
    if "seed" not in gates:
        return gates
    first = gates.groupby("lam")["seed"].transform("min")
    return gates[gates["seed"] == first]


# --------------------------------------------------------------------------- figures


def add_threshold_marks(fig: go.Figure, marks: pd.DataFrame) -> go.Figure:
    """Each order's pruning thresholds as markers on its curve (:func:`line_with_band` by method),
    in the curve's colour, one symbol per tolerance. ``marks``: ``method, tolerance, share_removed,
    value`` (:func:`threshold_marks`)."""
    colours = {t.name: t.line.color for t in fig.data if t.mode == "lines+markers"}
    symbols = ["diamond", "x", "star", "triangle-up", "square"]
    for k, tolerance in enumerate(sorted(marks["tolerance"].unique())):
        part = marks[marks["tolerance"] == tolerance]
        for _, row in part.iterrows():
            name = esc(row["method"])
            fig.add_trace(
                go.Scatter(
                    x=[row["share_removed"]],
                    y=[row["value"]],
                    mode="markers",
                    name=f"{name}: {tolerance:.0%} threshold",
                    marker=dict(
                        symbol=symbols[k % len(symbols)],
                        size=13,
                        color=colours.get(name, "#000000"),
                        line=dict(width=1, color="black"),
                    ),
                    hovertemplate=f"{name}: %{{x:.0%}} of heads removable before the dev metric worsens by more than "
                    f"{tolerance:.0%}<br>test value there %{{y:.4g}}<extra></extra>",
                )
            )
    return fig


def importance_figure(grid: pd.DataFrame) -> go.Figure:
    """Heatmap of head importance. ``grid``: ``[layers, heads]``, index = layer, columns = head
    (:func:`importance_grid`)."""
    return px.imshow(
        grid, labels=dict(x="head", y="layer", color="importance"), title="head importance (normalised per layer)"
    )


def l0_gates_figure(gates: pd.DataFrame) -> go.Figure:
    """One panel per λ: each head's probability that its Hard Concrete gate is open (``p_open``),
    a square per head (x = head, y = layer, the first at the top), heads the deterministic gate removes
    marked with an x. ``gates``: ``lam, layer, head, p_open, kept`` (:func:`train_l0_gates`; the first
    seed of each λ)."""
    lams = sorted(gates["lam"].unique())
    fig = make_subplots(
        rows=1,
        cols=len(lams),
        subplot_titles=[
            f"λ = {lam:g}: {int(gates[gates['lam'] == lam]['kept'].sum())} "
            f"of {int((gates['lam'] == lam).sum())} heads kept"
            for lam in lams
        ],
        shared_yaxes=True,
    )
    for c, lam in enumerate(lams, 1):
        part = gates[gates["lam"] == lam]
        grid = part.pivot_table(index="layer", columns="head", values="p_open", aggfunc="mean")
        fig.add_trace(
            go.Heatmap(
                z=grid.to_numpy(),
                x=list(grid.columns),
                y=list(grid.index),
                zmin=0,
                zmax=1,
                colorscale="Blues",
                colorbar=dict(title="P(open)"),
                showscale=c == 1,
                hovertemplate="layer %{y}, head %{x}: P(open) %{z:.2f}<extra></extra>",
            ),
            1,
            c,
        )
        off = part[~part["kept"].astype(bool)]
        fig.add_trace(
            go.Scatter(
                x=off["head"],
                y=off["layer"],
                mode="markers",
                name="removed" if c == 1 else None,
                showlegend=c == 1,
                marker=dict(symbol="x", color="crimson", size=9),
            ),
            1,
            c,
        )
        fig.update_xaxes(title_text="head", dtick=1, row=1, col=c)
    n_layers = int(gates["layer"].nunique())
    fig.update_yaxes(autorange="reversed", dtick=1, title_text="layer", row=1, col=1)
    fig.update_layout(
        title="L0 head gates (Voita et al. 2019): which heads each penalty keeps", height=180 + 34 * n_layers
    )
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Pruning",
    title="Head importance and pruning (Michel et al. 2019, Voita et al. 2019)",
    intro="How much the metric worsens as heads are removed, most or least important first; importance is the "
    "gradient of the loss with respect to a gate on each head. Michel et al. 2019, *Are Sixteen Heads "
    "Really Better than One?*; L0 gates: Voita et al. 2019.",
    render=pruning_page,
    study="pruning",
    main_table="pruning_curves",
    min_charts=2,
)
