"""Feed-forward gates and importance (Prasanna et al. 2020's MLP masking, Michel et al.'s estimator),
with known answers: for every architecture of the table a gate of 1 changes nothing and a gate of 0
equals a feed-forward block whose output projection is zeroed; importance is the gradient a finite
difference gives, and a block made irrelevant by construction scores exactly 0."""

from __future__ import annotations

import copy

import pytest
import torch

from bertology.architectures import ffn_outputs, supported_types
from bertology.probes.heads.gates import FFNGates
from bertology.probes.heads.importance import ffn_importance_scores, mask_batches, mlm_loss
from bertology.testing import tiny_model


def _ids(model) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, min(model.config.vocab_size, 60), (2, 9), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


@pytest.mark.parametrize("model_type", supported_types())
def test_a_closed_gate_equals_a_zeroed_feed_forward_output(model_type):
    model = tiny_model(model_type).eval()
    inputs = _ids(model)
    with torch.no_grad():
        plain = model(**inputs).last_hidden_state
        with FFNGates(model):
            assert torch.equal(model(**inputs).last_hidden_state, plain)  # gates of 1: nothing changes
        n = len(ffn_outputs(model))
        shared = len({id(m) for m in ffn_outputs(model)}) < n  # ALBERT: one block at every position
        gates = torch.ones(n)
        if shared:
            gates[:] = 0.0
        else:
            gates[n - 1] = 0.0
        with FFNGates(model, gates):
            gated = model(**inputs).last_hidden_state
        zeroed = copy.deepcopy(model)
        target = ffn_outputs(zeroed)[n - 1]
        target.weight.zero_()
        if target.bias is not None:
            target.bias.zero_()
        assert torch.allclose(gated, zeroed(**inputs).last_hidden_state, atol=1e-5)
        assert not torch.allclose(gated, plain, atol=1e-4)


def test_ffn_importance_is_the_gradient_and_zero_for_a_block_that_does_nothing():
    model = tiny_model("bert", mlm=True).eval()
    inputs = _ids(model)
    batches = mask_batches([inputs], mask_token_id=4, vocab_size=model.config.vocab_size, probability=0.3, seed=0)
    with torch.no_grad():
        block = ffn_outputs(model)[0]
        block.weight.zero_()
        block.bias.zero_()
    scores = ffn_importance_scores(model, batches, mlm_loss, normalise=False)
    assert scores.loc[0, "importance_raw"] == 0.0 and scores.loc[1, "importance_raw"] > 0
    # |dL/dξ| per example, by central differences on the last layer's gate
    eps = 1e-3
    losses = []
    for value in (1 + eps, 1 - eps):
        with torch.no_grad(), FFNGates(model, torch.tensor([1.0, value])):
            losses.append(mlm_loss(model, batches[0]).double())
    finite = ((losses[0] - losses[1]) / (2 * eps)).abs().mean().item()
    assert scores.loc[1, "importance_raw"] == pytest.approx(finite, rel=2e-2)
