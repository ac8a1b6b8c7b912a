"""The structural probe (Hewitt & Manning 2019, "A Structural Probe for Finding Syntax in Word
Representations"): a linear map ``B`` ``[rank, dim]`` whose squared distances ``||B(h_i - h_j)||²``
fit the parse-tree distance between words (the distance probe), or whose squared norms ``||B h_i||²``
fit each word's depth in the tree (the depth probe).

Every layer's probe (and every rank of a rank sweep) trains at once: the probes are one tensor
``[P, rank, dim]`` and each batch is one batched matmul, with Adam (lr 1e-3), the learning rate cut
tenfold on a dev-loss plateau and early stopping on the dev loss per probe, as the paper's released
code. Scores (:mod:`.structural_metrics`): UUAS of the minimum spanning tree and distance Spearman
(DSpr.) for the distance probe, root accuracy and depth Spearman (NSpr.) for the depth probe. The
layer is chosen on dev and reported on test, with intervals over seeds and test sentences
(:mod:`bertology.uncertainty`); the LINEAR baseline (the left-to-right chain) and a randomly
initialised encoder (:func:`bertology.models.random_init_like`) are scored the same way. The study
is :func:`structural_probe_analysis`. Choices: docs/METHODS.md, "Structural probe".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from bertology.errors import ConfigError, CorpusError
from bertology.probes.probing._scores import SCORE_INTERVAL_COLUMNS
from bertology.probes.probing.edge import seed_and_sentence_interval
from bertology.probes.probing.structural_metrics import (
    Ints,
    depth_spearman,
    distance_spearman,
    gold_edges,
    length_average,
    length_average_bootstrap,
    mst_edges,
    parent_distances,
    parent_indices,
    punctuation_mask,
    root_correct,
    uuas_counts,
)
from bertology.progress import progress_bar
from bertology.runtime import release_free_memory
from bertology.store.read import LayerView
from bertology.uncertainty import (
    combine_seed_and_sentence,
    is_small_sample,
    ratio_bootstrap,
    t_interval,
)

PROBE_KINDS = ("distance", "depth")
METRICS = {"distance": ("uuas", "dspr"), "depth": ("root_acc", "nspr")}
"""The scores of each probe kind; the first is a ratio of per-sentence sums, the second a Spearman
averaged over sentence lengths 5-50."""
SELECTION_METRIC = {"distance": "uuas", "depth": "nspr"}
"""The dev score each probe kind's best layer is chosen on."""
RATIO_PARTS = {"uuas": ("uuas_correct", "uuas_total"), "root_acc": ("root_correct", "root_total")}
SPEARMAN_COLUMN = {"dspr": "dspr", "nspr": "nspr"}
SCORE_COLUMNS = ["encoder", "probe", "layer", "rank", "seed", "split", "metric", "value"]
SENTENCE_COLUMNS = [
    "encoder",
    "probe",
    "layer",
    "rank",
    "seed",
    "sentence",
    "n_words",
    "uuas_correct",
    "uuas_total",
    "dspr",
    "root_correct",
    "root_total",
    "nspr",
]


