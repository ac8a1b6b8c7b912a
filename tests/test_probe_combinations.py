"""The BERT paper's feature combinations (Devlin et al. 2019, Table 7) read from a feature store."""

from __future__ import annotations

import numpy as np
import pytest

from bertology.errors import ConfigError
from bertology.probes.probing.combinations import (
    COMBINATIONS,
    all_combinations,
    combination_layers,
    combine,
    combine_layers,
)
from bertology.store import extract


def test_feature_combinations_match_the_bert_paper_definitions(tiny_lm, small_corpus, tmp_path):
    store = extract(tiny_lm, small_corpus, root=tmp_path, attentions=False, progress=False)
    layers = store.layers()  # [3, n_words, 32]: embeddings + 2 layers
    combos = all_combinations(store)
    assert set(combos) == set(COMBINATIONS)
    np.testing.assert_array_equal(combos["first_layer"], layers[0])
    np.testing.assert_array_equal(combos["last_hidden"], layers[2])
    np.testing.assert_array_equal(combos["second_to_last"], layers[1])
    np.testing.assert_allclose(combos["sum_all"], layers[1] + layers[2], rtol=1e-6)
    assert combos["concat_last_four"].shape == (store.n_words, 64)  # only 2 transformer layers exist
    np.testing.assert_array_equal(combine(store, "last_hidden"), layers[2])


def test_combination_layers_of_a_twelve_layer_model():
    """BERT-base: 13 store layers (embeddings + 12); the last four are 9..12."""
    assert combination_layers("first_layer", 13) == [0]
    assert combination_layers("second_to_last", 13) == [11]
    assert combination_layers("sum_all", 13) == list(range(1, 13))
    assert combination_layers("sum_last_four", 13) == combination_layers("concat_last_four", 13) == [9, 10, 11, 12]
    layers = np.arange(13 * 2 * 3, dtype=np.float32).reshape(13, 2, 3)
    np.testing.assert_array_equal(combine_layers(layers, "sum_last_four"), layers[9:].sum(0))
    assert combine_layers(layers, "concat_last_four").shape == (2, 12)


def test_unknown_combination_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown feature combination 'last_two'"):
        combination_layers("last_two", 13)


def test_combination_summary_chooses_on_dev_and_reports_test_with_intervals():
    """Two 'combinations' of planted layers: the one carrying the label is selected on dev; every
    row has its test score inside its interval, n_test and the small-sample flag."""
    import pandas as pd

    from bertology.probes.probing.analysis import combination_summary
    from bertology.probes.probing.edge import ProbeConfig, probe_arrays
    from bertology.probes.probing.synthetic import planted_task

    data = planted_task(n_layers=2, n_words=600, dim=8, signal_layers={1: 2.0}, seed=1)
    frames = [
        probe_arrays(
            data.features[[layer]],
            data.sentence_offsets,
            data.task,
            seeds=[0, 1],
            config=ProbeConfig(probe="linear", max_epochs=20),
        ).assign(combination=name, description=name)
        for layer, name in ((0, "noise"), (1, "signal"))
    ]
    table = combination_summary(pd.concat(frames, ignore_index=True))
    assert table.loc[table["selected"], "combination"].tolist() == ["signal"]
    assert (table["selected_on"] == "dev").all()
    assert ((table["low"] <= table["score"]) & (table["score"] <= table["high"])).all()
    assert (table["n_test"] < 100).all() and table["small_sample"].all()  # ~60 test words


def test_a_combined_view_is_the_combination_computed_shard_by_shard(tiny_lm, small_corpus, tmp_path):
    """The feature-combinations analysis probes a ``CombinedView``: each shard's combination equals
    the corresponding rows of the whole-corpus combination, and span features gathered from it
    (in memory or spilled) equal those gathered from the whole array (statistics in float64 there,
    float32 here: equal to 1e-4)."""
    import torch

    from bertology.probes.probing._spans import SpanFeatures, span_index
    from bertology.probes.probing.combinations import CombinedView
    from bertology.probes.probing.tasks import build_task

    store = extract(tiny_lm, small_corpus, root=tmp_path, attentions=False, progress=False, shard_size=9)
    assert store.n_shards > 2
    layers = store.layers()
    task = build_task(small_corpus, "pos")
    tokens, mask = span_index(task, store.sentence_offsets)
    idx = torch.randperm(len(tokens), generator=torch.Generator().manual_seed(0))[:64]
    for name in COMBINATIONS:
        whole = combine_layers(layers, name)
        view = CombinedView(store, name)
        assert view.shape == (1, *whole.shape) and len(view) == 1
        np.testing.assert_array_equal(np.asarray(view)[0], whole)
        for k in range(store.n_shards):
            rows = np.concatenate(
                [np.arange(store.sentence_offsets[s], store.sentence_offsets[s + 1]) for s in store.shard_sentences(k)]
            )
            np.testing.assert_array_equal(view.shard(k), whole[None, rows])  # same arithmetic, same bits
        from_array = SpanFeatures(whole[None], tokens, mask, True, "cpu")
        held = SpanFeatures(view, tokens, mask, True, "cpu")
        spilled = SpanFeatures(view, tokens, mask, True, "cpu", cache_bytes=1)
        assert held.cached is not None and spilled._spill is not None
        torch.testing.assert_close(held(idx)[0], from_array(idx)[0], atol=1e-4, rtol=1e-4)
        assert torch.equal(spilled(idx)[0], held(idx)[0])
