"""Fine-tuning with known answers: a planted separable task is learnt (~100% on test); frozen mode
leaves the encoder bit-identical, BitFit every non-bias encoder tensor, adapters every non-LayerNorm
one; a killed run resumes to the same weights; 2-process gloo DDP keeps replicas identical; the
result is a registry model; bad input is a clear error."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cli_inprocess import run_cli
from safetensors.torch import load_file

import bertology.finetuning.trainer as trainer
from bertology.checkpoints import list_checkpoints
from bertology.errors import ConfigError, CorpusError, ModelError
from bertology.finetuning import FinetuneConfig, run_finetuning
from bertology.finetuning.data import IGNORE_INDEX, collate, encode_split
from bertology.finetuning.modes import Adapter, apply_mode
from bertology.finetuning.tasks import Example, FinetuneTask, build_task, split_by_document
from bertology.testing import TINY_WORDS, save_tiny_model_dir, tiny_tokenizer

SET_A, SET_B = TINY_WORDS[:20], TINY_WORDS[20:40]


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    """A tiny random BERT directory and planted tasks: a word's label is the set it comes from
    (token task, 150 six-word sentences in 30 documents); a sentence's label is the set all its
    words come from (sentence task, 150 sentences)."""
    root = tmp_path_factory.mktemp("finetune")
    rng = random.Random(0)
    token_lines, sentence_lines = [], []
    for i in range(150):
        words = [rng.choice(SET_A + SET_B) for _ in range(6)]
        token_lines.append(
            {"words": words, "labels": ["A" if w in SET_A else "B" for w in words], "document": f"doc{i % 30}"}
        )
        label = rng.choice("AB")
        sentence_lines.append(
            {"text": " ".join(rng.choice(SET_A if label == "A" else SET_B) for _ in range(6)), "label": label}
        )
    for name, lines in (("token", token_lines), ("sentence", sentence_lines)):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return {
        "model": save_tiny_model_dir("bert", root / "tiny-bert"),
        "token": root / "token.jsonl",
        "sentence": root / "sentence.jsonl",
    }


def _cfg(planted, tmp_path, **kw) -> FinetuneConfig:
    base = dict(
        run_name="ft",
        model=str(planted["model"]),
        task=str(planted["token"]),
        batch_size=16,
        epochs=5,
        learning_rate=1e-3,
        warmup_fraction=0.0,
        output_root=str(tmp_path / "models"),
        progress=False,
    )
    return FinetuneConfig(**{**base, **kw})


def _result(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())["result"]


def _final_weights(run: Path) -> dict[str, torch.Tensor]:
    ((step, path),) = list_checkpoints(run)
    return load_file(str(path / "model.safetensors"))


def _pretrained(planted) -> dict[str, torch.Tensor]:
    """The pretrained encoder's tensors (its pooler left out: a token classifier has none)."""
    weights = load_file(str(planted["model"] / "model.safetensors"))
    return {k: v for k, v in weights.items() if not k.startswith("pooler.")}


# --------------------------------------------------------------------------- learning a planted task


def test_planted_token_task_is_learnt_and_the_result_is_a_registry_model(planted, tmp_path, monkeypatch):
    run = run_finetuning(_cfg(planted, tmp_path))
    result = _result(run)
    assert result["test_accuracy"] == 1.0 and result["test_items"] > 50  # every test word right
    info = json.loads((run / "run.json").read_text())
    assert info["task"]["kind"] == "token" and info["task"]["labels"] == ["A", "B"]
    # only the best-on-dev checkpoint stays, as a model directory with a model card
    ((step, path),) = list_checkpoints(run)
    assert step == result["best_step"]
    assert (path / "README.md").read_text().startswith("---\nbase_model: tiny-bert")
    assert not (path / "optimizer.pt").exists()
    # the registry lists it as <run>@<step> and loads its encoder: the fine-tuned weights
    from bertology.models import list_models, load_model

    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "models"))
    assert f"ft@{step}" in set(list_models().name)
    lm = load_model("ft")
    tuned = _final_weights(run)
    for name, value in lm.encoder.state_dict().items():
        assert torch.equal(value, tuned[f"bert.{name}"]), name
    # and it differs from the pretrained encoder (full mode trains it)
    before = _pretrained(planted)
    assert any(not torch.equal(before[k], tuned[f"bert.{k}"]) for k in before)
    # a finished run returns at once on re-run
    assert run_finetuning(_cfg(planted, tmp_path)) == run


def test_planted_sentence_task_is_learnt(planted, tmp_path):
    run = run_finetuning(_cfg(planted, tmp_path, task=str(planted["sentence"]), epochs=8, learning_rate=5e-3))
    assert _result(run)["test_accuracy"] == 1.0
    assert "bert.pooler.dense.weight" in _final_weights(run)  # [CLS] -> pooler -> classifier


