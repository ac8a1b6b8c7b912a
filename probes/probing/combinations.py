"""The BERT paper's feature-based comparison (Devlin et al. 2019, Table 7): which layers to feed a probe.

Each combination turns the store's word vectors ``[n_layers, n_words, dim]`` (index 0 =
embeddings) into one matrix ``[n_words, dim']`` ready for a probe (the ``feature_combinations``
analysis, :func:`bertology.probes.probing.analysis.feature_combinations_analysis`, which probes a
:class:`CombinedView`: the combination computed shard by shard, never the whole corpus at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from bertology.errors import ConfigError
from bertology.store import FeatureStore
from bertology.store.read import LayerView

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


def _combine_picked(picked: np.ndarray, name: str) -> np.ndarray:
    """A combination of its own layers ``picked [len(combination_layers), W, dim]`` -> ``[W, dim']``
    (the same arithmetic whether ``W`` is the corpus or one shard's words)."""
    if name == "concat_last_four":
        return np.concatenate(list(picked), axis=-1)
    return picked.sum(axis=0) if len(picked) > 1 else picked[0].copy()


def combine_layers(layers: np.ndarray, name: str) -> np.ndarray:
    """Apply a combination to ``layers [n_layers, n_words, dim]`` → ``[n_words, dim']``."""
    return _combine_picked(layers[combination_layers(name, layers.shape[0])], name)


def combine(store: FeatureStore, name: str) -> np.ndarray:
    """One combination's word vectors ``[n_words, dim']`` read from a store (all in memory; probes
    read :class:`CombinedView` instead)."""
    return _combine_picked(store.layers(combination_layers(name, store.n_layers)), name)


class CombinedView(LayerView):
    """One combination of a store's layers as a one-layer view ``[1, n_words, dim']``, computed
    shard by shard when read (:meth:`shard`): span probes gather from it as from a
    :class:`~bertology.store.read.LayerView`, so no combination of the whole corpus is ever in
    memory. ``layer_ids``: the store layers it combines."""

    def __init__(self, store: FeatureStore, name: str):
        super().__init__(store, combination_layers(name, store.n_layers))
        self.name = name
        width = len(self.layer_ids) if name == "concat_last_four" else 1
        self.shape = (1, int(store.n_words), int(store.dim) * width)

    def __len__(self) -> int:
        return 1

    def __getitem__(self, j: int) -> np.ndarray:
        if j not in (0, -1):
            raise IndexError(f"a combination has one layer, not {j}")
        return combine(self.store, self.name)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = combine(self.store, self.name)[None]
        return out if dtype is None else out.astype(dtype)

    def rows(self, j: int, words: np.ndarray) -> np.ndarray:
        """The combined vectors of flat word indices ``words`` ``[len(words), dim']``, shard by shard."""
        if j not in (0, -1):
            raise IndexError(f"a combination has one layer, not {j}")
        return self.rows_from_shards(0, words)

    def shard(
        self,
        k: int,
        which: Sequence[int] | None = None,
        out: np.ndarray | None = None,
        words: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """Shard ``k``'s combined word vectors ``[1, words_k, dim']`` (``words=(start, stop)``: of its
        words ``start:stop``), computed into a fresh array (``out`` is not used)."""
        if which is not None and list(which) not in ([0], [-1]):
            raise IndexError(f"a combination has one layer, not {list(which)}")
        return _combine_picked(self.store.shard_hidden(k, self.layer_ids, words=words), self.name)[None]


def all_combinations(store: FeatureStore) -> dict[str, np.ndarray]:
    """Every combination at once, reading the store once: ``{name: [n_words, dim']}``."""
    layers = store.layers()
    return {name: combine_layers(layers, name) for name in COMBINATIONS}


__all__ = ["COMBINATIONS", "CombinedView", "combination_layers", "combine_layers", "combine", "all_combinations"]
