"""Corpus readers: the bundled corpus, CoNLL-U edge cases, BIO, silver annotation, clear errors."""

from __future__ import annotations

import pytest

from bertology.corpus import (Corpus, Entity, Sentence, annotate_silver, bio_to_entities, entities_to_bio,
                              load_corpus, read_bio, read_conllu, read_text_file, write_conllu)
from bertology.errors import CorpusError

UD_EDGE_CASES = """# newdoc id = d1
# sent_id = s1
# text = Vámonos al mar.
1-2\tVámonos\t_\t_\t_\t_\t_\t_\t_\t_
1\tVamos\tir\tVERB\t_\t_\t0\troot\t_\t_
2\tnos\tnosotros\tPRON\t_\t_\t1\tobj\t_\t_
3-4\tal\t_\t_\t_\t_\t_\t_\t_\t_
3\ta\ta\tADP\t_\t_\t5\tcase\t_\t_
4\tel\tel\tDET\t_\t_\t5\tdet\t_\t_
5\tmar\tmar\tNOUN\t_\t_\t1\tobl\t_\tNER=B-LOC
5.1\tfue\tir\tVERB\t_\t_\t_\t_\t1:conj\t_
6\t.\t.\tPUNCT\t_\t_\t1\tpunct\t_\t_

# sent_id = s2
1\tJohn\tJohn\tPROPN\tNNP\t_\t2\tnsubj\t_\tNER=B-PER
2\truns\trun\tVERB\tVBZ\t_\t0\troot\t_\tNER=O


"""


def test_bundled_corpus_is_real_and_says_gold_or_silver():
    corpus = load_corpus("brown-sample")
    assert len(corpus) == 3000 and corpus.n_words > 40_000
    assert corpus.sources["upos"].startswith("gold")
    assert corpus.sources["deps"].startswith("silver") and corpus.sources["entities"].startswith("silver")
    assert "redistribution permitted" in corpus.licence
    s = corpus[0]
    assert len(s.words) == len(s.upos) == len(s.heads) == len(s.deprels)
    assert sum(h == 0 for h in s.heads) == 1
    assert corpus.has("upos") and corpus.has("deps") and corpus.has("entities")
    offsets = corpus.word_offsets()
    assert offsets[0] == 0 and offsets[-1] == corpus.n_words


def test_conllu_multiword_tokens_empty_nodes_comments_trailing_blanks(tmp_path):
    path = tmp_path / "edge.conllu"
    path.write_text(UD_EDGE_CASES)
    corpus = read_conllu(path)
    assert len(corpus) == 2
    s1, s2 = corpus
    assert s1.words == ["Vamos", "nos", "a", "el", "mar", "."]  # syntactic words, no MWT, no empty node
    assert s1.heads == [0, 1, 5, 5, 1, 1]
    assert s1.deprels[4] == "obl" and s1.upos[3] == "DET"
    assert s1.entities == [Entity(4, 5, "LOC")] and s1.text == "Vámonos al mar."
    assert s2.entities == [Entity(0, 1, "PER")] and s2.xpos == ["NNP", "VBZ"]
    assert corpus.sources["upos"] == "gold: edge.conllu"


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("2\truns\trun\tVERB\tVBZ\t_\t0\troot", "expected 10 tab-separated columns"),
        ("2\truns\trun\tVERB\tVBZ\t_\t7\troot\t_\t_", "outside its sentence"),
        ("x\truns\trun\tVERB\tVBZ\t_\t0\troot\t_\t_", "bad token ID"),
        ("3\truns\trun\tVERB\tVBZ\t_\t0\troot\t_\t_", "out of sequence"),
        ("2\truns\trun\tVERB\tVBZ\t_\tone\troot\t_\t_", "not a number"),
    ],
)
def test_malformed_conllu_names_file_and_line(tmp_path, bad_line, message):
    path = tmp_path / "bad.conllu"
    path.write_text("# sent_id = a\n1\tJohn\tJohn\tPROPN\t_\t_\t2\tnsubj\t_\t_\n" + bad_line + "\n\n")
    with pytest.raises(CorpusError, match=rf"bad.conllu:3: .*{message}"):
        read_conllu(path)