@dataclass(frozen=True)
class StructuralSettings:
    """How the probes train (the paper's values by default): Adam at ``lr``, ``batch_size``
    sentences a step, at most ``max_epochs``; after an epoch whose dev loss is not below the best
    by ``min_delta`` the probe's learning rate is multiplied by ``lr_decay`` and after ``patience``
    such epochs in a row it stops (its best-on-dev weights are kept); weights start uniform in
    ``±init_scale``; ``device``: where the features and probes live."""

    lr: float = 1e-3
    batch_size: int = 20
    max_epochs: int = 40
    patience: int = 5
    min_delta: float = 1e-4
    lr_decay: float = 0.1
    init_scale: float = 0.05
    device: str = "cpu"

    def __post_init__(self) -> None:
        for name in ("batch_size", "max_epochs", "patience"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"structural probe: {name} must be an integer >= 1, got {value!r}")
        for name in ("lr", "init_scale"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"structural probe: {name} must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.lr_decay <= 1 or self.min_delta < 0:
            raise ConfigError(
                f"structural probe: lr_decay must be in (0, 1] and min_delta >= 0, got {self.lr_decay!r}, "
                f"{self.min_delta!r}"
            )


class TreeDistances(Sequence[np.ndarray]):
    """Each sentence's tree distances ``[n_i, n_i]`` (int64), computed from its heads when asked
    (:func:`~.structural_metrics.parent_distances`) and never held for the whole corpus: they
    take ``n_i²`` numbers a sentence where the heads take ``n_i``. A skipped sentence's
    (``skipped``) are zeros. Reads the lists it is given, so sentences appended to them count."""

    def __init__(self, heads: list[np.ndarray], skipped: dict[int, str]):
        self.heads, self.skipped = heads, skipped

    def __len__(self) -> int:
        return len(self.heads)

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = int(k) % len(self) if int(k) < 0 else int(k)
        h = self.heads[k]  # raises IndexError past the end
        if k in self.skipped:
            return np.zeros((h.size, h.size), dtype=np.int64)
        return parent_distances(h - 1)


@dataclass
class StructuralTrees:
    """The gold (or silver) structure of each sentence: ``distances`` ``[n_i, n_i]`` (a
    :class:`TreeDistances`, computed from the heads when read, or any sequence of matrices) and
    ``depths`` ``[n_i]`` in tree edges, UD ``heads`` ``[n_i]`` (1-based, 0 = root), ``punct``
    ``[n_i]`` (UPOS PUNCT), ``source``: where the trees come from (``"gold: ..."`` /
    ``"silver: ..."``), and ``skipped``: ``{sentence index: why}`` for sentences whose heads are
    not one tree (a parser that split a sentence in two gives two roots); those hold zeros and are
    never split into train, dev or test."""

    distances: Sequence[np.ndarray]
    depths: list[np.ndarray]
    heads: list[np.ndarray]
    punct: list[np.ndarray]
    source: str
    skipped: dict[int, str] = field(default_factory=dict)

    @property
    def lengths(self) -> np.ndarray:
        """Words per sentence ``[n_sentences]``."""
        return np.array([h.size for h in self.heads], dtype=np.int64)

    @property
    def usable(self) -> np.ndarray:
        """Indices of the sentences with a tree ``[n_usable]``."""
        return np.array([k for k in range(len(self.heads)) if k not in self.skipped], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.heads)


def trees_from_heads(
    heads: Sequence[Sequence[int]],
    upos: Sequence[Sequence[str] | None] | None = None,
    source: str = "given",
    names: Sequence[str] | None = None,
    *,
    skip_invalid: bool = False,
) -> StructuralTrees:
    """:class:`StructuralTrees` from each sentence's UD heads (and UPOS, for punctuation). Heads
    that are not one tree are a :class:`CorpusError` naming the sentence (``names`` or its index),
    or, with ``skip_invalid``, a sentence left out (``skipped``, with the reason)."""
    held: list[np.ndarray] = []
    skipped: dict[int, str] = {}
    out = StructuralTrees(TreeDistances(held, skipped), [], held, [], source, skipped)
    for k, h in enumerate(heads):
        where = f"sentence {names[k] if names is not None else k}"
        tags = None if upos is None else upos[k]
        if tags is not None and len(tags) != len(h):
            raise CorpusError(f"{where}: {len(tags)} UPOS tags for {len(h)} heads")
        try:
            parent = parent_indices(h, where)
            depths = parent_distances(parent)[int(np.flatnonzero(parent < 0)[0])].copy()  # not a view of [n, n]
        except CorpusError as exc:
            if not skip_invalid:
                raise
            out.skipped[k] = str(exc)
            depths = np.zeros(len(h), dtype=np.int64)
        out.depths.append(depths)
        out.heads.append(np.asarray(h, dtype=np.int64))
        out.punct.append(punctuation_mask(tags, len(h)))
    return out


def corpus_trees(corpus: Any) -> StructuralTrees:
    """The dependency trees of a ``Corpus`` (``heads``, ``upos``), with the corpus's ``deps`` source
    (gold or silver). Sentences without heads, or whose heads are not one tree, are skipped
    (``skipped``, with the reason); a corpus with no usable tree, or none with two words of which
    one is not punctuation (nothing to score), is refused naming it."""
    if not any(s.heads is not None for s in corpus.sentences):
        raise CorpusError(
            f"corpus {corpus.name!r}: the structural probe needs dependency trees and its sentences have none; "
            "annotate it (`bertology annotate`) or use a .conllu file with heads"
        )
    source = (corpus.sources or {}).get("deps", "unknown: the corpus does not say where its trees come from")
    trees = trees_from_heads(
        [s.heads if s.heads is not None else [0] * len(s.words) for s in corpus.sentences],
        [s.upos for s in corpus.sentences],
        source,
        [s.sent_id for s in corpus.sentences],
        skip_invalid=True,
    )
    for k, s in enumerate(corpus.sentences):
        if s.heads is None:
            trees.skipped[k] = f"sentence {s.sent_id}: no dependency heads"
    if len(trees.usable) == 0:
        raise CorpusError(f"corpus {corpus.name!r}: no sentence has one dependency tree ({trees.skipped[0]})")
    if not any(scoreable(trees, k) for k in trees.usable):
        raise CorpusError(
            f"corpus {corpus.name!r}: no sentence has a scoreable word (UUAS and root accuracy leave punctuation "
            "out: no sentence with a tree has an edge between two words that are not punctuation and a root "
            "that is not punctuation); give sentences with words"
        )
    return trees


def scoreable(trees: StructuralTrees, k: int) -> bool:
    """Whether sentence ``k`` counts in UUAS and root accuracy: a tree edge between two words that
    are not punctuation, and a root that is not punctuation."""
    if k in trees.skipped:
        return False
    keep = ~trees.punct[k]
    root = int(np.flatnonzero(trees.heads[k] == 0)[0])
    return bool(keep[root]) and bool(gold_edges(trees.heads[k], keep))


def require_scoreable_splits(trees: StructuralTrees, split: dict[str, np.ndarray]) -> None:
    """Raise ``CorpusError`` unless the dev and the test split each hold a :func:`scoreable`
    sentence (else their UUAS and root accuracy would be 0/0), before any probe is trained."""
    for part in ("dev", "test"):
        if not any(scoreable(trees, int(k)) for k in split[part]):
            n_ok = sum(scoreable(trees, int(k)) for k in trees.usable)
            raise CorpusError(
                f"the {part} split ({len(split[part])} sentence(s)) has no sentence with a scoreable word "
                f"(only {n_ok} of the {len(trees.usable)} sentences with a tree have an edge and a root that "
                "are not punctuation); give more sentences with words"
            )


def split_sentences(
    sentences: int | Ints, seed: int = 0, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
) -> dict[str, np.ndarray]:
    """Seeded train/dev/test split of sentence indices (``sentences``: a count, or the indices to
    split), as the edge probes' split: a permutation, dev and test ``round(fraction · n)``, at
    least one each. Fewer than 3 sentences: ConfigError."""
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-6:
        raise ConfigError(f"split fractions must be three non-negative numbers summing to 1, got {fractions}")
    ids = np.arange(sentences) if isinstance(sentences, (int, np.integer)) else np.asarray(sentences, dtype=np.int64)
    n = len(ids)
    if n < 3:
        raise ConfigError(f"the structural probe needs at least 3 sentences with a tree to split, got {n}")
    order = ids[np.random.default_rng(seed).permutation(n)]
    n_dev = max(1, int(round(fractions[1] * n)))
    n_test = max(1, int(round(fractions[2] * n)))
    n_train = max(1, n - n_dev - n_test)
    n_dev = min(n_dev, n - n_train - 1)
    return {
        "train": np.sort(order[:n_train]),
        "dev": np.sort(order[n_train : n_train + n_dev]),
        "test": np.sort(order[n_train + n_dev :]),
    }


# --------------------------------------------------------------------------- batches and the probes


@dataclass
class _Batch:
    """Padded sentences: ``rows`` ``[B * T]`` each slot's word in the feature matrix (padding: the
    zero row appended after the last word), ``gold`` ``[B, T, T]`` or ``[B, T]``, ``mask`` like
    ``gold`` (1 on real pairs / words), ``lengths`` ``[B]`` (float), ``shape`` ``(B, T)``."""

    rows: torch.Tensor
    gold: torch.Tensor
    mask: torch.Tensor
    lengths: torch.Tensor
    shape: tuple[int, int]


def _lengths(trees: StructuralTrees, sentence_ids: Ints) -> np.ndarray:
    """Words of each of ``sentence_ids`` ``[len(sentence_ids)]`` (int64), read from those sentences
    alone (:attr:`StructuralTrees.lengths` walks the whole corpus: once a batch, that is quadratic)."""
    return np.array([trees.heads[int(s)].size for s in sentence_ids], dtype=np.int64)


def _make_batch(
    sentence_ids: np.ndarray, offsets: np.ndarray, trees: StructuralTrees, kind: str, device: torch.device
) -> _Batch:
    """The padded batch of ``sentence_ids``; its gold distances are computed here, from the
    sentences' heads (:class:`TreeDistances`), never held for the corpus."""
    lengths = _lengths(trees, sentence_ids)
    B, T = len(sentence_ids), int(lengths.max())
    rows = np.full((B, T), offsets[-1], dtype=np.int64)  # offsets[-1] = n_words: the zero row
    gold = np.zeros((B, T, T) if kind == "distance" else (B, T), dtype=np.float32)
    for b, (s, n) in enumerate(zip(sentence_ids, lengths)):
        rows[b, :n] = np.arange(offsets[s], offsets[s + 1])
        if kind == "distance":
            gold[b, :n, :n] = trees.distances[s]
        else:
            gold[b, :n] = trees.depths[s]
    real = np.arange(T)[None, :] < lengths[:, None]
    mask = (real[:, :, None] & real[:, None, :]) if kind == "distance" else real

    def to(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.as_tensor(a, dtype=dtype, device=device)

    return _Batch(
        to(rows.reshape(-1), torch.long),
        to(gold, torch.float32),
        to(mask, torch.float32),
        to(lengths, torch.float32),
        (B, T),
    )


def _batch_features(features: torch.Tensor, feature_index: list[int], batch: _Batch) -> torch.Tensor:
    """The batch's word vectors for each probe, ``[P, B * T, D]`` (or ``[1, B * T, D]`` when every
    probe reads one layer: the matmul broadcasts it), from ``features`` ``[L, n_words + 1, D]``
    (last row zero, the padding)."""
    x = features[:, batch.rows]  # [L, B*T, D]
    if len(set(feature_index)) == 1:
        return x[feature_index[0]].unsqueeze(0)
    return x if feature_index == list(range(x.shape[0])) else x[feature_index]


def _predict_batch(x: torch.Tensor, weights: torch.Tensor, batch: _Batch, kind: str) -> torch.Tensor:
    """Predicted squared distances ``[P, B, T, T]`` or squared norms ``[P, B, T]`` of the batch's
    words ``x`` (:func:`_batch_features`) under probes ``weights`` ``[P, R, D]``."""
    proj = torch.matmul(x, weights.transpose(1, 2)).unflatten(1, batch.shape)  # [P, B, T, R]
    norms = (proj * proj).sum(-1)  # [P, B, T]
    if kind == "depth":
        return norms
    gram = torch.matmul(proj, proj.transpose(-1, -2))  # [P, B, T, T]
    return (norms[..., :, None] + norms[..., None, :] - 2 * gram).clamp_min(0.0)


def _batch_loss(predicted: torch.Tensor, batch: _Batch, kind: str) -> torch.Tensor:
    """The paper's L1 loss per probe ``[P]``: per sentence the absolute errors summed over word
    pairs / squared length (distance) or over words / length (depth), averaged over sentences."""
    error = (predicted - batch.gold).abs() * batch.mask
    if kind == "distance":
        per_sentence = error.sum((-1, -2)) / batch.lengths**2
    else:
        per_sentence = error.sum(-1) / batch.lengths
    return per_sentence.mean(-1)


@dataclass
class StructuralProbes:
    """Trained probes: ``kind`` (distance / depth), per probe its store ``layer_ids``, the index
    into the feature tensor it read (``feature_index``) and its ``ranks``; ``weights`` ``[P, R, D]``
    (rows past a probe's rank are 0), ``dev_loss`` ``[P]`` (best) and ``epochs`` ``[P]`` (the epoch
    of the kept weights, 1-based)."""

    kind: str
    layer_ids: list[int]
    feature_index: list[int]
    ranks: list[int]
    weights: torch.Tensor
    dev_loss: np.ndarray
    epochs: np.ndarray


class _Adam:
    """Adam (Kingma & Ba 2015; torch's defaults: betas 0.9 / 0.999, eps 1e-8) on the stacked probes
    ``[P, R, D]`` in one update, with a learning rate per probe ``lr`` ``[P]`` (0 freezes one)."""

    def __init__(self, weights: torch.Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.m = torch.zeros_like(weights)
        self.v = torch.zeros_like(weights)
        self.lr = torch.full((weights.shape[0], 1, 1), float(lr), device=weights.device)
        self.betas, self.eps, self.steps = betas, eps, 0

    @torch.no_grad()
    def step(self, weights: torch.Tensor, grad: torch.Tensor) -> None:
        b1, b2 = self.betas
        self.steps += 1
        self.m.mul_(b1).add_(grad, alpha=1 - b1)
        self.v.mul_(b2).addcmul_(grad, grad, value=1 - b2)
        denom = (self.v / (1 - b2**self.steps)).sqrt_().add_(self.eps)
        weights.sub_(self.lr * (self.m / (1 - b1**self.steps)) / denom)


class _EarlyStopping:
    """Per probe: the learning-rate cut on a dev plateau (patience 0, as torch's ReduceLROnPlateau
    with its relative threshold of 1e-4) and early stopping after ``patience`` epochs without a
    ``min_delta`` improvement; keeps each probe's best weights."""

    def __init__(self, weights: torch.Tensor, settings: StructuralSettings):
        P = weights.shape[0]
        self.settings = settings
        self.best = np.full(P, np.inf)
        self.plateau_best = np.full(P, np.inf)
        self.best_epoch = np.full(P, -1)
        self.stopped = np.zeros(P, dtype=bool)
        self.best_weights = weights.detach().clone()

    def update(self, epoch: int, dev_loss: np.ndarray, weights: torch.Tensor, adam: _Adam) -> None:
        s = self.settings
        for p in np.flatnonzero(~self.stopped):
            loss = float(dev_loss[p])
            if loss < self.plateau_best[p] * (1 - 1e-4):
                self.plateau_best[p] = loss
            else:
                adam.lr[p] *= s.lr_decay
            if loss < self.best[p] - s.min_delta:
                self.best[p], self.best_epoch[p] = loss, epoch
                self.best_weights[p] = weights[p].detach()
            elif epoch - self.best_epoch[p] >= s.patience:
                self.stopped[p] = True
                adam.lr[p] = 0.0  # frozen where it is; its best weights are kept


class _StoreRows:
    """A store's chosen layers as ``[L, n_words + 1, D]`` (the last row zero: padding), read by the
    rows a batch asks for (``rows[:, batch.rows]``: each sentence's words from the store, the padding
    as zeros), so the probes never hold the corpus's features (:class:`~bertology.store.read.LayerView`)."""

    def __init__(self, view: LayerView, device: torch.device):
        self.view, self.device = view, device
        L, W, D = view.shape
        self.shape = (L, W + 1, D)
        self.ndim = 3

    def __getitem__(self, key: tuple[slice, Any]) -> torch.Tensor:
        _, rows = key
        rows = np.asarray(rows.cpu() if isinstance(rows, torch.Tensor) else rows, dtype=np.int64)
        store, (L, W, D) = self.view.store, self.view.shape
        out = np.zeros((L, len(rows), D), dtype=np.float32)
        words = np.flatnonzero(rows < W)  # row W is the padding
        sentence = np.searchsorted(store.sentence_offsets, rows[words], side="right") - 1
        for s in np.unique(sentence):  # only the chosen layers of each sentence are read
            at = words[sentence == s]
            out[:, at] = store.hidden(int(s), self.view.layer_ids)[:, rows[at] - store.sentence_offsets[s]]
        return torch.from_numpy(out).to(self.device)


class _TensorRows:
    """Features held as one tensor ``[L, n_words, D]`` seen as ``[L, n_words + 1, D]`` (the last row
    zero: padding) without the copy that appending a row would make: ``rows[:, batch.rows]`` gathers
    the batch's rows and zeroes its padding slots (the same values as indexing the padded copy)."""

    def __init__(self, features: torch.Tensor):
        self.features = features
        L, W, D = features.shape
        self.shape = (L, W + 1, D)
        self.ndim = 3

    def __getitem__(self, key: tuple[slice, Any]) -> torch.Tensor:
        _, rows = key
        rows = torch.as_tensor(rows, dtype=torch.long, device=self.features.device)
        padding = rows == self.features.shape[1]
        out = self.features[:, rows.clamp(max=max(self.features.shape[1] - 1, 0))]
        out[:, padding] = 0.0
        return out


def _as_features(
    features: np.ndarray | torch.Tensor | LayerView | _StoreRows | _TensorRows, device: torch.device
) -> Any:
    """``[L, n_words + 1, D]`` float32 on ``device``, read by rows (``feats[:, rows]``), the last row
    zero (padding): a store's :class:`~bertology.store.read.LayerView` batch by batch from the store
    (:class:`_StoreRows`), an array or tensor as it is held (:class:`_TensorRows`, no padded copy)."""
    if isinstance(features, (_StoreRows, _TensorRows)):
        return features
    if isinstance(features, LayerView):
        return _StoreRows(features, device)
    f = torch.as_tensor(features, dtype=torch.float32, device=device)
    if f.ndim != 3:
        raise ConfigError(f"features must be [layers, n_words, dim], got shape {tuple(f.shape)}")
    return _TensorRows(f)


def _check_inputs(features: torch.Tensor, offsets: np.ndarray, trees: StructuralTrees, kind: str) -> None:
    if kind not in PROBE_KINDS:
        raise ConfigError(f"probe must be one of {', '.join(PROBE_KINDS)}, got {kind!r}")
    n_words = features.shape[1] - 1
    if len(offsets) != len(trees) + 1 or int(offsets[-1]) != n_words:
        raise ConfigError(
            f"sentence_offsets ({len(offsets) - 1} sentences, {int(offsets[-1])} words) must match the trees "
            f"({len(trees)} sentences) and the features ({n_words} words)"
        )
    if not np.array_equal(np.diff(offsets), trees.lengths):
        bad = int(np.flatnonzero(np.diff(offsets) != trees.lengths)[0])
        raise ConfigError(
            f"sentence {bad}: the features hold {int(np.diff(offsets)[bad])} words, its tree {int(trees.lengths[bad])}"
        )


def _probe_ranks(ranks: Sequence[int] | int | None, n_probes: int, dim: int) -> list[int]:
    out = [dim] * n_probes if ranks is None else [int(ranks)] * n_probes if isinstance(ranks, int) else list(ranks)
    if len(out) != n_probes or not all(isinstance(r, (int, np.integer)) and 1 <= r <= dim for r in out):
        raise ConfigError(f"ranks must be {n_probes} integers in 1..{dim} (the feature size), got {out}")
    return [int(r) for r in out]


def _dev_loss(
    feats: torch.Tensor,
    index: list[int],
    weights: torch.Tensor,
    dev: list[np.ndarray],
    offsets: np.ndarray,
    trees: StructuralTrees,
    kind: str,
) -> np.ndarray:
    """Mean per-sentence loss over the dev batches ``[P]`` (``dev``: each batch's sentence ids; a
    batch is built, scored and dropped in turn, so only one is held)."""
    device = weights.device
    with torch.no_grad():
        total = sum(
            _batch_loss(_predict_batch(_batch_features(feats, index, b), weights, b, kind), b, kind) * len(b.lengths)
            for b in (_make_batch(ids, offsets, trees, kind, device) for ids in dev)
        )
    return torch.as_tensor(total / sum(len(ids) for ids in dev)).cpu().numpy()


def fit_structural(
    features: np.ndarray | torch.Tensor | LayerView,
    sentence_offsets: np.ndarray,
    trees: StructuralTrees,
    train: np.ndarray,
    dev: np.ndarray,
    *,
    kind: str = "distance",
    feature_index: Sequence[int] | None = None,
    ranks: Sequence[int] | int | None = None,
    layer_ids: Sequence[int] | None = None,
    seed: int = 0,
    settings: StructuralSettings = StructuralSettings(),
) -> StructuralProbes:
    """Train one probe per entry of ``feature_index`` (default: one per layer of ``features``
    ``[L, n_words, dim]``) on the ``train`` sentences, each stopped on its own loss over ``dev``.

    ``ranks``: each probe's rank (an int for all; default ``dim``); ranks above ``dim`` are refused.
    ``layer_ids``: the store layer each probe reads (recorded; default its feature index). All
    probes see the same batches; their losses are summed, so each one's gradient is its own."""
    device = torch.device(settings.device)
    feats = _as_features(features, device)
    offsets = np.asarray(sentence_offsets, dtype=np.int64)
    _check_inputs(feats, offsets, trees, kind)
    index = list(range(feats.shape[0])) if feature_index is None else [int(i) for i in feature_index]
    rank_list = _probe_ranks(ranks, len(index), feats.shape[2])
    if len(train) == 0 or len(dev) == 0:
        raise ConfigError(f"the structural probe needs train and dev sentences, got {len(train)} and {len(dev)}")
    generator = torch.Generator().manual_seed(int(seed))
    init = (torch.rand(len(index), max(rank_list), feats.shape[2], generator=generator) * 2 - 1) * settings.init_scale
    row_mask = (torch.arange(init.shape[1])[None, :] < torch.tensor(rank_list)[:, None])[..., None].to(device)
    weights = (init.to(device) * row_mask).requires_grad_(True)
    adam, stopping = _Adam(weights, settings.lr), _EarlyStopping(weights, settings)
    dev_batches = _chunks(np.asarray(dev), settings.batch_size)  # sentence ids; each batch built when scored
    rng = np.random.default_rng(seed)
    for epoch in progress_bar(range(settings.max_epochs), desc=f"structural probe ({kind})", unit="epoch"):
        for ids in _chunks(rng.permutation(np.asarray(train)), settings.batch_size):  # one epoch, shuffled
            batch = _make_batch(ids, offsets, trees, kind, device)
            weights.grad = None
            loss = _batch_loss(_predict_batch(_batch_features(feats, index, batch), weights, batch, kind), batch, kind)
            loss.sum().backward()
            assert weights.grad is not None  # backward() just filled it
            adam.step(weights, weights.grad * row_mask)  # rows past a probe's rank stay 0
        dev_loss = _dev_loss(feats, index, weights.detach(), dev_batches, offsets, trees, kind)
        stopping.update(epoch, dev_loss, weights, adam)
        if stopping.stopped.all():
            break
    return StructuralProbes(
        kind,
        list(index) if layer_ids is None else [int(l) for l in layer_ids],
        index,
        rank_list,
        stopping.best_weights,
        stopping.best.copy(),
        stopping.best_epoch + 1,
    )


def _chunks(ids: np.ndarray, size: int) -> list[np.ndarray]:
    return [ids[k : k + size] for k in range(0, len(ids), size)]


def predict_structure(
    probes: StructuralProbes,
    features: np.ndarray | torch.Tensor | LayerView,
    sentence_offsets: np.ndarray,
    trees: StructuralTrees,
    sentence_ids: Ints,
    batch_size: int = 64,
) -> list[np.ndarray]:
    """Each sentence's predictions under every probe: ``[P, n_i, n_i]`` squared distances (distance
    probes) or ``[P, n_i]`` squared norms (depth probes), float64, in ``sentence_ids`` order. To
    score a split without holding all of them: :func:`iter_predictions`."""
    return list(iter_predictions(probes, features, sentence_offsets, trees, sentence_ids, batch_size))


def iter_predictions(
    probes: StructuralProbes,
    features: np.ndarray | torch.Tensor | LayerView,
    sentence_offsets: np.ndarray,
    trees: StructuralTrees,
    sentence_ids: Ints,
    batch_size: int = 64,
) -> Iterator[np.ndarray]:
    """:func:`predict_structure` one sentence at a time: each its own float64 array (not a view of
    its batch), computed ``batch_size`` sentences at a time, so a caller that scores and drops
    each holds one batch's predictions whatever the split's size."""
    device = probes.weights.device
    feats = _as_features(features, device)
    offsets = np.asarray(sentence_offsets, dtype=np.int64)
    for ids in _chunks(np.asarray(sentence_ids, dtype=np.int64), batch_size):
        with torch.no_grad():  # left before yielding: the caller's code runs with its own grad mode
            batch = _make_batch(ids, offsets, trees, probes.kind, device)
            x = _batch_features(feats, probes.feature_index, batch)
            pred = _predict_batch(x, probes.weights, batch, probes.kind).cpu()  # float32 [P, B, T(, T)]
            del x, batch
        for b, n in enumerate(_lengths(trees, ids)):
            yield (pred[:, b, :n, :n] if probes.kind == "distance" else pred[:, b, :n]).double().numpy()


# --------------------------------------------------------------------------- scores


def sentence_scores(
    predictions: Iterable[np.ndarray], trees: StructuralTrees, sentence_ids: Ints, kind: str
) -> list[dict[str, Any]]:
    """Per probe and sentence its score parts: ``uuas_correct``, ``uuas_total``, ``dspr``
    (distance) or ``root_correct``, ``root_total``, ``nspr`` (depth); ``predictions`` as
    :func:`predict_structure` returns them (``[P, ...]`` per sentence; or
    :func:`iter_predictions`, read one at a time). Rows carry ``probe_index``,
    ``sentence`` and ``n_words``."""
    rows = []
    for pred, s in zip(predictions, sentence_ids):  # one sentence at a time: an iterator is read as it goes
        heads, punct = trees.heads[s], trees.punct[s]
        gold = trees.distances[s] if kind == "distance" else np.empty(0)  # computed from the heads once a sentence
        for p in range(pred.shape[0]):
            row: dict[str, Any] = {"probe_index": p, "sentence": int(s), "n_words": int(heads.size)}
            if kind == "distance":
                correct, total = uuas_counts(pred[p], heads, punct)
                row.update(uuas_correct=correct, uuas_total=total, dspr=distance_spearman(pred[p], gold))
            else:
                hit = root_correct(pred[p], heads, punct)
                row.update(
                    root_correct=0 if hit is None else hit,
                    root_total=0 if hit is None else 1,
                    nspr=depth_spearman(pred[p], trees.depths[s]),
                )
            rows.append(row)
    return rows


def aggregate(sentences: pd.DataFrame, metric: str) -> float:
    """One score over a set of per-sentence rows: a ratio of sums (``uuas``, ``root_acc``) or the
    Spearman averaged over sentence lengths 5-50 (``dspr``, ``nspr``)."""
    if metric in RATIO_PARTS:
        num, den = RATIO_PARTS[metric]
        total = float(sentences[den].sum())
        return float(sentences[num].sum()) / total if total > 0 else math.nan
    return length_average(sentences[SPEARMAN_COLUMN[metric]].to_numpy(float), sentences["n_words"].to_numpy())


# --------------------------------------------------------------------------- runs over seeds


@dataclass
class StructuralRun:
    """What :func:`probe_structure` returns: ``scores`` (:data:`SCORE_COLUMNS`: dev and test scores
    per probe and seed, and ``split = "param"`` rows ``epochs``, ``dev_loss``), ``sentences``
    (:data:`SENTENCE_COLUMNS`: each test sentence's score parts, what intervals resample), the
    ``split`` used, and the trained ``probes`` of each seed (when asked to keep them)."""

    scores: pd.DataFrame
    sentences: pd.DataFrame
    split: dict[str, np.ndarray]
    probes: dict[int, StructuralProbes]


def _score_rows(probes: StructuralProbes, part: str, parts: pd.DataFrame, base: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for p, group in parts.groupby("probe_index"):
        ids = {**base, "layer": probes.layer_ids[int(p)], "rank": probes.ranks[int(p)]}
        rows += [{**ids, "split": part, "metric": m, "value": aggregate(group, m)} for m in METRICS[probes.kind]]
        if part == "dev":
            rows.append({**ids, "split": "param", "metric": "epochs", "value": float(probes.epochs[int(p)])})
            rows.append({**ids, "split": "param", "metric": "dev_loss", "value": float(probes.dev_loss[int(p)])})
    return rows


def probe_structure(
    features: np.ndarray | torch.Tensor | LayerView,
    sentence_offsets: np.ndarray,
    trees: StructuralTrees,
    *,
    kind: str = "distance",
    layer_ids: Sequence[int] | None = None,
    feature_index: Sequence[int] | None = None,
    ranks: Sequence[int] | int | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    split_seed: int = 0,
    settings: StructuralSettings = StructuralSettings(),
    encoder: str = "trained",
    keep_probes: bool = False,
) -> StructuralRun:
    """Train and score structural probes over ``features`` ``[L, n_words, dim]`` for each seed
    (one shared train/dev/test split drawn with ``split_seed``; a seed changes the initialisation
    and the batch order). Probes as :func:`fit_structural` (default one per layer at full rank)."""
    if not seeds:
        raise ConfigError("seeds: give at least one seed")
    split = split_sentences(trees.usable, split_seed)
    require_scoreable_splits(trees, split)
    feats: Any = (
        features
        if isinstance(features, LayerView)  # read batch by batch (_StoreRows)
        else torch.as_tensor(features, dtype=torch.float32, device=torch.device(settings.device))
    )
    rows: list[dict[str, Any]] = []
    test_rows: list[dict[str, Any]] = []
    kept: dict[int, StructuralProbes] = {}
    for seed in seeds:
        probes = fit_structural(
            feats,
            sentence_offsets,
            trees,
            split["train"],
            split["dev"],
            kind=kind,
            feature_index=feature_index,
            ranks=ranks,
            layer_ids=layer_ids,
            seed=int(seed),
            settings=settings,
        )
        release_free_memory()  # the epochs' batches are freed: their pages go back before scoring
        base = {"encoder": encoder, "probe": kind, "seed": int(seed)}
        for part in ("dev", "test"):  # scored as predicted: one batch of predictions held at a time
            preds = iter_predictions(probes, feats, sentence_offsets, trees, split[part])
            parts = pd.DataFrame(sentence_scores(preds, trees, split[part], kind))
            rows += _score_rows(probes, part, parts, base)
            if part == "test":
                parts["layer"] = [probes.layer_ids[p] for p in parts["probe_index"]]
                parts["rank"] = [probes.ranks[p] for p in parts["probe_index"]]
                test_rows += parts.drop(columns="probe_index").assign(**base).to_dict("records")
        if keep_probes:
            kept[int(seed)] = probes
        release_free_memory()  # and the scoring batches' before the next seed trains
    sentences = pd.DataFrame(test_rows).reindex(columns=SENTENCE_COLUMNS)
    return StructuralRun(pd.DataFrame(rows, columns=SCORE_COLUMNS), sentences, split, kept)


# --------------------------------------------------------------------------- intervals and summaries

INTERVAL_KEYS = ["encoder", "probe", "layer", "rank"]
INTERVAL_COLUMNS = [*INTERVAL_KEYS, *SCORE_INTERVAL_COLUMNS]
ONE_SEED_INTERVAL = "sentence bootstrap (one seed: seed variation not in it)"


def _ratio_interval(
    metric: str, seed_scores: np.ndarray, sents: pd.DataFrame, **boot: Any
) -> tuple[float, float, int, str]:
    """``(low, high, n_items, method)`` of a ratio score (UUAS, root accuracy) averaged over seeds:
    with two seeds or more, :func:`~bertology.probes.probing.edge.seed_and_sentence_interval` (t over
    seeds ⊕ a bootstrap over the shared test sentences, floored at Wilson's); with one, the
    sentence bootstrap alone."""
    num, den = RATIO_PARTS[metric]
    by_seed = [g for _, g in sents.groupby("seed")]
    n_items = int(by_seed[0][den].sum()) if by_seed else 0
    if len(seed_scores) >= 2:
        sums = [(g["sentence"].to_numpy(), g[num].to_numpy(float), g[den].to_numpy(float)) for g in by_seed]
        out = seed_and_sentence_interval(list(seed_scores), sums, n_items=n_items, **boot)
        return out["low"], out["high"], n_items, out["interval"]
    if not by_seed or n_items == 0:
        return math.nan, math.nan, n_items, "n=1"
    b = ratio_bootstrap(
        by_seed[0][num],
        by_seed[0][den],
        by_seed[0]["sentence"],
        n_resamples=boot["n_resamples"],
        seed=boot["bootstrap_seed"],
    )
    return b.low, b.high, n_items, ONE_SEED_INTERVAL


def _spearman_interval(
    metric: str, seed_scores: np.ndarray, sents: pd.DataFrame, **boot: Any
) -> tuple[float, float, int, str]:
    """``(low, high, n_sentences, method)`` of a length-averaged Spearman (DSpr., NSpr.) averaged
    over seeds: a bootstrap over test sentences of the seeds' mean per sentence, combined with the
    seeds' t interval as a ratio score's (shared test set); one seed: the bootstrap alone."""
    column = SPEARMAN_COLUMN[metric]
    pooled = sents.groupby("sentence").agg(value=(column, "mean"), n_words=("n_words", "first"))
    values, lengths = pooled["value"].to_numpy(float), pooled["n_words"].to_numpy()
    n_items = int((np.isfinite(values) & (lengths >= 5) & (lengths <= 50)).sum())
    estimate, low, high = length_average_bootstrap(
        values, lengths, n_resamples=boot.get("n_resamples", 2000), seed=boot.get("bootstrap_seed", 0)
    )
    if math.isnan(low):
        return math.nan, math.nan, n_items, "n=1" if len(seed_scores) < 2 else "too few sentences"
    if len(seed_scores) < 2:
        return low, high, n_items, ONE_SEED_INTERVAL
    t = t_interval(seed_scores)
    lo, hi, method = combine_seed_and_sentence(t, estimate - low, high - estimate, shared=True)
    return max(-1.0, lo), min(1.0, hi), n_items, method


def structural_intervals(
    scores: pd.DataFrame, sentences: pd.DataFrame, *, n_resamples: int = 2000, bootstrap_seed: int = 0
) -> pd.DataFrame:
    """One row per probe (encoder, probe kind, layer, rank) and metric (:data:`INTERVAL_COLUMNS`):
    ``dev_score`` and ``score`` (test), each the mean over seeds, the test score's 95% interval
    ``low``/``high`` (t over seeds combined with a bootstrap over test sentences; one seed: the
    bootstrap alone, said in ``interval``), ``n_seeds``, ``n_test`` (test items: gold edges for
    UUAS, sentences for root accuracy, sentences of 5-50 words for the Spearmans) and
    ``small_sample`` (:func:`bertology.uncertainty.is_small_sample` of ``n_test``)."""
    scored = scores[scores["split"].isin(["dev", "test"])]
    boot = {"n_resamples": n_resamples, "bootstrap_seed": bootstrap_seed}
    rows = []
    for key, group in scored.groupby([*INTERVAL_KEYS, "metric"], sort=True):
        *probe_key, metric = key
        test = group[group["split"] == "test"].sort_values("seed")
        mine = sentences[(sentences[INTERVAL_KEYS] == pd.Series(probe_key, index=INTERVAL_KEYS)).all(axis=1)]
        interval = _ratio_interval if metric in RATIO_PARTS else _spearman_interval
        low, high, n_items, method = interval(metric, test["value"].to_numpy(float), mine, **boot)
        rows.append(
            {
                **dict(zip(INTERVAL_KEYS, probe_key)),
                "metric": metric,
                "dev_score": group[group["split"] == "dev"]["value"].mean(),
                "score": test["value"].mean(),
                "low": low,
                "high": high,
                "n_seeds": int(test["seed"].nunique()),
                "n_test": n_items,
                "small_sample": is_small_sample(n_items),
                "interval": method,
            }
        )
    return _in_order(pd.DataFrame(rows, columns=INTERVAL_COLUMNS))


METRIC_ORDER = [m for kind in PROBE_KINDS for m in METRICS[kind]]


def _in_order(table: pd.DataFrame) -> pd.DataFrame:
    """Rows by encoder, probe kind (distance first), layer, rank and metric (UUAS, DSpr., root%, NSpr.)."""
    key = {
        "probe": lambda s: s.map({k: i for i, k in enumerate(PROBE_KINDS)}),
        "metric": lambda s: s.map({m: i for i, m in enumerate(METRIC_ORDER)}),
    }
    columns = [c for c in ("encoder", "probe", "layer", "best_layer", "rank", "metric") if c in table]
    return table.sort_values(columns, key=lambda s: key[s.name](s) if s.name in key else s, kind="stable").reset_index(
        drop=True
    )


SUMMARY_COLUMNS = [
    "encoder",
    "probe",
    "selected_on",
    "selection_metric",
    "best_layer",
    "rank",
    *SCORE_INTERVAL_COLUMNS,
]


def best_layers(intervals: pd.DataFrame) -> dict[tuple[str, str], int]:
    """``{(encoder, probe kind): layer}`` with the highest dev score of the kind's
    :data:`SELECTION_METRIC` (UUAS for distance, NSpr. for depth); ties go to the lower layer."""
    chosen = {}
    for (encoder, kind), part in intervals.groupby(["encoder", "probe"]):
        sel = part[(part["metric"] == SELECTION_METRIC[kind]) & part["dev_score"].notna()]
        if len(sel):
            chosen[(encoder, kind)] = int(
                sel.sort_values(["dev_score", "layer"], ascending=[False, True]).iloc[0]["layer"]
            )
    return chosen


def structural_summary(intervals: pd.DataFrame) -> pd.DataFrame:
    """Per encoder and probe kind its best layer chosen on dev (:func:`best_layers`) with every
    metric of that probe on test and its interval (:data:`SUMMARY_COLUMNS`)."""
    rows = []
    for (encoder, kind), layer in best_layers(intervals).items():
        at = intervals[(intervals["encoder"] == encoder) & (intervals["probe"] == kind) & (intervals["layer"] == layer)]
        for r in at.itertuples(index=False):
            rows.append(
                {
                    "encoder": encoder,
                    "probe": kind,
                    "selected_on": "dev",
                    "selection_metric": SELECTION_METRIC[kind],
                    "best_layer": layer,
                    **{c: getattr(r, c) for c in SUMMARY_COLUMNS[5:]},
                }
            )
    return _in_order(pd.DataFrame(rows, columns=SUMMARY_COLUMNS))


def linear_baseline(
    trees: StructuralTrees, sentence_ids: Ints, *, n_resamples: int = 2000, bootstrap_seed: int = 0
) -> pd.DataFrame:
    """The paper's LINEAR baseline on ``sentence_ids``: the left-to-right chain as the tree
    (distance ``|i - j|``, depth ``i``: the first word the root). One row per metric with the
    score and a bootstrap interval over the sentences (:data:`INTERVAL_COLUMNS`; ``encoder``
    ``"linear"``, ``layer`` -1, ``rank`` 0, nothing trained so no dev score and no seeds)."""
    ids = list(sentence_ids)
    rows = []
    for kind in PROBE_KINDS:

        def chain(kind: str = kind) -> Iterator[np.ndarray]:  # one sentence's at a time, scored as made
            for s in ids:
                position = np.arange(trees.heads[s].size, dtype=float)
                yield (np.abs(position[:, None] - position[None, :]) if kind == "distance" else position)[None]

        sents = pd.DataFrame(sentence_scores(chain(), trees, ids, kind)).assign(seed=0)
        for metric in METRICS[kind]:
            interval = _ratio_interval if metric in RATIO_PARTS else _spearman_interval
            low, high, n_items, _ = interval(
                metric,
                np.array([aggregate(sents, metric)]),
                sents,
                n_resamples=n_resamples,
                bootstrap_seed=bootstrap_seed,
            )
            rows.append(
                {
                    "encoder": "linear",
                    "probe": kind,
                    "layer": -1,
                    "rank": 0,
                    "metric": metric,
                    "dev_score": math.nan,
                    "score": aggregate(sents, metric),
                    "low": low,
                    "high": high,
                    "n_seeds": 0,
                    "n_test": n_items,
                    "small_sample": is_small_sample(n_items),
                    "interval": "sentence bootstrap",
                }
            )
    return pd.DataFrame(rows, columns=INTERVAL_COLUMNS)


TREE_EDGE_COLUMNS = ["sentence", "sent_id", "source", "i", "j", "correct"]
TREE_WORD_COLUMNS = ["sentence", "sent_id", "position", "word", "punct", "gold_depth", "predicted_depth", "gold_head"]


def example_trees(
    distances: Sequence[np.ndarray],
    depths: Sequence[np.ndarray] | None,
    trees: StructuralTrees,
    sentence_ids: Ints,
    words: Sequence[Sequence[str]],
    names: Sequence[str],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables to draw predicted trees over gold ones: ``tree_edges`` (``sentence``, ``sent_id``,
    ``source`` gold / predicted, ``i`` < ``j``, ``correct``: the edge is in both; punctuation left
    out, as UUAS) and ``tree_words`` (``sentence``, ``sent_id``, ``position``, ``word``, ``punct``,
    ``gold_depth``, ``predicted_depth``, ``gold_head`` 0-based, -1 = root). ``distances``: one
    predicted ``[n, n]`` matrix per sentence of ``sentence_ids``; ``depths``: ``[n]`` or None."""
    edge_rows, word_rows = [], []
    for k, s in enumerate(sentence_ids):
        keep = ~trees.punct[s]
        gold, pred = gold_edges(trees.heads[s], keep), mst_edges(distances[k], keep)
        for source, edges in (("gold", gold), ("predicted", pred)):
            for i, j in sorted(edges):
                edge_rows.append(
                    {
                        "sentence": int(s),
                        "sent_id": names[k],
                        "source": source,
                        "i": i,
                        "j": j,
                        "correct": (i, j) in gold and (i, j) in pred,
                    }
                )
        for position, word in enumerate(words[k]):
            word_rows.append(
                {
                    "sentence": int(s),
                    "sent_id": names[k],
                    "position": position,
                    "word": word,
                    "punct": bool(trees.punct[s][position]),
                    "gold_depth": int(trees.depths[s][position]),
                    "predicted_depth": float(depths[k][position]) if depths is not None else math.nan,
                    "gold_head": int(trees.heads[s][position]) - 1,
                }
            )
    return pd.DataFrame(edge_rows, columns=TREE_EDGE_COLUMNS), pd.DataFrame(word_rows, columns=TREE_WORD_COLUMNS)


def structural_probe_layers(
    store: Any,
    corpus: Any,
    *,
    kind: str = "distance",
    layers: Sequence[int] | None = None,
    rank: int | None = None,
    seeds: Sequence[int] = (0, 1, 2),
    split_seed: int = 0,
    settings: StructuralSettings = StructuralSettings(),
) -> pd.DataFrame:
    """The structural probe of every layer of a feature store (or ``layers``) against the corpus's
    trees: the :func:`structural_intervals` table (per layer and metric the dev and test score
    with the test score's interval; the table the ``structural_probe`` study writes as
    ``layer_intervals``). ``rank``: the probe's rank (default the store's ``dim``)."""
    layer_ids = list(range(store.n_layers)) if layers is None else [int(l) for l in layers]
    trees = corpus_trees(corpus)
    run = probe_structure(
        store.view(layer_ids) if hasattr(store, "view") else store.layers(layer_ids),  # read batch by batch
        store.sentence_offsets,
        trees,
        kind=kind,
        layer_ids=layer_ids,
        ranks=rank,
        seeds=seeds,
        split_seed=split_seed,
        settings=settings,
    )
    return structural_intervals(run.scores, run.sentences).assign(trees=trees.source)


__all__ = [
    "PROBE_KINDS",
    "METRICS",
    "SELECTION_METRIC",
    "SCORE_COLUMNS",
    "SENTENCE_COLUMNS",
    "INTERVAL_COLUMNS",
    "SUMMARY_COLUMNS",
    "TREE_EDGE_COLUMNS",
    "TREE_WORD_COLUMNS",
    "StructuralSettings",
    "StructuralTrees",
    "TreeDistances",
    "StructuralProbes",
    "StructuralRun",
    "trees_from_heads",
    "corpus_trees",
    "require_scoreable_splits",
    "scoreable",
    "split_sentences",
    "fit_structural",
    "predict_structure",
    "iter_predictions",
    "sentence_scores",
    "aggregate",
    "probe_structure",
    "structural_intervals",
    "best_layers",
    "structural_summary",
    "linear_baseline",
    "example_trees",
    "structural_probe_layers",
]
