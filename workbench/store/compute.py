"""Computing shards: one shard's sentences through the model in length-sorted batches, straight
into reused output buffers, and a rank's shards one after the other while a background thread
writes the previous one."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from bertology.features import Segment, forward_segments, low_precision_linears
from bertology.models import LoadedModel
from bertology.store.plan import ExtractionPlan, plan_batches
from bertology.store.settings import ExtractionSettings
from bertology.store.write import write_shard


class ShardBuffers:
    """Output arrays reused from shard to shard (flat, sized for the largest shard): a new
    allocation per shard would fault in fresh pages every time, which costs more than the copy."""

    def __init__(self, lm: LoadedModel, settings: ExtractionSettings, max_words: int, max_pairs: int):
        self.shape = (lm.num_layers + 1, lm.num_layers, lm.num_heads, lm.hidden_size)
        L1, L, H, D = self.shape
        dtype = getattr(torch, settings.storage)
        self.hidden = torch.empty(L1 * max_words * D, dtype=dtype)
        self.attention = torch.empty(L * H * max_pairs if settings.attentions else 0, dtype=dtype)
        self.special = torch.empty(L * H * max_words * 2 if settings.attentions else 0, dtype=dtype)

    def views(self, n_words: int, n_pairs: int, attentions: bool):
        """Contiguous ``hidden [L+1, n, D]``, ``attention [L, H, pairs]``, ``special [L, H, n, 2]``."""
        L1, L, H, D = self.shape
        hidden = self.hidden[: L1 * n_words * D].view(L1, n_words, D)
        if not attentions:
            return hidden, None, None
        return (hidden, self.attention[: L * H * n_pairs].view(L, H, n_pairs),
                self.special[: L * H * n_words * 2].view(L, H, n_words, 2))


def compute_shard(
    lm: LoadedModel,
    segments: list[list[Segment]],
    sentence_ids: list[int],
    settings: ExtractionSettings,
    device: torch.device,
    progress: tqdm | None,
    buffers: ShardBuffers,
    word_counts: np.ndarray,
) -> dict[str, torch.Tensor]:
    """Run one shard's sentences (``segments[i]``: sentence ``i``'s inputs; ``word_counts`` words
    each) in length-sorted batches, writing straight into the buffers; the shard's tensors."""
    word_start = dict(zip(sentence_ids, np.concatenate([[0], np.cumsum(word_counts)[:-1]]).tolist()))
    pair_start = dict(zip(sentence_ids, np.concatenate([[0], np.cumsum(word_counts**2)[:-1]]).tolist()))
    hidden_out, att_out, special_out = buffers.views(int(word_counts.sum()), int((word_counts**2).sum()),
                                                     settings.attentions)
    row_of = {s: r for r, s in enumerate(sentence_ids)}
    L, H = lm.num_layers, lm.num_heads
    n_bins = 2 * settings.token_offset_window + 2
    offsets_out = (torch.zeros(len(sentence_ids), L, H, 2, n_bins, dtype=torch.int32)
                   if settings.attentions else None)
    shard_segments = [seg for i in sentence_ids for seg in segments[i]]
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    amp = getattr(torch, settings.amp_dtype) if settings.amp_dtype else None
    for batch in plan_batches(shard_segments, settings.batch_tokens):
        n_words = [seg.n_words for seg in batch]
        starts = [word_start[seg.sentence] + seg.word_start for seg in batch]
        forward_options = dict(pooling=settings.pooling, attentions=settings.attentions, pad_id=pad_id,
                               device=device, amp_dtype=amp, out_dtype=hidden_out.dtype)
        if (all(seg.keep.all() for seg in batch)
                and all(starts[b + 1] == starts[b] + n_words[b] for b in range(len(batch) - 1))):
            # the usual case: the batch's sentences are consecutive in the shard -> write in place
            first_word, first_pair, batch_words = starts[0], pair_start[batch[0].sentence], sum(n_words)
            batch_pairs = sum(w * w for w in n_words)
            views = (hidden_out[:, first_word : first_word + batch_words],
                     att_out[:, :, first_pair : first_pair + batch_pairs] if att_out is not None else None,
                     special_out[:, :, first_word : first_word + batch_words] if special_out is not None else None)
            batch_offsets = (torch.zeros(len(batch), L, H, 2, n_bins, dtype=torch.int32)
                             if offsets_out is not None else None)
            forward_segments(lm.model, batch, out=views, token_offsets=batch_offsets, **forward_options)
            if batch_offsets is not None:
                offsets_out[[row_of[seg.sentence] for seg in batch]] = batch_offsets
        else:  # sliding windows (hidden states only): copy the words each window owns
            word_hidden, _, _ = forward_segments(lm.model, batch, **forward_options)
            window_start = 0
            for seg, start in zip(batch, starts):
                owned = np.flatnonzero(seg.keep)
                hidden_out[:, start + owned] = word_hidden[:, window_start + owned]
                window_start += seg.n_words
        if progress is not None:
            progress.update(sum(1 for seg in batch if seg.word_start == 0))
    tensors = {
        "sentence_ids": torch.tensor(sentence_ids, dtype=torch.int64),
        "word_counts": torch.from_numpy(word_counts.astype(np.int64)),
        "hidden": hidden_out,
    }
    if att_out is not None:
        tensors["attention"] = att_out
        tensors["special"] = special_out
        tensors["token_offsets"] = offsets_out
    return tensors


def compute_shards(lm: LoadedModel, plan: ExtractionPlan, shards: list[int], settings: ExtractionSettings,
                   path: Path, device: str | None, progress: bool, done: int) -> None:
    """Compute the shards ``shards`` of ``plan`` and write them into the store folder ``path`` (a
    background thread writes shard j while shard j+1 is computed). ``done``: sentences already in
    the store (where the progress bar starts)."""
    dev = torch.device(device) if device else next(lm.model.parameters()).device
    lm.model.to(dev)
    bar = tqdm(total=len(plan.word_counts), initial=done, desc=f"extract {lm.name}", unit="sent",
               disable=not progress, leave=False)
    # largest shard first (most words and attention pairs): the last write, which nothing overlaps,
    # is then the smallest
    shards = sorted(shards, key=lambda k: (-int((plan.shard_word_counts(k) ** 2).sum()), k))
    counts = [plan.shard_word_counts(k) for k in shards]
    sizes = (max((int(c.sum()) for c in counts), default=0), max((int((c**2).sum()) for c in counts), default=0))
    # two buffer sets: shard j is computed into one while shard j-1 is written from the other by
    # a background thread (writing is mostly page-cache copying and fsync, outside the GIL)
    buffers = [ShardBuffers(lm, settings, *sizes) for _ in range(min(2, len(shards)))]
    amp = settings.amp_dtype
    try:
        with ThreadPoolExecutor(max_workers=1) as writer, \
                low_precision_linears(lm.model, getattr(torch, amp) if amp else None):
            pending = None
            for j, k in enumerate(shards):
                tensors = compute_shard(lm, plan.segments, plan.shards[k], settings, dev, bar, buffers[j % 2],
                                        counts[j])
                if pending is not None:
                    pending.result()
                pending = writer.submit(write_shard, path / plan.shard_names[k], tensors)
            if pending is not None:
                pending.result()
    finally:
        bar.close()
