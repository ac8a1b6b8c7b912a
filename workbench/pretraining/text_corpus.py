"""Raw text for pretraining: stream files, split documents into sentences, tokenise and pack.

Input format: plain UTF-8 text files (``.gz`` too), or a directory of them (read recursively in
sorted order, hidden files skipped). A blank line ends a document; every other line is split into
sentences by a small rule-based splitter (one sentence per line input stays as is).

Packing follows BERT/RoBERTa "DOC-SENTENCES" by default: whole sentences of one document are
concatenated up to ``max_seq_len - 2`` tokens, then wrapped as ``[CLS] ... [SEP]``; a sentence longer
than that is cut into pieces. ``packing: full_sentences`` (RoBERTa's FULL-SENTENCES) lets a sequence
run on into the next document with an extra ``[SEP]`` between them; ``packing: token_blocks`` cuts
the token stream into full blocks (:func:`pack_documents`). Word ids (for whole-word
masking) are kept alongside token ids.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bertology.corpus.plain_text import split_sentences
from bertology.errors import CorpusError

BINARY_SNIFF_BYTES = 8192


def text_files(path: str | Path) -> list[Path]:
    """The text files under ``path`` (a file, or a directory searched recursively), sorted."""
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not files:
            raise CorpusError(f"{path}: directory holds no text files")
        return files
    raise CorpusError(f"{path}: no such file or directory")


def _open_text(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            head = fh.read(BINARY_SNIFF_BYTES)
    except (OSError, EOFError) as exc:
        raise CorpusError(f"{path}: cannot read ({exc})") from exc
    if b"\x00" in head:
        raise CorpusError(f"{path}: looks like a binary file (NUL bytes), expected UTF-8 text")
    with opener(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark is no part of the text
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorpusError(f"{path}:{lineno}: not UTF-8 text ({exc.reason})") from exc


def read_documents(path: str | Path) -> Iterator[list[str]]:
    """Stream documents (lists of sentences) from a text file or directory.

    Raises ``CorpusError`` naming the file if it is binary, not UTF-8, or holds no text.
    """
    for file in text_files(path):
        doc: list[str] = []
        n_sentences = 0
        for line in _open_text(file):
            if not line.strip():
                if doc:
                    yield doc
                    doc = []
                continue
            sents = split_sentences(line)
            doc.extend(sents)
            n_sentences += len(sents)
        if doc:
            yield doc
        if n_sentences == 0:
            raise CorpusError(f"{file}: empty file (no text)")


def corpus_hash(path: str | Path) -> str:
    """sha256 hex over the relative names and bytes of the corpus files."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in text_files(root):
        digest.update(str(file.relative_to(root) if root.is_dir() else file.name).encode())
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


@dataclass
class TokenizedDocument:
    """One document as token ids per sentence and word ids per token (word ids unique in the doc)."""

    sentences: list[list[int]]
    words: list[list[int]]


def tokenize_documents(
    documents: Iterable[list[str]], tokenizer, *, batch_size: int = 2048, progress: str | None = None
) -> list[TokenizedDocument]:
    """Tokenise sentences (no special tokens) with a fast HF tokenizer, keeping word ids.
    ``progress``: a label for a progress bar over the sentences (None: silent)."""
    docs = list(documents)
    flat = [s for d in docs for s in d]
    ids: list[list[int]] = []
    words: list[list[int]] = []
    backend = tokenizer.backend_tokenizer  # the Rust tokenizer: no max-length warnings, no Python overhead
    starts = range(0, len(flat), batch_size)
    if progress is not None:
        from bertology.progress import progress_bar

        starts = progress_bar(starts, desc=progress, unit="batch", total=len(starts))
    for i in starts:
        for enc in backend.encode_batch(flat[i : i + batch_size], add_special_tokens=False):
            ids.append(enc.ids)
            words.append([w if w is not None else -1 for w in enc.word_ids])
    out, k = [], 0
    for d in docs:
        sent_ids, sent_words, offset = [], [], 0
        for _ in d:
            if ids[k]:
                sent_ids.append(ids[k])
                sent_words.append([w + offset for w in words[k]])
                offset += max(words[k]) + 1
            k += 1
        if sent_ids:
            out.append(TokenizedDocument(sent_ids, sent_words))
    return out


