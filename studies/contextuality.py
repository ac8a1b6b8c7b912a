"""Ethayarajh (2019): how contextual are contextual embeddings? Self-similarity, intra-sentence
similarity and maximum explainable variance per layer with anisotropy baselines; static vs
contextual neighbours of polysemous words and their sense clusters (UMAP).

The analysis is :func:`bertology.probes.embeddings.analysis.contextuality_analysis`;
``bertology embeddings`` runs this study with the options given."""

from __future__ import annotations

from bertology.probes.embeddings.analysis import CONTEXTUALITY_DEFAULTS, contextuality_analysis

DESCRIPTION = "Static vs contextual (Ethayarajh 2019): self-similarity, intra-sentence, MEV per layer; senses"
DEFAULTS = CONTEXTUALITY_DEFAULTS
run = contextuality_analysis
