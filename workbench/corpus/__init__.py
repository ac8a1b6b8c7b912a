"""Corpora: annotated sentences (words, POS, dependencies, entity spans) and plain text.

One module per job:

- ``types``: :class:`Sentence`, :class:`Entity`, :class:`Corpus` (which annotation layers are gold and
  which silver is in :attr:`Corpus.sources`).
- ``conllu``: Universal Dependencies CoNLL-U, read (validated line by line) and written.
- ``bio``: BIO-tagged columns (CoNLL-2003 style) and BIO tags <-> entity spans.
- ``silver``: raw text annotated *silver* by a spaCy pipeline.
- ``registry``: the bundled corpora and :func:`load_corpus` (by name or file).
- ``utf8``: reading a corpus file as UTF-8 with errors naming file:line.
- ``brown``: the Brown tagset mapped to UD UPOS and a reader of Brown's word/tag files (used to
  build the bundled corpus).
- ``plain_text``: plain-text corpora as tokenised sentences (Brown, the KJV Bible) for word2vec
  and drift.

The names below are the stable API (``from bertology.corpus import load_corpus``).
"""

from bertology.corpus.bio import bio_to_entities, entities_to_bio, read_bio
from bertology.corpus.conllu import read_conllu, tree_problem, write_conllu
from bertology.corpus.registry import BUNDLED, DEFAULT_CORPUS, bundled_corpora, load_corpus
from bertology.corpus.silver import (
    SENTENCE_SPLITS,
    SPACY_MODEL,
    annotate_silver,
    annotate_text_file,
    read_text_file,
    read_text_lines,
)
from bertology.corpus.types import Corpus, Entity, Sentence
from bertology.corpus.utf8 import read_utf8

__all__ = [
    "BUNDLED",
    "DEFAULT_CORPUS",
    "SENTENCE_SPLITS",
    "SPACY_MODEL",
    "Corpus",
    "Entity",
    "Sentence",
    "annotate_silver",
    "annotate_text_file",
    "bio_to_entities",
    "bundled_corpora",
    "entities_to_bio",
    "load_corpus",
    "read_bio",
    "read_conllu",
    "read_text_file",
    "read_text_lines",
    "read_utf8",
    "tree_problem",
    "write_conllu",
]
