"""The shared training loop's speed work changes no result: batches built ahead by worker processes
(the GPU default; a thread where processes cannot fork) give the same losses, weights and
resumption as batches built in the step; the MLM
targets found on the CPU give the same loss and gradients; ``compile: true`` compiles only the
training forward (checkpoints keep their keys); fused AdamW only on CUDA; ``mfu`` in the log rows
when a peak is known. The ``gpu`` tests run the loop on a CUDA device."""

from __future__ import annotations

import json
import math
import multiprocessing
import threading
import time

import pytest
import torch
from safetensors.torch import load_file
from test_finetuning import _cfg as _ft_cfg
from test_finetuning import planted  # noqa: F401  (the module's fixture, a test parameter here)
from test_pretrain_trainer import _cfg, corpus_and_tokenizer, run_killed_after  # noqa: F401

import bertology.pretraining.loop as loop_module
import bertology.pretraining.trainer as trainer_module
from bertology.checkpoints import list_checkpoints, load_trainer_state
from bertology.errors import ConfigError
from bertology.finetuning import FinetuneConfig, run_finetuning
from bertology.pretraining import read_metrics, run_pretraining
from bertology.pretraining.data import pad_width
from bertology.pretraining.flops import gpu_peak_flops, peak_flops, pretraining_flops_per_token
from bertology.pretraining.loop import Prefetcher
from bertology.pretraining.objectives import PretrainingLoss, build_model, target_positions
from bertology.pretraining.optimization import adamw_implementation, make_optimizer
from bertology.pretraining.trainer import batch_width


def _prefetch(monkeypatch, depth: int) -> None:
    """Batches built ahead by ``depth`` worker processes on every device (the CPU included)."""
    monkeypatch.setattr(loop_module, "default_prefetch", lambda device: depth)


def _metrics(run) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if k not in ("tokens_per_s", "mfu")}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]


def _weights(run, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run / f"checkpoint-{step}" / "model.safetensors"))


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- prefetching


def test_prefetcher_keeps_order_raises_the_builders_error_and_stops():
    built = []

    def build(step: int, micro: int):
        built.append((step, micro))
        if (step, micro) == (3, 1):
            raise ValueError("broken batch")
        return step * 10 + micro

    items = [(s, m) for s in range(5) for m in range(2)]
    p = Prefetcher(build, items, depth=2)
    assert [p.get(item) for item in items[:7]] == [0, 1, 10, 11, 20, 21, 30]
    with pytest.raises(ValueError, match="broken batch"):
        p.get((3, 1))
    p.close()
    assert built == items[:8]  # nothing built after the error

    # closed mid-way (a kill): the thread stops without being read to the end
    slow = Prefetcher(lambda s: time.sleep(0.01) or s, [(i,) for i in range(1000)], depth=3)
    assert slow.get((0,)) == 0
    slow.close()
    assert not any(t.name == "bertology-prefetch" and t.is_alive() for t in threading.enumerate())


@pytest.mark.parametrize("kw", [dict(objective="mlm"), dict(objective="mlm+sop", grad_accum_steps=2)])
def test_prefetched_batches_give_the_same_run(corpus_and_tokenizer, tmp_path, monkeypatch, kw):
    plain = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="plain", **kw))
    _prefetch(monkeypatch, 2)
    ahead = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="ahead", **kw))
    assert _metrics(plain) == _metrics(ahead)  # losses, lr, eval loss: equal, not close
    assert _same_weights(_weights(plain, 6), _weights(ahead, 6))
    # a prefetching run killed after step 5 (batches of steps 6.. already built) resumes to the same end
    killed = run_killed_after(_cfg(corpus_and_tokenizer, tmp_path, run_name="killed", **kw), 5)
    run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="killed", **kw))
    assert _same_weights(_weights(plain, 6), _weights(killed, 6))
    assert not any(t.name == "bertology-prefetch" and t.is_alive() for t in threading.enumerate())
    assert multiprocessing.active_children() == []  # the workers of the killed run are gone too


def test_prefetching_thread_gives_the_same_run(corpus_and_tokenizer, tmp_path, monkeypatch):
    """Where processes cannot be forked, a thread builds the batches ahead: the same run."""
    kw = dict(objective="mlm", grad_accum_steps=2)
    plain = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="plain", **kw))
    _prefetch(monkeypatch, 2)
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    ahead = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="ahead", **kw))
    assert _metrics(plain) == _metrics(ahead)
    assert _same_weights(_weights(plain, 6), _weights(ahead, 6))


