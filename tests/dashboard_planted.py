"""Small hand-made result runs for the dashboard tests: known tables (so a page can be checked
against planted numbers) for every study a page shows, a word written as markup, the titles the
pages must show (literal, not read from the registry), and helpers to break a run on purpose."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from bertology import results
from bertology.numbering import NUMBERING


def write_results(run_dir: Path, tables: dict, manifest: dict, extras: dict | None = None) -> Path:
    """:func:`bertology.results.write_results` with the manifest's ``numbering`` (layers and heads
    from 1) as every run of this version writes it, unless the manifest says otherwise."""
    return results.write_results(run_dir, tables, {"numbering": NUMBERING, **manifest}, extras)


# The pages in sidebar order and the header each must show: written out here so that a wrong
# registry entry fails the tests instead of being compared with itself.
PAGE_TITLES = {
    "Runs": "Runs",
    "Live": "Live: any sentence through any model",
    "Probing": "Edge probing (Tenney et al. 2019)",
    "Feature combinations": "Feature-based combinations (Devlin et al. 2019, Table 7)",
    "Structural probe": "Structural probe (Hewitt & Manning 2019)",
    "Heads": "Attention heads (Voita et al. 2019, Clark et al. 2019)",
    "Pruning": "Head importance and pruning (Michel et al. 2019, Voita et al. 2019)",
    "Patching": "Activation patching: where number is carried",
    "Embeddings": "Static vs contextual embeddings (Ethayarajh 2019)",
    "Alignment": "Rotation alignment (Procrustes, self-learning, CSLS)",
    "Semantic change": "Semantic change between slices of documents",
    "Pretraining": "Pretraining and emergence",
    "Fine-tuning": "Fine-tuning and what it changes",
    "Compression": "Compressing a fine-tuned model: head pruning and quantization",
    "Compare runs": "Compare two runs",
    "Sweeps": "Sweeps: a grid of study runs",
}
# A phrase each page's "what am I looking at" line must hold (the papers it cites).
INTRO_PHRASES = {
    "Runs": "newest first",
    "Live": "Abnar & Zuidema 2020",
    "Probing": "Hewitt & Liang 2019",
    "Feature combinations": "Devlin et al. 2019",
    "Structural probe": "*A Structural Probe for Finding Syntax in Word Representations*",
    "Heads": "*What Does BERT Look At?*",
    "Pruning": "*Are Sixteen Heads Really Better than One?*",
    "Patching": "Vig et al. 2020",
    "Embeddings": "Ethayarajh 2019",
    "Alignment": "Conneau et al. 2018",
    "Pretraining": "masked-language-model",
    "Semantic change": "Hamilton et al. 2016",
    "Fine-tuning": "Kornblith et al. 2019",
    "Compression": "post-training quantization",
    "Compare runs": "side by side",
    "Sweeps": "bertology sweep run",
}
# The study whose runs each page shows, and that study's main table (what "Compare runs" puts side by side).
PAGE_STUDIES = {
    "Probing": ("edge_probing", "layer_scores"),
    "Feature combinations": ("feature_combinations", "combinations"),
    "Structural probe": ("structural_probe", "layer_intervals"),
    "Heads": ("head_types", "head_types"),
    "Pruning": ("pruning", "pruning_curves"),
    "Patching": ("patching", "head_effects"),
    "Embeddings": ("contextuality", "contextuality"),
    "Alignment": ("alignment", "precision"),
    "Pretraining": ("emergence", "probe_scores"),
    "Semantic change": ("semantic_change", "word_change"),
    "Fine-tuning": ("finetuning", "finetune_scores"),
    "Compression": ("compression", "pruning_curves"),
}

MARKUP = "<b>x</b>"
ESCAPED = "&lt;b&gt;x&lt;/b&gt;"
# (layer, head) -> type (2 layers, 3 heads; numbered from 1 as the tables are)
PLANTED_TYPES = {
    (1, 1): "positional",
    (1, 2): "broad",
    (1, 3): "special",
    (2, 1): "syntactic",
    (2, 2): "positional",
    (2, 3): "other",
}


def head_types_run(
    root: Path, run_id: str = "planted", model: str = "planted-bert", types: dict[tuple[int, int], str] | None = None
) -> Path:
    """A head_types run: 2 layers x 3 heads of known types; layer 2 head 1 tracks ``nsubj`` with
    accuracy 0.9 against a 0.4 offset baseline; one example sentence holds the word ``<b>x</b>``."""
    types = types or PLANTED_TYPES
    rows = [
        {
            "layer": l,
            "head": h,
            "type": t,
            "types": t,
            "positional_offset": -1,
            "positional_share": 0.95 if t == "positional" else 0.1,
            "entropy_norm": 0.5,
            "special_share": 0.1,
            "syntactic_gain": 0.5 if t == "syntactic" else 0.0,
        }
        for (l, h), t in sorted(types.items())
    ]
    stats = []
    for l, h in types:
        for k in range(-2, 3):
            stats.append(
                {"layer": l, "head": h, "statistic": f"token_offset_{k}", "value": 0.95 if k == -1 else 0.0125, "n": 80}
            )
        stats.append({"layer": l, "head": h, "statistic": "token_offset_other", "value": 0.0, "n": 80})
    deps = []
    for l, h in types:
        for relation, acc in (("nsubj", 0.9 if (l, h) == (2, 1) else 0.2), ("amod", 0.3)):
            deps.append(
                {
                    "layer": l,
                    "head": h,
                    "relation": relation,
                    "direction": "dependent_attends_to_head",
                    "n": 40,
                    "correct": int(40 * acc),
                    "accuracy": acc,
                    "baseline_offset": 1,
                    "baseline_accuracy": 0.4,
                    "gain": acc - 0.4,
                }
            )
    words = ["the", MARKUP, "barked", "loudly", "at", "night"]
    rng = np.random.default_rng(0)
    att = rng.random((2, 3, len(words), len(words)))
    att /= att.sum(-1, keepdims=True)
    probe = pd.DataFrame(
        {
            "method": ["best_offset", "best_head"],
            "layer": [np.nan, 2.0],
            "head": [np.nan, 1.0],
            "offset": [1.0, np.nan],
            "n_train": [100, 100],
            "n_test": [20, 20],
            "uas": [0.3, 0.5],
            "seed": [0, 0],
        }
    )
    return write_results(
        root / "head_types" / run_id,
        {
            "head_types": pd.DataFrame(rows),
            "head_stats": pd.DataFrame(stats),
            "head_dependency": pd.DataFrame(deps),
            "attention_probe": probe,
        },
        {"study": "head_types", "run_id": run_id, "seed": 0, "model": {"name": model}, "config": {"min_count": 20}},
        extras={
            "attention_examples": {"sentences": [{"sent_id": "s1", "words": words, "attention": att.round(4).tolist()}]}
        },
    )


def probing_run(root: Path, run_id: str, model: str, scale: float = 1.0, config: dict | None = None) -> Path:
    """An edge_probing run: accuracy ``scale * (0.5 + 0.1 * layer)`` for task pos, layers 0..2, two
    seeds, and its summary (best layer 2); ``config`` goes into its manifest."""
    rows = [
        {
            "task": "pos",
            "layer": l,
            "metric": "accuracy",
            "value": scale * (0.5 + 0.1 * l),
            "seed": s,
            "split": "test",
            "mode": "per_layer",
            "control": False,
        }
        for l in range(3)
        for s in (0, 1)
    ]
    summary = pd.DataFrame(
        {"task": ["pos"], "best_layer": [2], "best_layer_score": [scale * 0.7], "best_layer_ci95": [0.0]}
    )
    return write_results(
        root / "edge_probing" / run_id,
        {"layer_scores": pd.DataFrame(rows), "summary": summary},
        {
            "study": "edge_probing",
            "run_id": run_id,
            "seed": 0,
            "model": {"name": model},
            "config": {"model": model, "probe": "mlp", "corpus": "brown-sample", **(config or {})},
        },
    )


def contextuality_run(root: Path, run_id: str, model: str, shift: float = 0.0) -> Path:
    """A contextuality run with three measures over layers 0..2, sense clusters of the word ``<b>x</b>``
    and a neighbours table holding it."""
    rows = [
        {"layer": l, "metric": m, "raw": 0.6 - 0.1 * l + shift, "baseline": 0.2, "adjusted": 0.4 - 0.1 * l + shift}
        for m in ("self_similarity", "intra_sentence_similarity", "mev")
        for l in range(3)
    ]
    clusters = pd.DataFrame(
        {
            "x": [0.0, 1.0, 2.0, 3.0],
            "y": [1.0, 0.0, 1.0, 0.0],
            "position": [1, 7, 12, 20],
            "sentence": [0, 1, 2, 3],
            "context": [f"a {MARKUP} b"] * 4,
            "cluster": [0, 0, 1, 1],
            "word": [MARKUP] * 4,
            "layer": [2] * 4,
        }
    )
    neighbours = pd.DataFrame({"word": [MARKUP], "static_space": ["input embeddings"], "neighbour": [MARKUP]})
    return write_results(
        root / "contextuality" / run_id,
        {"contextuality": pd.DataFrame(rows), "sense_clusters": clusters, "neighbours": neighbours},
        {"study": "contextuality", "run_id": run_id, "seed": 0, "model": {"name": model}},
    )


def plain(obj):
    """A figure dict with arrays as lists (Plotly sends typed arrays base64-encoded)."""
    if isinstance(obj, dict) and "bdata" in obj and "dtype" in obj:
        values = np.frombuffer(base64.b64decode(obj["bdata"]), dtype=obj["dtype"])
        shape = obj.get("shape")
        return plain(values.reshape([int(n) for n in str(shape).split(",")]) if shape else values)
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    return obj


def chart_specs(at) -> list[dict]:
    """The Plotly figures on a page of a Streamlit ``AppTest``, as plain dicts."""
    return [plain(json.loads(c.proto.spec)) for c in at.get("plotly_chart")]


def age(run: Path, seconds: float) -> None:
    """Make ``run`` look ``seconds`` older (the dashboard lists runs newest first)."""
    t = run.stat().st_mtime - seconds
    os.utime(run, (t, t))


def write_manifest(run: Path, content: str) -> None:
    """Replace a run's manifest with raw JSON text (``null``, ``[]``, ``"text"``...)."""
    (run / "manifest.json").write_text(content)


