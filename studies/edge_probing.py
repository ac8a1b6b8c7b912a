"""Tenney et al. (2019): edge probing layer by layer, scalar mix, cumulative scoring and expected
layers, with Hewitt & Liang control tasks, Voita & Titov MDL and a random-encoder baseline."""

from __future__ import annotations


import pandas as pd

from bertology.runs import model_corpus_store
from bertology.studies.common import probe_settings

from bertology.probes.probing.baselines import random_init_baseline
from bertology.probes.probing.edge import ProbeConfig, probe_layers, summarise
from bertology.probes.probing.mdl import online_codelength
from bertology.probes.probing.tasks import build_task

DESCRIPTION = "Edge probing per layer, scalar mix, expected layer (Tenney 2019) + controls, MDL, random encoder"
DEFAULTS = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 1500,
    "pooling": "first",
    "tasks": ["pos", "deps", "entities"],
    "modes": ["per_layer", "mix", "cumulative"],
    "seeds": [0, 1, 2],
    "probe": "mlp",
    "span_pooling": "attention",
    "max_epochs": 40,
    "control": True,
    "mdl_tasks": ["pos", "deps", "entities"],
    "random_baseline_tasks": ["pos", "deps", "entities"],
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    lm, corpus, store = model_corpus_store(ctx)
    seeds = [int(s) for s in cfg["seeds"]]
    settings = probe_settings(cfg)

    def scores() -> pd.DataFrame:
        frames = []
        for task in cfg["tasks"]:
            for mode in cfg["modes"]:
                ctx.log(f"    {task} / {mode}")
                frames.append(probe_layers(store, corpus, task, mode=mode, seeds=seeds,
                                           control=cfg["control"] and mode == "per_layer", **settings))
        return pd.concat(frames, ignore_index=True)

    df = ctx.step("layer_scores", scores)
    ctx.step("summary", lambda: summarise(df))
    ctx.step("mix_weights", lambda: df[df["metric"] == "mix_weight"].rename(columns={"value": "weight"})
             [["task", "layer", "seed", "weight"]].reset_index(drop=True))
    if cfg["control"]:
        ctx.step("controls", lambda: df[df["metric"].isin(["selectivity"]) |
                                        ((df["metric"] == "accuracy") & (df["split"] == "test") & (df["mode"] == "per_layer"))]
                 .groupby(["task", "layer", "control", "metric"], as_index=False)["value"].mean())
    if cfg["mdl_tasks"]:
        def mdl() -> pd.DataFrame:
            feats = store.layers()
            frames = [online_codelength(feats, store.sentence_offsets, build_task(corpus, t), seeds=seeds[:1],
                                        config=ProbeConfig(probe=cfg["probe"], pooling=cfg["span_pooling"],
                                                           max_epochs=cfg["max_epochs"]))
                      for t in cfg["mdl_tasks"]]
            out = pd.concat(frames, ignore_index=True)
            return out[out["metric"].isin(["online_bits", "uniform_bits", "compression"])].reset_index(drop=True)
        ctx.step("mdl", mdl)
    if cfg["random_baseline_tasks"]:
        ctx.step("random_baseline", lambda: pd.concat(
            [random_init_baseline(lm, corpus, t, seed=ctx.seed, seeds=seeds[:1], **settings)
             for t in cfg["random_baseline_tasks"]],
            ignore_index=True))
