"""Devlin et al. (2019), Table 7: which layers to use as features — first layer, last hidden, sum of
all layers, second-to-last, sum of the last four, concatenation of the last four — scored with the
same probe on the same task (NER in the paper; entities and POS here).

The analysis is :func:`bertology.probes.probing.analysis.feature_combinations_analysis`."""

from __future__ import annotations

from bertology.probes.probing.analysis import FEATURE_COMBINATIONS_DEFAULTS, feature_combinations_analysis
from bertology.probes.probing.tasks import TASK_NAMES
from bertology.validation import add_study_rules

DESCRIPTION = "BERT paper feature-based comparison: first / last / sum all / 2nd-to-last / sum last 4 / concat last 4"
DEFAULTS = FEATURE_COMBINATIONS_DEFAULTS
run = feature_combinations_analysis

add_study_rules("feature_combinations", {"tasks": TASK_NAMES})  # before the model is loaded
