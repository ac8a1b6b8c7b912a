"""Ethayarajh 2019 measures on planted spaces."""

import numpy as np
import pytest

from bertology.probes.embeddings.contextuality import contextuality, contextuality_by_word, occurrence_groups, to_long
from bertology.errors import WorkbenchError


def _corpus(seed=0, n_types=25, n_words=800, sent_len=10, d=24):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, n_types, n_words)
    words = [f"W{i}" if k % 2 else f"w{i}" for k, i in enumerate(ids)]  # case varies
    offsets = np.arange(0, n_words + 1, sent_len)
    table = rng.normal(size=(n_types, d)).astype(np.float32)
    return words, ids, offsets, table, rng


def test_static_space_has_self_similarity_one_and_mev_one():
    words, ids, offsets, table, _ = _corpus()
    static = table[ids][None]
    df = contextuality(static, words, offsets, min_occurrences=5)
    row = df.set_index("metric")
    assert row.loc["self_similarity", "raw"] == pytest.approx(1.0, abs=1e-6)
    assert row.loc["mev", "raw"] == pytest.approx(1.0, abs=1e-6)
    assert row.loc["mev", "baseline"] < 0.5  # random words' matrices are far from rank one
    assert row.loc["self_similarity", "n_items"] == 25  # lower-cased: W3 and w3 are one word
    assert list(df.columns) == ["layer", "metric", "raw", "baseline", "adjusted", "n_items", "seed"]
    assert np.allclose(df["adjusted"], df["raw"] - df["baseline"])


def test_context_noise_lowers_self_similarity_and_anisotropy_shows_in_baseline():
    words, ids, offsets, table, rng = _corpus()
    static = table[ids]
    noisy = static + 2.0 * rng.normal(size=static.shape).astype(np.float32)
    shifted = noisy + 10.0  # a common direction: anisotropic
    df = contextuality(np.stack([static, noisy, shifted]), words, offsets).set_index(["layer", "metric"])
    assert df.loc[(1, "self_similarity"), "raw"] < 0.4
    assert df.loc[(1, "mev"), "raw"] < 0.6
    assert abs(df.loc[(1, "self_similarity"), "baseline"]) < 0.05
    assert df.loc[(2, "self_similarity"), "baseline"] > 0.8  # everything similar to everything
    assert df.loc[(2, "self_similarity"), "adjusted"] < 0.2


def test_intra_sentence_similarity_planted():
    rng = np.random.default_rng(1)
    offsets = np.arange(0, 201, 5)
    sent_dirs = rng.normal(size=(40, 16))
    same = np.repeat(sent_dirs, 5, axis=0)  # every word equals its sentence mean
    words = [f"w{i % 7}" for i in range(200)]
    df = contextuality(same[None], words, offsets).set_index("metric")
    assert df.loc["intra_sentence_similarity", "raw"] == pytest.approx(1.0, abs=1e-6)
    assert df.loc["intra_sentence_similarity", "n_items"] == 40


def test_groups_cap_and_by_word_and_long_form():
    words, ids, offsets, table, _ = _corpus()
    types, pos, starts = occurrence_groups(words, min_occurrences=5, max_occurrences=10, seed=0)
    assert np.diff(starts).max() <= 10 and len(set(pos)) == len(pos)
    assert all(words[p].lower() == types[g] for g in range(len(types)) for p in pos[starts[g]:starts[g + 1]])
    by_word = contextuality_by_word(table[ids][None], words, offsets)
    assert np.allclose(by_word["self_similarity"], 1.0, atol=1e-6)
    long = to_long(contextuality(table[ids][None], words, offsets))
    assert list(long.columns) == ["layer", "metric", "kind", "value"] and len(long) == 9


def test_bad_shapes_raise():
    with pytest.raises(WorkbenchError, match="layers"):
        contextuality(np.zeros((2, 5, 3)), ["a"] * 4, np.array([0, 4]))
    with pytest.raises(WorkbenchError, match="offsets"):
        contextuality(np.zeros((2, 4, 3)), ["a"] * 4, np.array([0, 3]))
