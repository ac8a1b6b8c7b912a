"""Model registry and loading: safetensors only, clear errors, trained checkpoints by name."""

from __future__ import annotations

import json

import pytest
import torch

from bertology.errors import ModelError
from bertology.models import list_models, load_model, random_init_like, trained_checkpoints
from bertology.testing import make_tiny_bert


def save_tiny(tokenizer, directory, *, mlm=False, safe=True):
    model = make_tiny_bert(tokenizer, mlm=mlm)
    model.save_pretrained(directory, safe_serialization=safe)
    tokenizer.save_pretrained(directory)
    return model


def test_loads_local_directory_with_eager_attention(minilm_tokenizer, tmp_path):
    model = save_tiny(minilm_tokenizer, tmp_path / "tiny")
    lm = load_model(tmp_path / "tiny")
    assert lm.config._attn_implementation == "eager" and lm.tokenizer.is_fast
    assert not lm.has_mlm_head and lm.num_layers == 2 and lm.num_heads == 4
    for (k, a), (_, b) in zip(sorted(model.state_dict().items()), sorted(lm.model.state_dict().items())):
        assert torch.equal(a, b), k
    with pytest.raises(ModelError, match="carry no MLM head"):
        load_model(tmp_path / "tiny", mlm_head=True)


def test_mlm_head_and_random_init_baseline(minilm_tokenizer, tmp_path):
    save_tiny(minilm_tokenizer, tmp_path / "mlm", mlm=True)
    lm = load_model(tmp_path / "mlm", mlm_head=True)
    assert lm.has_mlm_head and type(lm.model).__name__ == "BertForMaskedLM"
    assert type(lm.encoder).__name__ == "BertModel"
    rnd = random_init_like(lm, seed=3)
    assert rnd.fingerprint != lm.fingerprint
    assert rnd.has_mlm_head and type(rnd.model).__name__ == "BertForMaskedLM"  # a head, flagged as such
    assert not random_init_like(load_model(tmp_path / "mlm"), seed=3).has_mlm_head
    w1 = lm.encoder.encoder.layer[0].attention.self.query.weight
    w2 = rnd.encoder.encoder.layer[0].attention.self.query.weight
    assert w1.shape == w2.shape and not torch.equal(w1, w2)
    again = random_init_like(lm, seed=3)
    assert torch.equal(again.encoder.encoder.layer[0].attention.self.query.weight, w2)


