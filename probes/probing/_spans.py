"""From a task's spans to probe inputs: span token indices and the gathered, standardised features.

Input features are ``[L, n_words, D]`` (``FeatureStore.layers()``), words in corpus order, with
``sentence_offsets [n_sentences + 1]`` giving each sentence's first word. A task's example ``i``
has ``S`` spans (1 or 2) of at most ``M`` words each.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from bertology.probes.probing.tasks import EdgeExample, EdgeTask, Span, TaskError
from bertology.runtime import release_free_memory
from bertology.store.read import LayerView


def example_spans(example: EdgeExample, n_spans: int) -> tuple[Span, ...]:
    """``(span1,)`` or ``(span1, span2)``; a task with two spans has ``span2`` in every example."""
    if n_spans == 1:
        return (example.span1,)
    if example.span2 is None:
        raise TaskError(f"example of sentence {example.sentence} has no span2, which the task's other examples have")
    return (example.span1, example.span2)


def span_index(task: EdgeTask, sentence_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global word indices of every span token, padded.

    Returns ``tokens [n, S, M]`` int64 (indices into the flat word axis) and ``mask [n, S, M]``
    bool, where ``S`` = spans per example and ``M`` = longest span.
    """
    offsets = np.asarray(sentence_offsets, dtype=np.int64)
    n_spans = task.n_spans
    spans = [example_spans(e, n_spans) for e in task.examples]
    longest = max(end - start for sp in spans for start, end in sp)
    tokens = np.zeros((len(spans), n_spans, longest), dtype=np.int64)
    mask = np.zeros((len(spans), n_spans, longest), dtype=bool)
    for i, (e, sp) in enumerate(zip(task.examples, spans)):
        if e.sentence + 1 >= len(offsets):
            raise TaskError(
                f"task {task.name!r}: example {i} refers to sentence {e.sentence}, "
                f"features hold {len(offsets) - 1} sentences"
            )
        base, n_words = offsets[e.sentence], offsets[e.sentence + 1] - offsets[e.sentence]
        for s, (start, end) in enumerate(sp):
            if end > n_words:
                raise TaskError(
                    f"task {task.name!r}: example {i} span [{start}, {end}) outside "
                    f"sentence {e.sentence} ({n_words} words in the features)"
                )
            tokens[i, s, : end - start] = np.arange(base + start, base + end)
            mask[i, s, : end - start] = True
    return tokens, mask


DEFAULT_CACHE_BYTES = 512e6
"""Gathered example features kept in memory up to this many bytes (float32); above it they are
written once to an unnamed temporary file and read back batch by batch (:class:`SpanFeatures`)."""

GATHER_BYTES = 64e6
"""Examples are gathered from the store this many bytes of features at a time (at most 1,024, at
least 16 examples): with BERT-large's 25 x 1024 features, 625 words. Predictions read their batches
within the same budget (:func:`~bertology.probes.probing._training.predict_logits`)."""

_IOV_MAX = 1024  # buffers per preadv/pwritev call (Linux's IOV_MAX)
_CALL_BYTES = 1 << 30  # and at most this many bytes per call (Linux moves at most ~2 GB per call)


