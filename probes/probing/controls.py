"""Probe controls: Hewitt & Liang (2019) control tasks and selectivity (the probes that use them are in
``edge``; probe families and the random-encoder baseline in ``baselines``).

A control task keeps every example's spans but replaces its label by one fixed per word type,
drawn once (seeded) from the task's empirical label distribution. A probe that does well on it
memorises word types rather than reading structure from the representation. Selectivity =
task accuracy - control accuracy (higher = the probe's score says more about the features).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from bertology.probes.probing.tasks import EdgeTask, TaskError, label_distribution


def _type_key(words: Sequence[str], span: tuple[int, int]) -> str:
    return " ".join(words[span[0]:span[1]])


def control_task(task: EdgeTask, words: Sequence[Sequence[str]], seed: int = 0) -> EdgeTask:
    """The control version of ``task``: each word type gets a random label, fixed per type.

    ``words``: the sentences' words (``[n_sentences][n_words]``). The type of an example is the
    text of span 1 (joined words), or the pair (span 1 text, span 2 text) for two-span tasks.
    Labels are drawn with the task's empirical label distribution (first label of each example).
    """
    if len(words) < task.n_sentences:
        raise TaskError(f"control task for {task.name!r}: {len(words)} sentences of words, "
                        f"task needs {task.n_sentences}")
    dist = label_distribution(task)
    labels, probs = list(dist), np.array(list(dist.values()))
    keys = []
    for e in task.examples:
        key = _type_key(words[e.sentence], e.span1)
        if e.span2 is not None:
            key += "\t" + _type_key(words[e.sentence], e.span2)
        keys.append(key)
    types = sorted(set(keys))
    draws = np.random.default_rng(seed).choice(len(labels), size=len(types), p=probs)
    assigned = {t: labels[d] for t, d in zip(types, draws)}
    return task.with_labels([(assigned[k],) for k in keys], name=f"{task.name}-control",
                            source=f"control (Hewitt & Liang 2019) of {task.source}, seed {seed}")


def selectivity(df: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """Selectivity rows from task rows (``control`` False) and control rows (``control`` True).

    Matched on task, mode, probe, pooling, layer, seed and split; returns rows with
    ``metric = "selectivity"``, ``control = False`` and ``value = task - control``.
    """
    keys = ["task", "mode", "probe", "pooling", "layer", "seed", "split"]
    d = df[df["metric"] == metric]
    task = d[~d["control"].astype(bool)].set_index(keys)["value"]
    ctrl = d[d["control"].astype(bool)].set_index(keys)["value"]
    diff = (task - ctrl).dropna().rename("value").reset_index()
    diff["metric"] = "selectivity"
    diff["control"] = False
    return diff[["task", "mode", "probe", "pooling", "control", "layer", "seed", "split", "metric", "value"]]
