"""Contextuality, distilled static vectors, neighbours and contextual alignment read a store's layers
shard by shard and row block by row block (issue 53 item 2), and give what the whole layer in memory
gives: the same figures to the last bit (contextuality, neighbours, document sums), or the same means
to float32 rounding (distilled vectors, whose float64 sums are added in shard order)."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from bertology.errors import StoreError, WorkbenchError
from bertology.probes.embeddings.contextuality import (
    contextuality,
    contextuality_by_word,
    intra_sentence_per_sentence,
    mev_per_group,
    occurrence_groups,
    random_groups,
    random_pair_similarity,
    self_similarity_per_word,
)
from bertology.probes.embeddings.neighbours import static_vs_contextual_neighbours
from bertology.probes.embeddings.static_vectors import distill_static
from bertology.store import extract

ctx_module = sys.modules["bertology.probes.embeddings.contextuality"]  # the package re-exports a function of that name


@pytest.fixture(scope="module")
def store(minilm_tokenizer, small_corpus, tmp_path_factory):
    # small shards: the corpus spans several, each holding sentences of similar length (not corpus order)
    from bertology.models import from_modules
    from bertology.testing import make_tiny_bert

    lm = from_modules("tiny-bert", make_tiny_bert(minilm_tokenizer), minilm_tokenizer)
    root = tmp_path_factory.mktemp("stores")
    return extract(lm, small_corpus, root=root, progress=False, shard_size=7, attentions=False)


@pytest.fixture
def small_blocks(monkeypatch):
    """Row blocks of ~100 rows and MEV batches of 10 words, so that every measure takes several blocks."""
    monkeypatch.setattr(ctx_module, "BLOCK_BYTES", 100 * 4 * 32)
    monkeypatch.setattr(ctx_module, "GROUP_BATCH", 10)


def test_layer_rows_read_only_the_rows_asked_for(store):
    assert store.n_shards >= 4
    rng = np.random.default_rng(0)
    layer = store.layer(1)
    for words in (
        rng.integers(0, store.n_words, 50),  # sparse, with repeats, any order
        np.arange(store.n_words)[::-1],  # dense
        np.array([store.n_words - 1]),
        np.array([], dtype=np.int64),
    ):
        np.testing.assert_array_equal(store.layer_rows(1, words), layer[words])
        np.testing.assert_array_equal(store.view([0, 1]).rows(1, words), layer[words])
        np.testing.assert_array_equal(store.view([1]).rows_from_shards(0, words), layer[words])
    np.testing.assert_array_equal(store.layer_rows(-1, [3, 1]), store.layer(store.n_layers - 1)[[3, 1]])
    from bertology.probes.probing.combinations import CombinedView, combine

    words = rng.integers(0, store.n_words, 30)
    np.testing.assert_array_equal(CombinedView(store, "sum_all").rows(0, words), combine(store, "sum_all")[words])
    with pytest.raises(StoreError, match="word indices"):
        store.layer_rows(0, [store.n_words])
    with pytest.raises(StoreError, match="out of range"):
        store.layer_rows(store.n_layers, [0])


def _whole_layer_table(store, words, offsets, min_occurrences, seed=0, n_pairs=500):
    """Ethayarajh's measures per layer with the whole layer in memory: the primitives as before."""
    types, positions, starts = occurrence_groups(words, min_occurrences=min_occurrences, seed=seed)
    out = {}
    for li in range(store.n_layers):
        v = store.layer(li)
        rng = np.random.default_rng([seed, li])
        aniso = random_pair_similarity(v, offsets, n_pairs, rng)
        batch = ctx_module.GROUP_BATCH  # the same batches of words as the streamed call's
        mev_base = mev_per_group(v, random_groups(len(v), starts, rng), starts, batch=batch).mean()
        out[li] = {
            "intra_sentence_similarity": (intra_sentence_per_sentence(v, offsets).mean(), aniso),
            "self_similarity": (self_similarity_per_word(v, positions, starts).mean(), aniso),
            "mev": (mev_per_group(v, positions, starts, batch=batch).mean(), mev_base),
        }
    return out


