"""The pretraining loop: config validation, checkpoints, exact resume, metrics, 2-process DDP."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

import bertology.pretraining.trainer as trainer
from bertology.checkpoints import list_checkpoints
from bertology.errors import CheckpointError, ConfigError
from bertology.paths import package_data
from bertology.pretraining import PretrainConfig, load_config, read_metrics, run_pretraining, shipped_configs
from bertology.pretraining.objectives import PretrainingLoss

BROWN = package_data() / "brown.txt.gz"


class _Killed(Exception):
    """Raised by the end-of-step hook that :func:`run_killed_after` puts in the trainer."""


def run_killed_after(cfg: PretrainConfig, step: int) -> Path:
    """Run ``cfg`` and stop it right after step ``step`` (logged, evaluated and saved as due) the way a
    kill does: the trainer's end-of-step hook raises there, so nothing of the run after it happens."""

    def end_of_step(done: int) -> None:
        if done >= step:
            raise _Killed(done)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "_end_of_step", end_of_step)
        with pytest.raises(_Killed):
            run_pretraining(cfg)
    return cfg.run_dir


def brown_documents(out: Path, count: int, skip: int = 0) -> Path:
    """Write Brown documents ``skip .. skip + count - 1`` (blank-line separated) to ``out``."""
    lines, docs = [], 0
    with gzip.open(BROWN, "rt", encoding="utf-8") as fh:
        for line in fh:
            if docs >= skip:
                lines.append(line)
            docs += not line.strip()
            if docs >= skip + count:
                break
    out.write_text("".join(lines), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def corpus_and_tokenizer(tmp_path_factory) -> tuple[Path, Path]:
    """The first 30 Brown documents and a WordPiece tokenizer (vocab 300) trained on them."""
    d = tmp_path_factory.mktemp("pt")
    out = brown_documents(d / "brown30.txt", 30)
    return out, fixed_wordpiece(out, d / "tok", vocab_size=300)


def fixed_wordpiece(text_file: Path, out_dir: Path, vocab_size: int) -> Path:
    """A deterministic uncased WordPiece tokenizer: characters, their ``##`` forms, then the most
    frequent words (ties by spelling). ``tokenizers``' trainer breaks frequency ties differently
    from run to run, which made the loss-curve assertions below depend on the draw."""
    from collections import Counter

    from transformers import BertTokenizerFast

    words = Counter(
        w
        for line in text_file.read_text(encoding="utf-8").lower().split("\n")
        for w in line.replace(".", " . ").replace(",", " , ").split()
    )
    chars = sorted({c for w in words for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + [f"##{c}" for c in chars]
    for w, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])):
        if len(vocab) >= vocab_size:
            break
        if w not in vocab:
            vocab.append(w)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    BertTokenizerFast(str(out_dir / "vocab.txt"), do_lower_case=True).save_pretrained(out_dir)
    return out_dir


def _cfg(corpus_and_tokenizer, tmp_path, **kw) -> PretrainConfig:
    corpus, tok = corpus_and_tokenizer
    base = dict(
        run_name="tiny",
        corpus=str(corpus),
        tokenizer=str(tok),
        output_root=str(tmp_path / "models"),
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=4,
        intermediate_size=64,
        max_seq_len=32,
        batch_size=4,
        max_steps=6,
        warmup_steps=2,
        learning_rate=3e-3,
        log_every=1,
        eval_every=3,
        eval_batches=2,
        save_every=2,
        keep_steps=[0, 3],
        heldout_fraction=0.1,
        progress=False,
        num_threads=1,
    )  # tiny model: one thread avoids OpenMP thrashing on a busy 2-core box
    base.update(kw)
    return PretrainConfig(**base)


