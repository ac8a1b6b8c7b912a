"""The Plotly figures several dashboard pages share (head maps, attention views, curves with a
band), and :func:`esc`: pure functions of data frames (no Streamlit here, so each one can be tested
on its own). Each docstring names the columns its table needs. A figure only one page draws is in
that page's module (:mod:`bertology.apps.pages`).

Words are data, not markup: Plotly renders a subset of HTML in titles, tick labels, legends, text
and hover labels (``<b>``, ``<br>``, ``<a>``...), so every word, sentence or label read from a result
file passes through :func:`esc` before it reaches a figure (Plotly decodes ``&lt;`` back to ``<`` and
shows it as typed).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

# Fixed colours per head type (Voita et al. 2019; Clark et al. 2019), so a type keeps its colour on
# every page, checkpoint and run; "other" = no criterion holds.
TYPE_COLOURS = {
    "positional": "#1f77b4",
    "syntactic": "#d62728",
    "rare-token": "#9467bd",
    "special": "#2ca02c",
    "broad": "#ff7f0e",
    "other": "#c7c7c7",
}
EXTRA_COLOURS = px.colors.qualitative.Dark24


def esc(text: Any) -> str:
    """``text`` as Plotly should show it literally: ``<b>x</b>`` -> ``&lt;b&gt;x&lt;/b&gt;``."""
    return html.escape(str(text), quote=False)


HALF_COLUMN_CHARS = 44
"""About how many characters of a chart title fit on one line in half the page's width (a column of
two, ~420 px at Plotly's 17 px title font); longer titles there are broken with :func:`wrap`."""


def wrap(text: str, width: int = HALF_COLUMN_CHARS) -> str:
    """``text`` broken into lines of at most ``width`` characters at spaces (``<br>``; a longer word
    keeps a line of its own), for titles and labels that Plotly would otherwise cut at the figure's
    edge. Escape the text first (:func:`esc`): the breaks are markup."""
    lines: list[str] = []
    for word in str(text).split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return "<br>".join(lines)


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


HOVER_COLUMNS = (
    "types",
    "positional_offset",
    "positional_share",
    "syntactic_relation",
    "syntactic_accuracy",
    "syntactic_baseline",
    "rare_share",
    "special_share",
    "entropy_norm",
)


