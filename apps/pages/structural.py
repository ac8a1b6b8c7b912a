"""The Structural probe page (Hewitt & Manning 2019): how well each layer's squared distances fit
parse-tree distances (UUAS, DSpr.) and its squared norms tree depth (root%, NSpr.), with intervals,
the LINEAR and random-init baselines, UUAS against the probe's rank, and one test sentence's
predicted tree (the minimum spanning tree of the predicted distances) drawn against the gold one."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertology.apps.figures import anchor_score_axis, esc, line_with_band
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_run

METRIC_NAMES = {"uuas": "UUAS", "dspr": "DSpr.", "root_acc": "root%", "nspr": "NSpr."}
PROBE_METRICS = {"distance": ("uuas", "dspr"), "depth": ("root_acc", "nspr")}
INTERVAL_COLUMNS = ["encoder", "probe", "layer", "metric", "score", "low", "high"]


def structural_page(page: Page) -> None:
    run = pick_run(page.study, "structural_run")
    if run is None:
        return
    intervals = load_table(run, "layer_intervals")
    if not has_columns_or_explain(intervals, INTERVAL_COLUMNS, "layer_intervals", run):
        return
    baselines = optional_table(run, "baselines")
    with guard("the per-layer scores", run):
        if "trees" in intervals:
            st.caption(f"Trees: {intervals['trees'].iloc[0]}")
        for kind in [k for k in PROBE_METRICS if k in set(intervals["probe"])]:
            st.plotly_chart(layer_figure(intervals, baselines, kind), width="stretch", key=f"structural-{kind}")
    summary = optional_table(run, "summary")
    if summary is not None:
        with guard("the summary", run):
            st.subheader("Best layer (chosen on dev, read on test)")
            st.dataframe(summary_rows(summary, baselines), width="stretch", hide_index=True)
            if "small_sample" in summary and summary["small_sample"].fillna(False).astype(bool).any():
                st.caption("Rows marked small sample rest on fewer than 100 test items: read the intervals.")
    curve = optional_table(run, "rank_curve")
    if curve is not None and len(curve):
        with guard("the rank curve", run):
            st.plotly_chart(rank_figure(curve), width="stretch", key="structural-rank")
    edges, words = optional_table(run, "tree_edges"), optional_table(run, "tree_words")
    if edges is not None and words is not None and len(words):
        with guard("the example trees", run):
            st.subheader("A test sentence: predicted tree (below) against the gold tree (above)")
            sentence = st.selectbox("test sentence", list(dict.fromkeys(words["sent_id"].astype(str))))
            st.plotly_chart(tree_figure(words, edges, sentence), width="stretch", key="structural-tree")


# --------------------------------------------------------------------------- data shaping


def layer_rows(intervals: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Per-layer rows of one probe kind ready for :func:`~bertology.apps.figures.line_with_band`:
    ``layer, series`` (metric and encoder, e.g. ``UUAS (trained)``), ``mean, low, high``; layers
    sorted; rows of a rank sweep (several ranks at one layer) are not in ``layer_intervals``."""
    part = intervals[intervals["probe"] == kind].copy()
    part["series"] = [f"{METRIC_NAMES.get(m, m)} ({e})" for m, e in zip(part["metric"], part["encoder"])]
    return part.rename(columns={"score": "mean"})[["layer", "series", "mean", "low", "high"]].sort_values(
        ["series", "layer"]
    )


def baseline_values(baselines: pd.DataFrame | None, kind: str) -> dict[str, float]:
    """``{metric: LINEAR baseline score}`` of one probe kind (empty without a baselines table)."""
    if baselines is None or not {"encoder", "probe", "metric", "score"} <= set(baselines.columns):
        return {}
    linear = baselines[(baselines["encoder"] == "linear") & (baselines["probe"] == kind)]
    return {str(m): float(s) for m, s in zip(linear["metric"], linear["score"])}


