"""Pretraining that goes wrong stops cleanly (issue 17.3, 17.6): NaN/inf losses, diverged
evaluation, max_steps changed on resume, broken run files, a full disk, half-written checkpoints."""

from __future__ import annotations

import errno
import json
import math

import pytest
import torch
from safetensors.torch import load_file
from test_pretrain_trainer import _cfg, corpus_and_tokenizer, run_killed_after  # noqa: F401  (the module's fixture)

from bertology.checkpoints import list_checkpoints
from bertology.errors import CheckpointError, ConfigError
from bertology.pretraining import TrainingDivergedError, load_config, read_metrics, run_pretraining
from bertology.pretraining.objectives import perplexity
from bertology.pretraining.runtime import Runtime


def test_nan_loss_stops_at_once_and_keeps_the_finite_checkpoints(corpus_and_tokenizer, tmp_path):
    """learning_rate 1000 (the issue's case): the run stops with a clear error; no NaN is saved."""
    cfg = _cfg(
        corpus_and_tokenizer,
        tmp_path,
        run_name="lr1000",
        learning_rate=1000.0,
        max_steps=20,
        save_every=2,
        keep_steps=[0],
        eval_every=100,
    )
    with pytest.raises(TrainingDivergedError, match=r"lr1000: training diverged at step \d+: loss (nan|inf)"):
        run_pretraining(cfg)
    run = tmp_path / "models" / "lr1000"
    steps = [s for s, _ in list_checkpoints(run)]
    assert steps and steps[0] == 0 and max(steps) < 20  # stopped early, the finished step never reached
    for _, path in list_checkpoints(run):
        weights = load_file(str(path / "model.safetensors"))
        assert all(torch.isfinite(w).all() for w in weights.values()), path
    m = read_metrics(run)
    assert m["value"].map(math.isfinite).all()  # no NaN line in the metrics either
    assert not [p for p in run.iterdir() if p.name.startswith(".") and p.name != ".lock"]


def test_perplexity_of_a_diverged_loss_is_inf_not_an_overflow(corpus_and_tokenizer, tmp_path):
    from transformers import AutoModelForMaskedLM

    from bertology.pretraining.data import Masker, read_run_data
    from bertology.pretraining.evaluation import evaluate

    assert perplexity(2.0) == pytest.approx(math.exp(2.0))
    assert perplexity(709.0) == pytest.approx(math.exp(709.0))
    assert perplexity(710.0) == math.inf and perplexity(1e6) == math.inf
    assert math.isnan(perplexity(math.nan))
    run = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, run_name="ev", max_steps=2, keep_steps=[]))
    cfg, tok, _, heldout = read_run_data(run)
    model = AutoModelForMaskedLM.from_pretrained(run / "checkpoint-2")
    with torch.no_grad():  # plant a diverged head: the [UNK] logit 1e4 above every other
        model.cls.predictions.bias[tok.unk_token_id] = 1e4
    ev = evaluate(model, heldout, Masker(cfg, tok), cfg, Runtime(torch.device("cpu")), tok.pad_token_id)
    assert ev["eval_loss"] > 5000 and ev["perplexity"] == math.inf


