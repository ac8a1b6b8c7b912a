"""One direction of imports: core <- analyses <- studies <- CLI; the dashboard reads core only; no cycles.

The import graph is read from the source text: every name of every ``import`` statement, the lazy
ones inside functions included, with module names taken from pyproject.toml's package-dir mapping,
so the check sees exactly the modules the wheel installs. The benchmarks (``benchmarks/*.py``, run as
scripts) may import anything public from ``bertology`` but no ``_private`` name.

The checker is a set of functions of a root folder; the planted-violation tests run it on small
synthetic trees, so a checker that misses a kind of violation fails here.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]

# The rooms of docs/ARCHITECTURE.md: `bertology.<room>...` for these, core for every other module.
ROOMS = ("pretraining", "finetuning", "probes", "studies", "cli", "apps")
# Which rooms a module of each room may import (its own room included).
MAY_IMPORT: dict[str, frozenset[str]] = {
    "core": frozenset({"core"}),
    "pretraining": frozenset({"core", "pretraining"}),
    "finetuning": frozenset({"core", "pretraining", "finetuning"}),  # runs on pretraining's loop
    "probes": frozenset({"core", "probes"}),
    "studies": frozenset({"core", "probes", "pretraining", "finetuning", "studies"}),
    "cli": frozenset({"core", "probes", "pretraining", "finetuning", "studies", "cli"}),
    "apps": frozenset({"core", "apps"}),  # the dashboard reads result files through core
}


@dataclass(frozen=True, order=True)
class ImportedName:
    """One name one import statement brings in, as an absolute dotted name (``bertology.store.extract``
    for ``from bertology.store import extract``), with the file and line of the statement."""

    file: Path
    line: int
    name: str


@dataclass(frozen=True, order=True)
class Edge:
    """``importer`` imports (a name of) the project module ``target`` at ``file:line``."""

    importer: str
    target: str
    file: Path
    line: int


# --------------------------------------------------------------------------- reading the tree


def package_dirs(root: Path) -> dict[str, Path]:
    """``{package name: folder}`` for every package ``root/pyproject.toml`` lists."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    mapping = config["package-dir"]
    out = {}
    for package in config["packages"]:
        base = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
        out[package] = root / mapping[base] / Path(*package[len(base) :].split(".")[1:])
    return out


def module_files(root: Path) -> dict[str, Path]:
    """``{module name: file}`` for every module the wheel built from ``root`` installs."""
    files = {}
    for package, folder in package_dirs(root).items():
        for f in sorted(folder.glob("*.py")):
            files[package if f.stem == "__init__" else f"{package}.{f.stem}"] = f
    return files


