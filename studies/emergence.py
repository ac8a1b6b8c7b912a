"""Emergence during pretraining: how heads, probe accuracy and MLM predictions change across the
training-time checkpoints of one model (Voita et al. 2019 see positional heads appear early).

By default the checkpoints are those of the English BERT the workbench ships (``bert-mini-english``,
made by its own trainer, see ``bertology models``); ``checkpoints`` may name a pretraining run of
yours instead, and ``pretrain_config`` trains (or resumes) a recipe first and uses its checkpoints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from bertology import paths
from bertology.checkpoints import list_checkpoints
from bertology.corpus import load_corpus
from bertology.errors import ConfigError
from bertology.features import model_max_tokens, sentences_that_fit
from bertology.models import load_model, shipped_releases
from bertology.pretraining import load_config, read_metrics, run_pretraining
from bertology.probes.heads.classification import analyse_store
from bertology.probes.probing.analysis import split_seed
from bertology.probes.probing.cloze import cloze_accuracy, cloze_predictions
from bertology.probes.probing.edge import probe_layers, summarise
from bertology.probes.probing.tasks import TASK_NAMES, build_task, require_splittable
from bertology.runs import StudyContext
from bertology.store import extract
from bertology.validation import add_study_rules

DESCRIPTION = "Emergence during pretraining: loss curves, head types, probe accuracy and MLM predictions per checkpoint"
DEFAULTS: dict[str, Any] = {
    "checkpoints": "bert-mini-english",  # a shipped release or a pretraining run (every checkpoint it kept)
    "pretrain_config": None,  # a recipe (shipped name or file) to train / resume first; then its checkpoints
    "pretrain_overrides": {},  # fields of that recipe to change (run_name, max_steps, keep_steps...)
    "corpus": "brown-sample",
    "limit": 400,
    "tasks": ["pos", "deps"],
    "seeds": [0],
    "split": "fixed",  # the probes' sentence split, as edge_probing's `split`
    "max_epochs": 20,
    "batch_size": 512,  # probe minibatch; 128 reaches 512's accuracy in half the epochs
    "cloze_sentences": 12,  # sentences with one word masked, per checkpoint (0 = none)
    "reference_model": None,  # an MLM-headed model asked the same cloze questions, as a yardstick
    # for the checkpoints (e.g. minilm-english-mlm); None = none
    "seed": 0,
}
add_study_rules("emergence", {"tasks": TASK_NAMES})  # checked before any pretraining or model load


def _checkpoints(cfg) -> tuple[str, Path, list[tuple[int, str]], str]:
    """(model name, folder with metrics.jsonl, [(step, registry name)], kind)."""
    if cfg["pretrain_config"]:
        run_dir = run_pretraining(load_config(cfg["pretrain_config"], **cfg["pretrain_overrides"]))
        return (
            run_dir.name,
            run_dir,
            [(s, f"{run_dir.name}@{s}") for s, _ in list_checkpoints(run_dir)],
            "project pretraining run",
        )
    name = cfg["checkpoints"]
    shipped = shipped_releases()
    if name in shipped:
        info = shipped[name]
        return name, info["path"], [(s, f"{name}@{s}") for s in sorted(info["steps"])], "shipped release"
    run_dir = paths.models_dir() / name
    found = list_checkpoints(run_dir)
    if not found:
        raise ConfigError(
            f"checkpoints: {name!r} is neither a shipped release ({', '.join(shipped) or 'none'}) "
            f"nor a pretraining run with checkpoints under {paths.models_dir()}"
        )
    return name, run_dir, [(s, f"{name}@{s}") for s, _ in found], "project pretraining run"


def _fitting_corpus(cfg, checkpoint: str):
    """The study's ``limit`` sentences, or, where some are longer than the checkpoints' positions
    (a model trained with a short ``max_seq_len``: its later positions are untrained, and
    attention maps need whole sentences), the first ``limit`` that fit; and how many were left out."""
    corpus = load_corpus(cfg["corpus"], limit=cfg["limit"])
    lm = load_model(checkpoint, attentions=False)
    max_tokens = model_max_tokens(lm.model, lm.tokenizer)
    _, left_out = sentences_that_fit(corpus, lm.tokenizer, max_tokens=max_tokens)
    if not left_out:
        return corpus, 0
    return sentences_that_fit(load_corpus(cfg["corpus"]), lm.tokenizer, cfg["limit"], max_tokens)


def _divergence(folder: Path) -> dict | None:
    """The run record's ``diverged`` entry (step, reason, last good checkpoint) when the pretraining run
    stopped diverged: its checkpoints end before that step, and the dashboard says so. None otherwise."""
    record = Path(folder) / "run.json"
    if not record.is_file():
        return None
    try:
        return json.loads(record.read_text(encoding="utf-8")).get("diverged")
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{record}: unreadable run record ({exc})") from None


def run(ctx: StudyContext) -> None:
    cfg = ctx.config
    splits = split_seed(cfg, ctx.seed)
    name, folder, checkpoints, kind = _checkpoints(cfg)
    corpus, left_out = _fitting_corpus(cfg, checkpoints[-1][1])
    for task in cfg["tasks"]:  # before any checkpoint is analysed: each task can be split
        require_splittable(build_task(corpus, task))
    if left_out:
        ctx.log(f"  {left_out} sentences longer than the checkpoints' training positions left out of the analyses")
    ctx.record(
        pretraining_run=str(folder),
        checkpoints=[n for _, n in checkpoints],
        corpus={
            "name": corpus.name,
            "fingerprint": corpus.fingerprint,
            "sources": corpus.sources,
            **({"left_out_too_long": left_out} if left_out else {}),
        },
        model={"name": name, "kind": kind},
        diverged=_divergence(folder),
    )

    ctx.step("training_metrics", lambda: read_metrics(folder))

    def per_checkpoint() -> dict[str, pd.DataFrame]:
        types, scores, best, cloze, cloze_summary = [], [], [], [], []
        for step, ckpt in checkpoints:
            ctx.log(f"    checkpoint {ckpt}")
            lm = load_model(ckpt, attentions=True)
            store = extract(lm, corpus, attentions=True, progress=False)
            types.append(analyse_store(store, corpus)["head_types"].assign(step=step, model=ckpt))
            for task in cfg["tasks"]:
                df = probe_layers(
                    store,
                    corpus,
                    task,
                    seeds=[int(s) for s in cfg["seeds"]],
                    split_seed=splits,
                    max_epochs=cfg["max_epochs"],
                    batch_size=int(cfg["batch_size"]),
                )
                best.append(summarise(df).assign(step=step, model=ckpt))
                df = df[(df["metric"] == "accuracy") & (df["split"] == "test")]
                scores.append(df.assign(step=step, model=ckpt))
            if cfg["cloze_sentences"] and lm.has_mlm_head:
                mlm = load_model(ckpt, attentions=False, mlm_head=True)
                pred = cloze_predictions(mlm, list(corpus)[: cfg["cloze_sentences"]], k=5, seed=ctx.seed)
                cloze.append(pred.assign(step=step, model=ckpt))
                cloze_summary.append({"step": step, "model": ckpt, **cloze_accuracy(pred)})
        out = {
            "head_types_by_step": pd.concat(types, ignore_index=True),
            "probe_scores": pd.concat(scores, ignore_index=True),
            "best_layers": pd.concat(best, ignore_index=True),
            "cloze_predictions": pd.concat(cloze, ignore_index=True) if cloze else pd.DataFrame(),
            "cloze_accuracy": pd.DataFrame(cloze_summary),
        }
        return out

    # probe_scores: test accuracy per layer and seed; best_layers: per step and task the layer chosen
    # on dev with its test accuracy and interval (summarise)
    tables = ctx.steps(
        ["head_types_by_step", "probe_scores", "best_layers", "cloze_predictions", "cloze_accuracy"], per_checkpoint
    )
    if cfg["reference_model"] and cfg["cloze_sentences"]:

        def reference() -> dict[str, pd.DataFrame]:
            mlm = load_model(cfg["reference_model"], attentions=False, mlm_head=True)
            ctx.log(f"    reference model {mlm.name}: the same cloze sentences")
            pred = cloze_predictions(mlm, list(corpus)[: cfg["cloze_sentences"]], k=5, seed=ctx.seed)
            return {
                "reference_cloze_predictions": pred.assign(model=mlm.name),
                "reference_cloze_accuracy": pd.DataFrame([{"model": mlm.name, **cloze_accuracy(pred)}]),
            }

        ctx.steps(["reference_cloze_predictions", "reference_cloze_accuracy"], reference)
    types = tables["head_types_by_step"]
    ctx.step("head_counts", lambda: types.groupby(["step", "type"]).size().rename("count").reset_index())
