"""scripts/build_english_corpus.py (standalone, standard library only): the opt-in e-mail source
keeps the author's own prose of a message and nothing else, and is left out of the default corpus."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "build_english_corpus.py"


@pytest.fixture(scope="module")
def builder():
    spec = importlib.util.spec_from_file_location("build_english_corpus", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_email_keeps_only_the_authors_prose(builder):
    paras = builder.email_body_paragraphs(PLAIN)
    assert paras == [
        "The new release builds cleanly on my laptop. It took about ten minutes, and the tests all passed."
    ]


def test_email_html_only_message_loses_its_markup_and_styles(builder):
    assert builder.email_body_paragraphs(HTML_ONLY) == ["The council voted on Tuesday.", "Prices rose again."]


def test_email_prefers_the_plain_text_part(builder):
    assert builder.email_body_paragraphs(ALTERNATIVE) == ["The plain copy, which is read."]


def test_email_source_is_opt_in(builder):
    assert "email_ham" not in builder.parse_sources(None)
    assert builder.parse_sources(None) == builder.SOURCES
    assert builder.parse_sources("email_ham,default")[-1] == "email_ham"
    assert builder.parse_sources("email_ham,default")[:-1] == builder.SOURCES
    assert builder.parse_sources("email_ham,brown,sotu") == ["brown", "sotu", "email_ham"]
    with pytest.raises(SystemExit, match="unknown source 'spam'"):
        builder.parse_sources("spam")