def test_worker_count_default_and_override(monkeypatch):
    monkeypatch.delenv("BERTOLOGY_PREFETCH_WORKERS", raising=False)
    assert loop_module.default_prefetch(torch.device("cuda", 0)) == 2
    assert loop_module.default_prefetch(torch.device("cpu")) == 0
    monkeypatch.setenv("BERTOLOGY_PREFETCH_WORKERS", "0")
    assert loop_module.default_prefetch(torch.device("cuda", 0)) == 0
    monkeypatch.setenv("BERTOLOGY_PREFETCH_WORKERS", "-1")
    with pytest.raises(ConfigError, match="BERTOLOGY_PREFETCH_WORKERS"):
        loop_module.default_prefetch(torch.device("cpu"))


def test_prefetched_finetuning_gives_the_same_run(planted, tmp_path, monkeypatch):  # noqa: F811
    kw = dict(max_steps=6, eval_every=3, grad_accum_steps=2, batch_size=8)
    plain = run_finetuning(_ft_cfg(planted, tmp_path, run_name="plain", **kw))
    _prefetch(monkeypatch, 2)
    ahead = run_finetuning(_ft_cfg(planted, tmp_path, run_name="ahead", **kw))
    assert _metrics(plain) == _metrics(ahead)
    ((_, a),) = list_checkpoints(plain)
    ((_, b),) = list_checkpoints(ahead)
    assert _same_weights(load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors")))


def test_targets_found_on_the_cpu_give_the_same_loss_and_gradients(corpus_and_tokenizer, tmp_path):
    cfg = _cfg(corpus_and_tokenizer, tmp_path, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=300, pad_token_id=0)
    ids = torch.randint(5, 300, (4, 32))
    labels = torch.full_like(ids, -100)
    labels[torch.rand(ids.shape) < 0.2] = 7
    labels[2] = -100  # a row without targets
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    loss_fn = PretrainingLoss(model)
    results = []
    for index in (None, target_positions(labels)):
        model.zero_grad()
        loss, _, _ = loss_fn(ids, mask, types, labels, target_index=index)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (l1, g1), (l2, g2) = results
    assert torch.equal(l1, l2) and all(torch.equal(g1[n], g2[n]) for n in g1)
    assert target_positions(labels).tolist() == (labels.reshape(-1) != -100).nonzero().reshape(-1).tolist()


# --------------------------------------------------------------------------- compile


def test_compile_is_a_checked_field_and_compiles_only_the_training_forward(corpus_and_tokenizer, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="'compile'.*true/false"):
        _cfg(corpus_and_tokenizer, tmp_path, compile="yes")
    with pytest.raises(ConfigError, match="'compile'"):
        FinetuneConfig(compile=1)
    compiled = []

    def fake_compile(module, *args, **kwargs):
        compiled.append(module)
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    plain = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="plain", max_steps=2, keep_steps=[]))
    assert compiled == []
    run = run_pretraining(
        _cfg(corpus_and_tokenizer, tmp_path, run_name="comp", max_steps=2, keep_steps=[], compile=True)
    )
    assert len(compiled) == 1 and isinstance(compiled[0], PretrainingLoss)
    assert _weights(run, 2).keys() == _weights(plain, 2).keys()
    assert not any("_orig_mod" in k for k in _weights(run, 2))
    assert json.loads((run / "run.json").read_text())["config"]["compile"] is True
    # a runtime field: a run resumes with it switched (and old runs, without it, resume)
    run_killed_after(_cfg(corpus_and_tokenizer, tmp_path, run_name="switch", max_steps=4, save_every=2), 2)
    run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="switch", max_steps=4, save_every=2, compile=True))
    assert len(compiled) == 2


