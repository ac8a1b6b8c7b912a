"""Semantic change between two slices of documents ("1900 vs 1990", "left vs right") with scores
that hold up on small corpora.

Per comparison of slice A with slice B (docs/METHODS.md, "Semantic change"):

1. **Replicates.** Word2vec neighbours on a few hundred thousand words change from seed to seed
   (Antoniak & Mimno 2018), so every score is computed ``replicates`` times, each time on a
   bootstrap resample of each slice's *documents* (drawn with replacement) and, for word2vec,
   with its own training seed. A word's score is the mean over replicates, its interval the
   percentile interval over replicates.
2. **Scores** for each word both slices hold at least ``min_count`` times:
   ``cosine_distance`` = 1 − cos between the word's vector in A mapped by orthogonal Procrustes
   onto B and its vector in B (Hamilton et al. 2016a), the map fitted on the ``anchors`` most
   frequent shared words (optionally leaving out the words under test); ``neighbourhood_distance``
   = the second-order measure of Hamilton et al. (2016b): the cosine distance between the word's
   similarities to the union of its ``k`` nearest neighbours in A and in B, each computed in its
   own space (needs no alignment) on unit vectors as histwords does (``neighbourhood_centred``:
   on vectors centred on the anchors' mean instead).
3. **A control from the word's own noise.** Each slice's documents are split at random into two
   halves, ``control_replicates`` times, both halves get a space, and the same cosine distance is
   computed between the halves: how far the word moves when nothing changed (``2 ×
   control_replicates`` scores per word, at half the data, so the control is noisier than a full
   slice and the test conservative). With ``control="word"`` (the default) a word ``moved`` when
   the lower end of its interval is above its own ``control_threshold``: the upper
   ``control_level`` = ``1 − (1 − control_quantile) / m`` Student-t prediction bound of its ``n``
   control scores, ``mean + t(control_level, n − 1) · sd · sqrt(1 + 1/n)``, over the ``m`` words
   of the comparison (Bonferroni: a family-wise ``1 − control_quantile`` for the comparison when
   the control scores are normal). ``control="bin"`` is the rule before issue 42: words binned by
   frequency (``frequency_bins`` quantile bins of their lower count in the two slices), one
   threshold per bin from the bin's pooled control scores, which the bin's noisiest words set.
   ``stable``: the upper end of the interval below the control's median.
4. **Every word has a row.** A word not tested says why in ``status`` (``"scored"`` when it is):
   too few replicates or control scores, or, for a word of ``tested``, fewer than ``min_count``
   occurrences in a slice.

A space is built by a :data:`SpaceBuilder`: ``build(document_indices, seed) -> StaticVectors``, so
word2vec (:func:`word2vec_builder`) and type-level contextual vectors (the mean of a word's
contextual vectors per slice, :func:`contextual_builder`, resampled without re-running the model)
share the procedure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from bertology.errors import WorkbenchError
from bertology.probes.embeddings.alignment import neighbour_names, procrustes, topk_cosine
from bertology.probes.embeddings.static_vectors import StaticVectors, train_word2vec, unit_rows

SpaceBuilder = Callable[[np.ndarray, int], StaticVectors]
"""``build(document_indices [n] (repeats allowed), seed) -> StaticVectors`` of one slice."""

CHANGE_COLUMNS = [
    "comparison",
    "word",
    "status",
    "count_a",
    "count_b",
    "frequency_bin",
    "cosine_distance",
    "low",
    "high",
    "neighbourhood_distance",
    "neighbourhood_low",
    "neighbourhood_high",
    "n_replicates",
    "n_control",
    "control_threshold",
    "control_level",
    "control_median",
    "moved",
    "stable",
    "neighbours_a",
    "neighbours_b",
]

SCORED = "scored"
"""``status`` of a word whose change was tested against its control."""

CONTROL_RULES = ("word", "bin")
MIN_CONTROL_SCORES = 3  # a t prediction bound needs a spread with at least 2 degrees of freedom


@dataclass(frozen=True)
class ChangeSettings:
    """The knobs of :func:`semantic_change` (defaults in docs/METHODS.md, "Semantic change")."""

    replicates: int = 10  # document bootstraps (word2vec: each with its own seed)
    control_replicates: int = 3  # random half splits of each slice
    min_count: int = 20  # a word is scored when both slices hold it this often
    anchors: int = 2000  # Procrustes anchors: the most frequent shared words
    exclude_tested: bool = False  # leave the words under test out of the anchors
    tested: tuple[str, ...] = ()  # the words under test (scored; with exclude_tested not anchors)
    k: int = 10  # neighbours of the second-order measure
    neighbourhood_centred: bool = False  # histwords: unit vectors; True: centred on the anchors' mean first
    control: str = "word"  # word: each word's own split-half scores | bin: its frequency bin's pooled scores
    frequency_bins: int = 5
    control_quantile: float = 0.95  # 1 - the family-wise level (word: over the comparison; bin: a bin)
    confidence: float = 0.95
    n_neighbours: int = 5  # neighbours listed per word and side
    seed: int = 0

    def __post_init__(self) -> None:
        if self.control not in CONTROL_RULES:
            raise WorkbenchError(f"control must be one of {', '.join(CONTROL_RULES)}, got {self.control!r}")
        if not 0 < self.control_quantile < 1:
            raise WorkbenchError(f"control_quantile must be in (0, 1), got {self.control_quantile}")


def word_counts(sentences: Sequence[Sequence[Sequence[str]]]) -> Counter:
    """Word counts of a slice given as ``[documents][sentences][words]``."""
    return Counter(w for doc in sentences for s in doc for w in s)


def word2vec_builder(
    sentences: Sequence[Sequence[Sequence[str]]],
    *,
    dim: int = 100,
    window: int = 5,
    min_count: int = 5,
    epochs: int = 5,
    name: str = "slice",
) -> SpaceBuilder:
    """Word2vec (skip-gram, one worker, so a seed gives the same vectors) on the chosen documents."""

    def build(indices: np.ndarray, seed: int) -> StaticVectors:
        chosen = [s for i in indices for s in sentences[int(i)]]
        return train_word2vec(chosen, dim=dim, window=window, min_count=min_count, epochs=epochs, seed=seed, name=name)

    return build


def contextual_builder(
    document_sums: Sequence[dict[str, np.ndarray]],
    document_counts: Sequence[Counter],
    *,
    min_count: int = 5,
    name: str = "slice",
) -> SpaceBuilder:
    """Type-level vectors from a contextual model: a word's vector is the mean of its contextual
    vectors over its occurrences in the chosen documents. ``document_sums[d][word]``: the sum
    ``[dim]`` of that word's vectors in document ``d`` (one model pass over the slice, at one
    layer); ``document_counts[d][word]``: its occurrences. A resample only re-weights the sums."""

    def build(indices: np.ndarray, seed: int) -> StaticVectors:
        sums: dict[str, np.ndarray] = {}
        counts: Counter = Counter()
        for i in indices:
            for word, vector in document_sums[int(i)].items():
                sums[word] = sums[word] + vector if word in sums else vector.astype(np.float64).copy()
            counts.update(document_counts[int(i)])
        words = sorted((w for w in sums if counts[w] >= min_count), key=lambda w: (-counts[w], w))
        if not words:
            raise WorkbenchError(f"{name}: no word occurs {min_count} times in the chosen documents")
        matrix = np.stack([sums[w] / counts[w] for w in words]).astype(np.float32)
        return StaticVectors(words, matrix, name, {"source": "contextual type vectors", "min_count": min_count})

    return build


def _centred_unit(space: StaticVectors, centre_words: Sequence[str]) -> np.ndarray:
    """Unit rows, centred on the mean of ``centre_words`` (the anchors: words under test left out of
    the anchors do not move the centre), unit rows again."""
    x = unit_rows(space.matrix)
    return unit_rows(x - x[space.indices(centre_words)].mean(0, keepdims=True))


def change_scores(
    a: StaticVectors,
    b: StaticVectors,
    words: Sequence[str],
    anchor_words: Sequence[str],
    k: int = 10,
    *,
    centred_neighbourhood: bool = False,
) -> pd.DataFrame:
    """``word, cosine_distance, neighbourhood_distance`` of each of ``words`` (all in both spaces):
    Procrustes on ``anchor_words`` (vectors centred on the anchors' mean) for the first, Hamilton et
    al.'s second-order measure with ``k`` neighbours per side for the second, on unit vectors (as
    histwords) or, with ``centred_neighbourhood``, on the centred ones (module docstring)."""
    anchors = [w for w in anchor_words if w in a and w in b]
    if len(anchors) < 2:
        raise WorkbenchError("change_scores: fewer than two anchor words shared by the two spaces")
    xa, xb = _centred_unit(a, anchors), _centred_unit(b, anchors)
    w = procrustes(xa[a.indices(anchors)], xb[b.indices(anchors)])
    ia, ib = a.indices(list(words)), b.indices(list(words))
    mapped = unit_rows(xa[ia] @ w)
    cosine = 1.0 - np.sum(mapped * xb[ib], axis=1)
    ua, ub = (xa, xb) if centred_neighbourhood else (unit_rows(a.matrix), unit_rows(b.matrix))
    second = neighbourhood_distances(a, b, ua, ub, words, k)
    return pd.DataFrame({"word": list(words), "cosine_distance": cosine, "neighbourhood_distance": second})


def neighbourhood_distances(
    a: StaticVectors, b: StaticVectors, ua: np.ndarray, ub: np.ndarray, words: Sequence[str], k: int
) -> np.ndarray:
    """Hamilton et al. (2016b)'s second-order distance ``[len(words)]``: per word, the cosine
    distance between its similarities (in ``ua`` ``[|a|, d]`` and in ``ub`` ``[|b|, d]``, unit rows
    of ``a`` and ``b``) to the union of its ``k`` nearest neighbours in each space; union words
    missing from one space are left out (NaN when none is left)."""
    ia, ib = a.indices(list(words)), b.indices(list(words))
    _, na = topk_cosine(ua[ia], ua, k + 1)
    _, nb = topk_cosine(ub[ib], ub, k + 1)
    second = np.full(len(words), np.nan)
    for row, word in enumerate(words):
        either = {a.words[j] for j in na[row]} | {b.words[j] for j in nb[row]}
        union = sorted(u for u in either if u != word and u in a and u in b)
        if union:
            sa = ua[a.indices(union)] @ ua[ia[row]]
            sb = ub[b.indices(union)] @ ub[ib[row]]
            second[row] = 1.0 - float(sa @ sb / max(np.linalg.norm(sa) * np.linalg.norm(sb), 1e-12))
    return second


def _pair_scores(
    build_a: SpaceBuilder,
    build_b: SpaceBuilder,
    idx_a: np.ndarray,
    idx_b: np.ndarray,
    seed: int,
    words: Sequence[str],
    anchor_words: Sequence[str],
    settings: ChangeSettings,
) -> pd.DataFrame:
    """Scores of one replicate: both spaces built (in two threads: gensim releases the GIL)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(lambda job: job[0](job[1], seed), [(build_a, idx_a), (build_b, idx_b)])
    present = [w for w in words if w in a and w in b]
    if not present:
        return pd.DataFrame(columns=["word", "cosine_distance", "neighbourhood_distance"])
    return change_scores(a, b, present, anchor_words, settings.k, centred_neighbourhood=settings.neighbourhood_centred)


