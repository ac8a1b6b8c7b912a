"""Continued MLM pretraining (``init_from``, "don't stop pretraining"): the run starts from the
named encoder's weights and tokenizer, adds BERT's MLM head where the encoder has none, trains and
resumes exactly, and refuses configs that do not match the model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_pretrain_trainer import corpus_and_tokenizer, run_killed_after  # noqa: F401  (the shared fixture)
from test_pretrain_variants import _cfg

from bertology.errors import ConfigError
from bertology.pretraining import PretrainConfig, run_pretraining
from bertology.pretraining.objectives import build_model


@pytest.fixture(scope="module")
def source_models(corpus_and_tokenizer, tmp_path_factory) -> tuple[Path, Path]:
    """(an MLM checkpoint trained 4 steps, the same weights saved as a bare encoder without MLM head)."""
    from transformers import AutoTokenizer, BertModel

    root = tmp_path_factory.mktemp("continued")
    mlm_dir = run_pretraining(_cfg(corpus_and_tokenizer, root, run_name="source", max_steps=4)) / "checkpoint-4"
    bare = root / "bare-encoder"
    BertModel.from_pretrained(str(mlm_dir)).save_pretrained(bare, safe_serialization=True)
    AutoTokenizer.from_pretrained(str(mlm_dir)).save_pretrained(bare)
    return mlm_dir, bare


def _continued(corpus_and_tokenizer, root: Path, init_from: Path, **kw) -> PretrainConfig:
    kw = {"run_name": "continued", **kw}
    return _cfg(corpus_and_tokenizer, root, tokenizer=None, init_from=str(init_from), dropout=0.0, **kw)


def test_starts_from_the_encoder_and_adds_a_bert_head(corpus_and_tokenizer, source_models, tmp_path):
    mlm_dir, bare = source_models
    cfg = _continued(corpus_and_tokenizer, tmp_path, bare)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, vocab_size=300, pad_token_id=0)
    source = load_file(str(bare / "model.safetensors"))
    state = model.state_dict()
    for name, tensor in source.items():
        if name.startswith("pooler."):
            continue  # BertForMaskedLM has no pooler
        key = name if name.startswith("bert.") else f"bert.{name}"
        assert torch.equal(state[key], tensor), key
    head = model.cls.predictions
    assert head.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()  # tied
    assert torch.equal(head.bias, torch.zeros_like(head.bias))
    assert model.config.hidden_dropout_prob == 0.0
    # an encoder that has an MLM head keeps it
    with_head = build_model(_continued(corpus_and_tokenizer, tmp_path, mlm_dir), vocab_size=300, pad_token_id=0)
    trained = load_file(str(mlm_dir / "model.safetensors"))
    assert torch.equal(
        with_head.cls.predictions.transform.dense.weight, trained["cls.predictions.transform.dense.weight"]
    )


def test_trains_and_resumes_exactly(corpus_and_tokenizer, source_models, tmp_path):
    _, bare = source_models
    whole = run_pretraining(_continued(corpus_and_tokenizer, tmp_path / "a", bare))
    killed = run_killed_after(_continued(corpus_and_tokenizer, tmp_path / "b", bare), 4)
    resumed = run_pretraining(_continued(corpus_and_tokenizer, tmp_path / "b", bare))
    assert resumed == killed
    a, b = (load_file(str(d / "checkpoint-6" / "model.safetensors")) for d in (whole, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(str(bare / "model.safetensors"))
    moved = a["bert.encoder.layer.0.attention.self.query.weight"]
    assert not torch.equal(moved, start["encoder.layer.0.attention.self.query.weight"])  # it trained


def test_configs_that_do_not_match_the_model_are_refused(corpus_and_tokenizer, source_models, tmp_path):
    _, bare = source_models
    with pytest.raises(ConfigError, match=r"'init_from'.*hidden_size 64 \(the model has 32\)"):
        build_model(_continued(corpus_and_tokenizer, tmp_path, bare, hidden_size=64), vocab_size=300, pad_token_id=0)
    with pytest.raises(ConfigError, match=r"'init_from'.*objective mlm"):
        _continued(corpus_and_tokenizer, tmp_path, bare, objective="electra")
    with pytest.raises(ConfigError, match=r"'tokenizer'.*init_from"):
        _cfg(corpus_and_tokenizer, tmp_path, init_from=str(bare))  # _cfg names its own tokenizer
    with pytest.raises(ConfigError, match=r"'init_from'.*unknown model"):
        build_model(_continued(corpus_and_tokenizer, tmp_path, tmp_path / "nowhere"), vocab_size=300, pad_token_id=0)


def test_a_later_stretch_continues_the_data_stream(corpus_and_tokenizer, source_models, tmp_path, monkeypatch):
    """``stream_start`` = the sequences an earlier stretch consumed: the later stretch's batches are
    the ones the earlier run would have drawn next, not its first ones again."""
    import bertology.pretraining.trainer as trainer

    _, bare = source_models
    seen: dict[str, list[list[int]]] = {"one": [], "later": []}
    current = ["one"]
    real = trainer.masked_batch

    def spy(data, rows, epochs, masker, cfg, pad_id):
        seen[current[0]].append(list(rows))
        return real(data, rows, epochs, masker, cfg, pad_id)

    monkeypatch.setattr(trainer, "masked_batch", spy)
    one = _continued(corpus_and_tokenizer, tmp_path / "one", bare, max_steps=4)
    run_pretraining(one)
    current[0] = "later"
    later = _continued(
        corpus_and_tokenizer,
        tmp_path / "later",
        bare,
        max_steps=2,
        stream_start=2 * one.batch_size * one.grad_accum_steps,
    )
    run_pretraining(later)
    assert len(seen["one"]) == 4 * one.grad_accum_steps
    assert seen["later"] == seen["one"][2 * one.grad_accum_steps :]
    with pytest.raises(ConfigError, match=r"'stream_start'.*>= 0"):
        _continued(corpus_and_tokenizer, tmp_path, bare, stream_start=-1)


def test_a_two_stretch_release_counts_steps_and_tokens_from_the_first(corpus_and_tokenizer, source_models, tmp_path):
    """Stretch 2 starts from stretch 1's last checkpoint and reads on in its stream: the release ships
    stretch 2's step s as step 6 + s, counts both stretches' sequences, lists both stretches on the
    card and in release.json, and keeps both stretches' metrics on one step axis."""
    import json

    from bertology.pretraining.release import earlier_stretch, export_release, read_release

    _, bare = source_models
    one = _continued(corpus_and_tokenizer, tmp_path / "one", bare, run_name="stretch-one")
    first = run_pretraining(one)
    second_cfg = _continued(
        corpus_and_tokenizer,
        tmp_path / "two",
        first / "checkpoint-6",
        run_name="stretch-two",
        max_steps=4,
        stream_start=6 * one.batch_size,
    )
    second = run_pretraining(second_cfg)
    out = export_release(
        second, tmp_path / "release" / "two-stretch", steps=[4], score=False, earlier=[earlier_stretch(first)]
    )
    release = read_release(out)
    (entry,) = release["checkpoints"]
    assert entry["step"] == 10 and (out / "checkpoint-10" / "model.safetensors").is_file()
    assert entry["sequences_seen"] == 10 * one.batch_size
    assert entry["tokens_seen_at_most"] == 10 * one.batch_size * one.max_seq_len
    rows = release["stretches"]
    assert [(r["run"], r["first_step"], r["last_step"]) for r in rows] == [
        ("stretch-one", 1, 6),
        ("stretch-two", 7, 10),
    ]
    assert rows[0]["init_from"] == str(bare) and rows[1]["stream_start"] == 6 * one.batch_size
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {e["stretch"] for e in events} == {1, 2} and max(e["step"] for e in events if e["stretch"] == 2) == 10
    card = (out / "README.md").read_text()
    assert "## Training stretches" in card and f"started from | `{bare}`" in card and "`two-stretch@10`" in card


