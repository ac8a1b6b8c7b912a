"""Pseudo-log-likelihood of an MLM (Salazar et al. 2020, "Masked Language Model Scoring"):
how well a masked language model knows a text, one word piece at a time.

``PLL(W) = sum_t log P(w_t | W with w_t replaced by [MASK])`` -- every piece of the sentence masked
in turn, the rest of the sentence visible. :func:`pseudo_log_likelihood` scores each sentence;
:func:`pll_summary` reports nats per word piece (``-sum PLL / sum pieces``, the ratio of sums over
all sentences) and nats per word (the same numerator over words, which compares models with
different tokenizers), each with a percentile bootstrap interval that resamples sentences.

Per piece is what the workbench's model targets name (docs/pretraining.md); per word is the figure
to compare a model with another vocabulary: a tokenizer that cuts words into more, easier pieces
scores lower per piece without knowing the language better.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch

from bertology.architectures import mlm_parts
from bertology.errors import ModelError
from bertology.uncertainty import Interval, ratio_bootstrap

__all__ = ["pseudo_log_likelihood", "pll_summary"]

PLL_COLUMNS = ["sentence", "text", "n_words", "n_pieces", "nll", "truncated"]


def pseudo_log_likelihood(
    lm: Any, texts: Sequence[str], *, batch_size: int = 64, max_length: int = 128, progress: bool = False
) -> pd.DataFrame:
    """Score each text by pseudo-log-likelihood.

    ``lm``: a ``LoadedModel`` loaded with ``mlm_head=True``; ``texts``: sentences as plain strings
    (the tokenizer splits them). One forward pass per (sentence, piece), ``batch_size`` at a time.
    Returns one row per sentence: ``sentence`` (index), ``text``, ``n_words`` (whitespace words),
    ``n_pieces`` (word pieces scored: every piece but the special tokens), ``nll`` (nats,
    ``-PLL``, the sum over those pieces), ``truncated`` (the sentence was cut to ``max_length``
    tokens; its remaining pieces are neither scored nor counted).
    """
    model = lm.model
    if not getattr(lm, "has_mlm_head", False):
        raise ModelError(f"{lm.name}: pseudo-log-likelihood needs the MLM head: load_model(..., mlm_head=True)")
    tok = lm.tokenizer
    encoder, mlm_head, _ = mlm_parts(model)
    device = next(model.parameters()).device
    special = set(tok.all_special_ids)
    rows: list[dict[str, Any]] = []
    # every (sentence, position) pair to score, in sentence order
    encoded: list[list[int]] = []
    for index, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"texts[{index}]: expected a non-empty string, got {text!r}")
        full = tok(text, add_special_tokens=True)["input_ids"]
        ids = full if len(full) <= max_length else tok(text, truncation=True, max_length=max_length)["input_ids"]
        encoded.append(ids)
        rows.append(
            {
                "sentence": index,
                "text": text,
                "n_words": len(text.split()),
                "n_pieces": 0,
                "nll": 0.0,
                "truncated": len(full) > len(ids),
            }
        )
    jobs = [(s, p) for s, ids in enumerate(encoded) for p, t in enumerate(ids) if t not in special]
    iterator = range(0, len(jobs), batch_size)
    if progress:
        from bertology.progress import progress_bar

        iterator = progress_bar(iterator, desc="pseudo-log-likelihood", unit="batch")
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for start in iterator:
            chunk = jobs[start : start + batch_size]
            width = max(len(encoded[s]) for s, _ in chunk)
            ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            targets = torch.empty(len(chunk), dtype=torch.long)
            for row, (s, p) in enumerate(chunk):
                seq = encoded[s]
                ids[row, : len(seq)] = torch.tensor(seq)
                mask[row, : len(seq)] = 1
                targets[row] = seq[p]
                ids[row, p] = tok.mask_token_id
            where = torch.tensor([p for _, p in chunk])
            hidden = encoder(input_ids=ids.to(device), attention_mask=mask.to(device))[0]
            # the vocabulary logits at the masked position only (every MLM head is position-wise)
            picked = mlm_head(hidden[torch.arange(len(chunk), device=device), where.to(device)]).float()
            nll = -torch.log_softmax(picked, -1).gather(1, targets.to(device)[:, None])[:, 0]
            for (s, _), value in zip(chunk, nll.tolist()):
                rows[s]["nll"] += value
                rows[s]["n_pieces"] += 1
    model.train(was_training)
    return pd.DataFrame(rows, columns=PLL_COLUMNS)


def pll_summary(
    scores: pd.DataFrame, *, confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Nats per piece and per word of :func:`pseudo_log_likelihood` rows, with bootstrap intervals
    over sentences: ``{"nats_per_piece": Interval, "nats_per_word": Interval, "sentences",
    "pieces", "words", "truncated"}``."""
    scored = scores[scores["n_pieces"] > 0]
    if scored.empty:
        raise ValueError("pll_summary: no scored piece (every text was empty after tokenisation)")
    nll = scored["nll"].to_numpy(float)
    per_piece: Interval = ratio_bootstrap(
        nll, scored["n_pieces"].to_numpy(float), confidence=confidence, n_resamples=n_resamples, seed=seed
    )
    per_word: Interval = ratio_bootstrap(
        nll, scored["n_words"].to_numpy(float), confidence=confidence, n_resamples=n_resamples, seed=seed
    )
    return {
        "nats_per_piece": per_piece,
        "nats_per_word": per_word,
        "sentences": int(len(scored)),
        "pieces": int(scored["n_pieces"].sum()),
        "words": int(scored["n_words"].sum()),
        "truncated": int(scored["truncated"].sum()),
    }