def test_refuses_pickle_only_and_broken_directories(minilm_tokenizer, tmp_path):
    save_tiny(minilm_tokenizer, tmp_path / "pickled", safe=False)
    if (tmp_path / "pickled" / "model.safetensors").exists():  # transformers 5 may always write safetensors
        (tmp_path / "pickled" / "model.safetensors").rename(tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(ModelError, match="no model.safetensors .*only safetensors"):
        load_model(tmp_path / "pickled")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        load_model(tmp_path / "empty")
    save_tiny(minilm_tokenizer, tmp_path / "gpt")
    cfg = json.loads((tmp_path / "gpt" / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (tmp_path / "gpt" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="not a BERT-family encoder"):
        load_model(tmp_path / "gpt")
    with pytest.raises(ModelError, match="unknown model 'no-such-model'.*looked for under"):
        load_model("no-such-model")


def test_trained_checkpoints_are_named_run_at_step(minilm_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "models"))
    for step in (0, 50, 200):
        save_tiny(minilm_tokenizer, tmp_path / "models" / "myrun" / f"checkpoint-{step}", mlm=True)
    (tmp_path / "models" / "myrun" / "checkpoint-300").mkdir()  # incomplete: ignored
    assert list(trained_checkpoints()) == ["myrun@0", "myrun@50", "myrun@200"]
    names = set(list_models()["name"])
    assert {"myrun@0", "myrun@50", "myrun@200", "myrun", "minilm-l6"} <= names
    assert load_model("myrun").name == "myrun@200"
    assert load_model("myrun@50", mlm_head=True).has_mlm_head


@pytest.mark.slow
@pytest.mark.real_model
def test_real_minilm_loads_offline():
    lm = load_model("minilm-l6")
    assert (lm.num_layers, lm.num_heads, lm.config.hidden_size) == (6, 12, 384)
    assert not lm.has_mlm_head
    enc = lm.tokenizer(["unaffable", "bank"], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        out = lm.model(**enc, output_attentions=True)
    assert len(out.attentions) == 6 and out.attentions[0].shape[1] == 12


def test_missing_weights_are_an_error_not_random_init(minilm_tokenizer, tmp_path):
    from safetensors.torch import load_file, save_file

    save_tiny(minilm_tokenizer, tmp_path / "partial")
    weights = load_file(tmp_path / "partial" / "model.safetensors")
    dropped = next(k for k in weights if "attention.self.query.weight" in k)
    del weights[dropped]
    save_file(weights, tmp_path / "partial" / "model.safetensors")
    with pytest.raises(ModelError, match="weights missing for 1 parameters"):
        load_model(tmp_path / "partial")
    (tmp_path / "partial" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelError, match="corrupt safetensors"):
        load_model(tmp_path / "partial")


@pytest.mark.parametrize("family", ["roberta", "distilbert", "electra"])
def test_other_bert_families_load_and_extract_like_a_plain_forward(family, minilm_tokenizer, tmp_path):
    """RoBERTa, DistilBERT and ELECTRA directories load (eager attention, safetensors) and their
    stored word vectors and attention equal a plain HF forward pass."""
    import numpy as np
    from transformers import DistilBertConfig, DistilBertModel, ElectraConfig, ElectraModel, RobertaConfig, RobertaModel

    from bertology.corpus import Corpus, Sentence
    from bertology.store import extract

    V = minilm_tokenizer.vocab_size
    torch.manual_seed(0)
    if family == "roberta":
        model = RobertaModel(
            RobertaConfig(
                vocab_size=V,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=64,
                max_position_embeddings=66,
                pad_token_id=minilm_tokenizer.pad_token_id,
            )
        )
    elif family == "distilbert":
        model = DistilBertModel(
            DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64)
        )
    else:
        model = ElectraModel(
            ElectraConfig(
                vocab_size=V,
                embedding_size=16,
                hidden_size=32,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=64,
                max_position_embeddings=64,
            )
        )
    model.eval().save_pretrained(tmp_path / family)
    minilm_tokenizer.save_pretrained(tmp_path / family)
    lm = load_model(tmp_path / family)
    assert lm.config._attn_implementation == "eager" and lm.num_layers == 2 and lm.num_heads == 4
    words = [["The", "unbelievable", "cat", "sat", "."], ["Dogs", "bark"]]
    store = extract(
        lm, Corpus("c", [Sentence(f"s{i}", w) for i, w in enumerate(words)]), root=tmp_path / "st", progress=False
    )
    for i, w in enumerate(words):
        enc = lm.tokenizer(w, is_split_into_words=True, return_tensors="pt")
        inputs = {k: v for k, v in enc.items() if k != "token_type_ids" or family != "distilbert"}
        with torch.no_grad():
            out = lm.model(**inputs, output_hidden_states=True, output_attentions=True)
        ids = enc.word_ids()
        first = [ids.index(k) for k in range(len(w))]
        ref = torch.stack(out.hidden_states)[:, 0, first].numpy()
        np.testing.assert_allclose(store.hidden(i), ref, atol=1e-5)
        att = torch.stack(out.attentions)[:, 0].numpy()  # [L, H, T, T]
        pieces = [[t for t, k in enumerate(ids) if k == j] for j in range(len(w))]
        raw = np.stack([np.stack([att[:, :, p][:, :, :, q].sum(-1).mean(-1) for q in pieces], -1) for p in pieces], -2)
        np.testing.assert_allclose(store.attention(i, normalise=False), raw, atol=1e-5)
    fast = extract(
        lm,
        Corpus("c", [Sentence(f"s{i}", w) for i, w in enumerate(words)]),
        root=tmp_path / "st",
        amp_dtype="bfloat16",
        storage="float16",
        progress=False,
    )
    assert np.abs(fast.layers() - store.layers()).max() < 0.02 * np.abs(store.layers()).max()
    assert np.abs(fast.attention(0) - store.attention(0)).max() < 0.05


def test_a_run_folder_and_run_folder_at_step_load_from_any_working_folder(minilm_tokenizer, tmp_path, monkeypatch):
    # a trainer's run outside the registry's models folder (--output-root, another working folder)
    run = tmp_path / "elsewhere" / "ft-pos-full"
    early = save_tiny(minilm_tokenizer, run / "checkpoint-10")
    late = save_tiny(minilm_tokenizer, run / "checkpoint-20")
    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "empty"))
    with pytest.raises(ModelError, match="unknown model 'ft-pos-full@20'"):
        load_model("ft-pos-full@20")  # the registry does not see it...
    for name, model, label in ((f"{run}@10", early, "ft-pos-full@10"), (str(run), late, "ft-pos-full@20")):
        lm = load_model(name)  # ...its folder does: @<step>, or the last checkpoint
        assert lm.name == label
        assert all(torch.equal(v, model.state_dict()[k]) for k, v in lm.model.state_dict().items())
    with pytest.raises(ModelError, match=r"checkpoints at steps \[10, 20\]"):
        load_model(f"{run}@15")


def test_finetune_names_the_model_load_model_accepts(minilm_tokenizer, tmp_path, monkeypatch):
    from bertology.cli.finetune import model_names_line
    from bertology.finetuning.trainer import recipe_steps

    run = tmp_path / "models" / "ft-pos-full"
    save_tiny(minilm_tokenizer, run / "checkpoint-20")
    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "models"))
    line = model_names_line(run, 20)
    assert 'load_model("ft-pos-full@20")' in line and f'load_model("{run.resolve()}@20")' in line
    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "other"))
    assert model_names_line(run, 20) == (
        f'model: load_model("{run.resolve()}@20") (outside the registry\'s models folder: load it by its path)'
    )
    for name in ("ft-pos-full@20", f"{run.resolve()}@20"):  # what the line names loads
        monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "models"))
        assert load_model(name).name == "ft-pos-full@20"
    # the model card's recipe says when max_steps stopped the run before its epochs
    assert recipe_steps({"max_steps": 45, "steps_per_epoch": 15}, 3) == "45 steps (3 epochs of 15 steps)"
    assert recipe_steps({"max_steps": 20, "steps_per_epoch": 15}, 3) == (
        "20 steps (1.33 epochs of 15 steps: stopped by max_steps before the 3 epochs set)"
    )
