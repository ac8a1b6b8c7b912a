"""Plain-text corpora that exist offline, as lists of tokenised sentences (for word2vec, drift).

- ``brown``: the bundled Brown corpus text (1961 American English, ``workbench/data/brown.txt.gz``).
- ``kjv``: the King James Bible (1611), from Debian's ``bible-kjv`` + ``bible-kjv-text``.
"""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
from pathlib import Path

from bertology import paths
from bertology.errors import CorpusError

_TOKEN = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d+")
# Abbreviations after which a full stop does not end a sentence (lower-cased, without the dot).
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc e.g i.e u.s a.m p.m no fig gen gov sen rep rev col lt capt "
    "co corp inc ltd mt ft jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_BOUNDARY = re.compile(r"([.!?]+[\"')\]]*)(\s+)(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split a paragraph into sentences at ``.!?`` followed by space and a capital/digit/quote.

    A full stop after a known abbreviation or a single capital letter (an initial) is no boundary.
    """
    text = " ".join(text.split())
    if not text:
        return []
    sentences, start = [], 0
    for match in _BOUNDARY.finditer(text):
        end = match.end(1)
        prev_word = text[start : match.start(1)].rsplit(" ", 1)[-1].lower()
        if match.group(1).startswith(".") and (
            prev_word in _ABBREVIATIONS or (len(prev_word) == 1 and prev_word.isalpha())
        ):
            continue
        sentences.append(text[start:end])
        start = match.end()
    sentences.append(text[start:])
    return [s for s in sentences if s]


def tokenize(line: str, lower: bool = True) -> list[str]:
    words = _TOKEN.findall(line)
    return [w.lower() for w in words] if lower else words


def brown_sentences(lower: bool = True) -> list[list[str]]:
    path = paths.package_data() / "brown.txt.gz"
    if not path.is_file():
        raise CorpusError(f"{path}: bundled Brown text is missing (reinstall the package)")
    try:
        with gzip.open(path, "rt", encoding="utf-8-sig") as fh:
            return [t for line in fh if (t := tokenize(line, lower))]
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{path}: bundled Brown text is unreadable ({exc}); reinstall the package") from exc


def kjv_sentences(lower: bool = True) -> list[list[str]]:
    """Verses of the KJV Bible; needs ``apt-get install bible-kjv bible-kjv-text``."""
    if shutil.which("bible") is None:
        raise CorpusError(
            "the KJV text needs Debian's bible-kjv and bible-kjv-text packages "
            "(apt-get install bible-kjv bible-kjv-text)"
        )
    out = subprocess.run(
        ["bible", "-f", "Gen1:1-Rev22:21"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise CorpusError(f"`bible -f Gen1:1-Rev22:21` failed: {out.stderr.strip()[:200]}")
    verses = [line.split(" ", 1)[1] for line in out.stdout.splitlines() if " " in line]
    return [t for v in verses if (t := tokenize(v, lower))]


TEXTS = {"brown": brown_sentences, "kjv": kjv_sentences}
KJV_DATA_FILES = ("/usr/lib/bible.data", "/usr/lib/bible.data.conc")  # what `bible` reads (bible-kjv-text)


def text_files(name: str) -> list[Path]:
    """The files a plain-text corpus is read from (what a run that reads it must fingerprint)."""
    if name == "brown":
        return [paths.package_data() / "brown.txt.gz"]
    if name == "kjv":
        missing = [f for f in KJV_DATA_FILES if not Path(f).is_file()]
        if missing:
            raise CorpusError(f"{missing[0]}: the KJV text is missing (apt-get install bible-kjv bible-kjv-text)")
        return [Path(f) for f in KJV_DATA_FILES]
    raise CorpusError(f"unknown text corpus {name!r}; available: {', '.join(TEXTS)}")


def load_text(name: str, lower: bool = True) -> list[list[str]]:
    if name not in TEXTS:
        raise CorpusError(f"unknown text corpus {name!r}; available: {', '.join(TEXTS)}")
    return TEXTS[name](lower)
