"""The study-level runners: probe every layer of a store (per layer, scalar mix, cumulative or
fixed mixing) over seeds, with controls, into one tidy DataFrame of scores.

:func:`probe_arrays` probes features ``[L, n_words, D]`` (one vectorised training pass per seed);
:func:`probe_layers` resolves a store (or a model, extracted on the spot) and adds the Hewitt &
Liang control task and selectivity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, overload

import numpy as np
import pandas as pd
import torch

from bertology.errors import ConfigError
from bertology.probes.probing._config import ProbeConfig
from bertology.probes.probing._model import mixing_spec
from bertology.probes.probing._scores import (
    INTERVAL_METRICS,
    classification_metrics,
    item_statistics,
    seed_and_sentence_interval,
    sentence_sums,
)
from bertology.probes.probing._spans import SpanFeatures, span_index
from bertology.probes.probing._training import JointFit, _loss, fit_joint, predict_logits
from bertology.probes.probing.tasks import EdgeTask, build_task, check_task_sentences, split_by_sentence
from bertology.store.read import LayerView

SCORE_COLUMNS = ["task", "mode", "probe", "pooling", "control", "layer", "seed", "split", "metric", "value"]
SENTENCE_COLUMNS = [
    "task",
    "mode",
    "probe",
    "pooling",
    "control",
    "layer",
    "seed",
    "sentence",
    "metric",
    "numerator",
    "denominator",
]
"""The per-sentence test sums ``probe_arrays(..., test_sentences=True)`` returns: per probe, seed, test
sentence and metric of :data:`INTERVAL_METRICS` the sentence's numerator and denominator (the score
over any set of sentences is ``sum(numerator) / sum(denominator)``), what paired comparisons of two
layers, or of two runs on the same sentences, resample."""


def label_matrix(task: EdgeTask) -> np.ndarray:
    """The task's targets: ``[n]`` label ids, or ``[n, K]`` 0/1 for a multi-label task."""
    return task.label_matrix() if task.multilabel else task.label_ids()


@overload
def probe_arrays(
    features: np.ndarray | torch.Tensor | LayerView,
    sentence_offsets: np.ndarray,
    task: EdgeTask,
    *,
    test_sentences: Literal[True],
    **options: Any,
) -> tuple[pd.DataFrame, pd.DataFrame]: ...


@overload
def probe_arrays(
    features: np.ndarray | torch.Tensor | LayerView,
    sentence_offsets: np.ndarray,
    task: EdgeTask,
    *,
    test_sentences: Literal[False] = False,
    **options: Any,
) -> pd.DataFrame: ...


