"""Computing shards: one shard's sentences through the model in length-sorted batches, straight
into reused output buffers, and a rank's shards one after the other while a background thread
writes the previous one.

On an accelerator the pipeline has three stages that overlap: the forward passes of shard ``j``
fill device buffers (nothing waits for the device: no host sync between batches; the finite check
is one reduction per shard on the device); a side stream copies each computed shard into pinned
CPU buffers; two writer threads each write a shard once its copy's event has fired, hashing it in a
third thread as it goes (sha256 alone runs at about a fast disk's speed). Three buffer sets on each
side let the forward passes run ahead of the disk by up to two shards."""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bertology.errors import StoreError
from bertology.features import Segment, forward_segments, low_precision_linears
from bertology.models import LoadedModel, to_device
from bertology.progress import progress_bar
from bertology.store.plan import ExtractionPlan, plan_batches
from bertology.store.settings import ExtractionSettings
from bertology.store.write import write_shard


class ShardBuffers:
    """Output arrays reused from shard to shard (flat, sized for the largest shard): a new
    allocation per shard would fault in fresh pages every time, which costs more than the copy.

    ``device``: where they live (the CPU, or the model's accelerator); ``pinned``: page-locked
    CPU memory, the target of asynchronous device-to-host copies."""

    def __init__(
        self,
        lm: LoadedModel,
        settings: ExtractionSettings,
        max_words: int,
        max_pairs: int,
        max_sentences: int,
        *,
        device: torch.device | None = None,
        pinned: bool = False,
    ):
        self.shape = (lm.num_layers + 1, lm.num_layers, lm.num_heads, lm.hidden_size)
        self.n_bins = 2 * settings.token_offset_window + 2
        L1, L, H, D = self.shape
        dtype: torch.dtype = getattr(torch, settings.storage)
        where, att = device or torch.device("cpu"), settings.attentions
        self.hidden = torch.empty(L1 * max_words * D, dtype=dtype, device=where, pin_memory=pinned)
        self.attention = torch.empty(L * H * max_pairs if att else 0, dtype=dtype, device=where, pin_memory=pinned)
        self.special = torch.empty(L * H * max_words * 2 if att else 0, dtype=dtype, device=where, pin_memory=pinned)
        self.offsets = torch.empty(
            max_sentences * L * H * 2 * self.n_bins if att else 0, dtype=torch.int32, device=where, pin_memory=pinned
        )
        self.finite = torch.ones(1, dtype=torch.bool, device=where, pin_memory=pinned)

    def views(self, n_words: int, n_pairs: int, attentions: bool):
        """Contiguous ``hidden [L+1, n, D]``, ``attention [L, H, pairs]``, ``special [L, H, n, 2]``."""
        L1, L, H, D = self.shape
        hidden = self.hidden[: L1 * n_words * D].view(L1, n_words, D)
        if not attentions:
            return hidden, None, None
        return (
            hidden,
            self.attention[: L * H * n_pairs].view(L, H, n_pairs),
            self.special[: L * H * n_words * 2].view(L, H, n_words, 2),
        )

    def offset_counts(self, n_sentences: int) -> torch.Tensor:
        """Zeroed token-offset counts ``[n_sentences, L, H, 2, 2K+2]`` (int32)."""
        _, L, H, _ = self.shape
        return self.offsets[: n_sentences * L * H * 2 * self.n_bins].view(n_sentences, L, H, 2, self.n_bins).zero_()

    def copy_from(self, source: ShardBuffers, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Copy a shard computed into ``source`` (``tensors``: views of it) into these buffers
        (asynchronous where these are pinned and the current stream allows); the same views of these."""
        copied: dict[str, torch.Tensor] = {}
        for name, t in tensors.items():
            if t.device == self.hidden.device:  # sentence ids and word counts: made on the CPU
                copied[name] = t
                continue
            flat = {
                "hidden": self.hidden,
                "attention": self.attention,
                "special": self.special,
                "token_offsets": self.offsets,
            }[name]
            target = flat[: t.numel()].view(t.shape)
            target.copy_(t, non_blocking=True)
            copied[name] = target
        self.finite.copy_(source.finite, non_blocking=True)
        return copied


def compute_shard(
    lm: LoadedModel,
    segments: list[list[Segment]],
    sentence_ids: list[int],
    settings: ExtractionSettings,
    device: torch.device,
    progress: Any,  # a progress_bar, or None
    buffers: ShardBuffers,
    word_counts: np.ndarray,
    *,
    check_finite: bool = True,
) -> dict[str, torch.Tensor]:
    """Run one shard's sentences (``segments[i]``: sentence ``i``'s inputs; ``word_counts`` words
    each) in length-sorted batches, writing straight into the buffers; the shard's tensors.

    ``check_finite``: refuse non-finite (or storage-overflowing) hidden states batch by batch
    (:func:`~bertology.features.forward_segments`); when False, ``buffers.finite`` is set on
    the buffers' device to whether every hidden value is finite (one reduction, no host sync)."""
    word_start = dict(zip(sentence_ids, np.concatenate([[0], np.cumsum(word_counts)[:-1]]).tolist()))
    pair_start = dict(zip(sentence_ids, np.concatenate([[0], np.cumsum(word_counts**2)[:-1]]).tolist()))
    hidden_out, att_out, special_out = buffers.views(
        int(word_counts.sum()), int((word_counts**2).sum()), settings.attentions
    )
    row_of = {s: r for r, s in enumerate(sentence_ids)}
    offsets_out = buffers.offset_counts(len(sentence_ids)) if settings.attentions else None
    shard_segments = [seg for i in sentence_ids for seg in segments[i]]
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    amp = getattr(torch, settings.amp_dtype) if settings.amp_dtype else None
    forward_options = dict(
        pooling=settings.pooling,
        attentions=settings.attentions,
        pad_id=pad_id,
        device=device,
        amp_dtype=amp,
        out_dtype=hidden_out.dtype,
        check_finite=check_finite,
    )
    for batch in plan_batches(shard_segments, settings.batch_tokens):
        n_words = [seg.n_words for seg in batch]
        starts = [word_start[seg.sentence] + seg.word_start for seg in batch]
        if all(seg.keep.all() for seg in batch) and all(
            starts[b + 1] == starts[b] + n_words[b] for b in range(len(batch) - 1)
        ):
            # the usual case: the batch's sentences are consecutive in the shard -> write in place
            first_word, first_pair, batch_words = starts[0], pair_start[batch[0].sentence], sum(n_words)
            batch_pairs = sum(w * w for w in n_words)
            views = (
                hidden_out[:, first_word : first_word + batch_words],
                att_out[:, :, first_pair : first_pair + batch_pairs] if att_out is not None else None,
                special_out[:, :, first_word : first_word + batch_words] if special_out is not None else None,
            )
            batch_offsets = (
                torch.zeros(len(batch), *offsets_out.shape[1:], dtype=torch.int32, device=offsets_out.device)
                if offsets_out is not None
                else None
            )
            forward_segments(lm.model, batch, out=views, token_offsets=batch_offsets, **forward_options)
            if batch_offsets is not None and offsets_out is not None:
                rows = to_device(
                    torch.tensor([row_of[seg.sentence] for seg in batch]), offsets_out.device, non_blocking=True
                )
                offsets_out.index_copy_(0, rows, batch_offsets)
        else:  # sliding windows (hidden states only): copy the words each window owns
            word_hidden, _, _ = forward_segments(lm.model, batch, **forward_options)
            window_start = 0
            for seg, start in zip(batch, starts):
                owned = torch.from_numpy(np.flatnonzero(seg.keep))
                hidden_out[:, (start + owned).to(hidden_out.device)] = word_hidden[:, window_start + owned].to(
                    hidden_out.device
                )
                window_start += seg.n_words
        if progress is not None:
            progress.update(sum(1 for seg in batch if seg.word_start == 0))
    if not check_finite:
        buffers.finite.copy_(torch.isfinite(hidden_out).all().reshape(1))
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


