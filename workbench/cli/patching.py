"""``bertology patch``: activation patching (:mod:`bertology.probes.patching`). With ``--clean``,
``--corrupted``, ``--target`` and ``--foil`` it patches that one pair and prints the layers x
positions and heads that restore most of the score; without them it runs the ``patching`` study
(subject-verb agreement minimal pairs; options become config overrides, as for ``heads``) and prints
its means over pairs with their intervals."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from bertology.cli.core import DEVICE_HELP, check_device

PAIR_OPTIONS = ("--clean", "--corrupted", "--target", "--foil")


def _one_pair(model: str, pair: tuple[str, str, str, str], position: Optional[int], top: int, device: Optional[str]):
    """Patch one pair and print the ``top`` hidden states and heads by restored fraction."""
    from bertology.models import load_model
    from bertology.probes.patching import patch_heads, patch_hidden_states

    lm = load_model(model, attentions=False, mlm_head=True, device=device or "cpu")
    states = patch_hidden_states(lm, *pair)
    heads = patch_heads(lm, *pair, position=position)
    first = states.iloc[0]
    typer.echo(
        f"{lm.name}: score log P({pair[2]}) - log P({pair[3]}): clean {first['clean_score']:.3f}, "
        f"corrupted {first['corrupted_score']:.3f}"
    )
    typer.echo(f"hidden states (layer 0 = embeddings), top {top} by restored fraction:")
    shown = states.sort_values("restored", ascending=False).head(top)
    typer.echo(shown[["layer", "position", "token", "token_corrupted", "restored"]].round(3).to_string(index=False))
    where = "every position" if position is None else f"position {position}"
    typer.echo(f"heads (patched at {where}), top {top} by restored fraction:")
    shown = heads.sort_values("restored", ascending=False).head(top)
    typer.echo(shown[["layer", "head", "restored"]].round(3).to_string(index=False))


def _interval(df: Any) -> Any:
    return df.assign(interval=[f"[{lo:.2f}, {hi:.2f}]" for lo, hi in zip(df["low"], df["high"])])


def _print_study(run_dir: Path, top: int) -> None:
    from bertology.results import read_table

    accuracy = read_table(run_dir, "accuracy")
    typer.echo("accuracy on the pairs (Wilson intervals):")
    columns = ["template", "n_pairs", "n_used", "clean_accuracy", "both_accuracy", "direction_accuracy"]
    typer.echo(accuracy[columns].round(3).to_string(index=False))
    positions = read_table(run_dir, "position_effects")
    positions = positions[positions["template"] == "all"].sort_values("restored", ascending=False).head(top)
    typer.echo(f"hidden states by layer and token role (all templates), top {top}: mean restored over pairs")
    columns = ["layer", "role", "restored", "interval", "n_pairs", "pooled", "carries"]
    typer.echo(_interval(positions)[columns].round(3).to_string(index=False))
    heads = read_table(run_dir, "head_effects").sort_values("restored", ascending=False).head(top)
    typer.echo(f"heads (patched at every token), top {top}: mean restored over pairs")
    columns = ["layer", "head", "restored", "interval", "n_pairs", "pooled", "carries"]
    typer.echo(_interval(heads)[columns].round(3).to_string(index=False))
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
        model: Optional[str] = typer.Option(
            None, "--model", help="registry name or folder of a model with an MLM head"
        ),
        position: Optional[int] = typer.Option(
            None, "--position", help="one pair: patch heads at this token only (default: every token)"
        ),
        pairs: Optional[int] = typer.Option(None, "--pairs", help="study: how many minimal pairs to draw"),
        seed: Optional[int] = typer.Option(None, "--seed", help="study: the pairs drawn and the bootstrap"),
        top: int = typer.Option(10, "--top", help="rows printed per table"),
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

        given = [clean, corrupted, target, foil]
        if any(v is not None for v in given):
            if any(v is None for v in given):
                missing = [name for name, v in zip(PAIR_OPTIONS, given) if v is None]
                raise ConfigError(f"one pair needs {', '.join(PAIR_OPTIONS)} together; missing {', '.join(missing)}")
            pair = (str(clean), str(corrupted), str(target), str(foil))
            _one_pair(model or "minilm-english-mlm", pair, position, top, check_device(device))
            return
        from bertology.studies import run_study

        overrides = {k: v for k, v in {"model": model, "pairs": pairs, "device": check_device(device)}.items() if v}
        run_dir = run_study("patching", overrides=overrides, results_root=out, seed=seed, force=force, log=typer.echo)
        _print_study(run_dir, top)
