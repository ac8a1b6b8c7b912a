"""The main job: the workbench's analyses on the embedded default (MiniLM-L6 + the bundled Brown
sample) at sizes that fit in about 5 minutes on 2 CPU cores, each as its own study run (so the dashboard
shows each page): head types, edge probing, contextuality, Hewitt & Manning's structural probe,
rotation alignment and a small fine-tuning run on MiniLM; Michel's pruning on the MLM loss of the workbench's own English MLM (``second_model``,
shipped with the package); emergence across the small from-scratch ``bert-mini-english`` checkpoints;
then a pointer to the dashboard. The ``tour`` study runs the same way with every study, at the larger
sizes of ``configs/tour/``.

Each sub-run's id is ``<this study>-seed<seed>`` (``<this study>-<model>-seed<seed>`` for the second
model), so ``quickstart`` and ``tour`` never share a run folder.
"""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

import pandas as pd

from bertology.studies import default_config_file, run_study

DESCRIPTION = "The main analyses on the embedded default in ~5 minutes on 2 cores (the README's main job)"
DEFAULTS = {
    # structural_probe after contextuality: it probes the 500-sentence store contextuality extracted
    "studies": [
        "head_types",
        "edge_probing",
        "contextuality",
        "structural_probe",
        "alignment",
        "finetuning",
        "emergence",
    ],
    "configs": "quickstart",  # the shipped config variant (studies/configs/quickstart/)
    "second_model": "minilm-english-mlm",  # run `second_model_studies` with this model ("" = skip): the
    # workbench's English MLM (MiniLM-L6 + continued MLM pretraining)
    "second_model_studies": ["pruning"],
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    results_root = ctx.run_dir.parents[1]
    rows = []
    plan = [(name, None) for name in cfg["studies"]]
    if cfg["second_model"]:
        plan += [(name, cfg["second_model"]) for name in cfg["second_model_studies"]]
    for name, model in plan:
        started = time.perf_counter()
        config_file = default_config_file(name, cfg["configs"])
        run_id = f"{ctx.name}-{_id_part(model)}-seed{ctx.seed}" if model else f"{ctx.name}-seed{ctx.seed}"
        run_dir = run_study(
            name,
            config_file=config_file if config_file.is_file() else None,
            seed=ctx.seed,
            overrides={"model": model} if model else None,
            run_id=run_id,
            results_root=results_root,
            log=ctx.log,
        )
        rows.append(
            {
                "study": name,
                "model": model or "config",
                "run_dir": str(run_dir),
                "seconds": round(time.perf_counter() - started, 1),
            }
        )
    ctx.step("subruns", lambda: pd.DataFrame(rows))
    ctx.record(subruns=rows)
    ctx.log("\nOpen the results:  .venv/bin/bertology dashboard   (http://127.0.0.1:8501)")


def _id_part(model: str) -> str:
    """A registry name as it is (``minilm-english-mlm``); a model folder as its name plus a short hash
    of the path, so a path never becomes part of a run folder's name."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._@+=-]*", model):
        return model
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model).name).strip("-.") or "model"
    return f"{name}-{hashlib.sha256(model.encode()).hexdigest()[:8]}"
