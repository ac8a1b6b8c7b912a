"""``bertology structural``: the ``structural_probe`` study (Hewitt & Manning's structural probe:
distance and depth probes per layer, a rank sweep, the LINEAR and random-init baselines) with the
options given; options left out come from the study's config."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import typer

from bertology.cli.core import MODEL_HELP, check_device, quick_overrides

# What `bertology structural` runs unless --full (or the option itself) is given: both probes on
# every layer at full rank over the config's seeds, without the rank sweep and the random-init
# encoder (a second extraction); --full runs the study as configured.
QUICK: dict[str, Any] = {"ranks": [], "random_baseline": False}
QUICK_TEXT = "no rank sweep, no random-init baseline"


def _int_list(text: str, option: str, minimum: int) -> list[int]:
    """``"0,1,2"`` as integers >= ``minimum`` (:class:`ConfigError` naming ``option`` otherwise)."""
    from bertology.errors import ConfigError

    try:
        values = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"{option} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < minimum for v in values):
        raise ConfigError(f"{option} must be one or more integers >= {minimum}, got {text!r}")
    return values


def structural_overrides(
    *,
    model: str | None = None,
    corpus: str | None = None,
    limit: int | None = None,
    layers: str | None = None,
    probes: str | None = None,
    rank: int | None = None,
    ranks: str | None = None,
    seeds: str | None = None,
    random_baseline: bool | None = None,
    max_epochs: int | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """The ``structural_probe`` config fields for the options given (``None`` = not given)."""
    from bertology.errors import ConfigError
    from bertology.probes.probing.structural import PROBE_KINDS

    if limit is not None and limit < 0:
        raise ConfigError(f"--limit must be >= 0 (the first N sentences; 0 = the whole corpus), got {limit}")
    if rank is not None and rank < 0:
        raise ConfigError(f"--rank must be >= 0 (0 = full rank), got {rank}")
    if max_epochs is not None and max_epochs < 1:
        raise ConfigError(f"--max-epochs must be >= 1, got {max_epochs}")
    check_device(device)
    overrides: dict[str, Any] = {}
    for key, value in (("model", model), ("corpus", corpus), ("rank", rank), ("max_epochs", max_epochs)):
        if value is not None:
            overrides[key] = value
    for key, value in (("random_baseline", random_baseline), ("device", device)):
        if value is not None:
            overrides[key] = value
    if limit is not None:
        overrides["limit"] = limit or None  # 0 = the whole corpus
    if layers is not None:
        overrides["layers"] = [] if layers == "all" else _int_list(layers, "--layers", 0)
    if ranks is not None:
        overrides["ranks"] = [] if ranks == "none" else _int_list(ranks, "--ranks", 1)
    if seeds is not None:
        overrides["seeds"] = _int_list(seeds, "--seeds", 0)
    if probes is not None:
        kinds = [p.strip() for p in probes.split(",") if p.strip()]
        if not kinds or any(k not in PROBE_KINDS for k in kinds):
            raise ConfigError(f"--probes must be {' and/or '.join(PROBE_KINDS)}, comma-separated, got {probes!r}")
        overrides["probes"] = kinds
    return overrides


def _missing(value: Any) -> bool:
    """A score that is not there: NaN, or None (a column of NaN read back)."""
    return value is None or math.isnan(float(value))


def _score(value: Any) -> str:
    return "n/a" if _missing(value) else f"{float(value):.3f}"


def _interval(low: Any, high: Any) -> str:
    return "(no interval)" if _missing(low) or _missing(high) else f"[{float(low):.3f}, {float(high):.3f}]"


def summary_lines(summary: Any, baselines: Any | None = None) -> list[str]:
    """Readable lines of a ``summary`` table: per encoder and probe its best layer (chosen on dev)
    and each metric's test score with its interval; then the baselines' scores."""
    names = {"uuas": "UUAS", "dspr": "DSpr.", "root_acc": "root%", "nspr": "NSpr."}
    lines = []
    for (encoder, kind), part in summary.groupby(["encoder", "probe"], sort=False):
        first = part.iloc[0]
        scores = ", ".join(
            f"{names.get(r.metric, r.metric)} {_score(r.score)} {_interval(r.low, r.high)}"
            + (" (small sample)" if bool(r.small_sample) else "")
            for r in part.itertuples()
        )
        lines.append(
            f"{encoder} / {kind} probe: best layer {int(first.best_layer)} (chosen on dev "
            f"{names.get(first.selection_metric, first.selection_metric)}, rank {int(first['rank'])}, "
            f"{int(first.n_seeds)} seed(s)): test {scores}"
        )
    if baselines is not None:
        linear = baselines[baselines["encoder"] == "linear"]
        lines.append(
            "LINEAR baseline (the left-to-right chain): "
            + ", ".join(
                f"{names.get(r.metric, r.metric)} {_score(r.score)} {_interval(r.low, r.high)}"
                for r in linear.itertuples()
            )
        )
    return lines


def print_summary(run_dir: Path) -> None:
    """A short summary of a ``structural_probe`` run, read back from its tables."""
    from bertology.results import read_manifest, read_table

    manifest = read_manifest(run_dir)
    trees = manifest.get("trees", {})
    typer.echo(
        f"trees: {trees.get('source', 'unknown')} ({trees.get('skipped', 0)} sentence(s) without one tree left out)"
    )
    tables = set(manifest.get("tables", []))
    intervals = read_table(run_dir, "layer_intervals")
    shown = intervals.assign(
        test=[
            f"{_score(s)} {_interval(lo, hi)}"
            for s, lo, hi in zip(intervals["score"], intervals["low"], intervals["high"])
        ]
    )
    typer.echo(
        "per layer (test score, mean over seeds, and its 95% interval):\n"
        + shown.pivot_table(index=["encoder", "layer"], columns="metric", values="test", aggfunc="first", sort=False)
        .reset_index()
        .to_string(index=False)
    )
    baselines = read_table(run_dir, "baselines") if "baselines" in tables else None
    for line in summary_lines(read_table(run_dir, "summary"), baselines):
        typer.echo(line)
    if "rank_curve" in tables:
        curve = read_table(run_dir, "rank_curve")
        typer.echo(
            "UUAS by probe rank at the best distance layer:\n"
            + curve[curve["metric"] == "uuas"][["layer", "rank", "score", "low", "high"]]
            .round(3)
            .to_string(index=False)
        )
    typer.echo(f"wrote {run_dir}")


def register(app: typer.Typer) -> None:
    """Add ``bertology structural``."""

    @app.command("structural")
    def structural_cmd(
        model: Optional[str] = typer.Option(None, help=MODEL_HELP),
        corpus: Optional[str] = typer.Option(None, help="bundled name or a .conllu file with heads (gold trees)"),
        limit: Optional[int] = typer.Option(None, help="first N sentences of the corpus (0 = all)"),
        layers: Optional[str] = typer.Option(None, help="store layers, comma-separated (0 = embeddings), or all"),
        probes: Optional[str] = typer.Option(None, help="distance, depth or distance,depth"),
        rank: Optional[int] = typer.Option(None, help="the probes' rank (0 = full rank, the hidden size)"),
        ranks: Optional[str] = typer.Option(
            None, help="the rank sweep at the best layer, comma-separated, or none (quick default: none)"
        ),
        seeds: Optional[str] = typer.Option(None, help="probe seeds, comma-separated (default: the config's)"),
        random_baseline: Optional[bool] = typer.Option(
            None,
            "--random-baseline/--no-random-baseline",
            help="also probe a randomly initialised copy of the model (quick default: no)",
        ),
        full: bool = typer.Option(
            False, "--full", help="run the structural_probe study as configured (rank sweep, random-init baseline)"
        ),
        max_epochs: Optional[int] = typer.Option(None, help="most training epochs per probe (early stopping on dev)"),
        device: Optional[str] = typer.Option(None, help="where the model runs and the probes train: cpu or cuda"),
        seed: Optional[int] = typer.Option(None, help="the run's seed (the sentence split, the random encoder)"),
        out: Optional[Path] = typer.Option(
            None, help="results root (default results/); the run goes to OUT/structural_probe/<run id>"
        ),
        force: bool = typer.Option(False, help="recompute even if a complete run exists"),
    ) -> None:
        """Hewitt & Manning's structural probe of every layer: tree distances (UUAS, DSpr.) and
        depths (root%, NSpr.), best layer chosen on dev and read on test with intervals; the
        structural_probe study with these options. Quick by default (no rank sweep, no random-init
        baseline); --full runs the study as configured."""
        from bertology.studies import run_study

        overrides = structural_overrides(
            model=model,
            corpus=corpus,
            limit=limit,
            layers=layers,
            probes=probes,
            rank=rank,
            ranks=ranks,
            seeds=seeds,
            random_baseline=random_baseline,
            max_epochs=max_epochs,
            device=device,
        )
        overrides = quick_overrides(QUICK, overrides, full, QUICK_TEXT)
        run_dir = run_study(
            "structural_probe", overrides=overrides, results_root=out, seed=seed, force=force, log=typer.echo
        )
        print_summary(run_dir)
