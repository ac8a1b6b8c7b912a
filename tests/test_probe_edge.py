"""Edge probing on planted features: the label lives only at layer k."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bertology.probes.probing.edge import (
    ProbeConfig,
    confidence_intervals,
    cumulative_deltas,
    cumulative_expected_layer,
    expected_layer,
    layer_differences,
    layer_intervals,
    probe_arrays,
    seed_and_sentence_interval,
    sentence_sums,
    span_index,
    summarise,
)
from bertology.probes.probing.synthetic import planted_task
from bertology.probes.probing.tasks import EdgeExample, EdgeTask, split_by_sentence
from bertology.uncertainty import wilson_interval

SMALL = dict(proj_dim=32, hidden_dim=32, max_epochs=15, patience=3)
K_LAYER = 2

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def planted():
    return planted_task(n_layers=5, n_words=1500, dim=16, signal_layers={K_LAYER: 2.0}, seed=0)


@pytest.fixture(scope="module")
def all_modes(planted):
    cfg = ProbeConfig(**SMALL)
    frames = [
        probe_arrays(planted.features, planted.sentence_offsets, planted.task, mode=m, seeds=(0, 1), config=cfg)
        for m in ("per_layer", "mix", "cumulative")
    ]
    return pd.concat(frames, ignore_index=True)


def _test_acc(df, mode):
    d = df[(df["mode"] == mode) & (df.split == "test") & (df.metric == "accuracy")]
    return d.groupby("layer")["value"].mean()


def test_per_layer_peaks_at_planted_layer(all_modes):
    acc = _test_acc(all_modes, "per_layer")
    assert acc.idxmax() == K_LAYER
    assert acc[K_LAYER] > 0.9
    assert acc.drop(K_LAYER).max() < 0.45  # 4 labels: chance is 0.25


def test_scalar_mix_weights_and_expected_layer(all_modes):
    w = all_modes[all_modes.metric == "mix_weight"].groupby("layer")["value"].mean()
    assert w.idxmax() == K_LAYER and w[K_LAYER] > 0.4
    assert abs(expected_layer(w.values) - K_LAYER) < 0.5
    assert _test_acc(all_modes, "mix")[-1] > 0.9


def test_cumulative_expected_layer(all_modes):
    acc = _test_acc(all_modes, "cumulative").sort_index()
    assert acc[K_LAYER] - acc[K_LAYER - 1] > 0.5
    assert abs(cumulative_expected_layer(acc.values) - K_LAYER) < 0.5


def test_summary_table_and_intervals(all_modes, planted):
    table = summarise(all_modes)
    assert list(table.columns) == [
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
    assert len(table) == 1
    row = table.iloc[0]
    assert row.task == "planted" and row.best_layer == K_LAYER and row.selected_on == "dev"
    assert abs(row.expected_layer_mix - K_LAYER) < 0.5
    assert abs(row.expected_layer_cumulative - K_LAYER) < 0.5
    assert row.mix_score > 0.9 and row.best_layer_score > 0.9
    # the table's numbers are the score rows' means over the 2 seeds; the best layer is the dev argmax
    acc = all_modes[(all_modes.metric == "accuracy") & (all_modes.split == "test")]
    dev = all_modes[(all_modes.metric == "accuracy") & (all_modes.split == "dev") & (all_modes["mode"] == "per_layer")]
    assert dev.groupby("layer")["value"].mean().idxmax() == row.best_layer
    per = acc[acc["mode"] == "per_layer"].groupby("layer")["value"]
    assert row.best_layer_score == pytest.approx(per.mean()[K_LAYER])
    assert row.best_layer_low <= row.best_layer_score <= row.best_layer_high
    # never narrower than the test set's own sampling error (Wilson interval of n_test examples)
    wilson = wilson_interval(round(row.best_layer_score * row.n_test), int(row.n_test))
    assert row.best_layer_high - row.best_layer_low >= wilson.high - wilson.low - 1e-9
    assert row.n_seeds == 2 and row.n_test == len(split_by_sentence(planted.task, seed=0)["test"])
    assert not row.small_sample
    mix = acc[acc["mode"] == "mix"]["value"]
    assert row.mix_score == pytest.approx(mix.mean()) and row.mix_low <= row.mix_score <= row.mix_high
    weights = all_modes[all_modes.metric == "mix_weight"].groupby("layer")["value"].mean()
    assert row.expected_layer_mix == pytest.approx(expected_layer(weights.values))
    cumulative = acc[acc["mode"] == "cumulative"].groupby("layer")["value"].mean().sort_index()
    assert row.expected_layer_cumulative == pytest.approx(cumulative_expected_layer(cumulative.values))

    ci = confidence_intervals(acc)
    assert list(ci.columns) == [
        "task",
        "mode",
        "probe",
        "pooling",
        "control",
        "layer",
        "split",
        "metric",
        "mean",
        "sd",
        "n",
        "ci95",
        "low",
        "high",
    ]
    # one row per (mode, layer): 5 per-layer probes, the mix (layer -1) and 5 cumulative prefixes
    assert sorted(ci.groupby("mode")["layer"].apply(list).items()) == [
        ("cumulative", [0, 1, 2, 3, 4]),
        ("mix", [-1]),
        ("per_layer", [0, 1, 2, 3, 4]),
    ]
    assert (ci["n"] == 2).all()
    # Student's t with 1 degree of freedom, not 1.96
    np.testing.assert_allclose(ci["ci95"], stats.t.ppf(0.975, 1) * ci["sd"] / np.sqrt(2))

    intervals = layer_intervals(all_modes)
    assert set(intervals["metric"]) == {"accuracy", "micro_f1"}
    best = intervals[
        (intervals["mode"] == "per_layer") & (intervals["layer"] == K_LAYER) & (intervals["metric"] == "accuracy")
    ].iloc[0]
    assert best["score"] == pytest.approx(row.best_layer_score) and best["low"] == pytest.approx(row.best_layer_low)
    assert best["interval"] == "t over seeds (+) sentence bootstrap"


def test_best_layer_is_chosen_on_dev_not_test():
    """Layer 1 wins on test, layer 2 on dev: the summary reports layer 2 with its (lower) test score."""
    rows = [
        dict(
            task="t",
            mode="per_layer",
            probe="mlp",
            pooling="attention",
            control=False,
            layer=layer,
            seed=seed,
            split=split,
            metric="accuracy",
            value=value,
        )
        for layer, dev, test in ((0, 0.5, 0.5), (1, 0.70, 0.80), (2, 0.75, 0.72))
        for seed in (0, 1)
        for split, value in (("dev", dev), ("test", test + 0.01 * seed))
    ]
    row = summarise(pd.DataFrame(rows)).iloc[0]
    assert row.best_layer == 2 and row.selected_on == "dev"
    assert row.best_layer_dev_score == pytest.approx(0.75) and row.best_layer_score == pytest.approx(0.725)
    # rows without dev scores: chosen on test, and the table says so
    test_only = pd.DataFrame([r for r in rows if r["split"] == "test"])
    row = summarise(test_only).iloc[0]
    assert row.best_layer == 1 and row.selected_on == "test"


def test_deterministic_linear_probe_interval_is_not_zero_width():
    """A full-batch linear probe gives the same accuracy for every seed on one split; the interval
    still holds the test set's sampling error (and one seed gives no interval at all)."""
    data = planted_task(n_layers=2, n_words=1200, dim=8, signal_layers={1: 0.6}, seed=3)
    config = ProbeConfig(probe="linear", max_epochs=30)
    df = probe_arrays(data.features, data.sentence_offsets, data.task, seeds=[0, 1, 2], config=config)
    test = df[(df.split == "test") & (df.metric == "accuracy") & (df.layer == 1)]["value"]
    assert test.std() < 1e-6  # deterministic: every seed agrees
    row = summarise(df).iloc[0]
    assert row.best_layer == 1 and row.n_seeds == 3
    assert row.best_layer_high - row.best_layer_low > 0.05  # ~100 test examples: several points wide
    one = summarise(probe_arrays(data.features, data.sentence_offsets, data.task, seeds=[0], config=config)).iloc[0]
    assert one.n_seeds == 1 and np.isnan(one.best_layer_low) and np.isnan(one.best_layer_high)
    # per_seed splits: each seed draws its own sentences, the intervals say so
    own = probe_arrays(data.features, data.sentence_offsets, data.task, seeds=[0, 1, 2], config=config, split_seed=None)
    assert layer_intervals(own)["interval"].eq("max(t over seeds, sentence bootstrap)").all()


