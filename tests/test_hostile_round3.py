"""Issue 32, "nothing silently wrong, round three": each hostile input the rerun let through now
stops with a clear error (exit code 2 on the command line, naming the file, field or option)
before any work is done, and nothing partial is left behind.

1 model folder without tokenizer files · 2 a diverged but finite pretraining run · 3 numbers as
YAML and people write them · 4 a plain-text corpus over 1,000,000 characters · 5 impossible sizes
in config.json · 6 ``extract --device cuda`` without CUDA · 7 the dashboard's server outlives a
stopped command · 8 shard files outside the model folder; and the smaller ones: ``verify`` of a
missing store, ``--limit 0``, ``word_vectors: xx``, ``model: null`` / an unknown model.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from cli_inprocess import run_cli
from test_pretrain_trainer import _cfg, corpus_and_tokenizer  # noqa: F401  (the module's fixture)

from bertology.errors import ConfigError, ModelError, StoreError
from bertology.models import load_model
from bertology.testing import save_tiny_model_dir

CLI = [sys.executable, "-m", "bertology.cli"]  # a real process: the dashboard's signal tests (7)

# the refusals run ``bertology.cli.main`` in this process (same exit code, stdout and stderr; no
# fresh interpreter's 3-5 s of imports per call)
_cli = run_cli


def _refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit code 2, one ``error:`` line naming ``needles``, no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, (needle, proc.stderr)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return save_tiny_model_dir("bert", tmp_path_factory.mktemp("tiny") / "tiny")


def _copy_model(src: Path, dst: Path, *, config: dict | None = None, drop: tuple[str, ...] = ()) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name not in drop:
            (dst / f.name).write_bytes(f.read_bytes())
    if config:
        (dst / "config.json").write_text(json.dumps({**json.loads((src / "config.json").read_text()), **config}))
    return dst


# --------------------------------------------------------------------------- 1. no tokenizer files


def test_1_a_model_folder_without_tokenizer_files_is_refused(tiny_dir, tmp_path):
    bare = _copy_model(tiny_dir, tmp_path / "bare", drop=("tokenizer.json", "tokenizer_config.json"))
    with pytest.raises(ModelError, match=r"bare: no tokenizer files \(none of tokenizer.json, vocab.txt"):
        load_model(bare)
    _refused(
        _cli("extract", "--model", str(bare), "--limit", "2"),
        str(bare),
        "no tokenizer files",
        "found: config.json, model.safetensors",
    )
    assert not (Path(os.environ["BERTOLOGY_HOME"]) / "stores").exists()  # nothing extracted
    assert load_model(tiny_dir).tokenizer.is_fast  # the complete folder still loads
    from bertology.models import embedded_models

    foreign = _copy_model(tiny_dir, tmp_path / "foreign", drop=("tokenizer.json", "tokenizer_config.json"))
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):  # MiniLM's 30,522-token tokenizer
        (foreign / f).write_bytes((embedded_models()["minilm-l6"]["path"] / f).read_bytes())
    with pytest.raises(ModelError, match="foreign: the tokenizer has 30522 tokens but config.json's vocab_size is"):
        load_model(foreign)


# --------------------------------------------------------------------------- 2. diverged but finite


def test_2_the_divergence_monitor_on_planted_losses():
    from bertology.pretraining.metrics import DivergenceMonitor

    ln_v = math.log(1000)
    healthy = DivergenceMonitor(1000, factor=1.5, window=3)
    noisy = [ln_v, 7.0, 6.5, 11.0, 6.0, 10.5, 10.6, 5.0, 4.0]  # spikes above 1.5 ln V, never 3 in a row
    assert not any(healthy.update(step, loss) for step, loss in enumerate(noisy))
    assert healthy.threshold == pytest.approx(1.5 * ln_v)

    diverged = DivergenceMonitor(1000, factor=1.5, window=3)
    verdicts = [diverged.update(step, loss) for step, loss in enumerate([ln_v, 6.0, 40.0, 900.0, 1476.0])]
    assert verdicts == [False, False, False, False, True] and diverged.streak_start == 2
    assert "for 3 consecutive steps" in diverged.describe()

    start_high = DivergenceMonitor(1000, factor=2.0, window=2)  # the first loss sets the scale (ELECTRA)
    assert not any(start_high.update(s, x) for s, x in enumerate([40.0, 70.0, 79.0]))
    assert start_high.update(3, 81.0) is False and start_high.update(4, 85.0) is True

    short = DivergenceMonitor(1000, factor=1.5, window=20)  # the last step of a run shorter than the window:
    assert not short.update(0, ln_v) and not short.update(1, 50.0)
    assert short.update(2, 60.0, final=True) is True  # every step after the first was above
    broken = DivergenceMonitor(1000, factor=1.5, window=20)
    assert not any(broken.update(s, x) for s, x in enumerate([ln_v, 50.0, 5.0]))
    assert broken.update(3, 60.0, final=True) is False  # one step above at the end is not sustained
    assert DivergenceMonitor(1000, 1.5, 0).update(5, 1e9) is False  # window 0: off
    with pytest.raises(ConfigError, match="'divergence_factor': must be > 1"):
        _cfg(("x", "y"), Path("/tmp"), divergence_factor=1.0)


def test_2_a_diverged_finite_run_stops_and_keeps_the_last_good_checkpoint(corpus_and_tokenizer, tmp_path):
    """Learning rate 10 (the issue's run: loss 1476, exit 0, checkpoint-40 saved as final): through
    the command line, with the rate written 1e1 (case 3 too)."""
    from bertology.checkpoints import list_checkpoints
    from bertology.pretraining import read_metrics

    corpus, tok = corpus_and_tokenizer
    config = tmp_path / "lr10.yaml"
    config.write_text(
        textwrap.dedent(f"""\
        run_name: lr10
        corpus: {corpus}
        tokenizer: {tok}
        num_hidden_layers: 2
        hidden_size: 32
        num_attention_heads: 4
        intermediate_size: 64
        max_seq_len: 32
        batch_size: 4
        max_steps: 40
        warmup_steps: 2
        learning_rate: 1e1
        eval_every: 100
        log_every: 1
        save_every: 2
        keep_last: 20
        keep_steps: [0]
        heldout_fraction: 0.1
        eval_batches: 2
        num_threads: 1
        divergence_window: 5
        """)
    )
    proc = _cli("pretrain", "--config", str(config), "--output-root", str(tmp_path / "models"), "--no-progress")
    _refused(
        proc,
        "lr10: training diverged at step",
        "for 5 consecutive steps (divergence_window 5)",
        "the last good checkpoint is step",
    )
    run = tmp_path / "models" / "lr10"
    kept = [s for s, _ in list_checkpoints(run)]
    aside = sorted(int(p.name.rsplit("-", 1)[1]) for p in run.glob("diverged-checkpoint-*"))
    assert kept and aside and max(kept) < min(aside) and max(aside) < 40  # stopped early, the bad ones set aside
    assert f"the last good checkpoint is step {max(kept)}" in proc.stderr
    # issue 41 item 8: the run's record says so too (what the emergence study and the dashboard read)
    diverged = json.loads((run / "run.json").read_text())["diverged"]
    assert diverged["last_good_checkpoint"] == max(kept) and diverged["step"] < 40
    assert sorted(diverged["set_aside"]) == sorted(p.name for p in run.glob("diverged-checkpoint-*"))
    assert "divergence_window 5" in diverged["reason"] and diverged["learning_rate"] > 0
    machine = json.loads((run / "run.json").read_text())["machine"]  # issue 41: where the numbers came from
    assert machine["compute"] == {"device": "cpu", "precision": "float32"} and machine["summary"].endswith(
        "cpu, float32"
    )
    loss = read_metrics(run).query("metric == 'loss'").set_index("step")["value"]
    threshold = 1.5 * max(math.log(300), loss.iloc[0])
    # every loss from the set-aside weights on (metrics step k: the weights after k - 1 updates) was above
    assert (loss[loss.index > min(aside)] > threshold).all() and len(loss[loss.index > min(aside)]) >= 1


# --------------------------------------------------------------------------- 3. numbers


def test_3_float_fields_take_numbers_as_people_write_them(tmp_path):
    from bertology.pretraining import load_config
    from bertology.runs import read_config_file, validate_config
    from bertology.studies import load_study

    recipe = tmp_path / "p.yaml"
    recipe.write_text(
        "learning_rate: 5e-4\nadam_eps: 1E-8\ndropout: .1\nweight_decay: 0\nmax_grad_norm: 1\n"
        "max_steps: 1e3\nwarmup_steps: 1_000\nmlm_probability: '15e-2'\n"
    )
    cfg = load_config(recipe)
    assert (cfg.learning_rate, cfg.adam_eps, cfg.dropout, cfg.weight_decay, cfg.max_grad_norm) == (
        5e-4,
        1e-8,
        0.1,
        0.0,
        1.0,
    )
    assert (cfg.max_steps, cfg.warmup_steps, cfg.mlm_probability) == (1000, 1000, 0.15)
    assert isinstance(cfg.max_steps, int) and isinstance(cfg.weight_decay, float)
    recipe.write_text("learning_rate: fast\n")
    with pytest.raises(ConfigError, match=r"p.yaml: config field 'learning_rate': expected a finite number"):
        load_config(recipe)
    recipe.write_text("learning_rate: .nan\n")
    with pytest.raises(ConfigError, match="'learning_rate'"):
        load_config(recipe)
    recipe.write_text("max_steps: 2.5\n")
    with pytest.raises(ConfigError, match="'max_steps': expected an integer, got 2.5"):
        load_config(recipe)

    study = tmp_path / "pruning.yaml"
    study.write_text("step: 5E-2\nl0_lambdas: [1e-2, .1, 1]\ntest_share: .5\nlimit: 1e2\n")
    defaults = load_study("pruning").DEFAULTS
    config = validate_config(defaults, read_config_file(study), f"pruning: {study}")
    assert (config["step"], config["l0_lambdas"], config["test_share"], config["limit"]) == (
        0.05,
        [0.01, 0.1, 1],
        0.5,
        100,
    )
    study.write_text("step: a tenth\n")
    with pytest.raises(ConfigError, match=r"pruning.yaml: field 'step' must be a number \(e.g. 0.5, 5e-4\)"):
        validate_config(defaults, read_config_file(study), f"pruning: {study}")
    import yaml

    assert yaml.safe_load("x: 5e-4") == {"x": "5e-4"}  # the global loader is left as it was


# --------------------------------------------------------------------------- 4. a long plain text


def test_4_a_plain_text_over_a_million_characters_is_annotated_in_pieces(tmp_path):
    import spacy

    from bertology.corpus.silver import MAX_CHUNK_CHARS, annotate_silver, read_text_file, split_long_text

    pipeline = spacy.blank("en")
    pipeline.add_pipe("sentencizer")
    pipeline.to_disk(tmp_path / "blank")  # tokeniser + sentence splitter: fast, same 1,000,000 limit
    line = "The Fulton County jury said the election was conducted well.\n"
    text = tmp_path / "long.txt"
    n_lines = 1_100_000 // len(line) + 1
    text.write_text(line * n_lines)  # one sentence per line, no blank line: one 1.1 MB paragraph
    assert text.stat().st_size > 1_000_000 and pipeline.max_length == 1_000_000
    pieces = read_text_file(text)
    assert len(pieces) > 10 and max(map(len, pieces)) <= MAX_CHUNK_CHARS
    corpus = annotate_silver(pieces, name="long", spacy_model=str(tmp_path / "blank"))
    assert len(corpus) == n_lines and all(s.words[:2] == ["The", "Fulton"] for s in corpus.sentences)
    # one line longer than a piece: cut at whitespace, every word kept
    words = ("word " * 60_000).strip()
    cut = split_long_text(words, MAX_CHUNK_CHARS)
    assert len(cut) == 3 and "".join(cut) == words and all(len(p) <= MAX_CHUNK_CHARS for p in cut)
    assert split_long_text("x" * 10, 4) == ["xxxx", "xxxx", "xx"]


# --------------------------------------------------------------------------- 5. impossible sizes


@pytest.mark.parametrize(
    "field, value", [("num_hidden_layers", 0), ("num_attention_heads", -4), ("hidden_size", 0), ("vocab_size", -1)]
)
def test_5_config_sizes_below_one_are_refused_naming_the_field(tiny_dir, tmp_path, field, value):
    bad = _copy_model(tiny_dir, tmp_path / "bad", config={field: value})
    with pytest.raises(ModelError, match=rf"bad/config.json: field '{field}' must be an integer >= 1"):
        load_model(bad)


def test_5_cli_names_the_config_field(tiny_dir, tmp_path):
    bad = _copy_model(tiny_dir, tmp_path / "zero", config={"num_hidden_layers": 0})
    _refused(
        _cli("extract", "--model", str(bad), "--limit", "2"),
        "zero/config.json",
        "field 'num_hidden_layers' must be an integer >= 1, got 0",
    )
    odd = _copy_model(tiny_dir, tmp_path / "odd", config={"num_attention_heads": 5})
    with pytest.raises(ModelError, match="'hidden_size' \\(32\\) must be a multiple of 'num_attention_heads' \\(5\\)"):
        load_model(odd)
    text = _copy_model(tiny_dir, tmp_path / "text", config={"num_hidden_layers": "2"})  # transformers' own check
    with pytest.raises(ModelError, match="text/config.json: cannot read config: .*'num_hidden_layers'"):
        load_model(text)


# --------------------------------------------------------------------------- 6. --device cuda


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_6_extract_on_cuda_without_cuda_is_a_clear_error(tiny_dir):
    _refused(
        _cli("extract", "--model", str(tiny_dir), "--limit", "2", "--device", "cuda"),
        "--device cuda: no CUDA device is available here (use --device cpu)",
    )
    _refused(
        _cli("extract", "--model", str(tiny_dir), "--limit", "2", "--device", "gpu"),
        "--device must be cpu, cuda or cuda:N, got 'gpu'",
    )


# --------------------------------------------------------------------------- 7. the dashboard's child

CHILD = """\
import os, signal, sys, time
def stop(signum, frame):
    open(os.environ["STOPPED_FILE"], "w").write(str(signum))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
open(os.environ["PID_FILE"], "w").write(str(os.getpid()))
while True:
    time.sleep(0.05)
"""


def _wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_7_stopping_the_dashboard_command_stops_its_server(tmp_path, signum):
    """``bertology dashboard`` with a stand-in ``streamlit`` package first on the path (its
    ``python -m streamlit`` records its pid and waits): the signal reaches the child, the command
    waits for it, and no process is left behind."""
    fake = tmp_path / "fake" / "streamlit"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(CHILD)
    pid_file, stopped = tmp_path / "child.pid", tmp_path / "stopped"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")]),
        "PID_FILE": str(pid_file),
        "STOPPED_FILE": str(stopped),
    }
    command = subprocess.Popen(
        [*CLI, "dashboard", "--port", "8599"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(lambda: pid_file.is_file() and pid_file.read_text().strip())
        child = int(pid_file.read_text())
        command.send_signal(signum)
        command.wait(timeout=120)
    finally:
        if command.poll() is None:
            command.kill()
    assert stopped.read_text() == str(int(signum))  # the child got the signal ...
    assert not _alive(child)  # ... and is gone (reaped by the command)
    assert command.returncode == 0


def test_7_run_forwarding_signals_returns_the_childs_exit_code():
    from bertology.cli.study import run_forwarding_signals

    assert run_forwarding_signals([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # handlers restored


# --------------------------------------------------------------------------- 8. shards outside the folder


def _shard(model_dir: Path, shard_name: str, weights: Path) -> None:
    """Make ``model_dir`` a sharded checkpoint: an index naming ``shard_name`` for every tensor of ``weights``."""
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        keys = list(f.keys())
    (model_dir / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {k: shard_name for k in keys}})
    )


def test_8_shard_files_outside_the_model_folder_are_refused(tiny_dir, tmp_path):
    good = _copy_model(tiny_dir, tmp_path / "good")
    (good / "model.safetensors").rename(good / "model-00001-of-00001.safetensors")
    _shard(good, "model-00001-of-00001.safetensors", tiny_dir / "model.safetensors")
    assert load_model(good).num_layers == 2  # a sharded folder whose shards are inside loads

    other = _copy_model(tiny_dir, tmp_path / "other")
    names = {"dotdot": "../other/model.safetensors", "absolute": str(other / "model.safetensors")}
    for case, name in names.items():
        bad = _copy_model(tiny_dir, tmp_path / case, drop=("model.safetensors",))
        _shard(bad, name, tiny_dir / "model.safetensors")
        with pytest.raises(ModelError, match="shard files must be relative names inside"):
            load_model(bad)
    linked = _copy_model(tiny_dir, tmp_path / "linked", drop=("model.safetensors",))
    (linked / "model-00001-of-00001.safetensors").symlink_to(other / "model.safetensors")
    _shard(linked, "model-00001-of-00001.safetensors", tiny_dir / "model.safetensors")
    with pytest.raises(ModelError, match="outside the model folder"):
        load_model(linked)
    _refused(
        _cli("extract", "--model", str(tmp_path / "dotdot"), "--limit", "2"),
        "model.safetensors.index.json: weight_map names '../other/model.safetensors'",
    )
    broken = _copy_model(tiny_dir, tmp_path / "broken", drop=("model.safetensors",))
    (broken / "model.safetensors.index.json").write_text("[1, 2]")
    with pytest.raises(ModelError, match="not a safetensors index"):
        load_model(broken)


# --------------------------------------------------------------------------- the smaller ones


def test_verify_of_a_missing_store_says_it_does_not_exist(tmp_path):
    from bertology.store import verify_store

    with pytest.raises(StoreError, match="no such feature store"):
        verify_store(tmp_path / "nothing")
    proc = _cli("verify", str(tmp_path / "nothing"))
    _refused(proc, "nothing: no such feature store")
    assert "damaged" not in proc.stderr


def test_limit_0_means_the_whole_corpus_for_extract_as_for_probe(tiny_dir, tmp_path):
    corpus = tmp_path / "three.conllu"
    corpus.write_text("".join(f"# sent_id = s{i}\n1\tword{i}\t_\tNOUN\t_\t_\t0\troot\t_\t_\n\n" for i in range(3)))
    proc = _cli("extract", "--model", str(tiny_dir), "--corpus", str(corpus), "--limit", "0", "--no-attentions")
    assert proc.returncode == 0, proc.stderr
    assert "3 sentences" in proc.stdout
    _refused(
        _cli("extract", "--model", str(tiny_dir), "--corpus", str(corpus), "--limit", "-1"), "--limit must be >= 0"
    )
    from typer.testing import CliRunner

    from bertology.cli import app

    for command in ("extract", "probe", "heads", "embeddings"):
        help_text = " ".join(CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output.split())
        assert "0 = all" in help_text or "0 = the whole" in help_text, command


def test_word_vectors_xx_is_refused_before_any_step(tiny_dir, tmp_path):
    from bertology.studies import run_study

    results = tmp_path / "results"
    with pytest.raises(ConfigError, match=r"head_types: .*field 'word_vectors': xx: no spaCy vocab"):
        run_study(
            "head_types",
            overrides={"model": str(tiny_dir), "word_vectors": "xx", "limit": 3},
            results_root=results,
            log=lambda m: None,
        )
    assert not results.exists()


@pytest.mark.parametrize(
    "model, shown",
    [
        (None, r"field 'model' must be a registry name, model folder, or Hugging Face hub name .*, got None"),
        ("no-such-model", r"field 'model': unknown model 'no-such-model': not a registry name .*models pull"),
    ],
)
def test_model_null_or_unknown_makes_no_run_folder(tmp_path, model, shown):
    from bertology.studies import run_study

    config = tmp_path / "bad.yaml"
    config.write_text(f"model: {json.dumps(model)}\nlimit: 3\n")
    results = tmp_path / "results"
    with pytest.raises(ConfigError, match=rf"head_types: .*bad.yaml: {shown}"):
        run_study("head_types", config_file=config, results_root=results, log=lambda m: None)
    assert not results.exists()
    _refused(_cli("study", "run", "head_types", "--config", str(config)), "field 'model'", "bad.yaml")
