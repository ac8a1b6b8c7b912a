"""The dashboard's pages: one registry, :data:`PAGES`, read by the dashboard (navigation, dispatch,
"Compare runs"), the screenshot driver and the tests.

A page is one :class:`Page` entry: its name in the sidebar and deep links, title, "what am I
looking at" line, the study whose runs it shows, that study's main table, and the function that
renders the rest of it. Adding a page = writing its render function and adding one entry.

Render functions only pick runs and widgets, call the shaping functions of
:mod:`bertology.apps.tables` and the figures of :mod:`bertology.apps.figures`, and show the result;
the dashboard has already written the page's title and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import streamlit as st

from bertology.apps import figures, tables
from bertology.apps.live import live_page
from bertology.apps.figures import esc
from bertology.apps.locations import (HIDDEN_HINT, clean, describe, find_runs, model_name, run_label, runs_overview,
                                      shown_root, split_runs)
from bertology.apps.ui import (MISMATCH_WARNING, guard, has_columns_or_explain, load_extra, load_table, optional_table,
                               pick_other, pick_run, query, searchable_table)
from bertology.results import ResultError, read_manifest, read_table
from bertology.uncertainty import MIN_TEST_ITEMS


@dataclass(frozen=True)
class Page:
    """One dashboard page.

    ``key``: its name in the sidebar and in deep links (``?page=<key>``); ``title``: its header;
    ``intro``: the line under the header; ``render``: draws the rest of the page, given this entry;
    ``study``: the study whose runs it shows (None: a page over every study); ``main_table``: the
    table of that study "Compare runs" puts side by side; ``compare``: the page can show a second
    run of its study beside the first (``?compare=<study>/<run>``). ``min_charts``/``min_tables``:
    the Plotly charts and tables it shows at least on the quickstart's results (the screenshot
    driver and the browser tests wait for them), ``compare_charts`` its charts with a second run
    (None: ``min_charts``).
    """

    key: str
    title: str
    intro: str
    render: Callable[[Page], None]
    study: str | None = None
    main_table: str | None = None
    compare: bool = False
    min_charts: int = 0
    min_tables: int = 0
    compare_charts: int | None = None


# --------------------------------------------------------------------------- Runs

def runs_page(page: Page) -> None:
    every = find_runs(include_unfinished=True)
    complete, hidden = split_runs(every)
    show_all = bool(hidden) and st.checkbox(f"show the {len(hidden)} incomplete or unreadable run(s)", value=False)
    runs = every if show_all else complete
    if hidden and not show_all:
        st.caption(f"{len(hidden)} incomplete or unreadable run(s) hidden on every page; {HIDDEN_HINT}")
    if not runs:
        st.info(f"No results under {shown_root()}. Create some with `bertology study run quickstart`.")
        return
    st.dataframe(runs_overview(runs), width="stretch", hide_index=True)


# --------------------------------------------------------------------------- Probing

def probing_page(page: Page) -> None:
    run = pick_run(page.study, "probe_run")
    if run is None:
        return
    other = pick_other(page.study, run, "probe_compare")
    scores = load_table(run, "layer_scores")
    if has_columns_or_explain(scores, ["task", "layer", "metric", "value", "seed"], "layer_scores", run):
        with guard("the layer curves", run):
            metrics, start = tables.options_and_default(tables.probe_metrics(scores), "accuracy")
            metric = st.selectbox("metric", metrics, index=start)
            mode = None
            if "mode" in scores.columns:
                modes, start = tables.options_and_default(scores["mode"], "per_layer")
                mode = st.selectbox("probe input", modes, index=start)
            intervals = optional_table(run, "layer_intervals")
            bands = None if intervals is None else tables.interval_bands(intervals, metric, mode)
            if bands is not None and not bands.empty:
                means, band = bands, "95% interval over seeds and test sentences"
            else:
                means, band = tables.layer_means(tables.probe_part(scores, metric, mode)), "mean ± 95% CI over seeds"
            small = [] if intervals is None else tables.small_sample_tasks(intervals)
            if small:
                st.warning(f"Small sample: {', '.join(small)} scored on fewer than {MIN_TEST_ITEMS} test items; "
                           "its best layer and differences between layers are not reliable.")
            if other is None:
                fig = figures.line_with_band(means, "layer", "task", f"{metric} per layer ({band})", metric)
                baseline = optional_table(run, "random_baseline")
                random_means = None if baseline is None else tables.random_baseline_means(baseline, metric, mode)
                if random_means is not None:
                    figures.add_baseline_lines(fig, random_means, "task", "random-init encoder")
                st.plotly_chart(fig, width="stretch")
                if random_means is not None:
                    st.caption("Dashed: the same probe on a randomly initialised copy of the model (same architecture "
                               "and tokenizer): what the probe reads from the input words and the architecture alone. "
                               "The distance between a solid curve and its dashed one is what pretraining added.")
            else:
                means_b = tables.layer_means(tables.probe_part(read_table(other, "layer_scores"), metric, mode))
                both = tables.stack_runs([(describe(run), means), (describe(other), means_b)])
                st.plotly_chart(figures.layer_curves_two_runs(both, metric), width="stretch")
        if other is not None:
            paired_difference(run, other)
    differences = optional_table(run, "layer_differences")
    if differences is not None and not differences.empty:
        st.subheader("Each layer against the best layer (chosen on dev), paired on the same test sentences")
        st.caption("difference = layer − best layer on test; low/high: 95% interval (paired sentence bootstrap, "
                   "widened by the seeds' spread); significant: the interval excludes 0.")
        st.dataframe(differences, width="stretch", hide_index=True)
    summary = load_table(run, "summary")
    if summary is not None:
        st.subheader("Expected layers (Table 1 style)")
        st.dataframe(summary, width="stretch")
    weights = optional_table(run, "mix_weights")
    if has_columns_or_explain(weights, ["task", "layer", "weight"], "mix_weights", run):
        with guard("the scalar-mix weights", run):
            st.plotly_chart(figures.mix_weights_figure(tables.mean_mix_weights(weights)), width="stretch")
    controls = optional_table(run, "controls")
    mdl = optional_table(run, "mdl")
    if controls is not None or mdl is not None:
        st.subheader("Control tasks (Hewitt & Liang 2019) and MDL (Voita & Titov 2020)")
    if has_columns_or_explain(controls, ["task", "layer", "control", "metric", "value"], "controls", run):
        with guard("the selectivity curves", run):
            st.plotly_chart(figures.per_layer_lines(tables.selectivity_by_layer(controls), "selectivity",
                                                    "selectivity per layer: task − control accuracy (test)",
                                                    "selectivity", zero_line=True), width="stretch")
        with st.expander("controls table"):
            st.dataframe(controls, width="stretch")
    if has_columns_or_explain(mdl, ["task", "layer", "metric", "value"], "mdl", run):
        with guard("the MDL curves", run):
            st.plotly_chart(figures.per_layer_lines(tables.mdl_by_layer(mdl), "compression",
                                                    "MDL compression per layer: uniform ÷ online codelength",
                                                    "compression (×)"), width="stretch")
        with st.expander("MDL table"):
            st.dataframe(mdl, width="stretch")


def paired_difference(run: Path, other: Path) -> None:
    """Run A − run B at each one's dev-chosen best layer, paired on their shared test sentences, or
    why no paired difference can be shown."""
    parts = [optional_table(r, name) for r in (run, other) for name in ("summary", "test_sentences")]
    st.subheader(f"{run_label(run)} − {run_label(other)}: best layers, paired on the same test sentences")
    if any(p is None for p in parts):
        st.info("No paired difference: a run without per-sentence test scores (`test_sentences`, written by "
                "runs of this version). The curves above are two measurements side by side, not a difference.")
        return
    with guard("the paired difference", run):
        diff = tables.best_layer_difference(*parts)
        if diff.empty:
            st.info("No task probed by both runs.")
            return
        if (diff["unpaired sentences"] > 0).any():
            st.warning("The two runs were not tested on the same sentences (another corpus, limit or split): "
                       "the difference is over the sentences they share only.")
        st.caption("A − B on test with a 95% paired bootstrap interval over the shared test sentences and its "
                   "two-sided p-value; each run at its own best layer chosen on dev.")
        st.dataframe(diff, width="stretch", hide_index=True)


# --------------------------------------------------------------------------- Feature combinations

def combinations_page(page: Page) -> None:
    run = pick_run(page.study, "combo_run")
    if run is None:
        return
    df = load_table(run, "combinations")
    if has_columns_or_explain(df, ["combination", "task", "metric", "value"], "combinations", run):
        with guard("the combinations", run):
            metric = st.selectbox("metric", sorted(df["metric"].unique()))
            means = tables.combination_means(df, metric)
            st.plotly_chart(figures.combinations_figure(means, metric), width="stretch")
            st.dataframe(means, width="stretch")


# --------------------------------------------------------------------------- Heads

def head_types_table(run: Path) -> pd.DataFrame | None:
    """A run's ``head_types`` table, checked (:func:`tables.checked_head_types`); None, with the
    reason shown, when it is missing, lacks columns or is empty."""
    types = load_table(run, "head_types")
    if not has_columns_or_explain(types, ["layer", "head", "type"], "head_types", run):
        return None
    return tables.checked_head_types(types)


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
    else the deep link's ``?head=``, else :func:`tables.default_head`."""
    pick_key = head_pick_key(run)
    if st.session_state.get(pick_key) not in heads:
        wanted = query("head")
        st.session_state[pick_key] = wanted if wanted in heads else tables.default_head(types)
        if wanted is not None and wanted not in heads:
            n_layers, n_heads = int(types["layer"].max()) + 1, int(types["head"].max()) + 1
            st.warning(f"?head={esc(wanted)}: no such head in this run (write it as layer-head, layers 0-{n_layers - 1}, "
                       f"heads 0-{n_heads - 1}); showing {st.session_state[pick_key]}")
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
        st.plotly_chart(figures.head_map(types, title, selected=(layer, head), subtitle=subtitle), width="stretch",
                        key="head_map", on_select="rerun", selection_mode="points")
        return
    c1, c2 = st.columns(2)
    with c1:
        st.plotly_chart(figures.head_map(types, title, selected=(layer, head), subtitle=subtitle), width="stretch",
                        key="head_map", on_select="rerun", selection_mode="points")
    with c2, guard("the second head map", other):
        types_b = head_types_table(other)
        if types_b is not None:
            st.plotly_chart(figures.head_map(types_b, "head types (B)", subtitle=describe(other)), width="stretch",
                            key="head_map_b")
            st.caption(f"heads per type: A = {describe(run)}, B = {describe(other)}")
            st.dataframe(tables.type_counts_side_by_side(types, types_b), hide_index=True)


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
            heads = tables.head_keys(types)
            layer, head = map(int, selected_head(run, types, heads).split("-"))
            head_maps(run, other, types, layer, head)
            labels = tables.type_by_head(types)
            pick_key = head_pick_key(run)
            st.selectbox("head (or click one on the map)", heads, key=pick_key,
                         format_func=lambda k: f"layer {k.split('-')[0]}, head {k.split('-')[1]} — {labels.get(k, '?')}")
            layer, head = map(int, st.session_state[pick_key].split("-"))
            st.query_params["head"] = st.session_state[pick_key]   # the URL follows clicks and picks
        head_detail(run, types, layer, head)
    probe = load_table(run, "attention_probe")
    if probe is not None:
        st.subheader("Attention-based dependency probe (Clark et al.)")
        st.dataframe(probe, width="stretch")