def test_padded_width_keeps_the_loss_and_one_shape_under_compile(corpus_and_tokenizer, tmp_path):  # noqa: F811
    """A batch padded wider (pad tokens outside the attention mask, labels ignored) has the same
    loss as the batch itself; the trainer pads to max_seq_len under compile (a batch one token
    narrower at a document's end made torch.compile build its graph again on an H100), to a
    multiple of 8 on CUDA, and leaves CPU batches as they are."""
    cfg = _cfg(corpus_and_tokenizer, tmp_path, dropout=0.0)
    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=300, pad_token_id=0).eval()
    ids = torch.randint(5, 300, (3, 27))
    labels = torch.full_like(ids, -100)
    labels[:, 3::5] = 9
    batch = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "token_type_ids": torch.zeros_like(ids),
        "word_ids": torch.arange(27).repeat(3, 1),
        "labels": labels,
        "pair_labels": torch.zeros(3, dtype=torch.long),
    }
    wide = pad_width(batch, 32, pad_id=0)
    assert wide["input_ids"].shape == (3, 32) and wide["pair_labels"].shape == (3,)
    assert (wide["labels"][:, 27:] == -100).all() and (wide["attention_mask"][:, 27:] == 0).all()
    assert (wide["word_ids"][:, 27:] == -1).all() and (wide["input_ids"][:, 27:] == 0).all()
    assert pad_width(batch, 20, pad_id=0) is batch
    loss_fn = PretrainingLoss(model)
    with torch.no_grad():
        narrow_loss = loss_fn(*(batch[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")))[0]
        wide_loss = loss_fn(*(wide[k] for k in ("input_ids", "attention_mask", "token_type_ids", "labels")))[0]
    assert wide_loss.item() == pytest.approx(narrow_loss.item(), rel=1e-5)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert (
        batch_width(125, cfg, cpu) == 125 and batch_width(125, cfg, cuda) == 128 and batch_width(128, cfg, cuda) == 128
    )
    compiled = _cfg(corpus_and_tokenizer, tmp_path, compile=True)
    assert batch_width(17, compiled, cpu) == compiled.max_seq_len == batch_width(17, compiled, cuda)


def test_compile_builds_one_graph_for_every_target_count(corpus_and_tokenizer, tmp_path, monkeypatch):  # noqa: F811
    """The number of MLM targets changes from batch to batch; the trainer marks it dynamic from the
    first step, so torch.compile does not build a static graph first and a dynamic one at the
    second size (on an H100 each build cost a ~45 s log window). Counted with a backend that
    records the graphs it is given (no code generation: the CPU test stays fast)."""
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda module, **kw: real_compile(module, backend=counting_backend))
    torch._dynamo.reset()
    seen_targets = []

    def recording_positions(labels):  # where the batch is built (outside the compiled forward)
        index = target_positions(labels)
        seen_targets.append(int(index.shape[0]))
        return index

    _prefetch(monkeypatch, 0)
    monkeypatch.setattr(trainer_module, "target_positions", recording_positions)
    run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="one", max_steps=1, keep_steps=[], compile=True))
    after_one = len(graphs)
    torch._dynamo.reset()
    graphs.clear()
    seen_targets.clear()
    run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="four", max_steps=4, keep_steps=[], compile=True))
    assert after_one >= 1
    assert len(set(seen_targets)) > 1  # the batches do have different target counts
    assert len(graphs) == after_one  # ... and no step after the first compiled anything again
    torch._dynamo.reset()


def test_finetuning_compile_wraps_the_training_forward(planted, tmp_path, monkeypatch):  # noqa: F811
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda module, *a, **k: compiled.append(module) or module)
    run = run_finetuning(_ft_cfg(planted, tmp_path, run_name="comp", max_steps=2, compile=True))
    assert len(compiled) == 1 and type(compiled[0]).__name__.endswith("ForTokenClassification")
    ((_, path),) = list_checkpoints(run)
    assert not any("_orig_mod" in k for k in load_file(str(path / "model.safetensors")))


# --------------------------------------------------------------------------- fused AdamW


def test_fused_adamw_only_for_parameters_on_cuda(corpus_and_tokenizer, tmp_path):
    assert adamw_implementation(torch.device("cuda", 0)) == {"fused": True}
    assert adamw_implementation("cuda") == {"fused": True}
    assert adamw_implementation(torch.device("cpu")) == {"foreach": True}
    cfg = _cfg(corpus_and_tokenizer, tmp_path)
    opt = make_optimizer(build_model(cfg, vocab_size=300, pad_token_id=0), cfg)
    assert opt.defaults["foreach"] is True and not opt.defaults.get("fused")


