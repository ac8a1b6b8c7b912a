"""Every architecture of the table (bertology.architectures), end to end: a tiny random model saved
as a local directory loads, extracts like a plain forward pass, gates heads like real pruning,
and a pruned model saves and reloads. Types come from the table: a new entry is tested here."""

from __future__ import annotations

import copy
import inspect
import json

import numpy as np
import pytest
import torch

from bertology.architectures import (
    ARCHITECTURES,
    architecture_for,
    attention_layers,
    hidden_size,
    mlm_parts,
    num_heads,
    num_layers,
    supported_types,
)
from bertology.errors import ModelError
from bertology.features import model_max_tokens
from bertology.models import from_modules, load_model
from bertology.probes.heads.gates import (
    HeadGates,
    attention_blocks,
    gates_from_heads,
    load_pruned,
    prune_heads,
    save_pruned,
)
from bertology.testing import TINY_WORDS, save_tiny_model_dir, tiny_model, tiny_tokenizer

TYPES = supported_types()
PRUNABLE = [t for t in TYPES if not ARCHITECTURES[t].shares_layers]
SHARED = [t for t in TYPES if ARCHITECTURES[t].shares_layers]


@pytest.fixture(scope="module")
def corpus():
    from bertology.corpus import load_corpus

    return load_corpus("brown-sample", limit=5)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """``(model_type, mlm) -> directory``, saved once per module."""
    root = tmp_path_factory.mktemp("arch_models")
    made: dict[tuple[str, bool], object] = {}

    def get(model_type: str, mlm: bool = False):
        if (model_type, mlm) not in made:
            made[model_type, mlm] = save_tiny_model_dir(
                model_type, root / f"{model_type}-{'mlm' if mlm else 'base'}", mlm=mlm
            )
        return made[model_type, mlm]

    return get


def encode(lm, sentences):
    """Padded batch of pre-split sentences: only what extraction passes (ids and mask)."""
    enc = lm.tokenizer([s.words for s in sentences], is_split_into_words=True, padding=True, return_tensors="pt")
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def test_table_entries_are_consistent():
    for model_type, arch in ARCHITECTURES.items():
        assert arch.model_type == model_type and architecture_for(model_type) is arch
        model, mlm = tiny_model(model_type), tiny_model(model_type, mlm=True)
        assert (num_layers(model), num_heads(model), hidden_size(model)) == (2, 4, 32), model_type
        layers = attention_layers(model)
        assert len(layers) == 2
        for at in layers:
            d = int(getattr(at.attention, arch.head_size_attr))
            heads = getattr(at.attention, arch.heads_attr) if arch.heads_attr else at.output.in_features // d
            rows = at.qkv.out_features // 3 if arch.qkv else at.query.out_features
            assert heads == 4 and heads * d == rows == at.output.in_features, model_type
            assert (at.qkv is None) == (arch.qkv is None) and (at.query is None) == (arch.qkv is not None)
        # pooler: the base class adds one exactly when the table says so
        assert ("add_pooling_layer" in inspect.signature(type(model).__init__).parameters) == arch.pooler, model_type
        # MLM head keys: present in an MLM model's weights, absent from the base encoder's
        assert any(k in name for name in mlm.state_dict() for k in arch.mlm_keys), model_type
        assert not any(k in name for name in model.state_dict() for k in arch.mlm_keys), model_type
        # position offset: the longest input extraction allows runs
        longest = model_max_tokens(model, tiny_tokenizer(model_type))
        with torch.no_grad():
            model(input_ids=torch.full((1, longest), 10), attention_mask=torch.ones(1, longest, dtype=torch.long))