def summary_rows(summary: pd.DataFrame, baselines: pd.DataFrame | None = None) -> pd.DataFrame:
    """The summary as one readable row per encoder, probe and metric: best layer, test score with
    its interval, and the LINEAR baseline's score beside it."""
    out = summary.copy()
    out["metric"] = out["metric"].map(lambda m: METRIC_NAMES.get(m, m))
    linear = {(k, METRIC_NAMES.get(m, m)): v for k in PROBE_METRICS for m, v in baseline_values(baselines, k).items()}
    out["LINEAR"] = [linear.get((p, m), math.nan) for p, m in zip(out["probe"], out["metric"])]
    columns = ["encoder", "probe", "best_layer", "selection_metric", "metric", "score", "low", "high", "LINEAR"]
    columns += [c for c in ("n_seeds", "n_test", "small_sample") if c in out]
    return out[[c for c in columns if c in out]].round(3)


# --------------------------------------------------------------------------- figures


def layer_figure(intervals: pd.DataFrame, baselines: pd.DataFrame | None, kind: str) -> go.Figure:
    """One probe kind's scores per layer (one line per metric and encoder, 95% bands) with the
    LINEAR baseline of each metric as a horizontal line, each metric its own dash pattern and its
    label on its own side (two baselines close together would print their labels over each other)."""
    title = (
        "Distance probe: UUAS and DSpr. per layer" if kind == "distance" else "Depth probe: root% and NSpr. per layer"
    )
    fig = line_with_band(layer_rows(intervals, kind), "layer", "series", title, "test score (95% interval)")
    styles = [("dash", "dashed", "top left"), ("dot", "dotted", "bottom right")]
    for k, (metric, value) in enumerate(baseline_values(baselines, kind).items()):
        dash, dash_name, where = styles[k % len(styles)]
        fig.add_hline(
            y=value,
            line_dash=dash,
            line_color="#7f7f7f",
            annotation_text=esc(f"LINEAR {METRIC_NAMES.get(metric, metric)} {value:.3f} ({dash_name})"),
            annotation_position=where,
        )
    fig.update_layout(xaxis=dict(dtick=1))
    return anchor_score_axis(fig)  # the baselines inside the score axis


def rank_figure(curve: pd.DataFrame) -> go.Figure:
    """UUAS and DSpr. against the distance probe's rank (log axis) at the best layer."""
    rows = curve.assign(series=curve["metric"].map(lambda m: METRIC_NAMES.get(m, m)))
    layer = ", ".join(str(int(l)) for l in sorted(set(curve["layer"])))
    fig = line_with_band(
        rows.rename(columns={"score": "mean"}),
        "rank",
        "series",
        f"Distance probe by rank (layer {layer})",
        "test score",
    )
    ranks = sorted(int(r) for r in set(curve["rank"]))  # ticks at the ranks probed, not Plotly's 2..9 of each decade
    fig.update_layout(
        xaxis=dict(type="log", title="probe rank (log scale)", tickvals=ranks, ticktext=list(map(str, ranks)))
    )
    return fig


# The tree's geometry is in pixels (the y axis: the figure's fixed height; the x axis: pixels when the
# plot is at least its x range wide), so that labels are placed by their drawn size, not by characters.
TREE_FONT = 12  # px, the words' font size
MIN_PLOT_WIDTH = 640  # px: no two labels touch in a plot area at least this wide (the x range's floor)
MAX_GAP = 6  # em: the widest gap between level words (a short sentence spread toward MIN_PLOT_WIDTH)
ROTATED_ANGLE = 60  # degrees: a sentence too long for one line of level words has its words rotated
LINE_HEIGHT = 1.25 * TREE_FONT  # px: the height a label's letters take, accents and descenders included
NARROW, WIDE = set("ijl.,;:'!|`"), set("mwMW@%")


def text_width(word: str, size: float = TREE_FONT) -> float:
    """A generous estimate of ``word``'s drawn width in px at font size ``size`` (Plotly's sans-serif:
    Open Sans, Arial...): narrow letters 0.3 em, f r t and brackets 0.4, m w M W 1.0, other capitals
    0.75, CJK and other wide scripts 1.0, anything else 0.62 (Open Sans's lower case: 0.50-0.62)."""
    em = 0.0
    for ch in str(word):
        if ch in NARROW:
            em += 0.3
        elif ch in "frt()[]{}":
            em += 0.4
        elif ch in WIDE or ord(ch) >= 0x2E80:
            em += 1.0
        elif ch.isupper():
            em += 0.75
        else:
            em += 0.62
    return em * size


