"""Text corpus reading, sentence splitting, packing, and tokenizer training round trips."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from bertology.errors import CorpusError, WorkbenchError
from bertology.paths import package_data
from bertology.pretraining.text_corpus import (
    corpus_hash,
    pack_documents,
    read_documents,
    split_sentences,
    tokenize_documents,
)
from bertology.pretraining.tokenizer import train_tokenizer

BROWN = package_data() / "brown.txt.gz"


@pytest.fixture(scope="module")
def brown_slice(tmp_path_factory) -> Path:
    """The first ~40 documents of the bundled Brown text (real text), as a .gz file."""
    out = tmp_path_factory.mktemp("brown") / "brown40.txt.gz"
    lines, docs = [], 0
    with gzip.open(BROWN, "rt", encoding="utf-8") as fh:
        for line in fh:
            lines.append(line)
            docs += not line.strip()
            if docs >= 40:
                break
    with gzip.open(out, "wt", encoding="utf-8") as fh:
        fh.writelines(lines)
    return out


def test_split_sentences_rules():
    text = (
        'Mr. Smith went to Washington. He arrived at 5 p.m. on Friday! "Was it late?" she asked. J. F. Kennedy spoke.'
    )
    assert split_sentences(text) == [
        "Mr. Smith went to Washington.",
        "He arrived at 5 p.m. on Friday!",
        '"Was it late?" she asked.',
        "J. F. Kennedy spoke.",
    ]
    assert split_sentences("   ") == []


def test_read_documents_blank_line_breaks(tmp_path):
    (tmp_path / "a.txt").write_text("One. Two.\nThree.\n\n\nFour.\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    with gzip.open(sub / "b.txt.gz", "wt") as fh:
        fh.write("Five.\n")
    (tmp_path / ".hidden").write_text("\x00")
    assert list(read_documents(tmp_path)) == [["One.", "Two.", "Three."], ["Four."], ["Five."]]
    assert len(corpus_hash(tmp_path)) == 64


def test_empty_and_binary_files_raise_naming_the_file(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    with pytest.raises(CorpusError, match="empty.txt.*empty"):
        list(read_documents(empty))
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"PK\x03\x04\x00\x00binary")
    with pytest.raises(WorkbenchError, match="blob.bin.*binary"):
        list(read_documents(binary))
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    with pytest.raises(CorpusError, match="latin.txt:1.*UTF-8"):
        list(read_documents(latin))
    with pytest.raises(CorpusError, match="missing"):
        list(read_documents(tmp_path / "missing"))


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_tokenizer_round_trip(brown_slice, tmp_path, kind):
    from transformers import AutoTokenizer

    out = train_tokenizer(brown_slice, tmp_path / kind, kind=kind, vocab_size=600)
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.is_fast
    assert 400 <= len(tok) <= 600
    text = "The jury said it did find that many of Georgia's laws are outmoded."
    enc = tok(text, "A second segment.")
    ids = enc["input_ids"]
    if kind == "wordpiece":
        assert (tok.cls_token, tok.sep_token, tok.mask_token, tok.pad_token, tok.unk_token) == (
            "[CLS]",
            "[SEP]",
            "[MASK]",
            "[PAD]",
            "[UNK]",
        )
        assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
        assert enc["token_type_ids"][-1] == 1 and enc["token_type_ids"][0] == 0
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True).replace(" ' ", "'") == text.lower().replace(
            ".", " ."
        ).replace(" .", ".")
        assert (out / "vocab.txt").is_file()
    else:
        assert (tok.cls_token, tok.sep_token, tok.mask_token, tok.pad_token) == ("<s>", "</s>", "<mask>", "<pad>")
        assert ids[0] == tok.cls_token_id and ids.count(tok.sep_token_id) == 3  # <s> A </s></s> B </s>
        assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text.lower()
    assert set(tok.all_special_ids) <= set(range(5))


def test_pack_documents_respects_max_len(brown_slice, tmp_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(train_tokenizer(brown_slice, tmp_path / "t", vocab_size=600))
    docs = tokenize_documents(read_documents(brown_slice), tok)
    ids, words = pack_documents(docs, max_seq_len=64, cls_id=tok.cls_token_id, sep_id=tok.sep_token_id)
    assert len(ids) > 100
    n_tokens = sum(len(s) for d in docs for s in d.sentences)
    assert sum(len(x) - 2 for x in ids) == n_tokens  # every token packed exactly once
    for x, w in zip(ids, words):
        assert len(x) == len(w) <= 64
        assert x[0] == tok.cls_token_id and x[-1] == tok.sep_token_id
        assert w[0] == w[-1] == -1 and w[1] == 0 and all(b >= a for a, b in zip(w[1:-2], w[2:-1]))
    assert sum(len(x) for x in ids) / (64 * len(ids)) > 0.6  # packing fills sequences


@pytest.mark.parametrize("kind", ["wordpiece", "bpe"])
def test_tokenizer_training_is_byte_reproducible(brown_slice, tmp_path, kind):
    """Issue 17.2: two trainings on the same text give the same bytes (tokenizers' own WordPiece
    trainer numbered the ``##`` alphabet in hash-map order, different on every call)."""
    first = train_tokenizer(brown_slice, tmp_path / "a", kind=kind, vocab_size=600)
    for again in ("b", "c"):
        second = train_tokenizer(brown_slice, tmp_path / again, kind=kind, vocab_size=600)
        for name in ("tokenizer.json", "vocab.txt") if kind == "wordpiece" else ("tokenizer.json",):
            assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_wordpiece_vocabulary_order_is_canonical(brown_slice):
    from bertology.pretraining.tokenizer import WORDPIECE_SPECIALS, wordpiece_vocabulary

    lines = [s for doc in read_documents(brown_slice) for s in doc]
    vocab = wordpiece_vocabulary(lines, vocab_size=400)
    assert len(vocab) == len(set(vocab)) == 400
    assert vocab[:5] == WORDPIECE_SPECIALS
    singles = [t for t in vocab[5:] if len(t.removeprefix("##")) == 1]
    n = len(singles)
    assert vocab[5 : 5 + n] == singles  # the alphabet comes right after the specials ...
    initial = [t for t in singles if not t.startswith("##")]
    assert singles == sorted(initial) + sorted(t for t in singles if t.startswith("##"))  # ... by code point
    assert {"t", "##t", "e", "##e"} <= set(singles)
    merged = vocab[5 + n :]
    assert merged and all(len(t.removeprefix("##")) > 1 for t in merged)
    assert not any(c.isupper() for c in initial)  # uncased: no upper-case characters survive


def test_wordpiece_vocabulary_planted_counts():
    """Hand-counted: pairs (a, ##b) x5 and (c, ##d) x3 are merged in that order; then (ab, ##c) x2."""
    from bertology.pretraining.tokenizer import WORDPIECE_SPECIALS, wordpiece_vocabulary

    lines = ["ab ab ab AB ab cd cd", "cd abc abc"]
    vocab = wordpiece_vocabulary(lines, vocab_size=100)
    assert vocab == WORDPIECE_SPECIALS + ["a", "c", "##b", "##c", "##d", "ab", "cd", "abc"]
    assert wordpiece_vocabulary(lines, vocab_size=11) == vocab[:11]


def test_bom_is_not_part_of_the_first_sentence(brown_slice, tmp_path):
    with gzip.open(brown_slice, "rt", encoding="utf-8") as fh:
        text = fh.read()
    plain, marked = tmp_path / "plain.txt", tmp_path / "bom.txt"
    plain.write_text(text, encoding="utf-8")
    marked.write_text("\ufeff" + text, encoding="utf-8")
    first = next(read_documents(marked))
    assert first == next(read_documents(plain)) and not first[0].startswith("\ufeff")


def test_full_sentences_packing_crosses_documents_with_a_separator():
    """RoBERTa's FULL-SENTENCES on planted documents: every token packed once, a [SEP] between two
    documents inside a sequence, every sequence but the last full; DOC-SENTENCES never mixes
    documents (each document's last sequence short), so it fills fewer positions."""
    from bertology.pretraining.text_corpus import TokenizedDocument, real_token_share

    CLS, SEP = 1, 2
    docs = []
    for d in range(6):  # documents of 3 sentences of 5 tokens: token ids 100 * (d + 1) + position
        sentences = [[100 * (d + 1) + 5 * s + t for t in range(5)] for s in range(3)]
        docs.append(TokenizedDocument(sentences, [[5 * s + t for t in range(5)] for s in range(3)]))
    max_len = 13  # 11 positions a sequence: two sentences, or a sentence, a [SEP] and a sentence
    full, full_words = pack_documents(docs, max_seq_len=max_len, cls_id=CLS, sep_id=SEP, packing="full_sentences")
    own, _ = pack_documents(docs, max_seq_len=max_len, cls_id=CLS, sep_id=SEP)
    real = lambda seqs: [t for x in seqs for t in x if t > 2]  # noqa: E731
    assert real(full) == real(own) == [t for d in docs for s in d.sentences for t in s]
    assert all(len(x) <= max_len and x[0] == CLS and x[-1] == SEP and x[-2] != SEP for x in full)
    crossing = [x for x in full if len({t // 100 for t in x if t > 2}) == 2]
    assert crossing and all(SEP in x[1:-1] for x in crossing)  # documents kept apart by a [SEP]
    assert all(len({t // 100 for t in x if t > 2}) == 1 for x in own)  # DOC-SENTENCES never mixes
    for x, w in zip(full, full_words):  # word ids: specials -1, words rising
        assert [t <= 2 for t in x] == [v == -1 for v in w]
        words = [v for v in w if v >= 0]
        assert words[0] == 0 and words == sorted(words)
    share = lambda seqs: real_token_share([len(x) for x in seqs], max_len)  # noqa: E731
    assert share(full) > share(own)
    assert share(own) == pytest.approx(sum(len(x) for x in own) / (len(own) * max_len))


def test_token_blocks_fill_every_sequence_but_the_last():
    """The token stream cut into full blocks: every token once, in order, every sequence but the last
    exactly max_seq_len long, documents kept apart by a [SEP], word ids rising within a sequence."""
    from bertology.pretraining.text_corpus import TokenizedDocument, real_token_share

    CLS, SEP = 1, 2
    docs = [
        TokenizedDocument(
            [[100 * (d + 1) + 7 * s + t for t in range(7)] for s in range(3)],
            [[3 * s + t // 3 for t in range(7)] for s in range(3)],
        )
        for d in range(5)
    ]
    max_len = 12
    blocks, words = pack_documents(docs, max_seq_len=max_len, cls_id=CLS, sep_id=SEP, packing="token_blocks")
    real = [t for x in blocks for t in x if t > 2]
    assert real == [t for d in docs for s in d.sentences for t in s]
    assert all(len(x) == max_len for x in blocks[:-1]) and all(x[0] == CLS and x[-1] == SEP for x in blocks)
    assert any(SEP in x[1:-1] for x in blocks)
    for x, w in zip(blocks, words):
        ws = [v for v in w if v >= 0]
        assert ws[0] == 0 and ws == sorted(ws) and [t <= 2 for t in x] == [v == -1 for v in w]
    own, _ = pack_documents(docs, max_seq_len=max_len, cls_id=CLS, sep_id=SEP)
    share = lambda seqs: real_token_share([len(x) for x in seqs], max_len)  # noqa: E731
    assert share(blocks) > 0.95 > share(own)
