"""Intervals that cover what they claim, on planted data whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bertology.uncertainty import (
    MIN_TEST_ITEMS,
    is_small_sample,
    mcnemar_p,
    paired_bootstrap,
    ratio_bootstrap,
    t_interval,
    wilson_interval,
)


def clustered_items(rng, n_sentences: int, p: float, spread: float = 0.15):
    """Per-word correctness of a probe whose true accuracy is ``p``: each sentence has its own
    difficulty (so its words are correlated), 3-12 words each. Returns (correct [items], sentence ids)."""
    sizes = rng.integers(3, 13, n_sentences)
    difficulty = np.clip(rng.normal(p, spread, n_sentences), 0, 1)
    correct = np.concatenate([rng.random(k) < d for k, d in zip(sizes, difficulty)])
    groups = np.repeat(np.arange(n_sentences), sizes)
    return correct.astype(float), groups


def test_t_interval_uses_student_quantiles_and_refuses_one_seed():
    two = t_interval([0.80, 0.82])
    # t_{0.975, 1} = 12.706: the half width is 12.706 * sd / sqrt(2), not 1.96 * ...
    assert two.half_width == pytest.approx(12.706 * np.std([0.80, 0.82], ddof=1) / math.sqrt(2), rel=1e-3)
    one = t_interval([0.8])
    assert one.n == 1 and one.estimate == 0.8 and math.isnan(one.low) and math.isnan(one.high)


def test_cluster_bootstrap_covers_the_true_accuracy_about_95_percent_of_the_time():
    # truth: a new test set from the same population of sentences; its expected accuracy is what
    # the population mean difficulty gives (sentence-size-weighted, here ~p since size and
    # difficulty are independent)
    rng = np.random.default_rng(0)
    p, hits, trials = 0.8, 0, 300
    for t in range(trials):
        correct, groups = clustered_items(rng, 60, p)
        iv = ratio_bootstrap(correct, groups=groups, n_resamples=800, seed=t)
        hits += iv.low <= p <= iv.high
    assert 0.90 <= hits / trials <= 0.985, hits / trials


def test_treating_words_as_independent_undercovers_clustered_data():
    # the same data with every word its own group: intervals too narrow (what the old ±1.96·sd/√seeds did)
    rng = np.random.default_rng(1)
    p, hits, trials = 0.8, 0, 200
    for t in range(trials):
        correct, _ = clustered_items(rng, 60, p, spread=0.25)
        iv = ratio_bootstrap(correct, n_resamples=500, seed=t)
        hits += iv.low <= p <= iv.high
    assert hits / trials < 0.9


def test_bootstrap_interval_is_never_narrower_than_the_binomial_error_of_independent_items():
    rng = np.random.default_rng(2)
    correct = (rng.random(400) < 0.9).astype(float)
    boot = ratio_bootstrap(correct, n_resamples=4000)
    wilson = wilson_interval(int(correct.sum()), correct.size)
    assert boot.half_width == pytest.approx(wilson.half_width, rel=0.15)


def test_micro_f1_as_a_ratio_of_sums():
    tp, fp, fn = np.array([1, 0, 1, 1]), np.array([0, 1, 0, 0]), np.array([0, 1, 0, 1])
    iv = ratio_bootstrap(2 * tp, 2 * tp + fp + fn, groups=np.array([0, 0, 1, 1]))
    assert iv.estimate == pytest.approx(2 * 3 / (2 * 3 + 1 + 2))


def test_paired_bootstrap_finds_a_planted_difference_and_none_between_equal_runs():
    rng = np.random.default_rng(3)
    correct, groups = clustered_items(rng, 200, 0.75)
    better = np.where(rng.random(correct.size) < 0.3, 1.0, correct)  # fixes ~30% of the errors
    diff = paired_bootstrap(better, correct, groups=groups, seed=0)
    assert diff.difference > 0 and diff.low > 0 and diff.p_value < 0.01
    same = paired_bootstrap(correct, correct.copy(), groups=groups, seed=0)
    assert same.difference == 0 and same.p_value == 1.0


def test_paired_bootstrap_p_values_are_uniform_under_the_null():
    rng = np.random.default_rng(4)
    ps = []
    for t in range(200):
        a, groups = clustered_items(rng, 50, 0.7)
        b = (rng.random(a.size) < 0.7).astype(float)  # same true accuracy, independent errors
        ps.append(paired_bootstrap(a, b, groups=groups, n_resamples=500, seed=t).p_value)
    assert 0.02 <= np.mean(np.array(ps) < 0.05) <= 0.10


def test_mcnemar_exact():
    a = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0], bool)
    b = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 0], bool)
    assert mcnemar_p(a, b) == pytest.approx(2 * 0.5**8)
    assert mcnemar_p(a, a) == 1.0


def test_small_sample_flag():
    assert MIN_TEST_ITEMS == 100
    assert is_small_sample(72) and not is_small_sample(100)
