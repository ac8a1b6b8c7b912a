"""The Heads page (Voita et al. 2019, Clark et al. 2019): the head map of a run (a click picks a
head), a second run's beside it, and one head in detail: its scores, where its attention argmax
falls, the relations it tracks, and its attention on example sentences."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from bertology.apps import figures, tables
from bertology.apps.figures import esc, word_labels, wrap
from bertology.apps.locations import describe, run_label
from bertology.apps.pages.page import Page
from bertology.apps.ui import (
    guard,
    has_columns_or_explain,
    load_extra,
    load_table,
    optional_table,
    pick_other,
    pick_run,
    query,
)
from bertology.numbering import to_index
from bertology.results import ResultError, read_manifest


def heads_page(page: Page) -> None:
    run = pick_run(page.study, "heads_run")
    if run is None:
        return
    other = pick_other(page.study, run, "heads_compare")
    types = None
    with guard("the head map", run):
        types = head_types_table(run)
    if types is not None:
        with guard("the head map", run):
            heads = head_keys(types)
            layer, head = map(int, selected_head(run, types, heads).split("-"))
            head_maps(run, other, types, layer, head)
            labels = type_by_head(types)
            pick_key = head_pick_key(run)
            st.selectbox(
                "head (or click one on the map)",
                heads,
                key=pick_key,
                format_func=lambda k: f"layer {k.split('-')[0]}, head {k.split('-')[1]} — {labels.get(k, '?')}",
            )
            layer, head = map(int, st.session_state[pick_key].split("-"))
            st.query_params["head"] = st.session_state[pick_key]  # the URL follows clicks and picks
        head_detail(run, types, layer, head)
    probe = load_table(run, "attention_probe")
    if probe is not None:
        st.subheader("Attention-based dependency probe (Clark et al.)")
        st.caption(
            ATTENTION_PROBE_NOTE if "uas_low" in probe.columns else "UAS on held-out sentences (no interval saved)"
        )
        st.dataframe(
            tables.paper_table(probe.drop(columns=["seed"], errors="ignore")), width="stretch", hide_index=True
        )


ATTENTION_PROBE_NOTE = (
    "UAS: share of the held-out non-root words whose predicted head is the gold one; in brackets its "
    "95% interval, a bootstrap over the test sentences (n_test: the words scored)."
)


def head_types_table(run: Path) -> pd.DataFrame | None:
    """A run's ``head_types`` table, checked (:func:`checked_head_types`); None, with the
    reason shown, when it is missing, lacks columns or is empty."""
    types = load_table(run, "head_types")
    if not has_columns_or_explain(types, ["layer", "head", "type"], "head_types", run):
        return None
    return checked_head_types(types)


def clicked_head(state: Any) -> str | None:
    """``"layer-head"`` of the point a click selected on the head map, if any."""
    try:
        points = state["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for p in points or []:
        if "x" in p and "y" in p:
            return f"{int(p['y'])}-{int(p['x'])}"
    return None


def head_pick_key(run: Path) -> str:
    """The session-state key of the head picked for ``run`` (each run keeps its own pick)."""
    return f"head_pick::{run_label(run)}"


def selected_head(run: Path, types: pd.DataFrame, heads: list[str]) -> str:
    """The ``"layer-head"`` the detail shows: a click on the map, else the last pick for this run,
    else the deep link's ``?head=``, else :func:`default_head`."""
    pick_key = head_pick_key(run)
    if st.session_state.get(pick_key) not in heads:
        wanted = query("head")
        st.session_state[pick_key] = wanted if wanted in heads else default_head(types)
        if wanted is not None and wanted not in heads:
            layers, heads_ = types["layer"], types["head"]
            st.warning(
                f"?head={esc(wanted)}: no such head in this run (write it as layer-head, layers "
                f"{layers.min()}-{layers.max()}, heads {heads_.min()}-{heads_.max()}); showing {st.session_state[pick_key]}"
            )
    click = clicked_head(st.session_state.get("head_map"))
    if click in heads and click != st.session_state.get("head_last_click"):
        st.session_state["head_last_click"] = click
        st.session_state[pick_key] = click
    return st.session_state[pick_key]