def write_json(run: Path, name: str, obj) -> None:
    (run / f"{name}.json").write_text(json.dumps(obj))


def combinations_run(root: Path, run_id: str = "planted", model: str = "planted-bert") -> Path:
    """A feature_combinations run: task pos, accuracy 0.7 (last layer) and 0.9 (sum of the last four)
    as the mean of two seeds (+-0.01)."""
    rows = [
        {
            "combination": combination,
            "description": combination.replace("_", " "),
            "task": "pos",
            "seed": seed,
            "metric": "accuracy",
            "value": mean + (0.01 if seed else -0.01),
        }
        for combination, mean in (("last_layer", 0.7), ("sum_last_four", 0.9))
        for seed in (0, 1)
    ]
    return write_results(
        root / "feature_combinations" / run_id,
        {"combinations": pd.DataFrame(rows)},
        {"study": "feature_combinations", "run_id": run_id, "seed": 0, "model": {"name": model}},
    )


PLANTED_IMPORTANCE = [[0.1, 0.9, 0.5], [0.3, 0.2, 0.7]]  # [layer, head]


def pruning_run(root: Path, run_id: str = "planted", model: str = "planted-bert") -> Path:
    """A pruning run: accuracy 0.8 / 0.6 / 0.3 with 0 / 50 / 100% of the heads removed (method
    ``least_important``, one seed) and the importance grid :data:`PLANTED_IMPORTANCE`."""
    curves = pd.DataFrame(
        {
            "method": "least_important",
            "seed": 0,
            "n_pruned": [0, 3, 6],
            "share_removed": [0.0, 0.5, 1.0],
            "value": [0.8, 0.6, 0.3],
            "metric": "accuracy",
        }
    )
    importance = pd.DataFrame(
        [
            {"layer": l, "head": h, "importance": v, "method": "gradient"}
            for l, row in enumerate(PLANTED_IMPORTANCE, start=1)
            for h, v in enumerate(row, start=1)
        ]
    )
    return write_results(
        root / "pruning" / run_id,
        {"pruning_curves": curves, "importance": importance},
        {"study": "pruning", "run_id": run_id, "seed": 0, "model": {"name": model}},
    )


