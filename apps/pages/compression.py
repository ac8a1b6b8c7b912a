"""The Compression page: a fine-tuned model made smaller -- heads pruned (the Pruning page's
sections), lottery tickets (magnitude and structured), and quantization."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import figures, tables
from bertology.apps.figures import esc, zoomed_range
from bertology.apps.pages.page import Page
from bertology.apps.pages.pruning import pruning_sections
from bertology.apps.ui import guard, has_columns_or_explain, optional_table, pick_run


def compression_page(page: Page) -> None:
    run = pick_run(page.study, "compression_run")
    if run is None:
        return
    finetune = optional_table(run, "finetune_run")
    if finetune is not None and not finetune.empty:
        row = finetune.iloc[0]
        st.markdown(
            f"**The fine-tuned model**: {esc(str(row['model']))} fine-tuned ({esc(str(row['mode']))}) on "
            f"{esc(str(row['task']))}, seed {row['seed']}: test accuracy {row['test_accuracy']:.4f} "
            f"[{row['test_low']:.4f}, {row['test_high']:.4f}] on {int(row['test_items'])} items."
        )
    pruning_sections(run)
    lottery = optional_table(run, "lottery_runs")
    if has_columns_or_explain(
        lottery, ["kind", "sparsity", "test_accuracy", "test_low", "test_high"], "lottery_runs", run
    ):
        st.subheader("Lottery tickets")
        with guard("the lottery curves", run):
            fig = figures.line_with_band(
                lottery_curves(lottery),
                "sparsity",
                "kind",
                "test accuracy vs sparsity (as Chen et al. 2020 plot their tickets)",
                "test accuracy",
            )
            fig.update_xaxes(tickformat=".0%", dtick=0.1, title="sparsity (% of the prunable weights removed)")
            st.plotly_chart(fig, width="stretch")
        st.caption(lottery_schedule_note(lottery))
        comparison = optional_table(run, "lottery_comparison")
        if comparison is not None:
            st.caption("Each ticket against the random mask of the same sparsity, paired on the same test examples:")
            st.dataframe(tables.paper_table(comparison), width="stretch", hide_index=True)
    subnetworks = optional_table(run, "structured_subnetworks")
    if subnetworks is not None:
        st.subheader("Structured lottery tickets (Prasanna et al. 2020)")
        survivors = optional_table(run, "structured_survivors")
        if has_columns_or_explain(
            survivors, ["component", "layer", "head", "share", "super_survivor"], "structured_survivors", run
        ):
            with guard("the survivors map", run):
                st.plotly_chart(survivors_figure(survivors), width="stretch")
        st.caption(structured_note(subnetworks))
        st.dataframe(tables.paper_table(subnetworks), width="stretch", hide_index=True)
        comparison = optional_table(run, "structured_comparison")
        if comparison is not None:
            st.dataframe(tables.paper_table(comparison), width="stretch", hide_index=True)
    quant = optional_table(run, "quantization_task")
    if has_columns_or_explain(
        quant, ["setting", "accuracy", "low", "high", "size_ratio", "size_kind", "speedup"], "quantization_task", run
    ):
        st.subheader("Quantization")
        with guard("the quantization figure", run):
            st.plotly_chart(quantization_figure(quant), width="stretch")
        st.caption(
            "Real int8: torch's dynamic int8 kernels (size serialized, speed measured against float32 in the "
            "same process). Simulated bits: weights rounded and stored back as float32 -- the accuracy is "
            "what those bits give, the size is the packed size they would take, and there is no speed-up. "
            "difference: against float32 on the same test examples (paired bootstrap)."
        )
        st.dataframe(tables.paper_table(quant), width="stretch", hide_index=True)
    probing = optional_table(run, "quantization_probing")
    if has_columns_or_explain(
        probing, ["setting", "layer", "accuracy", "low", "high", "difference"], "quantization_probing", run
    ):
        with guard("the probing under quantization", run):
            shown = probing.dropna(subset=["accuracy"]).rename(columns={"accuracy": "mean"})
            st.plotly_chart(
                figures.line_with_band(
                    shown,
                    "layer",
                    "setting",
                    "linear POS probe per layer of the pretrained encoder, quantized",
                    "test accuracy (95% interval)",
                ),
                width="stretch",
            )
        st.caption(
            "The same probe, split and seed for every setting; difference: against float32 at that layer on the "
            "same test sentences (paired bootstrap)."
        )
        with st.expander("probing table"):
            st.dataframe(tables.paper_table(probing), width="stretch", hide_index=True)


# --------------------------------------------------------------------------- data shaping


def lottery_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """``kind, sparsity, mean, low, high``: test accuracy against sparsity for the magnitude tickets
    and the random masks of a ``lottery_runs`` table, the dense model (sparsity 0) starting both lines."""
    dense = runs[runs["kind"] == "dense"]
    parts = [runs[runs["kind"] != "dense"]]
    for kind in ("imp", "random"):
        if (runs["kind"] == kind).any():
            parts.append(dense.assign(kind=kind))
    out = pd.concat(parts, ignore_index=True)
    out["kind"] = out["kind"].map({"imp": "magnitude ticket (IMP, rewound)", "random": "random mask"})
    return (
        out.rename(columns={"test_accuracy": "mean", "test_low": "low", "test_high": "high"})[
            ["kind", "sparsity", "mean", "low", "high"]
        ]
        .sort_values(["kind", "sparsity"])
        .reset_index(drop=True)
    )


def lottery_schedule_note(runs: pd.DataFrame) -> str:
    """The note beside the lottery curve: which pruning schedule made the tickets and over which
    weights the sparsity is counted, read from a ``lottery_runs`` table (``schedule``,
    ``prunable_weights``, ``pooler_pruned``; a table made before they were recorded used the old
    schedule, 20% of the remaining encoder weights a round)."""
    imp = runs[runs["kind"] == "imp"].sort_values("round") if "round" in runs else runs[runs["kind"] == "imp"]
    first = float(imp["sparsity"].iloc[0]) if len(imp) else float("nan")
    if "schedule" not in runs:
        return (
            "Schedule not recorded (a run made before the schedules were named): each round removed "
            "20% of the encoder weight-matrix entries still kept, the pooler not pruned -- not Chen et "
            "al.'s 10% of the original weights a round."
        )
    schedule = str(runs["schedule"].iloc[0])
    n = int(runs["prunable_weights"].iloc[0])
    if bool(runs["pooler_pruned"].iloc[0]):
        over = f"the {n:,} weights of the encoder's weight matrices and the pooler's"
    elif schedule == "chen2020":
        over = f"the {n:,} weights of the encoder's weight matrices (this classifier has no pooler)"
    else:
        over = f"the {n:,} weights of the encoder's weight matrices (the pooler not pruned)"
    if schedule == "chen2020":
        how = (
            f"Schedule chen2020 (Chen et al. 2020's released LT_glue.py): each round removed {first:.0%} of "
            "the original prunable weights"
        )
    else:
        how = (
            f"Schedule {schedule}: each round removed {first:.0%} of the prunable weights still kept (Chen et "
            "al. remove 10% of the original weights a round)"
        )
    return f"{how}; sparsity is the share of {over} removed. Each ticket is retrained from the pre-trained weights."


STRUCTURED_WORDS = {
    "random_complement": "bad = keeps what good removed and removes as many of good's survivors, drawn at random",
    "most_important": "bad = as many of the most important removed",
    "bernoulli": "random = each head and block kept with good's kept share (its size varies)",
    "exact": "random = exactly as many drawn at random",
}


def structured_note(subnetworks: pd.DataFrame) -> str:
    """The caption of the structured sub-networks: how good, bad and random were made, read from the
    ``structured_subnetworks`` table's option columns (absent in runs made before they were named:
    then bad = most important, random = exact size)."""
    bad = str(subnetworks["bad_subnetwork"].iloc[0]) if "bad_subnetwork" in subnetworks else "most_important"
    random = str(subnetworks["random_mask"].iloc[0]) if "random_mask" in subnetworks else "exact"
    good = "good = least important removed until dev falls below the kept share of full"
    if "continue_phases" in subnetworks and bool(subnetworks["continue_phases"].iloc[0]):
        good += " (heads and blocks together, then heads only, then blocks only)"
    return (
        "Each sub-network retrained from the pre-trained weights with its heads and FFN blocks removed; "
        f"{good}, {STRUCTURED_WORDS.get(bad, bad)}, {STRUCTURED_WORDS.get(random, random)}."
    )


# --------------------------------------------------------------------------- figures


def survivors_figure(survivors: pd.DataFrame) -> go.Figure:
    """Which heads and feed-forward blocks survive in the good sub-networks (Prasanna et al. 2020):
    a layer × head map of the share of seeds in which each head survives, with the layer's FFN block
    as a last column; super-survivors (every seed) marked ★. ``survivors``: the
    ``structured_survivors`` table (``component, layer, head, share, super_survivor``)."""
    heads = (
        survivors[survivors["component"] == "head"].pivot(index="layer", columns="head", values="share").sort_index()
    )
    ffn = survivors[survivors["component"] == "ffn"].set_index("layer")["share"].reindex(heads.index)
    z = np.column_stack([heads.to_numpy(), ffn.to_numpy()])
    columns = {head: i for i, head in enumerate(heads.columns)}  # the table's head numbers -> grid columns
    text = np.full(z.shape, "", dtype=object)
    rows = {layer: i for i, layer in enumerate(heads.index)}
    for r in survivors[survivors["super_survivor"]].itertuples():
        text[rows[r.layer], columns[r.head] if r.component == "head" else heads.shape[1]] = "★"
    x = [f"H{h}" for h in heads.columns] + ["FFN"]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=x,
            y=[f"L{l}" for l in heads.index],
            zmin=0,
            zmax=1,
            colorscale="Greens",
            text=text,
            texttemplate="%{text}",
            colorbar=dict(title="seeds surviving"),
        )
    )
    fig.update_layout(
        title="share of seeds whose good sub-network keeps each head and FFN block (★ = every seed)",
        yaxis=dict(autorange="reversed"),
        height=180 + 28 * len(heads.index),
    )
    return fig


def quantization_figure(quant: pd.DataFrame) -> go.Figure:
    """Test accuracy of a fine-tuned classifier under each quantization setting with its 95% interval
    (horizontal bars, float32 first; the axis covers the intervals, not 0..1), each bar labelled with
    its size against float32 and, for real int8 kernels, its measured speed-up. ``quant``: the
    ``quantization_task`` table (``setting, accuracy, low, high, size_ratio, size_kind, speedup``)."""
    shown = quant.dropna(subset=["accuracy"]).reset_index(drop=True)
    low, high = shown["low"].fillna(shown["accuracy"]), shown["high"].fillna(shown["accuracy"])
    axis = zoomed_range(low, high)

    def label(row: pd.Series) -> str:
        size = f"{row['accuracy']:.3f} · size ×{row['size_ratio']:.2f}" + (
            " (packed)" if row["size_kind"] == "theoretical" else ""
        )
        return size + (
            f" · {row['speedup']:.2f}× faster" if pd.notna(row["speedup"]) and row["setting"] != "float32" else ""
        )

    fig = go.Figure(
        go.Bar(
            y=shown["setting"].map(esc),
            x=shown["accuracy"],
            orientation="h",
            error_x=dict(
                type="data",
                symmetric=False,
                array=(high - shown["accuracy"]).tolist(),
                arrayminus=(shown["accuracy"] - low).tolist(),
            ),
            text=[label(r) for _, r in shown.iterrows()],
            textposition="inside",
            insidetextanchor="start",
        )
    )
    fig.update_layout(
        title="test accuracy under each quantization (95% interval)",
        xaxis=dict(range=axis, title=f"test accuracy (axis starts at {axis[0]:.3f}, not 0)"),
        yaxis=dict(autorange="reversed", title=""),
        height=160 + 40 * len(shown),
    )
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Compression",
    title="Compressing a fine-tuned model: head pruning and quantization",
    intro="A model fine-tuned on a task, then made smaller: heads removed in order of importance (the gradient "
    "of the task loss with respect to a gate on each head, re-estimated as heads go), at random or by "
    "type, with the task's accuracy read on test (Michel et al. 2019, *Are Sixteen Heads Really Better "
    "than One?*); and its weights stored in 8 bits or fewer (post-training quantization).",
    render=compression_page,
    study="compression",
    main_table="pruning_curves",
    min_charts=6,
)