def test_config_validation_names_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hidden_size: 30\nnum_attention_heads: 4\n")
    with pytest.raises(ConfigError, match="bad.yaml.*'hidden_size'.*divisible"):
        load_config(bad)
    bad.write_text("batch_size: many\n")
    with pytest.raises(ConfigError, match="'batch_size'.*integer"):
        load_config(bad)
    bad.write_text("learning_rat: 0.1\n")
    with pytest.raises(ConfigError, match="unknown field.*'learning_rat'"):
        load_config(bad)
    bad.write_text("keep_steps: [0, -5]\n")
    with pytest.raises(ConfigError, match="'keep_steps"):
        load_config(bad)
    toml = tmp_path / "ok.toml"
    toml.write_text('run_name = "x"\nobjective = "mlm+sop"\nmasking = "span"\nlearning_rate = 1\n')
    cfg = load_config(toml, max_steps=7)
    assert (cfg.objective, cfg.masking, cfg.learning_rate, cfg.max_steps) == ("mlm+sop", "span", 1.0, 7)
    toml.write_text('objective = "nsp"\n')
    with pytest.raises(ConfigError, match="'objective'"):
        load_config(toml)
    assert set(shipped_configs()) >= {"default", "bert_base_gpu"}
    for name in ("default", "pretrain_default.yaml", "bert_base_gpu"):
        assert load_config(name).run_name  # a shipped recipe, found by name from any folder
    with pytest.raises(ConfigError, match="not found.*shipped recipes"):
        load_config("no_such_recipe")


def test_every_shipped_recipe_is_a_valid_config():
    """Every ``configs/pretrain_<name>.yaml`` has known fields and valid values. A recipe that
    continues an earlier run (``init_from`` a run folder made on the user's machine, which loading
    checks exists) is read with the shipped MiniLM in its place."""
    from bertology.validation import load_yaml  # the reader load_config uses

    for name, path in shipped_configs().items():
        raw = load_yaml(path.read_text(encoding="utf-8"))
        cfg = load_config(name, init_from="minilm-english-mlm" if raw.get("init_from") else None)
        assert cfg.run_name, name
        assert cfg.max_steps >= 1 and (cfg.keep_steps is None or max(cfg.keep_steps) <= cfg.max_steps), name


def test_gathered_mlm_loss_equals_hf_loss():
    from transformers import BertConfig, BertForMaskedLM, BertForPreTraining

    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 50, (3, 10), generator=g)
    labels = torch.where(torch.rand(3, 10, generator=g) < 0.3, ids, torch.full_like(ids, -100))
    mask, types, pair = torch.ones_like(ids), torch.zeros_like(ids), torch.tensor([0, 1, 0])
    for cls in (BertForMaskedLM, BertForPreTraining):
        torch.manual_seed(0)
        model = cls(cfg).eval()
        extra = {"next_sentence_label": pair} if cls is BertForPreTraining else {}
        ref = model(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, **extra).loss
        ours, _, _ = PretrainingLoss(model)(ids, mask, types, labels, pair if extra else None)
        torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)


