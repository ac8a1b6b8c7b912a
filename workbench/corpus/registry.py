"""Corpora by name or file: the bundled corpora and :func:`load_corpus`, which picks the reader
from the file's suffix."""

from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict
from pathlib import Path

from bertology import paths
from bertology.corpus.bio import read_bio
from bertology.corpus.conllu import read_conllu
from bertology.corpus.silver import SENTENCE_SPLITS, annotate_text_file
from bertology.corpus.types import Corpus
from bertology.errors import CorpusError

DEFAULT_CORPUS = "brown-sample"
BUNDLED = {"brown-sample": "brown_sample.conllu"}


def bundled_corpora() -> dict[str, Path]:
    return {name: paths.package_data() / fname for name, fname in BUNDLED.items()}


SENTENCES_SUFFIX = "?sentences="


def load_corpus(
    name_or_path: str | Path = DEFAULT_CORPUS, *, limit: int | None = None, sentences: str | None = None
) -> Corpus:
    """Load a bundled corpus by name (``brown-sample``) or a file: ``.conllu``, ``.bio``/``.conll``, ``.txt`` (silver).

    A ``.txt`` file is read as one sentence per line (``sentences="lines"``, the default: what you
    wrote is what is analysed) or as running text that spaCy splits into sentences
    (``sentences="spacy"``; paragraphs are separated by blank lines). The choice can also ride on
    the name, ``FILE.txt?sentences=spacy``, so that a store or study that records the name reloads
    the same sentences. Either way spaCy annotates the sentences (silver UPOS, dependencies,
    entities). ``limit`` keeps the first ``limit`` sentences (``CorpusError`` if negative).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise CorpusError(f"limit: expected a number of sentences >= 0, got {limit!r}")
    bundled = bundled_corpora()
    key = str(name_or_path)
    if SENTENCES_SUFFIX in key:
        key, _, named = key.rpartition(SENTENCES_SUFFIX)
        if sentences is not None and sentences != named:
            raise CorpusError(f"{name_or_path}: the name asks for sentences={named!r}, the call for {sentences!r}")
        sentences = named
        name_or_path = key
    sentences = sentences or "lines"
    if sentences not in SENTENCE_SPLITS:
        raise CorpusError(f"sentences: expected one of {', '.join(SENTENCE_SPLITS)}, got {sentences!r}")
    if key in bundled:
        return _read_conllu_once(bundled[key], name=key, limit=limit)
    else:
        path = Path(name_or_path)
        if not path.exists():
            raise CorpusError(f"unknown corpus {key!r}: not a bundled name ({', '.join(bundled)}) and no such file")
        suffix = path.suffix.lower()
        if suffix in (".conllu", ".conllx"):
            return _read_conllu_once(path, limit=limit)
        elif suffix in (".bio", ".conll", ".iob", ".tsv"):
            corpus = read_bio(path)
        elif suffix in (".txt", ".text", ".md"):
            corpus = annotate_text_file(path, sentences=sentences)
            # the path reloads the same sentences from anywhere (stores and studies record it)
            corpus.path = str(path.resolve()) + (f"{SENTENCES_SUFFIX}{sentences}" if sentences != "lines" else "")
        else:
            raise CorpusError(f"{path}: unknown corpus format {suffix!r} (use .conllu, .bio/.conll or .txt)")
    return corpus.subset(limit) if limit is not None else corpus


_PARSED: OrderedDict[tuple, Corpus] = OrderedDict()
_PARSED_KEEP = 4


def _read_conllu_once(path: Path, name: str | None = None, limit: int | None = None) -> Corpus:
    """:func:`read_conllu`, parsed once per process for a file whose path and bytes are unchanged (a
    study that loads the same corpus for every task and seed, and the quickstart's studies one after
    another, read and validate it once; hashing the bytes costs milliseconds, parsing seconds, and
    unlike a modification time it cannot miss a rewrite); each call gets its own copy of the first
    ``limit`` sentences (all when ``None``), so a caller that edits sentences never changes another's."""
    try:
        digest = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
    except OSError:
        corpus = read_conllu(path, name=name)  # its error names the file
        return corpus.subset(limit) if limit is not None else corpus
    key = (str(path.resolve()), digest, name)
    if key not in _PARSED:
        _PARSED[key] = read_conllu(path, name=name)
        while len(_PARSED) > _PARSED_KEEP:
            _PARSED.popitem(last=False)
    _PARSED.move_to_end(key)
    parsed = _PARSED[key]
    chosen = parsed.subset(limit) if limit is not None else parsed
    return dataclasses.replace(chosen, sentences=[s.copy() for s in chosen.sentences], sources=dict(chosen.sources))