def head_facts(row: pd.Series) -> str:
    """One markdown line on a head: its type, where its argmax falls, its entropy, its attention on
    [CLS]/[SEP] (each where its ``head_types`` row has the column). Brackets are escaped."""
    facts = [f"type **{esc(row['type'])}**" + (f" (all: {esc(row['types'])})" if "types" in row and
                                               str(row["types"]) not in ("", str(row["type"])) else "")]
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
    elif has_columns_or_explain(deps, ["layer", "head", "relation", "direction", "n", "accuracy", "baseline_offset",
                                       "baseline_accuracy", "gain"], "head_dependency", run):
        try:
            config = read_manifest(run).get("config")
        except ResultError:
            config = None
        min_count = tables.relation_min_count(config)
        rel = tables.relation_table(deps, layer, head, min_count=min_count)
        if rel.empty:
            st.info(f"No relation has {min_count} or more instances for this head.")
        else:
            st.plotly_chart(figures.relation_figure(rel, layer, head), width="stretch", key="relations")
            best = rel.iloc[0]
            st.caption(f"Best: {esc(best['relation'])} ({figures.DIRECTIONS.get(best['direction'], best['direction'])})"
                       f", accuracy {best['accuracy']:.2f} vs {best['baseline_accuracy']:.2f} for the best fixed "
                       f"offset ({int(best['baseline_offset']):+d}); n = {int(best['n'])}.".replace("_", "\\_"))


