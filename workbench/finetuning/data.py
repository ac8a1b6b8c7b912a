"""Examples to model inputs: sub-word encoding, word-level labels on the first sub-word, batches.

Token tasks follow BERT's NER recipe (Devlin et al. 2019, section 5.3): each word is tokenised,
its label goes on its first sub-word, and the other sub-words get no label (``-100``, ignored by
the loss and by accuracy). Sentence tasks classify the whole sequence (``[CLS] words [SEP]``),
pair tasks the two segments (``[CLS] a [SEP] b [SEP]``, segment ids 0 / 1). Sequences longer
than ``max_seq_len`` are truncated; the words cut off a token example are counted
(``EncodedSplit.words_truncated``) and have no label, so they are neither trained nor scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bertology.finetuning.tasks import Example, FinetuneTask

__all__ = ["IGNORE_INDEX", "EncodedSplit", "encode_split", "collate"]

IGNORE_INDEX = -100


@dataclass
class EncodedSplit:
    """One split, encoded: per example ``input_ids`` and ``token_type_ids`` (``[tokens]`` lists) and
    ``labels`` (token tasks: ``[tokens]`` with ``-100`` off first sub-words; else one id)."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: list[Any]
    words_truncated: int = 0

    def __len__(self) -> int:
        return len(self.input_ids)


def encode_split(examples: list[Example], task: FinetuneTask, tokenizer: Any, max_seq_len: int) -> EncodedSplit:
    """Encode ``examples`` with a fast ``tokenizer`` (pre-split words) for ``task``'s kind."""
    label_id = {label: i for i, label in enumerate(task.labels)}
    ids: list[list[int]] = []
    types: list[list[int]] = []
    labels: list[Any] = []  # token tasks: a row of ids per example; sentence and pair tasks: one id
    truncated = 0
    for ex in examples:
        if task.kind == "pair":
            enc = tokenizer(
                list(ex.words),
                list(ex.words_b or ()),
                is_split_into_words=True,
                truncation=True,
                max_length=max_seq_len,
            )
        else:
            enc = tokenizer(list(ex.words), is_split_into_words=True, truncation=True, max_length=max_seq_len)
        ids.append(list(enc["input_ids"]))
        types.append(list(enc.get("token_type_ids") or [0] * len(enc["input_ids"])))
        if task.kind == "token":
            row, seen = [], set()
            for word in enc.word_ids():
                if word is None or word in seen:
                    row.append(IGNORE_INDEX)
                else:
                    seen.add(word)
                    row.append(label_id[ex.label[word]])
            truncated += len(ex.words) - len(seen)
            labels.append(row)
        else:
            if not isinstance(ex.label, str):
                raise TypeError(f"a {task.kind} example has one label, not one per word: {ex.label!r}")
            labels.append(label_id[ex.label])
    return EncodedSplit(ids, types, labels, truncated)


def collate(split: EncodedSplit, rows: list[int], pad_id: int) -> dict[str, torch.Tensor]:
    """A padded batch of ``rows``: ``input_ids``, ``token_type_ids``, ``attention_mask``
    ``[batch, tokens]`` and ``labels`` (``[batch, tokens]`` for token tasks, ``[batch]`` otherwise)."""
    width = max(len(split.input_ids[r]) for r in rows)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((n, width), dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    token_level = isinstance(split.labels[rows[0]], list)
    labels = torch.full((n, width), IGNORE_INDEX, dtype=torch.long) if token_level else torch.zeros(n, dtype=torch.long)
    for i, r in enumerate(rows):
        length = len(split.input_ids[r])
        input_ids[i, :length] = torch.tensor(split.input_ids[r])
        token_type_ids[i, :length] = torch.tensor(split.token_type_ids[r])
        attention_mask[i, :length] = 1
        if token_level:
            labels[i, :length] = torch.tensor(split.labels[r])
        else:
            labels[i] = split.labels[r]
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "labels": labels,
    }
