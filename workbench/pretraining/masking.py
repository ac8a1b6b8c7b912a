"""Masked-language-model masking and sentence-pair objectives, with seeded ``torch.Generator``s.

Masking (Devlin et al. 2019): a share ``probability`` (15%) of the non-special tokens is chosen;
of the chosen, 80% become ``[MASK]``, 10% a random token, 10% stay unchanged; ``labels`` hold the
original id at chosen positions and -100 elsewhere. Strategies for choosing:

- ``"token"``: every maskable token independently with probability ``probability``;
- ``"whole_word"``: every word independently, then all of its pieces (a word is never split);
- ``"span"`` (SpanBERT, Joshi et al. 2020): spans of whole words with lengths drawn from a
  geometric distribution (p = 0.2) truncated at 10, until 15% of the words are covered;
- ``"ngram"`` (ALBERT, Lan et al. 2020): n-grams of whole words, ``n`` in ``1 .. max_ngram`` (3)
  with ``p(n) = (1/n) / sum_k (1/k)``, at start words taken in random order, until 15% of the
  maskable tokens are covered (:func:`sample_ngrams`).

The 80/10/10 decision (``replacement_unit``) is drawn per token (BERT's data pipeline; ALBERT's
code does the same for its n-grams) or per span (SpanBERT: "we perform this replacement at the span
level and not for each token individually"): one draw per maximal run of chosen positions, so the
whole span becomes ``[MASK]``, or random tokens (one draw per position), or stays unchanged. The
default (``replacement_unit=None``) follows the strategy's paper: per span for ``"span"``, per
token for the others. A random replacement is drawn uniformly from :func:`random_token_pool`: by
default the whole vocabulary, special tokens included, as BERT's ``create_pretraining_data.py`` draws
``vocab_words[randint(0, len(vocab_words) - 1)]`` (and Hugging Face's MLM collator
``randint(len(tokenizer))``); ``pool="non_special"`` leaves the special tokens out (the workbench's
earlier default). A draw may equal the original token (probability ``1 / pool size``), so the
share left unchanged is ``1 - mask_fraction - random_fraction`` plus that.

Static vs dynamic masking (Liu et al. 2019): the mask of a sequence comes from a generator
seeded by ``(seed, sequence_index, epoch)``; static masking passes ``epoch=0`` always (the same
mask every time the sequence is seen), dynamic masking the true epoch (a new mask each epoch).
Masks therefore never depend on data order or on the global RNG, which makes resumption exact.

Sentence-pair objectives: NSP (BERT: 50% true next segment, 50% a segment from another
document; label 0 = IsNext, 1 = NotNext) and SOP (ALBERT, Lan et al. 2020: two consecutive
segments, swapped half of the time; label 0 = in order, 1 = swapped). Label conventions follow
``BertForPreTraining``'s ``next_sentence_label``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

IGNORE_INDEX = -100
Strategy = Literal["token", "whole_word", "span", "ngram"]
STRATEGIES = ("token", "whole_word", "span", "ngram")
ReplacementUnit = Literal["token", "span"]
REPLACEMENT_UNITS = ("token", "span")
_MASK64 = (1 << 63) - 1


@dataclass(frozen=True)
class MaskingConfig:
    """How to choose and corrupt MLM targets (defaults = BERT)."""

    probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1
    strategy: Strategy = "token"
    span_geometric_p: float = 0.2
    max_span: int = 10
    max_ngram: int = 3
    replacement_unit: ReplacementUnit | None = None  # None: per span for "span" masking, else per token

    def __post_init__(self) -> None:
        if not 0.0 < self.probability < 1.0:
            raise ValueError(f"probability must be in (0, 1), got {self.probability}")
        if self.mask_fraction < 0 or self.random_fraction < 0 or self.mask_fraction + self.random_fraction > 1:
            raise ValueError("mask_fraction and random_fraction must be >= 0 and sum to <= 1")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.replacement_unit is not None and self.replacement_unit not in REPLACEMENT_UNITS:
            raise ValueError(f"replacement_unit must be token, span or None, got {self.replacement_unit!r}")
        if self.max_ngram < 1:
            raise ValueError(f"max_ngram must be >= 1, got {self.max_ngram}")

    @property
    def unit(self) -> ReplacementUnit:
        """The unit of the 80/10/10 decision: ``replacement_unit``, or the strategy's paper's."""
        if self.replacement_unit is not None:
            return self.replacement_unit
        return "span" if self.strategy == "span" else "token"


def mix_seed(*parts: int) -> int:
    """Deterministically mix integers into one 63-bit seed (splitmix64 steps)."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x = (x ^ (x >> 31)) * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 29
    return x & _MASK64


