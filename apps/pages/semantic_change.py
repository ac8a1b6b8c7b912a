"""The Semantic change page (Hamilton et al. 2016): the words that moved most and least between
two slices of documents, each against its own split-half control, and any word's change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from bertology.apps import tables
from bertology.apps.figures import esc
from bertology.apps.pages.page import Page
from bertology.apps.ui import guard, has_columns_or_explain, load_table, optional_table, pick_run, searchable_table

CHANGE_WORDS_SHOWN = 25  # words per most-moved / most-stable chart


def semantic_change_page(page: Page) -> None:
    run = pick_run(page.study, "change_run")
    if run is None:
        return
    change = load_table(run, "word_change")
    if not has_columns_or_explain(
        change,
        ["comparison", "word", "cosine_distance", "low", "high", "control_threshold", "moved"],
        "word_change",
        run,
    ):
        return
    with guard("the semantic change", run):
        comparison = st.selectbox("comparison", list(dict.fromkeys(change["comparison"].astype(str))))
        slices = optional_table(run, "slices")
        if slices is not None and "comparison" in slices:
            st.dataframe(
                tables.paper_table(slices[slices["comparison"] == comparison]), width="stretch", hide_index=True
            )
        part = change[change["comparison"] == comparison]
        tested = tested_rows(part)
        st.caption(
            f"{int(tested['moved'].sum())} of {len(tested)} scored words moved beyond their control"
            + (
                f"; {len(part) - len(tested)} words not tested (column status says why)."
                if len(tested) < len(part)
                else "."
            )
        )
        for most in ("moved", "stable"):
            rows = change_rows(tested_rows(change), comparison, CHANGE_WORDS_SHOWN, most)
            st.plotly_chart(
                change_figure(rows, f"{comparison}: most {most} words"), width="stretch", key=f"change-{most}"
            )
        st.subheader("Any word: its change and its neighbours in each slice")
        columns = [
            c
            for c in (
                "word",
                "status",
                "count_a",
                "count_b",
                "cosine_distance",
                "low",
                "high",
                "neighbourhood_distance",
                "control_threshold",
                "n_control",
                "moved",
                "stable",
                "neighbours_a",
                "neighbours_b",
            )
            if c in part
        ]
        searchable_table(part[columns], "change_word_search", "words", paper=True)


# --------------------------------------------------------------------------- data shaping


def tested_rows(word_change: pd.DataFrame) -> pd.DataFrame:
    """The rows of words tested against their control (``status`` "scored"); every row of a run
    made before the table had a ``status`` column (issue 42), which held tested words only."""
    if "status" not in word_change:
        return word_change
    return word_change[word_change["status"] == "scored"]


def change_rows(word_change: pd.DataFrame, comparison: str, n: int, most: str = "moved") -> pd.DataFrame:
    """The ``n`` most moved (highest ``cosine_distance``) or most stable (lowest upper end ``high``)
    words of one comparison of a ``word_change`` table (columns ``comparison, word,
    cosine_distance, low, high, control_threshold, moved, stable``)."""
    part = word_change[word_change["comparison"] == comparison]
    if most == "moved":
        return part.sort_values(["cosine_distance", "word"], ascending=[False, True]).head(n)
    return part.sort_values(["high", "word"]).head(n)


# --------------------------------------------------------------------------- figures


def change_figure(rows: pd.DataFrame, title: str) -> go.Figure:
    """Horizontal bars: each word's change (cosine distance after alignment, mean over replicates)
    with its replicate interval, and an ``x`` at its control threshold (the word's own, or its
    frequency bin's in runs with ``control: bin``); moved words
    in one colour, the rest in grey, top row first. ``rows``: ``word, cosine_distance, low, high,
    control_threshold, moved`` (:func:`change_rows`)."""
    shown = rows.iloc[::-1]
    words = [esc(w) for w in shown["word"]]
    colour = np.where(shown["moved"].astype(bool), "#d62728", "#7f7f7f")
    fig = go.Figure(
        go.Bar(
            y=words,
            x=shown["cosine_distance"],
            orientation="h",
            marker_color=colour,
            name="change",
            error_x=dict(
                type="data",
                symmetric=False,
                array=(shown["high"] - shown["cosine_distance"]).clip(lower=0),
                arrayminus=(shown["cosine_distance"] - shown["low"]).clip(lower=0),
            ),
            hovertext=[
                f"{w}: {m:.3f} [{lo:.3f}, {hi:.3f}], control {c:.3f}"
                for w, m, lo, hi, c in zip(
                    words, shown["cosine_distance"], shown["low"], shown["high"], shown["control_threshold"]
                )
            ],
            hoverinfo="text",
        )
    )
    fig.add_trace(
        go.Scatter(
            y=words,
            x=shown["control_threshold"],
            mode="markers",
            name="control threshold",
            marker=dict(symbol="x", size=9, color="black"),
        )
    )
    fig.update_layout(
        title=esc(title),
        xaxis_title="cosine distance after alignment (mean over replicates)",
        height=140 + 22 * len(shown),
        legend=dict(orientation="h"),
    )
    return fig


# --------------------------------------------------------------------------- the registry entry

PAGE = Page(
    key="Semantic change",
    title="Semantic change between slices of documents",
    intro="Which words moved between two slices of documents (1900 vs 1990, one party vs another): each "
    "slice gets its own vectors, one is rotated onto the other, and a word's change is checked against "
    "how far the word itself moves between two random halves of one slice (runs with control: bin: "
    "words of its frequency). Hamilton et al. 2016, *Diachronic Word Embeddings Reveal Statistical "
    "Laws of Semantic Change*.",
    render=semantic_change_page,
    study="semantic_change",
    main_table="word_change",
    min_charts=2,
)
