"""Control tasks / selectivity and MDL online code on planted data."""

import numpy as np
import pytest

from bertology.errors import ConfigError
from bertology.probes.probing.baselines import compare_probe_families
from bertology.probes.probing.controls import control_key_seen_share, control_keys, control_task, selectivity
from bertology.probes.probing.edge import ProbeConfig, probe_arrays, probe_layers
from bertology.probes.probing.mdl import block_boundaries, online_codelength
from bertology.probes.probing.synthetic import planted_task
from bertology.probes.probing.tasks import EdgeExample, EdgeTask, label_distribution, split_by_sentence

SMALL = dict(proj_dim=32, hidden_dim=32, max_epochs=15, patience=3)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def planted():
    return planted_task(n_layers=2, n_words=1500, dim=16, signal_layers={1: 2.0}, vocab=300, seed=2)


def test_control_labels_fixed_per_type_and_follow_distribution(planted):
    ctrl = control_task(planted.task, planted.words, seed=0)
    assert len(ctrl) == len(planted.task) and ctrl.source.startswith("control")
    by_type = {}
    for e in ctrl.examples:
        word = planted.words[e.sentence][e.span1[0]]
        assert by_type.setdefault(word, e.labels[0]) == e.labels[0]
    assert set(ctrl.labels) <= set(planted.task.labels)
    assert control_task(planted.task, planted.words, seed=0).examples == ctrl.examples
    assert control_task(planted.task, planted.words, seed=1).examples != ctrl.examples
    # control labels follow the task's label distribution (drawn once per type): 80% "A"
    skewed = planted.task.with_labels([("A",) if i % 5 else ("B",) for i in range(len(planted.task))], "skewed", "test")
    assert label_distribution(skewed)["A"] == pytest.approx(0.8, abs=0.01)
    ctrl_types = {}
    for e in control_task(skewed, planted.words, seed=0).examples:
        ctrl_types[planted.words[e.sentence][e.span1[0]]] = e.labels[0]
    share_a = sum(lab == "A" for lab in ctrl_types.values()) / len(ctrl_types)
    assert 0.72 < share_a < 0.88


def _deps_like():
    """Four sentences, two (dependent, head) examples each: span 1 = dependent, span 2 = head."""
    words = [["the", "cat", "sat"], ["the", "dog", "ran"], ["a", "cat", "ran"], ["the", "cat", "ran"]]
    arcs = {
        0: [(0, 1, "det"), (1, 2, "nsubj")],
        1: [(0, 1, "det"), (1, 2, "nsubj")],
        2: [(0, 1, "det"), (1, 2, "nsubj")],
        3: [(0, 1, "det"), (1, 2, "nsubj")],
    }
    examples = [EdgeExample(s, (d, d + 1), (h, h + 1), (rel,)) for s, a in arcs.items() for d, h, rel in a]
    task = EdgeTask("deps", examples, ["det", "nsubj"], "test", words=words)
    split = {"train": np.arange(4), "dev": np.arange(0), "test": np.arange(4, 8)}  # sentences 0-1 | 2-3
    return task, words, split


def test_control_key_is_the_dependent_word_by_default_hand_computed():
    task, words, split = _deps_like()
    assert control_keys(task, words) == ["the", "cat", "the", "dog", "a", "cat", "the", "cat"]
    assert control_keys(task, words, "pair")[:2] == ["the\tcat", "cat\tsat"]
    # test dependents a, cat, the, cat; training saw the, cat, dog -> 3 of 4 seen
    assert control_key_seen_share(task, words, split) == pytest.approx(0.75)
    # test pairs (a, cat), (cat, ran), (the, cat), (cat, ran); training saw only (the, cat) -> 1 of 4
    assert control_key_seen_share(task, words, split, key="pair") == pytest.approx(0.25)
    # one control label per dependent word type: every "cat" example shares it
    for seed in range(5):
        ctrl = control_task(task, words, seed=seed)
        by_type = {}
        for k, e in zip(control_keys(task, words), ctrl.examples):
            assert by_type.setdefault(k, e.labels[0]) == e.labels[0]
        assert len(by_type) == 4 and "key span1" in ctrl.source
    # the pair key: 6 types (the cat, cat sat, the dog, dog ran, a cat, cat ran)
    assert len(set(control_keys(task, words, "pair"))) == 6
    with pytest.raises(ConfigError, match="control key"):
        control_task(task, words, key="head")


def test_span1_control_is_memorisable_pair_control_is_not():
    """Planted: a two-span task over 40 word types whose features identify the type. The control
    keyed on span 1 can be memorised (its keys are seen in training); the pair-keyed control cannot."""
    data = planted_task(n_layers=1, n_words=3000, dim=8, n_spans=2, vocab=40, signal_layers={}, seed=4)
    rng = np.random.default_rng(0)
    table = rng.normal(size=(40, 24)).astype(np.float32)
    flat = [w for sent in data.words for w in sent]
    feats = (table[[int(w[1:]) for w in flat]] + 0.1 * rng.normal(size=(len(flat), 24)))[None].astype(np.float32)
    split = split_by_sentence(data.task, seed=0)
    share1 = control_key_seen_share(data.task, data.words, split)
    share_pair = control_key_seen_share(data.task, data.words, split, key="pair")
    assert share1 == 1.0  # 40 types, ~2,400 training examples: all seen
    assert 0.5 < share_pair < 0.9  # 1,600 possible pairs: many test pairs never seen
    cfg = ProbeConfig(probe="mlp", proj_dim=32, hidden_dim=64, max_epochs=60, patience=8)
    acc = {}
    for key in ("span1", "pair"):
        ctask = control_task(data.task, data.words, seed=0, key=key)
        df = probe_arrays(feats, data.sentence_offsets, ctask, seeds=(0,), config=cfg, control=True)
        acc[key] = df[(df.metric == "accuracy") & (df.split == "test")]["value"].iloc[0]
    assert acc["span1"] > 0.9
    assert acc["pair"] < acc["span1"] - 0.2


