"""Feature extraction and store: equality with a plain HF forward pass, word-level attention,
kill-and-resume byte identity, content addressing, long-sentence policy, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from store_interrupt import interrupted_after

from bertology.corpus import Corpus, Sentence, load_corpus
from bertology.errors import StoreError
from bertology.features import segment_sentence
from bertology.models import from_modules
from bertology.store import FeatureStore, extract
from bertology.testing import make_tiny_bert


def hf_reference(lm, words):
    """Plain HF forward pass of one sentence: hidden [L+1, T, D], attentions [L, H, T, T], word ids."""
    enc = lm.tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        out = lm.model(**enc, output_hidden_states=True, output_attentions=True)
    hidden = torch.stack(out.hidden_states)[:, 0].numpy()
    att = torch.stack(out.attentions)[:, 0].numpy()
    return hidden, att, enc.word_ids()


@pytest.mark.parametrize("pooling", ["first", "last", "mean"])
def test_hidden_states_equal_plain_hf_forward(tiny_lm, small_corpus, tmp_path, pooling):
    store = extract(tiny_lm, small_corpus, pooling=pooling, root=tmp_path, progress=False, batch_tokens=512)
    assert store.n_layers == 3 and store.dim == 32 and store.n_heads == 4
    assert store.n_words == small_corpus.n_words
    for i in (0, 7, 23):
        words = small_corpus[i].words
        hidden, _, word_ids = hf_reference(tiny_lm, words)
        expected = []
        for w in range(len(words)):
            pos = [t for t, x in enumerate(word_ids) if x == w]
            pick = {"first": hidden[:, pos[0]], "last": hidden[:, pos[-1]], "mean": hidden[:, pos].mean(1)}[pooling]
            expected.append(pick)
        expected = np.stack(expected, 1)
        np.testing.assert_allclose(store.hidden(i), expected, atol=1e-5, rtol=1e-5)
        flat = store.layer(2)[store.sentence_offsets[i] : store.sentence_offsets[i + 1]]
        np.testing.assert_allclose(flat, expected[2], atol=1e-5, rtol=1e-5)


def test_word_level_attention_follows_clark(tiny_lm, tmp_path):
    words = ["The", "unbelievably", "tokenizable", "cat", "sat"]  # split words
    corpus = Corpus("c", [Sentence("s", words)])
    store = extract(tiny_lm, corpus, root=tmp_path, progress=False)
    _, att, word_ids = hf_reference(tiny_lm, words)
    pieces = [[t for t, x in enumerate(word_ids) if x == w] for w in range(len(words))]
    assert any(len(p) > 1 for p in pieces)
    raw = np.zeros(att.shape[:2] + (len(words), len(words)))
    for i, pi in enumerate(pieces):
        for j, pj in enumerate(pieces):
            raw[:, :, i, j] = att[:, :, pi][:, :, :, pj].sum(-1).mean(-1)  # sum over "to" pieces, mean over "from"
    np.testing.assert_allclose(store.attention(0, normalise=False), raw, atol=1e-6)
    special = store.special_attention(0)
    np.testing.assert_allclose(raw.sum(-1) + special.sum(-1), 1.0, atol=1e-5)  # nothing lost
    np.testing.assert_allclose(store.attention(0).sum(-1), 1.0, atol=1e-5)
    cls_mass = np.stack([att[:, :, p, 0].mean(-1) for p in pieces], -1)
    np.testing.assert_allclose(special[..., 0], cls_mass, atol=1e-6)


def test_token_offsets_count_the_token_level_argmax(tiny_lm, small_corpus, tmp_path):
    """Per sentence, layer and head: how many query tokens (special tokens included, as queries and as
    keys) have their token attention argmax at each relative offset -K..K, or further ("other")."""
    store = extract(tiny_lm, small_corpus, root=tmp_path, shard_size=8, batch_tokens=300, progress=False)
    assert store.manifest["version"] == 3 and store.has_token_offsets
    window = store.manifest["settings"]["token_offset_window"]
    assert store.token_offset_bins == [*range(-window, window + 1), "other"]
    total = np.zeros((2, 4, 2 * window + 2), dtype=np.int64)
    for i in (0, 7, 23, 39):
        _, att, word_ids = hf_reference(tiny_lm, small_corpus[i].words)
        offset = att.argmax(-1) - np.arange(att.shape[-1])  # [L, H, T]
        bins = np.where(np.abs(offset) <= window, offset + window, 2 * window + 1)
        special = np.array([w is None for w in word_ids])
        for queries, rows in (("all", ~np.zeros_like(special)), ("words", ~special), ("special", special)):
            expected = np.stack(
                [np.bincount(b, minlength=2 * window + 2) for b in bins[..., rows].reshape(-1, rows.sum())]
            )
            np.testing.assert_array_equal(store.token_offsets(i, queries=queries), expected.reshape(2, 4, -1))
        assert store.token_offsets(i).sum(-1).tolist() == [[len(word_ids)] * 4] * 2
    for i in range(len(small_corpus)):
        total += store.token_offsets(i)
    np.testing.assert_array_equal(store.token_offset_totals(), total)


def test_store_without_token_offsets_is_refused_not_misread(tiny_lm, small_corpus, tmp_path):
    """A version-1 store (no token-level counts) is never reused by extract and says what to do."""
    import json

    store = extract(tiny_lm, small_corpus, root=tmp_path, progress=False)
    old = tmp_path / "old"
    old.mkdir()
    for f in store.path.iterdir():
        (old / f.name).write_bytes(f.read_bytes())
    manifest = json.loads((old / "manifest.json").read_text())
    manifest["version"] = manifest["settings"]["version"] = 1
    del manifest["settings"]["token_offset_window"]
    for field in ("manifest_sha256", "shard_sha256", "shard_bytes"):  # version 1 had no checksums
        del manifest[field]
    (old / "manifest.json").write_text(json.dumps(manifest))
    legacy = FeatureStore(old)
    assert legacy.has_attention and not legacy.has_token_offsets
    assert legacy.attention(0).shape == store.attention(0).shape
    with pytest.raises(StoreError, match="no token-level argmax offsets.*extract again"):
        legacy.token_offsets(0)
    from bertology.store import ExtractionSettings, store_key

    # the version and the window are part of the content key: an old store's key never matches
    assert store_key(tiny_lm, small_corpus.fingerprint, ExtractionSettings()) == store.path.name
    assert store_key(tiny_lm, small_corpus.fingerprint, ExtractionSettings(version=1)) != store.path.name


def test_kill_and_resume_gives_byte_identical_store(tiny_lm, small_corpus, tmp_path):
    ref = extract(tiny_lm, small_corpus, root=tmp_path / "a", shard_size=8, progress=False)
    with interrupted_after(2):
        extract(tiny_lm, small_corpus, root=tmp_path / "b", shard_size=8, progress=False)
    store_dir = next((tmp_path / "b").iterdir())
    assert len(list(store_dir.glob("shard-*.safetensors"))) == 2 and not (store_dir / "manifest.json").exists()
    # corrupt one finished shard: resume must recompute it, not trust it
    shard = sorted(store_dir.glob("shard-*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    (store_dir / ".shard-00003.safetensors.x1y2ab_9.tmp").write_bytes(b"half a shard")  # killed mid-write
    resumed = extract(tiny_lm, small_corpus, root=tmp_path / "b", shard_size=8, progress=False)
    assert not list(store_dir.glob(".*.tmp"))
    for a, b in zip(sorted(ref.path.glob("shard-*")), sorted(resumed.path.glob("shard-*"))):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert ref.path.name == resumed.path.name


def test_store_is_content_addressed_and_reopened(tiny_lm, small_corpus, tmp_path):
    a = extract(tiny_lm, small_corpus, root=tmp_path, progress=False)
    mtime = (a.path / "manifest.json").stat().st_mtime_ns
    again = extract(tiny_lm, small_corpus, root=tmp_path, progress=False)
    assert again.path == a.path and (a.path / "manifest.json").stat().st_mtime_ns == mtime
    other = extract(tiny_lm, small_corpus, root=tmp_path, pooling="mean", progress=False)
    assert other.path != a.path
    assert FeatureStore(a.path).manifest["corpus"]["fingerprint"] == small_corpus.fingerprint


def test_long_sentences_error_names_sentence_or_use_windows(minilm_tokenizer, tmp_path):
    model = make_tiny_bert(minilm_tokenizer, max_positions=16)
    lm = from_modules("tiny16", model, minilm_tokenizer)
    long_words = [f"w{i}" if i % 3 else "word" for i in range(30)]
    corpus = Corpus("long", [Sentence("short-1", ["a", "cat"]), Sentence("long-7", long_words)])
    with pytest.raises(StoreError, match=r"sentence long-7 .* exceed the model's maximum of 16"):
        extract(lm, corpus, root=tmp_path, attentions=False, progress=False)
    with pytest.raises(StoreError, match="attention maps cannot be windowed"):
        extract(lm, corpus, root=tmp_path, long_policy="window", progress=False)
    store = extract(lm, corpus, root=tmp_path, long_policy="window", attentions=False, progress=False)
    hidden = store.hidden(1)
    assert hidden.shape == (3, 30, 32) and np.isfinite(hidden).all()
    # the first words come from the first window: equal to a direct forward pass of that window
    enc = minilm_tokenizer(long_words, is_split_into_words=True)
    n_first = max(w for w in enc.word_ids()[:15] if w is not None)  # words fully inside 14 tokens
    window_words = long_words[:n_first]
    ref_hidden, _, word_ids = hf_reference(lm, window_words)
    first_pos = [word_ids.index(w) for w in range(2)]
    np.testing.assert_allclose(hidden[:, :2], ref_hidden[:, first_pos], atol=1e-5)
    # every word equals a plain forward pass of the window that owns it
    segments = segment_sentence(minilm_tokenizer, long_words, 1, 16, "window", "long-7")
    assert len(segments) > 2 and sum(int(s.keep.sum()) for s in segments) == 30
    for seg in segments:
        ref_hidden, _, word_ids = hf_reference(lm, long_words[seg.word_start : seg.word_end])
        for w in np.flatnonzero(seg.keep):
            np.testing.assert_allclose(hidden[:, seg.word_start + w], ref_hidden[:, word_ids.index(w)], atol=1e-5)
    np.testing.assert_allclose(store.hidden(0), hf_reference(lm, ["a", "cat"])[0][:, [1, 2]], atol=1e-5)


def test_bad_input_is_refused_clearly(tiny_lm, tmp_path):
    with pytest.raises(StoreError, match="sentence e-1 .*empty sentence"):
        extract(tiny_lm, Corpus("c", [Sentence("e-1", [])]), root=tmp_path, progress=False)
    with pytest.raises(StoreError, match="no sentences"):
        extract(tiny_lm, Corpus("c", []), root=tmp_path, progress=False)
    with pytest.raises(StoreError, match="pooling must be"):
        extract(tiny_lm, Corpus("c", [Sentence("a", ["x"])]), pooling="max", root=tmp_path)
    with pytest.raises(StoreError, match="not a complete feature store"):
        FeatureStore(tmp_path)


def test_nan_weights_are_caught(minilm_tokenizer, tmp_path):
    model = make_tiny_bert(minilm_tokenizer)
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight[0, 0] = float("nan")
    lm = from_modules("nan-bert", model, minilm_tokenizer)
    with pytest.raises(StoreError, match="non-finite values"):
        extract(lm, Corpus("c", [Sentence("a", ["a", "cat"])]), root=tmp_path, progress=False)


def test_word_without_pieces_gets_the_unknown_token(minilm_tokenizer, tmp_path):
    """A word the tokenizer drops (a zero-width space) still gets a vector: that of [UNK]."""
    lm = from_modules("tiny-unk", make_tiny_bert(minilm_tokenizer), minilm_tokenizer)
    words = ["a", "\u200b", "cat"]
    store = extract(
        lm, Corpus("z", [Sentence("z-1", words), Sentence("z-2", ["the", "dog"])]), root=tmp_path, progress=False
    )
    ref_hidden, _, word_ids = hf_reference(lm, ["a", minilm_tokenizer.unk_token, "cat"])
    np.testing.assert_allclose(store.hidden(0), ref_hidden[:, [word_ids.index(w) for w in range(3)]], atol=1e-5)
    assert store.attention(0).shape == (2, 4, 3, 3)


def test_fast_settings_stay_close_to_float32_and_restore_the_model(tiny_lm, small_corpus, tmp_path):
    """bfloat16 autocast + float16 storage: reads come back float32, close to the exact store; the
    model's float32 weights are untouched afterwards."""
    before = {k: v.clone() for k, v in tiny_lm.model.state_dict().items()}
    exact = extract(tiny_lm, small_corpus, root=tmp_path, progress=False)
    fast = extract(
        tiny_lm, small_corpus, root=tmp_path, amp_dtype="bfloat16", storage="float16", batch_tokens=4096, progress=False
    )
    assert fast.path != exact.path and fast.manifest["settings"]["storage"] == "float16"
    for k, v in tiny_lm.model.state_dict().items():
        assert v.dtype == before[k].dtype and torch.equal(v, before[k]), k
    h_exact, h_fast = exact.layers(), fast.layers()
    assert h_fast.dtype == np.float32
    assert np.abs(h_fast - h_exact).max() < 0.02 * np.abs(h_exact).max()
    for i in (0, 11, 39):
        a_fast = fast.attention(i, normalise=False)
        assert a_fast.dtype == np.float32
        assert np.abs(a_fast - exact.attention(i, normalise=False)).max() < 0.05
        assert np.abs(fast.special_attention(i) - exact.special_attention(i)).max() < 0.05
    with pytest.raises(StoreError, match="storage must be"):
        extract(tiny_lm, small_corpus, root=tmp_path, storage="int8", progress=False)
    with pytest.raises(StoreError, match="amp_dtype must be"):
        extract(tiny_lm, small_corpus, root=tmp_path, amp_dtype="fp8", progress=False)