def test_missing_and_unknown_corpus_errors(tmp_path):
    with pytest.raises(CorpusError, match="no such corpus file"):
        read_conllu(tmp_path / "absent.conllu")
    with pytest.raises(CorpusError, match="unknown corpus 'nope'"):
        load_corpus("nope")
    empty = tmp_path / "empty.conllu"
    empty.write_text("\n\n")
    with pytest.raises(CorpusError, match="no sentences"):
        read_conllu(empty)


def test_bio_reader_and_span_conversion(tmp_path):
    path = tmp_path / "ner.bio"
    path.write_text("-DOCSTART- O\n\nEU B-ORG\nrejects O\nGerman B-MISC\ncall O\n\nPeter B-PER\nBlackburn I-PER\n")
    corpus = read_bio(path)
    assert [s.words for s in corpus] == [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]]
    assert corpus[0].entities == [Entity(0, 1, "ORG"), Entity(2, 3, "MISC")]
    assert corpus[1].entities == [Entity(0, 2, "PER")]
    assert bio_to_entities(["I-PER", "I-PER", "O", "I-LOC"]) == [Entity(0, 2, "PER"), Entity(3, 4, "LOC")]
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC"]
    assert entities_to_bio(bio_to_entities(tags), 5) == tags
    path.write_text("EU B-ORG\nrejects\n")
    with pytest.raises(CorpusError, match=r"ner.bio:2: expected a word and a BIO tag"):
        read_bio(path)
    path.write_text("EU X-ORG\n")
    with pytest.raises(CorpusError, match=r"ner.bio:1: 'X-ORG' is not a BIO tag"):
        read_bio(path)


def test_write_read_round_trip_is_atomic_and_keeps_sources(tmp_path):
    corpus = load_corpus("brown-sample", limit=5)
    out = tmp_path / "copy.conllu"
    write_conllu(corpus, out)
    back = read_conllu(out)
    assert [s.words for s in back] == [s.words for s in corpus]
    assert [s.heads for s in back] == [s.heads for s in corpus]
    assert [s.entities for s in back] == [s.entities for s in corpus]
    assert back.sources == corpus.sources
    assert not list(tmp_path.glob(".*.tmp"))


def test_text_file_errors(tmp_path):
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"abc\x00\x01")
    with pytest.raises(CorpusError, match="looks binary"):
        read_text_file(binary)
    empty = tmp_path / "e.txt"
    empty.write_text("\n \n")
    with pytest.raises(CorpusError, match="empty"):
        read_text_file(empty)
    latin = tmp_path / "l.txt"
    latin.write_bytes(b"ok\nfa\xe7ade\n")
    with pytest.raises(CorpusError, match=r"l.txt:2: not valid UTF-8"):
        read_text_file(latin)


def test_silver_annotation_marks_every_layer_silver():
    corpus = annotate_silver(["The committee in Atlanta approved the plan. It was late."])
    assert len(corpus) == 2
    assert all(v.startswith("silver: spaCy") for v in corpus.sources.values())
    s = corpus[0]
    assert s.words[:3] == ["The", "committee", "in"] and s.upos[1] == "NOUN"
    assert sum(h == 0 for h in s.heads) == 1
    assert any(e.label == "GPE" for e in s.entities)


def test_fingerprint_depends_on_content_only():
    a = Corpus("a", [Sentence("1", ["x", "y"], upos=["X", "X"])])
    b = Corpus("b", [Sentence("1", ["x", "y"], upos=["X", "X"])], path="/elsewhere")
    c = Corpus("a", [Sentence("1", ["x", "z"], upos=["X", "X"])])
    assert a.fingerprint == b.fingerprint != c.fingerprint
    assert a.subset([0]).fingerprint == a.fingerprint
