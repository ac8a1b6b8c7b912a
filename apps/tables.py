"""The dashboard's data shaping: the part of a result table a page shows (filtering, means over
seeds, pivots, option lists). Pure functions of data frames, no Streamlit, so each can be tested on
its own; the figures that draw these parts are in :mod:`bertology.apps.figures`.

Column names are those the studies write (``docs/ARCHITECTURE.md``, results): each function says
which ones it reads.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import pandas as pd

from bertology.results import ResultError, mean_ci
from bertology.uncertainty import is_small_sample, paired_on_shared_groups


def options_and_default(values: Sequence[Any], preferred: str) -> tuple[list[str], int]:
    """The distinct ``values`` as sorted strings, and the index of ``preferred`` among them (0 when
    absent): the options and starting choice of a select box."""
    options = sorted(pd.Series(values).astype(str).unique())
    return options, options.index(preferred) if preferred in options else 0


def stack_runs(parts: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """Tables of several runs stacked, each row tagged with its run's label in a ``run`` column."""
    return pd.concat([df.assign(run=label) for label, df in parts], ignore_index=True)


# --------------------------------------------------------------------------- probing

def probe_part(scores: pd.DataFrame, metric: str | None, mode: str | None) -> pd.DataFrame:
    """Held-out, non-control rows of one metric and probe input.

    ``scores``: the ``layer_scores`` table (``metric``; ``split``, ``control``, ``mode`` where
    present). Test rows only where there is a ``split`` (dev was used for early stopping)."""
    if "split" in scores.columns:
        scores = scores[scores["split"] == "test"]
    if "control" in scores.columns:
        scores = scores[~scores["control"].astype(bool)]
    part = scores[scores["metric"] == metric]
    if mode is not None and "mode" in part.columns:
        part = part[part["mode"] == mode]
    return part


def probe_metrics(scores: pd.DataFrame) -> list[str]:
    """The metrics a ``layer_scores`` table scores on test (not the ``split = interval`` rows that
    hold interval bounds and counts)."""
    if "split" in scores.columns:
        scores = scores[scores["split"] == "test"]
    return sorted(scores["metric"].astype(str).unique())


def interval_bands(intervals: pd.DataFrame, metric: str | None, mode: str | None) -> pd.DataFrame:
    """Per task and layer, the test score with the run's own 95% interval (seeds and test sentences,
    see docs/METHODS.md): ``task, layer, mean, low, high, n, small_sample``. ``intervals``: the
    ``layer_intervals`` table (``task, mode, control, layer, metric, score, low, high, n_seeds``)."""
    part = intervals[(intervals["metric"] == metric) & ~intervals["control"].astype(bool)]
    if mode is not None and "mode" in part.columns:
        part = part[part["mode"] == mode]
    out = part.rename(columns={"score": "mean", "n_seeds": "n"})
    keep = [c for c in ("task", "layer", "mean", "low", "high", "n", "n_test", "small_sample") if c in out.columns]
    return out[keep].reset_index(drop=True)


def small_sample_tasks(table: pd.DataFrame) -> list[str]:
    """Tasks a table flags as measured on fewer test items than ``bertology.uncertainty.MIN_TEST_ITEMS``
    (rows with ``small_sample`` true)."""
    if "small_sample" not in table.columns or "task" not in table.columns:
        return []
    flagged = table[table["small_sample"].fillna(False).astype(bool)]
    return sorted(flagged["task"].astype(str).unique())


