"""Corpus readers: the bundled corpus, CoNLL-U edge cases, BIO, silver annotation, clear errors."""

from __future__ import annotations

import re
import sys

import pytest

from bertology.corpus import (
    Corpus,
    Entity,
    Sentence,
    annotate_silver,
    bio_to_entities,
    entities_to_bio,
    load_corpus,
    read_bio,
    read_conllu,
    read_text_file,
    write_conllu,
)
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


def test_conllu_words_and_tags_are_one_string_object_each(tmp_path):
    """The reader keeps one string per distinct word, tag and relation (``sys.intern``), not one per
    token: a parsed corpus costs its lists, not ~50 bytes per tag per token."""
    path = tmp_path / "repeated.conllu"
    path.write_text(UD_EDGE_CASES * 3)
    corpus = read_conllu(path)
    assert len(corpus) == 6
    first, again = corpus.sentences[0], corpus.sentences[2]
    assert first == again
    for layer in ("words", "upos", "deprels"):
        assert all(a is b for a, b in zip(getattr(first, layer), getattr(again, layer))), layer
    assert first.deprels[1] is corpus.sentences[4].deprels[1] is sys.intern("obj")


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


def _brown_sample_sentences(n: int) -> list[list[list[str]]]:
    """The first n sentences of the bundled brown_sample.conllu as lists of token-line columns."""
    from bertology.corpus import bundled_corpora

    blocks = bundled_corpora()["brown-sample"].read_text(encoding="utf-8").split("\n\n")[:n]
    return [[ln.split("\t") if not ln.startswith("#") else [ln] for ln in b.strip("\n").splitlines()] for b in blocks]


def _write(sentences, path) -> None:
    path.write_text("\n\n".join("\n".join("\t".join(c) for c in s) for s in sentences) + "\n\n", encoding="utf-8")


def _set_head(sentence, word: int, head: int) -> None:
    row = [c for c in sentence if len(c) == 10][word - 1]
    row[6] = str(head)


@pytest.mark.parametrize(
    "plant,problem",
    [
        ("cycle", r"a cycle: (\d+) -> (\d+) -> \1;"),
        ("no_root", r"no root"),
        ("two_roots", r"2 roots \(words \d+, \d+ have head 0\)"),
    ],
)
def test_heads_that_are_not_a_tree_are_never_gold(tmp_path, plant, problem):
    sentences = _brown_sample_sentences(3)
    target = sentences[1]
    words = [c for c in target if len(c) == 10]
    root = next(i + 1 for i, c in enumerate(words) if c[6] == "0")
    other, third = [i for i in range(1, len(words) + 1) if i != root][:2]
    if plant == "cycle":  # two words head each other; the root stays
        _set_head(target, other, third)
        _set_head(target, third, other)
    elif plant == "no_root":  # the root points at a word whose head chain leads back: no 0 left
        _set_head(target, root, other)
    else:
        _set_head(target, other, 0)
    path = tmp_path / "planted.conllu"
    _write(sentences, path)
    sent_id = next(c[0] for c in target if c[0].startswith("# sent_id")).split("=", 1)[1].strip()
    start = path.read_text().split("\n").index(f"# sent_id = {sent_id}") + 1
    with pytest.raises(
        CorpusError,
        match=rf"planted.conllu:{start}: sentence {sent_id}: the heads do not form "
        rf"a tree: {problem}",
    ):
        read_conllu(path)
    corpus = read_conllu(path, bad_trees="drop")
    assert len(corpus) == 3
    assert corpus[1].heads is None and corpus[1].deprels is None and "tree_error" in corpus[1].meta
    assert corpus[0].heads is not None and corpus[2].heads is not None
    assert not corpus.has("deps")  # a deps task refuses the corpus rather than read a broken tree


