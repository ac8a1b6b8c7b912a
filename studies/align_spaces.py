"""Align any two vector spaces (spaCy vectors, a feature-store layer, a word2vec file) with a
rotation, least squares or self-learning, and score word translation P@1/5/10 on held-out words.

The analysis is :func:`bertology.probes.embeddings.analysis.align_spaces_analysis`;
``bertology align`` runs this study with the options given."""

from __future__ import annotations

from bertology.probes.embeddings.analysis import ALIGN_SPACES_DEFAULTS, align_spaces_analysis

DESCRIPTION = "Align two spaces (spaCy, store layer, word2vec file): Procrustes / lstsq / self-learning, P@k"
DEFAULTS = ALIGN_SPACES_DEFAULTS
run = align_spaces_analysis
