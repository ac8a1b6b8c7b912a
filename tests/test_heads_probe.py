"""Planted-answer tests for the attention-based dependency probe (Clark et al. 2019)."""

from types import SimpleNamespace

import numpy as np

from probes.attention_probe import AttentionDependencyProbe, attention_probe, best_heads
from probes.heads import dependency_scores


def noisy_corpus(n=80, p_a=0.6, p_b=0.6, seed=0, parity=False):
    """Head (0,1) and head (1,3) each point to the gold head with probability p, else anywhere.

    parity: head (0,1) is right on even words, head (1,3) on odd words; else each attends to itself.
    """
    rng = np.random.default_rng(seed)
    sentences, attentions = [], []
    for s in range(n):
        w = int(rng.integers(6, 14))
        root = int(rng.integers(w))
        heads = [0 if i == root else int(rng.choice([j for j in range(w) if j != i])) + 1 for i in range(w)]
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
    row = top[(top.relation == "all") & (top.direction == "dep->head")].iloc[0]
    assert (row["layer"], row["head"]) == (0, 1) and row["accuracy"] == 1.0
    for rel in ("nsubj", "dobj", "det"):
        r = top[(top.relation == rel) & (top.direction == "dep->head")].iloc[0]
        assert (r["layer"], r["head"]) == (0, 1)


def test_learned_combination_beats_single_heads():
    sentences, attentions = noisy_corpus(n=120, parity=True)
    table = attention_probe(attentions, sentences, test_size=0.3, seed=0).set_index("method")
    assert table.loc["best_head", "layer"] in (0, 1)
    assert table.loc["learned_combination", "uas"] > table.loc["best_head", "uas"] + 0.3
    assert table.loc["best_offset", "uas"] < 0.3  # random trees: offsets are weak
    probe = AttentionDependencyProbe().fit(attentions[:80], sentences[:80])
    coef = probe.coef_[0]
    assert coef.shape == (2, 4)
    big = {tuple(ix) for ix in np.argwhere(coef >= np.sort(coef.ravel())[-2])}
    assert big == {(0, 1), (1, 3)}  # the two informative heads carry the largest weights
    pred = probe.predict(attentions[:2])
    assert len(pred) == 2 and pred[0].shape == (len(sentences[0].words),)
