"""The analyses of the workbench, one room per subject; each subpackage's ``__init__`` is its public API.

- :mod:`bertology.probes.probing`: edge probing (Tenney et al. 2019) per layer, scalar mix and
  cumulative, expected layer, control tasks and selectivity, MDL, the scikit-learn estimator.
- :mod:`bertology.probes.heads`: attention-head statistics and types (Voita et al. 2019, Clark et al.
  2019), attention-based dependency probes, head gates, importance (Michel et al. 2019), pruning.
- :mod:`bertology.probes.embeddings`: static vectors, contextuality (Ethayarajh 2019), neighbours and
  senses, rotation alignment (Procrustes, self-learning, CSLS), bilingual dictionaries, drift.
- :mod:`bertology.probes.compression`: post-training quantization (real dynamic int8, simulated
  lower-bit weights) measured against float32.

Analyses import the core (models, corpus, store, results) and never the studies, CLI or dashboard.
"""
