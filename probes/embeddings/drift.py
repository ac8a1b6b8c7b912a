"""Semantic change between two corpora ("1900 vs 1990"): train static vectors on each, rotate one
onto the other with Procrustes over the shared frequent vocabulary, list the words that moved most
(Hamilton et al. 2016 style)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pandas as pd

from bertology.probes.embeddings.alignment import align, most_moved_words
from bertology.probes.embeddings.static_vectors import StaticVectors, train_word2vec


def compare_corpora(
    sentences_a: Iterable[Sequence[str]],
    sentences_b: Iterable[Sequence[str]],
    dim: int = 100,
    min_count: int = 10,
    epochs: int = 5,
    top: int = 30,
    anchor_words: int | None = 5000,
    seed: int = 0,
    names: tuple[str, str] = ("a", "b"),
) -> dict[str, pd.DataFrame]:
    """Word2vec on each corpus (same seed), Procrustes on the ``anchor_words`` most frequent shared
    words, then the ``top`` most moved shared words.

    Returns ``most_moved`` (rank, word, similarity, source_neighbours, target_neighbours) and
    ``summary`` (corpus, n_words, shared, anchors, seed).
    """
    # the two models train at once, one gensim worker each (a seed still gives the same vectors;
    # gensim's training loop releases the GIL, so two cores halve the wall time)
    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(
            lambda job: train_word2vec(job[0], dim=dim, min_count=min_count, epochs=epochs, seed=seed, name=job[1]),
            [(sentences_a, names[0]), (sentences_b, names[1])],
        )
    return compare_spaces(a, b, top=top, anchor_words=anchor_words, seed=seed)


def compare_spaces(
    a: StaticVectors, b: StaticVectors, top: int = 30, anchor_words: int | None = 5000, seed: int = 0
) -> dict[str, pd.DataFrame]:
    """Align two spaces over their shared vocabulary (first ``anchor_words`` of ``a`` that ``b`` also
    has) and list the most moved shared words; see ``compare_corpora``."""
    shared = [w for w in a.words if w in b]
    anchors = shared if anchor_words is None else shared[:anchor_words]
    res = align(
        a,
        b,
        pd.DataFrame({"source": anchors, "target": anchors}),
        method="procrustes",
        normalization="unit-center-unit",
    )
    moved = most_moved_words(a, b, res, k=top, words=shared)
    summary = pd.DataFrame(
        [
            {"corpus": s.name, "n_words": len(s), "shared": len(shared), "anchors": len(anchors), "seed": seed}
            for s in (a, b)
        ]
    )
    return {"most_moved": moved, "summary": summary}
