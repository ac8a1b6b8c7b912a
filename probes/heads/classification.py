"""Head types with published criteria: positional, syntactic, rare-token (Voita et al. 2019),
broad and special-token heads (Clark et al. 2019).

- positional: ≥ ``positional_threshold`` (0.9) of argmaxes at one relative offset (reported). By
  default (``positional_level="token"``, Voita et al.) over sub-word tokens with the special tokens
  in place (the store's ``token_offsets`` counts); ``positional_level="word"`` judges the argmax over
  words of Clark's word-level maps instead;
- syntactic: for a dependency relation and direction (``dependent_attends_to_head``: the dependent's
  argmax hits its head; ``head_attends_to_dependent``: the head's argmax hits one of its dependents
  with that relation), the accuracy beats the best fixed-offset baseline for that relation and
  direction by ≥ ``syntactic_margin`` (0.10) with at least ``min_count`` cases; the argmax is over
  the *other* words of the sentence (the word itself excluded, as Clark et al.'s predictor does)
  and, by default, only Voita et al.'s relations nsubj, dobj, amod, advmod count;
- rare-token: share of argmaxes on the sentence's least frequent word ≥ ``rare_threshold``;
- special: mean attention on [CLS] + [SEP] ≥ ``special_threshold`` (needs special attention);
- broad: normalised entropy ≥ ``broad_entropy`` (by default over words + [CLS] + [SEP]: see
  :mod:`bertology.probes.heads.stats`).
A head can meet several criteria; ``type`` is the first met in the order above, ``types`` lists all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from bertology.errors import WorkbenchError
from bertology.numbering import head_number, layer_number
from bertology.probes.heads.stats import DEFAULT_WINDOW, head_statistics

# ClearNLP (spaCy English) and UD spellings of the same relations -> one canonical label.
RELATION_ALIASES = {
    "obj": "dobj",
    "nmod:poss": "poss",
    "nsubj:pass": "nsubjpass",
    "aux:pass": "auxpass",
    "obl": "obl",
    "compound:prt": "prt",
}
CORE_RELATIONS = (
    "nsubj",
    "dobj",
    "amod",
    "advmod",
    "det",
    "prep",
    "case",
    "pobj",
    "poss",
    "aux",
    "compound",
    "conj",
    "cc",
    "mark",
    "nsubjpass",
    "auxpass",
    "acomp",
    "attr",
    "nummod",
    "obl",
    "nmod",
    "xcomp",
    "ccomp",
    "advcl",
    "relcl",
    "acl",
    "punct",
)
TYPE_ORDER = ("positional", "syntactic", "rare-token", "special", "broad")
# Voita et al. 2019 (Section 5.2): the relations their syntactic heads are judged on
VOITA_RELATIONS = ("nsubj", "dobj", "amod", "advmod")
DEPENDENT_TO_HEAD = "dependent_attends_to_head"  # the dependent's argmax is on its syntactic head
HEAD_TO_DEPENDENT = "head_attends_to_dependent"  # the head's argmax is on one of its dependents
DIRECTIONS = (DEPENDENT_TO_HEAD, HEAD_TO_DEPENDENT)
POSITIONAL_LEVELS = ("token", "word")


def canonical_relation(label: str) -> str:
    """Lower-case; UD aliases mapped (obj -> dobj, nmod:poss -> poss); other subtypes stripped."""
    label = label.lower()
    if label in RELATION_ALIASES:
        return RELATION_ALIASES[label]
    return label.split(":")[0]


def _relation_cases(heads: Sequence[int], deprels: Sequence[str]):
    """Per relation: (dependent, head) pairs and, per head word, its set of dependents; 0-based."""
    dep_to_head: dict[str, list[tuple[int, int]]] = {}
    head_to_deps: dict[str, dict[int, set[int]]] = {}
    for i, (h, rel) in enumerate(zip(heads, deprels)):
        if h is None or int(h) <= 0:
            continue
        rel = canonical_relation(rel)
        dep_to_head.setdefault(rel, []).append((i, int(h) - 1))
        head_to_deps.setdefault(rel, {}).setdefault(int(h) - 1, set()).add(i)
    return dep_to_head, head_to_deps


def argmax_other_word(attention: np.ndarray, exclude_self: bool = True) -> np.ndarray:
    """``[..., w]`` index of each row's most-attended word of ``[..., w, w]`` word attention; with
    ``exclude_self`` the word itself is left out (Clark et al.'s "most-attended-to other word")."""
    a = np.asarray(attention, dtype=np.float64)
    w = a.shape[-1]
    if exclude_self and w > 1:
        a = np.where(np.eye(w, dtype=bool), -np.inf, a)
    return a.argmax(-1)


CaseCounts = dict[tuple[str, str], tuple[np.ndarray, int, np.ndarray]]
"""Per (relation, direction): hits per head ``[L, H]``, cases, and hits per fixed offset ``[K]``."""


def _sentence_cases(attention: np.ndarray, sentence, offsets: Sequence[int], exclude_self: bool) -> CaseCounts:
    """One sentence's dependency cases (:func:`dependency_scores`' definitions) counted per head and
    per fixed offset. attention: ``[L, H, w, w]`` word attention."""
    if sentence.heads is None or sentence.deprels is None:
        raise WorkbenchError(f"sentence {sentence.sent_id}: no dependency annotation (heads/deprels)")
    a = np.asarray(attention)
    if a.shape[-1] != len(sentence.words):
        raise WorkbenchError(
            f"sentence {sentence.sent_id}: {len(sentence.words)} words but attention over {a.shape[-1]}"
        )
    w = a.shape[-1]
    argmax = argmax_other_word(a, exclude_self)  # [L, H, w]
    dep_to_head, head_to_deps = _relation_cases(sentence.heads, sentence.deprels)
    dep_to_head["all"] = [p for pairs in dep_to_head.values() for p in pairs]
    out: CaseCounts = {}
    for rel, pairs in dep_to_head.items():
        if not pairs:
            continue
        src = np.array([p[0] for p in pairs])
        tgt = np.array([p[1] for p in pairs])
        hits = (argmax[:, :, src] == tgt).sum(-1)
        offset_hits = np.array([int(((tgt - src) == k).sum()) for k in offsets])
        out[(rel, DEPENDENT_TO_HEAD)] = (hits, len(pairs), offset_hits)
    for rel, groups in head_to_deps.items():
        src = np.array(list(groups))
        member = np.zeros((len(src), w), dtype=bool)  # [cases, words]: is a dependent
        for row, h in enumerate(src):
            member[row, list(groups[h])] = True
        chosen = argmax[:, :, src]  # [L, H, cases]
        hits = member[np.arange(len(src))[None, None, :], chosen].sum(-1)
        offset_hits = np.zeros(len(offsets), dtype=np.int64)
        for i, k in enumerate(offsets):
            target = src + k
            ok = (target >= 0) & (target < w)
            offset_hits[i] = int(member[np.nonzero(ok)[0], target[ok]].sum())
        out[(rel, HEAD_TO_DEPENDENT)] = (hits, len(src), offset_hits)
    return out


def _sentence_case_counts(
    attentions: Iterable[np.ndarray], sentences: Iterable, offsets: Sequence[int], exclude_self: bool
) -> tuple[list[CaseCounts], tuple[int, int]]:
    """:func:`_sentence_cases` of every sentence, and the ``(layers, heads)`` shape."""
    per_sentence, shape = [], None
    for attention, sentence in zip(attentions, sentences):
        a = np.asarray(attention)
        shape = a.shape[:2]
        per_sentence.append(_sentence_cases(a, sentence, offsets, exclude_self))
    if shape is None:
        raise WorkbenchError("dependency_scores: no sentences")
    return per_sentence, shape


def _pool(per_sentence: Sequence[CaseCounts]) -> CaseCounts:
    """Sums of per-sentence counts per (relation, direction)."""
    total: CaseCounts = {}
    for cases in per_sentence:
        for key, (hits, n, offset_hits) in cases.items():
            if key in total:
                h, m, o = total[key]
                total[key] = (h + hits, m + n, o + offset_hits)
            else:
                total[key] = (hits.copy(), n, offset_hits.copy())
    return total


def _best_offset_index(offset_hits: np.ndarray, offsets: Sequence[int]) -> int:
    """The offset with the most hits, ties to the smallest ``|k|``."""
    return max(range(len(offsets)), key=lambda i: (offset_hits[i], -abs(offsets[i])))


def dependency_scores(
    attentions: Iterable[np.ndarray],
    sentences: Iterable,
    window: Sequence[int] = DEFAULT_WINDOW,
    *,
    exclude_self: bool = True,
) -> pd.DataFrame:
    """Per head, relation and direction, the share of cases whose argmax hits the gold partner.

    attentions: per sentence ``[layers, heads, words, words]`` word attention (special tokens are
    not candidates); sentences: ``Sentence`` objects with ``heads`` (1-based, 0 = root) and
    ``deprels``. The argmax is over the other words of the sentence (``exclude_self``, default, as
    Clark et al.); ``exclude_self=False`` lets a word's own column win (the earlier behaviour).
    Directions: ``dependent_attends_to_head`` (each dependent's argmax vs its head; also
    ``relation="all"``, unlabelled) and ``head_attends_to_dependent`` (each head word with
    dependents of that relation: is its argmax one of them).
    Returns ``layer, head, relation, direction, n, correct, accuracy, baseline_offset,
    baseline_accuracy, gain`` (gain = accuracy - baseline_accuracy, the best fixed offset in
    ``window``, 0 excluded, for that relation and direction, on the same sentences: a description
    of these sentences; :func:`held_out_best_heads` chooses on dev and reports on test).
    """
    offsets = [k for k in window if k != 0]
    per_sentence, shape = _sentence_case_counts(attentions, sentences, offsets, exclude_self)
    frames = []
    layers, heads_ = np.indices(shape)
    for key, (total, n, offset_hits) in _pool(per_sentence).items():
        best = _best_offset_index(offset_hits, offsets)
        accuracy = np.asarray(total, dtype=np.float64) / n
        frames.append(
            pd.DataFrame(
                {
                    "layer": layer_number(layers.ravel()),
                    "head": head_number(heads_.ravel()),
                    "relation": key[0],
                    "direction": key[1],
                    "n": n,
                    "correct": np.asarray(total).ravel(),
                    "accuracy": accuracy.ravel(),
                    "baseline_offset": offsets[best],
                    "baseline_accuracy": offset_hits[best] / n,
                    "gain": accuracy.ravel() - offset_hits[best] / n,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


IN_REACH_COLUMNS = [
    "layer",
    "head",
    "attention_window",
    "relation",
    "direction",
    "n",
    "n_in_reach",
    "arcs_in_reach",
    "correct",
    "accuracy",
    "accuracy_in_reach",
]


def dependency_scores_in_reach(
    attentions: Iterable[np.ndarray],
    sentences: Sequence,
    tokenizer,
    windows: Sequence[int | None],
    *,
    exclude_self: bool = True,
) -> pd.DataFrame:
    """A local head's dependency accuracy on the arcs it can see: for each layer with a local window
    (``windows[layer]`` tokens each side; ModernBERT's local layers), each head and relation, the
    dependent-attends-to-head cases split by whether the head word lies within the window of some
    piece of the dependent (:func:`bertology.probes.heads.stats.reachable_words`).

    ``accuracy`` is Clark et al.'s, over every arc (what :func:`dependency_scores` and the head types
    use); ``accuracy_in_reach`` = correct / ``n_in_reach``, the same hits over the arcs within reach
    (a local head's argmax never falls outside its window, so every hit is in reach):
    what the head does with what it can see. ``arcs_in_reach`` = n_in_reach / n, the ceiling of
    ``accuracy``. Global layers get no rows. Returns :data:`IN_REACH_COLUMNS`."""
    from bertology.features import tokenize_sentences
    from bertology.probes.heads.stats import reachable_words

    local = [layer for layer, window in enumerate(windows) if window is not None]
    sentences = list(sentences)
    if not local:
        return pd.DataFrame(columns=IN_REACH_COLUMNS)
    words = [list(s.words) for s in sentences]
    encoded = tokenize_sentences(tokenizer, words)
    sums: dict[str, list] = {}
    for attention, sentence, (_, word_ids) in zip(attentions, sentences, encoded):
        if sentence.heads is None or sentence.deprels is None:
            raise WorkbenchError(f"sentence {sentence.sent_id}: no dependency annotation (heads/deprels)")
        argmax = argmax_other_word(np.asarray(attention), exclude_self)  # [L, H, w]
        dep_to_head, _ = _relation_cases(sentence.heads, sentence.deprels)
        dep_to_head["all"] = [p for pairs in dep_to_head.values() for p in pairs]
        reach = {w: reachable_words(word_ids, w, len(sentence.words)) for w in {windows[l] for l in local}}
        for rel, pairs in dep_to_head.items():
            if not pairs:
                continue
            src, tgt = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
            hits = argmax[local][:, :, src] == tgt  # [local layers, H, cases]
            inside = np.stack([reach[windows[l]][src, tgt] for l in local])  # [local layers, cases]
            entry = sums.setdefault(rel, [0, np.zeros(len(local)), np.zeros(hits.shape[:2])])
            entry[0] += len(pairs)
            entry[1] += inside.sum(-1)
            entry[2] += hits.sum(-1)
    rows = []
    for rel, (n, n_in, correct) in sums.items():
        for i, layer in enumerate(local):
            for head in range(correct.shape[1]):
                rows.append(
                    {
                        "layer": layer_number(layer),
                        "head": head_number(head),
                        "attention_window": windows[layer],
                        "relation": rel,
                        "direction": DEPENDENT_TO_HEAD,
                        "n": n,
                        "n_in_reach": int(n_in[i]),
                        "arcs_in_reach": n_in[i] / n,
                        "correct": int(correct[i, head]),
                        "accuracy": correct[i, head] / n,
                        "accuracy_in_reach": correct[i, head] / n_in[i] if n_in[i] else float("nan"),
                    }
                )
    return pd.DataFrame(rows, columns=IN_REACH_COLUMNS)


BEST_HEAD_COLUMNS = [
    "relation",
    "direction",
    "layer",
    "head",
    "selected_on",
    "n_dev",
    "dev_accuracy",
    "baseline_offset",
    "dev_baseline_accuracy",
    "n",
    "n_sentences",
    "accuracy",
    "accuracy_low",
    "accuracy_high",
    "baseline_accuracy",
    "gain",
    "gain_low",
    "gain_high",
    "gain_p_value",
    "small_sample",
]


def held_out_best_heads(
    attentions: Iterable[np.ndarray],
    sentences: Sequence,
    *,
    dev_share: float = 0.5,
    seed: int = 0,
    min_count: int = 1,
    window: Sequence[int] = DEFAULT_WINDOW,
    exclude_self: bool = True,
    relations: Sequence[str] | None = None,
    n_resamples: int = 2000,
) -> pd.DataFrame:
    """The best head per relation and direction (Clark et al. 2019, Table / Fig. 5), chosen on dev
    and reported on test, against the best fixed-offset baseline chosen the same way.

    Sentences are split at random (``seed``) into dev (``dev_share``) and test. On dev, per
    relation and direction with at least ``min_count`` dev cases: the head with the highest
    accuracy (:func:`dependency_scores`' definitions) and the fixed offset in ``window`` with the
    most hits. On test: the chosen head's ``accuracy`` with a 95% interval (a bootstrap over test
    sentences, never narrower than the Wilson interval of ``n`` cases), the chosen offset's
    ``baseline_accuracy``, and ``gain`` = accuracy - baseline_accuracy with a paired bootstrap
    interval and p-value over the same test sentences (:func:`bertology.uncertainty.paired_bootstrap`).
    ``small_sample``: fewer than :data:`bertology.uncertainty.MIN_TEST_ITEMS` test cases.
    ``relations``: keep only these (``None``: all). Returns :data:`BEST_HEAD_COLUMNS`, most frequent
    relations first.
    """
    from bertology.uncertainty import is_small_sample, paired_bootstrap, ratio_bootstrap, wilson_interval

    if not 0 < dev_share < 1:
        raise WorkbenchError(f"held_out_best_heads: dev_share must be in (0, 1), got {dev_share}")
    offsets = [k for k in window if k != 0]
    per_sentence, _ = _sentence_case_counts(attentions, sentences, offsets, exclude_self)
    order = np.random.default_rng(seed).permutation(len(per_sentence))
    n_dev = min(len(order) - 1, max(1, int(round(dev_share * len(order)))))
    if n_dev < 1:
        raise WorkbenchError("held_out_best_heads: needs at least two sentences (one dev, one test)")
    dev, test = _pool([per_sentence[i] for i in order[:n_dev]]), [per_sentence[i] for i in order[n_dev:]]
    rows = []
    for key, (dev_hits, dev_n, dev_offsets) in dev.items():
        if dev_n < min_count or (relations is not None and key[0] not in relations):
            continue
        layer, head = np.unravel_index(int(np.argmax(dev_hits)), dev_hits.shape)
        k = _best_offset_index(dev_offsets, offsets)
        cases = [c[key] for c in test if key in c]
        if not cases:
            continue
        head_hits = np.array([float(h[layer, head]) for h, _, _ in cases])  # per test sentence
        base_hits = np.array([float(o[k]) for _, _, o in cases])
        n_cases = np.array([float(n) for _, n, _ in cases])
        n = int(n_cases.sum())
        boot = ratio_bootstrap(head_hits, n_cases, n_resamples=n_resamples, seed=seed)
        floor = wilson_interval(int(head_hits.sum()), n)
        gain = paired_bootstrap(head_hits, base_hits, n_cases, n_cases, n_resamples=n_resamples, seed=seed)
        rows.append(
            {
                "relation": key[0],
                "direction": key[1],
                "layer": layer_number(int(layer)),
                "head": head_number(int(head)),
                "selected_on": "dev",
                "n_dev": dev_n,
                "dev_accuracy": dev_hits[layer, head] / dev_n,
                "baseline_offset": offsets[k],
                "dev_baseline_accuracy": dev_offsets[k] / dev_n,
                "n": n,
                "n_sentences": len(cases),
                "accuracy": boot.estimate,
                "accuracy_low": min(boot.low, floor.low),
                "accuracy_high": max(boot.high, floor.high),
                "baseline_accuracy": base_hits.sum() / n,
                "gain": gain.difference,
                "gain_low": gain.low,
                "gain_high": gain.high,
                "gain_p_value": gain.p_value,
                "small_sample": is_small_sample(n),
            }
        )
    if not rows:
        raise WorkbenchError(
            f"held_out_best_heads: no relation with at least min_count={min_count} dev cases "
            f"and a test case (option min_count)"
        )
    out = pd.DataFrame(rows, columns=BEST_HEAD_COLUMNS)
    return out.sort_values(["n", "relation", "direction"], ascending=[False, True, True]).reset_index(drop=True)


def _wide(stats: pd.DataFrame) -> pd.DataFrame:
    return stats.pivot_table(index=["layer", "head"], columns="statistic", values="value").reset_index()


def _best_offset(wide: pd.DataFrame, prefix: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Per head, the offset with the largest share among ``{prefix}{k}`` columns and that share."""
    cols = [c for c in wide.columns if c.startswith(prefix) and c != f"{prefix}other"]
    if not cols:
        return None
    shares = wide[cols].to_numpy()
    best = shares.argmax(1)
    offsets = np.array([int(cols[i][len(prefix) :]) for i in best])
    return offsets, shares[np.arange(len(wide)), best]


def _wanted_relations(relations: Sequence[str] | str | None) -> set[str] | None:
    """``None``, ``"all"`` or ``["all"]``: every relation; else the canonical labels."""
    if relations is None or relations == "all" or list(relations) == ["all"]:
        return None
    if isinstance(relations, str):
        relations = [relations]
    return {canonical_relation(r) for r in relations}


def classify_heads(
    stats: pd.DataFrame,
    dependency: pd.DataFrame | None = None,
    *,
    positional_threshold: float = 0.9,
    syntactic_margin: float = 0.10,
    min_count: int = 20,
    rare_threshold: float = 0.5,
    special_threshold: float = 0.5,
    broad_entropy: float = 0.8,
    relations: Sequence[str] | str | None = VOITA_RELATIONS,
    positional_level: str = "token",
) -> pd.DataFrame:
    """One row per head: ``layer, head, type, types`` (``;``-joined) and the scores behind them.

    stats: :func:`bertology.probes.heads.stats.head_statistics` table; dependency: :func:`dependency_scores`.
    positional_level: ``"token"`` (default, Voita et al.: the ``token_offset_*`` statistics, argmax
    over sub-word tokens with special tokens in place) or ``"word"`` (the ``argmax_offset_*``
    statistics: argmax over words of the word-level maps). relations: the relations a syntactic head
    is judged on (default Voita et al.'s nsubj, dobj, amod, advmod; ``"all"`` / None: every relation
    but the unlabelled ``all``).
    Score columns: ``positional_offset, positional_share`` (at ``positional_level``),
    ``rare_share, special_share, entropy_norm, confidence, syntactic_relation,
    syntactic_direction, syntactic_accuracy, syntactic_baseline, syntactic_gain``, the flags
    ``is_*``, then ``positional_level, token_offset, token_share, word_offset, word_share`` (both
    views side by side; NaN where the stats lack one) and ``special_argmax_share`` (share of rows
    whose argmax is [CLS]/[SEP]). ``type`` is ``"other"`` when no criterion holds.
    """
    if positional_level not in POSITIONAL_LEVELS:
        raise WorkbenchError(f"positional_level must be one of {POSITIONAL_LEVELS}, not {positional_level!r}")
    wide = _wide(stats)
    views = {"token": _best_offset(wide, "token_offset_"), "word": _best_offset(wide, "argmax_offset_")}
    chosen = views[positional_level]
    if chosen is None:
        if positional_level == "token":
            raise WorkbenchError(
                "classify_heads: positional_level='token' needs token-level argmax offsets "
                "(token_offset_* statistics: head_statistics(..., token_offsets=[store.token_offsets(i) "
                "...]) from a store of version 2); positional_level='word' uses word-level maps"
            )
        raise WorkbenchError("classify_heads: stats have no argmax_offset_* statistics")
    out = wide[["layer", "head"]].copy()
    out["positional_offset"], out["positional_share"] = chosen
    for col, name in (
        ("argmax_rarest", "rare_share"),
        ("attn_special", "special_share"),
        ("entropy_norm", "entropy_norm"),
        ("confidence", "confidence"),
    ):
        out[name] = wide[col].to_numpy() if col in wide else np.nan
    out["syntactic_relation"] = None
    out["syntactic_direction"] = None
    for col in ("syntactic_accuracy", "syntactic_baseline", "syntactic_gain"):
        out[col] = np.nan
    if dependency is not None and not dependency.empty:
        dep = dependency[(dependency["n"] >= min_count) & (dependency["relation"] != "all")]
        wanted = _wanted_relations(relations)
        if wanted is not None:
            dep = dep[dep["relation"].isin(wanted)]
        if not dep.empty:
            top = dep.loc[dep.groupby(["layer", "head"])["gain"].idxmax()]
            top = top.set_index(["layer", "head"])
            idx = pd.MultiIndex.from_frame(out[["layer", "head"]])
            top = top.reindex(idx)
            out["syntactic_relation"] = top["relation"].to_numpy()
            out["syntactic_direction"] = top["direction"].to_numpy()
            out["syntactic_accuracy"] = top["accuracy"].to_numpy()
            out["syntactic_baseline"] = top["baseline_accuracy"].to_numpy()
            out["syntactic_gain"] = top["gain"].to_numpy()
    flags = {
        "positional": out["positional_share"] >= positional_threshold,
        "syntactic": out["syntactic_gain"].fillna(-np.inf) >= syntactic_margin,
        "rare-token": out["rare_share"].fillna(-np.inf) >= rare_threshold,
        "special": out["special_share"].fillna(-np.inf) >= special_threshold,
        "broad": out["entropy_norm"].fillna(-np.inf) >= broad_entropy,
    }
    types = [[t for t in TYPE_ORDER if flags[t].iloc[i]] for i in range(len(out))]
    out.insert(2, "type", [t[0] if t else "other" for t in types])
    out.insert(3, "types", [";".join(t) for t in types])
    for t in TYPE_ORDER:
        out[f"is_{t.replace('-', '_')}"] = flags[t].to_numpy()
    out["positional_level"] = positional_level
    for level in POSITIONAL_LEVELS:
        view = views[level]
        out[f"{level}_offset"] = view[0] if view is not None else np.nan
        out[f"{level}_share"] = view[1] if view is not None else np.nan
    out["special_argmax_share"] = wide["argmax_special"].to_numpy() if "argmax_special" in wide else np.nan
    return out.sort_values(["layer", "head"]).reset_index(drop=True)


def type_matrix(head_types: pd.DataFrame, column: str = "type") -> pd.DataFrame:
    """``[layer x head]`` matrix of a column of :func:`classify_heads` (ready for a heatmap)."""
    return head_types.pivot(index="layer", columns="head", values=column).sort_index()


def analyse_store(
    store,
    corpus,
    *,
    frequencies=None,
    special_attention=None,
    positional_level: str = "token",
    positional_queries: str = "all",
    special_tokens: str = "keep",
    exclude_self: bool = True,
    **thresholds,
) -> dict[str, pd.DataFrame]:
    """Stats, dependency scores and types from a ``FeatureStore`` with attention and its corpus.

    positional_level (``"token"``: the store's token-level argmax offsets, Voita et al.; ``"word"``),
    positional_queries (which query tokens the token-level shares count: ``"all"``, or ``"words"``
    to leave the special tokens' own rows out), special_tokens (``"keep"``: statistics over words +
    [CLS] + [SEP], Clark et al.; ``"drop"``), exclude_self (syntactic argmax over the other words) and
    ``thresholds`` (:func:`classify_heads`) default to the papers' definitions. Token-level counts are
    read whenever the store has them (so both positional views are reported).
    Returns ``{"head_stats", "head_dependency", "head_types"}`` DataFrames. Dependency scores are
    skipped (empty) when the corpus has no dependencies.
    """
    if not getattr(store, "has_attention", True):
        raise WorkbenchError(f"feature store {getattr(store, 'path', '')}: extracted without attentions")
    if positional_level not in POSITIONAL_LEVELS:
        raise WorkbenchError(f"positional_level must be one of {POSITIONAL_LEVELS}, not {positional_level!r}")
    n = len(corpus)

    def attentions():
        return (store.attention(i, normalise=False) for i in range(n))

    if special_attention is None and hasattr(store, "special_attention"):
        try:
            special_attention = [store.special_attention(i) for i in range(n)]
        except Exception:  # store without special-token attention
            special_attention = None
    has_offsets = getattr(store, "has_token_offsets", False)
    if positional_level == "token" and not has_offsets:
        raise WorkbenchError(
            f"feature store {getattr(store, 'path', '')} has no token-level argmax offsets "
            "(extract it again: store version 2), or use positional_level='word'"
        )
    offsets = (store.token_offsets(i, queries=positional_queries) for i in range(n)) if has_offsets else None
    stats = head_statistics(
        attentions(),
        list(corpus),
        special_attention=special_attention,
        frequencies=frequencies,
        token_offsets=offsets,
        special_tokens=special_tokens,
    )
    has_deps = all(s.heads is not None and s.deprels is not None for s in corpus)
    dependency = (
        dependency_scores(attentions(), list(corpus), exclude_self=exclude_self) if has_deps else pd.DataFrame()
    )
    types = classify_heads(stats, dependency if has_deps else None, positional_level=positional_level, **thresholds)
    return {"head_stats": stats, "head_dependency": dependency, "head_types": types}


def heads_across_checkpoints(
    checkpoints: Sequence[tuple[int, str]], corpus, *, frequencies=None, device: str = "cpu", **thresholds
) -> pd.DataFrame:
    """Head types for each ``(step, model_name)`` checkpoint: the :func:`classify_heads` table with
    ``step`` and ``model`` columns. Uses ``bertology.models.load_model`` (on ``device``) and
    ``bertology.store.extract`` (cached feature stores)."""
    from bertology.models import load_model
    from bertology.store import extract

    frames = []
    for step, name in checkpoints:
        lm = load_model(name, attentions=True, device=device)
        store = extract(lm, corpus, attentions=True)
        types = analyse_store(store, corpus, frequencies=frequencies, **thresholds)["head_types"]
        types.insert(0, "step", int(step))
        types.insert(1, "model", name)
        frames.append(types)
    if not frames:
        raise WorkbenchError("heads_across_checkpoints: no checkpoints given")
    return pd.concat(frames, ignore_index=True)
