"""Pruning thresholds measured to one head, chosen on dev and read on test (issue 26, items 1, 3, 5).

A planted metric depends only on how many heads are gated off, so the true threshold is known and
falls between two points of the coarse grid."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from bertology.corpus import Sentence
from bertology.errors import WorkbenchError
from bertology.probes.heads.pruning import compare_orders, pruning_curve, pruning_task, removable_shares
from bertology.testing import TINY_WORDS, tiny_bert, tiny_model, tiny_tokenizer

TRUE_THRESHOLD = 13  # heads removable before the planted metric drops by more than 1%
N_HEADS = 4 * 8  # the model below: 4 layers x 8 heads; step 0.25 -> grid 0, 8, 16, 24, 32


def planted_metric(gates: torch.Tensor, *, scale: float = 1.0) -> float:
    """1.0 minus 0.05% per head removed up to TRUE_THRESHOLD heads, then 2% per head more."""
    removed = int((gates == 0).sum())
    return scale * (1.0 - 0.0005 * min(removed, TRUE_THRESHOLD) - 0.02 * max(0, removed - TRUE_THRESHOLD))


@pytest.fixture(scope="module")
def model():
    return tiny_bert(layers=4, heads=8)


def curve_of(model, refine, max_share=1.0, tolerances=(0.01,)):
    return pruning_curve(
        model,
        lambda m, g: planted_metric(g),
        method="random",
        step=0.25,
        seeds=[0],
        max_share=max_share,
        refine=refine,
        tolerances=tolerances,
        report_metrics={"test": lambda m, g: planted_metric(g, scale=0.9)},
    )


def test_coarse_grid_gives_only_a_lower_bound(model):
    curve = curve_of(model, "none")
    assert curve["n_pruned"].tolist() == [0, 8, 16, 24, 32] and not curve["refined"].any()
    row = removable_shares(curve, (0.01,)).iloc[0]
    assert row["n_removable"] == 8 and row["next_n_pruned"] == 16 and row["resolution_heads"] == 8
    assert row["threshold_is_lower_bound"]  # the truth (13) lies somewhere in [8, 16)


def test_bracket_refinement_finds_the_planted_threshold_to_one_head(model):
    curve = curve_of(model, "bracket")
    assert set(curve.loc[curve["refined"], "n_pruned"]) == set(range(9, 16))  # only between 8 and 16
    row = removable_shares(curve, (0.01,), report_column="metric_test").iloc[0]
    assert row["n_removable"] == TRUE_THRESHOLD and row["removable_share"] == TRUE_THRESHOLD / N_HEADS
    assert row["resolution_heads"] == 1 and not row["threshold_is_lower_bound"]
    # selected on the selection metric (dev), read on the report metric (test) at the same heads
    assert row["value"] == pytest.approx(planted_metric(torch.zeros(TRUE_THRESHOLD)))
    assert row["value_report"] == pytest.approx(0.9 * row["value"])
    assert row["drop_report"] == pytest.approx(0.0005 * TRUE_THRESHOLD)


def test_every_count_agrees_with_the_bracket(model):
    full = curve_of(model, "all")
    assert full["n_pruned"].tolist() == list(range(N_HEADS + 1))
    assert removable_shares(full, (0.01,)).iloc[0]["n_removable"] == TRUE_THRESHOLD


def test_a_curve_that_stops_early_without_a_crossing_is_a_lower_bound(model):
    curve = curve_of(model, "bracket", max_share=0.25, tolerances=(0.05,))
    row = removable_shares(curve, (0.05,)).iloc[0]
    assert row["n_removable"] == 8 and row["next_n_pruned"] == -1 and row["threshold_is_lower_bound"]
    # the whole curve within a loose tolerance, run to the end: every head removable, measured
    whole = curve_of(model, "bracket", tolerances=(0.9,))
    end = removable_shares(whole, (0.9,)).iloc[0]
    assert end["n_removable"] == N_HEADS and not end["threshold_is_lower_bound"]


def test_refinement_follows_the_importance_order_within_a_step():
    from bertology.probes.heads.importance import mlm_loss
    from bertology.testing import pair_batches

    mlm = tiny_bert(mlm=True, layers=2, heads=4)
    batches = pair_batches(2, seed=1)

    def metric(m, g):
        return planted_metric(g)

    coarse = pruning_curve(mlm, metric, method="importance", batches=batches, loss_fn=mlm_loss, step=0.5)
    fine = pruning_curve(mlm, metric, method="importance", batches=batches, loss_fn=mlm_loss, step=0.5, refine="all")
    grid = fine[~fine["refined"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(grid[coarse.columns], coarse)  # the grid points do not move
    sets = [set(eval(p)) for p in fine["pruned"]]
    assert all(a < b and len(b - a) == 1 for a, b in zip(sets, sets[1:]))  # one head at a time


def test_unknown_refinement_is_refused(model):
    with pytest.raises(WorkbenchError, match="refine"):
        curve_of(model, "finest")


class _Corpus(list):
    name, sources = "planted", {"upos": "gold: planted"}


def test_task_splits_held_out_sentences_into_dev_and_test_by_sentence():
    rng = np.random.default_rng(0)
    words = [w for w in TINY_WORDS if w.isalpha()][:12]
    corpus = _Corpus(
        Sentence(
            sent_id=f"s{i}",
            words=[str(w) for w in rng.choice(words, size=5 + i % 3)],
            upos=["NOUN", "VERB"] * 3 + ["ADJ"],
        )
        for i in range(40)
    )
    for s in corpus:
        s.upos = s.upos[: len(s.words)]
    tok = tiny_tokenizer("bert")
    lm = SimpleNamespace(model=tiny_model("bert"), tokenizer=tok, has_mlm_head=False)
    task = pruning_task(lm, corpus, eval_share=0.5, test_share=0.5, epochs=2, seed=3)
    assert task.n_sentences == {"train": 20, "dev": 10, "test": 10}
    assert task.n_items["test"] == sum(task.sentence_scores(lm.model, None, task.test)[1])  # scored words
    again = pruning_task(lm, corpus, eval_share=0.5, test_share=0.5, epochs=2, seed=3)
    assert torch.equal(again.test[0]["input_ids"], task.test[0]["input_ids"])  # seeded
    other = pruning_task(lm, corpus, eval_share=0.5, test_share=0.5, epochs=2, seed=4)
    assert not all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(other.test, task.test))
    gates = torch.ones(2, 4)
    dev, test = task.metric("dev")(lm.model, gates), task.metric("test")(lm.model, gates)
    assert 0 <= dev <= 1 and 0 <= test <= 1


def test_orders_compared_on_the_same_sentences(model):
    """A planted per-sentence score: removing heads of layer 0 costs every sentence, others nothing."""
    n_sentences = 200

    def scores(m, gates, batches):
        layer0_off = int((gates[0] == 0).sum())
        rng = np.random.default_rng(0)
        base = rng.uniform(0.6, 1.0, size=n_sentences)
        return base * 10 - layer0_off * 0.5, np.full(n_sentences, 10.0)

    layer0 = str([(1, h) for h in range(1, 9)])  # the "pruned" column: (layer, head) numbers, from 1
    elsewhere = str([(2, h) for h in range(1, 9)])
    curve = pd.DataFrame(
        {
            "method": ["importance", "random", "random"],
            "seed": [0, 0, 1],
            "n_pruned": 8,
            "share_pruned": 0.25,
            "pruned": [elsewhere, layer0, elsewhere],
        }
    )
    out = compare_orders(model, curve, scores, [], [0.25], n_resamples=500)
    row = out.iloc[0]
    assert (row["method_a"], row["method_b"], row["n_seeds_b"]) == ("importance", "random", 2)
    # random's mean over its two seeds loses 0.5 * 8 / 2 / 10 = 0.2 accuracy on every sentence
    assert row["difference"] == pytest.approx(0.2) and row["low"] == pytest.approx(0.2)
    assert row["p_value"] <= 1 / 500 + 1e-12 and row["n_sentences"] == n_sentences and not row["small_sample"]
    # a point refined near importance's threshold (7 heads) is nearer 0.2 but only importance has it:
    # the orders are compared at the nearest count both evaluated (8), not dropped
    refined = pd.concat(
        [
            curve,
            pd.DataFrame(
                {
                    "method": ["importance"],
                    "seed": [0],
                    "n_pruned": [7],
                    "share_pruned": [7 / 32],
                    "pruned": [str([(2, h) for h in range(1, 8)])],
                }
            ),
        ]
    )
    again = compare_orders(model, refined, scores, [], [0.2], n_resamples=500)
    assert again["n_pruned"].tolist() == [8] and again["difference"].iloc[0] == pytest.approx(0.2)


def test_l0_evaluation_scores_exactly_the_heads_the_gates_keep():
    """Known answer: with a planted per-sentence metric, each λ's row equals the metric with exactly
    its closed heads off, on dev and on test; all gates open gives the unpruned base."""
    from bertology.probes.heads.pruning import evaluate_l0_gates

    model = tiny_bert(layers=2, heads=4)

    def sentence_scores(m, gates, batches):
        value = planted_metric(gates)
        n = len(batches)
        return np.full(n, value), np.ones(n)

    task = SimpleNamespace(
        dev=list(range(40)),
        test=list(range(60)),
        sentence_scores=sentence_scores,
        description="planted",
        metric=lambda split: lambda m, g: planted_metric(g),
    )
    layers, heads = np.indices((2, 4)) + 1  # an l0_gates table numbers layers and heads from 1
    gates = pd.concat(
        [
            pd.DataFrame({"layer": layers.ravel(), "head": heads.ravel(), "kept": kept, "lam": lam, "seed": 0})
            for lam, kept in ((0.0, [True] * 8), (1.0, [False, True] * 4))
        ],
        ignore_index=True,
    )
    rows = evaluate_l0_gates(model, gates, task, n_resamples=200).set_index("lam")
    assert rows.loc[0.0, "heads_kept"] == 8 and rows.loc[0.0, "value"] == pytest.approx(rows.loc[0.0, "base"])
    assert rows.loc[1.0, "heads_kept"] == 4 and rows.loc[1.0, "share_removed"] == 0.5
    assert rows.loc[1.0, "value"] == pytest.approx(planted_metric(torch.tensor([0.0] * 4 + [1.0] * 4)))
    assert rows.loc[1.0, "value_dev"] == pytest.approx(rows.loc[1.0, "value"])
    assert (rows["selected_on"] == "none").all() and rows["small_sample"].all()  # 60 test items < 100
