"""Edge probing of the real MiniLM-L6 on the bundled Brown sample (gold POS, silver deps/NER)."""

import numpy as np
import pytest

from bertology.probes.probing.edge import ProbeConfig, probe_arrays, summarise
from bertology.probes.probing.tasks import build_task

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.slow
@pytest.mark.real_model
def test_minilm_layers_carry_pos_deps_entities():
    import pandas as pd

    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.store import extract

    corpus = load_corpus("brown-sample", limit=400)
    store = extract(load_model("minilm-l6", attentions=False), corpus, attentions=False, progress=False)
    feats, offsets = store.layers(), store.sentence_offsets
    assert feats.shape[0] == 7
    cfg = ProbeConfig(proj_dim=128, hidden_dim=128, max_epochs=12, patience=2)
    frames = []
    for name in ("pos", "deps", "entities"):
        task = build_task(corpus, name)
        for mode in ("per_layer", "mix"):
            frames.append(probe_arrays(feats, offsets, task, mode=mode, seeds=(0,), config=cfg))
    df = pd.concat(frames, ignore_index=True)
    table = summarise(df)
    print("\n" + table.round(3).to_string(index=False))
    acc = df[(df.split == "test") & (df.metric == "accuracy") & (df["mode"] == "per_layer")]
    per_layer = acc.pivot_table(index="layer", columns="task", values="value")
    print(per_layer.round(3).to_string())

    pos = build_task(corpus, "pos")
    majority = max(np.bincount(pos.label_ids())) / len(pos)
    best = table.set_index("task")
    assert best.loc["pos", "best_layer_score"] > max(0.85, majority + 0.5)
    assert best.loc["pos", "best_layer"] >= 1  # context helps over the embeddings
    assert best.loc["deps", "best_layer_score"] > 0.6
    deps_majority = max(np.bincount(build_task(corpus, "deps").label_ids())) / len(build_task(corpus, "deps"))
    assert best.loc["deps", "best_layer_score"] > deps_majority + 0.3
    assert best.loc["entities", "best_layer_score"] > 0.5
    for task in ("pos", "deps", "entities"):
        assert 0 <= best.loc[task, "expected_layer_mix"] <= 6
        assert best.loc[task, "mix_score"] > best.loc[task, "best_layer_score"] - 0.1
