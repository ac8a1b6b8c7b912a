"""One sentence through one encoder, everything an attention viewer shows (bertviz's model, head
and neuron views; Abnar & Zuidema's rollout; an MLM's guesses for a masked word).

:func:`inspect_sentence` runs the sentence once and returns an :class:`Inspection` of numpy arrays
(``L`` layers, ``H`` heads, ``T`` tokens with the special tokens, ``W`` words, ``d`` = head size):

- ``attentions [L, H, T, T]``: the eager attention maps, equal to a plain forward pass with
  ``output_attentions=True`` (row = the attending token, rows sum to 1);
- ``queries``, ``keys [L, H, T, d]``: each head's slice of the query and key projections' outputs,
  captured by forward hooks on the modules :mod:`bertology.architectures` names;
- ``word_attention [L, H, W, W]`` and ``special_attention [L, H, W, 2]``: the word-level maps of
  Clark et al. 2019 exactly as the feature store computes them (:func:`bertology.features.forward_segments`:
  attention *to* a word summed over its pieces, *from* a word averaged over its pieces; the mass
  on the first special token and on the other special tokens kept apart).

:func:`qk_contributions` gives the neuron view's elementwise ``q_i ⊙ k_j``, :func:`attention_scores`
their scaled sums (the pre-softmax scores of absolute-position models), :func:`attention_rollout`
the rollout and :func:`masked_predictions` the top-k tokens an MLM head puts in place of one word.
Nothing here writes a file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from bertology.architectures import attention_layers
from bertology.errors import CorpusError, ModelError
from bertology.features import Segment, forward_segments, model_max_tokens, tokenize_sentences
from bertology.models import LoadedModel

__all__ = [
    "Inspection",
    "inspect_sentence",
    "split_words",
    "qk_contributions",
    "attention_scores",
    "attention_rollout",
    "masked_input",
    "masked_predictions",
    "EXACT_SCORE_TYPES",
]

Level = Literal["token", "word"]

# Model types whose pre-softmax score is the content term q·k/sqrt(d) alone (plus the padding mask):
# DeBERTa-v2 adds relative-position terms and MPNet a relative position bias, so for them the
# neuron view shows only the content part of the score.
EXACT_SCORE_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "albert"})

_WORD = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")


def split_words(text: str) -> list[str]:
    """Words of a typed sentence: runs of letters/digits (an inner apostrophe kept: ``don't``) and
    each punctuation mark on its own. Raises :class:`CorpusError` when there is no word."""
    words = _WORD.findall(text)
    if not words:
        raise CorpusError("the sentence is empty: type at least one word")
    return words


@dataclass
class Inspection:
    """One sentence seen by one model. Shapes: ``L`` layers, ``H`` heads, ``T`` tokens (special
    tokens included), ``W`` words, ``d`` head size; all arrays float32.

    ``word_ids[t]``: the word of token ``t`` (-1: a special token). ``special_tokens``: the two
    columns of ``special_attention`` (the first special token, e.g. ``[CLS]``, and the others, e.g.
    ``[SEP]``). ``exact_scores``: whether ``q·k / sqrt(d)`` is the whole pre-softmax score of this
    architecture (:data:`EXACT_SCORE_TYPES`).
    """

    model_name: str
    model_type: str
    words: list[str]
    tokens: list[str]
    word_ids: list[int]
    attentions: np.ndarray  # [L, H, T, T]
    queries: np.ndarray  # [L, H, T, d]
    keys: np.ndarray  # [L, H, T, d]
    word_attention: np.ndarray  # [L, H, W, W]
    special_attention: np.ndarray  # [L, H, W, 2]
    special_tokens: tuple[str, str]
    exact_scores: bool

    @property
    def n_layers(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.attentions.shape[1])

    @property
    def head_size(self) -> int:
        return int(self.queries.shape[-1])

    def maps(self, level: Level = "token") -> tuple[list[str], list[str], np.ndarray]:
        """``(row labels, column labels, maps)`` of every head at one level. ``"token"``: the
        token maps ``[L, H, T, T]`` (special tokens as rows and columns); ``"word"``: the word rows
        with the first special token before the words and the others after them as columns,
        ``[L, H, W, W + 2]`` (each row sums to 1)."""
        if level == "token":
            return list(self.tokens), list(self.tokens), self.attentions
        if level != "word":
            raise ValueError(f"level must be 'token' or 'word', not {level!r}")
        first, rest = self.special_tokens
        maps = np.concatenate(
            [self.special_attention[..., :1], self.word_attention, self.special_attention[..., 1:]], axis=-1
        )
        return list(self.words), [first, *self.words, rest], maps


def _special_names(tokens: Sequence[str], word_ids: Sequence[int]) -> tuple[str, str]:
    specials = [t for t, w in zip(tokens, word_ids) if w < 0]
    first = specials[0] if specials else "[first special]"
    rest = sorted(set(specials[1:]), key=specials.index)
    return first, "+".join(rest) if rest else "[other specials]"


class _ProjectionRecorder:
    """Forward hooks recording, per layer position, the first output ``[1, T, H*d]`` of its query
    and key projections. A pre-hook on each layer module counts the positions as they run (ALBERT's
    shared layer runs at several), and only the first call per position is kept (DeBERTa-v2 also
    projects its relative-position embeddings with the same modules)."""

    def __init__(self, model: Any) -> None:
        self.outputs: dict[tuple[str, int], torch.Tensor] = {}
        self.position = -1
        self.handles = []
        layers = attention_layers(model)
        for module in {id(layer.module): layer.module for layer in layers}.values():
            self.handles.append(module.register_forward_pre_hook(self._next_position))
        seen: set[tuple[str, int]] = set()
        for layer in layers:
            for role in ("query", "key"):
                module = getattr(layer, role)
                if (role, id(module)) not in seen:
                    seen.add((role, id(module)))
                    self.handles.append(module.register_forward_hook(self._recorder(role)))

    def _next_position(self, module, args) -> None:
        self.position += 1

    def _recorder(self, role: str):
        def hook(module, args, output):
            self.outputs.setdefault((role, self.position), output.detach().float())

        return hook

    def per_head(self, role: str, n_layers: int, n_heads: int) -> np.ndarray:
        """The recorded ``role`` projections as ``[L, H, T, d]``."""
        missing = [l for l in range(n_layers) if (role, l) not in self.outputs]
        if missing:
            raise ModelError(f"no {role} projection recorded for layers {missing}")
        stacked = torch.cat([self.outputs[(role, l)] for l in range(n_layers)], 0)  # [L, T, H*d]
        L, T, width = stacked.shape
        return stacked.view(L, T, n_heads, width // n_heads).permute(0, 2, 1, 3).contiguous().cpu().numpy()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _token_ids(lm: LoadedModel, words: Sequence[str]) -> tuple[list[int], list[int]]:
    if not words:
        raise CorpusError("the sentence is empty: type at least one word")
    ids, word_ids = tokenize_sentences(lm.tokenizer, [list(words)])[0]
    limit = model_max_tokens(lm.encoder, lm.tokenizer)
    if len(ids) > limit:
        raise CorpusError(f"the sentence has {len(ids)} tokens; {lm.name} reads at most {limit}: shorten it")
    return ids, word_ids


def inspect_sentence(lm: LoadedModel, words: str | Sequence[str]) -> Inspection:
    """Run ``words`` (one sentence: a list of words, or a string, split into words as the Live page
    splits a typed sentence, :func:`split_words` -- at whitespace, punctuation apart: ``"The dog
    barked."`` is ``The``, ``dog``, ``barked``, ``.``; never one word per character) through
    ``lm``'s encoder once (eager attention, float32, no padding) and return every map of it (see
    :class:`Inspection`).

    Raises :class:`CorpusError` for an empty or too long sentence and :class:`ModelError` for a
    model loaded without eager attention (no attention maps)."""
    words = split_words(words) if isinstance(words, str) else words
    ids, word_ids = _token_ids(lm, words)
    encoder = lm.encoder
    if getattr(encoder.config, "_attn_implementation", "eager") != "eager":
        raise ModelError(f"{lm.name}: loaded without eager attention; load it with attentions=True")
    captured: dict[str, Any] = {}
    recorder = _ProjectionRecorder(encoder)
    grab = encoder.register_forward_hook(lambda module, args, output: captured.setdefault("out", output))
    segment = Segment(0, 0, len(words), ids, word_ids, np.ones(len(words), dtype=bool))
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else 0
    try:
        _, word_att, special = forward_segments(
            encoder,
            [segment],
            pooling="first",
            attentions=True,
            pad_id=pad_id,
            device=next(encoder.parameters()).device,
        )
    finally:
        grab.remove()
        recorder.remove()
    if word_att is None or special is None:  # (attentions=True gives them)
        raise ModelError(f"{lm.name}: no attentions from the forward pass")
    attentions = torch.stack([a[0].float() for a in captured["out"].attentions]).cpu().numpy()  # [L, H, T, T]
    L, H = attentions.shape[:2]
    W = len(words)
    tokens = lm.tokenizer.convert_ids_to_tokens(ids)
    return Inspection(
        model_name=lm.name,
        model_type=str(lm.config.model_type),
        words=list(words),
        tokens=list(tokens),
        word_ids=list(word_ids),
        attentions=attentions,
        queries=recorder.per_head("query", L, H),
        keys=recorder.per_head("key", L, H),
        word_attention=word_att.view(L, H, W, W).numpy(),
        special_attention=special.numpy(),
        special_tokens=_special_names(tokens, word_ids),
        exact_scores=lm.config.model_type in EXACT_SCORE_TYPES,
    )


def qk_contributions(queries: np.ndarray, keys: np.ndarray, query: int) -> np.ndarray:
    """The neuron view of one head: ``q_query ⊙ k_j`` for every key token ``j``, ``[T, d]`` (from
    ``queries``, ``keys`` ``[T, d]`` of that head). Summed over ``d`` and divided by ``sqrt(d)``
    they give the head's score row (:func:`attention_scores`)."""
    return queries[query][None, :] * keys


def attention_scores(queries: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Pre-softmax content scores ``q_i · k_j / sqrt(d)``: ``[..., T, d]`` x ``[..., T, d]`` ->
    ``[..., T, T]``. For the types of :data:`EXACT_SCORE_TYPES` and an unpadded sentence, their
    row-wise softmax is the attention map."""
    d = queries.shape[-1]
    return np.einsum("...id,...jd->...ij", queries, keys) / np.sqrt(d)


def attention_rollout(attentions: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020) after each layer, ``[L, T, T]`` from ``[L, H, T, T]``.

    Per layer ``A'_l = residual · I + (1 − residual) · mean_heads(A_l)``, rows renormalised to 1
    (the residual connection as identity attention), and ``R_l = A'_l · R_{l−1}`` with
    ``R_0 = A'_0``: row ``i`` of ``R_l`` is how much of token ``i``'s representation after layer
    ``l`` flows from each input token."""
    attentions = np.asarray(attentions, dtype=np.float64)
    T = attentions.shape[-1]
    mixed = residual * np.eye(T) + (1.0 - residual) * attentions.mean(axis=1)  # [L, T, T]
    mixed /= mixed.sum(axis=-1, keepdims=True)
    out = np.empty_like(mixed)
    running = np.eye(T)
    for l in range(mixed.shape[0]):
        running = mixed[l] @ running
        out[l] = running
    return out.astype(np.float32)


def masked_input(lm: LoadedModel, words: Sequence[str], word: int) -> tuple[list[int], int]:
    """Token ids of ``words`` with word ``word`` replaced by one mask token (whatever its number of
    pieces), and the mask's position."""
    if not 0 <= word < len(words):
        raise CorpusError(f"word {word} is outside the sentence (0..{len(words) - 1})")
    mask_id = lm.tokenizer.mask_token_id
    if mask_id is None:
        raise ModelError(f"{lm.name}: its tokenizer has no mask token")
    ids, word_ids = _token_ids(lm, words)
    pieces = [t for t, w in enumerate(word_ids) if w == word]
    position = pieces[0]
    masked = ids[:position] + [mask_id] + ids[pieces[-1] + 1 :]
    return masked, position


@torch.inference_mode()
def masked_predictions(lm: LoadedModel, words: Sequence[str], word: int, k: int = 10) -> pd.DataFrame:
    """The ``k`` tokens ``lm``'s MLM head ranks highest in place of word ``word`` (masked as one
    mask token; special tokens are never proposed): columns ``rank`` (1 = best), ``token``,
    ``probability``: the softmax of the logits with the special tokens' logits set to −inf, i.e.
    renormalised over the vocabulary without the special tokens (each at least the full softmax's
    probability of that token). Raises :class:`ModelError` for a model without
    an MLM head."""
    if not lm.has_mlm_head or lm.model is lm.encoder:
        raise ModelError(f"{lm.name}: no MLM head loaded; load it with mlm_head=True (its weights must carry one)")
    ids, position = masked_input(lm, words, word)
    device = next(lm.model.parameters()).device
    logits = lm.model(input_ids=torch.tensor([ids], device=device)).logits[0, position].float()  # [V]
    special = [i for i in lm.tokenizer.all_special_ids if i < logits.shape[-1]]
    logits[special] = float("-inf")
    logits[len(lm.tokenizer) :] = float("-inf")  # an output layer larger than the vocabulary: no token spells those
    probabilities = torch.softmax(logits, dim=-1)
    top = torch.topk(probabilities, min(k, int(torch.isfinite(logits).sum())))
    token_ids = top.indices.tolist()
    return pd.DataFrame(
        {
            "rank": np.arange(1, len(token_ids) + 1),
            "token": lm.tokenizer.convert_ids_to_tokens(token_ids),
            "probability": top.values.cpu().numpy().astype(float),
        }
    )
