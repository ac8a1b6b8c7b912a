"""One direction of imports: core <- analyses <- studies <- CLI and dashboard, and no cycles.

The import graph is read from the source text (every ``import`` statement, including the lazy ones
inside functions), with module names taken from pyproject.toml's package-dir mapping, so the check
sees exactly the modules the wheel installs.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Layer of each module prefix, lowest first. A module may import its own layer and the ones below.
LAYERS = {
    "core": 0,          # bertology.<module>: models, corpus, store, runs, results, architectures, ...
    "pretraining": 1,   # bertology.pretraining
    "probes": 1,        # bertology.probes (the analyses)
    "studies": 2,       # bertology.studies
    "cli": 3,           # bertology.cli
    "apps": 3,          # bertology.apps (the dashboard reads result files through bertology.results)
}
# Siblings of one layer that must not import each other.
SEPARATE = {("probes", "pretraining"), ("pretraining", "probes"), ("cli", "apps"), ("apps", "cli")}


def _package_dirs() -> dict[str, Path]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    mapping = config["package-dir"]
    out = {}
    for package in config["packages"]:
        base = max((p for p in mapping if package == p or package.startswith(p + ".")), key=len)
        out[package] = ROOT / mapping[base] / Path(*package[len(base):].split(".")[1:])
    return out


def module_files() -> dict[str, Path]:
    """``{module name: file}`` for every module the wheel installs."""
    files = {}
    for package, folder in _package_dirs().items():
        for f in sorted(folder.glob("*.py")):
            files[package if f.stem == "__init__" else f"{package}.{f.stem}"] = f
    return files


def import_graph() -> dict[str, set[str]]:
    """``{module: modules of the project it imports}`` (resolved to the longest known module)."""
    files = module_files()
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, f in files.items():
        package = module if f.stem == "__init__" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for t in targets:
                while t and t not in files:
                    t = t.rpartition(".")[0]
                if t and t != module and not module.startswith(t + "."):  # importing its own package is fine
                    graph[module].add(t)
                    break
    return graph


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in LAYERS:
        return parts[1]
    return "core"


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
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, imported in sorted(graph.items()):
        a = layer_of(module)
        for target in sorted(imported):
            b = layer_of(target)
            if LAYERS[b] > LAYERS[a] or (a, b) in SEPARATE:
                bad.append(f"{module} ({a}) imports {target} ({b})")
    return bad


def test_every_installed_package_is_found():
    files = module_files()
    for expected in ("bertology.models", "bertology.store", "bertology.probes.probing.edge",
                     "bertology.probes.heads.gates", "bertology.probes.embeddings.alignment",
                     "bertology.pretraining.trainer", "bertology.cli", "bertology.studies.quickstart",
                     "bertology.apps.dashboard"):
        assert expected in files, expected
    # every folder with an __init__.py under a mapped root is a listed package (else the wheel misses it)
    listed = {f.parent for f in files.values()}
    for root in {ROOT / "workbench", ROOT / "probes", ROOT / "studies", ROOT / "apps"}:
        for init in root.rglob("__init__.py"):
            assert init.parent in listed, f"{init.parent} is not in pyproject's [tool.setuptools] packages"


def test_imports_point_down_the_layers():
    graph = import_graph()
    assert sum(len(v) for v in graph.values()) > 50  # the graph was really read
    assert violations(graph) == []


def test_no_import_cycles():
    assert strongly_connected(import_graph()) == []


@pytest.mark.parametrize("edge, expected", [
    ({"bertology.store": {"bertology.probes.heads.gates"}}, "bertology.store (core) imports bertology.probes"),
    ({"bertology.probes.heads.stats": {"bertology.cli.heads"}}, "(probes) imports bertology.cli.heads (cli)"),
    ({"bertology.probes.probing.edge": {"bertology.pretraining.trainer"}}, "(probes) imports"),
])
def test_a_wrong_direction_is_reported(edge, expected):
    graph = {m: set() for m in ("bertology.store", "bertology.probes.heads.gates", "bertology.cli.heads",
                                "bertology.probes.heads.stats", "bertology.probes.probing.edge",
                                "bertology.pretraining.trainer")}
    for k, v in edge.items():
        graph[k] |= v
    assert any(expected in line for line in violations(graph))


def test_a_cycle_is_reported():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]
