"""Head gates, real pruning, importance and L0 gates on tiny in-process BERT models."""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr

from bertology.probes.heads.gates import (
    HeadGates,
    attention_blocks,
    count_parameters,
    gates_from_heads,
    load_pruned,
    prune_heads,
    save_pruned,
)
from bertology.probes.heads.importance import (
    ablation_importance,
    importance_scores,
    mask_batches,
    mean_loss,
    mlm_loss,
    tagging_batches,
    train_tagging_head,
)
from bertology.probes.heads.pruning import measure_pruning, pruning_curve, train_l0_gates
from bertology.testing import MASK_ID, VOCAB, tiny_bert


def ids(seed=0, shape=(3, 9)):
    return torch.randint(5, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def test_gate_changes_output_but_head_mask_is_ignored():
    """transformers 5.x pitfall: ``head_mask=`` is swallowed by **kwargs and changes nothing."""
    model, x = tiny_bert(), ids()
    base = model(input_ids=x).last_hidden_state
    head_mask = torch.ones(2, 4)
    head_mask[0, 1] = 0
    ignored = model(input_ids=x, head_mask=head_mask).last_hidden_state
    assert torch.equal(base, ignored)
    with HeadGates(model, gates_from_heads(model, {0: [1]})):
        gated = model(input_ids=x).last_hidden_state
    assert (gated - base).abs().max() > 1e-4
    after = model(input_ids=x).last_hidden_state  # hooks removed on exit
    assert torch.equal(base, after)


@pytest.mark.parametrize("mlm", [False, True])
def test_pruned_equals_gated_and_reloads(tmp_path, mlm):
    model, x = tiny_bert(mlm=mlm), ids()
    out = (lambda m: m(input_ids=x).logits) if mlm else (lambda m: m(input_ids=x).last_hidden_state)
    plan = {0: [1, 3], 1: [0, 1, 2, 3]}  # includes a layer with every head removed
    with HeadGates(model, gates_from_heads(model, plan)):
        gated = out(model)
    params = count_parameters(model)
    prune_heads(model, plan)
    assert count_parameters(model) < params
    assert attention_blocks(model)[0].n_heads == 2
    torch.testing.assert_close(out(model), gated, atol=1e-5, rtol=1e-5)
    assert model.config.bertology_kept_heads == {"0": [0, 2], "1": []}
    prune_heads(model, {0: [0]})  # composes, original numbering
    assert model.config.bertology_kept_heads["0"] == [2]
    with HeadGates(model, gates_from_heads(model, {**plan, 0: [0, 1, 3]})):
        again = out(model)
    save_pruned(model, tmp_path / "pruned")
    reloaded = load_pruned(tmp_path / "pruned")
    assert type(reloaded) is type(model)
    torch.testing.assert_close(out(reloaded), again, atol=1e-5, rtol=1e-5)
    attn = reloaded(input_ids=x, output_attentions=True).attentions
    assert attn[0].shape[1] == 1


def test_per_example_gates():
    model, x = tiny_bert(), ids()
    g = torch.ones(3, 2, 4)
    g[1, 0, 2] = 0
    with HeadGates(model, g):
        out = model(input_ids=x).last_hidden_state
    base = model(input_ids=x).last_hidden_state
    assert torch.allclose(out[0], base[0]) and torch.allclose(out[2], base[2])
    assert not torch.allclose(out[1], base[1])


def scaled_mlm(seed=0):
    """Tiny MLM whose heads' outputs are scaled over two orders of magnitude (known importance order)."""
    model = tiny_bert(seed, mlm=True)
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(seed))
    scales = (torch.logspace(-2, 0.7, 8) * 3)[perm].view(2, 4)
    with torch.no_grad():
        for layer, block in enumerate(attention_blocks(model)):
            for head in range(4):
                block.output.weight[:, head * 8 : (head + 1) * 8] *= scales[layer, head]
    return model, scales


def mlm_batches(seed=0):
    raw = [
        {"input_ids": ids(seed + i, (8, 12)), "attention_mask": torch.ones(8, 12, dtype=torch.long)} for i in range(3)
    ]
    return mask_batches(raw, mask_token_id=MASK_ID, vocab_size=VOCAB, special_token_ids=[0], seed=seed)


