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

from typing import Any

import numpy as np
import pandas as pd

from bertology.errors import ConfigError
from bertology.models import load_model
from bertology.probes.heads.attention_probe import attention_probe, best_heads
from bertology.probes.heads.head_types import (POSITIONAL_LEVELS, VOITA_RELATIONS, analyse_store, classify_heads,
                                               dependency_scores, type_matrix)
from bertology.probes.heads.importance import importance_scores
from bertology.probes.heads.pruning import (heads_dict, heads_pruned_at, measure_pruning, pos_task, pruning_curve,
                                            removable_shares, train_l0_gates)
from bertology.probes.heads.stats import SPECIAL_TOKENS, corpus_frequencies, head_statistics
from bertology.runs import StudyContext, model_corpus_store

__all__ = ["CURVE_METHODS", "HEAD_TYPES_DEFAULTS", "PRUNING_DEFAULTS", "PRUNING_METHODS", "head_types_analysis",
           "pruning_analysis"]

HEAD_TYPES_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 600,
    "pooling": "first",
    "frequencies": "corpus",        # corpus | wordfreq
    "positional_level": "token",    # token (Voita: argmax over sub-word tokens, specials in place) | word
    "positional_queries": "all",    # token level: all query tokens | words (special tokens' rows left out)
    "special_tokens": "keep",       # keep (Clark: rows over words + [CLS] + [SEP]) | drop (word rows renormalised)
    "exclude_self": True,           # syntactic argmax over the other words (Clark) | False: the word itself counts
    "syntactic_relations": list(VOITA_RELATIONS),   # Voita's nsubj, dobj, amod, advmod; [all] = every relation
    "positional_threshold": 0.9,
    "syntactic_margin": 0.10,
    "min_count": 20,
    "rare_threshold": 0.5,
    "special_threshold": 0.5,
    "broad_entropy": 0.8,
    "example_sentences": 4,
    "example_max_words": 14,
    "word_vectors": "en",           # spaCy vectors for the attention-and-words probe (Clark's GloVe); none = skip
    "seed": 0,
}

CURVE_METHODS = ("importance", "random", "type")
PRUNING_METHODS = CURVE_METHODS + ("l0",)

