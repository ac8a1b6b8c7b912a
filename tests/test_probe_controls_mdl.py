"""Control tasks / selectivity and MDL online code on planted data."""

import numpy as np
import pytest

from bertology.probes.probing.baselines import compare_probe_families
from bertology.probes.probing.controls import control_task, selectivity
from bertology.probes.probing.edge import ProbeConfig
from bertology.probes.probing.mdl import block_boundaries, online_codelength
from bertology.probes.probing.synthetic import planted_task
from bertology.probes.probing.tasks import label_distribution

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
    skewed = planted.task.with_labels([("A",) if i % 5 else ("B",) for i in range(len(planted.task))],
                                      "skewed", "test")
    assert label_distribution(skewed)["A"] == pytest.approx(0.8, abs=0.01)
    ctrl_types = {}
    for e in control_task(skewed, planted.words, seed=0).examples:
        ctrl_types[planted.words[e.sentence][e.span1[0]]] = e.labels[0]
    share_a = sum(lab == "A" for lab in ctrl_types.values()) / len(ctrl_types)
    assert 0.72 < share_a < 0.88


def test_selectivity_positive_on_informative_layer_zero_on_noise(planted):
    df = compare_probe_families(planted.features, planted.sentence_offsets, planted.task,
                                planted.words, seeds=(0,), probes=("linear",), **SMALL)
    sel = df[(df.metric == "selectivity") & (df.split == "test")].set_index("layer")["value"]
    assert sel[1] > 0.5                       # informative layer: task >> control
    assert abs(sel[0]) < 0.15                 # noise layer: both near chance
    ctrl = df[(df.control) & (df.metric == "accuracy") & (df.split == "test")]
    assert ctrl["value"].max() < 0.45
    assert set(df["probe"]) == {"linear"}


def test_selectivity_matches_rows():
    import pandas as pd

    rows = []
    for control, v in ((False, 0.9), (True, 0.6)):
        rows.append(dict(task="t", mode="per_layer", probe="mlp", pooling="attention", control=control,
                         layer=3, seed=0, split="test", metric="accuracy", value=v))
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
    assert 0.85 < comp[0] < 1.1                # noise layer: about the uniform code
    # random labels on the informative features: no compression either
    rng = np.random.default_rng(0)
    shuffled = planted.task.with_labels([(l,) for l in rng.permutation(
        [e.labels[0] for e in planted.task.examples])], "shuffled", "shuffled")
    df2 = online_codelength(planted.features, planted.sentence_offsets, shuffled, config=cfg)
    comp2 = df2[df2.metric == "compression"].set_index("layer")["value"]
    assert (comp2 < 1.1).all() and (comp2 > 0.85).all()
