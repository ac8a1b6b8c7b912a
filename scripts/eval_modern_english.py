#!/usr/bin/env python3
"""Pseudo-log-likelihood (nats per piece, 95% sentence-bootstrap interval) of MLM models on the
project's held-out modern everyday English (``bertology.pretraining.evaluation.modern_english_sentences``:
news, dialogue, instructions; 50 sentences each), per genre and overall (issue 42, item 4).

    .venv/bin/python scripts/eval_modern_english.py [MODEL ...]   # default: the shipped English MLMs
"""

from __future__ import annotations

import sys

from bertology.models import load_model
from bertology.pretraining.evaluation import MODERN_ENGLISH_GENRES, modern_english_sentences
from bertology.pseudo_likelihood import pll_summary, pseudo_log_likelihood

DEFAULT_MODELS = [
    "minilm-english-mlm",
    *(f"bert-mini-english@{step}" for step in (70, 275, 950, 3800)),
]


def main(models: list[str]) -> None:
    genres = [*MODERN_ENGLISH_GENRES, None]
    print("| model | " + " | ".join(g or "all 150" for g in genres) + " |")
    print("|---" * (len(genres) + 1) + "|")
    for name in models:
        lm = load_model(name, mlm_head=True, attentions=False)
        cells = []
        for genre in genres:
            s = pll_summary(pseudo_log_likelihood(lm, modern_english_sentences(genre)))
            i = s["nats_per_piece"]
            cells.append(f"{i.estimate:.2f} [{i.low:.2f}, {i.high:.2f}] ({s['pieces']:,} pieces)")
        print(f"| `{name}` | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT_MODELS)
