"""Two corpora: a word whose company changes is the most moved word."""

import numpy as np

from bertology.probes.embeddings.drift import compare_corpora


def _corpus(rng, shifted: bool, n=3000):
    topics = {t: [f"{t}{i}" for i in range(15)] for t in "abc"}
    sents = []
    for _ in range(n):
        t = "abc"[rng.integers(0, 3)]
        sent = list(rng.choice(topics[t], size=7))
        # 'bank' keeps company with topic a in the first corpus, topic c in the second
        if t == ("c" if shifted else "a") and rng.random() < 0.5:
            sent[rng.integers(0, 7)] = "bank"
        sents.append(sent)
    return sents


def test_compare_corpora_finds_the_planted_shift():
    rng = np.random.default_rng(0)
    old, new = _corpus(rng, shifted=False), _corpus(rng, shifted=True)
    out = compare_corpora(old, new, dim=20, min_count=5, epochs=5, top=3, seed=0, names=("1900", "1990"))
    moved = out["most_moved"]
    assert moved["word"].iloc[0] == "bank"
    assert moved["similarity"].iloc[0] < moved["similarity"].iloc[1]
    first = moved.iloc[0]
    assert all(w.startswith("a") for w in first["source_neighbours"].split(", "))
    assert all(w.startswith("c") for w in first["target_neighbours"].split(", "))
    assert set(out["summary"]["corpus"]) == {"1900", "1990"}
