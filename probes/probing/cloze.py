"""What an MLM predicts: cloze sentences a person can read (one word masked, the top tokens).

BERT's own objective is the most direct probe of what it learned (Petroni et al. 2019 query it
with cloze statements; Goldberg 2019 with minimal pairs). ``cloze_predictions`` masks one word
of each sentence at a time and lists the model's top-k word pieces with their probabilities,
and ``cloze_accuracy`` summarises how often the masked word is the top prediction.

Only words the tokenizer keeps as one piece are masked (a multi-piece word would need several
predictions at once); the choice of words is seeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from bertology.errors import ModelError

__all__ = ["cloze_predictions", "cloze_accuracy"]


def _single_piece_words(tokenizer: Any, words: Sequence[str]) -> list[int]:
    enc = tokenizer(list(words), is_split_into_words=True, add_special_tokens=False)
    counts = np.bincount([w for w in enc.word_ids() if w is not None], minlength=len(words))
    return [i for i, c in enumerate(counts) if c == 1 and any(ch.isalpha() for ch in words[i])]


def cloze_predictions(
    lm: Any, sentences: Sequence[Any], *, words_per_sentence: int = 1, k: int = 5, seed: int = 0, max_length: int = 128
) -> pd.DataFrame:
    """Mask single-piece words and list the model's top ``k`` predictions.

    ``lm``: a ``LoadedModel`` loaded with ``mlm_head=True``; ``sentences``: ``Sentence`` objects
    (or word lists). Returns one row per (sentence, masked word, rank): ``sentence``, ``position``,
    ``masked`` (the word), ``text`` (the sentence with ``___`` in its place), ``rank`` (1..k),
    ``prediction``, ``probability``, ``correct`` (prediction equals the word, case-folded when the
    tokenizer lower-cases).
    """
    model = lm.model
    if getattr(model, "base_model", model) is model or not getattr(lm, "has_mlm_head", False):
        raise ModelError(f"{lm.name}: cloze predictions need the MLM head: load_model(..., mlm_head=True)")
    tok = lm.tokenizer
    lower = bool(getattr(tok, "do_lower_case", False) or tok.init_kwargs.get("do_lower_case", False))
    rng = np.random.default_rng(seed)
    rows = []
    device = next(model.parameters()).device
    for s_index, sentence in enumerate(sentences):
        words = list(getattr(sentence, "words", sentence))
        candidates = _single_piece_words(tok, words)
        if not candidates:
            continue
        chosen = sorted(rng.choice(candidates, size=min(words_per_sentence, len(candidates)), replace=False))
        for position in chosen:
            masked_words = list(words)
            masked_words[position] = tok.mask_token
            enc = tok(
                masked_words, is_split_into_words=True, truncation=True, max_length=max_length, return_tensors="pt"
            )
            where = (enc["input_ids"][0] == tok.mask_token_id).nonzero().flatten()
            if len(where) != 1:
                continue
            inputs = {
                k_: v.to(device) for k_, v in enc.items() if k_ in ("input_ids", "attention_mask", "token_type_ids")
            }
            with torch.inference_mode():
                logits = model(**inputs).logits[0, int(where[0])].float()
            probs = torch.softmax(logits, -1)
            top = torch.topk(probs, k)
            target = words[position].lower() if lower else words[position]
            text = " ".join(w if i != position else "___" for i, w in enumerate(words))
            for rank, (p, idx) in enumerate(zip(top.values.tolist(), top.indices.tolist()), 1):
                token = tok.convert_ids_to_tokens(idx)
                rows.append(
                    {
                        "sentence": getattr(sentence, "sent_id", str(s_index)),
                        "position": int(position),
                        "masked": words[position],
                        "text": text,
                        "rank": rank,
                        "prediction": token,
                        "probability": float(p),
                        "correct": token == target,
                    }
                )
    return pd.DataFrame(
        rows, columns=["sentence", "position", "masked", "text", "rank", "prediction", "probability", "correct"]
    )


def cloze_accuracy(predictions: pd.DataFrame) -> dict[str, float]:
    """``{"n", "top1", "top5"}``: share of masked words predicted first / within the listed ranks."""
    if predictions.empty:
        return {"n": 0, "top1": float("nan"), "top5": float("nan")}
    by_item = predictions.groupby(["sentence", "position"])
    top1 = by_item.apply(lambda g: bool(g.loc[g["rank"] == 1, "correct"].any()), include_groups=False)
    topk = by_item["correct"].any()
    return {"n": int(len(topk)), "top1": float(top1.mean()), "top5": float(topk.mean())}
