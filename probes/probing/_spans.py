"""From a task's spans to probe inputs: span token indices and the gathered, standardised features.

Input features are ``[L, n_words, D]`` (``FeatureStore.layers()``), words in corpus order, with
``sentence_offsets [n_sentences + 1]`` giving each sentence's first word. A task's example ``i``
has ``S`` spans (1 or 2) of at most ``M`` words each.
"""

from __future__ import annotations

import numpy as np
import torch

from bertology.probes.probing.tasks import EdgeExample, EdgeTask, Span, TaskError


def example_spans(example: EdgeExample, n_spans: int) -> tuple[Span, ...]:
    """``(span1,)`` or ``(span1, span2)``; a task with two spans has ``span2`` in every example."""
    if n_spans == 1:
        return (example.span1,)
    if example.span2 is None:
        raise TaskError(f"example of sentence {example.sentence} has no span2, which the task's other examples have")
    return (example.span1, example.span2)


def span_index(task: EdgeTask, sentence_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global word indices of every span token, padded.

    Returns ``tokens [n, S, M]`` int64 (indices into the flat word axis) and ``mask [n, S, M]``
    bool, where ``S`` = spans per example and ``M`` = longest span.
    """
    offsets = np.asarray(sentence_offsets, dtype=np.int64)
    n_spans = task.n_spans
    spans = [example_spans(e, n_spans) for e in task.examples]
    longest = max(end - start for sp in spans for start, end in sp)
    tokens = np.zeros((len(spans), n_spans, longest), dtype=np.int64)
    mask = np.zeros((len(spans), n_spans, longest), dtype=bool)
    for i, (e, sp) in enumerate(zip(task.examples, spans)):
        if e.sentence + 1 >= len(offsets):
            raise TaskError(
                f"task {task.name!r}: example {i} refers to sentence {e.sentence}, "
                f"features hold {len(offsets) - 1} sentences"
            )
        base, n_words = offsets[e.sentence], offsets[e.sentence + 1] - offsets[e.sentence]
        for s, (start, end) in enumerate(sp):
            if end > n_words:
                raise TaskError(
                    f"task {task.name!r}: example {i} span [{start}, {end}) outside "
                    f"sentence {e.sentence} ({n_words} words in the features)"
                )
            tokens[i, s, : end - start] = np.arange(base + start, base + end)
            mask[i, s, : end - start] = True
    return tokens, mask


class SpanFeatures:
    """Gathers (and standardises) span-token features ``[L, B, S, M, D]`` from ``[L, W, D]``.

    ``standardize``: z-score each layer's dimensions with the mean and standard deviation over the
    words the spans use. When every example fits in ``cache_bytes`` (float32), all examples are
    gathered once into ``cached [L, n, S, M, D]`` and a batch is one ``index_select``.
    """

    def __init__(
        self,
        features: np.ndarray | torch.Tensor,
        tokens: np.ndarray,
        mask: np.ndarray,
        standardize: bool,
        device: str,
        cache_bytes: float = 2e9,
    ):
        feats = torch.as_tensor(features)
        if feats.dtype != torch.float32:
            feats = feats.float()
        self.feats = feats.to(device)
        self.tokens = torch.as_tensor(tokens, device=device)
        self.mask = torch.as_tensor(mask, device=device)
        self.mean: torch.Tensor | None = None  # [L,1,1,1,D] when standardising
        self.scale: torch.Tensor | None = None
        if standardize:
            used = torch.unique(self.tokens[self.mask])
            sample = self.feats[:, used]
            self.mean = sample.mean(1, keepdim=True)[:, :, None, None, :]  # [L,1,1,1,D]
            self.scale = 1.0 / (sample.std(1, keepdim=True)[:, :, None, None, :] + 1e-6)
        self.cached: torch.Tensor | None = None
        self.cached_lowp: torch.Tensor | None = None  # low-precision copy of ``cached``, made once
        L, D = self.feats.shape[0], self.feats.shape[2]
        if L * self.tokens.numel() * D * 4 <= cache_bytes:
            # gather + standardise every example once; batches are then one index_select
            chunks = [
                self._gather(torch.arange(i, min(i + 4096, len(self.tokens)), device=device))
                for i in range(0, len(self.tokens), 4096)
            ]
            self.cached = torch.cat(chunks, dim=1).contiguous()

    def _gather(self, idx: torch.Tensor) -> torch.Tensor:
        g = self.feats[:, self.tokens[idx]]
        if self.mean is not None and self.scale is not None:
            g = (g - self.mean) * self.scale
        return g

    def low_precision(self, dtype: torch.dtype) -> torch.Tensor | None:
        """``cached`` in ``dtype`` (made once, shared by every fit on these features), or None
        when the features are not cached."""
        if self.cached is None:
            return None
        if self.cached_lowp is None or self.cached_lowp.dtype != dtype:
            self.cached_lowp = self.cached.to(dtype)
        return self.cached_lowp

    def __call__(self, idx: torch.Tensor, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Features ``[L, B, S, M, D]`` and mask ``[B, S, M]`` of examples ``idx`` (float32, or
        ``dtype`` when given)."""
        if self.cached is not None:
            source = self.cached if dtype is None or dtype == torch.float32 else self.low_precision(dtype)
            assert source is not None  # cached, so its low-precision copy exists too
            return source.index_select(1, idx), self.mask[idx]
        g = self._gather(idx)
        return (g if dtype is None else g.to(dtype)), self.mask[idx]