def test_run_layout_checkpoints_and_metrics(corpus_and_tokenizer, tmp_path, monkeypatch):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    run = run_pretraining(
        _cfg(
            corpus_and_tokenizer,
            tmp_path,
            max_steps=30,
            save_every=10,
            eval_every=10,
            keep_steps=[0, 5],
            learning_rate=1e-2,
            warmup_steps=3,
        )
    )
    assert run == tmp_path / "models" / "tiny"
    steps = [s for s, _ in list_checkpoints(run)]
    assert steps == [0, 5, 20, 30]  # keep_steps + one rolling checkpoint + final; 10 was pruned
    assert not [p for p in run.iterdir() if p.name.startswith(".") and p.name != ".lock"]  # no temp dirs left behind
    info = json.loads((run / "run.json").read_text())
    assert info["seed"] == 0 and len(info["corpus_sha256"]) == 64 and info["config"]["max_steps"] == 30
    ckpt = run / "checkpoint-30"
    assert {"config.json", "model.safetensors", "tokenizer.json", "optimizer.pt", "rng.safetensors"} <= {
        p.name for p in ckpt.iterdir()
    }
    model = AutoModelForMaskedLM.from_pretrained(ckpt)
    assert type(model).__name__ == "BertForMaskedLM"
    assert type(AutoModel.from_pretrained(ckpt)).__name__ == "BertModel"
    assert AutoTokenizer.from_pretrained(ckpt).mask_token == "[MASK]"
    m = read_metrics(run)
    assert list(m.columns) == ["run", "step", "metric", "value"]
    assert {"loss", "lr", "tokens_per_s", "eval_loss", "perplexity"} <= set(m.metric)
    ev = m[m.metric == "eval_loss"].set_index("step")["value"]
    assert list(ev.index) == [10, 20, 30]
    loss = m[m.metric == "loss"].sort_values("step")["value"].to_numpy()
    assert loss[-5:].mean() < loss[:3].mean() - 0.1  # training loss falls (from ~ln 300 = 5.7)
    assert ev[30] < ev[10]
    ppl = m[m.metric == "perplexity"].set_index("step")["value"]
    assert abs(ppl[30] - float(torch.exp(torch.tensor(ev[30])))) < 1e-3 * ppl[30]
    with pytest.raises(CheckpointError, match="already has checkpoints"):
        run_pretraining(_cfg(corpus_and_tokenizer, tmp_path), resume=False)
    # the models registry sees every checkpoint as <run>@<step> and loads it with its MLM head
    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "models"))
    from bertology.models import list_models, load_model

    assert {"tiny@0", "tiny@5", "tiny@20", "tiny@30", "tiny"} <= set(list_models()["name"])
    lm = load_model("tiny@30", mlm_head=True)
    assert lm.has_mlm_head and lm.config.num_hidden_layers == 2


@pytest.mark.parametrize("objective,masking,accum", [("mlm", "token", 1), ("mlm+sop", "whole_word", 2)])
def test_resume_after_kill_equals_uninterrupted(corpus_and_tokenizer, tmp_path, objective, masking, accum):
    kw = dict(
        objective=objective,
        masking=masking,
        grad_accum_steps=accum,
        max_steps=7,
        save_every=3,
        keep_steps=[],
        dynamic_masking=True,
    )
    full = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="full", **kw))
    killed = run_killed_after(_cfg(corpus_and_tokenizer, tmp_path, run_name="killed", **kw), 5)
    assert [s for s, _ in list_checkpoints(killed)] == [3]  # "killed" after step 5, last checkpoint at 3
    resumed = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="killed", **kw), resume=True)
    a = load_file(str(full / "checkpoint-7" / "model.safetensors"))
    b = load_file(str(resumed / "checkpoint-7" / "model.safetensors"))
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    ma, mb = read_metrics(full), read_metrics(resumed)
    merged = ma.merge(mb, on=["step", "metric"])
    merged = merged[merged.metric != "tokens_per_s"]
    assert len(merged) == len(ma[ma.metric != "tokens_per_s"])
    assert (merged.value_x - merged.value_y).abs().max() < 1e-6
    if objective != "mlm":
        from transformers import AutoModel, AutoModelForMaskedLM

        assert type(AutoModelForMaskedLM.from_pretrained(full / "checkpoint-7")).__name__ == "BertForMaskedLM"
        assert type(AutoModel.from_pretrained(full / "checkpoint-7")).__name__ == "BertModel"
        assert "eval_pair_accuracy" in set(ma.metric)


def test_resume_refuses_a_changed_config(corpus_and_tokenizer, tmp_path):
    run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, max_steps=2))
    with pytest.raises(ConfigError, match="learning_rate"):
        run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, max_steps=2, learning_rate=0.1))


def test_corrupt_checkpoint_is_a_clear_error(corpus_and_tokenizer, tmp_path):
    run = run_killed_after(
        _cfg(corpus_and_tokenizer, tmp_path, run_name="bad", max_steps=6, save_every=3, keep_steps=[]), 4
    )
    (run / "checkpoint-3" / "model.safetensors").write_bytes(b"truncated")
    with pytest.raises(CheckpointError, match=r"checkpoint-3/model.safetensors: corrupt checkpoint weights"):
        run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="bad", max_steps=6, save_every=3, keep_steps=[]))


