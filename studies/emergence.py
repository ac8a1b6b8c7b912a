"""Pretrain, then probe: how heads and linguistic knowledge emerge across the checkpoints of a
pretraining run (the seeds' "pretrain, then probe" workflow). Trains (or resumes) a small BERT with
the workbench trainer, then runs head classification and per-layer probes on every kept checkpoint."""

from __future__ import annotations

import pandas as pd


from bertology.probes.probing.edge import probe_layers
from bertology.probes.heads.head_types import analyse_store
from bertology.checkpoints import list_checkpoints
from bertology.corpus import load_corpus
from bertology.models import load_model
from bertology.pretraining.trainer import load_config, read_metrics, run_pretraining
from bertology.store import extract

DESCRIPTION = "Emergence during pretraining: loss curves, head types and probe scores per checkpoint"
DEFAULTS = {
    "pretrain_config": "default",      # a shipped recipe name or a config file
    "pretrain_overrides": {},       # fields of the pretrain config to change (run_name, max_steps, keep_steps...)
    "corpus": "brown-sample",
    "limit": 400,
    "tasks": ["pos", "deps"],
    "seeds": [0],
    "max_epochs": 20,
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    pt_cfg = load_config(cfg["pretrain_config"], **cfg["pretrain_overrides"])  # a file or a shipped recipe
    run_dir = run_pretraining(pt_cfg)  # resumes, or returns at once when finished
    checkpoints = [(step, f"{run_dir.name}@{step}") for step, _ in list_checkpoints(run_dir)]
    corpus = load_corpus(cfg["corpus"], limit=cfg["limit"])
    ctx.record(pretraining_run=str(run_dir), checkpoints=[name for _, name in checkpoints],
               corpus={"name": corpus.name, "fingerprint": corpus.fingerprint, "sources": corpus.sources},
               model={"name": run_dir.name, "kind": "project pretraining run"})

    ctx.step("training_metrics", lambda: read_metrics(run_dir))

    def per_checkpoint() -> dict[str, pd.DataFrame]:
        types, scores = [], []
        for step, name in checkpoints:
            ctx.log(f"    checkpoint {name}")
            lm = load_model(name, attentions=True)
            store = extract(lm, corpus, attentions=True, progress=False)
            types.append(analyse_store(store, corpus)["head_types"].assign(step=step, model=name))
            for task in cfg["tasks"]:
                df = probe_layers(store, corpus, task, seeds=[int(s) for s in cfg["seeds"]],
                                  max_epochs=cfg["max_epochs"])
                df = df[(df["metric"] == "accuracy") & (df["split"] == "test")]
                scores.append(df.assign(step=step, model=name))
        return {"head_types_by_step": pd.concat(types, ignore_index=True),
                "probe_scores": pd.concat(scores, ignore_index=True)}

    types = ctx.steps(["head_types_by_step", "probe_scores"], per_checkpoint)["head_types_by_step"]
    ctx.step("head_counts", lambda: types.groupby(["step", "type"]).size().rename("count").reset_index())
