"""Bilingual dictionaries from Debian FreeDict dictd files, and honest train/test splits.

FreeDict (GPL-2.0+) ships ``/usr/share/dictd/freedict-<src>-<tgt>.index`` (``headword TAB offset
TAB length``, dictd base64 numbers) and ``.dict.dz`` (gzip-readable). Quirks handled: the headword
comes from the entry's first line (index headwords are normalised, some start with a space);
``/pron/``, ``<pos>``, sense numbers, ``[labels]`` and ``(...)`` are stripped; translations are
split on ``,`` and ``;``; multi-word entries and capitalised proper nouns are dropped; eng-deu's
``see:`` / ``Synonym(s):`` / ``Note:`` lines and indented example lines are skipped.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from bertology.errors import WorkbenchError

DICTD_DIR = Path("/usr/share/dictd")
DICTD_DIR_ENV = "BERTOLOGY_DICTD_DIR"  # another folder of dictd files (tests, a private FreeDict copy)
LICENCE = "GPL-2.0-or-later (FreeDict)"
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(_B64)}
_SKIP_LINE = re.compile(r"^\s*(see:|synonyms?:|note:|antonyms?:)", re.IGNORECASE)
_NOISE = [re.compile(p) for p in (r"/[^/]*/", r"<[^>]*>", r"\[[^\]]*\]", r"\([^)]*\)", r"\{[^}]*\}")]
_SENSE_NUMBER = re.compile(r"^\s*\d+\.\s*")


class DictionaryError(WorkbenchError):
    """Missing or malformed dictionary files."""


def _b64(text: str) -> int:
    n = 0
    for c in text:
        n = n * 64 + _B64_VALUE[c]
    return n


def _clean(text: str) -> str:
    for pattern in _NOISE:
        text = pattern.sub(" ", text)
    return " ".join(text.split())


def _single_words(text: str, keep_capitalised: bool) -> list[str]:
    out = []
    for part in re.split(r"[,;]", _clean(_SENSE_NUMBER.sub("", text))):
        word = part.strip().strip(".!?\"'").strip()
        if not word or " " in word or "..." in word or "…" in word or any(c.isdigit() for c in word):
            continue
        if word[0].isupper() and not keep_capitalised:
            continue
        out.append(word)
    return out


def parse_dictd(
    index_text: str, dict_bytes: bytes, source_name: str = "dictd", keep_capitalised_targets: bool = False
) -> pd.DataFrame:
    """Single-word translation pairs from one dictd database -> DataFrame ``(source, target)``.

    ``index_text``: the ``.index`` file's text; ``dict_bytes``: the uncompressed ``.dict``.
    Errors name ``source_name`` and the index line.
    """
    pairs: list[tuple[str, str]] = []
    seen: set[tuple[int, int]] = set()
    for line_no, line in enumerate(index_text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise DictionaryError(f"{source_name}.index:{line_no}: expected 'headword<TAB>offset<TAB>length'")
        try:
            offset, length = _b64(fields[1]), _b64(fields[2])
        except KeyError:
            raise DictionaryError(f"{source_name}.index:{line_no}: bad base64 offset/length") from None
        if fields[0].startswith("00database") or (offset, length) in seen:
            continue
        seen.add((offset, length))
        if offset + length > len(dict_bytes):
            raise DictionaryError(f"{source_name}.index:{line_no}: entry runs past the end of the .dict data")
        entry = dict_bytes[offset : offset + length].decode("utf-8", errors="replace").splitlines()
        entry = [e for e in entry if e.strip()]
        if not entry:
            continue
        heads = _single_words(entry[0], keep_capitalised=False)
        if len(heads) != 1 or " " in _clean(entry[0]):
            continue  # multi-word or proper-noun headword
        head = heads[0]
        for body in entry[1:]:
            if body[:1].isspace() or _SKIP_LINE.match(body):
                continue  # examples, cross references, notes
            for word in _single_words(body, keep_capitalised_targets):
                pairs.append((head, word))
    return pd.DataFrame(pairs, columns=["source", "target"]).drop_duplicates().reset_index(drop=True)


def dictd_dir(directory: str | Path | None = None) -> Path:
    """The folder of dictd files: ``directory`` when given (not empty), else ``$BERTOLOGY_DICTD_DIR``,
    else Debian's ``/usr/share/dictd``."""
    return Path(directory or os.environ.get(DICTD_DIR_ENV) or DICTD_DIR)


