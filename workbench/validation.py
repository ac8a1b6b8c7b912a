"""Value checks for study configs: one declarative table of what each numeric field may hold.

``bertology.runs.validate_config`` checks names and types; :func:`check_values` (called from it)
checks the values, so a config file or a command-line option cannot slip a negative ``limit``
(``corpus[:-2990]`` = "the first 10 sentences"), a threshold above 1 or a negative margin into
an analysis. Field names mean one thing across the workbench (``limit`` is always "the first N
sentences"), so the table is keyed by field name; :data:`STUDY_FIELD_RULES` holds a study's own
meaning where one ever differs. ``tests/test_validation.py`` fails when a study gains a numeric
field without a rule here.

Numbers are read the way people write them, once for every config: :func:`load_yaml` reads
``5e-4``, ``5E-4``, ``1e3`` and ``.5`` as floats (plain YAML 1.1 leaves an exponent without a dot
as a string), and :func:`as_float` / :func:`as_int` turn what a field of that type may hold -- an
int for a float, a number written as a string (``"5e-4"``, ``"1_000"``), a float with no fraction
for an int (``1e3``) -- into the number, or ``None`` when it is not one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bertology.errors import ConfigError, CorpusError
from bertology.hub import MODEL_NAME_HELP

__all__ = [
    "Rule",
    "FIELD_RULES",
    "STUDY_FIELD_RULES",
    "add_study_rules",
    "CROSS_FIELD_RULES",
    "rule_for",
    "check_values",
    "study_from_source",
    "load_yaml",
    "as_float",
    "as_int",
    "clean_label",
]


# --------------------------------------------------------------------------- numbers as people write them

_FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.1's floats, with the exponent's sign optional and an exponent allowed without a dot (YAML 1.2)
_YAML_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_NUMBER_TEXT = re.compile(r"[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?")


def _number_loader() -> type:
    """A ``yaml.SafeLoader`` whose float resolver is :data:`_YAML_FLOAT` (made once, on first use)."""
    import yaml

    class NumberLoader(yaml.SafeLoader):
        pass

    NumberLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _FLOAT_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    NumberLoader.add_implicit_resolver(_FLOAT_TAG, _YAML_FLOAT, list("-+0123456789."))
    return NumberLoader


_LOADER: list[type] = []


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that reads ``5e-4``, ``5E-4``, ``1e3`` and ``.5`` as floats."""
    import yaml

    if not _LOADER:
        _LOADER.append(_number_loader())
    return yaml.load(text, Loader=_LOADER[0])  # noqa: S506 -- a SafeLoader subclass


