"""``bertology embeddings`` (the ``contextuality`` study) and ``bertology align`` (the
``align_spaces`` study), each with the options given; options left out come from the study's config."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from bertology.cli.core import DEVICE_HELP, MODEL_HELP, check_device, quick_overrides


def _given(**options: Any) -> dict[str, Any]:
    """The options the user gave (``None`` = not given), as config fields."""
    return {key: value for key, value in options.items() if value is not None}


QUICK_LIMIT = 500  # `bertology embeddings` without --full or --limit: about a minute with MiniLM on 2 CPU cores


def embeddings_cmd(
    model: Optional[str] = typer.Option(None, help=MODEL_HELP),
    corpus: Optional[str] = typer.Option(None, help="bundled name or a .conllu/.bio/.txt file"),
    limit: Optional[int] = typer.Option(None, help="first N sentences only (0 = all)"),
    min_occurrences: Optional[int] = typer.Option(
        None, help="words with fewer occurrences are left out of self-similarity/MEV"
    ),
    vectors: Optional[bool] = typer.Option(
        None,
        "--vectors/--no-vectors",
        help="also write static vectors (distilled first/last layer, "
        "word2vec, input embeddings) as word2vec text files",
    ),
    seed: Optional[int] = typer.Option(None, help="the run's seed"),
    device: Optional[str] = typer.Option(None, help=DEVICE_HELP + " (the store is extracted there)"),
    out: Optional[Path] = typer.Option(
        None, help="results root (default results/); the run goes to OUT/contextuality/<run id>"
    ),
    full: bool = typer.Option(
        False,
        "--full",
        help="the study as configured (3,000 sentences) instead of the quick default (the first 500)",
    ),
    force: bool = typer.Option(False, help="recompute even if a complete run exists"),
) -> None:
    """Static vs contextual: the contextuality study (Ethayarajh's self-similarity, intra-sentence
    similarity and MEV per layer, neighbours, sense clusters) with these options. Quick by
    default: the first 500 sentences; --full: the study's config."""
    from bertology.results import read_manifest, read_table
    from bertology.studies import run_study

    overrides = _given(
        model=model,
        corpus=corpus,
        min_occurrences=min_occurrences,
        export_vectors=vectors,
        device=check_device(device),
    )
    if limit is not None:
        overrides["limit"] = limit or None
    overrides = quick_overrides({"limit": QUICK_LIMIT}, overrides, full, f"the first {QUICK_LIMIT} sentences")
    run_dir = run_study("contextuality", overrides=overrides, results_root=out, seed=seed, force=force, log=typer.echo)
    from bertology.probes.embeddings.contextuality import few_words_warning

    table = read_table(run_dir, "contextuality")
    ctx = table.pivot(index="layer", columns="metric", values="adjusted")
    typer.echo("adjusted (raw − anisotropy baseline):\n" + ctx.round(3).to_string())
    warning = few_words_warning(table)
    if warning:
        typer.echo(warning, err=True)
    if "static_sources" in read_manifest(run_dir).get("tables", []):
        typer.echo(read_table(run_dir, "static_sources").to_string(index=False))
    typer.echo(f"wrote {run_dir}")


def align_cmd(
    source: Optional[str] = typer.Option(None, help="word2vec text file, spacy:en|fr, or store:<dir>:<layer>"),
    target: Optional[str] = typer.Option(None, help="word2vec text file, spacy:en|fr, or store:<dir>:<layer>"),
    dictionary: Optional[str] = typer.Option(
        None,
        help="FreeDict pair (eng-fra, eng-spa, eng-deu) or 'identical' (same vocabulary: two layers, "
        "corpora or models)",
    ),
    method: Optional[str] = typer.Option(None, help="procrustes | lstsq | self-learning"),
    retrieval: Optional[str] = typer.Option(None, help="nn | csls"),
    seed_dictionary: Optional[str] = typer.Option(None, help="self-learning seed: identical | numerals"),
    n_train: Optional[int] = typer.Option(None, help="training pairs (supervised methods)"),
    n_test: Optional[int] = typer.Option(None, help="held-out source words"),
    normalization: Optional[str] = typer.Option(None, help="none | unit | center | unit-center-unit"),
    top: Optional[int] = typer.Option(None, help="most-moved words to list ('identical' dictionary)"),
    seed: Optional[int] = typer.Option(None, help="the run's seed (dictionary split, self-learning)"),
    out: Optional[Path] = typer.Option(
        None, help="results root (default results/); the run goes to OUT/align_spaces/<run id>"
    ),
    force: bool = typer.Option(False, help="recompute even if a complete run exists"),
) -> None:
    """Align two vector spaces with a rotation (or least squares / self-learning) and score word
    translation P@1/5/10 on held-out words over the whole target vocabulary: the align_spaces
    study with these options."""
    from bertology.results import read_manifest, read_table
    from bertology.studies import run_study

    overrides = _given(
        source=source,
        target=target,
        dictionary=dictionary,
        method=method,
        retrieval=retrieval,
        seed_dictionary=seed_dictionary,
        n_train=n_train,
        n_test=n_test,
        normalization=normalization,
        top=top,
    )
    run_dir = run_study("align_spaces", overrides=overrides, results_root=out, seed=seed, force=force, log=typer.echo)
    precision = read_table(run_dir, "precision")
    typer.echo(precision.pivot(index="retrieval", columns="k", values="value").round(3).to_string())
    if "most_moved" in read_manifest(run_dir).get("tables", []):
        typer.echo(read_table(run_dir, "most_moved").head(10).to_string(index=False))
    typer.echo(f"wrote {run_dir}")


def register(app: typer.Typer) -> None:
    """Add ``embeddings`` and ``align`` to the ``bertology`` app."""
    app.command("embeddings")(embeddings_cmd)
    app.command("align")(align_cmd)
