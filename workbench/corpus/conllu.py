"""Universal Dependencies CoNLL-U: read (via the ``conllu`` package, validated line by line here
because ``conllu`` silently accepts short lines and out-of-range heads) and write.

Entities travel in the MISC column as ``NER=B-X`` tags.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Sequence
from pathlib import Path
from sys import intern

from bertology import atomic
from bertology.corpus.bio import bio_to_entities, entities_to_bio
from bertology.corpus.types import Corpus, Sentence
from bertology.corpus.utf8 import read_utf8
from bertology.errors import CorpusError

_ID_RE = re.compile(r"^(\d+)$|^(\d+)-(\d+)$|^(\d+)\.(\d+)$")


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
            cycle = path[path.index(node) :]
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
                    bad_trees[n_sentences] = (
                        f"{path}:{start_line}: sentence {sent_id or n_sentences + 1}: "
                        f"the heads do not form a tree: {problem}"
                    )
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


def _sentence(token_list, default_id: str, tree_error: str | None, keep_bad_heads: bool, ner_key: str) -> Sentence:
    """One ``conllu.TokenList`` with at least one word as a :class:`Sentence` (multiword-token and
    empty-node lines dropped). Heads are kept unless ``tree_error`` is set and not ``keep_bad_heads``;
    the problem goes to ``meta["tree_error"]``."""
    words_tokens = [t for t in token_list if isinstance(t["id"], int)]
    # words and tags interned: a corpus holds one string object per distinct word and tag, not one
    # per token (a tag's string is ~50 bytes; the token's slot in its list, 8)
    upos = [intern(t["upos"] or "_") for t in words_tokens]
    xpos = [intern(t["xpos"] or "_") for t in words_tokens]
    has_heads = (tree_error is None or keep_bad_heads) and all(t["head"] is not None for t in words_tokens)
    ner_tags = [_parse_misc_ner(t["misc"], ner_key) for t in words_tokens]
    meta = {intern(key): str(v) for key, v in token_list.metadata.items()}
    if tree_error is not None:
        meta["tree_error"] = tree_error
    return Sentence(
        sent_id=meta.get("sent_id", default_id),
        words=[intern(t["form"]) for t in words_tokens],
        upos=None if all(u == "_" for u in upos) else upos,
        xpos=None if all(x == "_" for x in xpos) else xpos,
        heads=[int(t["head"]) for t in words_tokens] if has_heads else None,
        deprels=[intern(t["deprel"] or "_") for t in words_tokens] if has_heads else None,
        entities=bio_to_entities([tag or "O" for tag in ner_tags]) if any(ner_tags) else None,
        text=meta.get("text"),
        meta=meta,
    )


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
    import conllu  # the third-party parser (an absolute import, not this module)

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
        raise CorpusError(
            f"{first}{more}; fix the HEAD column there (the file's trees are read as gold: one root, no cycle); "
            "from Python, read_conllu(path, bad_trees='drop') keeps such sentences without dependencies"
        )
    del lines
    sentences: list[Sentence] = []
    # parsed a sentence at a time (conllu.parse is the list of these): the parser's per-token dicts
    # of one sentence at a time, not of the whole file (~16 KB per sentence), are in memory
    token_lists = iter(conllu.parse_incr(io.StringIO(text)))
    for k in itertools.count():
        try:
            token_list = next(token_lists)
        except StopIteration:
            break
        except Exception as exc:  # conllu's own parse errors carry no line number
            raise CorpusError(f"{path}: CoNLL-U parse error: {exc}") from exc
        if any(isinstance(t["id"], int) for t in token_list):
            tree_error = tree_errors.get(len(sentences))  # counted over sentences with words
            sentences.append(_sentence(token_list, f"{path.stem}-{k}", tree_error, bad_trees == "flag", ner_key))
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