def head_maps(run: Path, other: Path | None, types: pd.DataFrame, layer: int, head: int) -> None:
    """The run's head map (a click selects a head), and beside it the second run's with the heads
    per type of both."""
    title, subtitle = "head types" + (" (A)" if other is not None else ""), describe(run)
    if other is None:
        st.plotly_chart(
            figures.head_map(types, title, selected=(layer, head), subtitle=subtitle),
            width="stretch",
            key="head_map",
            on_select="rerun",
            selection_mode="points",
        )
        return
    c1, c2 = st.columns(2)
    with c1:
        st.plotly_chart(
            figures.head_map(types, title, selected=(layer, head), subtitle=subtitle),
            width="stretch",
            key="head_map",
            on_select="rerun",
            selection_mode="points",
        )
    with c2, guard("the second head map", other):
        types_b = head_types_table(other)
        if types_b is not None:
            st.plotly_chart(
                figures.head_map(types_b, "head types (B)", subtitle=describe(other)), width="stretch", key="head_map_b"
            )
            st.caption(f"heads per type: A = {describe(run)}, B = {describe(other)}")
            st.dataframe(tables.paper_table(type_counts_side_by_side(types, types_b)), hide_index=True)


def head_facts(row: pd.Series) -> str:
    """One markdown line on a head: its type, where its argmax falls, its entropy, its attention on
    [CLS]/[SEP] (each where its ``head_types`` row has the column). Brackets are escaped."""
    facts = [
        f"type **{esc(row['type'])}**"
        + (f" (all: {esc(row['types'])})" if "types" in row and str(row["types"]) not in ("", str(row["type"])) else "")
    ]
    if "positional_offset" in row and pd.notna(row.get("positional_share")):
        facts.append(f"{row['positional_share']:.0%} of its argmaxes at offset {int(row['positional_offset']):+d}")
    if "entropy_norm" in row and pd.notna(row["entropy_norm"]):
        facts.append(f"normalised entropy {row['entropy_norm']:.2f}")
    if "special_share" in row and pd.notna(row["special_share"]):
        facts.append(f"{row['special_share']:.0%} of its attention on [CLS]/[SEP]")
    return " · ".join(facts).replace("[", "\\[").replace("]", "\\]")


def head_relations(run: Path, deps: pd.DataFrame | None, layer: int, head: int) -> None:
    """The relations the head finds best against the offset baseline (Clark et al. 2019).
    ``deps``: the run's ``head_dependency`` table (None: the run has none)."""
    if deps is not None and deps.empty:
        st.info("The corpus of this run has no dependencies: no relations to score.")
    elif has_columns_or_explain(
        deps,
        ["layer", "head", "relation", "direction", "n", "accuracy", "baseline_offset", "baseline_accuracy", "gain"],
        "head_dependency",
        run,
    ):
        try:
            config = read_manifest(run).get("config")
        except ResultError:
            config = None
        min_count = relation_min_count(config)
        rel = relation_table(deps, layer, head, min_count=min_count)
        if rel.empty:
            st.info(f"No relation has {min_count} or more instances for this head.")
        else:
            st.plotly_chart(relation_figure(rel, layer, head), width="stretch", key="relations")
            best = rel.iloc[0]
            st.caption(
                f"Best: {esc(best['relation'])} ({DIRECTIONS.get(best['direction'], best['direction'])})"
                f", accuracy {best['accuracy']:.2f} vs {best['baseline_accuracy']:.2f} for the best fixed "
                f"offset ({int(best['baseline_offset']):+d}); n = {int(best['n'])}.".replace("_", "\\_")
            )


