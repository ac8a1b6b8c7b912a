"""The pretraining family after BERT at equal compute: MLM (BERT/RoBERTa recipe), ELECTRA, ALBERT
(and a student distilled from the MLM model) pretrained on the same corpus with the same tokenizer
and the same FLOPs budget, then compared with the workbench's own analyses: held-out MLM loss where
comparable, edge-probing accuracy per layer, head types.

The budget is ``budget_steps`` optimizer steps of ``budget_variant``, in FLOPs measured on one step
of each variant's real loss module (:func:`bertology.pretraining.flops.measure_step_flops`); every
variant gets ``floor(budget / its FLOPs per step)`` steps, the same batch and sequence length.
Single-segment variants are packed in full token blocks (``packing: token_blocks``; whole-sentence
packing, RoBERTa's DOC- or FULL-SENTENCES, fills only 77% of 64 positions on Brown) so their
sequences are about as full as ALBERT's sentence pairs; the ``variants`` table reports each one's
``real_token_share``, real tokens and FLOPs per real token beside the FLOPs. A distilled
student's budget counts its teacher's forward passes; ``teacher_flops`` /
``flops_total_with_teacher`` add the teacher's own training. The encoders are compared by probing
(``probe_best_layers``: best layer chosen on dev, reported on test; ``encoder_comparison``: every
pair of variants on the same test sentences, a paired bootstrap), not by a held-out MLM loss that
for ELECTRA is its generator's (``heldout``'s ``measures_encoder`` says which rows measure the
analysed encoder). ELECTRA's claim (Clark et al. 2020) is that replaced token detection learns
better representations than MLM "given the same model size, data, and compute": the ``probe_scores``
and ``head_type_counts`` tables are where this study measures it.

Models land in the registry as ``<run_prefix>-<variant>`` (all four share the tokenizer
``<run_prefix>-tokenizer-<hash of corpus content and tokenizer settings>``); re-running resumes the trainings and reuses finished tables."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pandas as pd

from bertology import paths
from bertology.checkpoints import atomic_dir, list_checkpoints
from bertology.corpus import load_corpus
from bertology.errors import ConfigError
from bertology.features import sentences_that_fit
from bertology.models import load_model, random_init_like
from bertology.pretraining import heldout_loss, load_config, read_metrics, run_pretraining, unigram_baseline
from bertology.pretraining.data import corpus_path, read_run_data
from bertology.pretraining.flops import analytic_step_flops, measure_step_flops, steps_for_budget
from bertology.pretraining.objectives import pair_task
from bertology.pretraining.text_corpus import corpus_hash, real_token_share
from bertology.probes.heads.classification import analyse_store
from bertology.probes.probing.edge import compare_best_layers, probe_layers, summarise
from bertology.probes.probing.tasks import TASK_NAMES, build_task, require_splittable
from bertology.store import extract
from bertology.validation import Rule, add_study_rules, model_problem

DESCRIPTION = "MLM vs ELECTRA vs ALBERT (+ distilled student) pretrained at equal FLOPs; loss, probes, head types"
DEFAULTS = {
    "run_prefix": "variants",  # models: <run_prefix>-<variant>, tokenizer: <run_prefix>-tokenizer-<key>
    "base": {},  # PretrainConfig fields every variant shares (corpus, sizes, batch, lr, ...)
    "variants": {  # variant -> PretrainConfig fields of its own
        "mlm": {"objective": "mlm"},
        "electra": {"objective": "electra"},
        "albert": {"objective": "mlm+sop", "architecture": "albert", "embedding_size": 128},
        "distilled": {"objective": "distill", "num_hidden_layers": 2},
    },
    "budget_variant": "mlm",  # the budget is budget_steps steps of this variant, in FLOPs
    "budget_steps": 1000,
    "teacher_variant": "mlm",  # a distill variant without a teacher learns from this variant's final model
    "warmup_fraction": 0.06,  # warm-up steps as a share of each variant's steps
    "packing": "token_blocks",  # single-segment variants: full blocks of the token stream, so their sequences
    # are as full as ALBERT's sentence pairs (measured: whole-sentence packing,
    # doc_ or full_sentences, fills 77% of 64 positions on Brown)
    "corpus": "brown-sample",  # analyses: the annotated corpus
    "limit": 400,
    "tasks": ["pos", "deps"],
    "seeds": [0],
    "max_epochs": 10,
    "random_baseline": True,  # also probe a randomly initialised copy of the budget variant
    "seed": 0,
}
MODEL_FIELDS = ("teacher", "init_from")  # PretrainConfig fields that name a model


def _variant_model_problem(variants: object) -> str | None:
    """The first model a variant names (``teacher:``, ``init_from:``) that does not resolve, as
    ``variant 'x', field 'teacher': <resolve's line>``; None when every one does (or none is named)."""
    if not isinstance(variants, dict):
        return None
    for variant, fields in variants.items():
        for field in MODEL_FIELDS:
            name = fields.get(field) if isinstance(fields, dict) else None
            why = model_problem(name) if name else None
            if why:
                return f"variant {variant!r}, field {field!r}: {why}"
    return None