def imported_names(file: Path, package: str | None = None) -> list[ImportedName]:
    """Every name of every import statement in ``file`` (anywhere: module level, functions, classes).

    ``import a.b, c`` gives ``a.b`` and ``c``; ``from a import b, c`` gives ``a.b`` and ``a.c``
    (a submodule or an attribute of ``a``: :func:`resolve` decides); ``from a import *`` gives
    ``a``. Relative imports are made absolute against ``package`` (the package the file is in).
    """
    out = []
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), filename=str(file))):
        if isinstance(node, ast.Import):
            out += [ImportedName(file, node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if package is None:
                    raise ValueError(f"{file}:{node.lineno}: a relative import outside a package")
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out += [
                ImportedName(file, node.lineno, base if alias.name == "*" else f"{base}.{alias.name}")
                for alias in node.names
            ]
    return sorted(out)


def resolve(name: str, modules: set[str] | dict[str, Path]) -> str | None:
    """The longest prefix of the dotted ``name`` that is one of ``modules`` (None: not the project's)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def project_edges(root: Path) -> list[Edge]:
    """Every import of a project module by a project module under ``root``. A module importing one
    of its own packages (``bertology.corpus.bio`` importing ``bertology``) is no edge: Python runs
    the package first anyway."""
    files = module_files(root)
    edges = set()
    for module, f in files.items():
        package = module if f.stem == "__init__" else module.rpartition(".")[0]
        for imported in imported_names(f, package):
            target = resolve(imported.name, files)
            if target and target != module and not module.startswith(target + "."):
                edges.add(Edge(module, target, f, imported.line))
    return sorted(edges)


def import_graph(edges: list[Edge], modules: set[str] | dict[str, Path]) -> dict[str, set[str]]:
    """``{module: project modules it imports}`` over every module (those importing nothing included)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for e in edges:
        graph[e.importer].add(e.target)
    return graph


# --------------------------------------------------------------------------- the rules


def room_of(module: str) -> str:
    """``bertology.probes.heads.gates`` -> ``probes``; ``bertology.store`` -> ``core``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "core"


def room_violations(edges: list[Edge], root: Path) -> list[str]:
    """``file:line: importer (room) imports target (room)`` for each edge its room may not take."""
    bad = []
    for e in edges:
        a, b = room_of(e.importer), room_of(e.target)
        if b not in MAY_IMPORT[a]:
            bad.append(f"{e.file.relative_to(root)}:{e.line}: {e.importer} ({a}) imports {e.target} ({b})")
    return bad


def is_private(dotted_name: str) -> bool:
    """A part of the name starts with ``_`` (``__dunder__`` names are public)."""
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in dotted_name.split("."))


def benchmark_violations(root: Path) -> list[str]:
    """``file:line: imports the private name X`` for each ``_private`` name a benchmark imports from
    ``bertology`` (benchmarks may import anything public, from any room)."""
    bad = []
    for f in sorted((root / "benchmarks").glob("*.py")):
        for imported in imported_names(f):
            if imported.name.split(".")[0] == "bertology" and is_private(imported.name):
                bad.append(f"{f.relative_to(root)}:{imported.line}: imports the private name {imported.name}")
    return bad


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (import cycles)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def cycle_violations(edges: list[Edge], modules: set[str] | dict[str, Path]) -> list[str]:
    return [f"import cycle: {' <-> '.join(c)}" for c in strongly_connected(import_graph(edges, modules))]


def check(root: Path) -> list[str]:
    """Every violation in the tree at ``root``: rooms, cycles, private names in benchmarks."""
    edges = project_edges(root)
    return room_violations(edges, root) + cycle_violations(edges, module_files(root)) + benchmark_violations(root)


# --------------------------------------------------------------------------- the real tree


def test_every_installed_package_is_found():
    files = module_files(ROOT)
    for expected in (
        "bertology.models",
        "bertology.store",
        "bertology.corpus",
        "bertology.corpus.conllu",
        "bertology.probes.probing.edge",
        "bertology.probes.heads.gates",
        "bertology.probes.embeddings.alignment",
        "bertology.pretraining.trainer",
        "bertology.cli",
        "bertology.studies.quickstart",
        "bertology.apps.dashboard",
    ):
        assert expected in files, expected
    # every folder with an __init__.py under a mapped root is a listed package (else the wheel misses it)
    listed = {f.parent for f in files.values()}
    for root in {ROOT / "workbench", ROOT / "probes", ROOT / "studies", ROOT / "apps"}:
        for init in root.rglob("__init__.py"):
            assert init.parent in listed, f"{init.parent} is not in pyproject's [tool.setuptools] packages"


def test_every_name_of_a_statement_is_an_edge():
    edges = {(e.importer, e.target) for e in project_edges(ROOT)}
    assert len(edges) > 100  # the graph was really read
    # runs.py: `from bertology import __version__, atomic, paths, results`; store/extraction.py:
    # `from bertology import distributed, paths`: the names after the first are edges too
    assert ("bertology.runs", "bertology.results") in edges
    assert ("bertology.store.extraction", "bertology.paths") in edges


def test_core_analyses_studies_and_cli_import_down_the_rooms():
    edges = [e for e in project_edges(ROOT) if room_of(e.importer) != "apps"]
    assert room_violations(edges, ROOT) == []


def test_apps_import_core_only():
    edges = [e for e in project_edges(ROOT) if room_of(e.importer) == "apps"]
    assert room_violations(edges, ROOT) == []


def test_benchmarks_import_public_names_only():
    assert benchmark_violations(ROOT) == []


def test_no_import_cycles():
    assert cycle_violations(project_edges(ROOT), module_files(ROOT)) == []


# --------------------------------------------------------------------------- planted violations

PYPROJECT = """
[tool.setuptools]
packages = ["bertology", "bertology.pretraining", "bertology.cli", "bertology.probes", "bertology.probes.heads",
            "bertology.studies", "bertology.apps"]

[tool.setuptools.package-dir]
"bertology" = "workbench"
"bertology.probes" = "probes"
"bertology.studies" = "studies"
"bertology.apps" = "apps"
"""

# A clean tree: every room imports what it may (lazy imports and multi-name statements included).
CLEAN_TREE = {
    "workbench/__init__.py": "def __getattr__(name):\n    from bertology import store\n    return store\n",
    "workbench/paths.py": "import os\n",
    "workbench/results.py": "from bertology import paths\n",
    "workbench/store.py": "from bertology import paths, results\nfrom . import paths as p\n",
    "workbench/pretraining/__init__.py": "from bertology.store import extract, FeatureStore\n",
    "workbench/pretraining/trainer.py": "from bertology.pretraining import masking\nimport bertology.store\n",
    "workbench/pretraining/masking.py": "",
    "workbench/cli/__init__.py": (
        "from bertology.studies import run_study\ndef probe():\n    from bertology.probes.heads import gates, stats\n"
    ),
    "probes/__init__.py": "",
    "probes/heads/__init__.py": "from .gates import HeadGates\n",
    "probes/heads/gates.py": "from bertology.store import extract\n",
    "probes/heads/stats.py": "from bertology.probes.heads import gates\nfrom bertology import paths, store\n",
    "studies/__init__.py": "from bertology.probes.heads import gates\nfrom bertology.pretraining import trainer\n",
    "apps/__init__.py": "",
    "apps/dashboard.py": "from bertology import results\ndef page():\n    from bertology.results import read_table\n",
    "benchmarks/heads.py": (
        "from common import machine_line\nfrom bertology import __version__\n"
        "from bertology.probes.heads.gates import HeadGates\nimport bertology.cli\n"
    ),
    "benchmarks/common.py": "import time\n",
}

# (file, source planted in it, the one violation expected)
PLANTED = {
    "multi-name import, the bad name second": (
        "workbench/store.py",
        "from bertology import paths, studies\n",
        "workbench/store.py:1: bertology.store (core) imports bertology.studies (studies)",
    ),
    "multi-name plain import": (
        "workbench/results.py",
        "import bertology.paths, bertology.cli\n",
        "workbench/results.py:1: bertology.results (core) imports bertology.cli (cli)",
    ),
    "relative multi-name import": (
        "workbench/store.py",
        "from . import paths, studies\n",
        "workbench/store.py:1: bertology.store (core) imports bertology.studies (studies)",
    ),
    "lazy import inside a function": (
        "workbench/paths.py",
        "import os\n\ndef home():\n    from bertology.probes.heads import gates\n",
        "workbench/paths.py:4: bertology.paths (core) imports bertology.probes.heads.gates (probes)",
    ),
    "lazy import in a method of a class": (
        "probes/heads/stats.py",
        "class A:\n    def f(self):\n        if True:\n            import bertology.studies\n",
        "probes/heads/stats.py:4: bertology.probes.heads.stats (probes) imports bertology.studies (studies)",
    ),
    "apps importing an analysis": (
        "apps/dashboard.py",
        "from bertology import results\nfrom bertology.probes.heads import gates\n",
        "apps/dashboard.py:2: bertology.apps.dashboard (apps) imports bertology.probes.heads.gates (probes)",
    ),
    "apps importing a study, lazily": (
        "apps/dashboard.py",
        "def page():\n    from bertology.studies import run_study\n",
        "apps/dashboard.py:2: bertology.apps.dashboard (apps) imports bertology.studies (studies)",
    ),
    "apps importing pretraining": (
        "apps/dashboard.py",
        "from bertology.pretraining import trainer\n",
        "apps/dashboard.py:1: bertology.apps.dashboard (apps) imports bertology.pretraining.trainer (pretraining)",
    ),
    "cli importing apps": (
        "workbench/cli/__init__.py",
        "from bertology.apps import dashboard\n",
        "workbench/cli/__init__.py:1: bertology.cli (cli) imports bertology.apps.dashboard (apps)",
    ),
    "analysis importing pretraining": (
        "probes/heads/gates.py",
        "from bertology.store import extract\nfrom bertology.pretraining import masking\n",
        "probes/heads/gates.py:2: bertology.probes.heads.gates (probes) imports bertology.pretraining.masking",
    ),
    "pretraining importing an analysis": (
        "workbench/pretraining/masking.py",
        "from bertology.probes.heads.stats import head_entropy\n",
        "bertology.pretraining.masking (pretraining) imports bertology.probes.heads.stats (probes)",
    ),
    "study importing the CLI": (
        "studies/__init__.py",
        "from bertology.probes.heads import gates\nfrom bertology import cli\n",
        "studies/__init__.py:2: bertology.studies (studies) imports bertology.cli (cli)",
    ),
    "a cycle in core": (
        "workbench/paths.py",
        "def f():\n    from bertology import store\n",
        "import cycle: bertology.paths <-> bertology.results <-> bertology.store",
    ),
    "benchmark importing a private name": (
        "benchmarks/heads.py",
        "from bertology.store import extract, _plan_shards\n",
        "benchmarks/heads.py:1: imports the private name bertology.store._plan_shards",
    ),
    "benchmark importing a private module, lazily": (
        "benchmarks/heads.py",
        "def main():\n    import bertology.probes.heads._impl\n",
        "benchmarks/heads.py:2: imports the private name bertology.probes.heads._impl",
    ),
}


def plant(root: Path, overrides: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    for name, source in {**CLEAN_TREE, **overrides}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source, encoding="utf-8")
    return root


def test_a_clean_tree_passes(tmp_path):
    root = plant(tmp_path, {})
    assert check(root) == []
    edges = {(e.importer, e.target) for e in project_edges(root)}
    # every name of the multi-name, relative and lazy statements was read
    assert {
        ("bertology.store", "bertology.paths"),
        ("bertology.store", "bertology.results"),
        ("bertology.cli", "bertology.probes.heads.gates"),
        ("bertology.cli", "bertology.probes.heads.stats"),
        ("bertology", "bertology.store"),
        ("bertology.probes.heads", "bertology.probes.heads.gates"),
        ("bertology.apps.dashboard", "bertology.results"),
    } <= edges


@pytest.mark.parametrize("kind", PLANTED)
def test_a_planted_violation_is_reported(tmp_path, kind):
    file, source, expected = PLANTED[kind]
    found = check(plant(tmp_path, {file: source}))
    assert any(expected in line for line in found), found
    # nothing else, except the cycle an upward import closes with the tree's downward imports
    assert all(expected in line or line.startswith("import cycle:") for line in found), found


def test_a_cycle_is_reported():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
