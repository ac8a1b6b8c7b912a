"""Magnitude lottery tickets of a pre-trained encoder (Frankle & Carbin 2019; Chen et al. 2020, "The
Lottery Ticket Hypothesis for Pre-trained BERT Networks"): iterative magnitude pruning (IMP) with
rewinding to the pre-trained weights, against random pruning at the same sparsity.

Round 0 fine-tunes the dense model. Round r removes weights with the smallest magnitude *after*
round r-1's fine-tune among those round r-1's ticket still had (global over the prunable matrices,
:func:`bertology.finetuning.masks.magnitude_masks`), then fine-tunes again from the *pre-trained*
weights with that mask (rewinding: every fine-tune starts from the config's model). How many, the
``schedule`` (:data:`LOTTERY_SCHEDULES`, :func:`round_shares`):

- ``chen2020`` (the default; Chen et al.'s released ``LT_glue.py``): ``prune_share`` (0.1) of the
  *original* prunable weights each round -- round r removes ``prune_share / (1 - (r-1) prune_share)``
  of those left, so the sparsity after r rounds is ``r x prune_share`` (10%, 20%, ... 90%) -- with the
  pooler's weight matrix prunable beside the encoder's, as theirs is (a token classifier has none);
- ``frankle_remaining`` (the workbench's earlier schedule): ``prune_share`` of the weights still kept
  each round, encoder layers only: sparsity ``1 - (1 - prune_share)^r`` (0.2: 20%, 36%, 49%, ... 74%).

``scope="per_matrix"`` removes that share of each matrix instead (layer-wise pruning;
docs/METHODS.md). Beside each round a random mask of the same sparsity over the same prunable
weights is fine-tuned the same way (:func:`~bertology.finetuning.masks.random_masks`, seed = the
config's; for a per-matrix ticket, as many weights removed in each matrix as the ticket removes
there). Every run uses the same split, head initialisation and data order (the config's seed), so the
test examples are the same and a ticket and its random baseline are compared paired on them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from bertology import paths
from bertology.errors import ConfigError
from bertology.finetuning.config import FinetuneConfig
from bertology.finetuning.masks import (
    MAGNITUDE_SCOPES,
    magnitude_masks,
    mask_sparsity,
    random_masks,
    random_masks_like,
    save_masks,
)
from bertology.uncertainty import is_small_sample, paired_bootstrap

__all__ = [
    "magnitude_lottery",
    "round_shares",
    "training_differences",
    "LOTTERY_SCHEDULES",
    "LOTTERY_COLUMNS",
    "COMPARISON_COLUMNS",
]

LOTTERY_SCHEDULES = ("chen2020", "frankle_remaining")
POOLER_PRUNED = {"chen2020": True, "frankle_remaining": False}  # does the schedule prune the pooler's weights

LOTTERY_COLUMNS = [
    "round",
    "kind",
    "sparsity",
    "schedule",
    "prunable_weights",
    "pooler_pruned",
    "test_accuracy",
    "test_low",
    "test_high",
    "dev_accuracy",
    "best_step",
    "test_items",
    "run",
]
COMPARISON_COLUMNS = [
    "round",
    "sparsity",
    "difference",
    "low",
    "high",
    "p_value",
    "n_examples",
    "n_items",
    "small_sample",
    "comparison",
]


def magnitude_lottery(
    config: FinetuneConfig,
    root: Path,
    *,
    rounds: int,
    prune_share: float = 0.1,
    schedule: str = "chen2020",
    scope: str = "global",
    random_baseline: bool = True,
    dense_run: Path | None = None,
    log: Callable[[str], None] = lambda _m: None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """IMP with rewinding for ``rounds`` rounds (see the module docstring), every fine-tune a run under
    ``root`` (``imp-round<r>``, ``random-round<r>``; a finished run is reused, a killed one resumes).
    ``dense_run``: a finished fine-tune trained exactly as ``config`` (the same fields but its name and
    folder; ``ConfigError`` naming those that differ) serves as round 0 instead of training it again.
    ``schedule`` and ``prune_share``: how many weights each round removes (:func:`round_shares`).

    Returns ``(runs, comparisons)``: :data:`LOTTERY_COLUMNS` per run (``kind``: dense, imp, random;
    ``sparsity``: share of the ``prunable_weights`` removed; ``schedule``, ``pooler_pruned``: what the
    masks range over; test accuracy with the run's bootstrap interval) and :data:`COMPARISON_COLUMNS`
    per round (the ticket minus the random mask of the same sparsity, paired bootstrap over the same
    test examples)."""
    from bertology.finetuning.finished import load_finished_finetune
    from bertology.finetuning.trainer import read_test_predictions, run_finetuning

    shares = round_shares(schedule, prune_share, rounds)
    if scope not in MAGNITUDE_SCOPES:
        raise ConfigError(f"magnitude_lottery: scope must be one of {MAGNITUDE_SCOPES}, not {scope!r}")
    if config.mode != "full":
        raise ConfigError(f"magnitude_lottery: tickets are found by full fine-tuning, not mode {config.mode!r}")
    root = Path(root)

    def fine_tune(name: str, mask: Path | None) -> Path:
        log(f"    fine-tuning {name}")
        return run_finetuning(
            dataclasses.replace(config, run_name=name, output_root=str(root), weight_mask=str(mask) if mask else None)
        )

    if dense_run is not None:
        differ = training_differences(config, Path(dense_run))
        if differ:
            raise ConfigError(
                f"{dense_run}: not trained as the lottery's config ({', '.join(differ)} differ); "
                "leave dense_run out to fine-tune round 0 here"
            )
    runs = [("dense", 0, 0.0, Path(dense_run) if dense_run is not None else fine_tune("imp-round0", None))]
    masks = None
    previous = runs[0][3]
    pooler = POOLER_PRUNED[schedule]
    prunable = {"schedule": schedule, "prunable_weights": 0, "pooler_pruned": False}
    for r, share in enumerate(shares, start=1):
        trained = load_finished_finetune(previous).model
        masks = magnitude_masks(trained, share, masks, scope=scope, include_pooler=pooler)
        sparsity = mask_sparsity(masks)
        prunable |= _prunable(trained, schedule)
        path = root / "masks" / f"imp-round{r}.safetensors"
        if not path.is_file():
            save_masks(masks, path)
        previous = fine_tune(f"imp-round{r}", path)
        runs.append(("imp", r, sparsity, previous))
        if random_baseline:
            random_path = root / "masks" / f"random-round{r}.safetensors"
            if not random_path.is_file():
                baseline_masks = (
                    random_masks_like(masks, seed=config.seed)
                    if scope == "per_matrix"
                    else random_masks(trained, sparsity, seed=config.seed, include_pooler=pooler)
                )
                save_masks(baseline_masks, random_path)
            runs.append(("random", r, sparsity, fine_tune(f"random-round{r}", random_path)))
    table = pd.DataFrame([_row(kind, r, sparsity, run_dir, root) | prunable for kind, r, sparsity, run_dir in runs])
    comparisons = []
    by_round = {(row.kind, row.round): root / row.run for row in table.itertuples()}
    for r in range(1, rounds + 1):
        if ("random", r) not in by_round:
            continue
        ticket, baseline = read_test_predictions(by_round[("imp", r)]), read_test_predictions(by_round[("random", r)])
        diff = paired_bootstrap(
            ticket["correct"], baseline["correct"], ticket["scored"], baseline["scored"], seed=config.seed
        )
        n_items = int(sum(ticket["scored"]))
        comparisons.append(
            {
                "round": r,
                "sparsity": float(table[(table["kind"] == "imp") & (table["round"] == r)]["sparsity"].iloc[0]),
                "difference": diff.difference,
                "low": diff.low,
                "high": diff.high,
                "p_value": diff.p_value,
                "n_examples": len(ticket["correct"]),
                "n_items": n_items,
                "small_sample": is_small_sample(n_items),
                "comparison": "imp - random (same sparsity)",
            }
        )
    return table[LOTTERY_COLUMNS], pd.DataFrame(comparisons, columns=COMPARISON_COLUMNS)


def round_shares(schedule: str, prune_share: float, rounds: int) -> list[float]:
    """The share of the *still kept* prunable weights each round removes, rounds 1..``rounds``:
    ``chen2020`` -- ``prune_share`` of the original weights a round, i.e. ``prune_share / (1 - (r-1)
    prune_share)`` of those left (Chen et al.'s ``pruning_model(model, 1/(10-pruning_step))`` for 0.1);
    ``frankle_remaining`` -- ``prune_share`` every round. ``ConfigError`` naming the field for an
    unknown schedule, a share outside (0, 1), no rounds, or a chen2020 schedule that would remove
    every weight (``rounds x prune_share >= 1``)."""
    if schedule not in LOTTERY_SCHEDULES:
        raise ConfigError(
            f"magnitude_lottery: schedule must be one of {', '.join(LOTTERY_SCHEDULES)}, not {schedule!r}"
        )
    if rounds < 1:
        raise ConfigError(f"magnitude_lottery: rounds must be >= 1, not {rounds!r}")
    if not 0 < prune_share < 1:
        raise ConfigError(f"magnitude_lottery: prune_share must be in (0, 1), not {prune_share!r}")
    if schedule == "frankle_remaining":
        return [prune_share] * rounds
    if rounds * prune_share >= 1 - 1e-9:
        raise ConfigError(
            f"magnitude_lottery: schedule chen2020 removes prune_share={prune_share} of the original weights "
            f"every round, so rounds={rounds} would remove them all; rounds x prune_share must be < 1"
        )
    return [prune_share / (1 - (r - 1) * prune_share) for r in range(1, rounds + 1)]


def _prunable(model: Any, schedule: str) -> dict[str, Any]:
    """How many weights the schedule's masks range over, and whether the pooler's are among them."""
    from bertology.finetuning.masks import pooler_weight_names, prunable_weight_names

    pooler = POOLER_PRUNED[schedule]
    params = dict(model.named_parameters())
    names = prunable_weight_names(model, include_pooler=pooler)
    return {
        "prunable_weights": int(sum(params[n].numel() for n in names)),
        "pooler_pruned": bool(pooler and pooler_weight_names(model)),
    }


def training_differences(config: FinetuneConfig, run_dir: Path) -> list[str]:
    """The fields of ``config`` that the finished fine-tune in ``run_dir`` was trained with differently
    (its name, folder and runtime fields aside): empty when it is the run ``config`` would make."""
    from bertology.finetuning.trainer import config_differences

    return config_differences(config, run_dir, ignore=frozenset({"run_name"}))


def _row(kind: str, round_: int, sparsity: float, run_dir: Path, root: Path) -> dict[str, Any]:
    result = json.loads((run_dir / "run.json").read_text())["result"]
    return {
        "round": round_,
        "kind": kind,
        "sparsity": sparsity,
        "test_accuracy": result["test_accuracy"],
        "test_low": result["test_low"],
        "test_high": result["test_high"],
        "dev_accuracy": result["dev_accuracy"],
        "best_step": result["best_step"],
        "test_items": result["test_items"],
        "run": paths.relative_if_inside(run_dir, root),
    }
