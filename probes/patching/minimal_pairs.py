"""Subject-verb agreement minimal pairs through attractors, from the workbench's own templates and
word lists (in the manner of Linzen et al. 2016, Marvin & Linzen 2018, Goldberg 2019 and Finlayson
et al. 2021; no data set is read).

Each pair is a clean and a corrupted sentence with the verb masked, differing only in the subject's
number (``flip="subject"``: "The key to the cabinets [MASK] here ." vs "The keys to the cabinets
[MASK] here .") or in the subject's and the attractor's (``flip="both"``: "... the cabinet ...").
Three templates put an attractor noun between subject and verb:

- ``pp``: a prepositional phrase, "The key to the cabinets [MASK] here .";
- ``object_rc``: an object relative clause, "The author that the guards saw [MASK] here .";
- ``subject_rc``: a subject relative clause, "The author that saw the guards [MASK] here .".

Verbs: ``is/are``, ``was/were``, ``has/have`` (the relative clauses use past-tense verbs, which do not
agree). Half the clean sentences have an attractor of the other number than the subject's
(``condition="mismatch"``), half of the same number. Only pairs whose nouns and verbs are single
tokens for the tokenizer, and whose two sentences have the same token length, are kept; every other
word of the templates is kept only if it is one token, so that each token has one role (``det``,
``subject``, ``prep``, ...) and positions align across pairs by role.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bertology.errors import ConfigError

__all__ = [
    "AgreementPair",
    "agreement_pairs",
    "TEMPLATES",
    "VERBS",
    "ROLE_ORDER",
    "PEOPLE",
    "THINGS",
]

# singular / plural nouns: people (subjects and attractors of every template) and things (pp only)
PEOPLE: tuple[tuple[str, str], ...] = tuple(
    tuple(pair.split("/"))  # type: ignore[misc]  # "a/b" -> (a, b)
    for pair in """author/authors guard/guards friend/friends teacher/teachers student/students
    doctor/doctors patient/patients boy/boys girl/girls officer/officers farmer/farmers pilot/pilots
    senator/senators manager/managers lawyer/lawyers judge/judges king/kings soldier/soldiers
    worker/workers man/men woman/women child/children driver/drivers singer/singers leader/leaders
    player/players client/clients neighbor/neighbors""".split()
)
THINGS: tuple[tuple[str, str], ...] = tuple(
    tuple(pair.split("/"))  # type: ignore[misc]
    for pair in """key/keys cabinet/cabinets book/books car/cars house/houses table/tables door/doors
    window/windows picture/pictures letter/letters report/reports bottle/bottles chair/chairs
    painting/paintings cake/cakes road/roads tree/trees box/boxes bag/bags phone/phones""".split()
)
PREPOSITIONS = ("of", "near", "behind", "beside", "with", "from", "for", "to")
RC_VERBS = ("saw", "met", "knew", "liked", "helped", "called", "loved", "watched", "visited")
VERBS: dict[str, tuple[str, str]] = {"is/are": ("is", "are"), "was/were": ("was", "were"), "has/have": ("has", "have")}
CONTINUATIONS: dict[str, tuple[str, ...]] = {
    "is/are": ("here", "there", "ready", "late", "new", "old", "small", "good"),
    "was/were": ("here", "there", "ready", "late", "new", "old", "small", "good"),
    "has/have": ("arrived", "left", "changed", "won", "failed", "returned"),
}
# template: its words, with {subject}, {attractor}, {prep}, {rc_verb}, {continuation} slots, and roles
TEMPLATES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "pp": (
        ("The", "{subject}", "{prep}", "the", "{attractor}", "[MASK]", "{continuation}", "."),
        ("det", "subject", "prep", "attractor_det", "attractor", "verb", "continuation", "period"),
    ),
    "object_rc": (
        ("The", "{subject}", "that", "the", "{attractor}", "{rc_verb}", "[MASK]", "{continuation}", "."),
        ("det", "subject", "that", "attractor_det", "attractor", "rc_verb", "verb", "continuation", "period"),
    ),
    "subject_rc": (
        ("The", "{subject}", "that", "{rc_verb}", "the", "{attractor}", "[MASK]", "{continuation}", "."),
        ("det", "subject", "that", "rc_verb", "attractor_det", "attractor", "verb", "continuation", "period"),
    ),
}
# every role in one display order (special tokens first and last); positions align by role
ROLE_ORDER = (
    "CLS",
    "det",
    "subject",
    "prep",
    "that",
    "attractor_det",
    "attractor",
    "rc_verb",
    "verb",
    "continuation",
    "period",
    "SEP",
)


@dataclass(frozen=True)
class AgreementPair:
    """One minimal pair. ``clean`` / ``corrupted``: sentences with ``[MASK]`` at the verb; ``target``
    / ``foil``: the verb form correct / wrong for ``clean`` (the reverse holds for ``corrupted``);
    ``roles``: one per token of both sentences under the tokenizer they were built for (``CLS``,
    ``det``, ``subject``, ..., ``verb`` at the mask, ``SEP``); ``condition``: ``mismatch`` when the
    clean sentence's attractor has the other number than its subject."""

    pair_id: int
    template: str
    verb: str
    clean: str
    corrupted: str
    target: str
    foil: str
    subject_number: str
    attractor_number: str
    condition: str
    roles: tuple[str, ...]

    def as_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "roles"}
        return {**row, "roles": " ".join(self.roles)}


