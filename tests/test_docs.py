"""The docs describe the code as it is: docs/ARCHITECTURE.md names every module, and every relative
link in the README and docs/ points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ["workbench", "probes", "studies", "apps", "benchmarks"]


def modules(root: Path) -> list[Path]:
    """Every Python module of the rooms, without package markers (``__init__``, ``__main__``)."""
    return sorted(
        p
        for room in ROOMS
        for p in (root / room).rglob("*.py")
        if not p.name.startswith("__") and "data" not in p.relative_to(root).parts
    )


def unnamed_modules(root: Path, architecture: str) -> list[str]:
    """Modules whose name never appears in backticks in ``architecture``."""
    named = set(re.findall(r"`([A-Za-z_][\w.]*)`", architecture))
    named |= {n.rsplit(".", 1)[-1] for n in named}
    return [str(p.relative_to(root)) for p in modules(root) if p.stem not in named]


def test_architecture_names_every_module():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert len(modules(ROOT)) > 80  # the tree was really walked
    assert unnamed_modules(ROOT, text) == []


def test_a_module_missing_from_the_docs_is_found(tmp_path):
    (tmp_path / "workbench" / "store").mkdir(parents=True)
    for name in ("paths.py", "store/read.py", "store/__init__.py", "store/newthing.py"):
        (tmp_path / "workbench" / name).write_text("")
    assert unnamed_modules(tmp_path, "`paths`, `store` (`read`)") == ["workbench/store/newthing.py"]


@pytest.mark.parametrize("doc", ["README.md", *[f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")]])
def test_relative_links_point_at_files(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = [t for t in targets if "://" not in t and not (ROOT / doc).parent.joinpath(t).exists()]
    assert missing == [], f"{doc} links to missing files: {missing}"
