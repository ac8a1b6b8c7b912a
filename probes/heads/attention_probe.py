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

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bertology.errors import WorkbenchError
from bertology.numbering import head_indices, head_number, layer_number
from bertology.probes.embeddings.static_vectors import StaticVectors
from bertology.probes.heads.classification import DEPENDENT_TO_HEAD, argmax_other_word, dependency_scores
from bertology.spill import DEFAULT_CACHE_BYTES, Spill
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


DESIGN_CHUNK_BYTES = 32e6
"""Bytes of one chunk of the attention probe's design (whole sentences; a longer sentence is one chunk)."""


def _design_chunks(
    attentions: Sequence[np.ndarray], sentences: Sequence, chunk_bytes: float = DESIGN_CHUNK_BYTES
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every candidate head of every non-root word, flat (no padding to the longest sentence), in
    chunks of whole sentences of about ``chunk_bytes``, so that the design is never all in memory.

    Yields ``x [pairs, F]`` (float32, ``F = 2 * layers * heads``), ``group [pairs]`` (the word of the
    chunk each candidate belongs to) and ``gold [words]`` (the row of each word's gold head in the
    chunk). A word's candidates are the other words of its sentence, in order; concatenated, the
    chunks are the whole design, words in corpus order."""
    blocks: list[np.ndarray] = []
    groups: list[np.ndarray] = []
    golds: list[np.ndarray] = []
    n_pairs = n_words = 0
    for index, attention in enumerate(attentions):
        feats = _pair_features(attention)
        w = feats.shape[0]
        heads = np.asarray(sentences[index].heads, dtype=np.int64)
        kept = np.flatnonzero(heads > 0)
        if len(kept) and w > 1:
            rows, cols = np.nonzero(~np.eye(w, dtype=bool)[kept])  # row-major: each word's candidates in order
            blocks.append(feats[kept[rows], cols])
            groups.append(n_words + rows)
            target = heads[kept] - 1
            golds.append(n_pairs + np.arange(len(kept)) * (w - 1) + target - (target > kept))
            n_pairs += len(rows)
            n_words += len(kept)
        if n_pairs and n_pairs * feats.shape[-1] * 4 >= chunk_bytes:
            yield np.concatenate(blocks), np.concatenate(groups), np.concatenate(golds)
            blocks, groups, golds, n_pairs, n_words = [], [], [], 0, 0
    if n_pairs:
        yield np.concatenate(blocks), np.concatenate(groups), np.concatenate(golds)


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


def _chunk_loss(x: torch.Tensor, group: torch.Tensor, gold: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Summed negative log-likelihood of the gold heads of one design chunk: Σ over its words of
    log Σ_candidates exp(x·w) - x_gold·w (log-sum-exp per word, stabilised by the word's max)."""
    logits = x @ weight  # [pairs]
    top = _group_max(logits.detach(), group, len(gold))
    sums = torch.zeros(len(gold), dtype=logits.dtype).index_add(0, group, torch.exp(logits - top[group]))
    return (torch.log(sums) + top - logits[gold]).sum()


class AttentionDependencyProbe:
    """Conditional logistic regression over head attentions (sklearn-style ``fit/predict/score``).

    l2: weight penalty; max_iter: L-BFGS iterations. Learned ``coef_`` ``[2, layers, heads]``
    (0: word -> candidate, 1: candidate -> word).

    Full-batch L-BFGS whose closure passes over the design in chunks of whole sentences
    (``chunk_bytes``), adding each chunk's loss and gradient: the objective and its gradient are the
    full batch's, while memory holds one chunk. A design above ``cache_bytes`` is written once to an
    unnamed temporary file in ``spill_dir`` (default: the system's temporary folder) and read back
    chunk by chunk (:class:`~bertology.spill.Spill`).
    """

    def __init__(
        self,
        l2: float = 1e-3,
        max_iter: int = 100,
        seed: int = 0,
        chunk_bytes: float = DESIGN_CHUNK_BYTES,
        cache_bytes: float = DEFAULT_CACHE_BYTES,
        spill_dir: str | Path | None = None,
    ):
        self.l2, self.max_iter, self.seed = l2, max_iter, seed
        self.chunk_bytes, self.cache_bytes, self.spill_dir = chunk_bytes, cache_bytes, spill_dir

    def _logits(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        logits = x @ self.weight_
        return logits.masked_fill(~valid, float("-inf"))

    def fit(self, attentions: Sequence[np.ndarray], sentences: Sequence) -> AttentionDependencyProbe:
        design = Spill(self.spill_dir, self.cache_bytes)
        index: list[tuple[torch.Tensor, torch.Tensor]] = []  # per chunk: group [pairs], gold [words]
        for x, group, gold in _design_chunks(attentions, sentences, self.chunk_bytes):
            design.append(x)
            index.append((torch.from_numpy(group), torch.from_numpy(gold)))
        n_words = sum(len(gold) for _, gold in index)
        if n_words == 0:
            raise WorkbenchError("attention probe: no non-root words")
        torch.manual_seed(self.seed)
        self.shape_ = np.shape(attentions[0])[:2]
        self.weight_ = torch.zeros(2 * int(np.prod(self.shape_)), requires_grad=True)
        opt = torch.optim.LBFGS([self.weight_], max_iter=self.max_iter, line_search_fn="strong_wolfe")

        def closure():
            # the mean over every word, chunk by chunk: gradients add up in weight_.grad
            opt.zero_grad()
            total = 0.0
            for k, (group, gold) in enumerate(index):
                loss = _chunk_loss(torch.from_numpy(design[k]), group, gold, self.weight_) / n_words
                loss.backward()
                total += float(loss.detach())
            penalty = self.l2 * (self.weight_**2).sum()
            penalty.backward()
            return torch.tensor(total + float(penalty.detach()))

        opt.step(closure)
        design.close()
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
        correct = total = 0
        with torch.no_grad():
            for x, group, gold in _design_chunks(attentions, sentences, self.chunk_bytes):
                logits = torch.from_numpy(x) @ self.weight_
                top = _group_max(logits, torch.from_numpy(group), len(gold))
                correct += int((logits[torch.from_numpy(gold)] >= top).sum())
                total += len(gold)
        if total == 0:
            raise WorkbenchError("attention probe: no non-root words")
        return correct / total


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
    case with zero word weights. Trained full-batch with L-BFGS on sentences bucketed by length
    (at most ``bucket_pairs`` padded word pairs a bucket): each sentence's features are read once,
    the buckets written to a :class:`~bertology.spill.Spill` (a temporary file in ``spill_dir``
    above ``cache_bytes``), and the closure adds up the buckets' losses and gradients one bucket
    at a time, so memory holds one bucket, not the training set.
    """

    def __init__(
        self,
        vectors: StaticVectors,
        l2: float = 1e-3,
        max_iter: int = 100,
        bucket_pairs: int = 50_000,
        cache_bytes: float = DEFAULT_CACHE_BYTES,
        spill_dir: str | Path | None = None,
    ):
        self.vectors, self.l2, self.max_iter, self.bucket_pairs = vectors, l2, max_iter, bucket_pairs
        self.cache_bytes, self.spill_dir = cache_bytes, spill_dir
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

    def _groups(self, sentences: Sequence) -> list[list[int]]:
        """Sentences sorted by length and cut into groups of at most ``bucket_pairs`` padded pairs
        (a longer sentence alone)."""
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
        return groups

    def _bucket(self, group: list[int], pair_features: Sequence[np.ndarray], sentences: Sequence, with_gold: bool):
        """One group of sentences padded to its longest: features ``[S, W, W, K]``, words
        ``[S, W, d+1]``, valid candidates ``[S, W, W]``, gold ``[S, W]`` (-1 = not scored), as arrays."""
        W = max(len(sentences[k].words) for k in group)
        feats = None
        words = np.zeros((len(group), W, self.vectors.dim + 1), dtype=np.float32)
        valid = np.zeros((len(group), W, W), dtype=bool)
        gold = np.full((len(group), W), -1, dtype=np.int64)
        for b, k in enumerate(group):
            w = len(sentences[k].words)
            pair = pair_features[k]  # read once (it may be computed from the store's maps)
            if feats is None:
                feats = np.zeros((len(group), W, W, pair.shape[-1]), dtype=np.float32)
            feats[b, :w, :w] = pair
            words[b, :w] = self._word_matrix(sentences[k].words)
            valid[b, :w, :w] = ~np.eye(w, dtype=bool)
            if with_gold:
                heads = np.asarray(sentences[k].heads, dtype=np.int64)
                gold[b, :w] = np.where(heads > 0, heads - 1, -1)
        assert feats is not None
        return feats, words, valid, gold

    def _logits(self, feats: torch.Tensor, words: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        p = words @ self.P_.T  # [S, W, K]
        q = words @ self.Q_.T
        logits = torch.einsum("sijk,sik->sij", feats, p) + torch.einsum("sijk,sjk->sij", feats, q)
        return logits.masked_fill(~valid, float("-inf"))

    def fit(self, pair_features: Sequence[np.ndarray], sentences: Sequence) -> WordAwareDependencyProbe:
        spill = Spill(self.spill_dir, self.cache_bytes)  # per bucket: features, then words
        masks: list[tuple[torch.Tensor, torch.Tensor]] = []  # per bucket: valid, gold
        for group in self._groups(sentences):
            feats, words, valid, gold = self._bucket(group, pair_features, sentences, with_gold=True)
            spill.append(feats)
            spill.append(words)
            masks.append((torch.from_numpy(valid), torch.from_numpy(gold)))
            del feats, words
        n_rows = sum(int((gold >= 0).sum()) for _, gold in masks)
        if n_rows == 0:
            raise WorkbenchError("word-aware dependency probe: no non-root words to train on")
        K, d1 = spill[0].shape[-1], self.vectors.dim + 1
        self.P_ = torch.zeros(K, d1, requires_grad=True)
        self.Q_ = torch.zeros(K, d1, requires_grad=True)
        opt = torch.optim.LBFGS([self.P_, self.Q_], max_iter=self.max_iter, line_search_fn="strong_wolfe")

        def closure():
            # the full batch's loss and gradient, one bucket at a time (gradients add up in P_, Q_)
            opt.zero_grad()
            penalty = self.l2 * ((self.P_**2).sum() + (self.Q_**2).sum())
            penalty.backward()
            total = float(penalty.detach())
            for b, (valid, gold) in enumerate(masks):
                feats, words = torch.from_numpy(spill[2 * b]), torch.from_numpy(spill[2 * b + 1])
                rows = gold >= 0
                logits = self._logits(feats, words, valid)[rows]
                loss = torch.nn.functional.cross_entropy(logits, gold[rows], reduction="sum") / n_rows
                loss.backward()
                total += float(loss.detach())
                del feats, words, logits, loss
            return torch.tensor(total)

        opt.step(closure)
        spill.close()
        self.P_, self.Q_ = self.P_.detach(), self.Q_.detach()
        return self

    def predict(self, pair_features: Sequence[np.ndarray], sentences: Sequence) -> list[np.ndarray]:
        """Predicted head per word (1-based), one array per sentence (one bucket in memory at a time)."""
        out: list[np.ndarray] = [np.zeros(0)] * len(sentences)
        with torch.no_grad():
            for group in self._groups(sentences):
                feats, words, valid, _ = self._bucket(group, pair_features, sentences, with_gold=False)
                logits = self._logits(*(torch.from_numpy(x) for x in (feats, words, valid)))
                best = logits.argmax(-1).numpy() + 1
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


class _Mapped(Sequence):
    """``make(items[k])`` computed when read: pair features from lazily read attention maps."""

    def __init__(self, make: Callable[[np.ndarray], np.ndarray], items: Sequence[np.ndarray]):
        self.make, self.items = make, items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        return self.make(self.items[k])


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
    spill_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Held-out UAS of the best fixed offset, the best single head and the learned combination;
    with ``word_vectors`` also the attention-and-words probe and the distances-and-words baseline.

    Sentences are split at random (``seed``); the best head and offset are chosen on the training
    part. The probes' training designs above a few tens of MB go to temporary files in
    ``spill_dir`` (default: the system's temporary folder; the workbench passes the store's folder).
    Returns ``method, layer, head, offset, n_train, n_test, uas, uas_low, uas_high, seed``:
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
    probe = AttentionDependencyProbe(l2=l2, seed=seed, spill_dir=spill_dir).fit(a_tr, s_tr)
    rows.append(_uas_row("learned_combination", None, None, None, probe.predict(a_te), s_te, seed))
    if word_vectors is not None:
        for method, make in (
            ("attention_and_words", _pair_features),
            ("distances_and_words", lambda a: distance_features(np.shape(a)[-1])),
        ):
            f_tr, f_te = _Mapped(make, a_tr), _Mapped(make, a_te)  # computed per bucket, not all at once
            aware = WordAwareDependencyProbe(word_vectors, l2=l2, spill_dir=spill_dir).fit(f_tr, s_tr)
            rows.append(_uas_row(method, None, None, None, aware.predict(f_te, s_te), s_te, seed))
    table = pd.DataFrame(rows, columns=["method", "layer", "head", "offset", "uas", "uas_low", "uas_high"])
    table["n_train"], table["n_test"], table["seed"] = n_train, n_test_words, seed
    return table[["method", "layer", "head", "offset", "n_train", "n_test", "uas", "uas_low", "uas_high", "seed"]]
