#!/usr/bin/env python3
"""Package an English pretraining run as a model the workbench ships (`bert-mini-english`,
`minilm-english-mlm`).

    python scripts/release_english_model.py --run ~/.cache/bertology/models/bert-mini-english \
        --corpus ~/.cache/bertology/english-corpus --out workbench/data/models/bert-mini-english
    python scripts/release_english_model.py --run ~/.cache/bertology/models/minilm-english-mlm \
        --corpus ~/.cache/bertology/english-corpus --out workbench/data/models/minilm-english-mlm --config english_minilm_cpu

Reads the run the trainer wrote (``bertology pretrain --config english_cpu``) and the corpus
manifest ``scripts/build_english_corpus.py`` wrote, computes the unigram baseline on the same
held-out targets as the run's evaluations, and calls
:func:`bertology.pretraining.release.export_release` (float16 safetensors of the kept checkpoints,
``release.json``, ``metrics.jsonl`` and the model card). The weights are the trainer's, rounded to
float16; nothing else is edited. Every shipped checkpoint is also scored by pseudo-log-likelihood
on 400 held-out sentences of ordinary English (the Brown and State of the Union documents the
corpus builder held out; :func:`bertology.pretraining.evaluation.heldout_sentences`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bertology.pretraining import heldout_sentences, unigram_baseline
from bertology.pretraining.release import earlier_stretch, export_release, release_stretches

FROM_SCRATCH = (
    "A small English BERT with its MLM head, pretrained from scratch on CPU by the workbench's own trainer "
    "on redistributable English text, with training-time checkpoints spaced about x4 apart for analyses "
    "across training. Far smaller and less trained than BERT-base: a model to analyse, not a model to "
    "build on."
)
CONTINUED = (
    "MiniLM-L6 (all-MiniLM-L6-v2: a 6-layer BERT distilled from a large model, then fine-tuned for "
    "sentence embeddings; its package has no MLM head) with an MLM head, made by continued masked-language-"
    "model pretraining of the whole model on the workbench's redistributable English corpus. Its knowledge of "
    "English comes mostly from MiniLM's own pretraining (Wikipedia and books, then sentence pairs), not from "
    "this corpus: analyses of it describe MiniLM adapted to masked-word prediction, not a model trained from "
    "scratch, and it has no early training-time checkpoints (use bert-mini-english for emergence)."
)


def reproduce(
    config: str,
    run: Path,
    out: Path,
    earlier: list[tuple[str, Path]] = (),
    corpus_command: str | None = None,
    corpus: str = "~/.cache/bertology/english-corpus",
) -> str:
    """The commands that make the release: every stretch's pretraining, then this script."""
    pretrain = "".join(
        f"bertology pretrain --config {c}    # stretch {k}, on 2 CPU cores; re-run to resume\n"
        for k, (c, _) in enumerate(list(earlier) + [(config, run)], 1)
    )
    runs = "".join(f" --earlier-run .cache/bertology/models/{r.name} --earlier-config {c}" for c, r in earlier)
    return (
        "bash scripts/setup.sh --with-pretraining-corpus        # builds ~/.cache/bertology/english-corpus\n"
        + (f"{corpus_command}\n" if corpus_command else "")
        + pretrain
        + f"python scripts/release_english_model.py --run .cache/bertology/models/{run.name}{runs} \\\n"
        f"    --corpus {corpus} --out workbench/data/models/{out.name} --config {config}"
    )


def _home_relative(path: Path) -> str:
    """``path`` with the home folder written as ``~`` (the card's commands work for anyone)."""
    try:
        return "~/" + str(path.expanduser().resolve().relative_to(Path.home().resolve()))
    except ValueError:
        return str(path)