PLANTED_PATCH_HEAD = (2, 3)  # (layer, head) the planted patching run finds carrying number: 0.8 [0.7, 0.9]


PLANTED_CONTROL_HEAD = (1, 1)  # (layer, head) numbers, from 1


def patching_run(root: Path, run_id: str = "planted", model: str = "planted-bert", control: bool = False) -> Path:
    """A patching run: hidden states 0..2 x roles CLS, subject, verb, SEP (the subject's embedding
    restores 1.0, the verb's state after layer 2 1.0), 2 layers x 3 heads of which PLANTED_PATCH_HEAD
    restores 0.8 [0.7, 0.9] over 40 pairs, the rest 0.0 [-0.05, 0.05]. ``control``: with a random-init
    control's maps too (:data:`PLANTED_CONTROL_HEAD` restores 3.0 over 12 pairs, every other site 0.2)."""
    roles = ["CLS", "subject", "verb", "SEP"]
    grid = np.array([[0.0, 1.0, 0.0, 0.0], [0.0, 0.6, 0.3, 0.0], [0.0, 0.0, 1.0, 0.0]])
    layers, order = np.indices(grid.shape)
    positions = pd.DataFrame(
        {
            "template": "all",
            "layer": layers.ravel(),
            "role": np.asarray(roles)[order.ravel()],
            "role_order": np.array([0, 2, 8, 11])[order.ravel()],
            "restored": grid.ravel(),
            "low": grid.ravel() - 0.1,
            "high": grid.ravel() + 0.1,
            "n_pairs": 40,
            "pooled": grid.ravel(),
            "pooled_low": grid.ravel() - 0.1,
            "pooled_high": grid.ravel() + 0.1,
        }
    )
    positions["carries"] = positions["low"] > 0.1
    hl, hh = np.indices((2, 3)) + 1  # layers and heads numbered from 1
    restored = np.where((hl == PLANTED_PATCH_HEAD[0]) & (hh == PLANTED_PATCH_HEAD[1]), 0.8, 0.0).ravel()
    heads = pd.DataFrame(
        {"layer": hl.ravel(), "head": hh.ravel(), "restored": restored, "low": restored - 0.1 + 0.05 * (restored == 0)}
    )
    heads["high"] = heads["restored"] + 0.1 - 0.05 * (heads["restored"] == 0)
    heads = heads.assign(n_pairs=40, pooled=heads["restored"], pooled_low=heads["low"], pooled_high=heads["high"])
    heads["carries"] = heads["low"] > 0.1
    accuracy = pd.DataFrame(
        {
            "template": ["all"],
            "n_pairs": [50],
            "n_used": [40],
            "clean_accuracy": [0.7],
            "clean_low": [0.56],
            "clean_high": [0.81],
        }
    )
    tables = {"position_effects": positions, "head_effects": heads, "accuracy": accuracy}
    if control:
        tables["control_accuracy"] = accuracy.assign(n_used=12, clean_accuracy=0.5, clean_low=0.36, clean_high=0.64)
        tables["control_position_effects"] = positions.assign(restored=0.2, low=0.0, high=0.4, n_pairs=12)
        planted = (heads["layer"] == PLANTED_CONTROL_HEAD[0]) & (heads["head"] == PLANTED_CONTROL_HEAD[1])
        tables["control_head_effects"] = heads.assign(restored=np.where(planted, 3.0, 0.2), n_pairs=12)
    return write_results(
        root / "patching" / run_id,
        tables,
        {"study": "patching", "run_id": run_id, "seed": 0, "model": {"name": model}},
    )


