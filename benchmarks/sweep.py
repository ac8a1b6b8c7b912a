"""Sweeps: Ray's overhead against the local backend on a tiny sweep, and two Ray workers against one.

The sweep: edge probing (pos, per layer, one probe seed, no controls) of two tiny random 2-layer
BERTs (:func:`bertology.testing.save_tiny_model_dir`) x two run seeds = 4 cells, over the first
``--limit`` Brown sentences, each cell on 1 CPU (one torch thread). Every measurement starts from an
empty results folder and an empty store cache, so it includes each model's store extraction.

Rows: ``local`` (one cell after another in this process, already warm: torch and the workbench
imported), ``ray, 1 worker`` and ``ray, 2 workers`` (a local Ray started with ``num_cpus`` = 1 or 2;
``ray.init`` is timed apart, the sweep's time includes starting the workers and their imports).
Ray's overhead = ray 1 worker / local; the speed-up = ray 1 worker / ray 2 workers. On a machine of
2 cores shared with other work, the speed-up is bounded by the cores actually free.

    python benchmarks/sweep.py [--limit 200] [--repeat 1]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

from common import print_table

TINY = {
    "tasks": ["pos"],
    "modes": ["per_layer"],
    "seeds": [0],
    "max_epochs": 10,
    "control": False,
    "mdl_tasks": [],
    "random_baseline_tasks": [],
}


def one_sweep(models: list[str], limit: int, backend: str, scratch: Path, tag: str) -> float:
    """Seconds of one sweep from empty results and store folders."""
    import yaml

    from bertology.studies import load_sweep, run_sweep

    os.environ["BERTOLOGY_HOME"] = str(scratch / f"home-{tag}")
    spec = {
        "name": "bench",
        "study": "edge_probing",
        "config": {**TINY, "limit": limit},
        "grid": {"model": models, "seed": [0, 1]},
    }
    (scratch / "bench.yaml").write_text(yaml.safe_dump(spec))
    sweep = load_sweep(scratch / "bench.yaml")
    started = time.perf_counter()
    table = run_sweep(sweep, backend=backend, results_root=scratch / f"results-{tag}", log=lambda m: None)
    seconds = time.perf_counter() - started
    if not (table["status"] == "complete").all():
        raise SystemExit(f"{tag}: a cell failed: {table[table['status'] != 'complete'][['run', 'error']]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=200, help="Brown sentences per cell")
    parser.add_argument("--repeat", type=int, default=1, help="best of N per row")
    args = parser.parse_args()

    import ray

    from bertology.testing import save_tiny_model_dir

    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        models = [str(save_tiny_model_dir("bert", scratch / f"m{seed}", seed=seed)) for seed in (0, 1)]
        timings: dict[str, float] = {}
        inits: dict[str, float] = {}
        for r in range(args.repeat):
            timings["local"] = min(
                timings.get("local", float("inf")), one_sweep(models, args.limit, "local", scratch, f"local{r}")
            )
            for workers in (1, 2):
                key = f"ray, {workers} worker{'s' if workers > 1 else ''}"
                t0 = time.perf_counter()
                ray.init(num_cpus=workers, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
                inits[key] = min(inits.get(key, float("inf")), time.perf_counter() - t0)
                try:
                    seconds = one_sweep(models, args.limit, "ray", scratch, f"ray{workers}-{r}")
                finally:
                    ray.shutdown()
                timings[key] = min(timings.get(key, float("inf")), seconds)
    rows = [
        {
            "backend": key,
            "ray.init s": inits.get(key, 0.0),
            "sweep s": seconds,
            "vs local": seconds / timings["local"],
            "vs 1 worker": timings["ray, 1 worker"] / seconds if key.startswith("ray") else float("nan"),
        }
        for key, seconds in timings.items()
    ]
    print_table(rows, f"tiny sweep: 2 tiny BERTs x 2 seeds = 4 edge-probing cells, {args.limit} sentences each")
    print(
        f"Ray's overhead (1 worker / local): {timings['ray, 1 worker'] / timings['local']:.2f}x; "
        f"2 workers against 1: {timings['ray, 1 worker'] / timings['ray, 2 workers']:.2f}x faster"
    )


if __name__ == "__main__":
    main()