@pytest.mark.slow
def test_two_process_gloo_ddp(corpus_and_tokenizer, tmp_path):
    import yaml

    cfg = _cfg(corpus_and_tokenizer, tmp_path, run_name="ddp", max_steps=4, save_every=2, keep_steps=[0], dropout=0.1)
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc = subprocess.run(
        [*torchrun, "-m", "bertology.pretraining", "--config", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "models" / "ddp"
    info = json.loads((run / "run.json").read_text())
    assert info["world_size"] == 2
    digests = info["final_weights_sha256_per_rank"]
    assert len(digests) == 2 and digests[0] == digests[1]  # DDP kept the replicas identical
    assert [s for s, _ in list_checkpoints(run)] == [0, 2, 4]  # written once, by rank 0
    assert not [p for p in run.iterdir() if p.name.startswith(".") and p.name != ".lock"]
    m = read_metrics(run)
    assert (m.metric == "loss").sum() == 4  # one metrics line per step, not one per rank
    # the model moved away from its initialisation
    w0 = load_file(str(run / "checkpoint-0" / "model.safetensors"))
    w4 = load_file(str(run / "checkpoint-4" / "model.safetensors"))
    assert any(not torch.equal(w0[k], w4[k]) for k in w0)


def test_atomic_checkpoint_dir_never_half_written(tmp_path):
    from bertology.checkpoints import atomic_dir

    target = tmp_path / "checkpoint-5"
    with atomic_dir(target) as tmp:
        (tmp / "config.json").write_text("{}")
    assert (target / "config.json").read_text() == "{}"
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "config.json").write_text('{"new": 1}')
            raise RuntimeError("killed while writing")
    assert (target / "config.json").read_text() == "{}"  # the old checkpoint is intact
    with atomic_dir(target) as tmp:  # replacing an existing checkpoint works
        (tmp / "model.safetensors").write_text("x")
    assert sorted(p.name for p in target.iterdir()) == ["model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-5"]


def test_bpe_tokenizer_trained_by_the_run(corpus_and_tokenizer, tmp_path):
    """``tokenizer: null, tokenizer_kind: bpe``: the run trains a byte-level BPE tokenizer on its own
    corpus -- the one ``train_tokenizer`` gives for that text and those settings, whose merges are
    that text's -- and trains and saves the model with it."""
    from transformers import AutoTokenizer

    from bertology.pretraining.tokenizer import train_tokenizer

    corpus, _ = corpus_and_tokenizer
    cfg = _cfg(
        corpus_and_tokenizer,
        tmp_path,
        run_name="bpe",
        tokenizer=None,
        tokenizer_kind="bpe",
        vocab_size=400,
        max_steps=2,
        keep_steps=[],
        masking="span",
        dynamic_masking=False,
    )
    run = run_pretraining(cfg)
    trained = json.loads((run / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8"))
    assert trained["model"]["type"] == "BPE" and trained["pre_tokenizer"]["type"] == "ByteLevel"
    assert trained["decoder"]["type"] == "ByteLevel" and trained["normalizer"]["type"] == "Lowercase"

    # exactly the tokenizer trained directly on the run's corpus with the run's settings ...
    settings = dict(kind="bpe", vocab_size=400, lowercase=True, model_max_length=cfg.max_seq_len)
    direct = train_tokenizer(corpus, tmp_path / "direct", **settings)
    assert (direct / "tokenizer.json").read_bytes() == (run / "tokenizer" / "tokenizer.json").read_bytes()
    # ... and not the one other text gives: merges this corpus has and another Brown slice lacks
    other = train_tokenizer(brown_documents(tmp_path / "other.txt", 30, skip=200), tmp_path / "other", **settings)

    def merges(tokenizer_json: dict) -> set[tuple[str, str]]:
        return {tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in tokenizer_json["model"]["merges"]}

    tok = AutoTokenizer.from_pretrained(run / "checkpoint-2")
    ours = merges(trained) - merges(json.loads((other / "tokenizer.json").read_text(encoding="utf-8")))
    text = corpus.read_text(encoding="utf-8").lower()
    assert len(ours) >= 10 and len(merges(trained)) == len(trained["model"]["vocab"]) - 256 - 5
    assert all(tok.convert_tokens_to_string([a + b]) in text for a, b in ours)  # pieces of this corpus

    # the checkpoint carries it, the model's vocabulary is its, and it round-trips the corpus
    assert tok.backend_tokenizer.to_str() == AutoTokenizer.from_pretrained(run / "tokenizer").backend_tokenizer.to_str()
    assert (
        tok.mask_token == "<mask>"
        and json.loads((run / "checkpoint-2" / "config.json").read_text())["vocab_size"] == len(tok) <= 400
    )
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()][:50]
    ids = [tok(line, add_special_tokens=False)["input_ids"] for line in lines]
    assert [tok.decode(i, clean_up_tokenization_spaces=False) for i in ids] == [line.lower() for line in lines]
    assert sum(map(len, ids)) < 0.6 * sum(len(line.encode()) for line in lines)  # the merges are used
    assert (read_metrics(run).metric == "eval_loss").any()


def test_finished_run_returns_at_once(corpus_and_tokenizer, tmp_path):
    cfg = _cfg(corpus_and_tokenizer, tmp_path, max_steps=2, keep_steps=[])
    run = run_pretraining(cfg)
    before = (run / "metrics.jsonl").read_text()
    assert run_pretraining(cfg) == run
    assert (run / "metrics.jsonl").read_text() == before
    assert [s for s, _ in list_checkpoints(run)] == [2]


def test_separate_heldout_corpus_is_the_eval_set(corpus_and_tokenizer, tmp_path):
    """With ``heldout_corpus`` set, every document of ``corpus`` trains and the eval set is exactly
    the separate file's documents (the corpus builder's document-level split)."""
    from transformers import AutoTokenizer

    from bertology.pretraining.data import build_sequences

    corpus, tok_dir = corpus_and_tokenizer
    heldout = tmp_path / "heldout.txt"
    heldout.write_text("The jury said it did find that.\n\nA second held-out document here.\n", encoding="utf-8")
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    cfg = _cfg(corpus_and_tokenizer, tmp_path, heldout_corpus=str(heldout))
    train, ev = build_sequences(cfg, tok, corpus)
    base_train, base_ev = build_sequences(_cfg(corpus_and_tokenizer, tmp_path, heldout_fraction=0.0), tok, corpus)
    assert len(ev) == 2 and torch.equal(train.ids, base_train.ids) and len(base_ev) == 0
    first = tok(["the jury said it did find that."], add_special_tokens=True)["input_ids"][0]
    assert ev.ids[: len(first)].tolist() == first
    with pytest.raises(ConfigError, match="heldout_corpus"):
        build_sequences(_cfg(corpus_and_tokenizer, tmp_path, heldout_corpus=str(tmp_path / "nope")), tok, corpus)


def test_release_is_the_trainers_weights_in_float16(corpus_and_tokenizer, tmp_path, monkeypatch):
    from transformers import BertForMaskedLM

    from bertology.pretraining.release import export_release, read_release

    run_dir = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, keep_steps=[0, 3]))
    out = export_release(
        run_dir,
        tmp_path / "release" / "tiny-en",
        steps=[0, 3, 6],
        card={"unigram_baseline": 5.5, "command": "bertology pretrain --config x.yaml"},
    )
    rel = read_release(out)
    assert [e["step"] for e in rel["checkpoints"]] == [0, 3, 6] and rel["final_step"] == 6
    assert rel["checkpoints"][-1]["eval_loss"] is not None and rel["recipe"]["max_steps"] == 6
    for entry in rel["checkpoints"][1:]:  # the shipped float16 weights score as the trainer logged, to rounding
        assert abs(entry["eval_loss"] - entry["eval_loss_logged"]) < 0.02, entry
    assert rel["checkpoints"][0]["eval_loss_logged"] is None and rel["checkpoints"][0]["eval_loss"] > 0
    assert rel["checkpoints"][1]["tokens_seen_at_most"] == 3 * 4 * 32
    card = (out / "README.md").read_text()
    assert "unigram baseline | 5.500" in card and "`tiny-en@3`" in card and "bertology pretrain --config x.yaml" in card
    assert not (out / "checkpoint-6" / "optimizer.pt").exists()
    assert (out / "metrics.jsonl").read_bytes() == (run_dir / "metrics.jsonl").read_bytes()
    shipped = load_file(str(out / "checkpoint-6" / "model.safetensors"))
    trained = load_file(str(run_dir / "checkpoint-6" / "model.safetensors"))
    assert shipped.keys() == trained.keys()
    for k, t in trained.items():
        assert shipped[k].dtype == torch.float16 and torch.equal(shipped[k], t.to(torch.float16)), k
    a = BertForMaskedLM.from_pretrained(str(out / "checkpoint-6"), dtype=torch.float32).eval()
    b = BertForMaskedLM.from_pretrained(str(run_dir / "checkpoint-6"), dtype=torch.float32).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    with torch.no_grad():
        assert torch.allclose(a(input_ids=ids).logits, b(input_ids=ids).logits, atol=2e-2)
    with pytest.raises(CheckpointError, match="no checkpoint for step"):
        export_release(run_dir, tmp_path / "release" / "bad", steps=[5])
    # scored by pseudo-log-likelihood as shipped: recorded per checkpoint and in the card
    texts = ["the jury said it did", "the city of atlanta"]
    scored = read_release(
        export_release(
            run_dir, tmp_path / "release" / "scored", steps=[0, 6], pll_texts=texts, pll_source="two test sentences"
        )
    )
    first, last = scored["checkpoints"]
    assert scored["pll_texts"] == {"source": "two test sentences", "sentences": 2}
    assert last["pll_words"] == 9 and last["pll_pieces"] >= 9
    assert last["pll_nats_per_piece_ci"][0] <= last["pll_nats_per_piece"] <= last["pll_nats_per_piece_ci"][1]
    assert last["pll_nats_per_piece"] < first["pll_nats_per_piece"]  # 6 steps of MLM training
    assert "PLL nats/piece [95%]" in (tmp_path / "release" / "scored" / "README.md").read_text()

    # the registry lists a release shipped in the package's data/models/ and loads it in float32
    from bertology import paths
    from bertology.errors import ModelError
    from bertology.models import list_models, load_model

    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (tmp_path / "release" / "tiny-en").rename(shipped / "tiny-en")
    monkeypatch.setattr(paths, "shipped_models_dir", lambda: shipped)
    names = set(list_models()["name"])
    assert {"tiny-en", "tiny-en@0", "tiny-en@3", "tiny-en@6"} <= names
    lm = load_model("tiny-en", mlm_head=True)
    assert lm.name == "tiny-en@6" and lm.has_mlm_head
    assert all(p.dtype == torch.float32 for p in lm.model.parameters())
    with torch.no_grad():
        assert torch.allclose(lm.model(input_ids=ids).logits, b(input_ids=ids).logits, atol=2e-2)
    assert load_model("tiny-en@3").name == "tiny-en@3"
    with pytest.raises(ModelError, match="checkpoints at steps \\[0, 3, 6\\]"):
        load_model("tiny-en@4")


