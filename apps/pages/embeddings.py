"""The Embeddings page (Ethayarajh 2019): how contextual each layer is (beside a second run's),
the sense clusters of a polysemous word, and static vs contextual neighbours."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import tables
from bertology.apps.figures import anchor_score_axis, esc
from bertology.apps.locations import describe, manifest_config
from bertology.apps.pages.page import Page
from bertology.apps.ui import (
    guard,
    has_columns_or_explain,
    load_table,
    optional_table,
    pick_other,
    pick_run,
    searchable_table,
)
from bertology.results import read_manifest, read_table
from bertology.uncertainty import MIN_WORD_TYPES


def embeddings_page(page: Page) -> None:
    run = pick_run(page.study, "ctx_run")
    if run is None:
        return
    other = pick_other(page.study, run, "ctx_compare")
    contextuality = load_table(run, "contextuality")
    if has_columns_or_explain(contextuality, ["layer", "metric"], "contextuality", run):
        with guard("the contextuality panels", run):
            if other is None:
                st.plotly_chart(contextuality_multiples(contextuality), width="stretch")
            else:
                both = tables.stack_runs(
                    [(describe(run), contextuality), (describe(other), read_table(other, "contextuality"))]
                )
                st.plotly_chart(contextuality_multiples(both, run_column="run"), width="stretch")
            note = few_words_note(contextuality)
            if note:
                st.warning(note)
    clusters = load_table(run, "sense_clusters")
    if clusters is not None and clusters.empty:
        st.info(no_clusters_note(read_manifest(run)))
    elif has_columns_or_explain(clusters, ["word", "x", "y"], "sense_clusters", run):
        with guard("the sense clusters", run):
            word = st.selectbox("polysemous word", sorted(clusters["word"].astype(str).unique()))
            occurrences = word_occurrences(clusters, word)
            st.plotly_chart(cluster_figure(occurrences, word, clusters_layer(occurrences)), width="stretch")
    neighbours = optional_table(run, "neighbours")
    if neighbours is not None:
        st.subheader("Static vs contextual neighbours")
        searchable_table(neighbours, "ctx_neighbour_search", "neighbours", paper=True)


# --------------------------------------------------------------------------- data shaping


def few_words_note(contextuality: pd.DataFrame, minimum: int = MIN_WORD_TYPES) -> str | None:
    """``"too few words: N (need M)"`` when the per-word measures (self-similarity, MEV: the
    ``n_items`` of their rows) rest on fewer than ``minimum`` distinct words; None otherwise or when
    the table does not say."""
    if not {"metric", "n_items"} <= set(contextuality.columns):
        return None
    rows = contextuality[contextuality["metric"].isin(["self_similarity", "mev"])]
    if rows.empty or int(rows["n_items"].min()) >= minimum:
        return None
    return (
        f"too few words: {int(rows['n_items'].min())} (need {minimum}): self-similarity and MEV rest on the "
        "corpus's few most frequent words, mostly function words; read them as those words, not as the model. "
        "Run on more sentences (--limit) or with a lower --min-occurrences."
    )


def no_clusters_note(manifest: dict[str, Any]) -> str:
    """Why a run has no sense clusters (an empty ``sense_clusters`` table): none of the listed
    polysemous words occurs often enough in its corpus, ``"too few words: 0 (need 1)"``."""
    config = manifest_config(manifest)
    words = config.get("words")
    listed = words if isinstance(words, list) else []
    need = config.get("min_word_occurrences", "enough")
    return (
        f"No sense clusters: too few words: {len(manifest.get('polysemous_words') or [])} (need 1). None of the "
        f"{len(listed)} polysemous words the run looks for occurs {need} times or more in its corpus; run on "
        "more sentences or list other words (`words`, `min_word_occurrences` in the config)."
    )


def word_occurrences(clusters: pd.DataFrame, word: str) -> pd.DataFrame:
    """The rows of a ``sense_clusters`` table (``word, x, y``...) for one word."""
    return clusters[clusters["word"].astype(str) == word]


def clusters_layer(occurrences: pd.DataFrame) -> Any:
    """The layer whose vectors a word's sense clusters come from (its ``layer`` column), or None."""
    return occurrences["layer"].iloc[0] if "layer" in occurrences else None


