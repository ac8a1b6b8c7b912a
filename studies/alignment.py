"""Rotation alignment of two embedding spaces "solved exactly with SVD": English→French static
vectors with FreeDict dictionaries (Procrustes, least squares, Artetxe self-learning; NN vs CSLS),
two layers of one model, two models, and one language in two eras (KJV 1611 vs Brown 1961).

The analysis is :func:`bertology.probes.embeddings.analysis.alignment_analysis`."""

from __future__ import annotations

from bertology.probes.embeddings.analysis import ALIGNMENT_DEFAULTS, alignment_analysis

DESCRIPTION = "Procrustes / self-learning / CSLS: en→fr, layer vs layer, model vs model, KJV 1611 vs Brown 1961"
DEFAULTS = ALIGNMENT_DEFAULTS
run = alignment_analysis
