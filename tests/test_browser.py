"""Real browser: the dashboard served on localhost and driven by Playwright with the system's
Chromium. Each check waits for a page's own content (title, charts, tables) rather than sleeping,
so it holds on a machine whose cores are busy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dashboard_planted import (
    MARKUP,
    PAGE_TITLES,
    PLANTED_GUESS,
    PLANTED_TYPES,
    age,
    contextuality_run,
    head_types_run,
    planted_mlm_dir,
    probing_run,
    write_manifest,
)

from bertology.apps import screenshots
from bertology.apps.pages import PAGE_BY_KEY
from bertology.numbering import STATEMENT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(screenshots.find_chromium() is None, reason="Chromium not installed (apt-get install chromium)"),
    pytest.mark.skipif(not screenshots.has_playwright(), reason="playwright not installed (the test extra)"),
]
WAIT_MS = 240_000  # generous: content, not time, is what the checks wait for


def test_every_page_renders_in_chromium(quickstart_results, tmp_path):
    reports = screenshots.take_screenshots(quickstart_results, tmp_path / "shots")
    assert [r.page for r in reports if "compare" not in r.url] == list(PAGE_TITLES)
    for r in reports:
        page = PAGE_BY_KEY[r.page]
        assert r.charts >= page.min_charts and r.tables >= page.min_tables, r
        assert not r.exceptions, f"{r.page}: Streamlit exception {r.exceptions}"
        assert not r.errors, f"{r.page}: error box {r.errors}"
        assert PAGE_TITLES[r.page] in r.text
        assert str(quickstart_results.parent) not in r.text, f"{r.page} shows an absolute path"
        assert "Deploy" not in r.text
        assert r.screenshot.is_file() and r.screenshot.stat().st_size > 20_000


def test_pretraining_slider_moves_the_head_map(quickstart_results):
    with screenshots.serve(quickstart_results) as base, screenshots.browser() as tab:
        screenshots.open_page(tab, base, "Pretraining", timeout_ms=WAIT_MS)
        title = tab.locator('[data-testid="stPlotlyChart"] .gtitle', has_text="head types at step")
        last = title.first.text_content()
        thumb = tab.get_by_role("slider", name="checkpoint step (head map)").first
        thumb.focus()
        thumb.press("Home")  # the first checkpoint
        tab.locator('[data-testid="stPlotlyChart"] .gtitle', has_text="head types at step 0").first.wait_for(
            timeout=WAIT_MS
        )
        screenshots.settle(tab, WAIT_MS)
        assert last != "head types at step 0"
        assert not screenshots.page_problems(tab)[0]


def test_finetuning_titles_fit_and_compare_shows_its_differences(quickstart_results):
    chart = '[data-testid="stPlotlyChart"]'
    with screenshots.serve(quickstart_results) as base, screenshots.browser() as tab:
        screenshots.open_page(tab, base, "Fine-tuning", timeout_ms=WAIT_MS)
        change = tab.locator(chart, has=tab.locator(".gtitle", has_text="what fine-tuning changed")).first
        outer = change.locator("svg.main-svg").first.bounding_box()
        boxes = []
        for title in ("CKA with pretrained", "relative weight change", "attention change"):
            label = change.locator(".annotation-text", has_text=title)
            assert label.count() == 1, title
            boxes.append(label.first.bounding_box())
        for box in boxes:  # each panel title inside the chart, none over the next
            assert outer["x"] <= box["x"] and box["x"] + box["width"] <= outer["x"] + outer["width"], boxes
        assert all(a["x"] + a["width"] <= b["x"] for a, b in zip(boxes, boxes[1:])), boxes
        assert not any(screenshots.page_problems(tab))

        # the Alignment page's two charts: tests/test_dashboard.py (the tiny tour's alignment is monolingual)
        screenshots.open_page(tab, base, "Compare runs", timeout_ms=WAIT_MS, charts=0)
        tab.get_by_text("difference against", exact=True).wait_for(timeout=WAIT_MS)
        tab.get_by_text("Δ = B − A", exact=False).first.wait_for(timeout=WAIT_MS)
        assert not any(screenshots.page_problems(tab))


@pytest.fixture
def planted_results(tmp_path) -> Path:
    root = tmp_path / "results"
    age(head_types_run(root, "run-b", "model-b", types={k: "positional" for k in PLANTED_TYPES}), 100)
    head_types_run(root, "run-a", "model-a")
    age(probing_run(root, "p-b", "model-b", scale=0.5), 100)
    probing_run(root, "p-a", "model-a")
    age(contextuality_run(root, "c-b", "model-b", shift=0.05), 100)
    contextuality_run(root, "c-a", "model-a")
    return root


def test_head_map_click_comparison_and_markup_words(planted_results, tmp_path):
    with screenshots.serve(planted_results) as base, screenshots.browser() as tab:
        screenshots.open_page(tab, base, "Heads", {"compare": "head_types/run-b"}, timeout_ms=WAIT_MS, charts=6)
        assert (
            tab.locator('[data-testid="stPlotlyChart"] .gtitle-subtitle', has_text="head_types/run-b · model-b").count()
            == 1
        )
        tab.get_by_text("Layer 2, head 1", exact=True).wait_for(timeout=WAIT_MS)  # the clearest syntactic head
        # click the "special" square (layer 1, head 3) of the first map: its detail opens
        head_map = tab.locator('[data-testid="stPlotlyChart"]').first
        trace = head_map.locator(".scatterlayer .trace").nth(2)  # positional, syntactic, special, ...
        box = trace.locator("path.point").first.bounding_box()
        tab.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        tab.get_by_text("Layer 1, head 3", exact=True).wait_for(timeout=WAIT_MS)
        screenshots.settle(tab, WAIT_MS)
        # a word written as markup shows as typed in the plots, and is not rendered bold
        svg_text = tab.locator('[data-testid="stPlotlyChart"] svg text', has_text=MARKUP)
        assert svg_text.count() >= 1
        bold = tab.locator('[data-testid="stPlotlyChart"] svg text tspan[style*="bold"]').all_text_contents()
        assert "x" not in bold, bold  # <b>x</b> rendered as markup would be a bold "x"
        assert not any(screenshots.page_problems(tab))
        assert not tab.locator('[data-testid="stAppDeployButton"]').is_visible()
        assert "results: results" in tab.inner_text('[data-testid="stSidebar"]')

        screenshots.open_page(tab, base, "Embeddings", {"compare": "contextuality/c-b"}, timeout_ms=WAIT_MS)
        panels = tab.locator('[data-testid="stPlotlyChart"]').first
        for measure in ("self-similarity", "intra-sentence similarity", "maximum explainable variance"):
            assert panels.locator(".annotation-text", has_text=measure).count() == 1
        assert panels.locator(".legendtext", has_text="contextuality/c-b · model-b").count() >= 1
        assert tab.locator('[data-testid="stPlotlyChart"] svg text', has_text=MARKUP).count() >= 1

        screenshots.open_page(tab, base, "Probing", {"compare": "edge_probing/p-b"}, timeout_ms=WAIT_MS)
        legend = tab.locator('[data-testid="stPlotlyChart"] .legendtext').all_text_contents()
        assert {
            "edge_probing/p-a · model-a · brown-sample · mlp probe",
            "edge_probing/p-b · model-b · brown-sample · mlp probe",
        } <= set(legend)
        assert not any(screenshots.page_problems(tab))


def test_broken_runs_show_errors_not_exceptions(planted_results):
    broken = head_types_run(planted_results, "broken-manifest")
    write_manifest(broken, "null")
    age(broken, 200)
    import pandas as pd

    run = planted_results / "head_types" / "run-a"
    pd.read_parquet(run / "head_types.parquet").assign(layer="a").to_parquet(run / "head_types.parquet")
    with screenshots.serve(planted_results) as base, screenshots.browser() as tab:
        screenshots.open_page(tab, base, "Runs", timeout_ms=WAIT_MS)
        exceptions, errors = screenshots.page_problems(tab)
        assert not exceptions and not errors
        screenshots.open_page(tab, base, "Heads", timeout_ms=WAIT_MS, charts=0)
        tab.get_by_text("Attention-based dependency probe (Clark et al.)").wait_for(timeout=WAIT_MS)
        exceptions, errors = screenshots.page_problems(tab)
        assert not exceptions
        assert any("head_types/run-a: cannot show the head map" in e for e in errors), errors


def test_live_page_shows_a_typed_sentence_in_every_head_and_the_mlm_guess(tmp_path):
    model = planted_mlm_dir(tmp_path / "planted-mlm")
    results = tmp_path / "results"
    results.mkdir()
    title = '[data-testid="stPlotlyChart"] .gtitle'
    with screenshots.serve(results) as base, screenshots.browser() as tab:
        screenshots.open_page(tab, base, "Live", {"model": str(model)}, timeout_ms=WAIT_MS)
        box = tab.get_by_label("sentence (press Enter)")
        box.fill("the jury said nothing about the old house")  # "nothing": 5 pieces
        box.press("Enter")
        tab.get_by_text("planted-mlm: 2 layers × 4 heads, 14 tokens for 8 words").wait_for(timeout=WAIT_MS)
        tab.locator(title, has_text="what the MLM head puts in place of 'jury'").wait_for(timeout=WAIT_MS)
        screenshots.settle(tab, WAIT_MS)
        view = tab.locator(
            '[data-testid="stPlotlyChart"]', has=tab.locator(".gtitle", has_text="attention of every head")
        )
        assert view.count() == 1
        ticks = view.locator(".ytick text").all_text_contents()
        assert ticks == ["layer 1", "layer 2"], ticks  # layers and heads numbered from 1
        assert view.locator(".xtick text").all_text_contents() == [f"head {h}" for h in range(1, 5)]
        guesses = tab.locator('[data-testid="stPlotlyChart"]', has=tab.locator(".gtitle", has_text="MLM head puts"))
        assert f"1. {PLANTED_GUESS}" in guesses.locator(".ytick text").all_text_contents()
        assert not any(screenshots.page_problems(tab))
        assert str(tmp_path) not in tab.inner_text("body")
        # the neuron view: no subplot title overlaps a tick label
        neurons = tab.locator('[data-testid="stPlotlyChart"]', has=tab.locator(".gtitle", has_text=NEURON_TITLE))
        titles = [neurons.locator(".annotation-text").nth(k).bounding_box() for k in range(3)]
        ticks = [t.bounding_box() for t in neurons.locator(".xtick text, .ytick text").all()]
        assert titles and ticks and not [(a, b) for a in titles for b in ticks if boxes_overlap(a, b)]
        # a page the quickstart leaves empty names the command that fills it, and its time
        screenshots.open_page(tab, base, "Feature combinations", timeout_ms=WAIT_MS, charts=0, tables=0)
        command = "bertology study run feature_combinations --config"
        tab.get_by_text(command, exact=False).first.wait_for(timeout=WAIT_MS)
        assert command in tab.inner_text("body")
        assert not any(screenshots.page_problems(tab))


NEURON_TITLE = re.compile(r"head \d+, query \d+")  # the neuron view's title


def boxes_overlap(a: dict, b: dict) -> bool:
    """Two Playwright bounding boxes (x, y, width, height) share an area."""
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_the_sidebar_has_only_the_dashboards_menu_and_every_page_opens(tmp_path):
    """Streamlit would turn the ``pages/`` package beside the dashboard script into its own
    navigation (a sidebar link per module, each a blank page); the only menu is the dashboard's
    radio of :data:`PAGES`, and each of its pages opens with its own title, even with no runs."""
    results = tmp_path / "results"
    results.mkdir()
    with screenshots.serve(results) as base, screenshots.browser() as tab:
        for page in PAGE_BY_KEY.values():
            screenshots.open_page(tab, base, page.key, charts=0, tables=0, timeout_ms=WAIT_MS)
            sidebar = tab.locator('[data-testid="stSidebar"]')
            assert tab.locator('[data-testid="stSidebarNav"]').count() == 0, page.key
            assert sidebar.locator("a[href]").count() == 0, page.key  # no navigation links at all
            labels = sidebar.locator('[data-testid="stRadio"] [role="radiogroup"] label')
            labels.nth(len(PAGE_BY_KEY) - 1).wait_for(timeout=WAIT_MS)  # the menu renders after the title
            options = labels.all_inner_texts()
            assert [o.strip() for o in options] == list(PAGE_BY_KEY), page.key
            assert not screenshots.page_problems(tab)[0], page.key
            if page.study is not None or page.key == "Live":  # the layer numbering, stated on each page with layers
                tab.get_by_text(STATEMENT[:40], exact=False).first.wait_for(timeout=WAIT_MS)
        # a module of the pages package is no page of its own: its old address shows the dashboard
        tab.goto(f"{base}/alignment", wait_until="domcontentloaded", timeout=WAIT_MS)
        tab.locator('[data-testid="stHeading"]', has_text=PAGE_BY_KEY["Runs"].title).first.wait_for(timeout=WAIT_MS)
