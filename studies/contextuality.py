"""Ethayarajh (2019): how contextual are contextual embeddings? Self-similarity, intra-sentence
similarity and maximum explainable variance per layer with anisotropy baselines; static vs
contextual neighbours of polysemous words and their sense clusters (UMAP)."""

from __future__ import annotations


import numpy as np
import pandas as pd

from bertology.runs import model_corpus_store

from bertology.probes.embeddings.contextuality import contextuality, contextuality_by_word
from bertology.probes.embeddings.neighbours import sense_clusters, static_vs_contextual_neighbours
from bertology.probes.embeddings.static_vectors import distill_static, word_vectors_from_pieces

DESCRIPTION = "Static vs contextual (Ethayarajh 2019): self-similarity, intra-sentence, MEV per layer; senses"
DEFAULTS = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 3000,
    "pooling": "first",
    "min_occurrences": 5,
    "max_occurrences": 50,
    "words": ["state", "play", "light", "place", "right", "time", "part", "court", "interest", "field", "line",
              "order", "present", "point", "bank", "run"],
    "min_word_occurrences": 8,
    "neighbours_k": 8,
    "n_clusters": 2,
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    lm, corpus, store = model_corpus_store(ctx)
    layers = store.layers()
    words = corpus.flat_words()
    lowered = np.array([w.lower() for w in words])
    offsets = store.sentence_offsets

    ctx.step("contextuality", lambda: contextuality(
        layers, words, offsets, min_occurrences=cfg["min_occurrences"], max_occurrences=cfg["max_occurrences"],
        seed=ctx.seed))
    ctx.step("contextuality_by_word", lambda: contextuality_by_word(
        layers, words, offsets, min_occurrences=cfg["min_occurrences"]))
    chosen = [w for w in cfg["words"] if (lowered == w).sum() >= cfg["min_word_occurrences"]]
    ctx.record(polysemous_words=chosen)
    last = store.n_layers - 1

    def neighbours() -> pd.DataFrame:
        vocab = sorted({w for w in lowered if (lowered == w).sum() >= 3} if len(lowered) < 5000 else
                       set(pd.Series(lowered).value_counts().loc[lambda s: s >= 3].index))
        statics = {"input embeddings": word_vectors_from_pieces(lm.encoder, lm.tokenizer, vocab),
                   f"distilled layer {last}": distill_static(layers[last], words, name=f"distilled@{last}")}
        frames = []
        for word in chosen:
            for name, static in statics.items():
                df = static_vs_contextual_neighbours(word, static, layers[last], words, offsets,
                                                     k=cfg["neighbours_k"])
                frames.append(df.assign(word=word, static_space=name))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    ctx.step("neighbours", neighbours)

    def clusters() -> pd.DataFrame:
        frames = [sense_clusters(w, layers[last], words, offsets, n_clusters=cfg["n_clusters"], seed=ctx.seed)
                  .assign(word=w, layer=last) for w in chosen]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    ctx.step("sense_clusters", clusters)
