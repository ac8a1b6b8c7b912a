"""``bertology probe``: the ``edge_probing`` study (per layer, scalar mix, cumulative, controls, MDL,
random-encoder baseline) with the options given; options left out come from the study's config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from bertology.cli.core import MODEL_HELP, check_device, quick_overrides


def _seeds(text: str) -> list[int]:
    """``--seeds`` ("0,1,2") as a list of integers >= 0 (:class:`ConfigError` otherwise)."""
    from bertology.errors import ConfigError

    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds:
        raise ConfigError("--seeds: give at least one seed")
    if any(s < 0 for s in seeds):
        raise ConfigError(f"--seeds must be integers >= 0, got {text!r}")
    return seeds


MODES = ("per_layer", "mix", "cumulative")

# What `bertology probe` runs unless --full (or the option itself) is given: the papers' probe (MLP,
# attention span pooling) on every layer, one seed, nothing else -- about a minute on 200 sentences
# on 2 CPU cores. --full runs the edge_probing study as configured (3 seeds x 3 modes, controls,
# MDL, the random-encoder baseline).
QUICK = {"modes": ["per_layer"], "seeds": [0], "control": False, "mdl_tasks": [], "random_baseline_tasks": []}
QUICK_TEXT = "per_layer, 1 seed, no control task, no MDL, no random-init baseline"


def probe_overrides(
    *,
    task: str | None = None,
    model: str | None = None,
    corpus: str | None = None,
    limit: int | None = None,
    mode: str | None = None,
    probe: str | None = None,
    pooling: str | None = None,
    control: bool | None = None,
    mdl: bool | None = None,
    random_baseline: bool | None = None,
    seeds: str | None = None,
    max_epochs: int | None = None,
    device: str | None = None,
    split: str | None = None,
) -> dict[str, Any]:
    """The ``edge_probing`` config fields for the options given (``None`` = not given)."""
    from bertology.errors import ConfigError
    from bertology.probes.probing.tasks import BUILTIN_TASKS

    if limit is not None and limit < 0:
        raise ConfigError(f"--limit must be >= 0 (the first N sentences; 0 = the whole corpus), got {limit}")
    if max_epochs is not None and max_epochs < 1:
        raise ConfigError(f"--max-epochs must be >= 1, got {max_epochs}")
    check_device(device)
    overrides: dict[str, Any] = {}
    if task is not None:
        overrides["tasks"] = [task]
    if split is not None and split not in ("fixed", "per_seed"):
        raise ConfigError(f"--split must be fixed or per_seed, got {split!r}")
    for key, value in (
        ("model", model),
        ("corpus", corpus),
        ("probe", probe),
        ("span_pooling", pooling),
        ("control", control),
        ("max_epochs", max_epochs),
        ("device", device),
        ("split", split),
    ):
        if value is not None:
            overrides[key] = value
    if limit is not None:
        overrides["limit"] = limit or None  # 0 = the whole corpus
    if mode is not None:
        if mode != "all" and mode not in MODES:
            raise ConfigError(f"--mode must be one of {', '.join(MODES)} or all, not {mode!r}")
        overrides["modes"] = list(MODES) if mode == "all" else [mode]
    if seeds is not None:
        overrides["seeds"] = _seeds(seeds)
    # MDL and the random baseline run for the probed tasks listed in mdl_tasks / random_baseline_tasks
    for key, flag in (("mdl_tasks", mdl), ("random_baseline_tasks", random_baseline)):
        if flag is not None:
            overrides[key] = ([task] if task is not None else list(BUILTIN_TASKS)) if flag else []
    return overrides


def print_summary(run_dir: Path) -> None:
    """A short summary of an ``edge_probing`` run, read back from its tables."""
    from bertology.results import read_manifest, read_table

    manifest = read_manifest(run_dir)
    for info in manifest.get("tasks", {}).values():
        typer.echo(f"{info['name']}: {info['examples']} examples, {info['labels']} labels ({info['source']})")
    tables = set(manifest.get("tables", []))
    if "layer_intervals" in tables:
        intervals = read_table(run_dir, "layer_intervals")
        acc = intervals[intervals["metric"] == "accuracy"]
        typer.echo(
            "accuracy per layer (mean over seeds; 95% interval of the test score):\n"
            + acc[["task", "mode", "layer", "dev_score", "score", "low", "high", "n_seeds", "n_test"]]
            .round(4)
            .to_string(index=False)
        )
    else:  # a run made before intervals existed
        df = read_table(run_dir, "layer_scores")
        acc = df[(df["metric"] == "accuracy") & (df["split"] == "test") & (~df["control"].astype(bool))]
        typer.echo(acc.groupby(["task", "mode", "layer"])["value"].agg(["mean", "std"]).round(4).to_string())
    summary = read_table(run_dir, "summary")
    typer.echo(summary.round(3).to_string(index=False))
    for line in small_sample_warnings(summary):
        typer.echo(line)
    if "controls" in tables:
        sel = read_table(run_dir, "controls")
        sel = sel[sel["metric"] == "selectivity"]
        typer.echo(
            "selectivity (test):\n"
            + sel.pivot_table(index="layer", columns="task", values="value").round(4).to_string()
        )
    if "mdl" in tables:
        mdl = read_table(run_dir, "mdl")
        comp = mdl[mdl["metric"].isin(["online_bits", "compression"])]
        typer.echo(
            "MDL online code:\n"
            + comp.pivot_table(index=["task", "layer"], columns="metric", values="value").round(2).to_string()
        )
    if "random_baseline" in tables:
        rb = read_table(run_dir, "random_baseline")
        rb = rb[(rb["metric"] == "accuracy") & (rb["split"] == "test") & (~rb["control"].astype(bool))]
        typer.echo(
            "random-init encoder (test accuracy):\n"
            + rb.pivot_table(index="layer", columns="task", values="value").round(4).to_string()
        )
    typer.echo(f"wrote {run_dir}")


def small_sample_warnings(summary: Any) -> list[str]:
    """One warning line per task of a ``summary`` table flagged ``small_sample`` (fewer test
    examples than :data:`bertology.uncertainty.MIN_TEST_ITEMS`)."""
    from bertology.uncertainty import MIN_TEST_ITEMS

    if "small_sample" not in summary.columns:
        return []
    flagged = summary[summary["small_sample"].fillna(False).astype(bool)]
    return [
        f"warning: {row.task}: only {int(row.n_test)} test examples (< {MIN_TEST_ITEMS}): its scores and "
        f"best layer are uncertain; {_interval_advice(row)}"
        for row in flagged.itertuples()
    ]


def _interval_advice(row: Any) -> str:
    """What to read instead of the ranking: the best layer's interval, or, where the summary row
    has none (one seed), how to get one."""
    low, high = getattr(row, "best_layer_low", None), getattr(row, "best_layer_high", None)
    if low is None or high is None or low != low or high != high:  # NaN: no interval
        return "one seed: no interval; use --seeds 3"
    return "read the intervals (best_layer_low/high), not the ranking"


def register(app: typer.Typer) -> None:
    @app.command("probe")
    def probe_cmd(
        task: Optional[str] = typer.Option(
            None, help="pos, xpos, deps, entities or a jiant-style FILE.jsonl (default: the study's tasks)"
        ),
        model: Optional[str] = typer.Option(None, help=MODEL_HELP),
        corpus: Optional[str] = typer.Option(None, help="bundled name or .conllu/.bio/.txt (ignored for .jsonl tasks)"),
        limit: Optional[int] = typer.Option(None, help="first N sentences of the corpus (0 = all)"),
        mode: Optional[str] = typer.Option(
            None, help="per_layer, mix, cumulative or all (quick default: per_layer; --full: all)"
        ),
        probe: Optional[str] = typer.Option(None, help="mlp or linear"),
        pooling: Optional[str] = typer.Option(None, help="span pooling: attention or mean"),
        control: Optional[bool] = typer.Option(
            None,
            "--control/--no-control",
            help="also train on the Hewitt & Liang control task (selectivity) (quick default: no; --full: yes)",
        ),
        mdl: Optional[bool] = typer.Option(
            None,
            "--mdl/--no-mdl",
            help="also measure the online (MDL) codelength per layer (quick default: no; --full: every task)",
        ),
        random_baseline: Optional[bool] = typer.Option(
            None,
            "--random-baseline/--no-random-baseline",
            help="also probe a randomly initialised copy of the model (quick default: no; --full: every task)",
        ),
        seeds: Optional[str] = typer.Option(
            None, help="probe seeds, comma-separated (quick default: 0; --full: 0,1,2)"
        ),
        full: bool = typer.Option(
            False,
            "--full",
            help="run the whole edge_probing study as configured (3 seeds "
            "x 3 modes, controls, MDL, random-init baseline: minutes to "
            "an hour) instead of the quick default",
        ),
        split: Optional[str] = typer.Option(
            None,
            help="sentence split: fixed (one split drawn with --seed, shared "
            "by every probe seed) or per_seed (each probe seed its own)",
        ),
        max_epochs: Optional[int] = typer.Option(None, help="most training epochs per probe (early stopping on dev)"),
        device: Optional[str] = typer.Option(
            None, help="where the model runs and the probes train: cpu or cuda (default: the study config's, cpu)"
        ),
        seed: Optional[int] = typer.Option(
            None, help="the run's seed (the fixed sentence split, random-encoder baseline)"
        ),
        out: Optional[Path] = typer.Option(
            None, help="results root (default results/); the run goes to OUT/edge_probing/<run id>"
        ),
        force: bool = typer.Option(False, help="recompute even if a complete run exists"),
    ) -> None:
        """Probe every layer of a model for span-labelling tasks: the edge_probing study with these
        options (others from its config); writes layer_scores, summary, controls, mdl, ... tables.

        Quick by default (per_layer, 1 seed, no control task, no MDL, no random-init baseline; the
        papers' MLP probe); --full runs the study as configured."""
        from bertology.studies import run_study

        overrides = probe_overrides(
            task=task,
            model=model,
            corpus=corpus,
            limit=limit,
            mode=mode,
            probe=probe,
            pooling=pooling,
            control=control,
            mdl=mdl,
            random_baseline=random_baseline,
            seeds=seeds,
            max_epochs=max_epochs,
            device=device,
            split=split,
        )
        overrides = quick_overrides(QUICK, overrides, full, QUICK_TEXT)
        run_dir = run_study(
            "edge_probing", overrides=overrides, results_root=out, seed=seed, force=force, log=typer.echo
        )
        print_summary(run_dir)
