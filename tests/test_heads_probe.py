"""Planted-answer tests for the attention-based dependency probe (Clark et al. 2019)."""

from types import SimpleNamespace

import numpy as np

from bertology.probes.heads.attention_probe import AttentionDependencyProbe, attention_probe, best_heads
from bertology.probes.heads.classification import dependency_scores


def random_tree(rng):
    """A sentence length (6-13) and random heads (1-based, one root = 0, no self-loops)."""
    w = int(rng.integers(6, 14))
    root = int(rng.integers(w))
    return w, [0 if i == root else int(rng.choice([j for j in range(w) if j != i])) + 1 for i in range(w)]


def noisy_corpus(n=80, p_a=0.6, p_b=0.6, seed=0, parity=False):
    """Head (0,1) and head (1,3) each point to the gold head with probability p, else anywhere.

    parity: head (0,1) is right on even words, head (1,3) on odd words; else each attends to itself.
    """
    rng = np.random.default_rng(seed)
    sentences, attentions = [], []
    for s in range(n):
        w, heads = random_tree(rng)
        rels = [str(rng.choice(["nsubj", "dobj", "det"])) for _ in range(w)]
        a = rng.dirichlet(np.ones(w) * 0.5, size=(2, 4, w))
        for (layer, head), p, even in (((0, 1), p_a, 0), ((1, 3), p_b, 1)):
            m = np.full((w, w), 0.3 / w)
            for i, h in enumerate(heads):
                if parity:
                    target = h - 1 if (h > 0 and i % 2 == even) else i
                else:
                    target = h - 1 if (h > 0 and rng.random() < p) else int(rng.integers(w))
                m[i, target] += 0.7
            a[layer, head] = m / m.sum(-1, keepdims=True)
        sentences.append(SimpleNamespace(sent_id=str(s), words=[f"w{i}" for i in range(w)], heads=heads, deprels=rels))
        attentions.append(a)
    return sentences, attentions


def test_best_single_head_is_the_planted_one():
    sentences, attentions = noisy_corpus(p_a=1.0, p_b=0.3)
    top = best_heads(dependency_scores(attentions, sentences))
    row = top[(top.relation == "all") & (top.direction == "dependent_attends_to_head")].iloc[0]
    assert (row["layer"], row["head"]) == (1, 2) and row["accuracy"] == 1.0  # array position (0, 1)
    for rel in ("nsubj", "dobj", "det"):
        r = top[(top.relation == rel) & (top.direction == "dependent_attends_to_head")].iloc[0]
        assert (r["layer"], r["head"]) == (1, 2)


def test_learned_combination_beats_single_heads():
    sentences, attentions = noisy_corpus(n=120, parity=True)
    table = attention_probe(attentions, sentences, test_size=0.3, seed=0).set_index("method")
    assert table.loc["best_head", "layer"] in (1, 2)
    assert table.loc["learned_combination", "uas"] > table.loc["best_head", "uas"] + 0.3
    assert table.loc["best_offset", "uas"] < 0.3  # random trees: offsets are weak
    probe = AttentionDependencyProbe().fit(attentions[:80], sentences[:80])
    coef = probe.coef_[0]
    assert coef.shape == (2, 4)
    big = {tuple(ix) for ix in np.argwhere(coef >= np.sort(coef.ravel())[-2])}
    assert big == {(0, 1), (1, 3)}  # the two informative heads carry the largest weights
    pred = probe.predict(attentions[:2])
    assert len(pred) == 2 and pred[0].shape == (len(sentences[0].words),)