def test_tree_problem_planted():
    from bertology.corpus import tree_problem

    assert tree_problem([2, 0, 2]) is None
    assert tree_problem([2, 3, 1]) == "no root (no word has head 0)"
    assert tree_problem([0, 3, 2]) == "a cycle: 2 -> 3 -> 2"
    assert tree_problem([0, 1, 0]) == "2 roots (words 1, 3 have head 0)"


def test_bom_is_not_glued_to_the_first_word(tmp_path):
    bom = "\ufeff"
    bio = tmp_path / "ner.bio"
    bio.write_text(bom + "EU B-ORG\nrejects O\n", encoding="utf-8")
    assert read_bio(bio)[0].words == ["EU", "rejects"]
    txt = tmp_path / "t.txt"
    txt.write_text(bom + "The jury said.\n\nIt did.\n", encoding="utf-8")
    assert read_text_file(txt) == ["The jury said.", "It did."]
    conllu = tmp_path / "s.conllu"
    _write(_brown_sample_sentences(2), conllu)
    conllu.write_bytes(bom.encode() + conllu.read_bytes())
    plain = read_conllu(conllu)
    assert plain[0].words == load_corpus("brown-sample", limit=1)[0].words


@pytest.mark.parametrize("suffix", [".conllu", ".bio", ".txt"])
def test_non_utf8_files_name_file_and_line(tmp_path, suffix):
    path = tmp_path / f"latin{suffix}"
    if suffix == ".conllu":
        _write(_brown_sample_sentences(2), path)
        lines = path.read_text().split("\n")
        n = next(i for i, ln in enumerate(lines) if ln.startswith("2\t"))
        cols = lines[n].split("\t")
        cols[1] = "café"
        lines[n] = "\t".join(cols)
        path.write_bytes("\n".join(lines).encode("latin-1"))
        line = n + 1
    else:
        path.write_bytes("EU B-ORG\ncaf\xe9 O\n".encode("latin-1"))
        line = 2
    reader = {".conllu": read_conllu, ".bio": read_bio, ".txt": read_text_file}[suffix]
    with pytest.raises(CorpusError, match=rf"latin{re.escape(suffix)}:{line}: not valid UTF-8 \(byte 0xe9"):
        reader(path)


def test_negative_limit_is_refused():
    with pytest.raises(CorpusError, match="limit: expected a number of sentences >= 0, got -2990"):
        load_corpus("brown-sample", limit=-2990)
    corpus = load_corpus("brown-sample")
    with pytest.raises(CorpusError, match="got -1"):
        corpus.subset(-1)
    assert len(corpus.subset(0)) == 0 and len(load_corpus("brown-sample", limit=10)) == 10


def test_silver_trees_that_are_not_trees_are_flagged():
    """The bundled corpus's dependencies are silver (spaCy on Brown's gold sentences): its two-root
    trees are flagged per sentence, not passed off as trees, and the corpus still loads."""
    corpus = load_corpus("brown-sample")
    flagged = [s for s in corpus if "tree_error" in s.meta]
    assert corpus.sources["deps"].startswith("silver")
    assert 0 < len(flagged) < len(corpus) // 50
    for s in flagged:
        assert sum(h == 0 for h in s.heads) != 1 and "roots" in s.meta["tree_error"]
    from bertology.corpus import tree_problem

    assert all(tree_problem(s.heads) is None for s in corpus if "tree_error" not in s.meta)


