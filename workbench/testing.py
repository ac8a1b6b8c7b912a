"""Tiny in-process models for tests, examples and benchmarks (no download, no files).

``make_tiny_bert(tokenizer)`` is a random 2-layer BERT sized to a real tokenizer's vocabulary;
``tiny_bert`` / ``pair_batches`` / ``trained_pair_model`` are a 40-token toy world with planted head
behaviour (copy the neighbouring token) for the attention-head tests.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

__all__ = ["make_tiny_bert", "tiny_config", "tiny_bert", "pair_batches", "trained_pair_model",
           "VOCAB", "MASK_ID", "PAD_ID"]

VOCAB, MASK_ID, PAD_ID = 40, 3, 0


def make_tiny_bert(tokenizer: Any, *, layers: int = 2, heads: int = 4, hidden: int = 32, seed: int = 0,
                   max_positions: int = 64, mlm: bool = False) -> BertModel | BertForMaskedLM:
    """A random BERT (eager attention, eval mode) with ``tokenizer``'s vocabulary size."""
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=2 * hidden,
                        max_position_embeddings=max_positions, attn_implementation="eager")
    torch.manual_seed(seed)
    model = (BertForMaskedLM if mlm else BertModel)(config)
    return model.eval()


def tiny_config(layers: int = 2, heads: int = 4, hidden: int = 32) -> BertConfig:
    """Config of the toy-world BERT: vocabulary ``VOCAB``, no dropout, eager attention."""
    return BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=2 * hidden, max_position_embeddings=64, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, attn_implementation="eager")


def tiny_bert(seed: int = 0, mlm: bool = False, **kw: Any) -> BertModel | BertForMaskedLM:
    """A random toy-world BERT in eval mode (``kw``: layers, heads, hidden)."""
    torch.manual_seed(seed)
    cls = BertForMaskedLM if mlm else BertModel
    return cls(tiny_config(**kw)).eval()


def pair_batches(n_batches: int, batch_size: int = 16, length: int = 12, seed: int = 0) -> list[dict]:
    """Sequences ``a a b b c c ...`` with one token of each pair masked: the answer is a neighbour.

    Each batch: ``input_ids``, ``attention_mask``, ``labels`` ``[batch_size, length]`` (labels -100
    except at masked positions)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        base = torch.randint(5, VOCAB, (batch_size, length // 2), generator=gen)
        ids = base.repeat_interleave(2, dim=1)
        labels = torch.full_like(ids, -100)
        pick = torch.randint(0, 2, (batch_size, length // 2), generator=gen) + torch.arange(0, length, 2)
        pick = pick[:, ::2]  # mask every other pair: copies must come from the neighbour
        rows = torch.arange(batch_size)[:, None]
        labels[rows, pick] = ids[rows, pick]
        ids = ids.clone()
        ids[rows, pick] = MASK_ID
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return out


def trained_pair_model(steps: int = 150, seed: int = 0, **kw: Any) -> BertForMaskedLM:
    """A tiny MLM trained briefly on :func:`pair_batches`, so heads differ in importance."""
    model = tiny_bert(seed, mlm=True, **kw).train()
    data = pair_batches(steps, seed=seed + 1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for batch in data:
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()
