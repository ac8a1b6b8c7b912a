"""Voita et al. (2019) and Clark et al. (2019): head statistics, head types (positional / syntactic /
rare-token / special / broad) and the attention-based dependency probe, on word-level attention.

A thin layer over :func:`bertology.probes.heads.analysis.head_types_analysis` (also what
``bertology heads`` runs)."""

from __future__ import annotations

from bertology.probes.heads.analysis import HEAD_TYPES_DEFAULTS, head_types_analysis

DESCRIPTION = "Head statistics and types (Voita 2019, Clark 2019) + attention-based dependency probe (UAS)"
DEFAULTS = HEAD_TYPES_DEFAULTS
run = head_types_analysis
