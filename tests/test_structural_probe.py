"""The structural probe (Hewitt & Manning 2019): tree distances, MST / UUAS / Spearman / root
accuracy on hand-made examples, planted word vectors whose squared distances are tree distances
(recovered by a probe of the planted rank, not by a rank-1 probe), intervals, bad input, the
study through ``bertology structural`` on a tiny model, and the dashboard page's figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr
from typer.testing import CliRunner

from bertology.errors import ConfigError, CorpusError
from bertology.probes.probing.structural import (
    StructuralProbes,
    StructuralSettings,
    TreeDistances,
    aggregate,
    corpus_trees,
    fit_structural,
    iter_predictions,
    linear_baseline,
    predict_structure,
    probe_structure,
    sentence_scores,
    split_sentences,
    structural_intervals,
    structural_summary,
    trees_from_heads,
)
from bertology.probes.probing.structural_metrics import (
    depth_spearman,
    distance_spearman,
    gold_edges,
    length_average,
    length_average_bootstrap,
    mst_edges,
    parent_indices,
    root_correct,
    spearman_rows,
    tree_depths,
    tree_distances,
    uuas_counts,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# "the dog barks loudly ." : the -> dog -> barks (root) <- loudly, "." -> barks
HEADS = [2, 3, 0, 3, 3]
UPOS = ["DET", "NOUN", "VERB", "ADV", "PUNCT"]


# --------------------------------------------------------------------------- trees and metrics by hand


def test_tree_distances_and_depths_by_hand():
    d = tree_distances(HEADS)
    expected = np.array(
        [
            [0, 1, 2, 3, 3],
            [1, 0, 1, 2, 2],
            [2, 1, 0, 1, 1],
            [3, 2, 1, 0, 2],
            [3, 2, 1, 2, 0],
        ]
    )
    np.testing.assert_array_equal(d, expected)
    np.testing.assert_array_equal(tree_depths(HEADS), [2, 1, 0, 1, 1])
    assert gold_edges(HEADS) == {(0, 1), (1, 2), (2, 3), (2, 4)}
    assert gold_edges(HEADS, np.array([True, True, True, True, False])) == {(0, 1), (1, 2), (2, 3)}


@pytest.mark.parametrize(
    "heads, message",
    [
        ([0, 0, 1], "exactly one root"),
        ([2, 3, 1], "exactly one root"),  # a cycle and no root
        ([2, 1, 0], "cycle"),
        ([1, 0], "its own head"),
        ([4, 0, 1], "heads must be in 0..3"),
    ],
)
def test_malformed_trees_are_refused_naming_the_sentence(heads, message):
    with pytest.raises(CorpusError, match=message) as info:
        parent_indices(heads, "sentence s-7")
    assert "sentence s-7" in str(info.value)


def test_mst_of_points_on_a_line_is_the_chain_and_punctuation_is_left_out():
    x = np.array([0.0, 1.0, 3.0, 6.0])
    d = (x[:, None] - x[None, :]) ** 2
    assert mst_edges(d) == {(0, 1), (1, 2), (2, 3)}
    # word 1 left out: the tree over 0, 2, 3 joins 0-2 and 2-3
    assert mst_edges(d, np.array([True, False, True, True])) == {(0, 2), (2, 3)}
    # zero distances (identical vectors) are edges too, not "no edge"
    assert len(mst_edges(np.zeros((3, 3)))) == 2
    with pytest.raises(ValueError, match="square"):
        mst_edges(np.zeros((2, 3)))


def test_uuas_counts_by_hand():
    # predicted: the chain 0-1-2-3 (punctuation, word 4, left out): gold edges among words 0..3 are
    # 0-1, 1-2, 2-3 and the chain holds all three
    chain = np.abs(np.arange(5)[:, None] - np.arange(5)[None, :]).astype(float)
    punct = np.array([t == "PUNCT" for t in UPOS])
    assert uuas_counts(chain, HEADS, punct) == (3, 3)
    # without the punctuation filter the chain's edge 3-4 is wrong and gold's 2-4 is missed
    assert uuas_counts(chain, HEADS) == (3, 4)
    # the gold distances themselves give every edge
    assert uuas_counts(tree_distances(HEADS).astype(float), HEADS) == (4, 4)


def test_spearman_rows_match_scipy_and_handle_ties_and_constants():
    rng = np.random.default_rng(0)
    p, g = rng.normal(size=(4, 7)), rng.integers(0, 4, size=(4, 7)).astype(float)  # ties in gold
    expected = [spearmanr(a, b).statistic for a, b in zip(p, g)]
    np.testing.assert_allclose(spearman_rows(p, g), expected, rtol=1e-12)
    assert math.isnan(spearman_rows(np.ones((1, 4)), np.arange(4.0)[None])[0])
    assert spearman_rows(np.arange(5.0)[None], -np.arange(5.0)[None])[0] == pytest.approx(-1.0)


def test_distance_spearman_leaves_the_word_itself_out():
    gold = tree_distances(HEADS).astype(float)
    assert distance_spearman(gold, gold) == pytest.approx(1.0)
    pred = np.abs(np.arange(5)[:, None] - np.arange(5)[None, :]).astype(float)
    off = ~np.eye(5, dtype=bool)
    by_hand = np.mean([spearmanr(pred[i][off[i]], gold[i][off[i]]).statistic for i in range(5)])
    assert distance_spearman(pred, gold) == pytest.approx(by_hand)
    assert math.isnan(distance_spearman(np.zeros((2, 2)), np.zeros((2, 2))))  # fewer than 3 words


def test_root_accuracy_skips_punctuation():
    punct = np.array([t == "PUNCT" for t in UPOS])
    depths = np.array([2.0, 1.0, 0.5, 1.0, 0.1])  # punctuation shallowest, then the root
    assert root_correct(depths, HEADS, punct) == 1
    assert root_correct(depths, HEADS) == 0  # counting punctuation, "." would be taken as the root
    assert root_correct(np.array([0.0, 1, 2, 3, 4]), HEADS, punct) == 0
    assert depth_spearman(np.array([2.0, 1, 0, 1, 1]), tree_depths(HEADS)) == pytest.approx(1.0)


def test_length_average_is_over_lengths_5_to_50():
    values = [1.0, 0.0, 0.5, 0.9, float("nan")]
    lengths = [5, 5, 6, 60, 6]
    # lengths 5 (mean 0.5) and 6 (0.5; NaN skipped) -> 0.5; length 60 is outside the range
    assert length_average(values, lengths) == pytest.approx(0.5)
    assert math.isnan(length_average([0.3], [4]))
    estimate, low, high = length_average_bootstrap(values, lengths, n_resamples=300)
    assert estimate == pytest.approx(0.5) and low <= estimate <= high
    assert math.isnan(length_average_bootstrap([0.3], [5])[1])


def test_linear_baseline_scores_a_chain_perfectly_and_a_star_badly():
    chain = [[0] + list(range(1, n)) for n in (6, 7, 8)]  # word k's head is word k-1: the chain itself
    out = linear_baseline(trees_from_heads(chain), [0, 1, 2], n_resamples=100).set_index("metric")["score"]
    assert out["uuas"] == 1.0 and out["root_acc"] == 1.0
    assert out["dspr"] == pytest.approx(1.0) and out["nspr"] == pytest.approx(1.0)
    star = [[0] + [1] * (n - 1) for n in (6, 7)]  # every word hangs from the first
    out = linear_baseline(trees_from_heads(star), [0, 1], n_resamples=100).set_index("metric")["score"]
    assert out["uuas"] == pytest.approx((1 + 1) / (5 + 6))  # only the edge 0-1 is adjacent
    assert out["root_acc"] == 1.0


# --------------------------------------------------------------------------- planted vectors

PLANTED_RANK = 8  # sentences of at most 8 words: their trees embed exactly in 8 dimensions


def _random_heads(n: int, rng: np.random.Generator) -> list[int]:
    order = rng.permutation(n)
    heads = [0] * n
    for k in range(1, n):
        heads[order[k]] = int(order[rng.integers(0, k)]) + 1
    return heads


def planted_vectors(n_sentences: int = 200, dim: int = 24, noise: float = 0.01, seed: int = 0):
    """Word vectors whose squared distances are exactly tree distances, hidden in ``dim`` dims.

    Word i's planted part is the sum of one unit vector per edge on its path to the root (edge =
    the child's position), so ||v_i - v_j||² counts the edges where the two paths differ (the tree
    distance) and ||v_i||² is the depth; ``dim - 8`` noise dimensions are appended and everything
    is rotated at random. Returns ``(features [1, n_words, dim], offsets, trees, oracle [8, dim])``
    where ``oracle`` is the projection that undoes the rotation onto the planted part."""
    rng = np.random.default_rng(seed)
    heads = [_random_heads(int(rng.integers(4, PLANTED_RANK + 1)), rng) for _ in range(n_sentences)]
    rotation, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    blocks = []
    for h in heads:
        parent = np.array(h) - 1
        planted = np.zeros((len(h), PLANTED_RANK))
        for i in range(len(h)):
            node = i
            while parent[node] >= 0:
                planted[i, node] = 1.0
                node = parent[node]
        noisy = np.concatenate([planted, noise * rng.normal(size=(len(h), dim - PLANTED_RANK))], axis=1)
        blocks.append(noisy @ rotation.T)
    offsets = np.concatenate([[0], np.cumsum([len(h) for h in heads])])
    features = np.concatenate(blocks)[None].astype(np.float32)
    return features, offsets, trees_from_heads(heads, source="planted"), rotation[:, :PLANTED_RANK].T


@pytest.fixture(scope="module")
def planted():
    return planted_vectors()


def test_the_planted_projection_scores_perfectly(planted):
    features, offsets, trees, oracle = planted
    ids = np.arange(len(trees))
    for kind in ("distance", "depth"):
        probes = StructuralProbes(
            kind, [0], [0], [PLANTED_RANK], torch.tensor(oracle[None], dtype=torch.float32), np.zeros(1), np.ones(1)
        )
        parts = pd.DataFrame(
            sentence_scores(predict_structure(probes, features, offsets, trees, ids), trees, ids, kind)
        )
        if kind == "distance":
            assert aggregate(parts, "uuas") == 1.0
            # gold distances tie a lot; the noise breaks ties at random, so DSpr is high but below 1
            assert aggregate(parts, "dspr") > 0.9
        else:
            assert aggregate(parts, "root_acc") == 1.0
            assert aggregate(parts, "nspr") > 0.9


def test_a_probe_of_the_planted_rank_finds_the_trees_and_rank_1_does_not(planted):
    features, offsets, trees, _ = planted
    settings = StructuralSettings(batch_size=10, max_epochs=100)  # the paper's Adam lr 1e-3; 20 steps an epoch
    run = probe_structure(
        features,
        offsets,
        trees,
        kind="distance",
        feature_index=[0, 0],
        layer_ids=[0, 0],
        ranks=[PLANTED_RANK, 1],
        seeds=[0],
        settings=settings,
    )
    test = run.scores[run.scores["split"] == "test"].set_index(["rank", "metric"])["value"]
    # measured: test UUAS 1.0 at rank 8 (dev 0.989: one of 95 dev edges), 0.42 at rank 1
    assert test[(PLANTED_RANK, "uuas")] == 1.0
    assert test[(1, "uuas")] < 0.6
    assert test[(PLANTED_RANK, "dspr")] > test[(1, "dspr")] + 0.5
    depth = probe_structure(
        features,
        offsets,
        trees,
        kind="depth",
        feature_index=[0, 0],
        layer_ids=[0, 0],
        ranks=[PLANTED_RANK, 1],
        seeds=[0],
        settings=settings,
    )
    test = depth.scores[depth.scores["split"] == "test"].set_index(["rank", "metric"])["value"]
    loss = depth.scores[depth.scores["metric"] == "dev_loss"].set_index("rank")["value"]
    assert test[(PLANTED_RANK, "root_acc")] == 1.0
    # (b·h)² of the all-ones direction is depth², monotone in depth: rank 1 ranks depths right too,
    # but cannot fit their values: its L1 loss stays far above the planted rank's
    assert loss[PLANTED_RANK] < 0.1 < 0.3 < loss[1]


def test_probes_of_every_layer_train_together_and_the_planted_layer_wins(planted):
    features, offsets, trees, _ = planted
    rng = np.random.default_rng(1)
    shuffled = features[0][rng.permutation(features.shape[1])]  # a layer with no trees in it
    stacked = np.stack([shuffled, features[0]])  # layer 1 holds the trees
    run = probe_structure(
        stacked,
        offsets,
        trees,
        kind="distance",
        ranks=PLANTED_RANK,
        seeds=[0, 1],
        settings=StructuralSettings(batch_size=10, max_epochs=30),
    )
    intervals = structural_intervals(run.scores, run.sentences, n_resamples=200)
    summary = structural_summary(intervals).set_index("metric")
    assert summary.loc["uuas", "best_layer"] == 1 and summary.loc["uuas", "selected_on"] == "dev"
    uuas = intervals[intervals["metric"] == "uuas"].set_index("layer")
    assert uuas.loc[1, "score"] > uuas.loc[0, "score"] + 0.3
    row = uuas.loc[1]
    assert row["n_seeds"] == 2 and row["low"] <= row["score"] <= row["high"]
    first = run.sentences[(run.sentences["seed"] == 0) & (run.sentences["layer"] == 1)]
    assert row["n_test"] == first["uuas_total"].sum()
    assert bool(row["small_sample"]) == (row["n_test"] < 100)  # 96 edges in 20 test sentences: flagged
    assert set(run.sentences["seed"]) == {0, 1} and len(run.split["test"]) == 20


def test_one_seed_gives_a_bootstrap_interval_said_so(planted):
    features, offsets, trees, _ = planted
    run = probe_structure(
        features, offsets, trees, kind="depth", ranks=4, seeds=[3], settings=StructuralSettings(max_epochs=2)
    )
    intervals = structural_intervals(run.scores, run.sentences, n_resamples=100)
    assert set(intervals["n_seeds"]) == {1}
    assert intervals["interval"].str.contains("one seed").all()
    root = intervals.set_index("metric").loc["root_acc"]
    assert root["n_test"] == 20 and bool(root["small_sample"])  # 20 test sentences < 100


# --------------------------------------------------------------------------- shapes and bad input


def test_shapes_of_predictions(planted):
    features, offsets, trees, _ = planted
    split = split_sentences(len(trees), 0)
    probes = fit_structural(
        np.concatenate([features, features]),
        offsets,
        trees,
        split["train"][:20],
        split["dev"],
        ranks=[2, 3],
        settings=StructuralSettings(max_epochs=1),
    )
    assert probes.weights.shape == (2, 3, 24)
    assert torch.all(probes.weights[0, 2] == 0)  # rows past a probe's rank stay zero
    preds = predict_structure(probes, np.concatenate([features, features]), offsets, trees, [0, 5])
    assert [p.shape for p in preds] == [(2, n, n) for n in trees.lengths[[0, 5]]]
    depth = fit_structural(features, offsets, trees, split["train"][:20], split["dev"], kind="depth", ranks=2)
    preds = predict_structure(depth, features, offsets, trees, [0])
    assert preds[0].shape == (1, trees.lengths[0])


def test_tree_distances_equal_a_breadth_first_search_on_random_trees():
    """parent_distances (ancestor sets) against scipy's unweighted shortest paths, the way the
    distances were computed before, on random trees of 1-60 words."""
    from scipy.sparse.csgraph import shortest_path

    rng = np.random.default_rng(3)
    for n in [1, 2, 3, *rng.integers(4, 61, size=40)]:
        heads = _random_heads(int(n), rng)
        parent = np.array(heads) - 1
        adjacency = np.zeros((n, n))
        adjacency[np.flatnonzero(parent >= 0), parent[parent >= 0]] = 1.0
        bfs = shortest_path(adjacency, directed=False, unweighted=True).astype(np.int64)
        np.testing.assert_array_equal(tree_distances(heads), bfs)
        assert tree_distances(heads).dtype == np.int64


def test_trees_hold_no_distance_matrices_and_give_them_when_read():
    """The trees keep heads and depths (n a sentence), not the [n, n] distances: those are computed
    when a batch or a score reads them, equal to tree_distances; a skipped sentence's are zeros."""
    rng = np.random.default_rng(0)
    heads = [_random_heads(int(n), rng) for n in rng.integers(2, 30, size=50)] + [[0, 0, 1]]  # the last: two roots
    trees = trees_from_heads(heads, skip_invalid=True)
    assert isinstance(trees.distances, TreeDistances) and len(trees.distances) == 51
    assert list(trees.skipped) == [50]
    for k, h in enumerate(heads[:50]):
        np.testing.assert_array_equal(trees.distances[k], tree_distances(h))
        np.testing.assert_array_equal(trees.depths[k], tree_depths(h))
        assert trees.depths[k].base is None  # its own array, not a row of a held [n, n] matrix
    np.testing.assert_array_equal(trees.distances[-1], np.zeros((3, 3)))
    np.testing.assert_array_equal(trees.depths[50], np.zeros(3))
    assert [d.shape for d in trees.distances[1:3]] == [(len(heads[1]),) * 2, (len(heads[2]),) * 2]


