"""Compression of a fine-tuned model (issue 29), with planted answers: a finished fine-tune reloads to
the test accuracy it reported; a head made irrelevant by construction scores zero importance and is
pruned first; gates of all ones change nothing; the classifier's own loss and accuracy drive the
pruning curves (thresholds on dev, read on test, random orders with a t-interval); quantization of
the classifier gives float32 itself a difference of exactly 0, small differences at 8 bits and a
real int8 model that is smaller."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from bertology.errors import CheckpointError, ConfigError
from bertology.finetuning import FinetuneConfig, run_finetuning
from bertology.finetuning.finished import load_finished_finetune
from bertology.probes.heads.gates import head_shape
from bertology.probes.heads.importance import importance_scores
from bertology.probes.heads.pruning import classifier_loss, classifier_sentence_scores, classifier_task, removal_order
from bertology.studies import run_study
from bertology.testing import save_tiny_model_dir, write_planted_token_task


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    """A tiny random BERT, a planted token task (a word's label is the set it comes from; 120
    six-word sentences in 24 documents) and a full fine-tune of it (seed 0)."""
    root = tmp_path_factory.mktemp("compression")
    write_planted_token_task(root / "token.jsonl")
    model = save_tiny_model_dir("bert", root / "tiny-bert")
    run = run_finetuning(
        FinetuneConfig(
            run_name="ft",
            model=str(model),
            task=str(root / "token.jsonl"),
            batch_size=16,
            epochs=4,
            learning_rate=1e-3,
            warmup_fraction=0.0,
            max_seq_len=32,
            output_root=str(root / "models"),
            progress=False,
            device="cpu",
        )
    )
    return {"model": model, "token": root / "token.jsonl", "run": run, "root": root}


def test_a_finished_fine_tune_reloads_to_the_accuracy_it_reported(planted):
    finished = load_finished_finetune(planted["run"])
    correct, scored = classifier_sentence_scores(finished.model, None, finished.batches("test", batch_size=7))
    assert correct.sum() / scored.sum() == pytest.approx(finished.result["test_accuracy"], abs=1e-12)
    assert scored.sum() == finished.result["test_items"]
    assert finished.result["test_accuracy"] > 0.95  # the planted task is learnt
    ones = torch.ones(*head_shape(finished.model))
    assert np.array_equal(classifier_sentence_scores(finished.model, ones, finished.batches("test"))[0], correct)


def test_a_changed_task_file_is_refused_not_silently_rescored(planted, tmp_path):
    import shutil

    copy_run = tmp_path / "ft"
    shutil.copytree(planted["run"], copy_run)
    info = json.loads((copy_run / "run.json").read_text())
    info["task"]["n_test"] += 1
    (copy_run / "run.json").write_text(json.dumps(info))
    with pytest.raises(CheckpointError, match=r"run\.json.*differs.*n_test"):
        load_finished_finetune(copy_run)
    (copy_run / "run.json").write_text(json.dumps({k: v for k, v in info.items() if k != "result"}))
    with pytest.raises(CheckpointError, match="not a finished fine-tune"):
        load_finished_finetune(copy_run)


def test_a_head_made_irrelevant_is_unimportant_and_pruned_first(planted):
    finished = load_finished_finetune(planted["run"])
    model = finished.model
    layer, head = 1, 2
    block = model.bert.encoder.layer[layer].attention.output.dense
    width = block.in_features // head_shape(model)[1]
    with torch.no_grad():
        block.weight[:, head * width : (head + 1) * width] = 0.0  # the head's output never reaches the model
    task = classifier_task(
        model, finished.batches("train"), finished.batches("dev"), finished.batches("test"), "planted"
    )
    scores = importance_scores(model, task.train, classifier_loss, normalise=False)
    raw = scores.set_index(["layer", "head"])["importance_raw"]  # numbered from 1
    assert raw[(layer + 1, head + 1)] == 0.0 and (raw.drop((layer + 1, head + 1)) > 0).all()
    order = removal_order(model, "importance", [1, 4], batches=task.train, loss_fn=classifier_loss)
    assert order[0] == (layer, head)
    assert task.n_items["test"] == finished.result["test_items"]


def test_study_prunes_and_quantizes_the_fine_tuned_model(planted, tmp_path):
    config = {
        "finetune_run": str(planted["run"]),
        "methods": ["importance", "random"],
        "random_seeds": 3,
        "step": 0.25,
        "importance_examples": 32,
        "compare_shares": [0.5],
        "quantization": ["int8-dynamic", "simulated-8bit", "simulated-2bit"],
        "device": "cpu",
        "model": str(planted["model"]),
        "probe_sentences": 24,
    }
    run_dir = run_study("compression", overrides=config, results_root=tmp_path / "results", log=lambda _: None)
    table = lambda name: pd.read_parquet(run_dir / f"{name}.parquet")  # noqa: E731
    runs = table("finetune_run")
    assert runs["test_accuracy"].iloc[0] > 0.95
    curves = table("pruning_curves")
    full = curves[curves["n_pruned"] == 0]
    assert np.allclose(full["value"], runs["test_accuracy"].iloc[0])  # nothing removed = the fine-tune's test accuracy
    assert set(curves["method"]) == {"importance", "random"} and set(curves[curves.method == "random"]["seed"]) == {
        0,
        1,
        2,
    }
    summary = table("pruning_threshold_summary")
    random_rows = summary[summary["method"] == "random"]
    assert (random_rows["n_orders"] == 3).all() and (random_rows["low"] <= random_rows["removable_share"]).all()
    assert summary[summary["method"] == "importance"]["low"].isna().all()  # one order: no interval
    comparison = table("pruning_order_comparison")
    assert {"difference", "low", "high"} <= set(comparison.columns)
    quant = table("quantization_task").set_index("setting")
    assert quant.loc["float32", "difference"] == 0.0 and quant.loc["float32", "speedup"] == 1.0
    assert abs(quant.loc["simulated-8bit", "difference"]) <= 0.05
    assert np.isnan(quant.loc["simulated-2bit", "speedup"])  # simulated: no speed-up claimed
    assert quant.loc["simulated-2bit", "size_bytes"] < quant.loc["simulated-8bit", "size_bytes"]
    if not np.isnan(quant.loc["int8-dynamic", "accuracy"]):  # an int8 engine exists here
        assert quant.loc["int8-dynamic", "size_ratio"] < 1.0
    probing = table("quantization_probing")
    assert (
        set(probing["setting"]) == set(quant.index) and (probing[probing.setting == "float32"]["difference"] == 0).all()
    )
    assert probing.groupby("setting")["layer"].nunique().eq(3).all()  # embeddings + 2 layers
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["pruning_split"]["selected_on"] == "dev" and manifest["finetune"]["result"]["test_items"] > 0


def test_unknown_quantization_settings_are_refused(planted, tmp_path):
    with pytest.raises(ConfigError, match="quantization.*simulated-5bit"):
        run_study(
            "compression",
            overrides={"finetune_run": str(planted["run"]), "quantization": ["simulated-5bit"]},
            results_root=tmp_path / "results",
            log=lambda _: None,
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lottery_schedule": "chen"}, r"field 'lottery_schedule' must be one of chen2020, frankle_remaining"),
        ({"structured_bad": "worst"}, r"field 'structured_bad' must be one of random_complement, most_important"),
        ({"structured_random": "uniform"}, r"field 'structured_random' must be one of bernoulli, exact"),
        ({"structured_continue_phases": "yes"}, r"field 'structured_continue_phases' must be bool"),
        ({"lottery_rounds": 6, "lottery_prune_share": 0.2}, r"lottery_rounds x lottery_prune_share must be < 1"),
    ],
)
def test_lottery_and_structured_options_are_checked_naming_the_field(planted, tmp_path, overrides, message):
    """Unknown option values are refused before any work, naming the field; chen2020 refuses a
    schedule that would remove every weight (6 rounds of 20% of the original weights)."""
    with pytest.raises(ConfigError, match=message):
        run_study(
            "compression",
            overrides={"finetune_run": str(planted["run"]), **overrides},
            results_root=tmp_path / "results",
            log=lambda _: None,
        )
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.parquet"))


def test_study_fine_tunes_when_no_run_is_given(planted, tmp_path):
    config = {
        "model": str(planted["model"]),
        "task": str(planted["token"]),
        "epochs": 2,
        "batch_size": 16,
        "max_seq_len": 32,
        "methods": ["importance"],
        "step": 0.5,
        "quantization": [],
        "device": "cpu",
        "lottery_rounds": 1,
        "lottery_prune_share": 0.5,
    }
    run_dir = run_study("compression", overrides=config, results_root=tmp_path / "results", log=lambda _: None)
    runs = pd.read_parquet(run_dir / "finetune_run.parquet")
    assert (
        runs["run_dir"].iloc[0] == "finetunes/full-seed0"
        and (run_dir / "finetunes" / "full-seed0" / "run.json").is_file()
    )
    assert not (run_dir / "quantization_task.parquet").exists()
    assert (run_dir / "pruning_thresholds.parquet").is_file()
    lottery = pd.read_parquet(run_dir / "lottery_runs.parquet")
    assert lottery["kind"].tolist() == ["dense", "imp", "random"] and lottery["sparsity"].iloc[1] == pytest.approx(
        0.5, abs=1e-3
    )
    assert len(pd.read_parquet(run_dir / "lottery_comparison.parquet")) == 1
    # the study's own fine-tune was trained as the lottery's are: it is round 0, not trained twice
    assert lottery["run"].iloc[0] == str(run_dir / "finetunes" / "full-seed0")
    assert not (run_dir / "lottery" / "imp-round0").exists()


def test_structured_pruning_removes_planted_useless_components_first(planted):
    """A head whose output columns are zeroed and a feed-forward block whose output is zeroed score
    importance 0: the first step of the good sub-network removes both; the bad sub-networks (their
    code's random complement, and the most important components) keep them with as many removed."""
    from bertology.architectures import ffn_outputs
    from bertology.probes.heads.pruning import matched_components, structured_prune

    finished = load_finished_finetune(planted["run"])
    model = finished.model
    block = model.bert.encoder.layer[0].attention.output.dense
    width = block.in_features // head_shape(model)[1]
    with torch.no_grad():
        block.weight[:, 3 * width : 4 * width] = 0.0
        ffn = ffn_outputs(model)[1]
        ffn.weight.zero_()
        ffn.bias.zero_()
    task = classifier_task(
        model, finished.batches("train"), finished.batches("dev"), finished.batches("test"), "planted"
    )
    pruning = structured_prune(model, task, head_step=0.125, keep=0.999)  # one head and one block a step
    assert pruning.head_importance[0, 3] == 0.0 and pruning.ffn_importance[1] == 0.0
    assert pruning.heads[:1] == [(0, 3)] and pruning.ffn[:1] == [1]
    assert pruning.trace["dev_metric"].iloc[1] == pruning.trace["dev_metric"].iloc[0]  # removing them costs nothing
    assert pruning.trace["relative"].iloc[0] == 1.0 and not pruning.trace["kept"].iloc[-1]
    kept = pruning.trace[pruning.trace["kept"] & (pruning.trace["step"] > 0)]
    assert (kept["relative"] >= 0.999).all() and kept["heads_removed"].max() == len(pruning.heads)
    assert (pruning.trace[~pruning.trace["kept"]]["relative"] < 0.999).all()  # every undone step fell below
    for rule in ("random_complement", "most_important"):
        bad_heads, bad_ffn = matched_components(pruning, "bad", bad=rule, seed=2)
        assert (0, 3) not in bad_heads and 1 not in bad_ffn, rule
        assert len(bad_heads) == len(pruning.heads) and len(bad_ffn) == len(pruning.ffn), rule
    random_heads, random_ffn = matched_components(pruning, "random", random="exact", seed=1)
    assert len(random_heads) == len(pruning.heads) and len(random_ffn) == len(pruning.ffn)


def test_structured_masks_switch_components_off_like_gates(planted):
    """A structured mask applied to the weights gives the same outputs as gates at 0 on the same
    heads and feed-forward blocks."""
    from bertology.finetuning.masks import apply_weight_masks, structured_masks
    from bertology.probes.heads.gates import FFNGates, HeadGates, gates_from_heads

    finished = load_finished_finetune(planted["run"])
    batch = finished.batches("test")[0]
    model = finished.model
    heads, ffn = [(0, 1), (1, 3)], [0]
    with torch.no_grad():
        with HeadGates(model, gates_from_heads(model, heads)), FFNGates(model, torch.tensor([0.0, 1.0])):
            gated = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
        apply_weight_masks(model, structured_masks(model, heads, ffn))
        masked = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    assert torch.allclose(gated, masked, atol=1e-5)


def test_study_retrains_structured_subnetworks_and_counts_survivors(planted, tmp_path):
    config = {
        "model": str(planted["model"]),
        "task": str(planted["token"]),
        "epochs": 2,
        "batch_size": 16,
        "max_seq_len": 32,
        "methods": ["importance"],
        "step": 0.25,
        "quantization": [],
        "device": "cpu",
        "structured_seeds": [0, 1],
        "structured_keep": 0.9,
        "structured_head_step": 0.25,
    }
    run_dir = run_study("compression", overrides=config, results_root=tmp_path / "results", log=lambda _: None)
    subnetworks = pd.read_parquet(run_dir / "structured_subnetworks.parquet")
    assert sorted(subnetworks["kind"].unique()) == ["bad", "dense", "good", "random"]
    dense = subnetworks[subnetworks.kind == "dense"].set_index("seed")["run"]
    assert dense[0] == "finetunes/full-seed0" and dense[1] == "structured/dense-seed1"  # the study's run is seed 0's
    for _, group in subnetworks[subnetworks.kind.isin(["good", "bad"])].groupby("seed"):
        assert group["heads_removed"].nunique() == 1 and group["ffn_removed"].nunique() == 1  # same size
    # the options are recorded in the table: their code's choices by default
    assert (subnetworks["bad_subnetwork"] == "random_complement").all() and (
        subnetworks["random_mask"] == "bernoulli"
    ).all()
    assert subnetworks["normalise_per_layer"].all() and subnetworks["continue_phases"].all()
    trace = pd.read_parquet(run_dir / "structured_trace.parquet")
    assert set(trace["phase"]) <= {"start", "joint", "heads", "ffn"} and "joint" in set(trace["phase"])
    comparison = pd.read_parquet(run_dir / "structured_comparison.parquet")
    assert sorted(comparison["comparison"].unique()) == ["good - bad", "good - random"] and len(comparison) == 4
    survivors = pd.read_parquet(run_dir / "structured_survivors.parquet")
    assert len(survivors[survivors.component == "head"]) == 2 * 4 and len(survivors[survivors.component == "ffn"]) == 2
    assert (survivors["n_seeds"] == 2).all()
    assert (survivors["super_survivor"] == (survivors["seeds_surviving"] == 2)).all()