def as_float(value: Any) -> float | None:
    """``value`` as a finite float: a float, an int, or a number written as a string (``"5e-4"``,
    ``" 1_000 "``); ``None`` for anything else (text, ``True``, NaN, infinity)."""
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value.strip()):
        value = float(value.strip().replace("_", ""))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def as_int(value: Any) -> int | None:
    """``value`` as an int: an int, a float with no fraction (``1e3``, ``1000.0``) or such a number
    written as a string; ``None`` for anything else (``2.5``, text, ``True``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = as_float(value)
    return int(number) if number is not None and number.is_integer() and abs(number) < 2**53 else None


@dataclass(frozen=True)
class Rule:
    """What a field may hold: ``what`` (words for the error message) and ``ok(value) -> bool``.

    ``optional``: ``None`` is allowed too. ``each``: the value is a list and every item is checked.
    """

    what: str
    ok: Callable[[Any], bool]
    optional: bool = False
    each: bool = False
    # why a refused value is refused, when the rule alone cannot say (a model name: the line of
    # bertology.models.resolve, naming the places looked at); None: the rule's words say it all
    problem: Callable[[Any], str | None] | None = None

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.optional
        if self.each:
            return isinstance(value, (list, tuple)) and all(self.ok(v) for v in value)
        return self.ok(value)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def model_problem(v: Any) -> str | None:
    """Why ``v`` names no model :func:`bertology.models.resolve` finds (a registry name, a folder or a
    hub name, downloaded here when it is not cached unless offline), as resolve's one line; None
    when it does. A hub name the hub refuses for a reason of its own (no safetensors, gated, a
    missing revision, unreachable) raises that :class:`~bertology.hub.HubError`: the value is not
    wrong, the hub is in the way."""
    from bertology.errors import ModelError
    from bertology.hub import HubError
    from bertology.models import resolve

    if not isinstance(v, str):
        return None  # no line of resolve's: the rule's own words name what a model field takes
    try:
        resolve(v)
    except HubError:
        raise
    except (ModelError, OSError, ValueError) as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


def _model_resolves(v: Any) -> bool:
    """Whether ``v`` names a model :func:`bertology.models.resolve` finds (:func:`model_problem`)."""
    return isinstance(v, str) and model_problem(v) is None


def _model_problem_or_none(v: Any) -> str | None:
    """:func:`model_problem` of a named model; None for none named (``None``, ``""``)."""
    return None if v is None or v == "" else model_problem(v)


POSITIVE_INT = Rule("an integer >= 1", lambda v: _int(v) and v >= 1)
NON_NEGATIVE_INT = Rule("an integer >= 0", lambda v: _int(v) and v >= 0)
SEED = Rule("an integer in [0, 2**32 - 1]", lambda v: _int(v) and 0 <= v < 2**32)
LAYER = Rule("a layer index (an integer; negative counts from the last layer)", _int)
PROBABILITY = Rule("a number in [0, 1]", lambda v: _number(v) and 0 <= v <= 1)
SHARE_STEP = Rule("a number in (0, 1]", lambda v: _number(v) and 0 < v <= 1)
NON_NEGATIVE = Rule("a number >= 0", lambda v: _number(v) and v >= 0)

MODEL = Rule(f"a {MODEL_NAME_HELP} (`bertology models` lists them)", _model_resolves, problem=_model_problem_or_none)
OPTIONAL_MODEL = Rule(
    f'a {MODEL_NAME_HELP}, or "" (none)',
    lambda v: v == "" or _model_resolves(v),
    optional=True,
    problem=_model_problem_or_none,
)

FIELD_RULES: dict[str, Rule] = {
    # the model, checked before a run folder is made (`bertology models` lists the names)
    "model": MODEL,
    # a second model: alignment's other encoder, emergence's cloze yardstick, the quickstart's and the
    # tour's second run ("" or null: none)
    "other_model": OPTIONAL_MODEL,
    "reference_model": OPTIONAL_MODEL,
    "second_model": OPTIONAL_MODEL,
    # where the model (and the probes) run; whether a GPU is there is checked when the run starts
    "device": Rule(
        "cpu, cuda, cuda:N or auto", lambda v: isinstance(v, str) and bool(re.fullmatch(r"cpu|cuda(:\d+)?|auto", v))
    ),
    # corpus and sizes
    "limit": Rule("an integer >= 1 (the first N sentences) or null (the whole corpus)", POSITIVE_INT.ok, optional=True),
    "seed": SEED,
    "seeds": Rule("a list of integers in [0, 2**32 - 1]", SEED.ok, each=True),
    "max_epochs": POSITIVE_INT,
    "batch_size": POSITIVE_INT,
    # head types (Voita et al. 2019; Clark et al. 2019): attention shares and normalised entropies
    "positional_threshold": PROBABILITY,
    "syntactic_margin": PROBABILITY,
    "rare_threshold": PROBABILITY,
    "special_threshold": PROBABILITY,
    "broad_entropy": PROBABILITY,
    "min_count": POSITIVE_INT,
    "example_sentences": NON_NEGATIVE_INT,
    "example_max_words": POSITIVE_INT,
    # pruning
    "step": SHARE_STEP,
    "max_share": Rule("a number in (0, 1] (where the curves stop; 1 = every head removed)", SHARE_STEP.ok),
    "random_seeds": POSITIVE_INT,
    "l0_lambdas": Rule("a list of numbers >= 0", NON_NEGATIVE.ok, each=True),
    "l0_steps": POSITIVE_INT,
    "tolerances": Rule("a list of numbers >= 0", NON_NEGATIVE.ok, each=True),
    "test_share": Rule("a number in (0, 1)", lambda v: _number(v) and 0 < v < 1),
    "best_head_dev_share": Rule("a number in (0, 1)", lambda v: _number(v) and 0 < v < 1),
    "compare_shares": Rule("a list of numbers in [0, 1]", PROBABILITY.ok, each=True, optional=True),
    # contextuality
    "min_occurrences": POSITIVE_INT,
    "max_occurrences": POSITIVE_INT,
    "min_word_occurrences": POSITIVE_INT,
    "neighbours_k": POSITIVE_INT,
    "n_clusters": POSITIVE_INT,
    "export_layers": Rule("a list of layer indices (integers)", LAYER.ok, each=True),
    # alignment
    "n_train": POSITIVE_INT,
    "n_test": POSITIVE_INT,
    "n_test_sources": POSITIVE_INT,
    "vocab_cutoff": POSITIVE_INT,
    "max_iter": POSITIVE_INT,
    "layer_pair": Rule(
        "two layer indices", lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(_int(x) for x in v)
    ),
    "top": NON_NEGATIVE_INT,
    "top_moved": NON_NEGATIVE_INT,
    "drift_min_count": POSITIVE_INT,
    # semantic change between slices of documents
    "replicates": POSITIVE_INT,
    "control_replicates": POSITIVE_INT,
    "anchors": POSITIVE_INT,
    "vector_dim": POSITIVE_INT,
    "vector_window": POSITIVE_INT,
    "vector_epochs": POSITIVE_INT,
    "neighbourhood_k": POSITIVE_INT,
    "frequency_bins": POSITIVE_INT,
    "contextual_layer": LAYER,
    "contextual_max_sentences": POSITIVE_INT,
    "control_quantile": Rule("a number in (0, 1)", lambda v: _number(v) and 0 < v < 1),
    # emergence
    "cloze_sentences": NON_NEGATIVE_INT,
    # fine-tuning (the finetuning study)
    "max_examples": Rule(
        "an integer >= 3 (the first N examples: train, dev and test) or null (all)",
        lambda v: _int(v) and v >= 3,
        optional=True,
    ),
    "epochs": POSITIVE_INT,
    "max_seq_len": Rule("an integer >= 8", lambda v: _int(v) and v >= 8),
    "adapter_size": POSITIVE_INT,
    "learning_rates": Rule(
        "a mapping of fine-tuning mode to a learning rate > 0, e.g. {full: 1.0e-4}",
        lambda v: isinstance(v, dict) and all(isinstance(k, str) and _number(x) and x > 0 for k, x in v.items()),
    ),
    "cka_sentences": Rule("an integer >= 2 (CKA needs two items)", lambda v: _int(v) and v >= 2),
    # compression of a fine-tuned model
    "importance_examples": POSITIVE_INT,
    "lottery_rounds": NON_NEGATIVE_INT,
    "lottery_prune_share": Rule("a number in (0, 1)", lambda v: _number(v) and 0 < v < 1),
    "lottery_scope": Rule("global or per_matrix", lambda v: v in ("global", "per_matrix")),
    "structured_seeds": Rule("a list of integers in [0, 2**32 - 1]", SEED.ok, each=True),
    "structured_keep": Rule("a number in (0, 1]", lambda v: _number(v) and 0 < v <= 1),
    "structured_head_step": SHARE_STEP,
    "probe_sentences": NON_NEGATIVE_INT,
    # pretraining variants at equal compute
    "budget_steps": POSITIVE_INT,
    "warmup_fraction": PROBABILITY,
}

# {study: {field: Rule}} where a study means something else by a field name, or holds values only it
# knows (its methods, modes, tasks): a study module adds its own with :func:`add_study_rules`.
STUDY_FIELD_RULES: dict[str, dict[str, Rule]] = {}


def add_study_rules(study: str, rules: dict[str, Rule]) -> None:
    """Give ``study`` its own rules for ``rules``' fields (over the shared ones in :data:`FIELD_RULES`);
    a study module calls it when imported, so its config is checked before any work."""
    STUDY_FIELD_RULES.setdefault(study, {}).update(rules)


# (fields, holds(config) -> bool, what must hold)
CROSS_FIELD_RULES: list[tuple[tuple[str, ...], Callable[[dict[str, Any]], bool], str]] = [
    (
        ("min_occurrences", "max_occurrences"),
        lambda c: c["min_occurrences"] <= c["max_occurrences"],
        "min_occurrences must be <= max_occurrences",
    ),
]


def rule_for(field: str, study: str | None = None) -> Rule | None:
    """The rule a field's value must meet (the study's own, else the shared one), or None."""
    return STUDY_FIELD_RULES.get(study or "", {}).get(field) or FIELD_RULES.get(field)


def study_from_source(source: str) -> str | None:
    """The study a ``source`` label names: ``"<study>: <file or 'command line'>"`` (the form
    ``bertology.studies.run_study`` passes) or a shipped config path ``.../configs/<study>.yaml``."""
    head = source.split(": ", 1)[0]
    if head != source and head.isidentifier():
        return head
    name = source.replace("\\", "/").rsplit("/", 1)[-1]
    return name.removesuffix(".yaml") if name.endswith(".yaml") and "/configs/" in source.replace("\\", "/") else None


def check_values(config: dict[str, Any], source: str, study: str | None = None) -> None:
    """Raise ``ConfigError`` for the first value outside its field's rule, naming the study (when
    known), the source, the field and the value. Fields without a rule are not checked here."""
    study = study or study_from_source(source)
    where = source if study is None or source.startswith(f"{study}:") else f"{study}: {source}"
    for field, value in config.items():
        rule = rule_for(field, study)
        if rule is not None and not rule.accepts(value):
            why = rule.problem(value) if rule.problem is not None and not rule.each else None
            if why:  # the check's own line (a model name: what resolve looked at), after the field
                raise ConfigError(f"{where}: field {field!r}: {why}")
            raise ConfigError(f"{where}: field {field!r} must be {rule.what}, got {value!r}")
    for fields, holds, what in CROSS_FIELD_RULES:
        if all(config.get(f) is not None for f in fields) and not holds(config):
            got = ", ".join(f"{f}={config[f]!r}" for f in fields)
            raise ConfigError(f"{where}: {what}, got {got}")


def clean_label(value: str, where: str, error: type[Exception] = CorpusError) -> str:
    """A task file's label as the task uses it: surrounding white space stripped (``"pos "`` is
    ``"pos"``); an empty or blank label is an ``error`` naming ``where`` (file:line). The one rule
    of every task format: fine-tuning's JSONL and CSV/TSV, the probes' jiant-style JSONL."""
    label = value.strip()
    if not label:
        raise error(f"{where}: an empty or blank label {value!r}; every example needs a label")
    return label
