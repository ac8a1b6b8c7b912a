"""The Probing page (Tenney et al. 2019): per-layer probe scores with their intervals and the
random-init baseline, a second run beside the first with the paired difference of their best layers
(also shown by "Compare runs"), the expected layers, scalar-mix weights, control tasks and MDL."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import figures, tables
from bertology.apps.figures import esc
from bertology.apps.locations import describe, run_label
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_other, pick_run
from bertology.results import read_table
from bertology.uncertainty import MIN_TEST_ITEMS, is_small_sample, paired_on_shared_groups


def probing_page(page: Page) -> None:
    run = pick_run(page.study, "probe_run")
    if run is None:
        return
    other = pick_other(page.study, run, "probe_compare")
    scores = load_table(run, "layer_scores")
    colours = figures.category_colours([] if scores is None or "task" not in scores else scores["task"])
    if has_columns_or_explain(scores, ["task", "layer", "metric", "value", "seed"], "layer_scores", run):
        layer_curves(run, other, scores, colours)
    layer_tables(run)
    weights = optional_table(run, "mix_weights")
    if has_columns_or_explain(weights, ["task", "layer", "weight"], "mix_weights", run):
        with guard("the scalar-mix weights", run):
            st.plotly_chart(mix_weights_figure(mean_mix_weights(weights), colours), width="stretch")
    controls_and_mdl(run, colours)


def layer_curves(run: Path, other: Path | None, scores: pd.DataFrame, colours: dict[str, str]) -> None:
    """The probe's score per layer (a chosen metric and probe input) with its interval and the
    random-init baseline; with a second run, both runs' curves and their paired difference."""
    with guard("the layer curves", run):
        metrics, start = options_and_default(probe_metrics(scores), "accuracy")
        metric = st.selectbox("metric", metrics, index=start) or metrics[start]
        mode = None
        if "mode" in scores.columns:
            modes, start = options_and_default(scores["mode"], "per_layer")
            mode = st.selectbox("probe input", modes, index=start)
        intervals = optional_table(run, "layer_intervals")
        bands = None if intervals is None else interval_bands(intervals, metric, mode)
        if bands is not None and not bands.empty:
            means = bands
            band = band_label(means, "95% interval over seeds and test sentences")
        else:
            means = tables.layer_means(probe_part(scores, metric, mode))
            band = band_label(means, "mean ± 95% CI over seeds")
        small = [] if intervals is None else tables.small_sample_tasks(intervals)
        if small:
            st.warning(
                f"Small sample: {', '.join(small)} scored on fewer than {MIN_TEST_ITEMS} test items; "
                "its best layer and differences between layers are not reliable."
            )
        if other is None:
            fig = figures.line_with_band(
                means, "layer", "task", f"{metric} per layer ({band})", metric, colours, "layer (0 = embeddings)"
            )
            baseline = optional_table(run, "random_baseline")
            random_means = None if baseline is None else random_baseline_means(baseline, metric, mode)
            if random_means is not None:
                add_baseline_lines(fig, random_means, "task", "random-init encoder")
                figures.anchor_score_axis(fig)  # the baseline inside the score axis
            st.plotly_chart(fig, width="stretch")
            if random_means is not None:
                st.caption(
                    "Dashed: the same probe on a randomly initialised copy of the model (same architecture "
                    "and tokenizer): what the probe reads from the input words and the architecture alone. "
                    "The distance between a solid curve and its dashed one is what pretraining added."
                )
        else:
            means_b = tables.layer_means(probe_part(read_table(other, "layer_scores"), metric, mode))
            both = tables.stack_runs([(describe(run), means), (describe(other), means_b)])
            st.plotly_chart(layer_curves_two_runs(both, metric), width="stretch")
    if other is not None:
        paired_difference(run, other)


