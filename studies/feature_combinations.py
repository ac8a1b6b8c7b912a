"""Devlin et al. (2019), Table 7: which layers to use as features — first layer, last hidden, sum of
all layers, second-to-last, sum of the last four, concatenation of the last four — scored with the
same probe on the same task (NER in the paper; entities and POS here)."""

from __future__ import annotations


import pandas as pd

from bertology.runs import model_corpus_store

from bertology.probes.probing.edge import ProbeConfig, probe_arrays
from bertology.probes.probing.tasks import build_task
from bertology.combinations import COMBINATIONS, combine_layers

DESCRIPTION = "BERT paper feature-based comparison: first / last / sum all / 2nd-to-last / sum last 4 / concat last 4"
DEFAULTS = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 1500,
    "pooling": "first",
    "tasks": ["entities", "pos"],
    "seeds": [0, 1, 2],
    "probe": "mlp",
    "span_pooling": "attention",
    "max_epochs": 40,
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    _, corpus, store = model_corpus_store(ctx)

    def combos() -> pd.DataFrame:
        layers = store.layers()
        frames = []
        for name in COMBINATIONS:
            feats = combine_layers(layers, name)[None]  # [1, n_words, dim']
            for task_name in cfg["tasks"]:
                task = build_task(corpus, task_name)
                df = probe_arrays(feats, store.sentence_offsets, task, seeds=[int(s) for s in cfg["seeds"]],
                                  config=ProbeConfig(probe=cfg["probe"], pooling=cfg["span_pooling"],
                                                     max_epochs=cfg["max_epochs"]))
                df = df[(df["split"] == "test") & df["metric"].isin(["accuracy", "micro_f1", "macro_f1"])]
                frames.append(df.assign(combination=name, description=COMBINATIONS[name]))
        return pd.concat(frames, ignore_index=True)[["combination", "description", "task", "seed", "metric", "value"]]

    ctx.step("combinations", combos)