def head_examples(run: Path, layer: int, head: int) -> None:
    """The head's attention on the run's example sentences, and a bertviz-style view of one."""
    examples = load_extra(run, "attention_examples")
    with guard("the attention examples", run):
        sents = examples.get("sentences") if isinstance(examples, dict) else None
        if sents:
            st.markdown("**Its attention on example sentences** (row = attending word, column = attended word)")
            st.plotly_chart(figures.attention_small_multiples(sents, layer, head), width="stretch", key="examples")
            st.markdown("**Head view of one sentence** (bertviz-style, drawn offline)")
            k = st.selectbox("sentence", range(len(sents)), format_func=lambda i: " ".join(sents[i]["words"])[:90],
                             key="head_sentence")
            c3, c4 = st.columns(2)
            words, matrix = sents[k]["words"], sents[k]["attention"][layer][head]
            c3.plotly_chart(figures.head_view(words, matrix, f"layer {layer}, head {head}"), width="stretch",
                            key="head_view")
            c4.plotly_chart(figures.attention_heatmap(words, matrix, f"layer {layer}, head {head}"), width="stretch",
                            key="heatmap")


def head_detail(run: Path, types: pd.DataFrame, layer: int, head: int) -> None:
    """What one head does: its scores, where its attention peaks, the relations it tracks, and its
    attention on the run's example sentences (with a bertviz-style view of one)."""
    st.subheader(f"Layer {layer}, head {head}")
    with guard(f"the scores of layer {layer}, head {head}", run):
        st.markdown(head_facts(tables.head_row(types, layer, head)))
    c1, c2 = st.columns(2)
    stats = load_table(run, "head_stats")
    with c1, guard("the offset histogram", run):
        if has_columns_or_explain(stats, ["layer", "head", "statistic", "value"], "head_stats", run):
            hist = tables.offset_histogram(stats, layer, head)
            if hist.empty:
                st.info("head_stats holds no offset counts for this head")
            else:
                st.plotly_chart(figures.offset_figure(hist, layer, head), width="stretch", key="offsets")
    deps = optional_table(run, "head_dependency")
    with c2, guard("the relations", run):
        head_relations(run, deps, layer, head)
    head_examples(run, layer, head)