def _one_token(tokenizer: Any, word: str) -> bool:
    """The word is one token of the vocabulary (not [UNK] or another special token)."""
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    return len(ids) == 1 and ids[0] not in tokenizer.all_special_ids


def _single_token_lists(tokenizer: Any) -> dict[str, Any]:
    """The word lists reduced to what the tokenizer keeps as one token (noun pairs: both forms;
    sentence-initial "The" is checked with the other template words)."""
    keep = lambda words: tuple(w for w in words if _one_token(tokenizer, w))  # noqa: E731
    pairs = lambda nouns: tuple(p for p in nouns if all(_one_token(tokenizer, w) for w in p))  # noqa: E731
    return {
        "people": pairs(PEOPLE),
        "things": pairs(THINGS),
        "prep": keep(PREPOSITIONS),
        "rc_verb": keep(RC_VERBS),
        "verbs": {k: v for k, v in VERBS.items() if all(_one_token(tokenizer, w) for w in v)},
        "continuation": {k: keep(v) for k, v in CONTINUATIONS.items()},
    }


def _check_options(templates: Sequence[str], verbs: Sequence[str], flip: str) -> None:
    for name, given, known in (("templates", templates, TEMPLATES), ("verbs", verbs, VERBS)):
        unknown = [t for t in given if t not in known] or ([] if given else ["(none)"])
        if unknown:
            raise ConfigError(f"{name}: unknown {unknown}; choose from {', '.join(known)}")
    if flip not in ("subject", "both"):
        raise ConfigError(f"flip must be 'subject' or 'both', got {flip!r}")


def _sentence(words: Sequence[str], fill: dict[str, str]) -> list[str]:
    return [w.format(**fill) if "{" in w else w for w in words]


def _token_roles(tokenizer: Any, words: list[str], roles: tuple[str, ...]) -> tuple[str, ...] | None:
    """One role per token (special tokens ``CLS`` / ``SEP``), or None when a word is not one token."""
    text = " ".join(w.replace("[MASK]", tokenizer.mask_token) for w in words)
    ids = tokenizer(text)["input_ids"]
    if len(ids) != len(words) + 2 or (tokenizer.unk_token_id is not None and tokenizer.unk_token_id in ids):
        return None
    return ("CLS", *roles, "SEP")


