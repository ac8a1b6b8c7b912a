"""The ``bertology`` command line: a thin layer over the library (it parses, calls one library
function, prints). Library code never imports from here.

Each area registers its sub-commands from its own module in this package (``register(app)``).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import typer

from bertology.atomic import is_disk_full
from bertology.errors import WorkbenchError

app = typer.Typer(
    help="BERTology workbench: load encoders, extract features, probe layers and heads, align spaces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = (
    "bertology.cli.core",  # models, corpus, annotate, extract
    "bertology.cli.pretrain",  # pretrain, build-corpus, tokenizer
    "bertology.cli.finetune",  # finetune
    "bertology.cli.probe",  # probe
    "bertology.cli.heads",  # heads, prune
    "bertology.cli.embeddings",  # embeddings, align
    "bertology.cli.structural",  # structural (Hewitt & Manning's structural probe)
    "bertology.cli.attribution",  # attribute
    "bertology.cli.patching",  # patch
    "bertology.cli.study",  # study run / study list, dashboard
)


@app.callback()
def _global_options(
    offline: bool = typer.Option(
        False,
        "--offline",
        help="never ask the Hugging Face hub: hub names load from its cache only (as HF_HUB_OFFLINE=1)",
    ),
) -> None:
    if offline:  # read by bertology.hub when a name is resolved, and by any process started from here
        os.environ["HF_HUB_OFFLINE"] = "1"


for _module_name in COMMAND_MODULES:
    importlib.import_module(_module_name).register(app)


def path_error_message(exc: OSError) -> str:
    """One line for an operating-system error about a path: the path, what went wrong and, where a
    file stands where a folder is needed, which file (``--output-root some_file`` and the like)."""
    path = Path(str(exc.filename)) if exc.filename is not None else None
    what = exc.strerror or type(exc).__name__
    if path is None:
        return what
    if isinstance(exc, NotADirectoryError):
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            return f"{path}: {blocker} is a file, where a folder is needed (give a folder, or a path that does not exist yet)"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: is a folder, where a file is needed"
    return f"{path}: {what}"


def main() -> None:
    """Entry point: run the app, turning workbench errors into one clear line and exit code 2."""
    from bertology.runtime import keep_freed_memory

    keep_freed_memory()  # batch jobs reuse freed pages instead of faulting in fresh ones
    try:
        app(standalone_mode=False)
    except WorkbenchError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)
    except OSError as exc:  # a path given on the command line (a file where a folder goes), or a full disk
        if not isinstance(exc, (NotADirectoryError, IsADirectoryError, PermissionError)) and not is_disk_full(exc):
            raise
        typer.secho(f"error: {path_error_message(exc)}", fg=typer.colors.RED, err=True)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # usage errors: click's, or the copy of click that typer >= 0.25 bundles
        exit_code = getattr(exc, "exit_code", None)
        if hasattr(exc, "show") and isinstance(exit_code, int):
            exc.show()
            sys.exit(exit_code)
        if type(exc).__name__ == "Abort":
            sys.exit(1)
        raise