# --------------------------------------------------------------------------- Pruning

def pruning_page(page: Page) -> None:
    run = pick_run(page.study, "prune_run")
    if run is None:
        return
    pruning_sections(run)
    gates = optional_table(run, "l0_gates")
    if has_columns_or_explain(gates, ["lam", "layer", "head", "p_open", "kept"], "l0_gates", run):
        st.subheader("L0 gates")
        with guard("the L0 gates", run):
            st.plotly_chart(figures.l0_gates_figure(tables.first_seed(gates)), width="stretch")
        evaluation = optional_table(run, "l0_evaluation")
        if evaluation is not None:
            st.caption("what each λ's gates cost, on test with 95% intervals (dev alongside):")
            st.dataframe(evaluation, width="stretch", hide_index=True)
        with st.expander("gates table"):
            st.dataframe(gates, width="stretch")


def pruning_sections(run: Path) -> None:
    """The pruning curves with their thresholds, the threshold summary (intervals over random
    orders), the order comparison, the importance map and the real-removal cost of one run."""
    curves = load_table(run, "pruning_curves")
    thresholds = optional_table(run, "pruning_thresholds")
    if has_columns_or_explain(curves, ["method", "share_removed", "value"], "pruning_curves", run):
        with guard("the pruning curves", run):
            sign, y_title = tables.pruning_scale(curves)
            fig = figures.line_with_band(tables.on_own_scale(tables.pruning_means(curves), sign), "share_removed",
                                         "method", "test metric vs share of heads removed", y_title)
            if thresholds is not None and {"method", "tolerance", "removable_share"} <= set(thresholds.columns):
                figures.add_threshold_marks(fig, tables.threshold_marks(thresholds, sign))
            fig.update_xaxes(tickformat=".0%", title="share of heads removed")
            st.plotly_chart(fig, width="stretch")
            st.caption("Markers: how many heads each order removes before the metric on dev worsens by more than "
                       "the tolerance (thresholds chosen on dev, the curve and the markers' height read on test).")
    summary = optional_table(run, "pruning_threshold_summary")
    if summary is not None:
        st.subheader("Removable share per order")
        st.caption("Mean over the order's runs (random: one per seed) with a t-interval; one order has none.")
        st.dataframe(summary, width="stretch", hide_index=True)
    if thresholds is not None:
        with st.expander("thresholds of every order"):
            st.dataframe(thresholds, width="stretch", hide_index=True)
    comparison = optional_table(run, "pruning_order_comparison")
    if comparison is not None:
        st.caption("Orders compared on the same test sentences (paired bootstrap):")
        st.dataframe(comparison, width="stretch", hide_index=True)
    imp = load_table(run, "importance")
    if has_columns_or_explain(imp, ["layer", "head", "importance"], "importance", run):
        with guard("the importance map", run):
            st.plotly_chart(figures.importance_figure(tables.importance_grid(imp)), width="stretch")
    cost = optional_table(run, "pruning_cost")
    if cost is not None:
        st.subheader("pruning cost")
        st.dataframe(cost, width="stretch")


# --------------------------------------------------------------------------- Compression

