"""What fine-tuning changes, as one study run (:func:`finetuning_analysis`, config :data:`FINETUNING_DEFAULTS`).

For every task of the config, every mode (frozen ❄️, full 🔥, BitFit, adapters) is fine-tuned from
the same pretrained model for every seed of ``seeds`` (:func:`bertology.finetuning.run_finetuning`;
the runs live in ``<study run>/finetunes/``, each resumable). A seed fixes the split by document
(so every mode of one seed is scored on the same test examples), the head's initialisation and
the data order. Then:

- test accuracy per task and mode over the seeds with its interval (:func:`seeds_and_examples_interval`),
  and every mode against full on the same test examples (:func:`compare_with_reference`);
- per-layer relative weight change ``||ΔW|| / ||W||`` per module kind of each fine-tune against the
  pretrained weights (:func:`bertology.finetuning.changes.weight_change_between`);
- per-layer linear CKA between the pretrained and the fine-tuned encoder on held-out sentences (the
  seed's test split; :func:`bertology.finetuning.changes.layer_cka`);
- per-head change of attention: mean Jensen--Shannon divergence of each head's rows before and after,
  on the same sentences (:func:`bertology.finetuning.changes.attention_change`).
"""

from __future__ import annotations

import math
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertology.errors import ConfigError, WorkbenchError
from bertology.finetuning.finished import finetuned_model_dir
from bertology.runs import StudyContext
from bertology.uncertainty import (
    combine_seed_and_sentence,
    is_small_sample,
    paired_bootstrap,
    ratio_bootstrap,
    t_interval,
    wilson_interval,
)

__all__ = [
    "FINETUNING_DEFAULTS",
    "finetuning_analysis",
    "seeds_and_examples_interval",
    "compare_with_reference",
    "change_by_layer",
    "REFERENCE_MODE",
    "finetuned_model_dir",
    "held_out_sentences",
]

REFERENCE_MODE = "full"

FINETUNING_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",  # of the built-in tasks
    "tasks": ["pos", "genre"],  # built-in names (pos, ner, genre) or task files (docs/finetuning.md)
    "modes": ["frozen", "full", "bitfit", "adapters"],  # must hold full: every mode is compared with it
    "seeds": [0, 1, 2],  # one fine-tune per task, mode and seed (split, head init, data order)
    "max_examples": None,  # the first N examples of each task (null: all)
    "epochs": 3,
    "batch_size": 32,
    "max_seq_len": 128,
    "adapter_size": 64,
    "learning_rates": {},  # per mode, e.g. {full: 1.0e-4} for a short run; a mode not named keeps its
    # default (DEFAULT_LEARNING_RATES: full 3e-5, frozen / BitFit 1e-3, adapters 1e-4)
    "cka_sentences": 300,  # held-out (test-split) sentences for CKA and attention change
    "attention_change": True,  # the per-head Jensen-Shannon table
    "probe_tasks": ["pos", "deps"],  # edge probing (per layer, linear probe) before and after fine-tuning, on the
    # seed's held-out sentences of `corpus`; [] = none
    "head_types_change": True,  # head types (Voita / Clark definitions) before and after, same sentences
    "device": "auto",  # auto | cpu | cuda
    "seed": 0,  # the bootstrap's seed
}

_PER_SEED_INTERVAL = "t over seeds, example bootstrap as floor (a test set per seed)"
_ONE_SEED_INTERVAL = "example bootstrap (1 seed: seed variation not included)"