def _planted_correctness(rng, p_true, n_sentences, seed_sd, n_seeds):
    """Per seed (sentence ids, correct [n_items]) of a probe whose expected accuracy is ``p_true``:
    sentence difficulty ~ Beta with mean p_true, one shared item draw for every seed (seeds agree on
    most items, as real probes do) shifted by a seed effect of sd ``seed_sd``."""
    lengths = rng.integers(3, 12, size=n_sentences)
    sentence = np.repeat(np.arange(n_sentences), lengths)
    difficulty = rng.beta(8 * p_true, 8 * (1 - p_true), size=n_sentences)[sentence]
    uniform = rng.random(sentence.size)
    return sentence, [uniform < np.clip(difficulty + rng.normal(0, seed_sd), 0, 1) for _ in range(n_seeds)]


@pytest.mark.parametrize("seed_sd", [0.0, 0.02])
def test_intervals_cover_a_planted_true_accuracy(seed_sd):
    """Over many resampled test sets (and seed effects) the 95% interval of the mean test accuracy
    holds the planted true accuracy about 95% of the time."""
    rng = np.random.default_rng(7)
    p_true, trials, hits = 0.8, 300, 0
    for trial in range(trials):
        sentence, correct = _planted_correctness(rng, p_true, n_sentences=60, seed_sd=seed_sd, n_seeds=3)
        sums = []
        for c in correct:
            ids, num = sentence_sums(c[None].astype(float), sentence)
            sums.append((ids, num[0], sentence_sums(np.ones((1, c.size)), sentence)[1][0]))
        interval = seed_and_sentence_interval(
            [c.mean() for c in correct], sums, n_items=sentence.size, n_resamples=500, bootstrap_seed=trial
        )
        hits += interval["low"] <= p_true <= interval["high"]
    assert 0.90 <= hits / trials <= 0.995, hits / trials