def _base_model_problem(base: object) -> str | None:
    why = _variant_model_problem({"base": base})
    return why.replace("variant 'base', ", "", 1) if why else None


# checked before any pretraining or model load: the tasks, and every model a variant names (a teacher
# or init_from: a registry name, a folder or a hub name), so a mistyped teacher fails before the
# tokenizer and the variants before it are trained
add_study_rules(
    "pretraining_variants",
    {
        "tasks": TASK_NAMES,
        "variants": Rule(
            "a mapping of variant names to PretrainConfig fields whose teacher / init_from name models",
            lambda v: _variant_model_problem(v) is None,
            problem=_variant_model_problem,
        ),
        "base": Rule(
            "PretrainConfig fields whose teacher / init_from name models",
            lambda v: _base_model_problem(v) is None,
            problem=_base_model_problem,
        ),
    },
)


def _tokenizer(prefix: str, base: dict, log) -> Path:
    """One tokenizer for every variant, trained once on the pretraining corpus (a distilled student
    must read with its teacher's tokenizer; the others share it so that losses compare)."""
    from bertology.pretraining.tokenizer import train_tokenizer

    probe = load_config(None, **base)
    # keyed on what the tokenizer depends on: the corpus content and the tokenizer settings
    key = hashlib.sha256(
        json.dumps(
            [
                corpus_hash(corpus_path(probe)),
                probe.tokenizer_kind,
                probe.vocab_size,
                probe.lowercase,
                probe.max_seq_len,
            ]
        ).encode()
    ).hexdigest()[:10]
    tok_dir = paths.models_dir() / f"{prefix}-tokenizer-{key}"
    if not (tok_dir / "tokenizer.json").is_file():
        log(f"  training the shared tokenizer ({probe.tokenizer_kind}, {probe.vocab_size}) -> {tok_dir}")
        with atomic_dir(tok_dir) as tmp:
            train_tokenizer(
                corpus_path(probe),
                tmp,
                kind=probe.tokenizer_kind,
                vocab_size=probe.vocab_size,
                lowercase=probe.lowercase,
                model_max_length=probe.max_seq_len,
            )
    return tok_dir