class _NotFinite(Exception):
    """A shard computed on an accelerator holds non-finite hidden values (found by the writer)."""


def _write_when_copied(
    path: Path,
    tensors: dict[str, torch.Tensor],
    copied: torch.cuda.Event | None,
    finite: torch.Tensor,
    hash_beside: bool,
) -> None:
    """Wait for a shard's device-to-host copy, refuse it if its values are not finite, write it."""
    if copied is not None:
        copied.synchronize()
    if not bool(finite[0]):
        raise _NotFinite(path.name)
    write_shard(path, tensors, hash_beside=hash_beside)


def compute_shards(
    lm: LoadedModel,
    plan: ExtractionPlan,
    shards: list[int],
    settings: ExtractionSettings,
    path: Path,
    device: str | None,
    progress: bool,
    done: int,
) -> None:
    """Compute the shards ``shards`` of ``plan`` and write them into the store folder ``path`` (a
    background thread writes shard j while shard j+1 is computed; on an accelerator, see the
    module docstring). ``done``: sentences already in the store (where the progress bar starts)."""
    dev = torch.device(device) if device else next(lm.model.parameters()).device
    lm.model.to(dev)
    bar = progress_bar(
        total=len(plan.word_counts), initial=done, desc=f"extract {lm.name}", unit="sent", enabled=progress
    )
    # largest shard first (most words and attention pairs): the last write, which nothing overlaps,
    # is then the smallest
    shards = sorted(shards, key=lambda k: (-int((plan.shard_word_counts(k) ** 2).sum()), k))
    counts = [plan.shard_word_counts(k) for k in shards]
    sizes = (
        max((int(c.sum()) for c in counts), default=0),
        max((int((c**2).sum()) for c in counts), default=0),
        max((len(c) for c in counts), default=0),
    )
    # On the CPU two buffer sets: shard j is computed into one while shard j-1 is written from the
    # other by a background thread (writing is mostly page-cache copying and fsync, outside the
    # GIL). On an accelerator three: two writer threads (each hashing beside its write) keep the
    # disk busy while the next shard is computed and copied.
    accelerated = dev.type != "cpu"
    n_sets = min(3 if accelerated else 2, len(shards))
    host = [ShardBuffers(lm, settings, *sizes, pinned=dev.type == "cuda") for _ in range(n_sets)]
    on_device = [ShardBuffers(lm, settings, *sizes, device=dev) for _ in range(n_sets)] if accelerated else host
    copy_stream = torch.cuda.Stream(dev) if dev.type == "cuda" else None
    copy_done: list[torch.cuda.Event | None] = [None] * n_sets
    amp = settings.amp_dtype
    pending: deque[tuple[Future, int]] = deque()  # (a write in the writers' hands, its shard's position j)

    def finish_oldest() -> None:
        _finish(*pending.popleft(), lm, plan, settings, dev, counts, shards)

    try:
        with (
            ThreadPoolExecutor(max_workers=max(1, n_sets - 1)) as writer,
            low_precision_linears(lm.model, getattr(torch, amp) if amp else None),
        ):
            for j, k in enumerate(shards):
                # buffers `slot` are free: shard j - n_sets, the last written from them, was waited
                # for below (at most n_sets - 1 writes stay pending)
                slot = j % n_sets
                copied = copy_done[slot]
                if copied is not None:  # the device buffers' last copy out has finished
                    torch.cuda.current_stream(dev).wait_event(copied)
                tensors = compute_shard(
                    lm,
                    plan.segments,
                    plan.shards[k],
                    settings,
                    dev,
                    bar,
                    on_device[slot],
                    counts[j],
                    check_finite=not accelerated,
                )
                if accelerated:
                    tensors, copy_done[slot] = _copy_to_host(tensors, on_device[slot], host[slot], copy_stream, dev)
                while len(pending) >= max(1, n_sets - 1):  # at most n_sets - 1 shards in the writers' hands
                    finish_oldest()
                pending.append(
                    (
                        writer.submit(
                            _write_when_copied,
                            path / plan.shard_names[k],
                            tensors,
                            copy_done[slot],
                            host[slot].finite,
                            accelerated,
                        ),
                        j,
                    )
                )
            while pending:
                finish_oldest()
    finally:
        for future, _ in pending:  # an error: let the writes in flight end before the buffers go
            future.cancel()
            try:
                future.result()
            except BaseException:  # noqa: BLE001 -- the first error is the one raised
                pass
        bar.close()