PLANTED_QUANT_ACCURACY = {"float32": 0.95, "int8-dynamic": 0.94, "simulated-4bit": 0.90, "simulated-2bit": 0.40}


def compression_run(root: Path, run_id: str = "planted") -> Path:
    """A compression run: a POS fine-tune with test accuracy 0.95 [0.94, 0.96]; importance and random
    pruning curves (accuracy 0.95 -> 0.90 -> 0.2 at 0 / 50 / 100% removed for importance, 0.95 -> 0.7
    -> 0.2 for random), their threshold summary, and quantization accuracies
    :data:`PLANTED_QUANT_ACCURACY` (int8 1.5x faster, size x0.3); probing per layer 0.5 + 0.1 * layer
    minus the setting's task-accuracy loss."""
    finetune = pd.DataFrame(
        [
            {
                "run_dir": "finetunes/full-seed0",
                "task": "pos",
                "mode": "full",
                "seed": 0,
                "model": "planted-bert",
                "best_step": 30,
                "dev_accuracy": 0.95,
                "test_accuracy": 0.95,
                "test_low": 0.94,
                "test_high": 0.96,
                "test_items": 800,
                "test_examples": 40,
            }
        ]
    )
    curves = pd.DataFrame(
        {
            "method": ["importance"] * 3 + ["random"] * 3,
            "seed": 0,
            "n_pruned": [0, 3, 6] * 2,
            "share_removed": [0.0, 0.5, 1.0] * 2,
            "value": [0.95, 0.90, 0.2, 0.95, 0.7, 0.2],
            "metric": "pos: accuracy",
            "value_dev": [0.95, 0.90, 0.2, 0.95, 0.7, 0.2],
            "refined": False,
            "n_heads": 6,
        }
    )
    summary = pd.DataFrame(
        {
            "method": ["importance", "random"],
            "tolerance": 0.05,
            "removable_share": [0.5, 0.2],
            "low": [np.nan, 0.1],
            "high": [np.nan, 0.3],
            "n_orders": [1, 3],
            "interval": ["one order: no interval", "t over 3 orders (95%)"],
            "drop_test": [0.05, 0.05],
            "small_sample": False,
        }
    )
    importance = pd.DataFrame(
        [
            {"layer": l, "head": h, "importance": v, "method": "gradient"}
            for l, row in enumerate(PLANTED_IMPORTANCE, start=1)
            for h, v in enumerate(row, start=1)
        ]
    )
    quant = pd.DataFrame(
        [
            {
                "setting": name,
                "kind": name.split("-")[0],
                "accuracy": acc,
                "low": acc - 0.01,
                "high": acc + 0.01,
                "difference": acc - 0.95,
                "size_ratio": 1.0 if name == "float32" else 0.3,
                "size_kind": "theoretical" if name.startswith("simulated") else "serialized",
                "speedup": {"float32": 1.0, "int8-dynamic": 1.5}.get(name, np.nan),
            }
            for name, acc in PLANTED_QUANT_ACCURACY.items()
        ]
    )
    probing = pd.DataFrame(
        [
            {
                "setting": name,
                "layer": layer,
                "accuracy": 0.5 + 0.1 * layer - (0.95 - acc),
                "low": 0.45 + 0.1 * layer - (0.95 - acc),
                "high": 0.55 + 0.1 * layer - (0.95 - acc),
                "difference": acc - 0.95,
            }
            for name, acc in PLANTED_QUANT_ACCURACY.items()
            for layer in range(3)
        ]
    )
    lottery = pd.DataFrame(
        {
            "round": [0, 1, 1, 2, 2],
            "kind": ["dense", "imp", "random", "imp", "random"],
            "sparsity": [0.0, 0.5, 0.5, 0.75, 0.75],
            "test_accuracy": [0.95, 0.94, 0.85, 0.92, 0.6],
            "test_low": [0.94, 0.93, 0.83, 0.91, 0.57],
            "test_high": [0.96, 0.95, 0.87, 0.93, 0.63],
        }
    )
    subnetworks = pd.DataFrame(
        {
            "seed": 0,
            "kind": ["dense", "good", "random", "bad"],
            "heads_removed": [0, 3, 3, 3],
            "ffn_removed": [0, 1, 1, 1],
            "test_accuracy": [0.95, 0.94, 0.9, 0.7],
        }
    )
    survivors = pd.DataFrame(
        [
            {
                "component": "head",
                "layer": l,
                "head": h,
                "share": 1.0 if (l, h) == (2, 3) else 0.5,
                "super_survivor": (l, h) == (2, 3),
            }
            for l in (1, 2)
            for h in (1, 2, 3)
        ]
        + [
            {"component": "ffn", "layer": l, "head": -1, "share": [0.0, 1.0][l - 1], "super_survivor": l == 2}
            for l in (1, 2)
        ]
    )
    return write_results(
        root / "compression" / run_id,
        {
            "finetune_run": finetune,
            "pruning_curves": curves,
            "pruning_threshold_summary": summary,
            "importance": importance,
            "quantization_task": quant,
            "quantization_probing": probing,
            "lottery_runs": lottery,
            "structured_subnetworks": subnetworks,
            "structured_survivors": survivors,
        },
        {
            "study": "compression",
            "run_id": run_id,
            "seed": 0,
            "model": {"name": "planted-bert"},
            "config": {"model": "planted-bert", "task": "pos"},
        },
    )


