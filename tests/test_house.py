"""House rules over the tracked source: no function spans more than 100 lines of code.

A function's span runs from its first statement after the docstring to the end of its last
statement (decorators, signature and docstring are not counted; nested functions count towards the
function that holds them, and are measured on their own too). Split a long function along its seams
(phases as named steps, a CLI module's commands as top-level functions) instead of raising the limit.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("workbench", "probes", "studies", "apps", "scripts", "benchmarks", "examples")
MAX_SPAN = 100

Function = ast.FunctionDef | ast.AsyncFunctionDef


def function_spans(source: str) -> list[tuple[str, int, int]]:
    """Every function (and method, nested ones too) in `source` as (qualified name, first line, span).

    The span counts lines from the first statement after the docstring to the last line of the
    last statement; a function whose body is only a docstring spans 0 lines.
    """
    spans: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                body = child.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    if isinstance(body[0].value.value, str):
                        body = body[1:]
                span = (body[-1].end_lineno or body[-1].lineno) - body[0].lineno + 1 if body else 0
                spans.append((name, child.lineno, span))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return spans


def tracked_python_files() -> list[Path]:
    """The tracked .py files under the source folders (git's list; a checkout without git: a walk)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--", *SOURCE_DIRS], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        files = [ROOT / line for line in out.splitlines() if line.endswith(".py")]
    except (OSError, subprocess.CalledProcessError):
        files = []
    if not files:
        files = [p for d in SOURCE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if p.is_file()]


def test_span_counts_from_first_statement_after_docstring_to_last() -> None:
    source = '''
def short():
    """Doc
    string."""
    a = 1
    return (a,
            2)


class K:
    def method(self):
        x = 1

        def inner():
            pass
        return x


def only_doc():
    """Nothing else."""
'''
    spans = {name: span for name, _, span in function_spans(source)}
    assert spans == {"short": 3, "K.method": 5, "K.method.inner": 1, "only_doc": 0}


def test_no_function_spans_more_than_100_lines() -> None:
    files = tracked_python_files()
    assert len(files) > 50, f"found only {len(files)} source files under {SOURCE_DIRS}"
    too_long = [
        f"{path.relative_to(ROOT)}:{line} {name} spans {span} lines"
        for path in files
        for name, line, span in function_spans(path.read_text(encoding="utf-8"))
        if span > MAX_SPAN
    ]
    if too_long:
        pytest.fail(
            f"{len(too_long)} function(s) over {MAX_SPAN} lines of code (split along their seams):\n"
            + "\n".join(too_long)
        )
