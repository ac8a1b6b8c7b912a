"""The Fine-tuning page: the test accuracy of each fine-tuning mode with its interval and its
difference from full fine-tuning, then, layer by layer, what fine-tuning changed."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from bertology.apps import tables
from bertology.apps.figures import anchor_score_axis, category_colours, esc, zoomed_range
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_run


def finetuning_page(page: Page) -> None:
    run = pick_run(page.study, "finetune_run")
    if run is None:
        return
    scores = load_table(run, "finetune_scores")
    if has_columns_or_explain(scores, ["task", "mode", "accuracy", "low", "high"], "finetune_scores", run):
        with guard("the fine-tuning scores", run):
            st.plotly_chart(finetune_scores_figure(scores), width="stretch")
            flagged = tables.small_sample_tasks(scores)
            if flagged:
                st.warning(f"small test sets (< 100 scored items per seed): {', '.join(map(str, flagged))}")
            st.dataframe(tables.paper_table(scores), width="stretch", hide_index=True)
    comparisons = optional_table(run, "finetune_comparisons")
    if has_columns_or_explain(
        comparisons, ["task", "mode", "difference", "low", "high", "p_value"], "finetune_comparisons", run
    ):
        st.subheader("Each mode against full fine-tuning, paired on the same test examples")
        st.dataframe(tables.paper_table(comparisons), width="stretch", hide_index=True)
    change = optional_table(run, "change_by_layer")
    modes = [m for t in (scores, change) if t is not None and "mode" in t for m in t["mode"]]
    mode_colours = category_colours(modes)  # one colour per mode on every chart of the page
    if has_columns_or_explain(change, ["task", "mode", "layer", "cka"], "change_by_layer", run):
        with guard("the change per layer", run):
            tasks = list(dict.fromkeys(change["task"].astype(str)))
            task = st.selectbox("task", tasks, key="finetune_task") if len(tasks) > 1 else tasks[0]
            st.plotly_chart(
                finetune_change_figure(change.assign(task=change["task"].astype(str)), task, mode_colours),
                width="stretch",
            )
            probes = optional_table(run, "probing_before_after")
            if has_columns_or_explain(
                probes, ["task", "mode", "probe_task", "layer", "split", "accuracy"], "probing_before_after", run
            ):
                st.plotly_chart(
                    probing_before_after_figure(probes.assign(task=probes["task"].astype(str)), task, mode_colours),
                    width="stretch",
                )
            types = optional_table(run, "head_types_before_after")
            if has_columns_or_explain(
                types, ["task", "mode", "type_before", "type_after", "changed"], "head_types_before_after", run
            ):
                part = types[types["task"].astype(str) == task]
                st.caption("heads whose type changed with fine-tuning (of all heads, mean over seeds):")
                st.dataframe(tables.paper_table(type_changes(part)), width="stretch", hide_index=True)


# --------------------------------------------------------------------------- data shaping


def type_changes(types: pd.DataFrame) -> pd.DataFrame:
    """Per mode: the share of heads whose type changed with fine-tuning and the most common
    changes (``before → after``), from a ``head_types_before_after`` table (one task)."""
    rows = []
    for mode, part in types.groupby("mode", sort=False):
        moved = part[part["changed"].astype(bool)]
        common = (moved["type_before"].astype(str) + " → " + moved["type_after"].astype(str)).value_counts().head(3)
        rows.append(
            {
                "mode": mode,
                "changed_share": float(part["changed"].astype(bool).mean()),
                "most_common_changes": ", ".join(f"{k} ({v})" for k, v in common.items()) or "none",
            }
        )
    return pd.DataFrame(rows, columns=["mode", "changed_share", "most_common_changes"])


# --------------------------------------------------------------------------- figures


def finetune_scores_figure(scores: pd.DataFrame) -> go.Figure:
    """Points with whiskers: test accuracy of each fine-tuning mode per task with its 95% interval
    (``low``/``high``), one colour per task (:func:`category_colours`), the value written above its
    point (clear of the whiskers); the axis covers the intervals, not 0..1. ``scores``: ``task,
    mode, accuracy, low, high`` (the ``finetune_scores`` table)."""
    shown = scores.assign(task=scores["task"].map(esc), mode=scores["mode"].map(esc))
    low = shown["low"].fillna(shown["accuracy"])
    high = shown["high"].fillna(shown["accuracy"])
    axis = zoomed_range(low, high)
    colours = category_colours(scores["task"])
    fig = go.Figure()
    for task, part in shown.groupby("task", sort=False):
        fig.add_trace(
            go.Scatter(
                y=part["mode"],
                x=part["accuracy"],
                mode="markers+text",
                name=task,
                marker=dict(size=11, color=colours.get(task)),
                error_x=dict(
                    type="data",
                    symmetric=False,
                    array=(high[part.index] - part["accuracy"]).tolist(),
                    arrayminus=(part["accuracy"] - low[part.index]).tolist(),
                    thickness=2,
                    width=6,
                ),
                text=[f"{v:.3f}" for v in part["accuracy"]],
                textposition="top center",
                hovertemplate="%{y}: %{x:.3f}<extra>" + task + "</extra>",
            )
        )
    fig.update_layout(
        scattermode="group",
        scattergap=0.5,
        title="test accuracy by fine-tuning mode (95% interval)",
        xaxis=dict(range=axis, title=f"test accuracy (axis starts at {axis[0]:.3f}, not 0)"),
        yaxis=dict(title="", autorange="reversed"),
        legend_title_text="task",
        height=180 + 60 * len(shown),
    )
    return fig


FINETUNE_CHANGE_PANELS = (
    ("cka", "CKA with pretrained<br>(1 = unchanged)"),
    ("weight", "relative weight change<br>‖ΔW‖/‖W‖"),
    ("attention_js", "attention change<br>(mean JS per head)"),
)
FINETUNE_CHANGE_AXES = (("cka", "linear CKA"), ("weight", "‖ΔW‖/‖W‖"), ("attention_js", "JS divergence"))


def finetune_change_figure(change: pd.DataFrame, task: str, colours: dict[str, str] | None = None) -> go.Figure:
    """What fine-tuning changed, per layer, one line per mode: CKA between the pretrained and the
    fine-tuned layer, relative weight change (every ``weight_<module>`` column, the mode's colour,
    one dash per module) and mean attention JS divergence. ``change``: the ``change_by_layer``
    table (``task, mode, layer, cka, weight_*, attention_js``)."""
    part = change[change["task"] == task]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=[title for _, title in FINETUNE_CHANGE_PANELS],
        horizontal_spacing=0.09,
    )
    fig.update_annotations(font_size=12)
    colours = colours or category_colours(change["mode"])
    modes = list(dict.fromkeys(part["mode"]))
    dashes = ("solid", "dash", "dot", "dashdot")
    modules = [c for c in part.columns if c.startswith("weight_")]
    for mode in modes:
        rows = part[part["mode"] == mode].sort_values("layer")
        colour = colours[str(mode)]
        fig.add_trace(
            go.Scatter(
                x=rows["layer"],
                y=rows["cka"],
                mode="lines+markers",
                name=esc(mode),
                legendgroup=esc(mode),
                line=dict(color=colour),
            ),
            1,
            1,
        )
        for k, column in enumerate(modules):
            values = rows[["layer", column]].dropna()
            fig.add_trace(
                go.Scatter(
                    x=values["layer"],
                    y=values[column],
                    mode="lines+markers",
                    name=f"{esc(mode)} · {esc(column.removeprefix('weight_'))}",
                    legendgroup=esc(mode),
                    showlegend=True,
                    line=dict(color=colour, dash=dashes[k % len(dashes)]),
                ),
                1,
                2,
            )
        js = rows[["layer", "attention_js"]].dropna()
        if len(js):
            fig.add_trace(
                go.Scatter(
                    x=js["layer"],
                    y=js["attention_js"],
                    mode="lines+markers",
                    name=esc(mode),
                    legendgroup=esc(mode),
                    showlegend=False,
                    line=dict(color=colour),
                ),
                1,
                3,
            )
    for c, (_, measure) in enumerate(FINETUNE_CHANGE_AXES, 1):
        fig.update_xaxes(title_text="layer (0 = embeddings)", dtick=1, row=1, col=c)
        fig.update_yaxes(title_text=measure, row=1, col=c)
    # CKA is in [0, 1]: its whole range, so that 0.97 against 1.0 (no interval here) does not look like a cliff
    fig.update_yaxes(range=[0, 1.02], row=1, col=1)
    fig.update_layout(
        title=f"what fine-tuning changed, layer by layer: {esc(task)}",
        height=460,
        margin=dict(t=110),
        legend=dict(orientation="h", y=-0.25),
    )
    return fig


def probing_before_after_figure(probes: pd.DataFrame, task: str, colours: dict[str, str] | None = None) -> go.Figure:
    """Test accuracy of a linear probe per layer before fine-tuning (``pretrained``, dashed black)
    and after it (one line per mode), one panel per probing task; means over seeds. ``probes``: the
    ``probing_before_after`` table (``task, mode, seed, probe_task, layer, split, accuracy``)."""
    part = probes[(probes["task"] == task) & (probes["split"] == "test")]
    means = part.groupby(["probe_task", "mode", "layer"], as_index=False)["accuracy"].mean()
    probe_tasks = list(dict.fromkeys(means["probe_task"]))
    fig = make_subplots(rows=1, cols=max(1, len(probe_tasks)), subplot_titles=[esc(t) for t in probe_tasks])
    colours = colours or category_colours(m for m in probes["mode"] if m != "pretrained")
    modes = [m for m in dict.fromkeys(means["mode"]) if m != "pretrained"]
    for c, probe_task in enumerate(probe_tasks, 1):
        rows = means[means["probe_task"] == probe_task]
        before = rows[rows["mode"] == "pretrained"].sort_values("layer")
        fig.add_trace(
            go.Scatter(
                x=before["layer"],
                y=before["accuracy"],
                mode="lines+markers",
                name="pretrained",
                legendgroup="pretrained",
                showlegend=c == 1,
                line=dict(color="black", dash="dash"),
            ),
            1,
            c,
        )
        for mode in modes:
            after = rows[rows["mode"] == mode].sort_values("layer")
            fig.add_trace(
                go.Scatter(
                    x=after["layer"],
                    y=after["accuracy"],
                    mode="lines+markers",
                    name=esc(mode),
                    legendgroup=esc(mode),
                    showlegend=c == 1,
                    line=dict(color=colours[str(mode)]),
                ),
                1,
                c,
            )
        fig.update_xaxes(title_text="layer (0 = embeddings)", dtick=1, row=1, col=c)
    fig.update_layout(
        title=f"probe accuracy per layer before and after fine-tuning on {esc(task)} (test)",
        yaxis_title="accuracy",
        height=420,
    )
    return anchor_score_axis(fig)  # one score axis for every panel


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Fine-tuning",
    title="Fine-tuning and what it changes",
    intro="The same encoder fine-tuned four ways on the same tasks and test examples: frozen (a classifier on "
    "frozen features), full, BitFit (biases only; Ben Zaken et al. 2022) and adapters (Houlsby et al. "
    "2019), each against full fine-tuning; then, layer by layer, how far each moved from the pretrained "
    "model: weights, representations (linear CKA, Kornblith et al. 2019) and attention.",
    render=finetuning_page,
    study="finetuning",
    main_table="finetune_scores",
    min_charts=2,
)
