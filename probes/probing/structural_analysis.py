"""The structural probe as one analysis (Hewitt & Manning 2019): :func:`structural_probe_analysis`
with its config schema :data:`STRUCTURAL_PROBE_DEFAULTS`. The ``structural_probe`` study is this
function, and ``bertology structural`` runs that study with the options given, so a run has the one
manifest schema of :func:`bertology.runs.run_analysis` whichever way it started.

Tables: ``layer_scores`` and ``test_sentences`` (every probe's dev / test scores and each test
sentence's score parts, the trained encoder and the random-init one), ``layer_intervals``
(:func:`~bertology.probes.probing.structural.structural_intervals`), ``summary`` (best layer on
dev, read on test), ``rank_curve`` (UUAS and DSpr. against the probe's rank at the best distance
layer), ``baselines`` (LINEAR, random-init and the trained encoder side by side) and
``tree_edges`` / ``tree_words`` (predicted and gold trees of some test sentences, for the
dashboard). Every table carries ``trees``: where the trees come from (gold or silver).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from bertology.errors import ConfigError
from bertology.probes.probing._scores import SCORE_INTERVAL_COLUMNS
from bertology.probes.probing.structural import (
    INTERVAL_COLUMNS,
    PROBE_KINDS,
    TREE_EDGE_COLUMNS,
    TREE_WORD_COLUMNS,
    StructuralRun,
    StructuralSettings,
    StructuralTrees,
    best_layers,
    corpus_trees,
    example_trees,
    linear_baseline,
    predict_structure,
    probe_structure,
    require_scoreable_splits,
    split_sentences,
    structural_intervals,
    structural_summary,
)
from bertology.runs import StudyContext, model_corpus_store
from bertology.store.read import LayerView
from bertology.validation import LAYER, NON_NEGATIVE_INT, POSITIVE_INT, Rule, add_study_rules

STRUCTURAL_PROBE_DEFAULTS: dict[str, Any] = {
    "model": "minilm-l6",
    "corpus": "brown-sample",  # its trees are silver (spaCy); a .conllu file with heads brings gold ones
    "limit": 1500,
    "pooling": "first",  # word pooling of the feature store (first sub-word)
    "layers": [],  # store layers to probe (0 = embeddings); [] = every layer
    "probes": ["distance", "depth"],
    "rank": 0,  # the probes' rank; 0 = full rank (the hidden size), as the paper's main results
    # the rank sweep at the best distance layer (the paper's UUAS-by-rank figure); ranks above the
    # hidden size are dropped; [] = no sweep
    "ranks": [1, 2, 4, 8, 16, 32, 64, 128, 256],
    "seeds": [0, 1, 2],  # probe seeds (initialisation, batch order); one sentence split drawn with `seed`
    "lr": 0.001,  # Adam, as the paper; cut tenfold on a dev-loss plateau
    "batch_size": 20,  # sentences a step, as the paper
    "max_epochs": 40,
    "patience": 5,  # epochs without a dev-loss improvement before a probe stops
    "random_baseline": True,  # the same probes on a randomly initialised copy of the model
    "tree_examples": 20,  # test sentences whose predicted and gold trees are saved for the dashboard
    "device": "cpu",  # where the model runs (the store is extracted there) and the probes train
    "seed": 0,
}

add_study_rules(
    "structural_probe",
    {
        "layers": Rule("a list of layer indices ([] = every layer)", LAYER.ok, each=True),
        "probes": Rule(
            f"a non-empty list of {' / '.join(PROBE_KINDS)}",
            lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(p in PROBE_KINDS for p in v),
        ),
        "rank": Rule("an integer >= 0 (0 = full rank)", NON_NEGATIVE_INT.ok),
        "ranks": Rule("a list of integers >= 1", POSITIVE_INT.ok, each=True),
        "lr": Rule("a number > 0", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0),
        "patience": POSITIVE_INT,
        "tree_examples": NON_NEGATIVE_INT,
        "seeds": Rule(
            "a non-empty list of integers in [0, 2**32 - 1]",
            lambda v: (
                isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(s, int) and 0 <= s < 2**32 for s in v)
            ),
        ),
    },
)


def structural_settings(cfg: dict[str, Any]) -> StructuralSettings:
    """The :class:`StructuralSettings` of a config (``lr``, ``batch_size``, ``max_epochs``,
    ``patience``, ``device``: "auto" and a missing GPU resolved here)."""
    from bertology.models import resolve_device

    return StructuralSettings(
        lr=float(cfg["lr"]),
        batch_size=int(cfg["batch_size"]),
        max_epochs=int(cfg["max_epochs"]),
        patience=int(cfg["patience"]),
        device=str(resolve_device(cfg.get("device") or "cpu")),
    )


def _layer_ids(cfg: dict[str, Any], n_layers: int) -> list[int]:
    """The config's ``layers`` as store indices (negative ones counted from the last)."""
    layers = [int(l) for l in cfg["layers"]] or list(range(n_layers))
    bad = [l for l in layers if not -n_layers <= l < n_layers]
    if bad:
        raise ConfigError(f"structural_probe: field 'layers': {bad} outside the store's layers 0..{n_layers - 1}")
    return sorted({l % n_layers for l in layers})