def layer_tables(run: Path) -> None:
    """Each layer against the best layer (paired on test sentences) and the expected layers."""
    differences = optional_table(run, "layer_differences")
    if differences is not None and not differences.empty:
        st.subheader("Each layer against the best layer (chosen on dev), paired on the same test sentences")
        st.caption(
            "difference = layer − best layer on test, with its 95% interval (paired sentence bootstrap, "
            "widened by the seeds' spread); significant: that interval excludes 0. The p-value is the paired "
            'bootstrap\'s over test sentences only, shown beside its own interval ("paired interval (p)"): '
            "with several seeds the first interval is wider, so a small p beside an interval holding 0 means "
            "the layers differ for these probes but not reliably across seeds."
        )
        st.dataframe(tables.paper_table(with_paired_interval(differences)), width="stretch", hide_index=True)
    summary = load_table(run, "summary")
    if summary is not None:
        st.subheader("Expected layers (Table 1 style)")
        st.dataframe(tables.paper_table(summary), width="stretch", hide_index=True)
        if "n_seeds" in summary.columns and (summary["n_seeds"] == 1).any():
            st.caption(ONE_SEED)


def controls_and_mdl(run: Path, colours: dict[str, str]) -> None:
    """Selectivity against control tasks and MDL compression per layer, each with its table."""
    controls = optional_table(run, "controls")
    mdl = optional_table(run, "mdl")
    if controls is not None or mdl is not None:
        st.subheader("Control tasks (Hewitt & Liang 2019) and MDL (Voita & Titov 2020)")
    if has_columns_or_explain(controls, ["task", "layer", "control", "metric", "value"], "controls", run):
        with guard("the selectivity curves", run):
            st.plotly_chart(
                per_layer_lines(
                    selectivity_by_layer(controls),
                    "selectivity",
                    "selectivity per layer: task − control accuracy (test)",
                    "selectivity",
                    zero_line=True,
                    colours=colours,
                ),
                width="stretch",
            )
        with st.expander("controls table"):
            st.dataframe(tables.paper_table(controls), width="stretch", hide_index=True)
    if has_columns_or_explain(mdl, ["task", "layer", "metric", "value"], "mdl", run):
        with guard("the MDL curves", run):
            st.plotly_chart(
                per_layer_lines(
                    mdl_by_layer(mdl),
                    "compression",
                    "MDL compression per layer: uniform ÷ online codelength",
                    "compression (×)",
                    colours=colours,
                ),
                width="stretch",
            )
        with st.expander("MDL table"):
            st.dataframe(tables.paper_table(mdl), width="stretch", hide_index=True)


def paired_difference(run: Path, other: Path) -> None:
    """Run A − run B at each one's dev-chosen best layer, paired on their shared test sentences, or
    why no paired difference can be shown."""
    parts = [optional_table(r, name) for r in (run, other) for name in ("summary", "test_sentences")]
    st.subheader(f"{run_label(run)} − {run_label(other)}: best layers, paired on the same test sentences")
    summary_a, sentences_a, summary_b, sentences_b = parts
    if summary_a is None or sentences_a is None or summary_b is None or sentences_b is None:
        st.info(
            "No paired difference: a run without per-sentence test scores (`test_sentences`, written by "
            "runs of this version). The curves above are two measurements side by side, not a difference."
        )
        return
    with guard("the paired difference", run):
        diff = best_layer_difference(summary_a, sentences_a, summary_b, sentences_b)
        if diff.empty:
            st.info("No task probed by both runs.")
            return
        if (diff["unpaired sentences"] > 0).any():
            st.warning(
                "The two runs were not tested on the same sentences (another corpus, limit or split): "
                "the difference is over the sentences they share only."
            )
        st.caption(
            "A − B on test with a 95% paired bootstrap interval over the shared test sentences and its "
            "two-sided p-value; each run at its own best layer chosen on dev."
        )
        st.dataframe(tables.paper_table(diff), width="stretch", hide_index=True)


# --------------------------------------------------------------------------- data shaping


