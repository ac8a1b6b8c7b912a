"""The dashboard's data shaping that several pages share: runs stacked side by side, means per
layer, small-sample flags, what makes two runs incomparable, table search and the one-line
definitions of each page's measures. Pure functions of data frames, no Streamlit, so each can be
tested on its own. The shaping only one page uses is in that page's module (:mod:`bertology.apps.pages`);
the figures several pages share are in :mod:`bertology.apps.figures`.

Column names are those the studies write (``docs/ARCHITECTURE.md``, results): each function says
which ones it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from bertology.numbering import is_current, to_index
from bertology.results import mean_ci


def stack_runs(parts: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """Tables of several runs stacked, each row tagged with its run's label in a ``run`` column."""
    return pd.concat([df.assign(run=label) for label, df in parts], ignore_index=True)


# --------------------------------------------------------------------------- scores per task and layer


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


# --------------------------------------------------------------------------- comparing two runs

# What a comparison of two runs may differ in: the thing compared (model, seed) and how it was
# computed on this machine; anything else (task, probe, corpus, split, sizes) makes the two numbers
# measure different things.
COMPARED = frozenset({"model", "seed", "seeds", "device", "precision", "amp_dtype", "storage", "threads"})
DEFINING = (
    "corpus",
    "limit",
    "tasks",
    "task",
    "probe",
    "pooling",
    "span_pooling",
    "split",
    "test_fraction",
    "dev_fraction",
    "metric",
    "modes",
)


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
    columns = [
        c
        for c in df.columns
        if pd.api.types.is_string_dtype(df[c])
        or pd.api.types.is_object_dtype(df[c])
        or isinstance(df[c].dtype, pd.CategoricalDtype)
    ]
    if not columns:
        return df.iloc[0:0]
    hit = pd.Series(False, index=df.index)
    for c in columns:
        hit |= df[c].astype(str).str.contains(text, case=False, regex=False, na=False)
    return df[hit]


# --------------------------------------------------------------------------- tables as a paper prints them

NO_VALUE = "–"


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def format_number(value: Any, digits: int = 3) -> str:
    """One number as printed: ``digits`` decimals (one above 100, with thousands separators),
    integers whole; ``"–"`` for a missing value."""
    if _missing(value):
        return NO_VALUE
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1e3):
        return f"{int(value):,}"
    value = float(value)
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def format_percent(share: Any, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage: ``0.9213`` -> ``"92.1%"``; ``"–"`` when missing."""
    return NO_VALUE if _missing(share) else f"{100 * float(share):.{digits}f}%"


def format_count(n: Any) -> str:
    """A sample size with thousands separators: ``1296`` -> ``"1,296"``; ``"–"`` when missing."""
    return NO_VALUE if _missing(n) else f"{int(n):,}"


def format_p(p: Any) -> str:
    """A p-value: ``"< 0.001"`` below it, else three decimals; ``"–"`` when missing."""
    if _missing(p):
        return NO_VALUE
    return "< 0.001" if float(p) < 0.001 else f"{float(p):.3f}"


NO_INTERVAL = "no interval"


def format_interval(mean: Any, low: Any, high: Any, digits: int = 3, percent: bool = False) -> str:
    """An estimate with its interval as a paper prints it: ``0.921 [0.862, 0.978]`` (``percent``:
    ``92.1% [86.2, 97.8]``). Missing bounds (one seed, one sentence) -> ``0.921 (no interval)``;
    a missing estimate -> ``"–"``."""
    if _missing(mean):
        return NO_VALUE
    ends = [b for b in (low, high) if not _missing(b)]
    if percent:
        shown, bounds = (
            format_percent(mean, max(digits - 2, 0)),
            [f"{100 * float(b):.{max(digits - 2, 0)}f}" for b in ends],
        )
    else:
        shown, bounds = format_number(mean, digits), [format_number(b, digits) for b in ends]
    return f"{shown} [{bounds[0]}, {bounds[1]}]" if len(bounds) == 2 else f"{shown} ({NO_INTERVAL})"


# The estimate a bare ``low, high`` pair belongs to: the first of these a table has.
INTERVAL_ESTIMATES = (
    "difference",
    "A − B",
    "value",
    "score",
    "accuracy",
    "uas",
    "mean",
    "estimate",
    "removable_share",
    "change",
)
COUNT_NAMES = ("n", "count", "heads_pruned", "examples", "iterations")
P_NAMES = ("p", "p_value", "mcnemar_p")
HEAD_NUMBERED_STUDIES = frozenset({"head_types", "pruning", "patching", "compression", "emergence"})
"""Studies whose tables name a head's (or an attention map's) layer and its heads. Their runs from
before :mod:`bertology.numbering` (no ``numbering`` in the manifest) counted both from 0; the other
studies' layers are hidden states, numbered as they still are (0 = embeddings)."""


def array_position(number: int, manifest: dict[str, Any]) -> int:
    """The 0-based array index (of a run's saved ``[layers, heads, ...]`` arrays) of the layer or head
    its tables call ``number``: ``number - 1``, or ``number`` itself in a run written before the one
    numbering (:func:`old_numbering_note`)."""
    return to_index(int(number)) if is_current(manifest) else int(number)


