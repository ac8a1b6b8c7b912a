"""The English pretraining corpus builder (``bertology.pretraining.english_corpus``, run as
``bertology build-corpus`` or ``scripts/build_english_corpus.py``): the opt-in e-mail source keeps the
author's own prose of a message and nothing else and is left out of the default corpus; a build
de-duplicates, splits by document, is byte-identical when repeated, and fails clearly."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import bertology.pretraining.english_corpus as builder
from bertology.errors import ConfigError, CorpusError
from bertology.pretraining.english_corpus import EnglishCorpusOptions, build_english_corpus

PLAIN = """From someone@example.com  Thu Aug 29 16:42:46 2002
Received: from localhost (localhost [127.0.0.1])
\tby example.org (Postfix) with ESMTP id EDB0C43F9B
From: Ann Writer <ann@example.com>
To: list@example.org
Subject: Re: the new release
Content-Type: text/plain; charset=US-ASCII

On Wed, 28 Aug 2002, Bob Quoted wrote:
> The old build broke on every machine.
> Nobody knew why.

The new release builds cleanly on my laptop.
It took about ten minutes,
and the tests all passed.

See http://www.example.org/release for the notes.

--
Ann Writer, who signs every message
_______________________________________________
List footer that must not be kept
"""

HTML_ONLY = """From: news@example.com
Subject: digest
MIME-Version: 1.0
Content-Type: text/html; charset=utf-8

<html><head><style>p {color: red}</style></head><body><p>The council voted on Tuesday.</p>
<p>Prices rose again.</p></body></html>
"""

ALTERNATIVE = """From: news@example.com
Subject: both
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="XX"

--XX
Content-Type: text/html; charset=utf-8

<p>The HTML copy, which is not read.</p>
--XX
Content-Type: text/plain; charset=utf-8

