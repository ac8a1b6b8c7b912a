"""Streaming reads of the feature store (issue 53 item 2): the pread shard reader returns exactly what
safetensors returns, a LayerView equals the in-memory layers, and span probes fed shard by shard --
gathered in memory or spilled to a temporary file -- give the same features and the same scores as
probes fed the whole ``[L, n_words, D]`` array; reading a store maps none of it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors import safe_open

from bertology.probes.probing import ProbeConfig, _spans, probe_arrays
from bertology.probes.probing._spans import SpanFeatures, _SpillFile, span_index
from bertology.probes.probing.tasks import build_task
from bertology.store import extract
from bertology.store.shardfile import ShardFile


@pytest.fixture
def store(tiny_lm, small_corpus, tmp_path):
    # small shards, so that the corpus spans several and examples come from every one
    return extract(tiny_lm, small_corpus, root=tmp_path / "stores", progress=False, shard_size=7)


def test_shard_file_reads_what_safetensors_reads(store):
    shard = store._shards[1]
    reader = ShardFile(shard)
    with safe_open(str(shard), framework="pt") as handle:
        for name in handle.keys():
            full = handle.get_tensor(name)
            np.testing.assert_array_equal(reader.read(name), full.float().numpy() if full.is_floating_point() else full)
            for axis in range(full.dim()):
                stop = full.shape[axis]
                start = stop // 3
                expected = full.narrow(axis, start, stop - start)
                got = reader.read(name, axis, start, stop)
                assert got.shape == tuple(expected.shape)
                np.testing.assert_array_equal(got, expected.numpy())
    with pytest.raises(IndexError):
        reader.read("hidden", 1, 0, 10**6)


def test_shard_file_reads_only_the_chosen_layers(store):
    """``first=``: chosen indices of axis 0 (layers of ``[L, W, D]``), in the order asked, equal to
    slicing the whole read; the structural probe's reader reads a sentence's chosen layers only."""
    reader = ShardFile(store._shards[0])
    W = reader.shape("hidden")[1]
    whole = reader.read("hidden", 1, 2, W - 1)
    for first in ([2], [2, 0], [0, 1, 2], []):
        np.testing.assert_array_equal(reader.read("hidden", 1, 2, W - 1, first=first), whole[first])
    attention = reader.read("attention", 2, 3, 20)  # [layers, heads, flat maps]: axis 1 stays whole
    np.testing.assert_array_equal(reader.read("attention", 2, 3, 20, first=[1]), attention[[1]])
    for bad in ({"first": [store.n_layers]}, {"first": [0], "axis": 0}):
        with pytest.raises(IndexError):
            reader.read("hidden", **{"axis": 1, "start": 0, "stop": 1, **bad})
    for i in (0, store.n_sentences - 1):
        np.testing.assert_array_equal(store.hidden(i, [2, -1, 0]), store.hidden(i)[[2, -1, 0]])


def test_float16_store_reads_as_float32(tiny_lm, small_corpus, tmp_path):
    half = extract(tiny_lm, small_corpus, root=tmp_path, progress=False, storage="float16", attentions=False)
    full = extract(tiny_lm, small_corpus, root=tmp_path, progress=False, attentions=False)
    assert half.layers().dtype == np.float32
    np.testing.assert_allclose(half.layers(), full.layers(), atol=2e-2, rtol=2e-3)


def test_layer_view_equals_layers(store):
    view = store.view([0, 2])
    assert view.shape == (2, store.n_words, store.dim) and len(view) == 2
    layers = store.layers([0, 2])
    np.testing.assert_array_equal(view[1], layers[1])
    np.testing.assert_array_equal(np.asarray(view), layers)
    for k in range(store.n_shards):  # shard_hidden: the shard's words in its sentences' order
        rows = np.concatenate(
            [np.arange(store.sentence_offsets[s], store.sentence_offsets[s + 1]) for s in store.shard_sentences(k)]
        )
        np.testing.assert_array_equal(store.shard_hidden(k, [0, 2]), layers[:, rows])


def test_span_features_from_the_store_equal_the_array_path(store, small_corpus):
    task = build_task(small_corpus, "pos")
    tokens, mask = span_index(task, store.sentence_offsets)
    from_array = SpanFeatures(store.layers(), tokens, mask, True, "cpu")
    in_memory = SpanFeatures(store.view(), tokens, mask, True, "cpu")
    spilled = SpanFeatures(store.view(), tokens, mask, True, "cpu", cache_bytes=1)
    assert in_memory.cached is not None and spilled.cached is None and spilled._spill is not None
    torch.testing.assert_close(in_memory.mean, from_array.mean, atol=1e-5, rtol=1e-5)
    idx = torch.randperm(len(tokens), generator=torch.Generator().manual_seed(0))[:50]
    a, mask_a = from_array(idx)
    b, _ = in_memory(idx)
    c, mask_c = spilled(idx)
    torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-4)  # float64 vs float32 statistics
    assert torch.equal(c, b) and torch.equal(mask_c, mask_a)  # the spill holds the same bytes
    assert torch.equal(spilled(idx, torch.bfloat16)[0], in_memory(idx, torch.bfloat16)[0])


def test_shard_reads_of_a_word_range_into_a_buffer(store):
    """``shard_hidden(k, layers, out=, words=)``: the shard's words ``start:stop`` of those layers, read
    into (and returned as) ``out``; a buffer of the wrong shape is refused."""
    for k in range(store.n_shards):
        whole = store.shard_hidden(k, [2, 0])
        W = whole.shape[1]
        for start, stop in ((0, W), (1, W - 1), (W // 2, W // 2 + 1), (3, 3)):
            buffer = np.full((2, stop - start, store.dim), np.nan, dtype=np.float32)
            got = store.view([2, 0]).shard(k, out=buffer, words=(start, stop))
            assert got is buffer
            np.testing.assert_array_equal(got, whole[:, start:stop])
    with pytest.raises(ValueError, match="out="):
        store.shard_hidden(0, [0], out=np.empty((1, 1, store.dim), dtype=np.float32), words=(0, 2))


@pytest.mark.parametrize("task_name", ["pos", "deps"])
def test_span_features_gathered_in_small_chunks_equal_the_array_path(store, small_corpus, task_name, monkeypatch):
    """Gathering reads each chunk's run of a shard's words (the shard's examples in word order, since
    shards hold length-sorted sentences): with chunks of 16 examples, the features are the array
    path's, in memory and spilled."""
    monkeypatch.setattr(_spans, "GATHER_BYTES", 1.0)
    task = build_task(small_corpus, task_name)
    tokens, mask = span_index(task, store.sentence_offsets)
    from_array = SpanFeatures(store.layers(), tokens, mask, True, "cpu")
    in_memory = SpanFeatures(store.view(), tokens, mask, True, "cpu")
    spilled = SpanFeatures(store.view(), tokens, mask, True, "cpu", cache_bytes=1)
    assert len(tokens) > 4 * 16 and spilled._spill is not None
    idx = torch.arange(len(tokens))
    a, mask_a = from_array(idx)
    b, _ = in_memory(idx)
    c, _ = spilled(idx)
    m = mask_a[None, :, :, :, None].expand_as(a)
    torch.testing.assert_close(b[m], a[m], atol=1e-4, rtol=1e-4)  # float64 vs float32 statistics
    assert torch.equal(c, b)


