"""Dashboard: every page renders from results the quickstart study writes in this test session and
from a planted run of its study (with the planted numbers on screen), the page registry is
consistent with the runs it reads, and missing or corrupt results give clear messages instead of
tracebacks. Titles are compared with the literal strings of tests/dashboard_planted.py, never with
the registry the page renders from."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dashboard_planted import (
    INTRO_PHRASES,
    PAGE_STUDIES,
    PAGE_TITLES,
    PLANTED_IMPORTANCE,
    age,
    chart_specs,
    every_study_run,
    probing_run,
)
from streamlit.testing.v1 import AppTest

from bertology.apps.pages import PAGES

APP = str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py")


def open_page(page: str, results: Path, monkeypatch) -> AppTest:
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(results))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.sidebar.radio(key="page").set_value(page).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def chart_titles(at: AppTest) -> list[str]:
    return [spec["layout"]["title"]["text"] for spec in chart_specs(at)]


def line(spec: dict, name: str) -> list[float]:
    """The y values of the trace called ``name`` (a line of :func:`figures.line_with_band`)."""
    return [t for t in spec["data"] if t.get("name") == name and t.get("mode") == "lines+markers"][0]["y"]


@pytest.mark.slow  # the whole tour at tiny sizes (a 34 s session fixture)
def test_quickstart_writes_every_study(quickstart_results):
    studies = {p.name for p in quickstart_results.iterdir()}
    assert {
        "tour",
        "edge_probing",
        "feature_combinations",
        "head_types",
        "pruning",
        "contextuality",
        "alignment",
        "emergence",
    } <= studies
    for run in quickstart_results.glob("*/*"):
        assert (run / "manifest.json").is_file(), run
    assert (quickstart_results / "edge_probing" / "tour-seed0").is_dir()  # sub-runs named after the study


def test_the_registry_holds_the_pages_in_order_with_their_titles():
    assert [p.key for p in PAGES] == list(PAGE_TITLES)
    assert {p.key: p.title for p in PAGES} == PAGE_TITLES
    for p in PAGES:
        assert INTRO_PHRASES[p.key] in p.intro, p.key
    assert {p.key: (p.study, p.main_table) for p in PAGES if p.study} == PAGE_STUDIES
    assert [p.key for p in PAGES if p.compare] == ["Probing", "Heads", "Embeddings"]


@pytest.mark.parametrize("page", [p for p in PAGES if p.study], ids=lambda p: p.key)
def test_a_registry_entry_renders_its_own_study_and_main_table(page, tmp_path, monkeypatch):
    """The page finds the planted run of the entry's study alone (its render reads ``page.study``),
    the run holds the entry's main table, and the page reads that table: spoilt, it says so."""
    root = tmp_path / "results"
    run = every_study_run(tmp_path / "all")[page.study]
    shutil.copytree(run, root / page.study / run.name)
    run = root / page.study / run.name
    assert (run / f"{page.main_table}.parquet").is_file()
    at = open_page(page.key, root, monkeypatch)
    assert at.header[0].value == PAGE_TITLES[page.key]
    assert not at.error and not at.warning, [e.value for e in [*at.error, *at.warning]]
    assert not [i.value for i in at.info if "No complete `" in i.value], "the page found no run of its study"
    (run / f"{page.main_table}.parquet").write_bytes(b"not parquet")
    at = open_page(page.key, root, monkeypatch)
    assert any("corrupt table" in w.value and f"{page.main_table}.parquet" in w.value for w in at.warning), [
        w.value for w in at.warning
    ]


@pytest.fixture
def planted_results(tmp_path) -> Path:
    root = tmp_path / "results"
    every_study_run(root)
    return root


def test_runs_page_lists_every_planted_run(planted_results, monkeypatch):
    at = open_page("Runs", planted_results, monkeypatch)
    assert at.header[0].value == "Runs"
    table = at.dataframe[0].value
    assert sorted(table["study"]) == sorted(s for s, _ in PAGE_STUDIES.values())
    with_model = table[table["study"] != "semantic_change"]  # word2vec spaces: no model
    assert set(table["status"]) == {"complete"} and set(with_model["model"]) == {"planted-bert"}


