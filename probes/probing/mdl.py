"""Minimum description length probing, online code (Voita & Titov 2020).

Examples are put in a random order and cut into blocks at fixed fractions of the data
(0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25, 50, 100 %). The first block is sent with the
uniform code (``t1 * log2 K`` bits); every later block costs ``sum -log2 p(y | x)`` under a probe
trained on all earlier blocks. Compression = uniform codelength / online codelength. All layers'
probes are trained jointly (one vectorised pass per block).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from bertology.probes.probing.edge import (
    ProbeConfig,
    SpanFeatures,
    fit_joint,
    label_matrix,
    mixing_spec,
    predict_logits,
    span_index,
)
from bertology.probes.probing.tasks import EdgeTask, TaskError
from bertology.progress import progress_bar

BLOCK_PERCENTS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.25, 12.5, 25.0, 50.0, 100.0)
MDL_COLUMNS = ["task", "mode", "probe", "control", "layer", "seed", "metric", "value"]


def block_boundaries(n: int, percents: Sequence[float] = BLOCK_PERCENTS) -> np.ndarray:
    """End index of each block ``[n_blocks]`` (strictly increasing, last = ``n``)."""
    ends = sorted({min(n, max(1, int(math.ceil(p / 100.0 * n)))) for p in percents} | {n})
    return np.array(ends, dtype=np.int64)


def _bits(logits: torch.Tensor, y: torch.Tensor, multilabel: bool) -> np.ndarray:
    """Codelength ``[P]`` in bits of labels ``y`` under logits ``[P, n, K]``."""
    if multilabel:
        nats = F.binary_cross_entropy_with_logits(
            logits, y.float().expand(logits.shape[0], -1, -1), reduction="none"
        ).sum((1, 2))
    else:
        logp = torch.log_softmax(logits, -1)
        nats = -logp.gather(-1, y.view(1, -1, 1).expand(logits.shape[0], -1, 1)).sum((1, 2))
    return (nats / math.log(2)).cpu().numpy()


def online_codelength(
    features: np.ndarray | torch.Tensor,
    sentence_offsets: np.ndarray,
    task: EdgeTask,
    *,
    mode: str = "per_layer",
    seeds: Sequence[int] = (0,),
    layer_ids: Sequence[int] | None = None,
    config: ProbeConfig = ProbeConfig(),
    percents: Sequence[float] = BLOCK_PERCENTS,
    dev_fraction: float = 0.1,
    control: bool = False,
) -> pd.DataFrame:
    """Online codelength of ``task`` given features ``[L, n_words, D]``, for every probe at once.

    Each block's probe early-stops on a held-out ``dev_fraction`` of the earlier blocks. Returns
    tidy rows (columns ``task, mode, probe, control, layer, seed, metric, value``) with metrics
    ``online_bits``, ``uniform_bits``, ``compression`` and ``block_bits_<end>`` (the cost of the
    block ending at example ``end``; the first block's cost is uniform).
    """
    L = features.shape[0]
    layer_ids = list(range(L)) if layer_ids is None else list(layer_ids)
    mixing, learned, probe_layer = mixing_spec(mode, L)
    tokens, mask = span_index(task, sentence_offsets)
    data = SpanFeatures(features, tokens, mask, config.standardize, config.device, config.cache_mb * 1e6)
    y = label_matrix(task)
    n, K = len(task), len(task.labels)
    if n < 20:
        raise TaskError(f"task {task.name!r}: online code needs at least 20 examples, got {n}")
    ends = block_boundaries(n, percents)
    unit_bits = K if task.multilabel else math.log2(K)  # bits per example, uniform code
    rows = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        order = rng.permutation(n)
        P = len(mixing)
        block_bits = [np.full(P, ends[0] * unit_bits)]
        blocks = list(zip(ends[:-1], ends[1:]))
        name = f"MDL {task.name}{' control' if control else ''} seed {seed}"
        for start, end in progress_bar(blocks, desc=name, unit="block"):
            prefix = order[:start]
            n_dev = max(1, int(round(dev_fraction * start))) if start >= 10 else 0
            shuffled = rng.permutation(prefix)
            dev, train = (shuffled[:n_dev], shuffled[n_dev:]) if n_dev else (prefix, prefix)
            fit = fit_joint(
                data,
                y,
                train,
                dev,
                n_labels=K,
                mixing=mixing,
                learned_mix=learned,
                config=config,
                seed=seed,
                multilabel=task.multilabel,
            )
            block = order[start:end]
            logits = predict_logits(fit.model, data, block)
            gold = torch.as_tensor(y[block], device=logits.device)
            block_bits.append(_bits(logits, gold, task.multilabel))
        costs = np.stack(block_bits)  # [n_blocks, P]
        online = costs.sum(0)
        uniform = n * unit_bits
        for p in range(P):
            layer = layer_ids[probe_layer[p]] if probe_layer[p] >= 0 else -1
            base = {
                "task": task.name,
                "mode": mode,
                "probe": config.probe,
                "control": control,
                "layer": layer,
                "seed": seed,
            }
            rows += [
                {**base, "metric": "online_bits", "value": float(online[p])},
                {**base, "metric": "uniform_bits", "value": float(uniform)},
                {**base, "metric": "compression", "value": float(uniform / online[p])},
            ]
            rows += [{**base, "metric": f"block_bits_{e}", "value": float(c)} for e, c in zip(ends, costs[:, p])]
    return pd.DataFrame(rows, columns=MDL_COLUMNS)


def mdl_layers(
    store_or_model,
    corpus,
    task: EdgeTask | str,
    *,
    layers="all",
    seeds: Sequence[int] = (0,),
    probe: str = "mlp",
    pooling: str = "attention",
    control: bool = False,
    control_key: str = "span1",
    **config,
) -> pd.DataFrame:
    """:func:`online_codelength` for every layer of a store (or a model extracted over ``corpus``).

    ``control=True`` adds the Hewitt & Liang control task's codelength (``control`` column), its
    word type given by ``control_key`` (see :func:`bertology.probes.probing.controls.control_keys`).
    """
    from bertology.probes.probing.controls import control_task
    from bertology.probes.probing.edge import layer_features
    from bertology.probes.probing.tasks import build_task, check_task_sentences

    if isinstance(task, str):
        task = build_task(corpus, task)
    check_task_sentences(task, corpus)  # a task file's sentences must be the store's, in order
    feats, offsets, layer_ids, _ = layer_features(store_or_model, corpus, layers)
    cfg = ProbeConfig(probe=probe, pooling=pooling, **config)
    frames = [online_codelength(feats, offsets, task, seeds=seeds, layer_ids=layer_ids, config=cfg)]
    if control:
        words = task.words or [list(s.words) for s in corpus.sentences]
        for seed in seeds:
            ctask = control_task(task, words, seed=seed, key=control_key)
            frames.append(
                online_codelength(feats, offsets, ctask, seeds=[seed], layer_ids=layer_ids, config=cfg, control=True)
            )
    out = pd.concat(frames, ignore_index=True)
    out["task"] = task.name
    return out