PACKINGS = ("doc_sentences", "full_sentences", "token_blocks")
"""How single-segment sequences are packed: see :func:`pack_documents`."""


def pack_documents(
    docs: Iterable[TokenizedDocument],
    *,
    max_seq_len: int,
    cls_id: int,
    sep_id: int,
    packing: str = "doc_sentences",
) -> tuple[list[list[int]], list[list[int]]]:
    """Pack documents into ``[CLS] ... [SEP]`` sequences of <= max_seq_len.

    ``packing``:
    - ``doc_sentences`` (BERT/RoBERTa DOC-SENTENCES, default): whole sentences of one document; each
      document's last sequence is usually short;
    - ``full_sentences`` (RoBERTa FULL-SENTENCES): whole sentences, a sequence runs on into the next
      document with an extra ``[SEP]`` between the two. With short sequences the whole-sentence rule
      still leaves about half a sentence empty at the end of each;
    - ``token_blocks`` (ours; the "concatenate and chunk" of many MLM scripts): the token stream of
      all documents (an extra ``[SEP]`` between documents) cut into full blocks of
      ``max_seq_len - 2`` tokens, sentences and words split at block ends: every sequence but the
      last is full.
    Returns ``(input_ids, word_ids)``: lists of per-sequence lists; word id -1 marks special tokens,
    other word ids number the words within a sequence from 0.
    """
    if packing not in PACKINGS:
        raise ValueError(f"packing must be one of {', '.join(PACKINGS)}, got {packing!r}")
    budget = max_seq_len - 2
    if budget < 1:
        raise ValueError("max_seq_len must be >= 3")
    seqs: list[list[int]] = []
    seq_words: list[list[int]] = []
    cur: list[int] = []
    cur_w: list[int] = []

    def flush() -> None:
        while cur and cur_w[-1] == -1:  # a document separator with nothing after it in this sequence
            cur.pop()
            cur_w.pop()
        if cur:
            base = next((w for w in cur_w if w >= 0), 0)
            seqs.append([cls_id, *cur, sep_id])
            seq_words.append([-1, *[w - base if w >= 0 else -1 for w in cur_w], -1])
        cur.clear()
        cur_w.clear()

    for doc in docs:
        if packing == "doc_sentences":
            flush()
        elif cur:
            if len(cur) + 1 >= budget:  # no room for the separator and a token of the next document
                flush()
            else:  # a separator between documents
                cur.append(sep_id)
                cur_w.append(-1)
        shift = max(cur_w, default=-1) + 1  # the next document's words after this sequence's words
        for sent, wids in zip(doc.sentences, doc.words):
            wids = [w + shift for w in wids]
            if packing == "token_blocks":
                while len(cur) + len(sent) > budget:  # fill the block, carry the rest over
                    room = budget - len(cur)
                    cur.extend(sent[:room])
                    cur_w.extend(wids[:room])
                    sent, wids = sent[room:], wids[room:]
                    flush()
                cur.extend(sent)
                cur_w.extend(wids)
                continue
            if cur and len(cur) + len(sent) > budget:
                flush()
            while len(sent) > budget:  # an over-long sentence: cut into full pieces
                seqs.append([cls_id, *sent[:budget], sep_id])
                seq_words.append([-1, *[w - wids[0] for w in wids[:budget]], -1])
                sent, wids = sent[budget:], wids[budget:]
            cur.extend(sent)
            cur_w.extend(wids)
    flush()
    return seqs, seq_words


def real_token_share(sequence_lengths: Iterable[int], max_seq_len: int) -> float:
    """Mean share of the ``max_seq_len`` positions a packed sequence fills with real (non-padding)
    tokens, special tokens included: what a FLOPs budget charged at full length really trains on."""
    lengths = list(sequence_lengths)
    if not lengths:
        return float("nan")
    return sum(lengths) / (len(lengths) * max_seq_len)
