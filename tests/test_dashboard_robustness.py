"""Dashboard on hand-made runs: broken manifests and malformed tables show an error for that run
and the page goes on; words written as markup show as typed; a head's detail, deep links,
two-run comparisons and a chrome with no absolute paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dashboard_planted import (
    ESCAPED,
    INTRO_PHRASES,
    MARKUP,
    PLANTED_TYPES,
    age,
    chart_specs,
    contextuality_run,
    head_types_run,
    probing_run,
    write_json,
    write_manifest,
)
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py")


def open_page(page: str, results: Path, monkeypatch, params: dict | None = None) -> AppTest:
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(results))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["page"] = page
    for k, v in (params or {}).items():
        at.query_params[k] = v
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.sidebar.radio(key="page").value == page
    return at


def all_text(at: AppTest) -> str:
    parts = []
    for kind in ("markdown", "caption", "error", "warning", "info", "header", "subheader", "json"):
        parts += [str(getattr(e, "value", "")) for e in at.get(kind)]
    parts += [str(e.proto) for e in at.get("selectbox")]
    return "\n".join(parts)


@pytest.mark.parametrize(
    "content, kind", [("null", "null"), ("[]", "a list"), ('"done"', "a string"), ("42", "a number")]
)
def test_runs_page_shows_a_non_object_manifest_and_goes_on(content, kind, tmp_path, monkeypatch):
    root = tmp_path / "results"
    good = head_types_run(root, "good")
    bad = head_types_run(root, "bad")
    write_manifest(bad, content)
    stopped = root / "head_types" / "stopped"  # a run stopped before its manifest
    stopped.mkdir()
    at = open_page("Runs", root, monkeypatch)
    # hidden by default, with the command that removes them
    assert list(at.dataframe[0].value["run"]) == ["good"]
    assert any(
        "2 incomplete or unreadable run(s) hidden" in c.value and "bertology study clean --yes" in c.value
        for c in at.caption
    )
    at.checkbox[0].check().run()
    table = at.dataframe[0].value.set_index("run")
    assert table.loc["good", "status"] == "complete" and table.loc["good", "model"] == "planted-bert"
    assert table.loc["bad", "status"].startswith("unreadable: ") and f"holds {kind}" in table.loc["bad", "status"]
    assert "manifest.json" in table.loc["bad", "status"] and table.loc["stopped", "status"].startswith("unreadable")
    # the study's page offers only the good run and says that two are hidden
    age(good, 100)
    at = open_page("Heads", root, monkeypatch)
    assert not at.error and all("bad" not in o and "stopped" not in o for o in at.selectbox[0].options)
    assert any("2 incomplete or unreadable `head_types` run(s) hidden" in c.value for c in at.caption)


BREAKAGES = {
    "layers as text": (
        lambda run: (
            __import__("pandas")
            .read_parquet(run / "head_types.parquet")
            .assign(layer="a")
            .to_parquet(run / "head_types.parquet")
        ),
        "error",
        "cannot show the head map",
    ),
    "repeated heads": (
        lambda run: (
            __import__("pandas")
            .concat([__import__("pandas").read_parquet(run / "head_types.parquet")] * 2)
            .to_parquet(run / "head_types.parquet")
        ),
        "error",
        "repeated head",
    ),
    "no type column": (
        lambda run: (
            __import__("pandas")
            .read_parquet(run / "head_types.parquet")
            .drop(columns="type")
            .to_parquet(run / "head_types.parquet")
        ),
        "warning",
        "lacks columns ['type']",
    ),
    "corrupt head_stats": (
        lambda run: (run / "head_stats.parquet").write_bytes(b"PAR1 not really"),
        "warning",
        "corrupt table",
    ),
    "head_dependency without gain": (
        lambda run: (
            __import__("pandas")
            .read_parquet(run / "head_dependency.parquet")
            .drop(columns="gain")
            .to_parquet(run / "head_dependency.parquet")
        ),
        "warning",
        "lacks columns ['gain']",
    ),
    "attention not a matrix": (
        lambda run: write_json(run, "attention_examples", {"sentences": [{"words": ["a", "b"], "attention": "oops"}]}),
        "error",
        "cannot show the attention examples",
    ),
    "examples not JSON": (lambda run: (run / "attention_examples.json").write_text("{oops"), "info", "corrupt JSON"),
}


@pytest.mark.parametrize("breakage", list(BREAKAGES))
def test_heads_page_survives_a_malformed_table(breakage, tmp_path, monkeypatch):
    root = tmp_path / "results"
    run = head_types_run(root)
    spoil, kind, message = BREAKAGES[breakage]
    spoil(run)
    at = open_page("Heads", root, monkeypatch)
    shown = [e.value for e in at.get(kind)]
    assert any(message in m for m in shown), shown
    assert any(
        "head_types/planted" in m or "head_stats" in m or "head_dependency" in m or "attention_examples" in m
        for m in shown
    ), "the message names the run or file"
    # the page went on to its last section
    assert at.subheader[-1].value == "Attention-based dependency probe (Clark et al.)"
    assert str(tmp_path) not in all_text(at)


def test_head_detail_follows_the_selected_head(tmp_path, monkeypatch):
    root = tmp_path / "results"
    head_types_run(root)
    at = open_page("Heads", root, monkeypatch)
    # the detail opens on the clearest syntactic head: layer 2, head 1 (planted)
    assert at.subheader[0].value == "Layer 2, head 1"
    assert any("Best: nsubj (dependent → head), accuracy 0.90 vs 0.40" in c.value for c in at.caption)
    specs = chart_specs(at)
    head_map = specs[0]
    legend = sorted(t["name"] for t in head_map["data"] if t["name"] != "selected head")
    assert legend == ["broad (1)", "other (1)", "positional (2)", "special (1)", "syntactic (1)"]
    offsets = [s for s in specs if "where its attention argmax" in s["layout"]["title"]["text"]][0]  # title wrapped
    token = [t for t in offsets["data"] if t["name"] == "token level"][0]
    assert token["y"][token["x"].index("-1")] == pytest.approx(0.95)
    pick = [s for s in at.selectbox if s.label.startswith("head")][0]
    pick.set_value("1-3").run()
    assert at.subheader[0].value == "Layer 1, head 3"
    assert any("type **special**" in m.value for m in at.markdown)
    assert at.query_params["head"] in ("1-3", ["1-3"])  # the URL follows the pick
    # deep link: ?head=1-2
    at = open_page("Heads", root, monkeypatch, {"head": "1-2"})
    assert at.subheader[0].value == "Layer 1, head 2" and not at.warning
    # a head the run does not have: said, and the default shown
    at = open_page("Heads", root, monkeypatch, {"head": "3-8"})
    assert any(
        "?head=3-8: no such head in this run" in w.value and "layers 1-2, heads 1-3" in w.value for w in at.warning
    )
    shown = at.subheader[0].value.replace("Layer ", "").replace(", head ", "-")
    assert at.query_params["head"] in (shown, [shown])


def test_words_with_markup_show_as_typed(tmp_path, monkeypatch):
    root = tmp_path / "results"
    head_types_run(root)
    contextuality_run(root, "ctx", "planted-bert")
    at = open_page("Heads", root, monkeypatch)
    specs = json.dumps(chart_specs(at))
    assert ESCAPED in specs and MARKUP not in specs
    sentence = [s for s in at.selectbox if s.label == "sentence"][0]
    assert MARKUP in sentence.options[0]  # plain-text options: the word as typed
    at = open_page("Embeddings", root, monkeypatch)
    specs = json.dumps(chart_specs(at))
    assert ESCAPED in specs and MARKUP not in specs
    assert at.dataframe[0].value["neighbour"].tolist() == [MARKUP]  # tables show the raw word


def test_two_runs_side_by_side(tmp_path, monkeypatch):
    root = tmp_path / "results"
    a = head_types_run(root, "run-a", "model-a")
    b = head_types_run(root, "run-b", "model-b", types={k: "positional" for k in PLANTED_TYPES})
    age(a, 0)
    age(b, 100)
    at = open_page("Heads", root, monkeypatch, {"compare": "head_types/run-b"})
    titles = [
        (s["layout"]["title"]["text"], s["layout"]["title"].get("subtitle", {}).get("text")) for s in chart_specs(at)
    ]
    assert ("head types (A)", "head_types/run-a · model-a") in titles
    assert ("head types (B)", "head_types/run-b · model-b") in titles
    counts = at.dataframe[0].value.set_index("type")
    assert counts.loc["positional", "A"] == 2 and counts.loc["positional", "B"] == 6
    assert counts.loc["syntactic", "A"] == 1 and counts.loc["syntactic", "B"] == 0

    probing_run(root, "p-a", "model-a")
    age(probing_run(root, "p-b", "model-b", scale=0.5), 100)
    at = open_page("Probing", root, monkeypatch, {"compare": "edge_probing/p-b"})
    lines = {t["name"]: t["y"] for t in chart_specs(at)[0]["data"]}
    assert lines["edge_probing/p-a · model-a · brown-sample · mlp probe"] == pytest.approx([0.5, 0.6, 0.7])
    assert lines["edge_probing/p-b · model-b · brown-sample · mlp probe"] == pytest.approx([0.25, 0.3, 0.35])

    contextuality_run(root, "c-a", "model-a")
    age(contextuality_run(root, "c-b", "model-b", shift=0.05), 100)
    at = open_page("Embeddings", root, monkeypatch, {"compare": "contextuality/c-b"})
    panel = chart_specs(at)[0]
    raw_b = [
        t
        for t in panel["data"]
        if t["name"].startswith("contextuality/c-b") and "raw" in t["name"] and t["xaxis"] == "x"
    ]
    assert raw_b and raw_b[0]["y"] == pytest.approx([0.65, 0.55, 0.45])
    # the compare select offers "nothing" too: back to one run
    at.selectbox(key="ctx_compare").select_index(0).run()
    assert {t["name"] for t in chart_specs(at)[0]["data"]} == {"raw", "baseline", "adjusted"}


@pytest.mark.parametrize("page", ["Runs", "Heads", "Probing", "Embeddings"])
def test_chrome_names_the_paper_and_no_machine_path(page, tmp_path, monkeypatch):
    root = tmp_path / "results"
    head_types_run(root)
    probing_run(root, "p", "m")
    contextuality_run(root, "c", "m")
    at = open_page(page, root, monkeypatch)
    assert INTRO_PHRASES[page] in at.caption[0].value
    assert [c.value for c in at.sidebar.caption] == ["results: results"]
    assert str(tmp_path) not in all_text(at)


def test_run_labels_tell_runs_apart(tmp_path, monkeypatch):
    from bertology.apps.locations import describe
    from bertology.results import write_results

    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path / "results"))
    run = tmp_path / "results" / "edge_probing" / "abc123-seed0"
    run.mkdir(parents=True)
    write_results(
        run,
        {},
        {
            "study": "edge_probing",
            "model": {"name": "minilm-l6"},
            "corpus": {"name": "brown-sample[:400]"},
            "config": {"tasks": ["pos", "deps"], "probe": "mlp", "model": "minilm-l6"},
        },
    )
    assert describe(run) == "edge_probing/abc123-seed0 · minilm-l6 · brown-sample[:400] · pos,deps · mlp probe"
    bare = tmp_path / "results" / "edge_probing" / "old"
    bare.mkdir()
    (bare / "manifest.json").write_text("{}")
    assert describe(bare) == "edge_probing/old"


def test_dashboard_opens_the_main_run_before_the_second_model_run():
    """A page's run picker opens on the quickstart's (or tour's) main run where the newest is its
    second-model run of the same study and seed; otherwise on the newest."""
    from bertology.apps.locations import default_run_index

    runs = [Path(n) for n in ("quickstart-minilm-english-mlm-seed0", "tour-seed0", "quickstart-seed0")]
    assert default_run_index(runs) == 2
    assert default_run_index([Path("tour-minilm-english-mlm-seed1"), Path("tour-seed0"), Path("tour-seed1")]) == 2
    assert default_run_index([Path("quickstart-minilm-english-mlm-seed0"), Path("tour-seed0")]) == 0
    assert default_run_index([Path("abc123-seed0"), Path("quickstart-seed0")]) == 0
    assert default_run_index([]) == 0