def test_streamed_contextuality_equals_the_whole_layer_to_the_last_bit(store, small_corpus, small_blocks):
    words, offsets = small_corpus.flat_words(), store.sentence_offsets
    expected = _whole_layer_table(store, words, offsets, min_occurrences=2)
    types, _, _ = occurrence_groups(words, min_occurrences=2)
    assert len(types) > 3 * ctx_module.GROUP_BATCH  # several MEV batches and row blocks
    streamed = contextuality(store.view(), words, offsets, min_occurrences=2, n_baseline_pairs=500)
    for row in streamed.itertuples():
        raw, baseline = expected[row.layer][row.metric]
        assert row.raw == raw and row.baseline == baseline, (row.layer, row.metric)
    in_memory = contextuality(store.layers(), words, offsets, min_occurrences=2, n_baseline_pairs=500)
    pd.testing.assert_frame_equal(streamed, in_memory, check_exact=True)
    by_word = contextuality_by_word(store.view(), words, offsets, min_occurrences=2)
    pd.testing.assert_frame_equal(
        by_word, contextuality_by_word(store.layers(), words, offsets, min_occurrences=2), check_exact=True
    )
    _, positions, starts = occurrence_groups(words, min_occurrences=2)
    last = by_word[by_word["layer"] == store.n_layers - 1]
    np.testing.assert_array_equal(
        last["mev"], mev_per_group(store.layer(store.n_layers - 1), positions, starts, batch=ctx_module.GROUP_BATCH)
    )


def test_streamed_contextuality_refuses_offsets_that_are_not_the_stores(store, small_corpus):
    words = small_corpus.flat_words()
    offsets = np.array([0, 1, len(words)])
    with pytest.raises(WorkbenchError, match="store's"):
        contextuality(store.view(), words, offsets)


def test_distilled_vectors_from_a_store_equal_the_whole_layers(store, small_corpus):
    words = small_corpus.flat_words()
    whole = distill_static(store.layer(-1), words)
    streamed = distill_static(store.view([-1]), words)
    assert streamed.words == whole.words and streamed.metadata == whole.metadata
    np.testing.assert_allclose(streamed.matrix, whole.matrix, rtol=1e-6, atol=1e-7)
    # planted: a word's vector is the plain mean of its occurrences' rows
    the = [i for i, w in enumerate(words) if w.lower() == "the"]
    assert len(the) > 5
    np.testing.assert_allclose(streamed.vector("the"), store.layer(-1)[the].mean(0), rtol=1e-5, atol=1e-6)
    with pytest.raises(WorkbenchError, match="one layer"):
        distill_static(store.view([0, 1]), words)


def test_neighbours_from_a_store_equal_the_whole_layers(store, small_corpus):
    words, offsets = small_corpus.flat_words(), store.sentence_offsets
    static = distill_static(store.layer(-1), words)
    for same_word in (True, False):
        whole = static_vs_contextual_neighbours("the", static, store.layer(-1), words, offsets, same_word=same_word)
        streamed = static_vs_contextual_neighbours("the", static, store.view([-1]), words, offsets, same_word=same_word)
        pd.testing.assert_frame_equal(streamed, whole, check_exact=True)
        assert (whole["space"] == "contextual").sum() == 5


def test_document_sums_read_a_sentence_at_a_time(tiny_lm, tmp_path, monkeypatch):
    """The semantic-change study's contextual sums: per document and word, the float64 sum of the
    word's vectors, equal to summing the whole layer's rows in corpus order."""
    from bertology.corpus import Corpus, Sentence
    from bertology.probes.embeddings.analysis import _document_sums

    monkeypatch.setenv("BERTOLOGY_HOME", str(tmp_path))
    docs = [[["the", "cat", "sat"], ["the", "dog"]], [["a", "cat", "the", "cat"]]]
    sums, counts = _document_sums(tiny_lm, docs, -1, "planted")
    flat = [Sentence(f"planted-{d}-{i}", list(s)) for d, doc in enumerate(docs) for i, s in enumerate(doc)]
    layer = extract(tiny_lm, Corpus("planted", flat), attentions=False, progress=False).layer(-1)
    assert counts[0]["the"] == 2 and counts[1]["cat"] == 2 and counts[1]["dog"] == 0
    np.testing.assert_array_equal(sums[0]["the"], layer[0].astype(np.float64) + layer[3].astype(np.float64))
    np.testing.assert_array_equal(sums[1]["cat"], layer[6].astype(np.float64) + layer[8].astype(np.float64))