def _variant_config(cfg: dict, name: str, fields: dict, tok_dir: Path, steps: int | None = None, teacher=None):
    overrides = {
        "packing": cfg["packing"],
        **cfg["base"],
        **fields,
        "run_name": f"{cfg['run_prefix']}-{name}",
        "tokenizer": str(tok_dir),
        "progress": False,
        "seed": cfg["seed"],
    }
    if teacher is not None and overrides.get("objective") == "distill" and not overrides.get("teacher"):
        overrides["teacher"] = str(teacher)
    if steps is not None:
        overrides.update(
            max_steps=steps,
            warmup_steps=max(1, round(cfg["warmup_fraction"] * steps)),
            eval_every=steps,
            save_every=steps,
            keep_steps=[0],
            log_every=max(1, steps // 20),
        )
    try:
        return load_config(None, **overrides)
    except ConfigError as exc:
        raise ConfigError(f"variants.{name}: {exc}") from None


def _real_tokens(run_dir: Path, measured: dict, steps: int) -> dict[str, float]:
    """What a variant's FLOPs bought: the share of its training sequences' ``max_seq_len``
    positions holding real tokens (the budget charges every position), real tokens per step and in
    all, and FLOPs per real token."""
    cfg, _, train, _ = read_run_data(run_dir)
    share = real_token_share((train.offsets[1:] - train.offsets[:-1]).tolist(), cfg.max_seq_len)
    real_per_step = measured["tokens_per_step"] * share
    return {
        "real_token_share": share,
        "real_tokens_per_step": real_per_step,
        "real_tokens_total": real_per_step * steps,
        "flops_per_real_token": measured["flops_per_step"] / real_per_step,
    }


def _with_teacher_cost(table: pd.DataFrame, teacher_variant: str) -> pd.DataFrame:
    """``teacher_flops``: a distilled student's teacher's own training FLOPs (0 for the others);
    ``flops_total_with_teacher``: what the student cost from scratch (its budget share counts the
    teacher's forward passes only)."""
    teacher_cost = float(table.loc[table["variant"] == teacher_variant, "flops_total"].iloc[0])
    students = table["objective"] == "distill"
    table["teacher_flops"] = students * teacher_cost
    table["flops_total_with_teacher"] = table["flops_total"] + table["teacher_flops"]
    return table


def run(ctx) -> None:
    cfg = ctx.config
    variants: dict = cfg["variants"]
    for key in ("budget_variant", "teacher_variant"):
        if cfg[key] not in variants:
            raise ConfigError(f"{key}: {cfg[key]!r} is not one of the variants ({', '.join(variants)})")
    tok_dir = _tokenizer(cfg["run_prefix"], {**cfg["base"], "run_name": f"{cfg['run_prefix']}-tokenizer"}, ctx.log)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tok_dir))
    students = [n for n, f in variants.items() if f.get("objective") == "distill" and not f.get("teacher")]
    if cfg["teacher_variant"] in students:
        raise ConfigError(f"teacher_variant: {cfg['teacher_variant']!r} is itself a student")
    corpus, dropped = sentences_that_fit(load_corpus(cfg["corpus"]), tokenizer, cfg["limit"])
    for task in cfg["tasks"]:  # before the pretraining: each task can be split on the analysis corpus
        require_splittable(build_task(corpus, task))
    trained = ctx.steps(
        ["variants", "training_metrics"],
        lambda: _train_all(ctx, tok_dir, len(tokenizer), tokenizer.pad_token_id, students),
    )
    table = trained["variants"]
    _record_analysis_corpus(ctx, corpus, dropped, tokenizer, table, tok_dir)
    reference = paths.models_dir() / f"{cfg['run_prefix']}-{cfg['budget_variant']}"
    ctx.step("heldout", lambda: _heldout(table, trained["training_metrics"], reference))
    tables = ctx.steps(
        ["probe_scores", "head_types", "probe_sentences"], lambda: _analyses(ctx, table, corpus, reference)
    )
    _comparison_tables(ctx, tables)
    _print_summary(ctx)


def _train_all(ctx, tok_dir: Path, vocab: int, pad: int, students: list[str]) -> dict[str, pd.DataFrame]:
    """Pretrain every variant, students after their teacher, each for the steps the FLOPs budget
    buys it: the ``variants`` table (FLOPs, steps, real tokens, time) and every ``training_metrics``."""
    cfg = ctx.config
    variants: dict = cfg["variants"]
    order = [n for n in variants if n not in students] + students  # students after their teacher
    rows, curves = [], []
    budget = None
    for name in order:
        teacher = None
        if name in students:
            teacher_run = paths.models_dir() / f"{cfg['run_prefix']}-{cfg['teacher_variant']}"
            teacher = list_checkpoints(teacher_run)[-1][1]
        probe_cfg = _variant_config(cfg, name, variants[name], tok_dir, teacher=teacher)
        measured = measure_step_flops(probe_cfg, vocab, pad)
        if budget is None:
            ref_cfg = _variant_config(cfg, cfg["budget_variant"], variants[cfg["budget_variant"]], tok_dir)
            budget = cfg["budget_steps"] * measure_step_flops(ref_cfg, vocab, pad)["flops_per_step"]
        steps = steps_for_budget(budget, measured["flops_per_step"])
        run_cfg = _variant_config(cfg, name, variants[name], tok_dir, steps=steps, teacher=teacher)
        teacher_config = None
        if teacher is not None:
            from transformers import AutoConfig

            teacher_config = AutoConfig.from_pretrained(str(teacher))
        analytic = analytic_step_flops(run_cfg, vocab, teacher_config)
        ctx.log(
            f"  {name}: {measured['flops_per_step'] / 1e9:.2f} GFLOPs/step (analytic "
            f"{analytic / 1e9:.2f}), {steps} steps for the budget of {budget / 1e12:.3f} TFLOPs, "
            f"{measured['params_trained']:,} parameters trained"
        )
        started = time.perf_counter()
        run_dir = run_pretraining(run_cfg)
        rows.append(
            {
                "variant": name,
                "objective": run_cfg.objective,
                "architecture": run_cfg.architecture,
                "model": run_dir.name,
                "teacher": str(teacher) if teacher else None,
                "packing": run_cfg.packing if pair_task(run_cfg.objective) is None else "sentence_pairs",
                **{k: v for k, v in measured.items()},
                "flops_per_step_analytic": analytic,
                "steps": steps,
                "flops_total": steps * measured["flops_per_step"],
                "budget_flops": budget,
                **_real_tokens(run_dir, measured, steps),
                "train_seconds": round(time.perf_counter() - started, 1),
            }
        )
        curves.append(read_metrics(run_dir).assign(variant=name))
    return {
        "variants": _with_teacher_cost(pd.DataFrame(rows), cfg["teacher_variant"]),
        "training_metrics": pd.concat(curves, ignore_index=True),
    }


