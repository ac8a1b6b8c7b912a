"""Head types with published criteria: positional, syntactic, rare-token (Voita et al. 2019),
broad and special-token heads (Clark et al. 2019).

- positional: ≥ ``positional_threshold`` (0.9) of argmaxes at one relative offset (reported);
- syntactic: for a dependency relation and direction (``dep->head``: the dependent's argmax hits
  its head; ``head->dep``: the head's argmax hits one of its dependents with that relation), the
  accuracy beats the best fixed-offset baseline for that relation by ≥ ``syntactic_margin``
  (0.10) with at least ``min_count`` cases;
- rare-token: share of argmaxes on the sentence's least frequent word ≥ ``rare_threshold``;
- special: mean attention on [CLS] + [SEP] ≥ ``special_threshold`` (needs special attention);
- broad: normalised entropy ≥ ``broad_entropy``.
A head can meet several criteria; ``type`` is the first met in the order above, ``types`` lists all.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd

from bertology.probes.heads.stats import DEFAULT_WINDOW, head_statistics
from bertology.errors import WorkbenchError

# ClearNLP (spaCy English) and UD spellings of the same relations -> one canonical label.
RELATION_ALIASES = {"obj": "dobj", "nmod:poss": "poss", "nsubj:pass": "nsubjpass", "aux:pass": "auxpass",
                    "obl": "obl", "compound:prt": "prt"}
CORE_RELATIONS = ("nsubj", "dobj", "amod", "advmod", "det", "prep", "case", "pobj", "poss", "aux",
                  "compound", "conj", "cc", "mark", "nsubjpass", "auxpass", "acomp", "attr", "nummod", "obl",
                  "nmod", "xcomp", "ccomp", "advcl", "relcl", "acl", "punct")
TYPE_ORDER = ("positional", "syntactic", "rare-token", "special", "broad")


def canonical_relation(label: str) -> str:
    """Lower-case; UD aliases mapped (obj -> dobj, nmod:poss -> poss); other subtypes stripped."""
    label = label.lower()
    if label in RELATION_ALIASES:
        return RELATION_ALIASES[label]
    return label.split(":")[0]


def _relation_cases(heads: Sequence[int], deprels: Sequence[str]):
    """Per relation: dep->head pairs (i, head) and head->dep (head, set of dependents), 0-based."""
    dep_to_head: dict[str, list[tuple[int, int]]] = {}
    head_to_deps: dict[str, dict[int, set[int]]] = {}
    for i, (h, rel) in enumerate(zip(heads, deprels)):
        if h is None or int(h) <= 0:
            continue
        rel = canonical_relation(rel)
        dep_to_head.setdefault(rel, []).append((i, int(h) - 1))
        head_to_deps.setdefault(rel, {}).setdefault(int(h) - 1, set()).add(i)
    return dep_to_head, head_to_deps


def dependency_scores(attentions: Iterable[np.ndarray], sentences: Iterable,
                      window: Sequence[int] = DEFAULT_WINDOW) -> pd.DataFrame:
    """Per head, relation and direction, the share of cases whose argmax hits the gold partner.

    attentions: per sentence ``[layers, heads, words, words]``; sentences: ``Sentence`` objects with
    ``heads`` (1-based, 0 = root) and ``deprels``. Also ``relation="all"`` (unlabelled, dep->head).
    Returns ``layer, head, relation, direction, n, correct, accuracy, baseline_offset,
    baseline_accuracy, gain`` (gain = accuracy - baseline_accuracy, the best fixed offset in
    ``window`` for that relation and direction).
    """
    correct: dict[tuple[str, str], np.ndarray] = {}
    counts: dict[tuple[str, str], int] = {}
    offset_hits: dict[tuple[str, str], dict[int, int]] = {}
    shape = None
    offsets = [k for k in window if k != 0]
    for index, (attention, sentence) in enumerate(zip(attentions, sentences)):
        if sentence.heads is None or sentence.deprels is None:
            raise WorkbenchError(f"sentence {sentence.sent_id}: no dependency annotation (heads/deprels)")
        a = np.asarray(attention)
        if a.shape[-1] != len(sentence.words):
            raise WorkbenchError(f"sentence {sentence.sent_id}: {len(sentence.words)} words but attention "
                                 f"over {a.shape[-1]}")
        shape = a.shape[:2]
        argmax = a.argmax(-1)  # [L, H, w]
        dep_to_head, head_to_deps = _relation_cases(sentence.heads, sentence.deprels)
        all_pairs = [p for pairs in dep_to_head.values() for p in pairs]
        dep_to_head["all"] = all_pairs
        for rel, pairs in dep_to_head.items():
            if not pairs:
                continue
            key = (rel, "dep->head")
            src = np.array([p[0] for p in pairs])
            tgt = np.array([p[1] for p in pairs])
            hits = (argmax[:, :, src] == tgt).sum(-1)
            correct[key] = correct.get(key, 0) + hits
            counts[key] = counts.get(key, 0) + len(pairs)
            bucket = offset_hits.setdefault(key, {})
            for k in offsets:
                bucket[k] = bucket.get(k, 0) + int(((tgt - src) == k).sum())
        for rel, groups in head_to_deps.items():
            key = (rel, "head->dep")
            src = np.array(list(groups))
            member = np.zeros((len(src), a.shape[-1]), dtype=bool)  # [cases, words]: is a dependent
            for row, h in enumerate(src):
                member[row, list(groups[h])] = True
            chosen = argmax[:, :, src]  # [L, H, cases]
            hits = np.take_along_axis(member[None, None].repeat(shape[0], 0).repeat(shape[1], 1),
                                      chosen[..., None], axis=-1)[..., 0].sum(-1)
            correct[key] = correct.get(key, 0) + hits
            counts[key] = counts.get(key, 0) + len(src)
            bucket = offset_hits.setdefault(key, {})
            for k in offsets:
                target = src + k
                ok = (target >= 0) & (target < a.shape[-1])
                bucket[k] = bucket.get(k, 0) + int(member[np.nonzero(ok)[0], target[ok]].sum())
    if shape is None:
        raise WorkbenchError("dependency_scores: no sentences")
    frames = []
    layers, heads_ = np.indices(shape)
    for key, total in correct.items():
        n = counts[key]
        best_k, best_hits = max(offset_hits[key].items(), key=lambda kv: (kv[1], -abs(kv[0])))
        accuracy = np.asarray(total, dtype=np.float64) / n
        frames.append(pd.DataFrame({
            "layer": layers.ravel(), "head": heads_.ravel(), "relation": key[0], "direction": key[1],
            "n": n, "correct": np.asarray(total).ravel(), "accuracy": accuracy.ravel(),
            "baseline_offset": best_k, "baseline_accuracy": best_hits / n,
            "gain": accuracy.ravel() - best_hits / n}))
    return pd.concat(frames, ignore_index=True)


def _wide(stats: pd.DataFrame) -> pd.DataFrame:
    return stats.pivot_table(index=["layer", "head"], columns="statistic", values="value").reset_index()


def classify_heads(stats: pd.DataFrame, dependency: pd.DataFrame | None = None, *,
                   positional_threshold: float = 0.9, syntactic_margin: float = 0.10,
                   min_count: int = 20, rare_threshold: float = 0.5, special_threshold: float = 0.5,
                   broad_entropy: float = 0.8, relations: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per head: ``layer, head, type, types`` (``;``-joined) and the scores behind them.

    stats: :func:`bertology.probes.heads.stats.head_statistics` table; dependency: :func:`dependency_scores`.
    Score columns: ``positional_offset, positional_share, syntactic_relation, syntactic_direction,
    syntactic_accuracy, syntactic_baseline, syntactic_gain, rare_share, special_share,
    entropy_norm, confidence``. ``type`` is ``"other"`` when no criterion holds.
    """
    wide = _wide(stats)
    offset_cols = [c for c in wide.columns if c.startswith("argmax_offset_") and c != "argmax_offset_other"]
    if not offset_cols:
        raise WorkbenchError("classify_heads: stats have no argmax_offset_* statistics")
    shares = wide[offset_cols].to_numpy()
    best = shares.argmax(1)
    out = wide[["layer", "head"]].copy()
    out["positional_offset"] = [int(offset_cols[i].rsplit("_", 1)[1]) for i in best]
    out["positional_share"] = shares[np.arange(len(wide)), best]
    for col, name in (("argmax_rarest", "rare_share"), ("attn_special", "special_share"),
                      ("entropy_norm", "entropy_norm"), ("confidence", "confidence")):
        out[name] = wide[col].to_numpy() if col in wide else np.nan
    out["syntactic_relation"] = None
    out["syntactic_direction"] = None
    for col in ("syntactic_accuracy", "syntactic_baseline", "syntactic_gain"):
        out[col] = np.nan
    if dependency is not None and not dependency.empty:
        dep = dependency[(dependency["n"] >= min_count) & (dependency["relation"] != "all")]
        if relations is not None:
            wanted = {canonical_relation(r) for r in relations}
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
    return out.sort_values(["layer", "head"]).reset_index(drop=True)


