"""CLI: ``bertology finetune`` (thin layer over :func:`bertology.finetuning.run_finetuning`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from bertology.cli.core import MODEL_HELP


def model_names_line(run_dir: Path, step: int) -> str:
    """How to load the finished fine-tune: ``load_model("<run>@<step>")`` where the registry finds
    this run (the run is under the models folder of this working folder's settings), and always the
    name that works from any folder, ``load_model("<run folder>@<step>")``."""
    from bertology.errors import ModelError
    from bertology.models import resolve

    anywhere = f"{run_dir.resolve()}@{step}"
    name = f"{run_dir.name}@{step}"
    try:
        registered = resolve(name)[1].resolve() == (run_dir / f"checkpoint-{step}").resolve()
    except ModelError:
        registered = False
    if registered:
        return f'model: load_model("{name}") (registry name, from this folder), or from any folder load_model("{anywhere}")'
    return f'model: load_model("{anywhere}") (outside the registry\'s models folder: load it by its path)'


def register(app: typer.Typer) -> None:
    """Add the fine-tuning command to the ``bertology`` app."""

    @app.command("finetune")
    def finetune(
        model: str = typer.Option(
            "minilm-l6", "--model", help=f"the pretrained encoder: {MODEL_HELP} (`bertology models` lists them)"
        ),
        task: str = typer.Option(
            "pos",
            "--task",
            help="pos (gold UPOS), ner (silver entities), genre (gold Brown genre), sotu-party / "
            "sotu-decade (gold), or a .conllu / .jsonl / .csv file (docs/finetuning.md)",
        ),
        corpus: str = typer.Option("brown-sample", "--corpus", help="corpus of the built-in tasks"),
        mode: str = typer.Option("full", "--mode", help="full, frozen, bitfit or adapters"),
        output: Optional[str] = typer.Option(None, "--output", help="run name (default: <model>-<task>-<mode>)"),
        output_root: Optional[str] = typer.Option(
            None, "--output-root", help="folder of the run (default: models dir)"
        ),
        epochs: int = typer.Option(3, "--epochs", help="passes over the training split (--max-steps stops sooner)"),
        max_steps: Optional[int] = typer.Option(None, "--max-steps", help="stop after N steps (default: epochs)"),
        batch_size: int = typer.Option(
            32, "--batch-size", help="examples per optimizer step on each process (sentences or pairs)"
        ),
        learning_rate: Optional[float] = typer.Option(
            None,
            "--learning-rate",
            help="AdamW peak learning rate after warm-up, then linear decay to 0; "
            "default by mode: full 3e-5, frozen/bitfit 1e-3, adapters 1e-4",
        ),
        adapter_size: int = typer.Option(64, "--adapter-size", help="bottleneck width of each adapter (mode adapters)"),
        max_examples: Optional[int] = typer.Option(None, "--max-examples", help="use the first N examples"),
        seed: int = typer.Option(0, "--seed", help="seed of the classifier's initialisation, dropout and data order"),
        device: str = typer.Option("auto", "--device", help="auto, cpu or cuda"),
        resume: bool = typer.Option(True, "--resume/--no-resume", help="continue from the last checkpoint"),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="show a progress bar"),
    ) -> None:
        """Fine-tune an encoder on a labelled task (token, sentence or sentence-pair classification);
        re-running resumes. DDP: torchrun --nproc_per_node N -m bertology.finetuning [OPTIONS]."""
        import json
        import os
        import re

        from bertology.finetuning import FinetuneConfig, run_finetuning

        default_name = re.sub(
            r"[^A-Za-z0-9._-]+",
            "-",
            f"{os.path.basename(model.rstrip('/'))}-{os.path.splitext(os.path.basename(task))[0]}-{mode}",
        ).strip("-.")
        cfg = FinetuneConfig(
            run_name=output or default_name,
            model=model,
            task=task,
            corpus=corpus,
            mode=mode,
            output_root=output_root,
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            learning_rate=learning_rate,
            adapter_size=adapter_size,
            max_examples=max_examples,
            seed=seed,
            device=device,
            progress=progress,
        )
        run_dir = run_finetuning(cfg, resume=resume)
        if int(os.environ.get("RANK", "0")) != 0:  # under torchrun: one report, from rank 0
            return
        result = json.loads((run_dir / "run.json").read_text())["result"]
        typer.echo(
            f"{run_dir}  (test accuracy {result['test_accuracy']:.4f} [{result['test_low']:.4f}, "
            f"{result['test_high']:.4f}], best step {result['best_step']})"
        )
        typer.echo(model_names_line(run_dir, int(result["best_step"])))