def head_examples(run: Path, layer: int, head: int) -> None:
    """The head's attention on the run's example sentences, and a bertviz-style view of one."""
    examples = load_extra(run, "attention_examples")
    with guard("the attention examples", run):
        sents = examples.get("sentences") if isinstance(examples, dict) else None
        if sents:
            manifest = read_manifest(run)
            at = (tables.array_position(layer, manifest), tables.array_position(head, manifest))  # in the arrays
            st.markdown("**Its attention on example sentences** (row = attending word, column = attended word)")
            st.plotly_chart(attention_small_multiples(sents, layer, head, at), width="stretch", key="examples")
            st.markdown("**Head view of one sentence** (bertviz-style, drawn offline)")
            k = st.selectbox(
                "sentence",
                range(len(sents)),
                format_func=lambda i: " ".join(sents[i]["words"])[:90],
                key="head_sentence",
            )
            c3, c4 = st.columns(2)
            words, matrix = sents[k]["words"], sents[k]["attention"][at[0]][at[1]]
            c3.plotly_chart(
                figures.head_view(words, matrix, f"layer {layer}, head {head}"), width="stretch", key="head_view"
            )
            c4.plotly_chart(
                figures.attention_heatmap(words, matrix, f"layer {layer}, head {head}"), width="stretch", key="heatmap"
            )


def head_detail(run: Path, types: pd.DataFrame, layer: int, head: int) -> None:
    """What one head does: its scores, where its attention peaks, the relations it tracks, and its
    attention on the run's example sentences (with a bertviz-style view of one)."""
    st.subheader(f"Layer {layer}, head {head}")
    with guard(f"the scores of layer {layer}, head {head}", run):
        st.markdown(head_facts(head_row(types, layer, head)))
    c1, c2 = st.columns(2)
    stats = load_table(run, "head_stats")
    with c1, guard("the offset histogram", run):
        if has_columns_or_explain(stats, ["layer", "head", "statistic", "value"], "head_stats", run):
            hist = offset_histogram(stats, layer, head)
            if hist.empty:
                st.info("head_stats holds no offset counts for this head")
            else:
                st.plotly_chart(offset_figure(hist, layer, head), width="stretch", key="offsets")
    deps = optional_table(run, "head_dependency")
    with c2, guard("the relations", run):
        head_relations(run, deps, layer, head)
    head_examples(run, layer, head)


# --------------------------------------------------------------------------- data shaping


def checked_head_types(types: pd.DataFrame) -> pd.DataFrame:
    """A ``head_types`` table (``layer, head, type``...) with integer layers and heads; raises
    ``ValueError`` for a layer or head that is not a number and :class:`ResultError` for a head
    listed twice."""
    types = types.assign(
        layer=pd.to_numeric(types["layer"], errors="raise").astype(int),
        head=pd.to_numeric(types["head"], errors="raise").astype(int),
    )
    duplicated = types.duplicated(["layer", "head"])
    if duplicated.any():
        first = types[duplicated].iloc[0]
        raise ResultError(
            f"head_types has {int(duplicated.sum())} repeated head(s), e.g. layer {first['layer']} head {first['head']}"
        )
    return types


def head_keys(types: pd.DataFrame) -> list[str]:
    """``"layer-head"`` of every head of a ``head_types`` table, in layer then head order."""
    return [f"{int(l)}-{int(h)}" for l, h in types.sort_values(["layer", "head"])[["layer", "head"]].to_numpy()]


def type_by_head(types: pd.DataFrame) -> pd.Series:
    """The ``type`` of each head, indexed by ``"layer-head"``."""
    return types.set_index(types["layer"].astype(str) + "-" + types["head"].astype(str))["type"]


def default_head(types: pd.DataFrame) -> str:
    """The head the detail opens first: the clearest syntactic head, else the first positional one."""
    for kind, column in (("syntactic", "syntactic_gain"), ("positional", "positional_share")):
        part = types[types["type"] == kind]
        if len(part):
            row = part.sort_values(column, ascending=False).iloc[0] if column in part else part.iloc[0]
            return f"{int(row['layer'])}-{int(row['head'])}"
    row = types.sort_values(["layer", "head"]).iloc[0]
    return f"{int(row['layer'])}-{int(row['head'])}"


def head_row(types: pd.DataFrame, layer: int, head: int) -> pd.Series:
    """The ``head_types`` row of head ``(layer, head)``."""
    return types[(types["layer"] == layer) & (types["head"] == head)].iloc[0]


def type_counts_side_by_side(types_a: pd.DataFrame, types_b: pd.DataFrame) -> pd.DataFrame:
    """Heads per type in two runs: ``type, A, B`` (0 where a run has none of a type)."""
    counts = (
        pd.concat([types_a["type"].value_counts().rename("A"), types_b["type"].value_counts().rename("B")], axis=1)
        .fillna(0)
        .astype(int)
    )
    return counts.rename_axis("type").reset_index()


