"""From words to word-level features: tokenisation with word alignment, batched forward passes,
subword→word pooling of every layer's hidden states and word-level attention (Clark et al. 2019).

One batch of ``B`` sequences padded to ``T`` tokens holds ``Σ w`` words (``w`` per sequence):

- hidden states ``L+1 × [B, T, D]`` (index 0 = embeddings) → word vectors ``[L+1, Σ w, D]``
  (first, last or mean piece of each word);
- attention ``L × [B, H, T, T]`` → word attention ``[L, H, Σ w²]`` (each sequence's ``[w, w]``
  block, row-major): attention *to* a word is the sum over its pieces, attention *from* a word the
  mean over its pieces; attention to the special tokens (``[CLS]``/``<s>`` and ``[SEP]``/``</s>``)
  is kept apart as ``[L, H, Σ w, 2]``.

Words are laid end to end without padding, so :func:`forward_segments` can write a batch straight
into a slice of a shard.

Token-level positional counts (Voita et al. 2019 count argmaxes over sub-word tokens): per sequence,
layer and head, how many query tokens have their attention argmax at relative token offset
``k = -K..K`` (special tokens in place, as keys and as queries) and how many elsewhere
(``[B, L, H, 2, 2K+2]``: query kind 0 = word pieces, 1 = special tokens; bins ``-K..K`` then
"other"); see :func:`token_offset_counts`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from bertology.architectures import architecture_for, num_heads
from bertology.errors import StoreError
from bertology.models import to_device

Pooling = Literal["first", "last", "mean"]
LongPolicy = Literal["error", "window"]


@dataclass
class Segment:
    """One model input: words ``[word_start, word_end)`` of sentence ``sentence`` as token ids.

    ``word_ids[t]`` is the word (relative to ``word_start``) of token ``t``; -1 for special tokens.
    ``keep`` marks, per word of the segment, whether this segment provides that word's features
    (sliding windows overlap; each word is taken from the window where it is most central).
    """

    sentence: int
    word_start: int
    word_end: int
    input_ids: list[int]
    word_ids: list[int]
    keep: np.ndarray

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def n_words(self) -> int:
        return self.word_end - self.word_start


def model_max_tokens(model, tokenizer) -> int:
    """Longest input (special tokens included) the model accepts."""
    limit = int(getattr(model.config, "max_position_embeddings", 512))
    limit -= architecture_for(model.config).position_offset  # e.g. RoBERTa: positions start after the padding index
    tok_limit = getattr(tokenizer, "model_max_length", limit) or limit
    return int(min(limit, tok_limit if tok_limit < 1e6 else limit))


def sentences_that_fit(corpus, tokenizer, limit: int | None = None, max_tokens: int | None = None):
    """The first ``limit`` sentences of ``corpus`` whose tokens (special tokens included) fit in
    ``max_tokens`` (default: the tokenizer's ``model_max_length``, which a model trained by the
    workbench sets to the ``max_seq_len`` it was trained on: later positions are untrained), as a
    subset of ``corpus``, and how many sentences before the last one kept were left out."""
    if max_tokens is None:
        max_tokens = int(tokenizer.model_max_length)
    keep: list[int] = []
    dropped = 0
    for i, sentence in enumerate(corpus.sentences):
        if limit is not None and len(keep) >= limit:
            break
        n = len(tokenizer(list(sentence.words), is_split_into_words=True, verbose=False)["input_ids"])
        if n <= max_tokens:
            keep.append(i)
        else:
            dropped += 1
    return corpus.subset(keep), dropped


def tokenize_sentences(tokenizer, sentences: Sequence[Sequence[str]]) -> list[tuple[list[int], list[int]]]:
    """Token ids with special tokens and the word index of each token (-1 = special) of every
    sentence, in one call to the (Rust) tokenizer.

    A word the tokenizer maps to no piece (e.g. a lone control character) is replaced by the
    unknown token so every word keeps a vector.
    """
    filled = [i for i, words in enumerate(sentences) if len(words)]
    out: list[tuple[list[int], list[int]]] = [([], [])] * len(sentences)  # empty: segment_sentence refuses it
    if not filled:
        return out
    enc = tokenizer([list(sentences[i]) for i in filled], is_split_into_words=True, add_special_tokens=True)
    for row, i in enumerate(filled):
        words = sentences[i]
        word_ids = [-1 if w is None else w for w in enc.word_ids(row)]
        ids = list(enc["input_ids"][row])
        if len(set(w for w in word_ids if w >= 0)) != len(words):
            covered = set(word_ids)
            unk = tokenizer.unk_token or tokenizer.pad_token
            fixed = [w if k in covered else unk for k, w in enumerate(words)]
            one = tokenizer(fixed, is_split_into_words=True, add_special_tokens=True)
            word_ids = [-1 if w is None else w for w in one.word_ids()]
            ids = list(one["input_ids"])
        out[i] = (ids, word_ids)
    return out


def _tokenize_words(tokenizer, words: Sequence[str]) -> tuple[list[int], list[int]]:
    return tokenize_sentences(tokenizer, [words])[0]


def segment_sentence(
    tokenizer,
    words: Sequence[str],
    sentence: int,
    max_tokens: int,
    long_policy: LongPolicy,
    sentence_name: str,
    tokens: tuple[list[int], list[int]] | None = None,
) -> list[Segment]:
    """Split a sentence into model inputs: one segment, or sliding windows when it is too long.

    ``tokens``: the sentence's ``(ids, word_ids)`` from :func:`tokenize_sentences`, if already made.
    """
    if not words:
        raise StoreError(f"sentence {sentence_name}: empty sentence (no words)")
    ids, wids = tokens if tokens is not None else _tokenize_words(tokenizer, words)
    if len(ids) <= max_tokens:
        return [Segment(sentence, 0, len(words), ids, wids, np.ones(len(words), dtype=bool))]
    if long_policy == "error":
        raise StoreError(
            f"sentence {sentence_name}: {len(ids)} tokens exceed the model's maximum of {max_tokens}; "
            "use long_policy='window' (sliding windows, hidden states only) or split the sentence"
        )
    # sliding windows over words: each window holds as many words as fit, next starts halfway
    pieces = np.bincount([w for w in wids if w >= 0], minlength=len(words))
    n_special = sum(1 for w in wids if w < 0)
    budget = max_tokens - n_special
    if pieces.max() > budget:
        raise StoreError(f"sentence {sentence_name}: a single word has more pieces than the model accepts")
    windows: list[tuple[int, int]] = []
    start = 0
    while True:
        end, used = start, 0
        while end < len(words) and used + pieces[end] <= budget:
            used += pieces[end]
            end += 1
        windows.append((start, end))
        if end == len(words):
            break
        start = max(start + 1, (start + end) // 2)
    centres = np.array([(a + b - 1) / 2 for a, b in windows])
    owner = np.empty(len(words), dtype=np.int64)
    for w in range(len(words)):
        inside = [k for k, (a, b) in enumerate(windows) if a <= w < b]
        owner[w] = min(inside, key=lambda k: abs(w - centres[k]))
    segments = []
    for k, (a, b) in enumerate(windows):
        s_ids, s_wids = _tokenize_words(tokenizer, words[a:b])
        segments.append(Segment(sentence, a, b, s_ids, s_wids, owner[a:b] == k))
    return segments


@dataclass
class BatchLayout:
    """Where each word of a padded batch lives. Segments are laid end to end, each with all its
    words; all arrays are torch tensors.

    ``to_word [B, W, T]`` marks a word's pieces, ``to_special [B, 2, T]`` the first special token
    and the other special tokens, ``pick [n_words]`` the flat token index (``b * T + t``) whose
    hidden state a word takes (first or last piece), ``flat_words [Σ w]`` indexes the words in a
    ``[B, W]`` grid, and ``own_columns [Σ w, W]`` marks, per word, the columns of its own segment's
    words (so a ``[Σ w, W]`` selection gives each segment's ``[w, w]`` block row-major).
    """

    to_word: torch.Tensor
    to_special: torch.Tensor
    counts: torch.Tensor
    pick: torch.Tensor
    flat_words: torch.Tensor
    own_columns: torch.Tensor

    @classmethod
    def build(cls, segments: Sequence[Segment], n_tokens: int, pooling: Pooling) -> BatchLayout:
        B, T = len(segments), n_tokens
        W = max(s.n_words for s in segments)
        wid = np.full((B, T), -2, dtype=np.int64)  # -1 special token, -2 padding
        for b, seg in enumerate(segments):
            wid[b, : seg.n_tokens] = seg.word_ids
        wid_t = torch.from_numpy(wid)
        to_word = (wid_t[:, None, :] == torch.arange(W)[None, :, None]).float()  # [B, W, T]
        special = wid_t == -1
        first_special = special & (special.cumsum(1) == 1)
        to_special = torch.stack([first_special, special & ~first_special], 1).float()  # [B, 2, T]
        n_words = torch.tensor([s.n_words for s in segments])
        segment_of = torch.repeat_interleave(torch.arange(B), n_words)
        word_index = torch.arange(int(n_words.sum())) - torch.repeat_interleave(
            torch.cumsum(n_words, 0) - n_words, n_words
        )
        if pooling == "last":
            position = T - 1 - to_word.flip(-1).argmax(-1)  # [B, W]
        else:
            position = to_word.argmax(-1)  # first piece
        pick = segment_of * T + position[segment_of, word_index]
        own_columns = torch.arange(W)[None, :] < n_words[segment_of][:, None]
        return cls(to_word, to_special, to_word.sum(-1).clamp(min=1.0), pick, segment_of * W + word_index, own_columns)


@contextmanager
def low_precision_linears(model: torch.nn.Module, dtype: torch.dtype | None) -> Iterator[None]:
    """Within the block, every ``nn.Linear`` of ``model`` holds ``dtype`` weights (cast once, not
    on each call as autocast does); the float32 weights are put back on exit. ``dtype=None``: no-op.
    Use with ``torch.autocast(dtype=dtype)``: the numbers are those of autocast alone."""
    if dtype is None:
        yield
        return
    saved = []
    try:
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.weight.dtype != dtype:
                for p in (module.weight, module.bias):
                    if p is not None:
                        saved.append((p, p.data))
                        p.data = p.data.to(dtype)
        yield
    finally:
        for p, data in saved:
            p.data = data


def token_offset_bins(window: int) -> list[int | str]:
    """Labels of the bins of :func:`token_offset_counts`: ``-window .. window`` then ``"other"``."""
    return [*range(-window, window + 1), "other"]


def token_offset_counts(attentions: Sequence[torch.Tensor], segments: Sequence[Segment], out: torch.Tensor) -> None:
    """Count, per sequence, layer and head, the relative token offset of each query token's argmax.

    attentions: per layer ``[B, H, T, T]`` token attention of a padded batch of ``segments``;
    out: integer tensor ``[B, L, H, 2, 2K+2]`` to fill (``K`` from its size). Query tokens are every
    non-padding token, special tokens included (kind 1; word pieces kind 0); keys are every
    non-padding token (padding keys can never be the argmax). Offset ``argmax - query``; bins
    ``-K..K`` then "other" (``|offset| > K``). Ties go to the first maximal key.
    """
    B, T = len(segments), attentions[0].shape[-1]
    H = attentions[0].shape[1]
    n_bins = out.shape[-1]
    window = (n_bins - 2) // 2
    device = attentions[0].device
    lengths = to_device(torch.tensor([s.n_tokens for s in segments]), device, non_blocking=True)
    positions = torch.arange(T, device=device)
    valid = positions[None, :] < lengths[:, None]  # [B, T]
    wid = torch.full((B, T), -2, dtype=torch.long)
    for b, seg in enumerate(segments):
        wid[b, : seg.n_tokens] = torch.tensor(seg.word_ids)
    kind = to_device((wid == -1).long(), device, non_blocking=True)  # [B, T]
    # flat index of (sequence, head, kind) for every query, and the queries that count
    base = (
        (torch.arange(B, device=device)[:, None, None] * H + torch.arange(H, device=device)[None, :, None]) * 2
        + kind[:, None, :]
    ) * n_bins  # [B, H, T]
    rows = valid[:, None, :].expand(B, H, T)
    dump = B * H * 2 * n_bins  # padding queries are counted here, then dropped
    lengths_bht = lengths[:, None, None]
    on_cpu = device.type == "cpu"
    for l, a in enumerate(attentions):
        # padding keys hold zero attention (masked before the softmax) and every row's weights sum
        # to 1, so the plain argmax is a real token; on CPU checked, with the masked argmax as
        # fallback; on an accelerator always masked (the same argmax: padding keys come after the
        # real ones, so the first maximal key is unchanged), since the check would wait for the device
        best = a.argmax(-1) if on_cpu else None  # [B, H, T]
        if best is None or bool(((best >= lengths_bht) & rows).any()):
            best = a.masked_fill(~valid[:, None, None, :], -1.0).argmax(-1)
        offset = best - positions
        bins = torch.where(offset.abs() <= window, offset + window, n_bins - 1)
        flat = torch.where(rows, base + bins, dump).flatten()
        if on_cpu:
            counts = torch.bincount(flat, minlength=dump + 1)
        else:  # bincount sizes its output from the input's maximum: a host sync on CUDA
            counts = torch.zeros(dump + 1, dtype=torch.long, device=device).index_add_(0, flat, torch.ones_like(flat))
        out[:, l] = counts[:dump].view(B, H, 2, n_bins).to(out.device, out.dtype)


def padded_inputs(segments: Sequence[Segment], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` ``[B, T]`` of a batch of segments, padded to the longest."""
    T = max(s.n_tokens for s in segments)
    ids = torch.full((len(segments), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(segments), T), dtype=torch.long)
    for b, seg in enumerate(segments):
        ids[b, : seg.n_tokens] = torch.tensor(seg.input_ids)
        mask[b, : seg.n_tokens] = 1
    return ids, mask


@torch.inference_mode()
def forward_segments(
    model,
    segments: Sequence[Segment],
    *,
    pooling: Pooling,
    attentions: bool,
    pad_id: int,
    device: torch.device,
    amp_dtype: torch.dtype | None = None,
    out: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None] | None = None,
    out_dtype: torch.dtype = torch.float32,
    token_offsets: torch.Tensor | None = None,
    check_finite: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Run one padded batch; return its words laid end to end (segment by segment, all words of
    each segment): hidden ``[L+1, Σ w, D]``, word attention flattened per segment ``[L, H, Σ w²]``
    (each segment's ``[w, w]`` block row-major) and special-token attention ``[L, H, Σ w, 2]``
    (None without attentions).

    ``out``: tensors of those shapes to write into (any float dtype, e.g. slices of a shard; on the
    model's device or on the CPU); by default new CPU tensors of ``out_dtype``. Non-finite hidden
    states raise :class:`StoreError`, as do values beyond the range of the output dtype.
    ``check_finite=False`` skips that check (the caller checks the written values itself, e.g.
    once per shard on the device: :mod:`bertology.store.compute`).

    token_offsets: with attentions, an integer tensor ``[B, L, H, 2, 2K+2]`` filled with the
    token-level argmax offset counts of each segment (:func:`token_offset_counts`).
    """
    ids, mask = padded_inputs(segments, pad_id)
    B, T = ids.shape
    kwargs = {
        "input_ids": to_device(ids, device, non_blocking=True),
        "attention_mask": to_device(mask, device, non_blocking=True),
        "output_hidden_states": True,
        "output_attentions": attentions,
    }
    with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        result = model(**kwargs)
    layout = BatchLayout.build(segments, T, pooling)
    n_words = len(layout.pick)
    D = result.hidden_states[0].shape[-1]
    L, H = len(result.hidden_states) - 1, num_heads(model.config)
    if out is None:
        out = (
            torch.empty(L + 1, n_words, D, dtype=out_dtype),
            torch.empty(L, H, int(layout.own_columns.sum()), dtype=out_dtype) if attentions else None,
            torch.empty(L, H, n_words, 2, dtype=out_dtype) if attentions else None,
        )
    word_hidden, word_att, special = out
    weights = to_device(layout.to_word / layout.counts[..., None], device, non_blocking=True)  # [B, W, T]
    rows, pick = to_device((layout.flat_words, layout.pick), device, non_blocking=True)
    for l, h in enumerate(result.hidden_states):
        target = word_hidden[l]
        if pooling == "mean":  # mean over each word's pieces: one [B, W, T] x [B, T, D] product
            picked = torch.bmm(weights, h.float()).view(-1, D).index_select(0, rows)
            target.copy_(picked)
        elif target.dtype == h.dtype and target.is_contiguous() and target.device == h.device:
            picked = torch.index_select(h.reshape(B * T, D), 0, pick, out=target)  # straight into the shard
        else:
            picked = h.reshape(B * T, D).index_select(0, pick)
            target.copy_(picked)
        if check_finite:
            _check_finite(word_hidden[l], picked, segments)
    if not attentions:
        return out
    if word_att is None or special is None:
        raise ValueError("forward_segments: attentions=True needs the attention tensors of out (not None)")
    if token_offsets is not None:
        token_offset_counts(result.attentions, segments, token_offsets)
    # per layer, two batched matmuls: columns first (sum over attended pieces), then rows (mean
    # over attending pieces); then each word's row keeps its segment's own columns
    W = layout.to_word.shape[1]
    columns = to_device(
        torch.cat([layout.to_word, layout.to_special], dim=1).transpose(1, 2), device, non_blocking=True
    )  # [B, T, W+2]
    att_index, special_index = to_device(_pooled_attention_index(layout, H), device, non_blocking=True)
    for l, a in enumerate(result.attentions):
        summed = torch.bmm(a.float().reshape(B, H * T, T), columns).view(B, H, T, W + 2)
        by_row = summed.transpose(1, 2).reshape(B, T, H * (W + 2))
        pooled = torch.bmm(weights, by_row)  # [B, W, H * (W+2)]
        # one gather each straight from the [B*W, H, W+2] grid: each word's row of its own
        # segment's columns, and its two special-token columns
        word_att[l] = torch.take(pooled, att_index)
        special[l] = torch.take(pooled, special_index)
    return out


def _pooled_attention_index(layout: BatchLayout, n_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat indices into a ``[B*W, H, W+2]`` grid of pooled attention (row: a word of the padded
    ``[B, W]`` word grid; last two columns: the special tokens) that give the word attention
    ``[H, Σ w²]`` (each segment's ``[w, w]`` block row-major, segments end to end) and the
    special-token attention ``[H, Σ w, 2]``."""
    W = layout.to_word.shape[1]
    width = W + 2
    head = torch.arange(n_heads) * width  # [H]
    word, column = layout.own_columns.nonzero(as_tuple=True)  # row-major: (word, own column)
    row_start = layout.flat_words * (n_heads * width)  # [Σw]
    att = head[:, None] + (row_start[word] + column)[None, :]  # [H, Σw²]
    special = head[:, None, None] + (row_start + W)[None, :, None] + torch.arange(2)  # [H, Σw, 2]
    return att, special


def _check_finite(stored: torch.Tensor, source: torch.Tensor, segments: Sequence[Segment]) -> None:
    """Refuse NaN/inf in a layer's word vectors, and values that overflowed the storage dtype."""
    low, high = (float(v) for v in torch.aminmax(stored))
    if math.isfinite(low) and math.isfinite(high):
        return
    which = sorted({s.sentence for s in segments})[:5]
    if bool(torch.isfinite(source).all()):
        raise StoreError(
            f"hidden values up to {float(source.abs().max()):.3g} overflow {stored.dtype} storage "
            f"(sentences {which}…); use storage='float32'"
        )
    raise StoreError(f"non-finite values in hidden states for sentences {which}…: the model produced NaN/inf")
