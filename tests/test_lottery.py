"""Magnitude lottery tickets (issue 29, item 3) with known answers: magnitude masks remove exactly
the smallest weights (globally, the requested count, nested across rounds); random masks remove the
same count; a masked fine-tune keeps every removed weight at exactly 0 while the rest trains; Chen et
al.'s schedule removes 10% of the original prunable weights (the pooler's included) a round, so the
sparsity after round r is r x 10%, and IMP with rewinding reaches it and is compared, paired, with
random masks of the same sparsity; a broken mask file is refused naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertology.errors import ConfigError
from bertology.finetuning import FinetuneConfig, run_finetuning
from bertology.finetuning.heads import load_classifier
from bertology.finetuning.lottery import magnitude_lottery, round_shares, training_differences
from bertology.finetuning.masks import (
    apply_weight_masks,
    load_masks,
    magnitude_masks,
    mask_sparsity,
    pooler_weight_names,
    prunable_weight_names,
    random_masks,
    random_masks_like,
    save_masks,
    weight_sparsity,
)
from bertology.testing import save_tiny_model_dir, write_planted_token_task


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    """A tiny random BERT and a planted token task (a word's label is the set it comes from)."""
    root = tmp_path_factory.mktemp("lottery")
    write_planted_token_task(root / "token.jsonl")
    return {"model": save_tiny_model_dir("bert", root / "tiny-bert"), "token": root / "token.jsonl", "root": root}


def _classifier(planted):
    return load_classifier(planted["model"], "token", ["A", "B"])


def _cfg(planted, tmp_path, **kw) -> FinetuneConfig:
    base = dict(
        run_name="ft",
        model=str(planted["model"]),
        task=str(planted["token"]),
        batch_size=16,
        epochs=3,
        learning_rate=1e-3,
        warmup_fraction=0.0,
        max_seq_len=32,
        output_root=str(tmp_path / "models"),
        progress=False,
        device="cpu",
    )
    return FinetuneConfig(**{**base, **kw})


def test_magnitude_masks_remove_exactly_the_smallest_weights_and_nest(planted):
    model = _classifier(planted)
    names = prunable_weight_names(model)
    assert names and all(".encoder.layer." in n and n.endswith(".weight") for n in names)
    assert not any("embeddings" in n or "classifier" in n for n in names)
    params = dict(model.named_parameters())
    planted_small = (names[0], (0, 0)), (names[-1], (1, 2))
    with torch.no_grad():
        for name, index in planted_small:
            params[name][index] = 1e-9  # the smallest magnitudes by construction
    total = sum(params[n].numel() for n in names)
    first = magnitude_masks(model, 0.2)
    assert sum(int((~m).sum()) for m in first.values()) == round(0.2 * total)
    assert all(not bool(first[name][index]) for name, index in planted_small)
    removed = torch.cat([params[n].detach().abs().flatten()[~first[n].flatten()] for n in names])
    kept = torch.cat([params[n].detach().abs().flatten()[first[n].flatten()] for n in names])
    assert removed.max() <= kept.min()  # global: every removed weight is smaller than every kept one
    second = magnitude_masks(model, 0.5, first)
    assert mask_sparsity(second) == pytest.approx(1 - 0.8 * 0.5, abs=1 / total)
    assert all(bool((second[n] <= first[n]).all()) for n in names)  # nested: once removed, always removed
    rand = random_masks(model, mask_sparsity(second), seed=3)
    assert sum(int((~m).sum()) for m in rand.values()) == sum(int((~m).sum()) for m in second.values())
    again = random_masks(model, mask_sparsity(second), seed=3)
    assert all(torch.equal(rand[n], again[n]) for n in names)


def test_a_mask_of_all_ones_changes_nothing(planted):
    model = _classifier(planted).eval()
    ids = torch.tensor([[2, 5, 6, 7, 3]])
    before = model(input_ids=ids).logits
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    ones = {n: torch.ones_like(weights[n], dtype=torch.bool) for n in prunable_weight_names(model)}
    assert mask_sparsity(ones) == 0.0
    apply_weight_masks(model, ones)
    assert all(torch.equal(p, weights[n]) for n, p in model.named_parameters())
    assert torch.equal(model(input_ids=ids).logits, before)


def test_per_matrix_magnitude_masks_remove_the_share_of_every_matrix(planted):
    model = _classifier(planted)
    names = prunable_weight_names(model)
    params = dict(model.named_parameters())
    with torch.no_grad():
        params[names[0]].mul_(1e-3)  # one matrix of tiny weights: global pruning would take it first
    global_ = magnitude_masks(model, 0.2)
    assert mask_sparsity({names[0]: global_[names[0]]}) > 0.9
    first = magnitude_masks(model, 0.2, scope="per_matrix")
    second = magnitude_masks(model, 0.5, first, scope="per_matrix")
    for name in names:
        w, numel = params[name].detach().abs(), params[name].numel()
        assert int((~first[name]).sum()) == round(0.2 * numel)  # the share of this matrix, not of all
        assert w[~first[name]].max() <= w[first[name]].min()  # its own smallest weights
        assert int((~second[name]).sum()) == round(0.2 * numel) + round(0.5 * int(first[name].sum()))
        assert bool((second[name] <= first[name]).all())  # nested
    like = random_masks_like(second, seed=4)
    assert all(int(like[n].sum()) == int(second[n].sum()) for n in names)  # the same count in every matrix
    assert not all(torch.equal(like[n], second[n]) for n in names)
    assert all(torch.equal(like[n], random_masks_like(second, seed=4)[n]) for n in names)
    with pytest.raises(ConfigError, match="scope"):
        magnitude_masks(model, 0.2, scope="layer")


def test_a_masked_fine_tune_keeps_removed_weights_at_zero(planted, tmp_path):
    model = _classifier(planted)
    masks = random_masks(model, 0.6, seed=1)
    path = tmp_path / "mask.safetensors"
    save_masks(masks, path)
    run = run_finetuning(_cfg(planted, tmp_path, weight_mask=str(path)))
    info = json.loads((run / "run.json").read_text())
    assert info["weight_mask"]["sparsity"] == pytest.approx(0.6, abs=1e-3)
    (checkpoint,) = [p for p in run.iterdir() if p.name.startswith("checkpoint-")]
    trained = load_file(str(checkpoint / "model.safetensors"))
    pretrained = dict(_classifier(planted).named_parameters())
    for name, keep in masks.items():
        assert bool((trained[name][~keep] == 0).all()), name
        assert not torch.equal(trained[name][keep], pretrained[name].detach()[keep]), name  # the rest trained
    pooler = any("pooler" in name for name in masks)
    where = "the encoder and the pooler" if pooler else "the encoder"
    assert info["weight_mask"]["matrices"] == len(masks) and info["weight_mask"]["pooler"] is pooler
    card = (checkpoint / "README.md").read_text()
    assert f"60.0% of the {len(masks)} masked weight matrices ({where}) removed" in card
    assert info["result"]["test_accuracy"] > 0.9  # the planted task survives 60% random sparsity


def test_chen2020_removes_a_tenth_of_the_original_weights_a_round_pooler_included(planted):
    """Chen et al.'s LT_glue.py calls ``pruning_model(model, 1/(10-pruning_step))``: torch's global
    L1Unstructured removes round(amount x unpruned) weights, i.e. 10% of the original ones a round."""
    assert round_shares("chen2020", 0.1, 3) == pytest.approx([1 / 10, 1 / 9, 1 / 8])
    assert round_shares("frankle_remaining", 0.2, 3) == [0.2, 0.2, 0.2]
    model = load_classifier(planted["model"], "sentence", ["A", "B"])  # a sentence classifier has a pooler
    assert pooler_weight_names(model) == ["bert.pooler.dense.weight"]
    assert pooler_weight_names(_classifier(planted)) == []  # a token classifier has none
    params = dict(model.named_parameters())
    names = prunable_weight_names(model, include_pooler=True)
    total = sum(params[n].numel() for n in names)
    masks, left = None, total
    for r, share in enumerate(round_shares("chen2020", 0.1, 9), start=1):
        masks = magnitude_masks(model, share, masks, include_pooler=True)
        left -= round(share * left)  # torch's count: round(amount x unpruned entries)
        removed = sum(int((~m).sum()) for m in masks.values())
        assert removed == total - left
        # each round's count is rounded to a whole weight (at most half a weight off), so after r
        # rounds the total is within r / 2 weights of r x 10% of the original
        assert abs(removed - 0.1 * r * total) <= 0.5 * r
    assert "bert.pooler.dense.weight" in masks and not bool(masks["bert.pooler.dense.weight"].all())
    assert weight_sparsity(model, masks) == pytest.approx(0.9, abs=1 / total)  # counted over the pooler too
    rand = random_masks(model, 0.3, seed=0, include_pooler=True)
    assert set(rand) == set(names) and sum(int((~m).sum()) for m in rand.values()) == round(0.3 * total)
    with pytest.raises(ConfigError, match="rounds x prune_share must be < 1"):
        round_shares("chen2020", 0.1, 10)
    with pytest.raises(ConfigError, match="schedule must be one of chen2020, frankle_remaining"):
        round_shares("chen", 0.1, 2)


def test_a_mask_naming_the_pooler_loads_and_counts(planted, tmp_path):
    model = load_classifier(planted["model"], "sentence", ["A", "B"])
    masks = magnitude_masks(model, 0.5, include_pooler=True)
    save_masks(masks, tmp_path / "pooler.safetensors")
    loaded = load_masks(tmp_path / "pooler.safetensors", model)
    assert set(loaded) == set(masks) and all(torch.equal(loaded[n], masks[n]) for n in masks)
    assert weight_sparsity(model, loaded) == pytest.approx(0.5, abs=1e-4)


def test_imp_with_rewinding_reaches_its_sparsity_and_is_compared_with_random(planted, tmp_path):
    runs, comparisons = magnitude_lottery(_cfg(planted, tmp_path), tmp_path / "lottery", rounds=2, prune_share=0.25)
    assert runs[["kind", "round"]].values.tolist() == [
        ["dense", 0],
        ["imp", 1],
        ["random", 1],
        ["imp", 2],
        ["random", 2],
    ]
    # chen2020 (the default): 25% of the original weights a round -> 25%, 50% (not 1 - 0.75^2 = 43.75%)
    n = int(runs["prunable_weights"].iloc[0])
    assert runs["sparsity"].tolist() == pytest.approx([0.0, 0.25, 0.25, 0.5, 0.5], abs=1 / n)
    assert (runs["schedule"] == "chen2020").all() and not runs["pooler_pruned"].any()  # a token task: no pooler
    first, second = (load_file(str(tmp_path / "lottery" / "masks" / f"imp-round{r}.safetensors")) for r in (1, 2))
    assert all(bool((second[n] <= first[n]).all()) for n in first)
    assert comparisons["round"].tolist() == [1, 2]
    assert (
        (comparisons["low"] <= comparisons["difference"]) & (comparisons["difference"] <= comparisons["high"])
    ).all()
    assert (runs["test_low"] <= runs["test_accuracy"]).all()
    # a finished lottery is reused, not retrained
    again, _ = magnitude_lottery(_cfg(planted, tmp_path), tmp_path / "lottery", rounds=2, prune_share=0.25)
    assert again["test_accuracy"].tolist() == runs["test_accuracy"].tolist()


def test_broken_mask_files_are_refused_naming_them(planted, tmp_path):
    model = _classifier(planted)
    name = prunable_weight_names(model)[0]
    shape = tuple(dict(model.named_parameters())[name].shape)
    cases = {
        "other.safetensors": {"bert.embeddings.word_embeddings.weight": torch.ones(2, 2, dtype=torch.uint8)},
        "shape.safetensors": {name: torch.ones(3, dtype=torch.uint8)},
        "values.safetensors": {name: torch.full(shape, 2, dtype=torch.uint8)},
    }
    for file, tensors in cases.items():
        save_file(tensors, str(tmp_path / file))
        with pytest.raises(ConfigError, match=file):
            load_masks(tmp_path / file, model)
    with pytest.raises(ConfigError, match="does not exist"):
        load_masks(tmp_path / "missing.safetensors", model)
    with pytest.raises(ConfigError, match="rounds"):
        magnitude_lottery(_cfg(planted, tmp_path), tmp_path / "x", rounds=0)
    with pytest.raises(ConfigError, match="scope"):
        magnitude_lottery(_cfg(planted, tmp_path), tmp_path / "x", rounds=1, scope="per_layer")
    finished = run_finetuning(_cfg(planted, tmp_path, run_name="dense", epochs=1))
    assert training_differences(_cfg(planted, tmp_path, epochs=1), finished) == []
    assert training_differences(_cfg(planted, tmp_path, epochs=2, seed=3), finished) == ["epochs", "seed"]
    with pytest.raises(ConfigError, match="epochs.*differ"):
        magnitude_lottery(_cfg(planted, tmp_path), tmp_path / "x", rounds=1, dense_run=finished)


def test_the_compression_page_says_which_schedule_made_the_curve():
    import pandas as pd

    from bertology.apps.pages.compression import lottery_schedule_note, structured_note

    runs = pd.DataFrame(
        {
            "round": [0, 1, 1, 2, 2],
            "kind": ["dense", "imp", "random", "imp", "random"],
            "sparsity": [0.0, 0.1, 0.1, 0.2, 0.2],
            "schedule": "chen2020",
            "prunable_weights": 17408,
            "pooler_pruned": True,
        }
    )
    note = lottery_schedule_note(runs)
    assert "chen2020" in note and "10% of the original prunable weights" in note
    assert "17,408 weights of the encoder's weight matrices and the pooler's" in note
    old = lottery_schedule_note(runs.drop(columns=["schedule", "prunable_weights", "pooler_pruned"]))
    assert "not recorded" in old and "20%" in old
    frankle = runs.assign(schedule="frankle_remaining", pooler_pruned=False, sparsity=[0, 0.2, 0.2, 0.36, 0.36])
    assert "20% of the prunable weights still kept" in lottery_schedule_note(frankle)
    assert "(the pooler not pruned)" in lottery_schedule_note(frankle)
    subnetworks = pd.DataFrame(
        {"kind": ["good"], "bad_subnetwork": "random_complement", "random_mask": "bernoulli", "continue_phases": True}
    )
    assert "removes as many of good's survivors" in structured_note(subnetworks)
    assert "its size varies" in structured_note(subnetworks) and "then heads only" in structured_note(subnetworks)
    assert "most important" in structured_note(subnetworks[["kind"]])  # a run made before the options
