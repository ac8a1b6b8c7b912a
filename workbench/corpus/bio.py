"""BIO entity tags (``B-PER``, ``I-PER``, ``O``): conversion to and from :class:`Entity` spans, and
a reader of BIO-tagged columns (CoNLL-2003 style)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from bertology.corpus.types import Corpus, Entity, Sentence
from bertology.corpus.utf8 import read_utf8
from bertology.errors import CorpusError


def bio_to_entities(tags: Sequence[str]) -> list[Entity]:
    """Convert BIO/IOB2 tags (``B-PER``, ``I-PER``, ``O``) to spans; a stray ``I-X`` opens a span (IOB1)."""
    entities: list[Entity] = []
    start, label = None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, kind = tag.partition("-")
        if tag == "O" or prefix == "B" or (prefix == "I" and kind != label):
            if start is not None and label is not None:  # (a span's label is set with its start)
                entities.append(Entity(start, i, label))
                start, label = None, None
            if prefix in ("B", "I") and kind:
                start, label = i, kind
    return entities


def entities_to_bio(entities: Iterable[Entity] | None, n_words: int) -> list[str]:
    tags = ["O"] * n_words
    for e in entities or []:
        tags[e.start] = f"B-{e.label}"
        for i in range(e.start + 1, e.end):
            tags[i] = f"I-{e.label}"
    return tags


def read_bio(path: str | Path, *, name: str | None = None, source: str | None = None) -> Corpus:
    """Read whitespace-separated columns, word first and BIO tag last (CoNLL-2003 style).

    Blank lines separate sentences; ``-DOCSTART-`` lines are skipped.
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    valid = re.compile(r"^(O|[BI]-\S+)$")

    def flush() -> None:
        if words:
            sentences.append(Sentence(f"{path.stem}-{len(sentences)}", list(words), entities=bio_to_entities(tags)))
            words.clear()
            tags.clear()

    for line_no, line in enumerate(read_utf8(path).splitlines(), start=1):
        if not line.strip():
            flush()
            continue
        cols = line.split()
        if cols[0] == "-DOCSTART-":
            continue
        if len(cols) < 2:
            raise CorpusError(f"{path}:{line_no}: expected a word and a BIO tag, found {line!r}")
        if not valid.match(cols[-1]):
            raise CorpusError(f"{path}:{line_no}: {cols[-1]!r} is not a BIO tag (O, B-X or I-X)")
        words.append(cols[0])
        tags.append(cols[-1])
    flush()
    if not sentences:
        raise CorpusError(f"{path}: no sentences found")
    return Corpus(name or path.stem, sentences, {"entities": source or f"gold: {path.name}"}, str(path))