class _Store:
    def __init__(self, feats, offsets):
        self.feats, self.sentence_offsets, self.n_layers = feats, offsets, feats.shape[0]

    def layers(self, ids):
        return self.feats[ids]


def test_probe_layers_reports_the_seen_share(planted):
    from types import SimpleNamespace

    store = _Store(planted.features, planted.sentence_offsets)
    corpus = SimpleNamespace(sentences=[SimpleNamespace(words=w) for w in planted.words])
    df = probe_layers(store, corpus, planted.task, seeds=(0, 1), probe="linear", control=True, max_epochs=2)
    seen = df[df.metric == "control_key_seen_share"]
    assert len(seen) == 2 and seen["control"].all() and (seen["layer"] == -1).all() and (seen["split"] == "param").all()
    split = split_by_sentence(planted.task, seed=0)
    assert seen["value"].iloc[0] == pytest.approx(control_key_seen_share(planted.task, planted.words, split))
    assert 0.5 < seen["value"].iloc[0] <= 1.0  # 300 types, 1,200 training words


def test_controls_table_columns(planted):
    import pandas as pd

    from bertology.probes.probing.analysis import controls_table

    task, words, split = _deps_like()
    rows = [
        dict(
            task="deps",
            mode="per_layer",
            probe="mlp",
            pooling="attention",
            control=c,
            layer=1,
            seed=0,
            split="test",
            metric="accuracy",
            value=v,
        )
        for c, v in ((False, 0.9), (True, 0.6))
    ]
    rows.append(
        dict(
            task="deps",
            mode="per_layer",
            probe="mlp",
            pooling="attention",
            control=True,
            layer=-1,
            seed=0,
            split="param",
            metric="control_key_seen_share",
            value=0.75,
        )
    )
    df = pd.DataFrame(rows)
    df = pd.concat([df, selectivity(df)], ignore_index=True)
    out = controls_table(df, {"deps": (task, None, None)}, "span1")
    assert set(out["metric"]) == {"accuracy", "selectivity"}
    assert (out["control_key"] == "span1").all() and (out["control_key_types"] == 4).all()
    assert (out["control_key_seen_share"] == 0.75).all()
    assert out.loc[out.metric == "selectivity", "value"].iloc[0] == pytest.approx(0.3)


def test_selectivity_positive_on_informative_layer_zero_on_noise(planted):
    df = compare_probe_families(
        planted.features, planted.sentence_offsets, planted.task, planted.words, seeds=(0,), probes=("linear",), **SMALL
    )
    sel = df[(df.metric == "selectivity") & (df.split == "test")].set_index("layer")["value"]
    assert sel[1] > 0.5  # informative layer: task >> control
    assert abs(sel[0]) < 0.15  # noise layer: both near chance
    ctrl = df[(df.control) & (df.metric == "accuracy") & (df.split == "test")]
    assert ctrl["value"].max() < 0.45
    assert set(df["probe"]) == {"linear"}


def test_selectivity_matches_rows():
    import pandas as pd

    rows = []
    for control, v in ((False, 0.9), (True, 0.6)):
        rows.append(
            dict(
                task="t",
                mode="per_layer",
                probe="mlp",
                pooling="attention",
                control=control,
                layer=3,
                seed=0,
                split="test",
                metric="accuracy",
                value=v,
            )
        )
    out = selectivity(pd.DataFrame(rows))
    assert out["value"].iloc[0] == pytest.approx(0.3) and out["metric"].iloc[0] == "selectivity"


def test_block_boundaries():
    ends = block_boundaries(1000)
    assert ends[0] == 1 and ends[-1] == 1000 and list(ends) == sorted(set(ends))
    assert 125 in ends and 500 in ends and 63 in ends


def test_mdl_learnable_compresses_random_does_not(planted):
    cfg = ProbeConfig(probe="linear", **SMALL)
    df = online_codelength(planted.features, planted.sentence_offsets, planted.task, config=cfg)
    comp = df[df.metric == "compression"].set_index("layer")["value"]
    bits = df[df.metric == "online_bits"].set_index("layer")["value"]
    uniform = df[df.metric == "uniform_bits"]["value"].iloc[0]
    assert uniform == pytest.approx(len(planted.task) * np.log2(4))
    assert comp[1] > 2.0 and bits[1] < uniform
    assert 0.85 < comp[0] < 1.1  # noise layer: about the uniform code
    # random labels on the informative features: no compression either
    rng = np.random.default_rng(0)
    shuffled = planted.task.with_labels(
        [(l,) for l in rng.permutation([e.labels[0] for e in planted.task.examples])], "shuffled", "shuffled"
    )
    df2 = online_codelength(planted.features, planted.sentence_offsets, shuffled, config=cfg)
    comp2 = df2[df2.metric == "compression"].set_index("layer")["value"]
    assert (comp2 < 1.1).all() and (comp2 > 0.85).all()