def test_float16_storage_refuses_values_it_cannot_hold(minilm_tokenizer, tmp_path):
    model = make_tiny_bert(minilm_tokenizer)
    with torch.no_grad():
        model.embeddings.LayerNorm.weight.fill_(1e6)  # embedding outputs far beyond float16's 65504
    lm = from_modules("huge-bert", model, minilm_tokenizer)
    corpus = Corpus("c", [Sentence("a", ["a", "cat"])])
    with pytest.raises(StoreError, match="overflow .*float16 storage.*storage='float32'"):
        extract(lm, corpus, root=tmp_path, storage="float16", attentions=False, progress=False)
    store = extract(lm, corpus, root=tmp_path, storage="float32", attentions=False, progress=False)
    assert np.abs(store.layer(0)).max() > 65504


@pytest.mark.slow  # a process killed and resumed
def test_sigkill_mid_extraction_then_resume_is_byte_identical(tiny_lm, tmp_path):
    """A real kill (SIGKILL, no clean-up) part-way through; the resumed store equals an uninterrupted one."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = """
import sys
from bertology.testing import make_tiny_bert
from transformers import AutoTokenizer
from bertology.models import embedded_models, from_modules
from bertology.corpus import load_corpus
from bertology.store import extract
tok = AutoTokenizer.from_pretrained(embedded_models()["minilm-l6"]["path"])
lm = from_modules("tiny-bert", make_tiny_bert(tok), tok)
extract(lm, load_corpus("brown-sample", limit=600), root=sys.argv[1], shard_size=4, progress=False)
"""
    root = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if len(list(root.glob("*/shard-*.safetensors"))) >= 3:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    store_dir = next(root.iterdir())
    assert not (store_dir / "manifest.json").exists()
    corpus = load_corpus("brown-sample", limit=600)
    resumed = extract(tiny_lm, corpus, root=root, shard_size=4, progress=False)
    ref = extract(tiny_lm, corpus, root=tmp_path / "ref", shard_size=4, progress=False)
    assert resumed.path.name == ref.path.name
    for a, b in zip(sorted(ref.path.glob("shard-*")), sorted(resumed.path.glob("shard-*")), strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_hashing_beside_the_write_gives_the_same_file_and_digest(tmp_path, monkeypatch):
    """The GPU pipeline's writers hash in a second thread, in 16 MiB pieces (here 1 KiB, so that a
    tensor spans many pieces): the same bytes, and the sha256 of those bytes."""
    import hashlib

    from safetensors.torch import load_file

    from bertology.store import write

    monkeypatch.setattr(write, "_HASH_CHUNK", 1024)
    gen = torch.Generator().manual_seed(0)
    tensors = {
        "hidden": torch.randn(3, 50, 40, generator=gen).half(),
        "ids": torch.arange(7),
        "counts": torch.randint(0, 9, (5, 4), dtype=torch.int32, generator=gen),
    }
    plain = write.save_safetensors(tensors, tmp_path / "plain.safetensors")
    beside = write.save_safetensors(tensors, tmp_path / "beside.safetensors", hash_beside=True)
    data = (tmp_path / "beside.safetensors").read_bytes()
    assert beside == plain == hashlib.sha256(data).hexdigest()
    assert data == (tmp_path / "plain.safetensors").read_bytes()
    assert all(torch.equal(load_file(str(tmp_path / "beside.safetensors"))[k], v) for k, v in tensors.items())