def test_expected_layer_formulas():
    assert expected_layer([0, 0, 1, 0]) == 2.0
    assert expected_layer([1, 1]) == 0.5
    # deltas 0.5 at l=1 and 0.5 at l=3 -> E = 2
    assert cumulative_expected_layer([0.2, 0.7, 0.7, 1.2]) == pytest.approx(2.0)


def test_expected_layer_keeps_negative_differentials():
    scores = [0.2, 0.8, 0.6, 0.8]  # deltas +0.6 (l=1), -0.2 (l=2), +0.2 (l=3)
    assert list(cumulative_deltas(scores)) == pytest.approx([0.6, -0.2, 0.2])
    # Tenney et al.: (1*0.6 + 2*(-0.2) + 3*0.2) / (0.6 - 0.2 + 0.2) = 0.8 / 0.6
    assert cumulative_expected_layer(scores) == pytest.approx(4 / 3)
    # the earlier definition (negative deltas as 0): (0.6 + 0.6) / 0.8
    assert cumulative_expected_layer(scores, clip_negative=True) == pytest.approx(1.5)
    # layer labels other than 0..L-1 (e.g. a subset of layers)
    assert cumulative_expected_layer(scores, layers=[0, 2, 4, 6]) == pytest.approx(8 / 3)
    # no net gain over layer 0: undefined
    assert np.isnan(cumulative_expected_layer([0.5, 0.6, 0.4]))
    assert np.isnan(cumulative_expected_layer([0.5, 0.5, 0.5], clip_negative=True))
    # the summary table uses the same definition, the option restoring the clipped one
    rows = [
        dict(
            task="t",
            mode="cumulative",
            probe="mlp",
            pooling="attention",
            control=False,
            layer=l,
            seed=0,
            split="test",
            metric="accuracy",
            value=v,
        )
        for l, v in enumerate(scores)
    ]
    df = pd.DataFrame(rows)
    assert summarise(df)["expected_layer_cumulative"].iloc[0] == pytest.approx(4 / 3)
    assert summarise(df, clip_negative=True)["expected_layer_cumulative"].iloc[0] == pytest.approx(1.5)


def test_two_span_task_needs_both_spans():
    data = planted_task(n_layers=2, n_words=2500, dim=16, n_spans=2, n_labels=3, signal_layers={1: 3.0}, seed=1)
    # every word carries its hidden label at layer 1, so both spans are visible there
    offsets = data.sentence_offsets
    df = probe_arrays(
        data.features,
        offsets,
        data.task,
        seeds=(0,),
        config=ProbeConfig(proj_dim=32, hidden_dim=64, max_epochs=40, patience=5),
    )
    acc = _test_acc(df, "per_layer")
    assert acc[1] > 0.75 and acc[0] < 0.5


