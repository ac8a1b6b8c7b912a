"""The dashboard's figures on planted tables: categorical head map, a head's offset histogram and
relations, small multiples per measure, readable cluster legends, and words shown as typed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bertology.apps import figures

MARKUP = "<b>x</b>"


def strings(obj) -> list[str]:
    """Every string inside a figure's dict (labels, titles, hover texts...)."""
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in strings(v)]
    if isinstance(obj, np.ndarray):
        return [s for v in obj.tolist() for s in strings(v)]
    return [obj] if isinstance(obj, str) else []


def test_esc_keeps_words_as_typed():
    assert figures.esc(MARKUP) == "&lt;b&gt;x&lt;/b&gt;"
    assert figures.esc("a & b") == "a &amp; b"
    assert figures.esc(3) == "3"


def test_head_map_is_categorical_one_trace_per_type():
    types = pd.DataFrame({"layer": [0, 0, 0, 1, 1, 1], "head": [0, 1, 2, 0, 1, 2],
                          "type": ["positional", "syntactic", "other", "positional", "odd<i>type</i>", "broad"],
                          "positional_share": [0.95, 0.1, 0.2, 0.93, 0.0, 0.1]})
    fig = figures.head_map(types, "map", selected=(1, 2))
    kinds = [t for t in fig.data if t.name != "selected head"]
    # fixed order of known types, unknown ones after; each legend entry counts its heads
    assert [t.name for t in kinds] == ["positional (2)", "syntactic (1)", "broad (1)", "other (1)",
                                       "odd&lt;i&gt;type&lt;/i&gt; (1)"]
    assert all(t.type == "scatter" for t in fig.data)  # no continuous colour bar
    assert kinds[0].marker.color == figures.TYPE_COLOURS["positional"]
    assert kinds[0].customdata.tolist() == [[0, 0], [1, 0]]
    assert list(kinds[0].x) == [0, 0] and list(kinds[0].y) == [0, 1]
    selected = [t for t in fig.data if t.name == "selected head"][0]
    assert (list(selected.x), list(selected.y)) == ([2], [1])
    assert "<i>type" not in " ".join(strings(fig.to_dict()))


def test_offset_histogram_reads_one_heads_shares_in_offset_order():
    stats = pd.DataFrame({
        "layer": [1, 1, 1, 1, 1, 0, 1],
        "head": [2, 2, 2, 2, 2, 2, 2],
        "statistic": ["token_offset_2", "token_offset_other", "token_offset_-1", "argmax_offset_-1", "entropy",
                      "token_offset_-1", "token_offset_-10"],
        "value": [0.2, 0.1, 0.6, 0.5, 0.9, 0.99, 0.1]})
    hist = figures.offset_histogram(stats, 1, 2)
    assert hist.to_dict("records") == [
        {"level": "token", "offset": "-10", "share": 0.1}, {"level": "token", "offset": "-1", "share": 0.6},
        {"level": "token", "offset": "2", "share": 0.2}, {"level": "token", "offset": "other", "share": 0.1},
        {"level": "word", "offset": "-1", "share": 0.5}]
    fig = figures.offset_figure(hist, 1, 2)
    assert list(fig.layout.xaxis.categoryarray) == ["-10", "-1", "2", "other"]
    assert [t.name for t in fig.data] == ["token level", "word level"]


def test_relation_table_ranks_by_gain_over_the_offset_baseline():
    dep = pd.DataFrame({
        "layer": [0, 0, 0, 0, 0, 1], "head": [1, 1, 1, 1, 1, 1],
        "relation": ["nsubj", "amod", "dobj", "all", "det", "nsubj"],
        "direction": ["dependent_attends_to_head"] * 6,
        "n": [50, 5, 40, 200, 30, 50], "accuracy": [0.8, 0.99, 0.5, 0.4, 0.9, 0.1],
        "baseline_offset": [1, -1, 2, 1, -1, 1], "baseline_accuracy": [0.5, 0.1, 0.4, 0.3, 0.85, 0.5]})
    dep["gain"] = dep["accuracy"] - dep["baseline_accuracy"]
    rel = figures.relation_table(dep, 0, 1, min_count=20)
    # amod is below min_count, "all" is the summary row, layer 1 is another head
    assert list(rel["relation"]) == ["nsubj", "dobj", "det"]
    assert rel["gain"].tolist() == pytest.approx([0.3, 0.1, 0.05])
    fig = figures.relation_figure(rel, 0, 1)
    assert list(fig.data[0].x) == [0.8, 0.5, 0.9] and list(fig.data[1].x) == [0.5, 0.4, 0.85]
    assert fig.data[0].y[0] == "nsubj (dependent → head)"


