"""Reading a corpus file as UTF-8 text, with errors that name the file, line and column."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertology.errors import CorpusError


def read_utf8(path: str | Path) -> str:
    """A text file's content as UTF-8 (a leading byte-order mark dropped). Unreadable or non-UTF-8
    files raise ``CorpusError`` naming the file, line and column of the first bad byte."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        raise CorpusError(
            f"{path}:{line}: not valid UTF-8 (byte 0x{data[exc.start]:02x} at column {column}); "
            "convert the file to UTF-8"
        ) from None


def jsonl_objects(path: str | Path, error: type[Exception] = CorpusError) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` for each non-blank line of a UTF-8 JSON-lines file, ``where`` being
    ``"file:line"``; a line that is not a JSON object raises ``error`` naming the file and line
    (the file itself as :func:`read_utf8`)."""
    for lineno, line in enumerate(read_utf8(path).splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise error(f"{where}: expected a JSON object")
        yield where, record
