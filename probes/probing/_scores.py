"""From logits to scores to a Tenney-style table: per-probe classification metrics, the expected
layer of a scalar mix (``E_s[l]``) and of cumulative scores (``E_Delta[l]``), intervals that combine
a bootstrap over test sentences with the variation over seeds, and the one-row-per-task summary
whose best layer is chosen on dev and reported on test (docs/METHODS.md, "Intervals, selection and
comparisons")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from bertology.errors import ConfigError
from bertology.uncertainty import (
    PER_SEED_TEST_INTERVAL,
    SHARED_TEST_INTERVAL,
    Interval,
    combine_seed_and_sentence,
    group_sums,
    is_small_sample,
    paired_bootstrap,
    paired_on_shared_groups,
    ratio_bootstrap,
    t_interval,
    wilson_interval,
)

INTERVAL_METRICS = ("accuracy", "micro_f1")
"""The scores that get an interval: both are ratios of per-item sums, so a sentence bootstrap applies."""

SELECTED_ON = "dev"
"""The split every reported argmax (best layer, best combination) is chosen on."""


def _decisions(logits: torch.Tensor, y: np.ndarray, multilabel: bool) -> tuple[np.ndarray, np.ndarray]:
    """Predicted and gold label decisions, each ``[P, n, K]`` bool, from logits ``[P, n, K]``."""
    logits = logits.cpu()
    P, n, K = logits.shape
    if multilabel:
        pred = (logits > 0).numpy()
        gold = np.broadcast_to(np.asarray(y, dtype=bool), pred.shape)
    else:
        pred = F.one_hot(logits.argmax(-1), K).bool().numpy()
        gold = np.broadcast_to(np.eye(K, dtype=bool)[np.asarray(y)], pred.shape)
    return pred, gold


def classification_metrics(logits: torch.Tensor, y: np.ndarray, multilabel: bool) -> dict[str, np.ndarray]:
    """Per-probe ``accuracy``, ``micro_f1``, ``macro_f1`` (each ``[P]``) from logits ``[P, n, K]``.

    Single label: micro-F1 over all labels equals accuracy. Multi-label: accuracy is exact match,
    F1 counts label decisions (sigmoid > 0.5).
    """
    pred, gold = _decisions(logits, y, multilabel)
    tp = (pred & gold).sum(1).astype(float)  # [P, K]
    fp = (pred & ~gold).sum(1).astype(float)
    fn = (~pred & gold).sum(1).astype(float)
    micro = 2 * tp.sum(1) / np.maximum(2 * tp.sum(1) + fp.sum(1) + fn.sum(1), 1)
    present = gold[0].any(0) | pred.any(1)  # labels seen in gold or predicted  [P, K]
    f1 = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
    macro = (f1 * present).sum(1) / np.maximum(present.sum(1), 1)
    accuracy = (pred == gold).all(-1).mean(1)
    return {"accuracy": accuracy, "micro_f1": micro, "macro_f1": macro}


def item_statistics(logits: torch.Tensor, y: np.ndarray, multilabel: bool) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-example numerator and denominator ``([P, n], [P, n])`` of each score in
    :data:`INTERVAL_METRICS`, so that over any set of examples the score is ``sum(num) / sum(den)``
    (what a sentence bootstrap resamples): accuracy = (correct, 1), micro-F1 = (2·tp, 2·tp + fp + fn)
    with tp/fp/fn counted over the example's label decisions."""
    pred, gold = _decisions(logits, y, multilabel)
    tp = (pred & gold).sum(-1).astype(float)  # [P, n]
    fp = (pred & ~gold).sum(-1).astype(float)
    fn = (~pred & gold).sum(-1).astype(float)
    correct = (pred == gold).all(-1).astype(float)
    return {"accuracy": (correct, np.ones_like(correct)), "micro_f1": (2 * tp, 2 * tp + fp + fn)}