def _frequency_bins(low_counts: pd.Series, n_bins: int) -> pd.Series:
    """Quantile bins (0 = rarest) of the words' log counts; fewer bins when counts tie."""
    ranks = np.log(low_counts.astype(float)).rank(method="first")
    return pd.qcut(ranks, q=min(n_bins, len(low_counts)), labels=False, duplicates="drop").astype(int)


def _control(
    build: SpaceBuilder,
    n_docs: int,
    settings: ChangeSettings,
    words: Sequence[str],
    anchor_words: Sequence[str],
    rng: np.random.Generator,
) -> pd.DataFrame:
    """Scores between two random halves of one slice's documents, ``control_replicates`` times."""
    if n_docs < 2:
        raise WorkbenchError("semantic change control: a slice needs at least two documents to split in halves")
    frames = []
    for r in range(settings.control_replicates):
        order = rng.permutation(n_docs)
        half = n_docs // 2
        seed = int(rng.integers(2**31))
        frames.append(
            _pair_scores(build, build, order[:half], order[half:], seed, words, anchor_words, settings).assign(
                replicate=r
            )
        )
    return pd.concat(frames, ignore_index=True)


def semantic_change(
    build_a: SpaceBuilder,
    build_b: SpaceBuilder,
    counts_a: Counter,
    counts_b: Counter,
    n_docs: tuple[int, int],
    settings: ChangeSettings = ChangeSettings(),
    *,
    comparison: str = "a vs b",
    progress: Callable[[str], None] | None = None,
) -> dict[str, pd.DataFrame]:
    """Semantic change from slice A to slice B with replicate intervals and a split-half control
    (module docstring). ``counts_*``: word counts of each whole slice; ``n_docs``: the slices'
    document counts (what the builders' indices range over).

    Returns ``word_change`` (:data:`CHANGE_COLUMNS`, most moved first; a row for every word both
    slices hold ``min_count`` times and for every word of ``tested``, ``status`` saying whether it
    was tested and if not why), ``replicates`` (``replicate, word, cosine_distance,
    neighbourhood_distance``), ``control_scores`` (``slice, replicate, word, cosine_distance,
    neighbourhood_distance``: every split-half score) and ``control`` (per frequency bin:
    ``frequency_bin, words, n_control_scores, control_median, control_max, control_threshold,
    control_level, rule``)."""
    shared = [w for w, c in counts_a.items() if c >= settings.min_count and counts_b.get(w, 0) >= settings.min_count]
    if not shared:
        raise WorkbenchError(
            f"{comparison}: no word occurs min_count={settings.min_count} times in both slices (option min_count)"
        )
    shared.sort(key=lambda w: (-min(counts_a[w], counts_b[w]), w))
    tested = set(settings.tested)
    anchor_pool = [w for w in shared if not (settings.exclude_tested and w in tested)]
    anchor_words = anchor_pool[: settings.anchors]
    rng = np.random.default_rng(settings.seed)
    frames = []
    for r in range(settings.replicates):
        if progress:
            progress(f"    {comparison}: replicate {r + 1}/{settings.replicates}")
        idx_a, idx_b = rng.integers(0, n_docs[0], n_docs[0]), rng.integers(0, n_docs[1], n_docs[1])
        seed = int(rng.integers(2**31))
        frames.append(
            _pair_scores(build_a, build_b, idx_a, idx_b, seed, shared, anchor_words, settings).assign(replicate=r)
        )
    reps = pd.concat(frames, ignore_index=True)
    if progress:
        progress(f"    {comparison}: control (random halves of each slice)")
    control = pd.concat(
        [
            _control(build, n, settings, shared, anchor_words, rng).assign(slice=name)
            for build, n, name in ((build_a, n_docs[0], "a"), (build_b, n_docs[1], "b"))
        ],
        ignore_index=True,
    )
    table, bins = _summarise(reps, control, counts_a, counts_b, shared, settings)
    table = _sorted(pd.concat([table, _unscored_rows(settings, counts_a, counts_b, shared)], ignore_index=True))
    table["comparison"] = comparison
    final_a, final_b = build_a(np.arange(n_docs[0]), settings.seed), build_b(np.arange(n_docs[1]), settings.seed)
    table["neighbours_a"] = neighbour_names(final_a, list(table["word"]), settings.n_neighbours)
    table["neighbours_b"] = neighbour_names(final_b, list(table["word"]), settings.n_neighbours)
    return {
        "word_change": table[CHANGE_COLUMNS],
        "replicates": reps.assign(comparison=comparison),
        "control_scores": control[["slice", "replicate", "word", "cosine_distance", "neighbourhood_distance"]].assign(
            comparison=comparison
        ),
        "control": bins.assign(comparison=comparison),
    }


