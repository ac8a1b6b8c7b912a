"""Plotly figures of the dashboard: pure functions of data frames (no Streamlit here, so each one
can be tested on its own). Each docstring names the columns its table needs; the parts of result
tables they draw are cut by :mod:`bertology.apps.tables`.

Words are data, not markup: Plotly renders a subset of HTML in titles, tick labels, legends, text
and hover labels (``<b>``, ``<br>``, ``<a>``...), so every word, sentence or label read from a result
file passes through :func:`esc` before it reaches a figure (Plotly decodes ``&lt;`` back to ``<`` and
shows it as typed).
"""

from __future__ import annotations

import html
from typing import Any, Sequence

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from bertology.apps.tables import offset_sort_key

# Fixed colours per head type (Voita et al. 2019; Clark et al. 2019), so a type keeps its colour on
# every page, checkpoint and run; "other" = no criterion holds.
TYPE_COLOURS = {"positional": "#1f77b4", "syntactic": "#d62728", "rare-token": "#9467bd", "special": "#2ca02c",
                "broad": "#ff7f0e", "other": "#c7c7c7"}
EXTRA_COLOURS = px.colors.qualitative.Dark24
KIND_COLOURS = {"raw": "#1f77b4", "baseline": "#7f7f7f", "adjusted": "#d62728"}
MEASURE_NAMES = {"self_similarity": "self-similarity", "intra_sentence_similarity": "intra-sentence similarity",
                 "mev": "maximum explainable variance"}
DIRECTIONS = {"dependent_attends_to_head": "dependent → head", "head_attends_to_dependent": "head → dependent"}


def esc(text: Any) -> str:
    """``text`` as Plotly should show it literally: ``<b>x</b>`` -> ``&lt;b&gt;x&lt;/b&gt;``."""
    return html.escape(str(text), quote=False)


def type_colour(kind: str, known: Sequence[str] = ()) -> str:
    """The fixed colour of a head type; unknown types get stable colours from a qualitative palette."""
    if kind in TYPE_COLOURS:
        return TYPE_COLOURS[kind]
    others = sorted(k for k in set(known) | {kind} if k not in TYPE_COLOURS)
    return EXTRA_COLOURS[others.index(kind) % len(EXTRA_COLOURS)]


def ordered_types(types: Sequence[str]) -> list[str]:
    """Types in the fixed order of :data:`TYPE_COLOURS`, unknown ones after, sorted."""
    present = set(map(str, types))
    return [t for t in TYPE_COLOURS if t in present] + sorted(present - set(TYPE_COLOURS))


def _hover(row: pd.Series, columns: Sequence[str]) -> str:
    parts = [f"layer {int(row['layer'])}, head {int(row['head'])}", f"type: {esc(row['type'])}"]
    for c in columns:
        v = row[c]
        if isinstance(v, (float, np.floating)):
            parts.append(f"{esc(c)}: {v:.3g}")
        elif v is not None:
            parts.append(f"{esc(c)}: {esc(v)}")
    return "<br>".join(parts)


HOVER_COLUMNS = ("types", "positional_offset", "positional_share", "syntactic_relation", "syntactic_accuracy",
                 "syntactic_baseline", "rare_share", "special_share", "entropy_norm")


def head_map(types: pd.DataFrame, title: str, selected: tuple[int, int] | None = None,
             height: int | None = None, subtitle: str | None = None) -> go.Figure:
    """Categorical head map: one square per head (x = head, y = layer, layer 0 at the top), coloured
    by its type, one legend entry per type with its count. Each point carries ``customdata =
    [layer, head]`` (what a click selects); ``selected`` gets a black outline.

    ``types``: one row per head with ``layer, head, type`` (extra columns go into the hover text);
    ``subtitle``: a second title line (which run).
    """
    df = types.copy()
    df["layer"] = df["layer"].astype(int)
    df["head"] = df["head"].astype(int)
    df["type"] = df["type"].astype(str)
    n_layers = int(df["layer"].max()) + 1 if len(df) else 1
    n_heads = int(df["head"].max()) + 1 if len(df) else 1
    cell = int(np.clip(min(360 / max(n_layers, 1), 300 / max(n_heads, 1)), 10, 34))  # squares that do not touch in a half-width column
    hover = [c for c in HOVER_COLUMNS if c in df.columns]
    fig = go.Figure()
    kinds = ordered_types(df["type"].unique())
    for kind in kinds:
        part = df[df["type"] == kind]
        fig.add_trace(go.Scatter(
            x=part["head"], y=part["layer"], mode="markers", name=f"{esc(kind)} ({len(part)})",
            marker=dict(symbol="square", size=cell, color=type_colour(kind, kinds), line=dict(width=0)),
            customdata=part[["layer", "head"]].to_numpy(), hovertext=[_hover(r, hover) for _, r in part.iterrows()],
            hoverinfo="text"))
    if selected is not None:
        fig.add_trace(go.Scatter(x=[selected[1]], y=[selected[0]], mode="markers", name="selected head",
                                 marker=dict(symbol="square-open", size=cell + 4, color="black", line=dict(width=3)),
                                 hoverinfo="skip"))
    fig.update_layout(
        title=dict(text=esc(title), subtitle=dict(text=esc(subtitle or ""))),
        height=height or 140 + (cell + 6) * n_layers, legend_title_text="head type (heads)",
        xaxis=dict(title="head", tickmode="array", tickvals=list(range(n_heads)), range=[-0.6, n_heads - 0.4],
                   showgrid=False, zeroline=False),
        yaxis=dict(title="layer", tickmode="array", tickvals=list(range(n_layers)), range=[n_layers - 0.4, -0.6],
                   showgrid=False, zeroline=False),
        plot_bgcolor="white", clickmode="event+select", margin=dict(t=70 if subtitle else 50, b=40))
    return fig


