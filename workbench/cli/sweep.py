"""Sweep commands: ``sweep run`` (a grid of study runs, locally or on Ray) and ``sweep status``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    sweep = typer.Typer(
        help="Grids of study runs (models x config values x seeds), one after another or on a Ray cluster.",
        no_args_is_help=True,
    )
    app.add_typer(sweep, name="sweep")

    @sweep.command("run")
    def run_cmd(
        sweep_file: Path = typer.Argument(..., help="sweep file (YAML: name, study, config, grid)"),
        backend: Optional[str] = typer.Option(
            None, help="ray or local (default: ray where it is installed, else local: one cell after another)"
        ),
        address: Optional[str] = typer.Option(
            None, help="Ray cluster to join (auto, ray://HOST:10001...); default: start a local Ray"
        ),
        max_parallel: Optional[int] = typer.Option(
            None, "--max-parallel", help="at most N cells at once on Ray (default: as the resources allow)"
        ),
    ) -> None:
        """Run (or resume) a sweep: every cell is an ordinary study run; tables go to results/sweeps/NAME/."""
        from bertology.studies import load_sweep, run_sweep

        table = run_sweep(load_sweep(sweep_file), backend=backend, address=address, max_parallel=max_parallel)
        if (table["status"] == "failed").any():
            raise typer.Exit(1)

    @sweep.command("status")
    def status_cmd(name: str = typer.Argument(..., help="the sweep's name (its file's `name:`)")) -> None:
        """How far a sweep got: each cell's grid values, status, run folder and error."""
        from bertology.sweeps import live_status, read_sweep_tables

        spec, cells, _ = read_sweep_tables(name)
        axes = [k for k in (spec.get("grid") or {}) if k in cells.columns]
        now = list(live_status(cells))
        complete = sum(s == "complete" for s in now)
        typer.echo(f"sweep {name} ({spec.get('study', '?')}): {complete} of {len(cells)} cells complete")
        for r, status in zip(cells.to_dict("records"), now, strict=True):
            values = ", ".join(f"{k}={r[k]}" for k in axes)
            line = f"  {status:<10} {values}  {r['run']}"
            if status == "failed" and isinstance(r.get("error"), str):
                line += f"\n             {r['error']}"
            typer.echo(line)
