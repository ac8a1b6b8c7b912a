"""From words to word-level features: tokenisation with word alignment, batched forward passes,
subword→word pooling of every layer's hidden states and word-level attention (Clark et al. 2019).

Shapes (one batch of ``B`` sequences padded to ``T`` tokens, ``W`` words at most):

- hidden states ``[L+1, B, T, D]`` (index 0 = embeddings) → word vectors ``[L+1, B, W, D]``
- attention ``[L, B, H, T, T]`` → word attention ``[L, B, H, W, W]``: attention *to* a word is the
  sum over its pieces, attention *from* a word the mean over its pieces; attention to the special
  tokens (``[CLS]``/``<s>`` and ``[SEP]``/``</s>``) is kept apart as ``[L, B, H, W, 2]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
import torch

from workbench.errors import StoreError

Pooling = Literal["first", "last", "mean"]
LongPolicy = Literal["error", "window"]


@dataclass
class Segment:
    """One model input: words ``[word_start, word_end)`` of sentence ``sentence`` as token ids.

    ``word_ids[t]`` is the word (relative to ``word_start``) of token ``t``; -1 for special tokens.
    ``keep`` marks, per word of the segment, whether this segment provides that word's features
    (sliding windows overlap; each word is taken from the window where it is most central).
    """

    sentence: int
    word_start: int
    word_end: int
    input_ids: list[int]
    word_ids: list[int]
    keep: np.ndarray

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def n_words(self) -> int:
        return self.word_end - self.word_start


def model_max_tokens(model, tokenizer) -> int:
    """Longest input (special tokens included) the model accepts."""
    limit = int(getattr(model.config, "max_position_embeddings", 512))
    if model.config.model_type in ("roberta", "xlm-roberta", "camembert"):
        limit -= 2  # positions start after the padding index
    tok_limit = getattr(tokenizer, "model_max_length", limit) or limit
    return int(min(limit, tok_limit if tok_limit < 1e6 else limit))


def _tokenize_words(tokenizer, words: Sequence[str]) -> tuple[list[int], list[int]]:
    """Token ids with special tokens and the word index of each token (-1 = special).

    A word the tokenizer maps to no piece (e.g. a lone control character) is replaced by the
    unknown token so every word keeps a vector.
    """
    enc = tokenizer(list(words), is_split_into_words=True, add_special_tokens=True)
    word_ids = [-1 if w is None else w for w in enc.word_ids()]
    if len(set(w for w in word_ids if w >= 0)) != len(words):
        covered = set(word_ids)
        unk = tokenizer.unk_token or tokenizer.pad_token
        fixed = [w if i in covered else unk for i, w in enumerate(words)]
        enc = tokenizer(fixed, is_split_into_words=True, add_special_tokens=True)
        word_ids = [-1 if w is None else w for w in enc.word_ids()]
    return list(enc["input_ids"]), word_ids


def segment_sentence(
    tokenizer,
    words: Sequence[str],
    sentence: int,
    max_tokens: int,
    long_policy: LongPolicy,
    sentence_name: str,
) -> list[Segment]:
    """Split a sentence into model inputs: one segment, or sliding windows when it is too long."""
    if not words:
        raise StoreError(f"sentence {sentence_name}: empty sentence (no words)")
    ids, wids = _tokenize_words(tokenizer, words)
    if len(ids) <= max_tokens:
        return [Segment(sentence, 0, len(words), ids, wids, np.ones(len(words), dtype=bool))]
    if long_policy == "error":
        raise StoreError(
            f"sentence {sentence_name}: {len(ids)} tokens exceed the model's maximum of {max_tokens}; "
            "use long_policy='window' (sliding windows, hidden states only) or split the sentence"
        )
    # sliding windows over words: each window holds as many words as fit, next starts halfway
    pieces = np.bincount([w for w in wids if w >= 0], minlength=len(words))
    n_special = sum(1 for w in wids if w < 0)
    budget = max_tokens - n_special
    if pieces.max() > budget:
        raise StoreError(f"sentence {sentence_name}: a single word has more pieces than the model accepts")
    windows: list[tuple[int, int]] = []
    start = 0
    while True:
        end, used = start, 0
        while end < len(words) and used + pieces[end] <= budget:
            used += pieces[end]
            end += 1
        windows.append((start, end))
        if end == len(words):
            break
        start = max(start + 1, (start + end) // 2)
    centres = np.array([(a + b - 1) / 2 for a, b in windows])
    owner = np.empty(len(words), dtype=np.int64)
    for w in range(len(words)):
        inside = [k for k, (a, b) in enumerate(windows) if a <= w < b]
        owner[w] = min(inside, key=lambda k: abs(w - centres[k]))
    segments = []
    for k, (a, b) in enumerate(windows):
        s_ids, s_wids = _tokenize_words(tokenizer, words[a:b])
        segments.append(Segment(sentence, a, b, s_ids, s_wids, owner[a:b] == k))
    return segments


def pooling_matrices(segments: Sequence[Segment], n_tokens: int, pooling: Pooling) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Matrices that turn token axes into word axes for a padded batch.

    Returns ``pool [B, W, T]`` (the chosen subword→word pooling of hidden states), ``from_word
    [B, W, T]`` (mean over a word's pieces), ``to_word [B, W, T]`` (indicator of a word's pieces)
    and ``to_special [B, 2, T]`` (indicators of the first and the other special tokens).
    """
    B = len(segments)
    W = max(s.n_words for s in segments)
    pool = torch.zeros(B, W, n_tokens)
    to_word = torch.zeros(B, W, n_tokens)
    to_special = torch.zeros(B, 2, n_tokens)
    for b, seg in enumerate(segments):
        wids = np.asarray(seg.word_ids)
        tok = np.arange(len(wids))
        words = wids[wids >= 0]
        to_word[b, words, tok[wids >= 0]] = 1.0
        specials = tok[wids < 0]
        if len(specials):
            to_special[b, 0, specials[0]] = 1.0
            to_special[b, 1, specials[1:]] = 1.0
        if pooling == "mean":
            continue
        for w in range(seg.n_words):
            positions = tok[wids == w]
            pool[b, w, positions[0] if pooling == "first" else positions[-1]] = 1.0
    counts = to_word.sum(-1, keepdim=True).clamp(min=1.0)
    from_word = to_word / counts
    if pooling == "mean":
        pool = from_word
    return pool, from_word, to_word, to_special


