"""Probe controls: Hewitt & Liang (2019) control tasks and selectivity (the probes that use them are in
``edge``; probe families and the random-encoder baseline in ``baselines``).

A control task keeps every example's spans but replaces its label by one fixed per word type,
drawn once (seeded) from the task's empirical label distribution. A probe that does well on it
memorises word types rather than reading structure from the representation. Selectivity =
task accuracy - control accuracy (higher = the probe's score says more about the features).

What "the word type" of an example is (``key``):

* ``"span1"`` (default, Hewitt & Liang's definition): the text of span 1 — the word itself for
  one-word tasks, the dependent for ``deps`` (span 1 = dependent, span 2 = head). A probe can
  memorise it: most test words were seen in training.
* ``"pair"``: the pair (span 1 text, span 2 text) for two-span tasks (the workbench's earlier key).
  On dependencies most (dependent, head) pairs occur once, so most test examples carry a key never
  seen in training and the control cannot be learnt — selectivity is inflated.

:func:`control_key_seen_share` says how learnable a control is: the share of test examples whose
key occurs among the training examples.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from bertology.errors import ConfigError
from bertology.probes.probing.tasks import EdgeTask, TaskError, label_distribution

CONTROL_KEYS = ("span1", "pair")


def _type_key(words: Sequence[str], span: tuple[int, int]) -> str:
    return " ".join(words[span[0] : span[1]])


def _check_key(key: str) -> None:
    if key not in CONTROL_KEYS:
        raise ConfigError(f"control key must be one of {', '.join(CONTROL_KEYS)}, got {key!r}")


def control_keys(task: EdgeTask, words: Sequence[Sequence[str]], key: str = "span1") -> list[str]:
    """The word-type key of every example (see the module docstring): span 1's text (words joined by
    a space, case kept), or for ``key="pair"`` and two-span tasks ``span 1 text + TAB + span 2 text``.
    Single-span tasks have the same keys under both."""
    _check_key(key)
    if len(words) < task.n_sentences:
        raise TaskError(
            f"control task for {task.name!r}: {len(words)} sentences of words, task needs {task.n_sentences}"
        )
    keys = []
    for e in task.examples:
        k = _type_key(words[e.sentence], e.span1)
        if key == "pair" and e.span2 is not None:
            k += "\t" + _type_key(words[e.sentence], e.span2)
        keys.append(k)
    return keys


def control_task(task: EdgeTask, words: Sequence[Sequence[str]], seed: int = 0, key: str = "span1") -> EdgeTask:
    """The control version of ``task``: each word type gets a random label, fixed per type.

    ``words``: the sentences' words (``[n_sentences][n_words]``). The type of an example is given
    by ``key`` (:func:`control_keys`; default span 1's text, Hewitt & Liang's word type). Labels are
    drawn with the task's empirical label distribution (first label of each example), one draw per
    type in sorted order of the types, with ``numpy.random.default_rng(seed)``.
    """
    keys = control_keys(task, words, key)
    dist = label_distribution(task)
    labels, probs = list(dist), np.array(list(dist.values()))
    types = sorted(set(keys))
    draws = np.random.default_rng(seed).choice(len(labels), size=len(types), p=probs)
    assigned = {t: labels[d] for t, d in zip(types, draws)}
    return task.with_labels(
        [(assigned[k],) for k in keys],
        name=f"{task.name}-control",
        source=f"control (Hewitt & Liang 2019, key {key}) of {task.source}, seed {seed}",
    )


def control_key_seen_share(
    task: EdgeTask, words: Sequence[Sequence[str]], split: dict[str, np.ndarray], key: str = "span1", part: str = "test"
) -> float:
    """Share of the ``part`` examples (default test) whose control key occurs among the training
    examples of ``split`` (``{"train": idx, part: idx}``, e.g. :func:`split_by_sentence`); NaN if
    ``part`` is empty. A probe can only get an unseen key's control label right by chance."""
    keys = control_keys(task, words, key)
    seen = {keys[i] for i in split["train"]}
    idx = np.asarray(split[part])
    if not len(idx):
        return float("nan")
    return float(np.mean([keys[i] in seen for i in idx]))


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
