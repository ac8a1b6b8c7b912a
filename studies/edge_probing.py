"""Tenney et al. (2019): edge probing layer by layer, scalar mix, cumulative scoring and expected
layers, with Hewitt & Liang control tasks, Voita & Titov MDL and a random-encoder baseline.

The analysis is :func:`bertology.probes.probing.analysis.edge_probing_analysis`; ``bertology probe``
runs this study with the options given."""

from __future__ import annotations

from bertology.probes.probing.analysis import EDGE_PROBING_DEFAULTS, edge_probing_analysis
from bertology.probes.probing.tasks import TASK_NAMES_OR_FILES
from bertology.validation import add_study_rules

DESCRIPTION = "Edge probing per layer, scalar mix, expected layer (Tenney 2019) + controls, MDL, random encoder"
DEFAULTS = EDGE_PROBING_DEFAULTS
run = edge_probing_analysis

# checked with the config, before the model is loaded: a misspelt task would otherwise fail after the
# extraction, and one in mdl_tasks / random_baseline_tasks would silently get no MDL / baseline
add_study_rules(
    "edge_probing",
    {"tasks": TASK_NAMES_OR_FILES, "mdl_tasks": TASK_NAMES_OR_FILES, "random_baseline_tasks": TASK_NAMES_OR_FILES},
)
