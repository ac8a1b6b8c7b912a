"""Attention-based dependency probe (Clark et al. 2019).

- Best single head: for each relation and direction, the head whose argmax over the *other* words
  most often hits the gold partner (``relation="all"``, ``dependent_attends_to_head`` = unlabelled
  attachment from one head: Clark et al.'s "most-attended-to other word").
- Learned combination ("attention-only probe"): p(head(i) = j) = softmax_j(Σ_k w_k α_k(i, j) +
  u_k α_k(j, i) + b), a conditional logistic regression over the ``[layers * heads]`` attention
  features in both directions, trained on some sentences and scored as UAS on held-out ones.
- Attention-and-words probe: the weight of each head becomes a linear function of the two words'
  static vectors, p(head(i) = j) ∝ exp(Σ_k (W_k·[v_i; v_j]) α_k(i, j) + (U_k·[v_i; v_j]) α_k(j, i))
  (Clark et al. used GloVe; here any :class:`~bertology.probes.embeddings.static_vectors.StaticVectors`, e.g. spaCy's
  GloVe-style vectors). With one-hot relative distances in place of attention it is the
  "distances + words" baseline: what word identity and position alone predict.
Root words (head 0) are left out of training and scoring: UAS is over non-root words. Each held-out
UAS carries a 95% interval from a bootstrap over the test sentences
(:func:`bertology.uncertainty.ratio_bootstrap`: the words of one sentence are not independent).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from bertology.errors import WorkbenchError
from bertology.numbering import head_indices, head_number, layer_number
from bertology.probes.embeddings.static_vectors import StaticVectors
from bertology.probes.heads.classification import DEPENDENT_TO_HEAD, argmax_other_word, dependency_scores
from bertology.uncertainty import ratio_bootstrap


def best_heads(dependency: pd.DataFrame, min_count: int = 1) -> pd.DataFrame:
    """Best head per relation and direction from :func:`bertology.probes.heads.classification.dependency_scores`.

    Returns ``relation, direction, layer, head, n, accuracy, baseline_offset, baseline_accuracy,
    gain``, most frequent relations first.
    """
    dep = dependency[dependency["n"] >= min_count]
    if dep.empty:
        raise WorkbenchError("best_heads: no relation with enough cases")
    top = dep.loc[dep.groupby(["relation", "direction"])["accuracy"].idxmax()]
    cols = ["relation", "direction", "layer", "head", "n", "accuracy", "baseline_offset", "baseline_accuracy", "gain"]
    return top[cols].sort_values(["n", "relation", "direction"], ascending=[False, True, True]).reset_index(drop=True)


def _pair_features(attention: np.ndarray) -> np.ndarray:
    """``[w, w, 2 * L * H]``: features of (word i, candidate head j) = α(i, j) and α(j, i)."""
    a = np.asarray(attention, dtype=np.float32)
    n_layers, n_heads, w, _ = a.shape
    forward = a.reshape(n_layers * n_heads, w, w).transpose(1, 2, 0)  # [i, j, k] = α_k(i, j)
    backward = forward.transpose(1, 0, 2)  # [i, j, k] = α_k(j, i)
    return np.concatenate([forward, backward], axis=-1)


def _design(attentions: Sequence[np.ndarray], sentences: Sequence | None):
    """Every candidate head of every word, flat (no padding to the longest sentence, so memory is the
    corpus's word pairs, about a quarter of the padded layout; filled in place, one sentence's
    features at a time): X ``[pairs, F]``, ``group [pairs]`` (the word a candidate belongs to),
    ``gold [words]`` (the index of each word's gold head among the pairs; -1 without sentences). A
    word's candidates are the other words of its sentence; root words are left out when
    ``sentences`` give heads."""

    def kept(index: int, w: int) -> list[int]:
        heads = sentences[index].heads if sentences is not None else None
        return [i for i in range(w) if heads is None or int(heads[i]) > 0]

    widths = [int(np.shape(a)[-1]) for a in attentions]
    n_features = 2 * int(np.prod(np.shape(attentions[0])[:2])) if len(widths) else 0
    n_pairs = sum(len(kept(s, w)) * (w - 1) for s, w in enumerate(widths))
    if n_pairs == 0:
        raise WorkbenchError("attention probe: no non-root words")
    x = np.empty((n_pairs, n_features), dtype=np.float32)
    groups = np.empty(n_pairs, dtype=np.int64)
    gold: list[int] = []
    at = 0
    for index, attention in enumerate(attentions):
        feats = _pair_features(attention)
        w = feats.shape[0]
        heads = sentences[index].heads if sentences is not None else None
        for i in kept(index, w):
            candidates = np.delete(np.arange(w), i)
            x[at : at + len(candidates)] = feats[i, candidates]
            groups[at : at + len(candidates)] = len(gold)
            gold.append(at + int(np.searchsorted(candidates, int(heads[i]) - 1)) if heads is not None else -1)
            at += len(candidates)
    return torch.from_numpy(x), torch.from_numpy(groups), torch.tensor(gold)


class LazyAttentions(Sequence):
    """Attention maps read when used: ``maps[k]`` is ``read(ids[k])`` (e.g. ``store.attention``), so
    an analysis that passes over a corpus's maps holds one at a time, not all of them."""

    def __init__(self, read: Callable[[int], np.ndarray], ids: Sequence[int]):
        self.read, self.ids = read, list(ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return LazyAttentions(self.read, self.ids[k])
        return self.read(int(self.ids[k]))

    def subset(self, positions: Sequence[int] | np.ndarray) -> LazyAttentions:
        """The maps at ``positions`` of this sequence, still lazy."""
        return LazyAttentions(self.read, [self.ids[int(p)] for p in positions])


def _group_max(values: torch.Tensor, group: torch.Tensor, n_groups: int) -> torch.Tensor:
    """Per group the largest of ``values`` ``[pairs]``: ``[n_groups]``."""
    out = torch.full((n_groups,), float("-inf"), dtype=values.dtype)
    return out.scatter_reduce(0, group, values, reduce="amax")


class AttentionDependencyProbe:
    """Conditional logistic regression over head attentions (sklearn-style ``fit/predict/score``).

    l2: weight penalty; max_iter: L-BFGS iterations. Learned ``coef_`` ``[2, layers, heads]``
    (0: word -> candidate, 1: candidate -> word).
    """

    def __init__(self, l2: float = 1e-3, max_iter: int = 100, seed: int = 0):
        self.l2, self.max_iter, self.seed = l2, max_iter, seed

    def _logits(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        logits = x @ self.weight_
        return logits.masked_fill(~valid, float("-inf"))

    def fit(self, attentions: Sequence[np.ndarray], sentences: Sequence) -> AttentionDependencyProbe:
        x, group, gold = _design(attentions, sentences)
        n_words = len(gold)
        torch.manual_seed(self.seed)
        self.shape_ = np.shape(attentions[0])[:2]
        self.weight_ = torch.zeros(x.shape[-1], requires_grad=True)
        opt = torch.optim.LBFGS([self.weight_], max_iter=self.max_iter, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            logits = x @ self.weight_  # [pairs]
            # softmax over each word's candidates: log-sum-exp per group, stabilised by the group's max
            top = _group_max(logits.detach(), group, n_words)
            sums = torch.zeros(n_words, dtype=logits.dtype).index_add(0, group, torch.exp(logits - top[group]))
            loss = (torch.log(sums) + top - logits[gold]).mean() + self.l2 * (self.weight_**2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        self.weight_ = self.weight_.detach()
        self.coef_ = self.weight_.numpy().reshape(2, *self.shape_)
        return self

    def predict(self, attentions: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Predicted head per word (1-based), one array per sentence (every word gets a head)."""
        out = []
        for attention in attentions:
            x = torch.from_numpy(_pair_features(attention))
            w = x.shape[0]
            valid = ~torch.eye(w, dtype=torch.bool)
            with torch.no_grad():
                out.append(self._logits(x, valid).argmax(-1).numpy() + 1)
        return out

    def score(self, attentions: Sequence[np.ndarray], sentences: Sequence) -> float:
        """UAS over non-root words."""
        x, group, gold = _design(attentions, sentences)
        with torch.no_grad():
            logits = x @ self.weight_
            return float((logits[gold] >= _group_max(logits, group, len(gold))).float().mean())


def distance_features(n_words: int, max_distance: int = 10) -> np.ndarray:
    """``[w, w, 2 * max_distance]`` one-hot of the clipped offset ``j - i`` (0 excluded): the
    positional stand-in for attention in the distances + words baseline."""
    offset = np.clip(np.arange(n_words)[None, :] - np.arange(n_words)[:, None], -max_distance, max_distance)
    slot = np.where(offset < 0, offset + max_distance, offset + max_distance - 1)
    out = np.zeros((n_words, n_words, 2 * max_distance), dtype=np.float32)
    i, j = np.nonzero(offset != 0)
    out[i, j, slot[i, j]] = 1.0
    return out


class WordAwareDependencyProbe:
    """Clark et al.'s attention-and-words probe (sklearn-style ``fit/predict/score``).

    ``features(i)`` gives sentence ``i``'s pair features ``[w, w, K]`` (default: attention in both
    directions, ``K = 2 * layers * heads``; :func:`distance_features` for the baseline). Each
    feature's weight is ``P_k·ṽ_i + Q_k·ṽ_j`` with ``ṽ = [v / mean |v|; 1]`` (words missing from
    ``vectors``, also lower-cased, get the zero vector), so the attention-only probe is the special
    case with zero word weights. Trained full-batch with L-BFGS on sentences bucketed by length.
    """

    def __init__(self, vectors: StaticVectors, l2: float = 1e-3, max_iter: int = 100, bucket_pairs: int = 200_000):
        self.vectors, self.l2, self.max_iter, self.bucket_pairs = vectors, l2, max_iter, bucket_pairs
        norms = np.linalg.norm(vectors.matrix, axis=1)
        self._scale = float(norms[norms > 0].mean()) if (norms > 0).any() else 1.0

    def _word_matrix(self, words: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(words), self.vectors.dim + 1), dtype=np.float32)
        out[:, -1] = 1.0
        for i, w in enumerate(words):
            for form in (w, w.lower()):
                if form in self.vectors:
                    out[i, :-1] = self.vectors.vector(form) / self._scale
                    break
        return out

    def _buckets(self, pair_features: Sequence[np.ndarray], sentences: Sequence, with_gold: bool):
        """Length-sorted groups of sentences padded to their longest: features ``[S, W, W, K]``,
        words ``[S, W, d+1]``, valid candidates ``[S, W, W]``, gold ``[S, W]`` (-1 = not scored)."""
        order = sorted(range(len(sentences)), key=lambda k: len(sentences[k].words))
        groups: list[list[int]] = []
        current: list[int] = []
        longest = 0
        for k in order:
            w = len(sentences[k].words)
            if current and max(longest, w) ** 2 * (len(current) + 1) > self.bucket_pairs:
                groups.append(current)
                current, longest = [], 0
            current.append(k)
            longest = max(longest, w)
        if current:
            groups.append(current)
        out = []
        for group in groups:
            W = max(len(sentences[k].words) for k in group)
            K = pair_features[group[0]].shape[-1]
            feats = np.zeros((len(group), W, W, K), dtype=np.float32)
            words = np.zeros((len(group), W, self.vectors.dim + 1), dtype=np.float32)
            valid = np.zeros((len(group), W, W), dtype=bool)
            gold = np.full((len(group), W), -1, dtype=np.int64)
            for b, k in enumerate(group):
                w = len(sentences[k].words)
                feats[b, :w, :w] = pair_features[k]
                words[b, :w] = self._word_matrix(sentences[k].words)
                valid[b, :w, :w] = ~np.eye(w, dtype=bool)
                if with_gold:
                    heads = np.asarray(sentences[k].heads, dtype=np.int64)
                    gold[b, :w] = np.where(heads > 0, heads - 1, -1)
            out.append((group, *(torch.from_numpy(x) for x in (feats, words, valid, gold))))
        return out

    def _logits(self, feats: torch.Tensor, words: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        p = words @ self.P_.T  # [S, W, K]
        q = words @ self.Q_.T
        logits = torch.einsum("sijk,sik->sij", feats, p) + torch.einsum("sijk,sjk->sij", feats, q)
        return logits.masked_fill(~valid, float("-inf"))

    def fit(self, pair_features: Sequence[np.ndarray], sentences: Sequence) -> WordAwareDependencyProbe:
        buckets = self._buckets(pair_features, sentences, with_gold=True)
        n_rows = sum(int((gold >= 0).sum()) for *_, gold in buckets)
        if n_rows == 0:
            raise WorkbenchError("word-aware dependency probe: no non-root words to train on")
        K, d1 = buckets[0][1].shape[-1], self.vectors.dim + 1
        self.P_ = torch.zeros(K, d1, requires_grad=True)
        self.Q_ = torch.zeros(K, d1, requires_grad=True)
        opt = torch.optim.LBFGS([self.P_, self.Q_], max_iter=self.max_iter, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = self.l2 * ((self.P_**2).sum() + (self.Q_**2).sum())
            for _, feats, words, valid, gold in buckets:
                rows = gold >= 0
                logits = self._logits(feats, words, valid)[rows]
                loss = loss + torch.nn.functional.cross_entropy(logits, gold[rows], reduction="sum") / n_rows
            loss.backward()
            return loss

        opt.step(closure)
        self.P_, self.Q_ = self.P_.detach(), self.Q_.detach()
        return self

    def predict(self, pair_features: Sequence[np.ndarray], sentences: Sequence) -> list[np.ndarray]:
        """Predicted head per word (1-based), one array per sentence."""
        out: list[np.ndarray] = [np.zeros(0)] * len(sentences)
        with torch.no_grad():
            for group, feats, words, valid, _ in self._buckets(pair_features, sentences, with_gold=False):
                best = self._logits(feats, words, valid).argmax(-1).numpy() + 1
                for b, k in enumerate(group):
                    out[k] = best[b, : len(sentences[k].words)]
        return out

    def score(self, pair_features: Sequence[np.ndarray], sentences: Sequence) -> float:
        """UAS over non-root words."""
        correct = total = 0
        for pred, s in zip(self.predict(pair_features, sentences), sentences):
            heads = np.asarray(s.heads)
            correct += int((pred[heads > 0] == heads[heads > 0]).sum())
            total += int((heads > 0).sum())
        return correct / max(total, 1)


def _single_head_heads(attentions, layer: int, head: int) -> list[np.ndarray]:
    """Each sentence's predicted heads (1-based) by one attention head's argmax over the other words."""
    return [argmax_other_word(np.asarray(a)[layer, head]) + 1 for a in attentions]


def _offset_heads(sentences, offset: int) -> list[np.ndarray]:
    """Each sentence's predicted heads (1-based) by a fixed offset (possibly outside the sentence)."""
    return [np.arange(len(s.heads)) + offset + 1 for s in sentences]


def _correct_per_sentence(predicted: Sequence[np.ndarray], sentences) -> tuple[np.ndarray, np.ndarray]:
    """``(correct [sentences], scored [sentences])``: per sentence the non-root words whose predicted
    head (1-based) is the gold one, and the non-root words."""
    correct, total = [], []
    for pred, s in zip(predicted, sentences):
        gold = np.asarray(s.heads, dtype=int)
        scored = gold > 0
        correct.append(int((np.asarray(pred)[scored] == gold[scored]).sum()))
        total.append(int(scored.sum()))
    return np.asarray(correct, dtype=float), np.asarray(total, dtype=float)


def _uas_row(method: str, layer, head, offset, predicted: Sequence[np.ndarray], sentences, seed: int) -> tuple:
    """One row of :func:`attention_probe`: the method, its UAS on the held-out ``sentences`` and the
    UAS's 95% bootstrap interval over those sentences."""
    correct, total = _correct_per_sentence(predicted, sentences)
    interval = ratio_bootstrap(correct, total, seed=seed)
    return method, layer, head, offset, interval.estimate, interval.low, interval.high


def _uas_offset(sentences, offset: int) -> float:
    correct = total = 0
    for s in sentences:
        for i, h in enumerate(s.heads):
            if int(h) > 0:
                correct += int(int(h) - 1 == i + offset)
                total += 1
    return correct / max(total, 1)


def attention_probe(
    attentions: Sequence[np.ndarray],
    sentences: Sequence,
    *,
    test_size: float = 0.2,
    seed: int = 0,
    l2: float = 1e-3,
    word_vectors: StaticVectors | None = None,
) -> pd.DataFrame:
    """Held-out UAS of the best fixed offset, the best single head and the learned combination;
    with ``word_vectors`` also the attention-and-words probe and the distances-and-words baseline.

    Sentences are split at random (``seed``); the best head and offset are chosen on the training
    part. Returns ``method, layer, head, offset, n_train, n_test, uas, uas_low, uas_high, seed``:
    ``uas_low, uas_high`` the 95% interval of a bootstrap over the test sentences (NaN with one).
    """
    attentions = attentions if isinstance(attentions, LazyAttentions) else list(attentions)
    sentences = list(sentences)
    if len(attentions) != len(sentences) or len(sentences) < 2:
        raise WorkbenchError(
            f"attention_probe: need ≥ 2 sentences with one attention array each, "
            f"got {len(sentences)} sentences and {len(attentions)} arrays"
        )
    order = np.random.default_rng(seed).permutation(len(sentences))
    n_test = max(1, int(round(test_size * len(sentences))))
    test, train = order[:n_test], order[n_test:]
    a_tr, a_te = (
        (attentions.subset(train), attentions.subset(test))
        if isinstance(attentions, LazyAttentions)
        else ([attentions[i] for i in train], [attentions[i] for i in test])
    )
    s_tr, s_te = [sentences[i] for i in train], [sentences[i] for i in test]
    n_train = sum(int(h) > 0 for s in s_tr for h in s.heads)
    n_test_words = sum(int(h) > 0 for s in s_te for h in s.heads)
    rows = []
    offsets = [k for k in range(-5, 6) if k != 0]
    best_offset = max(offsets, key=lambda k: _uas_offset(s_tr, k))
    rows.append(_uas_row("best_offset", None, None, best_offset, _offset_heads(s_te, best_offset), s_te, seed))
    dep = dependency_scores(a_tr, s_tr)
    unlabelled = dep[(dep["relation"] == "all") & (dep["direction"] == DEPENDENT_TO_HEAD)]
    top = unlabelled.loc[unlabelled["accuracy"].idxmax()]
    layer, head = head_indices([(top["layer"], top["head"])])[0]
    heads_found = _single_head_heads(a_te, layer, head)
    rows.append(_uas_row("best_head", layer_number(layer), head_number(head), None, heads_found, s_te, seed))
    probe = AttentionDependencyProbe(l2=l2, seed=seed).fit(a_tr, s_tr)
    rows.append(_uas_row("learned_combination", None, None, None, probe.predict(a_te), s_te, seed))
    if word_vectors is not None:
        for method, make in (
            ("attention_and_words", _pair_features),
            ("distances_and_words", lambda a: distance_features(np.shape(a)[-1])),
        ):
            f_tr, f_te = [make(a) for a in a_tr], [make(a) for a in a_te]
            aware = WordAwareDependencyProbe(word_vectors, l2=l2).fit(f_tr, s_tr)
            rows.append(_uas_row(method, None, None, None, aware.predict(f_te, s_te), s_te, seed))
    table = pd.DataFrame(rows, columns=["method", "layer", "head", "offset", "uas", "uas_low", "uas_high"])
    table["n_train"], table["n_test"], table["seed"] = n_train, n_test_words, seed
    return table[["method", "layer", "head", "offset", "n_train", "n_test", "uas", "uas_low", "uas_high", "seed"]]
