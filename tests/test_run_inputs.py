"""Every input a study reads is fingerprinted, also those its config names only indirectly."""

from __future__ import annotations

import hashlib

import pytest

from bertology.errors import CorpusError


def test_alignment_fingerprints_the_plain_text_corpora_it_reads():
    from bertology import paths
    from bertology.probes.embeddings.analysis import alignment_inputs

    inputs = alignment_inputs({"crosslingual": False, "corpora": ["brown"]})
    assert set(inputs) == {"text_brown"}
    digest = inputs["text_brown"]
    assert digest["kind"] == "plain text" and digest["name"] == "brown"
    # the digest moves with the file's content: it covers the sha256 of brown.txt.gz
    content = hashlib.sha256((paths.package_data() / "brown.txt.gz").read_bytes()).hexdigest()
    from bertology.fingerprints import file_digest

    assert file_digest(paths.package_data() / "brown.txt.gz") == content
    assert alignment_inputs({"crosslingual": False, "corpora": []}) == {}


def test_an_unknown_text_corpus_is_refused_before_the_run():
    from bertology.corpus.plain_text import text_files

    with pytest.raises(CorpusError, match="unknown text corpus"):
        text_files("nope")


def test_head_types_fingerprints_its_word_vectors_only_when_it_reads_them():
    from bertology.probes.heads.analysis import head_types_analysis, head_types_inputs
    from bertology.runs import analysis_inputs

    assert head_types_inputs({"word_vectors": "none"}) == {}
    assert analysis_inputs(head_types_analysis, {"word_vectors": "none"}) == {}
    try:
        digest = head_types_inputs({"word_vectors": "en"})["word_vectors"]
    except (OSError, KeyError) as exc:  # the spaCy vector package is a [data] extra
        pytest.skip(f"no English spaCy vectors here: {exc}")
    assert digest["kind"] == "vector package" and digest["version"]
