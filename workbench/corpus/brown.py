"""The Brown corpus tagset mapped to Universal Dependencies UPOS, and a reader of its word/tag files.

Brown tags (Francis & Kučera 1979) carry suffixes: ``-tl`` (title), ``-hl`` (headline), ``-nc``
(cited word), ``fw-`` (foreign word), ``*`` (negation) and ``+`` (contraction, e.g. ``pps+bez``
for "it's"). The mapping below is written from the tagset documentation; where Brown does not
distinguish what UD does (auxiliary vs main *do* / *have*), :func:`brown_to_upos` decides from
the following words and says so in its docstring.
"""

from __future__ import annotations

import re
from pathlib import Path

from bertology.corpus.utf8 import read_utf8

BASE_TAG_TO_UPOS: dict[str, str] = {
    # punctuation
    ".": "PUNCT",
    ",": "PUNCT",
    ":": "PUNCT",
    "(": "PUNCT",
    ")": "PUNCT",
    "--": "PUNCT",
    "``": "PUNCT",
    "''": "PUNCT",
    "'": "PUNCT",
    # determiners and pre-/post-quantifiers
    "abl": "DET",
    "abn": "DET",
    "abx": "DET",
    "ap": "DET",
    "at": "DET",
    "dt": "DET",
    "dti": "DET",
    "dts": "DET",
    "dtx": "DET",
    "wdt": "DET",
    # verbs and auxiliaries (be, do, have resolved in brown_to_upos)
    "vb": "VERB",
    "vbd": "VERB",
    "vbg": "VERB",
    "vbn": "VERB",
    "vbz": "VERB",
    "md": "AUX",
    # nouns
    "nn": "NOUN",
    "nns": "NOUN",
    "nr": "NOUN",
    "nrs": "NOUN",
    "np": "PROPN",
    "nps": "PROPN",
    # adjectives and numerals
    "jj": "ADJ",
    "jjr": "ADJ",
    "jjs": "ADJ",
    "jjt": "ADJ",
    "od": "ADJ",
    "cd": "NUM",
    # pronouns
    "pn": "PRON",
    "pp": "PRON",
    "ppl": "PRON",
    "ppls": "PRON",
    "ppo": "PRON",
    "pps": "PRON",
    "ppss": "PRON",
    "wpo": "PRON",
    "wps": "PRON",
    "wp": "PRON",
    "ex": "PRON",
    # adverbs
    "rb": "ADV",
    "rbr": "ADV",
    "rbt": "ADV",
    "rn": "ADV",
    "ql": "ADV",
    "qlp": "ADV",
    "wql": "ADV",
    "wrb": "ADV",
    # function words
    "in": "ADP",
    "rp": "ADP",
    "cc": "CCONJ",
    "cs": "SCONJ",
    "to": "PART",
    "*": "PART",
    "uh": "INTJ",
    "nil": "X",
}

_AUX_CANDIDATES = re.compile(r"^(be|bed|bedz|beg|bem|ben|ber|bez|do|dod|doz|hv|hvd|hvg|hvn|hvz)$")
_VERB_FORMS = re.compile(r"^(vb|vbd|vbg|vbn|vbz|be|bed|bedz|beg|bem|ben|ber|bez|hv|hvd|hvg|hvn|hvz)$")
_SKIPPABLE = re.compile(r"^(\*|rb|rbr|ql|pps|ppss|ppo|np|nn|at|ex|abn|ap|cd|dt)$")


def base_tag(tag: str) -> str:
    """Strip Brown's suffixes: ``nn-tl`` -> ``nn``; ``fw-nn`` -> ``fw``; ``pps+bez`` -> ``pps``."""
    tag = tag.lower()
    if tag.startswith("fw-"):
        return "fw"
    first = tag.split("+")[0]
    stripped = True
    while stripped:
        stripped = False
        for suffix in ("-tl", "-hl", "-nc"):
            if first.endswith(suffix) and len(first) > len(suffix):
                first, stripped = first[: -len(suffix)], True
    if first not in ("--",):
        first = first.rstrip("*") or first  # 'md*' (mustn't) keeps its base
    if first.endswith("$") and first not in ("$",):
        first = first.rstrip("$")  # possessives: nn$ -> nn, pp$$ -> pp
    return first


def brown_to_upos(tags: list[str]) -> list[str]:
    """Map a sentence's Brown tags to UD UPOS.

    *be* is always AUX (UD treats the copula as AUX). *do* and *have* are AUX when a verb form
    follows within three words (skipping negation, adverbs and a subject), else VERB — Brown tags
    both uses alike, so this is a rule, not gold.
    """
    bases = [base_tag(t) for t in tags]
    upos: list[str] = []
    for i, b in enumerate(bases):
        if b == "fw":
            upos.append("X")
        elif b.startswith("be"):
            upos.append("AUX")
        elif _AUX_CANDIDATES.match(b):
            following = [x for x in bases[i + 1 : i + 4]]
            is_aux = False
            for x in following:
                if _VERB_FORMS.match(x):
                    is_aux = True
                    break
                if not _SKIPPABLE.match(x):
                    break
            upos.append("AUX" if is_aux else "VERB")
        else:
            upos.append(BASE_TAG_TO_UPOS.get(b, "X"))
    return upos


def read_brown_file(path: str | Path) -> list[tuple[list[str], list[str]]]:
    """Read one Brown ``word/tag`` file into sentences of (words, tags). Tag = text after the last '/'."""
    sentences = []
    for line in read_utf8(path).splitlines():
        line = line.strip()
        if not line:
            continue
        words, tags = [], []
        for item in line.split():
            word, sep, tag = item.rpartition("/")
            if not sep or not word:
                word, tag = item, "nil"
            words.append(word)
            tags.append(tag)
        sentences.append((words, tags))
    return sentences


def detokenize(words: list[str]) -> str:
    """Rough readable text from Brown tokens (quotes and punctuation attached)."""
    text = " ".join(words)
    text = text.replace("``", '"').replace("''", '"')
    text = re.sub(r" ([.,;:!?)])", r"\1", text)
    text = re.sub(r"\( ", "(", text)
    return text
