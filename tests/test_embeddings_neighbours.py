"""Static vs contextual neighbours and sense clusters on a planted two-sense word."""

import numpy as np
import pytest

from bertology.probes.embeddings.neighbours import (
    context_snippet,
    sense_cluster_figure,
    sense_clusters,
    static_vs_contextual_neighbours,
)
from bertology.probes.embeddings.static_vectors import StaticVectors


def _two_sense_corpus(n_sent=24, d=16, seed=0):
    """'play' near a sport direction in even sentences, a theatre direction in odd ones."""
    rng = np.random.default_rng(seed)
    sport, theatre = rng.normal(size=d) * 3, rng.normal(size=d) * 3
    words, vecs, offsets = [], [], [0]
    for s in range(n_sent):
        sent = ["a", "great", "play", "by", "them"] if s % 2 == 0 else ["the", "play", "opened", "tonight"]
        for w in sent:
            base = (sport if s % 2 == 0 else theatre) if w == "play" else rng.normal(size=d)
            words.append(w)
            vecs.append(base + 0.3 * rng.normal(size=d))
        offsets.append(len(words))
    return words, np.array(vecs, np.float32), np.array(offsets)


def test_contextual_neighbours_share_the_sense():
    words, vecs, offsets = _two_sense_corpus()
    static = StaticVectors(["play", "game", "theatre"], np.array([[1, 0], [0.9, 0.1], [0.5, 0.5]], np.float32))
    df = static_vs_contextual_neighbours("play", static, vecs, words, offsets, occurrence=0, k=5)
    contextual_rows = df[df["space"] == "contextual"]
    assert (
        len(contextual_rows) == 5
        and (contextual_rows["sentence"] % 2 == 0).all()
        and (contextual_rows["sentence"] != 0).all()
    )
    assert df[df["space"] == "static"]["neighbour"].tolist() == ["game", "theatre"]
    assert "[[play]]" in df["query_context"].iloc[0]
    assert context_snippet(2, words, offsets) == "a great [[play]] by them"


@pytest.mark.slow  # umap-learn compiles with numba on first use (~20 s; a later process loads the cache)
def test_sense_clusters_separate_the_planted_senses():
    words, vecs, offsets = _two_sense_corpus()
    df = sense_clusters("play", vecs, words, offsets, n_clusters=2, seed=0)
    assert list(df.columns) == ["x", "y", "position", "sentence", "context", "cluster"] and len(df) == 24
    by_sense = df.groupby(df["sentence"] % 2)["cluster"].nunique()
    assert (by_sense == 1).all() and df["cluster"].nunique() == 2
    fig = sense_cluster_figure(df, "play")
    assert len(fig.data) == 2
    # umap-learn's kNN kernel, compiled without cache=True, now reads and writes numba's disk cache,
    # so the next process does not compile it again (~16 s on 2 cores)
    import umap.umap_
    from numba.core.caching import NullCache

    assert not isinstance(umap.umap_.fast_knn_indices._cache, NullCache)