def word_labels(words: Sequence[str]) -> list[str]:
    """Unique, escaped axis labels ``"3: word"`` (a sentence may repeat a word)."""
    return [f"{i}: {esc(w)}" for i, w in enumerate(words)]


def attention_heatmap(words: Sequence[str], matrix: Any, title: str, height: int = 460,
                      columns: Sequence[str] | None = None) -> go.Figure:
    """Heatmap of one head's attention on one sentence. ``matrix``: ``[words, columns]``, row = the
    attending word, column = the attended word (``columns``: their labels when they differ from
    ``words``, e.g. words with the special tokens)."""
    labels = word_labels(words)
    fig = go.Figure(go.Heatmap(z=np.asarray(matrix, dtype=float), x=labels if columns is None else word_labels(columns),
                               y=labels, colorscale="Blues", zmin=0,
                               hovertemplate="%{y} → %{x}: %{z:.2f}<extra></extra>"))
    fig.update_layout(title=esc(title), yaxis_autorange="reversed", height=height, xaxis_title="attended word",
                      yaxis_title="attending word", margin=dict(t=50))
    return fig


def attention_small_multiples(sentences: Sequence[dict], layer: int, head: int, columns: int = 2) -> go.Figure:
    """One heatmap per example sentence for head ``(layer, head)`` (shared colour scale 0..1).

    ``sentences``: dicts with ``words`` and ``attention`` ``[layers, heads, words, words]``."""
    n = len(sentences)
    rows = (n + columns - 1) // columns
    titles = [esc(" ".join(s["words"])[:60]) for s in sentences]
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=titles, horizontal_spacing=0.18,
                        vertical_spacing=0.22 / max(rows, 1) + 0.08)
    for k, s in enumerate(sentences):
        labels = word_labels(s["words"])
        fig.add_trace(go.Heatmap(z=np.asarray(s["attention"][layer][head], dtype=float), x=labels, y=labels,
                                 coloraxis="coloraxis", hovertemplate="%{y} → %{x}: %{z:.2f}<extra></extra>"),
                      row=k // columns + 1, col=k % columns + 1)
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=9))
    fig.update_xaxes(tickfont=dict(size=9), tickangle=-60)
    fig.update_layout(coloraxis=dict(colorscale="Blues", cmin=0, cmax=1, colorbar=dict(title="attention")),
                      height=380 * rows, title=f"layer {layer}, head {head} on example sentences "
                                               "(row attends to column)", margin=dict(t=80))
    for annotation in fig.layout.annotations:
        annotation.font.size = 11
    return fig


def head_view(words: Sequence[str], matrix: Any, title: str, threshold: float = 0.05,
              targets: Sequence[str] | None = None) -> go.Figure:
    """bertviz-style head view drawn offline: each attending word (left) is linked to the words it
    attends to (right), line width and opacity proportional to the weight (weights below
    ``threshold`` are not drawn). ``matrix``: ``[words, targets]`` (``targets``: the attended
    units when they differ from ``words``, e.g. the words with the special tokens)."""
    matrix = np.asarray(matrix, dtype=float)
    shown = [esc(w) for w in words]
    right = shown if targets is None else [esc(w) for w in targets]
    fig = go.Figure()
    n, m = len(shown), len(right)
    for i in range(n):
        for j in range(m):
            w = matrix[i, j]
            if w > threshold:
                fig.add_trace(go.Scatter(x=[0, 1], y=[-i, -j], mode="lines", hoverinfo="text",
                                         hovertext=f"{shown[i]} → {right[j]}: {w:.2f}",
                                         line=dict(width=1 + 8 * w, color=f"rgba(31,119,180,{min(1.0, 0.1 + w):.2f})"),
                                         showlegend=False))
    fig.add_trace(go.Scatter(x=[0] * n, y=[-i for i in range(n)], mode="text", text=shown, textposition="middle left",
                             hoverinfo="skip", showlegend=False))
    fig.add_trace(go.Scatter(x=[1] * m, y=[-i for i in range(m)], mode="text", text=right,
                             textposition="middle right", hoverinfo="skip", showlegend=False))
    n = max(n, m)
    fig.update_layout(title=esc(title), height=max(320, 26 * n + 80), plot_bgcolor="white",
                      xaxis=dict(visible=False, range=[-0.9, 1.9]), yaxis=dict(visible=False, range=[-n + 0.5, 0.7]),
                      annotations=[dict(x=0, y=0.9, text="attending", showarrow=False, xanchor="right"),
                                   dict(x=1, y=0.9, text="attended", showarrow=False, xanchor="left")],
                      margin=dict(t=50))
    return fig