class _SpillFile:
    """Rows ``[n, *row_shape]`` float32 in an unnamed temporary file (``O_TMPFILE`` where the file
    system has it; gone when this object is, or when the process dies), written and read with
    ``pwritev`` / ``preadv``: nothing is mapped, so the file's pages sit in the page cache, never in
    this process's memory. A batch of rows is read in file order, each run of consecutive rows with
    one call whose buffers are the rows' places in the batch: the cost of a read depends on the batch,
    not on the file's size (a memory map faulted its pages in one by one, and touched more of them
    the larger and sparser the file)."""

    def __init__(self, directory: Path, n: int, row_shape: tuple[int, ...]):
        self.shape = (n, *row_shape)
        self.row_bytes = 4 * int(np.prod(row_shape))
        self._file = tempfile.TemporaryFile(prefix=".span-features-", dir=directory)
        self._fd = self._file.fileno()
        os.ftruncate(self._fd, n * self.row_bytes)

    def write(self, rows: np.ndarray, block: np.ndarray) -> None:
        """File rows ``rows [B]`` (distinct) := ``block [B, *row_shape]``."""
        block = np.ascontiguousarray(block, dtype=np.float32)
        if len(rows):
            self._transfer(os.pwritev, np.asarray(rows, dtype=np.int64), block.data.cast("B"))

    def read(self, rows: np.ndarray) -> np.ndarray:
        """File rows ``rows [B]`` (any order, repeats allowed) as ``[B, *row_shape]`` float32."""
        out = np.empty((len(rows), *self.shape[1:]), dtype=np.float32)
        if len(rows):
            self._transfer(os.preadv, np.asarray(rows, dtype=np.int64), out.data.cast("B"))
        return out

    def _transfer(
        self, call: Callable[[int, Sequence[memoryview], int], int], rows: np.ndarray, buffer: memoryview
    ) -> None:
        """``call(fd, buffers, offset)`` over the runs of consecutive file rows among ``rows [B > 0]``,
        in file order; row ``rows[i]`` goes to (comes from) ``buffer``'s ``i``-th row."""
        if rows.min() < 0 or rows.max() >= self.shape[0]:
            raise IndexError(f"spilled features have {self.shape[0]} rows, asked for row {rows.max()}")
        rb = self.row_bytes
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        # a run ends where the next row is not the next one in the file (or the call would grow too big)
        per_call = max(1, min(_IOV_MAX, _CALL_BYTES // rb))
        breaks = np.flatnonzero(np.diff(sorted_rows) != 1) + 1
        starts = np.concatenate([[0], breaks]).tolist()
        ends = breaks.tolist() + [len(rows)]
        places = order.tolist()
        first = sorted_rows.tolist()
        for a, b in zip(starts, ends):
            for c in range(a, b, per_call):
                d = min(b, c + per_call)
                buffers = [buffer[i * rb : (i + 1) * rb] for i in places[c:d]]
                if call(self._fd, buffers, first[c] * rb) != (d - c) * rb:
                    raise OSError(f"short {call.__name__} on the span features' temporary file")

    def close(self) -> None:
        self._file.close()


class SpanFeatures:
    """Gathers (and standardises) span-token features ``[L, B, S, M, D]`` from ``[L, W, D]``.

    ``features``: an array ``[L, W, D]`` or a :class:`LayerView` (read shard by shard, so the
    corpus's features are never all in memory). ``standardize``: z-score each layer's dimensions
    with the mean and standard deviation over the words the spans use. Every example is gathered
    (and standardised) once: into ``cached [L, n, S, M, D]`` in memory when that fits in
    ``cache_bytes`` (float32), otherwise into an unnamed temporary file beside the store
    (example-major, :class:`_SpillFile`; deleted when this object is, or when the process dies),
    from which each batch is read back with ``preadv``: memory stays at one batch's worth and the
    batch's examples (their order, their bytes) are the same either way.
    """

    def __init__(
        self,
        features: np.ndarray | torch.Tensor | LayerView,
        tokens: np.ndarray,
        mask: np.ndarray,
        standardize: bool,
        device: str,
        cache_bytes: float = DEFAULT_CACHE_BYTES,
    ):
        self.device = torch.device(device)
        self.tokens = torch.as_tensor(tokens, device=device)
        self.mask = torch.as_tensor(mask, device=device)
        self.shape = tuple(int(d) for d in features.shape)
        self.mean: torch.Tensor | None = None  # [L,1,1,1,D] when standardising
        self.scale: torch.Tensor | None = None
        self.cached: torch.Tensor | None = None
        self.cached_lowp: torch.Tensor | None = None  # low-precision copy of ``cached``, made once
        self._spill: _SpillFile | None = None  # rows [n, L, S, M, D] float32 when not cached
        # where analyses of these features put their own temporary files (an L-BFGS design): the
        # store's folder for a store's features, else the system's temporary folder
        self.spill_dir: Path | None = None
        L, _, D = self.shape
        n = len(self.tokens)
        in_memory = L * self.tokens.numel() * D * 4 <= cache_bytes
        if isinstance(features, LayerView):
            self.feats: torch.Tensor | None = None
            self._gather_store(features, standardize, in_memory)
            return
        feats = torch.as_tensor(features)
        if feats.dtype != torch.float32:
            feats = feats.float()
        self.feats = feats.to(device)
        if standardize:
            used = torch.unique(self.tokens[self.mask])
            sample = self.feats[:, used]
            self.mean = sample.mean(1, keepdim=True)[:, :, None, None, :]  # [L,1,1,1,D]
            self.scale = 1.0 / (sample.std(1, keepdim=True)[:, :, None, None, :] + 1e-6)
            del sample
        if in_memory:
            # gather + standardise every example once; batches are then one index_select
            chunks = [self._gather(torch.arange(i, min(i + 4096, n), device=device)) for i in range(0, n, 4096)]
            self.cached = torch.cat(chunks, dim=1).contiguous()

    # --- building the cache from a store, shard by shard

    def _gather_store(self, source: LayerView, standardize: bool, in_memory: bool) -> None:
        """Fill ``cached`` (or the spill file) from the store's shards: a first pass for the
        standardisation statistics (float64 sums over each used word once), a second to gather."""
        store = source.store
        self.spill_dir = store.path.parent
        L, _, D = self.shape
        n, S, M = self.tokens.shape
        tokens = self.tokens.cpu().numpy()
        mask = self.mask.cpu().numpy()
        # padding positions gather the example's first token (same sentence, same shard); masked out later
        tokens = np.where(mask, tokens, tokens[:, :1, :1])
        shard, local = store.word_location(tokens.reshape(-1))
        shard, local = shard.reshape(n, S * M), local.reshape(n, S * M)
        example_shard = shard[:, 0]
        by_shard = {int(k): np.flatnonzero(example_shard == k) for k in np.unique(example_shard)}
        # examples gathered at a time: 1,024, or fewer where that would pass GATHER_BYTES; a shard's
        # examples in the order of their words there, so that each chunk reads one run of the shard's
        # words (the words its examples use, every layer), never the whole shard
        step = int(max(16, min(1024, GATHER_BYTES // self.example_bytes)))
        chunks: list[tuple[int, np.ndarray, int, int]] = []  # (shard, examples, first word, end word)
        for k, rows in by_shard.items():
            rows = rows[np.argsort(local[rows, 0], kind="stable")]
            for start in range(0, len(rows), step):
                ex = rows[start : start + step]
                chunks.append((k, ex, int(local[ex].min()), int(local[ex].max()) + 1))
        # one buffer for every read, the size of the largest: a fresh block per read (each of another
        # size) left glibc's heap holding the freed ones, and a BERT-large probe grew by about a
        # shard's size every few shards (0.6 -> 3.2 GB at 750 sentences)
        widest = max((stop - first for _, _, first, stop in chunks), default=0)
        shard_words = {k: store.shard_words(k) for k in by_shard}
        buffer = np.empty(max(L * widest, max(shard_words.values(), default=0)) * D, dtype=np.float32)

        def read(k: int, which: list[int] | None, first: int, stop: int) -> np.ndarray:
            """Words ``first:stop`` of shard ``k``, its layers (or layers ``which``), read into ``buffer``."""
            shape = (L if which is None else len(which), stop - first, D)
            return source.shard(k, which, out=buffer[: int(np.prod(shape))].reshape(shape), words=(first, stop))

        if standardize:
            used_shard, used_local = shard[mask.reshape(n, -1)], local[mask.reshape(n, -1)]
            used = {k: np.unique(used_local[used_shard == k]) for k in by_shard}
            most = max((len(rows) for rows in used.values()), default=0)
            picked = np.empty((most, D), dtype=np.float32)  # one layer's used words, reused
            wide = np.empty((most, D), dtype=np.float64)
            total = np.zeros((L, D))
            squares = np.zeros((L, D))
            count = 0
            for k, rows in used.items():  # one layer of one shard at a time
                for j in range(L):
                    x = wide[: len(rows)]  # [used words, D] in float64
                    x[...] = np.take(read(k, [j], 0, shard_words[k])[0], rows, axis=0, out=picked[: len(rows)])
                    total[j] += x.sum(0)
                    squares[j] += np.einsum("wd,wd->d", x, x)
                count += len(rows)
            del picked, wide
            mean = total / max(count, 1)
            var = np.maximum(squares - count * mean * mean, 0.0) / max(count - 1, 1)
            self.mean = torch.as_tensor(mean, dtype=torch.float32, device=self.device)[:, None, None, None, :]
            self.scale = (
                1.0
                / (torch.as_tensor(np.sqrt(var), dtype=torch.float32, device=self.device) + 1e-6)[
                    :, None, None, None, :
                ]
            )
        if in_memory:
            self.cached = torch.empty((L, n, S, M, D), dtype=torch.float32, device=self.device)
        else:
            # beside the store: the disk the user chose
            self._spill = _SpillFile(self.spill_dir, n, (L, S, M, D))
        # the gathered chunk and its example-major copy (what the spill file holds) in two buffers
        # reused for every chunk: nothing of the chunk's size is allocated per chunk
        size = L * min(step, n) * S * M * D
        gathered = torch.empty(size, dtype=torch.float32, device=self.device)
        example_major = np.empty(size if self.cached is None else 0, dtype=np.float32)
        for k, ex, first, stop in chunks:
            hidden = torch.from_numpy(read(k, None, first, stop)).to(self.device)  # [L, stop - first, D]
            index = torch.as_tensor(local[ex].reshape(-1) - first, device=self.device)
            rows_out = gathered[: L * len(index) * D].view(L, len(index), D)
            g = torch.index_select(hidden, 1, index, out=rows_out).view(L, len(ex), S, M, D)
            if self.mean is not None and self.scale is not None:
                g.sub_(self.mean).mul_(self.scale)
            if self.cached is not None:
                self.cached[:, torch.as_tensor(ex, device=self.device)] = g
                continue
            assert self._spill is not None
            block = torch.from_numpy(example_major[: g.numel()]).view(len(ex), L, S, M, D)
            block.copy_(g.permute(1, 0, 2, 3, 4))  # from the model's device, if not the CPU
            self._spill.write(ex, block.numpy())
        release_free_memory()  # blocks freed while gathering: give the pages back to the system

    @property
    def example_bytes(self) -> int:
        """Bytes of one example's gathered features ``[L, S, M, D]`` in float32 (what batch sizes are
        budgeted by)."""
        L, _, D = self.shape
        _, S, M = self.tokens.shape
        return 4 * L * S * M * D

    def _gather(self, idx: torch.Tensor) -> torch.Tensor:
        assert self.feats is not None
        g = self.feats[:, self.tokens[idx]]
        if self.mean is not None and self.scale is not None:
            g = (g - self.mean) * self.scale
        return g

    def low_precision(self, dtype: torch.dtype) -> torch.Tensor | None:
        """``cached`` in ``dtype`` (made once, shared by every fit on these features), or None
        when the features are not cached."""
        if self.cached is None:
            return None
        if self.cached_lowp is None or self.cached_lowp.dtype != dtype:
            self.cached_lowp = self.cached.to(dtype)
        return self.cached_lowp

    def __call__(self, idx: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[L, B, S, M, D]`` and mask ``[B, S, M]`` of examples ``idx`` (float32, or
        ``dtype`` when given)."""
        if self.cached is not None:
            source = self.cached if dtype is None or dtype == torch.float32 else self.low_precision(dtype)
            assert source is not None  # cached, so its low-precision copy exists too
            return source.index_select(1, idx), self.mask[idx]
        if self._spill is not None:
            block = self._spill.read(idx.cpu().numpy())  # read in file order, placed in batch order
            g = torch.from_numpy(block).to(self.device).permute(1, 0, 2, 3, 4)  # [L, B, S, M, D]
            # layer-major and contiguous, as a cached batch is (batched matmuls over L are slower on a view)
            return g.contiguous() if dtype is None else g.to(dtype, memory_format=torch.contiguous_format), self.mask[
                idx
            ]
        g = self._gather(idx)
        return (g if dtype is None else g.to(dtype)), self.mask[idx]
