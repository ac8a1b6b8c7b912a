"""The Patching page (activation patching; Vig et al. 2020, Meng et al. 2022): how much of the clean
sentence's verb score each hidden state (layer x token role) and each head brings back into the
corrupted run, averaged over minimal pairs, with the interval over pairs on hover."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertology.apps.figures import esc
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_run
from bertology.results import read_manifest

EFFECT_COLUMNS = ["layer", "restored", "low", "high", "n_pairs"]
CHANCE = 0.5  # two verb forms, the clean subject's number drawn at random (the study's CHANCE)
DIRECTION_TEXT = {
    "denoising": "**Direction: denoising** -- one activation of the clean sentence is copied into the corrupted "
    "run; 1 = the clean score restored entirely, 0 = nothing restored.",
    "noising": "**Direction: noising** (Vig et al. 2020) -- one activation of the corrupted sentence is copied into "
    "the clean run; the maps show the share of the clean - corrupted difference it destroys (1 = all of it).",
}
SELECTION_TEXT = {
    "correct": "only the pairs the model gets right in both sentences (Finlayson et al. 2021)",
    "all": "every pair whose score moves toward the right verb",
}


def accuracy_view(accuracy: pd.DataFrame) -> pd.DataFrame:
    """The accuracy table as shown: pair counts and each accuracy with its interval in one cell."""
    out = accuracy[["template", "n_pairs", "n_used"]].rename(columns={"n_pairs": "pairs", "n_used": "pairs used"})
    for name in ("clean", "corrupted", "both", "direction"):
        if f"{name}_accuracy" in accuracy:
            out[name] = [
                f"{a:.3f} [{lo:.2f}, {hi:.2f}]"
                for a, lo, hi in zip(accuracy[f"{name}_accuracy"], accuracy[f"{name}_low"], accuracy[f"{name}_high"])
            ]
    return out


def chance_warning(accuracy: pd.DataFrame) -> str | None:
    """The warning the page shows when the model's clean accuracy over all pairs has an interval that
    reaches chance (the study then names no site as carrying number); None when it is above chance."""
    every = accuracy[accuracy["template"].astype(str) == "all"]
    if every.empty:
        return None
    row = every.iloc[0]
    if row["clean_low"] > CHANCE:
        return None
    return (
        f"The model is not shown to do this task: clean accuracy {row['clean_accuracy']:.3f} "
        f"[{row['clean_low']:.2f}, {row['clean_high']:.2f}] over {int(row['n_pairs'])} pairs, an interval that "
        f"reaches chance ({CHANCE}). No site is named as carrying number; the maps describe a model that does not "
        "tell the verb forms apart."
    )


def patching_page(page: Page) -> None:
    run = pick_run(page.study, "patching_run")
    if run is None:
        return
    config = read_manifest(run).get("config", {})
    direction = str(config.get("direction", "denoising"))
    st.markdown(
        DIRECTION_TEXT.get(direction, direction) + " Layers: hidden state 0 = the embeddings, hidden state l = "
        "the output of transformer layer l, whose heads are numbered 1..H (head l-h, as on the Heads page)."
    )
    accuracy = optional_table(run, "accuracy")
    warning = None
    if accuracy is not None and has_columns_or_explain(
        accuracy, ["template", "clean_accuracy", "clean_low"], "accuracy", run
    ):
        selection = SELECTION_TEXT.get(str(config.get("use_pairs", "all")), str(config.get("use_pairs")))
        st.caption(
            "the model on the pairs: clean / corrupted / both sentences right, and the share of pairs whose "
            f"score moves toward the right verb (95% Wilson intervals); the means below are over the pairs used: "
            f"{selection}, with a clean - corrupted difference of at least {config.get('min_difference', '?')} nats"
        )
        st.dataframe(accuracy_view(accuracy), width="stretch", hide_index=True)
        control = optional_table(run, "control_accuracy")
        if control is not None:
            st.caption(
                "a randomly initialised copy of the model on the same pairs (the chance-level control; its pairs "
                "used: every pair whose score it moves toward the right verb, patched for its maps below)"
            )
            st.dataframe(accuracy_view(control), width="stretch", hide_index=True)
        warning = chance_warning(accuracy)
        if warning:
            st.warning(warning)
    control_positions = optional_table(run, "control_position_effects")
    control_heads = optional_table(run, "control_head_effects")
    if not (run / "position_effects.parquet").is_file() and accuracy is not None:
        st.info("No pair entered the means: nothing was patched.")
        control_maps(run, control_positions, control_heads, "all", 1.0)
        return
    positions = load_table(run, "position_effects")
    heads = load_table(run, "head_effects")
    limit = colour_limit(positions, heads)
    template = None
    if has_columns_or_explain(positions, ["template", "role", "role_order", *EFFECT_COLUMNS], "position_effects", run):
        with guard("the layer x position map", run):
            templates = list(dict.fromkeys(["all", *positions["template"].astype(str)]))
            template = st.selectbox("template", templates, key="patching_template")
            st.plotly_chart(position_heatmap(positions, template, limit), width="stretch", key="patching-positions")
    if has_columns_or_explain(heads, ["head", *EFFECT_COLUMNS], "head_effects", run):
        with guard("the layer x head map", run):
            st.plotly_chart(head_heatmap(heads, limit), width="stretch", key="patching-heads")
    control_maps(run, control_positions, control_heads, template or "all", limit)
    carriers = optional_table(run, "number_carriers")
    if carriers is not None and warning is None:
        st.subheader("Where number is carried (interval above the threshold)")
        st.dataframe(carriers, width="stretch", hide_index=True)


CONTROL_TEXT = (
    "**Control: a randomly initialised copy of the model** (same architecture and tokenizer), patched the same "
    "way over the pairs whose score it moves toward the right verb by at least the minimum difference "
    "(`use_pairs: all`; it gets almost none right in both sentences). Same colour scale as the maps above: "
    "what patching draws for a model that has learnt nothing."
)


def control_maps(
    run: Path, positions: pd.DataFrame | None, heads: pd.DataFrame | None, template: str, limit: float
) -> None:
    """The random-init control's layer x position and layer x head maps under the trained model's
    (the same colour scale ``limit``), or a line saying why there are none."""
    if positions is None and heads is None:
        if (run / "control_pairs.parquet").is_file():
            st.info("Control: no pair of the random-init copy moved the score toward the right verb: nothing patched.")
        return
    st.subheader("Control: randomly initialised model")
    st.markdown(CONTROL_TEXT)
    if positions is not None and has_columns_or_explain(
        positions, ["template", "role", "role_order", *EFFECT_COLUMNS], "control_position_effects", run
    ):
        with guard("the control's layer x position map", run):
            shown = template if template in set(positions["template"].astype(str)) else "all"
            fig = position_heatmap(positions, shown, limit, control=True)
            st.plotly_chart(fig, width="stretch", key="patching-control-positions")
    if heads is not None and has_columns_or_explain(heads, ["head", *EFFECT_COLUMNS], "control_head_effects", run):
        with guard("the control's layer x head map", run):
            st.plotly_chart(head_heatmap(heads, limit, control=True), width="stretch", key="patching-control-heads")


# --------------------------------------------------------------------------- figures

CONTROL_PREFIX = "CONTROL (random-init model):<br>"  # a line of its own: the title stays within the page


def colour_limit(*tables: pd.DataFrame | None) -> float:
    """The colour scale's end for every map of a run: the largest absolute mean restored fraction of
    ``tables`` (the trained model's; at least 1, the whole clean score), so the trained model's maps and
    the control's share one scale (-limit blue, 0 white, +limit red; the control's larger values clip)."""
    values = [np.abs(t["restored"].to_numpy(dtype=float)) for t in tables if t is not None and "restored" in t]
    finite = np.concatenate(values)[np.isfinite(np.concatenate(values))] if values else np.array([])
    return float(max(1.0, finite.max())) if finite.size else 1.0


def _hover(label: str, restored: float, low: float, high: float, n: int) -> str:
    return f"{label}<br>restored {restored:.3f} [{low:.2f}, {high:.2f}]<br>{int(n)} pairs"


def _heatmap(
    grid: pd.DataFrame, text: list[list[str]], title: str, x_title: str, y_title: str, limit: float | None = None
) -> go.Figure:
    """A diverging heat map of restored fractions (0 white, 1 red, negative blue), the first layer on top;
    ``limit``: the colour scale runs from -limit to +limit (None: from the values); ``title``: escaped
    text (:func:`esc`), ``<br>`` a line break."""
    fig = go.Figure(
        go.Heatmap(
            z=grid.to_numpy(dtype=float),
            x=list(grid.columns),
            y=list(grid.index),
            text=text,
            hoverinfo="text",
            colorscale="RdBu_r",
            zmid=0.0,
            **({} if limit is None else {"zmin": -limit, "zmax": limit}),
            colorbar=dict(title="restored"),
        )
    )
    fig.update_layout(
        title=title,
        xaxis=dict(title=x_title, type="category"),
        yaxis=dict(title=y_title, autorange="reversed", dtick=1),
        height=max(300, 160 + 36 * len(grid.index)) + 24 * title.count("<br>"),
        margin=dict(t=60 + 24 * title.count("<br>")),
    )
    return fig


def _grid(df: pd.DataFrame, column: str, value: str) -> pd.DataFrame:
    return df.pivot(index="layer", columns=column, values=value).sort_index()


def position_heatmap(
    position_effects: pd.DataFrame, template: str, limit: float | None = None, control: bool = False
) -> go.Figure:
    """Layer x token role of one template (or ``all``): the mean restored fraction over pairs, its
    interval and pair count on hover. ``position_effects``: ``template, layer, role, role_order,
    restored, low, high, n_pairs``; roles in ``role_order``. ``limit``: the colour scale's end
    (:func:`colour_limit`); ``control``: the random-init control's map, titled so."""
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
    title = f"hidden state patched at one token ({esc(template)}): share of the clean score restored"
    return _heatmap(
        grids["restored"],
        text,
        CONTROL_PREFIX + title if control else title,
        "token role",
        "hidden state<br>(0 = embeddings)",  # short: a long vertical title overran a map of few layers
        limit,
    )


def head_heatmap(head_effects: pd.DataFrame, limit: float | None = None, control: bool = False) -> go.Figure:
    """Layer x head: the mean restored fraction over pairs when that head's output (at every token) is
    patched, its interval and pair count on hover. ``head_effects``: ``layer, head, restored, low,
    high, n_pairs``; ``limit``, ``control``: as :func:`position_heatmap`."""
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
    return _heatmap(grids["restored"], text, CONTROL_PREFIX + title if control else title, "head", "layer", limit)


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
