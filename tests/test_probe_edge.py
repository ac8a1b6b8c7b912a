"""Edge probing on planted features: the label lives only at layer k."""

import numpy as np
import pandas as pd
import pytest

from bertology.probes.probing.edge import (ProbeConfig, confidence_intervals, cumulative_deltas,
                                           cumulative_expected_layer, expected_layer, probe_arrays, span_index,
                                           summarise)
from bertology.probes.probing.synthetic import planted_task
from bertology.probes.probing.tasks import EdgeExample, EdgeTask

SMALL = dict(proj_dim=32, hidden_dim=32, max_epochs=15, patience=3)
K_LAYER = 2

pytestmark = pytest.mark.usefixtures("one_torch_thread")



@pytest.fixture(scope="module")
def planted():
    return planted_task(n_layers=5, n_words=1500, dim=16, signal_layers={K_LAYER: 2.0}, seed=0)


@pytest.fixture(scope="module")
def all_modes(planted):
    cfg = ProbeConfig(**SMALL)
    frames = [probe_arrays(planted.features, planted.sentence_offsets, planted.task, mode=m,
                           seeds=(0, 1), config=cfg) for m in ("per_layer", "mix", "cumulative")]
    return pd.concat(frames, ignore_index=True)


def _test_acc(df, mode):
    d = df[(df["mode"] == mode) & (df.split == "test") & (df.metric == "accuracy")]
    return d.groupby("layer")["value"].mean()


def test_per_layer_peaks_at_planted_layer(all_modes):
    acc = _test_acc(all_modes, "per_layer")
    assert acc.idxmax() == K_LAYER
    assert acc[K_LAYER] > 0.9
    assert acc.drop(K_LAYER).max() < 0.45          # 4 labels: chance is 0.25


def test_scalar_mix_weights_and_expected_layer(all_modes):
    w = all_modes[all_modes.metric == "mix_weight"].groupby("layer")["value"].mean()
    assert w.idxmax() == K_LAYER and w[K_LAYER] > 0.4
    assert abs(expected_layer(w.values) - K_LAYER) < 0.5
    assert _test_acc(all_modes, "mix")[-1] > 0.9


def test_cumulative_expected_layer(all_modes):
    acc = _test_acc(all_modes, "cumulative").sort_index()
    assert acc[K_LAYER] - acc[K_LAYER - 1] > 0.5
    assert abs(cumulative_expected_layer(acc.values) - K_LAYER) < 0.5


def test_summary_table_and_intervals(all_modes):
    table = summarise(all_modes)
    assert list(table.columns) == ["task", "best_layer", "best_layer_score", "best_layer_ci95", "expected_layer_mix",
                                   "mix_score", "mix_ci95", "expected_layer_cumulative"]
    assert len(table) == 1
    row = table.iloc[0]
    assert row.task == "planted" and row.best_layer == K_LAYER
    assert abs(row.expected_layer_mix - K_LAYER) < 0.5
    assert abs(row.expected_layer_cumulative - K_LAYER) < 0.5
    assert row.mix_score > 0.9 and row.best_layer_score > 0.9
    # the table's numbers are the score rows' means over the 2 seeds with 1.96 * sd / sqrt(2) intervals
    acc = all_modes[(all_modes.metric == "accuracy") & (all_modes.split == "test")]
    per = acc[acc["mode"] == "per_layer"].groupby("layer")["value"]
    assert row.best_layer_score == pytest.approx(per.mean()[K_LAYER])
    assert row.best_layer_ci95 == pytest.approx(1.96 * per.std()[K_LAYER] / np.sqrt(2))
    mix = acc[acc["mode"] == "mix"]["value"]
    assert row.mix_score == pytest.approx(mix.mean()) and row.mix_ci95 == pytest.approx(1.96 * mix.std() / np.sqrt(2))
    weights = all_modes[all_modes.metric == "mix_weight"].groupby("layer")["value"].mean()
    assert row.expected_layer_mix == pytest.approx(expected_layer(weights.values))
    cumulative = acc[acc["mode"] == "cumulative"].groupby("layer")["value"].mean().sort_index()
    assert row.expected_layer_cumulative == pytest.approx(cumulative_expected_layer(cumulative.values))

    ci = confidence_intervals(acc)
    assert list(ci.columns) == ["task", "mode", "probe", "pooling", "control", "layer", "split", "metric",
                                "mean", "sd", "n", "ci95"]
    # one row per (mode, layer): 5 per-layer probes, the mix (layer -1) and 5 cumulative prefixes
    assert sorted(ci.groupby("mode")["layer"].apply(list).items()) == [
        ("cumulative", [0, 1, 2, 3, 4]), ("mix", [-1]), ("per_layer", [0, 1, 2, 3, 4])]
    assert (ci["n"] == 2).all()
    np.testing.assert_allclose(ci["ci95"], 1.96 * ci["sd"] / np.sqrt(2))
    best = ci[(ci["mode"] == "per_layer") & (ci["layer"] == K_LAYER)].iloc[0]
    assert best["mean"] == pytest.approx(row.best_layer_score) and best["ci95"] == pytest.approx(row.best_layer_ci95)
    mixed = ci[ci["mode"] == "mix"].iloc[0]
    assert mixed["mean"] == pytest.approx(row.mix_score) and mixed["ci95"] == pytest.approx(row.mix_ci95)


