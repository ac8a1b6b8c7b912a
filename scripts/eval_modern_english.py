#!/usr/bin/env python3
"""Pseudo-log-likelihood (nats per piece, 95% sentence-bootstrap interval) of MLM models on the
project's held-out modern everyday English (``bertology.pretraining.evaluation.modern_english_sentences``:
news, dialogue, instructions; 50 sentences each), per genre and overall (issue 42, item 4).

    .venv/bin/python scripts/eval_modern_english.py [MODEL ...]   # default: the shipped English MLMs
    .venv/bin/python scripts/eval_modern_english.py --paired-against OLD_MODEL_DIR minilm-english-mlm

``--paired-against REF``: also each model minus REF on the same sentences (paired sentence bootstrap,
95% interval and two-sided p), per piece when both share a tokenizer, else per whitespace word.
"""

from __future__ import annotations

import argparse

import pandas as pd

from bertology.models import load_model
from bertology.pretraining.evaluation import MODERN_ENGLISH_GENRES, modern_english_sentences
from bertology.pseudo_likelihood import pll_summary, pseudo_log_likelihood
from bertology.uncertainty import paired_bootstrap

DEFAULT_MODELS = [
    "minilm-english-mlm",
    *(f"bert-mini-english@{step}" for step in (70, 275, 950, 3800)),
]
GENRES = [*MODERN_ENGLISH_GENRES, None]


def scores(name: str) -> tuple[dict[str | None, pd.DataFrame], str]:
    """Per genre (None: all 150) the :func:`pseudo_log_likelihood` rows of model ``name``, and its vocabulary's fingerprint."""
    lm = load_model(name, mlm_head=True, attentions=False)
    rows = pseudo_log_likelihood(lm, modern_english_sentences())  # every sentence scored once
    genre = [g for g in MODERN_ENGLISH_GENRES for _ in modern_english_sentences(g)]
    if len(genre) != len(rows):
        raise ValueError("modern_english_sentences(): the genres do not add up to the whole set")
    by_genre: dict[str | None, pd.DataFrame] = {g: rows[[x == g for x in genre]] for g in MODERN_ENGLISH_GENRES}
    by_genre[None] = rows
    return by_genre, lm.tokenizer.backend_tokenizer.to_str()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--paired-against", default=None, metavar="REF", help="a model to compare each with, paired")
    args = ap.parse_args()
    print("| model | " + " | ".join(g or "all 150" for g in GENRES) + " |")
    print("|---" * (len(GENRES) + 1) + "|")
    ref = scores(args.paired_against) if args.paired_against else None
    paired_rows = []
    for name in args.models:
        per_genre, vocab = scores(name)
        cells = []
        for g in GENRES:
            s = pll_summary(per_genre[g])
            i = s["nats_per_piece"]
            cells.append(f"{i.estimate:.2f} [{i.low:.2f}, {i.high:.2f}] ({s['pieces']:,} pieces)")
        print(f"| `{name}` | " + " | ".join(cells) + " |", flush=True)
        if ref is not None:
            unit = "n_pieces" if vocab == ref[1] else "n_words"
            cells = []
            for g in GENRES:
                a, b = per_genre[g], ref[0][g]
                d = paired_bootstrap(a["nll"], b["nll"], a[unit], b[unit])
                p = "p < 0.001" if d.p_value < 0.001 else f"p = {d.p_value:.3f}"  # 2,000 resamples: floor 0.0005
                cells.append(f"{d.difference:+.2f} [{d.low:+.2f}, {d.high:+.2f}], {p}")
            paired_rows.append(f"| `{name}` − `{args.paired_against}` (per {unit[2:-1]}) | " + " | ".join(cells) + " |")
    if paired_rows:
        print("\n| paired difference, nats | " + " | ".join(g or "all 150" for g in GENRES) + " |")
        print("|---" * (len(GENRES) + 1) + "|")
        print("\n".join(paired_rows))


if __name__ == "__main__":
    main()