The plain copy, which is read.
--XX--
"""


def test_email_keeps_only_the_authors_prose():
    paras = builder.email_body_paragraphs(PLAIN)
    assert paras == [
        "The new release builds cleanly on my laptop. It took about ten minutes, and the tests all passed."
    ]


def test_email_html_only_message_loses_its_markup_and_styles():
    assert builder.email_body_paragraphs(HTML_ONLY) == ["The council voted on Tuesday.", "Prices rose again."]


def test_email_prefers_the_plain_text_part():
    assert builder.email_body_paragraphs(ALTERNATIVE) == ["The plain copy, which is read."]


def test_email_source_is_opt_in():
    default = tuple(builder.SOURCES)
    assert "email_ham" not in builder.parse_sources(None)
    assert builder.parse_sources(None) == default
    assert builder.parse_sources("email_ham,default")[-1] == "email_ham"
    assert builder.parse_sources("email_ham,default")[:-1] == default
    assert builder.parse_sources("email_ham,brown,sotu") == ("brown", "sotu", "email_ham")
    with pytest.raises(ConfigError, match="unknown corpus source 'spam'"):
        builder.parse_sources("spam")


# Ten documents in the shipped Brown file's format (a blank line ends a document): document 3 repeats
# document 0 word for word (dropped whole), document 5 repeats a line of document 1 (that line dropped).
PLANTED_DOCS = [
    [f"Document {i} says something about topic {i}.", f"It has a second line, number {i}."] for i in range(10)
]
PLANTED_DOCS[3] = list(PLANTED_DOCS[0])
PLANTED_DOCS[5] = [PLANTED_DOCS[1][0].upper(), "Its own line stays in the corpus."]


def _planted_brown(path: Path) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write("\n\n".join("\n".join(d) for d in PLANTED_DOCS) + "\n")
    return path


def _documents(path: Path) -> list[list[str]]:
    text = gzip.decompress(path.read_bytes()).decode("utf-8")
    return [block.split("\n") for block in text.split("\n\n") if block.strip()]


def test_build_deduplicates_splits_by_document_and_repeats_byte_for_byte(tmp_path):
    brown = _planted_brown(tmp_path / "brown.txt.gz")
    options = EnglishCorpusOptions(
        output_dir=tmp_path / "a",
        sources=("brown",),
        heldout_fraction=0.2,
        seed=3,
        cache=tmp_path / "cache",
        brown=brown,
    )
    manifest_path = build_english_corpus(options)
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    src = manifest["sources"]["brown"]
    assert src["duplicate_documents_dropped"] == 1 and src["duplicate_lines_dropped"] == 1
    train, held = _documents(tmp_path / "a/train/brown.txt.gz"), _documents(tmp_path / "a/heldout/brown.txt.gz")
    assert (len(train), len(held)) == (7, 2)  # 9 distinct documents, round(0.2 * 9) = 2 held out
    assert not {tuple(d) for d in train} & {tuple(d) for d in held}
    kept = sorted(tuple(d) for d in train + held)
    expected = [tuple(d) for i, d in enumerate(PLANTED_DOCS) if i != 3]
    expected[4] = (PLANTED_DOCS[5][1],)  # document 5 (index 4 once 3 is gone) loses its repeated line
    assert kept == sorted(expected)
    assert src["train"]["documents"] == 7 and src["heldout"]["words"] == sum(len(ln.split()) for d in held for ln in d)
    assert manifest["totals"]["train"]["documents"] == 7 and manifest["skipped"] == {}

    build_english_corpus(replace(options, output_dir=tmp_path / "b"))
    for part in ("train", "heldout"):
        assert (tmp_path / "a" / part / "brown.txt.gz").read_bytes() == (
            tmp_path / "b" / part / "brown.txt.gz"
        ).read_bytes()
    other = replace(options, output_dir=tmp_path / "c", seed=4)
    build_english_corpus(other)
    assert (
        _documents(tmp_path / "c/heldout/brown.txt.gz") != held
        or _documents(tmp_path / "c/train/brown.txt.gz") != train
    )


def test_build_skips_an_unreadable_source_or_fails_when_strict(tmp_path):
    missing = tmp_path / "no-such-brown.txt.gz"
    options = EnglishCorpusOptions(
        output_dir=tmp_path / "out", sources=("brown",), cache=tmp_path / "cache", brown=missing
    )
    manifest = json.loads(build_english_corpus(options).read_text(encoding="utf-8"))
    assert "brown" in manifest["skipped"] and str(missing) in manifest["skipped"]["brown"]
    with pytest.raises(CorpusError, match="brown.*no-such-brown"):
        build_english_corpus(replace(options, output_dir=tmp_path / "strict", strict=True))
    assert not (tmp_path / "strict").exists()
    with pytest.raises(ConfigError, match="heldout_fraction"):
        build_english_corpus(replace(options, heldout_fraction=1.0))


def test_script_is_the_library_command_line(tmp_path):
    """``scripts/build_english_corpus.py`` (recorded in the shipped models' cards) still runs, and records itself."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "build_english_corpus.py"
    brown = _planted_brown(tmp_path / "brown.txt.gz")
    args = ["--out", str(tmp_path / "out"), "--sources", "brown", "--brown", str(brown), "--cache", str(tmp_path / "c")]
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "out/manifest.json").read_text(encoding="utf-8"))
    assert manifest["command"].startswith("python scripts/build_english_corpus.py --out ")
    bad = subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path / "x"), "--sources", "spam"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "unknown corpus source 'spam'" in bad.stderr


def test_build_refuses_a_folder_with_other_sources_and_drops_a_skipped_sources_old_files(tmp_path):
    brown = _planted_brown(tmp_path / "brown.txt.gz")
    out = tmp_path / "corpus"
    options = EnglishCorpusOptions(output_dir=out, sources=("brown",), cache=tmp_path / "cache", brown=brown)
    build_english_corpus(options)
    build_english_corpus(options)  # an earlier build of the same sources is simply replaced
    (out / "train" / "gcide.txt.gz").write_bytes(b"")  # pretraining would read it with brown's
    with pytest.raises(ConfigError, match=r"would not replace \(train/gcide.txt.gz\)"):
        build_english_corpus(options)
    (out / "train" / "gcide.txt.gz").unlink()
    manifest = json.loads(
        build_english_corpus(replace(options, brown=tmp_path / "gone.gz")).read_text(encoding="utf-8")
    )
    assert (
        "brown" in manifest["skipped"] and not list((out / "train").iterdir()) and not list((out / "heldout").iterdir())
    )
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        build_english_corpus(replace(options, output_dir=tmp_path / "a-file"))
