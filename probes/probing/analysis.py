"""One entry point per probing analysis: edge probing (Tenney et al. 2019) and the BERT paper's
feature combinations (Devlin et al. 2019, Table 7).

Each analysis is a function of a :class:`bertology.runs.StudyContext` with its config schema
(``*_DEFAULTS``). The studies (``bertology.studies.edge_probing``, ``...feature_combinations``) are
these functions, and ``bertology probe`` runs the edge-probing study with the options given, so a
run has the one manifest schema of :func:`bertology.runs.run_analysis` whichever way it started.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from bertology.errors import ConfigError
from bertology.probes.probing.baselines import random_init_baseline
from bertology.probes.probing.combinations import COMBINATIONS, CombinedView
from bertology.probes.probing.controls import CONTROL_KEYS, control_keys
from bertology.probes.probing.edge import (
    SELECTED_ON,
    SENTENCE_COLUMNS,
    ProbeConfig,
    layer_differences,
    layer_intervals,
    probe_arrays,
    probe_layers,
    summarise,
)
from bertology.probes.probing.mdl import online_codelength
from bertology.probes.probing.tasks import EdgeTask, TaskError, build_task, read_jsonl, require_splittable
from bertology.runs import StudyContext, model_corpus_store
from bertology.uncertainty import is_small_sample

EDGE_PROBING_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 1500,
    "pooling": "first",  # word pooling of the feature store (first subword)
    # pos, xpos, deps, entities (built from `corpus`) or a jiant-style FILE.jsonl (probed on the
    # file's own sentences)
    "tasks": ["pos", "deps", "entities"],
    "modes": ["per_layer", "mix", "cumulative"],
    "seeds": [0, 1, 2],
    # the train/dev/test sentence split: "fixed" = one split drawn with the run's `seed`, shared by
    # every probe seed (the paper's fixed split; intervals add a bootstrap over test sentences to the
    # seed variation); "per_seed" = probe seed s draws its own split with seed s (intervals over seeds
    # then hold the variation of the split too)
    "split": "fixed",
    "probe": "mlp",
    "span_pooling": "attention",
    "max_epochs": 40,
    "batch_size": 512,  # probe minibatch; 128 reaches 512's accuracy in half the epochs
    "device": "cpu",  # where the model runs (the store is extracted there) and the probes train: cpu or cuda
    "control": True,
    # the word type a control label is fixed for (Hewitt & Liang 2019): "span1" = span 1's text
    # (the word; the dependent for deps), "pair" = (span 1, span 2) texts for two-span tasks
    "control_key": "span1",
    # E_Delta from the raw cumulative differentials (Tenney et al. 2019a); true = count negative
    # differentials as 0 (the workbench's earlier definition)
    "expected_layer_clip_negative": False,
    "mdl_tasks": ["pos", "deps", "entities"],  # those of `tasks` that also get MDL
    "random_baseline_tasks": ["pos", "deps", "entities"],  # ... and a random-encoder baseline
    "seed": 0,
}

FEATURE_COMBINATIONS_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 1500,
    "pooling": "first",
    "tasks": ["entities", "pos"],
    "seeds": [0, 1, 2],
    "split": "fixed",  # as edge_probing's `split`
    "probe": "mlp",
    "span_pooling": "attention",
    "max_epochs": 40,
    "batch_size": 512,
    "seed": 0,
}


def probe_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """:class:`ProbeConfig` keyword arguments a config may set (``max_epochs``, ``batch_size``,
    ``probe``, ``span_pooling``, ``device``)."""
    settings = {"max_epochs": cfg["max_epochs"], "probe": cfg["probe"], "pooling": cfg["span_pooling"]}
    if cfg.get("batch_size") is not None:
        settings["batch_size"] = int(cfg["batch_size"])
    if cfg.get("device") is not None:  # "auto" (and a missing GPU, as an error) resolved here
        from bertology.models import resolve_device

        settings["device"] = str(resolve_device(cfg["device"]))
    return settings


SPLITS = ("fixed", "per_seed")


def split_seed(cfg: dict[str, Any], run_seed: int) -> int | None:
    """The ``split_seed`` of :func:`bertology.probes.probing.edge.probe_arrays` for a config's
    ``split``: ``"fixed"`` -> the run's seed (one split for every probe seed), ``"per_seed"`` ->
    ``None`` (probe seed s draws its own split with seed s)."""
    split = cfg.get("split", "fixed")
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return int(run_seed) if split == "fixed" else None


def is_task_file(task: str) -> bool:
    """Whether a task name is a jiant-style JSONL file (which brings its own sentences)."""
    return str(task).endswith(".jsonl")


def corpus_for_task_file(task: EdgeTask) -> Any:
    """A word-only ``Corpus`` holding a JSONL task's own sentences (so the store can embed them)."""
    from bertology.corpus import Corpus, Sentence

    if task.words is None:
        raise TaskError(f"task {task.name!r} brings no sentences of its own (not a JSONL task file)")
    sentences = [Sentence(sent_id=f"{task.name}-{i}", words=list(w)) for i, w in enumerate(task.words)]
    return Corpus(task.name, sentences, {"words": task.source})


