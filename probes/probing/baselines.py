"""Baselines for a probe's score: probe families on task vs control (Hewitt & Liang 2019) and a
randomly initialised encoder of the same architecture (Tenney et al.'s lexical baseline)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bertology.models import random_init_like
from bertology.probes.probing.controls import control_task, selectivity
from bertology.probes.probing.edge import ProbeConfig, probe_arrays, probe_layers
from bertology.probes.probing.tasks import EdgeTask
from bertology.store import extract


def compare_probe_families(
    features: np.ndarray,
    sentence_offsets: np.ndarray,
    task: EdgeTask,
    words: Sequence[Sequence[str]],
    *,
    seeds: Sequence[int] = (0, 1, 2),
    probes: Sequence[str] = ("linear", "mlp"),
    layer_ids: Sequence[int] | None = None,
    **config: Any,
) -> pd.DataFrame:
    """Task and control accuracy and selectivity per layer for each probe family.

    Returns :func:`bertology.probes.probing.edge.probe_arrays` rows for task and control (``control``
    column) for every probe in ``probes``, plus ``selectivity`` rows.
    """
    frames = []
    for probe in probes:
        cfg = ProbeConfig(probe=probe, **config)
        frames.append(probe_arrays(features, sentence_offsets, task, seeds=seeds, layer_ids=layer_ids, config=cfg))
        for seed in seeds:
            ctask = control_task(task, words, seed=seed)
            frames.append(
                probe_arrays(
                    features, sentence_offsets, ctask, seeds=[seed], layer_ids=layer_ids, config=cfg, control=True
                )
            )
    out = pd.concat(frames, ignore_index=True)
    out["task"] = task.name
    return pd.concat([out, selectivity(out)], ignore_index=True)


def random_init_baseline(
    lm: Any, corpus: Any, task: EdgeTask | str, *, seed: int = 0, **probe_kwargs: Any
) -> pd.DataFrame:
    """Probe a randomly initialised copy of ``lm`` (same architecture and tokenizer).

    Uses ``bertology.models.random_init_like(lm, seed)`` and ``bertology.store.extract``; returns
    :func:`bertology.probes.probing.edge.probe_layers` rows with an extra column ``model = "random-init"``.
    """
    random_lm = random_init_like(lm, seed)
    # hidden states only: the probes never read attention maps (extracting them costs ~10% more)
    df = probe_layers(extract(random_lm, corpus, attentions=False, progress=False), corpus, task, **probe_kwargs)
    df["model"] = "random-init"
    return df