# --------------------------------------------------------------------------- MFU


def test_gpu_peaks_and_the_override(monkeypatch):
    assert gpu_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert gpu_peak_flops("NVIDIA H200") == 989e12
    assert gpu_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert gpu_peak_flops("NVIDIA GeForce GTX 1080") is None
    monkeypatch.delenv("BERTOLOGY_PEAK_FLOPS", raising=False)
    assert peak_flops("cpu") is None
    monkeypatch.setenv("BERTOLOGY_PEAK_FLOPS", "2.5e12")
    assert peak_flops("cpu") == 2.5e12
    monkeypatch.setenv("BERTOLOGY_PEAK_FLOPS", "fast")
    with pytest.raises(ConfigError, match="BERTOLOGY_PEAK_FLOPS"):
        peak_flops("cpu")


def test_mfu_is_logged_when_a_peak_is_known(corpus_and_tokenizer, tmp_path, monkeypatch):
    monkeypatch.delenv("BERTOLOGY_PEAK_FLOPS", raising=False)
    without = read_metrics(run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="cpu", max_steps=3)))
    assert "mfu" not in set(without.metric)
    monkeypatch.setenv("BERTOLOGY_PEAK_FLOPS", "1e12")
    cfg = _cfg(corpus_and_tokenizer, tmp_path, run_name="peak", max_steps=3)
    m = read_metrics(run_pretraining(cfg)).pivot(index="step", columns="metric", values="value")
    per_token = pretraining_flops_per_token(cfg, 300)
    assert list(m["mfu"].dropna().index) == [1, 2, 3]  # every log row
    assert (m["mfu"] > 0).all()
    assert m["mfu"].to_numpy() == pytest.approx(per_token * m["tokens_per_s"].to_numpy() / 1e12)
    # the other columns are the CPU run's
    assert set(without.metric) == set(m.columns) - {"mfu"}


def test_finetuning_logs_mfu_with_a_peak(planted, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("BERTOLOGY_PEAK_FLOPS", "1e12")
    run = run_finetuning(_ft_cfg(planted, tmp_path, run_name="mfu", max_steps=2, log_every=1))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    mfu = [r["mfu"] for r in rows if "tokens_per_s" in r]
    assert len(mfu) == 2 and all(0 < x < 1 and math.isfinite(x) for x in mfu)


# --------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
def test_cuda_run_prefetches_uses_fused_adamw_and_logs_mfu(corpus_and_tokenizer, tmp_path, monkeypatch):
    monkeypatch.delenv("BERTOLOGY_PEAK_FLOPS", raising=False)
    seen = []
    original = loop_module._Batches.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(self.loader is not None)

    monkeypatch.setattr(loop_module._Batches, "__init__", record)
    kw = dict(device="cuda", max_steps=6, grad_accum_steps=2)
    run = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="gpu", **kw))
    assert seen == [True]  # worker processes build the batches
    optimizer, _, _, _ = load_trainer_state(run / "checkpoint-6")  # the workbench's own reader (weights_only)
    assert optimizer["param_groups"][0]["fused"] is True
    m = read_metrics(run)
    assert m.query("metric == 'loss'")["value"].map(math.isfinite).all()
    if gpu_peak_flops(torch.cuda.get_device_name()):
        assert (m.query("metric == 'mfu'")["value"] > 0).all() and len(m.query("metric == 'mfu'")) == 6
    # the same run built in the step: the same batches, so (up to CUDA's atomics) the same losses
    monkeypatch.setattr(loop_module, "default_prefetch", lambda device: 0)
    again = read_metrics(run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="gpu0", **kw)))
    a, b = (x.query("metric == 'loss'")["value"].to_numpy() for x in (m, again))
    assert a == pytest.approx(b, rel=1e-3)


@pytest.mark.gpu
def test_cuda_compile_trains_and_saves_plain_keys(corpus_and_tokenizer, tmp_path):
    kw = dict(device="cuda", max_steps=3, keep_steps=[])
    plain = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="plain", **kw))
    comp = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="comp", compile=True, **kw))
    assert _weights(comp, 3).keys() == _weights(plain, 3).keys()
    a, b = (read_metrics(r).query("metric == 'loss'")["value"].to_numpy() for r in (plain, comp))
    assert a == pytest.approx(b, rel=2e-2)
