"""The finetuning study with known answers, on a tiny in-process BERT and planted tasks: it runs end
to end; the frozen encoder has CKA 1 at every layer, weight change 0 and attention change 0; the
comparison table has one row per mode other than full, with a paired interval; one seed never gives
± 0; the trainer saves per-example test correctness that adds up to its reported accuracy; the
per-head attention change is 0 for identical models and singles out a head forced to another pattern."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bertology.errors import ConfigError, CorpusError, WorkbenchError
from bertology.finetuning.analysis import compare_with_reference, seeds_and_examples_interval
from bertology.finetuning.changes import attention_change, js_divergence_rows
from bertology.finetuning.trainer import read_test_predictions
from bertology.models import load_model
from bertology.studies import run_study
from bertology.testing import TINY_WORDS, plant_offset_head, save_tiny_model_dir

SET_A, SET_B = TINY_WORDS[:20], TINY_WORDS[20:40]


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict[str, Path]:
    """A tiny random BERT directory and a planted token task (a word's label is the set it comes
    from; 120 six-word sentences in 24 documents)."""
    root = tmp_path_factory.mktemp("ftstudy")
    rng = random.Random(0)
    lines = []
    for i in range(120):
        words = [rng.choice(SET_A + SET_B) for _ in range(6)]
        lines.append(
            {"words": words, "labels": ["A" if w in SET_A else "B" for w in words], "document": f"doc{i % 24}"}
        )
    (root / "token.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return {"model": save_tiny_model_dir("bert", root / "tiny-bert"), "token": root / "token.jsonl", "root": root}


def _run(planted, tmp_path, **overrides) -> Path:
    config = {
        "model": str(planted["model"]),
        "tasks": [str(planted["token"])],
        "seeds": [0, 1],
        "epochs": 2,
        "batch_size": 16,
        "max_seq_len": 32,
        "adapter_size": 8,
        "cka_sentences": 12,
        "device": "cpu",
        "probe_tasks": [],
        "head_types_change": False,
        **overrides,
    }
    return run_study("finetuning", overrides=config, results_root=tmp_path / "results", log=lambda _: None)


def _table(run_dir: Path, name: str) -> pd.DataFrame:
    return pd.read_parquet(run_dir / f"{name}.parquet")


def test_study_runs_end_to_end_with_known_answers(planted, tmp_path):
    run_dir = _run(
        planted, tmp_path, probe_tasks=["pos"], head_types_change=True, cka_sentences=40, learning_rates={"full": 2e-3}
    )
    runs = _table(run_dir, "finetune_runs")
    assert len(runs) == 4 * 2 and set(runs["mode"]) == {"frozen", "full", "bitfit", "adapters"}
    rates = runs.groupby("mode")["learning_rate"].unique().map(list).to_dict()
    assert rates == {"full": [2e-3], "frozen": [1e-3], "bitfit": [1e-3], "adapters": [1e-4]}  # the rest: defaults

    # the trainer's per-example test correctness adds up to the accuracy it reported
    for r in runs.itertuples():
        preds = read_test_predictions(run_dir / r.run)
        assert sum(preds["correct"]) / sum(preds["scored"]) == pytest.approx(r.test_accuracy, abs=1e-12)
        assert len(preds["example"]) == r.test_examples and sum(preds["scored"]) == r.test_items

    scores = _table(run_dir, "finetune_scores")
    assert len(scores) == 4 and (scores["n_seeds"] == 2).all()
    assert ((scores["low"] <= scores["accuracy"]) & (scores["accuracy"] <= scores["high"])).all()
    assert (scores["low"] < scores["high"]).all()  # never ± 0
    share = scores.set_index("mode")["trainable_share"]
    assert share["frozen"] < share["bitfit"] < share["full"] == 1.0

    comparisons = _table(run_dir, "finetune_comparisons")
    assert sorted(comparisons["mode"]) == ["adapters", "bitfit", "frozen"]
    assert (comparisons["reference"] == "full").all() and comparisons["low"].notna().all()
    assert (
        (comparisons["low"] <= comparisons["difference"]) & (comparisons["difference"] <= comparisons["high"])
    ).all()

    weights = _table(run_dir, "weight_change")
    frozen = weights[weights["mode"] == "frozen"]
    assert len(frozen) > 0 and (frozen["relative_change"] == 0).all()  # the encoder is bit-identical
    assert (weights[weights["mode"] == "full"]["relative_change"] > 0).all()
    assert set(weights["module"]) == {"embeddings", "attention", "ffn", "layernorm"}

    cka = _table(run_dir, "layer_cka")
    assert set(cka["layer"]) == {0, 1, 2}  # embeddings + 2 layers, per run
    assert np.allclose(cka[cka["mode"] == "frozen"]["cka"], 1.0, atol=1e-9)
    assert (cka[cka["mode"] == "full"]["cka"] < 1 - 1e-6).any()

    attention = _table(run_dir, "attention_change")
    assert (attention[attention["mode"] == "frozen"]["js_divergence"] == 0).all()
    assert (attention[attention["mode"] == "full"]["js_divergence"] > 0).any()

    by_layer = _table(run_dir, "change_by_layer")
    assert len(by_layer) == 4 * 3 and (by_layer["n_seeds"] == 2).all()  # modes x (embeddings + 2 layers)
    frozen = by_layer[by_layer["mode"] == "frozen"].set_index("layer")
    assert np.allclose(frozen["cka"], 1.0, atol=1e-9) and (frozen["weight_attention"].dropna() == 0).all()
    assert np.isnan(frozen.loc[0, "weight_attention"]) and frozen.loc[0, "weight_embeddings"] == 0  # 0: embeddings
    assert np.isnan(frozen.loc[0, "attention_js"]) and (frozen.loc[[1, 2], "attention_js"] == 0).all()
    full = by_layer[by_layer["mode"] == "full"].set_index("layer")
    expected = weights[(weights["mode"] == "full") & (weights["layer"] == 2) & (weights["module"] == "ffn")]
    assert full.loc[2, "weight_ffn"] == pytest.approx(expected["relative_change"].mean())  # layer 2 in both tables

    # probing and head types before and after: the frozen encoder is the pretrained one, so its
    # probes score exactly the same and no head changes type
    probes = _table(run_dir, "probing_before_after")
    assert set(probes["mode"]) == {"pretrained", "frozen", "full", "bitfit", "adapters"}
    assert set(probes["probe_task"]) == {"pos"} and set(probes["layer"]) == {0, 1, 2}
    keys = ["seed", "layer", "split"]
    before = probes[probes["mode"] == "pretrained"].set_index(keys)["accuracy"].sort_index()
    frozen = probes[probes["mode"] == "frozen"].set_index(keys)["accuracy"].sort_index()
    pd.testing.assert_series_equal(before, frozen)
    types = _table(run_dir, "head_types_before_after")
    assert set(types["mode"]) == {"frozen", "full", "bitfit", "adapters"} and len(types) == 4 * 2 * 2 * 4
    assert not types[types["mode"] == "frozen"]["changed"].any()
    assert (types["changed"] == (types["type_before"] != types["type_after"])).all()


def test_one_seed_gives_an_interval_of_the_test_examples_never_zero_width(planted, tmp_path):
    run_dir = _run(planted, tmp_path, modes=["frozen", "full"], seeds=[3], epochs=1, attention_change=False)
    scores = _table(run_dir, "finetune_scores")
    assert (scores["n_seeds"] == 1).all() and (scores["low"] < scores["high"]).all()
    assert scores["interval"].str.contains("1 seed").all()
    comparison = _table(run_dir, "finetune_comparisons")
    assert len(comparison) == 1 and comparison["interval"].str.contains("1 seed").all()
    assert not (run_dir / "attention_change.parquet").exists()


def test_bad_study_configs_are_refused(planted, tmp_path):
    with pytest.raises(ConfigError, match="must include 'full'"):
        _run(planted, tmp_path, modes=["frozen", "bitfit"])
    with pytest.raises(ConfigError, match="unknown mode"):
        _run(planted, tmp_path, modes=["full", "lora"])
    with pytest.raises(ConfigError, match="cka_sentences"):
        _run(planted, tmp_path, cka_sentences=1)
    with pytest.raises(ConfigError, match="learning_rates.*lora"):
        _run(planted, tmp_path, learning_rates={"lora": 1e-3})
    with pytest.raises(ConfigError, match="learning_rates"):
        _run(planted, tmp_path, learning_rates={"full": -1})
    with pytest.raises(ConfigError, match="max_examples"):
        _run(planted, tmp_path, max_examples=2)


# --------------------------------------------------------------------------- the intervals


def test_seed_interval_combines_seeds_and_examples():
    rng = np.random.default_rng(0)
    per_seed = [((rng.random(200) < p).astype(int), np.ones(200, int)) for p in (0.7, 0.8, 0.9)]
    out = seeds_and_examples_interval(per_seed)
    accuracies = [c.mean() for c, _ in per_seed]
    assert out["accuracy"] == pytest.approx(np.mean(accuracies)) and out["n_seeds"] == 3 and out["n_test"] == 600
    # the seeds disagree far more than 600 examples' sampling error: the t interval decides
    half = 4.303 * np.std(accuracies, ddof=1) / np.sqrt(3)  # t_{0.975, 2}
    assert out["low"] == pytest.approx(max(0.0, out["accuracy"] - half), abs=1e-3)
    assert out["high"] == pytest.approx(min(1.0, out["accuracy"] + half), abs=1e-3)
    # every example right: not [1, 1] but the Wilson floor of 100 items
    perfect = seeds_and_examples_interval([(np.ones(100, int), np.ones(100, int))])
    assert perfect["accuracy"] == 1.0 and perfect["high"] == 1.0 and 0.95 < perfect["low"] < 0.99
    assert "1 seed" in perfect["interval"]


def test_paired_comparison_on_the_same_examples():
    n = 300
    examples = [f"test-{i}" for i in range(n)]
    full = {"example": examples, "correct": [1] * n, "scored": [1] * n}
    half = {"example": examples, "correct": [i % 2 for i in range(n)], "scored": [1] * n}
    out = compare_with_reference([(half, full)])
    assert out["difference"] == pytest.approx(-0.5) and out["high"] < 0 and out["significant"]
    assert out["n_examples"] == n and out["p_value"] <= 1 / 1000
    same = compare_with_reference([(full, full), (full, full)])
    assert same["difference"] == 0 and not same["significant"]
    with pytest.raises(WorkbenchError, match="different test examples"):
        compare_with_reference([({**half, "example": examples[::-1]}, full)])


# --------------------------------------------------------------------------- attention change


def test_js_divergence_of_rows():
    p = np.array([[1.0, 0.0], [0.5, 0.5]])
    q = np.array([[0.0, 1.0], [0.5, 0.5]])
    import torch

    js = js_divergence_rows(torch.tensor(p), torch.tensor(q))
    assert js[0].item() == pytest.approx(1.0) and js[1].item() == 0.0  # disjoint supports: 1 bit


def test_attention_change_is_zero_for_identical_models_and_finds_a_forced_head(planted):
    before = load_model(planted["model"], attentions=True)
    after = load_model(planted["model"], attentions=True)
    sentences = [list(SET_A[i : i + 5]) for i in range(8)]
    same = attention_change(before, after, sentences, batch_size=3)
    assert len(same) == 2 * 4 and (same["js_divergence"] == 0).all() and (same["n_rows"] > 0).all()

    handle = plant_offset_head(after.model, layer=1, head=2, offset=-1)
    try:
        changed = attention_change(before, after, sentences, batch_size=3).set_index(["layer", "head"])["js_divergence"]
    finally:
        handle.remove()
    assert changed.idxmax() == (2, 3) and changed[(2, 3)] > 0.1  # array position (1, 2), numbered from 1
    assert (changed.drop((2, 3)) == 0).all()  # the other heads of that layer and every earlier head


# --------------------------------------------------------------------------- State of the Union tasks


def test_sotu_tasks_label_passages_by_party_and_decade_split_by_address(tmp_path, monkeypatch):
    """Six planted addresses (.txt + .json as the npm package has them): passages of three
    sentences, Democratic/Republican only for the party task, decades from the year, round-robin
    order over addresses, and no address in two splits."""
    from bertology.finetuning import build_task
    from bertology.finetuning.tasks import sotu_task

    addresses = [
        (1851, "Whig"),
        (1913, "Democratic"),
        (1925, "Republican"),
        (1934, "Democratic"),
        (1961, "Democratic"),
        (1971, "Republican"),
    ]
    for year, party in addresses:
        name = f"{year}_someone"
        sentences = " ".join(f"Sentence {i} of {year} is here." for i in range(7))  # 7 sentences -> passages 3, 3, 1
        (tmp_path / f"{name}.txt").write_text(sentences)
        (tmp_path / f"{name}.json").write_text(json.dumps({"year": year, "party": party, "text": sentences}))
    monkeypatch.setenv("BERTOLOGY_SOTU", str(tmp_path))

    party = sotu_task("party")
    assert len(party) == 5 * 3 and {e.label for e in party} == {"Democratic", "Republican"}
    assert [e.document for e in party[:5]] == [
        "1913_someone",
        "1925_someone",
        "1934_someone",
        "1961_someone",
        "1971_someone",
    ]  # every address's first passage first
    assert party[0].words == tuple(
        "Sentence 0 of 1913 is here Sentence 1 of 1913 is here Sentence 2 of 1913 is here".split()
    )
    assert party[-1].words == ("Sentence", "6", "of", "1971", "is", "here")  # the seventh sentence alone
    decade = build_task("sotu-decade", dev_fraction=0.2, test_fraction=0.2, seed=1)
    assert decade.kind == "sentence" and decade.labels == ["1850s", "1910s", "1920s", "1930s", "1960s", "1970s"]
    assert decade.source.startswith("gold:")
    documents = [{e.document for e in decade.split(s)} for s in ("train", "dev", "test")]
    assert not (documents[0] & documents[1] or documents[0] & documents[2] or documents[1] & documents[2])
    first_five = build_task("sotu-party", max_examples=5, dev_fraction=0.2, test_fraction=0.2)
    kept = first_five.train + first_five.dev + first_five.test
    assert len(kept) == 5 and len({e.document for e in kept}) == 5  # max_examples keeps every address
    (tmp_path / "1971_someone.json").write_text(json.dumps({"party": "Republican"}))
    with pytest.raises(CorpusError, match="1971_someone.*year"):
        sotu_task("decade")
