"""The dashboard's figures and data shaping on planted tables, without Streamlit: categorical head
map, a head's offset histogram and relations, small multiples per measure, readable cluster legends,
the curves and bars of the other pages, and words shown as typed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bertology.apps import figures, tables
from bertology.apps.pages import combinations, compare, embeddings, heads, pretraining, probing, pruning
from bertology.results import ResultError

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
    types = pd.DataFrame(
        {
            "layer": [1, 1, 1, 2, 2, 2],  # a head_types table: layers and heads numbered from 1
            "head": [1, 2, 3, 1, 2, 3],
            "type": ["positional", "syntactic", "other", "positional", "odd<i>type</i>", "broad"],
            "positional_share": [0.95, 0.1, 0.2, 0.93, 0.0, 0.1],
        }
    )
    fig = figures.head_map(types, "map", selected=(2, 3))
    kinds = [t for t in fig.data if t.name != "selected head"]
    # fixed order of known types, unknown ones after; each legend entry counts its heads
    assert [t.name for t in kinds] == [
        "positional (2)",
        "syntactic (1)",
        "broad (1)",
        "other (1)",
        "odd&lt;i&gt;type&lt;/i&gt; (1)",
    ]
    assert all(t.type == "scatter" for t in fig.data)  # no continuous colour bar
    assert kinds[0].marker.color == figures.TYPE_COLOURS["positional"]
    assert kinds[0].customdata.tolist() == [[1, 1], [2, 1]]
    assert list(kinds[0].x) == [1, 1] and list(kinds[0].y) == [1, 2]
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 3] and list(fig.layout.yaxis.tickvals) == [1, 2]
    selected = [t for t in fig.data if t.name == "selected head"][0]
    assert (list(selected.x), list(selected.y)) == ([3], [2])
    assert "<i>type" not in " ".join(strings(fig.to_dict()))


def test_offset_histogram_reads_one_heads_shares_in_offset_order():
    stats = pd.DataFrame(
        {
            "layer": [1, 1, 1, 1, 1, 0, 1],
            "head": [2, 2, 2, 2, 2, 2, 2],
            "statistic": [
                "token_offset_2",
                "token_offset_other",
                "token_offset_-1",
                "argmax_offset_-1",
                "entropy",
                "token_offset_-1",
                "token_offset_-10",
            ],
            "value": [0.2, 0.1, 0.6, 0.5, 0.9, 0.99, 0.1],
        }
    )
    hist = heads.offset_histogram(stats, 1, 2)
    assert hist.to_dict("records") == [
        {"level": "token", "offset": "-10", "share": 0.1},
        {"level": "token", "offset": "-1", "share": 0.6},
        {"level": "token", "offset": "2", "share": 0.2},
        {"level": "token", "offset": "other", "share": 0.1},
        {"level": "word", "offset": "-1", "share": 0.5},
    ]
    fig = heads.offset_figure(hist, 1, 2)
    assert list(fig.layout.xaxis.categoryarray) == ["-10", "-1", "2", "other"]
    assert [t.name for t in fig.data] == ["token level", "word level"]
    assert max(len(line) for line in fig.layout.title.text.split("<br>")) <= figures.HALF_COLUMN_CHARS


def test_wrap_breaks_at_spaces_within_the_width():
    text = "layer 11, head 11: where its attention argmax falls (relative offset)"
    lines = figures.wrap(text, 30).split("<br>")
    assert " ".join(lines) == text and max(map(len, lines)) <= 30 and len(lines) == 3
    assert figures.wrap("internationalisation x", 5) == "internationalisation<br>x"  # a long word keeps its line


def test_relation_table_ranks_by_gain_over_the_offset_baseline():
    dep = pd.DataFrame(
        {
            "layer": [0, 0, 0, 0, 0, 1],
            "head": [1, 1, 1, 1, 1, 1],
            "relation": ["nsubj", "amod", "dobj", "all", "det", "nsubj"],
            "direction": ["dependent_attends_to_head"] * 6,
            "n": [50, 5, 40, 200, 30, 50],
            "accuracy": [0.8, 0.99, 0.5, 0.4, 0.9, 0.1],
            "baseline_offset": [1, -1, 2, 1, -1, 1],
            "baseline_accuracy": [0.5, 0.1, 0.4, 0.3, 0.85, 0.5],
        }
    )
    dep["gain"] = dep["accuracy"] - dep["baseline_accuracy"]
    rel = heads.relation_table(dep, 0, 1, min_count=20)
    # amod is below min_count, "all" is the summary row, layer 1 is another head
    assert list(rel["relation"]) == ["nsubj", "dobj", "det"]
    assert rel["gain"].tolist() == pytest.approx([0.3, 0.1, 0.05])
    fig = heads.relation_figure(rel, 0, 1)
    assert list(fig.data[0].x) == [0.8, 0.5, 0.9] and list(fig.data[1].x) == [0.5, 0.4, 0.85]
    assert fig.data[0].y[0] == "nsubj<br>dependent → head" and fig.layout.yaxis.automargin  # two lines, never cut
    assert max(len(line) for line in fig.layout.xaxis.title.text.split("<br>")) <= 50  # fits half a page
    # the title too, in half the page's width (checked in Chromium at 420 px: nothing spills)
    assert max(len(line) for line in fig.layout.title.text.split("<br>")) <= figures.HALF_COLUMN_CHARS


def test_attention_figures_show_markup_words_as_typed():
    words = ["the", MARKUP, "dog"]
    matrix = np.array([[0.1, 0.8, 0.1], [0.0, 0.0, 1.0], [0.5, 0.5, 0.0]])
    sentence = {"words": words, "attention": np.stack([np.stack([matrix, matrix.T])])}  # [1 layer, 2 heads, 3, 3]
    for fig in (
        figures.attention_heatmap(words, matrix, MARKUP),
        figures.head_view(words, matrix, "view"),
        heads.attention_small_multiples([sentence], 1, 2),
    ):
        texts = strings(fig.to_dict())
        assert not [t for t in texts if MARKUP in t], "a word reached Plotly as markup"
        assert any("&lt;b&gt;x&lt;/b&gt;" in t for t in texts)
    heat = heads.attention_small_multiples([sentence], 1, 2).data[0]
    assert np.asarray(heat.z).tolist() == matrix.T.tolist()  # head 2 of layer 1: array [0][1]
    assert list(heat.x) == ["0: the", "1: &lt;b&gt;x&lt;/b&gt;", "2: dog"]
    view = figures.head_view(words, matrix, "view", threshold=0.05)
    lines = [t for t in view.data if t.mode == "lines"]
    assert len(lines) == 6  # weights above 0.05: 0.1, 0.8, 0.1, 1.0, 0.5, 0.5


def test_contextuality_has_one_panel_per_measure():
    rows = [
        {"layer": l, "metric": m, "raw": 0.5 + l / 10, "baseline": 0.2, "adjusted": 0.3 + l / 10}
        for m in ("self_similarity", "intra_sentence_similarity", "mev")
        for l in range(3)
    ]
    fig = embeddings.contextuality_multiples(pd.DataFrame(rows))
    assert sorted(a.text for a in fig.layout.annotations) == sorted(embeddings.MEASURE_NAMES.values())
    assert {t.name for t in fig.data} == {"raw", "baseline", "adjusted"}
    assert len(fig.data) == 9 and {t.xaxis for t in fig.data} == {"x", "x2", "x3"}
    both = pd.concat([pd.DataFrame(rows).assign(run="A"), pd.DataFrame(rows).assign(run=MARKUP)])
    fig = embeddings.contextuality_multiples(both, run_column="run")
    assert {t.legendgroup.split(",")[0] for t in fig.data} == {"A", "&lt;b&gt;x&lt;/b&gt;"}


def test_cluster_legend_names_clusters_not_numbers():
    part = pd.DataFrame(
        {
            "x": [0.0, 1.0, 2.0],
            "y": [0.0, 1.0, 2.0],
            "cluster": [0, 1, 1],
            "context": ["a <b>bank</b> loan", "river bank", "bank of"],
        }
    )
    fig = embeddings.cluster_figure(part, MARKUP, layer=6)
    assert [t.name for t in fig.data] == ["cluster 1 (1 uses)", "cluster 2 (2 uses)"]
    assert "not gold senses" in fig.layout.legend.title.text
    assert list(fig.data[0].hovertext) == ["a &lt;b&gt;bank&lt;/b&gt; loan"]
    assert "&lt;b&gt;x&lt;/b&gt;" in fig.layout.title.text and "layer 6" in fig.layout.title.text
    assert "only 3 uses: too few" in fig.layout.title.text  # a map of 3 points is not drawn as if it had clusters
    many = pd.concat([part] * 10, ignore_index=True)
    assert "too few" not in embeddings.cluster_figure(many, "bank", layer=6).layout.title.text


def test_emergence_figures_follow_the_steps():
    counts = pd.DataFrame(
        {"step": [0, 0, 100, 100], "type": ["broad", "other", "positional", "broad"], "count": [3, 1, 2, 2]}
    )
    fig = pretraining.type_counts_figure(counts)
    assert [t.name for t in fig.data] == ["positional", "broad", "other"]
    assert list(fig.data[0].y) == [0, 2] and list(fig.data[1].y) == [3, 2]
    scores = pd.DataFrame(
        {
            "step": [0, 0, 100, 100, 100],
            "task": ["pos"] * 5,
            "layer": [0, 1, 0, 1, 1],
            "seed": [0, 0, 0, 0, 1],
            "value": [0.2, 0.3, 0.5, 0.6, 0.8],
        }
    )
    fig = pretraining.probe_by_step(scores)
    late = [t for t in fig.data if t.name == "step 100"][0]
    assert list(late.y) == pytest.approx([0.5, 0.7])  # mean over seeds


def test_line_with_band_draws_mean_and_interval_per_group():
    means = pd.DataFrame(
        {
            "task": ["pos", "pos", MARKUP, MARKUP],
            "layer": [1, 0, 0, 1],
            "mean": [0.6, 0.5, 0.2, 0.3],
            "ci95": [0.1, 0.0, 0.05, 0.05],
        }
    )
    fig = figures.line_with_band(means, "layer", "task", "title <i>", "accuracy")
    lines = {t.name: list(t.y) for t in fig.data if t.mode == "lines+markers"}
    assert lines == {"pos": [0.5, 0.6], "&lt;b&gt;x&lt;/b&gt;": [0.2, 0.3]}
    band = [t for t in fig.data if t.fill == "toself"][1]  # pos, sorted by layer: upper edge then lower edge back
    assert list(band.y) == pytest.approx([0.5, 0.7, 0.5, 0.5])
    assert fig.layout.title.text == "title &lt;i&gt;"


def test_probing_shaping_keeps_held_out_non_control_rows_of_one_input():
    scores = pd.DataFrame(
        {
            "task": "pos",
            "layer": [0, 0, 0, 0, 1, 1],
            "seed": [0, 1, 0, 0, 0, 1],
            "metric": ["accuracy"] * 5 + ["macro_f1"],
            "mode": ["per_layer"] * 4 + ["mix", "per_layer"],
            "split": ["test", "test", "dev", "test", "test", "test"],
            "control": [False, False, False, True, False, False],
            "value": [0.5, 0.7, 0.9, 0.1, 0.8, 0.3],
        }
    )
    part = probing.probe_part(scores, "accuracy", "per_layer")
    assert part["value"].tolist() == [0.5, 0.7]
    means = tables.layer_means(part)
    assert means[["task", "layer", "mean", "n"]].to_dict("records") == [
        {"task": "pos", "layer": 0, "mean": 0.6, "n": 2}
    ]
    assert probing.options_and_default(scores["metric"], "accuracy") == (["accuracy", "macro_f1"], 0)
    assert probing.options_and_default(scores["mode"], "absent") == (["mix", "per_layer"], 0)
    assert compare.accuracy_per_layer(scores)["value"].tolist() == [0.5, 0.7, 0.9, 0.1]
    both = tables.stack_runs([("A", means), (MARKUP, means)])
    fig = probing.layer_curves_two_runs(both, "accuracy")
    assert {t.name for t in fig.data} == {"A", "&lt;b&gt;x&lt;/b&gt;"} and list(fig.data[0].y) == [0.6]


def test_bars_of_mix_weights_and_combinations():
    weights = pd.DataFrame(
        {"task": [MARKUP] * 4, "layer": [0, 1, 0, 1], "seed": [0, 0, 1, 1], "weight": [0.2, 0.8, 0.4, 0.6]}
    )
    mean = probing.mean_mix_weights(weights)
    fig = probing.mix_weights_figure(mean)
    assert list(fig.data[0].y) == pytest.approx([0.3, 0.7]) and fig.data[0].name == "&lt;b&gt;x&lt;/b&gt;"
    combos = pd.DataFrame(
        {
            "combination": ["last", "last", "sum4", "sum4", "last"],
            "task": "pos",
            "metric": ["accuracy"] * 4 + ["macro_f1"],
            "seed": [0, 1, 0, 1, 0],
            "value": [0.69, 0.71, 0.9, 0.9, 0.1],
        }
    )
    means = combinations.combination_means(combos, "accuracy")
    assert means.set_index("combination")["mean"].to_dict() == pytest.approx({"last": 0.7, "sum4": 0.9})
    assert means["combination"].tolist() == ["sum4", "last"]  # best first
    fig = combinations.combinations_figure(means, MARKUP)
    assert list(fig.data[0].x) == pytest.approx([0.9, 0.7]) and fig.layout.title.text.startswith("&lt;b&gt;")
    # sorted by score, not by name: Plotly draws categories bottom-up, so the best is last = on top
    assert list(fig.layout.yaxis.categoryarray) == ["last", "sum4"] and fig.layout.yaxis.autorange is None
    low, high = fig.layout.xaxis.range  # the axis spans the scores and their intervals, not 0..1
    assert 0.3 < low < 0.7 - 0.127 and 0.9 < high <= 1 + figures.SCORE_MARGIN and "not 0" in fig.layout.xaxis.title.text


def test_pruning_shaping_and_importance_grid():
    curves = pd.DataFrame(
        {
            "method": "random",
            "seed": [0, 1, 0, 1],
            "share_removed": [0.0, 0.0, 0.5, 0.5],
            "value": [0.8, 0.8, 0.4, 0.6],
            "metric": "accuracy",
        }
    )
    means = pruning.pruning_means(curves)
    assert means["mean"].tolist() == pytest.approx([0.8, 0.5]) and pruning.pruning_metric(curves) == "accuracy"
    assert pruning.pruning_metric(curves.drop(columns="metric")) == "metric"
    importance = pd.DataFrame(
        {"layer": [0, 0, 1, 1, 0], "head": [0, 1, 0, 1, 0], "importance": [0.1, 0.2, 0.3, 0.4, 0.3]}
    )
    grid = pruning.importance_grid(importance)
    np.testing.assert_allclose(grid.to_numpy(), [[0.2, 0.2], [0.3, 0.4]])
    fig = pruning.importance_figure(grid)
    np.testing.assert_allclose(np.asarray(fig.data[0].z), [[0.2, 0.2], [0.3, 0.4]])


def test_head_shaping_checks_and_picks():
    types = pd.DataFrame(
        {
            "layer": ["1", "0", "0"],
            "head": [0, 1, 0],
            "type": ["syntactic", "positional", "broad"],
            "syntactic_gain": [0.3, 0.0, 0.0],
            "positional_share": [0.1, 0.9, 0.2],
        }
    )
    checked = heads.checked_head_types(types)
    assert checked["layer"].tolist() == [1, 0, 0]
    assert heads.head_keys(checked) == ["0-0", "0-1", "1-0"]
    assert heads.type_by_head(checked).to_dict() == {"1-0": "syntactic", "0-1": "positional", "0-0": "broad"}
    assert heads.default_head(checked) == "1-0"
    assert heads.default_head(checked[checked["type"] != "syntactic"]) == "0-1"
    with pytest.raises(ResultError, match="repeated head"):
        heads.checked_head_types(pd.concat([types, types]))
    counts = heads.type_counts_side_by_side(checked, checked.assign(type="broad"))
    assert counts.set_index("type").to_dict("index") == {
        "syntactic": {"A": 1, "B": 0},
        "positional": {"A": 1, "B": 0},
        "broad": {"A": 1, "B": 3},
    }
    assert heads.relation_min_count({"min_count": "5"}) == 5
    assert heads.relation_min_count({"min_count": "many"}) == heads.relation_min_count(None) == 20


def test_pretraining_shaping_and_figures():
    metrics = pd.DataFrame(
        {
            "step": [0, 0, 0, 10, 10],
            "metric": ["loss", "eval_loss", "lr", "loss", "perplexity"],
            "value": [7.0, 7.5, 0.1, 5.0, 90.0],
        }
    )
    fig = pretraining.loss_figure(pretraining.loss_rows(metrics))
    assert {t.name: list(t.y) for t in fig.data} == {"loss": [7.0, 5.0], "eval_loss": [7.5]}
    assert list(pretraining.perplexity_figure(pretraining.perplexity_rows(metrics)).data[0].y) == [90.0]
    assert pretraining.checkpoint_steps(metrics) == [0, 10]
    assert pretraining.start_step([0, 10, 20], "10") == 10 and pretraining.start_step([0, 10], "7") == 10
    assert pretraining.start_step([0, 10], None) == 10 and pretraining.start_step([0, 10], "x") == 10
    probes = pd.DataFrame(
        {
            "step": [0, 0, 0, 0],
            "task": [MARKUP] * 4,
            "layer": [0, 0, 1, 1],
            "seed": [0, 1, 0, 1],
            "value": [0.2, 0.4, 0.5, 0.5],
        }
    )
    best = pretraining.best_layer_by_step(probes)
    assert best["value"].tolist() == [0.5]
    assert pretraining.best_layer_figure(best).data[0].name == "&lt;b&gt;x&lt;/b&gt;"
    cloze = pd.DataFrame(
        {
            "step": [0, 0, 5],
            "text": ["a ___ b"] * 3,
            "masked": ["x"] * 3,
            "rank": [1, 2, 1],
            "prediction": ["y", "x", "x"],
            "probability": [0.5, 0.125, 0.9],
        }
    )
    assert pretraining.cloze_guesses(cloze, 0).to_dict("records") == [
        {"sentence": "a ___ b", "masked word": "x", "top predictions": "y (50.0%), x (12.5%)"}
    ]
    accuracy = pd.DataFrame({"step": [0, 5], "top1": [0.0, 0.5], "top5": [0.25, 1.0]})
    assert pretraining.cloze_accuracy_line(accuracy) == "top-1 / top-5 accuracy per step: 0: 0% / 25%, 5: 50% / 100%"


def test_probing_bands_come_from_the_runs_own_intervals_and_small_samples_are_named():
    from bertology.apps import tables

    intervals = pd.DataFrame(
        {
            "task": ["pos", "pos", "entities", "pos"],
            "mode": ["per_layer"] * 3 + ["mix"],
            "control": [False, False, False, False],
            "layer": [0, 1, 0, -1],
            "metric": ["accuracy"] * 4,
            "dev_score": [0.5, 0.7, 0.4, 0.8],
            "score": [0.52, 0.71, 0.42, 0.8],
            "low": [0.48, 0.67, 0.30, 0.77],
            "high": [0.56, 0.75, 0.55, 0.83],
            "n_seeds": [2, 2, 2, 2],
            "n_test": [800, 800, 62, 800],
            "small_sample": [False, False, True, False],
        }
    )
    bands = probing.interval_bands(intervals, "accuracy", "per_layer")
    assert list(bands["mean"]) == [0.52, 0.71, 0.42] and list(bands["low"]) == [0.48, 0.67, 0.30]
    assert tables.small_sample_tasks(intervals) == ["entities"]
    fig = figures.line_with_band(bands, "layer", "task", "t", "accuracy")
    band = next(t for t in fig.data if t.fill == "toself" and t.x[0] == 0 and len(t.x) == 4)  # pos: layers 0, 1
    assert list(band.y) == [0.56, 0.75, 0.67, 0.48]  # high along, low back: asymmetric bounds kept


def test_probing_metric_choices_leave_out_interval_rows():
    scores = pd.DataFrame(
        {"metric": ["accuracy", "accuracy", "accuracy_low", "n_test"], "split": ["test", "dev", "interval", "interval"]}
    )
    assert probing.probe_metrics(scores) == ["accuracy"]


def test_best_layer_per_checkpoint_is_the_dev_chosen_one_when_the_run_has_it():
    probes = pd.DataFrame({"step": [0, 0], "task": ["pos", "pos"], "layer": [0, 1], "value": [0.6, 0.9]})
    assert list(pretraining.best_layer_by_step(probes)["value"]) == [0.9]  # old runs: max over test
    best = pd.DataFrame({"step": [0], "task": ["pos"], "best_layer": [0], "best_layer_score": [0.6]})
    assert list(pretraining.best_layer_by_step(probes, best)["value"]) == [0.6]


def test_best_layer_difference_pairs_two_runs_on_their_shared_sentences():
    """Run A gets every test item right at its best layer, run B every other sentence: A − B = the
    share B misses, with a paired interval; a sentence only one run scored is counted as unpaired."""
    import pandas as pd

    from bertology.apps.pages.probing import best_layer_difference

    def sentences(correct_of, best, extra=()):
        rows = [
            {
                "task": "pos",
                "mode": "per_layer",
                "control": False,
                "layer": layer,
                "sentence": s,
                "metric": "accuracy",
                "numerator": correct_of(s) if layer == best else 0.0,
                "denominator": 5.0,
            }
            for layer in (0, 1)
            for s in [*range(200), *extra]
        ]
        return pd.DataFrame(rows)

    summary_a = pd.DataFrame({"task": ["pos"], "best_layer": [1]})
    summary_b = pd.DataFrame({"task": ["pos"], "best_layer": [0]})
    a = sentences(lambda s: 5.0, best=1)
    b = sentences(lambda s: 5.0 if s % 2 else 0.0, best=0, extra=(999,))
    row = best_layer_difference(summary_a, a, summary_b, b).iloc[0]
    assert (row["layer A"], row["layer B"]) == (1, 0)
    assert row["A − B"] == pytest.approx(0.5, abs=0.01) and row["low"] < 0.5 < row["high"] and row["p"] < 0.01
    assert row["shared sentences"] == 200 and row["unpaired sentences"] == 1 and not row["small sample"]


def test_a_word_has_one_number_as_a_row_and_as_a_column():
    """The word-level map's columns start with the first special token the rows lack: a word is
    numbered by its column position in both (issue 54: rows said "1: keys", columns "2: keys")."""
    rows, columns = ["the", "keys"], ["[CLS]", "the", "keys", "[SEP]"]
    fig = figures.attention_heatmap(rows, np.full((2, 4), 0.25), "h", columns=columns, first_row=1)
    assert list(fig.data[0].y) == ["1: the", "2: keys"] and list(fig.data[0].x)[1:3] == ["1: the", "2: keys"]
    assert list(figures.attention_heatmap(rows, np.eye(2), "h").data[0].y) == ["0: the", "1: keys"]  # one list


def test_the_layer_numbering_is_stated_once():
    """One numbering (issue 54, item 2): layer 0 = the embeddings, transformer layers and heads from 1."""
    from bertology.numbering import STATEMENT

    assert "layer 0 is the embeddings" in STATEMENT and "1..L" in STATEMENT and "1..H" in STATEMENT
    assert not hasattr(tables, "LAYER_CONVENTION")  # the two numberings it stated are gone


def test_cka_is_drawn_on_its_whole_range():
    """CKA with the pretrained layer lies in [0, 1]: an axis zoomed to 0.97-1.0, without interval,
    turns a small change into a cliff (issue 54, item 3)."""
    from bertology.apps.pages import finetuning

    change = pd.DataFrame(
        {
            "task": "sst2",
            "mode": "full",
            "layer": [0, 1, 2],
            "cka": [1.0, 0.99, 0.97],
            "weight_attention": [0.0, 0.1, 0.2],
            "attention_js": [None, 0.01, 0.02],
        }
    )
    fig = finetuning.finetune_change_figure(change, "sst2")
    assert list(fig.layout.yaxis.range) == [0, 1.02]


# --------------------------------------------------------------------------- issue 54 item 3: score axes


def band_rows(means: list[float], half: float = 0.005) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "layer": range(len(means)),
            "task": "pos",
            "mean": means,
            "low": [m - half for m in means],
            "high": [min(m + half, 1.0) for m in means],
        }
    )


def test_a_score_axis_spans_at_least_the_minimum_and_stays_in_0_1():
    """0.97 against 1.0 drawn on 0.97-1.0 looks like a cliff: every score axis is at least
    SCORE_MIN_SPAN wide, inside [0, 1] give or take the margin; values outside [0, 1] keep Plotly's range."""
    fig = figures.line_with_band(band_rows([0.97, 0.99, 1.0]), "layer", "task", "t", "accuracy")
    low, high = fig.layout.yaxis.range
    assert high - low >= figures.SCORE_MIN_SPAN and high == pytest.approx(1 + figures.SCORE_MARGIN)
    assert low <= 0.965 - 0.1  # the band's lowest end well inside, not on the axis's floor
    assert figures.score_range([0.0, 0.01]) == pytest.approx([-figures.SCORE_MARGIN, 0.25 + figures.SCORE_MARGIN])
    wide = figures.score_range([0.2, 0.8])  # spread scores: padded, not stretched
    assert wide == pytest.approx([0.14 - figures.SCORE_MARGIN, 0.86 + figures.SCORE_MARGIN])
    loss = pd.DataFrame({"layer": [0, 1], "task": "mlm", "mean": [3.2, 3.1], "ci95": [0.1, 0.1]})
    assert figures.line_with_band(loss, "layer", "task", "t", "loss").layout.yaxis.range is None
    assert figures.score_range([]) is None and figures.score_range([0.5, -0.2]) is None