def old_numbering_note(manifest: dict[str, Any]) -> str | None:
    """A warning for a run of :data:`HEAD_NUMBERED_STUDIES` written before the one numbering (its
    tables count a head's layer and heads from 0, so they would be read one off); None otherwise.
    The dashboard does not renumber such files: it says so and asks for a re-run."""
    if manifest.get("study") not in HEAD_NUMBERED_STUDIES or is_current(manifest):
        return None
    return (
        f"This {manifest.get('study')} run ({manifest.get('run_id', '?')}) predates the numbering stated above: "
        "its tables count a head's layer and the heads from 0, so every layer and head number of a head on "
        "this page is one lower than the same head elsewhere. Re-run the study (with --force) to renumber it."
    )


INDEX_NAMES = ("layer", "head", "offset", "step", "seed", "rank", "k", "iteration", "epoch")


def interval_columns(columns: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(estimate, low, high)`` column triples of a table: ``<x>_low, <x>_high`` with the estimate
    ``<x>_score``, ``<x>_accuracy`` or ``<x>`` (``best_layer_low`` belongs to ``best_layer_score``),
    and a bare ``low, high`` with the first of :data:`INTERVAL_ESTIMATES` present."""
    present, out = set(columns), []
    for column in columns:
        if column.endswith("_low") and f"{column[:-4]}_high" in present:
            stem = column[:-4]
            estimate = next((c for c in (f"{stem}_score", f"{stem}_accuracy", stem) if c in present), None)
            if estimate is not None:
                out.append((estimate, column, f"{stem}_high"))
    if {"low", "high"} <= present:
        estimate = next((c for c in INTERVAL_ESTIMATES if c in present), None)
        if estimate is not None:
            out.append((estimate, "low", "high"))
    return out


def is_count(column: str) -> bool:
    """A column that holds a sample size (``n``, ``n_test``, ``test_items``, ``n_sentences``...)."""
    return (
        column in COUNT_NAMES
        or column.startswith(("n_", "params_"))
        or column.endswith(("_items", "_examples", "_sentences"))
    )


def is_share(column: str, percent: Sequence[str] = ()) -> bool:
    """A column shown as a percentage: named in ``percent`` or a ``share`` (``changed_share``...)."""
    return column in percent or column == "share" or column.endswith("_share") or column.startswith("share_")


def paper_table(
    df: pd.DataFrame, digits: int = 3, percent: Sequence[str] = (), drop: Sequence[str] = ()
) -> pd.DataFrame:
    """``df`` as a paper prints it (text cells, for display only; the result files stay raw): each
    estimate with its interval in one cell, ``"0.921 [0.862, 0.978]"``, under ``"<estimate> [95%
    CI]"`` (:func:`interval_columns`; the bounds' columns go); shares (:func:`is_share`) as
    percentages; sample sizes (:func:`is_count`) with thousands separators; p-values as ``"<
    0.001"``; other numbers at ``digits`` decimals; booleans yes / no; missing values ``"–"``.
    A ``mean, ci95`` pair (:func:`bertology.results.mean_ci`) is an interval too. ``drop``: columns
    left out."""
    out = df.drop(columns=[c for c in drop if c in df.columns]).copy()
    out.columns = [str(c) for c in out.columns]
    if {"mean", "ci95"} <= set(out.columns) and not {"low", "high"} & set(out.columns):  # mean ± ci95
        out = out.assign(low=out["mean"] - out["ci95"], high=out["mean"] + out["ci95"]).drop(columns=["ci95"])
    for estimate, low, high in interval_columns(list(out.columns)):
        as_percent = is_share(estimate, percent)
        out[estimate] = [
            format_interval(m, lo, hi, digits, as_percent) for m, lo, hi in zip(out[estimate], out[low], out[high])
        ]
        out = out.drop(columns=[low, high]).rename(columns={estimate: f"{estimate} [95% CI]"})
    for column in out.columns:
        values = out[column]
        if column.endswith(" [95% CI]") or not (
            pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values)
        ):
            continue
        if pd.api.types.is_bool_dtype(values):
            out[column] = values.map(format_number)
        elif column in P_NAMES:
            out[column] = values.map(format_p)
        elif is_share(column, percent):
            out[column] = values.map(format_percent)
        elif is_count(column):
            out[column] = values.map(format_count)
        elif pd.api.types.is_float_dtype(values) and column.endswith(INDEX_NAMES) and _whole(values):  # with gaps
            out[column] = values.map(lambda v: NO_VALUE if _missing(v) else str(int(v)))
        elif pd.api.types.is_float_dtype(values):
            out[column] = values.map(lambda v: format_number(v, digits))
    return out


def _whole(values: pd.Series) -> bool:
    """Every present value is a whole number (a float column of integers with missing values)."""
    present = values.dropna()
    return bool(len(present)) and bool((present == present.round()).all())


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
    "cosine of the word's similarities to its nearest neighbours in each slice (unit vectors, uncentred, "
    "as histwords). **control** (the default, `control: word`): how far the word itself moves between "
    "two random halves of one slice, over several splits; its threshold is the upper prediction bound "
    "of those scores, Bonferroni-corrected over the words compared. A word **moved** when its whole "
    "interval is above its own threshold (`control: bin`: the threshold of its frequency bin instead).",
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


def measure_lines(page: str) -> list[str]:
    """The one-line definitions (markdown) of the measures the page ``page`` shows."""
    return [MEASURES[name] for name in PAGE_MEASURES.get(page, ())]