def word_typed_corpus(n=160, seed=0):
    """Head (0,1) finds the gold head of "a" words and points at a wrong word for "b" words; head
    (1,3) the reverse. Both heads are equally good overall, so only a probe that sees the words
    can tell which one to trust."""
    rng = np.random.default_rng(seed)
    sentences, attentions = [], []
    for s in range(n):
        w, heads = random_tree(rng)
        kinds = rng.choice(["a", "b"], size=w)
        words = [f"{k}{int(rng.integers(5))}" for k in kinds]
        a = rng.dirichlet(np.ones(w) * 0.5, size=(2, 4, w)) * 0.1
        for (layer, head), good in (((0, 1), "a"), ((1, 3), "b")):
            m = np.full((w, w), 0.3 / w)
            for i, h in enumerate(heads):
                wrong = [j for j in range(w) if j not in (i, h - 1)]
                target = h - 1 if (h > 0 and kinds[i] == good) else int(rng.choice(wrong))
                m[i, target] += 0.7
            a[layer, head] = m
        a /= a.sum(-1, keepdims=True)
        sentences.append(SimpleNamespace(sent_id=str(s), words=words, heads=heads, deprels=["dep"] * w))
        attentions.append(a)
    return sentences, attentions


def test_attention_and_words_probe_learns_which_head_to_trust_per_word():
    from bertology.probes.embeddings.static_vectors import StaticVectors

    sentences, attentions = word_typed_corpus()
    rng = np.random.default_rng(1)
    kind = {"a": rng.normal(size=8), "b": rng.normal(size=8)}
    words = [f"{k}{i}" for k in "ab" for i in range(5)]
    vectors = StaticVectors(words, np.stack([kind[w[0]] + 0.1 * rng.normal(size=8) for w in words]), "toy")
    table = attention_probe(attentions, sentences, test_size=0.3, seed=0, word_vectors=vectors).set_index("method")
    # attention only: two equally likely peaks per word; with the words: the right head per word
    assert table.loc["learned_combination", "uas"] < 0.75
    assert table.loc["attention_and_words", "uas"] > 0.9
    assert table.loc["distances_and_words", "uas"] < 0.35  # random trees: position and words say little
    # probe API: a head per word, 1-based, never the word itself
    from bertology.probes.heads.attention_probe import WordAwareDependencyProbe, _pair_features

    probe = WordAwareDependencyProbe(vectors).fit([_pair_features(a) for a in attentions[:100]], sentences[:100])
    pred = probe.predict([_pair_features(a) for a in attentions[100:103]], sentences[100:103])
    assert [len(p) for p in pred] == [len(s.words) for s in sentences[100:103]]
    assert all((p != np.arange(1, len(p) + 1)).all() for p in pred)


def test_each_held_out_uas_carries_a_sentence_bootstrap_interval():
    # head (0,1) always finds the gold head: its UAS is 1 with the interval [1, 1]; the others'
    # intervals hold their UAS and have width; one test sentence gives no interval
    sentences, attentions = noisy_corpus(n=40, p_a=1.0, p_b=0.3)
    table = attention_probe(attentions, sentences, test_size=0.25, seed=0).set_index("method")
    best = table.loc["best_head"]
    assert (best["layer"], best["head"]) == (1, 2)  # array position (0, 1), numbered from 1
    assert (best["uas"], best["uas_low"], best["uas_high"]) == (1.0, 1.0, 1.0)
    offset = table.loc["best_offset"]
    assert offset["uas_low"] < offset["uas"] < offset["uas_high"]
    assert (table["uas_low"] <= table["uas"]).all() and (table["uas"] <= table["uas_high"]).all()
    one = attention_probe(attentions[:4], sentences[:4], test_size=0.25, seed=0)
    assert one["uas"].notna().all() and one["uas_low"].isna().all() and one["uas_high"].isna().all()


