"""Every analysis path runs with the model on a CUDA device and gives what the CPU gives.

Each ``check_*`` function below runs one path at a tiny size (a random 2-layer, 4-head BERT with
the shipped bert-mini-english tokenizer) once with the model on the CPU and once on ``device``, and compares the
results. The tests marked ``gpu`` call them with ``cuda`` (skipped without a CUDA device:
tests/conftest.py); the ``*_on_cpu`` tests call the cheap ones with the CPU as the "device" too, so
the test bodies themselves are exercised on every machine.

Tolerance: float32 on a GPU sums in another order than the CPU (and a caller may have enabled TF32
matmuls, ~1e-3 relative), so results agree to about 1e-5 relative, not bit for bit: ``RTOL`` 1e-3,
``ATOL`` 1e-4. A path that is wrong on a GPU (a tensor on the wrong device, a stale CPU copy) fails
with an error or differs by far more. Discrete results (argmax shares, accuracies, UAS) of a random
model can flip on near-ties and get an absolute tolerance of a few items instead.
"""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from bertology.models import from_modules, model_device, to_device
from bertology.testing import make_tiny_bert, plant_offset_head

CPU = torch.device("cpu")
RTOL, ATOL = 1e-3, 1e-4  # float32, GPU against CPU (see the module docstring)
SHARE_ATOL = 0.05  # argmax shares of a random model: a few near-ties may flip
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
PLANTED = (1, 2)  # head (layer, head) planted on the previous token: 0-based array position
PLANTED_NAMED = (2, 3)  # its (layer, head) numbers in the tables, both from 1

runner = CliRunner()


def close(a, b, rtol: float = RTOL, atol: float = ATOL) -> None:
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=rtol, atol=atol)


def moved(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A copy of ``model`` on ``device`` (the original stays where it is)."""
    return copy.deepcopy(model).to(device)


def batches_of(tokenizer, corpus, n: int = 12, size: int = 4) -> list[dict]:
    """CPU batches of the first ``n`` sentences (what the analyses receive)."""
    words = [list(s.words) for s in list(corpus)[:n]]
    out = []
    for start in range(0, n, size):
        enc = tokenizer(
            words[start : start + size],
            is_split_into_words=True,
            truncation=True,
            max_length=48,
            padding=True,
            return_tensors="pt",
        )
        out.append({k: v for k, v in enc.items() if k in MODEL_INPUTS})
    return out


@pytest.fixture(scope="module")
def minilm_tokenizer():
    """Here (and so in conftest's ``tiny_lm``): the WordPiece tokenizer of the shipped
    ``bert-mini-english`` (inside the package, vocabulary 8,192), since a bare CUDA image need not
    have the MiniLM package the CPU suite's tokenizer comes from."""
    from transformers import AutoTokenizer

    from bertology.models import shipped_releases

    info = shipped_releases()["bert-mini-english"]
    return AutoTokenizer.from_pretrained(str(info["steps"][info["final"]]))


@pytest.fixture
def mlm_lm(minilm_tokenizer):
    """A tiny random BERT with an MLM head (CPU)."""
    return from_modules("tiny-mlm", make_tiny_bert(minilm_tokenizer, mlm=True), minilm_tokenizer)


@pytest.fixture
def batches(minilm_tokenizer, small_corpus):
    return batches_of(minilm_tokenizer, small_corpus)


@pytest.fixture
def mlm_batches(minilm_tokenizer, batches):
    from bertology.probes.heads import mask_batches

    tok = minilm_tokenizer
    return mask_batches(batches, tok.mask_token_id, len(tok), list(tok.all_special_ids), seed=0)


@pytest.fixture
def tiny_dir(tmp_path, minilm_tokenizer):
    """A tiny random BERT saved as a model folder (safetensors + the MiniLM tokenizer)."""
    path = tmp_path / "tiny-bert"
    make_tiny_bert(minilm_tokenizer).save_pretrained(path)
    minilm_tokenizer.save_pretrained(path)
    return path


# ------------------------------------------------------------------ gates


@torch.no_grad()
def _gated_outputs(model, batches, make_gates=None, gates_cls=None):
    from bertology.probes.heads import HeadGates

    gates_cls = gates_cls or HeadGates
    outputs = []
    with gates_cls(model) as gates:
        if make_gates is not None:
            gates.gates = make_gates(model)
        for batch in batches:
            outputs.append(model(**to_device(batch, model_device(model))).last_hidden_state.cpu())
    return outputs


def check_head_gates(device, tiny_lm, batches):
    from bertology.probes.heads import HeadGates, gates_from_heads

    cpu_model, dev_model = tiny_lm.model, moved(tiny_lm.model, device)
    with HeadGates(dev_model) as g:
        assert g.gates.device.type == device.type  # default gates: made on the model's device
    per_example = torch.rand(len(batches[0]["input_ids"]), 2, 4, generator=torch.Generator().manual_seed(0))
    cases = {
        "all on": None,
        "some off (gates_from_heads: on the model's device)": lambda m: gates_from_heads(m, {0: [1], 1: [0, 3]}),
        "CPU gates for any model": lambda m: torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.5]]),
        "per-example CPU gates": lambda m: per_example,
    }
    reference = _gated_outputs(cpu_model, batches)
    for name, make in cases.items():
        ours = _gated_outputs(dev_model, batches, make)
        theirs = _gated_outputs(cpu_model, batches, make)
        for a, b in zip(ours, theirs):
            close(a, b)
        if make is not None:  # the gates did something
            assert not torch.allclose(theirs[0], reference[0], atol=1e-4), name