def test_multi_word_spans_and_multilabel():
    rng = np.random.default_rng(0)
    n_sent, L, D = 200, 2, 8
    lengths = np.full(n_sent, 6)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    feats = rng.normal(size=(L, offsets[-1], D)).astype(np.float32)
    examples = []
    for s in range(n_sent):
        a, b = rng.integers(0, 2, size=2)  # two independent binary labels
        labels = tuple(x for x, on in (("A", a), ("B", b)) if on) or ("none",)
        # span words 1..4; the cue sits on one random word inside the span
        cue = offsets[s] + 1 + rng.integers(0, 3)
        feats[1, cue, 0] += 4 * (2 * a - 1)
        feats[1, cue, 1] += 4 * (2 * b - 1)
        examples.append(EdgeExample(s, (1, 4), None, labels))
    task = EdgeTask("ml", examples, sorted({l for e in examples for l in e.labels}), "synthetic", multilabel=True)
    tokens, mask = span_index(task, offsets)
    assert tokens.shape == (n_sent, 1, 3) and mask.all()
    df = probe_arrays(
        feats,
        offsets,
        task,
        seeds=(0,),
        config=ProbeConfig(proj_dim=16, hidden_dim=16, max_epochs=60, patience=8, lr=3e-3),
    )
    f1 = df[(df.split == "test") & (df.metric == "micro_f1")].set_index("layer")["value"]
    assert f1[1] > 0.85 and f1[1] > f1[0] + 0.2


def test_fixed_combination(planted):
    # "sum of the planted layer and a noise layer" vs "noise layers only"
    weights = np.zeros((2, 5), dtype=np.float32)
    weights[0, [K_LAYER, 4]] = 1.0
    weights[1, [0, 1]] = 1.0
    df = probe_arrays(
        planted.features,
        planted.sentence_offsets,
        planted.task,
        mode="fixed",
        fixed_weights=weights,
        seeds=(0,),
        config=ProbeConfig(**SMALL),
    )
    acc = df[(df.split == "test") & (df.metric == "accuracy")]["value"].to_numpy()
    assert acc[0] > 0.8 and acc[1] < 0.45


def test_mlp_probes_in_bfloat16_match_float32(planted):
    # bfloat16 matmuls (what precision="auto" picks on AMX / AVX512-BF16 CPUs) must find the same
    # planted layer with the same accuracy as float32; parameters and predictions stay float32
    accs = {}
    for precision in ("float32", "bfloat16"):
        cfg = ProbeConfig(**SMALL, precision=precision)
        df = probe_arrays(planted.features, planted.sentence_offsets, planted.task, seeds=(0,), config=cfg)
        accs[precision] = _test_acc(df, "per_layer")
    assert accs["bfloat16"].idxmax() == accs["float32"].idxmax() == K_LAYER
    assert (accs["bfloat16"] - accs["float32"]).abs().max() < 0.05


def test_float32_mlp_probes_repeat_exactly(planted):
    cfg = ProbeConfig(**SMALL, precision="float32")
    runs = [
        probe_arrays(planted.features, planted.sentence_offsets, planted.task, seeds=(0,), config=cfg) for _ in range(2)
    ]
    scores = [r[r.metric != "seconds"]["value"].to_numpy() for r in runs]
    np.testing.assert_array_equal(scores[0], scores[1])


def test_bad_settings_are_config_errors_bad_tasks_task_errors(planted):
    from bertology.errors import ConfigError
    from bertology.probes.probing.edge import mixing_spec
    from bertology.probes.probing.tasks import TaskError

    with pytest.raises(ConfigError, match="probe must be 'mlp' or 'linear'"):
        ProbeConfig(probe="tree")
    with pytest.raises(ConfigError, match="mode must be one of"):
        mixing_spec("diagonal", 3)
    with pytest.raises(ConfigError, match="needs weights"):
        mixing_spec("fixed", 3, np.ones((1, 2)))
    with pytest.raises(ConfigError, match="layer_ids has 2 entries"):
        probe_arrays(planted.features, planted.sentence_offsets, planted.task, layer_ids=[0, 1])
    # a task that does not fit the features is the task's problem
    with pytest.raises(TaskError, match="refers to sentence"):
        span_index(planted.task, planted.sentence_offsets[:3])


