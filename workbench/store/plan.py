"""Planning an extraction: every sentence cut into model inputs, sentences sorted by length into
shards, each shard's inputs grouped into batches; and, under the store's lock, which shards of
the plan are still to compute (:func:`prepare_folder`).

A shard's content is fixed by the plan (``plan.json``), so a killed extraction resumes by
computing only missing or damaged shards and gives byte-identical files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bertology import atomic
from bertology.corpus import Corpus
from bertology.errors import StoreError
from bertology.features import Segment, model_max_tokens, segment_sentence, tokenize_sentences
from bertology.models import LoadedModel
from bertology.store.manifest import read_manifest, shard_name
from bertology.store.settings import ExtractionSettings
from bertology.store.verify import DAMAGED_MARK, damage_message, finished_shard_is_sound, shard_problems
from bertology.store.write import remove_shard

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExtractionPlan:
    """What an extraction computes, shard by shard.

    ``segments[i]``: sentence ``i``'s model inputs (one, or sliding windows); ``word_counts``:
    ``[n_sentences]`` words per sentence; ``shards[k]``: the sentence ids of shard ``k`` (stored
    as the manifest's ``plan``), named ``shard_names[k]``; ``record``: the store's key record plus
    ``"plan": shards`` (``plan.json``, and the manifest's ``key``).
    """

    segments: list[list[Segment]]
    word_counts: np.ndarray
    shards: list[list[int]]
    shard_names: list[str]
    record: dict[str, Any]

    def shard_word_counts(self, k: int) -> np.ndarray:
        """``[sentences of shard k]`` word counts, in the shard's order."""
        return self.word_counts[self.shards[k]]

    def padded_tokens(self, k: int) -> int:
        """Cost of shard ``k``: the token count of each sentence's longest input, summed."""
        return int(sum(max(seg.n_tokens for seg in self.segments[i]) for i in self.shards[k]))


UNKNOWN_SHARE_WARNING = 0.5  # warn when more of the corpus's words than this are nothing but [UNK]


def unknown_word_share(unk_id: int | None, tokens: Sequence[tuple[list[int], list[int]]]) -> float:
    """The share of words whose every piece is the unknown token ``unk_id`` (the model sees none of
    them), over tokenised sentences ``(ids, word ids)`` (:func:`bertology.features.tokenize_sentences`)."""
    if unk_id is None:
        return 0.0
    words = unknown = 0
    for ids, word_ids in tokens:
        pieces: dict[int, bool] = {}
        for i, w in zip(ids, word_ids):
            if w >= 0:
                pieces[w] = pieces.get(w, True) and i == unk_id
        words += len(pieces)
        unknown += sum(pieces.values())
    return unknown / words if words else 0.0


def warn_unknown_words(lm: LoadedModel, corpus: Corpus, tokens: Sequence[tuple[list[int], list[int]]]) -> None:
    """Say so (a warning) when the tokenizer makes nothing but [UNK] of most of the corpus's words: a
    tokenizer that does not belong to the text (or to the model), whose vectors would all be one."""
    share = unknown_word_share(lm.tokenizer.unk_token_id, tokens)
    if share > UNKNOWN_SHARE_WARNING:
        logger.warning(
            "%s: the tokenizer makes [UNK] of %.0f%% of the words of corpus %s: the model sees none of them "
            "(a tokenizer for another language or vocabulary?)",
            lm.name,
            100 * share,
            corpus.name,
        )


def plan_extraction(
    lm: LoadedModel, corpus: Corpus, settings: ExtractionSettings, key_record: dict[str, Any]
) -> ExtractionPlan:
    """Tokenise and segment every sentence (:class:`StoreError` naming a sentence the model cannot
    take) and split the corpus into shards."""
    max_tokens = model_max_tokens(lm.model, lm.tokenizer)
    tokens = tokenize_sentences(lm.tokenizer, [s.words for s in corpus])
    warn_unknown_words(lm, corpus, tokens)
    segments = [
        segment_sentence(
            lm.tokenizer,
            s.words,
            i,
            max_tokens,
            settings.long_policy,
            f"{s.sent_id} (#{i} of {corpus.name})",
            tokens[i],
        )
        for i, s in enumerate(corpus)
    ]
    if settings.attentions:
        for sentence_segments, s in zip(segments, corpus):
            if len(sentence_segments) > 1:
                raise StoreError(
                    f"sentence {s.sent_id}: too long for the model ({max_tokens} tokens) and attention maps "
                    "cannot be windowed; extract with attentions=False or split the sentence"
                )
    word_counts = np.array(
        [sum(int(seg.keep.sum()) for seg in sentence_segments) for sentence_segments in segments], dtype=np.int64
    )
    shards = plan_shards(segments, settings.shard_size)
    return ExtractionPlan(
        segments, word_counts, shards, [shard_name(k) for k in range(len(shards))], {**key_record, "plan": shards}
    )


def plan_shards(segments: list[list[Segment]], shard_size: int) -> list[list[int]]:
    """Sentence ids sorted by their longest input's token count (ties: id), ``shard_size`` per shard."""
    lengths = [max(seg.n_tokens for seg in sentence_segments) for sentence_segments in segments]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[i : i + shard_size] for i in range(0, len(order), shard_size)]


def plan_batches(segments: list[Segment], batch_tokens: int) -> Iterator[list[Segment]]:
    """Consecutive groups whose padded size (count × longest) stays within ``batch_tokens``."""
    batch: list[Segment] = []
    longest = 0
    for seg in sorted(segments, key=lambda s: (s.n_tokens, s.sentence, s.word_start)):
        new_longest = max(longest, seg.n_tokens)
        if batch and new_longest * (len(batch) + 1) > batch_tokens:
            yield batch
            batch, new_longest = [], seg.n_tokens
        batch.append(seg)
        longest = new_longest
    if batch:
        yield batch


def prepare_folder(path: Path, plan: ExtractionPlan, *, force: bool, verify: bool) -> list[int] | None:
    """Under the store's lock: clean up after killed runs, check a complete store (repairing what is
    damaged) and return the shards still to compute -- None when the store is complete and sound.

    force: delete the store's files first. verify: hash every shard of a complete store (else sizes only).
    """
    for stale in atomic.remove_stale_temporaries(path):
        logger.info("removed %s, left by a killed extraction", stale)
    manifest_file = path / "manifest.json"
    if force:
        for f in [manifest_file, path / "plan.json", *path.glob("shard-*")]:
            f.unlink(missing_ok=True)
    if manifest_file.is_file():
        try:
            manifest = read_manifest(path)
            if {k: manifest.get("key", {}).get(k) for k in plan.record} != plan.record:
                raise StoreError(
                    f"{manifest_file}: describes another extraction (model, tokenizer, corpus, settings or plan differ)"
                )
            problems = shard_problems(path, manifest, full=verify, fresh=True)
            if not problems:
                (path / DAMAGED_MARK).unlink(missing_ok=True)
                return None
            logger.warning("%s; recomputing them", damage_message(path, problems).split(". Run")[0])
            for name, _ in problems:
                remove_shard(path / name)
        except StoreError as exc:
            logger.warning("%s -- rebuilding it (finished shards are verified and kept)", exc)
        manifest_file.unlink(missing_ok=True)
    plan_file = path / "plan.json"
    if plan_file.is_file():
        try:
            if json.loads(plan_file.read_text()) != plan.record:
                raise StoreError(f"{plan_file}: plan differs from this extraction; delete {path} to start over")
        except json.JSONDecodeError:
            pass  # a corrupt plan is rewritten below
    atomic.write_json(plan_file, plan.record)
    to_compute = []
    for k, name in enumerate(plan.shard_names):
        if not finished_shard_is_sound(path / name, plan.shards[k]):
            remove_shard(path / name)  # a damaged or unverifiable shard: never trusted later
            to_compute.append(k)
    return to_compute
