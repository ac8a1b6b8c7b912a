"""Hewitt & Manning (2019): the structural probe -- a linear map whose squared distances fit
parse-tree distances (UUAS, DSpr.) and whose squared norms fit tree depth (root%, NSpr.), per
layer, with a rank sweep at the best layer, the LINEAR and random-init baselines and example trees.

The analysis is :func:`bertology.probes.probing.structural_analysis.structural_probe_analysis`;
``bertology structural`` runs this study with the options given."""

from __future__ import annotations

from bertology.probes.probing.structural_analysis import STRUCTURAL_PROBE_DEFAULTS, structural_probe_analysis

DESCRIPTION = "Structural probe per layer: tree distances and depths, UUAS / DSpr / root% / NSpr, rank sweep (Hewitt & Manning 2019)"
DEFAULTS = STRUCTURAL_PROBE_DEFAULTS
run = structural_probe_analysis
