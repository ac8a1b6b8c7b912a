"""FreeDict dictd parser on a hand-written fixture, and the train/test split."""

import gzip

import pandas as pd
import pytest

from bertology.probes.embeddings.dictionaries import (DictionaryError, bilingual_pairs, filter_to_vocab, parse_dictd,
                                 read_freedict, split_dictionary)

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64(n: int) -> str:
    out = ""
    while True:
        out = _B64[n % 64] + out
        n //= 64
        if n == 0:
            return out


ENTRIES = [
    ("00databaseshort", "00-database-short\nEnglish-French toy\n"),
    ("dog", "dog /dɒɡ/ <n>\nchien, chienne; toutou\n"),
    (" ago", "... ago /ɐɡˈəʊ/\nil y a ...\n"),
    ("come across", "come across /kʌməkrɔs/\nrencontrer\n"),
    ("surmise", "surmise /səːmaiz/\n1. conjecturer, se douter de\n2. supposer\n"),
    ("paris", "Paris /pari/ <n>\nParis\n"),
    ("bank", "bank /baŋk/\nbanque [fin.] (établissement), rive\n"
             "      \"the bank is closed\" - la banque est fermée\n"
             "   Synonym: {shore}\n see: {banks}, {banking}\n         Note: also a verb\n"),
    ("dog", "dog /dɒɡ/ <n>\nchien, chienne; toutou\n"),  # duplicate entry: same text again
]


def _write(tmp_path, name="freedict-eng-fra"):
    data, index, offset = b"", [], 0
    for head, text in ENTRIES:
        raw = text.encode("utf-8")
        index.append(f"{head}\t{_b64(offset)}\t{_b64(len(raw))}")
        data += raw
        offset += len(raw)
    (tmp_path / f"{name}.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / f"{name}.dict.dz", "wb") as fh:
        fh.write(data)


def test_parser_handles_freedict_quirks(tmp_path):
    _write(tmp_path)
    df = read_freedict("eng-fra", tmp_path)
    pairs = set(zip(df["source"], df["target"]))
    assert pairs == {("dog", "chien"), ("dog", "chienne"), ("dog", "toutou"), ("surmise", "conjecturer"),
                     ("surmise", "supposer"), ("bank", "banque"), ("bank", "rive")}
    assert (df["licence"].str.contains("GPL-2.0")).all() and (df["dictionary"] == "freedict-eng-fra").all()
    assert set(df["source_lang"]) == {"eng"} and set(df["target_lang"]) == {"fra"}


def test_union_with_reverse_dictionary(tmp_path):
    _write(tmp_path)
    _write(tmp_path, "freedict-fra-eng")  # same content read as fra->eng, reversed into eng->fra
    df = bilingual_pairs("eng", "fra", directory=tmp_path)
    assert ("chien", "dog") in set(zip(df["source"], df["target"]))
    assert ("dog", "chien") in set(zip(df["source"], df["target"]))


def test_missing_files_name_the_apt_package(tmp_path):
    with pytest.raises(DictionaryError, match="apt-get install dict-freedict-eng-spa"):
        read_freedict("eng-spa", tmp_path)


def test_malformed_index_line(tmp_path):
    with pytest.raises(DictionaryError, match=r"toy\.index:2"):
        parse_dictd("dog\tA\tB\nbroken line\n", b"dog", "toy")


def test_split_keeps_test_sources_out_of_training():
    pairs = pd.DataFrame({"source": [f"w{i // 2}" for i in range(400)], "target": [f"t{i}" for i in range(400)]})
    train, test = split_dictionary(pairs, n_test_sources=50, n_train=100, seed=1, exclude_from_train={"w3"})
    assert test["source"].nunique() == 50 and len(test) == 100 and len(train) == 100
    assert not set(train["source"]) & set(test["source"]) and "w3" not in set(train["source"])
    again, _ = split_dictionary(pairs, n_test_sources=50, n_train=100, seed=1, exclude_from_train={"w3"})
    assert train.equals(again)
    assert len(filter_to_vocab(pairs, ["w0", "w1"], ["t0", "t3"])) == 2
    with pytest.raises(DictionaryError, match="cannot hold out"):
        split_dictionary(pairs, n_test_sources=500)
