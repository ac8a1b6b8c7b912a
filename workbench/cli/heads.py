"""``bertology heads`` (statistics, types, attention probe) and ``bertology prune`` (pruning curves,
L0 gates): each runs its study (``head_types`` / ``pruning``, through
:func:`bertology.studies.run_study`) with the options given on the command line as config overrides,
so a CLI run is a study run (same analysis function, same manifest, resumable, seen by the dashboard).
Options left out fall back to the study's shipped config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from bertology.cli.core import DEVICE_HELP, MODEL_HELP, check_device, quick_overrides


def _overrides(**options: Any) -> dict[str, Any]:
    """The options the user gave (not None); ``limit`` 0 means the whole corpus."""
    given = {key: value for key, value in options.items() if value is not None}
    if given.get("limit") == 0:
        given["limit"] = None
    return given


def _methods(text: str) -> list[str]:
    from bertology.errors import ConfigError
    from bertology.probes.heads.analysis import PRUNING_METHODS

    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in PRUNING_METHODS]
    if unknown or not methods:
        raise ConfigError(f"--method {text!r}: choose one or more (comma-separated) of {', '.join(PRUNING_METHODS)}")
    return methods


# What `bertology heads` / `bertology prune` run unless --full (or the option itself) is given: the
# papers' definitions on the first 200 sentences (heads), importance against random order with
# one seed and no L0 gates (prune): about a minute on 2 CPU cores with MiniLM. --full runs the
# study as configured (studies/configs/head_types.yaml, pruning.yaml).
QUICK_HEADS = {"limit": 200}
QUICK_PRUNE = {"limit": 200, "methods": ["importance", "random"], "random_seeds": 1}


def _run(study: str, overrides: dict[str, Any], out: Optional[Path], seed: Optional[int], force: bool) -> Path:
    from bertology.studies import run_study

    return run_study(study, overrides=overrides, results_root=out, seed=seed, force=force, log=typer.echo)


def heads_cmd(
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    corpus: Optional[str] = typer.Option(None, "--corpus", help="bundled name or corpus file"),
    out: Optional[Path] = typer.Option(
        None, "--out", help="results root (default results/); the run goes to OUT/head_types/RUN-ID/"
    ),
    limit: Optional[int] = typer.Option(None, "--limit", help="first N sentences (0 = all)"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    word_vectors: Optional[str] = typer.Option(
        None,
        "--word-vectors",
        help="spaCy vectors for the attention-and-words probe (Clark's GloVe probe): en, a pipeline folder, or none",
    ),
    min_count: Optional[int] = typer.Option(
        None,
        "--min-count",
        help="cases a relation needs before a head is typed syntactic for it or chosen as its best head (default 20)",
    ),
    device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP + " (the store is extracted there)"),
    full: bool = typer.Option(
        False, "--full", help="the study as configured (600 sentences) instead of the quick default (200 sentences)"
    ),
    force: bool = typer.Option(False, "--force", help="recompute even if a complete run exists"),
) -> None:
    """Attention-head statistics, head types and the attention-based dependency probe (study head_types).
    Quick by default: the first 200 sentences; --full: the study's config."""
    from bertology.results import read_manifest, read_table

    given = _overrides(
        model=model,
        corpus=corpus,
        limit=limit,
        word_vectors=word_vectors,
        min_count=min_count,
        device=check_device(device),
    )
    run_dir = _run("head_types", quick_overrides(QUICK_HEADS, given, full), out, seed, force)
    tables = read_manifest(run_dir)["tables"]
    typer.echo(read_table(run_dir, "head_types")["type"].value_counts().to_string())
    if "attention_probe" in tables:
        probe = read_table(run_dir, "attention_probe")
        shown = [c for c in ("method", "layer", "head", "uas", "uas_low", "uas_high") if c in probe.columns]
        typer.echo(probe[shown].round(3).to_string(index=False))
    typer.echo(f"wrote {run_dir}")


def prune_cmd(
    model: Optional[str] = typer.Option(None, "--model", help=MODEL_HELP),
    corpus: Optional[str] = typer.Option(None, "--corpus", help="bundled name or corpus file"),
    method: Optional[str] = typer.Option(
        None, "--method", help="importance, random, type or l0 (L0 gates); several comma-separated"
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="results root (default results/); the run goes to OUT/pruning/RUN-ID/"
    ),
    limit: Optional[int] = typer.Option(None, "--limit", help="first N sentences (0 = all)"),
    seed: Optional[int] = typer.Option(None, "--seed"),
    step: Optional[float] = typer.Option(None, "--step", help="share of all heads removed per step"),
    lam: Optional[list[float]] = typer.Option(None, "--lam", help="L0 penalty λ (method l0); repeat for several"),
    l0_steps: Optional[int] = typer.Option(None, "--l0-steps", help="L0 gate training steps"),
    device: Optional[str] = typer.Option(
        None, "--device", help=DEVICE_HELP + " (extraction, importance, pruning curves, L0 gates)"
    ),
    full: bool = typer.Option(
        False,
        "--full",
        help="the study as configured (importance, random, by-type and "
        "L0 orders, 3 random seeds, 300 sentences) instead of the "
        "quick default (importance vs 1 random order, 200 sentences)",
    ),
    force: bool = typer.Option(False, "--force", help="recompute even if a complete run exists"),
) -> None:
    """Head importance, pruning curves (real removal timing) and L0 gates (study pruning). Quick by
    default: importance against one random order on 200 sentences; --full: the study's config."""
    from bertology.results import read_manifest, read_table

    methods = _methods(method) if method is not None else None
    given = _overrides(
        model=model,
        corpus=corpus,
        limit=limit,
        methods=methods,
        step=step,
        l0_lambdas=list(lam) if lam else None,
        l0_steps=l0_steps,
        device=check_device(device),
    )
    run_dir = _run("pruning", quick_overrides(QUICK_PRUNE, given, full), out, seed, force)
    tables = read_manifest(run_dir)["tables"]
    if "pruning_curves" in tables:
        curves = read_table(run_dir, "pruning_curves")
        if "refined" in curves:  # single-head points near a threshold: not on every method's grid
            curves = curves[~curves["refined"].astype(bool)]
        typer.echo(curves.groupby(["method", "share_removed"])["value"].mean().unstack(0).round(4).to_string())
    if "pruning_thresholds" in tables:
        thresholds = read_table(run_dir, "pruning_thresholds")
        typer.echo(thresholds.to_string(index=False))
    if "l0_gates" in tables:
        gates = read_table(run_dir, "l0_gates")
        scored = read_table(run_dir, "l0_evaluation").set_index("lam") if "l0_evaluation" in tables else None
        for lam_value, g in gates.groupby("lam"):
            line = f"L0 λ={lam_value:g}: kept {int(g['kept'].sum())} of {len(g)} heads"
            if scored is not None and lam_value in scored.index:
                r = scored.loc[lam_value]
                line += (
                    f"; test {r['value']:.4f} [{r['value_low']:.4f}, {r['value_high']:.4f}]"
                    f" (unpruned {r['base']:.4f}), dev {r['value_dev']:.4f}"
                )
            typer.echo(line)
    if "pruning_cost" in tables:
        cost = read_table(run_dir, "pruning_cost")
        if not cost.empty:
            typer.echo(cost.T.to_string(header=False))
    typer.echo(f"wrote {run_dir}")


def register(app: typer.Typer) -> None:
    """Add ``heads`` and ``prune`` to the ``bertology`` app."""
    app.command("heads")(heads_cmd)
    app.command("prune")(prune_cmd)