def test_chunked_spilled_fit_equals_the_one_chunk_fit():
    # the closure adds up chunks' losses and gradients: the objective is the full batch's, so one
    # sentence per chunk read back from a temporary file gives the one-chunk, in-memory fit
    import torch

    from bertology.probes.heads.attention_probe import _chunk_loss, _design_chunks

    sentences, attentions = noisy_corpus(n=60, parity=True)
    whole = AttentionDependencyProbe(chunk_bytes=float("inf"), cache_bytes=float("inf")).fit(attentions, sentences)
    chunked = AttentionDependencyProbe(chunk_bytes=1, cache_bytes=0).fit(attentions, sentences)
    np.testing.assert_allclose(chunked.coef_, whole.coef_, atol=1e-5)
    big = {tuple(ix) for ix in np.argwhere(whole.coef_[0] >= np.sort(whole.coef_[0].ravel())[-2])}
    assert big == {(0, 1), (1, 3)}  # the planted heads
    held_out_s, held_out_a = noisy_corpus(n=20, parity=True, seed=1)
    for a, b in zip(chunked.predict(held_out_a), whole.predict(held_out_a)):
        np.testing.assert_array_equal(a, b)
    assert chunked.score(held_out_a, held_out_s) == whole.score(held_out_a, held_out_s) > 0.9
    # the chunks' summed loss at a random weight equals the mean NLL computed word by word (float64)
    chunks = list(_design_chunks(attentions, sentences, chunk_bytes=1))
    assert len(chunks) == len(sentences)
    weight = np.random.default_rng(0).normal(size=chunks[0][0].shape[1])
    w = torch.tensor(weight, dtype=torch.float32)
    summed = sum(float(_chunk_loss(*(torch.from_numpy(x) for x in c), w)) for c in chunks)
    brute = []
    for s, a in zip(sentences, attentions):
        n = len(s.words)
        feats = np.concatenate([a.reshape(-1, n, n), a.reshape(-1, n, n).transpose(0, 2, 1)]).transpose(1, 2, 0)
        for i, h in enumerate(s.heads):
            if h > 0:
                logits = np.delete(feats[i] @ weight, i)
                brute.append(np.log(np.exp(logits).sum()) - (feats[i, h - 1] @ weight))
    assert abs(summed / len(brute) - np.mean(brute)) < 1e-5


def test_word_aware_fit_in_spilled_buckets_equals_the_in_memory_fit():
    from bertology.probes.embeddings.static_vectors import StaticVectors
    from bertology.probes.heads.attention_probe import WordAwareDependencyProbe, _pair_features

    sentences, attentions = word_typed_corpus(n=60)
    rng = np.random.default_rng(1)
    words = [f"{k}{i}" for k in "ab" for i in range(5)]
    kind = {"a": rng.normal(size=8), "b": rng.normal(size=8)}
    vectors = StaticVectors(words, np.stack([kind[w[0]] + 0.1 * rng.normal(size=8) for w in words]), "toy")
    feats = [_pair_features(a) for a in attentions]
    # the same L-BFGS path, to rounding (10 iterations: before the fit stops on its tolerance, which
    # rounding can move by an iteration)
    held = WordAwareDependencyProbe(vectors, max_iter=10, cache_bytes=float("inf")).fit(feats[:40], sentences[:40])
    spilled = WordAwareDependencyProbe(vectors, max_iter=10, bucket_pairs=400, cache_bytes=0)
    spilled.fit(feats[:40], sentences[:40])
    assert len(spilled._groups(sentences[:40])) > 5  # many buckets, each read back from the file
    np.testing.assert_allclose(spilled.P_.numpy(), held.P_.numpy(), atol=1e-5)
    np.testing.assert_allclose(spilled.Q_.numpy(), held.Q_.numpy(), atol=1e-5)
    for a, b in zip(spilled.predict(feats[40:], sentences[40:]), held.predict(feats[40:], sentences[40:])):
        np.testing.assert_array_equal(a, b)
    assert held.score(feats[40:], sentences[40:]) > 0.9


def test_spill_gives_back_what_was_written_in_memory_and_from_its_file():
    from bertology.spill import Spill

    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.eye(3, dtype=bool), np.zeros((0, 5)), np.arange(7)]
    for cache_bytes, spilled in ((1e9, False), (50, True)):
        spill = Spill(cache_bytes=cache_bytes)
        for a in arrays:
            spill.append(a)
        arrays[0][0, 0] = -1  # later changes to an appended array do not reach the spill
        assert spill.spilled is spilled and len(spill) == len(arrays)
        assert spill[0][0, 0] == 0
        for k, a in enumerate(arrays[1:], start=1):
            assert spill[k].dtype == a.dtype and spill[k].shape == a.shape and np.array_equal(spill[k], a)
        arrays[0][0, 0] = 0
        spill.close()
