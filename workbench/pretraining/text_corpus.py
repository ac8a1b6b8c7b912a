"""Raw text for pretraining: stream files, split documents into sentences, tokenise and pack.

Input format: plain UTF-8 text files (``.gz`` too), or a directory of them (read recursively in
sorted order, hidden files skipped). A blank line ends a document; every other line is split into
sentences by a small rule-based splitter (one sentence per line input stays as is).

Packing follows BERT/RoBERTa "DOC-SENTENCES" by default: whole sentences of one document are
concatenated up to ``max_seq_len - 2`` tokens, then wrapped as ``[CLS] ... [SEP]``; a sentence longer
than that is cut into pieces. ``packing: full_sentences`` (RoBERTa's FULL-SENTENCES) lets a sequence
run on into the next document with an extra ``[SEP]`` between them. Word ids (for whole-word
masking) are kept alongside token ids.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

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
            p for p in path.rglob("*")
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
    documents: Iterable[list[str]], tokenizer, *, batch_size: int = 2048
) -> list[TokenizedDocument]:
    """Tokenise sentences (no special tokens) with a fast HF tokenizer, keeping word ids."""
    docs = list(documents)
    flat = [s for d in docs for s in d]
    ids: list[list[int]] = []
    words: list[list[int]] = []
    backend = tokenizer.backend_tokenizer  # the Rust tokenizer: no max-length warnings, no Python overhead
    for i in range(0, len(flat), batch_size):
        for enc in backend.encode_batch(flat[i:i + batch_size], add_special_tokens=False):
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


def pack_documents(
    docs: Iterable[TokenizedDocument], *, max_seq_len: int, cls_id: int, sep_id: int,
    across_documents: bool = False,
) -> tuple[list[list[int]], list[list[int]]]:
    """Pack whole sentences into ``[CLS] ... [SEP]`` sequences of <= max_seq_len.

    ``across_documents=False`` (BERT/RoBERTa DOC-SENTENCES): a sequence holds sentences of one
    document; each document's last sequence is usually short. ``True`` (RoBERTa FULL-SENTENCES):
    a sequence goes on into the next document, with an extra ``[SEP]`` between the two, so nearly
    every sequence is full.
    Returns ``(input_ids, word_ids)``: lists of per-sequence lists; word id -1 marks special tokens,
    other word ids number the words within a sequence from 0.
    """
    budget = max_seq_len - 2
    if budget < 1:
        raise ValueError("max_seq_len must be >= 3")
    seqs: list[list[int]] = []
    seq_words: list[list[int]] = []
    cur: list[int] = []
    cur_w: list[int] = []

    def flush() -> None:
        if cur and cur_w[-1] == -1:     # a document separator with nothing after it in this sequence
            cur.pop()
            cur_w.pop()
        if cur:
            base = next((w for w in cur_w if w >= 0), 0)
            seqs.append([cls_id, *cur, sep_id])
            seq_words.append([-1, *[w - base if w >= 0 else -1 for w in cur_w], -1])
        cur.clear()
        cur_w.clear()

    for doc in docs:
        if not across_documents:
            flush()
        elif cur:
            if len(cur) + 1 >= budget:      # no room for the separator and a token of the next document
                flush()
            else:                           # FULL-SENTENCES: a separator between documents
                cur.append(sep_id)
                cur_w.append(-1)
        shift = max(cur_w, default=-1) + 1  # the next document's words after this sequence's words
        for sent, wids in zip(doc.sentences, doc.words):
            wids = [w + shift for w in wids]
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