def test_pair_task_runs_with_two_segments(planted, tmp_path):
    rng = random.Random(1)
    lines = []
    for i in range(60):
        label = rng.choice("AB")
        lines.append(
            {
                "text_a": " ".join(rng.choice(SET_A + SET_B) for _ in range(3)),
                "text_b": " ".join(rng.choice(SET_A if label == "A" else SET_B) for _ in range(3)),
                "label": label,
                "split": "train" if i < 40 else ("dev" if i < 50 else "test"),
            }
        )
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    run = run_finetuning(_cfg(planted, tmp_path, task=str(path), max_steps=4))
    info = json.loads((run / "run.json").read_text())
    assert info["task"]["kind"] == "pair" and (info["task"]["n_train"], info["task"]["n_test"]) == (40, 10)
    assert info["result"]["test_items"] == 10


# --------------------------------------------------------------------------- modes


def test_frozen_mode_leaves_the_encoder_bit_identical(planted, tmp_path):
    run = run_finetuning(_cfg(planted, tmp_path, mode="frozen", max_steps=6, eval_every=3))
    before, after = _pretrained(planted), _final_weights(run)
    for name, value in before.items():
        assert torch.equal(value, after[f"bert.{name}"]), name
    head = load_model_head(planted, tmp_path, run)
    assert not torch.equal(head["start"], head["end"])  # the head did train


def load_model_head(planted, tmp_path, run: Path) -> dict[str, torch.Tensor]:
    """The classifier weight at initialisation (same seed) and after training."""
    from bertology.finetuning.heads import load_classifier

    torch.manual_seed(0)
    start = load_classifier(planted["model"], "token", ["A", "B"]).classifier.weight.detach()
    return {"start": start, "end": _final_weights(run)["classifier.weight"]}


def test_bitfit_changes_only_biases(planted, tmp_path):
    run = run_finetuning(_cfg(planted, tmp_path, mode="bitfit", max_steps=6, eval_every=3))
    before, after = _pretrained(planted), _final_weights(run)
    changed = {name for name, value in before.items() if not torch.equal(value, after[f"bert.{name}"])}
    assert changed and all(name.endswith("bias") for name in changed)
    assert "encoder.layer.0.attention.self.query.bias" in changed


def test_adapters_near_identity_then_only_adapters_and_layer_norms_train(planted, tmp_path, monkeypatch):
    from bertology.finetuning.heads import load_classifier

    model = load_classifier(planted["model"], "token", ["A", "B"]).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    plain = model.bert(input_ids=ids).last_hidden_state
    sizes = apply_mode(model, "adapters", adapter_size=8)
    assert sizes["adapters"] == 4 and sum(isinstance(m, Adapter) for m in model.modules()) == 4  # 2 layers x 2
    adapted = model.bert(input_ids=ids).last_hidden_state
    assert 0 < (adapted - plain).abs().max() < 1e-3  # near-identity at initialisation, but applied
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {n for n in trainable if ".adapter." in n or "LayerNorm" in n or n.startswith("classifier")}

    run = run_finetuning(_cfg(planted, tmp_path, mode="adapters", adapter_size=8, max_steps=6, eval_every=3))
    before, after = _pretrained(planted), _final_weights(run)
    changed = {name for name, value in before.items() if not torch.equal(value, after[f"bert.{name}"])}
    assert changed and all(".LayerNorm." in name and name.startswith("encoder.layer.") for name in changed)
    assert any(".attention.output.adapter.down.weight" in k for k in after)  # adapters are saved
    # the registry puts the trained adapters back: analyses see the encoder as it was trained
    from transformers import AutoModel

    from bertology.adapters import adapter_count
    from bertology.models import load_model

    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "models"))
    lm = load_model("ft")
    assert adapter_count(lm.model) == 4
    for name, value in lm.encoder.named_parameters():
        assert torch.equal(value, after[f"bert.{name}"]), name
    ((_, path),) = list_checkpoints(run)
    without = AutoModel.from_pretrained(path, attn_implementation="eager").eval()  # adapters dropped
    with torch.no_grad():
        ours, plain = lm.encoder(input_ids=ids).last_hidden_state, without(input_ids=ids).last_hidden_state
    assert not torch.allclose(ours, plain)


# --------------------------------------------------------------------------- resume and DDP


class _Killed(Exception):
    pass