def offset_figure(hist: pd.DataFrame, layer: int, head: int) -> go.Figure:
    """Grouped bars: share of argmaxes per relative offset, token level and word level.
    ``hist``: ``level ("token" | "word"), offset (str), share`` (:func:`tables.offset_histogram`)."""
    order = list(dict.fromkeys(hist.assign(_k=hist["offset"].map(offset_sort_key)).sort_values("_k")["offset"]))
    fig = go.Figure()
    for level, colour in (("token", "#1f77b4"), ("word", "#ff7f0e")):
        part = hist[hist["level"] == level]
        if len(part):
            fig.add_trace(go.Bar(x=part["offset"], y=part["share"], name=f"{level} level", marker_color=colour))
    fig.update_layout(title=f"layer {layer}, head {head}: where its attention argmax falls (relative offset)",
                      xaxis=dict(title="offset of the most-attended position (−1 = previous)", type="category",
                                 categoryorder="array", categoryarray=order),
                      yaxis=dict(title="share of queries", range=[0, 1]), barmode="group", height=360,
                      margin=dict(t=50))
    return fig


def relation_figure(rel: pd.DataFrame, layer: int, head: int) -> go.Figure:
    """Bars: the head's accuracy per relation beside the best fixed-offset baseline.
    ``rel``: ``relation, direction, accuracy, baseline_offset, baseline_accuracy``
    (:func:`tables.relation_table`), best first."""
    labels = [f"{esc(r)} ({DIRECTIONS.get(d, esc(d))})" for r, d in zip(rel["relation"], rel["direction"])]
    fig = go.Figure([
        go.Bar(y=labels, x=rel["accuracy"], name="this head", marker_color="#d62728", orientation="h"),
        go.Bar(y=labels, x=rel["baseline_accuracy"], name="best fixed offset (baseline)", marker_color="#7f7f7f",
               orientation="h", hovertext=[f"offset {int(o):+d}" for o in rel["baseline_offset"]],
               hoverinfo="text+x")])
    fig.update_layout(title=f"layer {layer}, head {head}: relations it finds best vs the offset baseline",
                      xaxis=dict(title="accuracy (share of relation instances found by the argmax)", range=[0, 1]),
                      yaxis=dict(autorange="reversed"), barmode="group", height=360, margin=dict(t=50),
                      legend=dict(orientation="h", y=-0.25))
    return fig


def contextuality_multiples(contextuality: pd.DataFrame, run_column: str | None = None) -> go.Figure:
    """Small multiples (Ethayarajh 2019's layout): one panel per measure, raw / anisotropy baseline /
    adjusted per layer. With ``run_column``, one line colour per run and a dash per kind.

    ``contextuality``: the ``contextuality`` table (``layer, metric, raw, baseline, adjusted``; the
    kinds it lacks are left out), plus ``run_column`` when given."""
    kinds = [c for c in ("raw", "baseline", "adjusted") if c in contextuality.columns]
    ids = ["layer", "metric"] + ([run_column] if run_column else [])
    long = contextuality.melt(id_vars=ids, value_vars=kinds, var_name="kind", value_name="value")
    long["measure"] = long["metric"].map(lambda m: MEASURE_NAMES.get(m, str(m))).map(esc)
    if run_column:
        long[run_column] = long[run_column].map(esc)
        fig = px.line(long, x="layer", y="value", color=run_column, line_dash="kind", facet_col="measure",
                      markers=True, facet_col_spacing=0.06)
    else:
        fig = px.line(long, x="layer", y="value", color="kind", facet_col="measure", markers=True,
                      color_discrete_map=KIND_COLOURS, facet_col_spacing=0.06)
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_yaxes(matches=None, showticklabels=True)
    fig.update_layout(height=380, title="per layer: raw, anisotropy baseline (random words), adjusted = raw − baseline",
                      margin=dict(t=80), legend=dict(orientation="h", y=-0.2))
    return fig


def cluster_figure(part: pd.DataFrame, word: str, layer: Any = None) -> go.Figure:
    """UMAP of one word's occurrences, coloured by k-means cluster (unsupervised, not gold senses);
    the hover shows each occurrence's context, escaped.

    ``part``: the ``sense_clusters`` rows of one word: ``x, y`` (UMAP), ``cluster`` and ``context``
    where present; ``layer``: the layer of the vectors (None: not said)."""
    part = part.copy()
    sizes = part["cluster"].value_counts() if "cluster" in part else None
    if "cluster" in part:
        part["group"] = part["cluster"].map(lambda c: f"cluster {int(c) + 1} ({int(sizes[c])} uses)")
    else:
        part["group"] = "occurrence"
    where = f"layer {int(layer)} vectors" if layer is not None and pd.notna(layer) else "vectors"
    fig = go.Figure()
    for name, g in part.groupby("group", sort=True):
        fig.add_trace(go.Scatter(x=g["x"], y=g["y"], mode="markers", name=name, marker=dict(size=9),
                                 hovertext=[esc(c) for c in g["context"]] if "context" in g else None,
                                 hoverinfo="text" if "context" in g else "x+y"))
    fig.update_layout(title=f"'{esc(word)}' in context: UMAP of its {where}",
                      legend_title_text="k-means cluster of its contexts (not gold senses)", height=440,
                      xaxis_title="UMAP 1", yaxis_title="UMAP 2")
    return fig


def probe_by_step(scores: pd.DataFrame) -> go.Figure:
    """Probe accuracy per layer, one line per checkpoint step (light = early, dark = late), one panel
    per task. ``scores``: ``step, task, layer, value`` (mean over seeds taken here)."""
    mean = scores.groupby(["task", "step", "layer"], as_index=False)["value"].mean()
    mean["step"] = mean["step"].astype(int)
    steps = sorted(mean["step"].unique())
    colours = px.colors.sample_colorscale("Viridis", [0.85 * (1 - k / max(len(steps) - 1, 1)) for k in range(len(steps))])
    mean["task"] = mean["task"].map(esc)
    mean["checkpoint"] = mean["step"].map(lambda s: f"step {s}")
    fig = px.line(mean, x="layer", y="value", color="checkpoint", facet_col="task", markers=True,
                  color_discrete_sequence=colours, category_orders={"checkpoint": [f"step {s}" for s in steps]})
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_layout(height=380, title="probe accuracy per layer at each checkpoint (test split)",
                      yaxis_title="accuracy", margin=dict(t=80))
    return fig