# --------------------------------------------------------------------------- figures

KIND_COLOURS = {"raw": "#1f77b4", "baseline": "#7f7f7f", "adjusted": "#d62728"}


MEASURE_NAMES = {
    "self_similarity": "self-similarity",
    "intra_sentence_similarity": "intra-sentence similarity",
    "mev": "maximum explainable variance",
}


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
        fig = px.line(
            long,
            x="layer",
            y="value",
            color=run_column,
            line_dash="kind",
            facet_col="measure",
            markers=True,
            facet_col_spacing=0.06,
        )
    else:
        fig = px.line(
            long,
            x="layer",
            y="value",
            color="kind",
            facet_col="measure",
            markers=True,
            color_discrete_map=KIND_COLOURS,
            facet_col_spacing=0.06,
        )
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    fig.update_yaxes(matches=None, showticklabels=True)
    fig.update_layout(
        height=380,
        title="per layer: raw, anisotropy baseline (random words), adjusted = raw − baseline",
        margin=dict(t=80),
        legend=dict(orientation="h", y=-0.2),
    )
    return anchor_score_axis(fig, per_axis=True)  # each measure's panel: a score axis when its values are scores


MIN_MAP_POINTS = 30  # fewer uses: UMAP's layout and k-means clusters of them show no structure to trust


def cluster_figure(part: pd.DataFrame, word: str, layer: Any = None) -> go.Figure:
    """UMAP of one word's occurrences, coloured by k-means cluster (unsupervised, not gold senses);
    the hover shows each occurrence's context, escaped. Under :data:`MIN_MAP_POINTS` uses the title
    says that the picture is too small to show clusters.

    ``part``: the ``sense_clusters`` rows of one word: ``x, y`` (UMAP), ``cluster`` and ``context``
    where present; ``layer``: the layer of the vectors (None: not said)."""
    part = part.copy()
    if "cluster" in part:
        sizes = part["cluster"].value_counts()
        part["group"] = part["cluster"].map(lambda c: f"cluster {int(c) + 1} ({int(sizes[c])} uses)")
    else:
        part["group"] = "occurrence"
    where = f"layer {int(layer)} vectors" if layer is not None and pd.notna(layer) else "vectors"
    fig = go.Figure()
    for name, g in part.groupby("group", sort=True):
        fig.add_trace(
            go.Scatter(
                x=g["x"],
                y=g["y"],
                mode="markers",
                name=name,
                marker=dict(size=9),
                hovertext=[esc(c) for c in g["context"]] if "context" in g else None,
                hoverinfo="text" if "context" in g else "x+y",
            )
        )
    title = f"'{esc(word)}' in context: UMAP of its {where}"
    if len(part) < MIN_MAP_POINTS:
        title += (
            f"<br><sup>only {len(part)} uses: too few for the layout or the clusters to show structure; "
            "read the contexts, not the picture</sup>"
        )
    fig.update_layout(
        title=title,
        legend_title_text="k-means cluster of its contexts (not gold senses)",
        height=440,
        xaxis_title="UMAP 1",
        yaxis_title="UMAP 2",
    )
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Embeddings",
    title="Static vs contextual embeddings (Ethayarajh 2019)",
    intro="How contextual is each layer: self-similarity of a word across its contexts, similarity of words "
    "within a sentence, and the variance one static vector can explain (MEV), each beside the "
    "anisotropy baseline of random words. Ethayarajh 2019, *How Contextual are Contextualized Word "
    "Representations?*.",
    render=embeddings_page,
    study="contextuality",
    main_table="contextuality",
    compare=True,
    min_charts=2,
)
