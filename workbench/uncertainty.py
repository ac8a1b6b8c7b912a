"""How sure a reported number is: intervals, paired comparisons and small-sample flags.

Every interval the workbench prints comes from here, so one page of docs/METHODS.md ("Intervals,
selection and comparisons") describes them all:

- :func:`t_interval`: the mean of a few seeds with Student's t quantile (n-1 degrees of freedom),
  never 1.96 with n = 2; one value gives an interval of NaNs (shown as "n=1"), never ± 0.
- :func:`ratio_bootstrap`: a statistic that is a ratio of per-item sums (accuracy = correct / items,
  micro-F1 = 2tp / (2tp + fp + fn)) with a percentile interval from resampling whole sentences
  (items of one sentence are not independent), Efron & Tibshirani 1993; Koehn 2004.
- :func:`paired_bootstrap`: the difference of two such statistics on the same items (two layers,
  two runs, two methods), resampled together, with a two-sided bootstrap p-value.
- :func:`paired_on_shared_groups`: the same, for two tables of per-sentence sums (two runs),
  paired on the sentences both hold.
- :func:`mcnemar_p`: the exact McNemar test for two classifiers' per-item correctness.
- :func:`wilson_interval`: a test accuracy's own binomial sampling error (the floor no reported
  interval may go below).
- :data:`MIN_TEST_ITEMS`: below it a result is flagged as a small sample; :data:`MIN_WORD_TYPES`: the
  same for a per-word average over too few distinct words.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from bertology.errors import ConfigError

MIN_TEST_ITEMS = 100
"""Fewer test items than this and a table row carries ``small_sample = True`` (the dashboard warns)."""

MIN_WORD_TYPES = 50
"""Fewer distinct words than this under a per-word average (self-similarity, MEV) and the figure
describes a handful of frequent, mostly function words rather than the model: ``bertology
embeddings`` warns and the Embeddings page says so."""

DEFAULT_RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """An estimate with its two-sided interval. ``low``/``high`` are NaN when ``n`` is too small for
    one (a single seed); ``method`` names how it was computed (``"t"``, ``"bootstrap"``, ``"wilson"``)."""

    estimate: float
    low: float
    high: float
    n: int
    method: str
    confidence: float = 0.95

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def as_dict(self, prefix: str = "") -> dict[str, float | int | str]:
        return {f"{prefix}{k}": v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class PairedComparison:
    """``a - b`` on the same items: the difference, its interval, a two-sided p-value for "no
    difference", the number of resampling units (sentences) and items."""

    difference: float
    low: float
    high: float
    p_value: float
    n_groups: int
    n_items: int
    method: str
    confidence: float = 0.95

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be between 0 and 1, got {confidence!r}")