def test_attention_figures_show_markup_words_as_typed():
    words = ["the", MARKUP, "dog"]
    matrix = np.array([[0.1, 0.8, 0.1], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]])
    sentence = {"words": words, "attention": np.stack([np.stack([matrix, matrix.T])])}  # [1 layer, 2 heads, 3, 3]
    for fig in (figures.attention_heatmap(words, matrix, MARKUP), figures.head_view(words, matrix, "view"),
                figures.attention_small_multiples([sentence], 0, 1)):
        texts = strings(fig.to_dict())
        assert not [t for t in texts if MARKUP in t], "a word reached Plotly as markup"
        assert any("&lt;b&gt;x&lt;/b&gt;" in t for t in texts)
    heat = figures.attention_small_multiples([sentence], 0, 1).data[0]
    assert np.asarray(heat.z).tolist() == matrix.T.tolist()  # head 1 of layer 0
    assert list(heat.x) == ["0: the", "1: &lt;b&gt;x&lt;/b&gt;", "2: dog"]
    view = figures.head_view(words, matrix, "view", threshold=0.05)
    lines = [t for t in view.data if t.mode == "lines"]
    assert len(lines) == 6  # weights above 0.05: 0.1, 0.8, 0.1, 1.0, 0.5, 0.5


def test_contextuality_has_one_panel_per_measure():
    rows = [{"layer": l, "metric": m, "raw": 0.5 + l / 10, "baseline": 0.2, "adjusted": 0.3 + l / 10}
            for m in ("self_similarity", "intra_sentence_similarity", "mev") for l in range(3)]
    fig = figures.contextuality_multiples(pd.DataFrame(rows))
    assert sorted(a.text for a in fig.layout.annotations) == sorted(figures.MEASURE_NAMES.values())
    assert {t.name for t in fig.data} == {"raw", "baseline", "adjusted"}
    assert len(fig.data) == 9 and {t.xaxis for t in fig.data} == {"x", "x2", "x3"}
    both = pd.concat([pd.DataFrame(rows).assign(run="A"), pd.DataFrame(rows).assign(run=MARKUP)])
    fig = figures.contextuality_multiples(both, run_column="run")
    assert {t.legendgroup.split(",")[0] for t in fig.data} == {"A", "&lt;b&gt;x&lt;/b&gt;"}


def test_cluster_legend_names_clusters_not_numbers():
    part = pd.DataFrame({"x": [0.0, 1.0, 2.0], "y": [0.0, 1.0, 2.0], "cluster": [0, 1, 1],
                         "context": ["a <b>bank</b> loan", "river bank", "bank of"]})
    fig = figures.cluster_figure(part, MARKUP, layer=6)
    assert [t.name for t in fig.data] == ["cluster 1 (1 uses)", "cluster 2 (2 uses)"]
    assert "not gold senses" in fig.layout.legend.title.text
    assert list(fig.data[0].hovertext) == ["a &lt;b&gt;bank&lt;/b&gt; loan"]
    assert "&lt;b&gt;x&lt;/b&gt;" in fig.layout.title.text and "layer 6" in fig.layout.title.text


def test_emergence_figures_follow_the_steps():
    counts = pd.DataFrame({"step": [0, 0, 100, 100], "type": ["broad", "other", "positional", "broad"],
                           "count": [3, 1, 2, 2]})
    fig = figures.type_counts_figure(counts)
    assert [t.name for t in fig.data] == ["positional", "broad", "other"]
    assert list(fig.data[0].y) == [0, 2] and list(fig.data[1].y) == [3, 2]
    scores = pd.DataFrame({"step": [0, 0, 100, 100, 100], "task": ["pos"] * 5, "layer": [0, 1, 0, 1, 1],
                           "seed": [0, 0, 0, 0, 1], "value": [0.2, 0.3, 0.5, 0.6, 0.8]})
    fig = figures.probe_by_step(scores)
    late = [t for t in fig.data if t.name == "step 100"][0]
    assert list(late.y) == pytest.approx([0.5, 0.7])  # mean over seeds
