"""Results shown as a paper would (issue 27, item 2), on planted runs: the random-init baseline on
the probing curves, and the shaping behind it."""

from __future__ import annotations

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
    assert at.dataframe[0].value["removable_share"].tolist() == [0.5, 1.0]  # the thresholds table is shown


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
            "layer": [0, 0, 1, 1],
            "head": [0, 1, 0, 1],
            "log_alpha": 0.0,
            "p_open": [0.9, 0.1, 0.8, 0.2],
            "gate": [1.0, 0.0, 1.0, 0.0],
            "kept": [True, False, True, False],
        }
    )
    write_results(
        tmp_path / "results" / "pruning" / "l0",
        {"l0_gates": gates},
        {"study": "pruning", "run_id": "l0", "seed": 0, "model": {"name": "m"}},
    )
    at = open_page(tmp_path / "results", monkeypatch, "Pruning")
    assert not at.exception and not at.error
    gate_map = [s for s in chart_specs(at) if s["layout"]["title"]["text"].startswith("L0 head gates")][0]
    heat = [t for t in gate_map["data"] if t["type"] == "heatmap"][0]
    assert heat["z"] == [[0.9, 0.1], [0.8, 0.2]]
    removed = [t for t in gate_map["data"] if t.get("name") == "removed"][0]
    assert sorted(zip(removed["y"], removed["x"])) == [(0, 1), (1, 1)]
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
    assert changes["changed_share"].tolist() == [0.25] and changes["most_common_changes"].tolist() == [
        "syntactic → broad (1)"
    ]
    bars = scores["data"][0]
    assert list(bars["y"]) == ["frozen", "full", "bitfit"] and bars["x"] == pytest.approx([0.90, 0.97, 0.95])
    assert bars["error_x"]["arrayminus"] == pytest.approx([0.02, 0.01, 0.02])
    assert scores["layout"]["xaxis"]["range"][0] > 0.8  # the axis shows the differences
    cka = [t for t in change["data"] if t["name"] == "full" and t.get("xaxis", "x") == "x"][0]
    assert cka["y"] == pytest.approx([1.0, 0.9, 0.6])
    js = [t for t in change["data"] if t.get("xaxis") == "x3" and t["legendgroup"] == "full"][0]
    assert js["x"] == [1, 2] and js["y"] == pytest.approx([0.02, 0.08])
    assert at.dataframe[1].value["difference"].tolist() == pytest.approx([-0.07, -0.02])
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
    assert heat["x"] == ["H0", "H1", "H2", "FFN"] and heat["z"] == [[0.5, 0.5, 0.5, 0.0], [0.5, 0.5, 1.0, 1.0]]
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
    summary = at.dataframe[0].value
    assert summary["removable_share"].tolist() == [0.5, 0.2]
    assert at.dataframe[1].value["test_accuracy"].tolist() == [
        0.95,
        0.94,
        0.9,
        0.7,
    ]  # the sub-networks and summary["n_orders"].tolist() == [1, 3]
    shown = " ".join(m.value for m in at.expander[0].markdown)
    assert "Michel et al. 2019" in shown and "simulated b-bit" in shown