def layer_means(scores: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per task and layer with its 95% interval: ``task, layer, mean, sd, n, ci95``.
    ``scores``: ``task, layer, value`` (one row per seed)."""
    return mean_ci(scores, ["task", "layer"])


def random_baseline_means(baseline: pd.DataFrame, metric: str | None, mode: str | None) -> pd.DataFrame | None:
    """Per task and layer, the mean test score of the same probe on a randomly initialised copy of
    the model (the ``random_baseline`` table, rows as ``layer_scores``): ``task, layer, mean, sd,
    n, ci95``; None when it has no test rows of this metric and probe input."""
    part = probe_part(baseline, metric, mode)
    return None if part.empty else layer_means(part)


def accuracy_per_layer(scores: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``layer_scores`` table a two-run comparison draws: accuracy where the table has
    it (else every metric) and per-layer probes where it has a ``mode`` column with them."""
    part = scores[scores["metric"] == "accuracy"] if "accuracy" in set(scores["metric"]) else scores
    if "mode" in part.columns:
        part = part[part["mode"] == "per_layer"] if "per_layer" in set(part["mode"]) else part
    return part


def mean_mix_weights(weights: pd.DataFrame) -> pd.DataFrame:
    """Scalar-mix weight per task and layer, mean over seeds: ``task, layer, weight``.
    ``weights``: the ``mix_weights`` table (``task, layer, weight``)."""
    return weights.groupby(["task", "layer"], as_index=False)["weight"].mean()


def combination_means(combinations: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One metric of the ``combinations`` table (``combination, task, metric, value``), mean over
    seeds per task and combination: ``task, combination, mean, sd, n, ci95``, best first within
    each task."""
    means = mean_ci(combinations[combinations["metric"] == metric], ["task", "combination"])
    return means.sort_values(["task", "mean"], ascending=[True, False], kind="stable").reset_index(drop=True)


# --------------------------------------------------------------------------- heads

def checked_head_types(types: pd.DataFrame) -> pd.DataFrame:
    """A ``head_types`` table (``layer, head, type``...) with integer layers and heads; raises
    ``ValueError`` for a layer or head that is not a number and :class:`ResultError` for a head
    listed twice."""
    types = types.assign(layer=pd.to_numeric(types["layer"], errors="raise").astype(int),
                         head=pd.to_numeric(types["head"], errors="raise").astype(int))
    duplicated = types.duplicated(["layer", "head"])
    if duplicated.any():
        first = types[duplicated].iloc[0]
        raise ResultError(f"head_types has {int(duplicated.sum())} repeated head(s), e.g. layer {first['layer']} "
                          f"head {first['head']}")
    return types


def head_keys(types: pd.DataFrame) -> list[str]:
    """``"layer-head"`` of every head of a ``head_types`` table, in layer then head order."""
    return [f"{int(l)}-{int(h)}" for l, h in types.sort_values(["layer", "head"])[["layer", "head"]].to_numpy()]


def type_by_head(types: pd.DataFrame) -> pd.Series:
    """The ``type`` of each head, indexed by ``"layer-head"``."""
    return types.set_index(types["layer"].astype(str) + "-" + types["head"].astype(str))["type"]


def default_head(types: pd.DataFrame) -> str:
    """The head the detail opens first: the clearest syntactic head, else the first positional one."""
    for kind, column in (("syntactic", "syntactic_gain"), ("positional", "positional_share")):
        part = types[types["type"] == kind]
        if len(part):
            row = part.sort_values(column, ascending=False).iloc[0] if column in part else part.iloc[0]
            return f"{int(row['layer'])}-{int(row['head'])}"
    row = types.sort_values(["layer", "head"]).iloc[0]
    return f"{int(row['layer'])}-{int(row['head'])}"


def head_row(types: pd.DataFrame, layer: int, head: int) -> pd.Series:
    """The ``head_types`` row of head ``(layer, head)``."""
    return types[(types["layer"] == layer) & (types["head"] == head)].iloc[0]


def type_counts_side_by_side(types_a: pd.DataFrame, types_b: pd.DataFrame) -> pd.DataFrame:
    """Heads per type in two runs: ``type, A, B`` (0 where a run has none of a type)."""
    counts = pd.concat([types_a["type"].value_counts().rename("A"), types_b["type"].value_counts().rename("B")],
                       axis=1).fillna(0).astype(int)
    return counts.rename_axis("type").reset_index()


def relation_min_count(config: Any, default: int = 20) -> int:
    """The ``min_count`` (fewest instances for a relation to be scored) of a run's config, or
    ``default`` where the config does not say or says it badly."""
    try:
        return int(config.get("min_count", default)) if isinstance(config, dict) else default
    except (TypeError, ValueError):
        return default


_OFFSET = re.compile(r"^(token|argmax)_offset_(-?\d+|other)$")


def offset_sort_key(offset: str) -> int:
    """Numeric order of an offset bin name (``"-2"`` ... ``"other"``), ``other`` last."""
    return 10_000 if offset == "other" else int(offset)


def offset_histogram(stats: pd.DataFrame, layer: int, head: int) -> pd.DataFrame:
    """Share of a head's query tokens/words whose attention argmax is at each relative offset.

    ``stats``: the ``head_stats`` table (``layer, head, statistic, value``), whose
    ``token_offset_<k>`` (sub-word tokens, special tokens in place; Voita et al.) and
    ``argmax_offset_<k>`` (words; Clark et al.) rows are these shares. Returns ``level, offset,
    share`` with ``offset`` a string (``"-2"`` ... ``"other"``), sorted numerically, other last."""
    part = stats[(stats["layer"] == layer) & (stats["head"] == head)]
    rows = []
    for name, value in zip(part["statistic"], part["value"]):
        m = _OFFSET.match(str(name))
        if m:
            rows.append({"level": "token" if m.group(1) == "token" else "word", "offset": m.group(2),
                         "share": float(value)})
    out = pd.DataFrame(rows, columns=["level", "offset", "share"])
    key = out["offset"].map(offset_sort_key)
    return out.assign(_k=key).sort_values(["level", "_k"]).drop(columns="_k").reset_index(drop=True)


def relation_table(dependency: pd.DataFrame, layer: int, head: int, min_count: int = 20, top: int = 6) -> pd.DataFrame:
    """The relations head ``(layer, head)`` tracks best (Clark et al. 2019): its accuracy at finding the
    other end of each relation (``head_dependency`` rows with ``n >= min_count``) against the best
    fixed-offset baseline, sorted by the gain over that baseline, ``top`` rows.

    ``dependency``: the ``head_dependency`` table (``layer, head, relation, direction, n, accuracy,
    baseline_offset, baseline_accuracy, gain``); the summary row ``relation == "all"`` is left out
    unless it is all there is."""
    part = dependency[(dependency["layer"] == layer) & (dependency["head"] == head) & (dependency["n"] >= min_count)]
    part = part[part["relation"] != "all"] if (part["relation"] != "all").any() else part
    cols = ["relation", "direction", "n", "accuracy", "baseline_offset", "baseline_accuracy", "gain"]
    return part.sort_values("gain", ascending=False)[cols].head(top).reset_index(drop=True)


# --------------------------------------------------------------------------- pruning

def grid_points(curves: pd.DataFrame) -> pd.DataFrame:
    """The ``pruning_curves`` rows on the shared grid of shares: the single-head points added near a
    threshold (``refined``) exist for some methods and seeds only, so they stay out of means."""
    return curves[~curves["refined"].astype(bool)] if "refined" in curves else curves


def pruning_means(curves: pd.DataFrame) -> pd.DataFrame:
    """The ``pruning_curves`` table (``method, share_removed, value``), mean over seeds per method
    and share of heads removed, grid points only: ``method, share_removed, mean, sd, n, ci95``."""
    return mean_ci(grid_points(curves), ["method", "share_removed"])


def pruning_metric(curves: pd.DataFrame) -> str:
    """The name of the metric a ``pruning_curves`` table measures (its ``metric`` column), else ``"metric"``."""
    return str(curves["metric"].iloc[0]) if "metric" in curves else "metric"


def pruning_scale(curves: pd.DataFrame) -> tuple[float, str]:
    """``(sign, axis title)`` putting a ``pruning_curves`` table on its metric's own scale: the
    analysis maximises, so an MLM loss is stored as minus the loss (sign -1: the page shows the
    loss, lower is better); any other metric is shown as stored (higher is better)."""
    name = pruning_metric(curves)
    if "minus eval loss" in name or name.lower().startswith("mlm loss"):
        return -1.0, "held-out MLM loss (nats/token; lower is better)"
    return 1.0, f"{name.replace(', metric: ', ': ')} (higher is better)"


def on_own_scale(means: pd.DataFrame, sign: float) -> pd.DataFrame:
    """:func:`pruning_means` rows multiplied by ``sign`` (``mean``, ``low``, ``high``; the interval's
    ends swap when the sign is negative)."""
    if sign >= 0:
        return means
    out = means.assign(mean=-means["mean"])
    if {"low", "high"} <= set(means.columns):
        out["low"], out["high"] = -means["high"], -means["low"]
    return out


def threshold_marks(thresholds: pd.DataFrame, sign: float) -> pd.DataFrame:
    """Where each order's thresholds fall on its curve: ``method, tolerance, share_removed, value``
    (means over seeds of ``removable_share`` and of the test metric with those heads removed,
    ``value_test``, times ``sign``). ``thresholds``: the ``pruning_thresholds`` table."""
    value = "value_test" if "value_test" in thresholds.columns else "value"
    marks = thresholds.groupby(["method", "tolerance"], as_index=False).agg(
        share_removed=("removable_share", "mean"), value=(value, "mean"))
    marks["value"] = sign * marks["value"]
    return marks


def importance_grid(importance: pd.DataFrame) -> pd.DataFrame:
    """Head importance as a ``[layers, heads]`` grid (mean over seeds and methods).
    ``importance``: ``layer, head, importance``."""
    return importance.groupby(["layer", "head"])["importance"].mean().unstack()


# --------------------------------------------------------------------------- embeddings

def word_occurrences(clusters: pd.DataFrame, word: str) -> pd.DataFrame:
    """The rows of a ``sense_clusters`` table (``word, x, y``...) for one word."""
    return clusters[clusters["word"].astype(str) == word]


def clusters_layer(occurrences: pd.DataFrame) -> Any:
    """The layer whose vectors a word's sense clusters come from (its ``layer`` column), or None."""
    return occurrences["layer"].iloc[0] if "layer" in occurrences else None


# --------------------------------------------------------------------------- pretraining

def loss_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """Training and held-out loss rows of a ``training_metrics`` table (``step, metric, value``)."""
    return metrics[metrics["metric"].isin(["loss", "eval_loss"])]


def perplexity_rows(metrics: pd.DataFrame) -> pd.DataFrame:
    """Held-out perplexity rows of a ``training_metrics`` table (``step, metric, value``)."""
    return metrics[metrics["metric"] == "perplexity"]


def checkpoint_steps(by_step: pd.DataFrame) -> list[int]:
    """The checkpoint steps of a table with a ``step`` column, ascending."""
    return sorted(int(s) for s in by_step["step"].unique())


def start_step(steps: list[int], wanted: str | None) -> int:
    """The step a checkpoint slider starts at: ``wanted`` (a deep link's ``?step=``) when it is one
    of ``steps``, else the last one."""
    return int(wanted) if wanted and wanted.lstrip("-").isdigit() and int(wanted) in steps else steps[-1]


def at_step(table: pd.DataFrame, step: int) -> pd.DataFrame:
    """The rows of one checkpoint step."""
    return table[table["step"] == step]


def best_layer_by_step(probes: pd.DataFrame, best_layers: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per checkpoint step and task, the best layer's test accuracy: ``step, task, value``.
    With emergence's ``best_layers`` table (``step, task, best_layer_score``: the layer chosen on
    dev, its test score), that; else (older runs) the maximum over layers of the ``probe_scores``
    test means (``step, task, layer, value``), which picks the layer on test and reads high."""
    if best_layers is not None and {"step", "task", "best_layer_score"} <= set(best_layers.columns):
        return best_layers.rename(columns={"best_layer_score": "value"})[["step", "task", "value"]]
    return probes.groupby(["step", "task", "layer"], as_index=False)["value"].mean() \
        .groupby(["step", "task"], as_index=False)["value"].max()


def cloze_accuracy_line(accuracy: pd.DataFrame) -> str:
    """``"top-1 / top-5 accuracy per step: 0: 0% / 5%, ..."`` from a ``cloze_accuracy`` table
    (``step, top1, top5``)."""
    return "top-1 / top-5 accuracy per step: " + ", ".join(
        f"{int(r.step)}: {r.top1:.0%} / {r.top5:.0%}" for r in accuracy.itertuples())


def cloze_guesses(cloze: pd.DataFrame, step: Any) -> pd.DataFrame:
    """What the checkpoint at ``step`` predicts for each masked word: ``sentence, masked word, top
    predictions`` (``"guess (12.5%), ..."`` in rank order), one row per masked sentence.
    ``cloze``: the ``cloze_predictions`` table (``step, text, masked, rank, prediction, probability``)."""
    shown = cloze[cloze["step"] == step]
    table = (shown.assign(guess=shown["prediction"].astype(str) + " ("
                          + (shown["probability"] * 100).round(1).astype(str) + "%)")
             .groupby(["text", "masked"], sort=False)["guess"].apply(lambda g: ", ".join(g)).reset_index())
    return table.rename(columns={"text": "sentence", "masked": "masked word", "guess": "top predictions"})


# What a comparison of two runs may differ in: the thing compared (model, seed) and how it was
# computed on this machine; anything else (task, probe, corpus, split, sizes) makes the two numbers
# measure different things.
COMPARED = frozenset({"model", "seed", "seeds", "device", "precision", "amp_dtype", "storage", "threads"})
DEFINING = ("corpus", "limit", "tasks", "task", "probe", "pooling", "span_pooling", "split", "test_fraction",
            "dev_fraction", "metric", "modes")


def comparison_mismatches(manifest_a: dict[str, Any], manifest_b: dict[str, Any]) -> list[str]:
    """What makes two runs' numbers incomparable: differing config fields outside :data:`COMPARED`
    (the fields of :data:`DEFINING` first: task, probe, corpus, split...), a different corpus content
    or a different study. Returns one human-readable line per difference; [] when only the compared
    things (model, seed, device...) differ."""
    problems = []
    if manifest_a.get("study") != manifest_b.get("study"):
        problems.append(f"study: {manifest_a.get('study')} vs {manifest_b.get('study')}")
    config_a, config_b = manifest_a.get("config") or {}, manifest_b.get("config") or {}
    keys = sorted(set(config_a) | set(config_b), key=lambda k: (k not in DEFINING, k))
    for key in keys:
        if key in COMPARED:
            continue
        if config_a.get(key) != config_b.get(key):
            problems.append(f"{key}: {config_a.get(key)!r} vs {config_b.get(key)!r}")
    corpus_a = (manifest_a.get("corpus") or {}).get("fingerprint")
    corpus_b = (manifest_b.get("corpus") or {}).get("fingerprint")
    if corpus_a and corpus_b and corpus_a != corpus_b:
        problems.append("corpus content differs (another file or another subset)")
    return problems


# --------------------------------------------------------------------------- search

def search_rows(df: pd.DataFrame, text: str | None) -> pd.DataFrame:
    """The rows of ``df`` where any text column contains ``text`` (case-insensitive, taken
    literally: no pattern syntax); every row when ``text`` is empty."""
    text = (text or "").strip()
    if not text:
        return df
    columns = [c for c in df.columns if pd.api.types.is_string_dtype(df[c]) or pd.api.types.is_object_dtype(df[c])
               or isinstance(df[c].dtype, pd.CategoricalDtype)]
    if not columns:
        return df.iloc[0:0]
    hit = pd.Series(False, index=df.index)
    for c in columns:
        hit |= df[c].astype(str).str.contains(text, case=False, regex=False, na=False)
    return df[hit]


# --------------------------------------------------------------------------- what the measures mean

MEASURES: dict[str, str] = {
    "accuracy": "**accuracy**: share of held-out test items (words, spans or word pairs) whose label the probe "
                "predicts; **macro F1**: the F1 of each label, averaged with equal weight.",
    "random_init": "**random-init baseline**: the same probe on a randomly initialised copy of the model (same "
                   "architecture and tokenizer); the gap to it is what pretraining added.",
    "E_s": "**E_s** (expected layer, scalar mix): E_s = Σ_l l·s_l with s_l the probe's learned softmax weight of "
           "layer l (layer 0 = embeddings): the layer the probe draws on, on average.",
    "E_delta": "**E_Δ** (cumulative expected layer): E_Δ = Σ_l l·Δ_l / Σ_l Δ_l with Δ_l = score(layers 0..l) − "
               "score(layers 0..l−1): the layer where the score is gained, on average. Below 1 means most of the "
               "gain comes with layer 1 and some later layers lose score (negative Δ_l are kept).",
    "selectivity": "**selectivity** (Hewitt & Liang 2019): task accuracy − accuracy on a control task that gives "
                   "each word type a fixed random label; high = the probe reads the representation rather than "
                   "memorising words.",
    "mdl": "**MDL compression** (Voita & Titov 2020): bits to send the labels uniformly ÷ bits with the online "
           "code (a probe trained on growing blocks of data); higher = the labels are easier to extract.",
    "head_types": "**positional share**: share of a head's queries whose attention peak is at one relative offset; "
                  "**normalised entropy**: entropy of its attention ÷ log of the positions it can attend to (1 = uniform); "
                  "**special share**: its attention mass on [CLS]/[SEP].",
    "syntactic": "**relation accuracy** (Clark et al. 2019): share of a relation's word pairs where the head's most "
                 "attended other word is the partner; the **offset baseline** always picks the best fixed "
                 "relative position. **UAS**: share of words whose predicted syntactic head is right.",
    "importance": "**importance** (Michel et al. 2019): E_x |∂L/∂ξ_h|, how much the loss changes when a gate ξ_h "
                  "on head h's output moves, normalised per layer.",
    "threshold": "**threshold**: the share of heads an order removes before the metric on dev worsens by more than "
                 "the tolerance (relative: 1% = the loss up by 1% or the accuracy down by 1%).",
    "l0": "**L0 gates** (Voita et al. 2019; Louizos et al. 2018): a stochastic Hard Concrete gate per head, trained on "
          "the task loss + λ·Σ_h P(gate_h open); a larger λ closes more heads. P(open) is the learned probability; "
          "a head is removed when its deterministic test-time gate is 0.",
    "lottery": "**magnitude ticket** (Frankle & Carbin 2019; Chen et al. 2020): fine-tune, remove the smallest-"
               "magnitude share of the encoder's remaining weights, rewind the rest to the pre-trained values and "
               "fine-tune again, round after round; **random mask**: as many weights removed at random.",
    "quantization": "**int8 (dynamic)**: torch's int8 kernels, weights stored in 8 bits, activations quantized per "
                    "batch at run time -- its size and speed are real; **simulated b-bit**: each weight rounded to "
                    "one of 2^(b−1)−1 symmetric levels per output channel, run as float32 -- the accuracy is what b "
                    "bits give, the size the packed one, no speed-up. Only the transformer layers' Linear weights "
                    "are quantized; embeddings and the classifier stay float32.",
    "finetune_modes": "**frozen**: the encoder unchanged, a classifier trained on its features; **full**: every "
                      "weight trained; **BitFit**: only the bias terms; **adapters**: small bottleneck layers added "
                      "after each sublayer, the rest frozen. Intervals: t over seeds with a bootstrap over test "
                      "examples as floor; differences from full are paired on the same examples.",
    "cka": "**linear CKA** (Kornblith et al. 2019): ‖YᵀX‖²_F / (‖XᵀX‖_F ‖YᵀY‖_F) on centred word vectors of the "
           "same held-out sentences before (X) and after (Y) fine-tuning; 1 = the same representation up to "
           "rotation and scale.",
    "weight_change": "**relative weight change**: ‖W_after − W_before‖_F / ‖W_before‖_F per module kind "
                     "(attention, feed-forward, LayerNorm, embeddings) of each layer.",
    "attention_js": "**attention change**: Jensen–Shannon divergence between a head's attention row before and "
                    "after fine-tuning, averaged over the rows of held-out sentences and over the layer's heads.",
    "contextuality": "**self-similarity**: mean cosine between a word's vectors in its different contexts; "
                     "**intra-sentence similarity**: mean cosine between each word and its sentence's mean "
                     "vector; **MEV**: share of a word's variance its first principal component explains; "
                     "**anisotropy baseline**: the same measure on random words; adjusted = raw − baseline.",
    "semantic_change": "**change**: 1 − cosine between a word's vector in slice A, rotated onto slice B by "
                       "Procrustes on frequent shared words, and its vector in B; mean over document-bootstrap "
                       "replicates, with their 95% range. **neighbourhood change** (Hamilton et al. 2016): 1 − "
                       "cosine of the word's similarities to its nearest neighbours in each slice. **control**: "
                       "how far words of the same frequency move between two random halves of one slice; a word "
                       "**moved** when its whole interval is above it.",
    "alignment": "**P@k**: share of held-out source words whose dictionary translation is among the k nearest "
                 "target words after the mapping; **CSLS**: 2·cosine minus each of the two words' mean cosine to "
                 "its 10 nearest neighbours in the other space (penalises hubs).",
}

PAGE_MEASURES: dict[str, tuple[str, ...]] = {
    "Probing": ("accuracy", "random_init", "E_s", "E_delta", "selectivity", "mdl"),
    "Feature combinations": ("accuracy",),
    "Heads": ("head_types", "syntactic"),
    "Pruning": ("importance", "threshold", "l0"),
    "Embeddings": ("contextuality",),
    "Alignment": ("alignment",),
    "Semantic change": ("semantic_change",),
    "Fine-tuning": ("finetune_modes", "cka", "weight_change", "attention_js"),
    "Compression": ("importance", "threshold", "lottery", "quantization"),
}


def selectivity_by_layer(controls: pd.DataFrame) -> pd.DataFrame:
    """``task, layer, selectivity``: the test selectivity rows of a ``controls`` table (task rows,
    already means over seeds), one per task and layer."""
    rows = controls[(controls["metric"] == "selectivity") & ~controls["control"].astype(bool)]
    if rows.empty:   # selectivity rows carry the control flag in some runs
        rows = controls[controls["metric"] == "selectivity"]
    return rows.groupby(["task", "layer"], as_index=False)["value"].mean().rename(columns={"value": "selectivity"})


def mdl_by_layer(mdl: pd.DataFrame) -> pd.DataFrame:
    """``task, layer, compression``: MDL compression (uniform ÷ online bits) per task and layer, the
    mean over seeds, task probes only."""
    rows = mdl[mdl["metric"] == "compression"]
    if "control" in rows:
        rows = rows[~rows["control"].astype(bool)]
    return rows.groupby(["task", "layer"], as_index=False)["value"].mean().rename(columns={"value": "compression"})


def first_seed(gates: pd.DataFrame) -> pd.DataFrame:
    """The rows of the first seed of each λ of an ``l0_gates`` table (a map shows one gate set)."""
    if "seed" not in gates:
        return gates
    first = gates.groupby("lam")["seed"].transform("min")
    return gates[gates["seed"] == first]


def type_changes(types: pd.DataFrame) -> pd.DataFrame:
    """Per mode: the share of heads whose type changed with fine-tuning and the most common
    changes (``before → after``), from a ``head_types_before_after`` table (one task)."""
    rows = []
    for mode, part in types.groupby("mode", sort=False):
        moved = part[part["changed"].astype(bool)]
        common = (moved["type_before"].astype(str) + " → " + moved["type_after"].astype(str)).value_counts().head(3)
        rows.append({"mode": mode, "changed_share": float(part["changed"].astype(bool).mean()),
                     "most_common_changes": ", ".join(f"{k} ({v})" for k, v in common.items()) or "none"})
    return pd.DataFrame(rows, columns=["mode", "changed_share", "most_common_changes"])


def lottery_curves(runs: pd.DataFrame) -> pd.DataFrame:
    """``kind, sparsity, mean, low, high``: test accuracy against sparsity for the magnitude tickets
    and the random masks of a ``lottery_runs`` table, the dense model (sparsity 0) starting both lines."""
    dense = runs[runs["kind"] == "dense"]
    parts = [runs[runs["kind"] != "dense"]]
    for kind in ("imp", "random"):
        if (runs["kind"] == kind).any():
            parts.append(dense.assign(kind=kind))
    out = pd.concat(parts, ignore_index=True)
    out["kind"] = out["kind"].map({"imp": "magnitude ticket (IMP, rewound)", "random": "random mask"})
    return out.rename(columns={"test_accuracy": "mean", "test_low": "low", "test_high": "high"})[
        ["kind", "sparsity", "mean", "low", "high"]].sort_values(["kind", "sparsity"]).reset_index(drop=True)


def measure_lines(page: str) -> list[str]:
    """The one-line definitions (markdown) of the measures the page ``page`` shows."""
    return [MEASURES[name] for name in PAGE_MEASURES.get(page, ())]


def best_layer_difference(summary_a: pd.DataFrame, sentences_a: pd.DataFrame, summary_b: pd.DataFrame,
                          sentences_b: pd.DataFrame, metric: str = "accuracy") -> pd.DataFrame:
    """Run A minus run B per task, each at its own best layer (chosen on dev: ``summary``'s
    ``best_layer``), paired on the test sentences both runs scored (``test_sentences`` tables:
    ``task, mode, control, layer, sentence, metric, numerator, denominator``). Returns ``task,
    layer A, layer B, A, B, A − B, low, high, p, shared sentences, unpaired sentences, small sample``
    (95% paired sentence bootstrap, :func:`bertology.uncertainty.paired_on_shared_groups`); a task
    whose runs share no test sentence has NaN difference and says so by its unpaired count."""
    def at_best(summary: pd.DataFrame, sentences: pd.DataFrame) -> dict[str, pd.DataFrame]:
        keep = (sentences["metric"] == metric) & (sentences["mode"] == "per_layer") & ~sentences["control"].astype(bool)
        rows = sentences[keep]
        out = {}
        for r in summary.dropna(subset=["best_layer"]).itertuples():
            out[r.task] = (int(r.best_layer), rows[(rows["task"] == r.task) & (rows["layer"] == int(r.best_layer))])
        return out

    a, b = at_best(summary_a, sentences_a), at_best(summary_b, sentences_b)
    rows = []
    for task in [t for t in a if t in b]:
        (layer_a, sa), (layer_b, sb) = a[task], b[task]
        cmp, unmatched = paired_on_shared_groups(sa["sentence"], sa["numerator"], sa["denominator"],
                                                 sb["sentence"], sb["numerator"], sb["denominator"])
        n_items = int(sa[sa["sentence"].isin(sb["sentence"])]["denominator"].sum())
        rows.append({"task": task, "layer A": layer_a, "layer B": layer_b,
                     "A": sa["numerator"].sum() / sa["denominator"].sum(),
                     "B": sb["numerator"].sum() / sb["denominator"].sum(), "A − B": cmp.difference,
                     "low": cmp.low, "high": cmp.high, "p": cmp.p_value, "shared sentences": cmp.n_groups,
                     "unpaired sentences": unmatched, "small sample": is_small_sample(n_items)})
    return pd.DataFrame(rows, columns=["task", "layer A", "layer B", "A", "B", "A − B", "low", "high", "p",
                                       "shared sentences", "unpaired sentences", "small sample"])


def change_rows(word_change: pd.DataFrame, comparison: str, n: int, most: str = "moved") -> pd.DataFrame:
    """The ``n`` most moved (highest ``cosine_distance``) or most stable (lowest upper end ``high``)
    words of one comparison of a ``word_change`` table (columns ``comparison, word,
    cosine_distance, low, high, control_threshold, moved, stable``)."""
    part = word_change[word_change["comparison"] == comparison]
    if most == "moved":
        return part.sort_values(["cosine_distance", "word"], ascending=[False, True]).head(n)
    return part.sort_values(["high", "word"]).head(n)
