"""Reading a complete store: :class:`FeatureStore` (word vectors, word attention, attention to
special tokens, token-level argmax offset counts), all float32, word level, corpus order."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bertology.errors import StoreError
from bertology.features import token_offset_bins
from bertology.store.manifest import read_manifest
from bertology.store.shardfile import ShardFile
from bertology.store.verify import damage_message, mark_damaged, shard_problem, shard_problems

TokenQueries = Literal["all", "words", "special"]
VerifyLevel = Literal["lazy", "full", "size"]


class FeatureStore:
    """Read access to a complete store. All arrays float32 (whatever the storage dtype), word
    level, corpus order.

    ``n_layers`` counts hidden-state layers including the embeddings (``num_hidden_layers + 1``).
    ``verify``: ``"lazy"`` (default) checks the manifest and every shard's size at open and each
    shard's sha256 at its first read in this process; ``"full"`` hashes every shard at open;
    ``"size"`` never hashes.
    """

    def __init__(self, path: str | Path, *, verify: VerifyLevel = "lazy"):
        self.path = Path(path)
        if verify not in ("lazy", "full", "size"):
            raise StoreError(f"verify must be 'lazy', 'full' or 'size', not {verify!r}")
        self.manifest: dict = read_manifest(self.path)
        problems = shard_problems(self.path, self.manifest, full=verify == "full")
        if problems:
            raise StoreError(damage_message(self.path, problems))
        self._verify = verify
        manifest = self.manifest
        self.n_layers: int = manifest["n_layers"]
        self.n_heads: int = manifest["n_heads"]
        self.dim: int = manifest["dim"]
        self.n_sentences: int = manifest["n_sentences"]
        self.has_attention: bool = manifest["settings"]["attentions"]
        window = manifest["settings"].get("token_offset_window")
        self.has_token_offsets: bool = self.has_attention and window is not None
        self.token_offset_window: int | None = int(window) if window is not None else None
        self.word_counts = np.asarray(manifest["word_counts"], dtype=np.int64)
        self.sentence_offsets = np.concatenate([[0], np.cumsum(self.word_counts)]).astype(np.int64)
        self.n_words = int(self.sentence_offsets[-1])
        # where each sentence lives: shard index, row within shard, word offset, attention offset
        self._shards = [self.path / name for name in manifest["shards"]]
        self._where = np.zeros((self.n_sentences, 4), dtype=np.int64)
        for k, sentence_ids in enumerate(manifest["plan"]):
            counts = self.word_counts[sentence_ids]
            word_off = np.concatenate([[0], np.cumsum(counts)[:-1]])
            att_off = np.concatenate([[0], np.cumsum(counts**2)[:-1]])
            self._where[sentence_ids] = np.stack(
                [np.full(len(sentence_ids), k), np.arange(len(sentence_ids)), word_off, att_off], 1
            )
        self._handles: dict[int, ShardFile] = {}

    def verify(self) -> None:
        """Hash every shard now; raise :class:`StoreError` naming the damaged ones."""
        problems = shard_problems(self.path, self.manifest, full=True)
        if problems:
            raise StoreError(damage_message(self.path, problems))

    def __repr__(self) -> str:
        return (
            f"FeatureStore({self.manifest['model']['name']!r} × {self.manifest['corpus']['name']!r}: "
            f"{self.n_sentences} sentences, {self.n_words} words, {self.n_layers} layers × {self.dim} dims"
            f"{', attention' if self.has_attention else ''})"
        )

    def _open(self, k: int) -> ShardFile:
        """Shard ``k``, opened (and, with ``verify="lazy"``, hashed) on first use. Reads go through
        :class:`ShardFile` (``pread``), so walking the store keeps no pages of it resident."""
        if k not in self._handles:
            shard = self._shards[k]
            if self._verify == "lazy":
                problem = shard_problem(shard, self.manifest, full=True)
                if problem:
                    mark_damaged(self.path, [(shard.name, problem)])
                    raise StoreError(damage_message(self.path, [(shard.name, problem)]))
            try:
                handle = ShardFile(shard)
                counts = handle.read("word_counts").tolist()
            except Exception as exc:
                raise StoreError(damage_message(self.path, [(shard.name, f"unreadable ({exc})")])) from exc
            if counts != self.word_counts[self.manifest["plan"][k]].tolist():
                raise StoreError(damage_message(self.path, [(shard.name, "word counts differ from the manifest's")]))
            self._handles[k] = handle
        return self._handles[k]

    def hidden(self, i: int, layers: Sequence[int] | None = None) -> np.ndarray:
        """Sentence ``i``'s word vectors of every layer (or of ``layers``, in that order; only those
        are read): ``[n_layers or len(layers), words_i, dim]``."""
        k, _, off, _ = self._where[i]
        w = self.word_counts[i]
        first = None if layers is None else [l % self.n_layers for l in self._layer_ids(layers)]
        return _float32(self._open(int(k)).read("hidden", 1, int(off), int(off + w), first=first))

    def attention(self, i: int, *, normalise: bool = True) -> np.ndarray:
        """Sentence ``i``'s word-to-word attention ``[n_layers - 1, heads, words_i, words_i]``.

        With ``normalise`` each row is divided by the mass it puts on words (so rows sum to 1);
        otherwise the raw mass (the rest went to special tokens: :meth:`special_attention`).
        """
        if not self.has_attention:
            raise StoreError(f"{self.path}: extracted without attentions")
        k, _, _, aoff = self._where[i]
        w = int(self.word_counts[i])
        flat = _float32(self._open(int(k)).read("attention", 2, int(aoff), int(aoff) + w * w))
        att = flat.reshape(flat.shape[0], flat.shape[1], w, w)
        if normalise:
            att = att / np.clip(att.sum(-1, keepdims=True), 1e-12, None)
        return att

    def special_attention(self, i: int) -> np.ndarray:
        """Attention of each word to ``[CLS]``-like (index 0) and ``[SEP]``-like (index 1) tokens:
        ``[n_layers - 1, heads, words_i, 2]``."""
        if not self.has_attention:
            raise StoreError(f"{self.path}: extracted without attentions")
        k, _, off, _ = self._where[i]
        w = self.word_counts[i]
        return _float32(self._open(int(k)).read("special", 2, int(off), int(off + w)))

    @property
    def token_offset_bins(self) -> list[int | str]:
        """Labels of the last axis of :meth:`token_offsets`: offsets ``-K..K``, then ``"other"``."""
        window = self._need_token_offsets()
        return token_offset_bins(window)

    def _need_token_offsets(self) -> int:
        """The offset window ``K`` of a store with token-level offsets; raises for one without."""
        if not self.has_attention:
            raise StoreError(f"{self.path}: extracted without attentions")
        if not self.has_token_offsets or self.token_offset_window is None:
            raise StoreError(
                f"{self.path}: store version {self.manifest.get('version')} has no token-level "
                f"argmax offsets (added in store version 2); extract again (a new store key)"
            )
        return self.token_offset_window

    def token_offsets(self, i: int, *, queries: TokenQueries = "all") -> np.ndarray:
        """Sentence ``i``'s token-level argmax offset counts ``[n_layers - 1, heads, 2K+2]`` (int64).

        Entry ``[l, h, b]``: how many query tokens of the sentence have head ``(l, h)``'s attention
        argmax (over every token, special tokens included) at relative token offset
        :attr:`token_offset_bins` ``[b]`` (the last bin: further than ``K``). ``queries``: ``"all"``
        query tokens (default; ``counts.sum(-1)`` = the sentence's token count), only ``"words"``
        (word pieces) or only ``"special"`` (``[CLS]``/``[SEP]``-like tokens).
        """
        self._need_token_offsets()
        k, row, _, _ = self._where[i]
        counts = self._open(int(k)).read("token_offsets", 0, int(row), int(row) + 1)[0].astype(np.int64)
        return _select_queries(counts, queries)

    def token_offset_totals(self, *, queries: TokenQueries = "all") -> np.ndarray:
        """:meth:`token_offsets` summed over every sentence of the store: ``[n_layers - 1, heads, 2K+2]``."""
        self._need_token_offsets()
        blocks = [self._open(k).read("token_offsets").astype(np.int64).sum(0) for k in range(len(self._shards))]
        return _select_queries(np.sum(blocks, axis=0), queries)

    def _layer_ids(self, layers: Sequence[int] | None) -> list[int]:
        layers = list(range(self.n_layers)) if layers is None else [int(l) for l in layers]
        for l in layers:
            if not -self.n_layers <= l < self.n_layers:
                raise StoreError(f"layer {l} out of range: the store has layers 0..{self.n_layers - 1}")
        return layers

    def shard_sentences(self, k: int) -> list[int]:
        """The sentence ids shard ``k`` holds, in its order (its words are these sentences' words, concatenated)."""
        return list(self.manifest["plan"][k])

    @property
    def n_shards(self) -> int:
        return len(self._shards)

    def shard_words(self, k: int) -> int:
        """How many words shard ``k`` holds."""
        return int(self.word_counts[self.manifest["plan"][k]].sum())

    def shard_word_ids(self, k: int) -> np.ndarray:
        """Flat (corpus-order) indices ``[words_k]`` int64 of shard ``k``'s words, in the shard's order:
        row ``r`` of :meth:`shard_hidden` is word ``shard_word_ids(k)[r]``."""
        offsets = self.sentence_offsets
        return np.concatenate([np.arange(offsets[s], offsets[s + 1], dtype=np.int64) for s in self.shard_sentences(k)])

    def shard_hidden(
        self,
        k: int,
        layers: Sequence[int] | None = None,
        out: np.ndarray | None = None,
        words: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """Shard ``k``'s word vectors of the chosen layers: ``[len(layers), words_k, dim]`` float32, its
        words in :meth:`shard_sentences` order (one read per layer, straight into the result; nothing
        of the file stays mapped). ``words=(start, stop)``: only the shard's words ``start:stop``
        (``[len(layers), stop - start, dim]``). ``out``: a C-contiguous float32 array of the result's
        shape to read into and return (one buffer reused over many reads, rather than a fresh block
        per read)."""
        first = [l % self.n_layers for l in self._layer_ids(layers)]
        start, stop = (0, None) if words is None else words
        return _float32(self._open(k).read("hidden", 1, start, stop, first=first, out=out))

    def word_location(self, words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where flat (corpus-order) word indices live: ``(shard [n], row within the shard's words [n])``."""
        words = np.asarray(words, dtype=np.int64)
        sentence = np.searchsorted(self.sentence_offsets, words, side="right") - 1
        where = self._where[sentence]
        return where[:, 0], where[:, 2] + (words - self.sentence_offsets[sentence])

    def layer_rows(self, l: int, words: np.ndarray, *, gap: int = 64) -> np.ndarray:
        """Layer ``l``'s vectors of flat (corpus-order) word indices ``words`` (any order, repeats
        allowed): ``[len(words), dim]`` float32, equal to ``layer(l)[words]``. Only the rows asked for
        are read, shard by shard: rows of one shard less than ``gap`` rows apart are read as one run
        (a dense selection reads whole spans, a sparse one a row or a few at a time), so memory holds
        the answer and at most one shard's span of the layer."""
        (l,) = self._layer_ids([l])
        words = np.asarray(words, dtype=np.int64).reshape(-1)
        out = np.empty((len(words), self.dim), dtype=np.float32)
        if len(words) == 0:
            return out
        if words.min() < 0 or words.max() >= self.n_words:
            raise StoreError(f"word indices must lie in 0..{self.n_words - 1}")
        shard, row = self.word_location(words)
        order = np.lexsort((row, shard))
        shard, row = shard[order], row[order]
        # runs: a new one where the shard changes or the next row is `gap` or more rows on
        cut = np.flatnonzero((np.diff(shard) != 0) | (np.diff(row) >= gap)) + 1
        layer = l % self.n_layers
        for a, b in zip(np.concatenate([[0], cut]), np.concatenate([cut, [len(row)]])):
            lo, hi = int(row[a]), int(row[b - 1]) + 1
            block = _float32(self._open(int(shard[a])).read("hidden", 1, lo, hi, first=[layer])[0])
            out[order[a:b]] = block[row[a:b] - lo]
        return out

    def layers(self, layers: Sequence[int] | None = None) -> np.ndarray:
        """Word vectors of the chosen layers, corpus order: ``[len(layers), n_words, dim]`` (the
        whole corpus in memory: streaming analyses read :meth:`shard_hidden` instead)."""
        layers = self._layer_ids(layers)
        out = np.empty((len(layers), self.n_words, self.dim), dtype=np.float32)
        for k in range(self.n_shards):
            out[:, self.shard_word_ids(k)] = self.shard_hidden(k, layers)
        return out

    def view(self, layers: Sequence[int] | None = None) -> LayerView:
        """The chosen layers (default all), read one at a time when used (:class:`LayerView`)."""
        return LayerView(self, layers)

    def layer(self, l: int) -> np.ndarray:
        """One layer's word vectors ``[n_words, dim]`` (0 = embeddings)."""
        return self.layers([l])[0]

    def iter_attention(self, *, normalise: bool = True) -> Iterator[tuple[int, np.ndarray]]:
        """``(i, attention(i))`` for every sentence in corpus order."""
        for i in range(self.n_sentences):
            yield i, self.attention(i, normalise=normalise)


class LayerView:
    """The chosen layers of a store, read when used: ``view[j]`` is layer ``layer_ids[j]``'s word vectors
    ``[n_words, dim]`` (one layer in memory at a time); ``shape`` is ``(len(layer_ids), n_words, dim)``,
    the array it stands for. Analyses that go layer by layer iterate it; span probes gather from it
    shard by shard (:meth:`shard`); ``np.asarray(view)`` reads it all. A subclass may stand for
    features computed from the layers (a feature combination) by overriding ``shape``, ``shard``,
    ``__getitem__`` and ``__array__``."""

    def __init__(self, store: FeatureStore, layer_ids: Sequence[int] | None = None):
        self.store = store
        self.layer_ids = store._layer_ids(layer_ids)
        self.shape = (len(self.layer_ids), int(store.n_words), int(store.dim))
        self.ndim = 3

    def __len__(self) -> int:
        return len(self.layer_ids)

    def __getitem__(self, j: int) -> np.ndarray:
        return self.store.layer(self.layer_ids[j])

    def __iter__(self) -> Iterator[np.ndarray]:
        for j in range(len(self)):
            yield self[j]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.store.layers(self.layer_ids)
        return out if dtype is None else out.astype(dtype)

    def rows(self, j: int, words: np.ndarray) -> np.ndarray:
        """Layer ``layer_ids[j]``'s vectors of flat word indices ``words``: ``[len(words), shape[2]]``,
        equal to ``view[j][words]`` but reading only those rows (:meth:`FeatureStore.layer_rows`)."""
        return self.store.layer_rows(self.layer_ids[j], words)

    def rows_from_shards(self, j: int, words: np.ndarray) -> np.ndarray:
        """:meth:`rows` through :meth:`shard` (what a subclass computing its features shard by shard
        uses): of every shard holding one of ``words``, the run of its words from the first asked for
        to the last is read, one shard at a time."""
        words = np.asarray(words, dtype=np.int64).reshape(-1)
        out = np.empty((len(words), self.shape[2]), dtype=np.float32)
        shard, row = self.store.word_location(words)
        for k in np.unique(shard):
            here = shard == k
            first, stop = int(row[here].min()), int(row[here].max()) + 1
            out[here] = self.shard(int(k), [j], words=(first, stop))[0][row[here] - first]
        return out

    def shard(
        self,
        k: int,
        which: Sequence[int] | None = None,
        out: np.ndarray | None = None,
        words: tuple[int, int] | None = None,
    ) -> np.ndarray:
        """Shard ``k``'s words of this view's layers (or of positions ``which`` among them):
        ``[len(view) or len(which), words_k, shape[2]]`` float32, in
        :meth:`FeatureStore.shard_sentences` order (what span probes gather from, shard by shard).
        ``words=(start, stop)``: only the shard's words ``start:stop``. ``out``: a buffer of the
        result's shape it may be read into (use the returned array)."""
        ids = self.layer_ids if which is None else [self.layer_ids[j] for j in which]
        return self.store.shard_hidden(k, ids, out=out, words=words)


def _float32(array: np.ndarray) -> np.ndarray:
    """A stored float array as float32 (no copy when it already is)."""
    return array if array.dtype == np.float32 else array.astype(np.float32)


def _select_queries(counts: np.ndarray, queries: str) -> np.ndarray:
    """``[..., 2, bins]`` counts by query kind (0 word pieces, 1 special tokens) -> ``[..., bins]``."""
    if queries == "all":
        return counts.sum(-2)
    if queries == "words":
        return counts[..., 0, :]
    if queries == "special":
        return counts[..., 1, :]
    raise StoreError(f"queries must be 'all', 'words' or 'special', not {queries!r}")


def open_store(path: str | Path) -> FeatureStore:
    """The complete store at ``path`` (lazy verification: see :class:`FeatureStore`)."""
    return FeatureStore(path)
