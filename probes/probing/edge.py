"""Edge probing (Tenney et al. 2019): span probes on frozen features, all layers trained jointly.

This module is the public face of edge probing; the implementation lives in private modules,
one concept each:

* :mod:`._config` -- :class:`ProbeConfig`, the probe's hyper-parameters (plain data);
* :mod:`._spans` -- :func:`span_index` (a task's span tokens ``[n, S, M]``) and
  :class:`SpanFeatures` (gathered, standardised features ``[L, B, S, M, D]``);
* :mod:`._model` -- :class:`JointProbes`, ``P`` probes with stacked parameters (scalar mix,
  projection, span pooling, classifier) and :func:`mixing_spec` (which layers each probe reads);
* :mod:`._training` -- :func:`fit_joint`: minibatch Adam, or (:mod:`._lbfgs`) full-batch L-BFGS
  for linear probes on fixed pooled inputs; :func:`predict_logits`;
* :mod:`._scores` -- :func:`classification_metrics`, expected layers, the intervals of test scores
  (:func:`seed_and_sentence_interval`, :func:`layer_intervals`), :func:`summarise` (best layer
  chosen on dev, reported on test), :func:`layer_differences` (every layer against that best layer,
  paired on the same test sentences);
* :mod:`._runners` -- :func:`probe_arrays` and :func:`probe_layers`, the study-level entry points
  returning a tidy DataFrame;
* :mod:`._estimator` -- :class:`EdgeProbe`, the scikit-learn estimator on already pooled features.

:func:`fit_joint` trains ``P`` independent probes in one vectorised pass. What each probe sees is
set by a layer mixing spec over the ``L`` input layers:

* ``per_layer``: probe ``p`` reads layer ``p`` only;
* ``mix``: one probe reads a learned scalar mix ``h = gamma * sum_l softmax(a)_l h_l`` (ELMo);
* ``cumulative``: probe ``p`` reads a learned scalar mix of layers ``0..p`` (Tenney's cumulative
  scoring);
* ``fixed``: given weights ``[P, L]`` (e.g. sum of the last four layers), not learned.

MLP probe: project token vectors ``D -> proj_dim`` (separately for span 1 and span 2), pool each
span (self-attentive: a learned score per token, softmax within the span, weighted sum; or mean),
concatenate the spans, then Linear, tanh, LayerNorm, dropout, Linear. Linear probe: pool the raw
token vectors the same way, concatenate, one linear layer (no projection, no hidden layer).
Loss: softmax cross-entropy (single label) or sigmoid BCE (multi-label), early stopping on dev
loss, keeping each probe's best parameters. Linear probes whose pooled inputs are fixed (width-1
spans, or mean pooling; per-layer or fixed mixing) train full-batch with L-BFGS on the
L2-regularised logistic loss (scikit-learn's objective, ``C``); everything else with minibatch
Adam (fused update where torch has it). Both compute their matmuls in bfloat16 (float32
parameters, optimiser state, losses and predictions) only where a measured micro-benchmark finds
bfloat16 faster than float32 (``precision="auto"``, :func:`bertology.runtime.resolve_precision`:
AMX / AVX512-BF16 CPUs, GPUs); elsewhere in float32. Width-1 spans skip attention pooling.

Input features: ``[L, n_words, D]`` (``FeatureStore.layers()``), words in corpus order, with
``sentence_offsets [n_sentences + 1]`` giving each sentence's first word.
"""

from __future__ import annotations

from bertology.probes.probing._config import ProbeConfig
from bertology.probes.probing._estimator import EdgeProbe, pooled_features
from bertology.probes.probing._model import MODES, JointProbes, mixing_spec
from bertology.probes.probing._runners import (
    SCORE_COLUMNS,
    SENTENCE_COLUMNS,
    label_matrix,
    layer_features,
    probe_arrays,
    probe_layers,
)
from bertology.probes.probing._scores import (
    INTERVAL_METRICS,
    SELECTED_ON,
    classification_metrics,
    compare_best_layers,
    confidence_intervals,
    cumulative_deltas,
    cumulative_expected_layer,
    expected_layer,
    item_statistics,
    layer_differences,
    layer_intervals,
    seed_and_sentence_interval,
    sentence_sums,
    summarise,
)
from bertology.probes.probing._spans import SpanFeatures, span_index
from bertology.probes.probing._training import JointFit, fit_joint, predict_logits

__all__ = [
    "ProbeConfig",
    "SpanFeatures",
    "JointProbes",
    "JointFit",
    "EdgeProbe",
    "fit_joint",
    "predict_logits",
    "span_index",
    "mixing_spec",
    "MODES",
    "classification_metrics",
    "label_matrix",
    "layer_features",
    "probe_arrays",
    "probe_layers",
    "SCORE_COLUMNS",
    "expected_layer",
    "cumulative_deltas",
    "cumulative_expected_layer",
    "confidence_intervals",
    "summarise",
    "pooled_features",
    "INTERVAL_METRICS",
    "SELECTED_ON",
    "item_statistics",
    "layer_intervals",
    "seed_and_sentence_interval",
    "sentence_sums",
    "layer_differences",
    "compare_best_layers",
    "SENTENCE_COLUMNS",
]