def test_scores_streamed_batch_by_batch_equal_the_predictions_held_at_once(planted):
    """A split scored as its predictions come (iter_predictions, one batch held) gives the same rows
    as every prediction held first (the trees found: whatever the batch size); under the planted
    projection both score UUAS and root accuracy 1."""
    features, offsets, trees, oracle = planted
    ids = np.arange(len(trees))
    for kind in ("distance", "depth"):
        probes = StructuralProbes(
            kind, [0], [0], [PLANTED_RANK], torch.tensor(oracle[None], dtype=torch.float32), np.zeros(1), np.ones(1)
        )
        held = predict_structure(probes, features, offsets, trees, ids)
        expected = pd.DataFrame(sentence_scores(held, trees, ids, kind))
        assert aggregate(expected, "uuas" if kind == "distance" else "root_acc") == 1.0
        streamed = iter_predictions(probes, features, offsets, trees, ids)
        assert not isinstance(streamed, list)
        pd.testing.assert_frame_equal(pd.DataFrame(sentence_scores(streamed, trees, ids, kind)), expected)
        # other batch sizes pad to other lengths: float32 sums round differently, which reorders the
        # near-ties of the noise (the Spearmans move in the 2nd decimal); the trees found do not
        parts = ["uuas_correct", "uuas_total"] if kind == "distance" else ["root_correct", "root_total"]
        for batch_size in (1, 7, 500):
            got = pd.DataFrame(
                sentence_scores(iter_predictions(probes, features, offsets, trees, ids, batch_size), trees, ids, kind)
            )
            pd.testing.assert_frame_equal(got[parts], expected[parts])