@pytest.mark.parametrize("model_type", TYPES)
def test_loads_and_extracts_like_a_plain_forward(model_type, model_dirs, corpus, tmp_path):
    from bertology.store import extract

    lm = load_model(model_dirs(model_type))
    assert lm.config.model_type == model_type and lm.architecture is ARCHITECTURES[model_type]
    assert lm.config._attn_implementation == "eager" and lm.tokenizer.is_fast and not lm.has_mlm_head
    assert (lm.num_layers, lm.num_heads, lm.hidden_size) == (2, 4, 32)
    store = extract(lm, corpus, root=tmp_path, progress=False)
    assert (store.n_layers, store.n_heads, store.dim) == (3, 4, 32)
    for i in (0, 3, 4):
        words = corpus[i].words
        enc = lm.tokenizer(words, is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            out = lm.model(
                input_ids=enc["input_ids"],
                attention_mask=enc["attention_mask"],
                output_hidden_states=True,
                output_attentions=True,
            )
        ids = enc.word_ids()
        first = [ids.index(k) for k in range(len(words))]
        np.testing.assert_allclose(
            store.hidden(i), torch.stack(out.hidden_states)[:, 0, first].numpy(), atol=1e-5, rtol=1e-5
        )
        att = torch.stack(out.attentions)[:, 0].numpy()  # [L, H, T, T]
        pieces = [[t for t, k in enumerate(ids) if k == j] for j in range(len(words))]
        raw = np.stack([np.stack([att[:, :, p][:, :, :, q].sum(-1).mean(-1) for q in pieces], -1) for p in pieces], -2)
        np.testing.assert_allclose(store.attention(i, normalise=False), raw, atol=1e-5)


@pytest.mark.parametrize("model_type", TYPES)
def test_mlm_head_is_recognised(model_type, model_dirs):
    lm = load_model(model_dirs(model_type, mlm=True))  # base encoder from an MLM checkpoint: no random pooler
    assert lm.has_mlm_head and lm.model is lm.encoder
    with_head = load_model(model_dirs(model_type, mlm=True), mlm_head=True)
    assert with_head.model is not with_head.encoder and type(with_head.model).__name__.endswith("ForMaskedLM")
    with pytest.raises(ModelError, match="carry no MLM head"):
        load_model(model_dirs(model_type), mlm_head=True)


@pytest.mark.parametrize("model_type", TYPES)
def test_pre_split_words_are_tokenised_as_in_running_text(model_type, model_dirs):
    """add_prefix_space where the table asks for it: a word after the first is cut into the same
    pieces whether the input is pre-split or running text."""
    tok = load_model(model_dirs(model_type)).tokenizer
    for word in (TINY_WORDS[5], "unbelievable", "Fulton"):
        split = tok(["it", word], is_split_into_words=True)
        pieces = [p for p, w in zip(split.tokens(), split.word_ids()) if w == 1]
        assert pieces == tok.tokenize(f"it {word}")[-len(pieces) :] and len(tok.tokenize(f"it {word}")) == len(
            tok.tokenize("it")
        ) + len(pieces), (model_type, word)


@pytest.mark.parametrize("model_type", PRUNABLE)
def test_gated_head_equals_pruned_head_and_pruned_model_reloads(model_type, model_dirs, corpus, tmp_path):
    lm = load_model(model_dirs(model_type, mlm=True), mlm_head=True)
    model, batch = lm.model, encode(lm, [corpus[3], corpus[4]])
    mask = batch["attention_mask"].bool()

    def out(m):
        with torch.no_grad():
            return m(**batch).logits[mask]

    base = out(model)
    with HeadGates(model, gates_from_heads(model, {0: [1]})):
        gated = out(model)
    assert (gated - base).abs().max() > 1e-4
    torch.testing.assert_close(out(model), base, atol=0, rtol=0)  # hooks removed
    one = prune_heads(copy.deepcopy(model), {0: [1]})
    assert attention_blocks(one)[0].n_heads == 3
    torch.testing.assert_close(out(one), gated, atol=1e-5, rtol=1e-5)

    plan = {0: [1, 3], 1: [0, 1, 2, 3]}  # includes a layer with every head removed
    with HeadGates(model, gates_from_heads(model, plan)):
        gated = out(model)
    pruned = prune_heads(copy.deepcopy(model), plan)
    assert pruned.config.bertology_kept_heads == {"0": [0, 2], "1": []}
    torch.testing.assert_close(out(pruned), gated, atol=1e-5, rtol=1e-5)
    save_pruned(pruned, tmp_path / "pruned", lm.tokenizer)
    reloaded = load_pruned(tmp_path / "pruned")
    assert type(reloaded) is type(model)
    torch.testing.assert_close(out(reloaded), gated, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        attentions = reloaded(**batch, output_attentions=True).attentions
    assert [a.shape[1] for a in attentions] == [2, 0]
    assert json.loads((tmp_path / "pruned" / "config.json").read_text())["bertology_kept_heads"]["0"] == [0, 2]


@pytest.mark.parametrize("model_type", SHARED)
def test_shared_layers_gate_per_position_and_refuse_pruning(model_type, model_dirs, corpus):
    """One attention module runs at every layer position: gates act per position; a gate at every
    position equals zeroing that head's value rows; real pruning is refused."""
    lm = load_model(model_dirs(model_type))
    model, batch = lm.model, encode(lm, [corpus[3], corpus[4]])

    def hidden(m):
        with torch.no_grad():
            return m(**batch, output_hidden_states=True).hidden_states

    base = hidden(model)
    with HeadGates(model, gates_from_heads(model, {1: [2]})):
        late = hidden(model)
    with HeadGates(model, gates_from_heads(model, {0: [2]})):
        early = hidden(model)
    with HeadGates(model, gates_from_heads(model, {0: [2], 1: [2]})):
        both = hidden(model)
    torch.testing.assert_close(late[1], base[1])  # layer position 0 untouched
    assert (late[2] - base[2]).abs().max() > 1e-4 and (early[1] - base[1]).abs().max() > 1e-4
    zeroed = copy.deepcopy(model)
    block = attention_blocks(zeroed)[0]
    with torch.no_grad():
        block.value.weight[2 * block.head_dim : 3 * block.head_dim] = 0
        block.value.bias[2 * block.head_dim : 3 * block.head_dim] = 0
    reference = hidden(zeroed)
    torch.testing.assert_close(both[-1], reference[-1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(early[1], reference[1], atol=1e-5, rtol=1e-5)
    with pytest.raises(ModelError, match=f"{model_type} layers share their parameters.*HeadGates"):
        prune_heads(copy.deepcopy(model), {0: [1]})


def test_deberta_v2_separate_position_projections_are_pruned(corpus):
    """DeBERTa-v2 without shared attention keys has per-head position projections too."""
    if "deberta-v2" not in ARCHITECTURES:
        pytest.skip("deberta-v2 not in the table")
    model = tiny_model("deberta-v2", share_att_key=False)
    assert hasattr(attention_blocks(model)[0].self_attention, "pos_key_proj")
    x = torch.randint(10, 200, (2, 9), generator=torch.Generator().manual_seed(0))

    def out(m):
        with torch.no_grad():
            return m(input_ids=x).last_hidden_state

    with HeadGates(model, gates_from_heads(model, {0: [0, 2]})):
        gated = out(model)
    pruned = prune_heads(copy.deepcopy(model), {0: [0, 2]})
    assert attention_blocks(pruned)[0].self_attention.pos_query_proj.out_features == 16
    torch.testing.assert_close(out(pruned), gated, atol=1e-5, rtol=1e-5)


def _save_foreign(config, directory):
    from transformers import AutoModel

    AutoModel.from_config(config).save_pretrained(directory)
    return directory


@pytest.mark.parametrize("foreign", ["gpt2", "t5", "deberta"])
def test_unsupported_model_type_is_refused_at_load(foreign, tmp_path):
    from transformers import DebertaConfig, GPT2Config, T5Config

    config = {
        "gpt2": lambda: GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=4, n_positions=32),
        "t5": lambda: T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4),
        "deberta": lambda: DebertaConfig(
            vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
        ),
    }[foreign]()
    directory = _save_foreign(config, tmp_path / foreign)
    with pytest.raises(ModelError, match=rf"model_type '{foreign}' is not a BERT-family encoder.*supported: .*bert"):
        load_model(directory)
    with pytest.raises(ModelError, match=f"'{foreign}'"):
        architecture_for(config)
    from transformers import AutoModel

    with pytest.raises(ModelError, match=f"'{foreign}'"):
        from_modules("foreign", AutoModel.from_config(config), None)


def test_unsupported_layout_of_a_supported_type_is_refused(tmp_path):
    if "albert" not in ARCHITECTURES:
        pytest.skip("albert not in the table")
    directory = save_tiny_model_dir("albert", tmp_path / "albert", inner_group_num=2)
    with pytest.raises(ModelError, match="inner_group_num=1"):
        load_model(directory)


@pytest.mark.parametrize("model_type", TYPES)
def test_mlm_loss_equals_the_loss_from_the_full_logits(model_type):
    """Head importance's MLM loss computes vocabulary logits at the masked positions only where the
    head is known (mlm_parts); per-example losses and the gate gradients equal those of the HF
    model's full logits, under per-example gates, for every architecture."""
    from bertology.probes.heads.importance import mask_batches, mlm_loss, token_cross_entropy

    model = tiny_model(model_type, mlm=True).eval()
    mlm_parts(model)  # every type of the table takes the masked-positions path
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    raw = {
        "input_ids": torch.randint(5, vocab, (3, 10), generator=g),
        "attention_mask": torch.ones(3, 10, dtype=torch.long),
    }
    raw["attention_mask"][2, 7:] = 0  # padding in the last example
    (batch,) = mask_batches([raw], mask_token_id=4, vocab_size=vocab, special_token_ids=[0, 1, 2, 3], seed=0)
    L, H = num_layers(model.config), num_heads(model.config)

    def full_logits(m, b):
        return token_cross_entropy(m(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits, b["labels"])

    results = []
    for loss_fn in (mlm_loss, full_logits):
        gates = (torch.rand(3, L, H, generator=torch.Generator().manual_seed(1)) + 0.5).requires_grad_()
        with HeadGates(model, gates):
            loss = loss_fn(model, batch)
        loss.sum().backward()
        results.append((loss.detach(), gates.grad))
    (ours, ours_grad), (full, full_grad) = results
    assert ours.shape == (3,)
    torch.testing.assert_close(ours, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours_grad, full_grad, atol=1e-5, rtol=1e-4)
