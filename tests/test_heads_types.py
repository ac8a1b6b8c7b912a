"""Planted-answer tests for head statistics and head types on constructed attention arrays."""

from types import SimpleNamespace

import numpy as np
import pytest

from bertology.probes.heads.stats import head_statistics, statistic_matrix, corpus_frequencies
from bertology.probes.heads.head_types import classify_heads, dependency_scores, type_matrix, canonical_relation

L, H = 2, 4
POSITIONAL, SYNTACTIC, RARE = (0, 1), (1, 2), (1, 0)
RELATIONS = ["nsubj", "dobj", "amod", "det", "obj", "nmod:poss"]


def planted_corpus(n_sentences=60, seed=0):
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(200)]
    freq = {w: 1.0 / (i + 1) for i, w in enumerate(vocab)}
    sentences, attentions, specials = [], [], []
    for s in range(n_sentences):
        w = int(rng.integers(15, 26))
        words = list(rng.choice(vocab, size=w, replace=False))
        root = int(rng.integers(w))
        heads = [0 if i == root else int(rng.choice([j for j in range(w) if j != i])) + 1 for i in range(w)]
        deprels = [str(rng.choice(RELATIONS)) for _ in range(w)]
        sentences.append(SimpleNamespace(sent_id=f"s{s}", words=words, upos=None, heads=heads, deprels=deprels))
        a = rng.dirichlet(np.ones(w), size=(L, H, w))  # background: diffuse random heads
        rarest = int(np.argmin([freq[x] for x in words]))
        def onehot(targets):
            m = np.full((w, w), 0.2 / (w - 1))
            m[np.arange(w), targets] = 0.8
            return m
        a[POSITIONAL] = onehot([max(i - 1, 0) for i in range(w)])
        a[SYNTACTIC] = onehot([h - 1 if h > 0 else i for i, h in enumerate(heads)])
        a[RARE] = onehot([rarest] * w)
        attentions.append(a / a.sum(-1, keepdims=True))
        sp = rng.uniform(0, 0.05, size=(L, H, w, 2))
        sp[0, 3, :, 1] = 0.9  # a [SEP] head
        specials.append(sp)
    return sentences, attentions, specials, freq


def test_statistics_recover_planted_heads():
    sentences, attentions, specials, freq = planted_corpus()
    stats = head_statistics(attentions, sentences, special_attention=specials, frequencies=freq)
    assert set(stats.columns) == {"layer", "head", "statistic", "value", "n"}
    prev = statistic_matrix(stats, "argmax_offset_-1")
    others = prev.stack().drop(index=POSITIONAL)
    assert prev.loc[POSITIONAL] > 0.9 and others.max() < 0.5
    rare = statistic_matrix(stats, "argmax_rarest")
    assert rare.loc[RARE] == pytest.approx(1.0)
    conf = statistic_matrix(stats, "confidence")
    assert conf.loc[POSITIONAL] == pytest.approx(0.8)
    assert statistic_matrix(stats, "attn_sep").loc[0, 3] == pytest.approx(0.9)
    ent = statistic_matrix(stats, "entropy_norm")
    assert ent.loc[POSITIONAL] < ent.loc[0, 0]
    # rows of a word-level map sum to one, so offset shares sum to one per head
    offs = stats[stats.statistic.str.startswith("argmax_offset_")].groupby(["layer", "head"]).value.sum()
    np.testing.assert_allclose(offs.to_numpy(), 1.0)


def test_without_sentences_or_specials():
    _, attentions, _, _ = planted_corpus(5)
    stats = head_statistics(attentions)
    assert "attn_cls" not in set(stats.statistic) and "entropy" in set(stats.statistic)


def test_types_recover_planted_heads():
    sentences, attentions, specials, freq = planted_corpus()
    stats = head_statistics(attentions, sentences, special_attention=specials, frequencies=freq)
    dep = dependency_scores(attentions, sentences)
    syn = dep[(dep["layer"] == 1) & (dep["head"] == 2) & (dep.direction == "dep->head")]
    assert (syn.accuracy > 0.99).all() and set(syn.relation) >= {"nsubj", "dobj", "poss"}
    assert "obj" not in set(dep.relation)  # UD alias folded
    types = classify_heads(stats, dep, min_count=20)
    by_head = types.set_index(["layer", "head"])
    assert by_head.loc[POSITIONAL, "type"] == "positional"
    assert by_head.loc[POSITIONAL, "positional_offset"] == -1
    assert by_head.loc[SYNTACTIC, "type"] == "syntactic"
    assert by_head.loc[RARE, "type"] == "rare-token"
    assert by_head.loc[(0, 3), "type"] == "special"
    assert (types.type == "positional").sum() == 1
    assert (types.type == "syntactic").sum() == 1
    assert (types.type == "rare-token").sum() == 1
    m = type_matrix(types)
    assert m.shape == (L, H) and m.loc[0, 1] == "positional"


def test_relation_labels():
    assert canonical_relation("obj") == "dobj"
    assert canonical_relation("nsubj:pass") == "nsubjpass"
    assert canonical_relation("acl:relcl") == "acl"
    assert canonical_relation("PREP") == "prep"


def test_corpus_frequencies_counts_lowercase():
    c = corpus_frequencies([["The", "the", "dog"]])
    assert c["the"] == 2 and c["dog"] == 1
