"""The Compression page: a fine-tuned model made smaller -- heads pruned (the Pruning page's
sections), lottery tickets (magnitude and structured), and quantization."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import figures
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
                "test accuracy vs share of the encoder's weights removed",
                "test accuracy",
            )
            fig.update_xaxes(tickformat=".0%", title="sparsity (share of encoder weight-matrix entries removed)")
            st.plotly_chart(fig, width="stretch")
        comparison = optional_table(run, "lottery_comparison")
        if comparison is not None:
            st.caption("Each ticket against the random mask of the same sparsity, paired on the same test examples:")
            st.dataframe(comparison, width="stretch", hide_index=True)
    subnetworks = optional_table(run, "structured_subnetworks")
    if subnetworks is not None:
        st.subheader("Structured lottery tickets (Prasanna et al. 2020)")
        survivors = optional_table(run, "structured_survivors")
        if has_columns_or_explain(
            survivors, ["component", "layer", "head", "share", "super_survivor"], "structured_survivors", run
        ):
            with guard("the survivors map", run):
                st.plotly_chart(survivors_figure(survivors), width="stretch")
        st.caption(
            "Each sub-network retrained from the pre-trained weights with its heads and FFN blocks removed; "
            "good = least important removed until dev falls below the kept share of full, bad = as many of "
            "the most important, random = as many at random."
        )
        st.dataframe(subnetworks, width="stretch", hide_index=True)
        comparison = optional_table(run, "structured_comparison")
        if comparison is not None:
            st.dataframe(comparison, width="stretch", hide_index=True)
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
        st.dataframe(quant, width="stretch", hide_index=True)
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
            st.dataframe(probing, width="stretch", hide_index=True)


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
    stars = survivors.assign(column=survivors["head"].where(survivors["component"] == "head", heads.shape[1]))
    text = np.full(z.shape, "", dtype=object)
    rows = {layer: i for i, layer in enumerate(heads.index)}
    for r in stars[stars["super_survivor"]].itertuples():
        text[rows[r.layer], int(r.column)] = "★"
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