def test_probing_page_draws_the_planted_curve(planted_results, monkeypatch):
    at = open_page("Probing", planted_results, monkeypatch)
    assert at.header[0].value == "Edge probing (Tenney et al. 2019)"
    assert line(chart_specs(at)[0], "pos") == pytest.approx([0.5, 0.6, 0.7])


def test_combinations_page_shows_the_planted_means(planted_results, monkeypatch):
    at = open_page("Feature combinations", planted_results, monkeypatch)
    assert at.header[0].value == "Feature-based combinations (Devlin et al. 2019, Table 7)"
    bars = chart_specs(at)[0]["data"][0]
    # horizontal bars, best combination first (sum of the last four: 0.9)
    assert list(bars["y"]) == ["sum_last_four", "last_layer"] and bars["x"] == pytest.approx([0.9, 0.7])
    means = at.dataframe[0].value.set_index("combination")["mean [95% CI]"]  # as a paper prints it
    assert means["last_layer"].startswith("0.700") and means["sum_last_four"].startswith("0.900")


def test_heads_page_opens_the_planted_syntactic_head(planted_results, monkeypatch):
    at = open_page("Heads", planted_results, monkeypatch)
    assert at.header[0].value == "Attention heads (Voita et al. 2019, Clark et al. 2019)"
    assert at.subheader[0].value == "Layer 2, head 1"
    assert any("Best: nsubj (dependent → head), accuracy 0.90 vs 0.40" in c.value for c in at.caption)


def test_pruning_page_draws_the_planted_curve_and_importance(planted_results, monkeypatch):
    at = open_page("Pruning", planted_results, monkeypatch)
    assert at.header[0].value == "Head importance and pruning (Michel et al. 2019, Voita et al. 2019)"
    curves, importance = chart_specs(at)
    assert line(curves, "least_important") == pytest.approx([0.8, 0.6, 0.3])
    assert curves["layout"]["yaxis"]["title"]["text"] == "accuracy (higher is better)"
    np.testing.assert_allclose(importance["data"][0]["z"], PLANTED_IMPORTANCE)


def test_embeddings_page_draws_the_planted_measures(planted_results, monkeypatch):
    at = open_page("Embeddings", planted_results, monkeypatch)
    assert at.header[0].value == "Static vs contextual embeddings (Ethayarajh 2019)"
    raw = [t for t in chart_specs(at)[0]["data"] if t["name"] == "raw" and t["xaxis"] == "x"][0]
    assert raw["y"] == pytest.approx([0.6, 0.5, 0.4])


def test_alignment_page_shows_the_planted_precision(planted_results, monkeypatch):
    at = open_page("Alignment", planted_results, monkeypatch)
    assert at.header[0].value == "Rotation alignment (Procrustes, self-learning, CSLS)"
    shown = at.dataframe[0].value  # as a paper prints it: P@k as percentages
    assert shown["value"].tolist() == ["25.0%", "37.5%"] and shown["retrieval"].tolist() == ["nn", "csls"]
    (chart,) = chart_specs(at)  # P@1 per method and retrieval (one k: no retrieval curve)
    points = {t["name"]: t["x"] for t in chart["data"]}
    assert points == {"nn": pytest.approx([0.25]), "csls": pytest.approx([0.375])}
    assert chart["layout"]["title"]["text"].startswith("P@1 per method")


def test_semantic_change_page_shows_the_planted_moved_word_and_searches(planted_results, monkeypatch):
    from dashboard_planted import ESCAPED, MARKUP, PLANTED_MOVED

    at = open_page("Semantic change", planted_results, monkeypatch)
    assert at.header[0].value == "Semantic change between slices of documents" and not at.error
    assert "2 of 30 scored words moved" in " ".join(c.value for c in at.caption)
    charts = at.get("plotly_chart")
    assert len(charts) == 2
    import json

    words = json.loads(charts[0].proto.spec)["data"][0]["y"]
    assert PLANTED_MOVED in words and ESCAPED in words and MARKUP not in words  # words escaped in the figure
    at.text_input(key="change_word_search").set_value(PLANTED_MOVED).run()
    found = at.dataframe[-1].value
    assert found["word"].tolist() == [PLANTED_MOVED] and found["neighbours_b"].iloc[0].startswith("radio")