def type_counts_figure(counts: pd.DataFrame) -> go.Figure:
    """Stacked areas: how many heads of each type at each checkpoint step. ``counts``: ``step, type, count``."""
    wide = counts.pivot_table(index="step", columns="type", values="count", aggfunc="sum", fill_value=0).sort_index()
    kinds = ordered_types(wide.columns)
    fig = go.Figure()
    for kind in kinds:
        fig.add_trace(go.Scatter(x=wide.index, y=wide[kind], name=esc(kind), stackgroup="types", mode="lines+markers",
                                 line=dict(color=type_colour(kind, kinds))))
    fig.update_layout(title="head types across checkpoints", xaxis_title="training step", yaxis_title="heads",
                      height=360, margin=dict(t=50))
    return fig


# --------------------------------------------------------------------------- curves and bars of the other pages

def line_with_band(df: pd.DataFrame, x: str, color: str, title: str, y_title: str) -> go.Figure:
    """One line per value of ``color`` over ``x`` with a shaded 95% band.

    ``df``: ``[x], [color], mean`` and the band as ``low, high`` (or, without them, ``mean ± ci95``):
    a :func:`bertology.results.mean_ci` or :func:`bertology.apps.tables.interval_bands` table."""
    fig = go.Figure()
    palette = px.colors.qualitative.Plotly
    for k, (name, part) in enumerate(df.groupby(color)):
        part = part.sort_values(x)
        c = palette[k % len(palette)]
        high = part["high"] if "high" in part else part["mean"] + part["ci95"]
        low = part["low"] if "low" in part else part["mean"] - part["ci95"]
        fig.add_trace(go.Scatter(x=list(part[x]) + list(part[x])[::-1],
                                 y=list(high) + list(low)[::-1],
                                 fill="toself", fillcolor=c, opacity=0.15, line=dict(width=0),
                                 hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(x=part[x], y=part["mean"], mode="lines+markers", name=esc(name),
                                 line=dict(color=c)))
    fig.update_layout(title=esc(title), xaxis_title=x, yaxis_title=esc(y_title), height=420)
    return fig


def add_baseline_lines(fig: go.Figure, means: pd.DataFrame, color: str, label: str) -> go.Figure:
    """Dashed lines of a baseline over ``fig``'s curves (:func:`line_with_band`), one per value of
    ``color``, in the colour of the curve of the same name (grey when there is none), named
    ``"<name> · <label>"``. ``means``: ``layer, [color], mean``."""
    colours = {t.name: t.line.color for t in fig.data if t.mode == "lines+markers"}
    for name, part in means.groupby(color):
        part = part.sort_values("layer")
        fig.add_trace(go.Scatter(x=part["layer"], y=part["mean"], mode="lines", name=f"{esc(name)} · {esc(label)}",
                                 line=dict(color=colours.get(esc(name), "#7f7f7f"), dash="dash", width=2)))
    return fig


def add_threshold_marks(fig: go.Figure, marks: pd.DataFrame) -> go.Figure:
    """Each order's pruning thresholds as markers on its curve (:func:`line_with_band` by method),
    in the curve's colour, one symbol per tolerance. ``marks``: ``method, tolerance, share_removed,
    value`` (:func:`tables.threshold_marks`)."""
    colours = {t.name: t.line.color for t in fig.data if t.mode == "lines+markers"}
    symbols = ["diamond", "x", "star", "triangle-up", "square"]
    for k, tolerance in enumerate(sorted(marks["tolerance"].unique())):
        part = marks[marks["tolerance"] == tolerance]
        for _, row in part.iterrows():
            name = esc(row["method"])
            fig.add_trace(go.Scatter(
                x=[row["share_removed"]], y=[row["value"]], mode="markers", name=f"{name}: {tolerance:.0%} threshold",
                marker=dict(symbol=symbols[k % len(symbols)], size=13, color=colours.get(name, "#000000"),
                            line=dict(width=1, color="black")),
                hovertemplate=f"{name}: %{{x:.0%}} of heads removable before the dev metric worsens by more than "
                              f"{tolerance:.0%}<br>test value there %{{y:.4g}}<extra></extra>"))
    return fig


def layer_curves_two_runs(both: pd.DataFrame, metric: str) -> go.Figure:
    """Probe score per layer of two runs, one panel per task, one colour per run, error bars = 95%
    interval. ``both``: ``run, task, layer, mean, ci95`` (:func:`tables.stack_runs` of two
    :func:`tables.layer_means`)."""
    both = both.assign(run=both["run"].map(esc), task=both["task"].map(esc))
    fig = px.line(both, x="layer", y="mean", error_y="ci95", color="run", facet_col="task", markers=True,
                  title=f"{metric} per layer, two runs (mean ± 95% CI over seeds)")
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_layout(height=420, legend=dict(orientation="h", y=-0.25))
    return fig


def mix_weights_figure(weights: pd.DataFrame) -> go.Figure:
    """Grouped bars: the scalar-mix weight of each layer, one colour per task.
    ``weights``: ``task, layer, weight`` (:func:`tables.mean_mix_weights`)."""
    return px.bar(weights.assign(task=weights["task"].map(esc)), x="layer", y="weight", color="task",
                  barmode="group", title="scalar-mix weights")


def zoomed_range(low: Any, high: Any, pad: float = 0.15) -> list[float]:
    """An axis range around the values from ``low`` to ``high`` (arrays), padded by ``pad`` of their
    span, so that differences between close scores are visible (the axis need not start at 0)."""
    lo, hi = float(np.nanmin(low)), float(np.nanmax(high))
    span = hi - lo or max(abs(hi), 1e-3) * 0.1
    lo, hi = lo - pad * span, hi + pad * span
    if float(np.nanmin(low)) >= 0 and float(np.nanmax(high)) <= 1:  # shares and scores stay in [0, 1]
        lo, hi = max(lo, 0.0), min(hi, 1.0)
    return [lo, hi]


def combinations_figure(means: pd.DataFrame, metric: str) -> go.Figure:
    """Horizontal bars with 95% error bars: the score of each feature combination, one colour per
    task, best combination (mean over tasks) on top; the axis covers the scores' range, not 0..1,
    and says where it starts. ``means``: ``task, combination, mean, ci95`` (:func:`tables.combination_means`)."""
    shown = means.assign(task=means["task"].map(esc), combination=means["combination"].map(esc))
    order = list(shown.groupby("combination")["mean"].mean().sort_values(ascending=False).index)
    ci = shown["ci95"].fillna(0) if "ci95" in shown else 0
    axis = zoomed_range((shown["mean"] - ci).clip(lower=0) if shown["mean"].min() >= 0 else shown["mean"] - ci,
                        shown["mean"] + ci)
    fig = px.bar(shown, y="combination", x="mean", error_x="ci95" if "ci95" in shown else None, color="task",
                 barmode="group", orientation="h", text=shown["mean"].map(lambda v: f"{v:.3f}"),
                 category_orders={"combination": order}, title=f"{esc(metric)} by feature combination (best on top)")
    fig.update_layout(xaxis=dict(range=axis, title=f"{esc(metric)} (axis starts at {axis[0]:.3f}, not 0)"),
                      yaxis_title="", height=160 + 34 * len(order) * max(1, shown["task"].nunique()))
    return fig


def importance_figure(grid: pd.DataFrame) -> go.Figure:
    """Heatmap of head importance. ``grid``: ``[layers, heads]``, index = layer, columns = head
    (:func:`tables.importance_grid`)."""
    return px.imshow(grid, labels=dict(x="head", y="layer", color="importance"),
                     title="head importance (normalised per layer)")


def loss_figure(loss: pd.DataFrame) -> go.Figure:
    """Training and held-out MLM loss per step. ``loss``: ``step, metric, value`` (:func:`tables.loss_rows`)."""
    return px.line(loss, x="step", y="value", color="metric", markers=True,
                   title="MLM loss (nats/token): training and held-out")


def perplexity_figure(perplexity: pd.DataFrame) -> go.Figure:
    """Held-out perplexity per step. ``perplexity``: ``step, value`` (:func:`tables.perplexity_rows`)."""
    return px.line(perplexity, x="step", y="value", markers=True, title="held-out perplexity")


def best_layer_figure(best: pd.DataFrame) -> go.Figure:
    """Best-layer probe accuracy per checkpoint step, one line per task.
    ``best``: ``step, task, value`` (:func:`tables.best_layer_by_step`)."""
    return px.line(best.assign(task=best["task"].map(esc)), x="step", y="value", color="task", markers=True,
                   title="best-layer probe accuracy across checkpoints")


# --------------------------------------------------------------------------- the Live page (one typed sentence)

def model_view(maps: Any, title: str, width: int = 1100) -> go.Figure:
    """bertviz's model view as one mosaic: the attention map of every head of every layer at once
    (row = layer, layer 0 at the top; column = head), shared colour scale 0..1, maps separated by a
    blank line. ``maps``: ``[layers, heads, rows, columns]`` (row = the attending unit)."""
    maps = np.asarray(maps, dtype=float)
    L, H, R, C = maps.shape
    mosaic = np.full((L * (R + 1) - 1, H * (C + 1) - 1), np.nan)
    for l in range(L):
        for h in range(H):
            mosaic[l * (R + 1): l * (R + 1) + R, h * (C + 1): h * (C + 1) + C] = maps[l, h]
    fig = go.Figure(go.Heatmap(z=mosaic, colorscale="Blues", zmin=0, zmax=1, hoverongaps=False,
                               colorbar=dict(title="attention"), hovertemplate="%{z:.2f}<extra></extra>"))
    cell = max(2.0, min(12.0, (width - 160) / (H * (C + 1))))
    fig.update_layout(
        title=esc(title), height=int(min(2400, 120 + cell * L * (R + 1))), plot_bgcolor="white", margin=dict(t=60),
        xaxis=dict(tickmode="array", tickvals=[h * (C + 1) + (C - 1) / 2 for h in range(H)],
                   ticktext=[f"head {h}" for h in range(H)], side="top", showgrid=False, zeroline=False),
        yaxis=dict(tickmode="array", tickvals=[l * (R + 1) + (R - 1) / 2 for l in range(L)],
                   ticktext=[f"layer {l}" for l in range(L)], autorange="reversed", showgrid=False, zeroline=False,
                   scaleanchor="x"))
    return fig


def neuron_view(tokens: Sequence[str], query_vector: Any, keys: Any, contributions: Any, attention_row: Any,
                query: int, title: str) -> go.Figure:
    """bertviz's neuron view of one head for one query token: its query vector ``q`` (``[d]``, top),
    every token's key vector ``k_j`` (``[T, d]``), the elementwise products ``q ⊙ k_j`` (``[T, d]``;
    their sum over ``d`` divided by ``sqrt(d)`` is the score) and the attention row it softmaxes
    into (``[T]``, right). Diverging colours centred on 0."""
    q = np.asarray(query_vector, dtype=float)[None, :]
    keys, parts = np.asarray(keys, dtype=float), np.asarray(contributions, dtype=float)
    labels = word_labels(tokens)
    d = q.shape[1]
    scale = lambda a: float(np.abs(a).max()) or 1.0  # noqa: E731
    fig = make_subplots(rows=2, cols=3, column_widths=[0.38, 0.38, 0.24], row_heights=[0.1, 0.9],
                        horizontal_spacing=0.04, vertical_spacing=0.06, shared_yaxes=False,
                        specs=[[{"colspan": 2}, None, None], [{}, {}, {}]],
                        subplot_titles=[f"query q of {labels[query]}", "keys k_j", "q ⊙ k_j (sum / √d = score)",
                                        "attention"])
    fig.add_trace(go.Heatmap(z=q, x=list(range(d)), y=[labels[query]], colorscale="RdBu", zmid=0,
                             zmin=-scale(q), zmax=scale(q), showscale=False,
                             hovertemplate="dim %{x}: %{z:.3f}<extra></extra>"), row=1, col=1)
    for col, z in ((1, keys), (2, parts)):
        fig.add_trace(go.Heatmap(z=z, x=list(range(d)), y=labels, colorscale="RdBu", zmid=0, zmin=-scale(z),
                                 zmax=scale(z), showscale=False,
                                 hovertemplate="%{y}, dim %{x}: %{z:.3f}<extra></extra>"), row=2, col=col)
    fig.add_trace(go.Bar(x=np.asarray(attention_row, dtype=float), y=labels, orientation="h", marker_color="#1f77b4",
                         hovertemplate="%{y}: %{x:.2f}<extra></extra>", showlegend=False), row=2, col=3)
    for col in (1, 2, 3):
        fig.update_yaxes(autorange="reversed", row=2, col=col, showticklabels=col == 1, tickfont=dict(size=10))
    fig.update_xaxes(title_text="dimension of the head", row=2, col=1)
    fig.update_xaxes(title_text="dimension of the head", row=2, col=2)
    fig.update_xaxes(range=[0, 1], row=2, col=3)
    fig.update_layout(title=esc(title), height=max(380, 22 * len(labels) + 170), margin=dict(t=90))
    return fig


def predictions_figure(top: pd.DataFrame, word: str) -> go.Figure:
    """Horizontal bars: the MLM's top tokens for a masked word, best first, with their probability.
    ``top``: ``rank, token, probability`` (:func:`bertology.inspection.masked_predictions`)."""
    labels = [f"{int(r)}. {esc(t)}" for r, t in zip(top["rank"], top["token"])]
    fig = go.Figure(go.Bar(x=top["probability"], y=labels, orientation="h", marker_color="#9467bd",
                           text=[f"{p:.1%}" for p in top["probability"]], textposition="outside",
                           hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    fig.update_layout(title=f"what the MLM head puts in place of '{esc(word)}'", height=120 + 28 * len(labels),
                      xaxis=dict(title="probability", range=[0, min(1.0, 1.3 * float(top["probability"].max()))]),
                      yaxis=dict(autorange="reversed"),
                      margin=dict(t=50))
    return fig


def change_figure(rows: pd.DataFrame, title: str) -> go.Figure:
    """Horizontal bars: each word's change (cosine distance after alignment, mean over replicates)
    with its replicate interval, and an ``x`` at its frequency bin's control threshold; moved words
    in one colour, the rest in grey, top row first. ``rows``: ``word, cosine_distance, low, high,
    control_threshold, moved`` (:func:`tables.change_rows`)."""
    shown = rows.iloc[::-1]
    words = [esc(w) for w in shown["word"]]
    colour = np.where(shown["moved"].astype(bool), "#d62728", "#7f7f7f")
    fig = go.Figure(go.Bar(
        y=words, x=shown["cosine_distance"], orientation="h", marker_color=colour, name="change",
        error_x=dict(type="data", symmetric=False, array=(shown["high"] - shown["cosine_distance"]).clip(lower=0),
                     arrayminus=(shown["cosine_distance"] - shown["low"]).clip(lower=0)),
        hovertext=[f"{w}: {m:.3f} [{lo:.3f}, {hi:.3f}], control {c:.3f}" for w, m, lo, hi, c in zip(
            words, shown["cosine_distance"], shown["low"], shown["high"], shown["control_threshold"])],
        hoverinfo="text"))
    fig.add_trace(go.Scatter(y=words, x=shown["control_threshold"], mode="markers", name="control threshold",
                             marker=dict(symbol="x", size=9, color="black")))
    fig.update_layout(title=esc(title), xaxis_title="cosine distance after alignment (mean over replicates)",
                      height=140 + 22 * len(shown), legend=dict(orientation="h"))
    return fig


def per_layer_lines(df: pd.DataFrame, y: str, title: str, y_title: str, *, zero_line: bool = False) -> go.Figure:
    """One line per task over layers, with markers; ``df``: ``task, layer, <y>`` (one row each, e.g.
    a mean over seeds). The y axis covers the values, not 0..1; ``zero_line`` marks 0 (selectivity)."""
    shown = df.assign(task=df["task"].map(esc)).sort_values(["task", "layer"])
    fig = px.line(shown, x="layer", y=y, color="task", markers=True, title=title)
    fig.update_layout(xaxis=dict(dtick=1, title="layer (0 = embeddings)"), yaxis_title=y_title)
    if zero_line:
        fig.add_hline(y=0, line_dash="dot", line_color="grey")
    return fig


def l0_gates_figure(gates: pd.DataFrame) -> go.Figure:
    """One panel per λ: each head's probability that its Hard Concrete gate is open (``p_open``),
    a square per head (x = head, y = layer, layer 0 at the top), heads the deterministic gate removes
    marked with an x. ``gates``: ``lam, layer, head, p_open, kept`` (:func:`train_l0_gates`; the first
    seed of each λ)."""
    lams = sorted(gates["lam"].unique())
    fig = make_subplots(rows=1, cols=len(lams), subplot_titles=[f"λ = {lam:g}: {int(gates[gates['lam'] == lam]['kept'].sum())} "
                                                               f"of {int((gates['lam'] == lam).sum())} heads kept"
                                                               for lam in lams], shared_yaxes=True)
    for c, lam in enumerate(lams, 1):
        part = gates[gates["lam"] == lam]
        grid = part.pivot_table(index="layer", columns="head", values="p_open", aggfunc="mean")
        fig.add_trace(go.Heatmap(z=grid.to_numpy(), x=list(grid.columns), y=list(grid.index), zmin=0, zmax=1,
                                 colorscale="Blues", colorbar=dict(title="P(open)"), showscale=c == 1,
                                 hovertemplate="layer %{y}, head %{x}: P(open) %{z:.2f}<extra></extra>"), 1, c)
        off = part[~part["kept"].astype(bool)]
        fig.add_trace(go.Scatter(x=off["head"], y=off["layer"], mode="markers", name="removed" if c == 1 else None,
                                 showlegend=c == 1, marker=dict(symbol="x", color="crimson", size=9)), 1, c)
        fig.update_xaxes(title_text="head", dtick=1, row=1, col=c)
    n_layers = int(gates["layer"].max()) + 1
    fig.update_yaxes(autorange="reversed", dtick=1, title_text="layer", row=1, col=1)
    fig.update_layout(title="L0 head gates (Voita et al. 2019): which heads each penalty keeps",
                      height=180 + 34 * n_layers)
    return fig


def finetune_scores_figure(scores: pd.DataFrame) -> go.Figure:
    """Horizontal bars: test accuracy of each fine-tuning mode per task with its 95% interval
    (``low``/``high``); the axis covers the intervals, not 0..1. ``scores``: ``task, mode,
    accuracy, low, high`` (the ``finetune_scores`` table)."""
    shown = scores.assign(task=scores["task"].map(esc), mode=scores["mode"].map(esc))
    low = shown["low"].fillna(shown["accuracy"])
    high = shown["high"].fillna(shown["accuracy"])
    axis = zoomed_range(low, high)
    fig = go.Figure()
    for task, part in shown.groupby("task", sort=False):
        fig.add_trace(go.Bar(
            y=part["mode"], x=part["accuracy"], orientation="h", name=task,
            error_x=dict(type="data", symmetric=False, array=(high[part.index] - part["accuracy"]).tolist(),
                         arrayminus=(part["accuracy"] - low[part.index]).tolist()),
            text=[f"{v:.3f}" for v in part["accuracy"]], textposition="inside"))
    fig.update_layout(barmode="group", title="test accuracy by fine-tuning mode (95% interval)",
                      xaxis=dict(range=axis, title=f"test accuracy (axis starts at {axis[0]:.3f}, not 0)"),
                      yaxis_title="", height=160 + 40 * len(shown))
    return fig


def survivors_figure(survivors: pd.DataFrame) -> go.Figure:
    """Which heads and feed-forward blocks survive in the good sub-networks (Prasanna et al. 2020):
    a layer × head map of the share of seeds in which each head survives, with the layer's FFN block
    as a last column; super-survivors (every seed) marked ★. ``survivors``: the
    ``structured_survivors`` table (``component, layer, head, share, super_survivor``)."""
    heads = survivors[survivors["component"] == "head"].pivot(index="layer", columns="head", values="share").sort_index()
    ffn = survivors[survivors["component"] == "ffn"].set_index("layer")["share"].reindex(heads.index)
    z = np.column_stack([heads.to_numpy(), ffn.to_numpy()])
    stars = survivors.assign(column=survivors["head"].where(survivors["component"] == "head", heads.shape[1]))
    text = np.full(z.shape, "", dtype=object)
    rows = {layer: i for i, layer in enumerate(heads.index)}
    for r in stars[stars["super_survivor"]].itertuples():
        text[rows[r.layer], int(r.column)] = "★"
    x = [f"H{h}" for h in heads.columns] + ["FFN"]
    fig = go.Figure(go.Heatmap(z=z, x=x, y=[f"L{l}" for l in heads.index], zmin=0, zmax=1, colorscale="Greens",
                               text=text, texttemplate="%{text}", colorbar=dict(title="seeds surviving")))
    fig.update_layout(title="share of seeds whose good sub-network keeps each head and FFN block (★ = every seed)",
                      yaxis=dict(autorange="reversed"), height=180 + 28 * len(heads.index))
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
        size = f"{row['accuracy']:.3f} · size ×{row['size_ratio']:.2f}" + (" (packed)" if row["size_kind"] == "theoretical"
                                                                           else "")
        return size + (f" · {row['speedup']:.2f}× faster" if pd.notna(row["speedup"]) and row["setting"] != "float32"
                       else "")
    fig = go.Figure(go.Bar(
        y=shown["setting"].map(esc), x=shown["accuracy"], orientation="h",
        error_x=dict(type="data", symmetric=False, array=(high - shown["accuracy"]).tolist(),
                     arrayminus=(shown["accuracy"] - low).tolist()),
        text=[label(r) for _, r in shown.iterrows()], textposition="inside", insidetextanchor="start"))
    fig.update_layout(title="test accuracy under each quantization (95% interval)",
                      xaxis=dict(range=axis, title=f"test accuracy (axis starts at {axis[0]:.3f}, not 0)"),
                      yaxis=dict(autorange="reversed", title=""), height=160 + 40 * len(shown))
    return fig


FINETUNE_CHANGE_PANELS = (("cka", "CKA with the pretrained layer (1 = unchanged)"),
                          ("weight", "relative weight change ‖ΔW‖/‖W‖"),
                          ("attention_js", "attention change (mean JS divergence per head)"))


def finetune_change_figure(change: pd.DataFrame, task: str) -> go.Figure:
    """What fine-tuning changed, per layer, one line per mode: CKA between the pretrained and the
    fine-tuned layer, relative weight change (every ``weight_<module>`` column, the mode's colour,
    one dash per module) and mean attention JS divergence. ``change``: the ``change_by_layer``
    table (``task, mode, layer, cka, weight_*, attention_js``)."""
    part = change[change["task"] == task]
    fig = make_subplots(rows=1, cols=3, subplot_titles=[title for _, title in FINETUNE_CHANGE_PANELS])
    palette = px.colors.qualitative.Plotly
    modes = list(dict.fromkeys(part["mode"]))
    dashes = ("solid", "dash", "dot", "dashdot")
    modules = [c for c in part.columns if c.startswith("weight_")]
    for m, mode in enumerate(modes):
        rows = part[part["mode"] == mode].sort_values("layer")
        colour = palette[m % len(palette)]
        fig.add_trace(go.Scatter(x=rows["layer"], y=rows["cka"], mode="lines+markers", name=esc(mode),
                                 legendgroup=esc(mode), line=dict(color=colour)), 1, 1)
        for k, column in enumerate(modules):
            values = rows[["layer", column]].dropna()
            fig.add_trace(go.Scatter(x=values["layer"], y=values[column], mode="lines+markers",
                                     name=f"{esc(mode)} · {esc(column.removeprefix('weight_'))}",
                                     legendgroup=esc(mode), showlegend=True,
                                     line=dict(color=colour, dash=dashes[k % len(dashes)])), 1, 2)
        js = rows[["layer", "attention_js"]].dropna()
        if len(js):
            fig.add_trace(go.Scatter(x=js["layer"], y=js["attention_js"], mode="lines+markers", name=esc(mode),
                                     legendgroup=esc(mode), showlegend=False, line=dict(color=colour)), 1, 3)
    for c in (1, 2, 3):
        fig.update_xaxes(title_text="layer (0 = embeddings)", dtick=1, row=1, col=c)
    fig.update_layout(title=f"what fine-tuning changed, layer by layer: {esc(task)}", height=430)
    return fig


def probing_before_after_figure(probes: pd.DataFrame, task: str) -> go.Figure:
    """Test accuracy of a linear probe per layer before fine-tuning (``pretrained``, dashed black)
    and after it (one line per mode), one panel per probing task; means over seeds. ``probes``: the
    ``probing_before_after`` table (``task, mode, seed, probe_task, layer, split, accuracy``)."""
    part = probes[(probes["task"] == task) & (probes["split"] == "test")]
    means = part.groupby(["probe_task", "mode", "layer"], as_index=False)["accuracy"].mean()
    probe_tasks = list(dict.fromkeys(means["probe_task"]))
    fig = make_subplots(rows=1, cols=max(1, len(probe_tasks)), subplot_titles=[esc(t) for t in probe_tasks])
    palette = px.colors.qualitative.Plotly
    modes = [m for m in dict.fromkeys(means["mode"]) if m != "pretrained"]
    for c, probe_task in enumerate(probe_tasks, 1):
        rows = means[means["probe_task"] == probe_task]
        before = rows[rows["mode"] == "pretrained"].sort_values("layer")
        fig.add_trace(go.Scatter(x=before["layer"], y=before["accuracy"], mode="lines+markers", name="pretrained",
                                 legendgroup="pretrained", showlegend=c == 1,
                                 line=dict(color="black", dash="dash")), 1, c)
        for m, mode in enumerate(modes):
            after = rows[rows["mode"] == mode].sort_values("layer")
            fig.add_trace(go.Scatter(x=after["layer"], y=after["accuracy"], mode="lines+markers", name=esc(mode),
                                     legendgroup=esc(mode), showlegend=c == 1,
                                     line=dict(color=palette[m % len(palette)])), 1, c)
        fig.update_xaxes(title_text="layer (0 = embeddings)", dtick=1, row=1, col=c)
    fig.update_layout(title=f"probe accuracy per layer before and after fine-tuning on {esc(task)} (test)",
                      yaxis_title="accuracy", height=420)
    return fig
