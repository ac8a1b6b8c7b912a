"""Michel et al. (2019) head importance and pruning curves (by importance, at random, by Voita head
type) with real head removal, and Voita et al. (2019) Hard-Concrete L0 gates.

The metric is the MLM loss for models with an MLM head, otherwise a POS tagging head trained on the
frozen encoder (the shipped MiniLM has no MLM head). A thin layer over
:func:`bertology.probes.heads.analysis.pruning_analysis` (also what ``bertology prune`` runs)."""

from __future__ import annotations

from bertology.probes.heads.analysis import PRUNING_DEFAULTS, pruning_analysis

DESCRIPTION = "Head importance (Michel 2019), pruning curves by importance / random / type, real removal, L0 gates"
DEFAULTS = PRUNING_DEFAULTS
run = pruning_analysis