def test_baselines_and_error_bars_are_inside_the_score_axis():
    """A LINEAR baseline (a horizontal line) and a random-init curve added after the bands, and error
    bars of a two-run figure, all lie inside the y range."""
    from bertology.apps.pages import structural

    intervals = pd.DataFrame(
        {
            "encoder": "trained",
            "probe": "distance",
            "layer": [0, 1, 0, 1],
            "metric": ["uuas", "uuas", "dspr", "dspr"],
            "score": [0.80, 0.82, 0.78, 0.81],
            "low": [0.79, 0.81, 0.77, 0.80],
            "high": [0.81, 0.83, 0.79, 0.82],
        }
    )
    baselines = pd.DataFrame(
        {"encoder": "linear", "probe": "distance", "metric": ["uuas", "dspr"], "score": [0.3, 0.35]}
    )
    low, high = structural.layer_figure(intervals, baselines, "distance").layout.yaxis.range
    assert low < 0.3 and high > 0.83 and high - low >= figures.SCORE_MIN_SPAN
    fig = figures.line_with_band(band_rows([0.9, 0.92]), "layer", "task", "t", "accuracy")
    probing.add_baseline_lines(fig, pd.DataFrame({"layer": [0, 1], "task": "pos", "mean": [0.4, 0.45]}), "task", "r")
    assert figures.anchor_score_axis(fig).layout.yaxis.range[0] < 0.4
    both = pd.DataFrame(
        {
            "run": ["a", "a", "b", "b"],
            "task": "pos",
            "layer": [0, 1, 0, 1],
            "mean": [0.9, 0.95, 0.91, 0.96],
            "ci95": 0.2,
        }
    )
    fig = probing.layer_curves_two_runs(both, "accuracy")
    assert all(t.error_y.array is not None for t in fig.data)  # the intervals are drawn
    low, high = fig.layout.yaxis.range
    assert low <= 0.7 and high >= 1.0  # the error bars' ends (0.7 .. 1.16, cut at 1) inside
    selectivity = pd.DataFrame({"task": "pos", "layer": [0, 1], "selectivity": [0.2, 0.21]})
    fig = probing.per_layer_lines(selectivity, "selectivity", "t", "s", zero_line=True)
    assert fig.layout.yaxis.range[0] <= 0  # the zero line is a baseline: inside


def test_panels_of_different_measures_get_their_own_score_axis():
    """Contextuality's panels (one per measure): a panel of scores in [0, 1] is anchored on its own
    (0.97-0.99 on an axis at least SCORE_MIN_SPAN wide); a panel with a negative adjusted value keeps
    Plotly's range."""
    rows = [
        {"layer": l, "metric": m, "raw": raw + l / 100, "baseline": base, "adjusted": raw + l / 100 - base}
        for m, raw, base in (("self_similarity", 0.97, 0.0), ("mev", 0.1, 0.15))
        for l in range(3)
    ]
    fig = embeddings.contextuality_multiples(pd.DataFrame(rows))
    ranges = {a: fig.layout[a].range for a in ("yaxis", "yaxis2")}
    anchored = [r for r in ranges.values() if r is not None]
    assert len(anchored) == 1 and anchored[0][1] - anchored[0][0] >= figures.SCORE_MIN_SPAN  # self-similarity
    assert anchored[0][0] <= 0.0  # its baseline 0.0 is inside