def test_probe_scores_do_not_depend_on_where_features_are_kept(store, small_corpus):
    task = build_task(small_corpus, "pos")
    kwargs = dict(seeds=[0], config=ProbeConfig(max_epochs=3, precision="float32"))
    in_memory = probe_arrays(store.view(), store.sentence_offsets, task, **kwargs)
    spilled = probe_arrays(
        store.view(),
        store.sentence_offsets,
        task,
        seeds=[0],
        config=ProbeConfig(max_epochs=3, precision="float32", cache_mb=1e-6),
    )
    scores = in_memory[in_memory["split"].isin(["dev", "test"])]
    spilled_scores = spilled[spilled["split"].isin(["dev", "test"])]
    np.testing.assert_array_equal(scores["value"].to_numpy(), spilled_scores["value"].to_numpy())


@pytest.mark.parametrize("task_name", ["deps", "entities"])
def test_spilled_and_in_memory_features_give_the_same_scores_for_wide_and_paired_spans(store, small_corpus, task_name):
    """Two spans per example (deps) and multi-word spans (entities), scalar mix trained with Adam at the
    default precision: the batches read back from the spill file hold the same examples in the same
    order with the same bytes, so every score is identical."""
    task = build_task(small_corpus, task_name)
    tokens, _ = span_index(task, store.sentence_offsets)
    assert tokens.shape[1] == (2 if task_name == "deps" else 1)
    assert task_name == "deps" or tokens.shape[2] > 1  # some entity spans more than one word
    frames = [
        probe_arrays(
            store.view(),
            store.sentence_offsets,
            task,
            mode="mix",
            seeds=[0],
            config=ProbeConfig(max_epochs=2, cache_mb=cache_mb),
        )
        for cache_mb in (512.0, 1e-6)
    ]
    held, spilled = (f[f["split"].isin(["dev", "test"])]["value"].to_numpy() for f in frames)
    assert np.isfinite(held).all() and len(held) > 4
    np.testing.assert_array_equal(spilled, held)