def test_the_dev_loss_built_batch_by_batch_is_the_mean_sentence_loss(planted):
    """fit_structural builds each dev batch when it scores it (none held through training): the
    kept dev loss is the paper's per-sentence L1 averaged over the dev sentences, recomputed here
    one sentence at a time in NumPy from the kept weights and the trees' heads."""
    features, offsets, trees, _ = planted
    split = split_sentences(len(trees), 0)
    probes = fit_structural(
        features, offsets, trees, split["train"], split["dev"], ranks=4, settings=StructuralSettings(max_epochs=2)
    )
    B = probes.weights[0].numpy().astype(np.float64)
    losses = []
    for s in split["dev"]:
        proj = features[0, offsets[s] : offsets[s + 1]].astype(np.float64) @ B.T
        pred = ((proj[:, None] - proj[None]) ** 2).sum(-1)
        losses.append(np.abs(pred - tree_distances(trees.heads[s])).sum() / len(proj) ** 2)
    assert probes.dev_loss[0] == pytest.approx(np.mean(losses), rel=1e-5)


def test_bad_input_is_refused_with_the_field_named(planted):
    features, offsets, trees, _ = planted
    split = split_sentences(len(trees), 0)
    fit = dict(train=split["train"], dev=split["dev"])
    with pytest.raises(ConfigError, match="probe must be one of distance, depth"):
        fit_structural(features, offsets, trees, kind="height", **fit)
    with pytest.raises(ConfigError, match=r"ranks must be 1 integers in 1..24"):
        fit_structural(features, offsets, trees, ranks=25, **fit)
    with pytest.raises(ConfigError, match=r"features must be \[layers, n_words, dim\]"):
        fit_structural(features[0], offsets, trees, **fit)
    with pytest.raises(ConfigError, match="must match the trees"):
        fit_structural(features, offsets[:-1], trees, **fit)
    with pytest.raises(ConfigError, match="batch_size must be an integer >= 1"):
        StructuralSettings(batch_size=0)
    with pytest.raises(ConfigError, match="at least 3 sentences"):
        split_sentences(2)
    with pytest.raises(CorpusError, match="2 UPOS tags for 3 heads"):
        trees_from_heads([[2, 0, 2]], [["DET", "NOUN"]])
    with pytest.raises(ConfigError, match="give at least one seed"):
        probe_structure(features, offsets, trees, seeds=[])


