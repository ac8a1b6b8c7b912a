"""The Live page (Streamlit AppTest, tiny models built here): the maps it draws are the model's own
(checked against bertology.inspection), a planted MLM's favourite shows first, typed markup stays
text, a bad folder is an error box, and nothing is written to disk. Its figures are checked
without Streamlit too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dashboard_planted import MARKUP, PLANTED_GUESS, chart_specs, planted_mlm_dir
from streamlit.testing.v1 import AppTest

from bertology.apps import figures
from bertology.apps.figures import esc
from bertology.apps.pages import live
from bertology.inspection import inspect_sentence, split_words
from bertology.models import load_model

APP = str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py")
SENTENCE = f"the old dog said {MARKUP} ."


@pytest.fixture(scope="module")
def mlm_dir(tmp_path_factory) -> Path:
    return planted_mlm_dir(tmp_path_factory.mktemp("models") / "planted-mlm")


def open_live(monkeypatch, tmp_path: Path, model: str, text: str | None = None) -> AppTest:
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["page"] = "Live"
    at.query_params["model"] = model
    if text is not None:
        at.query_params["text"] = text
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def files_under(*folders: Path) -> set[Path]:
    return {p for folder in folders for p in folder.rglob("*") if p.is_file()}


def figure_titled(at: AppTest, start: str) -> dict:
    found = [s for s in chart_specs(at) if str(s["layout"]["title"]["text"]).startswith(start)]
    assert found, [s["layout"]["title"]["text"] for s in chart_specs(at)]
    return found[0]


def test_live_page_draws_the_models_own_maps_and_the_planted_guess(mlm_dir, tmp_path, monkeypatch):
    home = Path(__import__("os").environ["BERTOLOGY_HOME"])
    before = files_under(home, tmp_path, mlm_dir)
    at = open_live(monkeypatch, tmp_path, str(mlm_dir), SENTENCE)
    assert not at.error, [e.value for e in at.error]
    words = split_words(SENTENCE)
    expected = inspect_sentence(load_model(mlm_dir), words)
    # the model view: 2 layers x 4 heads of [T, T] maps in one mosaic, tile (1, 2) = layer 1 head 2
    mosaic = np.asarray(figure_titled(at, "planted-mlm: attention of every head")["data"][0]["z"], dtype=float)
    T = len(expected.tokens)
    assert mosaic.shape == (2 * (T + 1) - 1, 4 * (T + 1) - 1)
    np.testing.assert_allclose(
        mosaic[T + 1 : 2 * T + 1, 2 * (T + 1) : 2 * (T + 1) + T], expected.attentions[1, 2], atol=1e-6
    )
    # masked-word predictions: the planted token first
    table = at.dataframe[0].value
    assert table["token"].iloc[0] == PLANTED_GUESS and table["rank"].iloc[0] == 1
    # typed markup is split into its characters, each shown as text ("<" reaches Plotly as "&lt;")
    assert words[4:7] == ["<", "b", ">"]
    at.radio(key="live_level").set_value("word").run()
    texts = [t for spec in chart_specs(at) for t in strings(spec)]
    assert not [t for t in texts if "<b>" in t or "</b>" in t] and "4: &lt;" in texts
    assert files_under(home, tmp_path, mlm_dir) == before, "the page wrote files"


def strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in strings(v)]
    if isinstance(obj, (list, tuple)):
        return [s for v in obj for s in strings(v)]
    return []


def test_word_units_keep_the_special_tokens_as_columns(mlm_dir, tmp_path, monkeypatch):
    at = open_live(monkeypatch, tmp_path, str(mlm_dir), "the jury said nothing")
    at.radio(key="live_level").set_value("word").run()
    assert not at.exception
    head = figure_titled(at, "layer 1, head 1 (words)")["data"][0]  # the first head, numbered from 1
    assert list(head["x"]) == ["0: [CLS]", "1: the", "2: jury", "3: said", "4: nothing", "5: [SEP]"]
    assert list(head["y"]) == ["1: the", "2: jury", "3: said", "4: nothing"]  # a word: one number, row or column
    np.testing.assert_allclose(np.asarray(head["z"], dtype=float).sum(1), 1.0, atol=1e-5)
    assert at.selectbox(key="live_layer").options == ["1", "2"]  # the planted MLM's 2 layers, from 1
    assert at.selectbox(key="live_head").options == ["1", "2", "3", "4"]


def test_a_model_without_mlm_head_and_a_bad_folder_say_so(tmp_path, monkeypatch):
    from bertology.testing import save_tiny_model_dir

    encoder = save_tiny_model_dir("bert", tmp_path / "encoder-only")
    at = open_live(monkeypatch, tmp_path, str(encoder))
    assert any("has no MLM head" in i.value for i in at.info)
    assert len(at.get("plotly_chart")) == 5 and not at.error
    at = open_live(monkeypatch, tmp_path, str(tmp_path / "no-such-folder"))
    assert any("unknown model" in e.value for e in at.error)
    assert str(tmp_path) not in " ".join(e.value for e in at.error)  # no absolute machine path


def test_model_view_places_each_head_in_its_tile():
    maps = np.arange(2 * 3 * 2 * 4, dtype=float).reshape(2, 3, 2, 4) / 100  # [L=2, H=3, R=2, C=4]
    fig = live.model_view(maps, MARKUP)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert z.shape == (2 * 5 - 1, 3 * 5 - 1)  # square tiles: 2 rows against 4 columns are word units
    np.testing.assert_array_equal(z[6:8, 5:9], maps[1, 1])  # rows 1-2 of the tile, beside columns 1-2
    assert np.isnan(z[4]).all() and np.isnan(z[:, 4]).all()  # blank lines between the maps
    assert np.isnan(z[5]).all() and np.isnan(z[8]).all()  # and the special tokens' rows
    assert list(fig.layout.xaxis.ticktext) == ["head 1", "head 2", "head 3"]  # numbered from 1
    assert list(fig.layout.yaxis.ticktext) == ["layer 1", "layer 2"] and fig.layout.title.text == "&lt;b&gt;x&lt;/b&gt;"


def test_neuron_view_shows_query_keys_products_and_the_attention_row():
    tokens = ["[CLS]", MARKUP, "[SEP]"]
    q = np.array([1.0, -2.0])
    keys = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    row = np.array([0.2, 0.3, 0.5])
    fig = live.neuron_view(tokens, q, keys, q[None, :] * keys, row, 1, "head")
    heat = [t for t in fig.data if t.type == "heatmap"]
    assert np.asarray(heat[0].z).tolist() == [[1.0, -2.0]] and heat[0].y == ("1: &lt;b&gt;x&lt;/b&gt;",)
    assert np.asarray(heat[2].z).tolist() == [[1.0, 0.0], [0.0, -2.0], [1.0, -2.0]]
    assert list(fig.data[-1].x) == [0.2, 0.3, 0.5]


@pytest.fixture(scope="module")
def previous_word(mlm_dir):
    """The planted MLM with head 2 of layer 1 looking at the previous token, on a sentence of
    one-piece words (so the previous token is the previous word); the inspection."""
    from bertology.testing import TINY_WORDS, plant_offset_head

    lm = load_model(mlm_dir)
    handle = plant_offset_head(lm.encoder, 1, 2, offset=-1)
    try:
        ins = inspect_sentence(lm, list(TINY_WORDS[:6]))
    finally:
        handle.remove()
    assert len(ins.tokens) == 8  # [CLS], six one-piece words, [SEP]
    return ins


def line_ends(fig) -> list[tuple[str, str, float]]:
    """``(left label, right label, weight)`` of each line of a head view, read off the labels drawn
    at the line's two ends."""
    left, right = fig.data[-2], fig.data[-1]
    at_left = dict(zip(left.y, left.text))
    at_right = dict(zip(right.y, right.text))
    return [
        (at_left[t.y[0]], at_right[t.y[1]], t.customdata[0][2]) for t in fig.data if t.mode == "lines" and t.x == (0, 1)
    ]