def _parser() -> argparse.ArgumentParser:
    """The script's command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="the pretraining run folder")
    ap.add_argument("--corpus", type=Path, required=True, help="the corpus folder (with manifest.json)")
    ap.add_argument("--out", type=Path, required=True, help="the release folder to write")
    ap.add_argument("--steps", default=None, help="comma-separated steps (default: the recipe's keep_steps)")
    ap.add_argument(
        "--recipe",
        default=None,
        help="the config the run ended with, when resumed with a changed max_steps (a shipped recipe name or a file)",
    )
    ap.add_argument("--notes", default="", help="what happened during the run, for the model card")
    ap.add_argument("--config", default="english_cpu", help="the shipped recipe the run was made with (for the card)")
    ap.add_argument(
        "--earlier-run",
        type=Path,
        action="append",
        default=[],
        help="an earlier stretch this run continued (its run folder; oldest first, repeatable)",
    )
    ap.add_argument(
        "--earlier-config",
        action="append",
        default=[],
        help="the shipped recipe of each --earlier-run (for the card), in the same order",
    )
    ap.add_argument(
        "--earlier-release",
        type=Path,
        default=None,
        help="a shipped multi-stretch release this run continued (its folder; its stretches come before any "
        "--earlier-run; give one --earlier-config per stretch of it too)",
    )
    ap.add_argument(
        "--corpus-command",
        default=None,
        help="the command that builds this run's corpus, for the card (default: scripts/setup.sh --with-pretraining-corpus)",
    )
    return ap


def main() -> None:
    ap = _parser()
    args = ap.parse_args()
    released = release_stretches(args.earlier_release) if args.earlier_release else []
    earlier_runs = [Path(r["run"]) for r in released] + list(args.earlier_run)
    if len(args.earlier_config) != len(earlier_runs):
        ap.error(
            "give one --earlier-config per earlier stretch (each stretch of --earlier-release, each --earlier-run)"
        )

    run = json.loads((args.run / "run.json").read_text(encoding="utf-8"))
    steps = [int(s) for s in args.steps.split(",")] if args.steps else run["config"]["keep_steps"]
    card = _card(args, run, earlier_runs)
    recipe = None
    if args.recipe:
        from bertology.pretraining import load_config

        recipe = load_config(args.recipe).to_dict()
        recipe.pop("output_root", None)
    texts = heldout_sentences(args.corpus, n=400, seed=0)
    earlier = released + [earlier_stretch(path) for path in args.earlier_run]
    out = export_release(
        args.run,
        args.out,
        steps=steps,
        name=args.out.name,
        card=card,
        recipe=recipe,
        pll_texts=texts,
        earlier=earlier,
        pll_source="400 lines of the held-out Brown and State of the Union documents with 5-60 words, 200 each, seed 0",
    )
    print(f"wrote {out}")
    print((out / "README.md").read_text(encoding="utf-8"))


def _card(args: argparse.Namespace, run: dict[str, Any], earlier_runs: list[Path]) -> dict[str, Any]:
    """The release's card fields: description, unigram baseline, corpus (summary, per-source counts and
    licences), licence, the command that reproduces it and the notes."""
    corpus = json.loads((args.corpus / "manifest.json").read_text(encoding="utf-8"))
    sources = {
        name: {
            "words_train": info["train"]["words"],
            "words_heldout": info["heldout"]["words"],
            "documents_train": info["train"]["documents"],
            "documents_heldout": info["heldout"]["documents"],
            "from": info.get("package"),
            "licence": info.get("licence"),
        }
        for name, info in corpus["sources"].items()
    }
    totals = corpus["totals"]
    summary = (
        f"{totals['train']['words']:,} words / {totals['train']['documents']:,} documents for training, "
        f"{totals['heldout']['words']:,} words / {totals['heldout']['documents']:,} documents held out, from "
        + ", ".join(sources)
        + " (scripts/build_english_corpus.py, seed "
        f"{corpus['seed']}; licences per source in release.json)"
    )
    baseline = unigram_baseline(args.run)
    continued = run["config"].get("init_from") or args.earlier_run
    return {
        "description": CONTINUED if continued else FROM_SCRATCH,
        "unigram_baseline": baseline["unigram_eval_loss"],
        "unigram_details": baseline,
        "corpus": {
            "summary": summary,
            "sources": sources,
            "totals": totals,
            "split": corpus.get("split"),
            "dedup": corpus.get("dedup"),
        },
        "licence": (
            "weights: Apache-2.0, as all-MiniLM-L6-v2 (sentence-transformers) they start from and the workbench"
            if continued
            else "weights: Apache-2.0, as the workbench"
        )
        + "; the training texts keep their own licences (public domain, PDDL/CC0, MPL-2.0, GPL-2.0+ for "
        "GCIDE, the WordNet licence; listed per source in release.json)",
        "command": reproduce(
            args.config,
            args.run,
            args.out,
            list(zip(args.earlier_config, earlier_runs)),
            args.corpus_command,
            _home_relative(args.corpus),
        ),
        "notes": args.notes,
    }


if __name__ == "__main__":
    main()