def dictd_files(pair: str, directory: str | Path | None = None) -> tuple[Path, Path]:
    """``(index, dict.dz)`` of ``freedict-<pair>``; a clear error names the apt package if absent."""
    directory = dictd_dir(directory)
    index, data = directory / f"freedict-{pair}.index", directory / f"freedict-{pair}.dict.dz"
    if not index.exists() or not data.exists():
        raise DictionaryError(
            f"FreeDict {pair} not found ({index}); install it with `apt-get install dict-freedict-{pair}`"
        )
    return index, data


def bilingual_files(
    source_lang: str, target_lang: str, include_reverse: bool = True, directory: str | Path | None = None
) -> list[Path]:
    """The dictd files :func:`bilingual_pairs` reads with the same arguments: ``<src>-<tgt>``'s index
    and data, and the reversed pair's when installed and asked (what a run's fingerprint hashes)."""
    files = list(dictd_files(f"{source_lang}-{target_lang}", directory))
    reverse = f"{target_lang}-{source_lang}"
    if include_reverse and (dictd_dir(directory) / f"freedict-{reverse}.index").exists():
        files += dictd_files(reverse, directory)
    return files


def read_freedict(pair: str = "eng-fra", directory: str | Path | None = None) -> pd.DataFrame:
    """Pairs of one FreeDict database -> ``(source, target, source_lang, target_lang, dictionary, licence)``."""
    index, data = dictd_files(pair, directory)
    src_lang, tgt_lang = pair.split("-")
    with gzip.open(data, "rb") as fh:
        dict_bytes = fh.read()
    df = parse_dictd(
        index.read_text(encoding="utf-8"),
        dict_bytes,
        str(index.with_suffix("")),
        keep_capitalised_targets=tgt_lang == "deu",
    )
    return df.assign(source_lang=src_lang, target_lang=tgt_lang, dictionary=f"freedict-{pair}", licence=LICENCE)


def bilingual_pairs(
    source_lang: str = "eng",
    target_lang: str = "fra",
    include_reverse: bool = True,
    directory: str | Path | None = None,
    lower: bool = True,
) -> pd.DataFrame:
    """Union of ``<src>-<tgt>`` and (when installed and asked) the reversed ``<tgt>-<src>`` pairs.

    Columns ``(source, target, dictionary, licence)``; lower-cased when ``lower``.
    """
    frames = [read_freedict(f"{source_lang}-{target_lang}", directory)]
    reverse = f"{target_lang}-{source_lang}"
    if include_reverse and (dictd_dir(directory) / f"freedict-{reverse}.index").exists():
        rev = read_freedict(reverse, directory)
        frames.append(rev.rename(columns={"source": "target", "target": "source"}))
    df = pd.concat(frames, ignore_index=True)
    if lower:
        df["source"], df["target"] = df["source"].str.lower(), df["target"].str.lower()
    df = df.drop_duplicates(["source", "target"]).reset_index(drop=True)
    df["source_lang"], df["target_lang"] = source_lang, target_lang
    return df[["source", "target", "source_lang", "target_lang", "dictionary", "licence"]]


def filter_to_vocab(pairs: pd.DataFrame, source_vocab: Iterable[str], target_vocab: Iterable[str]) -> pd.DataFrame:
    """Pairs whose source and target words are both in the given vocabularies."""
    s, t = set(source_vocab), set(target_vocab)
    return pairs[pairs["source"].isin(s) & pairs["target"].isin(t)].reset_index(drop=True)


def split_dictionary(
    pairs: pd.DataFrame,
    n_test_sources: int = 1500,
    n_train: int | None = 5000,
    seed: int = 0,
    exclude_from_train: Iterable[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split by SOURCE word: test source words never occur as a training source word.

    ``n_test_sources`` distinct source words (all their pairs) go to test; training pairs are drawn
    (seeded) from the rest, at most ``n_train`` pairs (``None`` = all), excluding
    ``exclude_from_train`` source words. Returns ``(train, test)``.
    """
    sources = np.array(sorted(pairs["source"].unique()), dtype=object)
    if len(sources) <= n_test_sources:
        raise DictionaryError(f"dictionary has {len(sources)} source words, cannot hold out {n_test_sources}")
    rng = np.random.default_rng(seed)
    test_words = set(rng.choice(sources, size=n_test_sources, replace=False).tolist())
    test = pairs[pairs["source"].isin(test_words)].reset_index(drop=True)
    rest = pairs[~pairs["source"].isin(test_words | set(exclude_from_train))]
    if n_train is not None and len(rest) > n_train:
        rest = rest.iloc[np.sort(rng.choice(len(rest), size=n_train, replace=False))]
    return rest.reset_index(drop=True), test
