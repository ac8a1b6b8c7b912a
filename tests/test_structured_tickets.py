"""Structured lottery tickets as Prasanna et al.'s released code makes them (issue 42, item 1), with
planted answers and no model: per-layer normalisation changes which heads go first in a known way;
the joint phase, then heads only at half the step, then FFN blocks only, remove the numbers a planted
cost table allows; the "bad" sub-network keeps what the good one removed and removes as many of its
survivors; the Bernoulli random sub-network's size is Binomial; unknown options are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertology.errors import WorkbenchError
from bertology.probes.heads.pruning import (
    StructuredPruning,
    head_ranking,
    least_important,
    matched_components,
    structured_phases,
    structured_search,
)

# A hand-made importance table [layers=2, heads=2]: layer 0's heads are small in absolute terms,
# layer 1 has one small and one large head.
RAW = np.array([[1.0, 2.0], [10.0, 40.0]])
EVERY = [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_per_layer_normalisation_changes_the_first_heads_in_a_known_way():
    # raw: the two heads of layer 0 are the least important (1 and 2)
    assert least_important(head_ranking(RAW, False), EVERY, 2) == [(0, 0), (0, 1)]
    # ℓ2 per layer: layer 0 -> [1, 2] / √5 = [0.447, 0.894]; layer 1 -> [10, 40] / √1700 = [0.243, 0.970]
    ranked = head_ranking(RAW, True)
    assert ranked == pytest.approx(np.array([[1 / 5**0.5, 2 / 5**0.5], [10 / 1700**0.5, 40 / 1700**0.5]]))
    assert least_important(ranked, EVERY, 2) == [(1, 0), (0, 0)]
    assert least_important(ranked, [(0, 0), (0, 1), (1, 1)], 2) == [(0, 0), (0, 1)]  # only the alive ones


# Planted costs in units of 1/256 of the metric (exact in binary, so no sum lands on the threshold):
# 6 layers x 8 heads; 14 cheap heads (1 unit: all of layer 0, six of layer 1), the rest 20 units; every
# FFN block 2 units. Importance = cost (distinct within a kind), removed components score 0.
UNIT = 1 / 256
HEAD_COST = np.full((6, 8), 20.0)
HEAD_COST[0, :] = 1.0
HEAD_COST[1, :6] = 1.0
FFN_COST = np.full(6, 2.0)
HEAD_SCORE = HEAD_COST + np.arange(48).reshape(6, 8) * 1e-3  # ties broken by position, as the costs are
FFN_SCORE = FFN_COST + np.arange(6) * 1e-3


def _planted_evaluate(head_gates: torch.Tensor, ffn_gates: torch.Tensor) -> float:
    off_heads, off_ffn = (1 - head_gates).numpy(), (1 - ffn_gates).numpy()
    return 1.0 - UNIT * (float((HEAD_COST * off_heads).sum()) + float((FFN_COST * off_ffn).sum()))


def _planted_score(head_gates: torch.Tensor, ffn_gates: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    return HEAD_SCORE * head_gates.numpy(), FFN_SCORE * ffn_gates.numpy()


def _search(continue_phases: bool) -> StructuredPruning:
    return structured_search(
        _planted_evaluate,
        _planted_score,
        (6, 8),
        head_step=0.1,
        keep=0.9,
        normalise_per_layer=False,
        continue_phases=continue_phases,
    )


def test_the_phases_remove_the_numbers_the_planted_costs_allow():
    # 48 heads x 0.1 = 4.8 -> 4 a step (truncated, as their code); heads-only phase 4 // 2 = 2 a step
    assert structured_phases(48, 0.1, 1, True) == [("joint", 4, 1), ("heads", 2, 0), ("ffn", 0, 1)]
    assert structured_phases(32, 0.1, 1, True) == [("joint", 3, 1), ("heads", 1, 0), ("ffn", 0, 1)]
    assert structured_phases(10, 0.1, 1, True) == [("joint", 1, 1), ("ffn", 0, 1)]  # 1 // 2 = 0: no heads phase
    # budget: the metric may lose 0.1 = 25.6 units. joint: 4 cheap heads + 1 block = 6 units a step:
    # 6, 12, 18 kept; the 4th step (16 heads: 2 of them at 20 units) is undone
    joint_only = _search(continue_phases=False)
    assert (len(joint_only.heads), len(joint_only.ffn)) == (12, 3)
    # then heads only, 2 a step: 14 heads (20 units) kept, 16 undone; then blocks only: 22, 24 kept, 26 undone
    full = _search(continue_phases=True)
    assert (len(full.heads), len(full.ffn)) == (14, 5)
    assert sorted(full.heads) == sorted(zip(*np.nonzero(HEAD_COST == 1.0)))  # exactly the cheap heads
    trace = full.trace
    assert trace["phase"].tolist() == ["start"] + ["joint"] * 4 + ["heads"] * 2 + ["ffn"] * 3
    assert trace["kept"].tolist() == [True, True, True, True, False, True, False, True, True, False]
    assert trace[["heads_removed", "ffn_removed"]].values.tolist()[-1] == [14, 6]  # the undone step
    assert trace["relative"].iloc[-2] == pytest.approx(1 - 24 * UNIT)
    assert full.heads[: len(joint_only.heads)] == joint_only.heads  # the joint phase is the same in both


def _planted_pruning(removed_heads: list[tuple[int, int]], removed_ffn: list[int], shape=(4, 8)) -> StructuredPruning:
    importance = np.arange(shape[0] * shape[1], dtype=float).reshape(shape)
    return StructuredPruning(removed_heads, removed_ffn, importance, np.arange(shape[0], dtype=float), None)


def test_the_bad_subnetwork_keeps_what_good_removed_and_removes_as_many_survivors():
    good_heads = [(0, h) for h in range(8)] + [(1, 0), (1, 1)]  # 10 of 32
    pruning = _planted_pruning(good_heads, [2])
    draws = set()
    for seed in range(20):
        heads, ffn = matched_components(pruning, "bad", seed=seed)
        assert len(heads) == len(good_heads) and len(ffn) == 1  # the same size
        assert not set(heads) & set(good_heads) and 2 not in ffn  # drawn from good's survivors only
        draws.add(tuple(heads))
    assert len(draws) > 1  # drawn at random, not a fixed choice
    assert matched_components(pruning, "bad", seed=3) == matched_components(pruning, "bad", seed=3)
    # when good removed more than it kept, bad keeps a draw of good's removed as large as good's kept
    many = [(l, h) for l in range(4) for h in range(8)][:24]
    heads, _ = matched_components(_planted_pruning(many, [0, 1, 2]), "bad", seed=1)
    assert len(heads) == 24 and set(heads) >= {(3, h) for h in range(8)}  # every survivor of good removed
    # the earlier option: the most important on the unpruned model
    heads, ffn = matched_components(pruning, "bad", bad="most_important")
    assert heads == [(3, h) for h in range(7, -1, -1)] + [(2, 7), (2, 6)] and ffn == [3]


def test_the_bernoulli_random_subnetwork_has_a_binomial_size():
    pruning = _planted_pruning([(0, h) for h in range(8)], [1])  # 8 of 32 heads, 1 of 4 blocks removed
    n_draws = 4000
    sizes = np.array([len(matched_components(pruning, "random", seed=s)[0]) for s in range(n_draws)])
    blocks = np.array([len(matched_components(pruning, "random", seed=s)[1]) for s in range(200)])
    # each of 32 heads removed with probability 8/32: Binomial(32, 0.25), mean 8, variance 6
    mean, var = 32 * 0.25, 32 * 0.25 * 0.75
    assert abs(sizes.mean() - mean) < 4 * (var / n_draws) ** 0.5  # 4 standard errors of the mean
    # the sample variance's standard error is about var * sqrt(2 / (n - 1)) for a near-normal size
    assert abs(sizes.var(ddof=1) - var) < 4 * var * (2 / (n_draws - 1)) ** 0.5
    assert sizes.min() < 8 < sizes.max()  # not an exact-size draw
    assert set(blocks) > {1}  # blocks too: Binomial(4, 0.25)
    exact = [matched_components(pruning, "random", seed=s, random="exact") for s in range(20)]
    assert {(len(h), len(f)) for h, f in exact} == {(8, 1)}


def test_unknown_options_are_refused_naming_them():
    pruning = _planted_pruning([(0, 0)], [0])
    with pytest.raises(WorkbenchError, match="bad must be one of random_complement, most_important"):
        matched_components(pruning, "bad", bad="worst")
    with pytest.raises(WorkbenchError, match="random must be one of bernoulli, exact"):
        matched_components(pruning, "random", random="uniform")
    with pytest.raises(WorkbenchError, match="kind must be"):
        matched_components(pruning, "ugly")
