"""The heads analyses as whole runs: one function per analysis, taking a
:class:`bertology.runs.StudyContext` (config, seed, run directory, resumable steps).

Both the studies (``bertology.studies.head_types`` / ``bertology.studies.pruning``) and the CLI
(``bertology heads`` / ``bertology prune``, through :func:`bertology.studies.run_study`) run these,
so a run has one manifest schema (:func:`bertology.runs.run_analysis`) whichever way it was started.

- :func:`head_types_analysis` (config :data:`HEAD_TYPES_DEFAULTS`): head statistics, dependency
  scores, head types and the attention-based dependency probe (Voita et al. 2019; Clark et al. 2019).
- :func:`pruning_analysis` (config :data:`PRUNING_DEFAULTS`): head importance, pruning curves, real
  removal and L0 gates (Michel et al. 2019; Voita et al. 2019).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from bertology.architectures import attention_windows
from bertology.errors import ConfigError, WorkbenchError
from bertology.models import load_model, model_device
from bertology.probes.heads.attention_probe import LazyAttentions, attention_probe
from bertology.probes.heads.classification import (
    POSITIONAL_LEVELS,
    VOITA_RELATIONS,
    analyse_store,
    classify_heads,
    dependency_scores,
    dependency_scores_in_reach,
    held_out_best_heads,
    type_matrix,
)
from bertology.probes.heads.gates import real_pruning_refusal
from bertology.probes.heads.importance import importance_scores
from bertology.probes.heads.pruning import (
    REFINE_MODES,
    PruningTask,
    compare_orders,
    evaluate_l0_gates,
    heads_dict,
    heads_pruned_at,
    measure_pruning,
    pruning_curve,
    pruning_task,
    removable_shares,
    train_l0_gates,
)
from bertology.probes.heads.stats import (
    SPECIAL_TOKENS,
    corpus_frequencies,
    corpus_reach,
    head_statistics,
    window_reach,
    with_attention_windows,
)
from bertology.runs import StudyContext, model_corpus_store, reads_inputs
from bertology.uncertainty import is_small_sample, t_interval

if TYPE_CHECKING:
    from bertology.corpus.types import Sentence
    from bertology.store import FeatureStore

__all__ = [
    "CURVE_METHODS",
    "HEAD_TYPES_DEFAULTS",
    "PRUNING_DEFAULTS",
    "PRUNING_METHODS",
    "head_types_analysis",
    "pruning_analysis",
    "prune_on_task",
    "threshold_summary",
]

HEAD_TYPES_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 600,
    "pooling": "first",
    "frequencies": "corpus",  # corpus | wordfreq
    "positional_level": "token",  # token (Voita: argmax over sub-word tokens, specials in place) | word
    "positional_queries": "all",  # token level: all query tokens | words (special tokens' rows left out)
    "special_tokens": "keep",  # keep (Clark: rows over words + [CLS] + [SEP]) | drop (word rows renormalised)
    "exclude_self": True,  # syntactic argmax over the other words (Clark) | False: the word itself counts
    "syntactic_relations": list(VOITA_RELATIONS),  # Voita's nsubj, dobj, amod, advmod; [all] = every relation
    "positional_threshold": 0.9,
    "syntactic_margin": 0.10,
    "min_count": 20,
    "best_head_dev_share": 0.5,  # head_best: the head and the offset baseline chosen on this share, reported on the rest
    "rare_threshold": 0.5,
    "special_threshold": 0.5,
    "broad_entropy": 0.8,
    "example_sentences": 4,
    "example_max_words": 14,
    "word_vectors": "en",  # spaCy vectors for the attention-and-words probe (Clark's GloVe); none = skip
    "device": "cpu",  # where the model runs (the store is extracted there): cpu, cuda, cuda:N or auto
    "seed": 0,
}

CURVE_METHODS = ("importance", "random", "type")
PRUNING_METHODS = CURVE_METHODS + ("l0",)

PRUNING_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 300,
    "pooling": "first",
    "metric": "auto",  # auto: MLM loss if the weights carry an MLM head, else a POS head | mlm | pos
    "methods": ["importance", "random", "type", "l0"],  # pruning curves by these orders; l0 = L0 gates
    "step": 0.1,
    "max_share": 1.0,  # curves run until every head is removed (below 1: thresholds may be "≥")
    "random_seeds": 3,
    "l0_lambdas": [0.01, 0.1],
    "l0_steps": 150,
    "tolerances": [0.01, 0.05],  # relative worsening of the metric for the removable-share table
    # thresholds to one head: none (the step grid only) | bracket (single heads between the last grid
    # point within each tolerance and the first beyond it) | all (every head count)
    "refine": "bracket",
    "test_share": 0.5,  # of the held-out sentences: test (reported); the rest: dev (thresholds chosen)
    "compare_shares": [0.3, 0.5],  # pruning orders compared pairwise at these shares, on test sentences
    "device": "cpu",  # where the model runs (extraction, importance, curves, gates): cpu, cuda, cuda:N or auto
    "seed": 0,
}


def head_types_inputs(config: dict[str, Any]) -> dict[str, Any]:
    """The spaCy vector package the attention-and-words probe reads (``word_vectors``), fingerprinted."""
    if config.get("word_vectors", "none") == "none":
        return {}
    from bertology.probes.embeddings.analysis import spacy_vectors_digest

    try:
        return {"word_vectors": spacy_vectors_digest(config["word_vectors"])}
    except (WorkbenchError, OSError) as exc:  # checked before any step runs, naming the field
        raise ConfigError(f"field 'word_vectors': {exc} (use none, en, fr or a spaCy pipeline folder)") from None


@reads_inputs(head_types_inputs)
def head_types_analysis(ctx: StudyContext) -> None:
    """Head statistics and types (Voita et al. 2019, "Analyzing Multi-Head Self-Attention"; Clark et
    al. 2019, "What Does BERT Look At?") and the attention-based dependency probe, on word-level
    attention of ``config.model`` over ``config.corpus``.

    Config (:data:`HEAD_TYPES_DEFAULTS`): ``model``, ``corpus``, ``limit`` (first N sentences, None =
    all), ``pooling`` (sub-word to word), ``frequencies`` (``corpus`` or ``wordfreq``: what "rare" is
    measured against), the definitions (defaults = the papers'): ``positional_level`` (``token``:
    Voita et al.'s argmax over sub-word tokens with the special tokens in place, from the store's
    token-level counts; ``word``: over words of Clark's word-level maps), ``positional_queries``
    (``all`` query tokens or ``words``: the special tokens' own rows left out), ``special_tokens``
    (``keep``: entropy, confidence, argmaxes and weights over words + [CLS] + [SEP], Clark et al.;
    ``drop``: word rows renormalised), ``exclude_self`` (syntactic argmax over the other words, as
    Clark et al.'s predictor), ``syntactic_relations`` (relations a syntactic head is judged on:
    Voita et al.'s nsubj, dobj, amod, advmod; ``[all]`` = every relation), the head-type thresholds
    ``positional_threshold``, ``syntactic_margin``, ``min_count``, ``rare_threshold``,
    ``special_threshold``, ``broad_entropy`` (see
    :func:`~bertology.probes.heads.classification.classify_heads`), ``example_sentences`` /
    ``example_max_words`` (the attention maps kept for the dashboard), ``word_vectors`` (spaCy vectors
    for the attention-and-words probe, Clark's GloVe probe: ``en``, a language, a pipeline folder, or
    ``none`` to skip), ``device`` (where the model runs and the store is extracted: ``cpu``,
    ``cuda``; the statistics are computed from the store on the CPU) and ``seed`` (the run's seed is
    used: the probe's train/test split).

    Tables:

    - ``head_stats``: ``layer, head, statistic, value, n, attention_window`` (long: token- and
      word-level argmax offsets, entropy, confidence, attention to rare words and to special tokens;
      :func:`~bertology.probes.heads.stats.head_statistics`; ``attention_window``: tokens each side
      a local layer's heads can see, ``<NA>`` for global attention, also in ``head_types`` and, per
      layer, in the manifest's ``attention_windows``; with local layers also ``entropy_norm_in_reach``
      and ``attn_{cls,sep,special}_in_reach``: the same measures over what each head can reach).
    - ``head_dependency``: ``layer, head, relation, direction, n, correct, accuracy, baseline_offset,
      baseline_accuracy, gain`` (direction ``dependent_attends_to_head`` or
      ``head_attends_to_dependent``; empty when the corpus has no dependencies).
    - ``head_types``: ``layer, head, type, types, positional_offset, positional_share, rare_share,
      special_share, entropy_norm, confidence, syntactic_relation, syntactic_direction,
      syntactic_accuracy, syntactic_baseline, syntactic_gain, is_positional, is_syntactic,
      is_rare_token, is_special, is_broad, positional_level, token_offset, token_share, word_offset,
      word_share, special_argmax_share, attention_window``.
    - ``head_type_matrix``: ``layer`` and one column per head (``"0"``, ``"1"``...) holding its type.
    - ``window_reach`` (only for models with local attention layers, ModernBERT): per local layer,
      the share of word pairs, gold dependency arcs and words within reach of its window and of the
      special tokens (:func:`~bertology.probes.heads.stats.window_reach`).
    - ``head_dependency_in_reach`` (local layers, with dependencies): each local head's
      dependent-to-head accuracy over every arc and over the arcs within its window
      (:func:`~bertology.probes.heads.classification.dependency_scores_in_reach`).
    - ``head_best``: the best head and the best fixed-offset baseline per relation and direction,
      both chosen on a dev half of the sentences (``best_head_dev_share``, split with the run's seed)
      and reported on the other half with intervals and a paired test of the gain
      (:func:`~bertology.probes.heads.classification.held_out_best_heads`: ``relation, direction, layer,
      head, selected_on, n_dev, dev_accuracy, baseline_offset, dev_baseline_accuracy, n,
      n_sentences, accuracy, accuracy_low, accuracy_high, baseline_accuracy, gain, gain_low,
      gain_high, gain_p_value, small_sample``).
    - ``attention_probe``: ``method, layer, head, offset, n_train, n_test, uas, uas_low, uas_high, seed``
      (the 95% interval of a bootstrap over the test sentences).

    ``head_best`` and ``attention_probe`` need dependencies and are skipped without them. Extra
    ``attention_examples`` (JSON): a few short sentences with their words and attention maps.
    """
    cfg = ctx.config
    _check_head_type_options(cfg)
    too_few: list[str] = []

    def check(c: Any) -> None:  # before any extraction: say what the corpus is too small for
        message = dependency_cases_problem(c, cfg)
        if message:
            ctx.log(f"  {message}")
            too_few.append(message)

    lm, corpus, store = model_corpus_store(ctx, attentions=True, check_corpus=check)
    windows = attention_windows(lm.config)  # local (sliding-window) layers: tokens seen each side
    ctx.record(attention_windows=windows)
    sentences = list(corpus)
    has_deps = all(s.heads is not None and s.deprels is not None for s in sentences)
    freqs = corpus_frequencies(sentences) if cfg["frequencies"] == "corpus" else None

    _head_type_tables(ctx, lm.tokenizer, store, sentences, windows, freqs, has_deps)
    if too_few:
        ctx.record(head_best_skipped=too_few[0])
    if has_deps:
        _dependency_probes(ctx, store, sentences, best_heads=not too_few)
    else:
        ctx.log(f"  corpus {corpus.name} has no dependencies: no head_best, no attention_probe")
    ctx.extra("attention_examples", lambda: _attention_examples(store, sentences, cfg))


def _head_type_tables(
    ctx: StudyContext,
    tokenizer: Any,
    store: FeatureStore,
    sentences: list[Sentence],
    windows: list[int | None],
    freqs: Any,
    has_deps: bool,
) -> None:
    """The steps ``head_stats``, ``head_dependency``, ``head_types`` and ``head_type_matrix``; with
    local attention layers also ``window_reach`` and (with dependencies) ``head_dependency_in_reach``."""
    cfg = ctx.config
    n = len(sentences)
    local = any(window is not None for window in windows)
    stats = ctx.step(
        "head_stats",
        lambda: with_attention_windows(
            head_statistics(
                (store.attention(i, normalise=False) for i in range(n)),
                sentences,
                special_attention=(store.special_attention(i) for i in range(n)),
                frequencies=freqs,
                token_offsets=(store.token_offsets(i, queries=cfg["positional_queries"]) for i in range(n)),
                special_tokens=cfg["special_tokens"],
                reach=corpus_reach(tokenizer, sentences, windows) if local else None,
            ),
            windows,
        ),
    )
    deps = ctx.step(
        "head_dependency",
        lambda: (
            dependency_scores(
                (store.attention(i, normalise=False) for i in range(n)), sentences, exclude_self=cfg["exclude_self"]
            )
            if has_deps
            else pd.DataFrame()
        ),
    )
    types = ctx.step(
        "head_types",
        lambda: with_attention_windows(
            classify_heads(
                stats.drop(columns="attention_window", errors="ignore"),
                deps if has_deps else None,
                positional_threshold=cfg["positional_threshold"],
                syntactic_margin=cfg["syntactic_margin"],
                min_count=cfg["min_count"],
                rare_threshold=cfg["rare_threshold"],
                special_threshold=cfg["special_threshold"],
                broad_entropy=cfg["broad_entropy"],
                relations=cfg["syntactic_relations"],
                positional_level=cfg["positional_level"],
            ),
            windows,
        ),
    )
    ctx.step("head_type_matrix", lambda: type_matrix(types).reset_index())
    if local:  # local layers: what their heads can reach at all
        ctx.step("window_reach", lambda: window_reach(tokenizer, sentences, windows))
        if has_deps:  # and how well they do on the arcs they can see
            ctx.step(
                "head_dependency_in_reach",
                lambda: dependency_scores_in_reach(
                    (store.attention(i, normalise=False) for i in range(n)),
                    sentences,
                    tokenizer,
                    windows,
                    exclude_self=cfg["exclude_self"],
                ),
            )


def _dependency_probes(ctx: StudyContext, store: FeatureStore, sentences: list[Sentence], *, best_heads: bool) -> None:
    """The steps that need dependencies: ``head_best`` (when ``best_heads``: the corpus has enough
    cases) and ``attention_probe`` (with the spaCy ``word_vectors`` unless ``none``)."""
    cfg = ctx.config
    n = len(sentences)
    if best_heads:
        ctx.step(
            "head_best",
            lambda: held_out_best_heads(
                (store.attention(i, normalise=False) for i in range(n)),
                sentences,
                dev_share=cfg["best_head_dev_share"],
                seed=ctx.seed,
                min_count=cfg["min_count"],
                exclude_self=cfg["exclude_self"],
            ),
        )
    vectors = None
    if cfg["word_vectors"] != "none":
        from bertology.probes.embeddings.static_vectors import load_spacy_vectors

        vectors = load_spacy_vectors(cfg["word_vectors"])
        ctx.record(word_vectors=vectors.metadata)
    ctx.step(
        "attention_probe",
        lambda: attention_probe(  # maps read from the store when used, designs spilled beside it
            LazyAttentions(store.attention, range(n)),
            sentences,
            seed=ctx.seed,
            word_vectors=vectors,
            spill_dir=store.path.parent,
        ),
    )


def _attention_examples(store: FeatureStore, sentences: list[Sentence], cfg: dict[str, Any]) -> dict:
    """The ``attention_examples`` extra: the first ``example_sentences`` sentences of 6 to
    ``example_max_words`` words, each with its words and attention maps ``[layers, heads, words, words]``."""
    short = [i for i, s in enumerate(sentences) if 6 <= len(s) <= cfg["example_max_words"]]
    chosen = short[: cfg["example_sentences"]]
    return {
        "sentences": [
            {
                "sent_id": sentences[i].sent_id,
                "words": sentences[i].words,
                "attention": np.round(store.attention(i), 4).tolist(),
            }
            for i in chosen
        ]
    }


def _check_head_type_options(cfg: dict[str, Any]) -> None:
    """Refuse an unknown head-type definition before any work."""
    for key, allowed in (
        ("positional_level", POSITIONAL_LEVELS),
        ("positional_queries", ("all", "words")),
        ("special_tokens", SPECIAL_TOKENS),
    ):
        if cfg[key] not in allowed:
            raise ConfigError(f"head_types: {key} must be one of {', '.join(allowed)}, not {cfg[key]!r}")
    if not cfg["syntactic_relations"]:
        raise ConfigError("head_types: syntactic_relations is empty; give relations or [all]")


def dependency_cases_problem(corpus: Any, cfg: dict[str, Any]) -> str | None:
    """Why a corpus with dependencies is too small for the best-head table, or None: held_out_best_heads
    chooses a head per relation on the dev share of the sentences only where the relation has
    ``min_count`` dev cases, so the most frequent relation needs about ``min_count /
    best_head_dev_share`` arcs. The message names the count and the options; the head_types
    analysis says it before any extraction and leaves ``head_best`` out (the other tables are made)."""
    from collections import Counter

    sentences = list(corpus)
    if not sentences or not all(s.heads is not None and s.deprels is not None for s in sentences):
        return None  # no dependencies: no best-head table, nothing to check
    counts = Counter(rel for s in sentences for h, rel in zip(s.heads, s.deprels) if h != 0)
    need = int(np.ceil(cfg["min_count"] / cfg["best_head_dev_share"]))
    relation, most = counts.most_common(1)[0] if counts else ("none", 0)
    if most < need:
        return (
            f"head_best left out: corpus {corpus.name!r} ({len(sentences)} sentences) has at most {most} arcs "
            f"of one relation ({relation}); choosing the best head per relation on the dev share "
            f"(best_head_dev_share={cfg['best_head_dev_share']}) needs about {need} (min_count={cfg['min_count']} "
            "dev cases): use more sentences (--limit, a larger corpus) or lower min_count "
            "(bertology heads --min-count N, or min_count in the study config)"
        )
    return None


def _check_methods(methods: Any, l0_lambdas: Any) -> list[str]:
    methods = list(methods or [])
    unknown = [m for m in methods if m not in PRUNING_METHODS]
    if unknown:
        raise ConfigError(
            f"pruning: unknown method(s) {', '.join(map(repr, unknown))}; choose from {', '.join(PRUNING_METHODS)}"
        )
    if "l0" in methods and not l0_lambdas:
        raise ConfigError("pruning: method 'l0' needs at least one value in l0_lambdas")
    return methods


def _check_pruning_options(cfg: dict[str, Any]) -> None:
    """Refuse an unknown refinement, split or comparison share before any work."""
    if cfg["metric"] not in ("auto", "mlm", "pos"):
        raise ConfigError(f"pruning: metric must be auto, mlm or pos, not {cfg['metric']!r}")
    if cfg["refine"] not in REFINE_MODES:
        raise ConfigError(f"pruning: refine must be one of {', '.join(REFINE_MODES)}, not {cfg['refine']!r}")
    if not 0 < float(cfg["test_share"]) < 1:
        raise ConfigError(f"pruning: test_share must be between 0 and 1 (exclusive), not {cfg['test_share']!r}")
    bad = [x for x in cfg["compare_shares"] or [] if not 0 <= float(x) <= 1]
    if bad:
        raise ConfigError(f"pruning: compare_shares must lie in [0, 1], got {bad}")


def pruning_analysis(ctx: StudyContext) -> None:
    """Head importance and pruning curves (Michel et al. 2019, "Are Sixteen Heads Really Better than
    One?") with real head removal, and Hard Concrete L0 head gates (Voita et al. 2019, "Analyzing
    Multi-Head Self-Attention"; Louizos et al. 2018).

    The metric is the MLM loss for models with an MLM head, otherwise a POS tagging head trained on
    the frozen encoder (:func:`~bertology.probes.heads.pruning.pos_task`; the shipped MiniLM has no
    MLM head); recorded as ``pruning_metric`` in the manifest.

    Config (:data:`PRUNING_DEFAULTS`): ``model``, ``corpus``, ``limit``, ``pooling``; ``methods``:
    any of ``importance`` (re-scored after each step), ``random``, ``type`` (unspecialised head types
    first) for pruning curves, and ``l0`` for L0 gates; ``step`` (share of all heads removed per
    step), ``max_share`` (where the curves stop; 1 = every head removed), ``refine`` (``bracket``:
    single heads between the last grid point within each tolerance and the first beyond it; ``all``;
    ``none``), ``test_share`` (held-out sentences: this share is test, the rest dev), ``random_seeds``
    (curves of method ``random``: seeds ``seed .. seed + random_seeds - 1``), ``compare_shares``
    (shares at which every pair of orders is compared), ``l0_lambdas`` (one gate run per penalty λ;
    none is chosen), ``l0_steps`` (gate training steps), ``device`` (where the model runs: the
    extraction, importance, curves, real removal timing and L0 gates; ``cpu`` or ``cuda``) and
    ``seed`` (the run's seed: the sentence split, the task head, random orders).

    Sentences: ``1 - 0.3`` train (importance, the POS head, L0 gates), the held-out 30% split by
    sentence into dev (thresholds are selected on it) and test (every reported value).

    Tables:

    - ``importance``: ``layer, head, importance, importance_raw, method`` (gradient importance,
      normalised per layer; :func:`~bertology.probes.heads.importance.importance_scores`).
    - ``pruning_curves`` (curve methods only): ``method, seed, n_pruned, share_removed, value, pruned,
      metric, value_dev, split, refined, n_heads`` (``value``: the metric on test with those heads
      gated off; ``value_dev``: on dev; ``split``: ``test``, the split of ``value``; ``metric``: its
      description; ``refined``: a single-head point added near a threshold, off the ``step`` grid).
    - ``pruning_cost`` (curve methods only; rows only with ``importance``): the heads of the
      importance curve at 30% and 50% really removed: ``share_removed, metric_value, heads_pruned,
      params_full, params_pruned, params_saved_share, seconds_full, seconds_pruned, time_saved_share``
      with its interval over timing rounds (``time_saved_share_low, _high``, ``timing_rounds``;
      :func:`~bertology.probes.heads.pruning.measure_pruning`: a warm-up round, then full and
      pruned model in turns).
    - ``pruning_thresholds`` (curve methods only): ``method, seed, tolerance, removable_share,
      n_removable, base, value, next_n_pruned, resolution_heads, threshold_is_lower_bound, base_test,
      value_test, drop_test, selected_on, reported_on, n_dev_items, n_test_items, small_sample``: the
      share of heads removed before the dev metric first worsens by more than each relative
      tolerance (``tolerances``; for MLM: the held-out loss rising by 1%, 5%; ``base``/``value`` on
      dev, ``*_test`` the same heads on test; :func:`~bertology.probes.heads.pruning.removable_shares`).
    - ``pruning_order_comparison`` (two or more curve methods, ``compare_shares``): every pair of
      orders at each share, paired bootstrap over test sentences
      (:func:`~bertology.probes.heads.pruning.compare_orders`).
    - ``l0_gates`` (method ``l0``): ``layer, head, log_alpha, p_open, gate, kept, lam, seed`` per λ.
    - ``l0_evaluation`` (method ``l0``): per λ the heads its gates keep and the metric with the others
      off, on dev and on test with a 95% interval; no λ is selected
      (:func:`~bertology.probes.heads.pruning.evaluate_l0_gates`).

    ``metric``: ``auto`` (the MLM loss when the weights carry an MLM head: the model is loaded with
    it; else the POS head), ``mlm`` (refused without an MLM head) or ``pos``.
    """
    cfg = ctx.config
    methods = _check_methods(cfg["methods"], cfg["l0_lambdas"])
    _check_pruning_options(cfg)
    lm, corpus, store = model_corpus_store(ctx, attentions=True)
    if cfg["metric"] == "mlm" and not lm.has_mlm_head:
        raise ConfigError(f"pruning: metric mlm, but the weights of {lm.name} carry no MLM head")
    if lm.has_mlm_head and cfg["metric"] in ("auto", "mlm"):  # Michel's metric: the model's own loss
        lm = load_model(cfg["model"], attentions=True, mlm_head=True, device=model_device(lm.model))
    # else lm is the base encoder: pruning_task trains a POS head on it
    task = pruning_task(lm, corpus, test_share=cfg["test_share"], seed=ctx.seed)
    prune_on_task(ctx, lm.model, task, methods, store=store, corpus=corpus)


def prune_on_task(
    ctx: StudyContext, model: Any, task: PruningTask, methods: list[str], *, store: Any = None, corpus: Any = None
) -> None:
    """Every table of :func:`pruning_analysis` for ``model`` on ``task`` (importance on ``task.train``,
    thresholds chosen on dev, reported on test), plus ``pruning_threshold_summary``: per order and
    tolerance the removable share with a t-interval over the random orders' seeds (one deterministic
    order -- importance, type -- has no interval: its spread is the split's, see the paired comparison).
    The ``type`` order needs ``store`` and ``corpus`` (head types of the same model). Reads
    ``step, max_share, refine, tolerances, random_seeds, compare_shares, l0_lambdas, l0_steps`` from
    ``ctx.config``."""
    cfg = ctx.config
    if "type" in methods and (store is None or corpus is None):
        raise WorkbenchError("prune_on_task: the type order needs the model's feature store and its corpus")
    curve_methods = [m for m in methods if m in CURVE_METHODS]
    train, loss_fn, description = task.train, task.loss_fn, task.description
    ctx.record(
        pruning_metric=description,
        pruning_split={
            "sentences": task.n_sentences,
            "items": task.n_items,
            "selected_on": "dev",
            "reported_on": "test",
        },
    )

    ctx.step("importance", lambda: importance_scores(model, train, loss_fn, normalise=True))
    if curve_methods:
        curve = ctx.step("pruning_curves", lambda: _pruning_curves(ctx, model, corpus, store, task, curve_methods))
        _pruning_cost(ctx, model, curve, task)
        thresholds = ctx.step("pruning_thresholds", lambda: _thresholds_table(curve, cfg["tolerances"], task))
        ctx.step("pruning_threshold_summary", lambda: threshold_summary(thresholds))
        if cfg["compare_shares"] and len(curve_methods) > 1:
            ctx.step(
                "pruning_order_comparison",
                lambda: compare_orders(
                    model,
                    curve,
                    task.sentence_scores,
                    task.test,
                    cfg["compare_shares"],
                    seed=ctx.seed,
                    share_column="share_removed",
                ).assign(metric=description),
            )
    if "l0" in methods:
        gates = ctx.step(
            "l0_gates",
            lambda: pd.concat(
                [
                    train_l0_gates(model, train, loss_fn, float(lam), steps=cfg["l0_steps"], seed=ctx.seed)
                    for lam in cfg["l0_lambdas"]
                ],
                ignore_index=True,
            ),
        )
        ctx.step("l0_evaluation", lambda: evaluate_l0_gates(model, gates, task, seed=ctx.seed))


def threshold_summary(thresholds: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """``method, tolerance, removable_share, low, high, n_orders, interval, drop_test, small_sample``:
    the mean removable share (chosen on dev) per pruning order and tolerance over its orders (random:
    one per seed) with a Student-t interval; one order gives NaN bounds (no interval from one order)
    and ``interval`` says so. ``drop_test``: the mean relative drop on test at the chosen shares."""
    rows = []
    for (method, tolerance), group in thresholds.groupby(["method", "tolerance"], sort=False):
        iv = t_interval(group["removable_share"].to_numpy(float), confidence)
        rows.append(
            {
                "method": method,
                "tolerance": float(tolerance),
                "removable_share": iv.estimate,
                "low": iv.low,
                "high": iv.high,
                "n_orders": iv.n,
                "interval": (
                    f"t over {iv.n} orders ({confidence:.0%})"
                    if iv.n > 1
                    else "one order: no interval (compare orders in pruning_order_comparison)"
                ),
                "drop_test": float(group["drop_test"].mean()),
                "small_sample": bool(group["small_sample"].any()),
            }
        )
    return pd.DataFrame(rows)


def _pruning_curves(ctx: StudyContext, model, corpus, store, task, curve_methods: list[str]) -> pd.DataFrame:
    """Every curve of the run: selection metric on dev (``value_dev``), reported on test (``value``)."""
    cfg = ctx.config
    frames = []
    head_types = analyse_store(store, corpus)["head_types"] if "type" in curve_methods else None
    for method in curve_methods:
        ctx.log(f"    pruning by {method}")
        seeds = [ctx.seed + k for k in range(cfg["random_seeds"])] if method == "random" else [ctx.seed]
        frames.append(
            pruning_curve(
                model,
                task.metric("dev"),
                method=method,
                batches=task.train,
                loss_fn=task.loss_fn,
                step=cfg["step"],
                seeds=seeds,
                head_types=head_types,
                max_share=cfg["max_share"],
                refine=cfg["refine"],
                tolerances=cfg["tolerances"],
                report_metrics={"test": task.metric("test")},
            )
        )
    out = pd.concat(frames, ignore_index=True).rename(
        columns={"share_pruned": "share_removed", "metric": "value_dev", "metric_test": "value"}
    )
    out["metric"] = task.description
    out["split"] = "test"  # the split of ``value``; ``value_dev`` is what thresholds are chosen on
    return out[
        [
            "method",
            "seed",
            "n_pruned",
            "share_removed",
            "value",
            "pruned",
            "metric",
            "value_dev",
            "split",
            "refined",
            "n_heads",
        ]
    ]


def _pruning_cost(ctx: StudyContext, model, curve: pd.DataFrame, task) -> None:
    """The heads of the importance curve at 30% and 50% really removed (parameters, forward time);
    skipped, with the reason logged and recorded, where real pruning is refused (ALBERT's shared
    layers, grouped-query attention)."""
    refusal = real_pruning_refusal(model)
    if refusal:
        ctx.log(f"  no pruning_cost: {refusal}")
        ctx.record(pruning_cost_skipped=refusal)
        return

    def cost() -> pd.DataFrame:
        rows = []
        imp = curve[(curve["method"] == "importance") & ~curve["refined"]]
        for share in (0.3, 0.5):
            if imp.empty:
                break
            row, removed = heads_pruned_at(imp, share, share_column="share_removed")
            if removed:
                report = measure_pruning(model, heads_dict(removed), task.dev + task.test)
                rows.append(
                    {
                        "share_removed": float(row["share_removed"]),
                        "metric_value": float(row["value"]),
                        **{k: v for k, v in report.items() if not isinstance(v, (list, dict))},
                    }
                )
        return pd.DataFrame(rows)

    ctx.step("pruning_cost", cost)


def _thresholds_table(curve: pd.DataFrame, tolerances, task) -> pd.DataFrame:
    """:func:`removable_shares` chosen on dev, read on test, with the split sizes and a small-sample flag."""
    out = removable_shares(
        curve, tolerances, share_column="share_removed", value_column="value_dev", report_column="value"
    )
    out = out.rename(columns={"base_report": "base_test", "value_report": "value_test", "drop_report": "drop_test"})
    n_test = int(task.n_items.get("test", 0))
    return out.assign(
        selected_on="dev",
        reported_on="test",
        n_dev_items=int(task.n_items.get("dev", 0)),
        n_test_items=n_test,
        small_sample=is_small_sample(n_test),
    )
