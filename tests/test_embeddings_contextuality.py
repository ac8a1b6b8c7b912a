"""Ethayarajh 2019 measures on planted spaces."""

import numpy as np
import pytest

from bertology.errors import WorkbenchError
from bertology.probes.embeddings.contextuality import (
    contextuality,
    contextuality_by_word,
    mev_per_group,
    occurrence_groups,
    random_groups,
    to_long,
)


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
    assert list(df.columns) == [
        "layer",
        "metric",
        "raw",
        "baseline",
        "adjusted",
        "n_items",
        "occurrences_min",
        "occurrences_mean",
        "occurrences_max",
        "seed",
    ]
    assert np.allclose(df["adjusted"], df["raw"] - df["baseline"])
    # the earlier, uncentred MEV also gives 1 for a static space
    unc = contextuality(static, words, offsets, min_occurrences=5, mev_centering="uncentred").set_index("metric")
    assert unc.loc["mev", "raw"] == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(WorkbenchError, match="centering"):
        contextuality(static, words, offsets, mev_centering="centered")


def _groups(sizes):
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return np.arange(starts[-1], dtype=np.int64), starts


def test_mev_centred_vs_uncentred_hand_computed():
    # five occurrences on a line through (3, 0, 0), not through the origin: rows (3, t, 0), t = -2..2
    t = np.arange(-2, 3, dtype=np.float32)
    line = np.stack([np.full(5, 3.0), t, np.zeros(5)], 1).astype(np.float32)
    # four occurrences in a plane around (0, 0, 5): (±1, 0, 5) and (0, ±0.5, 5)
    plane = np.array([[1, 0, 5], [-1, 0, 5], [0, 0.5, 5], [0, -0.5, 5]], dtype=np.float32)
    # three identical occurrences: no variance
    same = np.tile(np.array([[1.0, 2.0, 3.0]], dtype=np.float32), (3, 1))
    vectors = np.concatenate([line, plane, same])
    positions, starts = _groups([5, 4, 3])
    centred = mev_per_group(vectors, positions, starts)
    # centred: the line is one principal direction (1.0); the plane's variances are 2 and 0.5 (2 / 2.5);
    # a word whose occurrences are one vector is fully explained by it (1.0, as Ethayarajh's min(1, .))
    np.testing.assert_allclose(centred, [1.0, 0.8, 1.0], atol=1e-9)
    # uncentred: X^T X = diag(45, 10, 0) -> 45 / 55; diag(2, 0.5, 100) -> 100 / 102.5; rank one -> 1
    uncentred = mev_per_group(vectors, positions, starts, centering="uncentred")
    np.testing.assert_allclose(uncentred, [45 / 55, 100 / 102.5, 1.0], atol=1e-6)
    # batching and padding do not change the values
    np.testing.assert_allclose(mev_per_group(vectors, positions, starts, batch=1), centred, atol=1e-9)
    # PCA's explained-variance ratio of the first component (numpy SVD of the centred matrix)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 6)).astype(np.float32) + 4.0
    sv = np.linalg.svd(x.astype(np.float64) - x.mean(0), compute_uv=False)
    assert mev_per_group(x, *_groups([7]))[0] == pytest.approx(sv[0] ** 2 / (sv**2).sum(), abs=1e-9)


def test_mev_baseline_is_random_groups_of_the_same_sizes():
    rng = np.random.default_rng(3)
    n_types, d = 30, 40
    ids = rng.integers(0, n_types, 900)
    words = [f"w{i}" for i in ids]
    offsets = np.arange(0, 901, 9)
    layer = rng.normal(size=(900, d)).astype(np.float32) + 2.0  # every occurrence its own random vector
    # groups of two occurrences: two points always lie on one line, so raw and baseline are exactly 1
    df = contextuality(layer[None], words, offsets, min_occurrences=2, max_occurrences=2).set_index("metric")
    assert df.loc["mev", "raw"] == pytest.approx(1.0) and df.loc["mev", "baseline"] == pytest.approx(1.0)
    assert df.loc["mev", "adjusted"] == pytest.approx(0.0, abs=1e-9)
    # larger groups: the baseline is the mean MEV of groups of the words' sizes filled with random
    # distinct occurrences of the layer (a Monte Carlo estimate with another generator agrees)
    df = contextuality(layer[None], words, offsets, min_occurrences=5, max_occurrences=12).set_index("metric")
    _, _, starts = occurrence_groups(words, min_occurrences=5, max_occurrences=12)
    mc = np.mean(
        [
            mev_per_group(layer, random_groups(900, starts, np.random.default_rng(100 + k)), starts).mean()
            for k in range(100)
        ]
    )
    assert df.loc["mev", "baseline"] == pytest.approx(mc, abs=0.01)
    draw = random_groups(900, starts, np.random.default_rng(0))
    assert len(draw) == starts[-1] and len(set(draw.tolist())) == len(draw) and draw.max() < 900
    # the occurrence counts the figures rest on: every type has 30 +- a few occurrences, capped at 12
    row = df.loc["mev"]
    assert row["n_items"] == n_types and row["occurrences_min"] == row["occurrences_max"] == 12
    assert row["occurrences_mean"] == 12.0


