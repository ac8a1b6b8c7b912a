"""Voita et al. (2019) and Clark et al. (2019): head statistics, head types (positional / syntactic /
rare-token / special / broad) and the attention-based dependency probe, on word-level attention."""

from __future__ import annotations


import numpy as np

from bertology.runs import model_corpus_store

from bertology.probes.heads.attention_probe import attention_probe, best_heads
from bertology.probes.heads.stats import corpus_frequencies
from bertology.probes.heads.head_types import classify_heads, dependency_scores, type_matrix
from bertology.probes.heads.stats import head_statistics

DESCRIPTION = "Head statistics and types (Voita 2019, Clark 2019) + attention-based dependency probe (UAS)"
DEFAULTS = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 600,
    "pooling": "first",
    "frequencies": "corpus",        # corpus | wordfreq
    "positional_threshold": 0.9,
    "syntactic_margin": 0.10,
    "min_count": 20,
    "rare_threshold": 0.5,
    "special_threshold": 0.5,
    "broad_entropy": 0.8,
    "example_sentences": 4,
    "example_max_words": 14,
    "word_vectors": "en",           # spaCy vectors for the attention-and-words probe (Clark's GloVe); none = skip
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    _, corpus, store = model_corpus_store(ctx, attentions=True)
    sentences = list(corpus)
    freqs = corpus_frequencies(sentences) if cfg["frequencies"] == "corpus" else None

    stats = ctx.step("head_stats", lambda: head_statistics(
        (store.attention(i) for i in range(len(corpus))), sentences,
        special_attention=(store.special_attention(i) for i in range(len(corpus))), frequencies=freqs))
    deps = ctx.step("head_dependency", lambda: dependency_scores(
        (store.attention(i) for i in range(len(corpus))), sentences))
    types = ctx.step("head_types", lambda: classify_heads(
        stats, deps, positional_threshold=cfg["positional_threshold"], syntactic_margin=cfg["syntactic_margin"],
        min_count=cfg["min_count"], rare_threshold=cfg["rare_threshold"],
        special_threshold=cfg["special_threshold"], broad_entropy=cfg["broad_entropy"]))
    ctx.step("head_type_matrix", lambda: type_matrix(types).reset_index())
    ctx.step("head_best", lambda: best_heads(deps, min_count=cfg["min_count"]))
    vectors = None
    if cfg["word_vectors"] != "none":
        from bertology.probes.embeddings.static_vectors import load_spacy_vectors

        vectors = load_spacy_vectors(cfg["word_vectors"])
        ctx.record(word_vectors=vectors.metadata)
    ctx.step("attention_probe", lambda: attention_probe(
        [store.attention(i) for i in range(len(corpus))], sentences, seed=ctx.seed, word_vectors=vectors))

    def examples() -> dict:
        short = [i for i, s in enumerate(sentences) if 6 <= len(s) <= cfg["example_max_words"]]
        chosen = short[: cfg["example_sentences"]]
        return {"sentences": [{"sent_id": sentences[i].sent_id, "words": sentences[i].words,
                               "attention": np.round(store.attention(i), 4).tolist()} for i in chosen]}

    ctx.extra("attention_examples", examples)
