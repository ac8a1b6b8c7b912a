"""BERTology workbench: load BERT-family encoders, extract every layer into a feature store, and
analyse layers and heads. The three-line notebook API::

    from bertology import load_corpus, load_model, extract
    store = extract(load_model("minilm-l6"), load_corpus("brown-sample", limit=500))
    X = store.layer(4)          # [n_words, dim]
"""

from __future__ import annotations

try:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _version

    __version__ = _version("bertology-workbench")
except PackageNotFoundError:  # running from files that were never installed
    __version__ = "0+unknown"
__all__ = ["load_corpus", "load_model", "extract", "FeatureStore", "set_progress"]


def __getattr__(name: str):
    # lazy, so `import bertology` (and the CLI's help) does not pay for torch/transformers
    if name == "load_corpus":
        from bertology.corpus import load_corpus

        return load_corpus
    if name == "load_model":
        from bertology.models import load_model

        return load_model
    if name == "set_progress":
        from bertology.progress import set_progress

        return set_progress
    if name in ("extract", "FeatureStore"):
        from bertology import store

        return getattr(store, name)
    raise AttributeError(f"module 'bertology' has no attribute {name!r}")