def _finite_worker(rank: int, init_file: str, values: list[float], out_dir: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    agreed = Runtime(torch.device("cpu"), rank, 2).all_finite(values[rank])
    (torch.tensor([agreed]).numpy().tofile(f"{out_dir}/rank{rank}"))
    dist.destroy_process_group()


@pytest.mark.slow  # two gloo processes per case
@pytest.mark.parametrize(
    "values,expected", [([1.0, float("nan")], False), ([float("inf"), 2.0], False), ([1.0, 2.0], True)]
)
def test_ddp_ranks_agree_on_a_non_finite_loss(tmp_path, values, expected):
    """Only one rank sees the NaN; both stop (none would wait forever in the next all-reduce)."""
    import numpy as np
    import torch.multiprocessing as mp

    mp.spawn(_finite_worker, args=(str(tmp_path / "init"), values, str(tmp_path)), nprocs=2, join=True)
    got = [bool(np.fromfile(tmp_path / f"rank{r}", dtype=bool)[0]) for r in (0, 1)]
    assert got == [expected, expected]


def test_max_steps_change_is_refused_or_a_recorded_phase(corpus_and_tokenizer, tmp_path):
    kw = dict(
        run_name="ph",
        max_steps=4,
        save_every=2,
        keep_steps=[],
        keep_last=1,
        warmup_steps=2,
        learning_rate=3e-3,
        eval_every=100,
    )
    run = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, **kw))
    assert [s for s, _ in list_checkpoints(run)] == [2, 4]  # one rolling + the final
    with pytest.raises(ConfigError, match=r"max_steps 8.*schedule ends at 4.*new_phase=True"):
        run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, **{**kw, "max_steps": 8}))
    assert [s for s, _ in list_checkpoints(run)] == [2, 4]  # nothing pruned by the refused call
    run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, **{**kw, "max_steps": 8}), new_phase=True)
    # phase 1's checkpoints all stay (pruning used to keep only [6, 8]); 6 is phase 2's one rolling checkpoint
    assert [s for s, _ in list_checkpoints(run)] == [2, 4, 6, 8]
    info = json.loads((run / "run.json").read_text())
    assert info["config"]["max_steps"] == 4  # the record of how the run started is unchanged
    assert [(p["start_step"], p["max_steps"]) for p in info["phases"]] == [(0, 4), (4, 8)]
    # the multiplier at step 4: 0 under the old schedule (decay ended), (8 - 4) / (8 - 2) under the new
    assert info["phases"][1]["lr_multiplier_before"] == 0.0
    assert info["phases"][1]["lr_multiplier_after"] == pytest.approx(4 / 6, abs=1e-6)
    lr = read_metrics(run).query("metric == 'lr'").set_index("step")["value"]
    assert lr[4] == pytest.approx(3e-3 * (4 - 3) / (4 - 2))  # phase 1, step index 3
    assert lr[5] == pytest.approx(3e-3 * 4 / 6)  # phase 2 from step index 4
    assert json.loads((run / "checkpoint-8" / "trainer_state.json").read_text())["max_steps"] == 8
    # the same command again is a finished run; a phase ending before the last checkpoint is refused
    assert run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, **{**kw, "max_steps": 8})) == run
    with pytest.raises(ConfigError, match="must end after the last checkpoint"):
        run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, **{**kw, "max_steps": 6}), new_phase=True)


@pytest.fixture()
def stopped_run(corpus_and_tokenizer, tmp_path):
    """A run "killed" after step 4 (checkpoints 0, 2, 4 of 6) and the config that resumes it."""
    cfg = _cfg(
        corpus_and_tokenizer,
        tmp_path,
        run_name="broken",
        max_steps=6,
        save_every=2,
        keep_steps=[0],
        keep_last=2,
        eval_every=100,
    )
    run = run_killed_after(cfg, 4)
    assert [s for s, _ in list_checkpoints(run)] == [0, 2, 4]
    return run, cfg


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("optimizer.pt", b"garbage, not a torch file", r"checkpoint-4/optimizer.pt: corrupt or unreadable"),
        ("scheduler.pt", b"", r"checkpoint-4/scheduler.pt: corrupt or unreadable"),
        ("rng.safetensors", b"\x00\x01", r"checkpoint-4/rng.safetensors: corrupt RNG state"),
        ("trainer_state.json", b'{"step": 4,', r"checkpoint-4/trainer_state.json:1: broken trainer state"),
        ("trainer_state.json", b'{"stp": 4}', r"checkpoint-4/trainer_state.json: broken trainer state"),
    ],
)
def test_broken_trainer_state_files_are_clear_errors(stopped_run, name, content, message):
    run, cfg = stopped_run
    (run / "checkpoint-4" / name).write_bytes(content)
    with pytest.raises(CheckpointError, match=message):
        run_pretraining(cfg)


def test_a_state_dict_of_another_model_is_a_clear_error(stopped_run):
    run, cfg = stopped_run
    torch.save({"state": {}, "param_groups": [{"params": [0]}]}, run / "checkpoint-4" / "optimizer.pt")
    with pytest.raises(CheckpointError, match="checkpoint-4: optimizer/scheduler state does not fit"):
        run_pretraining(cfg)


def test_broken_run_json_is_a_clear_error(stopped_run):
    run, cfg = stopped_run
    (run / "run.json").write_text('{"config": {"seed": 0,\n  "oops": }\n')
    with pytest.raises(CheckpointError, match=r"broken/run.json:2: broken run record"):
        run_pretraining(cfg)
    (run / "run.json").write_text('["a list"]\n')
    with pytest.raises(CheckpointError, match=r"run.json: broken run record \(no 'config'"):
        run_pretraining(cfg)


def test_metrics_lines_broken_or_cut_short(stopped_run):
    run, cfg = stopped_run
    path = run / "metrics.jsonl"
    good = path.read_text()
    n_loss = (read_metrics(run).metric == "loss").sum()
    path.write_text(good + '{"step": 5, "loss": 3.')  # a line cut by a kill: skipped, not an error
    assert (read_metrics(run).metric == "loss").sum() == n_loss
    lines = good.splitlines()
    path.write_text("\n".join(lines[:2] + ['{"step": 2, "loss": "x"}'] + lines[2:]) + "\n")
    with pytest.raises(CheckpointError, match=r"metrics.jsonl:3: broken metrics line"):
        read_metrics(run)
    path.write_text(good + '{"step": 5, "loss": 3.')
    run_pretraining(cfg)  # resuming drops the cut line and continues
    m = read_metrics(run)
    assert sorted(m.query("metric == 'loss'").step) == [1, 2, 3, 4, 5, 6]
    assert path.read_text().endswith("\n")


