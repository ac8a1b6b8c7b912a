"""Edge-probing tasks: spans over words with labels (Tenney et al. 2019).

An :class:`EdgeTask` is a list of :class:`EdgeExample` (sentence index, one or two word spans
``[start, end)``, one or more labels) plus its label vocabulary and where the labels came from
(``source``: ``"gold: ..."`` or ``"silver: ..."``).

Builders read a ``bertology.corpus.Corpus`` (any object with ``sentences`` whose items carry
``words``, ``upos``, ``xpos``, ``heads`` (1-based, 0 = root), ``deprels``, ``entities``):
:func:`pos_task`, :func:`xpos_task`, :func:`deps_task`, :func:`entities_task`; :func:`build_task`
dispatches on a name or a ``.jsonl`` path.

JSONL format (jiant's edge-probing files; one sentence per line, word-level spans, end exclusive)::

    {"text": "The cat sat .", "targets": [{"span1": [1, 2], "span2": [2, 3], "label": "nsubj"}]}

``text`` is split on single spaces into words; ``label`` is a string or a list of strings
(multi-label); ``span2`` is optional but must be present in all targets or none.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertology.atomic import write_text
from bertology.errors import ConfigError, WorkbenchError
from bertology.validation import Rule, clean_label

Span = tuple[int, int]
BUILTIN_TASKS = ("pos", "xpos", "deps", "entities")

# config rules (checked with a study's config, before any model is loaded or any store extracted)
TASK_NAMES_OR_FILES = Rule(
    f"a list of tasks ({', '.join(BUILTIN_TASKS)} or a jiant-style FILE.jsonl)",
    lambda v: v in BUILTIN_TASKS or (isinstance(v, str) and v.endswith(".jsonl")),
    each=True,
)
TASK_NAMES = Rule(f"a list of tasks ({', '.join(BUILTIN_TASKS)})", lambda v: v in BUILTIN_TASKS, each=True)


class TaskError(WorkbenchError):
    """Malformed task input (names the file, line or sentence)."""


@dataclass(frozen=True)
class EdgeExample:
    """One target: ``sentence`` index, word spans ``[start, end)``, label(s)."""

    sentence: int
    span1: Span
    span2: Span | None
    labels: tuple[str, ...]


@dataclass
class EdgeTask:
    """A probing task.

    ``labels``: the label vocabulary (sorted). ``multilabel``: examples may carry several labels.
    ``words``: the sentences' words when the task brings its own text (JSONL), else ``None``
    (the examples index the corpus the task was built from).
    """

    name: str
    examples: list[EdgeExample]
    labels: list[str]
    source: str
    multilabel: bool = False
    words: list[list[str]] | None = None
    n_sentences: int = 0
    sentence_lines: list[str] | None = field(default=None, compare=False)  # "file:line" of each of ``words``

    def __post_init__(self) -> None:
        if not self.n_sentences:
            self.n_sentences = (
                max((e.sentence for e in self.examples), default=-1) + 1 if self.words is None else len(self.words)
            )

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def n_spans(self) -> int:
        """1 or 2 spans per example."""
        return 2 if self.examples and self.examples[0].span2 is not None else 1

    def label_ids(self) -> np.ndarray:
        """``[n]`` int64 label index (single-label tasks: the first label)."""
        index = {lab: i for i, lab in enumerate(self.labels)}
        return np.array([index[e.labels[0]] for e in self.examples], dtype=np.int64)

    def label_matrix(self) -> np.ndarray:
        """``[n, K]`` float32 0/1 indicator of labels (for multi-label tasks)."""
        index = {lab: i for i, lab in enumerate(self.labels)}
        out = np.zeros((len(self.examples), len(self.labels)), dtype=np.float32)
        for row, e in enumerate(self.examples):
            out[row, [index[lab] for lab in e.labels]] = 1.0
        return out

    def sentence_ids(self) -> np.ndarray:
        """``[n]`` sentence index of each example."""
        return np.array([e.sentence for e in self.examples], dtype=np.int64)

    def with_labels(self, labels: Sequence[Sequence[str]], name: str, source: str) -> EdgeTask:
        """Same spans, new labels (used by control tasks)."""
        examples = [EdgeExample(e.sentence, e.span1, e.span2, tuple(lab)) for e, lab in zip(self.examples, labels)]
        vocab = sorted({lab for labs in labels for lab in labs})
        return EdgeTask(
            name, examples, vocab, source, self.multilabel, self.words, self.n_sentences, self.sentence_lines
        )

    def subset(self, indices: Iterable[int]) -> EdgeTask:
        examples = [self.examples[i] for i in indices]
        return EdgeTask(
            self.name,
            examples,
            self.labels,
            self.source,
            self.multilabel,
            self.words,
            self.n_sentences,
            self.sentence_lines,
        )


def _make(
    name: str, examples: list[EdgeExample], source: str, n_sentences: int, words: list[list[str]] | None = None
) -> EdgeTask:
    if not examples:
        raise TaskError(f"task {name!r}: no examples (is the annotation layer present?)")
    vocab = sorted({lab for e in examples for lab in e.labels})
    multilabel = any(len(e.labels) != 1 for e in examples)
    return EdgeTask(name, examples, vocab, source, multilabel, words, n_sentences)


def _source(corpus: Any, layer: str) -> str:
    sources = getattr(corpus, "sources", None) or {}
    return sources.get(layer, "unknown")


def _token_task(corpus: Any, attr: str, name: str) -> EdgeTask:
    examples = []
    for s, sent in enumerate(corpus.sentences):
        tags = getattr(sent, attr)
        if tags is None:
            continue
        if len(tags) != len(sent.words):
            raise TaskError(
                f"sentence {getattr(sent, 'sent_id', s)}: {len(tags)} {attr} tags for {len(sent.words)} words"
            )
        examples += [EdgeExample(s, (i, i + 1), None, (tag,)) for i, tag in enumerate(tags)]
    return _make(name, examples, _source(corpus, attr), len(corpus.sentences))


def pos_task(corpus: Any) -> EdgeTask:
    """One example per word: span = the word, label = UPOS."""
    return _token_task(corpus, "upos", "pos")


def xpos_task(corpus: Any) -> EdgeTask:
    """One example per word: span = the word, label = XPOS (language-specific tag)."""
    return _token_task(corpus, "xpos", "xpos")


def deps_task(corpus: Any) -> EdgeTask:
    """One example per non-root word: span1 = dependent, span2 = head, label = relation."""
    examples = []
    for s, sent in enumerate(corpus.sentences):
        if sent.heads is None or sent.deprels is None:
            continue
        n = len(sent.words)
        for i, (head, rel) in enumerate(zip(sent.heads, sent.deprels)):
            if head == 0:
                continue
            if not 1 <= head <= n:
                raise TaskError(f"sentence {getattr(sent, 'sent_id', s)} word {i + 1}: head {head} outside 0..{n}")
            examples.append(EdgeExample(s, (i, i + 1), (head - 1, head), (rel,)))
    return _make("deps", examples, _source(corpus, "deps"), len(corpus.sentences))


def entities_task(corpus: Any) -> EdgeTask:
    """One example per entity mention: span = the mention, label = its type."""
    examples = []
    for s, sent in enumerate(corpus.sentences):
        for ent in sent.entities or ():
            if not 0 <= ent.start < ent.end <= len(sent.words):
                raise TaskError(
                    f"sentence {getattr(sent, 'sent_id', s)}: entity span "
                    f"[{ent.start}, {ent.end}) outside {len(sent.words)} words"
                )
            examples.append(EdgeExample(s, (ent.start, ent.end), None, (ent.label,)))
    return _make("entities", examples, _source(corpus, "entities"), len(corpus.sentences))


_BUILDERS = {"pos": pos_task, "xpos": xpos_task, "deps": deps_task, "entities": entities_task}


def build_task(corpus: Any, name: str) -> EdgeTask:
    """A built-in task by name (``pos``, ``xpos``, ``deps``, ``entities``) or a ``.jsonl`` file
    (whose sentences must be ``corpus``'s: :func:`check_task_sentences`; ``corpus`` None: not checked)."""
    if name in _BUILDERS:
        return _BUILDERS[name](corpus)
    if str(name).endswith(".jsonl"):
        task = read_jsonl(name)
        check_task_sentences(task, corpus)
        return task
    raise TaskError(f"unknown task {name!r}: use one of {', '.join(BUILTIN_TASKS)} or a .jsonl file")


# --- JSONL ------------------------------------------------------------------------------------


def _span(value: Any, n_words: int, where: str) -> Span:
    if (
        not isinstance(value, (list, tuple))
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise TaskError(f"{where}: span must be [start, end] integers, got {value!r}")
    start, end = value
    if not 0 <= start < end <= n_words:
        raise TaskError(f"{where}: span [{start}, {end}) outside the sentence's {n_words} words")
    return (start, end)


def read_jsonl(path: str | Path, name: str | None = None, source: str = "gold: user file") -> EdgeTask:
    """Read a jiant-style edge-probing JSONL file; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: task file not found")
    from bertology.corpus.utf8 import jsonl_objects

    words: list[list[str]] = []
    examples: list[EdgeExample] = []
    two_spans: bool | None = None
    lines: list[str] = []  # "file:line" of each sentence
    for where, record in jsonl_objects(path, TaskError):
        lines.append(where)
        if not isinstance(record.get("text"), str):
            raise TaskError(f"{where}: expected an object with a string field 'text'")
        targets = record.get("targets")
        if not isinstance(targets, list):
            raise TaskError(f"{where}: expected a list field 'targets'")
        sent_words = record["text"].split(" ")
        s = len(words)
        words.append(sent_words)
        for t, target in enumerate(targets):
            twhere = f"{where} target {t}"
            if not isinstance(target, dict) or "span1" not in target or "label" not in target:
                raise TaskError(f"{twhere}: a target needs 'span1' and 'label'")
            span1 = _span(target["span1"], len(sent_words), f"{twhere} span1")
            has2 = target.get("span2") is not None
            if two_spans is None:
                two_spans = has2
            elif two_spans != has2:
                raise TaskError(f"{twhere}: 'span2' must be given in all targets or in none")
            span2 = _span(target["span2"], len(sent_words), f"{twhere} span2") if has2 else None
            label = target["label"]
            labels = (label,) if isinstance(label, str) else label
            if not isinstance(labels, (list, tuple)) or not labels or not all(isinstance(lab, str) for lab in labels):
                raise TaskError(f"{twhere}: 'label' must be a string or a non-empty list of strings")
            labels = [clean_label(lab, twhere, TaskError) for lab in labels]
            examples.append(EdgeExample(s, span1, span2, tuple(labels)))
    if not examples:
        raise TaskError(f"{path}: no targets")
    task = _make(name or path.stem, examples, source, len(words), words)
    task.sentence_lines = lines
    return task


def check_task_sentences(task: EdgeTask, corpus: Any) -> None:
    """Raise ``TaskError`` unless a task that brings its own sentences (a JSONL file) has the
    corpus's sentences, word for word and in their order (its spans index the corpus's store):
    names the file line of the first sentence that differs. A task without words (built from the
    corpus) passes."""
    if task.words is None or corpus is None:
        return
    stored = [list(s.words) for s in corpus.sentences]
    lines = task.sentence_lines or []
    for k, words in enumerate(task.words):
        where = lines[k] if k < len(lines) else f"task {task.name!r} sentence {k}"
        if k >= len(stored):
            raise TaskError(
                f"{where}: sentence {k} is beyond the corpus's {len(stored)} sentences; a task file's sentences "
                "must be the corpus's, in its order"
            )
        if list(words) != stored[k]:
            raise TaskError(
                f"{where}: the task's sentence {k} ({_short(words)}) is not the corpus's sentence {k} "
                f"({_short(stored[k])}); a task file's sentences must be the corpus's, in its order "
                "(or probe it on its own sentences)"
            )


def _short(words: Sequence[str], width: int = 60) -> str:
    text = " ".join(words)
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def write_jsonl(task: EdgeTask, path: str | Path, words: Sequence[Sequence[str]] | None = None) -> None:
    """Write ``task`` as JSONL (atomically); ``words`` defaults to ``task.words``.

    Sentences without targets are written with an empty ``targets`` list so indices survive.
    """
    words = words if words is not None else task.words
    if words is None:
        raise TaskError(f"task {task.name!r} has no words: pass the corpus sentences' words")
    by_sentence: dict[int, list[dict]] = {}
    for e in task.examples:
        target: dict[str, Any] = {"span1": list(e.span1)}
        if e.span2 is not None:
            target["span2"] = list(e.span2)
        target["label"] = list(e.labels) if task.multilabel else e.labels[0]
        by_sentence.setdefault(e.sentence, []).append(target)
    lines = []
    for s, sent_words in enumerate(words):
        if any(" " in w or w == "" for w in sent_words):
            raise TaskError(f"sentence {s}: words must be non-empty and contain no spaces")
        lines.append(json.dumps({"text": " ".join(sent_words), "targets": by_sentence.get(s, [])}, ensure_ascii=False))
    write_text(path, "\n".join(lines) + "\n")


# --- splits and summaries ---------------------------------------------------------------------


def require_splittable(task: EdgeTask, n_sentences: int | None = None) -> None:
    """Raise ``TaskError`` unless the task has targets in at least 3 sentences (one each for train,
    dev and test). Analyses call it for every task before probing any, so a task too small for the
    corpus fails before the work on the others."""
    n = len(np.unique(task.sentence_ids())) if n_sentences is None else n_sentences
    if n < 3:
        raise TaskError(f"task {task.name!r}: needs at least 3 sentences with targets to split, has {n}")


def split_by_sentence(
    task: EdgeTask, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0
) -> dict[str, np.ndarray]:
    """Seeded train/dev/test split of example indices, whole sentences kept together.

    Returns ``{"train": idx, "dev": idx, "test": idx}`` (int64 arrays of example indices).
    """
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-6:
        raise ConfigError(f"split fractions must be three non-negative numbers summing to 1, got {fractions}")
    sent = task.sentence_ids()
    unique = np.unique(sent)
    require_splittable(task, len(unique))
    order = np.random.default_rng(seed).permutation(unique)
    n = len(order)
    n_dev = max(1, int(round(fractions[1] * n)))
    n_test = max(1, int(round(fractions[2] * n)))
    n_train = n - n_dev - n_test
    if n_train < 1:
        n_dev, n_test, n_train = 1, 1, n - 2
    parts = {"train": order[:n_train], "dev": order[n_train : n_train + n_dev], "test": order[n_train + n_dev :]}
    return {k: np.flatnonzero(np.isin(sent, v)) for k, v in parts.items()}


def label_distribution(task: EdgeTask) -> dict[str, float]:
    """Empirical share of each label over examples (first label for multi-label)."""
    counts = Counter(e.labels[0] for e in task.examples)
    total = sum(counts.values())
    return {lab: counts[lab] / total for lab in task.labels if counts[lab]}