def _corpus_info(corpus: Any) -> dict[str, Any]:
    return {
        "name": corpus.name,
        "fingerprint": corpus.fingerprint,
        "sentences": len(corpus),
        "words": corpus.n_words,
        "sources": corpus.sources,
        "licence": corpus.licence,
    }


def task_inputs(ctx: StudyContext) -> tuple[Any, dict[str, tuple[EdgeTask, Any, Any]]]:
    """``(LoadedModel, {task: (EdgeTask, corpus, store)})`` for ``ctx.config['tasks']``.

    Named tasks are built from the config's corpus (loaded, like its store, by
    :func:`bertology.runs.model_corpus_store`); a ``.jsonl`` task is read from its file and probed on
    its own sentences. Model, corpus (the config's, or the first task file's when every task is a
    file) and each task's source and size are recorded in the run's provenance.
    """
    from bertology.store import extract

    cfg = ctx.config
    tasks = list(cfg["tasks"])
    if not tasks:
        raise ConfigError("tasks: give at least one task")
    lm = corpus = store = None
    if any(not is_task_file(t) for t in tasks):
        lm, corpus, store = model_corpus_store(ctx)
    built = {name: read_jsonl(name) if is_task_file(name) else build_task(corpus, name) for name in tasks}
    for task in built.values():  # every task big enough to split, before any task file's store is extracted
        require_splittable(task)
    inputs: dict[str, tuple[EdgeTask, Any, Any]] = {}
    file_corpora = {}
    for name, task in built.items():
        if is_task_file(name):
            if lm is None:
                from bertology.models import load_model

                lm = load_model(cfg["model"], attentions=True)
                ctx.record(model=lm.record())
            task_corpus = corpus_for_task_file(task)
            task_store = extract(lm, task_corpus, attentions=False, pooling=cfg.get("pooling", "first"))
            file_corpora[name] = _corpus_info(task_corpus) | {"store": str(task_store.path)}
            inputs[name] = (task, task_corpus, task_store)
        else:
            inputs[name] = (task, corpus, store)
    if file_corpora:
        ctx.record(task_corpora=file_corpora)
        if corpus is None:
            first = next(iter(file_corpora.values()))
            ctx.record(corpus={k: v for k, v in first.items() if k != "store"}, store=first["store"])
    ctx.record(
        tasks={
            name: {"name": t.name, "source": t.source, "examples": len(t), "labels": len(t.labels)}
            for name, (t, _, _) in inputs.items()
        }
    )
    return lm, inputs