def sentence_sums(values: np.ndarray, sentence_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-sentence sums of per-example ``values [P, n]``: ``(sentences [G] sorted, sums [P, G])``."""
    sentences, sums = group_sums(np.atleast_2d(values), sentence_ids)
    return sentences, sums


def seed_and_sentence_interval(
    seed_scores: Sequence[float],
    test_sums: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    *,
    n_items: int | None = None,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    bootstrap_seed: int = 0,
) -> dict[str, Any]:
    """The interval of a test score averaged over probe seeds (docs/METHODS.md, "Intervals,
    selection and comparisons").

    ``seed_scores``: the test score of each seed ``[S]``. ``test_sums``: per seed, its test
    sentences ``[G_s]`` and the per-sentence numerator and denominator sums ``[G_s]`` of the score
    (:func:`item_statistics`, :func:`sentence_sums`). Two parts:

    * seed variation: a Student-t interval over the ``S`` seed scores (:func:`bertology.uncertainty.t_interval`);
    * test sampling: a percentile bootstrap resampling whole test sentences of the pooled ratio
      (:func:`bertology.uncertainty.ratio_bootstrap`).

    When every seed shares one test set (``split = "fixed"``) the two errors are independent and
    each side's half width is ``sqrt(bootstrap² + t²)``. When each seed has its own test set
    (``split = "per_seed"``) the t interval already holds the test sampling error; the bootstrap
    over the union of the seeds' test sentences is then a floor: each side is the wider of the two.
    ``n_items``: the test examples behind the pooled score (one test set's when shared, the sum
    otherwise); given, the interval is widened to hold at least the Wilson interval of that many
    independent examples (:func:`bertology.uncertainty.wilson_interval`), the floor where a
    percentile bootstrap collapses (every test example right gives [1, 1]).
    One seed: no interval (``low``/``high`` NaN, ``n_seeds`` 1), never ± 0. Bounds are clipped to
    [0, 1]. Returns ``estimate, low, high, n_seeds`` and ``interval`` (the method's name).
    """
    t = t_interval(seed_scores, confidence)
    out = {"estimate": t.estimate, "low": math.nan, "high": math.nan, "n_seeds": t.n, "interval": "n=1"}
    if t.n < 2 or not test_sums:
        return out
    shared = all(np.array_equal(test_sums[0][0], sents) for sents, _, _ in test_sums)
    if shared:
        num, den = sum(s[1] for s in test_sums), sum(s[2] for s in test_sums)
    else:
        num, den = np.concatenate([s[1] for s in test_sums]), np.concatenate([s[2] for s in test_sums])
    boot = ratio_bootstrap(num, den, confidence=confidence, n_resamples=n_resamples, seed=bootstrap_seed)
    low, high, method = combine_seed_and_sentence(t, boot.estimate - boot.low, boot.high - boot.estimate, shared)
    if n_items:
        floor = wilson_interval(int(round(t.estimate * n_items)), int(n_items), confidence)
        low, high = min(low, floor.low), max(high, floor.high)
    out.update(low=max(0.0, low), high=min(1.0, high), interval=method)
    return out


def expected_layer(weights: Sequence[float], layers: Sequence[int] | None = None) -> float:
    """Centre of gravity ``E_s[l] = sum_l l * s_l / sum_l s_l`` of mix weights ``[L]``."""
    w = np.asarray(weights, dtype=float)
    l = np.arange(len(w)) if layers is None else np.asarray(layers, dtype=float)
    return float((l * w).sum() / w.sum())


def cumulative_deltas(scores: Sequence[float]) -> np.ndarray:
    """Differential scores ``Delta(l) = score(P(l)) - score(P(l-1))`` for ``l = 1..L-1`` ``[L-1]``."""
    s = np.asarray(scores, dtype=float)
    return s[1:] - s[:-1]


def cumulative_expected_layer(
    scores: Sequence[float], layers: Sequence[int] | None = None, clip_negative: bool = False
) -> float:
    """``E_Delta[l] = sum_l l * Delta(l) / sum_l Delta(l)`` from cumulative scores ``[L]`` (l >= 1).

    Tenney et al. (2019a): the raw differentials ``Delta(l) = score(l) - score(l-1)``, negative
    ones included (the default). ``sum_l Delta(l)`` telescopes to ``score(L-1) - score(0)``; when
    it is ``<= 0`` (no net gain over layer 0) the expected layer is undefined and NaN is returned.
    With negative differentials the value may fall outside ``[1, L-1]``.

    ``clip_negative=True`` (the workbench's earlier definition): negative differentials count as 0,
    so the expected layer stays inside the layer range; NaN when no layer adds anything.
    """
    delta = cumulative_deltas(scores)
    if clip_negative:
        delta = np.clip(delta, 0, None)
    l = np.arange(1, len(delta) + 1) if layers is None else np.asarray(layers, dtype=float)[1:]
    total = delta.sum()
    return float((l * delta).sum() / total) if total > 0 else float("nan")


def confidence_intervals(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds with a Student-t 95% interval (seed variation only): columns
    ``[...keys], mean, sd, n, ci95, low, high`` (:func:`bertology.results.mean_ci`; one seed: NaN),
    keys = every column except ``seed`` and ``value``. The intervals the study reports also hold the
    test set's sampling error: :func:`layer_intervals`."""
    from bertology.results import mean_ci

    return mean_ci(df, [c for c in df.columns if c not in ("seed", "value")])


INTERVAL_KEYS = ["task", "mode", "probe", "pooling", "control", "layer"]
# after a table's keys: the measure, its dev score (for choosing), its test score with its interval
# and what the interval rests on -- the columns every probe's interval table ends with
SCORE_INTERVAL_COLUMNS = [
    "metric",
    "dev_score",
    "score",
    "low",
    "high",
    "n_seeds",
    "n_test",
    "small_sample",
    "interval",
]
LAYER_INTERVAL_COLUMNS = [*INTERVAL_KEYS, *SCORE_INTERVAL_COLUMNS]


def layer_intervals(df: pd.DataFrame, metrics: Sequence[str] = INTERVAL_METRICS) -> pd.DataFrame:
    """One row per probe (task, mode, probe, pooling, control, layer) and metric from score rows of
    :func:`bertology.probes.probing.edge.probe_arrays`: ``dev_score`` and ``score`` (test), each the
    mean over seeds; ``low``/``high`` the 95% interval of the test score and ``n_seeds``, ``n_test``
    (test examples, smallest over seeds), ``interval`` (how it was computed) from the runner's
    ``split == "interval"`` rows (:func:`seed_and_sentence_interval`); ``small_sample``:
    :func:`bertology.uncertainty.is_small_sample` of ``n_test``. Rows without interval rows (tables
    written before intervals existed) get a t interval over seeds and ``n_test`` NaN."""
    keys = [k for k in INTERVAL_KEYS if k in df.columns]
    scored = df[df["metric"].isin(metrics) & df["split"].isin(["dev", "test"])]
    means = scored.pivot_table(index=[*keys, "metric"], columns="split", values="value", aggfunc="mean")
    means = means.reindex(columns=["dev", "test"]).rename(columns={"dev": "dev_score", "test": "score"})
    inter = df[df["split"] == "interval"]
    out = []
    for key, row in means.iterrows():
        task_key, metric = key[:-1], key[-1]
        mine = inter[(inter[keys] == pd.Series(task_key, index=keys)).all(axis=1)].set_index("metric")["value"]
        test = scored[
            (scored["split"] == "test")
            & (scored["metric"] == metric)
            & (scored[keys] == pd.Series(task_key, index=keys)).all(axis=1)
        ]["value"]
        n_test: float  # test items; NaN for tables written before intervals existed
        if f"{metric}_low" in mine.index:
            low, high = mine[f"{metric}_low"], mine[f"{metric}_high"]
            n_seeds, n_test = int(mine["n_seeds"]), int(mine["n_test"])
            method = (
                "n=1"
                if n_seeds < 2
                else SHARED_TEST_INTERVAL
                if mine.get("shared_test", 1.0)
                else PER_SEED_TEST_INTERVAL
            )
        else:
            t = t_interval(test.values)
            low, high, n_seeds, n_test, method = t.low, t.high, t.n, math.nan, "t over seeds"
        small = pd.NA if pd.isna(n_test) else is_small_sample(int(n_test))
        out.append(
            {
                **dict(zip(keys, task_key)),
                "metric": metric,
                "dev_score": row["dev_score"],
                "score": row["score"],
                "low": low,
                "high": high,
                "n_seeds": n_seeds,
                "n_test": n_test,
                "small_sample": small,
                "interval": method,
            }
        )
    return _typed(
        pd.DataFrame(out).reindex(columns=[c for c in LAYER_INTERVAL_COLUMNS if c in keys or c not in INTERVAL_KEYS])
    )


LAYER_DIFFERENCE_COLUMNS = [
    "task",
    "mode",
    "probe",
    "pooling",
    "metric",
    "layer",
    "reference_layer",
    "selected_on",
    "score",
    "reference_score",
    "difference",
    "low",
    "high",
    "p_value",
    "paired_low",
    "paired_high",
    "significant",
    "n_sentences",
    "n_seeds",
    "interval",
]


def layer_differences(
    sentences: pd.DataFrame,
    intervals: pd.DataFrame,
    metric: str = "accuracy",
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    bootstrap_seed: int = 0,
) -> pd.DataFrame:
    """Every layer against the best layer chosen on dev, paired on the same test sentences.

    ``sentences``: per-layer test sums (:data:`bertology.probes.probing._runners.SENTENCE_COLUMNS`,
    ``probe_layers(..., test_sentences=True)``); ``intervals``: :func:`layer_intervals` of the same
    runs (its ``dev_score`` picks ``reference_layer``, the dev-best per-layer probe). Per task,
    probe and pooling (mode ``per_layer``, controls ignored) and every other layer:
    ``difference`` = score(layer) - score(reference) on test, both pooled over seeds, with a paired
    bootstrap over test sentences (each sentence's sums over the seeds whose test set held it,
    :func:`bertology.uncertainty.paired_bootstrap`) whose interval is widened by the seeds' t
    interval of the per-seed differences exactly as a single score's interval is
    (:func:`combine_seed_and_sentence`); ``p_value``: the paired bootstrap's (test sampling only),
    with that bootstrap's own interval ``paired_low, paired_high`` (the interval the p-value agrees
    with: with several seeds ``low, high`` is wider, so a small p beside an interval that holds 0
    means the difference is clear for these probes but not across seeds); ``significant``: the
    (widened) interval excludes 0. One seed: the bootstrap alone (both intervals are the same).
    """
    keys = ["task", "mode", "probe", "pooling"]
    part = sentences[
        (sentences["metric"] == metric) & (sentences["mode"] == "per_layer") & ~sentences["control"].astype(bool)
    ]
    ref = intervals[
        (intervals["metric"] == metric) & (intervals["mode"] == "per_layer") & ~intervals["control"].astype(bool)
    ]
    rows = []
    for key, group in part.groupby(keys, sort=False):
        mine = ref[(ref[keys] == pd.Series(key, index=keys)).all(axis=1)]
        if mine.empty or mine["dev_score"].isna().all():
            continue
        best = int(mine.loc[mine["dev_score"].idxmax(), "layer"])
        pooled = group.pivot_table(
            index="sentence", columns="layer", values=["numerator", "denominator"], aggfunc="sum", fill_value=0.0
        )
        by_seed = group.groupby(["layer", "seed"])[["numerator", "denominator"]].sum()
        seed_scores = (by_seed["numerator"] / by_seed["denominator"]).unstack("seed")  # [layers, seeds]
        shared = group.groupby("seed")["sentence"].apply(lambda s: tuple(sorted(set(s)))).nunique() == 1
        for layer in sorted(group["layer"].unique()):
            if layer == best:
                continue
            paired = paired_bootstrap(
                pooled["numerator"][layer],
                pooled["numerator"][best],
                pooled["denominator"][layer],
                pooled["denominator"][best],
                confidence=confidence,
                n_resamples=n_resamples,
                seed=bootstrap_seed,
            )
            low, high, method = paired.low, paired.high, "paired sentence bootstrap"
            seed_diffs = (seed_scores.loc[layer] - seed_scores.loc[best]).dropna().to_numpy()
            if seed_diffs.size >= 2 and not math.isnan(low):
                t = t_interval(seed_diffs, confidence)
                t = Interval(
                    paired.difference,
                    paired.difference - t.half_width,
                    paired.difference + t.half_width,
                    t.n,
                    t.method,
                    confidence,
                )
                low, high, method = combine_seed_and_sentence(
                    t, paired.difference - paired.low, paired.high - paired.difference, shared
                )
            score = pooled["numerator"][layer].sum() / pooled["denominator"][layer].sum()
            rows.append(
                {
                    **dict(zip(keys, key)),
                    "metric": metric,
                    "layer": int(layer),
                    "reference_layer": best,
                    "selected_on": SELECTED_ON,
                    "score": score,
                    "reference_score": score - paired.difference,
                    "difference": paired.difference,
                    "low": low,
                    "high": high,
                    "p_value": paired.p_value,
                    "paired_low": paired.low,
                    "paired_high": paired.high,
                    "significant": bool(low > 0 or high < 0),
                    "n_sentences": paired.n_groups,
                    "n_seeds": int(seed_scores.shape[1]),
                    "interval": method,
                }
            )
    return pd.DataFrame(rows, columns=LAYER_DIFFERENCE_COLUMNS)


BEST_LAYER_COMPARISON_COLUMNS = [
    "task",
    "a",
    "b",
    "layer_a",
    "layer_b",
    "selected_on",
    "score_a",
    "score_b",
    "difference",
    "low",
    "high",
    "p_value",
    "significant",
    "n_sentences",
    "unmatched_sentences",
    "n_items",
    "small_sample",
    "comparison",
]


def compare_best_layers(
    sentences: pd.DataFrame,
    summary: pd.DataFrame,
    by: str,
    metric: str = "accuracy",
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Every pair of runs (models, variants: the values of column ``by``) on each task, each at its
    own best layer chosen on dev, paired on the test sentences both were scored on.

    ``sentences``: per-layer test sums with a ``by`` column (:data:`~bertology.probes.probing._runners.SENTENCE_COLUMNS`);
    ``summary``: :func:`summarise` rows with a ``by`` column (``best_layer`` per run and task).
    ``difference`` = score(a) - score(b) (pooled over seeds), with a paired bootstrap over the
    shared test sentences (:func:`bertology.uncertainty.paired_on_shared_groups`; test sampling
    only: with one probe seed per run the seeds' own variation is not in it). ``unmatched_sentences``
    > 0 means the two were not tested on the same sentences. Returns :data:`BEST_LAYER_COMPARISON_COLUMNS`.
    """
    part = sentences[
        (sentences["metric"] == metric) & (sentences["mode"] == "per_layer") & ~sentences["control"].astype(bool)
    ]
    rows = []
    for task, group in part.groupby("task", sort=False):
        chosen = summary[(summary["task"] == task) & summary["best_layer"].notna()].set_index(by)["best_layer"]
        runs = [r for r in dict.fromkeys(group[by]) if r in chosen.index]
        at_best = {r: group[(group[by] == r) & (group["layer"] == int(chosen[r]))] for r in runs}
        for i, a in enumerate(runs):
            for b in runs[i + 1 :]:
                sa, sb = at_best[a], at_best[b]
                cmp, unmatched = paired_on_shared_groups(
                    sa["sentence"],
                    sa["numerator"],
                    sa["denominator"],
                    sb["sentence"],
                    sb["numerator"],
                    sb["denominator"],
                    confidence=confidence,
                    n_resamples=n_resamples,
                    seed=seed,
                )
                n_items = int(sa[sa["sentence"].isin(sb["sentence"])]["denominator"].sum())
                rows.append(
                    {
                        "task": task,
                        "a": a,
                        "b": b,
                        "layer_a": int(chosen[a]),
                        "layer_b": int(chosen[b]),
                        "selected_on": SELECTED_ON,
                        "score_a": sa["numerator"].sum() / sa["denominator"].sum(),
                        "score_b": sb["numerator"].sum() / sb["denominator"].sum(),
                        "difference": cmp.difference,
                        "low": cmp.low,
                        "high": cmp.high,
                        "p_value": cmp.p_value,
                        "significant": bool(cmp.low > 0 or cmp.high < 0),
                        "n_sentences": cmp.n_groups,
                        "unmatched_sentences": unmatched,
                        "n_items": n_items,
                        "small_sample": is_small_sample(n_items),
                        "comparison": "paired sentence bootstrap",
                    }
                )
    return pd.DataFrame(rows, columns=BEST_LAYER_COMPARISON_COLUMNS)


SUMMARY_COLUMNS = [
    "task",
    "selected_on",
    "best_layer",
    "best_layer_dev_score",
    "best_layer_score",
    "best_layer_low",
    "best_layer_high",
    "expected_layer_mix",
    "mix_score",
    "mix_low",
    "mix_high",
    "expected_layer_cumulative",
    "n_seeds",
    "n_test",
    "small_sample",
]


def summarise(
    df: pd.DataFrame,
    metric: str = "accuracy",
    split: str = "test",
    select_on: str = SELECTED_ON,
    clip_negative: bool = False,
) -> pd.DataFrame:
    """Tenney-style Table 1 from :func:`probe_layers` rows of several modes.

    One row per task: ``best_layer``, the per-layer probe with the highest mean ``select_on`` (dev)
    score over seeds (``selected_on`` names that split; ``"test"`` only when the rows hold no dev
    scores), its ``best_layer_dev_score`` and its ``best_layer_score`` on ``split`` (test) with the
    95% interval ``best_layer_low``/``best_layer_high`` (:func:`layer_intervals`);
    ``expected_layer_mix`` (E_s[l] of the mean mix weights), ``mix_score`` (+ ``mix_low``,
    ``mix_high``), ``expected_layer_cumulative`` (E_Delta[l] from the mean cumulative scores over
    seeds, :func:`cumulative_expected_layer` with ``clip_negative``; default the paper's raw
    differentials); ``n_seeds``, ``n_test`` (test examples) and ``small_sample`` (fewer than
    :data:`bertology.uncertainty.MIN_TEST_ITEMS`). Missing modes give NaN. Control rows are ignored.
    """
    if split != "test" or select_on not in ("dev", "test"):
        raise ConfigError(
            f"summarise reports the test split chosen on dev or test, got split={split!r}, select_on={select_on!r}"
        )
    d = df[~df["control"].astype(bool)] if "control" in df else df
    rows = []
    for task, t in d.groupby("task"):
        row: dict[str, Any] = {"task": task}
        intervals = layer_intervals(t, [metric])
        per = intervals[intervals["mode"] == "per_layer"].set_index("layer") if "mode" in intervals else intervals
        if len(per):
            chooser = "dev_score" if select_on == "dev" and per["dev_score"].notna().any() else "score"
            best = int(per[chooser].idxmax())
            b = per.loc[best]
            row.update(
                selected_on="dev" if chooser == "dev_score" else split,
                best_layer=best,
                best_layer_dev_score=b["dev_score"],
                best_layer_score=b["score"],
                best_layer_low=b["low"],
                best_layer_high=b["high"],
                n_seeds=b["n_seeds"],
                n_test=b["n_test"],
                small_sample=b["small_sample"],
            )
        mix = intervals[intervals["mode"] == "mix"]
        if len(mix):
            m = mix.iloc[0]
            row.update(mix_score=m["score"], mix_low=m["low"], mix_high=m["high"])
            for k in ("n_seeds", "n_test", "small_sample"):
                row.setdefault(k, m[k])
        w = t[(t["mode"] == "mix") & (t["metric"] == "mix_weight")].groupby("layer")["value"].mean()
        if len(w):
            row["expected_layer_mix"] = expected_layer(w.values, w.index.values)
        scores = t[(t["metric"] == metric) & (t["split"] == split)]
        cum = scores[scores["mode"] == "cumulative"].groupby("layer")["value"].mean().sort_index()
        if len(cum) > 1:
            row["expected_layer_cumulative"] = cumulative_expected_layer(
                cum.values, cum.index.values, clip_negative=clip_negative
            )
        rows.append(row)
    return _typed(pd.DataFrame(rows).reindex(columns=SUMMARY_COLUMNS))


def _typed(table: pd.DataFrame) -> pd.DataFrame:
    """Counts as nullable integers and the small-sample flag as a nullable boolean (NA = unknown)."""
    for column in ("n_seeds", "n_test", "best_layer"):
        if column in table:
            table[column] = pd.to_numeric(table[column]).round().astype("Int64")
    if "small_sample" in table:
        table["small_sample"] = table["small_sample"].astype("boolean")
    return table