def test_emergence_study_reads_a_shipped_release(corpus_and_tokenizer, tmp_path, monkeypatch):
    """The emergence study on a release shipped in data/models/: every checkpoint analysed, the
    release's own training curve, readable MLM predictions per step."""
    from bertology import paths
    from bertology.pretraining.release import export_release
    from bertology.results import read_manifest, read_table
    from bertology.studies import run_study

    run_dir = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, max_seq_len=128, max_steps=4, keep_steps=[0, 2]))
    export_release(run_dir, tmp_path / "shipped" / "tiny-en")
    monkeypatch.setattr(paths, "shipped_models_dir", lambda: tmp_path / "shipped")
    out = run_study(
        "emergence",
        overrides={
            "checkpoints": "tiny-en",
            "limit": 12,
            "tasks": ["pos"],
            "max_epochs": 2,
            "cloze_sentences": 3,
            "reference_model": "tiny-en@4",
        },
        results_root=tmp_path / "res",
        log=lambda m: None,
    )
    manifest = read_manifest(out)
    assert manifest["model"] == {"name": "tiny-en", "kind": "shipped release"}
    assert manifest["checkpoints"] == ["tiny-en@0", "tiny-en@2", "tiny-en@4"]
    pd.testing.assert_frame_equal(
        read_table(out, "training_metrics").drop(columns="run"), read_metrics(run_dir).drop(columns="run")
    )
    assert sorted(read_table(out, "head_types_by_step")["step"].unique()) == [0, 2, 4]
    assert sorted(read_table(out, "probe_scores")["step"].unique()) == [0, 2, 4]
    acc = read_table(out, "cloze_accuracy")
    assert acc["step"].tolist() == [0, 2, 4] and (acc["n"] > 0).all()
    cloze = read_table(out, "cloze_predictions")
    assert set(cloze["rank"]) == {1, 2, 3, 4, 5} and cloze["text"].str.contains("___").all()
    # the reference model answers the same questions: here the last checkpoint itself, so the same guesses
    reference = read_table(out, "reference_cloze_predictions")
    last = cloze[cloze["step"] == 4].drop(columns=["step", "model"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(reference.drop(columns="model"), last)
    assert read_table(out, "reference_cloze_accuracy")["top1"].iloc[0] == acc["top1"].iloc[-1]
    with pytest.raises(ConfigError, match="neither a shipped release"):
        run_study("emergence", overrides={"checkpoints": "nope"}, results_root=tmp_path / "res2", log=lambda m: None)


def test_emergence_study_keeps_the_sentences_a_short_position_run_can_read(corpus_and_tokenizer, tmp_path, monkeypatch):
    """A run trained with ``max_seq_len`` 24 has 24 positions: the emergence study analyses the
    first ``limit`` sentences that fit (attention maps need whole sentences), says how many it left
    out in the manifest, and every kept sentence fits; a run with room for all leaves out none."""
    from transformers import AutoTokenizer

    from bertology import paths
    from bertology.corpus import load_corpus
    from bertology.features import sentences_that_fit
    from bertology.pretraining.release import export_release
    from bertology.results import read_manifest, read_table
    from bertology.studies import run_study

    # a tokenizer the workbench trains carries the run's max_seq_len as its model_max_length
    tok = AutoTokenizer.from_pretrained(str(corpus_and_tokenizer[1]), model_max_length=24)
    tok.save_pretrained(tmp_path / "tok24")
    short = (corpus_and_tokenizer[0], tmp_path / "tok24")
    run_dir = run_pretraining(_cfg(short, tmp_path, max_seq_len=24, max_steps=2, keep_steps=[0]))
    export_release(run_dir, tmp_path / "shipped" / "short-en")
    monkeypatch.setattr(paths, "shipped_models_dir", lambda: tmp_path / "shipped")
    out = run_study(
        "emergence",
        overrides={"checkpoints": "short-en", "limit": 10, "tasks": ["pos"], "max_epochs": 1, "cloze_sentences": 0},
        results_root=tmp_path / "res",
        log=lambda m: None,
    )
    lengths = [
        len(tok(list(s.words), is_split_into_words=True)["input_ids"]) for s in load_corpus("brown-sample").sentences
    ]
    kept = [i for i, n in enumerate(lengths) if n <= 24][:10]
    manifest = read_manifest(out)
    assert manifest["corpus"]["left_out_too_long"] == sum(n > 24 for n in lengths[: kept[-1] + 1]) > 0
    types = read_table(out, "head_types_by_step")
    assert sorted(types["step"].unique()) == [0, 2]
    fit, dropped = sentences_that_fit(load_corpus("brown-sample"), tok, 10, max_tokens=24)
    assert [s.sent_id for s in fit] == [load_corpus("brown-sample").sentences[i].sent_id for i in kept]
    assert dropped == manifest["corpus"]["left_out_too_long"]
    everything, none_dropped = sentences_that_fit(load_corpus("brown-sample"), tok, 10, max_tokens=10_000)
    assert none_dropped == 0 and len(everything) == 10


def test_random_token_pool_is_a_config_field(corpus_and_tokenizer, tmp_path):
    from transformers import AutoTokenizer

    from bertology.pretraining.data import Masker

    tok = AutoTokenizer.from_pretrained(str(corpus_and_tokenizer[1]))
    whole = Masker(_cfg(corpus_and_tokenizer, tmp_path), tok).pool
    assert whole.tolist() == list(range(len(tok)))  # BERT: the whole vocabulary
    plain = Masker(_cfg(corpus_and_tokenizer, tmp_path, random_token_pool="non_special"), tok).pool
    assert set(plain.tolist()) == set(range(len(tok))) - set(tok.all_special_ids)
    with pytest.raises(ConfigError, match="'random_token_pool'"):
        _cfg(corpus_and_tokenizer, tmp_path, random_token_pool="frequent")
    assert load_config("english_cpu").random_token_pool == "non_special"  # what the shipped model used


def test_unigram_baseline_scores_the_eval_targets(corpus_and_tokenizer, tmp_path):
    import math

    from transformers import AutoTokenizer

    from bertology.pretraining import unigram_baseline

    run_dir = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, max_steps=3, keep_steps=[0]))
    base = unigram_baseline(run_dir)
    tok = AutoTokenizer.from_pretrained(str(corpus_and_tokenizer[1]))
    ordinary = len(tok) - len(set(tok.all_special_ids))
    assert 0 < base["unigram_eval_loss"] < math.log(ordinary)  # better than uniform guessing
    assert base["eval_targets"] > 0 and base["heldout_tokens"] >= base["eval_targets"]
    first_eval = read_metrics(run_dir).query("metric == 'eval_loss'")["value"].iloc[0]
    assert first_eval > base["unigram_eval_loss"]  # 3 steps of a random model: worse


