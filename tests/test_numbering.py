"""One layer and head numbering everywhere (issue 54, item 2): a head planted at array position
(0, 2) of a tiny BERT is "layer 1, head 3" in the tables, the figures and the Heads page; hidden
states keep 0 for the embeddings; a run written before the numbering is said to be one, not
silently read one off; and the numbers a person gives are checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from dashboard_planted import chart_specs
from streamlit.testing.v1 import AppTest

from bertology import numbering
from bertology.apps import figures, tables
from bertology.errors import ConfigError, WorkbenchError
from bertology.probes.heads.classification import analyse_store
from bertology.results import read_manifest, write_results
from bertology.runs import run_analysis
from bertology.testing import PLANTED_WORDS, planted_head_store

APP = str(Path(__file__).resolve().parents[1] / "apps" / "dashboard.py")
PLANTED = (0, 2)  # 0-based array position: attentions[0, 2]
WORDS = PLANTED_WORDS


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A 2-layer x 4-head BERT whose head at array position (0, 2) attends to the previous token,
    a store of its attention over 24 sentences, and the head analysis of that store."""
    root = tmp_path_factory.mktemp("numbering")
    lm, corpus, store = planted_head_store(
        root / "stores", PLANTED, name="planted-numbering", sentences=24, lengths=(6, 12)
    )
    analysis = analyse_store(store, corpus, frequencies={w: 1.0 for w in WORDS})
    return {"root": root, "store": store, "corpus": corpus, "lm": lm, "analysis": analysis}


def test_the_planted_head_is_layer_1_head_3_in_the_tables(planted):
    stats, types = planted["analysis"]["head_stats"], planted["analysis"]["head_types"]
    assert sorted(stats["layer"].unique()) == [1, 2] and sorted(stats["head"].unique()) == [1, 2, 3, 4]
    positional = types[types["type"] == "positional"]
    assert list(zip(positional["layer"], positional["head"])) == [(1, 3)]
    assert positional["positional_offset"].iloc[0] == -1
    # the store's arrays stay 0-based: the same head is attentions[0, 2]
    store = planted["store"]
    assert store.token_offsets(0)[PLANTED][store.token_offset_bins.index(-1)] > 0


def test_hidden_state_tables_still_number_the_embeddings_0(planted):
    from bertology.finetuning.changes import layer_cka

    lm = planted["lm"]
    cka = layer_cka(lm, lm, planted["corpus"], root=planted["root"] / "stores")
    assert cka["layer"].tolist() == [0, 1, 2]  # embeddings, then the outputs of transformer layers 1 and 2
    assert np.allclose(cka["cka"], 1.0)


def test_the_head_map_figure_labels_it_layer_1_head_3(planted):
    fig = figures.head_map(planted["analysis"]["head_types"], "map", selected=(1, 3))
    positional = [t for t in fig.data if t.name.startswith("positional")][0]
    assert (list(positional.x), list(positional.y)) == ([3], [1])
    assert positional.customdata.tolist() == [[1, 3]]  # what a click selects: head 1-3
    assert positional.hovertext[0].startswith("layer 1, head 3")
    assert list(fig.layout.xaxis.tickvals) == [1, 2, 3, 4] and list(fig.layout.yaxis.tickvals) == [1, 2]


def _head_types_run(results: Path, analysis: dict, store, words: list[str]) -> Path:
    """The analysis' tables and the first sentence's attention written as a head_types run through
    :func:`run_analysis` (the one place a manifest is made)."""

    def run(ctx):
        for name in ("head_types", "head_stats", "head_dependency"):
            ctx.step(name, lambda name=name: analysis[name])
        ctx.extra(
            "attention_examples",
            lambda: {"sentences": [{"sent_id": "s0", "words": words, "attention": store.attention(0).tolist()}]},
        )

    return run_analysis(
        "head_types", "planted", run, {"min_count": 1}, seed=0, run_dir=results / "head_types" / "r", log=lambda m: None
    )


def test_the_heads_page_opens_head_1_3_and_shows_its_array_0_2(planted, monkeypatch):
    results = planted["root"] / "results"
    run = _head_types_run(results, planted["analysis"], planted["store"], planted["corpus"][0].words)
    assert read_manifest(run)["numbering"] == numbering.NUMBERING == "layers-from-1"
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(results))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["page"] = "Heads"
    at.query_params["head"] = "1-3"
    at.run()
    assert not at.exception
    # no note on the numbering (the one warning: this run has no attention-probe table)
    assert [w.value for w in at.warning if "attention_probe" not in w.value] == []
    assert at.subheader[0].value == "Layer 1, head 3"
    assert any("type **positional**" in m.value for m in at.markdown)
    assert numbering.STATEMENT in [c.value for c in at.caption]  # stated under the title
    examples = [s for s in chart_specs(at) if "on example sentences" in s["layout"]["title"]["text"]][0]
    assert examples["layout"]["title"]["text"].startswith("layer 1, head 3")
    np.testing.assert_allclose(examples["data"][0]["z"], planted["store"].attention(0)[PLANTED], atol=1e-6)


def test_a_run_from_before_the_numbering_is_said_to_be_one(tmp_path, monkeypatch):
    """A head_types run without the manifest's numbering counts from 0: the page says so (and reads its
    example arrays at the numbers it has); runs of hidden-state studies need no note."""
    old = {"study": "head_types", "run_id": "old"}
    assert "predates the numbering" in tables.old_numbering_note(old)
    assert tables.old_numbering_note({**old, "numbering": numbering.NUMBERING}) is None
    assert tables.old_numbering_note({"study": "edge_probing", "run_id": "old"}) is None
    assert tables.array_position(3, old) == 3 and tables.array_position(3, {"numbering": numbering.NUMBERING}) == 2
    types = pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "type": ["positional", "other"] * 2})
    write_results(tmp_path / "head_types" / "old", {"head_types": types}, old)
    monkeypatch.setenv("BERTOLOGY_RESULTS", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["page"] = "Heads"
    at.run()
    assert not at.exception
    assert any("predates the numbering" in w.value and "Re-run" in w.value for w in at.warning)


def test_numbers_a_person_gives_are_checked():
    assert numbering.head_name(0, 2) == "1-3"
    assert numbering.layer_index(1, 12) == 0 and numbering.head_index(12, 12) == 11
    with pytest.raises(
        ConfigError, match=r"layer 0 is out of range: transformer layers are 1\.\.12 \(0 = embeddings\)"
    ):
        numbering.layer_index(0, 12)
    with pytest.raises(ConfigError, match=r"--head 13 is out of range: heads are 1\.\.12"):
        numbering.head_index(13, 12, what="--head")
    assert numbering.head_indices([(1, 3), (2, 1)]) == [(0, 2), (1, 0)]
    assert numbering.head_numbers([(0, 2)]) == [(1, 3)]
    with pytest.raises(WorkbenchError, match="numbered from 1"):
        numbering.head_indices([(0, 2)])  # a table counting from 0