def test_a_third_stretch_continues_a_release_whose_run_folders_are_gone(corpus_and_tokenizer, source_models, tmp_path):
    """A stretch that starts from a shipped two-stretch release (its float16 weights, read as float32)
    is released with the stretches read back from that release (:func:`release_stretches`), including
    a release written before ``stretch_configs`` existed: the same stretch rows, held-out losses and
    metric events as a release made from the three run folders, and the card says the stretches read
    different corpora when they did."""
    import json
    import shutil

    from bertology.pretraining.release import earlier_stretch, export_release, read_release, release_stretches

    _, bare = source_models
    one = _continued(corpus_and_tokenizer, tmp_path / "one", bare, run_name="s1", max_steps=4, eval_every=2)
    first = run_pretraining(one)
    second = run_pretraining(
        _continued(
            corpus_and_tokenizer,
            tmp_path / "two",
            first / "checkpoint-4",
            run_name="s2",
            max_steps=4,
            eval_every=2,
            stream_start=4 * one.batch_size,
        )
    )
    shipped = export_release(
        second, tmp_path / "release" / "shipped", steps=[4], score=False, earlier=[earlier_stretch(first)]
    )
    legacy = json.loads((shipped / "release.json").read_text())
    legacy.pop("stretch_configs")  # as released before the field existed
    (shipped / "release.json").write_text(json.dumps(legacy))
    other_corpus = tmp_path / "other-corpus" / Path(one.corpus).name
    other_corpus.parent.mkdir()
    (shutil.copytree if Path(one.corpus).is_dir() else shutil.copy2)(Path(one.corpus), other_corpus)
    third_cfg = _continued(
        corpus_and_tokenizer, tmp_path / "three", shipped / "checkpoint-8", run_name="s3", max_steps=2, eval_every=2
    )
    third_cfg.corpus = str(other_corpus)
    third = run_pretraining(third_cfg)
    weights = load_file(str(third / "checkpoint-2" / "model.safetensors"))
    assert weights["bert.embeddings.word_embeddings.weight"].dtype == torch.float32  # trained in float32

    read_back = release_stretches(shipped)
    from_runs = [earlier_stretch(first), earlier_stretch(second)]
    for a, b in zip(read_back, from_runs, strict=True):
        assert a["steps"] == b["steps"] and a["sequences_seen"] == b["sequences_seen"]
        assert a["eval_losses"] == pytest.approx(b["eval_losses"])
        assert [e["step"] for e in a["events"]] == [e["step"] for e in b["events"]]
        assert a["config"]["learning_rate"] == b["config"]["learning_rate"]
        assert a["config"]["stream_start"] == b["config"]["stream_start"]
    r1 = read_release(export_release(third, tmp_path / "rel-a", steps=[2], score=False, earlier=read_back))
    r2 = read_release(export_release(third, tmp_path / "rel-b", steps=[2], score=False, earlier=from_runs))
    for key in ("stretches", "eval_losses"):
        assert json.dumps(r1[key], sort_keys=True) == json.dumps(r2[key], sort_keys=True)
    assert (tmp_path / "rel-a" / "metrics.jsonl").read_text() == (tmp_path / "rel-b" / "metrics.jsonl").read_text()
    assert [r["last_step"] for r in r1["stretches"]] == [4, 8, 10] and r1["checkpoints"][0]["step"] == 10
    assert len(r1["stretch_configs"]) == 3 and r1["stretch_configs"][2]["corpus"] == str(other_corpus)
    card = (tmp_path / "rel-a" / "README.md").read_text()
    assert "The stretches read different corpora" in card and "so no text is read twice" not in card
    assert len(release_stretches(tmp_path / "rel-a")) == 3
