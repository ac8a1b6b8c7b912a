"""Two or more encoders read on the same sentences: a linear edge probe per layer and the head
types of each, side by side (what fine-tuning, continued pretraining or pruning changed).

:func:`probes_and_head_types` takes labelled models (``[("pretrained", name_or_dir), ("full",
dir), ...]``) and one corpus and returns two long tables: probe accuracy per model, task, layer and
split, and per head the type under the first model and under each other model. The probe seed
and the sentence split are the same for every model, so the differences are the models'.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["probes_and_head_types", "PROBE_COLUMNS", "TYPE_COLUMNS"]

PROBE_COLUMNS = ["mode", "probe_task", "layer", "split", "accuracy"]
TYPE_COLUMNS = ["mode", "layer", "head", "type_before", "type_after", "changed"]


def probes_and_head_types(
    models: Sequence[tuple[str, Any]],
    corpus: Any,
    *,
    probe_tasks: Sequence[str] = ("pos",),
    head_types: bool = True,
    seed: int = 0,
    root: str | Path | None = None,
    log=lambda _m: None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(probes, types)`` for ``models`` (``(label, registry name or directory)``, the first the
    reference) over ``corpus``.

    ``probes``: :data:`PROBE_COLUMNS` -- dev and test accuracy of a linear probe per layer
    (:func:`bertology.probes.probing.probe_layers`, probe seed and split seed ``seed``) for each of
    ``probe_tasks``. ``types``: :data:`TYPE_COLUMNS` -- for every model after the first, each head's
    type under the first model (``type_before``) and under it (``type_after``), with the papers'
    definitions (:func:`bertology.probes.heads.head_types`). Stores go to ``root`` (a temporary
    folder when None) and are removed with it."""
    from bertology.models import load_model
    from bertology.probes.heads import head_types as head_type_table
    from bertology.probes.probing import probe_layers
    from bertology.store import extract

    probes, types = [], []
    reference = None
    with tempfile.TemporaryDirectory(dir=root, prefix="stores-") as stores:
        for label, model in models:
            log(f"    {label}: {len(corpus)} sentences")
            lm = load_model(model, attentions=True)
            store = extract(lm, corpus, attentions=head_types, root=stores, progress=False)
            for task in probe_tasks:
                df = probe_layers(store, corpus, task, seeds=(int(seed),), split_seed=int(seed), probe="linear")
                df = df[(df["metric"] == "accuracy") & df["split"].isin(["dev", "test"]) & ~df["control"].astype(bool)]
                probes.append(
                    pd.DataFrame(
                        {
                            "mode": label,
                            "probe_task": task,
                            "layer": df["layer"].to_numpy(),
                            "split": df["split"].to_numpy(),
                            "accuracy": df["value"].to_numpy(),
                        }
                    )
                )
            if head_types:
                table = head_type_table(store, corpus)[["layer", "head", "type"]]
                if reference is None:
                    reference = table.rename(columns={"type": "type_before"})
                else:
                    merged = reference.merge(table.rename(columns={"type": "type_after"}), on=["layer", "head"])
                    types.append(merged.assign(mode=label, changed=merged["type_before"] != merged["type_after"]))
    return (
        pd.concat(probes, ignore_index=True)[PROBE_COLUMNS] if probes else pd.DataFrame(columns=PROBE_COLUMNS),
        pd.concat(types, ignore_index=True)[TYPE_COLUMNS] if types else pd.DataFrame(columns=TYPE_COLUMNS),
    )