PLANTED_PRECISION = pd.DataFrame(
    {
        "retrieval": ["nn", "csls"],
        "k": [1, 1],
        "metric": ["precision", "precision"],
        "value": [0.25, 0.375],
        "n_queries": [8, 8],
        "coverage": [1.0, 1.0],
    }
)


def alignment_run(root: Path, run_id: str = "planted", model: str = "planted-bert") -> Path:
    """An alignment run: the precision table :data:`PLANTED_PRECISION` and one word that moved."""
    moved = pd.DataFrame({"rank": [1], "word": [MARKUP], "similarity": [0.5], "experiment": ["layer 1 vs layer 2"]})
    return write_results(
        root / "alignment" / run_id,
        {"precision": PLANTED_PRECISION, "most_moved": moved},
        {"study": "alignment", "run_id": run_id, "seed": 0, "model": {"name": model}},
    )


def emergence_run(root: Path, run_id: str = "planted", model: str = "planted-bert") -> Path:
    """An emergence run with checkpoints at steps 0 and 10: loss 7.0 -> 5.0 (held-out 7.5 -> 5.5),
    head types of :data:`PLANTED_TYPES` at both steps, probe accuracy 0.3 + 0.1 * layer at step 0
    and 0.5 + 0.1 * layer at step 10 (layers 0..1), and the guesses for one masked word."""
    metrics = pd.DataFrame(
        {"run": "planted", "step": [0, 0, 10, 10], "metric": ["loss", "eval_loss"] * 2, "value": [7.0, 7.5, 5.0, 5.5]}
    )
    by_step = pd.DataFrame(
        [
            {"layer": l, "head": h, "type": t, "step": step}
            for step in (0, 10)
            for (l, h), t in sorted(PLANTED_TYPES.items())
        ]
    )
    counts = by_step.groupby(["step", "type"], as_index=False).size().rename(columns={"size": "count"})
    probes = pd.DataFrame(
        [
            {
                "task": "pos",
                "mode": "per_layer",
                "control": False,
                "layer": l,
                "seed": 0,
                "split": "test",
                "metric": "accuracy",
                "value": base + 0.1 * l,
                "step": step,
            }
            for step, base in ((0, 0.3), (10, 0.5))
            for l in range(2)
        ]
    )
    cloze = pd.DataFrame(
        [
            {
                "sentence": "s1",
                "position": 1,
                "masked": "dog",
                "text": "the ___ barked",
                "rank": rank,
                "prediction": guess,
                "probability": p,
                "correct": guess == "dog",
                "step": step,
            }
            for step in (0, 10)
            for rank, (guess, p) in enumerate((("dog", 0.5), ("cat", 0.25)), 1)
        ]
    )
    accuracy = pd.DataFrame({"step": [0, 10], "n": [1, 1], "top1": [0.0, 1.0], "top5": [1.0, 1.0]})
    return write_results(
        root / "emergence" / run_id,
        {
            "training_metrics": metrics,
            "head_types_by_step": by_step,
            "head_counts": counts,
            "probe_scores": probes,
            "cloze_predictions": cloze,
            "cloze_accuracy": accuracy,
        },
        {"study": "emergence", "run_id": run_id, "seed": 0, "model": {"name": model}},
    )


