"""Planted-answer data for probing: features where only chosen layers carry the labels.

Used by the tests and the benchmark; every answer is known in advance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bertology.probes.probing.tasks import EdgeExample, EdgeTask


@dataclass
class PlantedData:
    features: np.ndarray  # [L, n_words, D] float32
    sentence_offsets: np.ndarray  # [n_sentences + 1]
    words: list[list[str]]  # word strings (a word's type determines nothing unless asked)
    task: EdgeTask


def planted_task(
    n_layers: int = 4,
    n_words: int = 2000,
    dim: int = 16,
    n_labels: int = 4,
    signal_layers: dict[int, float] | None = None,
    n_spans: int = 1,
    max_span: int = 1,
    vocab: int = 500,
    seed: int = 0,
) -> PlantedData:
    """Random sentences (5..14 words) with one example per word (span 1 starts there).

    Labels are uniform over ``n_labels``. Features are N(0, 1) noise; layer ``l`` in
    ``signal_layers`` gets ``strength * centre[label]`` added on every word of span 1 (centres are
    random unit-variance vectors), so only those layers carry the label. With ``n_spans = 2``,
    span 2 is a random other word of the sentence and the label is ``(label1 + label2) % K`` of two
    hidden per-word labels, each planted on its own span, so both spans are needed.
    Words are random types from a vocabulary of ``vocab`` (types do not predict labels).
    """
    rng = np.random.default_rng(seed)
    signal_layers = {n_layers // 2: 2.0} if signal_layers is None else signal_layers
    lengths: list[int] = []
    while sum(lengths) < n_words:
        lengths.append(int(rng.integers(5, 15)))
    lengths[-1] -= sum(lengths) - n_words
    if lengths[-1] < 2:
        lengths[-2] += lengths.pop()
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    hidden = rng.integers(0, n_labels, size=n_words)
    features = rng.normal(size=(n_layers, n_words, dim)).astype(np.float32)
    centres = rng.normal(size=(n_labels, dim)).astype(np.float32)
    words = [[f"w{int(t)}" for t in rng.integers(0, vocab, size=n)] for n in lengths]
    examples = []
    span_mask = np.zeros(n_words, dtype=bool)
    for s, n in enumerate(lengths):
        base = offsets[s]
        for i in range(n):
            width = int(rng.integers(1, max_span + 1))
            end = min(n, i + width)
            if n_spans == 1:
                label = hidden[base + i]
                examples.append(EdgeExample(s, (i, end), None, (f"L{label}",)))
            else:
                j = int((i + rng.integers(1, n)) % n)
                label = (hidden[base + i] + hidden[base + j]) % n_labels
                examples.append(EdgeExample(s, (i, end), (j, j + 1), (f"L{label}",)))
            span_mask[base + i] = True
    # each word carries its own hidden label at the signal layers; a span's words share span 1's
    # start label for the single-span task
    for e in examples:
        base = offsets[e.sentence]
        lab = hidden[base + e.span1[0]]
        for layer, strength in signal_layers.items():
            features[layer, base + e.span1[0] : base + e.span1[1]] = (
                rng.normal(size=(e.span1[1] - e.span1[0], dim)) + strength * centres[lab]
            )
    task = EdgeTask("planted", examples, sorted({e.labels[0] for e in examples}), "synthetic", n_sentences=len(lengths))
    return PlantedData(features, offsets, words, task)