def sequence_generator(seed: int, sequence_index: int, epoch: int = 0) -> torch.Generator:
    """The generator for one sequence's mask: static masking uses ``epoch=0`` every time."""
    g = torch.Generator()
    g.manual_seed(mix_seed(seed, sequence_index, epoch))
    return g


def special_tokens_mask(input_ids: torch.Tensor, special_ids: Sequence[int]) -> torch.Tensor:
    """Bool tensor, same shape as ``input_ids``: True at special tokens (incl. padding)."""
    return torch.isin(input_ids, torch.as_tensor(list(special_ids), dtype=input_ids.dtype))


def _truncated_geometric(p: float, max_len: int) -> torch.Tensor:
    """Probabilities of span lengths 1..max_len under Geometric(p) truncated and renormalised."""
    lengths = torch.arange(1, max_len + 1, dtype=torch.float64)
    probs = p * (1 - p) ** (lengths - 1)
    return probs / probs.sum()


def ngram_length_probabilities(max_ngram: int = 3) -> torch.Tensor:
    """ALBERT's n-gram lengths: float64 [max_ngram], ``p(n) = (1/n) / sum_{k<=max_ngram} 1/k``."""
    inverse = 1.0 / torch.arange(1, max_ngram + 1, dtype=torch.float64)
    return inverse / inverse.sum()


def sample_ngrams(
    tokens_per_word: Sequence[int], budget: int, generator: torch.Generator, max_ngram: int = 3
) -> list[tuple[int, int]]:
    """ALBERT's n-gram choice over the words of one sequence: ``[(first word, n), ...]`` in the
    order chosen, n-grams disjoint, covering at most ``budget`` tokens.

    ``tokens_per_word`` [n_words]: the number of tokens of each word, in order. The start words are
    visited in a random order; at each, ``n`` is drawn from :func:`ngram_length_probabilities`
    (restricted to the n-grams that fit before the last word, renormalised); while the n-gram would
    overrun the token budget ``n`` is shortened; it is skipped if even one word overruns it or if it
    touches a word already chosen. Stops once the budget is covered.
    """
    n_words = len(tokens_per_word)
    probs = ngram_length_probabilities(max_ngram)
    taken = [False] * n_words
    chosen: list[tuple[int, int]] = []
    covered = 0
    for start in torch.randperm(n_words, generator=generator).tolist():
        if covered >= budget:
            break
        fits = min(max_ngram, n_words - start)
        n = int(torch.multinomial(probs[:fits], 1, generator=generator)) + 1
        while n > 1 and covered + sum(tokens_per_word[start : start + n]) > budget:
            n -= 1
        size = sum(tokens_per_word[start : start + n])
        if covered + size > budget or any(taken[start : start + n]):
            continue
        taken[start : start + n] = [True] * n
        chosen.append((start, n))
        covered += size
    return chosen