def test_killed_run_resumes_to_identical_weights(planted, tmp_path):
    kw = dict(max_steps=8, eval_every=3, grad_accum_steps=2, batch_size=8, keep_last=3)
    full = run_finetuning(_cfg(planted, tmp_path, run_name="full", **kw))

    def end_of_step(done: int) -> None:
        if done >= 5:
            raise _Killed(done)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "_end_of_step", end_of_step)
        with pytest.raises(_Killed):
            run_finetuning(_cfg(planted, tmp_path, run_name="killed", **kw))
    killed = tmp_path / "models" / "killed"
    assert [s for s, _ in list_checkpoints(killed)] == [3]
    resumed = run_finetuning(_cfg(planted, tmp_path, run_name="killed", **kw))
    a, b = _final_weights(full), _final_weights(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _result(full) == _result(resumed)
    with pytest.raises(ConfigError, match="learning_rate"):  # a changed recipe is not a resume
        run_finetuning(_cfg(planted, tmp_path, run_name="killed", **{**kw, "learning_rate": 0.1}))


@pytest.mark.slow
def test_two_process_gloo_ddp_keeps_replicas_identical(planted, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args = [
        "--model",
        str(planted["model"]),
        "--task",
        str(planted["token"]),
        "--output",
        "ddp",
        "--output-root",
        str(tmp_path / "models"),
        "--max-steps",
        "4",
        "--batch-size",
        "8",
        "--learning-rate",
        "1e-3",
        "--no-progress",
    ]
    proc = subprocess.run(
        [*torchrun, "-m", "bertology.finetuning", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((tmp_path / "models" / "ddp" / "run.json").read_text())
    assert info["world_size"] == 2
    digests = info["final_weights_sha256_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]


# --------------------------------------------------------------------------- data and tasks


def test_word_labels_sit_on_the_first_sub_word():
    tok = tiny_tokenizer("bert")
    words = ("dog", "zqxv", "cat")  # the middle word is not in the vocabulary: several pieces
    task = FinetuneTask("t", "token", ["X", "Y", "Z"], "test")
    enc = encode_split([Example(words, ("X", "Y", "Z"))], task, tok, max_seq_len=32)
    pieces = tok(list(words), is_split_into_words=True).word_ids()
    assert pieces.count(1) > 1
    firsts = [i for i, w in enumerate(pieces) if w is not None and (i == 0 or pieces[i - 1] != w)]
    labels = enc.labels[0]
    assert [labels[i] for i in firsts] == [0, 1, 2]
    assert all(labels[i] == IGNORE_INDEX for i in range(len(labels)) if i not in firsts)
    # a pair has two segments
    pair = FinetuneTask("p", "pair", ["no", "yes"], "test")
    enc = encode_split([Example(("dog",), "yes", words_b=("cat", "sat"))], pair, tok, max_seq_len=32)
    assert enc.token_type_ids[0] == [0, 0, 0, 1, 1, 1] and enc.labels == [1]
    batch = collate(enc, [0], tok.pad_token_id)
    assert batch["labels"].tolist() == [1] and batch["attention_mask"].sum() == 6


def test_split_is_by_document_and_genre_labels_are_gold_brown_genres():
    task = build_task("genre", max_examples=600)
    docs = [{e.document for e in task.split(s)} for s in ("train", "dev", "test")]
    assert not (docs[0] & docs[1] or docs[0] & docs[2] or docs[1] & docs[2])
    assert task.source.startswith("gold") and "news" in task.labels
    first = task.train[0] if task.train[0].document == "brown-ca01" else None
    assert first is None or first.label == "news"
    assert all(e.document.startswith("brown-c") for e in task.test)
    pos = build_task("pos", max_examples=200)
    assert pos.kind == "token" and pos.source.startswith("gold") and "NOUN" in pos.labels
    ner = build_task("ner", max_examples=200)
    assert ner.source.startswith("silver")
    examples = [Example(("w",), "A" if i % 2 else "B", document=f"d{i // 10}") for i in range(100)]
    train, dev, test = split_by_document(examples, 0.1, 0.2, seed=1)
    assert len(test) == 20 and len(dev) == 10 and len(train) == 70


# --------------------------------------------------------------------------- bad input


def test_bad_input_is_a_clear_error(planted, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a b", "label": "x"}\n{"text": "a b"\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:2: not JSON"):
        build_task(str(bad))
    bad.write_text('{"words": ["a", "b"], "labels": ["x"]}\n')
    with pytest.raises(CorpusError, match=r"bad.jsonl:1: 'labels' must be a list of 2 strings"):
        build_task(str(bad))
    csv = tmp_path / "bad.csv"
    csv.write_text("sentence,label\nhello,x\n")
    with pytest.raises(CorpusError, match=r"bad.csv:1: the header needs"):
        build_task(str(csv))
    with pytest.raises(ConfigError, match="'task'"):
        build_task("no-such-task")
    with pytest.raises(ConfigError, match="'mode'"):
        FinetuneConfig(mode="lora")
    with pytest.raises(ConfigError, match="'batch_size'"):
        FinetuneConfig(batch_size=0)
    with pytest.raises(ModelError):
        run_finetuning(_cfg(planted, tmp_path, model=str(tmp_path / "nowhere")))


def test_cli_finetune_reports_bad_input_with_exit_2(planted, tmp_path):
    for args, named in ((["--task", str(tmp_path / "missing.jsonl")], "'task'"), (["--mode", "lora"], "'mode'")):
        # ``bertology.cli.main`` in this process (exit code and stderr as the command's): no fresh interpreter
        proc = run_cli("finetune", "--model", str(planted["model"]), "--output-root", str(tmp_path), *args)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert named in proc.stderr and "Traceback" not in proc.stderr


def test_divergence_stops_the_run_before_saving(planted, tmp_path):
    from bertology.pretraining.loop import TrainingDivergedError

    with pytest.raises(TrainingDivergedError, match=r"diverged at step \d+|non-finite weights"):
        run_finetuning(_cfg(planted, tmp_path, run_name="boom", learning_rate=1e30, max_steps=6, eval_every=6))
    assert list_checkpoints(tmp_path / "models" / "boom") == []
