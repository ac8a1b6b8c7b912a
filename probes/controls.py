"""Probe controls: Hewitt & Liang (2019) control tasks, selectivity, probe families, random models.

A control task keeps every example's spans but replaces its label by one fixed per word type,
drawn once (seeded) from the task's empirical label distribution. A probe that does well on it
memorises word types rather than reading structure from the representation. Selectivity =
task accuracy - control accuracy (higher = the probe's score says more about the features).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pandas as pd

from probes.tasks import EdgeTask, TaskError, label_distribution


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


def compare_probe_families(features: np.ndarray, sentence_offsets: np.ndarray, task: EdgeTask,
                           words: Sequence[Sequence[str]], *, seeds: Sequence[int] = (0, 1, 2),
                           probes: Sequence[str] = ("linear", "mlp"), layer_ids: Sequence[int] | None = None,
                           **config: Any) -> pd.DataFrame:
    """Task and control accuracy and selectivity per layer for each probe family.

    Returns :func:`probes.edge_probing.probe_arrays` rows for task and control (``control``
    column) for every probe in ``probes``, plus ``selectivity`` rows.
    """
    from probes.edge_probing import ProbeConfig, probe_arrays

    frames = []
    for probe in probes:
        cfg = ProbeConfig(probe=probe, **config)
        frames.append(probe_arrays(features, sentence_offsets, task, seeds=seeds,
                                   layer_ids=layer_ids, config=cfg))
        for seed in seeds:
            ctask = control_task(task, words, seed=seed)
            frames.append(probe_arrays(features, sentence_offsets, ctask, seeds=[seed],
                                       layer_ids=layer_ids, config=cfg, control=True))
    out = pd.concat(frames, ignore_index=True)
    out["task"] = task.name
    return pd.concat([out, selectivity(out)], ignore_index=True)


def random_init_baseline(lm: Any, corpus: Any, task: EdgeTask | str, *, seed: int = 0,
                         **probe_kwargs: Any) -> pd.DataFrame:
    """Probe a randomly initialised copy of ``lm`` (same architecture and tokenizer).

    Uses ``workbench.models.random_init_like(lm, seed)`` and ``workbench.store.extract``; returns
    :func:`probes.edge_probing.probe_layers` rows with an extra column ``model = "random-init"``.
    """
    from workbench.models import random_init_like
    from workbench.store import extract

    from probes.edge_probing import probe_layers

    random_lm = random_init_like(lm, seed)
    df = probe_layers(extract(random_lm, corpus), corpus, task, **probe_kwargs)
    df["model"] = "random-init"
    return df