def every_study_run(root: Path, model: str = "planted-bert") -> dict[str, Path]:
    """One planted run (id ``planted``) of every study a dashboard page shows: ``{study: run folder}``."""
    runs = {
        "edge_probing": probing_run(root, "planted", model),
        "feature_combinations": combinations_run(root),
        "structural_probe": structural_run(root, "planted", model),
        "head_types": head_types_run(root),
        "pruning": pruning_run(root),
        "patching": patching_run(root),
        "contextuality": contextuality_run(root, "planted", model),
        "alignment": alignment_run(root),
        "emergence": emergence_run(root),
        "semantic_change": semantic_change_run(root),
        "finetuning": finetuning_run(root),
        "compression": compression_run(root),
    }
    return runs


def finetuning_run(root: Path, run_id: str = "planted") -> Path:
    """A finetuning run: POS accuracy frozen 0.90 [0.88, 0.92] < bitfit 0.95 < full 0.97, and per
    layer (0..2) CKA 1.0 / 0.9 / 0.6 for full (0.99 / 0.98 / 0.97 for bitfit), weight change rising
    with depth, attention change at layers 1..2."""
    scores = pd.DataFrame(
        {
            "task": "pos",
            "mode": ["frozen", "full", "bitfit"],
            "accuracy": [0.90, 0.97, 0.95],
            "low": [0.88, 0.96, 0.93],
            "high": [0.92, 0.98, 0.97],
            "n_seeds": 2,
            "n_test": 500,
            "small_sample": False,
            "interval": "t over seeds",
            "trainable_share": [0.001, 1.0, 0.01],
        }
    )
    comparisons = pd.DataFrame(
        {
            "task": "pos",
            "mode": ["frozen", "bitfit"],
            "difference": [-0.07, -0.02],
            "low": [-0.09, -0.03],
            "high": [-0.05, -0.01],
            "p_value": [0.001, 0.01],
            "significant": True,
            "n_seeds": 2,
            "n_examples": 500,
            "interval": "paired",
        }
    )
    change = pd.DataFrame(
        {
            "task": "pos",
            "mode": ["full"] * 3 + ["bitfit"] * 3,
            "layer": [0, 1, 2] * 2,
            "cka": [1.0, 0.9, 0.6, 0.99, 0.98, 0.97],
            "cka_min": 0.5,
            "cka_max": 1.0,
            "n_seeds": 2,
            "weight_attention": [np.nan, 0.01, 0.03, np.nan, 0.0, 0.0],
            "weight_embeddings": [0.001, np.nan, np.nan, 0.0, np.nan, np.nan],
            "attention_js": [np.nan, 0.02, 0.08, np.nan, 0.001, 0.002],
        }
    )
    probes = pd.DataFrame(
        [
            {
                "task": "pos",
                "mode": mode,
                "seed": 0,
                "probe_task": "deps",
                "layer": l,
                "split": "test",
                "accuracy": base + 0.1 * l,
            }
            for mode, base in (("pretrained", 0.5), ("full", 0.4))
            for l in range(3)
        ]
    )
    types = pd.DataFrame(
        {
            "task": "pos",
            "mode": "full",
            "seed": 0,
            "layer": [1, 1, 2, 2],
            "head": [1, 2, 1, 2],
            "type_before": ["positional", "broad", "syntactic", "special"],
            "type_after": ["positional", "broad", "broad", "special"],
            "changed": [False, False, True, False],
        }
    )
    return write_results(
        root / "finetuning" / run_id,
        {
            "finetune_scores": scores,
            "finetune_comparisons": comparisons,
            "change_by_layer": change,
            "probing_before_after": probes,
            "head_types_before_after": types,
        },
        {
            "study": "finetuning",
            "run_id": run_id,
            "seed": 0,
            "model": {"name": "planted-bert"},
            "config": {"model": "planted-bert", "tasks": ["pos"]},
        },
    )