def _trees_provenance(trees: StructuralTrees, corpus: Any) -> dict[str, Any]:
    return {
        "source": trees.source,
        "annotation": trees.source.split(":", 1)[0],
        "sentences": len(trees),
        "skipped": len(trees.skipped),
        "skipped_sentences": [corpus.sentences[k].sent_id for k in list(trees.skipped)[:20]],
    }


def _per_layer(
    feats: LayerView, store: Any, trees: StructuralTrees, cfg: dict[str, Any], ctx: StudyContext, **run: Any
) -> dict[str, StructuralRun]:
    """Every probe kind of the config over the store layers ``feats`` ``[L, n_words, dim]``."""
    out = {}
    for kind in cfg["probes"]:
        ctx.log(
            f"    {run.get('encoder', 'trained')} / {kind} probes: {len(run['layer_ids'])} layer(s) x {len(run['seeds'])} seed(s)"
        )
        out[kind] = probe_structure(feats, store.sentence_offsets, trees, kind=kind, **run)
    return out


def _random_runs(
    lm: Any, corpus: Any, trees: StructuralTrees, cfg: dict[str, Any], ctx: StudyContext, **run: Any
) -> list[StructuralRun]:
    """The same probes on a randomly initialised copy of the model (a fresh extraction)."""
    from bertology.models import random_init_like
    from bertology.store import extract

    ctx.log("    random-init baseline: a fresh extraction of a randomly initialised copy")
    store = extract(random_init_like(lm, ctx.seed), corpus, attentions=False, pooling=cfg["pooling"], progress=False)
    feats = store.view(run["layer_ids"])  # read batch by batch, never held whole
    return list(_per_layer(feats, store, trees, cfg, ctx, encoder="random-init", **run).values())