def type_matrix(head_types: pd.DataFrame, column: str = "type") -> pd.DataFrame:
    """``[layer x head]`` matrix of a column of :func:`classify_heads` (ready for a heatmap)."""
    return head_types.pivot(index="layer", columns="head", values=column).sort_index()


def analyse_store(store, corpus, *, frequencies=None, special_attention=None, **thresholds) -> dict[str, pd.DataFrame]:
    """Stats, dependency scores and types from a ``FeatureStore`` with attention and its corpus.

    Returns ``{"head_stats", "head_dependency", "head_types"}`` DataFrames. Dependency scores are
    skipped (empty) when the corpus has no dependencies.
    """
    if not getattr(store, "has_attention", True):
        raise WorkbenchError(f"feature store {getattr(store, 'path', '')}: extracted without attentions")
    n = len(corpus)

    def attentions():
        return (store.attention(i) for i in range(n))

    if special_attention is None and hasattr(store, "special_attention"):
        try:
            special_attention = [store.special_attention(i) for i in range(n)]
        except Exception:  # store without special-token attention
            special_attention = None
    stats = head_statistics(attentions(), list(corpus), special_attention=special_attention,
                            frequencies=frequencies)
    has_deps = all(s.heads is not None and s.deprels is not None for s in corpus)
    dependency = dependency_scores(attentions(), list(corpus)) if has_deps else pd.DataFrame()
    types = classify_heads(stats, dependency if has_deps else None, **thresholds)
    return {"head_stats": stats, "head_dependency": dependency, "head_types": types}


def heads_across_checkpoints(checkpoints: Sequence[tuple[int, str]], corpus, *, frequencies=None,
                             **thresholds) -> pd.DataFrame:
    """Head types for each ``(step, model_name)`` checkpoint: the :func:`classify_heads` table with
    ``step`` and ``model`` columns. Uses ``bertology.models.load_model`` and ``bertology.store.extract``
    (cached feature stores)."""
    from bertology.models import load_model
    from bertology.store import extract

    frames = []
    for step, name in checkpoints:
        lm = load_model(name, attentions=True)
        store = extract(lm, corpus, attentions=True)
        types = analyse_store(store, corpus, frequencies=frequencies, **thresholds)["head_types"]
        types.insert(0, "step", int(step))
        types.insert(1, "model", name)
        frames.append(types)
    if not frames:
        raise WorkbenchError("heads_across_checkpoints: no checkpoints given")
    return pd.concat(frames, ignore_index=True)
