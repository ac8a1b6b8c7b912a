"""The package as installed: every declared dependency is used, shipped data and configs are found
through the package (not the checkout), and the version knows its commit."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
LIBRARY_FOLDERS = ("workbench", "probes", "studies", "apps")  # the folders mapped into `bertology`

IMPORT_NAMES = {"scikit-learn": "sklearn", "pyyaml": "yaml", "umap-learn": "umap"}
# used without an import statement of their own
INDIRECT = {"pyarrow": "pandas' parquet engine (DataFrame.to_parquet / read_parquet)"}


def test_every_declared_dependency_is_imported_by_the_library():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    text = "\n".join(f.read_text(encoding="utf-8") for folder in LIBRARY_FOLDERS for f in (ROOT / folder).rglob("*.py"))
    unused = []
    for dep in deps:
        name = re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0].lower()
        if name in INDIRECT:
            continue
        module = IMPORT_NAMES.get(name, name.replace("-", "_"))
        if not re.search(rf"^\s*(import|from) {module}\b", text, flags=re.M):
            unused.append(name)
    assert unused == []


def test_shipped_files_come_from_the_package():
    from bertology.paths import package_data
    from bertology.pretraining import shipped_configs
    from bertology.studies import config_dir, default_config_file

    assert (package_data() / "brown_sample.conllu").is_file()
    assert shipped_configs()["default"].is_file()
    assert default_config_file("quickstart").parent == config_dir()
    assert default_config_file("head_types", "quickstart").is_file()
    # every study the quickstart and the tour run has its shipped config at their sizes
    from bertology.studies import list_studies, load_study

    for main in ("quickstart", "tour"):
        cfg = load_study(main).DEFAULTS
        for name in cfg["studies"] + cfg["second_model_studies"]:
            assert name in list_studies() and default_config_file(name, cfg["configs"]).is_file(), (main, name)
    from importlib import resources

    assert (resources.files("bertology.apps") / "dashboard.py").is_file()


def test_version_and_commit_are_recorded():
    import bertology
    from bertology.results import git_commit

    assert bertology.__version__ and bertology.__version__ != "0+unknown"
    commit = git_commit()
    assert commit is None or re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?", commit)


def test_notebook_objects_have_short_reprs():
    """A model, a corpus, a store, vectors and an alignment print as one line each (issue 27.6)."""
    import numpy as np

    from bertology.corpus import Corpus, Sentence
    from bertology.models import LoadedModel
    from bertology.probes.embeddings.alignment import align
    from bertology.probes.embeddings.static_vectors import StaticVectors
    from bertology.testing import tiny_model, tiny_tokenizer

    model = tiny_model("bert")
    lm = LoadedModel("tiny", None, model, tiny_tokenizer("bert"), model.config, "0123456789abcdef", False)
    corpus = Corpus("c", [Sentence("s1", ["a", "b"])], {"upos": "gold: planted"})
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(50)]
    a = StaticVectors(words, rng.normal(size=(50, 8)), "a")
    result = align(a, a, [(w, w) for w in words])
    for obj in (lm, corpus, a, result):
        text = repr(obj)
        assert "\n" not in text and len(text) < 200, text
    assert repr(corpus) == "Corpus('c': 1 sentences, 2 words; upos gold)"
    assert "2 layers" in repr(lm) or "layers" in repr(lm)
