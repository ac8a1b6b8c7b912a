"""Progress bars of the long steps (issue 53 item 3): activation patching (per pair, and per site
over a single pair's forwards), integrated gradients (per path point), pruning curves (per point),
L0 gates and alignment self-learning (per step / iteration). With the one switch on, a tiny run
writes a tqdm bar to standard error; off (``set_progress(False)``, ``BERTOLOGY_PROGRESS=0``), nothing;
the numbers are the same either way."""

from __future__ import annotations

import numpy as np
import pytest

from bertology.models import from_modules
from bertology.progress import progress_bar, set_progress
from bertology.testing import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLEAN, CORRUPTED = "the dog [MASK] here .", "the dogs [MASK] here ."
ROLES = ("CLS", "det", "subject", "verb", "other", "other", "SEP")


@pytest.fixture
def switch(monkeypatch):
    """``switch(True/False)`` sets the one switch; the process's setting is restored afterwards."""
    monkeypatch.delenv("BERTOLOGY_PROGRESS", raising=False)
    yield set_progress
    set_progress(None)


@pytest.fixture(scope="module")
def mlm():
    return from_modules("tiny-mlm", tiny_model("bert", mlm=True), tiny_tokenizer("bert"))


def _pairs(n: int):
    from bertology.probes.patching.minimal_pairs import AgreementPair

    return [
        AgreementPair(i, "pp", "is/are", CLEAN, CORRUPTED, "is", "are", "sg", "sg", "match", ROLES) for i in range(n)
    ]


def _patch_pairs(lm):
    from bertology.probes.patching.analysis import patch_pairs

    cfg = {"use_pairs": "all", "min_difference": -1e9, "batch_rows": 64, "direction": "denoising"}
    return patch_pairs(lm, _pairs(2), cfg, log=lambda m: None)


def test_patching_shows_a_bar_per_pair_only_when_the_switch_is_on(mlm, switch, capsys):
    switch(True)
    on = _patch_pairs(mlm)
    err = capsys.readouterr().err
    assert "patching" in err and "pair" in err
    switch(False)
    off = _patch_pairs(mlm)
    assert capsys.readouterr().err == ""
    assert on["pair_positions"]["score"].tolist() == off["pair_positions"]["score"].tolist()


def test_one_pair_shows_a_bar_over_its_sites_when_they_take_several_forwards(mlm, switch, capsys):
    from bertology.probes.patching import patch_heads, patch_hidden_states

    switch(True)
    states = patch_hidden_states(mlm, CLEAN, CORRUPTED, "is", "are", batch_rows=2)
    heads = patch_heads(mlm, CLEAN, CORRUPTED, "is", "are", batch_rows=2)
    err = capsys.readouterr().err
    assert "patching hidden states" in err and "patching heads" in err and "site" in err
    patch_heads(mlm, CLEAN, CORRUPTED, "is", "are")  # one forward for every head: no bar
    assert capsys.readouterr().err == ""
    switch(False)
    assert patch_hidden_states(mlm, CLEAN, CORRUPTED, "is", "are", batch_rows=2)["score"].tolist() == (
        states["score"].tolist()
    )
    assert patch_heads(mlm, CLEAN, CORRUPTED, "is", "are", batch_rows=2)["score"].tolist() == heads["score"].tolist()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("internal_batch_size, batches", [(None, 1), (3, 3)])
def test_integrated_gradients_show_a_bar_and_the_same_numbers(
    mlm, switch, capsys, monkeypatch, internal_batch_size, batches
):
    """A bar over Captum's forwards: the path's batches and the two end points, every one counted."""
    import bertology.attribution as attribution
    from bertology.attribution import masked_word_attribution

    bars = []

    def recorded(*args, **kwargs):
        bars.append(made := progress_bar(*args, **kwargs))
        return made

    monkeypatch.setattr(attribution, "progress_bar", recorded)
    words = ["the", "dog", "is", "here", "."]

    def run():
        return masked_word_attribution(
            mlm, words, 2, "is", methods="ig", n_steps=7, internal_batch_size=internal_batch_size
        )

    switch(True)
    on = run()
    assert "integrated gradients" in capsys.readouterr().err
    assert bars[-1].total == batches + 2 and bars[-1].n == bars[-1].total  # 7 points: ceil(7 / size) batches
    switch(False)
    off = run()
    assert capsys.readouterr().err == ""
    assert on.token_scores["score"].tolist() == off.token_scores["score"].tolist() and on.delta == off.delta


def test_the_environment_variable_turns_the_bars_off(mlm, switch, capsys, monkeypatch):
    switch(None)
    monkeypatch.setenv("BERTOLOGY_PROGRESS", "0")
    _patch_pairs(mlm)
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("BERTOLOGY_PROGRESS", "1")
    _patch_pairs(mlm)
    assert "patching" in capsys.readouterr().err


def test_pruning_curves_and_l0_gates_show_bars(switch, capsys):
    import torch

    from bertology.probes.heads.pruning import pruning_curve, train_l0_gates

    model = tiny_model("bert", layers=2, heads=2)
    batch = {"input_ids": torch.tensor([[2, 5, 6, 7, 3]]), "attention_mask": torch.ones(1, 5, dtype=torch.long)}

    def loss_fn(m, b):
        return m(**b).last_hidden_state.pow(2).mean(dim=(1, 2))

    def metric(m, gates):
        return float(gates.sum())  # the heads still open: a planted curve

    switch(True)
    curve = pruning_curve(model, metric, method="random", step=0.25, seeds=(0,), refine="all")
    gates = train_l0_gates(model, [batch], loss_fn, lam=0.1, steps=3, seed=0)
    err = capsys.readouterr().err
    assert "pruning curve (random)" in err and "point" in err and "L0 gates" in err
    assert curve["metric"].tolist() == [4.0 - n for n in curve["n_pruned"]]  # every point, refinement too
    assert len(gates) == 4
    by_importance = pruning_curve(model, metric, method="importance", step=0.5, batches=[batch], loss_fn=loss_fn)
    assert "pruning order (importance re-scored)" in capsys.readouterr().err
    switch(False)
    pruning_curve(model, metric, method="random", step=0.25, seeds=(0,))
    again = pruning_curve(model, metric, method="importance", step=0.5, batches=[batch], loss_fn=loss_fn)
    assert capsys.readouterr().err == ""
    assert again["pruned"].tolist() == by_importance["pruned"].tolist()  # the same order either way


def test_self_learning_shows_a_bar_over_its_iterations(switch, capsys):
    from bertology.probes.embeddings.alignment import self_learning

    rng = np.random.default_rng(0)
    xs = rng.normal(size=(30, 4))
    rotation = np.linalg.qr(rng.normal(size=(4, 4)))[0]
    seeds = np.arange(6)
    switch(True)
    w, history, _, _ = self_learning(xs, xs @ rotation, seeds, seeds, max_iter=5, vocab_cutoff=None)
    assert "self-learning" in capsys.readouterr().err
    assert np.allclose(w, rotation, atol=1e-6)  # the planted rotation is found
    switch(False)
    self_learning(xs, xs @ rotation, seeds, seeds, max_iter=5, vocab_cutoff=None)
    assert capsys.readouterr().err == ""
