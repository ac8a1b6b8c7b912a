"""The head analyses as one function per result table, for notebooks: each takes a feature store
extracted with attentions and its corpus and returns the DataFrame the ``head_types`` study writes
under the same name, with the papers' definitions as defaults (keyword options as in
:func:`bertology.probes.heads.classification.analyse_store`).

    >>> store = extract(load_model("minilm-l6"), corpus, attentions=True)
    >>> head_types(store, corpus)          # one row per head: layer, head, type, ...
    >>> best_head_per_relation(store, corpus)
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from bertology.probes.heads.classification import analyse_store, held_out_best_heads

__all__ = ["head_types", "head_stats", "head_dependency", "best_head_per_relation"]


def head_types(store: Any, corpus: Any, **options: Any) -> pd.DataFrame:
    """Each head's type (Voita et al. 2019; Clark et al. 2019): ``layer, head, type, types,
    positional_offset, positional_share, ...`` (the study's ``head_types`` table)."""
    return analyse_store(store, corpus, **options)["head_types"]


def head_stats(store: Any, corpus: Any, **options: Any) -> pd.DataFrame:
    """The statistics the types are read from, long: ``layer, head, statistic, value, n`` (argmax
    offsets at token and word level, entropy, confidence, rare words, special tokens)."""
    return analyse_store(store, corpus, **options)["head_stats"]


def head_dependency(store: Any, corpus: Any, **options: Any) -> pd.DataFrame:
    """Per head, relation and direction, how often the head's attention argmax is the syntactic
    head or dependent (Clark et al. 2019): ``layer, head, relation, direction, n, correct,
    accuracy, baseline_offset, baseline_accuracy, gain``; empty without dependencies."""
    return analyse_store(store, corpus, **options)["head_dependency"]


def best_head_per_relation(
    store: Any, corpus: Any, *, dev_share: float = 0.5, seed: int = 0, min_count: int = 20, exclude_self: bool = True
) -> pd.DataFrame:
    """The best head per relation and direction chosen on a dev share of the sentences and reported
    on the rest with intervals and a paired test against the best fixed offset (the study's
    ``head_best`` table; :func:`~bertology.probes.heads.classification.held_out_best_heads`)."""
    n = len(corpus)
    return held_out_best_heads(
        (store.attention(i, normalise=False) for i in range(n)),
        list(corpus),
        dev_share=dev_share,
        seed=seed,
        min_count=min_count,
        exclude_self=exclude_self,
    )