def word_control_thresholds(control: pd.DataFrame, family: int, control_quantile: float = 0.95) -> pd.DataFrame:
    """Each word's own control (``control``: ``word, cosine_distance`` rows, its split-half scores):
    ``n_control``, ``control_median`` and ``control_threshold``, the upper Student-t prediction
    bound ``mean + t(level, n − 1) · sd · sqrt(1 + 1/n)`` of one more score at ``control_level`` =
    ``1 − (1 − control_quantile) / family`` (Bonferroni over ``family`` words); NaN below
    :data:`MIN_CONTROL_SCORES` scores. Indexed by word."""
    grouped = control.groupby("word")["cosine_distance"]
    n, mean, sd = grouped.size(), grouped.mean(), grouped.std(ddof=1)
    level = 1 - (1 - control_quantile) / max(1, family)
    enough = n >= MIN_CONTROL_SCORES
    t = pd.Series(stats.t.ppf(level, np.maximum(n - 1, 1)), index=n.index)
    threshold = (mean + t * sd * np.sqrt(1 + 1 / n)).where(enough)
    return pd.DataFrame(
        {"n_control": n, "control_threshold": threshold, "control_level": level, "control_median": grouped.median()}
    )


def bin_control_thresholds(control: pd.DataFrame, bins: pd.Series, control_quantile: float = 0.95) -> pd.DataFrame:
    """The rule before issue 42, per frequency bin (``bins``: word -> bin): the pooled control
    scores' ``1 − (1 − control_quantile) / m`` quantile for the bin's ``m`` words (at most their
    maximum), their median, maximum and count. Indexed by bin: ``control_threshold, control_level,
    control_median, control_max, n_control_scores``."""
    per_bin = control.assign(frequency_bin=control["word"].map(bins)).groupby("frequency_bin")["cosine_distance"]
    words = bins.value_counts()
    level = pd.Series({b: min(1.0, 1 - (1 - control_quantile) / max(1, int(words.get(b, 1)))) for b in per_bin.groups})
    return pd.DataFrame(
        {
            "control_threshold": {b: float(np.quantile(v, level[b])) for b, v in per_bin},
            "control_level": level,
            "control_median": per_bin.median(),
            "control_max": per_bin.max(),
            "n_control_scores": per_bin.size(),
        }
    )