def check_ffn_gates(device, tiny_lm, batches):
    from bertology.probes.heads import FFNGates

    cpu_model, dev_model = tiny_lm.model, moved(tiny_lm.model, device)
    for make in (None, lambda m: torch.tensor([1.0, 0.0]), lambda m: torch.tensor([0.5, 1.0], device=model_device(m))):
        ours = _gated_outputs(dev_model, batches, make, FFNGates)
        theirs = _gated_outputs(cpu_model, batches, make, FFNGates)
        for a, b in zip(ours, theirs):
            close(a, b)


def check_l0_gates(device, mlm_lm, mlm_batches):
    from bertology.probes.heads import mlm_loss, train_l0_gates

    tables = [
        train_l0_gates(m, mlm_batches, mlm_loss, 0.5, steps=4, lr=0.1, seed=0)
        for m in (mlm_lm.model, moved(mlm_lm.model, device))
    ]
    for column in ("log_alpha", "p_open", "gate"):
        close(tables[1][column], tables[0][column])
    assert tables[1]["kept"].tolist() == tables[0]["kept"].tolist()


# ------------------------------------------------------------------ importance


def check_importance(device, mlm_lm, mlm_batches, minilm_tokenizer, small_corpus):
    from bertology.probes.heads import (
        ablation_importance,
        ffn_importance_scores,
        importance_scores,
        mlm_loss,
        tagging_batches,
        train_tagging_head,
    )

    cpu_model, dev_model = mlm_lm.model, moved(mlm_lm.model, device)
    base = torch.ones(2, 4)
    base[1, 2] = 0.0  # base gates given as a CPU tensor
    for kwargs in ({}, {"base_gates": base}):
        ours, theirs = (importance_scores(m, mlm_batches, mlm_loss, **kwargs) for m in (dev_model, cpu_model))
        close(ours["importance_raw"], theirs["importance_raw"])
        close(ours["importance"], theirs["importance"])
    ours, theirs = (
        ffn_importance_scores(m, mlm_batches, mlm_loss, base_gates=torch.tensor([1.0, 0.0]))
        for m in (dev_model, cpu_model)
    )
    close(ours["importance_raw"], theirs["importance_raw"])
    assert theirs["importance_raw"].iloc[1] == 0.0
    ours, theirs = (ablation_importance(m, mlm_batches[:1], mlm_loss) for m in (dev_model, cpu_model))
    close(ours["loss_increase"], theirs["loss_increase"])
    # an encoder without an MLM head: a POS tagging head trained on the frozen encoder (CPU batches)
    sentences = list(small_corpus)[:12]
    labels = sorted({t for s in sentences for t in s.upos})
    tagged = tagging_batches(
        minilm_tokenizer, sentences, [s.upos for s in sentences], {t: i for i, t in enumerate(labels)}, batch_size=4
    )
    encoders = [mlm_lm.model.base_model, moved(mlm_lm.model.base_model, device)]
    heads = [train_tagging_head(m, tagged, len(labels), epochs=3, seed=0) for m in encoders]
    assert next(heads[1].parameters()).device.type == device.type
    close(heads[1].linear.weight.cpu(), heads[0].linear.weight)
    ours, theirs = (importance_scores(m, tagged, h.loss) for m, h in zip(encoders[::-1], heads[::-1]))
    close(ours["importance_raw"], theirs["importance_raw"])
    (c1, n1), (c0, n0) = (h.sentence_scores(m, tagged) for m, h in zip(encoders[::-1], heads[::-1]))
    assert np.array_equal(n1, n0) and np.abs(c1 - c0).sum() <= 2  # a near-tie argmax may flip


