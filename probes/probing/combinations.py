"""The BERT paper's feature-based comparison (Devlin et al. 2019, Table 7): which layers to feed a probe.

Each combination turns the store's word vectors ``[n_layers, n_words, dim]`` (index 0 =
embeddings) into one matrix ``[n_words, dim']`` ready for a probe (the ``feature_combinations``
analysis, :func:`bertology.probes.probing.analysis.feature_combinations_analysis`).
"""

from __future__ import annotations

import numpy as np

from bertology.errors import ConfigError
from bertology.store import FeatureStore

# name -> (layers relative to the number of transformer layers L, how to combine them)
COMBINATIONS: dict[str, str] = {
    "first_layer": "embeddings (layer 0)",
    "last_hidden": "last layer L",
    "sum_all": "sum of layers 1..L",
    "second_to_last": "layer L-1",
    "sum_last_four": "sum of layers L-3..L",
    "concat_last_four": "concatenation of layers L-3..L (4·dim)",
}


def combination_layers(name: str, n_layers: int) -> list[int]:
    """Store layer indices a combination reads (``n_layers`` includes the embeddings)."""
    L = n_layers - 1
    table = {
        "first_layer": [0],
        "last_hidden": [L],
        "sum_all": list(range(1, L + 1)),
        "second_to_last": [L - 1],
        "sum_last_four": list(range(max(1, L - 3), L + 1)),
        "concat_last_four": list(range(max(1, L - 3), L + 1)),
    }
    if name not in table:
        raise ConfigError(f"unknown feature combination {name!r}; choose from {', '.join(COMBINATIONS)}")
    return table[name]


def combine_layers(layers: np.ndarray, name: str) -> np.ndarray:
    """Apply a combination to ``layers [n_layers, n_words, dim]`` → ``[n_words, dim']``."""
    picked = layers[combination_layers(name, layers.shape[0])]
    if name == "concat_last_four":
        return np.concatenate(list(picked), axis=-1)
    return picked.sum(axis=0) if len(picked) > 1 else picked[0].copy()


def combine(store: FeatureStore, name: str) -> np.ndarray:
    """One combination's word vectors ``[n_words, dim']`` read from a store."""
    idx = combination_layers(name, store.n_layers)
    picked = store.layers(idx)
    if name == "concat_last_four":
        return np.concatenate(list(picked), axis=-1)
    return picked.sum(axis=0) if len(picked) > 1 else picked[0]


def all_combinations(store: FeatureStore) -> dict[str, np.ndarray]:
    """Every combination at once, reading the store once: ``{name: [n_words, dim']}``."""
    layers = store.layers()
    return {name: combine_layers(layers, name) for name in COMBINATIONS}


__all__ = ["COMBINATIONS", "combination_layers", "combine_layers", "combine", "all_combinations"]
