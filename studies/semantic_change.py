"""Semantic change between slices of documents chosen by metadata: the State of the Union
addresses of 1900–1929 against 1990–2021, and Democratic against Republican presidents of
1950–2021, by default (Hamilton et al. 2016; with document-bootstrap intervals, issue 30, and each
word tested against its own split-half control, issue 42). Shipped config:
``configs/semantic_change.yaml``.

The analysis is :func:`bertology.probes.embeddings.analysis.semantic_change_analysis`; the data
come from ``bash scripts/setup.sh --with-pretraining-corpus`` (or any folder of ``.txt`` files with
``.json`` metadata sidecars, option ``documents``)."""

from __future__ import annotations

from bertology.probes.embeddings.analysis import SEMANTIC_CHANGE_DEFAULTS, semantic_change_analysis

DESCRIPTION = "Words that moved between slices of documents (1900 vs 1990, left vs right), with intervals and a control"
DEFAULTS = SEMANTIC_CHANGE_DEFAULTS
run = semantic_change_analysis