# ------------------------------------------------------------------ pruning


def check_pruning(device, mlm_lm, small_corpus):
    from bertology.probes.heads.pruning import (
        evaluate_l0_gates,
        measure_pruning,
        pruning_curve,
        pruning_task,
        train_l0_gates,
    )

    lms = [mlm_lm, dataclasses.replace(mlm_lm, model=moved(mlm_lm.model, device))]
    tasks = [pruning_task(lm, small_corpus, seed=0) for lm in lms]  # MLM: CPU batches, masked once
    curves = [
        pruning_curve(
            lm.model,
            task.metric("dev"),
            method="random",
            seeds=(0,),
            step=0.25,
            report_metrics={"test": task.metric("test")},
        )
        for lm, task in zip(lms, tasks)
    ]
    assert curves[1]["pruned"].tolist() == curves[0]["pruned"].tolist()
    close(curves[1]["metric"], curves[0]["metric"])
    close(curves[1]["metric_test"], curves[0]["metric_test"])
    ranked = [
        pruning_curve(
            lm.model, task.metric("dev"), method="importance", batches=task.train, loss_fn=task.loss_fn, step=0.5
        )
        for lm, task in zip(lms, tasks)
    ]
    if ranked[1]["pruned"].tolist() == ranked[0]["pruned"].tolist():  # else a near-tie of importance
        close(ranked[1]["metric"], ranked[0]["metric"])
    gates = train_l0_gates(lms[0].model, tasks[0].train, tasks[0].loss_fn, 0.5, steps=3, seed=0)
    ours, theirs = (
        evaluate_l0_gates(lm.model, gates, task, n_resamples=200) for lm, task in zip(lms[::-1], tasks[::-1])
    )
    close(ours["value_dev"], theirs["value_dev"])
    close(ours["value"], theirs["value"])
    costs = [measure_pruning(lm.model, {0: [1], 1: [0, 2]}, task.dev, repeats=1) for lm, task in zip(lms, tasks)]
    assert costs[1]["params_pruned"] == costs[0]["params_pruned"] < costs[0]["params_full"]
    assert costs[1]["seconds_full"] > 0 and costs[1]["seconds_pruned"] > 0


def check_real_pruning(device, tiny_lm, mlm_lm, batches):
    from bertology.probes.heads import HeadGates, gates_from_heads, prune_heads

    remove = {0: [1], 1: [0, 1, 2, 3]}  # layer 1 loses every head: the empty-attention path
    for lm in (tiny_lm, mlm_lm):
        cpu_pruned = prune_heads(copy.deepcopy(lm.model), remove)
        dev_model = moved(lm.model, device)
        with torch.no_grad():
            with HeadGates(dev_model, gates_from_heads(dev_model, remove)):
                gated = [dev_model(**to_device(b, device))[0].cpu() for b in batches]
            dev_pruned = prune_heads(dev_model, remove)
            assert all(p.device.type == device.type for p in dev_pruned.parameters())
            ours = [dev_pruned(**to_device(b, device))[0].cpu() for b in batches]
            theirs = [cpu_pruned(**b)[0] for b in batches]
        for a, b, c in zip(ours, theirs, gated):
            close(a, b)
            close(a, c)