def with_paired_interval(differences: pd.DataFrame) -> pd.DataFrame:
    """``layer_differences`` with the paired bootstrap's own interval (``paired_low, paired_high``:
    the one its p-value agrees with) as one text column, ``paired interval (p)``, just before ``p_value``;
    unchanged for runs written before that interval was saved."""
    if not {"paired_low", "paired_high", "p_value"} <= set(differences.columns):
        return differences
    out = differences.drop(columns=["paired_low", "paired_high"])
    text = [f"[{lo:.3f}, {hi:.3f}]" for lo, hi in zip(differences["paired_low"], differences["paired_high"])]
    out.insert(list(out.columns).index("p_value"), "paired interval (p)", text)
    return out


ONE_SEED = "One seed: no interval over seeds (a row's interval is the test sentences' only, or none); use --seeds 3."


def band_label(means: pd.DataFrame, promised: str) -> str:
    """What the band of a layer curve is: ``promised`` where the table has intervals, else that it
    has none (one seed: ``low``/``high`` or ``ci95`` all missing). ``means``: :func:`interval_bands`
    or :func:`tables.layer_means` rows."""
    bounds = [c for c in ("low", "high", "ci95") if c in means.columns]
    if bounds and means[bounds].notna().any().any():
        return promised
    return "one seed: no interval; use --seeds 3"


def options_and_default(values: Sequence[Any], preferred: str) -> tuple[list[str], int]:
    """The distinct ``values`` as sorted strings, and the index of ``preferred`` among them (0 when
    absent): the options and starting choice of a select box."""
    options = sorted(pd.Series(values).astype(str).unique())
    return options, options.index(preferred) if preferred in options else 0


def probe_part(scores: pd.DataFrame, metric: str | None, mode: str | None) -> pd.DataFrame:
    """Held-out, non-control rows of one metric and probe input.

    ``scores``: the ``layer_scores`` table (``metric``; ``split``, ``control``, ``mode`` where
    present). Test rows only where there is a ``split`` (dev was used for early stopping)."""
    if "split" in scores.columns:
        scores = scores[scores["split"] == "test"]
    if "control" in scores.columns:
        scores = scores[~scores["control"].astype(bool)]
    part = scores[scores["metric"] == metric]
    if mode is not None and "mode" in part.columns:
        part = part[part["mode"] == mode]
    return part


def probe_metrics(scores: pd.DataFrame) -> list[str]:
    """The metrics a ``layer_scores`` table scores on test (not the ``split = interval`` rows that
    hold interval bounds and counts)."""
    if "split" in scores.columns:
        scores = scores[scores["split"] == "test"]
    return sorted(scores["metric"].astype(str).unique())


def interval_bands(intervals: pd.DataFrame, metric: str | None, mode: str | None) -> pd.DataFrame:
    """Per task and layer, the test score with the run's own 95% interval (seeds and test sentences,
    see docs/METHODS.md): ``task, layer, mean, low, high, n, small_sample``. ``intervals``: the
    ``layer_intervals`` table (``task, mode, control, layer, metric, score, low, high, n_seeds``)."""
    part = intervals[(intervals["metric"] == metric) & ~intervals["control"].astype(bool)]
    if mode is not None and "mode" in part.columns:
        part = part[part["mode"] == mode]
    out = part.rename(columns={"score": "mean", "n_seeds": "n"})
    keep = [c for c in ("task", "layer", "mean", "low", "high", "n", "n_test", "small_sample") if c in out.columns]
    return out[keep].reset_index(drop=True)


def random_baseline_means(baseline: pd.DataFrame, metric: str | None, mode: str | None) -> pd.DataFrame | None:
    """Per task and layer, the mean test score of the same probe on a randomly initialised copy of
    the model (the ``random_baseline`` table, rows as ``layer_scores``): ``task, layer, mean, sd,
    n, ci95``; None when it has no test rows of this metric and probe input."""
    part = probe_part(baseline, metric, mode)
    return None if part.empty else tables.layer_means(part)


