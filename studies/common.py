"""Helpers the study scripts share: load the model, corpus and store named in a config once."""

from __future__ import annotations

from typing import Any

from bertology.corpus import load_corpus
from bertology.models import load_model
from bertology.store import extract


def model_corpus_store(ctx, *, attentions: bool = False, limit_key: str = "limit"):
    """(LoadedModel, Corpus, FeatureStore) for ``ctx.config['model' | 'corpus' | limit_key]``, recorded
    in the run's provenance."""
    cfg = ctx.config
    lm = load_model(cfg["model"], attentions=True)
    corpus = load_corpus(cfg["corpus"], limit=cfg.get(limit_key))
    store = extract(lm, corpus, attentions=attentions, pooling=cfg.get("pooling", "first"))
    ctx.record(
        model={"name": lm.name, "path": str(lm.path) if lm.path else None, "fingerprint": lm.fingerprint},
        corpus={"name": corpus.name, "fingerprint": corpus.fingerprint, "sentences": len(corpus),
                "words": corpus.n_words, "sources": corpus.sources, "licence": corpus.licence},
        store=str(store.path),
    )
    return lm, corpus, store


def probe_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """ProbeConfig keyword arguments a study config may set."""
    return {"max_epochs": cfg["max_epochs"], "probe": cfg["probe"], "pooling": cfg["span_pooling"]}