PLANTED_MOVED = "broadcast"  # the word the planted semantic-change run finds moved


def semantic_change_run(root: Path, run_id: str = "planted") -> Path:
    """A semantic_change run: one comparison of 30 words; PLANTED_MOVED (and MARKUP) moved far
    beyond the control, the others stayed below it."""
    words = [PLANTED_MOVED, MARKUP] + [f"w{i}" for i in range(28)]
    change = np.array([0.9, 0.8] + list(np.linspace(0.05, 0.2, 28)))
    table = pd.DataFrame(
        {
            "comparison": "1900s_vs_1990s",
            "word": words,
            "count_a": 50,
            "count_b": 60,
            "frequency_bin": 0,
            "cosine_distance": change,
            "low": change - 0.05,
            "high": change + 0.05,
            "neighbourhood_distance": change,
            "neighbourhood_low": change - 0.05,
            "neighbourhood_high": change + 0.05,
            "n_replicates": 10,
            "control_threshold": 0.4,
            "control_median": 0.15,
            "moved": change - 0.05 > 0.4,
            "stable": change + 0.05 < 0.15,
            "neighbours_a": "farm, seed, field",
            "neighbours_b": "radio, television, news",
        }
    )
    slices = pd.DataFrame(
        {
            "comparison": "1900s_vs_1990s",
            "side": ["a", "b"],
            "slice": ["1900–1929", "1990–2021"],
            "documents": [30, 32],
            "sentences": [12000, 10800],
            "words": [357000, 199000],
            "vocabulary": [15000, 11000],
        }
    )
    return write_results(
        root / "semantic_change" / run_id,
        {"word_change": table, "slices": slices},
        {"study": "semantic_change", "run_id": run_id, "seed": 0},
    )


PLANTED_GUESS = "cat"  # the token the planted MLM puts first in place of any masked word