def _record_analysis_corpus(ctx, corpus, dropped: int, tokenizer, table: pd.DataFrame, tok_dir: Path) -> None:
    """Record the annotated corpus the encoders are analysed on (its first ``limit`` sentences that
    fit the models' training positions; ``dropped`` left out as too long) in the manifest, with the
    models and the tokenizer."""
    if dropped:
        ctx.log(
            f"  {dropped} sentences longer than the models' {tokenizer.model_max_length} training positions "
            "left out of the analyses"
        )
    ctx.record(
        corpus={
            "name": corpus.name,
            "fingerprint": corpus.fingerprint,
            "sources": corpus.sources,
            "sentences": len(corpus),
            "left_out_too_long": dropped,
        },
        models=list(table["model"]),
        tokenizer=str(tok_dir),
    )


def _heldout(table: pd.DataFrame, training_metrics: pd.DataFrame, reference: Path) -> pd.DataFrame:
    """The ``heldout`` table: each variant's MLM loss on the budget variant's (``reference``)
    held-out set and masks, beside a unigram baseline and each one's last own held-out metrics."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the pair head / pooler a MLM-only load leaves out is expected
    rows = [
        {
            "variant": "unigram",
            "scored": "training-set token frequencies",
            "metric": "heldout_mlm_loss",
            "value": unigram_baseline(reference)["unigram_eval_loss"],
            "measures_encoder": False,
        }
    ]
    for r in table.itertuples():
        final = list_checkpoints(paths.models_dir() / r.model)[-1][1]
        if r.objective == "electra":  # the discriminator has no MLM head: its generator's loss
            rows.append(
                {
                    "variant": r.variant,
                    "scored": "generator (not the analysed encoder)",
                    "metric": "heldout_mlm_loss",
                    "value": heldout_loss(reference, final / "generator"),
                    "measures_encoder": False,
                }
            )
        else:
            rows.append(
                {
                    "variant": r.variant,
                    "scored": "encoder + MLM head",
                    "metric": "heldout_mlm_loss",
                    "value": heldout_loss(reference, final),
                    "measures_encoder": True,
                }
            )
        own = training_metrics.query("variant == @r.variant and metric.str.startswith('eval_')")
        last = own[own.step == own.step.max()]
        rows.extend(
            {
                "variant": r.variant,
                "scored": "own held-out set and objective",
                "metric": m.metric,
                "value": m.value,
                "measures_encoder": False,
            }
            for m in last.itertuples()
        )
    return pd.DataFrame(rows)


def _analyses(ctx, table: pd.DataFrame, corpus, reference: Path) -> dict[str, pd.DataFrame]:
    """Every variant's encoder (and, with ``random_baseline``, a random-init copy of the budget
    variant) probed per layer on one split and its heads typed: ``probe_scores``, ``head_types``,
    ``probe_sentences``."""
    cfg = ctx.config
    scores, sentences, types = [], [], []
    models = [(r.variant, r.model) for r in table.itertuples()]
    if cfg["random_baseline"]:
        models.append(("random-init", None))
    for variant, model in models:
        ctx.log(f"    analysing {variant}")
        lm = random_init_like(load_model(reference.name), seed=cfg["seed"]) if model is None else load_model(model)
        store = extract(lm, corpus, attentions=True, progress=False)
        types.append(analyse_store(store, corpus)["head_types"].assign(variant=variant))
        for task in cfg["tasks"]:  # one split (the run's seed) for every variant: paired comparisons
            df, per_sentence = probe_layers(
                store,
                corpus,
                task,
                seeds=[int(s) for s in cfg["seeds"]],
                split_seed=cfg["seed"],
                max_epochs=cfg["max_epochs"],
                test_sentences=True,
            )
            scores.append(df.assign(variant=variant))
            sentences.append(per_sentence.assign(variant=variant))
    return {
        "probe_scores": pd.concat(scores, ignore_index=True),
        "head_types": pd.concat(types, ignore_index=True),
        "probe_sentences": pd.concat(sentences, ignore_index=True),
    }


def _comparison_tables(ctx, tables: dict[str, pd.DataFrame]) -> None:
    """The tables that compare the encoders: mean test accuracy per layer, the best layer (chosen
    on dev) of each variant, every pair of variants paired on the same test sentences, head types."""
    cfg = ctx.config
    acc = tables["probe_scores"].query("metric == 'accuracy' and split == 'test'")
    ctx.step(
        "probe_accuracy",
        lambda: (
            acc.groupby(["variant", "task", "layer"], as_index=False)["value"]
            .mean()
            .rename(columns={"value": "accuracy"})
        ),
    )
    best = ctx.step(
        "probe_best_layers",
        lambda: pd.concat(
            [summarise(part).assign(variant=variant) for variant, part in tables["probe_scores"].groupby("variant")],
            ignore_index=True,
        ),
    )
    ctx.step(
        "encoder_comparison",
        lambda: compare_best_layers(tables["probe_sentences"], best, by="variant", seed=cfg["seed"]),
    )
    ctx.step(
        "head_type_counts",
        lambda: tables["head_types"].groupby(["variant", "type"]).size().rename("count").reset_index(),
    )


def _print_summary(ctx) -> None:
    t = ctx.tables
    v = t["variants"].set_index("variant")
    ctx.log("\nequal compute (FLOPs charged at full sequence length; real tokens = what they bought):")
    columns = [
        "objective",
        "architecture",
        "packing",
        "params_encoder",
        "params_trained",
        "flops_per_step",
        "steps",
        "flops_total",
        "real_token_share",
        "real_tokens_total",
        "flops_per_real_token",
        "teacher_flops",
        "flops_total_with_teacher",
    ]
    ctx.log(v[[c for c in columns if c in v.columns]].to_string())
    if "encoder_comparison" in t:
        ctx.log(
            "\nencoders compared by probing (best layer chosen on dev, test accuracy, paired over the same "
            "test sentences):"
        )
        ctx.log(
            t["probe_best_layers"][
                ["variant", "task", "best_layer", "best_layer_score", "n_test", "small_sample"]
            ].to_string(index=False)
        )
        ctx.log(
            t["encoder_comparison"][["task", "a", "b", "difference", "low", "high", "p_value", "significant"]]
            .round(4)
            .to_string(index=False)
        )
    ctx.log(
        "\nheld-out MLM loss (nats / masked token, the budget variant's held-out set and masks; "
        "measures_encoder False: not a measure of the analysed encoder):"
    )
    held = t["heldout"].query("metric == 'heldout_mlm_loss'")
    ctx.log(held[[c for c in ("variant", "scored", "value", "measures_encoder") if c in held]].to_string(index=False))
    ctx.log("\nprobe accuracy (test) per layer:")
    ctx.log(
        t["probe_accuracy"]
        .pivot_table(index=["task", "variant"], columns="layer", values="accuracy")
        .round(3)
        .to_string()
    )
    ctx.log("\nhead types:")
    ctx.log(
        t["head_type_counts"].pivot_table(index="variant", columns="type", values="count", fill_value=0).to_string()
    )
