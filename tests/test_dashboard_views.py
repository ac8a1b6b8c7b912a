"""Results shown as a paper would (issue 27, item 2), on planted runs: the random-init baseline on
the probing curves, and the shaping behind it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from dashboard_planted import MARKUP, chart_specs, probing_run
from streamlit.testing.v1 import AppTest

from bertology.apps import figures, tables
from bertology.apps.pages.probing import add_baseline_lines, random_baseline_means

APP = str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py")


def open_page(results: Path, monkeypatch, page: str) -> AppTest:
    """The dashboard on ``page`` over the results folder ``results``, run once."""
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(results))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["page"] = page
    at.run()
    return at


def baseline_rows(task: str = "pos", value: float = 0.3) -> pd.DataFrame:
    """``random_baseline`` rows (as ``layer_scores``): accuracy ``value`` at layers 0..2, one seed,
    plus a dev row and a control row that must not be drawn."""
    rows = [
        {
            "task": task,
            "layer": l,
            "metric": "accuracy",
            "value": value,
            "seed": 0,
            "split": "test",
            "mode": "per_layer",
            "control": False,
            "model": "random-init",
        }
        for l in range(3)
    ]
    rows.append({**rows[0], "split": "dev", "value": 0.99})
    rows.append({**rows[0], "control": True, "value": 0.01})
    return pd.DataFrame(rows)


def test_random_baseline_means_take_test_rows_of_the_metric_and_input():
    means = random_baseline_means(baseline_rows(), "accuracy", "per_layer")
    assert means["mean"].tolist() == pytest.approx([0.3, 0.3, 0.3]) and means["layer"].tolist() == [0, 1, 2]
    assert random_baseline_means(baseline_rows(), "accuracy", "cumulative") is None
    assert random_baseline_means(baseline_rows(), "macro_f1", "per_layer") is None


def test_baseline_lines_are_dashed_in_their_tasks_colour():
    curve = pd.DataFrame({"task": [MARKUP] * 3, "layer": [0, 1, 2], "mean": [0.5, 0.6, 0.7], "ci95": 0.01})
    fig = figures.line_with_band(curve, "layer", "task", "t", "accuracy")
    add_baseline_lines(
        fig, random_baseline_means(baseline_rows(MARKUP), "accuracy", "per_layer"), "task", "random-init encoder"
    )
    solid, dashed = fig.data[1], fig.data[-1]
    assert dashed.name == "&lt;b&gt;x&lt;/b&gt; · random-init encoder" and dashed.line.dash == "dash"
    assert dashed.line.color == solid.line.color and list(dashed.y) == pytest.approx([0.3, 0.3, 0.3])


def test_probing_page_draws_the_random_baseline(tmp_path, monkeypatch):
    run = probing_run(tmp_path / "results", "p", "m")
    baseline_rows().to_parquet(run / "random_baseline.parquet")
    at = open_page(tmp_path / "results", monkeypatch, "Probing")
    assert not at.exception and not at.error
    traces = chart_specs(at)[0]["data"]
    dashed = [t for t in traces if t.get("name") == "pos · random-init encoder"]
    assert len(dashed) == 1 and dashed[0]["y"] == pytest.approx([0.3, 0.3, 0.3])
    assert any("randomly initialised copy" in c.value for c in at.caption)


def test_search_rows_matches_any_text_column_literally():
    df = pd.DataFrame({"source": ["dog", "cat", "a.b"], "target": ["chien", "chat", "x"], "rank": [1, 2, 3]})
    assert tables.search_rows(df, "CH")["source"].tolist() == ["dog", "cat"]
    assert tables.search_rows(df, ".")["source"].tolist() == ["a.b"]  # not a pattern: "." is a dot
    assert tables.search_rows(df, "  ").equals(df) and tables.search_rows(df, None).equals(df)
    assert tables.search_rows(df, "zebra").empty


def test_neighbour_table_is_searchable(tmp_path, monkeypatch):
    from dashboard_planted import contextuality_run

    from bertology.results import read_table

    run = contextuality_run(tmp_path / "results", "c", "m")
    neighbours = pd.concat(
        [
            read_table(run, "neighbours"),
            pd.DataFrame({"word": ["bank"], "static_space": ["input embeddings"], "neighbour": ["river"]}),
        ]
    )
    neighbours.to_parquet(run / "neighbours.parquet")
    at = open_page(tmp_path / "results", monkeypatch, "Embeddings")
    assert len(at.dataframe[-1].value) == 2 and any(c.value == "2 of 2 rows" for c in at.caption)
    at.text_input(key="ctx_neighbour_search").set_value("RIVER").run()
    assert not at.exception
    assert at.dataframe[-1].value["word"].tolist() == ["bank"]
    assert any(c.value == "1 of 2 rows match the search" for c in at.caption)


def test_pruning_of_an_mlm_loss_is_drawn_as_the_loss_with_its_thresholds(tmp_path, monkeypatch):
    from bertology.results import write_results

    metric = "MLM loss (metric: minus eval loss)"
    curves = pd.DataFrame(
        {
            "method": "importance",
            "seed": 0,
            "n_pruned": [0, 2, 4],
            "share_removed": [0.0, 0.5, 1.0],
            "value": [-6.2, -6.3, -6.5],
            "metric": metric,
        }
    )
    thresholds = pd.DataFrame(
        {
            "method": ["importance", "importance"],
            "seed": [0, 0],
            "tolerance": [0.01, 0.05],
            "removable_share": [0.5, 1.0],
            "value_test": [-6.3, -6.5],
        }
    )
    write_results(
        tmp_path / "results" / "pruning" / "mlm",
        {"pruning_curves": curves, "pruning_thresholds": thresholds},
        {"study": "pruning", "run_id": "mlm", "seed": 0, "model": {"name": "m"}},
    )
    at = open_page(tmp_path / "results", monkeypatch, "Pruning")
    assert not at.exception and not at.error
    spec = chart_specs(at)[0]
    curve = [t for t in spec["data"] if t.get("name") == "importance" and t.get("mode") == "lines+markers"][0]
    assert curve["y"] == pytest.approx([6.2, 6.3, 6.5])  # the loss itself, rising as heads go
    assert spec["layout"]["yaxis"]["title"]["text"] == "held-out MLM loss (nats/token; lower is better)"
    marks = {t["name"]: (t["x"][0], t["y"][0]) for t in spec["data"] if "threshold" in str(t.get("name"))}
    assert marks == {
        "importance: 1% threshold": pytest.approx((0.5, 6.3)),
        "importance: 5% threshold": pytest.approx((1.0, 6.5)),
    }
    shown = at.dataframe[0].value  # the thresholds table: shares as percentages, the loss as the loss
    assert shown["removable_share"].tolist() == ["50.0%", "100.0%"] and shown["tolerance"].tolist() == ["1.0%", "5.0%"]
    assert shown["value_test"].tolist() == ["6.300", "6.500"]


def test_every_measure_page_defines_its_measures(tmp_path, monkeypatch):
    assert any("E_Δ" in line and "Σ_l l·Δ_l" in line for line in tables.measure_lines("Probing"))
    assert any("selectivity" in line for line in tables.measure_lines("Probing"))
    assert tables.measure_lines("Runs") == [] and tables.measure_lines("Live") == []
    probing_run(tmp_path / "results", "p", "m")
    at = open_page(tmp_path / "results", monkeypatch, "Probing")
    assert at.expander[0].label == "what the measures on this page mean"
    shown = " ".join(m.value for m in at.expander[0].markdown)
    for name in ("E_s", "E_Δ", "selectivity", "MDL compression", "random-init baseline"):
        assert name in shown, name


def test_selectivity_mdl_and_l0_gates_are_drawn_per_layer(tmp_path, monkeypatch):
    """Planted controls (selectivity 0.1 / 0.3 / 0.2 over layers), MDL compression (2 / 4 / 3, mean
    of two seeds) and L0 gates (λ 0.1 keeps 2 of 4 heads) come out as per-layer curves and a gate map."""
    from bertology.results import write_results

    run = probing_run(tmp_path / "results", "p", "m")
    controls = pd.DataFrame(
        [
            {"task": "pos", "layer": l, "control": False, "metric": "selectivity", "value": v}
            for l, v in enumerate([0.1, 0.3, 0.2])
        ]
        + [{"task": "pos", "layer": l, "control": True, "metric": "accuracy", "value": 0.5} for l in range(3)]
    )
    controls.to_parquet(run / "controls.parquet")
    mdl = pd.DataFrame(
        [
            {
                "task": "pos",
                "mode": "per_layer",
                "probe": "mlp",
                "control": False,
                "layer": l,
                "seed": s,
                "metric": "compression",
                "value": v + (0.5 if s else -0.5),
            }
            for l, v in enumerate([2.0, 4.0, 3.0])
            for s in (0, 1)
        ]
        + [
            {
                "task": "pos",
                "mode": "per_layer",
                "probe": "mlp",
                "control": False,
                "layer": 0,
                "seed": 0,
                "metric": "online_bits",
                "value": 999.0,
            }
        ]
    )
    mdl.to_parquet(run / "mdl.parquet")
    at = open_page(tmp_path / "results", monkeypatch, "Probing")
    assert not at.exception and not at.error
    specs = {s["layout"]["title"]["text"]: s for s in chart_specs(at)}
    selectivity = specs["selectivity per layer: task − control accuracy (test)"]["data"][0]
    assert selectivity["y"] == pytest.approx([0.1, 0.3, 0.2])
    compression = specs["MDL compression per layer: uniform ÷ online codelength"]["data"][0]
    assert compression["y"] == pytest.approx([2.0, 4.0, 3.0])

    gates = pd.DataFrame(
        {
            "lam": 0.1,
            "seed": 0,
            "layer": [1, 1, 2, 2],  # layers and heads numbered from 1
            "head": [1, 2, 1, 2],
            "log_alpha": 0.0,
            "p_open": [0.9, 0.1, 0.8, 0.2],
            "gate": [1.0, 0.0, 1.0, 0.0],
            "kept": [True, False, True, False],
        }
    )
    write_results(
        tmp_path / "results" / "pruning" / "l0",
        {"l0_gates": gates},
        {"study": "pruning", "run_id": "l0", "seed": 0, "model": {"name": "m"}, "numbering": "layers-from-1"},
    )
    at = open_page(tmp_path / "results", monkeypatch, "Pruning")
    assert not at.exception and not at.error
    gate_map = [s for s in chart_specs(at) if s["layout"]["title"]["text"].startswith("L0 head gates")][0]
    heat = [t for t in gate_map["data"] if t["type"] == "heatmap"][0]
    assert heat["z"] == [[0.9, 0.1], [0.8, 0.2]]
    removed = [t for t in gate_map["data"] if t.get("name") == "removed"][0]
    assert sorted(zip(removed["y"], removed["x"])) == [(1, 2), (2, 2)]
    assert heat["x"] == [1, 2] and heat["y"] == [1, 2]
    assert not [w.value for w in at.warning if "predates" in w.value]
    assert "2 of 4 heads kept" in gate_map["layout"]["annotations"][0]["text"]


def test_emergence_shows_the_reference_models_cloze_guesses(tmp_path, monkeypatch):
    from dashboard_planted import emergence_run

    run = emergence_run(tmp_path / "results")
    pd.DataFrame(
        [
            {
                "sentence": "s1",
                "position": 1,
                "masked": "dog",
                "text": "the ___ barked",
                "rank": rank,
                "prediction": guess,
                "probability": p,
                "correct": guess == "dog",
                "model": "reference-mlm",
            }
            for rank, (guess, p) in enumerate((("dog", 0.9), ("puppy", 0.05)), 1)
        ]
    ).to_parquet(run / "reference_cloze_predictions.parquet")
    pd.DataFrame({"model": ["reference-mlm"], "n": [1], "top1": [1.0], "top5": [1.0]}).to_parquet(
        run / "reference_cloze_accuracy.parquet"
    )
    at = open_page(tmp_path / "results", monkeypatch, "Pretraining")
    assert not at.exception and not at.error
    assert any(
        "Reference, not a checkpoint of this run: reference-mlm" in c.value and "top-1 100%" in c.value
        for c in at.caption
    )
    guesses = [d.value for d in at.dataframe if "top predictions" in d.value.columns]
    assert guesses[-1]["top predictions"].tolist() == ["dog (90.0%), puppy (5.0%)"]


def test_finetuning_page_shows_modes_with_intervals_and_change_per_layer(tmp_path, monkeypatch):
    from dashboard_planted import finetuning_run

    finetuning_run(tmp_path / "results")
    at = open_page(tmp_path / "results", monkeypatch, "Fine-tuning")
    assert not at.exception and not at.error
    scores, change, probes = chart_specs(at)
    after = [t for t in probes["data"] if t["name"] == "full"][0]
    before = [t for t in probes["data"] if t["name"] == "pretrained"][0]
    assert after["y"] == pytest.approx([0.4, 0.5, 0.6]) and before["y"] == pytest.approx([0.5, 0.6, 0.7])
    changes = at.dataframe[-1].value
    assert changes["changed_share"].tolist() == ["25.0%"] and changes["most_common_changes"].tolist() == [
        "syntactic → broad (1)"
    ]
    bars = scores["data"][0]  # points with whiskers, the value written above each
    assert bars["mode"] == "markers+text" and bars["textposition"] == "top center"
    assert list(bars["y"]) == ["frozen", "full", "bitfit"] and bars["x"] == pytest.approx([0.90, 0.97, 0.95])
    assert bars["error_x"]["arrayminus"] == pytest.approx([0.02, 0.01, 0.02])
    low, high = scores["layout"]["xaxis"]["range"]  # the axis shows the differences, as no cliff
    assert 0.7 < low < 0.87 and high - low >= 0.25
    titles = [a["text"] for a in change["layout"]["annotations"]]  # short two-line panel titles, room above
    assert titles[0].startswith("CKA with pretrained") and all(len(x) <= 24 for t in titles for x in t.split("<br>"))
    assert change["layout"]["margin"]["t"] >= 100
    cka = [t for t in change["data"] if t["name"] == "full" and t.get("xaxis", "x") == "x"][0]
    assert cka["y"] == pytest.approx([1.0, 0.9, 0.6])
    js = [t for t in change["data"] if t.get("xaxis") == "x3" and t["legendgroup"] == "full"][0]
    assert js["x"] == [1, 2] and js["y"] == pytest.approx([0.02, 0.08])
    differences = at.dataframe[1].value["difference [95% CI]"]  # as a paper prints it: value [low, high]
    assert [d.split(" ")[0] for d in differences] == ["-0.070", "-0.020"] and differences.str.contains(r"\[").all()
    shown = " ".join(m.value for m in at.expander[0].markdown)
    assert "linear CKA" in shown and "BitFit" in shown and "Jensen–Shannon" in shown


def test_a_page_compare_warns_when_the_two_runs_measure_different_things(tmp_path, monkeypatch):
    a = probing_run(tmp_path / "results", "p-a", "model-a")
    probing_run(tmp_path / "results", "p-b", "model-b", config={"probe": "linear"})
    import os

    os.utime(a, (0, 0))
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path / "results"))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["page"] = "Probing"
    at.query_params["compare"] = "edge_probing/p-a"
    at.run()
    assert not at.exception
    assert any("differ in more than the model or seed" in w.value and "probe" in w.value for w in at.warning)


def test_compression_page_shows_the_fine_tune_pruning_and_quantization(tmp_path, monkeypatch):
    from dashboard_planted import PLANTED_QUANT_ACCURACY, compression_run

    compression_run(tmp_path / "results")
    at = open_page(tmp_path / "results", monkeypatch, "Compression")
    assert not at.exception and not at.error
    assert any("test accuracy 0.9500 [0.9400, 0.9600] on 800 items" in m.value for m in at.markdown)
    curves, importance, lottery, survivors, quant, probing = chart_specs(at)
    heat = survivors["data"][0]
    assert (
        heat["x"] == ["H1", "H2", "H3", "FFN"]
        and heat["y"] == ["L1", "L2"]
        and heat["z"] == [[0.5, 0.5, 0.5, 0.0], [0.5, 0.5, 1.0, 1.0]]
    )
    assert heat["text"][1] == ["", "", "★", "★"]
    ticket = [t for t in lottery["data"] if t.get("name") == "magnitude ticket (IMP, rewound)"][0]
    assert ticket["x"] == pytest.approx([0.0, 0.5, 0.75]) and ticket["y"] == pytest.approx([0.95, 0.94, 0.92])
    two_bit = [t for t in probing["data"] if t.get("name") == "simulated-2bit"][0]
    assert two_bit["y"] == pytest.approx([-0.05, 0.05, 0.15])
    by_name = {
        t["name"]: t for t in curves["data"] if t.get("mode") != "markers" and t.get("name") in ("importance", "random")
    }
    assert by_name["importance"]["y"] == pytest.approx([0.95, 0.90, 0.2])
    bars = quant["data"][0]
    assert list(bars["y"]) == list(PLANTED_QUANT_ACCURACY) and bars["x"] == pytest.approx(
        list(PLANTED_QUANT_ACCURACY.values())
    )
    assert "1.50× faster" in bars["text"][1] and "faster" not in bars["text"][2]  # simulated bits: no speed-up
    assert "(packed)" in bars["text"][2]
    summary = at.dataframe[0].value  # as a paper prints it: the share with its interval
    assert [v.split(" ")[0] for v in summary["removable_share [95% CI]"]] == ["50.0%", "20.0%"]
    # the sub-networks, as a paper prints them (3 decimals)
    assert at.dataframe[1].value["test_accuracy"].tolist() == ["0.950", "0.940", "0.900", "0.700"]
    shown = " ".join(m.value for m in at.expander[0].markdown)
    assert "Michel et al. 2019" in shown and "simulated b-bit" in shown


# --------------------------------------------------------------------------- issue 43: read as in a paper


def test_paper_table_prints_intervals_percentages_and_sample_sizes():
    assert tables.format_interval(0.92134, 0.8621, 0.9779) == "0.921 [0.862, 0.978]"
    assert tables.format_interval(0.921, float("nan"), float("nan")) == "0.921 (no interval)"
    assert tables.format_interval(0.57, 0.4, 0.7, percent=True) == "57.0% [40.0, 70.0]"
    summary = pd.DataFrame(
        {
            "task": ["pos"],
            "best_layer": [2],
            "best_layer_score": [0.92134],
            "best_layer_low": [0.8621],
            "best_layer_high": [0.9779],
            "n_test": [1296],
            "changed_share": [0.25],
            "p_value": [0.0002],
            "small_sample": [False],
        }
    )
    shown = tables.paper_table(summary).iloc[0].to_dict()
    assert shown == {
        "task": "pos",
        "best_layer": 2,
        "best_layer_score [95% CI]": "0.921 [0.862, 0.978]",  # the bounds belong to the score, not the layer
        "n_test": "1,296",
        "changed_share": "25.0%",
        "p_value": "< 0.001",
        "small_sample": "no",
    }
    differences = pd.DataFrame({"score": [0.9], "difference": [-0.05], "low": [-0.08], "high": [-0.02]})
    assert tables.paper_table(differences).columns.tolist() == ["score", "difference [95% CI]"]


def test_one_colour_per_name_from_the_sorted_names():
    colours = figures.category_colours(["pos", "deps", MARKUP, "pos"])
    assert colours["deps"] != colours["pos"] and colours[figures.esc(MARKUP)] == colours[MARKUP]
    assert figures.category_colours(["pos", "deps"])["pos"] == figures.category_colours(["deps", "pos", "zz"])["pos"]


def test_runs_page_shows_model_machine_and_the_real_corpus_size(tmp_path, monkeypatch):
    from bertology.apps.locations import describe
    from bertology.results import write_results

    machine = {"summary": "Intel Xeon (AVX-512), 2 cores, cpu, float32", "cpu": "Xeon", "isa": [], "gpu": None}
    write_results(
        tmp_path / "results" / "finetuning" / "new",
        {},
        {"study": "finetuning", "seed": 0, "config": {"model": "minilm-l6"}, "machine": machine, "tables": []},
    )
    old = write_results(
        tmp_path / "results" / "edge_probing" / "old",
        {},
        {"study": "edge_probing", "seed": 0, "corpus": {"name": "mine[:1500]", "sentences": 30}, "tables": []},
    )
    manifest = json.loads((old / "manifest.json").read_text())
    manifest.pop("machine")  # a run from before manifests carried the machine
    (old / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path / "results"))
    assert describe(old) == "edge_probing/old · mine (30 sentences)"  # not the limit asked, mine[:1500]
    at = open_page(tmp_path / "results", monkeypatch, "Runs")
    rows = at.dataframe[0].value.set_index("run")
    assert rows.loc["new", "model"] == "minilm-l6" and rows.loc["new", "machine"] == machine["summary"]
    assert rows.loc["old", "machine"] == "not recorded"


def test_embeddings_page_says_too_few_words_instead_of_an_error(tmp_path, monkeypatch):
    from dashboard_planted import contextuality_run

    from bertology.results import read_manifest, read_table, write_results

    run = contextuality_run(tmp_path / "results", "c", "m")
    table = read_table(run, "contextuality").assign(n_items=6)
    manifest = read_manifest(run) | {"config": {"words": ["bank", "play"], "min_word_occurrences": 8}}
    write_results(run, {"contextuality": table, "sense_clusters": pd.DataFrame()}, manifest)
    at = open_page(tmp_path / "results", monkeypatch, "Embeddings")
    assert not at.exception and not at.error
    assert [w.value for w in at.warning if "too few words: 6 (need 50)" in w.value]
    assert not [w.value for w in at.warning if "lacks columns" in w.value]
    note = " ".join(i.value for i in at.info)
    assert "too few words: 0 (need 1)" in note and "None of the 2 polysemous words" in note


def test_one_seed_probing_promises_no_interval(tmp_path, monkeypatch):
    from bertology.results import read_table, write_results

    run = probing_run(tmp_path / "results", "p", "m")
    scores = read_table(run, "layer_scores")
    write_results(run, {"layer_scores": scores[scores["seed"] == 0]}, {"study": "edge_probing", "seed": 0})
    at = open_page(tmp_path / "results", monkeypatch, "Probing")
    assert not at.exception and not at.error
    title = chart_specs(at)[0]["layout"]["title"]["text"]
    assert "one seed: no interval; use --seeds 3" in title and "95%" not in title


def test_heads_page_shows_the_attention_probe_uas_with_its_interval(tmp_path, monkeypatch):
    from dashboard_planted import every_study_run

    from bertology.results import read_manifest, write_results

    run = every_study_run(tmp_path / "results")["head_types"]
    probe = pd.DataFrame(
        {"method": ["best_head"], "layer": [2.0], "head": [1.0], "offset": [float("nan")], "n_train": [90]}
        | {"n_test": [1296], "uas": [0.3512], "uas_low": [0.3012], "uas_high": [0.4023], "seed": [0]}
    )
    write_results(run, {"attention_probe": probe}, read_manifest(run))
    at = open_page(tmp_path / "results", monkeypatch, "Heads")
    assert not at.exception and not at.error
    shown = at.dataframe[-1].value.iloc[0].to_dict()
    assert shown["uas [95% CI]"] == "0.351 [0.301, 0.402]" and shown["layer"] == "2" and shown["n_test"] == "1,296"