def test_corpus_trees_say_where_they_come_from_and_skip_forests(small_corpus):
    from bertology.corpus import Corpus, Sentence

    trees = corpus_trees(small_corpus)
    assert trees.source.startswith("silver: spaCy")
    sentences = [
        Sentence(sent_id="a", words=["x", "y", "z"], heads=[2, 0, 2], upos=["X", "X", "PUNCT"]),
        Sentence(sent_id="b", words=["x", "y"], heads=[0, 0]),  # two roots: skipped
        Sentence(sent_id="c", words=["x", "y"], heads=None),
    ]
    trees = corpus_trees(Corpus("toy", sentences, {"deps": "gold: toy.conllu"}))
    assert trees.source == "gold: toy.conllu" and list(trees.usable) == [0]
    assert "sentence b" in trees.skipped[1] and "no dependency heads" in trees.skipped[2]
    assert trees.punct[0].tolist() == [False, False, True]
    with pytest.raises(CorpusError, match="corpus 'bare': the structural probe needs dependency trees"):
        corpus_trees(Corpus("bare", [Sentence(sent_id="a", words=["x"])], {}))


# --------------------------------------------------------------------------- the study and the CLI


def test_structural_command_runs_the_study_and_names_the_trees(tmp_path, minilm_tokenizer, small_corpus):
    from bertology.cli import app
    from bertology.corpus.conllu import write_conllu
    from bertology.results import read_manifest, read_table
    from bertology.testing import make_tiny_bert

    model_dir = tmp_path / "tiny-bert"
    make_tiny_bert(minilm_tokenizer).save_pretrained(model_dir)
    minilm_tokenizer.save_pretrained(model_dir)
    conllu = tmp_path / "gold.conllu"
    write_conllu(
        small_corpus.subset([i for i, s in enumerate(small_corpus) if sum(h == 0 for h in s.heads) == 1]), conllu
    )
    out = tmp_path / "results"
    args = ["structural", "--model", str(model_dir), "--corpus", str(conllu), "--limit", "0", "--layers", "1,2"]
    args += ["--rank", "8", "--ranks", "1,8", "--seeds", "0,1", "--max-epochs", "2", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    # write_conllu kept the Brown sample's provenance (a sidecar): the trees are silver, and say so
    assert "trees: silver: spaCy" in result.output
    assert "trained / distance probe: best layer" in result.output and "LINEAR baseline" in result.output
    run = next((out / "structural_probe").iterdir())
    manifest = read_manifest(run)
    assert manifest["trees"]["annotation"] == "silver"
    intervals = read_table(run, "layer_intervals")
    assert set(intervals["layer"]) == {1, 2} and intervals["trees"].str.startswith("silver: spaCy").all()
    assert set(intervals["metric"]) == {"uuas", "dspr", "root_acc", "nspr"}
    assert set(read_table(run, "rank_curve")["rank"]) == {1, 8}
    assert set(read_table(run, "baselines")["encoder"]) == {"trained", "linear"}
    edges = read_table(run, "tree_edges")
    assert set(edges["source"]) == {"gold", "predicted"}
    # the example trees: the test sentences of at most 30 words (tree_examples 20 > 4 test sentences)
    test = read_table(run, "test_sentences")
    assert set(read_table(run, "tree_words")["sentence"]) == set(test[test["n_words"] <= 30]["sentence"])
    assert set(edges["sentence"]) <= set(test["sentence"])
    bad = CliRunner().invoke(app, ["structural", "--probes", "height", "--out", str(out)])
    assert bad.exit_code != 0 and "--probes must be distance and/or depth" in str(bad.exception or bad.output)


# --------------------------------------------------------------------------- the dashboard page


def test_page_figures_draw_the_planted_scores_and_tree(tmp_path):
    from dashboard_planted import PLANTED_LINEAR_UUAS, PLANTED_UUAS, structural_run

    from bertology.apps.pages.structural import layer_figure, rank_figure, summary_rows, tree_figure
    from bertology.results import read_table

    run = structural_run(tmp_path)
    intervals, baselines = read_table(run, "layer_intervals"), read_table(run, "baselines")
    fig = layer_figure(intervals, baselines, "distance")
    uuas = [t for t in fig.data if t.name == "UUAS (trained)"][0]
    assert list(uuas.y) == pytest.approx(PLANTED_UUAS)
    assert any(f"LINEAR UUAS {PLANTED_LINEAR_UUAS:.3f}" in a.text for a in fig.layout.annotations)
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert len(lines) == 2 and lines[0].line.dash != lines[1].line.dash  # UUAS and DSpr. told apart
    sides = {a.xanchor for a in fig.layout.annotations if a.text.startswith("LINEAR")}
    assert len(sides) == 2  # their labels on two sides, not over each other
    rows = summary_rows(read_table(run, "summary"), baselines).set_index(["probe", "metric"])
    assert rows.loc[("distance", "UUAS"), "best_layer"] == 2 and rows.loc[("distance", "UUAS"), "LINEAR"] == 0.5
    rank = rank_figure(read_table(run, "rank_curve")).layout.xaxis
    assert rank.type == "log" and list(rank.tickvals) == sorted(set(read_table(run, "rank_curve")["rank"]))
    tree = tree_figure(read_table(run, "tree_words"), read_table(run, "tree_edges"), "planted-7")
    assert "1 of 2 gold edges found" in tree.layout.title.text
    arcs = [t for t in tree.data if t.mode == "lines"]
    assert [t.line.color for t in arcs] == ["#1f77b4", "#1f77b4", "#2ca02c", "#d62728"]
    assert all(max(t.y) > 0 for t in arcs[:2]) and all(min(t.y) < 0 for t in arcs[2:])


@pytest.mark.gpu
def test_the_structural_probe_on_the_gpu_finds_the_planted_trees_as_on_the_cpu(planted, cuda):
    """Issue 44 item 4: the probes train where their features live (``settings.device``); on a GPU
    the planted rank's probe finds the trees as it does on the CPU (float32 on either device: the
    same scores up to the order of sums)."""
    features, offsets, trees, _ = planted
    runs = {}
    for where in ("cpu", str(cuda)):
        runs[where] = probe_structure(
            features,
            offsets,
            trees,
            kind="distance",
            feature_index=[0],
            layer_ids=[0],
            ranks=[PLANTED_RANK],
            seeds=[0],
            settings=StructuralSettings(batch_size=10, max_epochs=40, device=where),
        )
    scores = {w: r.scores[r.scores["split"] == "test"].set_index("metric")["value"] for w, r in runs.items()}
    assert scores[str(cuda)]["uuas"] >= 0.95
    assert abs(scores[str(cuda)]["uuas"] - scores["cpu"]["uuas"]) <= 0.02
    assert abs(scores[str(cuda)]["dspr"] - scores["cpu"]["dspr"]) <= 0.02


LONG_NEIGHBOURS = ["the", "national", "secretary", "WWWMMM", "internationalisation", "mmmmwwww", "."]


@pytest.mark.parametrize("words", [LONG_NEIGHBOURS, LONG_NEIGHBOURS * 4, ["x"] * 40, ["internationalisation"] * 30])
def test_tree_labels_never_touch_whatever_their_lengths(words):
    """Issue 54 item 3 ("nationalsecretary"): the words are placed by their drawn width in px, so
    neighbouring labels keep a clearance in any plot at least MIN_PLOT_WIDTH wide: level words one em
    apart when they fit, else rotated strips at least a line height apart."""
    from bertology.apps.pages import structural

    layout = structural.tree_layout(words)
    gaps = [layout.gap(i) for i in range(len(words) - 1)]
    assert min(gaps) >= (structural.TREE_FONT if layout.angle == 0 else 0) - 1e-9
    assert layout.angle == (0 if words == LONG_NEIGHBOURS else structural.ROTATED_ANGLE)
    low, high = layout.x_range  # every label inside the x range, which is at least the plot width assumed
    assert high - low >= structural.MIN_PLOT_WIDTH - 1e-9
    if layout.angle == 0:
        assert low <= layout.x[0] - layout.widths[0] / 2 and layout.x[-1] + layout.widths[-1] / 2 <= high
    else:
        a = np.radians(layout.angle)
        across = (layout.widths * np.cos(a) + structural.LINE_HEIGHT * np.sin(a)) / 2
        assert low <= (layout.x - across).min() and (layout.x + across).max() <= high
    # a wider word is estimated wider: "mmm" against "iii"
    assert structural.text_width("mmm") > 2.5 * structural.text_width("iii")


def test_the_tree_figure_draws_the_layout_in_pixels():
    from bertology.apps.pages.structural import TREE_FONT, tree_figure, tree_layout

    words = pd.DataFrame({"sent_id": "s", "position": [0, 1, 2, 3], "word": ["the", "national", "secretary", "."]})
    edges = pd.DataFrame({"sent_id": "s", "source": ["gold"], "i": [1], "j": [2], "correct": [True]})
    fig = tree_figure(words, edges, "s")
    layout = tree_layout(list(words["word"]))
    assert [a.text for a in fig.layout.annotations] == ["the", "national", "secretary", "."]
    assert [a.x for a in fig.layout.annotations] == pytest.approx(list(layout.x))
    assert {a.textangle for a in fig.layout.annotations} == {0} and fig.layout.annotations[0].font.size == TREE_FONT
    assert list(fig.layout.xaxis.range) == pytest.approx(list(layout.x_range))
    low, high = fig.layout.yaxis.range  # a y unit is a pixel: the plot area is as high as the y range
    assert fig.layout.height - fig.layout.margin.t - fig.layout.margin.b == pytest.approx(high - low, abs=1)
    arc = fig.data[0]  # the gold arc from "national" to "secretary", above the words' strip
    assert arc.x[0] == pytest.approx(layout.x[1]) and arc.x[-1] == pytest.approx(layout.x[2])
    assert min(arc.y) > layout.band
    assert fig.layout.annotations[-1].font.color == "#000000"  # no punct column: every word black