def planted_mlm_dir(path: Path) -> Path:
    """A tiny random BERT with an MLM head (2 layers x 4 heads, the tiny WordPiece tokenizer) saved
    as a model folder, its output bias raised for :data:`PLANTED_GUESS` so that it ranks first
    for any masked word."""
    import torch

    from bertology.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer("bert")
    model = tiny_model("bert", mlm=True)
    with torch.no_grad():
        model.cls.predictions.bias[tok.convert_tokens_to_ids(PLANTED_GUESS)] += 50.0
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return path


PLANTED_UUAS = [0.40, 0.55, 0.70]  # the trained encoder's test UUAS at layers 0, 1, 2
PLANTED_LINEAR_UUAS = 0.50


def structural_run(root: Path, run_id: str = "planted", model: str = "planted-bert") -> Path:
    """A structural_probe run: UUAS 0.40 / 0.55 / 0.70 at layers 0..2 (:data:`PLANTED_UUAS`, best
    layer 2), DSpr 0.5 / 0.6 / 0.8, depth probe root% 0.6 / 0.7 / 0.9, LINEAR UUAS 0.50, a rank
    curve, and one test sentence "the dog barks ." whose predicted tree misses one gold edge."""
    trees = "silver: planted"
    rows = []
    for kind, metrics in (
        ("distance", {"uuas": PLANTED_UUAS, "dspr": [0.5, 0.6, 0.8]}),
        ("depth", {"root_acc": [0.6, 0.7, 0.9], "nspr": [0.4, 0.5, 0.7]}),
    ):
        for metric, scores in metrics.items():
            for layer, score in enumerate(scores):
                rows.append(
                    {
                        "encoder": "trained",
                        "probe": kind,
                        "layer": layer,
                        "rank": 8,
                        "metric": metric,
                        "dev_score": score,
                        "score": score,
                        "low": score - 0.05,
                        "high": score + 0.05,
                        "n_seeds": 2,
                        "n_test": 120,
                        "small_sample": False,
                        "interval": "planted",
                        "trees": trees,
                    }
                )
    intervals = pd.DataFrame(rows)
    best = intervals[intervals["layer"] == 2].rename(columns={"layer": "best_layer"})
    summary = best.assign(selected_on="dev", selection_metric=best["probe"].map({"distance": "uuas", "depth": "nspr"}))
    linear = pd.DataFrame(
        {
            "encoder": "linear",
            "probe": ["distance", "distance", "depth", "depth"],
            "layer": -1,
            "rank": 0,
            "metric": ["uuas", "dspr", "root_acc", "nspr"],
            "score": [PLANTED_LINEAR_UUAS, 0.45, 0.05, 0.3],
            "low": np.nan,
            "high": np.nan,
            "n_seeds": 0,
            "n_test": 120,
            "small_sample": False,
            "interval": "planted",
        }
    )
    baselines = pd.concat([summary.rename(columns={"best_layer": "layer"}), linear], ignore_index=True)
    curve = pd.DataFrame(
        {
            "encoder": "trained",
            "probe": "distance",
            "layer": 2,
            "rank": [1, 2, 4, 8],
            "metric": "uuas",
            "dev_score": [0.3, 0.5, 0.65, 0.7],
            "score": [0.3, 0.5, 0.65, 0.7],
            "low": np.nan,
            "high": np.nan,
        }
    )
    words = pd.DataFrame(
        {
            "sentence": 7,
            "sent_id": "planted-7",
            "position": [0, 1, 2, 3],
            "word": ["the", "dog", "barks", "."],
            "punct": [False, False, False, True],
            "gold_depth": [2, 1, 0, 1],
            "predicted_depth": [2.1, 0.9, 0.2, 1.0],
            "gold_head": [1, 2, -1, 2],
        }
    )
    edges = pd.DataFrame(
        {
            "sentence": 7,
            "sent_id": "planted-7",
            "source": ["gold", "gold", "predicted", "predicted"],
            "i": [0, 1, 0, 0],
            "j": [1, 2, 1, 2],
            "correct": [True, False, True, False],
        }
    )
    return write_results(
        root / "structural_probe" / run_id,
        {
            "layer_intervals": intervals,
            "summary": summary,
            "baselines": baselines,
            "rank_curve": curve,
            "tree_words": words,
            "tree_edges": edges,
        },
        {
            "study": "structural_probe",
            "run_id": run_id,
            "seed": 0,
            "model": {"name": model},
            "trees": {"source": trees},
        },
    )