def mean_mix_weights(weights: pd.DataFrame) -> pd.DataFrame:
    """Scalar-mix weight per task and layer, mean over seeds: ``task, layer, weight``.
    ``weights``: the ``mix_weights`` table (``task, layer, weight``)."""
    return weights.groupby(["task", "layer"], as_index=False)["weight"].mean()


def selectivity_by_layer(controls: pd.DataFrame) -> pd.DataFrame:
    """``task, layer, selectivity``: the test selectivity rows of a ``controls`` table (task rows,
    already means over seeds), one per task and layer."""
    rows = controls[(controls["metric"] == "selectivity") & ~controls["control"].astype(bool)]
    if rows.empty:  # selectivity rows carry the control flag in some runs
        rows = controls[controls["metric"] == "selectivity"]
    return rows.groupby(["task", "layer"], as_index=False)["value"].mean().rename(columns={"value": "selectivity"})


def mdl_by_layer(mdl: pd.DataFrame) -> pd.DataFrame:
    """``task, layer, compression``: MDL compression (uniform ÷ online bits) per task and layer, the
    mean over seeds, task probes only."""
    rows = mdl[mdl["metric"] == "compression"]
    if "control" in rows:
        rows = rows[~rows["control"].astype(bool)]
    return rows.groupby(["task", "layer"], as_index=False)["value"].mean().rename(columns={"value": "compression"})


def best_layer_difference(
    summary_a: pd.DataFrame,
    sentences_a: pd.DataFrame,
    summary_b: pd.DataFrame,
    sentences_b: pd.DataFrame,
    metric: str = "accuracy",
) -> pd.DataFrame:
    """Run A minus run B per task, each at its own best layer (chosen on dev: ``summary``'s
    ``best_layer``), paired on the test sentences both runs scored (``test_sentences`` tables:
    ``task, mode, control, layer, sentence, metric, numerator, denominator``). Returns ``task,
    layer A, layer B, A, B, A − B, low, high, p, shared sentences, unpaired sentences, small sample``
    (95% paired sentence bootstrap, :func:`bertology.uncertainty.paired_on_shared_groups`); a task
    whose runs share no test sentence has NaN difference and says so by its unpaired count."""

    def at_best(summary: pd.DataFrame, sentences: pd.DataFrame) -> dict[str, pd.DataFrame]:
        keep = (sentences["metric"] == metric) & (sentences["mode"] == "per_layer") & ~sentences["control"].astype(bool)
        rows = sentences[keep]
        out = {}
        for r in summary.dropna(subset=["best_layer"]).itertuples():
            out[r.task] = (int(r.best_layer), rows[(rows["task"] == r.task) & (rows["layer"] == int(r.best_layer))])
        return out

    a, b = at_best(summary_a, sentences_a), at_best(summary_b, sentences_b)
    rows = []
    for task in [t for t in a if t in b]:
        (layer_a, sa), (layer_b, sb) = a[task], b[task]
        cmp, unmatched = paired_on_shared_groups(
            sa["sentence"], sa["numerator"], sa["denominator"], sb["sentence"], sb["numerator"], sb["denominator"]
        )
        n_items = int(sa[sa["sentence"].isin(sb["sentence"])]["denominator"].sum())
        rows.append(
            {
                "task": task,
                "layer A": layer_a,
                "layer B": layer_b,
                "A": sa["numerator"].sum() / sa["denominator"].sum(),
                "B": sb["numerator"].sum() / sb["denominator"].sum(),
                "A − B": cmp.difference,
                "low": cmp.low,
                "high": cmp.high,
                "p": cmp.p_value,
                "shared sentences": cmp.n_groups,
                "unpaired sentences": unmatched,
                "small sample": is_small_sample(n_items),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "task",
            "layer A",
            "layer B",
            "A",
            "B",
            "A − B",
            "low",
            "high",
            "p",
            "shared sentences",
            "unpaired sentences",
            "small sample",
        ],
    )


# --------------------------------------------------------------------------- figures


