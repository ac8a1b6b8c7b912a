"""The ``bertology`` command line: a thin layer over the library (it parses, calls one library
function, prints). Library code never imports from here.

Each area registers its sub-commands from its own module in this package (``register(app)``).
"""

from __future__ import annotations

import errno
import importlib
import os
import sys
from pathlib import Path

import typer

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
    "bertology.cli.sweep",  # sweep run / sweep status (grids of study runs, local or on Ray)
)


@app.callback()
def _global_options(
    offline: bool = typer.Option(
        False,
        "--offline",
        help="never ask the Hugging Face hub: hub names load from its cache only (as HF_HUB_OFFLINE=1)",
    ),
    no_progress: bool = typer.Option(
        False,
        "--no-progress",
        help="no progress bars (as BERTOLOGY_PROGRESS=0; bertology.set_progress(False) in Python)",
    ),
) -> None:
    if no_progress:  # read by bertology.progress, here and in any process started from here
        os.environ["BERTOLOGY_PROGRESS"] = "0"
    if offline:  # read by bertology.hub when a name is resolved, and by any process started from here
        os.environ["HF_HUB_OFFLINE"] = "1"


for _module_name in COMMAND_MODULES:
    importlib.import_module(_module_name).register(app)


def path_error_message(exc: OSError) -> str:
    """One line for an operating-system error about a path: the path (both, for a rename), what
    went wrong and, where a file or a dangling link stands where a folder is needed, which one
    (``--output-root some_file``, ``--cache some_file`` and the like)."""
    what = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return what
    path = Path(os.fsdecode(exc.filename))
    if isinstance(exc, NotADirectoryError):
        blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            return f"{path}: {blocker} is a file, where a folder is needed (give a folder, or a path that does not exist yet)"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: is a folder, where a file is needed"
    if isinstance(exc, FileExistsError) and exc.filename2 is None:
        if path.is_symlink() and not path.exists():
            target = os.readlink(path)
            try:
                path.stat()
            except OSError as stat_error:
                if stat_error.errno == errno.ELOOP:
                    return f"{path}: a symbolic link (to {target}) in a loop of links, where a folder is needed"
            return f"{path}: a symbolic link to {target}, which does not exist, where a folder is needed"
        if path.exists() and not path.is_dir():
            return f"{path}: is a file, where a folder is needed (give a folder, or a path that does not exist yet)"
    if exc.filename2 is not None:
        return f"{path} -> {os.fsdecode(exc.filename2)}: {what}"
    return f"{path}: {what}"


def empty_argument(args: list[str]) -> str | None:
    """The message for an empty command-line value (``--out ''``: an empty path would be the
    current folder), or None when every value is non-empty."""
    for k, arg in enumerate(args):
        if arg.startswith("--") and arg.endswith("=") and len(arg) > 3:
            return f"{arg[:-1]}: an empty value; give one, or leave the option out"
        if arg == "":
            before = args[k - 1] if k > 0 else ""
            if before.startswith("-") and "=" not in before:
                return f"{before}: an empty value; give one, or leave the option out"
            return f"argument {k + 1} is empty; give a value"
    return None


def main() -> None:
    """Entry point: run the app, turning workbench errors into one clear line and exit code 2."""
    from bertology.runtime import keep_freed_memory

    keep_freed_memory()  # batch jobs reuse freed pages instead of faulting in fresh ones
    empty = empty_argument(sys.argv[1:])
    if empty is not None:
        typer.secho(f"error: {empty}", fg=typer.colors.RED, err=True)
        sys.exit(2)
    try:
        app(standalone_mode=False)
    except WorkbenchError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)
    except OSError as exc:  # a path (a file where a folder goes, a name too long, a full disk...)
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