def finetuning_analysis(ctx: StudyContext) -> None:
    """The study (module docstring). Tables:

    - ``finetune_runs``: one row per ``task, mode, seed``: ``test_accuracy`` with the run's own
      bootstrap ``test_low``/``test_high``, ``dev_accuracy``, ``best_step``, ``test_examples``,
      ``test_items``, ``trainable_parameters``, ``total_parameters``, ``learning_rate``, ``run``.
    - ``finetune_scores``: one row per ``task, mode``: ``accuracy`` (mean over seeds), ``low``,
      ``high``, ``n_seeds``, ``n_test`` (scored test items, all seeds), ``small_sample`` (a seed's
      test set has fewer than 100 scored items), ``interval``, ``trainable_share``.
    - ``finetune_comparisons``: one row per task and mode other than full: ``difference`` = accuracy
      (mode) − accuracy (full) on the same test examples, ``low``, ``high``, ``p_value``,
      ``significant``, ``n_seeds``, ``n_examples``, ``interval``.
    - ``weight_change``: ``task, mode, seed, layer`` (0 = embeddings, 1..L), ``module``, ``relative_change``, ...
    - ``layer_cka``: ``task, mode, seed, layer`` (0 = embeddings), ``cka``, ``n_words``.
    - ``attention_change`` (``attention_change: true``): ``task, mode, seed, layer, head, js_divergence, n_rows`` (layers 1..L, heads 1..H).
    - ``change_by_layer``: the three on one depth axis, means over seeds (:func:`change_by_layer`).
    The ``finetuning`` study adds (``studies/finetuning.py``, through the probes layer):

    - ``probing_before_after`` (``probe_tasks``): ``task, mode, seed, probe_task, layer, split, accuracy,
      n`` with ``mode = "pretrained"`` for the model before fine-tuning: a linear edge probe per layer
      (:func:`bertology.probes.probing.probe_layers`, probe seed = the seed) on the corpus sentences of
      the seed's held-out documents (never trained on by the fine-tune).
    - ``head_types_before_after`` (``head_types_change``): ``task, mode, seed, layer, head,
      type_before, type_after, changed`` on the same sentences (the papers' definitions,
      :func:`bertology.probes.heads.head_types`).
    """
    cfg = ctx.config
    _check(cfg)
    ctx.record(finetunes=str(ctx.run_dir / "finetunes"), reference_mode=REFERENCE_MODE)
    runs = ctx.step("finetune_runs", lambda: _train_all(ctx))
    ctx.steps(["finetune_scores", "finetune_comparisons"], lambda: _scores_and_comparisons(ctx, runs))
    ctx.step("weight_change", lambda: _per_run(ctx, runs, _weight_change))
    ctx.step("layer_cka", lambda: _per_task_seed(ctx, runs, "cka"))
    attention = None
    if cfg["attention_change"]:
        attention = ctx.step("attention_change", lambda: _per_task_seed(ctx, runs, "attention"))
    ctx.step(
        "change_by_layer", lambda: change_by_layer(ctx.tables["weight_change"], ctx.tables["layer_cka"], attention)
    )


def _check(cfg: dict[str, Any]) -> None:
    from bertology.finetuning.config import MODES

    for field in ("modes", "learning_rates"):  # a list of modes; a mapping keyed by mode
        unknown = [m for m in cfg[field] if m not in MODES]
        if unknown:
            raise ConfigError(f"finetuning: field {field!r}: unknown mode(s) {unknown}; known: {', '.join(MODES)}")
    if REFERENCE_MODE not in cfg["modes"]:
        raise ConfigError(f"finetuning: field 'modes' must include {REFERENCE_MODE!r} (every mode is compared with it)")
    for field in ("tasks", "modes", "seeds"):
        if not cfg[field]:
            raise ConfigError(f"finetuning: field {field!r} must not be empty")
        if len(set(map(str, cfg[field]))) != len(cfg[field]):
            raise ConfigError(f"finetuning: field {field!r} names an entry twice: {cfg[field]}")


