"""BERTology workbench: load BERT-family encoders, extract every layer into a feature store, and
analyse layers and heads. The three-line notebook API::

    from workbench import load_corpus, load_model, extract
    store = extract(load_model("minilm-l6"), load_corpus("brown-sample", limit=500))
    X = store.layer(4)          # [n_words, dim]
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["load_corpus", "load_model", "extract", "FeatureStore"]


def __getattr__(name: str):
    # lazy, so `import workbench` (and the CLI's help) does not pay for torch/transformers
    if name == "load_corpus":
        from workbench.corpus import load_corpus

        return load_corpus
    if name == "load_model":
        from workbench.models import load_model

        return load_model
    if name in ("extract", "FeatureStore"):
        from workbench import store

        return getattr(store, name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
