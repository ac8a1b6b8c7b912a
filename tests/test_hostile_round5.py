"""Hostile inputs, round five (issue 55): each now stops with one clear ``error:`` line naming the
path, file and line, or option (exit code 2), writes nothing outside the folders named, and leaves
nothing half-written behind.

1 every operating-system error is one line naming the path · 2 an empty ``--out`` · 3 a corpus
with nothing to score for the structural probe · 6 a CSV row with more fields than the header · 7
duplicate CSV columns · 8 one label rule for every task format · 9 trainers lock their run folder
· 10 a study folder that is a symbolic link · 12 a task file whose sentences are not the store's ·
and the smaller ones: a tokenizer that makes [UNK] of every word, a 10,000-label error, the
``bad_trees`` advice, a killed ``build-corpus``'s temporaries, a full disk's path.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from cli_inprocess import run_cli

from bertology.errors import ConfigError, CorpusError


def _refused(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit code 2, one ``error:`` line naming ``needles``, no traceback."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], (needle, proc.stderr)


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def tiny_brown(monkeypatch):
    """``build-corpus --sources brown`` reading three planted documents instead of the Brown corpus."""
    from bertology.pretraining import english_corpus

    docs = [[f"Document {k} says a thing.", f"It says another thing {k}."] for k in range(3)]
    monkeypatch.setitem(english_corpus.READERS, "brown", lambda opts: (docs, {"package": "planted"}))
    return docs


# --------------------------------------------------------------------------- 1. every OSError: one line


def test_1_a_cache_that_is_a_file_is_named(tmp_path, tiny_brown):
    (tmp_path / "c").write_text("x")
    proc = run_cli("build-corpus", "--out", str(tmp_path / "o"), "--sources", "brown", "--cache", str(tmp_path / "c"))
    _refused(proc, f"{tmp_path / 'c'}: is a file, where a folder is needed")
    assert not (tmp_path / "o").exists()


def test_1_a_train_folder_that_is_a_file_is_named(tmp_path, tiny_brown):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "train").write_text("x")
    proc = run_cli("build-corpus", "--out", str(tmp_path / "o"), "--sources", "brown", "--cache", str(tmp_path / "k"))
    _refused(proc, f"{tmp_path / 'o' / 'train'}: is a file, where a folder is needed")
    assert (tmp_path / "o" / "train").read_text() == "x"
    assert not [p for p in _tree(tmp_path / "o") if p.endswith(".tmp")]


def test_1_a_name_too_long_is_named(tmp_path, tiny_brown):
    out = tmp_path / ("x" * 300)
    proc = run_cli("build-corpus", "--out", str(out), "--sources", "brown", "--cache", str(tmp_path / "k"))
    _refused(proc, str(out), "File name too long")


def test_1_a_dangling_link_and_a_link_loop_are_named(tmp_path, tiny_brown):
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    proc = run_cli(
        "build-corpus", "--out", str(tmp_path / "dangling"), "--sources", "brown", "--cache", str(tmp_path / "k")
    )
    _refused(proc, f"{tmp_path / 'dangling'}: a symbolic link to {tmp_path / 'nowhere'}, which does not exist")
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    proc = run_cli(
        "build-corpus", "--out", str(tmp_path / "loop_a"), "--sources", "brown", "--cache", str(tmp_path / "k")
    )
    _refused(proc, str(tmp_path / "loop_a"), "loop")


def test_1_a_results_folder_that_is_a_dangling_link_is_named(tmp_path):
    from bertology.cli import path_error_message
    from bertology.runs import run_analysis

    results = tmp_path / "results"
    results.symlink_to(tmp_path / "gone", target_is_directory=True)
    with pytest.raises(OSError) as caught:
        run_analysis("toy", "", lambda ctx: None, {}, seed=0, run_dir=results / "toy" / "run", log=lambda m: None)
    assert path_error_message(caught.value) == (
        f"{results}: a symbolic link to {tmp_path / 'gone'}, which does not exist, where a folder is needed"
    )
    assert not (tmp_path / "gone").exists()


def test_1_any_other_os_error_is_one_line_naming_the_path(monkeypatch, tmp_path):
    from bertology.pretraining import english_corpus

    def broken(options):
        raise OSError(errno.EIO, "Input/output error", str(tmp_path / "disk"))

    monkeypatch.setattr(english_corpus, "build_english_corpus", broken)
    _refused(run_cli("build-corpus", "--out", str(tmp_path / "o")), f"{tmp_path / 'disk'}: Input/output error")


# --------------------------------------------------------------------------- 2. an empty path


@pytest.mark.parametrize("args", [["--out", ""], ["--out="], ["--out", "o", "--cache", ""]])
def test_2_an_empty_path_is_refused_and_nothing_is_built_here(tmp_path, monkeypatch, tiny_brown, args):
    monkeypatch.chdir(tmp_path)
    proc = run_cli("build-corpus", "--sources", "brown", *args)
    _refused(proc, "an empty value")
    assert _tree(tmp_path) == []


def test_2_the_script_refuses_an_empty_out_too(tmp_path, monkeypatch, capsys):
    from bertology.pretraining.english_corpus import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["--out", "", "--sources", "brown"])
    assert exc.value.code == 2 and "--out: an empty value" in capsys.readouterr().err
    assert _tree(tmp_path) == []


# --------------------------------------------------------------------------- 3. nothing to score


def _conllu(path: Path, sentences: list[list[tuple[str, str, int]]]) -> Path:
    """(word, upos, head) per word, one list per sentence."""
    lines = []
    for k, words in enumerate(sentences):
        lines.append(f"# sent_id = s{k}")
        for i, (word, upos, head) in enumerate(words, 1):
            lines.append(f"{i}\t{word}\t{word}\t{upos}\t_\t_\t{head}\t{'root' if head == 0 else 'dep'}\t_\t_")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


PUNCT_ONLY = [(".", "PUNCT", 0), (",", "PUNCT", 1), ("!", "PUNCT", 1)]
WORDS = [("The", "DET", 2), ("dog", "NOUN", 3), ("barks", "VERB", 0), (".", "PUNCT", 3)]


def test_3_a_corpus_of_punctuation_is_refused_before_any_training(tmp_path, minilm_tokenizer):
    from bertology.testing import make_tiny_bert

    model_dir = tmp_path / "tiny"
    make_tiny_bert(minilm_tokenizer).save_pretrained(model_dir)
    minilm_tokenizer.save_pretrained(model_dir)
    corpus = _conllu(tmp_path / "punct.conllu", [PUNCT_ONLY] * 12)
    out = tmp_path / "results"
    args = ["structural", "--model", str(model_dir), "--corpus", str(corpus), "--limit", "0", "--seeds", "0"]
    proc = run_cli(*args, "--max-epochs", "1", "--out", str(out))  # (so every rerun: no run was written)
    _refused(proc, "corpus 'punct': no sentence has a scoreable word")
    assert not out.exists() or _tree(out) == []  # no run written with None scores
    from bertology import paths

    assert not paths.stores_dir().exists() or _tree(paths.stores_dir()) == []  # nothing extracted


def test_3_a_split_without_a_scoreable_sentence_is_refused():
    from bertology.corpus import Corpus, Sentence
    from bertology.probes.probing.structural import (
        corpus_trees,
        require_scoreable_splits,
        scoreable,
        split_sentences,
    )

    def sentence(k, words):
        return Sentence(
            sent_id=f"s{k}",
            words=[w for w, _, _ in words],
            upos=[u for _, u, _ in words],
            heads=[h for _, _, h in words],
        )

    mixed = Corpus(
        "mixed", [sentence(k, WORDS if k in (3, 7, 11) else PUNCT_ONLY) for k in range(12)], {"deps": "gold"}
    )
    trees = corpus_trees(mixed)  # some sentence has a word to score
    assert [k for k in range(12) if scoreable(trees, k)] == [3, 7, 11]
    split = split_sentences(trees.usable, 0)
    assert not any(scoreable(trees, int(k)) for k in split["dev"])  # the planted case
    with pytest.raises(CorpusError, match=r"the dev split \(1 sentence\(s\)\) has no sentence with a scoreable word"):
        require_scoreable_splits(trees, split)
    require_scoreable_splits(trees, {"train": split["train"], "dev": [3], "test": [7]})  # each has one: passes


def test_3_scores_missing_from_a_written_run_print_as_n_a():
    import pandas as pd

    from bertology.cli.structural import summary_lines
    from bertology.studies._summaries import interval

    summary = pd.DataFrame(
        [
            {"encoder": "trained", "probe": "distance", "best_layer": 1, "selection_metric": "uuas", "rank": 8,
             "n_seeds": 1, "metric": "uuas", "score": None, "low": None, "high": None, "small_sample": False},
        ]
    )  # fmt: skip
    baselines = pd.DataFrame([{"encoder": "linear", "metric": "uuas", "score": None, "low": None, "high": None}])
    lines = summary_lines(summary, baselines)
    assert "UUAS n/a (no interval)" in lines[0] and lines[1].endswith("UUAS n/a (no interval)")
    assert interval(None, None, None) == "n/a" and interval(float("nan"), 0.1, 0.2) == "n/a"


# --------------------------------------------------------------------------- 6, 7, 8. task files


def _task(tmp_path: Path, name: str, text: str):
    from bertology.finetuning.tasks import read_task_file

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path, (lambda: read_task_file(path))


def test_6_a_csv_row_with_more_fields_than_the_header_names_file_and_line(tmp_path):
    path, read = _task(tmp_path, "t.csv", 'text,label\n"fine, quoted",pos\nhello, world,pos\nok,neg\n')
    with pytest.raises(CorpusError, match=rf"{path}:3: 3 fields for the header's 2 \(text,label\); quote a text"):
        read()
    tsv, read_tsv = _task(tmp_path, "t.tsv", "text\tlabel\na\tb\tpos\n")
    with pytest.raises(CorpusError, match=rf"{tsv}:2: 3 fields .*a tab"):
        read_tsv()


def test_6_a_quoted_comma_is_one_text_and_the_line_numbers_count_blank_lines(tmp_path):
    path, read = _task(tmp_path, "t.csv", 'text,label\n"hello, world",pos\n\nbad,  \n')
    with pytest.raises(CorpusError, match=rf"{path}:4: an empty or blank label"):
        read()
    _, read = _task(tmp_path, "u.csv", 'text,label\n"hello, world",pos\nfine,neg\n')
    kind, examples = read()
    assert kind == "sentence" and examples[0].words == ("hello,", "world") and examples[0].label == "pos"


def test_7_duplicate_csv_columns_are_refused(tmp_path):
    path, read = _task(tmp_path, "t.csv", "text,label,label\nhello,pos,neg\n")
    with pytest.raises(CorpusError, match=rf"{path}:1: the header names 'label' more than once"):
        read()


@pytest.mark.parametrize("label", ["", "  ", "\t"])
def test_8_an_empty_or_blank_jsonl_label_is_refused(tmp_path, label):
    path, read = _task(
        tmp_path,
        "t.jsonl",
        json.dumps({"text": "a b", "label": "pos"}) + "\n" + json.dumps({"text": "c", "label": label}),
    )
    with pytest.raises(CorpusError, match=rf"{path}:2: an empty or blank label"):
        read()


def test_8_surrounding_white_space_is_stripped_in_every_format(tmp_path):
    rows = [("a b", "pos "), ("c d", "pos"), ("e f", " neg"), ("g h", "neg")]
    _, read = _task(tmp_path, "t.jsonl", "".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows))
    assert sorted({ex.label for ex in read()[1]}) == ["neg", "pos"]
    _, read = _task(tmp_path, "t.csv", "text,label\n" + "".join(f"{t},{lab}\n" for t, lab in rows))
    assert sorted({ex.label for ex in read()[1]}) == ["neg", "pos"]
    token = json.dumps({"words": ["a", "b"], "labels": ["N ", "V"]}) + "\n"
    _, read = _task(tmp_path, "tok.jsonl", token)
    assert read()[1][0].label == ("N", "V")
    path, read = _task(tmp_path, "blank.jsonl", json.dumps({"words": ["a", "b"], "labels": ["N", " "]}) + "\n")
    with pytest.raises(CorpusError, match=rf"{path}:1: word 1 \('b'\): an empty or blank label"):
        read()
    # an integer and a string that read as one label are still ambiguous (round four), spaces or not
    path, read = _task(tmp_path, "amb.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": " 1"}\n')
    with pytest.raises(CorpusError, match="ambiguous"):
        read()


def test_8_the_probing_task_files_follow_the_same_rule(tmp_path):
    from bertology.probes.probing.tasks import TaskError, read_jsonl

    def write(name, labels):
        path = tmp_path / name
        targets = [{"span1": [0, 1], "label": lab} for lab in labels]
        path.write_text(json.dumps({"text": "The cat sat .", "targets": targets}) + "\n")
        return path

    assert read_jsonl(write("ok.jsonl", ["N ", "N", " V"])).labels == ["N", "V"]
    with pytest.raises(TaskError, match=r"bad.jsonl:1 target 1: an empty or blank label"):
        read_jsonl(write("bad.jsonl", ["N", "  "]))


def test_8_the_docs_state_the_label_rule():
    docs = Path(__file__).resolve().parents[1] / "docs"
    for name in ("finetuning.md", "METHODS.md"):  # fine-tuning's task files; the probes' (jiant-style)
        assert "surrounding white space is stripped" in (docs / name).read_text(), name


# --------------------------------------------------------------------------- 9. trainers lock their run folder


@pytest.mark.parametrize("trainer", ["finetuning", "pretraining"])
def test_9_a_trainer_holds_its_run_folder_lock_and_a_second_one_waits(tmp_path, monkeypatch, trainer):
    from types import SimpleNamespace

    from bertology import atomic

    if trainer == "finetuning":
        import bertology.finetuning.trainer as module

        public, inner = module.run_finetuning, "_run_finetuning"
    else:
        import bertology.pretraining.trainer as module

        public, inner = module.run_pretraining, "_run_pretraining"
    run_dir = tmp_path / "runs" / "r"
    log: list[str] = []

    def train(cfg, **kwargs):  # one "training": a metrics line, with the lock checked held
        with pytest.raises(atomic.LockHeld):
            with atomic.folder_lock(cfg.run_dir, wait=False):
                pass
        with open(cfg.run_dir / "metrics.jsonl", "a") as fh:
            fh.write("{}\n")
        log.append("trained")
        return cfg.run_dir

    monkeypatch.setattr(module, inner, train)
    cfg = SimpleNamespace(run_dir=run_dir, model="minilm-l6")  # a registry model: resolved before the lock
    run_dir.mkdir(parents=True)
    with atomic.folder_lock(run_dir):  # another trainer holds the folder
        second = threading.Thread(target=lambda: public(cfg))
        second.start()
        second.join(timeout=1.5)
        assert second.is_alive() and log == []  # it waits, writing nothing
    second.join(timeout=60)
    assert not second.is_alive() and log == ["trained"]
    assert (run_dir / "metrics.jsonl").read_text() == "{}\n"


def test_9_a_refused_start_leaves_no_run_folder(tmp_path):
    from bertology.finetuning import FinetuneConfig, run_finetuning

    task = tmp_path / "t.csv"
    task.write_text("text,label\nhello, world,pos\n")
    cfg = FinetuneConfig(task=str(task), run_name="r", output_root=str(tmp_path / "models"))
    with pytest.raises(CorpusError, match=rf"{task}:2: 3 fields"):
        run_finetuning(cfg)
    assert not (tmp_path / "models").exists()  # nor the folder made to hold the run


# --------------------------------------------------------------------------- 10. a linked study folder


def test_10_a_linked_study_or_run_folder_is_never_written_through(tmp_path):
    from bertology.runs import run_analysis

    results = tmp_path / "results"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "run").mkdir(parents=True)
    results.mkdir()
    (results / "toy").symlink_to(elsewhere, target_is_directory=True)
    ran: list[str] = []
    with pytest.raises(ConfigError, match=rf"{results / 'toy'}: the study folder is a symbolic link"):
        run_analysis("toy", "", lambda ctx: ran.append("x"), {}, seed=0, run_dir=results / "toy" / "a", log=print)
    (results / "other").mkdir()
    (results / "other" / "b").symlink_to(elsewhere / "run", target_is_directory=True)
    with pytest.raises(ConfigError, match="the run folder is a symbolic link"):
        run_analysis("other", "", lambda ctx: ran.append("x"), {}, seed=0, run_dir=results / "other" / "b", log=print)
    assert ran == [] and _tree(elsewhere) == ["run"]


# --------------------------------------------------------------------------- 12. a task file's sentences


def _task_file(path: Path, sentences: list[list[str]]) -> Path:
    lines = [json.dumps({"text": " ".join(w), "targets": [{"span1": [0, 1], "label": w[0]}]}) for w in sentences]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_12_a_task_file_in_another_order_than_the_store_is_refused_naming_the_line(tmp_path, small_corpus):
    from bertology.probes.probing import TaskError, build_task, probe_layers, read_jsonl

    words = [list(s.words) for s in small_corpus.sentences[:6]]
    corpus = small_corpus.subset(6)
    same = _task_file(tmp_path / "same.jsonl", words)
    assert build_task(corpus, str(same)).n_sentences == 6
    shuffled = _task_file(tmp_path / "shuffled.jsonl", [words[0], words[2], words[1], *words[3:]])
    with pytest.raises(TaskError, match=rf"{shuffled}:2: the task's sentence 1 .* is not the corpus's sentence 1"):
        build_task(corpus, str(shuffled))
    with pytest.raises(TaskError, match=rf"{shuffled}:2: "):
        probe_layers(None, corpus, read_jsonl(shuffled))  # an EdgeTask read before: checked too
    longer = _task_file(tmp_path / "longer.jsonl", [*words, words[0]])
    with pytest.raises(TaskError, match=rf"{longer}:7: sentence 6 is beyond the corpus's 6 sentences"):
        build_task(corpus, str(longer))


# --------------------------------------------------------------------------- smaller ones


def test_a_tokenizer_of_unknown_words_is_warned_about_and_no_guess_prints_as_none(tmp_path, minilm_tokenizer):
    from transformers import BertTokenizerFast

    from bertology.attribution import attribute, unknown_words
    from bertology.inspection import masked_predictions
    from bertology.models import from_modules
    from bertology.testing import make_tiny_bert

    tokenizer = BertTokenizerFast(
        vocab={t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"])}
    )
    lm = from_modules("unk-model", make_tiny_bert(minilm_tokenizer, mlm=True), tokenizer)  # 30522 outputs, 6 tokens
    assert unknown_words(lm, ["hello", "world"]) == [0, 1] and unknown_words(lm, ["the", "x"]) == [1]
    result = attribute(lm, ["hello", "world"], 0, methods="gxi")
    assert result.target == "the"  # the one token the vocabulary has that is not special
    guesses = masked_predictions(lm, ["hello", "world"], 0, k=5)
    assert guesses["token"].tolist() == ["the"]
    model_dir = tmp_path / "unk-model"
    lm.model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    proc = run_cli(
        "attribute", "--model", str(model_dir), "--sentence", "hello world", "--word", "0", "--method", "gxi"
    )
    assert proc.returncode == 0, proc.stderr
    assert "tokenizer makes [UNK] of every word of the sentence" in proc.stderr and "'None'" not in proc.stdout
    assert "of 'the'" in proc.stdout


def test_a_10000_label_error_is_cut_to_a_line(tmp_path):
    from bertology.finetuning.tasks import build_task

    path = tmp_path / "many.jsonl"
    rows = [{"text": f"w{k}", "label": f"label-{k}", "document": f"d{k}"} for k in range(10_000)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(CorpusError) as caught:
        build_task(str(path))
    message = str(caught.value)
    assert "is in no train example" in message and "more)" in message and len(message) < 2_000


def test_the_bad_tree_advice_says_what_a_cli_user_can_do(tmp_path):
    from bertology.corpus import load_corpus

    path = _conllu(tmp_path / "bad.conllu", [[("a", "X", 0), ("b", "X", 0)]])  # two roots
    with pytest.raises(CorpusError) as caught:
        load_corpus(str(path))
    message = str(caught.value)
    assert "fix the HEAD column" in message and "from Python, read_conllu(path, bad_trees='drop')" in message
    assert not message.rstrip().endswith("pass bad_trees='drop' to keep such sentences without dependencies")


def test_a_killed_builds_temporaries_are_removed_by_the_next_build(tmp_path, tiny_brown):
    out = tmp_path / "o"
    for part in ("train", "heldout"):
        (out / part).mkdir(parents=True)
        (out / part / ".brown.txt.gz.k1ll3d.tmp").write_bytes(b"half")
    (out / ".manifest.json.x1y2.tmp").write_text("{")
    proc = run_cli("build-corpus", "--out", str(out), "--sources", "brown", "--cache", str(tmp_path / "k"))
    assert proc.returncode == 0, proc.stderr
    assert _tree(out) == [".lock", "heldout", "heldout/brown.txt.gz", "manifest.json", "train", "train/brown.txt.gz"]


def test_a_full_disk_names_the_file_being_written(tmp_path, monkeypatch, tiny_brown):
    from bertology import atomic
    from bertology.pretraining import english_corpus

    def full_disk(path, docs):
        with atomic.atomic_path(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a write() on a full disk: no file named

    monkeypatch.setattr(english_corpus, "write_gz", full_disk)
    out = tmp_path / "o"
    proc = run_cli("build-corpus", "--out", str(out), "--sources", "brown", "--cache", str(tmp_path / "k"))
    _refused(proc, f"{out / 'train' / 'brown.txt.gz'}: No space left on device")
    assert not [p for p in _tree(out) if p.endswith(".tmp")]


def test_extracting_with_a_tokenizer_of_unknown_words_warns(tmp_path, minilm_tokenizer, small_corpus, caplog):
    """The smaller item of round five: a tokenizer that makes [UNK] of (nearly) every word loaded and
    extracted silently; every word's vector is then the same token's. Extraction now says so."""
    import logging

    from transformers import BertTokenizerFast

    from bertology.models import from_modules
    from bertology.store import extract
    from bertology.testing import make_tiny_bert

    tokenizer = BertTokenizerFast(
        vocab={t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the"])}
    )
    unk = from_modules("unk-model", make_tiny_bert(minilm_tokenizer), tokenizer)
    with caplog.at_level(logging.WARNING, logger="bertology.store.plan"):
        extract(unk, small_corpus, root=tmp_path / "a", progress=False, attentions=False)
    assert any("makes [UNK] of 9" in r.getMessage() and "unk-model" in r.getMessage() for r in caplog.records)
    caplog.clear()
    fine = from_modules("tiny", make_tiny_bert(minilm_tokenizer), minilm_tokenizer)
    with caplog.at_level(logging.WARNING, logger="bertology.store.plan"):
        extract(fine, small_corpus, root=tmp_path / "b", progress=False, attentions=False)
    assert not [r for r in caplog.records if "[UNK]" in r.getMessage()]
