"""The main job: every analysis of the workbench on the embedded default (MiniLM-L6 + the bundled
Brown sample) at small sizes, each as its own study run (so the dashboard shows each page), then a
pointer to the dashboard."""

from __future__ import annotations

import time

import pandas as pd

from bertology.studies import default_config_file, run_study

DESCRIPTION = "Every analysis on the embedded default at small sizes (the README's main job)"
DEFAULTS = {
    # emergence first: alignment compares MiniLM with the checkpoint it trains
    "studies": ["head_types", "edge_probing", "feature_combinations", "contextuality", "pruning", "emergence",
                "alignment"],
    "configs": "quickstart",      # the shipped config variant (studies/configs/quickstart/)
    "seed": 0,
}


def run(ctx) -> None:
    cfg = ctx.config
    results_root = ctx.run_dir.parents[1]
    rows = []
    for name in cfg["studies"]:
        started = time.perf_counter()
        config_file = default_config_file(name, cfg["configs"])
        run_dir = run_study(name, config_file=config_file if config_file.is_file() else None, seed=ctx.seed,
                            run_id=f"quickstart-seed{ctx.seed}", results_root=results_root, log=ctx.log)
        rows.append({"study": name, "run_dir": str(run_dir), "seconds": round(time.perf_counter() - started, 1)})
    ctx.step("subruns", lambda: pd.DataFrame(rows))
    ctx.record(subruns=rows)
    ctx.log("\nOpen the results:  .venv/bin/bertology dashboard   (http://127.0.0.1:8501)")