def relation_min_count(config: Any, default: int = 20) -> int:
    """The ``min_count`` (fewest instances for a relation to be scored) of a run's config, or
    ``default`` where the config does not say or says it badly."""
    try:
        return int(config.get("min_count", default)) if isinstance(config, dict) else default
    except (TypeError, ValueError):
        return default


_OFFSET = re.compile(r"^(token|argmax)_offset_(-?\d+|other)$")


def offset_sort_key(offset: str) -> int:
    """Numeric order of an offset bin name (``"-2"`` ... ``"other"``), ``other`` last."""
    return 10_000 if offset == "other" else int(offset)


def offset_histogram(stats: pd.DataFrame, layer: int, head: int) -> pd.DataFrame:
    """Share of a head's query tokens/words whose attention argmax is at each relative offset.

    ``stats``: the ``head_stats`` table (``layer, head, statistic, value``), whose
    ``token_offset_<k>`` (sub-word tokens, special tokens in place; Voita et al.) and
    ``argmax_offset_<k>`` (words; Clark et al.) rows are these shares. Returns ``level, offset,
    share`` with ``offset`` a string (``"-2"`` ... ``"other"``), sorted numerically, other last."""
    part = stats[(stats["layer"] == layer) & (stats["head"] == head)]
    rows = []
    for name, value in zip(part["statistic"], part["value"]):
        m = _OFFSET.match(str(name))
        if m:
            rows.append(
                {"level": "token" if m.group(1) == "token" else "word", "offset": m.group(2), "share": float(value)}
            )
    out = pd.DataFrame(rows, columns=["level", "offset", "share"])
    key = out["offset"].map(offset_sort_key)
    return out.assign(_k=key).sort_values(["level", "_k"]).drop(columns="_k").reset_index(drop=True)


def relation_table(dependency: pd.DataFrame, layer: int, head: int, min_count: int = 20, top: int = 6) -> pd.DataFrame:
    """The relations head ``(layer, head)`` tracks best (Clark et al. 2019): its accuracy at finding the
    other end of each relation (``head_dependency`` rows with ``n >= min_count``) against the best
    fixed-offset baseline, sorted by the gain over that baseline, ``top`` rows.

    ``dependency``: the ``head_dependency`` table (``layer, head, relation, direction, n, accuracy,
    baseline_offset, baseline_accuracy, gain``); the summary row ``relation == "all"`` is left out
    unless it is all there is."""
    part = dependency[(dependency["layer"] == layer) & (dependency["head"] == head) & (dependency["n"] >= min_count)]
    part = part[part["relation"] != "all"] if (part["relation"] != "all").any() else part
    cols = ["relation", "direction", "n", "accuracy", "baseline_offset", "baseline_accuracy", "gain"]
    return part.sort_values("gain", ascending=False)[cols].head(top).reset_index(drop=True)


# --------------------------------------------------------------------------- figures

DIRECTIONS = {"dependent_attends_to_head": "dependent → head", "head_attends_to_dependent": "head → dependent"}


def attention_small_multiples(
    sentences: Sequence[dict], layer: int, head: int, at: tuple[int, int] | None = None, columns: int = 2
) -> go.Figure:
    """One heatmap per example sentence for head ``(layer, head)`` (its numbers, from 1; shared colour
    scale 0..1). ``sentences``: dicts with ``words`` and ``attention`` ``[layers, heads, words, words]``;
    ``at``: the head's 0-based index in those arrays (default ``(layer - 1, head - 1)``)."""
    at = at or (to_index(layer), to_index(head))
    n = len(sentences)
    rows = (n + columns - 1) // columns
    titles = [esc(" ".join(s["words"])[:60]) for s in sentences]
    fig = make_subplots(
        rows=rows,
        cols=columns,
        subplot_titles=titles,
        horizontal_spacing=0.18,
        vertical_spacing=0.22 / max(rows, 1) + 0.08,
    )
    for k, s in enumerate(sentences):
        labels = word_labels(s["words"])
        fig.add_trace(
            go.Heatmap(
                z=np.asarray(s["attention"][at[0]][at[1]], dtype=float),
                x=labels,
                y=labels,
                coloraxis="coloraxis",
                hovertemplate="%{y} → %{x}: %{z:.2f}<extra></extra>",
            ),
            row=k // columns + 1,
            col=k % columns + 1,
        )
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=9))
    fig.update_xaxes(tickfont=dict(size=9), tickangle=-60)
    fig.update_layout(
        coloraxis=dict(colorscale="Blues", cmin=0, cmax=1, colorbar=dict(title="attention")),
        height=380 * rows,
        title=f"layer {layer}, head {head} on example sentences (row attends to column)",
        margin=dict(t=80),
    )
    for annotation in fig.layout.annotations:
        annotation.font.size = 11
    return fig


