"""Compression the way the papers did it (issue 29), on a model fine-tuned on the task:

- **Michel et al. (2019) in their own setting**: head importance and pruning curves of the fine-tuned
  classifier on the task's own loss (importance, re-estimated as heads go) and accuracy; the shares
  removable before accuracy drops by 1% / 5% chosen on the fine-tune's dev split and read on its test
  split, against random orders (a t-interval over seeds) and the by-type order, every pair of orders
  compared on the same test examples (paired bootstrap); the importance order's heads really removed
  (parameters, time) -- :func:`bertology.probes.heads.analysis.prune_on_task` on
  :func:`bertology.probes.heads.pruning.classifier_task`.
- **Magnitude lottery tickets** (Frankle & Carbin 2019; Chen et al. 2020), when ``lottery_rounds`` > 0:
  iterative magnitude pruning of the encoder's weight matrices (and, with Chen et al.'s schedule, the
  default ``lottery_schedule: chen2020``, the pooler's: 10% of the original weights a round) with
  rewinding to the pre-trained weights, each round's ticket against a random mask of the same
  sparsity, paired on the same test examples (:func:`bertology.finetuning.lottery.magnitude_lottery`).
- **Structured lottery tickets** (Prasanna et al. 2020), when ``structured_seeds`` is not empty: per
  seed the "good" sub-network (heads and FFN blocks pruned by importance until the dev metric falls
  below 90% of full, as their released code does by default: per-layer normalised head importance,
  then heads only, then blocks only) retrained from the pre-trained weights against a random
  (Bernoulli) and a "bad" sub-network (good's removed components kept, as many of its survivors
  removed), paired on the same test examples; which heads and blocks survive in every seed. The
  ``structured_*`` options keep the earlier choices by name (docs/METHODS.md).
- **Post-training quantization** of the same classifier: real dynamic int8 and simulated 8- to 2-bit
  weights, test accuracy with intervals and the paired difference to float32, size, forward time
  (:func:`bertology.probes.compression.task_quantization`); and of the pretrained encoder, a linear POS
  probe per layer under each setting, paired with float32 on the same test sentences
  (:func:`bertology.probes.compression.quantized_probing`).

The fine-tune is made by :func:`bertology.finetuning.run_finetuning` inside the run folder
(``finetunes/``, resumable), or an existing finished one is named with ``finetune_run``. Glue
between the fine-tuning room and the analyses; every number is computed by those functions.

``device`` (``auto``: a GPU when there is one): where the fine-tunes train and where the pruning
analyses run (importance, curves, structured pruning, the fine-tuned encoder's store). The
quantization tables are measured on the CPU, on purpose: torch's real int8 kernels exist there only,
and float32 is timed against them on the same processor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from bertology import paths
from bertology.errors import ConfigError
from bertology.finetuning.config import BUILTIN_TASKS, MODES, names_a_task
from bertology.finetuning.lottery import LOTTERY_SCHEDULES
from bertology.numbering import head_number, layer_number
from bertology.probes.heads.analysis import PRUNING_METHODS
from bertology.probes.heads.pruning import BAD_SUBNETWORKS, RANDOM_SUBNETWORKS, SUBNETWORK_KINDS
from bertology.runs import StudyContext
from bertology.validation import CROSS_FIELD_RULES, Rule, add_study_rules

if TYPE_CHECKING:  # imported where used: the study's heavy modules load when it runs
    from bertology.finetuning import FinetuneConfig
    from bertology.finetuning.finished import FinishedFinetune
    from bertology.probes.heads.pruning import StructuredPruning

DESCRIPTION = (
    "Compression of a fine-tuned model: Michel et al.'s head pruning on the task's loss and accuracy "
    "(thresholds on dev, test with intervals, vs random / type orders) and int8 / 8-2-bit quantization"
)

QUANT_SETTINGS = (
    "float32",
    "int8-dynamic",
    "int8-dynamic-per-channel",
    "simulated-8bit",
    "simulated-4bit",
    "simulated-3bit",
    "simulated-2bit",
)

DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",  # the pretrained encoder that is fine-tuned
    "task": "pos",  # a fine-tuning task (docs/finetuning.md): pos, ner, genre, sotu-*, a file
    "corpus": "brown-sample",  # of the built-in tasks, and the sentences head types are read on
    "mode": "full",  # the fine-tuning mode (Michel et al. prune fully fine-tuned models)
    "epochs": 3,
    "batch_size": 32,
    "max_seq_len": 128,
    "max_examples": None,  # the first N examples of the task (null: all)
    "finetune_run": None,  # an existing finished fine-tune (run folder or name) instead of training one
    "importance_examples": 512,  # training examples (a random sample, the seed's) importance is estimated on
    "limit": 300,  # sentences of `corpus` for the fine-tuned encoder's head types (type order)
    "pooling": "first",
    "methods": ["importance", "random", "type"],
    "step": 0.1,
    "max_share": 1.0,
    "refine": "bracket",
    "tolerances": [0.01, 0.05],
    "random_seeds": 3,
    "compare_shares": [0.3, 0.5],
    "l0_lambdas": [0.01, 0.1],  # only with methods: [..., l0]
    "l0_steps": 150,
    "quantization": [
        "float32",
        "int8-dynamic",
        "simulated-8bit",
        "simulated-4bit",
        "simulated-3bit",
        "simulated-2bit",
    ],  # [] = no quantization table
    "lottery_rounds": 0,  # magnitude lottery tickets: rounds of iterative magnitude pruning with rewinding
    # (0 = none; 6 rounds of 0.2 reach 74% sparsity: 13 fine-tunes)
    "lottery_schedule": "chen2020",  # chen2020: each round removes lottery_prune_share of the *original*
    # prunable weights, the pooler's included (Chen et al.'s LT_glue.py); frankle_remaining: that share of
    # the weights still kept, encoder layers only (the workbench's earlier schedule)
    "lottery_prune_share": 0.1,  # per round (chen2020: 0.1 -> 10%, 20%, ... 90% sparsity)
    "lottery_scope": "global",  # global: smallest |w| over every matrix at once (Chen et al. 2020);
    # per_matrix: that share of each matrix (layer-wise), random baseline likewise
    "structured_seeds": [],  # structured lottery tickets (Prasanna et al. 2020), one fine-tune + good / random /
    # bad sub-networks retrained per seed ([] = none; e.g. [0, 1, 2])
    "structured_keep": 0.9,  # prune heads and FFN blocks until the dev metric falls below this share of full
    "structured_head_step": 0.1,  # share of all heads removed at each step (with one FFN block)
    "structured_normalise_per_layer": True,  # rank heads on importance ℓ2-normalised per layer (their code)
    "structured_continue_phases": True,  # after the joint phase, heads only (half step), then FFN blocks only
    "structured_bad": "random_complement",  # random_complement: keep what good removed, remove as many of its
    # survivors at random (their code); most_important: remove the most important on the unpruned model
    "structured_random": "bernoulli",  # bernoulli: each component kept with good's kept share (their code);
    # exact: exactly as many removed as good
    "probe_sentences": 300,  # sentences of `corpus` for a linear POS probe per layer of the pretrained
    # encoder under each quantization (0 = no quantization_probing table)
    "device": "auto",
    "seed": 0,  # the fine-tune's split, head and data order; random orders; bootstraps
}

# checked with the config, before the fine-tune starts (the pruning study refuses the same values)
add_study_rules(
    "compression",
    {
        "methods": Rule(
            f"a list of pruning methods ({', '.join(PRUNING_METHODS)})", PRUNING_METHODS.__contains__, each=True
        ),
        "task": Rule(f"a built-in task ({', '.join(BUILTIN_TASKS)}) or a task file", names_a_task),
        "mode": Rule(f"a fine-tuning mode ({', '.join(MODES)})", MODES.__contains__),
        "lottery_schedule": Rule(f"one of {', '.join(LOTTERY_SCHEDULES)}", LOTTERY_SCHEDULES.__contains__),
        "structured_bad": Rule(f"one of {', '.join(BAD_SUBNETWORKS)}", BAD_SUBNETWORKS.__contains__),
        "structured_random": Rule(f"one of {', '.join(RANDOM_SUBNETWORKS)}", RANDOM_SUBNETWORKS.__contains__),
    },
)
CROSS_FIELD_RULES.append(
    (
        ("lottery_schedule", "lottery_rounds", "lottery_prune_share"),
        lambda c: c["lottery_schedule"] != "chen2020" or c["lottery_rounds"] * c["lottery_prune_share"] < 1 - 1e-9,
        "lottery_schedule chen2020 removes lottery_prune_share of the original weights every round, so "
        "lottery_rounds x lottery_prune_share must be < 1",
    )
)


def run(ctx: StudyContext) -> None:
    from bertology.finetuning.finished import load_finished_finetune
    from bertology.models import resolve_device
    from bertology.probes.heads.analysis import prune_on_task
    from bertology.probes.heads.pruning import classifier_task

    cfg = ctx.config
    settings = quant_settings(cfg["quantization"])
    device = resolve_device(cfg["device"])
    ctx.step("finetune_run", lambda: _finetune(ctx))
    finished = load_finished_finetune(_study_finetune(ctx))
    finished.model.to(device)  # pruning runs where the fine-tunes trained
    ctx.record(
        finetune={
            "run": str(finished.run_dir),
            "model_dir": str(finished.model_dir),
            "task": finished.task.summary(),
            "result": finished.result,
        }
    )
    train = finished.batches("train", limit=cfg["importance_examples"], seed=ctx.seed)
    task = classifier_task(
        finished.model, train, finished.batches("dev"), finished.batches("test"), finished.description
    )
    store = corpus = None
    if "type" in cfg["methods"]:
        store, corpus = _fine_tuned_store(ctx, finished.model_dir)
    prune_on_task(ctx, finished.model, task, list(cfg["methods"]), store=store, corpus=corpus)
    if settings:
        from bertology.probes.compression import task_quantization
        from bertology.probes.heads.pruning import classifier_sentence_scores

        if device.type != "cpu":
            ctx.log(f"  quantization on the CPU (the model was on {device}): int8 kernels exist on the CPU only")
            finished.model.cpu()
        ctx.step(
            "quantization_task",
            lambda: task_quantization(
                finished.model, task.test, classifier_sentence_scores, settings=settings, seed=ctx.seed
            ).assign(metric=finished.description),
        )
        if cfg["probe_sentences"]:
            ctx.step("quantization_probing", lambda: _quantized_probing(ctx, settings))
    if cfg["lottery_rounds"]:
        ctx.steps(["lottery_runs", "lottery_comparison"], lambda: _lottery(ctx))
    if cfg["structured_seeds"]:
        ctx.steps(
            ["structured_subnetworks", "structured_comparison", "structured_survivors", "structured_trace"],
            lambda: _structured(ctx),
        )


def _structured(ctx: StudyContext) -> dict[str, pd.DataFrame]:
    """Structured lottery tickets (Prasanna et al. 2020, "When BERT Plays the Lottery, All Tickets Are
    Winning"), per seed of ``structured_seeds``: fine-tune the dense model; find the good sub-network
    (:func:`bertology.probes.heads.pruning.structured_prune`: heads and FFN blocks by importance until the
    dev metric falls below ``structured_keep`` of full, ``structured_normalise_per_layer`` and
    ``structured_continue_phases``); retrain it from the pre-trained weights with the removed components
    masked, beside a random (``structured_random``) and a "bad" (``structured_bad``) sub-network
    (:func:`bertology.probes.heads.pruning.matched_components`,
    :func:`bertology.finetuning.masks.structured_masks`); compare them paired on the same test examples;
    count which heads and blocks survive in every seed's good sub-network."""
    from bertology.finetuning.trainer import read_test_predictions

    cfg = ctx.config
    root = ctx.run_dir / "structured"
    rows: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    survivors: list[dict[str, Any]] = []
    traces: list[pd.DataFrame] = []
    made = _study_finetune(ctx)
    for seed in (int(s) for s in cfg["structured_seeds"]):
        base, dense = _structured_dense(ctx, seed, root, made)
        pruning = _structured_pruning(ctx, dense, seed)
        traces.append(pruning.trace.assign(seed=seed))
        runs = _structured_retrain(ctx, base, dense, pruning, seed, root, rows, survivors)
        rows.append(
            {
                "seed": seed,
                "kind": "dense",
                "heads_removed": 0,
                "ffn_removed": 0,
                **_result(dense.run_dir),
                "run": paths.relative_if_inside(dense.run_dir, ctx.run_dir),
                **_structured_choices(cfg),
            }
        )
        good = read_test_predictions(runs["good"])
        comparisons += [
            _structured_comparison(good, read_test_predictions(runs[o]), o, seed) for o in ("random", "bad")
        ]
    return {
        "structured_subnetworks": pd.DataFrame(rows),
        "structured_comparison": pd.DataFrame(comparisons),
        "structured_survivors": _survivor_summary(survivors),
        "structured_trace": pd.concat(traces, ignore_index=True),
    }


def _structured_dense(ctx: StudyContext, seed: int, root: Path, made: Path) -> tuple[FinetuneConfig, FinishedFinetune]:
    """The dense fine-tuning config of ``seed`` (run ``dense-seed<seed>`` under ``root``) and its finished
    run: the study's own fine-tuned run ``made`` when it is that seed trained the same way, else a new one."""
    from bertology.finetuning import run_finetuning
    from bertology.finetuning.finished import load_finished_finetune
    from bertology.finetuning.lottery import training_differences
    from bertology.models import resolve_device

    cfg = ctx.config
    base = _finetune_config(cfg, seed, mode="full", output_root=str(root), run_name=f"dense-seed{seed}")
    if seed == ctx.seed and not training_differences(base, made):
        dense = load_finished_finetune(made)  # the run this study compresses, trained the same way
    else:
        ctx.log(f"  structured tickets, seed {seed}: fine-tuning the dense model")
        dense = load_finished_finetune(run_finetuning(base))
    dense.model.to(resolve_device(cfg["device"]))  # pruned where it was fine-tuned
    return base, dense


def _structured_pruning(ctx: StudyContext, dense: FinishedFinetune, seed: int) -> StructuredPruning:
    """The good sub-network of the dense model: heads and FFN blocks pruned by importance (on
    ``importance_examples`` training examples) until dev falls below ``structured_keep`` of full."""
    from bertology.probes.heads.pruning import classifier_task, structured_prune

    cfg = ctx.config
    task = classifier_task(
        dense.model,
        dense.batches("train", limit=cfg["importance_examples"], seed=seed),
        dense.batches("dev"),
        dense.batches("test"),
        dense.description,
    )
    return structured_prune(
        dense.model,
        task,
        head_step=cfg["structured_head_step"],
        keep=cfg["structured_keep"],
        normalise_per_layer=cfg["structured_normalise_per_layer"],
        continue_phases=cfg["structured_continue_phases"],
    )


def _structured_retrain(
    ctx: StudyContext,
    base: FinetuneConfig,
    dense: FinishedFinetune,
    pruning: StructuredPruning,
    seed: int,
    root: Path,
    rows: list[dict[str, Any]],
    survivors: list[dict[str, Any]],
) -> dict[str, Path]:
    """Retrain each sub-network kind (good, random, bad) of ``seed`` from the pre-trained weights with
    its removed components masked; append its row to ``rows`` (and, for the good one, which heads and
    blocks survive to ``survivors``); return the run folder of each kind and of ``dense``."""
    import dataclasses

    from bertology.finetuning import run_finetuning
    from bertology.finetuning.masks import save_masks, structured_masks
    from bertology.probes.heads.pruning import matched_components

    cfg = ctx.config
    shape = pruning.head_importance.shape
    runs: dict[str, Path] = {"dense": dense.run_dir}
    for kind in SUBNETWORK_KINDS:
        heads, ffn = matched_components(
            pruning, kind, seed=seed, bad=cfg["structured_bad"], random=cfg["structured_random"]
        )
        mask = root / "masks" / f"{kind}-seed{seed}.safetensors"
        if not mask.is_file():
            save_masks({k: m.cpu() for k, m in structured_masks(dense.model, heads, ffn).items()}, mask)
        ctx.log(f"    retraining the {kind} sub-network ({len(heads)} heads, {len(ffn)} FFN blocks removed)")
        runs[kind] = run_finetuning(dataclasses.replace(base, run_name=f"{kind}-seed{seed}", weight_mask=str(mask)))
        if kind == "good":
            gone_heads, gone_ffn = set(heads), set(ffn)
            survivors += [  # layers 1..L, heads 1..H (bertology.numbering); head -1: an FFN block
                {
                    "seed": seed,
                    "layer": layer_number(l),
                    "head": head_number(h),
                    "component": "head",
                    "survives": (l, h) not in gone_heads,
                }
                for l in range(shape[0])
                for h in range(shape[1])
            ]
            survivors += [
                {"seed": seed, "layer": layer_number(l), "head": -1, "component": "ffn", "survives": l not in gone_ffn}
                for l in range(shape[0])
            ]
        rows.append(
            {
                "seed": seed,
                "kind": kind,
                "heads_removed": len(heads),
                "ffn_removed": len(ffn),
                **_result(runs[kind]),
                "run": str(runs[kind].relative_to(ctx.run_dir)),
                **_structured_choices(cfg),
            }
        )
    return runs


def _structured_comparison(good: dict[str, Any], theirs: dict[str, Any], other: str, seed: int) -> dict[str, Any]:
    """The good sub-network's test accuracy minus the ``other`` one's, paired on the same test items
    (bootstrap interval and p-value): one row of ``structured_comparison``."""
    from bertology.uncertainty import is_small_sample, paired_bootstrap

    diff = paired_bootstrap(good["correct"], theirs["correct"], good["scored"], theirs["scored"], seed=seed)
    n_items = int(sum(good["scored"]))
    return {
        "seed": seed,
        "comparison": f"good - {other}",
        "difference": diff.difference,
        "low": diff.low,
        "high": diff.high,
        "p_value": diff.p_value,
        "n_items": n_items,
        "small_sample": is_small_sample(n_items),
    }


def _survivor_summary(survivors: list[dict[str, Any]]) -> pd.DataFrame:
    """Per component (head or FFN block), how many seeds' good sub-networks keep it: ``seeds_surviving``,
    ``n_seeds``, ``share`` and ``super_survivor`` (kept in every seed)."""
    surviving = pd.DataFrame(survivors)
    summary = surviving.groupby(["component", "layer", "head"], as_index=False)["survives"].agg(
        seeds_surviving="sum", n_seeds="count"
    )
    summary["share"] = summary["seeds_surviving"] / summary["n_seeds"]
    summary["super_survivor"] = summary["seeds_surviving"] == summary["n_seeds"]
    return summary


def _structured_choices(cfg: dict[str, Any]) -> dict[str, Any]:
    """The options that define the structured sub-networks, one column each in
    ``structured_subnetworks`` (the table says how it was made without the manifest)."""
    return {
        "normalise_per_layer": bool(cfg["structured_normalise_per_layer"]),
        "continue_phases": bool(cfg["structured_continue_phases"]),
        "bad_subnetwork": cfg["structured_bad"],
        "random_mask": cfg["structured_random"],
    }


def _finetune_config(cfg: dict[str, Any], seed: int, **fields: Any) -> FinetuneConfig:
    """The study's fine-tuning settings (model, task, corpus, examples, epochs, batch, length, device)
    as a :class:`~bertology.finetuning.FinetuneConfig` for ``seed``, with ``fields`` (mode, output
    folder, run name) on top; no progress bars inside a study."""
    from bertology.finetuning import FinetuneConfig

    keys = ("model", "task", "corpus", "max_examples", "epochs", "batch_size", "max_seq_len", "device")
    return FinetuneConfig(seed=seed, progress=False, **{k: cfg[k] for k in keys}, **fields)


def _study_finetune(ctx: StudyContext) -> Path:
    """The folder of the fine-tune this run compresses (table ``finetune_run``)."""
    made = Path(ctx.tables["finetune_run"]["run_dir"].iloc[0])
    return made if made.is_absolute() else ctx.run_dir / made


def _result(run_dir: Path) -> dict[str, Any]:
    result = json.loads((run_dir / "run.json").read_text())["result"]
    return {k: result[k] for k in ("test_accuracy", "test_low", "test_high", "dev_accuracy", "test_items")}


def _lottery(ctx: StudyContext) -> dict[str, pd.DataFrame]:
    """Magnitude lottery tickets of ``model`` on ``task`` (:func:`bertology.finetuning.lottery.magnitude_lottery`),
    every fine-tune under ``<run>/lottery/``."""
    from bertology.finetuning.lottery import magnitude_lottery, training_differences

    cfg = ctx.config
    config = _finetune_config(cfg, ctx.seed, mode="full")
    # the run this study compresses is round 0 when it was trained as the lottery's fine-tunes are
    made = _study_finetune(ctx)
    dense = made if not training_differences(config, made) else None
    runs, comparisons = magnitude_lottery(
        config,
        ctx.run_dir / "lottery",
        rounds=cfg["lottery_rounds"],
        prune_share=cfg["lottery_prune_share"],
        schedule=cfg["lottery_schedule"],
        scope=cfg["lottery_scope"],
        dense_run=dense,
        log=ctx.log,
    )
    return {"lottery_runs": runs, "lottery_comparison": comparisons}


def _quantized_probing(ctx: StudyContext, settings: list[Any]) -> pd.DataFrame:
    """A linear POS probe per layer of the pretrained encoder (``model``) under each setting, on the
    first ``probe_sentences`` sentences of ``corpus`` (gold UPOS in the bundled Brown sample)."""
    from bertology.corpus import load_corpus
    from bertology.models import load_model
    from bertology.probes.compression import quantized_probing

    cfg = ctx.config
    lm = load_model(cfg["model"], attentions=False)
    corpus = load_corpus(cfg["corpus"], limit=cfg["probe_sentences"])
    return quantized_probing(lm, corpus, settings=settings, task="pos", seed=ctx.seed, root=ctx.run_dir).assign(
        model=lm.name, corpus=corpus.name, upos=corpus.sources.get("upos", "unknown")
    )


def quant_settings(names: list[str]) -> list[Any]:
    """``QuantSetting`` per name of :data:`QUANT_SETTINGS`; float32 (the reference) is always first."""
    from bertology.probes.compression import QuantSetting

    unknown = [n for n in names if n not in QUANT_SETTINGS]
    if unknown:
        raise ConfigError(f"compression: quantization {unknown} unknown; choose from {', '.join(QUANT_SETTINGS)}")
    if not names:
        return []
    made = {
        "float32": QuantSetting("float32"),
        "int8-dynamic": QuantSetting("int8-dynamic"),
        "int8-dynamic-per-channel": QuantSetting("int8-dynamic", per_channel=True),
        **{f"simulated-{b}bit": QuantSetting("simulated", b) for b in (8, 4, 3, 2)},
    }
    return [made["float32"]] + [made[n] for n in dict.fromkeys(names) if n != "float32"]


def _finetune(ctx: StudyContext) -> pd.DataFrame:
    """``finetune_run``: the fine-tune this run compresses (made here, or the config's ``finetune_run``)."""
    from bertology.finetuning import run_finetuning
    from bertology.finetuning.finished import finished_run_directory

    cfg = ctx.config
    if cfg["finetune_run"]:
        run_dir = finished_run_directory(cfg["finetune_run"]).resolve()
        where = str(run_dir)
    else:
        ctx.log(f"  fine-tuning {cfg['model']} on {cfg['task']} ({cfg['mode']}, seed {ctx.seed})")
        run_dir = run_finetuning(
            _finetune_config(
                cfg,
                ctx.seed,
                mode=cfg["mode"],
                output_root=str(ctx.run_dir / "finetunes"),
                run_name=f"{cfg['mode']}-seed{ctx.seed}",
            )
        )
        where = str(run_dir.relative_to(ctx.run_dir))
    info = json.loads((run_dir / "run.json").read_text())
    result = info.get("result") or {}
    return pd.DataFrame(
        [
            {
                "run_dir": where,
                "task": info["config"]["task"],
                "mode": info["config"]["mode"],
                "seed": int(info["config"]["seed"]),
                "model": info["model"]["name"],
                **{
                    k: result.get(k)
                    for k in (
                        "best_step",
                        "dev_accuracy",
                        "test_accuracy",
                        "test_low",
                        "test_high",
                        "test_items",
                        "test_examples",
                    )
                },
            }
        ]
    )


def _fine_tuned_store(ctx: StudyContext, model_dir: Path) -> tuple[Any, Any]:
    """The fine-tuned encoder's feature store (attention maps) on ``limit`` sentences of ``corpus``:
    what its head types (the type order) are read from."""
    from bertology.corpus import load_corpus
    from bertology.models import load_model, resolve_device
    from bertology.store import extract

    cfg = ctx.config
    lm = load_model(model_dir, attentions=True, device=resolve_device(cfg["device"]))
    corpus = load_corpus(cfg["corpus"], limit=cfg["limit"])
    store = extract(lm, corpus, attentions=True, pooling=cfg["pooling"], verify=ctx.force)
    ctx.record(
        head_types_store={
            "model": str(model_dir),
            "fingerprint": lm.fingerprint,
            "store": str(store.path),
            "corpus": corpus.name,
            "sentences": len(corpus),
        }
    )
    return store, corpus