# ------------------------------------------------------------------ attention statistics, head types, probes


def _stores(device, tiny_lm, corpus, root):
    """The planted tiny model's store extracted on the CPU and on ``device`` (separate roots: the
    store key does not name the device)."""
    from bertology.store import extract

    stores = []
    for name, model in (("cpu", tiny_lm.model), ("device", moved(tiny_lm.model, device))):
        handle = plant_offset_head(model, *PLANTED, offset=-1)
        lm = dataclasses.replace(tiny_lm, model=model)
        stores.append(
            extract(lm, corpus, attentions=True, root=root / name, device=str(model_device(model)), progress=False)
        )
        handle.remove()
    return stores


def _compare_head_stats(ours: pd.DataFrame, theirs: pd.DataFrame) -> None:
    key = ["layer", "head", "statistic"]
    merged = ours.merge(theirs, on=key, suffixes=("_gpu", "_cpu"), validate="one_to_one")
    assert len(merged) == len(ours) == len(theirs)
    continuous = merged["statistic"].str.startswith("attn_") | merged["statistic"].isin(
        ["entropy", "entropy_norm", "confidence"]
    )
    close(merged.loc[continuous, "value_gpu"], merged.loc[continuous, "value_cpu"])
    close(merged.loc[~continuous, "value_gpu"], merged.loc[~continuous, "value_cpu"], rtol=0, atol=SHARE_ATOL)


def check_store_head_types(device, tiny_lm, small_corpus, root):
    from bertology.probes.heads import analyse_store, corpus_frequencies

    cpu_store, dev_store = _stores(device, tiny_lm, small_corpus, root)
    for i in range(len(small_corpus)):
        close(dev_store.attention(i), cpu_store.attention(i))
        close(dev_store.special_attention(i), cpu_store.special_attention(i))
    close(dev_store.layers(), cpu_store.layers())
    freqs = corpus_frequencies(list(small_corpus))
    ours, theirs = (analyse_store(s, small_corpus, frequencies=freqs) for s in (dev_store, cpu_store))
    _compare_head_stats(ours["head_stats"], theirs["head_stats"])
    for tables in (ours, theirs):
        types = tables["head_types"].set_index(["layer", "head"])
        assert types.loc[PLANTED_NAMED, "type"] == "positional" and types.loc[PLANTED_NAMED, "positional_offset"] == -1
    close(ours["head_types"]["entropy_norm"], theirs["head_types"]["entropy_norm"])
    return cpu_store, dev_store


def check_attention_probe(device, tiny_lm, small_corpus, root):
    from bertology.probes.heads import attention_probe

    cpu_store, dev_store = _stores(device, tiny_lm, small_corpus, root)
    sentences = list(small_corpus)
    ours, theirs = (
        attention_probe([s.attention(i) for i in range(len(sentences))], sentences, seed=0)
        for s in (dev_store, cpu_store)
    )
    assert ours["method"].tolist() == theirs["method"].tolist()
    assert ours["n_test"].tolist() == theirs["n_test"].tolist()
    close(ours["uas"], theirs["uas"], rtol=0, atol=SHARE_ATOL)