def _task_slug(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", Path(task).stem if Path(task).suffix else task)


def _train_all(ctx: StudyContext) -> pd.DataFrame:
    """Fine-tune every (task, mode, seed) (a finished run returns at once; a killed one resumes)."""
    import json

    from bertology.finetuning import FinetuneConfig, run_finetuning

    cfg, rows = ctx.config, []
    root = ctx.run_dir / "finetunes"
    for task in cfg["tasks"]:
        for mode in cfg["modes"]:
            for seed in cfg["seeds"]:
                name = f"{_task_slug(task)}-{mode}-seed{seed}"
                ctx.log(f"  fine-tuning {name}")
                run_dir = run_finetuning(
                    FinetuneConfig(
                        run_name=name,
                        model=cfg["model"],
                        task=task,
                        corpus=cfg["corpus"],
                        mode=mode,
                        seed=int(seed),
                        max_examples=cfg["max_examples"],
                        epochs=cfg["epochs"],
                        batch_size=cfg["batch_size"],
                        max_seq_len=cfg["max_seq_len"],
                        adapter_size=cfg["adapter_size"],
                        device=cfg["device"],
                        learning_rate=cfg["learning_rates"].get(mode),
                        output_root=str(root),
                        progress=False,
                    )
                )
                info = json.loads((run_dir / "run.json").read_text())
                result = info["result"]
                rows.append(
                    {
                        "task": task,
                        "mode": mode,
                        "seed": int(seed),
                        **{
                            k: result[k]
                            for k in (
                                "test_accuracy",
                                "test_low",
                                "test_high",
                                "dev_accuracy",
                                "best_step",
                                "test_examples",
                                "test_items",
                            )
                        },
                        "trainable_parameters": info["trainable_parameters"],
                        "total_parameters": info["total_parameters"],
                        "learning_rate": info["config"]["learning_rate"],
                        "run": str(run_dir.relative_to(ctx.run_dir)),
                    }
                )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- accuracy and comparisons


def seeds_and_examples_interval(
    per_seed: list[tuple[np.ndarray, np.ndarray]], *, confidence: float = 0.95, bootstrap_seed: int = 0
) -> dict[str, Any]:
    """Test accuracy over seeds, each seed with its own test set (docs/METHODS.md, "Intervals,
    selection and comparisons", the probes' ``per_seed`` rule): ``per_seed`` holds per seed the
    per-example ``(correct [E_s], scored [E_s])``. The estimate is the mean of the seeds'
    accuracies; with two or more seeds each side is the wider of the Student-t interval over seeds
    and a percentile bootstrap of the pooled accuracy resampling the test examples of all seeds;
    with one seed, the bootstrap alone (named so in ``interval``: seed variation is not in it),
    never ± 0. Both are widened to the Wilson interval of the pooled items where narrower (every
    example right gives a bootstrap of [1, 1]) and clipped to [0, 1]. Returns ``accuracy, low,
    high, n_seeds, n_test, interval``."""
    scores = [c.sum() / max(n.sum(), 1) for c, n in per_seed]
    t = t_interval(scores, confidence)
    correct = np.concatenate([c for c, _ in per_seed]).astype(float)
    scored = np.concatenate([n for _, n in per_seed]).astype(float)
    boot = ratio_bootstrap(correct, scored, confidence=confidence, seed=bootstrap_seed)
    if t.n >= 2:  # each seed its own test set: the per-seed rule of the probes' intervals
        low, high, _ = combine_seed_and_sentence(t, boot.estimate - boot.low, boot.high - boot.estimate, shared=False)
        method = _PER_SEED_INTERVAL
    else:
        low, high, method = boot.low, boot.high, _ONE_SEED_INTERVAL
    n_items = int(scored.sum())
    floor = wilson_interval(int(round(t.estimate * n_items)), n_items, confidence)
    low = min(low, floor.low) if not math.isnan(low) else floor.low
    high = max(high, floor.high) if not math.isnan(high) else floor.high
    return {
        "accuracy": t.estimate,
        "low": max(0.0, low),
        "high": min(1.0, high),
        "n_seeds": t.n,
        "n_test": n_items,
        "interval": method,
    }


def compare_with_reference(
    pairs: list[tuple[dict[str, list], dict[str, list]]], *, confidence: float = 0.95, bootstrap_seed: int = 0
) -> dict[str, Any]:
    """Accuracy of a mode minus the reference's on the same test examples. ``pairs``: per seed the
    two runs' test predictions (``example, correct, scored`` lists; the trainer's
    ``test_predictions.json``). A paired bootstrap resamples the examples of all seeds together
    (:func:`bertology.uncertainty.paired_bootstrap`; its p-value is reported); with two or more
    seeds the estimate is the mean of the per-seed differences and each side is the wider of the
    paired bootstrap's and the Student-t interval of the per-seed differences. ``WorkbenchError``
    when the two runs of a seed were not scored on the same examples."""
    diffs, num_a, num_b, den_a, den_b, groups = [], [], [], [], [], []
    for s, (a, b) in enumerate(pairs):
        if a["example"] != b["example"] or a["scored"] != b["scored"]:
            raise WorkbenchError(
                "compare_with_reference: the two runs of a seed were scored on different "
                "test examples (another split, max_examples or max_seq_len?)"
            )
        ca, cb, n = (np.asarray(x, dtype=float) for x in (a["correct"], b["correct"], a["scored"]))
        diffs.append(ca.sum() / max(n.sum(), 1) - cb.sum() / max(n.sum(), 1))
        num_a.append(ca)
        num_b.append(cb)
        den_a.append(n)
        den_b.append(n)
        groups.append(np.array([f"{s}:{e}" for e in a["example"]]))
    paired = paired_bootstrap(
        *(np.concatenate(x) for x in (num_a, num_b, den_a, den_b, groups)), confidence=confidence, seed=bootstrap_seed
    )
    t = t_interval(diffs, confidence)
    if t.n >= 2:
        estimate = t.estimate
        low, high, _ = combine_seed_and_sentence(
            t, paired.difference - paired.low, paired.high - paired.difference, shared=False
        )
        method = "paired: t over seeds, paired example bootstrap as floor"
    else:
        estimate, low, high = paired.difference, paired.low, paired.high
        method = "paired example bootstrap (1 seed: seed variation not included)"
    return {
        "difference": estimate,
        "low": low,
        "high": high,
        "p_value": paired.p_value,
        "significant": bool(not (low <= 0 <= high)) if not math.isnan(low) else False,
        "n_seeds": t.n,
        "n_examples": paired.n_groups,
        "interval": method,
    }


def _scores_and_comparisons(ctx: StudyContext, runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    from bertology.finetuning.trainer import read_test_predictions

    preds = {(r.task, r.mode, r.seed): read_test_predictions(ctx.run_dir / r.run) for r in runs.itertuples()}
    score_rows, comparison_rows = [], []
    for (task, mode), group in runs.groupby(["task", "mode"], sort=False):
        per_seed = [
            (np.asarray(preds[(task, mode, s)]["correct"]), np.asarray(preds[(task, mode, s)]["scored"]))
            for s in group["seed"]
        ]
        row = seeds_and_examples_interval(per_seed, bootstrap_seed=ctx.seed)
        share = float((group["trainable_parameters"] / group["total_parameters"]).mean())
        smallest = min(int(n.sum()) for _, n in per_seed)  # as the probes' per-seed splits: the smallest test set
        score_rows.append(
            {"task": task, "mode": mode, **row, "small_sample": is_small_sample(smallest), "trainable_share": share}
        )
        if mode != REFERENCE_MODE:
            pairs = [(preds[(task, mode, s)], preds[(task, REFERENCE_MODE, s)]) for s in group["seed"]]
            comparison_rows.append(
                {
                    "task": task,
                    "mode": mode,
                    "reference": REFERENCE_MODE,
                    **compare_with_reference(pairs, bootstrap_seed=ctx.seed),
                }
            )
    return {"finetune_scores": pd.DataFrame(score_rows), "finetune_comparisons": pd.DataFrame(comparison_rows)}


# --------------------------------------------------------------------------- inside the model


def _weight_change(ctx: StudyContext, row: Any) -> pd.DataFrame:
    from bertology.finetuning.changes import weight_change_between

    return weight_change_between(ctx.config["model"], finetuned_model_dir(ctx.run_dir / row.run))


def _per_run(ctx: StudyContext, runs: pd.DataFrame, measure) -> pd.DataFrame:
    """``measure(ctx, run row)`` for every run, tagged with its task, mode and seed."""
    tables = [measure(ctx, r).assign(task=r.task, mode=r.mode, seed=r.seed) for r in runs.itertuples()]
    table = pd.concat(tables, ignore_index=True)
    return table[["task", "mode", "seed"] + [c for c in table.columns if c not in ("task", "mode", "seed")]]


def held_out_sentences(ctx: StudyContext, task: str, seed: int) -> list[list[str]]:
    """The first ``cka_sentences`` test-split examples of ``task`` under ``seed`` (never trained on
    by any mode of that seed), as word lists (a pair example: its first text)."""
    from bertology.finetuning import build_task

    cfg = ctx.config
    split = build_task(task, corpus=cfg["corpus"], max_examples=cfg["max_examples"], seed=int(seed)).test
    return [list(e.words) for e in split[: cfg["cka_sentences"]]]


def _per_task_seed(ctx: StudyContext, runs: pd.DataFrame, what: str) -> pd.DataFrame:
    """CKA per layer (``what = "cka"``) or attention change per head (``"attention"``) of every run
    against the pretrained model, on its task and seed's held-out sentences."""
    from bertology.corpus.types import Corpus, Sentence
    from bertology.finetuning.changes import attention_change, layer_cka
    from bertology.models import load_model

    pretrained = load_model(ctx.config["model"], attentions=True)
    tables = []
    for (task, seed), group in runs.groupby(["task", "seed"], sort=False):
        sentences = held_out_sentences(ctx, task, seed)
        corpus = Corpus(
            f"{_task_slug(task)}-test-seed{seed}", [Sentence(f"test-{i}", words) for i, words in enumerate(sentences)]
        )
        with tempfile.TemporaryDirectory(dir=ctx.run_dir, prefix="stores-") as stores:  # the pretrained store is reused
            for r in group.itertuples():
                tuned = load_model(finetuned_model_dir(ctx.run_dir / r.run), attentions=True)
                table = (
                    layer_cka(pretrained, tuned, corpus, root=stores)
                    if what == "cka"
                    else attention_change(pretrained, tuned, sentences, max_length=ctx.config["max_seq_len"])
                )
                tables.append(table.assign(task=task, mode=r.mode, seed=r.seed))
    table = pd.concat(tables, ignore_index=True)
    return table[["task", "mode", "seed"] + [c for c in table.columns if c not in ("task", "mode", "seed")]]


def change_by_layer(weight_change: pd.DataFrame, cka: pd.DataFrame, attention: pd.DataFrame | None) -> pd.DataFrame:
    """One row per ``task, mode, layer`` on the hidden-state axis (``layer`` 0 = the embeddings, ``l``
    = the output of encoder layer ``l``), means over seeds: ``cka`` (with ``cka_min``/``cka_max``
    over seeds), ``weight_<module>`` (relative weight change of the embeddings at layer 0, of
    attention / ffn / layernorm of encoder layer ``l`` at ``l``), ``attention_js`` (mean over the
    layer's heads; NaN at layer 0 and without the attention table) and ``n_seeds``: what a plot
    of "does the change grow with depth" reads."""
    keys = ["task", "mode", "layer"]
    by_seed = cka.groupby(keys + ["seed"], sort=False)["cka"].mean().reset_index()
    out = (
        by_seed.groupby(keys, sort=False)
        .agg(cka=("cka", "mean"), cka_min=("cka", "min"), cka_max=("cka", "max"), n_seeds=("seed", "nunique"))
        .reset_index()
    )
    weights = weight_change.pivot_table(index=keys, columns="module", values="relative_change", aggfunc="mean")
    weights.columns = [f"weight_{c}" for c in weights.columns]
    out = out.merge(weights.reset_index(), on=keys, how="left")
    if attention is not None and len(attention):
        js = (
            attention.groupby(["task", "mode", "seed", "layer"], sort=False)["js_divergence"]
            .mean()
            .groupby(["task", "mode", "layer"], sort=False)
            .mean()
            .reset_index()
        )
        out = out.merge(js.rename(columns={"js_divergence": "attention_js"}), on=keys, how="left")
    else:
        out["attention_js"] = np.nan
    return out.sort_values(keys, kind="stable").reset_index(drop=True)
