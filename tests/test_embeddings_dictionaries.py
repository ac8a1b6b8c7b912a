"""FreeDict dictd parser on a hand-written fixture, and the train/test split."""

import gzip

import pandas as pd
import pytest

from bertology.probes.embeddings.dictionaries import (
    DictionaryError,
    bilingual_pairs,
    filter_to_vocab,
    parse_dictd,
    read_freedict,
    split_dictionary,
)

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
    (
        "bank",
        "bank /baŋk/\nbanque [fin.] (établissement), rive\n"
        '      "the bank is closed" - la banque est fermée\n'
        "   Synonym: {shore}\n see: {banks}, {banking}\n         Note: also a verb\n",
    ),
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
    assert pairs == {
        ("dog", "chien"),
        ("dog", "chienne"),
        ("dog", "toutou"),
        ("surmise", "conjecturer"),
        ("surmise", "supposer"),
        ("bank", "banque"),
        ("bank", "rive"),
    }
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


# --- a changed dictionary is a new run (issue 26, item 8) ---------------------------------------


def _letters(i: int) -> str:
    """i as a lower-case letter word (the dictd parser drops words with digits)."""
    return "".join("abcdefghijklmnopqrstuvwxyz"[int(d)] for d in f"{i:02d}")


def _plant_alignment_inputs(tmp_path, n_words: int = 40, dim: int = 6):
    """Two word2vec files (target = a rotation of source) and a dictd eng-fra pairing word i with
    mot i, in ``tmp_path``; returns the dictionary folder."""
    import numpy as np

    rng = np.random.default_rng(0)
    X = rng.normal(size=(n_words, dim))
    Q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    for name, words, M in (
        ("src.txt", [f"word{_letters(i)}" for i in range(n_words)], X),
        ("tgt.txt", [f"mot{_letters(i)}" for i in range(n_words)], X @ Q),
    ):
        lines = [f"{n_words} {dim}"] + [w + " " + " ".join(f"{v:.6f}" for v in row) for w, row in zip(words, M)]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    folder = tmp_path / "dictd"
    folder.mkdir()
    _write_entries(folder, [(f"word{_letters(i)}", f"word{_letters(i)}\nmot{_letters(i)}\n") for i in range(n_words)])
    return folder


def _write_entries(folder, entries, name="freedict-eng-fra"):
    data, index, offset = b"", [], 0
    for head, text in entries:
        raw = text.encode("utf-8")
        index.append(f"{head}\t{_b64(offset)}\t{_b64(len(raw))}")
        data += raw
        offset += len(raw)
    (folder / f"{name}.index").write_text("\n".join(index) + "\n", encoding="utf-8")
    with gzip.open(folder / f"{name}.dict.dz", "wb") as fh:
        fh.write(data)


def test_changed_dictionary_gives_a_new_run(tmp_path):
    import json

    from bertology.studies import run_study

    folder = _plant_alignment_inputs(tmp_path)
    overrides = {
        "source": str(tmp_path / "src.txt"),
        "target": str(tmp_path / "tgt.txt"),
        "dictionary": "eng-fra",
        "dictd_dir": str(folder),
        "n_test": 10,
        "n_train": 30,
        "normalization": "none",
    }
    results = tmp_path / "results"
    logs: list[str] = []
    first = run_study("align_spaces", overrides=overrides, results_root=results, log=logs.append)
    inputs = json.loads((first / "manifest.json").read_text())["inputs"]
    assert inputs["dictionary_files"]["kind"] == "dictionary" and len(inputs["dictionary_files"]["sha256"]) == 64
    assert inputs["source"]["kind"] == "file"  # the word2vec files: generic config fingerprints
    assert run_study("align_spaces", overrides=overrides, results_root=results, log=logs.append) == first
    assert any("complete run found" in line for line in logs)
    # one translation changed: the same config, another dictionary content -> another run
    _write_entries(
        folder, [(f"word{_letters(i)}", f"word{_letters(i)}\nmot{_letters(1 if i == 0 else i)}\n") for i in range(40)]
    )
    second = run_study("align_spaces", overrides=overrides, results_root=results, log=logs.append)
    assert second != first and (second / "manifest.json").is_file()
    assert (
        json.loads((second / "manifest.json").read_text())["inputs"]["dictionary_files"]["sha256"]
        != inputs["dictionary_files"]["sha256"]
    )
    # an explicit run id pointed at the old run recomputes rather than mixing
    logs.clear()
    run_study("align_spaces", overrides=overrides, results_root=results, run_id=first.name, log=logs.append)
    assert any("inputs changed" in line and "dictionary_files" in line for line in logs)


def test_dictionary_folder_from_environment(tmp_path, monkeypatch):
    from bertology.probes.embeddings.dictionaries import bilingual_files

    _write(tmp_path)
    monkeypatch.setenv("BERTOLOGY_DICTD_DIR", str(tmp_path))
    assert [p.name for p in bilingual_files("eng", "fra")] == ["freedict-eng-fra.index", "freedict-eng-fra.dict.dz"]
    assert len(bilingual_pairs("eng", "fra")) > 0