def compression_page(page: Page) -> None:
    run = pick_run(page.study, "compression_run")
    if run is None:
        return
    finetune = optional_table(run, "finetune_run")
    if finetune is not None and not finetune.empty:
        row = finetune.iloc[0]
        st.markdown(f"**The fine-tuned model**: {esc(str(row['model']))} fine-tuned ({esc(str(row['mode']))}) on "
                    f"{esc(str(row['task']))}, seed {row['seed']}: test accuracy {row['test_accuracy']:.4f} "
                    f"[{row['test_low']:.4f}, {row['test_high']:.4f}] on {int(row['test_items'])} items.")
    pruning_sections(run)
    lottery = optional_table(run, "lottery_runs")
    if has_columns_or_explain(lottery, ["kind", "sparsity", "test_accuracy", "test_low", "test_high"], "lottery_runs",
                              run):
        st.subheader("Lottery tickets")
        with guard("the lottery curves", run):
            fig = figures.line_with_band(tables.lottery_curves(lottery), "sparsity", "kind",
                                         "test accuracy vs share of the encoder's weights removed", "test accuracy")
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
        if has_columns_or_explain(survivors, ["component", "layer", "head", "share", "super_survivor"],
                                  "structured_survivors", run):
            with guard("the survivors map", run):
                st.plotly_chart(figures.survivors_figure(survivors), width="stretch")
        st.caption("Each sub-network retrained from the pre-trained weights with its heads and FFN blocks removed; "
                   "good = least important removed until dev falls below the kept share of full, bad = as many of "
                   "the most important, random = as many at random.")
        st.dataframe(subnetworks, width="stretch", hide_index=True)
        comparison = optional_table(run, "structured_comparison")
        if comparison is not None:
            st.dataframe(comparison, width="stretch", hide_index=True)
    quant = optional_table(run, "quantization_task")
    if has_columns_or_explain(quant, ["setting", "accuracy", "low", "high", "size_ratio", "size_kind", "speedup"],
                              "quantization_task", run):
        st.subheader("Quantization")
        with guard("the quantization figure", run):
            st.plotly_chart(figures.quantization_figure(quant), width="stretch")
        st.caption("Real int8: torch's dynamic int8 kernels (size serialized, speed measured against float32 in the "
                   "same process). Simulated bits: weights rounded and stored back as float32 -- the accuracy is "
                   "what those bits give, the size is the packed size they would take, and there is no speed-up. "
                   "difference: against float32 on the same test examples (paired bootstrap).")
        st.dataframe(quant, width="stretch", hide_index=True)
    probing = optional_table(run, "quantization_probing")
    if has_columns_or_explain(probing, ["setting", "layer", "accuracy", "low", "high", "difference"],
                              "quantization_probing", run):
        with guard("the probing under quantization", run):
            shown = probing.dropna(subset=["accuracy"]).rename(columns={"accuracy": "mean"})
            st.plotly_chart(figures.line_with_band(shown, "layer", "setting",
                                                   "linear POS probe per layer of the pretrained encoder, quantized",
                                                   "test accuracy (95% interval)"), width="stretch")
        st.caption("The same probe, split and seed for every setting; difference: against float32 at that layer on the "
                   "same test sentences (paired bootstrap).")
        with st.expander("probing table"):
            st.dataframe(probing, width="stretch", hide_index=True)


# --------------------------------------------------------------------------- Embeddings

def embeddings_page(page: Page) -> None:
    run = pick_run(page.study, "ctx_run")
    if run is None:
        return
    other = pick_other(page.study, run, "ctx_compare")
    contextuality = load_table(run, "contextuality")
    if has_columns_or_explain(contextuality, ["layer", "metric"], "contextuality", run):
        with guard("the contextuality panels", run):
            if other is None:
                st.plotly_chart(figures.contextuality_multiples(contextuality), width="stretch")
            else:
                both = tables.stack_runs([(describe(run), contextuality),
                                          (describe(other), read_table(other, "contextuality"))])
                st.plotly_chart(figures.contextuality_multiples(both, run_column="run"), width="stretch")
    clusters = load_table(run, "sense_clusters")
    if has_columns_or_explain(clusters, ["word", "x", "y"], "sense_clusters", run):
        with guard("the sense clusters", run):
            word = st.selectbox("polysemous word", sorted(clusters["word"].astype(str).unique()))
            occurrences = tables.word_occurrences(clusters, word)
            st.plotly_chart(figures.cluster_figure(occurrences, word, tables.clusters_layer(occurrences)),
                            width="stretch")
    neighbours = optional_table(run, "neighbours")
    if neighbours is not None:
        st.subheader("Static vs contextual neighbours")
        searchable_table(neighbours, "ctx_neighbour_search", "neighbours")


# --------------------------------------------------------------------------- Alignment

TRANSLATIONS_SHOWN = 300  # rows of the translations table on the page


def alignment_page(page: Page) -> None:
    run = pick_run(page.study, "align_run")
    if run is None:
        return
    precision = load_table(run, "precision")
    if precision is not None:
        st.subheader("P@k on held-out dictionary")
        st.dataframe(precision, width="stretch")
    translations = optional_table(run, "translations")
    if translations is not None:
        st.subheader("Translations")
        searchable_table(translations, "align_translation_search", "translations", shown=TRANSLATIONS_SHOWN)
    moved = optional_table(run, "most_moved")
    if moved is not None:
        st.subheader("Words that move most between the two spaces")
        searchable_table(moved, "align_moved_search", "moved words")


# --------------------------------------------------------------------------- Semantic change

CHANGE_WORDS_SHOWN = 25  # words per most-moved / most-stable chart


def semantic_change_page(page: Page) -> None:
    run = pick_run(page.study, "change_run")
    if run is None:
        return
    change = load_table(run, "word_change")
    if not has_columns_or_explain(change, ["comparison", "word", "cosine_distance", "low", "high",
                                           "control_threshold", "moved"], "word_change", run):
        return
    with guard("the semantic change", run):
        comparison = st.selectbox("comparison", list(dict.fromkeys(change["comparison"].astype(str))))
        slices = optional_table(run, "slices")
        if slices is not None and "comparison" in slices:
            st.dataframe(slices[slices["comparison"] == comparison], width="stretch", hide_index=True)
        part = change[change["comparison"] == comparison]
        st.caption(f"{int(part['moved'].sum())} of {len(part)} scored words moved beyond the frequency-matched "
                   "control.")
        for most in ("moved", "stable"):
            rows = tables.change_rows(change, comparison, CHANGE_WORDS_SHOWN, most)
            st.plotly_chart(figures.change_figure(rows, f"{comparison}: most {most} words"), width="stretch",
                            key=f"change-{most}")
        st.subheader("Any word: its change and its neighbours in each slice")
        columns = [c for c in ("word", "count_a", "count_b", "cosine_distance", "low", "high",
                               "neighbourhood_distance", "control_threshold", "moved", "stable", "neighbours_a",
                               "neighbours_b") if c in part]
        searchable_table(part[columns], "change_word_search", "words")