def test_brown_reader_bom_and_encoding(tmp_path):
    from bertology.corpus.brown import read_brown_file

    path = tmp_path / "ca01"
    path.write_text("\ufeffThe/at Fulton/np-tl jury/nn ./.\n", encoding="utf-8")
    assert read_brown_file(path) == [(["The", "Fulton", "jury", "."], ["at", "np-tl", "nn", "."])]
    path.write_bytes("The/at\ncaf\xe9/nn\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"ca01:2: not valid UTF-8"):
        read_brown_file(path)


# --------------------------------------------------------------------------- .txt: one sentence per line


def test_a_text_file_is_one_sentence_per_line_unless_spacy_is_asked(tmp_path):
    text = tmp_path / "mine.txt"
    text.write_text("Mr. Smith went to Washington. He said hi.\n\nThe old man saw the boat\nIt sank\n")
    lines = load_corpus(text)
    assert [s.text for s in lines.sentences] == [
        "Mr. Smith went to Washington. He said hi.",
        "The old man saw the boat",
        "It sank",
    ]
    assert all(sum(h == 0 for h in s.heads) == 1 for s in lines.sentences)  # one tree per line
    assert lines.sources["upos"].startswith("silver") and lines.path == str(text.resolve())
    # what a store records reloads the same sentences
    assert load_corpus(lines.path).fingerprint == lines.fingerprint
    split = load_corpus(f"{text}?sentences=spacy")
    # spaCy cuts the first paragraph in two and reads the two lines of the second as one text
    assert [s.words[0] for s in split.sentences] == ["Mr.", "He", "The"]
    assert [s.words for s in load_corpus(text, sentences="spacy").sentences] == [s.words for s in split.sentences]
    assert split.path.endswith("?sentences=spacy") and load_corpus(split.path).fingerprint == split.fingerprint
    with pytest.raises(CorpusError, match="asks for sentences='spacy', the call for 'lines'"):
        load_corpus(f"{text}?sentences=spacy", sentences="lines")
    with pytest.raises(CorpusError, match="sentences: expected one of lines, spacy"):
        load_corpus(text, sentences="nltk")


def test_a_line_too_long_for_a_sentence_is_refused_by_number(tmp_path):
    from bertology.corpus import read_text_lines
    from bertology.corpus.silver import MAX_CHUNK_CHARS

    text = tmp_path / "para.txt"
    text.write_text("A short line.\n" + "word " * (MAX_CHUNK_CHARS // 5 + 10) + "\n")
    with pytest.raises(CorpusError, match=r"para.txt:2: a line of .* characters is not one sentence.*sentences=spacy"):
        read_text_lines(text)


def test_a_conllu_file_is_parsed_once_and_each_load_gets_its_own_copy(tmp_path):
    """The parsed corpus is kept per process (path and content): a second load is equal but a copy,
    so editing it changes no other load, and a rewritten file is read again."""
    from bertology.corpus import registry

    first = load_corpus("brown-sample", limit=5)
    second = load_corpus("brown-sample", limit=5)
    assert first.fingerprint == second.fingerprint
    first.sentences[0].words[0] = "EDITED"
    first.sentences[0].meta["x"] = "y"
    assert load_corpus("brown-sample", limit=5).fingerprint == second.fingerprint
    assert second.sentences[0].words[0] != "EDITED" and "x" not in second.sentences[0].meta

    path = tmp_path / "mini.conllu"
    path.write_text("# sent_id = a\n1\tHello\t_\tINTJ\t_\t_\t0\troot\t_\t_\n\n")
    assert load_corpus(str(path)).sentences[0].words == ["Hello"]
    path.write_text("# sent_id = a\n1\tHellO\t_\tINTJ\t_\t_\t0\troot\t_\t_\n\n")
    assert load_corpus(str(path)).sentences[0].words == ["HellO"]  # same size, at once: read again
    assert len(registry._PARSED) <= registry._PARSED_KEEP


def test_a_sentence_copy_equals_a_deep_copy_and_shares_no_list():
    import copy
    import dataclasses

    for sentence in load_corpus("brown-sample", limit=20):
        mine, deep = sentence.copy(), copy.deepcopy(sentence)
        assert mine == deep
        for f in dataclasses.fields(sentence):  # every field is copied, every mutable one anew
            value = getattr(sentence, f.name)
            assert getattr(mine, f.name) == value
            if isinstance(value, (list, dict)):
                assert getattr(mine, f.name) is not value, f.name