def test_expected_layer_formulas():
    assert expected_layer([0, 0, 1, 0]) == 2.0
    assert expected_layer([1, 1]) == 0.5
    # deltas 0.5 at l=1 and 0.5 at l=3 -> E = 2
    assert cumulative_expected_layer([0.2, 0.7, 0.7, 1.2]) == pytest.approx(2.0)


def test_expected_layer_keeps_negative_differentials():
    scores = [0.2, 0.8, 0.6, 0.8]          # deltas +0.6 (l=1), -0.2 (l=2), +0.2 (l=3)
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
    rows = [dict(task="t", mode="cumulative", probe="mlp", pooling="attention", control=False, layer=l, seed=0,
                 split="test", metric="accuracy", value=v) for l, v in enumerate(scores)]
    df = pd.DataFrame(rows)
    assert summarise(df)["expected_layer_cumulative"].iloc[0] == pytest.approx(4 / 3)
    assert summarise(df, clip_negative=True)["expected_layer_cumulative"].iloc[0] == pytest.approx(1.5)


def test_two_span_task_needs_both_spans():
    data = planted_task(n_layers=2, n_words=2500, dim=16, n_spans=2, n_labels=3,
                        signal_layers={1: 3.0}, seed=1)
    # every word carries its hidden label at layer 1, so both spans are visible there
    offsets = data.sentence_offsets
    df = probe_arrays(data.features, offsets, data.task, seeds=(0,),
                      config=ProbeConfig(proj_dim=32, hidden_dim=64, max_epochs=40, patience=5))
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
        a, b = rng.integers(0, 2, size=2)          # two independent binary labels
        labels = tuple(x for x, on in (("A", a), ("B", b)) if on) or ("none",)
        # span words 1..4; the cue sits on one random word inside the span
        cue = offsets[s] + 1 + rng.integers(0, 3)
        feats[1, cue, 0] += 4 * (2 * a - 1)
        feats[1, cue, 1] += 4 * (2 * b - 1)
        examples.append(EdgeExample(s, (1, 4), None, labels))
    task = EdgeTask("ml", examples, sorted({l for e in examples for l in e.labels}), "synthetic",
                    multilabel=True)
    tokens, mask = span_index(task, offsets)
    assert tokens.shape == (n_sent, 1, 3) and mask.all()
    df = probe_arrays(feats, offsets, task, seeds=(0,),
                      config=ProbeConfig(proj_dim=16, hidden_dim=16, max_epochs=60, patience=8, lr=3e-3))
    f1 = df[(df.split == "test") & (df.metric == "micro_f1")].set_index("layer")["value"]
    assert f1[1] > 0.85 and f1[1] > f1[0] + 0.2


def test_fixed_combination(planted):
    # "sum of the planted layer and a noise layer" vs "noise layers only"
    weights = np.zeros((2, 5), dtype=np.float32)
    weights[0, [K_LAYER, 4]] = 1.0
    weights[1, [0, 1]] = 1.0
    df = probe_arrays(planted.features, planted.sentence_offsets, planted.task, mode="fixed",
                      fixed_weights=weights, seeds=(0,), config=ProbeConfig(**SMALL))
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
    runs = [probe_arrays(planted.features, planted.sentence_offsets, planted.task, seeds=(0,), config=cfg)
            for _ in range(2)]
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