def check_edge_probe(device, tiny_lm, small_corpus, root):
    """Probes trained on ``device`` from CPU features (a store's numpy arrays, or a CPU tensor)."""
    from bertology.probes.probing import ProbeConfig, probe_arrays, probe_layers
    from bertology.probes.probing.tasks import build_task
    from bertology.store import extract

    store = extract(tiny_lm, small_corpus, attentions=False, root=root, progress=False)
    # float32 on both (precision "auto" picks bfloat16 on a GPU); a linear probe on mean-pooled
    # spans trains full-batch with L-BFGS, so nothing random differs between the devices
    settings = dict(seeds=(0,), probe="linear", pooling="mean", max_epochs=4, precision="float32")
    ours, theirs = (probe_layers(store, small_corpus, "pos", device=str(d), **settings) for d in (device, CPU))
    test = [t[(t["split"] == "test") & (t["metric"] == "accuracy")].reset_index(drop=True) for t in (ours, theirs)]
    assert test[0]["layer"].tolist() == test[1]["layer"].tolist() and len(test[0]) == 3
    close(test[0]["value"], test[1]["value"], rtol=0, atol=0.03)  # a few examples may flip
    task = build_task(small_corpus, "pos")
    config = ProbeConfig(probe="linear", pooling="mean", max_epochs=4, precision="float32", device=str(device))
    tensor_run = probe_arrays(torch.from_numpy(store.layers()), store.sentence_offsets, task, seeds=(0,), config=config)
    accuracy = tensor_run[(tensor_run["split"] == "test") & (tensor_run["metric"] == "accuracy")]
    close(accuracy["value"], test[0]["value"], rtol=0, atol=0.03)


# ------------------------------------------------------------------ MLM scoring


def check_pseudo_likelihood(device, mlm_lm):
    from bertology.pseudo_likelihood import pseudo_log_likelihood

    texts = ["the jury said it did not", "a county election was held in the city", "dogs bark"]
    ours, theirs = (
        pseudo_log_likelihood(lm, texts, batch_size=5)
        for lm in (dataclasses.replace(mlm_lm, model=moved(mlm_lm.model, device)), mlm_lm)
    )
    assert ours["n_pieces"].tolist() == theirs["n_pieces"].tolist()
    close(ours["nll"], theirs["nll"])


def check_masked_predictions(device, mlm_lm):
    from bertology.inspection import masked_predictions

    words = "the jury said the election was fair".split()
    ours, theirs = (
        masked_predictions(lm, words, 2, k=5)
        for lm in (dataclasses.replace(mlm_lm, model=moved(mlm_lm.model, device)), mlm_lm)
    )
    close(ours["probability"], theirs["probability"])  # sorted: equal even where near-equal tokens swap
    p = theirs["probability"].to_numpy()
    if p[0] - p[1] > 1e-3 * p[0]:
        assert ours["token"].iloc[0] == theirs["token"].iloc[0]


def check_quantization(device, mlm_lm, batches, mlm_batches):
    from bertology.probes.compression import QuantSetting, compare_quantization, dynamic_int8, int8_engine
    from bertology.probes.compression.quantization import quantized_model

    settings = (QuantSetting("float32"), QuantSetting("int8-dynamic"), QuantSetting("simulated", 4))
    dev_model = moved(mlm_lm.model, device)
    ours, _ = compare_quantization(dev_model, batches, settings=settings, mlm_batches=mlm_batches, repeat=1)
    theirs, _ = compare_quantization(mlm_lm.model, batches, settings=settings, mlm_batches=mlm_batches, repeat=1)
    ours, theirs = ours.set_index("setting"), theirs.set_index("setting")
    for name in ("float32", "simulated-4bit"):
        for column in ("mlm_loss", "max_relative_change", "mean_relative_change", "pooled_cosine"):
            close(ours.loc[name, column], theirs.loc[name, column])
    # simulated bits: the theoretical packed size (torch.save's bytes name the device, so float32's differ)
    assert ours.loc["simulated-4bit", "size_bytes"] == theirs.loc["simulated-4bit", "size_bytes"]
    int8 = ours.loc["int8-dynamic"]
    if device.type != "cpu":  # int8 has CPU kernels only: said in the row, never a crash inside torch
        assert "CPU only" in int8["note"] and str(device.type) in int8["note"] and np.isnan(int8["size_bytes"])
        run, note = quantized_model(dev_model, settings[1])
        assert run is None and "CPU only" in note
        if int8_engine()[0] is not None:  # dynamic_int8 itself quantizes a CPU copy, and says so
            copy_, note = dynamic_int8(dev_model)
            assert copy_ is not None and model_device(copy_).type == "cpu" and "CPU copy" in note
    elif int8_engine()[0] is not None:
        assert not np.isnan(int8["size_bytes"]) and int8["size_bytes"] < theirs.loc["float32", "size_bytes"]