def test_pretraining_page_follows_the_planted_checkpoints(planted_results, monkeypatch):
    at = open_page("Pretraining", planted_results, monkeypatch)
    assert at.header[0].value == "Pretraining and emergence"
    specs = {spec["layout"]["title"]["text"]: spec for spec in chart_specs(at)}
    loss = {t["name"]: t["y"] for t in specs["MLM loss (nats/token): training and held-out"]["data"]}
    assert loss == {"loss": pytest.approx([7.0, 5.0]), "eval_loss": pytest.approx([7.5, 5.5])}
    assert "head types at step 10" in specs  # the slider starts at the last checkpoint
    best = specs["best-layer probe accuracy across checkpoints"]["data"][0]
    assert best["y"] == pytest.approx([0.4, 0.6])
    assert any("0: 0% / 100%, 10: 100% / 100%" in c.value for c in at.caption)
    assert at.dataframe[0].value.to_dict("records") == [
        {"sentence": "the ___ barked", "masked word": "dog", "top predictions": "dog (50.0%), cat (25.0%)"}
    ]


def test_compare_page_puts_the_main_tables_side_by_side(planted_results, monkeypatch):
    at = open_page("Compare runs", planted_results, monkeypatch)
    assert at.header[0].value == "Compare two runs"
    assert at.selectbox[0].options == sorted(s for s, _ in PAGE_STUDIES.values())
    shown = at.dataframe[0].value  # alignment comes first; one run: A = B, no difference
    assert shown["A: value"].tolist() == ["0.250", "0.375"] and shown["Δ value"].tolist() == ["0.000"] * 2
    at.selectbox[0].set_value("edge_probing").run()  # one run: A and B are the same run
    assert any("Only one `edge_probing` run" in i.value for i in at.info)
    assert not at.error, [e.value for e in at.error]
    assert [line(spec, "pos") for spec in chart_specs(at)] == [pytest.approx([0.5, 0.6, 0.7])] * 2
    age(probing_run(planted_results, "half", "model-b", scale=0.5), 100)
    at = open_page("Compare runs", planted_results, monkeypatch)
    at.selectbox[0].set_value("edge_probing").run()
    assert not at.error, [e.value for e in at.error]
    assert [line(spec, "pos") for spec in chart_specs(at)] == [
        pytest.approx([0.5, 0.6, 0.7]),
        pytest.approx([0.25, 0.3, 0.35]),
    ]
    # one full-width table: a row per layer (mean over seeds), each run's value and B − A
    table = at.dataframe[0].value
    assert table["layer"].tolist() == [0, 1, 2] and table["A: value"].tolist() == ["0.500", "0.600", "0.700"]
    assert table["Δ value"].tolist() == ["-0.250", "-0.300", "-0.350"]
    at.radio(key="cmp_reference").set_value("B").run()  # against B: A − B
    assert at.dataframe[0].value["Δ value"].tolist() == ["0.250", "0.300", "0.350"]


