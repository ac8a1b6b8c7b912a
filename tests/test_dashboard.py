"""Dashboard: every page renders from results the quickstart study writes in this test session,
and missing or corrupt results give clear messages instead of tracebacks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from bertology.apps.pages import INTROS, TITLES


APP = str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py")
PAGES = ["Runs", "Probing", "Feature combinations", "Heads", "Pruning", "Embeddings", "Alignment", "Pretraining",
         "Compare runs"]


def open_page(page: str, results: Path, monkeypatch) -> AppTest:
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(results))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.sidebar.radio(key="page").set_value(page).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_quickstart_writes_every_study(quickstart_results):
    studies = {p.name for p in quickstart_results.iterdir()}
    assert {"quickstart", "edge_probing", "feature_combinations", "head_types", "pruning", "contextuality",
            "alignment", "emergence"} <= studies
    for run in quickstart_results.glob("*/*"):
        assert (run / "manifest.json").is_file(), run


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_from_results(page, quickstart_results, monkeypatch):
    at = open_page(page, quickstart_results, monkeypatch)
    assert not at.error, [e.value for e in at.error]
    assert at.header[0].value == TITLES[page] and at.caption[0].value == INTROS[page]
    if page not in ("Runs", "Compare runs"):
        assert not [i for i in at.info if "No `" in i.value], "the page found no run"
    if page == "Runs":
        assert len(at.dataframe) == 1
    if page in ("Probing", "Heads", "Pruning", "Embeddings", "Pretraining", "Feature combinations"):
        charts = at.get("plotly_chart")
        assert len(charts) >= 1, f"{page}: no chart"
    if page == "Pretraining":  # the masked-word predictions of each checkpoint, readable
        assert [s.value for s in at.subheader] == ["Heads across checkpoints", "Probe accuracy across checkpoints",
                                                   "What the model predicts for a masked word"]
        titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
        steps = sorted(int(s) for s in pd.read_parquet(next((quickstart_results / "emergence").iterdir())
                                                        / "head_types_by_step.parquet")["step"].unique())
        assert f"head types at step {steps[-1]}" in titles  # the slider starts at the last checkpoint
        at.select_slider(key="pt_step").set_value(steps[0]).run()
        titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]
        assert f"head types at step {steps[0]}" in titles
        table = at.dataframe[0].value
        assert list(table.columns) == ["sentence", "masked word", "top predictions"]
        assert table["sentence"].str.contains("___").all() and len(table) > 0


def test_missing_and_corrupt_results_show_messages(quickstart_results, tmp_path, monkeypatch):
    broken = tmp_path / "results"
    shutil.copytree(quickstart_results / "edge_probing", broken / "edge_probing")
    shutil.copytree(quickstart_results / "head_types", broken / "head_types")
    run = next((broken / "edge_probing").iterdir())
    (run / "layer_scores.parquet").write_bytes(b"not parquet")
    (run / "summary.parquet").unlink()
    at = open_page("Probing", broken, monkeypatch)
    warnings = " ".join(w.value for w in at.warning)
    assert "corrupt table" in warnings and "summary" in warnings
    heads_run = next((broken / "head_types").iterdir())
    (heads_run / "manifest.json").write_text("{not json")
    at = open_page("Heads", broken, monkeypatch)
    assert any("corrupt manifest" in e.value for e in at.error)
    at = open_page("Alignment", tmp_path / "nothing-here", monkeypatch)
    assert any("No `alignment` runs" in i.value for i in at.info)
