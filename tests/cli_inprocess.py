"""``bertology ARGS`` run inside the test process: ``bertology.cli.main`` (what the console script
calls, with its error handling: one ``error:`` line and exit code 2) under ``sys.argv``, its output
captured, returned as a ``subprocess.CompletedProcess``. A fresh ``python -m bertology.cli`` pays
3-5 s of imports (torch, transformers) per call; the console-script path itself keeps its own
subprocess tests (test_cli_core; test_hostile_round3's dashboard signals; test_pretrain_cli's
``python -m bertology.pretraining``; the torchrun tests)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import pytest


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Exit code, stdout and stderr of ``bertology ARGS``. An exception that ``main`` lets through
    (a traceback in a real process) fails the calling test with that exception. The process-wide
    state a command may change (torch's thread count, the environment) is restored afterwards."""
    import torch

    from bertology.cli import main

    out, err = io.StringIO(), io.StringIO()
    threads = torch.get_num_threads()
    code: int = 0
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        mp.setattr(sys, "argv", ["bertology", *args])
        for key, value in (env or {}).items():
            mp.setenv(key, value)
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            torch.set_num_threads(threads)
    return subprocess.CompletedProcess(["bertology", *args], code, out.getvalue(), err.getvalue())