def edge_probing_analysis(ctx: StudyContext) -> None:
    """Edge probing of every layer (Tenney 2019): per layer, scalar mix and cumulative probes of
    each task with Hewitt & Liang controls, Voita & Titov MDL and a random-encoder baseline.

    Tables: ``layer_scores`` (:func:`probe_layers` rows of every task and mode, dev, test and
    ``interval`` rows), ``layer_intervals`` (:func:`layer_intervals`: per task, mode, layer and
    metric the dev and test score with the test score's 95% interval, ``n_seeds``, ``n_test``,
    ``small_sample``), ``test_sentences`` (per-layer probes' per-sentence test sums,
    :data:`~bertology.probes.probing.edge.SENTENCE_COLUMNS`: what paired comparisons resample),
    ``layer_differences`` (:func:`layer_differences`: every layer minus the dev-chosen best layer on
    the same test sentences, with a paired interval and p-value), ``summary`` (:func:`summarise`: best layer chosen on dev, reported on test;
    E_Delta per ``expected_layer_clip_negative``), ``mix_weights``, ``controls``
    (if ``control``: per task, layer and control flag the mean test accuracy and selectivity over
    seeds, with the columns ``control_key``, ``control_key_types`` (distinct keys in the task) and
    ``control_key_seen_share`` (mean over seeds of the share of test examples whose key occurs in
    training)), ``mdl`` (if a task of ``mdl_tasks`` is probed), ``random_baseline`` (if a task of
    ``random_baseline_tasks`` is).
    """
    cfg = ctx.config
    seeds = [int(s) for s in cfg["seeds"]]
    if not seeds:
        raise ConfigError("seeds: give at least one seed")
    if cfg["control_key"] not in CONTROL_KEYS:
        raise ConfigError(f"control_key must be one of {', '.join(CONTROL_KEYS)}, got {cfg['control_key']!r}")
    splits = split_seed(cfg, ctx.seed)
    lm, inputs = task_inputs(ctx)
    settings = probe_settings(cfg)

    def scores() -> dict[str, pd.DataFrame]:
        frames, sentence_frames = [], []
        for task, corpus, store in inputs.values():
            for mode in cfg["modes"]:
                ctx.log(
                    f"    {task.name} / {mode}: {len(seeds)} seed(s) x every layer"
                    + (" + control task" if cfg["control"] and mode == "per_layer" else "")
                )
                scores_, sentences = probe_layers(
                    store,
                    corpus,
                    task,
                    mode=mode,
                    seeds=seeds,
                    split_seed=splits,
                    control=cfg["control"] and mode == "per_layer",
                    control_key=cfg["control_key"],
                    test_sentences=True,
                    **settings,
                )
                frames.append(scores_)
                if mode == "per_layer":
                    sentence_frames.append(sentences)
        return {
            "layer_scores": pd.concat(frames, ignore_index=True),
            "test_sentences": pd.concat(sentence_frames, ignore_index=True)
            if sentence_frames
            else pd.DataFrame(columns=SENTENCE_COLUMNS),
        }

    tables = ctx.steps(["layer_scores", "test_sentences"], scores)
    df = tables["layer_scores"]
    intervals = ctx.step("layer_intervals", lambda: layer_intervals(df[~df["control"].astype(bool)]))
    ctx.step("layer_differences", lambda: layer_differences(tables["test_sentences"], intervals))
    ctx.step("summary", lambda: summarise(df, clip_negative=cfg["expected_layer_clip_negative"]))
    ctx.step(
        "mix_weights",
        lambda: (
            df[df["metric"] == "mix_weight"]
            .rename(columns={"value": "weight"})[["task", "layer", "seed", "weight"]]
            .reset_index(drop=True)
        ),
    )
    if cfg["control"]:
        ctx.step("controls", lambda: controls_table(df, inputs, cfg["control_key"]))
    mdl_tasks = [t for t in cfg["mdl_tasks"] if t in inputs]
    if mdl_tasks:

        def mdl() -> pd.DataFrame:
            config = ProbeConfig(**settings)
            feats: dict[int, Any] = {}  # one read of each store's layers (tasks of one corpus share it)
            frames = []
            for t in mdl_tasks:
                task, _, store = inputs[t]
                ctx.log(f"    {task.name} / MDL online codelength (every layer)")
                if id(store) not in feats:
                    feats[id(store)] = store.view()
                frames.append(
                    online_codelength(feats[id(store)], store.sentence_offsets, task, seeds=seeds[:1], config=config)
                )
            out = pd.concat(frames, ignore_index=True)
            return out[out["metric"].isin(["online_bits", "uniform_bits", "compression"])].reset_index(drop=True)

        ctx.step("mdl", mdl)
    baseline_tasks = [t for t in cfg["random_baseline_tasks"] if t in inputs]
    if baseline_tasks:
        ctx.log(
            f"    random-init baseline: {', '.join(baseline_tasks)} (a fresh extraction of a randomly initialised copy)"
        )
        ctx.step(
            "random_baseline",
            lambda: pd.concat(
                [
                    random_init_baseline(
                        lm, inputs[t][1], inputs[t][0], seed=ctx.seed, seeds=seeds[:1], split_seed=splits, **settings
                    )
                    for t in baseline_tasks
                ],
                ignore_index=True,
            ),
        )


