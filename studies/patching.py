"""Causal (activation) patching for encoders (Vig et al. 2020; Meng et al. 2022; Finlayson et al.
2021): which hidden states (layer x token role) and which heads carry the subject's number to a
masked verb, over subject-verb agreement minimal pairs through attractors, with intervals over pairs.

A thin layer over :func:`bertology.probes.patching.analysis.patching_analysis` (also what
``bertology patch`` runs without a pair of its own)."""

from __future__ import annotations

from bertology.probes.patching.analysis import PATCHING_DEFAULTS, patching_analysis
from bertology.probes.patching.minimal_pairs import TEMPLATES, VERBS
from bertology.validation import NON_NEGATIVE, POSITIVE_INT, Rule, add_study_rules

DESCRIPTION = "Activation patching: the layers, token roles and heads that carry subject number to the verb"
DEFAULTS = PATCHING_DEFAULTS
run = patching_analysis

# checked with the config, before any model is loaded
add_study_rules(
    "patching",
    {
        "pairs": Rule("an integer >= 2 (minimal pairs drawn)", lambda v: POSITIVE_INT.ok(v) and v >= 2),
        "templates": Rule(f"a list of templates ({', '.join(TEMPLATES)})", TEMPLATES.__contains__, each=True),
        "verbs": Rule(f"a list of verb pairs ({', '.join(VERBS)})", VERBS.__contains__, each=True),
        "flip": Rule("subject or both", ("subject", "both").__contains__),
        "use_pairs": Rule("all or correct", ("all", "correct").__contains__),
        "direction": Rule("denoising or noising", ("denoising", "noising").__contains__),
        "random_init_control": Rule("true or false", lambda v: isinstance(v, bool)),
        "min_difference": NON_NEGATIVE,
        "carry_threshold": Rule("a number in [0, 1)", lambda v: NON_NEGATIVE.ok(v) and v < 1),
        "confidence": Rule("a number in (0, 1)", lambda v: NON_NEGATIVE.ok(v) and 0 < v < 1),
        "batch_rows": POSITIVE_INT,
    },
)
