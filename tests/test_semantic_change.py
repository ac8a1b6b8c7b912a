"""Semantic change between slices of documents (issue 30) on planted corpora with known answers."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from bertology.corpus.documents import (
    SliceSpec,
    document_sentences,
    read_document_folder,
    select_documents,
    slice_sentences,
)
from bertology.errors import CorpusError, WorkbenchError
from bertology.probes.embeddings.semantic_change import (
    ChangeSettings,
    change_scores,
    contextual_builder,
    semantic_change,
    word2vec_builder,
    word_counts,
)
from bertology.probes.embeddings.static_vectors import StaticVectors

SWAPPED = ("t0", "t1", "t2")


def planted_slices(n_docs=30, sentences=60, seed=0):
    """Two slices of documents over 6 context clusters of 30 words and 12 target words; each target
    appears in its cluster's sentences, and in slice B the targets of SWAPPED move to another
    cluster: their contexts change, every other word keeps its contexts."""
    rng = np.random.default_rng(seed)
    clusters = 6
    ctx = [[f"c{k}w{i}" for i in range(30)] for k in range(clusters)]
    targets = [f"t{j}" for j in range(12)]
    out = []
    for slice_b in (False, True):
        home = {
            t: ((j % clusters) + 3) % clusters if slice_b and t in SWAPPED else j % clusters
            for j, t in enumerate(targets)
        }
        members = {c: [t for t in targets if home[t] == c] for c in range(clusters)}
        docs = []
        for _ in range(n_docs):
            doc = []
            for _ in range(sentences):
                c = int(rng.integers(clusters))
                words = [str(w) for w in rng.choice(ctx[c], size=9)]
                if rng.random() < 0.6:
                    words.insert(int(rng.integers(10)), str(rng.choice(members[c])))
                doc.append(words)
            docs.append(doc)
        out.append(docs)
    return out


def test_documents_with_metadata_are_sliced_by_years_and_fields(tmp_path):
    for year, party in ((1901, "Republican"), (1915, "Democratic"), (1995, "Democratic")):
        (tmp_path / f"{year}_x.txt").write_text(f"The year was {year}. Mr. Smith spoke!\nA new line here", "utf-8")
        (tmp_path / f"{year}_x.json").write_text(json.dumps({"year": year, "party": party, "text": "dup"}))
    (tmp_path / "nometa.txt").write_text("No metadata at all.", "utf-8")
    docs = read_document_folder(tmp_path)
    assert [d.name for d in docs] == ["1901_x", "1915_x", "1995_x", "nometa"] and "text" not in docs[0].metadata
    early = select_documents(docs, SliceSpec.from_config("early", {"years": [1900, 1929]}))
    assert [d.metadata["year"] for d in early] == [1901, 1915]
    dems = select_documents(docs, SliceSpec.from_config("d", {"party": ["Democratic"], "years": [1900, 2000]}))
    assert [d.metadata["year"] for d in dems] == [1915, 1995]
    assert document_sentences(docs[0]) == [
        ["the", "year", "was", "1901"],
        ["mr", "smith", "spoke"],
        ["a", "new", "line", "here"],
    ]
    assert len(slice_sentences(early)) == 2
    with pytest.raises(CorpusError, match="slice 'late'.*holds no document"):
        select_documents(docs, SliceSpec.from_config("late", {"years": [2030, 2040]}))
    with pytest.raises(CorpusError, match="years must be"):
        SliceSpec.from_config("bad", {"years": [1990]})
    (tmp_path / "broken.json").write_text("[1, 2")
    (tmp_path / "broken.txt").write_text("x")
    with pytest.raises(CorpusError, match="broken.json"):
        read_document_folder(tmp_path)


def test_change_scores_of_a_rotated_space_are_zero_except_the_replaced_word():
    """B is A rotated: after Procrustes every word is where it was (cosine distance ~0) except the
    one word whose vector was replaced."""
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(300)]
    a = rng.normal(size=(300, 20))
    rotation, _ = np.linalg.qr(rng.normal(size=(20, 20)))
    b = a @ rotation
    b[5] = rng.normal(size=20)
    scores = change_scores(StaticVectors(words, a), StaticVectors(words, b), words, words[10:], k=10).set_index("word")
    assert scores.loc["w5", "cosine_distance"] > 0.5 and scores.loc["w5", "neighbourhood_distance"] > 0.3
    others = scores.drop(index="w5")
    assert others["cosine_distance"].max() < 0.05 and others["neighbourhood_distance"].median() < 0.05


def test_word2vec_planted_swaps_top_the_list_above_the_control():
    a, b = planted_slices()
    builders = [word2vec_builder(s, dim=16, epochs=5, min_count=5, name=n) for s, n in ((a, "a"), (b, "b"))]
    settings = ChangeSettings(replicates=4, control_replicates=1, min_count=20, anchors=500, k=10)
    result = semantic_change(*builders, word_counts(a), word_counts(b), (len(a), len(b)), settings)
    table = result["word_change"]
    assert set(table["word"].head(3)) == set(SWAPPED)  # the swapped words top the list
    swapped = table[table["word"].isin(SWAPPED)]
    assert swapped["moved"].all() and (swapped["low"] > swapped["control_threshold"]).all()
    unchanged = table[table["word"].str.startswith("t") & ~table["word"].isin(SWAPPED)]
    assert len(unchanged) == 9 and not unchanged["moved"].any()
    assert (unchanged["cosine_distance"] < unchanged["control_threshold"]).all()  # below the control
    assert (table["low"] <= table["cosine_distance"]).all() and (table["cosine_distance"] <= table["high"]).all()
    assert swapped["neighbours_b"].str.contains("c3|c4|c5").all()  # neighbours from the new cluster
    assert set(result["control"]["frequency_bin"]) == set(table["frequency_bin"])


def _planted_contextual(seed=0, n_docs=24):
    """Per document, sums of noisy occurrences of fixed word vectors; in slice B two words change."""
    rng = np.random.default_rng(seed)
    vocab = [f"v{i}" for i in range(120)]
    base = {w: rng.normal(size=16) for w in vocab}
    changed = {"v3": rng.normal(size=16), "v7": rng.normal(size=16)}
    slices = []
    for slice_b in (False, True):
        sums, counts = [], []
        for _ in range(n_docs):
            c = Counter({w: int(rng.integers(2, 6)) for w in vocab})
            s = {
                w: sum(
                    (changed[w] if slice_b and w in changed else base[w]) + 0.3 * rng.normal(size=16) for _ in range(n)
                )
                for w, n in c.items()
            }
            sums.append(s)
            counts.append(c)
        slices.append((sums, counts))
    return slices


def test_contextual_type_vectors_find_the_planted_words_reproducibly():
    (sums_a, counts_a), (sums_b, counts_b) = _planted_contextual()
    build_a = contextual_builder(sums_a, counts_a, min_count=5, name="a")
    build_b = contextual_builder(sums_b, counts_b, min_count=5, name="b")
    total_a, total_b = sum(counts_a, Counter()), sum(counts_b, Counter())
    # the words under test left out of the anchors (and the centre): the others align exactly
    settings = ChangeSettings(
        replicates=5, control_replicates=2, min_count=20, anchors=100, seed=3, tested=("v3", "v7"), exclude_tested=True
    )
    first = semantic_change(build_a, build_b, total_a, total_b, (24, 24), settings)
    again = semantic_change(build_a, build_b, total_a, total_b, (24, 24), settings)
    pd.testing.assert_frame_equal(first["word_change"], again["word_change"])  # bootstrap seeded: reproducible
    table = first["word_change"]
    assert set(table["word"].head(2)) == {"v3", "v7"} and table.head(2)["moved"].all()
    assert not table.iloc[2:]["moved"].any()  # family-wise control: no false alarm
    assert (first["control"]["control_level"] > 0.95).all()
    anchored = ChangeSettings(**{**settings.__dict__, "exclude_tested": False})  # v3, v7 among the anchors
    assert set(
        semantic_change(build_a, build_b, total_a, total_b, (24, 24), anchored)["word_change"]["word"].head(2)
    ) == {"v3", "v7"}
    with pytest.raises(WorkbenchError, match="min_count"):
        semantic_change(build_a, build_b, total_a, total_b, (24, 24), ChangeSettings(min_count=10**6))


def test_semantic_change_study_on_a_planted_document_folder(tmp_path):
    """The study on a folder of planted documents with year metadata: the swapped words top the
    comparison, the slices' sizes are reported, and the documents are an input of the run id."""
    from bertology.results import read_manifest, read_table
    from bertology.studies import run_study

    folder = tmp_path / "docs"
    folder.mkdir()
    a, b = planted_slices()
    letters = str.maketrans("0123456789", "abcdefghij")  # the tokenizer keeps words of letters whole
    for year0, docs in ((1900, a), (1990, b)):
        for i, doc in enumerate(docs):
            text = "\n".join(" ".join(w.translate(letters) for w in s) + "." for s in doc)
            (folder / f"{year0 + i}_doc.txt").write_text(text, "utf-8")
            (folder / f"{year0 + i}_doc.json").write_text(json.dumps({"year": year0 + i}))
    overrides = {
        "documents": str(folder),
        "comparisons": {"planted": {"a": {"years": [1900, 1929]}, "b": {"years": [1990, 2019]}}},
        "replicates": 3,
        "control_replicates": 1,
        "vector_dim": 16,
        "min_count": 20,
        "anchors": 500,
    }
    run = run_study("semantic_change", overrides=overrides, results_root=tmp_path / "res", log=lambda m: None)
    slices = read_table(run, "slices")
    assert slices["documents"].tolist() == [30, 30] and (slices["words"] > 15000).all()
    change = read_table(run, "word_change")
    assert set(change["word"].head(3)) == {w.translate(letters) for w in SWAPPED} and change.head(3)["moved"].all()
    assert read_manifest(run)["inputs"]["documents"]["sha256"]
    (folder / "1905_doc.txt").write_text("a changed address.", "utf-8")  # another input: another run
    again = run_study(
        "semantic_change", overrides={**overrides, "replicates": 1}, results_root=tmp_path / "res2", log=lambda m: None
    )
    assert read_manifest(again)["inputs"]["documents"]["sha256"] != read_manifest(run)["inputs"]["documents"]["sha256"]
