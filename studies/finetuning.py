"""What fine-tuning changes (issue 28): the frozen / full / BitFit / adapters table on the same tasks
and test examples with intervals and paired comparisons against full fine-tuning; per-layer
relative weight change per module; per-layer CKA between the pretrained and the fine-tuned encoder
on held-out sentences; per-head change of attention
(:func:`bertology.finetuning.analysis.finetuning_analysis`); then edge probing and head types
before and after fine-tuning on each seed's held-out sentences
(:func:`bertology.probes.probing.encoder_comparison.probes_and_head_types`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from bertology.finetuning.analysis import (
    FINETUNING_DEFAULTS,
    finetuned_model_dir,
    finetuning_analysis,
    held_out_sentences,
)
from bertology.finetuning.config import BUILTIN_TASKS, MODES, names_a_task
from bertology.runs import StudyContext
from bertology.validation import Rule, add_study_rules

DESCRIPTION = (
    "Fine-tuning: frozen / full / BitFit / adapters with intervals and paired comparisons; "
    "weight change, CKA, attention change, probing and head types per layer"
)
DEFAULTS = FINETUNING_DEFAULTS

# checked with the config, before any fine-tune starts
add_study_rules(
    "finetuning",
    {
        "tasks": Rule(f"a list of tasks: built-in ({', '.join(BUILTIN_TASKS)}) or task files", names_a_task, each=True),
        "learning_rates": Rule(
            f"a mapping of fine-tuning mode ({', '.join(MODES)}) to a learning rate > 0, e.g. {{full: 1.0e-4}}",
            lambda v: (
                isinstance(v, dict)
                and all(
                    k in MODES and isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
                    for k, x in v.items()
                )
            ),
        ),
    },
)


def run(ctx: StudyContext) -> None:
    finetuning_analysis(ctx)
    cfg = ctx.config
    if cfg["probe_tasks"] or cfg["head_types_change"]:
        ctx.steps(
            ["probing_before_after", "head_types_before_after"], lambda: before_after(ctx, ctx.tables["finetune_runs"])
        )


def held_out_corpus(ctx: StudyContext, corpus: Any, task: str, seed: int) -> Any:
    """The sentences of ``corpus`` (the config's) that are held-out examples of ``task`` under ``seed``
    (matched by their words), with their annotation, at most ``cka_sentences``; a task whose examples
    are not corpus sentences (a file, State of the Union) gets the first ``cka_sentences`` sentences."""
    cfg = ctx.config
    held_out = {tuple(words) for words in held_out_sentences(ctx, task, seed)}
    chosen = [i for i, s in enumerate(corpus) if tuple(s.words) in held_out]
    return corpus.subset(chosen[: cfg["cka_sentences"]] if chosen else cfg["cka_sentences"])


def before_after(ctx: StudyContext, runs: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``probing_before_after`` (``task, mode, seed, probe_task, layer, split, accuracy``; mode
    ``pretrained`` = before) and ``head_types_before_after`` (``task, mode, seed, layer, head,
    type_before, type_after, changed``) over every task and seed."""
    from bertology.corpus import load_corpus
    from bertology.probes.probing.encoder_comparison import probes_and_head_types

    cfg = ctx.config
    whole = load_corpus(cfg["corpus"])
    probes, types = [], []
    for (task, seed), group in runs.groupby(["task", "seed"], sort=False):
        corpus = held_out_corpus(ctx, whole, task, int(seed))
        ctx.log(f"  before / after fine-tuning: {task}, seed {seed}")
        models = [("pretrained", cfg["model"])] + [
            (r.mode, finetuned_model_dir(ctx.run_dir / r.run)) for r in group.itertuples()
        ]
        p, t = probes_and_head_types(
            models,
            corpus,
            probe_tasks=cfg["probe_tasks"],
            head_types=cfg["head_types_change"],
            seed=int(seed),
            root=ctx.run_dir,
            log=ctx.log,
        )
        probes.append(p.assign(task=task, seed=int(seed)))
        types.append(t.assign(task=task, seed=int(seed)))
    probe_table, type_table = pd.concat(probes, ignore_index=True), pd.concat(types, ignore_index=True)
    first = ["task", "mode", "seed"]
    return {
        "probing_before_after": probe_table[first + [c for c in probe_table.columns if c not in first]],
        "head_types_before_after": type_table[first + [c for c in type_table.columns if c not in first]],
    }