def _copy_to_host(
    tensors: dict[str, torch.Tensor],
    source: ShardBuffers,
    target: ShardBuffers,
    stream: torch.cuda.Stream | None,
    dev: torch.device,
):
    """Queue the copy of a shard's device buffers into pinned host buffers (on ``stream``, after
    the shard's forward passes); the host views and the copy's event (None: copied synchronously)."""
    if stream is None:
        return target.copy_from(source, tensors), None
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        copied = target.copy_from(source, tensors)
        event = torch.cuda.Event()
        event.record(stream)
    return copied, event


def _finish(
    pending: Future,
    j: int,
    lm: LoadedModel,
    plan: ExtractionPlan,
    settings: ExtractionSettings,
    dev: torch.device,
    counts: list[np.ndarray],
    shards: list[int],
) -> None:
    """Wait for shard ``j``'s write; a shard found not finite on the device is computed again with
    the batch-by-batch check, which raises the error that names its sentences."""
    try:
        pending.result()
    except _NotFinite:
        k = shards[j]
        c = counts[j]
        scratch = ShardBuffers(lm, settings, int(c.sum()), int((c**2).sum()), len(c), device=dev)
        compute_shard(lm, plan.segments, plan.shards[k], settings, dev, None, scratch, c, check_finite=True)
        raise StoreError(f"non-finite hidden values in shard {plan.shard_names[k]} on {dev}") from None