def probe_arrays(  # type: ignore[misc]  # the overloads take **options for brevity; the keywords are these
    features: np.ndarray | torch.Tensor | LayerView,
    sentence_offsets: np.ndarray,
    task: EdgeTask,
    *,
    mode: str = "per_layer",
    seeds: Sequence[int] = (0, 1, 2),
    layer_ids: Sequence[int] | None = None,
    config: ProbeConfig = ProbeConfig(),
    split_seed: int | None = 0,
    fixed_weights: np.ndarray | None = None,
    control: bool = False,
    test_sentences: bool = False,
) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Probe features ``[L, n_words, D]`` for ``task``; one vectorised training pass per seed.

    ``layer_ids`` names the ``L`` layers (default ``0..L-1``). ``split_seed``: the seed of the one
    sentence split every probe seed shares (the paper's fixed split; the studies pass the run's
    seed), or ``None``: each probe seed ``s`` draws its own split with seed ``s``. Returns a tidy
    DataFrame with columns ``task, mode, probe, pooling, control, layer, seed, split, metric, value``
    where ``split`` is ``dev``/``test`` for scores (``accuracy``, ``micro_f1``, ``macro_f1``,
    ``loss``), ``param`` for ``mix_weight`` (per layer), ``gamma`` and ``epochs``/``seconds``
    (layer -1 = the mix), and ``interval`` (seed -1, one set per layer, over all seeds) for the 95%
    interval of the mean test score: ``accuracy_low``, ``accuracy_high``, ``micro_f1_low``,
    ``micro_f1_high`` (:func:`bertology.probes.probing._scores.seed_and_sentence_interval`; NaN with
    one seed), ``n_seeds``, ``n_test`` (test examples, the smallest over seeds) and ``shared_test``
    (1 when every seed had the same test sentences).
    ``test_sentences=True`` returns ``(scores, sentences)``, ``sentences`` with
    :data:`SENTENCE_COLUMNS` (the per-sentence test sums behind the intervals).
    """
    L = features.shape[0]
    layer_ids = list(range(L)) if layer_ids is None else list(layer_ids)
    if len(layer_ids) != L:
        raise ConfigError(f"layer_ids has {len(layer_ids)} entries for {L} feature layers")
    mixing, learned, probe_layer = mixing_spec(mode, L, fixed_weights)
    # the layer each probe's rows name (-1: a mix of several layers)
    probe_layer_ids = [layer_ids[p] if p >= 0 else -1 for p in probe_layer]
    tokens, mask = span_index(task, sentence_offsets)
    data = SpanFeatures(features, tokens, mask, config.standardize, config.device, config.cache_mb * 1e6)
    y = label_matrix(task)
    rows: list[dict[str, Any]] = []
    base = {"task": task.name, "mode": mode, "probe": config.probe, "pooling": config.pooling, "control": control}
    sentence_of = task.sentence_ids()
    test_sums: list[dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]] = []  # per seed
    n_test: list[int] = []
    test_scores: list[dict[str, np.ndarray]] = []  # per seed: metric -> [P]
    for seed in seeds:
        split = split_by_sentence(task, seed=seed if split_seed is None else split_seed)
        fit = fit_joint(
            data,
            y,
            split["train"],
            split["dev"],
            n_labels=len(task.labels),
            mixing=mixing,
            learned_mix=learned,
            config=config,
            seed=seed,
            multilabel=task.multilabel,
            progress=f"probe {task.name}{' control' if control else ''} {mode} seed {seed} ({L} layers)",
        )
        for part in ("dev", "test"):
            scores, items = _split_scores(fit, data, y, split[part], task.multilabel)
            for metric, values in scores.items():
                for layer, value in zip(probe_layer_ids, values):
                    rows.append(
                        {**base, "layer": layer, "seed": seed, "split": part, "metric": metric, "value": float(value)}
                    )
        test_scores.append(scores)
        test_sums.append(_sentence_sums(items, sentence_of[split["test"]]))
        n_test.append(len(split["test"]))
        rows.extend({**base, "seed": seed, "split": "param", **row} for row in _param_rows(fit, layer_ids, mode))
    rows.extend(
        {**base, "seed": -1, "split": "interval", **row}
        for row in _interval_rows(test_scores, test_sums, n_test, probe_layer_ids)
    )
    scores = pd.DataFrame(rows, columns=SCORE_COLUMNS)
    if not test_sentences:
        return scores
    return scores, _sentence_frame(base, seeds, test_sums, probe_layer_ids)


def _sentence_frame(
    base: dict[str, Any],
    seeds: Sequence[int],
    test_sums: list[dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]],
    probe_layer_ids: list[int],
) -> pd.DataFrame:
    """The :data:`SENTENCE_COLUMNS` table from each seed's per-sentence sums ``[P, G]``."""
    frames = []
    for seed, sums in zip(seeds, test_sums):
        for metric, (sentences, numerator, denominator) in sums.items():
            P, G = numerator.shape
            frames.append(
                pd.DataFrame(
                    {
                        "layer": np.repeat(probe_layer_ids, G),
                        "seed": int(seed),
                        "sentence": np.tile(sentences, P),
                        "metric": metric,
                        "numerator": numerator.ravel(),
                        "denominator": denominator.ravel(),
                    }
                )
            )
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    for key, value in base.items():
        out[key] = value
    return out.reindex(columns=SENTENCE_COLUMNS)