# --------------------------------------------------------------------------- Pretraining

def training_curves(run: Path) -> None:
    """Training and held-out loss, and held-out perplexity where the run logged it."""
    metrics = load_table(run, "training_metrics")
    if has_columns_or_explain(metrics, ["step", "metric", "value"], "training_metrics", run):
        with guard("the loss curves", run):
            st.plotly_chart(figures.loss_figure(tables.loss_rows(metrics)), width="stretch")
            perplexity = tables.perplexity_rows(metrics)
            if len(perplexity):
                st.plotly_chart(figures.perplexity_figure(perplexity), width="stretch")


def head_maps_by_step(run: Path) -> None:
    """The head map at a checkpoint picked on a slider (``?step=`` preselects it), and at a second
    step beside it."""
    by_step = load_table(run, "head_types_by_step")
    if has_columns_or_explain(by_step, ["step", "layer", "head", "type"], "head_types_by_step", run):
        with guard("the head maps by checkpoint", run):
            steps = tables.checkpoint_steps(by_step)
            step = st.select_slider("checkpoint step (head map)", options=steps,
                                    value=tables.start_step(steps, query("step")), key="pt_step")
            versus = st.selectbox("beside it, step", [None, *[s for s in steps if s != step]], key="pt_versus",
                                  format_func=lambda s: "nothing" if s is None else f"step {s}")
            shown = [step] if versus is None else [step, versus]
            for col, s in zip(st.columns(len(shown)), shown):
                col.plotly_chart(figures.head_map(tables.at_step(by_step, s), f"head types at step {s}"),
                                 width="stretch", key=f"pt_map_{s}")


def cloze_section(run: Path) -> None:
    """What each checkpoint predicts for the masked words, with its top-1 / top-5 accuracy."""
    cloze = optional_table(run, "cloze_predictions")
    if cloze is not None and not cloze.empty and has_columns_or_explain(
            cloze, ["step", "text", "masked", "rank", "prediction", "probability"], "cloze_predictions", run):
        with guard("the masked-word predictions", run):
            st.subheader("What the model predicts for a masked word")
            accuracy = load_table(run, "cloze_accuracy")
            if accuracy is not None and not accuracy.empty:
                st.caption(tables.cloze_accuracy_line(accuracy))
            steps = sorted(cloze["step"].unique())
            step = st.select_slider("checkpoint step (predictions)", options=steps, value=steps[-1], key="cloze_step")
            st.dataframe(tables.cloze_guesses(cloze, step), hide_index=True, width="stretch")
    reference = optional_table(run, "reference_cloze_predictions")
    if reference is not None and not reference.empty and has_columns_or_explain(
            reference, ["text", "masked", "rank", "prediction", "probability"], "reference_cloze_predictions", run):
        with guard("the reference model's predictions", run):
            accuracy = optional_table(run, "reference_cloze_accuracy")
            name = esc(str(reference["model"].iloc[0])) if "model" in reference else "the reference model"
            line = f"Reference, not a checkpoint of this run: {name} on the same sentences"
            if accuracy is not None and not accuracy.empty:
                row = accuracy.iloc[0]
                line += f" — top-1 {row['top1']:.0%}, top-5 {row['top5']:.0%} of {int(row['n'])} masked words"
            st.caption(line + " (its tokenizer keeps other words whole, so the masked words can differ).")
            st.dataframe(tables.cloze_guesses(reference.assign(step=0), 0), hide_index=True, width="stretch")


def pretraining_page(page: Page) -> None:
    run = pick_run(page.study, "pt_run")
    if run is None:
        return
    training_curves(run)
    st.subheader("Heads across checkpoints")
    head_maps_by_step(run)
    counts = load_table(run, "head_counts")
    if has_columns_or_explain(counts, ["step", "type", "count"], "head_counts", run):
        with guard("the head counts", run):
            st.plotly_chart(figures.type_counts_figure(counts), width="stretch")
    st.subheader("Probe accuracy across checkpoints")
    probes = load_table(run, "probe_scores")
    if has_columns_or_explain(probes, ["step", "task", "layer", "value"], "probe_scores", run):
        with guard("the probe accuracy", run):
            st.plotly_chart(figures.probe_by_step(probes), width="stretch")
            best = tables.best_layer_by_step(probes, optional_table(run, "best_layers"))
            st.plotly_chart(figures.best_layer_figure(best), width="stretch")
    cloze_section(run)


# --------------------------------------------------------------------------- Compare runs

def main_tables() -> dict[str, str]:
    """``{study: main table}`` of every page over one study (what "Compare runs" shows)."""
    return {p.study: p.main_table for p in PAGES if p.study is not None and p.main_table is not None}