PRUNING_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",
    "limit": 300,
    "pooling": "first",
    "metric": "auto",       # auto: MLM loss if the weights carry an MLM head, else a POS head | mlm | pos
    "methods": ["importance", "random", "type", "l0"],   # pruning curves by these orders; l0 = L0 gates
    "step": 0.1,
    "max_share": 0.9,
    "random_seeds": 3,
    "l0_lambdas": [0.01, 0.1],
    "l0_steps": 150,
    "tolerances": [0.01, 0.05],   # relative worsening of the metric for the removable-share table
    "seed": 0,
}


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
    :func:`~bertology.probes.heads.head_types.classify_heads`), ``example_sentences`` /
    ``example_max_words`` (the attention maps kept for the dashboard), ``word_vectors`` (spaCy vectors
    for the attention-and-words probe, Clark's GloVe probe: ``en``, a language, a pipeline folder, or
    ``none`` to skip) and ``seed`` (the run's seed is used: the probe's train/test split).

    Tables:

    - ``head_stats``: ``layer, head, statistic, value, n`` (long: token- and word-level argmax
      offsets, entropy, confidence, attention to rare words and to special tokens;
      :func:`~bertology.probes.heads.stats.head_statistics`).
    - ``head_dependency``: ``layer, head, relation, direction, n, correct, accuracy, baseline_offset,
      baseline_accuracy, gain`` (direction ``dependent_attends_to_head`` or
      ``head_attends_to_dependent``; empty when the corpus has no dependencies).
    - ``head_types``: ``layer, head, type, types, positional_offset, positional_share, rare_share,
      special_share, entropy_norm, confidence, syntactic_relation, syntactic_direction,
      syntactic_accuracy, syntactic_baseline, syntactic_gain, is_positional, is_syntactic,
      is_rare_token, is_special, is_broad, positional_level, token_offset, token_share, word_offset,
      word_share, special_argmax_share``.
    - ``head_type_matrix``: ``layer`` and one column per head (``"0"``, ``"1"``...) holding its type.
    - ``head_best``: ``relation, direction, layer, head, n, accuracy, baseline_offset,
      baseline_accuracy, gain`` (the best head per relation and direction).
    - ``attention_probe``: ``method, layer, head, offset, n_train, n_test, uas, seed``.

    ``head_best`` and ``attention_probe`` need dependencies and are skipped without them. Extra
    ``attention_examples`` (JSON): a few short sentences with their words and attention maps.
    """
    cfg = ctx.config
    _check_head_type_options(cfg)
    _, corpus, store = model_corpus_store(ctx, attentions=True)
    sentences = list(corpus)
    n = len(corpus)
    has_deps = all(s.heads is not None and s.deprels is not None for s in sentences)
    freqs = corpus_frequencies(sentences) if cfg["frequencies"] == "corpus" else None

    stats = ctx.step("head_stats", lambda: head_statistics(
        (store.attention(i, normalise=False) for i in range(n)), sentences,
        special_attention=(store.special_attention(i) for i in range(n)), frequencies=freqs,
        token_offsets=(store.token_offsets(i, queries=cfg["positional_queries"]) for i in range(n)),
        special_tokens=cfg["special_tokens"]))
    deps = ctx.step("head_dependency", lambda: dependency_scores(
        (store.attention(i, normalise=False) for i in range(n)), sentences,
        exclude_self=cfg["exclude_self"]) if has_deps else pd.DataFrame())
    types = ctx.step("head_types", lambda: classify_heads(
        stats, deps if has_deps else None, positional_threshold=cfg["positional_threshold"],
        syntactic_margin=cfg["syntactic_margin"], min_count=cfg["min_count"], rare_threshold=cfg["rare_threshold"],
        special_threshold=cfg["special_threshold"], broad_entropy=cfg["broad_entropy"],
        relations=cfg["syntactic_relations"], positional_level=cfg["positional_level"]))
    ctx.step("head_type_matrix", lambda: type_matrix(types).reset_index())
    if has_deps:
        ctx.step("head_best", lambda: best_heads(deps, min_count=cfg["min_count"]))
        vectors = None
        if cfg["word_vectors"] != "none":
            from bertology.probes.embeddings.static_vectors import load_spacy_vectors

            vectors = load_spacy_vectors(cfg["word_vectors"])
            ctx.record(word_vectors=vectors.metadata)
        ctx.step("attention_probe", lambda: attention_probe(
            [store.attention(i) for i in range(len(corpus))], sentences, seed=ctx.seed, word_vectors=vectors))
    else:
        ctx.log(f"  corpus {corpus.name} has no dependencies: no head_best, no attention_probe")

    def examples() -> dict:
        short = [i for i, s in enumerate(sentences) if 6 <= len(s) <= cfg["example_max_words"]]
        chosen = short[: cfg["example_sentences"]]
        return {"sentences": [{"sent_id": sentences[i].sent_id, "words": sentences[i].words,
                               "attention": np.round(store.attention(i), 4).tolist()} for i in chosen]}

    ctx.extra("attention_examples", examples)


def _check_head_type_options(cfg: dict[str, Any]) -> None:
    """Refuse an unknown head-type definition before any work."""
    for key, allowed in (("positional_level", POSITIONAL_LEVELS), ("positional_queries", ("all", "words")),
                         ("special_tokens", SPECIAL_TOKENS)):
        if cfg[key] not in allowed:
            raise ConfigError(f"head_types: {key} must be one of {', '.join(allowed)}, not {cfg[key]!r}")
    if not cfg["syntactic_relations"]:
        raise ConfigError("head_types: syntactic_relations is empty; give relations or [all]")


def _check_methods(methods: Any, l0_lambdas: Any) -> list[str]:
    methods = list(methods or [])
    unknown = [m for m in methods if m not in PRUNING_METHODS]
    if unknown:
        raise ConfigError(f"pruning: unknown method(s) {', '.join(map(repr, unknown))}; "
                          f"choose from {', '.join(PRUNING_METHODS)}")
    if "l0" in methods and not l0_lambdas:
        raise ConfigError("pruning: method 'l0' needs at least one value in l0_lambdas")
    return methods


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
    step), ``max_share`` (where the curves stop), ``random_seeds`` (curves of method ``random``:
    seeds ``seed .. seed + random_seeds - 1``), ``l0_lambdas`` (one gate run per penalty λ),
    ``l0_steps`` (gate training steps) and ``seed`` (the run's seed is used).

    Tables:

    - ``importance``: ``layer, head, importance, importance_raw, method`` (gradient importance,
      normalised per layer; :func:`~bertology.probes.heads.importance.importance_scores`).
    - ``pruning_curves`` (curve methods only): ``method, seed, n_pruned, share_removed, value, pruned,
      metric`` (``value``: the metric with those heads gated off; ``metric``: its description).
    - ``pruning_cost`` (curve methods only; rows only with ``importance``): the heads of the
      importance curve at 30% and 50% really removed: ``share_removed, metric_value, heads_pruned,
      params_full, params_pruned, params_saved_share, seconds_full, seconds_pruned, time_saved_share``.
    - ``pruning_thresholds`` (curve methods only): ``method, seed, tolerance, removable_share,
      n_removable, base, value``: the share of heads removed before the metric first worsens by more
      than each relative tolerance (``tolerances``; for MLM: the held-out loss rising by 1%, 5%;
      :func:`~bertology.probes.heads.pruning.removable_shares`).
    - ``l0_gates`` (method ``l0``): ``layer, head, log_alpha, p_open, gate, kept, lam, seed`` per λ.

    ``metric``: ``auto`` (the MLM loss when the weights carry an MLM head: the model is loaded with
    it; else the POS head), ``mlm`` (refused without an MLM head) or ``pos``.
    """
    cfg = ctx.config
    methods = _check_methods(cfg["methods"], cfg["l0_lambdas"])
    if cfg["metric"] not in ("auto", "mlm", "pos"):
        raise ConfigError(f"pruning: metric must be auto, mlm or pos, not {cfg['metric']!r}")
    curve_methods = [m for m in methods if m in CURVE_METHODS]
    lm, corpus, store = model_corpus_store(ctx, attentions=True)
    if cfg["metric"] == "mlm" and not lm.has_mlm_head:
        raise ConfigError(f"pruning: metric mlm, but the weights of {lm.name} carry no MLM head")
    if lm.has_mlm_head and cfg["metric"] in ("auto", "mlm"):
        lm = load_model(cfg["model"], attentions=True, mlm_head=True)  # Michel's metric: the model's own loss
    # else lm is the base encoder: pos_task trains a POS head on it
    train, evals, loss_fn, metric_fn, description = pos_task(lm, corpus, seed=ctx.seed)
    ctx.record(pruning_metric=description)

    ctx.step("importance", lambda: importance_scores(lm.model, train, loss_fn, normalise=True))

    def curves() -> pd.DataFrame:
        frames = []
        head_types = analyse_store(store, corpus)["head_types"] if "type" in curve_methods else None
        for method in curve_methods:
            ctx.log(f"    pruning by {method}")
            seeds = [ctx.seed + k for k in range(cfg["random_seeds"])] if method == "random" else [ctx.seed]
            frames.append(pruning_curve(lm.model, metric_fn, method=method, batches=train, loss_fn=loss_fn,
                                        step=cfg["step"], seeds=seeds, head_types=head_types,
                                        max_share=cfg["max_share"]))
        out = pd.concat(frames, ignore_index=True).rename(columns={"share_pruned": "share_removed", "metric": "value"})
        out["metric"] = description
        return out

    if curve_methods:
        curve = ctx.step("pruning_curves", curves)

        def cost() -> pd.DataFrame:
            rows = []
            imp = curve[curve["method"] == "importance"]
            for share in (0.3, 0.5):
                if imp.empty:
                    break
                row, removed = heads_pruned_at(imp, share, share_column="share_removed")
                if removed:
                    report = measure_pruning(lm.model, heads_dict(removed), evals)
                    rows.append({"share_removed": float(row["share_removed"]), "metric_value": float(row["value"]),
                                 **{k: v for k, v in report.items() if not isinstance(v, (list, dict))}})
            return pd.DataFrame(rows)

        ctx.step("pruning_cost", cost)
        ctx.step("pruning_thresholds", lambda: removable_shares(
            curve, cfg["tolerances"], share_column="share_removed", value_column="value"))
    if "l0" in methods:
        ctx.step("l0_gates", lambda: pd.concat(
            [train_l0_gates(lm.model, train, loss_fn, float(lam), steps=cfg["l0_steps"], seed=ctx.seed)
             for lam in cfg["l0_lambdas"]], ignore_index=True))
