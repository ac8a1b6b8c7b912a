"""Rotation alignment of two embedding spaces "solved exactly with SVD": English→French static
vectors with FreeDict dictionaries (Procrustes, least squares, Artetxe self-learning; NN vs CSLS),
two layers of one model, two models, and one language in two eras (KJV 1611 vs Brown 1961)."""

from __future__ import annotations


import pandas as pd

from bertology.runs import model_corpus_store

from bertology.probes.embeddings.crosslingual import crosslingual_experiment
from bertology.probes.embeddings.drift import compare_corpora, compare_spaces
from bertology.probes.embeddings.static_vectors import distill_static
from bertology.errors import WorkbenchError
from bertology.texts import load_text

DESCRIPTION = "Procrustes / self-learning / CSLS: en→fr, layer vs layer, model vs model, KJV 1611 vs Brown 1961"
DEFAULTS = {
    "crosslingual": True,
    "source": "en",
    "target": "fr",
    "dictionary": ["eng", "fra"],
    "methods": ["procrustes", "lstsq", "self-learning:identical", "self-learning:numerals"],
    "n_train": 5000,
    "n_test_sources": 1500,
    "vocab_cutoff": 20000,
    "max_iter": 30,
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 3000,
    "pooling": "first",
    "layer_pair": [1, -1],
    "other_model": "",
    "corpora": ["kjv", "brown"],
    "top_moved": 30,
    "drift_min_count": 50,
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    precision, moved = [], []
    if cfg["crosslingual"]:
        def cross() -> dict[str, pd.DataFrame]:
            tables = crosslingual_experiment(cfg["source"], cfg["target"], tuple(cfg["dictionary"]),
                                             methods=cfg["methods"], n_train=cfg["n_train"],
                                             n_test_sources=cfg["n_test_sources"], vocab_cutoff=cfg["vocab_cutoff"],
                                             max_iter=cfg["max_iter"], seed=ctx.seed)
            experiment = f"{cfg['source']}→{cfg['target']}"
            return {"precision_crosslingual": tables["precision"].assign(experiment=experiment),
                    **{name: tables[name].assign(experiment=experiment)
                       for name in ("translations", "history", "dictionary")}}
        made = ctx.steps(["precision_crosslingual", "translations", "history", "dictionary"], cross)
        precision.append(made["precision_crosslingual"])

    _, corpus, store = model_corpus_store(ctx)
    words = [w.lower() for w in corpus.flat_words()]

    def layers() -> pd.DataFrame:
        a, b = [l % store.n_layers for l in cfg["layer_pair"]]
        va = distill_static(store.layer(a), words, name=f"layer {a}")
        vb = distill_static(store.layer(b), words, name=f"layer {b}")
        res = compare_spaces(va, vb, top=cfg["top_moved"], seed=ctx.seed)
        return res["most_moved"].assign(experiment=f"{store.manifest['model']['name']}: layer {a} vs layer {b}")
    moved.append(ctx.step("moved_layers", layers))

    if cfg["other_model"]:
        def models() -> pd.DataFrame:
            from bertology.models import load_model
            from bertology.store import extract

            other = extract(load_model(cfg["other_model"]), corpus, attentions=False)
            last = store.n_layers - 1
            va = distill_static(store.layer(last), words, name=store.manifest["model"]["name"])
            vb = distill_static(other.layer(other.n_layers - 1), words, name=cfg["other_model"])
            res = compare_spaces(va, vb, top=cfg["top_moved"], seed=ctx.seed)
            return res["most_moved"].assign(experiment=f"{va.name} vs {vb.name} (last layers)")
        moved.append(ctx.step("moved_models", models))

    if cfg["corpora"]:
        def eras() -> pd.DataFrame:
            try:
                a, b = (load_text(name) for name in cfg["corpora"])
            except WorkbenchError as exc:
                ctx.log(f"    skipped two-corpora drift: {exc}")
                return pd.DataFrame()
            res = compare_corpora(a, b, top=cfg["top_moved"], seed=ctx.seed, names=tuple(cfg["corpora"]),
                                  min_count=cfg["drift_min_count"])
            return res["most_moved"].assign(experiment=f"{cfg['corpora'][0]} vs {cfg['corpora'][1]} (word2vec)")
        moved.append(ctx.step("moved_corpora", eras))

    ctx.step("precision", lambda: pd.concat(precision, ignore_index=True) if precision else pd.DataFrame())
    ctx.step("most_moved", lambda: pd.concat([m for m in moved if len(m)], ignore_index=True))
