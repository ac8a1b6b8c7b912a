"""The ``bertology`` command line: a thin layer over the library.

Each area registers its sub-commands from its own ``cli_*`` module (``register(app)``), so the
areas stay independent and this file stays small.
"""

from __future__ import annotations

import importlib
import sys

import typer

from workbench.errors import WorkbenchError

app = typer.Typer(
    help="BERTology workbench: load encoders, extract features, probe layers and heads, align spaces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = (
    "workbench.cli_core",       # models, annotate, extract
    "workbench.cli_pretrain",   # pretrain, tokenizer
    "probes.cli_probe",         # probe
    "probes.cli_heads",         # heads, prune
    "probes.cli_embeddings",    # embeddings, align
    "workbench.cli_study",      # study run / study list, dashboard
)

for _module_name in COMMAND_MODULES:
    try:
        _module = importlib.import_module(_module_name)
    except ModuleNotFoundError as exc:  # an area not built yet
        if exc.name != _module_name:
            raise
        continue
    _module.register(app)


def main() -> None:
    """Entry point: run the app, turning workbench errors into one clear line and exit code 2."""
    from workbench.runtime import keep_freed_memory

    keep_freed_memory()  # batch jobs reuse freed pages instead of faulting in fresh ones
    try:
        app(standalone_mode=False)
    except WorkbenchError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(1)
        raise


if __name__ == "__main__":
    main()
