"""The Patching page (activation patching; Vig et al. 2020, Meng et al. 2022): how much of the clean
sentence's verb score each hidden state (layer x token role) and each head brings back into the
corrupted run, averaged over minimal pairs, with the interval over pairs on hover."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertology.apps.figures import esc
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_run

EFFECT_COLUMNS = ["layer", "restored", "low", "high", "n_pairs"]


def patching_page(page: Page) -> None:
    run = pick_run(page.study, "patching_run")
    if run is None:
        return
    accuracy = optional_table(run, "accuracy")
    if accuracy is not None:
        st.caption(
            "the model on the pairs: clean / corrupted / both sentences right, and the share of pairs whose "
            "score moves toward the right verb (95% Wilson intervals); means below are over the pairs used"
        )
        st.dataframe(accuracy, width="stretch", hide_index=True)
    positions = load_table(run, "position_effects")
    if has_columns_or_explain(positions, ["template", "role", "role_order", *EFFECT_COLUMNS], "position_effects", run):
        with guard("the layer x position map", run):
            templates = list(dict.fromkeys(["all", *positions["template"].astype(str)]))
            template = st.selectbox("template", templates, key="patching_template")
            st.plotly_chart(position_heatmap(positions, template), width="stretch", key="patching-positions")
    heads = load_table(run, "head_effects")
    if has_columns_or_explain(heads, ["head", *EFFECT_COLUMNS], "head_effects", run):
        with guard("the layer x head map", run):
            st.plotly_chart(head_heatmap(heads), width="stretch", key="patching-heads")
    carriers = optional_table(run, "number_carriers")
    if carriers is not None:
        st.subheader("Where number is carried (interval above the threshold)")
        st.dataframe(carriers, width="stretch", hide_index=True)


# --------------------------------------------------------------------------- figures


def _hover(label: str, restored: float, low: float, high: float, n: int) -> str:
    return f"{label}<br>restored {restored:.3f} [{low:.2f}, {high:.2f}]<br>{int(n)} pairs"


def _heatmap(grid: pd.DataFrame, text: list[list[str]], title: str, x_title: str, y_title: str) -> go.Figure:
    """A diverging heat map of restored fractions (0 white, 1 red, negative blue), layer 0 on top."""
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(dtype=float),
            x=list(grid.columns),
            y=list(grid.index),
            text=text,
            hoverinfo="text",
            colorscale="RdBu_r",
            zmid=0.0,
            colorbar=dict(title="restored"),
        )
    )
    fig.update_layout(
        title=esc(title),
        xaxis=dict(title=x_title, type="category"),
        yaxis=dict(title=y_title, autorange="reversed", dtick=1),
        height=160 + 36 * len(grid.index),
    )
    return fig


def _grid(df: pd.DataFrame, column: str, value: str) -> pd.DataFrame:
    return df.pivot(index="layer", columns=column, values=value).sort_index()


def position_heatmap(position_effects: pd.DataFrame, template: str) -> go.Figure:
    """Layer x token role of one template (or ``all``): the mean restored fraction over pairs, its
    interval and pair count on hover. ``position_effects``: ``template, layer, role, role_order,
    restored, low, high, n_pairs``; roles in ``role_order``."""
    part = position_effects[position_effects["template"].astype(str) == template]
    roles = list(part.sort_values("role_order").drop_duplicates("role")["role"].astype(str))
    grids = {c: _grid(part, "role", c).reindex(columns=roles) for c in ("restored", "low", "high", "n_pairs")}
    text = [
        [
            _hover(
                f"layer {layer}, {esc(role)}",
                *(grids[c].loc[layer, role] for c in ("restored", "low", "high", "n_pairs")),
            )
            if np.isfinite(grids["restored"].loc[layer, role])
            else ""
            for role in roles
        ]
        for layer in grids["restored"].index
    ]
    title = f"hidden state patched at one token ({template}): share of the clean score restored"
    return _heatmap(grids["restored"], text, title, "token role", "hidden state (0 = embeddings, l = after layer l)")


def head_heatmap(head_effects: pd.DataFrame) -> go.Figure:
    """Layer x head: the mean restored fraction over pairs when that head's output (at every token) is
    patched, its interval and pair count on hover. ``head_effects``: ``layer, head, restored, low,
    high, n_pairs``."""
    grids = {c: _grid(head_effects, "head", c) for c in ("restored", "low", "high", "n_pairs")}
    text = [
        [
            _hover(
                f"layer {layer}, head {head}",
                *(grids[c].loc[layer, head] for c in ("restored", "low", "high", "n_pairs")),
            )
            for head in grids["restored"].columns
        ]
        for layer in grids["restored"].index
    ]
    title = "head output patched at every token: share of the clean score restored"
    return _heatmap(grids["restored"], text, title, "head", "layer")


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Patching",
    title="Activation patching: where number is carried",
    intro="Subject-verb agreement minimal pairs (the subject's number flipped): one hidden state or one "
    "head's output of the clean sentence is copied into the corrupted run, and the share of the "
    "difference in log P(right verb) - log P(wrong verb) it brings back is averaged over pairs. "
    "Vig et al. 2020 (causal mediation), Meng et al. 2022 (causal tracing), Finlayson et al. 2021.",
    render=patching_page,
    study="patching",
    main_table="head_effects",
    min_charts=2,
)