@pytest.mark.slow
@pytest.mark.parametrize("page", list(PAGE_TITLES))
def test_every_page_renders_from_results(page, quickstart_results, monkeypatch):
    at = open_page(page, quickstart_results, monkeypatch)
    assert not at.error, [e.value for e in at.error]
    assert at.header[0].value == PAGE_TITLES[page] and INTRO_PHRASES[page] in at.caption[0].value
    if page not in ("Runs", "Compare runs"):
        assert not [i for i in at.info if "No complete `" in i.value], "the page found no run"
    if page == "Runs":
        assert len(at.dataframe) == 1
    if page in ("Probing", "Heads", "Pruning", "Embeddings", "Pretraining", "Feature combinations"):
        charts = at.get("plotly_chart")
        assert len(charts) >= 1, f"{page}: no chart"
    if page == "Pretraining":  # the masked-word predictions of each checkpoint, readable
        assert [s.value for s in at.subheader] == [
            "Heads across checkpoints",
            "Probe accuracy across checkpoints",
            "What the model predicts for a masked word",
        ]
        steps = sorted(
            int(s)
            for s in pd.read_parquet(next((quickstart_results / "emergence").iterdir()) / "head_types_by_step.parquet")[
                "step"
            ].unique()
        )
        assert f"head types at step {steps[-1]}" in chart_titles(at)  # the slider starts at the last checkpoint
        at.select_slider(key="pt_step").set_value(steps[0]).run()
        assert f"head types at step {steps[0]}" in chart_titles(at)
        table = at.dataframe[0].value
        assert list(table.columns) == ["sentence", "masked word", "top predictions"]
        assert table["sentence"].str.contains("___").all() and len(table) > 0


@pytest.mark.slow  # reads the tiny tour's results
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
    at = open_page("Heads", broken, monkeypatch)  # hidden, counted, and the Runs page says why
    assert any("1 incomplete or unreadable `head_types` run(s) hidden" in c.value for c in at.caption)
    assert any("No complete `head_types` runs" in i.value for i in at.info)
    at = open_page("Runs", broken, monkeypatch)
    at.checkbox[0].check().run()
    statuses = at.dataframe[0].value.set_index("study")["status"]
    assert "corrupt manifest" in statuses["head_types"]
    at = open_page("Alignment", tmp_path / "nothing-here", monkeypatch)
    assert any("No complete `alignment` runs" in i.value for i in at.info)


def test_compare_page_warns_when_two_runs_measure_different_things(planted_results, monkeypatch):
    age(probing_run(planted_results, "other-model", "model-b", scale=0.5), 100)
    at = open_page("Compare runs", planted_results, monkeypatch)
    at.selectbox[0].set_value("edge_probing").run()
    assert not at.warning, [w.value for w in at.warning]  # only the model differs: a fair comparison
    age(
        probing_run(
            planted_results,
            "linear-other-corpus",
            "model-c",
            scale=0.5,
            config={"probe": "linear", "corpus": "my.conllu"},
        ),
        50,
    )
    at = open_page("Compare runs", planted_results, monkeypatch)
    at.selectbox[0].set_value("edge_probing").run()
    warning = " ".join(w.value for w in at.warning)
    assert "differ in more than the model or seed" in warning
    assert "probe: 'mlp' vs 'linear'" in warning or "probe: 'linear' vs 'mlp'" in warning
    assert "corpus:" in warning


def test_comparison_mismatches_names_what_differs():
    from bertology.apps.tables import comparison_mismatches

    base = {
        "study": "edge_probing",
        "config": {"model": "a", "seed": 0, "probe": "mlp", "tasks": ["pos"]},
        "corpus": {"fingerprint": "c1"},
    }
    other_model = {**base, "config": {**base["config"], "model": "b", "seed": 3}}
    assert comparison_mismatches(base, other_model) == []
    changed = {
        "study": "edge_probing",
        "config": {**base["config"], "probe": "linear", "tasks": ["deps"]},
        "corpus": {"fingerprint": "c2"},
    }
    assert comparison_mismatches(base, changed) == [
        "probe: 'mlp' vs 'linear'",
        "tasks: ['pos'] vs ['deps']",
        "corpus content differs (another file or another subset)",
    ]


def test_server_warm_up_runs_and_imports_what_first_pages_paid_for():
    """`bertology.apps.serve.warm_up` (run while the server starts; `main` swallows its errors, so
    a Plotly or SciPy change that broke it would go unseen) builds its figures without error and
    leaves SciPy's statistics and pyarrow's parquet reader imported, in a fresh interpreter."""
    import subprocess
    import sys

    code = (
        "import sys; from bertology.apps import serve; serve.warm_up(); "
        "print(all(m in sys.modules for m in ('scipy.stats', 'pyarrow.parquet', 'plotly.express')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True"