def compare_page(page: Page) -> None:
    tables_of = main_tables()
    studies = sorted({p.parent.name for p in find_runs()} & set(tables_of))
    if not studies:
        st.info("No runs to compare yet.")
        return
    study = st.selectbox("study", studies)
    runs = find_runs(study)
    if len(runs) < 2:
        st.info(f"Only one `{study}` run: run the study again with another model, seed or config to compare.")
    c1, c2 = st.columns(2)
    a = c1.selectbox("run A", runs, index=0, format_func=describe)
    b = c2.selectbox("run B", runs, index=min(1, len(runs) - 1), format_func=describe)
    table = tables_of[study]
    try:
        mismatches = tables.comparison_mismatches(read_manifest(a), read_manifest(b))
    except ResultError:
        mismatches = []  # the side that cannot be read says so below
    if mismatches:
        st.warning(MISMATCH_WARNING + "; ".join(clean(m) for m in mismatches))
    for side, col, run in (("A", c1, a), ("B", c2, b)):
        with col, guard(f"table {table}", run):
            df = load_table(run, table)
            try:
                m = read_manifest(run)
                st.caption(f"model: {model_name(m)} · seed {m.get('seed')}")
            except ResultError as exc:
                st.error(clean(exc))
            if df is not None:
                if study == "edge_probing" and {"task", "layer", "value", "metric"} <= set(df.columns):
                    means = tables.layer_means(tables.accuracy_per_layer(df))
                    st.plotly_chart(figures.line_with_band(means, "layer", "task", run_label(run), "score"),
                                    width="stretch", key=f"cmp-{side}-{run_label(run)}")  # A and B may be one run
                st.dataframe(df, width="stretch")
    if study == "edge_probing" and a != b:
        paired_difference(a, b)


# --------------------------------------------------------------------------- Fine-tuning

def finetuning_page(page: Page) -> None:
    run = pick_run(page.study, "finetune_run")
    if run is None:
        return
    scores = load_table(run, "finetune_scores")
    if has_columns_or_explain(scores, ["task", "mode", "accuracy", "low", "high"], "finetune_scores", run):
        with guard("the fine-tuning scores", run):
            st.plotly_chart(figures.finetune_scores_figure(scores), width="stretch")
            flagged = tables.small_sample_tasks(scores)
            if flagged:
                st.warning(f"small test sets (< 100 scored items per seed): {', '.join(map(str, flagged))}")
            st.dataframe(scores, width="stretch", hide_index=True)
    comparisons = optional_table(run, "finetune_comparisons")
    if has_columns_or_explain(comparisons, ["task", "mode", "difference", "low", "high", "p_value"],
                              "finetune_comparisons", run):
        st.subheader("Each mode against full fine-tuning, paired on the same test examples")
        st.dataframe(comparisons, width="stretch", hide_index=True)
    change = optional_table(run, "change_by_layer")
    if has_columns_or_explain(change, ["task", "mode", "layer", "cka"], "change_by_layer", run):
        with guard("the change per layer", run):
            tasks = list(dict.fromkeys(change["task"].astype(str)))
            task = st.selectbox("task", tasks, key="finetune_task") if len(tasks) > 1 else tasks[0]
            st.plotly_chart(figures.finetune_change_figure(change.assign(task=change["task"].astype(str)), task),
                            width="stretch")
            probes = optional_table(run, "probing_before_after")
            if has_columns_or_explain(probes, ["task", "mode", "probe_task", "layer", "split", "accuracy"],
                                      "probing_before_after", run):
                st.plotly_chart(figures.probing_before_after_figure(probes.assign(task=probes["task"].astype(str)),
                                                                    task), width="stretch")
            types = optional_table(run, "head_types_before_after")
            if has_columns_or_explain(types, ["task", "mode", "type_before", "type_after", "changed"],
                                      "head_types_before_after", run):
                part = types[types["task"].astype(str) == task]
                st.caption("heads whose type changed with fine-tuning (of all heads, mean over seeds):")
                st.dataframe(tables.type_changes(part), width="stretch", hide_index=True)


# --------------------------------------------------------------------------- the registry