@pytest.mark.parametrize("level", ["word", "token"])
def test_head_view_draws_a_previous_word_head_one_step_up(previous_word, level):
    rows, columns, maps = previous_word.maps(level)
    first = 1 if level == "word" else 0  # word units: the words sit after [CLS] in both columns
    fig = figures.head_view(rows, maps[1, 2], "h", targets=columns, first_row=first)
    units = [esc(c) for c in columns]
    assert list(fig.data[-2].text) == list(fig.data[-1].text) == units  # the same units on both sides
    strong = [t for t in fig.data if t.mode == "lines" and t.customdata[0][2] > 0.99]
    ends = [(a, b) for a, b, w in line_ends(fig) if w > 0.99]
    # every attending unit's line goes to the unit one step up ([CLS] has none: it keeps to itself)
    expected = [(units[k], units[k - 1]) for k in range(first or 1, first + len(rows))]
    assert ends == ([] if first else [(units[0], units[0])]) + expected
    assert [t.y[1] - t.y[0] for t in strong] == [0] * (1 - first) + [1] * len(expected)


def test_head_view_hover_lists_a_words_links_and_a_click_highlights_them(previous_word):
    rows, columns, maps = previous_word.maps("word")
    fig = figures.head_view(rows, maps[1, 2], "h", targets=columns, first_row=1, highlight=2)
    left = fig.data[-2]
    assert left.hovertext[3] == f"{esc(rows[2])} → {esc(rows[1])} 1.00"  # word 2 (row 3) looks at word 1
    assert list(left.customdata) == [-1, 0, 1, 2, 3, 4, 5, -1]  # [CLS] and [SEP] attend nowhere here
    lit = [t for t in fig.data if t.mode == "lines" and t.line.color.startswith("rgba(255,127,14")]
    assert [t.customdata[0][0] for t in lit] == [2]
    assert live.clicked_row({"customdata": [2, 2, 1.0], "x": 0}) == 2
    assert live.clicked_row({"customdata": 3, "x": 0}) == 3
    assert live.clicked_row({"customdata": -1, "x": 0}) is None and live.clicked_row({"customdata": 3, "x": 1}) is None


