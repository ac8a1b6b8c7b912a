#!/usr/bin/env python3
"""Package the English pretraining run as the model the workbench ships (`bert-mini-english`).

    python scripts/release_english_model.py --run ~/.cache/bertology/models/bert-mini-english \
        --corpus ~/.cache/bertology/english-corpus --out workbench/data/models/bert-mini-english

Reads the run the trainer wrote (``bertology pretrain --config english_cpu``) and the corpus
manifest ``scripts/build_english_corpus.py`` wrote, computes the unigram baseline on the same
held-out targets as the run's evaluations, and calls
:func:`bertology.pretraining.release.export_release` (float16 safetensors of the kept checkpoints,
``release.json``, ``metrics.jsonl`` and the model card). The weights are the trainer's, rounded to
float16; nothing else is edited.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertology.pretraining.release import export_release
from bertology.pretraining import unigram_baseline

REPRODUCE = """bash scripts/setup.sh --with-pretraining-corpus        # builds ~/.cache/bertology/english-corpus
bertology pretrain --config english_cpu                  # ~1-2 h on 2 CPU cores; re-run to resume
python scripts/release_english_model.py --run ~/.cache/bertology/models/bert-mini-english \\
    --corpus ~/.cache/bertology/english-corpus --out workbench/data/models/bert-mini-english"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="the pretraining run folder")
    ap.add_argument("--corpus", type=Path, required=True, help="the corpus folder (with manifest.json)")
    ap.add_argument("--out", type=Path, required=True, help="the release folder to write")
    ap.add_argument("--steps", default=None, help="comma-separated steps (default: the recipe's keep_steps)")
    ap.add_argument("--recipe", default=None, help="the config the run ended with, when resumed with a changed "
                                                   "max_steps (a shipped recipe name or a file)")
    ap.add_argument("--notes", default="", help="what happened during the run, for the model card")
    args = ap.parse_args()

    run = json.loads((args.run / "run.json").read_text(encoding="utf-8"))
    steps = [int(s) for s in args.steps.split(",")] if args.steps else run["config"]["keep_steps"]
    corpus = json.loads((args.corpus / "manifest.json").read_text(encoding="utf-8"))
    sources = {name: {"words_train": info["train"]["words"], "words_heldout": info["heldout"]["words"],
                      "documents_train": info["train"]["documents"], "documents_heldout": info["heldout"]["documents"],
                      "from": info.get("package"), "licence": info.get("licence")}
               for name, info in corpus["sources"].items()}
    totals = corpus["totals"]
    summary = (f"{totals['train']['words']:,} words / {totals['train']['documents']:,} documents for training, "
               f"{totals['heldout']['words']:,} words / {totals['heldout']['documents']:,} documents held out, from "
               + ", ".join(sources) + " (scripts/build_english_corpus.py, seed "
               f"{corpus['seed']}; licences per source in release.json)")
    baseline = unigram_baseline(args.run)
    card = {
        "description": "A small English BERT with its MLM head, pretrained from scratch on CPU by the workbench's "
                       "own trainer on redistributable English text, with training-time checkpoints spaced about "
                       "x4 apart for analyses across training. Far smaller and less trained than BERT-base: a "
                       "model to analyse, not a model to build on.",
        "unigram_baseline": baseline["unigram_eval_loss"],
        "unigram_details": baseline,
        "corpus": {"summary": summary, "sources": sources, "totals": totals, "split": corpus.get("split"),
                   "dedup": corpus.get("dedup")},
        "licence": "weights: Apache-2.0, as the workbench; the training texts keep their own licences "
                   "(public domain, PDDL/CC0, MPL-2.0, GPL-2.0+ for GCIDE, the WordNet licence; listed per source "
                   "in release.json)",
        "command": REPRODUCE,
        "notes": args.notes,
    }
    recipe = None
    if args.recipe:
        from bertology.pretraining import load_config

        recipe = load_config(args.recipe).to_dict()
        recipe.pop("output_root", None)
    out = export_release(args.run, args.out, steps=steps, name=args.out.name, card=card, recipe=recipe)
    print(f"wrote {out}")
    print((out / "README.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
