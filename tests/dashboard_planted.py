"""Small hand-made result runs for the dashboard tests: known tables (so a page can be checked
against planted numbers), a word written as markup, and helpers to break a run on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bertology.results import write_results

MARKUP = "<b>x</b>"
ESCAPED = "&lt;b&gt;x&lt;/b&gt;"
# layer x head -> type (2 layers, 3 heads)
PLANTED_TYPES = {(0, 0): "positional", (0, 1): "broad", (0, 2): "special",
                 (1, 0): "syntactic", (1, 1): "positional", (1, 2): "other"}


def head_types_run(root: Path, run_id: str = "planted", model: str = "planted-bert",
                   types: dict[tuple[int, int], str] | None = None) -> Path:
    """A head_types run: 2 layers x 3 heads of known types; layer 1 head 0 tracks ``nsubj`` with
    accuracy 0.9 against a 0.4 offset baseline; one example sentence holds the word ``<b>x</b>``."""
    types = types or PLANTED_TYPES
    rows = [{"layer": l, "head": h, "type": t, "types": t, "positional_offset": -1, "positional_share": 0.95 if
             t == "positional" else 0.1, "entropy_norm": 0.5, "special_share": 0.1, "syntactic_gain": 0.5 if
             t == "syntactic" else 0.0} for (l, h), t in sorted(types.items())]
    stats = []
    for (l, h) in types:
        for k in range(-2, 3):
            stats.append({"layer": l, "head": h, "statistic": f"token_offset_{k}", "value": 0.95 if k == -1 else
                          0.0125, "n": 80})
        stats.append({"layer": l, "head": h, "statistic": "token_offset_other", "value": 0.0, "n": 80})
    deps = []
    for (l, h) in types:
        for relation, acc in (("nsubj", 0.9 if (l, h) == (1, 0) else 0.2), ("amod", 0.3)):
            deps.append({"layer": l, "head": h, "relation": relation, "direction": "dependent_attends_to_head",
                         "n": 40, "correct": int(40 * acc), "accuracy": acc, "baseline_offset": 1,
                         "baseline_accuracy": 0.4, "gain": acc - 0.4})
    words = ["the", MARKUP, "barked", "loudly", "at", "night"]
    rng = np.random.default_rng(0)
    att = rng.random((2, 3, len(words), len(words)))
    att /= att.sum(-1, keepdims=True)
    probe = pd.DataFrame({"method": ["best_offset", "best_head"], "layer": [np.nan, 1.0], "head": [np.nan, 0.0],
                          "offset": [1.0, np.nan], "n_train": [100, 100], "n_test": [20, 20], "uas": [0.3, 0.5],
                          "seed": [0, 0]})
    return write_results(root / "head_types" / run_id,
                         {"head_types": pd.DataFrame(rows), "head_stats": pd.DataFrame(stats),
                          "head_dependency": pd.DataFrame(deps), "attention_probe": probe},
                         {"study": "head_types", "run_id": run_id, "seed": 0, "model": {"name": model},
                          "config": {"min_count": 20}},
                         extras={"attention_examples": {"sentences": [{"sent_id": "s1", "words": words,
                                                                        "attention": att.round(4).tolist()}]}})


def probing_run(root: Path, run_id: str, model: str, scale: float = 1.0) -> Path:
    """An edge_probing run: accuracy ``scale * (0.5 + 0.1 * layer)`` for task pos, layers 0..2, two seeds."""
    rows = [{"task": "pos", "layer": l, "metric": "accuracy", "value": scale * (0.5 + 0.1 * l), "seed": s,
             "split": "test", "mode": "per_layer", "control": False} for l in range(3) for s in (0, 1)]
    return write_results(root / "edge_probing" / run_id, {"layer_scores": pd.DataFrame(rows)},
                         {"study": "edge_probing", "run_id": run_id, "seed": 0, "model": {"name": model}})


def contextuality_run(root: Path, run_id: str, model: str, shift: float = 0.0) -> Path:
    """A contextuality run with three measures over layers 0..2, sense clusters of the word ``<b>x</b>``
    and a neighbours table holding it."""
    rows = [{"layer": l, "metric": m, "raw": 0.6 - 0.1 * l + shift, "baseline": 0.2, "adjusted": 0.4 - 0.1 * l + shift}
            for m in ("self_similarity", "intra_sentence_similarity", "mev") for l in range(3)]
    clusters = pd.DataFrame({"x": [0.0, 1.0, 2.0, 3.0], "y": [1.0, 0.0, 1.0, 0.0], "position": [1, 7, 12, 20],
                             "sentence": [0, 1, 2, 3], "context": [f"a {MARKUP} b"] * 4, "cluster": [0, 0, 1, 1],
                             "word": [MARKUP] * 4, "layer": [2] * 4})
    neighbours = pd.DataFrame({"word": [MARKUP], "static_space": ["input embeddings"], "neighbour": [MARKUP]})
    return write_results(root / "contextuality" / run_id,
                         {"contextuality": pd.DataFrame(rows), "sense_clusters": clusters, "neighbours": neighbours},
                         {"study": "contextuality", "run_id": run_id, "seed": 0, "model": {"name": model}})


def write_manifest(run: Path, content: str) -> None:
    """Replace a run's manifest with raw JSON text (``null``, ``[]``, ``"text"``...)."""
    (run / "manifest.json").write_text(content)


def write_json(run: Path, name: str, obj) -> None:
    (run / f"{name}.json").write_text(json.dumps(obj))