def test_linear_probes_on_spilled_features_give_the_same_scores(store, small_corpus):
    """Full-batch L-BFGS reads its pooled inputs in chunks of consecutive examples (long runs: many
    rows per ``preadv`` call) from the spill file: the same inputs, the same scores."""
    task = build_task(small_corpus, "entities")
    frames = [
        probe_arrays(
            store.view(),
            store.sentence_offsets,
            task,
            seeds=[0],
            config=ProbeConfig(probe="linear", pooling="mean", max_epochs=3, cache_mb=cache_mb),
        )
        for cache_mb in (512.0, 1e-6)
    ]
    held, spilled = (f[f["split"].isin(["dev", "test"])]["value"].to_numpy() for f in frames)
    assert np.isfinite(held).all() and len(held) > 4
    np.testing.assert_array_equal(spilled, held)


def test_linear_probes_stream_their_design_beside_the_store(store, small_corpus, monkeypatch):
    """Spilled features and a design above the spill's cache: L-BFGS passes over the pooled inputs
    chunk by chunk from a temporary file in the store's folder (not /tmp), and scores as the probes
    on cached features do (the same objective, summed in another order)."""
    from bertology.probes.probing import _lbfgs

    folders = []

    class Recorded(_lbfgs.Spill):
        def __init__(self, directory=None, cache_bytes=_lbfgs.DEFAULT_CACHE_BYTES):
            folders.append(directory)
            super().__init__(directory, cache_bytes)

    task = build_task(small_corpus, "entities")
    config = dict(probe="linear", pooling="mean", max_epochs=3, precision="float32")
    held = probe_arrays(store.view(), store.sentence_offsets, task, seeds=[0], config=ProbeConfig(**config))
    monkeypatch.setattr(_lbfgs, "Spill", Recorded)
    monkeypatch.setattr(_lbfgs, "SPILL_CACHE_BYTES", 0)
    monkeypatch.setattr(_lbfgs, "CHUNK_BYTES", 1)  # one example a chunk
    streamed = probe_arrays(
        store.view(), store.sentence_offsets, task, seeds=[0], config=ProbeConfig(cache_mb=1e-6, **config)
    )
    assert folders == [store.path.parent]
    assert not [p for p in store.path.parent.iterdir() if p.name.startswith(".bertology-spill")]  # unnamed, gone
    a, b = (
        f[f["split"].isin(["dev", "test"])].set_index(["layer", "split", "metric"])["value"] for f in (held, streamed)
    )
    assert np.isfinite(a).all() and len(a) > 4
    np.testing.assert_allclose(b.loc[a.index].to_numpy(), a.to_numpy(), rtol=1e-3, atol=1e-3)