def _trees_tables(
    runs: dict[str, StructuralRun],
    feats: LayerView,
    store: Any,
    trees: StructuralTrees,
    corpus: Any,
    chosen: dict[tuple[str, str], int],
    n: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``tree_edges`` and ``tree_words`` of the first ``n`` test sentences of at most 30 words:
    the first seed's distance probe at its best layer (and depth probe at its own)."""
    empty = pd.DataFrame(columns=TREE_EDGE_COLUMNS), pd.DataFrame(columns=TREE_WORD_COLUMNS)
    if "distance" not in runs or n == 0:
        return empty
    test = runs["distance"].split["test"]
    lengths = trees.lengths  # once: the property walks the corpus
    shown = [int(s) for s in test if lengths[s] <= 30][:n]

    def predictions(kind: str) -> list[np.ndarray] | None:
        if kind not in runs or ("trained", kind) not in chosen:
            return None
        probes = next(iter(runs[kind].probes.values()))
        k = probes.layer_ids.index(chosen[("trained", kind)])
        return [p[k] for p in predict_structure(probes, feats, store.sentence_offsets, trees, shown)]

    distances, depths = predictions("distance"), predictions("depth")
    if distances is None or not shown:
        return empty
    words = [corpus.sentences[s].words for s in shown]
    return example_trees(distances, depths, trees, shown, words, [corpus.sentences[s].sent_id for s in shown])


def structural_probe_analysis(ctx: StudyContext) -> None:
    """Hewitt & Manning's structural probe of every layer (distance and depth probes), its rank
    sweep at the best layer, the LINEAR and random-init baselines, and example trees."""
    cfg = ctx.config
    settings = structural_settings(cfg)

    def check_corpus(corpus: Any) -> None:  # before the store is extracted: no trees, or nothing to score
        trees = corpus_trees(corpus)
        require_scoreable_splits(trees, split_sentences(trees.usable, ctx.seed))

    lm, corpus, store = model_corpus_store(ctx, check_corpus=check_corpus)
    trees = corpus_trees(corpus)
    ctx.record(trees=_trees_provenance(trees, corpus))
    if trees.skipped:
        ctx.log(f"    {len(trees.skipped)} sentence(s) without one dependency tree left out (manifest: trees)")
    layer_ids = _layer_ids(cfg, store.n_layers)
    rank = int(cfg["rank"]) or store.dim
    if rank > store.dim:
        raise ConfigError(f"structural_probe: field 'rank': {rank} is above the hidden size {store.dim}")
    feats = store.view(layer_ids)  # read batch by batch, never held whole
    seeds = [int(s) for s in cfg["seeds"]]
    run = {"layer_ids": layer_ids, "ranks": rank, "seeds": seeds, "split_seed": ctx.seed, "settings": settings}

    def per_layer() -> dict[str, pd.DataFrame]:
        runs = _per_layer(feats, store, trees, cfg, ctx, keep_probes=True, **run)
        every = list(runs.values()) + (
            _random_runs(lm, corpus, trees, cfg, ctx, **run) if cfg["random_baseline"] else []
        )
        scores = pd.concat([r.scores for r in every], ignore_index=True)
        sentences = pd.concat([r.sentences for r in every], ignore_index=True)
        chosen = best_layers(structural_intervals(scores, sentences, n_resamples=200))
        edges, words = _trees_tables(runs, feats, store, trees, corpus, chosen, int(cfg["tree_examples"]))
        return {"layer_scores": scores, "test_sentences": sentences, "tree_edges": edges, "tree_words": words}

    tables = ctx.steps(["layer_scores", "test_sentences", "tree_edges", "tree_words"], per_layer)
    source = {"trees": trees.source}
    intervals = ctx.step(
        "layer_intervals",
        lambda: structural_intervals(tables["layer_scores"], tables["test_sentences"]).assign(**source),
    )
    summary = ctx.step("summary", lambda: structural_summary(intervals).assign(**source))
    if cfg["ranks"] and "distance" in cfg["probes"]:
        ctx.step(
            "rank_curve", lambda: _rank_curve(feats, store, trees, layer_ids, intervals, cfg, ctx, run).assign(**source)
        )
    ctx.step("baselines", lambda: _baselines(trees, summary, ctx.seed).assign(**source))


def _rank_curve(
    feats: LayerView,
    store: Any,
    trees: StructuralTrees,
    layer_ids: list[int],
    intervals: pd.DataFrame,
    cfg: dict[str, Any],
    ctx: StudyContext,
    run: dict[str, Any],
) -> pd.DataFrame:
    """:data:`INTERVAL_COLUMNS` rows of distance probes of every rank of ``ranks`` (those up to the
    hidden size) at the trained encoder's best distance layer (chosen on dev)."""
    layer = best_layers(intervals).get(("trained", "distance"))
    ranks = sorted({int(r) for r in cfg["ranks"] if int(r) <= store.dim})
    if layer is None or not ranks:
        return pd.DataFrame(columns=INTERVAL_COLUMNS)
    ctx.log(f"    rank sweep at layer {layer}: ranks {ranks} x {len(run['seeds'])} seed(s)")
    k = layer_ids.index(layer)
    sweep = probe_structure(
        store.view([layer_ids[k]]),
        store.sentence_offsets,
        trees,
        kind="distance",
        layer_ids=[layer] * len(ranks),
        feature_index=[0] * len(ranks),
        ranks=ranks,
        seeds=run["seeds"],
        split_seed=run["split_seed"],
        settings=run["settings"],
    )
    return structural_intervals(sweep.scores, sweep.sentences)


# the baselines table: which probe, then every probe's interval columns but the dev score (a
# baseline is not chosen on dev)
BASELINE_COLUMNS = ["encoder", "probe", "layer", "rank", *(c for c in SCORE_INTERVAL_COLUMNS if c != "dev_score")]


def _baselines(trees: StructuralTrees, summary: pd.DataFrame, split_seed: int) -> pd.DataFrame:
    """The LINEAR baseline on the test sentences beside the trained and random-init encoders'
    best layers (``summary``): one row per encoder, probe kind and metric."""
    test = split_sentences(trees.usable, split_seed)["test"]
    linear = linear_baseline(trees, test)
    probes = summary.rename(columns={"best_layer": "layer"})
    return pd.concat(
        [probes.reindex(columns=BASELINE_COLUMNS), linear.reindex(columns=BASELINE_COLUMNS)], ignore_index=True
    )


__all__ = [
    "STRUCTURAL_PROBE_DEFAULTS",
    "BASELINE_COLUMNS",
    "structural_probe_analysis",
    "structural_settings",
]