@torch.inference_mode()
def forward_segments(
    model,
    segments: Sequence[Segment],
    *,
    pooling: Pooling,
    attentions: bool,
    pad_id: int,
    device: torch.device,
    amp_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Run one padded batch; return word-level hidden ``[L+1, B, W, D]``, word attention
    ``[L, B, H, W, W]`` and special-token attention ``[L, B, H, W, 2]`` (None without attentions)."""
    T = max(s.n_tokens for s in segments)
    ids = torch.full((len(segments), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(segments), T), dtype=torch.long)
    for b, seg in enumerate(segments):
        ids[b, : seg.n_tokens] = torch.tensor(seg.input_ids)
        mask[b, : seg.n_tokens] = 1
    kwargs = {"input_ids": ids.to(device), "attention_mask": mask.to(device),
              "output_hidden_states": True, "output_attentions": attentions}
    with torch.autocast(device_type=device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
        out = model(**kwargs)
    hidden = torch.stack(out.hidden_states).float().cpu()  # [L+1, B, T, D]
    pool, from_word, to_word, to_special = pooling_matrices(segments, T, pooling)
    word_hidden = torch.einsum("bwt,lbtd->lbwd", pool, hidden)
    if not attentions:
        return word_hidden, None, None
    # batch-first so both contractions are plain batched matmuls (einsum over the 5-d tensor is
    # about twice as slow): columns first (sum over attended pieces), then rows (mean over attending)
    att = torch.stack(out.attentions, dim=1).float().cpu()  # [B, L, H, T, T]
    B, L, H = att.shape[:3]
    W = from_word.shape[1]
    columns = torch.cat([to_word, to_special], dim=1).transpose(1, 2)  # [B, T, W + 2]
    summed = torch.bmm(att.view(B, L * H * T, T), columns).view(B, L * H, T, W + 2)
    pooled = torch.matmul(from_word[:, None], summed).view(B, L, H, W, W + 2).permute(1, 0, 2, 3, 4)
    return word_hidden, pooled[..., :W], pooled[..., W:]
