"""The ``pretrain`` and ``tokenizer train`` commands, through their own Typer app."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from bertology.checkpoints import list_checkpoints
from bertology.cli.pretrain import register
from bertology.errors import ConfigError
from bertology.paths import package_data

BROWN = package_data() / "brown.txt.gz"


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _brown(tmp_path: Path, n_docs: int = 15) -> Path:
    out, lines, docs = tmp_path / "brown.txt", [], 0
    with gzip.open(BROWN, "rt", encoding="utf-8") as fh:
        for line in fh:
            lines.append(line)
            docs += not line.strip()
            if docs >= n_docs:
                break
    out.write_text("".join(lines), encoding="utf-8")
    return out


def test_tokenizer_train_command(tmp_path):
    from transformers import AutoTokenizer

    text = _brown(tmp_path)
    res = CliRunner().invoke(
        _app(),
        [
            "tokenizer",
            "train",
            "--input",
            str(text),
            "--kind",
            "bpe",
            "--vocab-size",
            "400",
            "--output",
            str(tmp_path / "tok"),
        ],
    )
    assert res.exit_code == 0, res.output
    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert tok.mask_token == "<mask>" and len(tok) <= 400


def test_pretrain_command_trains_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "models"))
    cfg = dict(
        corpus=str(_brown(tmp_path)),
        vocab_size=200,
        num_hidden_layers=1,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        max_seq_len=32,
        batch_size=4,
        warmup_steps=1,
        log_every=1,
        eval_every=2,
        save_every=2,
        keep_steps=[0],
        progress=False,
        num_threads=1,
    )
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    app = _app()
    res = CliRunner().invoke(app, ["pretrain", "--config", str(path), "--output", "cli-run", "--max-steps", "2"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "models" / "cli-run"
    assert "eval_loss=" in res.output and (run / "tokenizer" / "tokenizer.json").is_file()
    assert [s for s, _ in list_checkpoints(run)] == [0, 2]
    # another --max-steps changes the learning-rate schedule: refused unless asked for as a new phase
    res = CliRunner().invoke(app, ["pretrain", "--config", str(path), "--output", "cli-run", "--max-steps", "4"])
    assert isinstance(res.exception, ConfigError) and "--new-phase" in str(res.exception)
    assert [s for s, _ in list_checkpoints(run)] == [0, 2]
    res = CliRunner().invoke(
        app, ["pretrain", "--config", str(path), "--output", "cli-run", "--max-steps", "4", "--new-phase"]
    )
    assert res.exit_code == 0, res.output
    assert [s for s, _ in list_checkpoints(run)] == [0, 2, 4]  # the finished step-2 checkpoint is kept
    phases = json.loads((run / "run.json").read_text())["phases"]
    assert [(p["start_step"], p["max_steps"]) for p in phases] == [(0, 2), (2, 4)]


def test_pretrain_command_option_checks(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("BERTOLOGY_MODELS", str(tmp_path / "models"))
    app = _app()
    res = CliRunner().invoke(app, ["pretrain", "--config", "default", "--max-steps", "-5"])
    assert isinstance(res.exception, ConfigError) and "--max-steps" in str(res.exception)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = CliRunner().invoke(app, ["pretrain", "--config", "default", "--device", "cuda", "--max-steps", "1"])
    assert isinstance(res.exception, ConfigError) and "'device': cuda requested" in str(res.exception)
    assert not (tmp_path / "models").exists()  # refused before anything was written


def test_pretrain_help_names_every_shipped_recipe():
    import re

    from bertology.pretraining import shipped_configs

    res = CliRunner().invoke(_app(), ["pretrain", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    text = re.sub(r"[\s│]+", " ", res.output)
    recipes = list(shipped_configs())
    assert {"default", "bert_base_gpu", "electra_small", "albert", "distil"} <= set(recipes)
    assert f"a shipped recipe ({', '.join(recipes)})" in text
    assert "bertology.pretraining.trainer" not in text


@pytest.mark.slow  # a fresh python -m process
def test_python_m_bertology_pretraining_is_the_pretrain_command(tmp_path):
    """``python -m bertology.pretraining`` (what torchrun starts) runs ``bertology pretrain``: the same
    options, and the same one-line error and exit code 2."""
    import os
    import re
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "bertology.pretraining", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "200"},
        )

    module_help = run("--help")
    assert module_help.returncode == 0, module_help.stderr
    command_help = CliRunner().invoke(_app(), ["pretrain", "--help"], terminal_width=200).output

    def options(text: str) -> list[str]:
        return sorted(set(re.findall(r"--[a-z][a-z-]+", text)))

    assert options(module_help.stdout) == options(command_help) and "--new-phase" in options(command_help)
    missing = run("--config", "no_such_recipe")
    assert missing.returncode == 2 and "error: no_such_recipe: config file not found" in missing.stderr


def test_build_corpus_command_builds_the_shipped_brown_and_records_itself(tmp_path):
    out = tmp_path / "corpus"
    args = ["build-corpus", "--out", str(out), "--sources", "brown", "--cache", str(tmp_path / "cache")]
    res = CliRunner().invoke(_app(), args)
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["command"] == (
        f"bertology build-corpus --out {out} --heldout-fraction 0.01 --seed 0 --sources brown --cache {tmp_path / 'cache'}"
    )
    assert manifest["sources"]["brown"]["train"]["words"] > 900_000 and manifest["skipped"] == {}
    bad = CliRunner().invoke(_app(), ["build-corpus", "--out", str(tmp_path / "x"), "--sources", "spam"])
    assert bad.exit_code != 0 and not (tmp_path / "x").exists()