# ------------------------------------------------------------------ the CLI


def _cli(args: list[str]):
    from bertology.cli import app

    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _cli_runs(device, monkeypatch, tmp_path, command: list[str], study: str):
    """Run ``command`` with ``--device cpu`` and ``--device <device>``, each with its own home (so
    each extracts its own store) and results root; the two run folders."""
    from bertology.results import read_manifest

    runs = []
    for name in ("cpu", device.type):
        monkeypatch.setenv("BERTOLOGY_HOME", str(tmp_path / f"home-{name}-{len(runs)}"))
        out = tmp_path / f"results-{name}-{len(runs)}"
        _cli(command + ["--device", name, "--out", str(out)])
        (run,) = (out / study).iterdir()
        assert read_manifest(run)["config"]["device"] == name
        runs.append(run)
    return runs


def check_heads_cli(device, monkeypatch, tmp_path, tiny_dir):
    from bertology.results import read_manifest, read_table

    cpu_run, dev_run = _cli_runs(
        device,
        monkeypatch,
        tmp_path,
        ["heads", "--model", str(tiny_dir), "--corpus", "brown-sample", "--limit", "40", "--word-vectors", "none"],
        "head_types",
    )
    assert read_manifest(cpu_run)["tables"] == read_manifest(dev_run)["tables"]
    _compare_head_stats(
        read_table(dev_run, "head_stats").drop(columns="attention_window", errors="ignore"),
        read_table(cpu_run, "head_stats").drop(columns="attention_window", errors="ignore"),
    )
    ours, theirs = read_table(dev_run, "head_types"), read_table(cpu_run, "head_types")
    close(ours["entropy_norm"], theirs["entropy_norm"])


def check_prune_cli(device, monkeypatch, tmp_path, tiny_dir):
    from bertology.results import read_table

    cpu_run, dev_run = _cli_runs(
        device,
        monkeypatch,
        tmp_path,
        [
            "prune",
            "--model",
            str(tiny_dir),
            "--corpus",
            "brown-sample",
            "--limit",
            "40",
            "--method",
            "importance,random,l0",
            "--step",
            "0.5",
            "--lam",
            "0.5",
            "--l0-steps",
            "3",
        ],
        "pruning",
    )
    # the POS head is trained by Adam on each device: its weights (and the gradients through it)
    # agree to ~1e-5 relative, accuracies to a word or two
    ours, theirs = read_table(dev_run, "importance"), read_table(cpu_run, "importance")
    close(ours["importance_raw"], theirs["importance_raw"], rtol=1e-2, atol=1e-4)
    ours, theirs = (
        read_table(r, "pruning_curves").query("method == 'random'").reset_index(drop=True) for r in (dev_run, cpu_run)
    )
    assert ours["pruned"].tolist() == theirs["pruned"].tolist()
    close(ours["value"], theirs["value"], rtol=0, atol=0.03)
    ours, theirs = read_table(dev_run, "l0_gates"), read_table(cpu_run, "l0_gates")
    close(ours["log_alpha"], theirs["log_alpha"], rtol=1e-2, atol=1e-3)
    assert not read_table(dev_run, "pruning_cost").empty


def check_embeddings_cli(device, monkeypatch, tmp_path, tiny_dir):
    from bertology.results import read_table

    cpu_run, dev_run = _cli_runs(
        device,
        monkeypatch,
        tmp_path,
        ["embeddings", "--model", str(tiny_dir), "--corpus", "brown-sample", "--limit", "40", "--min-occurrences", "2"],
        "contextuality",
    )
    ours, theirs = (
        read_table(r, "contextuality").sort_values(["layer", "metric"]).reset_index(drop=True)
        for r in (dev_run, cpu_run)
    )
    assert ours[["layer", "metric"]].equals(theirs[["layer", "metric"]])
    for column in ("raw", "baseline", "adjusted"):
        close(ours[column], theirs[column])


