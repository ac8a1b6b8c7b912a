"""Michel et al. (2019) head importance and pruning curves (by importance, at random, by Voita head
type) with real head removal, and Voita et al. (2019) Hard-Concrete L0 gates.

The metric is the MLM loss for models with an MLM head, otherwise a POS tagging head trained on the
frozen encoder (the shipped MiniLM has no MLM head)."""

from __future__ import annotations


import pandas as pd

from bertology.runs import model_corpus_store

from bertology.probes.heads.head_types import analyse_store
from bertology.probes.heads.importance import importance_scores
from bertology.probes.heads.pruning import (heads_dict, heads_pruned_at, measure_pruning, pos_task, pruning_curve,
                            train_l0_gates)

DESCRIPTION = "Head importance (Michel 2019), pruning curves by importance / random / type, real removal, L0 gates"
DEFAULTS = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 300,
    "pooling": "first",
    "methods": ["importance", "random", "type"],
    "step": 0.1,
    "max_share": 0.9,
    "random_seeds": 3,
    "l0_lambdas": [0.01, 0.1],
    "l0_steps": 150,
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    lm, corpus, store = model_corpus_store(ctx, attentions=True)
    train, evals, loss_fn, metric_fn, description = pos_task(lm, corpus, seed=ctx.seed)
    ctx.record(pruning_metric=description)

    ctx.step("importance", lambda: importance_scores(lm.model, train, loss_fn, normalise=True))

    def curves() -> pd.DataFrame:
        frames = []
        head_types = analyse_store(store, corpus)["head_types"] if "type" in cfg["methods"] else None
        for method in cfg["methods"]:
            ctx.log(f"    pruning by {method}")
            seeds = [ctx.seed + k for k in range(cfg["random_seeds"])] if method == "random" else [ctx.seed]
            frames.append(pruning_curve(lm.model, metric_fn, method=method, batches=train, loss_fn=loss_fn,
                                        step=cfg["step"], seeds=seeds, head_types=head_types,
                                        max_share=cfg["max_share"]))
        out = pd.concat(frames, ignore_index=True).rename(columns={"share_pruned": "share_removed", "metric": "value"})
        out["metric"] = description
        return out

    curve = ctx.step("pruning_curves", curves)

    def cost() -> pd.DataFrame:
        rows = []
        imp = curve[curve["method"] == "importance"]
        for share in (0.3, 0.5):
            if imp.empty:
                break
            row, removed = heads_pruned_at(imp, share, share_column="share_removed")
            if removed:
                report = measure_pruning(lm.model, heads_dict(removed), evals)
                rows.append({"share_removed": float(row["share_removed"]), "metric_value": float(row["value"]),
                             **{k: v for k, v in report.items() if not isinstance(v, (list, dict))}})
        return pd.DataFrame(rows)

    ctx.step("pruning_cost", cost)
    if cfg["l0_lambdas"]:
        ctx.step("l0_gates", lambda: pd.concat(
            [train_l0_gates(lm.model, train, loss_fn, float(lam), steps=cfg["l0_steps"], seed=ctx.seed)
             for lam in cfg["l0_lambdas"]], ignore_index=True))