def t_interval(values, confidence: float = 0.95) -> Interval:
    """Mean of ``values`` (e.g. one score per seed) with a Student-t interval:
    ``mean ± t_{(1+c)/2, n-1} · sd / √n``. One value: low/high are NaN (an interval from one seed
    does not exist); NaN values are dropped."""
    _check_confidence(confidence)
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    n = int(x.size)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, "t", confidence)
    mean = float(x.mean())
    if n == 1:
        return Interval(mean, math.nan, math.nan, 1, "t", confidence)
    from scipy import stats  # lazily: scipy.stats costs ~1 s of CPU to import (the dashboard's pages)

    half = float(stats.t.ppf((1 + confidence) / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return Interval(mean, mean - half, mean + half, n, "t", confidence)


def wilson_interval(correct: int, n: int, confidence: float = 0.95) -> Interval:
    """Wilson score interval of a proportion ``correct / n``: the sampling error of a test accuracy
    measured on ``n`` independent items."""
    _check_confidence(confidence)
    if n <= 0:
        return Interval(math.nan, math.nan, math.nan, 0, "wilson", confidence)
    from scipy import stats

    z = float(stats.norm.ppf((1 + confidence) / 2))
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n, "wilson", confidence)


SHARED_TEST_INTERVAL = "t over seeds (+) sentence bootstrap"
PER_SEED_TEST_INTERVAL = "max(t over seeds, sentence bootstrap)"
"""The names of the two ways :func:`combine_seed_and_sentence` joins its parts (an ``interval`` column)."""


def combine_seed_and_sentence(t: Interval, below: float, above: float, shared: bool) -> tuple[float, float, str]:
    """One interval around ``t.estimate`` from the seeds' t interval ``t`` and a sentence bootstrap's
    two sides (``below`` = estimate - low, ``above`` = high - estimate). Shared test set: the two
    errors are independent, each side is ``sqrt(bootstrap² + t half width²)``; a test set per seed:
    the t interval already holds the test sampling error and the bootstrap is a floor (each side
    the wider). Returns ``(low, high, method name)``."""
    if shared:
        return (
            t.estimate - math.hypot(below, t.half_width),
            t.estimate + math.hypot(above, t.half_width),
            SHARED_TEST_INTERVAL,
        )
    return min(t.low, t.estimate - below), max(t.high, t.estimate + above), PER_SEED_TEST_INTERVAL


def group_sums(values, groups) -> tuple[np.ndarray, np.ndarray]:
    """Per-group sums of per-item ``values`` ``[n_items]`` or ``[P, n_items]``:
    ``(groups [G] sorted, sums [G] or [P, G])`` -- what a bootstrap over groups (sentences) resamples."""
    labels, codes = np.unique(np.asarray(groups), return_inverse=True)
    values = np.asarray(values, dtype=float)
    sums = np.stack([np.bincount(codes, weights=v, minlength=len(labels)) for v in np.atleast_2d(values)])
    return labels, sums if values.ndim > 1 else sums[0]


def _resample_weights(n_groups: int, n_resamples: int, seed: int) -> np.ndarray:
    """[n_resamples, n_groups] how often each group is drawn in each bootstrap sample."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_groups, np.full(n_groups, 1.0 / n_groups), size=n_resamples).astype(float)


def _as_items(numerator, denominator, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    num = np.asarray(numerator, dtype=float)
    den = np.ones_like(num) if denominator is None else np.asarray(denominator, dtype=float)
    grp = np.arange(num.size) if groups is None else np.asarray(groups)
    if not (num.shape == den.shape == grp.shape) or num.ndim != 1:
        raise ValueError(
            f"numerator {num.shape}, denominator {den.shape} and groups {grp.shape} must be 1-D arrays of one length"
        )
    return num, den, grp


def ratio_bootstrap(
    numerator,
    denominator=None,
    groups=None,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Interval:
    """``sum(numerator) / sum(denominator)`` over items with a percentile bootstrap interval that
    resamples whole ``groups`` (sentence ids; default: every item its own group).

    numerator, denominator, groups: [n_items]. Accuracy: numerator = 1 if correct, denominator = 1
    (the default). Micro-F1: numerator = 2·tp, denominator = 2·tp + fp + fn per item.
    """
    _check_confidence(confidence)
    num, den, grp = _as_items(numerator, denominator, groups)
    if num.size == 0 or den.sum() == 0:
        return Interval(math.nan, math.nan, math.nan, int(num.size), "bootstrap", confidence)
    estimate = float(num.sum() / den.sum())
    num_g, den_g = group_sums(num, grp)[1], group_sums(den, grp)[1]
    if num_g.size < 2:
        return Interval(estimate, math.nan, math.nan, int(num.size), "bootstrap", confidence)
    w = _resample_weights(num_g.size, n_resamples, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        samples = (w @ num_g) / (w @ den_g)
    low, high = np.nanquantile(samples, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Interval(estimate, float(low), float(high), int(num.size), "bootstrap", confidence)


def paired_bootstrap(
    numerator_a,
    numerator_b,
    denominator_a=None,
    denominator_b=None,
    groups=None,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> PairedComparison:
    """Statistic(a) - statistic(b) on the same items (each a ratio of sums as in
    :func:`ratio_bootstrap`), both resampled with the same sentences. The p-value is two-sided:
    twice the smaller share of resampled differences on either side of zero (floored at
    1 / n_resamples)."""
    _check_confidence(confidence)
    num_a, den_a, grp = _as_items(numerator_a, denominator_a, groups)
    num_b, den_b, _ = _as_items(numerator_b, denominator_b, grp)
    diff = float(num_a.sum() / den_a.sum() - num_b.sum() / den_b.sum())
    sums = [group_sums(v, grp)[1] for v in (num_a, den_a, num_b, den_b)]
    n_groups = sums[0].size
    if n_groups < 2:
        return PairedComparison(
            diff, math.nan, math.nan, math.nan, n_groups, int(num_a.size), "paired bootstrap", confidence
        )
    w = _resample_weights(n_groups, n_resamples, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        samples = (w @ sums[0]) / (w @ sums[1]) - (w @ sums[2]) / (w @ sums[3])
    samples = samples[~np.isnan(samples)]
    low, high = np.quantile(samples, [(1 - confidence) / 2, (1 + confidence) / 2])
    if np.all(samples == 0):
        p = 1.0
    else:
        p = min(1.0, 2 * min(np.mean(samples <= 0), np.mean(samples >= 0)))
        p = max(p, 1.0 / samples.size)
    return PairedComparison(
        diff, float(low), float(high), float(p), n_groups, int(num_a.size), "paired bootstrap", confidence
    )


def paired_on_shared_groups(
    groups_a,
    numerator_a,
    denominator_a,
    groups_b,
    numerator_b,
    denominator_b,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> tuple[PairedComparison, int]:
    """:func:`paired_bootstrap` of two ratio statistics measured on two tables of per-group sums
    (e.g. two runs' per-sentence correct / scored counts, ``[G_a]`` and ``[G_b]``), paired on the
    groups both hold. Returns the comparison on the shared groups and how many groups of either
    side had no partner (0 when the two ran on the same test sentences)."""
    a = (
        pd.DataFrame(
            {
                "g": np.asarray(groups_a),
                "na": np.asarray(numerator_a, dtype=float),
                "da": np.asarray(denominator_a, dtype=float),
            }
        )
        .groupby("g")
        .sum()
    )
    b = (
        pd.DataFrame(
            {
                "g": np.asarray(groups_b),
                "nb": np.asarray(numerator_b, dtype=float),
                "db": np.asarray(denominator_b, dtype=float),
            }
        )
        .groupby("g")
        .sum()
    )
    both = a.join(b, how="inner")
    unmatched = len(a) + len(b) - 2 * len(both)
    if both.empty:
        return PairedComparison(math.nan, math.nan, math.nan, math.nan, 0, 0, "paired bootstrap", confidence), unmatched
    return paired_bootstrap(
        both["na"], both["nb"], both["da"], both["db"], confidence=confidence, n_resamples=n_resamples, seed=seed
    ), unmatched


def mcnemar_p(correct_a, correct_b) -> float:
    """Exact two-sided McNemar p-value for two classifiers scored on the same items
    (binomial test on the discordant pairs)."""
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"correct_a {a.shape} and correct_b {b.shape} must have one shape")
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    if only_a + only_b == 0:
        return 1.0
    from scipy import stats

    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def is_small_sample(n_items: int, minimum: int = MIN_TEST_ITEMS) -> bool:
    """True when ``n_items`` test items are fewer than ``minimum`` (default :data:`MIN_TEST_ITEMS`)."""
    return int(n_items) < minimum