PAGES: tuple[Page, ...] = (
    Page(key="Runs", title="Runs",
         intro="Every study run under the results folder, newest first: its seed, model and tables. "
               "A run whose manifest cannot be read says why; the other runs still show.",
         render=runs_page, min_tables=1),
    Page(key="Live", title="Live: any sentence through any model",
         intro="Type a sentence (or pick one from the corpus) and see what a model does with it, computed now: "
               "every head of every layer at once and one head in detail (as bertviz's model and head views; "
               "Vig 2019), how a head's query and key neurons make its scores (neuron view), attention rollout "
               "across layers (Abnar & Zuidema 2020), and an MLM's guesses for a masked word.",
         render=live_page, min_charts=4),
    Page(key="Probing", title="Edge probing (Tenney et al. 2019)",
         intro="A small classifier per layer predicts each word's label (part of speech, entity...) from that "
               "layer's frozen vectors: where the curve rises is where the information becomes linearly readable. "
               "Tenney et al. 2019, *BERT Rediscovers the Classical NLP Pipeline*; controls: Hewitt & Liang 2019.",
         render=probing_page, study="edge_probing", main_table="layer_scores", compare=True, min_charts=1),
    Page(key="Feature combinations", title="Feature-based combinations (Devlin et al. 2019, Table 7)",
         intro="Which layers to feed a task model when BERT stays frozen: last layer, sums and "
               "concatenations of the last four... Devlin et al. 2019, *BERT*, Table 7.",
         render=combinations_page, study="feature_combinations", main_table="combinations",
         min_charts=1, min_tables=1),
    Page(key="Heads", title="Attention heads (Voita et al. 2019, Clark et al. 2019)",
         intro="Each square is one attention head, coloured by what it does: attends to a fixed relative position "
               "(positional), to a word's syntactic head or dependent (syntactic), to rare words, to [CLS]/[SEP] "
               "(special), or broadly. Click a head (or pick it below) for its attention on example sentences, where "
               "its attention peaks, and the relations it tracks. Voita et al. 2019, *Analyzing Multi-Head "
               "Self-Attention*; Clark et al. 2019, *What Does BERT Look At?*.",
         render=heads_page, study="head_types", main_table="head_types", compare=True, min_charts=5,
         compare_charts=6),
    Page(key="Pruning", title="Head importance and pruning (Michel et al. 2019, Voita et al. 2019)",
         intro="How much the metric worsens as heads are removed, most or least important first; importance is the "
               "gradient of the loss with respect to a gate on each head. Michel et al. 2019, *Are Sixteen Heads "
               "Really Better than One?*; L0 gates: Voita et al. 2019.",
         render=pruning_page, study="pruning", main_table="pruning_curves", min_charts=2),
    Page(key="Embeddings", title="Static vs contextual embeddings (Ethayarajh 2019)",
         intro="How contextual is each layer: self-similarity of a word across its contexts, similarity of words "
               "within a sentence, and the variance one static vector can explain (MEV), each beside the "
               "anisotropy baseline of random words. Ethayarajh 2019, *How Contextual are Contextualized Word "
               "Representations?*.",
         render=embeddings_page, study="contextuality", main_table="contextuality", compare=True, min_charts=2),
    Page(key="Alignment", title="Rotation alignment (Procrustes, self-learning, CSLS)",
         intro="Two embedding spaces mapped onto each other by a rotation learnt from a seed dictionary, "
               "scored by translation retrieval (P@k, CSLS). Mikolov et al. 2013; Conneau et al. 2018; "
               "Artetxe et al. 2017.",
         render=alignment_page, study="alignment", main_table="precision", min_tables=1),
    Page(key="Semantic change", title="Semantic change between slices of documents",
         intro="Which words moved between two slices of documents (1900 vs 1990, one party vs another): each "
               "slice gets its own vectors, one is rotated onto the other, and a word's change is checked against "
               "how far words of its frequency move between two random halves of one slice. Hamilton et al. "
               "2016, *Diachronic Word Embeddings Reveal Statistical Laws of Semantic Change*.",
         render=semantic_change_page, study="semantic_change", main_table="word_change", min_charts=2),
    Page(key="Pretraining", title="Pretraining and emergence",
         intro="The project's own BERT during masked-language-model pretraining (Devlin et al. 2019): loss, and at "
               "each saved checkpoint its head types, probe accuracy and masked-word guesses; Voita et al. 2019 "
               "see positional heads appear early.",
         render=pretraining_page, study="emergence", main_table="probe_scores", min_charts=4),
    Page(key="Fine-tuning", title="Fine-tuning and what it changes",
         intro="The same encoder fine-tuned four ways on the same tasks and test examples: frozen (a classifier on "
               "frozen features), full, BitFit (biases only; Ben Zaken et al. 2022) and adapters (Houlsby et al. "
               "2019), each against full fine-tuning; then, layer by layer, how far each moved from the pretrained "
               "model: weights, representations (linear CKA, Kornblith et al. 2019) and attention.",
         render=finetuning_page, study="finetuning", main_table="finetune_scores", min_charts=2),
    Page(key="Compression", title="Compressing a fine-tuned model: head pruning and quantization",
         intro="A model fine-tuned on a task, then made smaller: heads removed in order of importance (the gradient "
               "of the task loss with respect to a gate on each head, re-estimated as heads go), at random or by "
               "type, with the task's accuracy read on test (Michel et al. 2019, *Are Sixteen Heads Really Better "
               "than One?*); and its weights stored in 8 bits or fewer (post-training quantization).",
         render=compression_page, study="compression", main_table="pruning_curves", min_charts=6),
    Page(key="Compare runs", title="Compare two runs",
         intro="The main table of two runs of one study side by side (another model, seed or config).",
         render=compare_page, min_tables=2),
)
PAGE_BY_KEY: dict[str, Page] = {p.key: p for p in PAGES}