def _replicate_summary(reps: pd.DataFrame, words: Sequence[str], confidence: float) -> pd.DataFrame:
    """Per word (indexed by ``words``): mean and percentile interval over the replicates of both
    measures, and ``n_replicates`` (0 for a word no replicate held)."""
    alpha = (1 - confidence) / 2
    grouped = reps.groupby("word")
    out = {}
    for measure, prefix in (("cosine_distance", ""), ("neighbourhood_distance", "neighbourhood_")):
        out[measure] = grouped[measure].mean()
        out[f"{prefix}low" if prefix else "low"] = grouped[measure].quantile(alpha)
        out[f"{prefix}high" if prefix else "high"] = grouped[measure].quantile(1 - alpha)
    out["n_replicates"] = grouped.size()
    table = pd.DataFrame(out).reindex(list(words))
    table["n_replicates"] = table["n_replicates"].fillna(0).astype(int)
    return table


def _summarise(
    reps: pd.DataFrame,
    control: pd.DataFrame,
    counts_a: Counter,
    counts_b: Counter,
    shared: Sequence[str],
    settings: ChangeSettings,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per word (all of ``shared``): the replicate summary, its own control (or its bin's, with
    ``control="bin"``), ``status``, ``moved`` and ``stable``; per frequency bin: the control."""
    table = _replicate_summary(reps, shared, settings.confidence)
    bins = _frequency_bins(pd.Series({w: min(counts_a[w], counts_b[w]) for w in shared}), settings.frequency_bins)
    own = word_control_thresholds(control, len(shared), settings.control_quantile).reindex(table.index)
    by_bin = bin_control_thresholds(control, bins, settings.control_quantile)
    table["count_a"] = [int(counts_a[w]) for w in table.index]
    table["count_b"] = [int(counts_b[w]) for w in table.index]
    table["frequency_bin"] = bins.reindex(table.index).astype("Int64")
    table["n_control"] = own["n_control"].fillna(0).astype(int)
    chosen = (
        own if settings.control == "word" else by_bin.reindex(table["frequency_bin"].astype(int)).set_index(table.index)
    )
    for column in ("control_threshold", "control_level", "control_median"):
        table[column] = chosen[column].astype(float)
    table["status"] = _status(table, settings)
    tested = table["status"] == SCORED
    table["moved"] = tested & (table["low"] > table["control_threshold"])
    table["stable"] = tested & (table["high"] < table["control_median"])
    return table.rename_axis("word").reset_index(), _bin_table(by_bin, own, bins, settings.control)


def _status(table: pd.DataFrame, settings: ChangeSettings) -> list[str]:
    """``SCORED``, or why a word both slices hold was not tested."""
    needed = max(2, settings.replicates // 2)
    out = []
    for row in table.itertuples():
        if row.n_replicates < needed:
            out.append(f"in {row.n_replicates} of {settings.replicates} replicates (fewer than {needed}): not tested")
        elif np.isnan(row.control_threshold):
            out.append(f"{row.n_control} control scores (fewer than {MIN_CONTROL_SCORES}): not tested")
        else:
            out.append(SCORED)
    return out


def _bin_table(by_bin: pd.DataFrame, own: pd.DataFrame, bins: pd.Series, rule: str) -> pd.DataFrame:
    """The ``control`` table, one row per frequency bin: the bin's words, its pooled control scores'
    count, median and maximum, and the threshold the rule used (``word``: the median of the bin's
    words' own thresholds)."""
    out = by_bin.copy()
    out["words"] = bins.value_counts().reindex(out.index).fillna(0).astype(int)
    own_by_bin = own.assign(frequency_bin=bins.reindex(own.index))
    if rule == "word":
        out["control_threshold"] = own_by_bin.groupby("frequency_bin")["control_threshold"].median()
        out["control_level"] = own["control_level"].max()  # one level for the comparison (NaN: no control)
    out["rule"] = rule
    out.index.name = "frequency_bin"
    return out.reset_index()


def _unscored_rows(
    settings: ChangeSettings, counts_a: Counter, counts_b: Counter, shared: Sequence[str]
) -> pd.DataFrame:
    """A row for each word of ``tested`` below ``min_count`` in a slice: counts and the reason, no
    scores (the docs promise every tested word a row)."""
    missing = [w for w in dict.fromkeys(settings.tested) if w not in set(shared)]
    rows = [
        {
            "word": w,
            "count_a": int(counts_a.get(w, 0)),
            "count_b": int(counts_b.get(w, 0)),
            "n_replicates": 0,
            "n_control": 0,
            "moved": False,
            "stable": False,
            "status": f"below min_count {settings.min_count} (a: {counts_a.get(w, 0)}, b: {counts_b.get(w, 0)}): not scored",
        }
        for w in missing
    ]
    return pd.DataFrame(
        rows, columns=[c for c in CHANGE_COLUMNS if c not in ("comparison", "neighbours_a", "neighbours_b")]
    )


def _sorted(table: pd.DataFrame) -> pd.DataFrame:
    """Most moved first (unscored words last), typed columns."""
    table = table.sort_values(["cosine_distance", "word"], ascending=[False, True], na_position="last")
    table["frequency_bin"] = table["frequency_bin"].astype("Int64")
    for column in ("moved", "stable"):
        table[column] = table[column].astype(bool)
    return table.reset_index(drop=True)
