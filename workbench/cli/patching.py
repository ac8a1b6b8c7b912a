"""``bertology patch``: activation patching (:mod:`bertology.probes.patching`). With ``--clean``,
``--corrupted``, ``--target`` and ``--foil`` it patches that one pair and prints the layers x
positions and heads that restore most of the score; without them it runs the ``patching`` study
(subject-verb agreement minimal pairs; options become config overrides, as for ``heads``) and prints
its means over pairs with their intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from bertology.cli.core import DEVICE_HELP, MODEL_HELP, check_device

PAIR_OPTIONS = ("--clean", "--corrupted", "--target", "--foil")


# what the fraction is, by direction (the column is `restored` in both: 1 = the whole clean - corrupted difference)
EFFECT = {"denoising": "restored", "noising": "destroyed"}
DIRECTION_TEXT = {
    "denoising": "denoising: a clean activation copied into the corrupted run; 1 = the clean score restored",
    "noising": "noising: a corrupted activation copied into the clean run; 1 = the whole difference destroyed",
}


def _one_pair(
    model: str,
    pair: tuple[str, str, str, str],
    position: Optional[int],
    top: int,
    device: Optional[str],
    direction: str,
):
    """Patch one pair and print the ``top`` hidden states and heads by restored (or destroyed) fraction."""
    from bertology.models import load_model
    from bertology.probes.patching import patch_heads, patch_hidden_states

    lm = load_model(model, attentions=False, mlm_head=True, device=device or "cpu")
    states = patch_hidden_states(lm, *pair, direction=direction)
    heads = patch_heads(lm, *pair, position=position, direction=direction)
    first, effect = states.iloc[0], EFFECT[direction]
    typer.echo(
        f"{lm.name}: score log P({pair[2]}) - log P({pair[3]}): clean {first['clean_score']:.3f}, "
        f"corrupted {first['corrupted_score']:.3f}"
    )
    typer.echo(DIRECTION_TEXT[direction])
    typer.echo(f"hidden states (layer 0 = embeddings, l = output of layer l), top {top} by {effect} fraction:")
    shown = states.sort_values("restored", ascending=False).head(top).rename(columns={"restored": effect})
    typer.echo(shown[["layer", "position", "token", "token_corrupted", effect]].round(3).to_string(index=False))
    where = "every position" if position is None else f"position {position}"
    typer.echo(f"heads (transformer layers 1..L, heads 1..H; patched at {where}), top {top} by {effect} fraction:")
    shown = heads.sort_values("restored", ascending=False).head(top).rename(columns={"restored": effect})
    typer.echo(shown[["layer", "head", effect]].round(3).to_string(index=False))


def _interval(df: Any) -> Any:
    return df.assign(interval=[f"[{lo:.2f}, {hi:.2f}]" for lo, hi in zip(df["low"], df["high"])])


def _accuracy_rows(accuracy: Any) -> Any:
    """The accuracy table as printed: each accuracy with its interval."""
    out = accuracy[["template", "n_pairs", "n_used"]].copy()
    for name in ("clean", "both", "direction"):
        out[name] = [
            f"{a:.3f} [{lo:.2f}, {hi:.2f}]"
            for a, lo, hi in zip(accuracy[f"{name}_accuracy"], accuracy[f"{name}_low"], accuracy[f"{name}_high"])
        ]
    return out


def _print_study(run_dir: Path, top: int) -> None:
    from bertology.probes.patching.analysis import able
    from bertology.results import read_manifest, read_table

    accuracy = read_table(run_dir, "accuracy")
    direction = read_manifest(run_dir).get("config", {}).get("direction", "denoising")
    typer.echo(
        "accuracy on the pairs (95% Wilson intervals; clean: right verb for the clean sentence, both: for "
        "both sentences, direction: the score moves toward the right verb):"
    )
    typer.echo(_accuracy_rows(accuracy).to_string(index=False))
    if (run_dir / "control_accuracy.parquet").is_file():
        typer.echo("a randomly initialised copy of the model on the same pairs (the chance-level control):")
        typer.echo(_accuracy_rows(read_table(run_dir, "control_accuracy")).to_string(index=False))
    ok, verdict = able(accuracy)
    typer.echo(verdict)
    if not (run_dir / "position_effects.parquet").is_file():
        typer.echo(f"no pair enters the means: nothing was patched\nwrote {run_dir}")
        return
    effect = EFFECT.get(direction, "restored")
    typer.echo(DIRECTION_TEXT.get(direction, direction))
    positions = read_table(run_dir, "position_effects")
    positions = positions[positions["template"] == "all"].sort_values("restored", ascending=False).head(top)
    typer.echo(
        f"hidden states by layer (0 = embeddings, l = output of layer l) and token role (all templates), "
        f"top {top}: mean {effect} over pairs"
    )
    carries = ["carries"] if ok else []  # a model at chance carries nothing worth naming
    columns = ["layer", "role", "restored", "interval", "n_pairs", "pooled", *carries]
    typer.echo(_interval(positions)[columns].rename(columns={"restored": effect}).round(3).to_string(index=False))
    heads = read_table(run_dir, "head_effects").sort_values("restored", ascending=False).head(top)
    typer.echo(
        f"heads (transformer layers 1..L, heads 1..H; patched at every token), top {top}: mean {effect} over pairs"
    )
    columns = ["layer", "head", "restored", "interval", "n_pairs", "pooled", *carries]
    typer.echo(_interval(heads)[columns].rename(columns={"restored": effect}).round(3).to_string(index=False))
    typer.echo(f"wrote {run_dir}")


def register(app: typer.Typer) -> None:
    """``patch``."""

    @app.command("patch")
    def patch_cmd(
        clean: Optional[str] = typer.Option(None, "--clean", help="clean sentence with one [MASK] at the scored word"),
        corrupted: Optional[str] = typer.Option(
            None, "--corrupted", help="corrupted sentence, the same token length, [MASK] at the same token"
        ),
        target: Optional[str] = typer.Option(
            None, "--target", help="the word correct for the clean sentence (one token)"
        ),
        foil: Optional[str] = typer.Option(None, "--foil", help="the wrong word for the clean sentence (one token)"),
        model: Optional[str] = typer.Option(None, "--model", help=f"{MODEL_HELP}: a model with an MLM head"),
        position: Optional[int] = typer.Option(
            None, "--position", help="one pair only: patch heads at this token only (default: every token)"
        ),
        direction: Optional[str] = typer.Option(
            None,
            "--direction",
            help="denoising (default: a clean activation into the corrupted run, share restored) or noising "
            "(a corrupted activation into the clean run, share destroyed)",
        ),
        pairs: Optional[int] = typer.Option(None, "--pairs", help="study: how many minimal pairs to draw"),
        seed: Optional[int] = typer.Option(None, "--seed", help="study: the pairs drawn and the bootstrap"),
        top: int = typer.Option(10, "--top", min=1, help="rows printed per table (>= 1)"),
        out: Optional[Path] = typer.Option(
            None, "--out", help="study: results root (default results/); the run goes to OUT/patching/RUN-ID/"
        ),
        device: Optional[str] = typer.Option(None, "--device", help=DEVICE_HELP),
        force: bool = typer.Option(False, "--force", help="study: recompute even if a complete run exists"),
    ) -> None:
        """Activation patching: which hidden states (layer x position) and heads restore a clean
        sentence's masked-word score in a corrupted run. One pair (--clean --corrupted --target
        --foil), or the patching study's subject-verb agreement pairs."""
        from bertology.errors import ConfigError

        if direction is not None and direction not in EFFECT:
            raise ConfigError(f"--direction must be one of {', '.join(EFFECT)}, got {direction!r}")
        given = [clean, corrupted, target, foil]
        if any(v is not None for v in given):
            if any(v is None for v in given):
                missing = [name for name, v in zip(PAIR_OPTIONS, given) if v is None]
                raise ConfigError(f"one pair needs {', '.join(PAIR_OPTIONS)} together; missing {', '.join(missing)}")
            pair = (str(clean), str(corrupted), str(target), str(foil))
            _one_pair(
                model or "minilm-english-mlm", pair, position, top, check_device(device), direction or "denoising"
            )
            return
        from bertology.studies import run_study

        if position is not None:
            raise ConfigError(
                "--position patches one pair's heads at one token; the study patches every token (give a pair)"
            )
        if pairs is not None and pairs < 2:
            raise ConfigError(f"--pairs must be at least 2 (the study's means are over pairs), got {pairs}")
        given_overrides = {"model": model, "pairs": pairs, "direction": direction, "device": check_device(device)}
        overrides = {k: v for k, v in given_overrides.items() if v is not None}
        run_dir = run_study("patching", overrides=overrides, results_root=out, seed=seed, force=force, log=typer.echo)
        _print_study(run_dir, top)