def test_layer_differences_pair_layers_on_the_same_sentences():
    """Layer 0 carries nothing, layers 1 and 2 the same planted signal: against the dev-chosen best
    layer, layer 0 is clearly worse and the other signal layer is not distinguishable from it; the
    per-sentence sums add up to the reported test scores."""
    data = planted_task(n_layers=3, n_words=1500, dim=8, signal_layers={1: 1.0, 2: 1.0}, seed=5)
    config = ProbeConfig(probe="linear", max_epochs=30)
    scores, sentences = probe_arrays(
        data.features, data.sentence_offsets, data.task, seeds=[0, 1], config=config, test_sentences=True
    )
    acc = sentences[sentences.metric == "accuracy"]
    per_seed = acc.groupby(["layer", "seed"]).apply(lambda g: g.numerator.sum() / g.denominator.sum())
    reported = scores[(scores.split == "test") & (scores.metric == "accuracy")].set_index(["layer", "seed"])["value"]
    assert np.allclose(per_seed.sort_index().values, reported.sort_index().values)
    diffs = layer_differences(sentences, layer_intervals(scores)).set_index("layer")
    best = int(diffs["reference_layer"].iloc[0])
    assert best in (1, 2) and set(diffs.index) == {0, 1, 2} - {best}
    assert diffs.loc[0, "difference"] < -0.3 and diffs.loc[0, "significant"] and diffs.loc[0, "p_value"] < 0.01
    other = 3 - best
    assert diffs.loc[other, "low"] < 0 < diffs.loc[other, "high"] or abs(diffs.loc[other, "difference"]) < 0.05
    assert (diffs["selected_on"] == "dev").all() and (diffs["n_seeds"] == 2).all()
    # the p-value's own interval (test sampling only) is saved beside it: inside the seed-widened one
    assert ((diffs["paired_low"] >= diffs["low"] - 1e-12) & (diffs["paired_high"] <= diffs["high"] + 1e-12)).all()
    assert ((diffs["paired_low"] <= diffs["difference"]) & (diffs["difference"] <= diffs["paired_high"])).all()
    assert diffs.loc[0, "paired_high"] < 0  # p < 0.01 and its interval agree
    from bertology.apps.pages.probing import with_paired_interval

    shown = with_paired_interval(diffs.reset_index())
    column = list(shown.columns)
    assert column.index("paired interval (p)") + 1 == column.index("p_value") and "paired_low" not in column
    assert (
        shown["paired interval (p)"].iloc[0]
        == f"[{diffs['paired_low'].iloc[0]:.3f}, {diffs['paired_high'].iloc[0]:.3f}]"
    )


def test_layer_difference_intervals_cover_a_planted_difference():
    """Two layers whose true accuracies differ by 0.05 on correlated items: over many resampled
    test sets the paired 95% interval holds 0.05 about 95% of the time."""
    rng = np.random.default_rng(11)
    trials, hits = 200, 0
    for trial in range(trials):
        lengths = rng.integers(3, 12, size=80)
        sentence = np.repeat(np.arange(80), lengths)
        u = rng.random(sentence.size)  # one item draw for both layers: paired
        correct = {0: u < 0.75, 1: u < 0.80}
        rows = []
        for layer, c in correct.items():
            ids, num = sentence_sums(c[None].astype(float), sentence)
            _, den = sentence_sums(np.ones((1, c.size)), sentence)
            rows.append(
                pd.DataFrame(
                    {
                        "task": "t",
                        "mode": "per_layer",
                        "probe": "linear",
                        "pooling": "mean",
                        "control": False,
                        "layer": layer,
                        "seed": 0,
                        "sentence": ids,
                        "metric": "accuracy",
                        "numerator": num[0],
                        "denominator": den[0],
                    }
                )
            )
        intervals = pd.DataFrame(
            {
                "task": "t",
                "mode": "per_layer",
                "probe": "linear",
                "pooling": "mean",
                "control": False,
                "layer": [0, 1],
                "metric": "accuracy",
                "dev_score": [0.7, 0.9],
            }
        )
        row = layer_differences(pd.concat(rows), intervals, n_resamples=500, bootstrap_seed=trial).iloc[0]
        assert row.layer == 0 and row.reference_layer == 1
        hits += row.low <= -0.05 <= row.high
    assert 0.90 <= hits / trials <= 0.995, hits / trials