def _draw(rng: random.Random, lists: dict[str, Any], template: str, verb: str, mismatch: bool) -> dict[str, Any]:
    """Random words for one pair: noun pairs, numbers (0 singular, 1 plural) and slot fillers."""
    nouns = lists["people"] if template != "pp" else lists["people"] + lists["things"]
    subject, attractor = rng.sample(nouns, 2)
    number = rng.randrange(2)
    return {
        "subject": subject,
        "attractor": attractor,
        "number": number,
        "attractor_number": 1 - number if mismatch else number,
        "prep": rng.choice(lists["prep"]),
        "rc_verb": rng.choice(lists["rc_verb"]),
        "continuation": rng.choice(lists["continuation"][verb]),
    }


def _build(
    tokenizer: Any, pair_id: int, template: str, verb: str, forms: tuple[str, str], d: dict[str, Any], flip: str
):
    """The pair for one draw, or None when its two sentences do not tokenise word by word."""
    words, roles = TEMPLATES[template]
    fill = {k: d[k] for k in ("prep", "rc_verb", "continuation")}
    flipped_attractor = 1 - d["attractor_number"] if flip == "both" else d["attractor_number"]
    clean = _sentence(
        words, {**fill, "subject": d["subject"][d["number"]], "attractor": d["attractor"][d["attractor_number"]]}
    )
    corrupted = _sentence(
        words, {**fill, "subject": d["subject"][1 - d["number"]], "attractor": d["attractor"][flipped_attractor]}
    )
    token_roles = _token_roles(tokenizer, clean, roles)
    if token_roles is None or _token_roles(tokenizer, corrupted, roles) is None:
        return None
    number_name = ("singular", "plural")
    return AgreementPair(
        pair_id=pair_id,
        template=template,
        verb=verb,
        clean=" ".join(clean),
        corrupted=" ".join(corrupted),
        target=forms[d["number"]],
        foil=forms[1 - d["number"]],
        subject_number=number_name[d["number"]],
        attractor_number=number_name[d["attractor_number"]],
        condition="mismatch" if d["number"] != d["attractor_number"] else "match",
        roles=token_roles,
    )


def agreement_pairs(
    tokenizer: Any,
    n: int = 120,
    *,
    seed: int = 0,
    templates: Sequence[str] = tuple(TEMPLATES),
    verbs: Sequence[str] = tuple(VERBS),
    flip: str = "subject",
    max_tries: int = 50,
) -> list[AgreementPair]:
    """``n`` distinct minimal pairs (fewer only if the tokenizer leaves too few words whole), drawn
    with ``seed``: templates and verbs in turn, half of the clean sentences with a mismatching
    attractor; each kept only when both sentences tokenise one token per word (so they have the
    same token length and the mask at the same token). ``flip``: ``subject`` (only the subject's
    number differs) or ``both`` (the attractor's too). Raises :class:`ConfigError` for an unknown
    template, verb or flip, or when the tokenizer keeps no usable words."""
    _check_options(templates, verbs, flip)
    lists = _single_token_lists(tokenizer)
    usable_verbs = [v for v in verbs if v in lists["verbs"] and lists["continuation"][v]]
    if len(lists["people"]) < 2 or not usable_verbs or not lists["prep"] or not lists["rc_verb"]:
        raise ConfigError("minimal pairs: this tokenizer splits too many of the template words into several tokens")
    rng = random.Random(seed)
    pairs: list[AgreementPair] = []
    seen: set[str] = set()
    for attempt in range(n * max_tries):
        if len(pairs) == n:
            break
        template = templates[attempt % len(templates)]
        verb = usable_verbs[(attempt // len(templates)) % len(usable_verbs)]
        draw = _draw(rng, lists, template, verb, mismatch=len(pairs) % 2 == 0)
        pair = _build(tokenizer, len(pairs), template, verb, lists["verbs"][verb], draw, flip)
        if pair is not None and pair.clean not in seen:
            seen.add(pair.clean)
            pairs.append(pair)
    return pairs