def test_same_config_and_seed_give_the_same_bytes(corpus_and_tokenizer, tmp_path):
    """Issue 17.2: with the tokenizer trained by the run, two runs of one config give the same
    tokenizer.json and the same weights (they differed from step 5 on when tokenizers' WordPiece
    trainer numbered its ``##`` alphabet in hash-map order)."""
    runs = [
        run_pretraining(
            _cfg(
                corpus_and_tokenizer,
                tmp_path / name,
                run_name="same",
                tokenizer=None,
                vocab_size=300,
                max_steps=6,
                keep_steps=[],
                save_every=6,
                eval_every=6,
            )
        )
        for name in ("a", "b")
    ]
    a, b = (r / "tokenizer" / "tokenizer.json" for r in runs)
    assert a.read_bytes() == b.read_bytes()
    wa, wb = (load_file(str(r / "checkpoint-6" / "model.safetensors")) for r in runs)
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    for name in (
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "optimizer.pt",
        "scheduler.pt",
        "rng.safetensors",
        "trainer_state.json",
    ):
        assert (runs[0] / "checkpoint-6" / name).read_bytes() == (runs[1] / "checkpoint-6" / name).read_bytes(), name
    ma, mb = (read_metrics(r).query("metric != 'tokens_per_s'") for r in runs)  # speed is the one difference
    assert ma.equals(mb) and len(ma) == 6 + 6 + 2  # loss and lr per step, eval_loss and perplexity