def offset_figure(hist: pd.DataFrame, layer: int, head: int) -> go.Figure:
    """Grouped bars: share of argmaxes per relative offset, token level and word level.
    ``hist``: ``level ("token" | "word"), offset (str), share`` (:func:`offset_histogram`)."""
    order = list(dict.fromkeys(hist.assign(_k=hist["offset"].map(offset_sort_key)).sort_values("_k")["offset"]))
    fig = go.Figure()
    for level, colour in (("token", "#1f77b4"), ("word", "#ff7f0e")):
        part = hist[hist["level"] == level]
        if len(part):
            fig.add_trace(go.Bar(x=part["offset"], y=part["share"], name=f"{level} level", marker_color=colour))
    title = wrap(f"layer {layer}, head {head}: where its attention argmax falls (relative offset)")
    fig.update_layout(
        title=title,  # in half the page's width: wrapped, not cut
        xaxis=dict(
            title="offset of the most-attended position (−1 = previous)",
            type="category",
            categoryorder="array",
            categoryarray=order,
        ),
        yaxis=dict(title="share of queries", range=[0, 1]),
        barmode="group",
        height=360,
        margin=dict(t=40 + 24 * title.count("<br>") + 30),
    )
    return fig


def relation_figure(rel: pd.DataFrame, layer: int, head: int) -> go.Figure:
    """Bars: the head's accuracy per relation beside the best fixed-offset baseline.
    ``rel``: ``relation, direction, accuracy, baseline_offset, baseline_accuracy``
    (:func:`relation_table`), best first."""
    labels = [f"{esc(r)}<br>{DIRECTIONS.get(d, esc(d))}" for r, d in zip(rel["relation"], rel["direction"])]
    fig = go.Figure(
        [
            go.Bar(y=labels, x=rel["accuracy"], name="this head", marker_color="#d62728", orientation="h"),
            go.Bar(
                y=labels,
                x=rel["baseline_accuracy"],
                name="best fixed offset (baseline)",
                marker_color="#7f7f7f",
                orientation="h",
                hovertext=[f"offset {int(o):+d}" for o in rel["baseline_offset"]],
                hoverinfo="text+x",
            ),
        ]
    )
    title = wrap(f"layer {layer}, head {head}: relations it finds best vs the offset baseline")
    fig.update_layout(
        title=title,
        # two lines: the chart sits in half the page's width, where one line was cut ("...found by the argm")
        xaxis=dict(title="accuracy<br>(share of relation instances found by the argmax)", range=[0, 1]),
        yaxis=dict(autorange="reversed", automargin=True),  # relation and direction in two lines, never cut
        barmode="group",
        height=380,
        margin=dict(t=40 + 24 * title.count("<br>") + 30, b=110),
        legend=dict(orientation="h", y=-0.4),
    )
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Heads",
    title="Attention heads (Voita et al. 2019, Clark et al. 2019)",
    intro="Each square is one attention head, coloured by what it does: attends to a fixed relative position "
    "(positional), to a word's syntactic head or dependent (syntactic), to rare words, to [CLS]/[SEP] "
    "(special), or broadly. Click a head (or pick it below) for its attention on example sentences, "
    "where its attention peaks, and the relations it tracks. Voita et al. 2019, *Analyzing Multi-Head "
    "Self-Attention*; Clark et al. 2019, *What Does BERT Look At?*.",
    render=heads_page,
    study="head_types",
    main_table="head_types",
    compare=True,
    min_charts=5,
    compare_charts=6,
)