def _split_scores(
    fit: JointFit, data: SpanFeatures, y: np.ndarray, examples: np.ndarray, multilabel: bool
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """``accuracy``, ``micro_f1``, ``macro_f1`` and ``loss`` (each ``[P]``) of the fitted probes on
    ``examples``, and the per-example statistics of :func:`item_statistics` (``[P, n]`` each)."""
    logits = predict_logits(fit.model, data, examples)
    scores = classification_metrics(logits, y[examples], multilabel)
    gold = torch.as_tensor(y[examples], device=logits.device)
    scores["loss"] = _loss(logits, gold.float() if multilabel else gold, multilabel).cpu().numpy()
    return scores, item_statistics(logits, y[examples], multilabel)


def _sentence_sums(
    items: dict[str, tuple[np.ndarray, np.ndarray]],
    sentences: np.ndarray,
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per metric: (test sentences ``[G]``, numerator sums ``[P, G]``, denominator sums ``[P, G]``)."""
    out = {}
    for metric, (num, den) in items.items():
        ids, num_sums = sentence_sums(num, sentences)
        out[metric] = (ids, num_sums, sentence_sums(den, sentences)[1])
    return out


def _interval_rows(
    test_scores: list[dict[str, np.ndarray]],
    test_sums: list[dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]],
    n_test: list[int],
    probe_layer_ids: list[int],
) -> list[dict[str, Any]]:
    """The ``interval`` rows (``layer``, ``metric``, ``value``): per probe, the 95% interval of each
    of :data:`INTERVAL_METRICS` over the seeds' test scores and test sentences, and ``n_seeds``,
    ``n_test``, ``shared_test``."""
    shared = all(np.array_equal(s["accuracy"][0], test_sums[0]["accuracy"][0]) for s in test_sums)
    out = []
    for p, layer in enumerate(probe_layer_ids):
        for metric in INTERVAL_METRICS:
            seed_scores = [scores[metric][p] for scores in test_scores]
            sums = [(s[metric][0], s[metric][1][p], s[metric][2][p]) for s in test_sums]
            interval = seed_and_sentence_interval(seed_scores, sums, n_items=min(n_test) if shared else sum(n_test))
            out += [
                {"layer": layer, "metric": f"{metric}_low", "value": interval["low"]},
                {"layer": layer, "metric": f"{metric}_high", "value": interval["high"]},
            ]
        out += [
            {"layer": layer, "metric": "n_seeds", "value": float(len(test_sums))},
            {"layer": layer, "metric": "n_test", "value": float(min(n_test))},
            {"layer": layer, "metric": "shared_test", "value": float(shared)},
        ]
    return out


def _param_rows(fit: JointFit, layer_ids: list[int], mode: str) -> list[dict[str, Any]]:
    """The ``param`` rows of one fit (``layer``, ``metric``, ``value``): the scalar mix's weight per
    layer and gamma (mode ``mix``), then the epochs and seconds it took (layer -1)."""
    rows = []
    if mode == "mix":
        rows += [
            {"layer": layer_ids[l], "metric": "mix_weight", "value": float(w)} for l, w in enumerate(fit.mix_weights[0])
        ]
        rows.append({"layer": -1, "metric": "gamma", "value": float(fit.gamma[0])})
    rows.append({"layer": -1, "metric": "epochs", "value": float(fit.epochs)})
    rows.append({"layer": -1, "metric": "seconds", "value": float(fit.seconds)})
    return rows


def layer_features(store_or_model: Any, corpus: Any, layers: Any) -> tuple[Any, np.ndarray, list[int], dict]:
    """Resolve a FeatureStore (anything with ``layers``) or a LoadedModel (extracted with the store).

    Returns features ``[len(layer_ids), n_words, D]`` (a :class:`~bertology.store.read.LayerView` for a store with
    :meth:`~bertology.store.FeatureStore.shard_hidden`, read shard by shard by :class:`SpanFeatures`;
    otherwise the array ``store.layers(layer_ids)``), ``sentence_offsets [n_sentences + 1]``, the
    layer ids (``layers``: ``"all"``/None or a list of store layers) and ``{"store", "manifest"}``.
    """
    store = store_or_model
    if not hasattr(store, "layers"):
        from bertology.store import extract  # the store owns caching; import late

        store = extract(store_or_model, corpus, attentions=False, progress=True)
    n_layers = store.n_layers
    layer_ids = list(range(n_layers)) if layers in ("all", None) else [int(l) for l in layers]
    bad = [l for l in layer_ids if not 0 <= l < n_layers]
    if bad:
        raise ConfigError(f"layers {bad} outside 0..{n_layers - 1}")
    meta = {"store": str(getattr(store, "path", "")), "manifest": getattr(store, "manifest", {})}
    feats = store.view(layer_ids) if hasattr(store, "shard_hidden") else store.layers(layer_ids)
    return feats, np.asarray(store.sentence_offsets), layer_ids, meta


@overload
def probe_layers(
    store_or_model: Any, corpus: Any, task: EdgeTask | str, *, test_sentences: Literal[True], **config: Any
) -> tuple[pd.DataFrame, pd.DataFrame]: ...


@overload
def probe_layers(
    store_or_model: Any, corpus: Any, task: EdgeTask | str, *, test_sentences: Literal[False] = False, **config: Any
) -> pd.DataFrame: ...


def probe_layers(
    store_or_model: Any,
    corpus: Any,
    task: EdgeTask | str,
    *,
    layers: Any = "all",
    mode: str = "per_layer",
    seeds: Sequence[int] = (0, 1, 2),
    probe: str = "mlp",
    pooling: str = "attention",
    control: bool = False,
    control_key: str = "span1",
    split_seed: int | None = 0,
    fixed_weights: np.ndarray | None = None,
    test_sentences: bool = False,
    **config: Any,
) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Probe every requested layer of a store (or a model, extracted over ``corpus``).

    Defaults are the ``edge_probing`` study's: 3 probe seeds ``(0, 1, 2)``, the papers' MLP probe with
    attention pooling, per-layer probes (``bertology probe`` without ``--full`` runs 1 seed; it prints
    so). A progress bar per seed shows which seed and how many layers train
    (:mod:`bertology.progress`: ``bertology.set_progress(False)`` turns it off). A store's features
    are read shard by shard and never held whole (:class:`~bertology.store.read.LayerView`; above ``cache_mb`` the
    gathered examples are spilled to a temporary file).

    ``task``: an :class:`EdgeTask` or a name/JSONL path for :func:`bertology.probes.probing.tasks.build_task`.
    ``control=True`` also trains on the Hewitt & Liang control task (same seeds), its word type
    given by ``control_key`` (``"span1"``: span 1's text, the paper's word type; ``"pair"``: the
    (span 1, span 2) texts, see :mod:`bertology.probes.probing.controls`), and adds ``selectivity``
    rows (task accuracy - control accuracy) and, per seed, a ``control_key_seen_share`` row
    (``control`` True, layer -1, split ``param``: the share of test examples whose key occurs
    among the training examples). ``split_seed``: as :func:`probe_arrays` (one shared split drawn
    with it; ``None``: a split per probe seed). Extra keyword arguments go to :class:`ProbeConfig`. Returns the DataFrame of
    :func:`probe_arrays` (several modes can be concatenated and passed to :func:`summarise`);
    ``test_sentences=True``: ``(scores, sentences)`` as :func:`probe_arrays` (the task's probes only,
    not the control's).
    """
    if isinstance(task, str):
        task = build_task(corpus, task)
    check_task_sentences(task, corpus)  # a task file's sentences must be the store's, in order
    cfg = ProbeConfig(probe=probe, pooling=pooling, **config)
    feats, offsets, layer_ids, _ = layer_features(store_or_model, corpus, layers)
    df, sentences = probe_arrays(
        feats,
        offsets,
        task,
        mode=mode,
        seeds=seeds,
        layer_ids=layer_ids,
        config=cfg,
        split_seed=split_seed,
        fixed_weights=fixed_weights,
        test_sentences=True,
    )
    if not control:
        return (df, sentences) if test_sentences else df
    from bertology.probes.probing.controls import control_key_seen_share, control_task, selectivity

    words = task.words or [list(s.words) for s in corpus.sentences]
    frames = [df]
    seen = []
    for seed in seeds:
        ctask = control_task(task, words, seed=seed, key=control_key)
        frames.append(
            probe_arrays(
                feats,
                offsets,
                ctask,
                mode=mode,
                seeds=[seed],
                layer_ids=layer_ids,
                config=cfg,
                split_seed=split_seed,
                fixed_weights=fixed_weights,
                control=True,
            )
        )
        split = split_by_sentence(task, seed=seed if split_seed is None else split_seed)
        seen.append(
            {
                "task": task.name,
                "mode": mode,
                "probe": cfg.probe,
                "pooling": cfg.pooling,
                "control": True,
                "layer": -1,
                "seed": seed,
                "split": "param",
                "metric": "control_key_seen_share",
                "value": control_key_seen_share(task, words, split, key=control_key),
            }
        )
    out = pd.concat(frames, ignore_index=True)
    out["task"] = task.name  # control rows carry the task's name, flagged by `control`
    out = pd.concat([out, selectivity(out), pd.DataFrame(seen, columns=SCORE_COLUMNS)], ignore_index=True)
    return (out, sentences) if test_sentences else out