def head_map(
    types: pd.DataFrame,
    title: str,
    selected: tuple[int, int] | None = None,
    height: int | None = None,
    subtitle: str | None = None,
) -> go.Figure:
    """Categorical head map: one square per head (x = head, y = layer, the first layer at the top; the
    table's numbers, from 1, on the axes), coloured
    by its type, one legend entry per type with its count. Each point carries ``customdata =
    [layer, head]`` (what a click selects); ``selected`` gets a black outline.

    ``types``: one row per head with ``layer, head, type`` (extra columns go into the hover text);
    ``subtitle``: a second title line (which run).
    """
    df = types.copy()
    df["layer"] = df["layer"].astype(int)
    df["head"] = df["head"].astype(int)
    df["type"] = df["type"].astype(str)
    first_layer, first_head = (int(df["layer"].min()), int(df["head"].min())) if len(df) else (1, 1)
    n_layers = int(df["layer"].max()) - first_layer + 1 if len(df) else 1
    n_heads = int(df["head"].max()) - first_head + 1 if len(df) else 1
    cell = int(
        np.clip(min(360 / max(n_layers, 1), 300 / max(n_heads, 1)), 10, 34)
    )  # squares that do not touch in a half-width column
    hover = [c for c in HOVER_COLUMNS if c in df.columns]
    fig = go.Figure()
    kinds = ordered_types(df["type"].unique())
    for kind in kinds:
        part = df[df["type"] == kind]
        fig.add_trace(
            go.Scatter(
                x=part["head"],
                y=part["layer"],
                mode="markers",
                name=f"{esc(kind)} ({len(part)})",
                marker=dict(symbol="square", size=cell, color=type_colour(kind, kinds), line=dict(width=0)),
                customdata=part[["layer", "head"]].to_numpy(),
                hovertext=[_hover(r, hover) for _, r in part.iterrows()],
                hoverinfo="text",
            )
        )
    if selected is not None:
        fig.add_trace(
            go.Scatter(
                x=[selected[1]],
                y=[selected[0]],
                mode="markers",
                name="selected head",
                marker=dict(symbol="square-open", size=cell + 4, color="black", line=dict(width=3)),
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title=dict(text=esc(title), subtitle=dict(text=esc(subtitle or ""))),
        height=height or 140 + (cell + 6) * n_layers,
        legend_title_text="head type (heads)",
        xaxis=dict(
            title="head",
            tickmode="array",
            tickvals=list(range(first_head, first_head + n_heads)),
            range=[first_head - 0.6, first_head + n_heads - 0.4],
            showgrid=False,
            zeroline=False,
        ),
        yaxis=dict(
            title="layer",
            tickmode="array",
            tickvals=list(range(first_layer, first_layer + n_layers)),
            range=[first_layer + n_layers - 0.4, first_layer - 0.6],
            showgrid=False,
            zeroline=False,
        ),
        plot_bgcolor="white",
        clickmode="event+select",
        margin=dict(t=70 if subtitle else 50, b=40),
    )
    return fig


def word_labels(words: Sequence[str], start: int = 0) -> list[str]:
    """Unique, escaped axis labels ``"3: word"`` (a sentence may repeat a word), numbered from ``start``."""
    return [f"{start + i}: {esc(w)}" for i, w in enumerate(words)]


def attention_heatmap(
    words: Sequence[str],
    matrix: Any,
    title: str,
    height: int = 460,
    columns: Sequence[str] | None = None,
    first_row: int = 0,
) -> go.Figure:
    """Heatmap of one head's attention on one sentence. ``matrix``: ``[words, columns]``, row = the
    attending word, column = the attended word (``columns``: their labels when they differ from
    ``words``, e.g. words with the special tokens). ``first_row``: the column position of the first
    row's unit (1 when the columns start with a special token the rows lack), so that a unit has
    the same number as a row and as a column."""
    labels = word_labels(words, first_row)
    fig = go.Figure(
        go.Heatmap(
            z=np.asarray(matrix, dtype=float),
            x=labels if columns is None else word_labels(columns),
            y=labels,
            colorscale="Blues",
            zmin=0,
            hovertemplate="%{y} → %{x}: %{z:.2f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=esc(title),
        yaxis_autorange="reversed",
        height=height,
        xaxis=dict(title="attended word", automargin=True),  # long words: the margin grows, no label is cut
        yaxis=dict(title="attending word", automargin=True),
        margin=dict(t=50),
    )
    return fig


def head_view(
    words: Sequence[str],
    matrix: Any,
    title: str,
    threshold: float = 0.05,
    targets: Sequence[str] | None = None,
    first_row: int = 0,
    highlight: int | None = None,
) -> go.Figure:
    """bertviz-style head view drawn offline: the same units in both columns (``targets``, else
    ``words``), each attending unit (left) linked to the units it attends to (right), line width and
    opacity proportional to the weight (weights below ``threshold`` are not drawn), so a head that
    looks at the previous unit draws lines one step up. ``matrix``: ``[words, targets]``; the
    attending ``words`` are the consecutive ``targets`` from position ``first_row`` on (word units:
    1, after the first special token, which with the other special tokens attends nowhere here and
    shows grey on the left). Hovering a unit lists where its attention goes (left) or comes from
    (right); ``highlight``: a row whose lines are drawn in orange over the others, faded. Each line
    is its own trace (``customdata``: ``[row, column, weight]``); the labels are the last two traces
    (``customdata``: the row, left; the column, right)."""
    matrix = np.asarray(matrix, dtype=float)
    right = [esc(w) for w in (words if targets is None else targets)]
    n, m = matrix.shape
    fig = go.Figure()
    for i, j in zip(*np.nonzero(matrix > threshold)):
        fig.add_trace(_head_view_line(int(i), int(j), float(matrix[i, j]), first_row, highlight, right))
    rows = dict(zip(range(first_row, first_row + n), range(n)))
    fig.add_trace(_head_view_labels(right, 0, "middle left", [rows.get(p, -1) for p in range(m)], matrix, right))
    fig.add_trace(_head_view_labels(right, 1, "middle right", list(range(m)), matrix.T, right, first_row))
    fig.update_layout(
        title=esc(title),
        height=max(320, 26 * m + 80),
        plot_bgcolor="white",
        hovermode="closest",
        xaxis=dict(visible=False, range=[-0.9, 1.9], fixedrange=True),
        yaxis=dict(visible=False, range=[-m + 0.5, 0.7], fixedrange=True),
        annotations=[
            dict(x=0, y=0.9, text="attending", showarrow=False, xanchor="right"),
            dict(x=1, y=0.9, text="attended", showarrow=False, xanchor="left"),
        ],
        margin=dict(t=50),
    )
    return fig


def _head_view_line(i: int, j: int, w: float, first_row: int, highlight: int | None, labels: list[str]) -> go.Scatter:
    """One line of :func:`head_view`: attending row ``i`` (drawn at position ``first_row + i``) to
    column ``j``, weight ``w``; faded when another row is highlighted, orange when this one is."""
    lit, faded = highlight == i, highlight is not None and highlight != i
    colour = "255,127,14" if lit else "31,119,180"
    alpha = 0.06 if faded else min(1.0, 0.1 + w)
    return go.Scatter(
        x=[0, 1],
        y=[-(first_row + i), -j],
        mode="lines",
        customdata=[[i, j, w]] * 2,
        hoverinfo="text",
        hovertext=f"{labels[first_row + i]} → {labels[j]}: {w:.2f}",
        line=dict(width=1 + 8 * w, color=f"rgba({colour},{alpha:.2f})"),
        showlegend=False,
    )


def _head_view_labels(
    labels: list[str], x: int, position: str, ids: list[int], weights: np.ndarray, names: list[str], offset: int = 0
) -> go.Scatter:
    """One column of :func:`head_view`'s labels, with a hover listing each unit's strongest links
    (``weights``: ``[ids, names]``, row ``ids[k]`` for label ``k``; -1: a unit with no row, grey)."""
    hover = []
    for k, row in enumerate(ids):
        if row < 0:
            hover.append(f"{labels[k]}: not an attending unit here")
            continue
        order = np.argsort(-weights[row])[:5]
        links = [f"{names[c + offset]} {weights[row, c]:.2f}" for c in order if weights[row, c] > 0.005]
        arrow = "→" if x == 0 else "←"
        hover.append(f"{labels[k]} {arrow} " + (", ".join(links) or "nothing above 0.005"))
    return go.Scatter(
        x=[x] * len(labels),
        y=[-k for k in range(len(labels))],
        mode="markers+text",
        text=labels,
        textposition=position,
        textfont=dict(color=["#999999" if r < 0 else "#222222" for r in ids]),
        marker=dict(size=9, color=["#dddddd" if r < 0 else "#1f77b4" for r in ids]),
        customdata=ids,
        hoverinfo="text",
        hovertext=hover,
        showlegend=False,
    )


# --------------------------------------------------------------------------- curves and axes


CATEGORY_PALETTE = px.colors.qualitative.Plotly


def category_colours(names: Any) -> dict[str, str]:
    """One colour per name (task, method, mode...) from the sorted list of distinct ``names``, so a
    name keeps its colour on every chart of a page that builds its map from the same names. Keys:
    each name as given and as :func:`esc` writes it (what the charts' legends hold)."""
    distinct = sorted({str(n) for n in names})
    colours = {name: CATEGORY_PALETTE[k % len(CATEGORY_PALETTE)] for k, name in enumerate(distinct)}
    return colours | {esc(name): colour for name, colour in colours.items()}


def line_with_band(
    df: pd.DataFrame,
    x: str,
    color: str,
    title: str,
    y_title: str,
    colours: dict[str, str] | None = None,
    x_title: str | None = None,
) -> go.Figure:
    """One line per value of ``color`` over ``x`` with a shaded 95% band; scores in [0, 1] on an axis
    of at least :data:`SCORE_MIN_SPAN` (:func:`anchor_score_axis`).

    ``df``: ``[x], [color], mean`` and the band as ``low, high`` (or, without them, ``mean ± ci95``):
    a :func:`bertology.results.mean_ci` or :func:`bertology.apps.pages.probing.interval_bands` table.
    ``colours``: name -> colour (default :func:`category_colours` of the names drawn); ``x_title``:
    the x axis title (default ``x``)."""
    fig = go.Figure()
    colours = colours or category_colours(df[color])
    for name, part in df.groupby(color):
        part = part.sort_values(x)
        c = colours.get(str(name), "#7f7f7f")
        high = part["high"] if "high" in part else part["mean"] + part["ci95"]
        low = part["low"] if "low" in part else part["mean"] - part["ci95"]
        fig.add_trace(
            go.Scatter(
                x=list(part[x]) + list(part[x])[::-1],
                y=list(high) + list(low)[::-1],
                fill="toself",
                fillcolor=c,
                opacity=0.15,
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
            )
        )
        fig.add_trace(go.Scatter(x=part[x], y=part["mean"], mode="lines+markers", name=esc(name), line=dict(color=c)))
    fig.update_layout(title=esc(title), xaxis_title=esc(x_title or x), yaxis_title=esc(y_title), height=420)
    return anchor_score_axis(fig)


# --------------------------------------------------------------------------- score axes

SCORE_MIN_SPAN = 0.25
"""The least span of an axis that shows scores in [0, 1] (accuracy, UUAS, P@k, CKA, shares): a 0.03
difference drawn on it takes an eighth of the height, not all of it (issue 54 item 3: 0.97 against
1.0 on a 0.97-1.0 axis looks like a cliff)."""
SCORE_MARGIN = 0.02  # how far past 0 or 1 a score axis may reach, so markers at 1.0 are not cut in half


def score_range(
    low: Any, high: Any = (), baselines: Any = (), pad: float = 0.1, min_span: float = SCORE_MIN_SPAN
) -> list[float] | None:
    """The one rule for an axis of scores: around the values from ``low`` to ``high`` (arrays: the
    band's or error bars' ends, or the values themselves) and the ``baselines`` drawn with them (chance,
    LINEAR, random-init: always inside), padded by ``pad`` of their span, at least ``min_span`` wide,
    and kept in [0, 1] (give or take :data:`SCORE_MARGIN`). None when a value lies outside [0, 1] or
    there is none: not a score, so the axis keeps Plotly's own range (losses, perplexities...)."""
    parts = [np.asarray(v, dtype=float).ravel() for v in (low, high, baselines)]
    values = np.concatenate(parts)
    values = values[np.isfinite(values)]
    if not values.size or values.min() < 0 or values.max() > 1:
        return None
    lo, hi = float(values.min()), float(values.max())
    lo, hi = lo - pad * (hi - lo), hi + pad * (hi - lo)
    if hi - lo < min_span:
        middle = (lo + hi) / 2
        lo, hi = middle - min_span / 2, middle + min_span / 2
    if lo < 0:
        lo, hi = 0.0, hi - lo
    if hi > 1:
        lo, hi = max(0.0, lo - (hi - 1)), 1.0
    return [max(lo - SCORE_MARGIN, -SCORE_MARGIN), min(hi + SCORE_MARGIN, 1 + SCORE_MARGIN)]


def zoomed_range(low: Any, high: Any, pad: float = 0.15) -> list[float]:
    """An axis range around the values from ``low`` to ``high`` (arrays), padded by ``pad`` of their
    span, so that differences between close scores are visible (the axis need not start at 0); scores
    in [0, 1] follow :func:`score_range` (at least :data:`SCORE_MIN_SPAN` wide)."""
    scores = score_range(low, high, pad=pad)
    if scores is not None:
        return scores
    lo, hi = float(np.nanmin(low)), float(np.nanmax(high))
    span = hi - lo or max(abs(hi), 1e-3) * 0.1
    return [lo - pad * span, hi + pad * span]


def _drawn_values(trace: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The y values a line or marker trace draws (its centres) and the ends of its intervals: error bars
    (``error_y``: an array, symmetric unless ``arrayminus`` is given) or, for a filled band
    (``fill="toself"``, :func:`line_with_band`), its outline."""
    if getattr(trace, "type", None) != "scatter" or trace.y is None:
        return [], []
    y = np.asarray([np.nan if v is None else v for v in trace.y], dtype=float)
    if trace.fill == "toself":
        return [], [y]
    ends = []
    error = trace.error_y
    if error is not None and error.array is not None and error.visible is not False:
        plus = np.asarray(error.array, dtype=float)
        minus = np.asarray(error.arrayminus, dtype=float) if error.arrayminus is not None else plus
        ends = [y + plus, y - minus]
    return [y], ends


def anchor_score_axis(fig: go.Figure, per_axis: bool = False) -> go.Figure:
    """Apply :func:`score_range` to the y axes of ``fig``: the values of its line and marker traces,
    their bands and error bars (cut at 0 and 1: a score's interval ``mean ± t·se`` may pass them) and
    its horizontal lines (``add_hline``: baselines). One range for all its y axes, so panels compare;
    ``per_axis``: each y axis its own (panels of different measures). Leaves an axis alone when its
    values and lines are not all scores in [0, 1]. Call it again after adding traces or lines to a
    figure that already had it."""
    groups: dict[str, list[Any]] = {}
    for trace in fig.data:
        groups.setdefault(trace.yaxis or "y" if per_axis else "y", []).append(trace)
    for axis_id, traces in groups.items():
        drawn = [_drawn_values(trace) for trace in traces]
        centres = [v for c, _ in drawn for v in c]
        ends = [np.clip(v, 0.0, 1.0) for _, e in drawn for v in e]
        lines = [
            s.y0
            for s in fig.layout.shapes or ()
            if s.type == "line" and s.y0 is not None and s.y0 == s.y1 and (not per_axis or (s.yref or "y") == axis_id)
        ]
        if not centres and not ends:
            continue
        axis = score_range(np.concatenate(centres or ends), np.concatenate(ends or centres), np.asarray(lines, float))
        if axis is None:
            continue
        if per_axis:
            fig.layout[f"yaxis{axis_id[1:]}"].update(range=axis, autorange=False)
        else:
            fig.update_yaxes(range=axis, autorange=False)
    return fig