def test_spill_file_reads_rows_in_any_order(tmp_path, monkeypatch):
    """``_SpillFile`` writes rows given out of order and reads any selection (repeats, runs of
    consecutive rows, runs longer than one call may carry) back in the order asked."""
    monkeypatch.setattr(_spans, "_IOV_MAX", 3)  # runs split over several preadv calls
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((40, 2, 1, 3, 5)).astype(np.float32)
    spill = _SpillFile(tmp_path, 40, (2, 1, 3, 5))
    written = rng.permutation(40)
    for part in np.array_split(written, 3):
        spill.write(part, rows[part])
    asked = np.concatenate([np.arange(5, 17), [3, 3, 39, 0], rng.integers(0, 40, 20), np.arange(30, 22, -1)])
    np.testing.assert_array_equal(spill.read(asked), rows[asked])
    np.testing.assert_array_equal(spill.read(np.arange(40)), rows)
    assert spill.read(np.zeros(0, dtype=np.int64)).shape == (0, 2, 1, 3, 5)
    with pytest.raises(IndexError):
        spill.read(np.array([40]))
    assert list(tmp_path.iterdir()) == []  # unnamed: nothing left beside the store
    spill.close()


def test_spilled_features_are_read_without_mapping_the_file(store, small_corpus):
    """Batches come back by ``preadv``: the spill file is never mapped (a memory map faulted its pages
    in one at a time, more of them the larger the file)."""
    task = build_task(small_corpus, "pos")
    tokens, mask = span_index(task, store.sentence_offsets)
    spilled = SpanFeatures(store.view(), tokens, mask, True, "cpu", cache_bytes=1)
    assert spilled._spill is not None
    g, _ = spilled(torch.arange(len(tokens) - 1, -1, -1))
    assert g.shape[1] == len(tokens) and torch.isfinite(g).all()
    maps = open("/proc/self/maps").read()
    assert str(store.path.parent) not in maps and ".span-features-" not in maps


def test_reading_a_store_keeps_none_of_it_mapped(store):
    """The old reader memory-mapped every shard it read (safetensors' safe_open), so walking a store
    kept all of it resident; the pread reader maps nothing."""
    for i in range(store.n_sentences):
        store.hidden(i)
        store.attention(i)
        store.special_attention(i)
    store.layers()
    maps = open("/proc/self/maps").read()
    assert not [p for p in store._shards if str(p) in maps]


def test_structural_probe_read_from_the_store_equals_the_array(store, small_corpus):
    from bertology.probes.probing.structural import StructuralSettings, corpus_trees, probe_structure

    trees = corpus_trees(small_corpus)
    kwargs = dict(kind="distance", seeds=[0], settings=StructuralSettings(batch_size=8, max_epochs=3))
    from_array = probe_structure(store.layers([1, 2]), store.sentence_offsets, trees, layer_ids=[1, 2], **kwargs)
    streamed = probe_structure(store.view([1, 2]), store.sentence_offsets, trees, layer_ids=[1, 2], **kwargs)
    values = from_array.scores["value"].to_numpy()
    assert np.isfinite(values).sum() > 10  # uuas, dspr, ... of two layers on dev and test
    np.testing.assert_allclose(streamed.scores["value"].to_numpy(), values, rtol=1e-6)
    assert streamed.sentences.equals(from_array.sentences)


def test_attention_probe_on_lazy_maps_equals_the_list(store, small_corpus):
    from bertology.probes.heads.attention_probe import LazyAttentions, attention_probe

    sentences = list(small_corpus)
    held = attention_probe([store.attention(i) for i in range(len(sentences))], sentences, seed=0)
    lazy = attention_probe(LazyAttentions(store.attention, range(len(sentences))), sentences, seed=0)
    assert held["uas"].notna().all() and len(held) == 3  # best offset, best head, learned combination
    pd.testing.assert_frame_equal(lazy, held)