def choose_positions(
    maskable: torch.Tensor,
    generator: torch.Generator,
    config: MaskingConfig = MaskingConfig(),
    word_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bool [T]: the positions chosen as MLM targets in one sequence.

    ``maskable``: bool [T], False for special tokens and padding. ``word_ids``: long [T] (word
    index per token, any value at unmaskable positions); needed for whole-word, span and n-gram
    masking (without it each token counts as a word).
    """
    (T,) = maskable.shape
    if config.strategy == "token":
        return (torch.rand(T, generator=generator) < config.probability) & maskable
    if word_ids is None:
        word_ids = torch.arange(T)
    words = torch.unique(word_ids[maskable])  # sorted word ids present among maskable tokens
    n_words = len(words)
    if n_words == 0:
        return torch.zeros(T, dtype=torch.bool)
    if config.strategy == "whole_word":
        chosen_words = words[torch.rand(n_words, generator=generator) < config.probability]
    elif config.strategy == "ngram":  # ALBERT: the budget counts tokens
        tokens_per_word = torch.unique(word_ids[maskable], return_counts=True)[1].tolist()
        budget = max(1, round(config.probability * int(maskable.sum())))
        ngrams = sample_ngrams(tokens_per_word, budget, generator, config.max_ngram)
        chosen_words = words[[w for start, n in ngrams for w in range(start, start + n)]]
    else:  # span: contiguous runs of words until the budget is covered
        budget = max(1, round(config.probability * n_words))
        probs = _truncated_geometric(config.span_geometric_p, config.max_span)
        covered = torch.zeros(n_words, dtype=torch.bool)
        for _ in range(10 * budget):  # bounded: stops well before in practice
            n_covered = int(covered.sum())
            if n_covered >= budget:
                break
            length = int(torch.multinomial(probs, 1, generator=generator)) + 1
            length = min(length, budget - n_covered)
            start = int(torch.randint(0, n_words, (1,), generator=generator))
            covered[start : start + length] = True
        chosen_words = words[covered]
    return torch.isin(word_ids, chosen_words) & maskable


def corrupt(
    input_ids: torch.Tensor,
    chosen: torch.Tensor,
    generator: torch.Generator,
    *,
    mask_token_id: int,
    random_token_ids: torch.Tensor,
    config: MaskingConfig = MaskingConfig(),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Apply 80/10/10 to the chosen positions of one sequence: ``(masked_ids [T], labels [T])``.

    One uniform ``r`` per position (``config.unit == "token"``) or per span, a maximal run of chosen
    positions (``"span"``; every position of the span shares its span's ``r``): ``r <
    mask_fraction`` -> ``mask_token_id``; then up to ``mask_fraction + random_fraction`` -> a
    uniform draw from ``random_token_ids`` (one per position); else unchanged.
    """
    if config.unit == "span":
        span_index = span_ids(chosen)
        r = torch.rand(int(span_index.max()) + 1, generator=generator)[span_index]
    else:
        r = torch.rand(input_ids.shape, generator=generator)
    to_mask = chosen & (r < config.mask_fraction)
    to_random = chosen & (r >= config.mask_fraction) & (r < config.mask_fraction + config.random_fraction)
    picks = torch.randint(0, len(random_token_ids), input_ids.shape, generator=generator)
    out = input_ids.clone()
    out[to_mask] = mask_token_id
    out[to_random] = random_token_ids[picks[to_random]]
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    return out, labels


def span_ids(chosen: torch.Tensor) -> torch.Tensor:
    """Long [T]: for each position the index (0, 1, ...) of the maximal run of chosen positions it
    lies in, counted from the left; unchosen positions get the index of the run before them (0 if
    none), which no caller reads."""
    starts = chosen.clone()
    starts[1:] &= ~chosen[:-1]
    return (torch.cumsum(starts.long(), 0) - 1).clamp(min=0)


RANDOM_POOLS = ("vocab", "non_special")


def random_token_pool(vocab_size: int, special_ids: Sequence[int] = (), pool: str = "vocab") -> torch.Tensor:
    """Token ids a random replacement may take (drawn uniformly by :func:`corrupt`).

    ``pool="vocab"`` (default, BERT): every id ``0 .. vocab_size - 1``, special tokens ([PAD],
    [CLS], [SEP], [MASK], [UNK], ...) included; ``special_ids`` is then not used.
    ``pool="non_special"``: the whole vocabulary minus ``special_ids``.
    """
    if pool not in RANDOM_POOLS:
        raise ValueError(f"pool must be one of {', '.join(RANDOM_POOLS)}, got {pool!r}")
    keep = torch.ones(vocab_size, dtype=torch.bool)
    if pool == "non_special":
        keep[torch.as_tensor(list(special_ids), dtype=torch.long)] = False
    return torch.nonzero(keep).flatten()


def mask_batch(
    input_ids: torch.Tensor,
    special_mask: torch.Tensor,
    *,
    sequence_indices: Sequence[int],
    seed: int,
    epoch: int,
    dynamic: bool,
    mask_token_id: int,
    random_token_ids: torch.Tensor,
    word_ids: torch.Tensor | None = None,
    config: MaskingConfig = MaskingConfig(),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask a padded batch: ``(masked_ids [B, T], labels [B, T])``.

    ``special_mask`` bool [B, T] is True at special tokens and padding (never masked).
    ``sequence_indices`` [B] are the dataset indices of the rows: with ``dynamic=False`` the mask
    of a row depends only on ``(seed, index)``; with ``dynamic=True`` also on ``epoch``.
    """
    masked = torch.empty_like(input_ids)
    labels = torch.empty_like(input_ids)
    for row, index in enumerate(sequence_indices):
        g = sequence_generator(seed, int(index), epoch if dynamic else 0)
        maskable = ~special_mask[row]
        chosen = choose_positions(maskable, g, config, None if word_ids is None else word_ids[row])
        masked[row], labels[row] = corrupt(
            input_ids[row], chosen, g, mask_token_id=mask_token_id, random_token_ids=random_token_ids, config=config
        )
    return masked, labels


# --------------------------------------------------------------------------- sentence pairs


@dataclass
class SentencePair:
    """Two segments of token ids with their word ids and the NSP/SOP label.

    ``source_a`` / ``source_b`` = ``(document index, first sentence index)`` of each segment.
    """

    tokens_a: list[int]
    tokens_b: list[int]
    label: int
    words_a: list[int] = field(default_factory=list)
    words_b: list[int] = field(default_factory=list)
    source_a: tuple[int, int] = (0, 0)
    source_b: tuple[int, int] = (0, 0)


def _rand(g: torch.Generator) -> float:
    return float(torch.rand(1, generator=g))


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """Uniform integer in [low, high]."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _concat(sentences: Sequence[Sequence[int]]) -> list[int]:
    return [t for s in sentences for t in s]


def _concat_words(words: Sequence[Sequence[int]]) -> list[int]:
    """Concatenate per-sentence word ids, renumbering so words stay distinct across sentences."""
    out: list[int] = []
    offset = 0
    for ws in words:
        if not ws:
            continue
        base = ws[0]
        out.extend(w - base + offset for w in ws)
        offset = out[-1] + 1
    return out


def _truncate_pair(
    a: list[int], b: list[int], wa: list[int], wb: list[int], max_tokens: int, g: torch.Generator
) -> None:
    """Trim the longer segment, from the front or back at random, until both fit (BERT's rule)."""
    while len(a) + len(b) > max_tokens:
        seq, ws = (a, wa) if len(a) > len(b) else (b, wb)
        if _rand(g) < 0.5:
            del seq[0], ws[0]
        else:
            seq.pop(), ws.pop()


def make_sentence_pairs(
    documents: Sequence,
    *,
    objective: Literal["nsp", "sop"],
    max_seq_len: int,
    generator: torch.Generator,
    short_seq_prob: float = 0.1,
) -> list[SentencePair]:
    """Build NSP or SOP training pairs from tokenised documents.

    ``documents``: items with ``.sentences`` (list of token-id lists) and ``.words`` (word ids per
    sentence), e.g. ``bertology.pretraining.text_corpus.TokenizedDocument``. Follows BERT's
    ``create_instances_from_document``: fill a chunk of consecutive sentences up to the target
    length (``max_seq_len - 3``; shorter with ``short_seq_prob``), split it at a random sentence
    into A and B. NSP: with probability 0.5 B is replaced by text from a random other document
    (label 1; the unused sentences go back to the pool). SOP: with probability 0.5 A and B are
    swapped (label 1). A one-sentence chunk is split in the middle for SOP.
    """
    if objective not in ("nsp", "sop"):
        raise ValueError(f"objective must be 'nsp' or 'sop', got {objective!r}")
    max_tokens = max_seq_len - 3
    g = generator
    pairs: list[SentencePair] = []
    n_docs = len(documents)
    for d, doc in enumerate(documents):
        sents, words = doc.sentences, doc.words
        target = _randint(g, 2, max_tokens) if _rand(g) < short_seq_prob else max_tokens
        chunk: list[int] = []  # sentence indices
        length, i = 0, 0
        while i < len(sents):
            chunk.append(i)
            length += len(sents[i])
            if i == len(sents) - 1 or length >= target:
                if len(chunk) >= 2:
                    a_end = _randint(g, 1, len(chunk) - 1)
                    a_idx, b_idx = chunk[:a_end], chunk[a_end:]
                    a, wa = _concat([sents[k] for k in a_idx]), _concat_words([words[k] for k in a_idx])
                    b, wb = _concat([sents[k] for k in b_idx]), _concat_words([words[k] for k in b_idx])
                    src_a, src_b = (d, a_idx[0]), (d, b_idx[0])
                elif len(sents[chunk[0]]) >= 2 and objective == "sop":
                    s, ws = sents[chunk[0]], words[chunk[0]]
                    mid = len(s) // 2
                    a, wa, b, wb = list(s[:mid]), list(ws[:mid]), list(s[mid:]), list(ws[mid:])
                    src_a = src_b = (d, chunk[0])
                elif objective == "nsp" and n_docs > 1:
                    a, wa = list(sents[chunk[0]]), list(words[chunk[0]])
                    b, wb, src_a, src_b = [], [], (d, chunk[0]), (d, chunk[0])
                    a_idx = chunk
                else:
                    chunk, length, i = [], 0, i + 1
                    continue
                label = 0
                if objective == "nsp" and n_docs > 1 and (not b or _rand(g) < 0.5):
                    label = 1
                    other = _randint(g, 0, n_docs - 2)
                    other += other >= d  # any document but this one
                    o_sents, o_words = documents[other].sentences, documents[other].words
                    start = _randint(g, 0, len(o_sents) - 1)
                    picked = []
                    for k in range(start, len(o_sents)):
                        picked.append(k)
                        if sum(len(o_sents[j]) for j in picked) >= target - len(a):
                            break
                    b = _concat([o_sents[k] for k in picked])
                    wb = _concat_words([o_words[k] for k in picked])
                    src_b = (other, start)
                    i -= len(chunk) - len(a_idx)  # the unused sentences are not wasted
                elif objective == "nsp" and not b:
                    chunk, length, i = [], 0, i + 1
                    continue
                if objective == "sop" and _rand(g) < 0.5:
                    a, b, wa, wb, src_a, src_b, label = b, a, wb, wa, src_b, src_a, 1
                _truncate_pair(a, b, wa, wb, max_tokens, g)
                if a and b:
                    pairs.append(SentencePair(a, b, label, wa, wb, src_a, src_b))
                chunk, length = [], 0
                target = _randint(g, 2, max_tokens) if _rand(g) < short_seq_prob else max_tokens
            i += 1
    return pairs


def encode_pair(pair: SentencePair, *, cls_id: int, sep_id: int) -> tuple[list[int], list[int], list[int]]:
    """``[CLS] A [SEP] B [SEP]`` -> ``(input_ids, token_type_ids, word_ids)``; word id -1 = special."""
    ids = [cls_id, *pair.tokens_a, sep_id, *pair.tokens_b, sep_id]
    types = [0] * (len(pair.tokens_a) + 2) + [1] * (len(pair.tokens_b) + 1)
    wa = [w - pair.words_a[0] for w in pair.words_a] if pair.words_a else []
    off = (max(wa) + 1) if wa else 0
    wb = [w - pair.words_b[0] + off for w in pair.words_b] if pair.words_b else []
    words = [-1, *wa, -1, *wb, -1]
    return ids, types, words


def expected_span_length(p: float = 0.2, max_span: int = 10) -> float:
    """Mean of the truncated geometric span-length distribution (SpanBERT: about 3.8)."""
    probs = _truncated_geometric(p, max_span)
    return float((probs * torch.arange(1, max_span + 1, dtype=torch.float64)).sum())


__all__ = [
    "IGNORE_INDEX",
    "MaskingConfig",
    "RANDOM_POOLS",
    "REPLACEMENT_UNITS",
    "STRATEGIES",
    "SentencePair",
    "choose_positions",
    "corrupt",
    "encode_pair",
    "expected_span_length",
    "make_sentence_pairs",
    "mask_batch",
    "mix_seed",
    "ngram_length_probabilities",
    "random_token_pool",
    "sample_ngrams",
    "sequence_generator",
    "span_ids",
    "special_tokens_mask",
]
