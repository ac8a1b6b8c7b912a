"""The Pretraining page: the project's own BERT during pretraining -- loss and perplexity, head
types at each checkpoint, probe accuracy across checkpoints and masked-word guesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import figures
from bertology.apps.figures import esc, ordered_types, type_colour
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_run, query
from bertology.results import read_manifest


def pretraining_page(page: Page) -> None:
    run = pick_run(page.study, "pt_run")
    if run is None:
        return
    note = divergence_note(read_manifest(run).get("diverged"))
    if note:
        st.warning(note)
    training_curves(run)
    st.subheader("Heads across checkpoints")
    head_maps_by_step(run)
    counts = load_table(run, "head_counts")
    if has_columns_or_explain(counts, ["step", "type", "count"], "head_counts", run):
        with guard("the head counts", run):
            st.plotly_chart(type_counts_figure(counts), width="stretch")
    st.subheader("Probe accuracy across checkpoints")
    probes = load_table(run, "probe_scores")
    if has_columns_or_explain(probes, ["step", "task", "layer", "value"], "probe_scores", run):
        with guard("the probe accuracy", run):
            st.plotly_chart(probe_by_step(probes), width="stretch")
            best = best_layer_by_step(probes, optional_table(run, "best_layers"))
            st.plotly_chart(best_layer_figure(best), width="stretch")
    cloze_section(run)


def divergence_note(diverged: dict[str, Any] | None) -> str | None:
    """What the page says of a pretraining run that stopped diverged (its run record's ``diverged``
    entry, copied into the study's manifest), or None for a run that did not."""
    if not diverged:
        return None
    aside = diverged.get("set_aside") or []
    return (
        f"This pretraining run diverged at step {diverged.get('step')} ({diverged.get('reason')}, learning rate "
        f"{diverged.get('learning_rate')}): the checkpoints shown end at the last good one, step "
        f"{diverged.get('last_good_checkpoint')}" + (f"; set aside: {', '.join(aside)}" if aside else "") + "."
    )


def training_curves(run: Path) -> None:
    """Training and held-out loss, and held-out perplexity where the run logged it."""
    metrics = load_table(run, "training_metrics")
    if has_columns_or_explain(metrics, ["step", "metric", "value"], "training_metrics", run):
        with guard("the loss curves", run):
            st.plotly_chart(loss_figure(loss_rows(metrics)), width="stretch")
            perplexity = perplexity_rows(metrics)
            if len(perplexity):
                st.plotly_chart(perplexity_figure(perplexity), width="stretch")


def head_maps_by_step(run: Path) -> None:
    """The head map at a checkpoint picked on a slider (``?step=`` preselects it), and at a second
    step beside it."""
    by_step = load_table(run, "head_types_by_step")
    if has_columns_or_explain(by_step, ["step", "layer", "head", "type"], "head_types_by_step", run):
        with guard("the head maps by checkpoint", run):
            steps = checkpoint_steps(by_step)
            step = st.select_slider(
                "checkpoint step (head map)", options=steps, value=start_step(steps, query("step")), key="pt_step"
            )
            versus = st.selectbox(
                "beside it, step",
                [None, *[s for s in steps if s != step]],
                key="pt_versus",
                format_func=lambda s: "nothing" if s is None else f"step {s}",
            )
            shown = [step] if versus is None else [step, versus]
            for col, s in zip(st.columns(len(shown)), shown):
                col.plotly_chart(
                    figures.head_map(at_step(by_step, s), f"head types at step {s}"), width="stretch", key=f"pt_map_{s}"
                )


def cloze_section(run: Path) -> None:
    """What each checkpoint predicts for the masked words, with its top-1 / top-5 accuracy."""
    cloze = optional_table(run, "cloze_predictions")
    if (
        cloze is not None
        and not cloze.empty
        and has_columns_or_explain(
            cloze, ["step", "text", "masked", "rank", "prediction", "probability"], "cloze_predictions", run
        )
    ):
        with guard("the masked-word predictions", run):
            st.subheader("What the model predicts for a masked word")
            accuracy = load_table(run, "cloze_accuracy")
            if accuracy is not None and not accuracy.empty:
                st.caption(cloze_accuracy_line(accuracy))
            steps = sorted(cloze["step"].unique())
            step = st.select_slider("checkpoint step (predictions)", options=steps, value=steps[-1], key="cloze_step")
            st.dataframe(cloze_guesses(cloze, step), hide_index=True, width="stretch")
    reference = optional_table(run, "reference_cloze_predictions")
    if (
        reference is not None
        and not reference.empty
        and has_columns_or_explain(
            reference, ["text", "masked", "rank", "prediction", "probability"], "reference_cloze_predictions", run
        )
    ):
        with guard("the reference model's predictions", run):
            accuracy = optional_table(run, "reference_cloze_accuracy")
            name = esc(str(reference["model"].iloc[0])) if "model" in reference else "the reference model"
            line = f"Reference, not a checkpoint of this run: {name} on the same sentences"
            if accuracy is not None and not accuracy.empty:
                row = accuracy.iloc[0]
                line += f" — top-1 {row['top1']:.0%}, top-5 {row['top5']:.0%} of {int(row['n'])} masked words"
            st.caption(line + " (its tokenizer keeps other words whole, so the masked words can differ).")
            st.dataframe(cloze_guesses(reference.assign(step=0), 0), hide_index=True, width="stretch")


# --------------------------------------------------------------------------- data shaping


def loss_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """Training and held-out loss rows of a ``training_metrics`` table (``step, metric, value``)."""
    return metrics[metrics["metric"].isin(["loss", "eval_loss"])]


def perplexity_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """Held-out perplexity rows of a ``training_metrics`` table (``step, metric, value``)."""
    return metrics[metrics["metric"] == "perplexity"]


def checkpoint_steps(by_step: pd.DataFrame) -> list[int]:
    """The checkpoint steps of a table with a ``step`` column, ascending."""
    return sorted(int(s) for s in by_step["step"].unique())


def start_step(steps: list[int], wanted: str | None) -> int:
    """The step a checkpoint slider starts at: ``wanted`` (a deep link's ``?step=``) when it is one
    of ``steps``, else the last one."""
    return int(wanted) if wanted and wanted.lstrip("-").isdigit() and int(wanted) in steps else steps[-1]


def at_step(table: pd.DataFrame, step: int) -> pd.DataFrame:
    """The rows of one checkpoint step."""
    return table[table["step"] == step]


def best_layer_by_step(probes: pd.DataFrame, best_layers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per checkpoint step and task, the best layer's test accuracy: ``step, task, value``.
    With emergence's ``best_layers`` table (``step, task, best_layer_score``: the layer chosen on
    dev, its test score), that; else (older runs) the maximum over layers of the ``probe_scores``
    test means (``step, task, layer, value``), which picks the layer on test and reads high."""
    if best_layers is not None and {"step", "task", "best_layer_score"} <= set(best_layers.columns):
        return best_layers.rename(columns={"best_layer_score": "value"})[["step", "task", "value"]]
    return (
        probes.groupby(["step", "task", "layer"], as_index=False)["value"]
        .mean()
        .groupby(["step", "task"], as_index=False)["value"]
        .max()
    )


def cloze_accuracy_line(accuracy: pd.DataFrame) -> str:
    """``"top-1 / top-5 accuracy per step: 0: 0% / 5%, ..."`` from a ``cloze_accuracy`` table
    (``step, top1, top5``)."""
    return "top-1 / top-5 accuracy per step: " + ", ".join(
        f"{int(r.step)}: {r.top1:.0%} / {r.top5:.0%}" for r in accuracy.itertuples()
    )


def cloze_guesses(cloze: pd.DataFrame, step: Any) -> pd.DataFrame:
    """What the checkpoint at ``step`` predicts for each masked word: ``sentence, masked word, top
    predictions`` (``"guess (12.5%), ..."`` in rank order), one row per masked sentence.
    ``cloze``: the ``cloze_predictions`` table (``step, text, masked, rank, prediction, probability``)."""
    shown = cloze[cloze["step"] == step]
    table = (
        shown.assign(
            guess=shown["prediction"].astype(str) + " (" + (shown["probability"] * 100).round(1).astype(str) + "%)"
        )
        .groupby(["text", "masked"], sort=False)["guess"]
        .apply(lambda g: ", ".join(g))
        .reset_index()
    )
    return table.rename(columns={"text": "sentence", "masked": "masked word", "guess": "top predictions"})


# --------------------------------------------------------------------------- figures


def loss_figure(loss: pd.DataFrame) -> go.Figure:
    """Training and held-out MLM loss per step. ``loss``: ``step, metric, value`` (:func:`loss_rows`)."""
    fig = px.line(
        loss,
        x="step",
        y="value",
        color="metric",
        markers=True,
        title="MLM loss (nats/token): training and held-out",
    )
    fig.update_layout(
        xaxis_title="training step",
        yaxis_title="MLM loss (nats/token)",
        legend_title_text="loss = training, eval_loss = held-out",
    )
    return fig


def perplexity_figure(perplexity: pd.DataFrame) -> go.Figure:
    """Held-out perplexity per step. ``perplexity``: ``step, value`` (:func:`perplexity_rows`)."""
    fig = px.line(perplexity, x="step", y="value", markers=True, title="held-out perplexity")
    fig.update_layout(xaxis_title="training step", yaxis_title="held-out perplexity (exp of the loss)")
    return fig


def type_counts_figure(counts: pd.DataFrame) -> go.Figure:
    """Stacked areas: how many heads of each type at each checkpoint step. ``counts``: ``step, type, count``."""
    wide = counts.pivot_table(index="step", columns="type", values="count", aggfunc="sum", fill_value=0).sort_index()
    kinds = ordered_types(wide.columns)
    fig = go.Figure()
    for kind in kinds:
        fig.add_trace(
            go.Scatter(
                x=wide.index,
                y=wide[kind],
                name=esc(kind),
                stackgroup="types",
                mode="lines+markers",
                line=dict(color=type_colour(kind, kinds)),
            )
        )
    fig.update_layout(
        title="head types across checkpoints",
        xaxis_title="training step",
        yaxis_title="heads",
        height=360,
        margin=dict(t=50),
    )
    return fig


def probe_by_step(scores: pd.DataFrame) -> go.Figure:
    """Probe accuracy per layer, one line per checkpoint step (light = early, dark = late), one panel
    per task. ``scores``: ``step, task, layer, value`` (mean over seeds taken here)."""
    mean = scores.groupby(["task", "step", "layer"], as_index=False)["value"].mean()
    mean["step"] = mean["step"].astype(int)
    steps = sorted(mean["step"].unique())
    colours = px.colors.sample_colorscale(
        "Viridis", [0.85 * (1 - k / max(len(steps) - 1, 1)) for k in range(len(steps))]
    )
    mean["task"] = mean["task"].map(esc)
    mean["checkpoint"] = mean["step"].map(lambda s: f"step {s}")
    fig = px.line(
        mean,
        x="layer",
        y="value",
        color="checkpoint",
        facet_col="task",
        markers=True,
        color_discrete_sequence=colours,
        category_orders={"checkpoint": [f"step {s}" for s in steps]},
    )
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_layout(
        height=380,
        title="probe accuracy per layer at each checkpoint (test split)",
        yaxis_title="accuracy",
        margin=dict(t=80),
    )
    return figures.anchor_score_axis(fig)


def best_layer_figure(best: pd.DataFrame) -> go.Figure:
    """Best-layer probe accuracy per checkpoint step, one line per task.
    ``best``: ``step, task, value`` (:func:`best_layer_by_step`)."""
    fig = px.line(
        best.assign(task=best["task"].map(esc)),
        x="step",
        y="value",
        color="task",
        markers=True,
        title="best-layer probe accuracy across checkpoints",
        color_discrete_map=figures.category_colours(best["task"]),
    )
    fig.update_layout(xaxis_title="training step", yaxis_title="probe accuracy at the best layer (test)")
    return figures.anchor_score_axis(fig)


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Pretraining",
    title="Pretraining and emergence",
    intro="The project's own BERT during masked-language-model pretraining (Devlin et al. 2019): loss, and at "
    "each saved checkpoint its head types, probe accuracy and masked-word guesses; Voita et al. 2019 "
    "see positional heads appear early.",
    render=pretraining_page,
    study="emergence",
    main_table="probe_scores",
    min_charts=4,
)