def without_minilm(monkeypatch) -> None:
    """Make the registry say the MiniLM package is not installed (as on an install without it)."""
    from bertology import models

    real = models.embedded_models

    def embedded():
        out = real()
        out["minilm-l6"] = {**out["minilm-l6"], "installed": False}
        return out

    monkeypatch.setattr(models, "embedded_models", embedded)


def check_probe_cli(device, monkeypatch, tmp_path, tiny_dir):
    """``probe --model DIR --device ...`` where the default config's model (minilm-l6) is not
    installed: ``--model`` replaces it before the model name is checked."""
    from bertology.results import read_table

    without_minilm(monkeypatch)
    cpu_run, dev_run = _cli_runs(
        device,
        monkeypatch,
        tmp_path,
        [
            "probe",
            "--model",
            str(tiny_dir),
            "--task",
            "pos",
            "--corpus",
            "brown-sample",
            "--limit",
            "40",
            "--probe",
            "linear",
            "--max-epochs",
            "3",
        ],
        "edge_probing",
    )
    # the command has no precision option: "auto" trains probes in bfloat16 on a GPU, float32 on
    # this CPU, so the accuracies agree only to a few points
    ours, theirs = (
        read_table(r, "layer_scores")
        .query("split == 'test' and metric == 'accuracy'")
        .sort_values("layer")
        .reset_index(drop=True)
        for r in (dev_run, cpu_run)
    )
    assert ours["layer"].tolist() == theirs["layer"].tolist()
    close(ours["value"], theirs["value"], rtol=0, atol=0.1)


# ------------------------------------------------------------------ the GPU tests


@pytest.mark.gpu
def test_head_gates_on_gpu(cuda, tiny_lm, batches):
    check_head_gates(cuda, tiny_lm, batches)


@pytest.mark.gpu
def test_ffn_gates_on_gpu(cuda, tiny_lm, batches):
    check_ffn_gates(cuda, tiny_lm, batches)


@pytest.mark.gpu
def test_l0_gates_on_gpu(cuda, mlm_lm, mlm_batches):
    check_l0_gates(cuda, mlm_lm, mlm_batches)


@pytest.mark.gpu
def test_head_and_ffn_importance_on_gpu(cuda, mlm_lm, mlm_batches, minilm_tokenizer, small_corpus):
    check_importance(cuda, mlm_lm, mlm_batches, minilm_tokenizer, small_corpus)


@pytest.mark.gpu
def test_pruning_curves_l0_evaluation_and_cost_on_gpu(cuda, mlm_lm, small_corpus):
    check_pruning(cuda, mlm_lm, small_corpus)


@pytest.mark.gpu
def test_real_head_removal_on_gpu(cuda, tiny_lm, mlm_lm, batches):
    check_real_pruning(cuda, tiny_lm, mlm_lm, batches)


@pytest.mark.gpu
def test_head_statistics_and_types_from_a_gpu_store(cuda, tiny_lm, small_corpus, tmp_path):
    check_store_head_types(cuda, tiny_lm, small_corpus, tmp_path)


@pytest.mark.gpu
def test_attention_probe_on_a_gpu_store(cuda, tiny_lm, small_corpus, tmp_path):
    check_attention_probe(cuda, tiny_lm, small_corpus, tmp_path)


@pytest.mark.gpu
def test_edge_probe_trained_on_gpu_from_cpu_features(cuda, tiny_lm, small_corpus, tmp_path):
    check_edge_probe(cuda, tiny_lm, small_corpus, tmp_path)


@pytest.mark.gpu
def test_pseudo_likelihood_on_gpu(cuda, mlm_lm):
    check_pseudo_likelihood(cuda, mlm_lm)