@dataclass(frozen=True)
class TreeLayout:
    """Where :func:`tree_figure` puts a sentence's words: ``x`` (px, each word's centre; ``[W]``),
    ``widths`` (px, each label's estimated width), ``angle`` (0: level words side by side, each one
    em from the next; :data:`ROTATED_ANGLE`: words rotated at an even pitch, when level words would
    need more than :data:`MIN_PLOT_WIDTH`), ``x_range`` (the x axis: at least the words' extent and
    :data:`MIN_PLOT_WIDTH`, centred) and ``band`` (px, the half height of the words' strip: arcs
    start beyond it)."""

    x: np.ndarray
    widths: np.ndarray
    angle: float
    x_range: tuple[float, float]
    band: float

    def gap(self, i: int) -> float:
        """The clearance between label ``i`` and label ``i + 1`` in px when the plot is as wide as the
        x range: level words, the space between their boxes; rotated ones (parallel strips), the
        distance across the strips minus one line height. Negative = they overlap."""
        dx = float(self.x[i + 1] - self.x[i])
        if self.angle == 0:
            return dx - (self.widths[i] + self.widths[i + 1]) / 2
        return dx * float(np.sin(np.radians(self.angle))) - LINE_HEIGHT


def tree_layout(words: list[str]) -> TreeLayout:
    """:class:`TreeLayout` of ``words``: level, each word after the previous one's width and a gap of one
    em (up to :data:`MAX_GAP` em for a few words), when they fit in :data:`MIN_PLOT_WIDTH`; else rotated by :data:`ROTATED_ANGLE`, spread
    over :data:`MIN_PLOT_WIDTH` but never closer than the pitch where neighbouring strips of text are
    one line height apart, whatever the words' lengths."""
    widths = np.array([text_width(w) for w in words], dtype=float)
    # one em between level words at least, spread toward MIN_PLOT_WIDTH (up to MAX_GAP em) when they are few
    room = (MIN_PLOT_WIDTH - widths.sum()) / max(len(words) - 1, 1)
    gap = float(np.clip(room, TREE_FONT, MAX_GAP * TREE_FONT))
    steps = np.concatenate([[0.0], (widths[:-1] + widths[1:]) / 2 + gap]) if len(words) else np.zeros(0)
    x = widths[0] / 2 + np.cumsum(steps) if len(words) else steps
    left, right = (float(x[0] - widths[0] / 2), float(x[-1] + widths[-1] / 2)) if len(words) else (0.0, 0.0)
    angle, band = 0.0, LINE_HEIGHT / 2
    if widths.sum() + TREE_FONT * max(len(words) - 1, 0) > MIN_PLOT_WIDTH:  # one em apart, they would not fit
        angle, a = float(ROTATED_ANGLE), np.radians(ROTATED_ANGLE)
        across = (widths * np.cos(a) + LINE_HEIGHT * np.sin(a)) / 2  # half of each rotated label's width
        spread = (MIN_PLOT_WIDTH - 2 * across.max()) / max(len(words) - 1, 1)
        pitch = max(np.ceil(LINE_HEIGHT / np.sin(a)), spread)  # neighbouring strips a line apart or more
        x = pitch * np.arange(len(words))
        left, right = float(np.min(x - across)), float(np.max(x + across))
        band = float((widths.max() * np.sin(a) + LINE_HEIGHT * np.cos(a)) / 2)
    middle, width = (left + right) / 2, max(right - left, MIN_PLOT_WIDTH)
    return TreeLayout(x, widths, angle, (middle - width / 2, middle + width / 2), band)


def word_centres(words: list[str]) -> np.ndarray:
    """The x of each word's centre in px (:func:`tree_layout`); ``[W]``."""
    return tree_layout(words).x


def _arc(a: float, b: float, up: bool, height: float, start: float) -> tuple[np.ndarray, np.ndarray]:
    """Points of a half ellipse from x ``a`` to x ``b`` (word centres, px), ``height`` px high above
    (``up``) or below the words' strip, which ends ``start`` px from the middle line."""
    t = np.linspace(0, np.pi, 24)
    centre, radius = (a + b) / 2, abs(b - a) / 2
    return centre - radius * np.cos(t), (1 if up else -1) * (start + height * np.sin(t))