def test_occurrence_columns_hand_computed():
    words = ["a"] * 5 + ["b"] * 7 + ["c"] * 12 + ["d"] * 2
    offsets = np.array([0, 6, 13, 20, 26])
    layer = np.random.default_rng(0).normal(size=(26, 8)).astype(np.float32)
    df = contextuality(layer[None], words, offsets, min_occurrences=5, max_occurrences=10).set_index("metric")
    for metric in ("mev", "self_similarity"):
        row = df.loc[metric]
        assert row["n_items"] == 3  # d (2 occurrences) is left out
        assert (row["occurrences_min"], row["occurrences_mean"], row["occurrences_max"]) == (5, (5 + 7 + 10) / 3, 10)
    assert np.isnan(df.loc["intra_sentence_similarity", "occurrences_mean"])
    assert df.loc["intra_sentence_similarity", "n_items"] == 4


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
    assert all(words[p].lower() == types[g] for g in range(len(types)) for p in pos[starts[g] : starts[g + 1]])
    by_word = contextuality_by_word(table[ids][None], words, offsets)
    assert np.allclose(by_word["self_similarity"], 1.0, atol=1e-6)
    long = to_long(contextuality(table[ids][None], words, offsets))
    assert list(long.columns) == ["layer", "metric", "kind", "value"] and len(long) == 9


def test_bad_shapes_raise():
    with pytest.raises(WorkbenchError, match="layers"):
        contextuality(np.zeros((2, 5, 3)), ["a"] * 4, np.array([0, 4]))
    with pytest.raises(WorkbenchError, match="offsets"):
        contextuality(np.zeros((2, 4, 3)), ["a"] * 4, np.array([0, 3]))


def test_a_contextuality_table_resting_on_few_words_is_flagged():
    import pandas as pd

    from bertology.probes.embeddings.contextuality import few_words_warning

    table = pd.DataFrame(
        {"layer": [0, 0, 0], "metric": ["self_similarity", "intra_sentence_similarity", "mev"], "n_items": [6, 30, 6]}
    )
    warning = few_words_warning(table)
    assert warning is not None and "too few words" in warning and "rest on 6 distinct words (need 50)" in warning
    assert few_words_warning(table.assign(n_items=[60, 30, 60])) is None  # sentences count for intra-sentence
    assert few_words_warning(table.drop(columns=["n_items"])) is None  # an older table does not say


def test_intra_sentence_similarity_in_blocks_equals_one_block():
    # blocks of whole sentences do the same arithmetic per sentence as one block of the whole layer;
    # one-word sentences are skipped, a sentence longer than a block is a block alone
    from bertology.probes.embeddings.contextuality import intra_sentence_per_sentence

    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 12, size=60)
    lengths[7] = 40
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    vectors = rng.normal(size=(int(offsets[-1]), 16)).astype(np.float32)
    whole = intra_sentence_per_sentence(vectors, offsets, block_words=10**9)
    assert len(whole) == int((lengths >= 2).sum())
    for block in (1, 9, 25):
        np.testing.assert_array_equal(intra_sentence_per_sentence(vectors, offsets, block_words=block), whole)
    # by hand: the first sentence of >= 2 words
    k = int(np.flatnonzero(lengths >= 2)[0])
    x = vectors[offsets[k] : offsets[k + 1]].astype(np.float64)
    mean = x.mean(0)
    by_hand = np.mean(x @ mean / (np.linalg.norm(x, axis=1) * np.linalg.norm(mean)))
    assert whole[0] == pytest.approx(by_hand, abs=1e-6)
