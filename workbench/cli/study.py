"""Study commands: ``study list``, ``study run``, ``dashboard``."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Optional

import typer

FORWARDED_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name))


def run_forwarding_signals(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` as a child and wait for it; SIGTERM, SIGINT and SIGHUP sent to this process are
    passed on to the child, and this process still waits for it to end, so stopping the command
    never leaves the child (the dashboard's server) running. Returns the child's exit code."""
    child = subprocess.Popen(cmd, env=env)

    def forward(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def list_cmd() -> None:
    """List the studies and the runs already in results/."""
    from bertology.runs import list_runs, removable
    from bertology.studies import list_studies

    for name, description in list_studies().items():
        typer.echo(f"{name:<22} {description}")
    runs = list_runs()
    if not runs.empty:
        typer.echo("\nruns:")
        for r in runs.itertuples():
            typer.echo(f"  {r.study}/{r.run_id}{'' if r.complete else f'  ({r.status})'}")
        unfinished = runs[runs["status"].map(removable)]
        if not unfinished.empty:
            typer.echo(
                f"\n{len(unfinished)} incomplete or unreadable run(s): the dashboard hides them; "
                "remove them with `bertology study clean --yes`"
            )


def clean_cmd(
    yes: bool = typer.Option(False, "--yes", help="remove them (without it: only list what would go)"),
) -> None:
    """List (and with --yes remove) the incomplete and unreadable run folders in results/; a run
    that is still running is never touched."""
    from bertology.runs import is_linked, list_runs, removable, remove_unfinished_runs

    runs = list_runs()
    linked = runs[runs["status"].map(is_linked)] if not runs.empty else runs
    for r in linked.itertuples():  # never followed: nothing outside results/ is read or removed
        typer.echo(f"  {r.study}/{r.run_id}  ({r.status}): skipped", err=True)
    unfinished = runs[runs["status"].map(removable)] if not runs.empty else runs
    if unfinished.empty:
        typer.echo("no incomplete or unreadable runs")
        return
    for r in unfinished.itertuples():
        typer.echo(f"  {r.study}/{r.run_id}  ({r.status})")
    if not yes:
        typer.echo(f"{len(unfinished)} run folder(s) would be removed: add --yes")
        return
    not_removed: list[str] = []

    def skipped(path: Path, why: str) -> None:
        if not is_linked(why):  # the linked ones were named above
            not_removed.append(f"  {path}: {why}: skipped")

    removed = remove_unfinished_runs(on_skip=skipped)
    for line in not_removed:
        typer.echo(line, err=True)
    typer.echo(f"removed {len(removed)} run folder(s)")


def run_cmd(
    name: str = typer.Argument(..., help="study name (see `bertology study list`)"),
    config: Optional[Path] = typer.Option(
        None,
        help="YAML config file, or a shipped config by name (quickstart/NAME, tour/NAME; default: the shipped NAME)",
    ),
    seed: Optional[int] = typer.Option(None, help="override the config's seed"),
    run_id: Optional[str] = typer.Option(None, help="run directory name (default: hash of config + seed)"),
    force: bool = typer.Option(False, help="recompute even if a complete run exists"),
) -> None:
    """Run (or resume) a study; results go to results/NAME/RUN-ID/."""
    from bertology.studies import run_study

    run_dir = run_study(name, config_file=config, seed=seed, run_id=run_id, force=force)
    typer.echo(f"results: {run_dir}")


def dashboard_cmd(
    port: int = typer.Option(8501, help="port on localhost"),
    results: Optional[Path] = typer.Option(None, help="results folder (default ./results)"),
) -> None:
    """Open the Streamlit dashboard on localhost (it only reads result files)."""
    import os

    from bertology.paths import dashboard_command

    env = dict(os.environ)
    if results:
        env["BERTOLOGY_RESULTS"] = str(results.resolve())
    cmd = dashboard_command(port)  # the dashboard shipped inside the package
    typer.echo(f"dashboard on http://127.0.0.1:{port}  (Ctrl-C to stop)")
    code = run_forwarding_signals(cmd, env)  # a stopped command stops its server too
    if code not in (0, -signal.SIGTERM, -signal.SIGINT):
        raise typer.Exit(code if code > 0 else 1)


def register(app: typer.Typer) -> None:
    """Add ``study list | clean | run`` and ``dashboard`` to the ``bertology`` app."""
    study = typer.Typer(help="Reproducible study scripts (config + seed + provenance).", no_args_is_help=True)
    app.add_typer(study, name="study")
    study.command("list")(list_cmd)
    study.command("clean")(clean_cmd)
    study.command("run")(run_cmd)
    app.command("dashboard")(dashboard_cmd)
