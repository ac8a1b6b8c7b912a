"""From logits to scores to a Tenney-style table: per-probe classification metrics, the expected
layer of a scalar mix (``E_s[l]``) and of cumulative scores (``E_Delta[l]``), intervals over seeds
and the one-row-per-task summary."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F


def classification_metrics(logits: torch.Tensor, y: np.ndarray, multilabel: bool) -> dict[str, np.ndarray]:
    """Per-probe ``accuracy``, ``micro_f1``, ``macro_f1`` (each ``[P]``) from logits ``[P, n, K]``.

    Single label: micro-F1 over all labels equals accuracy. Multi-label: accuracy is exact match,
    F1 counts label decisions (sigmoid > 0.5).
    """
    logits = logits.cpu()
    P, n, K = logits.shape
    if multilabel:
        pred = (logits > 0).numpy()
        gold = np.broadcast_to(np.asarray(y, dtype=bool), pred.shape)
    else:
        pred = F.one_hot(logits.argmax(-1), K).bool().numpy()
        gold = np.broadcast_to(np.eye(K, dtype=bool)[np.asarray(y)], pred.shape)
    tp = (pred & gold).sum(1).astype(float)          # [P, K]
    fp = (pred & ~gold).sum(1).astype(float)
    fn = (~pred & gold).sum(1).astype(float)
    micro = 2 * tp.sum(1) / np.maximum(2 * tp.sum(1) + fp.sum(1) + fn.sum(1), 1)
    present = gold[0].any(0) | pred.any(1)           # labels seen in gold or predicted  [P, K]
    f1 = 2 * tp / np.maximum(2 * tp + fp + fn, 1)
    macro = (f1 * present).sum(1) / np.maximum(present.sum(1), 1)
    accuracy = (pred == gold).all(-1).mean(1)
    return {"accuracy": accuracy, "micro_f1": micro, "macro_f1": macro}


def expected_layer(weights: Sequence[float], layers: Sequence[int] | None = None) -> float:
    """Centre of gravity ``E_s[l] = sum_l l * s_l / sum_l s_l`` of mix weights ``[L]``."""
    w = np.asarray(weights, dtype=float)
    l = np.arange(len(w)) if layers is None else np.asarray(layers, dtype=float)
    return float((l * w).sum() / w.sum())


def cumulative_deltas(scores: Sequence[float]) -> np.ndarray:
    """Differential scores ``Delta(l) = score(P(l)) - score(P(l-1))`` for ``l = 1..L-1`` ``[L-1]``."""
    s = np.asarray(scores, dtype=float)
    return s[1:] - s[:-1]


def cumulative_expected_layer(scores: Sequence[float], layers: Sequence[int] | None = None,
                              clip_negative: bool = False) -> float:
    """``E_Delta[l] = sum_l l * Delta(l) / sum_l Delta(l)`` from cumulative scores ``[L]`` (l >= 1).

    Tenney et al. (2019a): the raw differentials ``Delta(l) = score(l) - score(l-1)``, negative
    ones included (the default). ``sum_l Delta(l)`` telescopes to ``score(L-1) - score(0)``; when
    it is ``<= 0`` (no net gain over layer 0) the expected layer is undefined and NaN is returned.
    With negative differentials the value may fall outside ``[1, L-1]``.

    ``clip_negative=True`` (the workbench's earlier definition): negative differentials count as 0,
    so the expected layer stays inside the layer range; NaN when no layer adds anything.
    """
    delta = cumulative_deltas(scores)
    if clip_negative:
        delta = np.clip(delta, 0, None)
    l = np.arange(1, len(delta) + 1) if layers is None else np.asarray(layers, dtype=float)[1:]
    total = delta.sum()
    return float((l * delta).sum() / total) if total > 0 else float("nan")


def confidence_intervals(df: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds with a 95% normal interval: columns ``[...keys], mean, sd, n, ci95``
    (``ci95 = 1.96 * sd / sqrt(n)``), keys = every column except ``seed`` and ``value``."""
    from bertology.results import mean_ci

    return mean_ci(df, [c for c in df.columns if c not in ("seed", "value")])


def summarise(df: pd.DataFrame, metric: str = "accuracy", split: str = "test",
              clip_negative: bool = False) -> pd.DataFrame:
    """Tenney-style Table 1 from :func:`probe_layers` rows of several modes.

    One row per task: ``best_layer``, ``best_layer_score`` (+ ``best_layer_ci95``), ``expected_layer_mix``
    (E_s[l] of the mean mix weights), ``mix_score`` (+ ``mix_ci95``), ``expected_layer_cumulative``
    (E_Delta[l] from the mean cumulative scores over seeds, :func:`cumulative_expected_layer` with
    ``clip_negative``; default the paper's raw differentials). Missing modes give NaN. Control rows
    are ignored.
    """
    d = df[~df["control"].astype(bool)] if "control" in df else df
    rows = []
    for task, t in d.groupby("task"):
        row: dict[str, Any] = {"task": task}
        scores = t[(t["metric"] == metric) & (t["split"] == split)]
        per = scores[scores["mode"] == "per_layer"].groupby("layer")["value"]
        if len(per):
            mean, ci = per.mean(), 1.96 * per.std().fillna(0) / np.sqrt(per.count())
            best = int(mean.idxmax())
            row.update(best_layer=best, best_layer_score=float(mean[best]), best_layer_ci95=float(ci[best]))
        mix = scores[scores["mode"] == "mix"]["value"]
        if len(mix):
            row.update(mix_score=float(mix.mean()),
                       mix_ci95=float(1.96 * (mix.std() if len(mix) > 1 else 0) / np.sqrt(len(mix))))
        w = t[(t["mode"] == "mix") & (t["metric"] == "mix_weight")].groupby("layer")["value"].mean()
        if len(w):
            row["expected_layer_mix"] = expected_layer(w.values, w.index.values)
        cum = scores[scores["mode"] == "cumulative"].groupby("layer")["value"].mean().sort_index()
        if len(cum) > 1:
            row["expected_layer_cumulative"] = cumulative_expected_layer(cum.values, cum.index.values,
                                                                         clip_negative=clip_negative)
        rows.append(row)
    cols = ["task", "best_layer", "best_layer_score", "best_layer_ci95", "expected_layer_mix",
            "mix_score", "mix_ci95", "expected_layer_cumulative"]
    return pd.DataFrame(rows).reindex(columns=cols)