def test_disk_full_while_saving_leaves_nothing_partial(stopped_run, monkeypatch):
    import bertology.pretraining.checkpoint as checkpoint

    run, cfg = stopped_run
    real = checkpoint.save_trainer_state

    def full_disk(ckpt_dir, **kw):
        (ckpt_dir / "optimizer.pt").write_bytes(b"half an optimizer")  # the bytes that did fit
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint, "save_trainer_state", full_disk)
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint-6: cannot write the checkpoint \(No space left on "
        r"device\); nothing of it was left behind.*steps \[0, 2, 4\]",
    ):
        run_pretraining(cfg)
    assert [s for s, _ in list_checkpoints(run)] == [0, 2, 4]
    assert not [p for p in run.iterdir() if p.name.startswith(".") and p.name != ".lock"]  # no temporary folder left
    monkeypatch.setattr(checkpoint, "save_trainer_state", real)
    run_pretraining(cfg)  # space freed: the same command resumes from step 4 and finishes
    assert [s for s, _ in list_checkpoints(run)] == [0, 2, 4, 6]


def test_half_written_checkpoint_folders_are_removed_on_resume(stopped_run):
    run, cfg = stopped_run
    partial = run / ".checkpoint-6.k2j4x9.tmp"  # what a kill during atomic_dir leaves
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"half")
    (run / ".run.json.q8w1e2.tmp").write_text("{")
    (run / "data" / ".sequences-0123.safetensors.a1b2c3.tmp").write_bytes(b"x")
    (run / ".notes").write_text("the user's own hidden file")
    run_pretraining(cfg)
    hidden = sorted(p.name for p in [*run.iterdir(), *(run / "data").iterdir()] if p.name.startswith("."))
    assert hidden == [".lock", ".notes"]  # the run folder's lock (the trainer's, as a study's) stays
    assert [s for s, _ in list_checkpoints(run)] == [0, 2, 4, 6]


@pytest.mark.parametrize(
    "field,value",
    [("num_hidden_layers", 0), ("num_attention_heads", -4), ("hidden_size", 0), ("batch_size", -1), ("max_steps", 0)],
)
def test_shipped_recipe_with_zero_or_negative_sizes_is_refused(field, value):
    with pytest.raises(
        ConfigError,
        match=rf"pretrain_default.yaml: config field '{field}': must be >= 1, "
        rf"got {value}",
    ):
        load_config("default", **{field: value})


def test_cuda_without_a_gpu_is_a_config_error(corpus_and_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="'device': cuda requested but no CUDA device"):
        run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, device="cuda"))
    assert not (tmp_path / "models").exists()


def test_resume_on_an_edited_corpus_is_refused(corpus_and_tokenizer, tmp_path):
    """Same run name and corpus path, other text: neither continued nor reported as finished."""
    corpus, tok = corpus_and_tokenizer
    edited = tmp_path / "corpus.txt"
    edited.write_text(corpus.read_text(encoding="utf-8"), encoding="utf-8")
    kw = dict(run_name="edited", corpus=str(edited), max_steps=2, save_every=2, keep_steps=[], eval_every=100)
    run = run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, **kw))
    assert run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, **kw)) == run  # unchanged: finished, nothing to do
    edited.write_text(edited.read_text(encoding="utf-8").replace("the ", "a "), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"corpus .*corpus.txt changed since the run started"):
        run_pretraining(_cfg(corpus_and_tokenizer, tmp_path, **kw))


def test_a_missing_builder_corpus_says_how_to_build_it(tmp_path):
    from bertology.pretraining.data import corpus_path, heldout_path

    folder = tmp_path / "english-corpus"
    cfg = load_config(None, corpus=str(folder / "train"))
    with pytest.raises(
        ConfigError, match=rf"'corpus': {folder}/train does not exist .*bertology build-corpus --out {folder}`"
    ):
        corpus_path(cfg)
    cfg = load_config(None, corpus=str(tmp_path / "notes.txt"))
    with pytest.raises(ConfigError, match=r"notes.txt does not exist$"):  # not a builder layout: no hint
        corpus_path(cfg)
    (tmp_path / "c.txt").write_text("A line.\n")
    cfg = load_config(None, corpus=str(tmp_path / "c.txt"), heldout_corpus=str(folder / "heldout"))
    with pytest.raises(ConfigError, match=r"'heldout_corpus': .*the heldout split .*build-corpus"):
        heldout_path(cfg)