def add_baseline_lines(fig: go.Figure, means: pd.DataFrame, color: str, label: str) -> go.Figure:
    """Dashed lines of a baseline over ``fig``'s curves (:func:`line_with_band`), one per value of
    ``color``, in the colour of the curve of the same name (grey when there is none), named
    ``"<name> · <label>"``. ``means``: ``layer, [color], mean``."""
    colours = {t.name: t.line.color for t in fig.data if t.mode == "lines+markers"}
    for name, part in means.groupby(color):
        part = part.sort_values("layer")
        fig.add_trace(
            go.Scatter(
                x=part["layer"],
                y=part["mean"],
                mode="lines",
                name=f"{esc(name)} · {esc(label)}",
                line=dict(color=colours.get(esc(name), "#7f7f7f"), dash="dash", width=2),
            )
        )
    return fig


def layer_curves_two_runs(both: pd.DataFrame, metric: str) -> go.Figure:
    """Probe score per layer of two runs, one panel per task, one colour per run, error bars = 95%
    interval. ``both``: ``run, task, layer, mean, ci95`` (:func:`tables.stack_runs` of two
    :func:`tables.layer_means`)."""
    both = both.assign(run=both["run"].map(esc), task=both["task"].map(esc))
    fig = px.line(
        both,
        x="layer",
        y="mean",
        error_y="ci95",
        color="run",
        facet_col="task",
        markers=True,
        title=f"{metric} per layer, two runs (mean ± 95% CI over seeds)",
    )
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_layout(height=420, legend=dict(orientation="h", y=-0.25))
    return figures.anchor_score_axis(fig)


def mix_weights_figure(weights: pd.DataFrame, colours: dict[str, str] | None = None) -> go.Figure:
    """Grouped bars: the scalar-mix weight of each layer, one colour per task (``colours``: the
    page's :func:`figures.category_colours`). ``weights``: ``task, layer, weight`` (:func:`mean_mix_weights`)."""
    fig = px.bar(
        weights.assign(task=weights["task"].map(esc)),
        x="layer",
        y="weight",
        color="task",
        barmode="group",
        title="scalar-mix weights",
        color_discrete_map=colours or figures.category_colours(weights["task"]),
    )
    fig.update_layout(xaxis_title="layer (0 = embeddings)", yaxis_title="scalar-mix weight (softmax)")
    return fig


def per_layer_lines(
    df: pd.DataFrame,
    y: str,
    title: str,
    y_title: str,
    *,
    zero_line: bool = False,
    colours: dict[str, str] | None = None,
) -> go.Figure:
    """One line per task over layers, with markers; ``df``: ``task, layer, <y>`` (one row each, e.g.
    a mean over seeds). Scores in [0, 1] get :func:`figures.anchor_score_axis` (0 included with
    ``zero_line``), other values Plotly's range; ``zero_line`` marks 0 (selectivity);
    ``colours``: the page's :func:`figures.category_colours`."""
    shown = df.assign(task=df["task"].map(esc)).sort_values(["task", "layer"])
    fig = px.line(
        shown,
        x="layer",
        y=y,
        color="task",
        markers=True,
        title=title,
        color_discrete_map=colours or figures.category_colours(df["task"]),
    )
    fig.update_layout(xaxis=dict(dtick=1, title="layer (0 = embeddings)"), yaxis_title=y_title)
    if zero_line:
        fig.add_hline(y=0, line_dash="dot", line_color="grey")
    return figures.anchor_score_axis(fig)


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Probing",
    title="Edge probing (Tenney et al. 2019)",
    intro="A small classifier per layer predicts each word's label (part of speech, entity...) from that "
    "layer's frozen vectors: where the curve rises is where the information becomes linearly readable. "
    "Tenney et al. 2019, *BERT Rediscovers the Classical NLP Pipeline*; controls: Hewitt & Liang 2019.",
    render=probing_page,
    study="edge_probing",
    main_table="layer_scores",
    compare=True,
    min_charts=1,
)