def controls_table(df: pd.DataFrame, inputs: dict[str, tuple[EdgeTask, Any, Any]], key: str) -> pd.DataFrame:
    """The ``controls`` table from ``layer_scores`` rows: mean over seeds of per-layer test accuracy
    (task and control) and test selectivity per ``(task, layer, control, metric)``, plus the columns
    ``control_key``, ``control_key_types`` and ``control_key_seen_share`` of each task, and
    ``n_test``, ``small_sample`` (the task's test examples, :func:`bertology.uncertainty.is_small_sample`)."""
    test = df[(df["split"] == "test") & (df["mode"] == "per_layer")]
    out = (
        test[test["metric"].isin(["selectivity", "accuracy"])]
        .groupby(["task", "layer", "control", "metric"], as_index=False)["value"]
        .mean()
    )
    n_test = (
        df[
            (df["split"] == "interval")
            & (df["metric"] == "n_test")
            & ~df["control"].astype(bool)
            & (df["mode"] == "per_layer")
        ]
        .groupby("task")["value"]
        .min()
    )
    seen = df[df["metric"] == "control_key_seen_share"].groupby("task")["value"].mean()
    types = {}
    for task, corpus, _ in inputs.values():
        words = task.words or [list(s.words) for s in corpus.sentences]
        types[task.name] = len(set(control_keys(task, words, key)))
    out["control_key"] = key
    out["control_key_types"] = out["task"].map(types).astype("Int64")
    out["control_key_seen_share"] = out["task"].map(seen).astype(float)
    out["n_test"] = out["task"].map(n_test).astype("Int64")
    out["small_sample"] = (
        out["n_test"].map(lambda n: pd.NA if pd.isna(n) else is_small_sample(int(n))).astype("boolean")
    )
    return out


def feature_combinations_analysis(ctx: StudyContext) -> None:
    """Which layers to use as features (Devlin 2019, Table 7): first layer, last hidden, sum of all,
    second-to-last, sum of the last four, concatenation of the last four, each scored with the same
    probe on the same task. Tables ``combinations`` (combination, description, task, seed, metric,
    value: test scores per seed) and ``combination_summary`` (:func:`combination_summary`: per task
    and combination the dev and test accuracy with the test score's 95% interval, and the best
    combination chosen on dev)."""
    cfg = ctx.config
    splits = split_seed(cfg, ctx.seed)
    _, corpus, store = model_corpus_store(ctx)
    tasks = {name: build_task(corpus, name) for name in cfg["tasks"]}
    for task in tasks.values():  # every task big enough to split, before any is probed
        require_splittable(task)

    def combos() -> dict[str, pd.DataFrame]:
        frames = []
        for name in COMBINATIONS:
            feats = CombinedView(store, name)  # [1, n_words, dim'], computed shard by shard when gathered
            for task in tasks.values():
                df = probe_arrays(
                    feats,
                    store.sentence_offsets,
                    task,
                    seeds=[int(s) for s in cfg["seeds"]],
                    split_seed=splits,
                    config=ProbeConfig(
                        probe=cfg["probe"],
                        pooling=cfg["span_pooling"],
                        max_epochs=cfg["max_epochs"],
                        batch_size=int(cfg["batch_size"]),
                    ),
                )
                frames.append(df.assign(combination=name, description=COMBINATIONS[name]))
        df = pd.concat(frames, ignore_index=True)
        test = df[(df["split"] == "test") & df["metric"].isin(["accuracy", "micro_f1", "macro_f1"])]
        return {
            "combinations": test[["combination", "description", "task", "seed", "metric", "value"]].reset_index(
                drop=True
            ),
            "combination_summary": combination_summary(df),
        }

    ctx.steps(["combinations", "combination_summary"], combos)


def combination_summary(df: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """Per task and combination (from :func:`probe_arrays` rows with ``combination`` and
    ``description`` columns): ``dev_score``, ``score`` (test) with ``low``/``high`` (95%),
    ``n_seeds``, ``n_test``, ``small_sample``, ``interval`` (:func:`layer_intervals`), and
    ``selected`` (True for the combination with the highest mean dev score of its task;
    ``selected_on = "dev"``)."""
    parts = []
    for (name, description), part in df.groupby(["combination", "description"], sort=False):
        table = layer_intervals(part, [metric]).drop(columns=["mode", "probe", "pooling", "control", "layer"])
        parts.append(table.assign(combination=name, description=description))
    out = pd.concat(parts, ignore_index=True)
    best = out.groupby("task")["dev_score"].idxmax()
    out["selected"] = out.index.isin(best.values)
    out["selected_on"] = SELECTED_ON
    first = ["task", "combination", "description", "selected", "selected_on"]
    return out[first + [c for c in out.columns if c not in first]]


__all__ = [
    "EDGE_PROBING_DEFAULTS",
    "FEATURE_COMBINATIONS_DEFAULTS",
    "edge_probing_analysis",
    "controls_table",
    "combination_summary",
    "split_seed",
    "SPLITS",
    "feature_combinations_analysis",
    "probe_settings",
    "corpus_for_task_file",
    "is_task_file",
    "task_inputs",
]