@pytest.mark.gpu
def test_masked_predictions_on_gpu(cuda, mlm_lm):
    check_masked_predictions(cuda, mlm_lm)


@pytest.mark.gpu
def test_quantization_says_int8_is_cpu_only_and_runs_the_rest_on_gpu(cuda, mlm_lm, batches, mlm_batches):
    check_quantization(cuda, mlm_lm, batches, mlm_batches)


@pytest.mark.gpu
def test_heads_cli_on_gpu(cuda, monkeypatch, tmp_path, tiny_dir):
    check_heads_cli(cuda, monkeypatch, tmp_path, tiny_dir)


@pytest.mark.gpu
def test_prune_cli_on_gpu(cuda, monkeypatch, tmp_path, tiny_dir):
    check_prune_cli(cuda, monkeypatch, tmp_path, tiny_dir)


@pytest.mark.gpu
def test_embeddings_cli_on_gpu(cuda, monkeypatch, tmp_path, tiny_dir):
    check_embeddings_cli(cuda, monkeypatch, tmp_path, tiny_dir)


@pytest.mark.gpu
def test_probe_cli_on_gpu_without_the_minilm_package(cuda, monkeypatch, tmp_path, tiny_dir):
    check_probe_cli(cuda, monkeypatch, tmp_path, tiny_dir)


# ------------------------------------------------------------------ the same bodies on the CPU


def test_gpu_check_bodies_on_cpu(
    tiny_lm, mlm_lm, batches, mlm_batches, minilm_tokenizer, small_corpus, tmp_path, one_torch_thread
):
    """The check bodies with the CPU as the "device" (so they are known to run and to hold where
    both sides are equal); the GPU tests above differ only in the device."""
    check_head_gates(CPU, tiny_lm, batches)
    check_ffn_gates(CPU, tiny_lm, batches)
    check_l0_gates(CPU, mlm_lm, mlm_batches)
    check_importance(CPU, mlm_lm, mlm_batches, minilm_tokenizer, small_corpus)
    check_real_pruning(CPU, tiny_lm, mlm_lm, batches)
    check_pseudo_likelihood(CPU, mlm_lm)
    check_masked_predictions(CPU, mlm_lm)
    check_quantization(CPU, mlm_lm, batches, mlm_batches)


def test_gpu_check_bodies_on_cpu_stores_and_pruning(tiny_lm, mlm_lm, small_corpus, tmp_path, one_torch_thread):
    check_pruning(CPU, mlm_lm, small_corpus)
    check_store_head_types(CPU, tiny_lm, small_corpus, tmp_path / "types")
    check_attention_probe(CPU, tiny_lm, small_corpus, tmp_path / "probe")
    check_edge_probe(CPU, tiny_lm, small_corpus, tmp_path / "edge")


def test_probe_cli_runs_with_model_dir_where_minilm_is_not_installed(monkeypatch, tmp_path, tiny_dir, one_torch_thread):
    """The default config's model (minilm-l6) is not checked when --model replaces it (on the CPU
    here; the GPU test runs the same with --device cuda)."""
    check_probe_cli(CPU, monkeypatch, tmp_path, tiny_dir)


def test_gpu_cli_check_bodies_on_cpu(monkeypatch, tmp_path, tiny_dir, one_torch_thread):
    for check in (check_heads_cli, check_prune_cli, check_embeddings_cli):
        check(CPU, monkeypatch, tmp_path / check.__name__, tiny_dir)


def test_device_helpers():
    from bertology.errors import ModelError
    from bertology.models import resolve_device

    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "n": 3, "list": [torch.zeros(1)]}
    same = to_device(batch, "cpu")
    assert same["input_ids"] is batch["input_ids"] and same["n"] == 3 and same["list"][0] is batch["list"][0]
    assert resolve_device("cpu") == CPU and resolve_device(None) == CPU
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ModelError, match="cpu, cuda, cuda:N or auto"):
        resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="no CUDA device"):
            resolve_device("cuda")