def test_mask_batches_seeded():
    a, b = mlm_batches(1), mlm_batches(1)
    assert all(torch.equal(x["labels"], y["labels"]) for x, y in zip(a, b))
    assert all(((x["labels"] != -100).sum(-1) >= 1).all() for x in a)


def test_gradient_importance_ranks_like_ablation():
    model, scales = scaled_mlm()
    batches = mlm_batches()
    grad = importance_scores(model, batches, mlm_loss, normalise=False)
    brute = ablation_importance(model, batches, mlm_loss)
    assert set(grad.columns) >= {"layer", "head", "importance"}
    rho = spearmanr(grad["importance"], brute["importance"]).statistic
    assert rho >= 0.8
    assert spearmanr(grad["importance"], scales.flatten()).statistic >= 0.8
    norm = importance_scores(model, batches, mlm_loss, normalise=True)
    per_layer = norm.groupby("layer")["importance"].apply(lambda v: float(np.linalg.norm(v)))
    np.testing.assert_allclose(per_layer.to_numpy(), 1.0, rtol=1e-6)
    assert all(p.requires_grad for p in model.parameters())  # restored after


def test_tagging_head_loss_for_encoders_without_mlm_head():
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
    tok = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)})  # transformers 5: a dict
    rng = np.random.default_rng(0)
    sents = [[f"w{i}" for i in rng.integers(0, 35, 7)] for _ in range(24)]
    tags = [["A" if int(w[1:]) % 2 else "B" for w in s] for s in sents]
    batches = tagging_batches(tok, sents, tags, {"A": 0, "B": 1}, batch_size=8)
    model = tiny_bert()
    head = train_tagging_head(model, batches, 2, epochs=40, seed=0)
    assert head.accuracy(model, batches) > 0.8
    imp = importance_scores(model, batches, head.loss)
    assert len(imp) == 8 and (imp["importance"] >= 0).all()


def test_pruning_curves_and_real_removal():
    model, _ = scaled_mlm()
    batches = mlm_batches()

    def metric(m, g):
        return -mean_loss(m, batches, mlm_loss, g)

    imp = pruning_curve(model, metric, method="importance", batches=batches, loss_fn=mlm_loss, step=0.25)
    rnd = pruning_curve(model, metric, method="random", step=0.25, seeds=[0, 1])
    assert list(imp["n_pruned"]) == [0, 2, 4, 6, 8]
    assert len(rnd) == 10 and set(rnd["seed"]) == {0, 1}

    # importance order keeps the metric at least as high as random order at half the heads removed
    def half(t):
        return t[t.n_pruned == 4]["metric"].mean()

    assert half(imp) >= half(rnd) - 1e-6
    types = pd.DataFrame(
        {
            "layer": [1, 1, 1, 1, 2, 2, 2, 2],  # a table's numbers, from 1
            "head": [1, 2, 3, 4] * 2,
            "type": ["positional", "other", "other", "syntactic", "other", "rare-token", "other", "broad"],
            "confidence": np.linspace(0, 1, 8),
        }
    )
    typ = pruning_curve(model, metric, method="type", head_types=types, step=0.25)
    first = eval(typ.iloc[1]["pruned"])
    assert set(first) <= {(1, 2), (1, 3), (2, 1), (2, 3)}  # the "other" heads, by their numbers
    report = measure_pruning(model, {0: [0, 1], 1: [3]}, batches, repeats=1)
    assert report["params_pruned"] < report["params_full"] and report["heads_pruned"] == 3
    assert report["timing_rounds"] == 1 and np.isnan(report["time_saved_share_low"])  # one round: no interval
    report = measure_pruning(model, {0: [0, 1], 1: [3]}, batches, repeats=3)
    assert report["timing_rounds"] == 3 and report["seconds_full"] > 0 and report["seconds_pruned"] > 0
    assert report["time_saved_share_low"] <= report["time_saved_share"] <= report["time_saved_share_high"]


def test_hard_concrete_lambda_prunes_more():
    model, _ = scaled_mlm()
    batches = mlm_batches()
    small = train_l0_gates(model, batches, mlm_loss, lam=1e-4, steps=40, seed=0)
    large = train_l0_gates(model, batches, mlm_loss, lam=1.0, steps=40, seed=0)
    assert large["kept"].sum() < small["kept"].sum()
    assert large["p_open"].mean() < small["p_open"].mean()