ARC_ROOM = 150  # px: the most room above and below the words' strip for the arcs
TREE_MARGIN = dict(t=60, b=10, l=10, r=10)


def tree_figure(words: pd.DataFrame, edges: pd.DataFrame, sent_id: str) -> go.Figure:
    """One sentence's words in order, the gold tree's edges as arcs above them and the predicted
    tree's (the minimum spanning tree of the predicted distances) below: green where the gold tree
    has the edge, red where it does not; punctuation (left out of both) in grey. The words are
    annotations placed by :func:`tree_layout` (never touching in a plot at least
    :data:`MIN_PLOT_WIDTH` wide), the figure's height fixed so that a y unit is a pixel; an invisible
    marker per word carries its hover text."""
    w = words[words["sent_id"].astype(str) == sent_id].sort_values("position")
    e = edges[edges["sent_id"].astype(str) == sent_id]
    layout = tree_layout([str(t) for t in w["word"]])
    centre = dict(zip(w["position"].astype(int), layout.x))
    e = e[e["i"].astype(int).isin(centre) & e["j"].astype(int).isin(centre)]  # an edge to a word not listed: left out
    start = layout.band + 4
    # an arc's height grows with its width (flattened at ARC_ROOM): arcs over more words are higher
    heights = {
        (int(r.i), int(r.j)): float(min(12 + 0.3 * abs(centre[int(r.j)] - centre[int(r.i)]), ARC_ROOM))
        for r in e.itertuples()
    }
    room = max(heights.values(), default=12.0) + 8
    fig = go.Figure()
    for source, up in (("gold", True), ("predicted", False)):
        for row in e[e["source"] == source].itertuples():
            i, j = int(row.i), int(row.j)
            x, y = _arc(centre[i], centre[j], up, heights[(i, j)], start)
            colour = "#1f77b4" if up else ("#2ca02c" if bool(row.correct) else "#d62728")
            fig.add_trace(
                go.Scatter(x=x, y=y, mode="lines", line=dict(color=colour, width=2), hoverinfo="skip", showlegend=False)
            )
    punct = w["punct"].astype(bool) if "punct" in w else pd.Series(False, index=w.index)
    fig.add_trace(
        go.Scatter(
            x=layout.x,
            y=np.zeros(len(w)),
            mode="markers",
            marker=dict(size=max(8.0, LINE_HEIGHT), opacity=0),
            hovertext=[f"{esc(t)}: gold depth {g}" for t, g in zip(w["word"], w.get("gold_depth", [""] * len(w)))],
            hoverinfo="text",
            showlegend=False,
        )
    )
    for x, word, grey in zip(layout.x, w["word"], punct):
        fig.add_annotation(
            x=float(x),
            y=0,
            text=esc(word),
            showarrow=False,
            textangle=-layout.angle,
            font=dict(size=TREE_FONT, color="#9e9e9e" if grey else "#000000"),
            xanchor="center",
            yanchor="middle",
        )
    gold = e[e["source"] == "gold"]
    correct = int(e[(e["source"] == "predicted") & e["correct"].astype(bool)].shape[0])
    half = start + room
    fig.update_layout(
        title=esc(f"{sent_id}: {correct} of {len(gold)} gold edges found (gold above, predicted below)"),
        xaxis=dict(visible=False, range=list(layout.x_range), fixedrange=True),
        yaxis=dict(visible=False, range=[-half, half], fixedrange=True),
        height=int(2 * half + TREE_MARGIN["t"] + TREE_MARGIN["b"]),
        margin=TREE_MARGIN,
        plot_bgcolor="white",
    )
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Structural probe",
    title="Structural probe (Hewitt & Manning 2019)",
    intro="Does a layer hold the parse tree? A linear map whose squared distances between words fit "
    "their distance in the dependency tree (UUAS of the minimum spanning tree, distance Spearman) "
    "and whose squared norms fit tree depth (root accuracy, depth Spearman). Hewitt & Manning 2019, "
    "*A Structural Probe for Finding Syntax in Word Representations*.",
    render=structural_page,
    study="structural_probe",
    main_table="layer_intervals",
    min_charts=1,
    min_tables=1,
)