def test_model_view_in_word_units_puts_each_word_beside_its_own_column(previous_word):
    rows, columns, maps = previous_word.maps("word")
    z = np.asarray(live.model_view(maps, "m").data[0].z, dtype=float)
    C = len(columns)
    tile = z[C + 1 : 2 * C + 1, 2 * (C + 1) : 2 * (C + 1) + C]  # array [1, 2] = layer 2, head 3: a square
    assert np.isnan(tile[0]).all() and np.isnan(tile[-1]).all()  # the special tokens' rows are blank
    np.testing.assert_allclose(np.diag(tile, -1)[:-1], 1.0, atol=1e-5)  # the previous word: the sub-diagonal


def test_neuron_view_puts_q_above_k_on_one_axis_and_titles_clear_of_ticks():
    tokens = ["[CLS]", MARKUP, "[SEP]"]
    q = np.array([1.0, -2.0, 0.5])
    keys = np.arange(9.0).reshape(3, 3)
    fig = live.neuron_view(tokens, q, keys, q[None, :] * keys, np.array([0.2, 0.3, 0.5]), 1, "head")
    top_q, keys_map, parts_map, top_q2 = fig.data[:4]
    layout = fig.layout
    for upper, lower in ((top_q, keys_map), (top_q2, parts_map)):
        upper_axis = layout["xaxis" + upper.xaxis[1:]]
        assert upper_axis.matches == lower.xaxis and list(upper.x) == list(lower.x) == [0, 1, 2]
        assert upper_axis.domain == layout["xaxis" + lower.xaxis[1:]].domain  # q_d right above k_d
        assert upper_axis.showticklabels is False  # no tick labels under q, where the titles are
    gap = (layout.yaxis.domain[0] - layout.yaxis3.domain[1]) * (layout.height - 150)
    assert gap >= 40  # pixels between the q row and the grids: room for the "attention" title
