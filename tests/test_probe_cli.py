"""`bertology probe` end to end on a tiny random BERT saved to disk, and probe_layers on a store."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from bertology.testing import make_tiny_bert
from bertology.probes.probing.edge import probe_layers
from bertology.cli import app

runner = CliRunner()


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def tiny_dir(tmp_path, minilm_tokenizer):
    path = tmp_path / "tiny-bert"
    make_tiny_bert(minilm_tokenizer).save_pretrained(path)   # safetensors
    minilm_tokenizer.save_pretrained(path)
    return path


def test_probe_command_writes_results(tiny_dir, tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["probe", "--model", str(tiny_dir), "--task", "pos", "--limit", "40",
                                 "--seeds", "0", "--mode", "all", "--control", "--mdl", "--probe", "linear",
                                 "--max-epochs", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    scores = pd.read_parquet(out / "scores.parquet")
    assert set(scores["mode"]) == {"per_layer", "mix", "cumulative"}
    per_layer = scores[(scores["mode"] == "per_layer") & (scores["split"] == "test")]
    assert set(per_layer["layer"]) == {0, 1, 2}
    assert "selectivity" in set(scores["metric"])
    summary = pd.read_parquet(out / "summary.parquet")
    assert summary["task"].tolist() == ["pos"] and 0 <= summary["expected_layer_mix"].iloc[0] <= 2
    assert (out / "mdl.parquet").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["task_source"].startswith("gold") and manifest["model"]["fingerprint"]


def test_probe_command_reads_jsonl_task_and_reports_bad_line(tiny_dir, tmp_path):
    task = tmp_path / "toy.jsonl"
    lines = [json.dumps({"text": f"the cat number {i} sat on mat {i}",
                         "targets": [{"span1": [1, 2], "span2": [4, 5], "label": "subj"},
                                     {"span1": [5, 7], "label": "loc"}][: 1]})
             for i in range(40)]
    lines += [json.dumps({"text": f"a dog {i} ran", "targets": [{"span1": [1, 2], "span2": [3, 4],
                                                                 "label": "agent"}]}) for i in range(40)]
    task.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    result = runner.invoke(app, ["probe", "--model", str(tiny_dir), "--task", str(task), "--seeds", "0",
                                 "--max-epochs", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    scores = pd.read_parquet(out / "scores.parquet")
    assert set(scores["task"]) == {"toy"}
    task.write_text(lines[0] + "\n{oops\n")
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "bertology.cli", "probe", "--model", str(tiny_dir),
                           "--task", str(task)], capture_output=True, text=True)
    assert proc.returncode == 2 and "toy.jsonl:2" in proc.stderr and "Traceback" not in proc.stderr


def test_probe_layers_on_store_and_on_model(tiny_lm, small_corpus):
    from bertology.store import extract

    store = extract(tiny_lm, small_corpus, attentions=False, progress=False)
    df = probe_layers(store, small_corpus, "pos", seeds=(0,), probe="linear", layers=[0, 2],
                      max_epochs=5)
    assert set(df["layer"]) >= {0, 2} and 1 not in set(df["layer"])
    df2 = probe_layers(tiny_lm, small_corpus, "pos", seeds=(0,), probe="linear", layers=[0, 2],
                       max_epochs=5)
    pd.testing.assert_frame_equal(df.drop(columns="value"), df2.drop(columns="value"))


def test_random_init_baseline_and_mdl_layers(tiny_lm, small_corpus):
    from bertology.probes.probing.baselines import random_init_baseline
    from bertology.probes.probing.mdl import mdl_layers

    df = random_init_baseline(tiny_lm, small_corpus, "pos", seed=1, seeds=(0,), probe="linear", max_epochs=3)
    assert set(df["model"]) == {"random-init"} and (df.loc[df.metric == "accuracy", "value"] > 0).all()
    mdl = mdl_layers(tiny_lm, small_corpus, "pos", probe="linear", control=True, max_epochs=3)
    assert set(mdl["control"]) == {False, True}
    comp = mdl[mdl.metric == "compression"]
    assert (comp["value"] > 0).all() and set(comp["layer"]) == {0, 1, 2}
