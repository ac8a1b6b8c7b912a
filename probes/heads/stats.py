"""Per-head attention statistics over a corpus (Clark et al. 2019; Voita et al. 2019).

Input: word-level attention per sentence, ``[layers, heads, words, words]`` (rows = the attending
word, sum to 1), as ``FeatureStore.attention(i)`` returns. Every statistic is computed for all
layers and heads at once per sentence, then averaged over attending words (token-weighted).

Statistics (``statistic`` column):
- ``entropy`` (bits), ``entropy_norm`` (entropy / log2(words), in [0, 1]);
- ``confidence``: mean of the row maximum (Voita);
- ``argmax_offset_{k}`` for k in the window, ``argmax_offset_other``: share of rows whose argmax
  is at relative position k (j - i);
- ``attn_self``, ``attn_prev``, ``attn_next``, ``attn_punct``: mean weight on the word itself, the
  previous / next word, punctuation;
- ``attn_rarest``, ``argmax_rarest``: mean weight on / share of argmax at the least frequent word of
  the sentence (punctuation excluded; rows of the rarest word itself excluded);
- ``attn_cls``, ``attn_sep``, ``attn_special``: mean weight on [CLS] / [SEP] when
  ``special_attention`` ``[layers, heads, words, 2]`` is given.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from bertology.errors import WorkbenchError

DEFAULT_WINDOW = tuple(range(-5, 6))
_WORD_CHAR = re.compile(r"\w")


def is_punctuation(word: str, upos: str | None = None) -> bool:
    """PUNCT/SYM by tag when given, else a word with no letter or digit."""
    if upos is not None:
        return upos in ("PUNCT", "SYM")
    return not _WORD_CHAR.search(word) and all(unicodedata.category(c)[0] in "PS" for c in word)


def corpus_frequencies(sentences: Iterable) -> Counter:
    """Lower-cased word counts over a corpus (``Sentence`` objects or lists of words)."""
    counts: Counter = Counter()
    for sentence in sentences:
        counts.update(w.lower() for w in _words(sentence))
    return counts


def wordfreq_frequency(word: str, lang: str = "en") -> float:
    from wordfreq import word_frequency

    return float(word_frequency(word, lang))


def _words(sentence) -> list[str]:
    return list(sentence.words) if hasattr(sentence, "words") else list(sentence)


def _upos(sentence) -> list[str] | None:
    return getattr(sentence, "upos", None)


def rarest_word_index(words: Sequence[str], frequency: Callable[[str], float],
                      upos: Sequence[str] | None = None) -> int:
    """Index of the least frequent non-punctuation word (first on ties); -1 if none."""
    best, best_f = -1, np.inf
    for i, word in enumerate(words):
        if is_punctuation(word, upos[i] if upos else None):
            continue
        f = frequency(word.lower())
        if f < best_f:
            best, best_f = i, f
    return best


def frequency_function(frequencies: Mapping[str, float] | Callable[[str], float] | str | None,
                       lang: str = "en") -> Callable[[str], float]:
    """``None`` / ``"wordfreq"`` -> wordfreq; a mapping -> lookup (0 for unseen); a callable as is."""
    if frequencies is None or frequencies == "wordfreq":
        cache: dict[str, float] = {}

        def lookup(word: str) -> float:
            if word not in cache:
                cache[word] = wordfreq_frequency(word, lang)
            return cache[word]

        return lookup
    if callable(frequencies):
        return frequencies
    if isinstance(frequencies, Mapping):
        return lambda w: float(frequencies.get(w, 0.0))
    raise WorkbenchError(f"frequencies: expected None, 'wordfreq', a mapping or a callable, got {frequencies!r}")


class HeadStatistics:
    """Accumulates sums over attending words for every ``[layer, head]``; ``table()`` averages."""

    def __init__(self, window: Sequence[int] = DEFAULT_WINDOW):
        self.window = tuple(int(k) for k in window)
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, float] = Counter()
        self.shape: tuple[int, int] | None = None

    def _add(self, name: str, value: np.ndarray, count: float) -> None:
        if name in self.sums:
            self.sums[name] += value
        else:
            self.sums[name] = value.astype(np.float64)
        self.counts[name] += count

    def update(self, attention: np.ndarray, words: Sequence[str] | None = None, upos=None,
               special: np.ndarray | None = None, rarest: int = -1) -> None:
        """Add one sentence: ``attention [L, H, w, w]``, ``special [L, H, w, 2]`` or None."""
        a = np.asarray(attention, dtype=np.float64)
        if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
            raise WorkbenchError(f"attention must be [layers, heads, words, words], got {a.shape}")
        n_layers, n_heads, w, _ = a.shape
        if self.shape is None:
            self.shape = (n_layers, n_heads)
        elif self.shape != (n_layers, n_heads):
            raise WorkbenchError(f"attention shape {a.shape[:2]} differs from earlier {self.shape}")
        if w == 0:
            return
        eps = 1e-12
        entropy = -(a * np.log2(a + eps)).sum(-1)  # [L, H, w]
        self._add("entropy", entropy.sum(-1), w)
        if w > 1:
            self._add("entropy_norm", (entropy / np.log2(w)).sum(-1), w)
        self._add("confidence", a.max(-1).sum(-1), w)
        argmax = a.argmax(-1)  # [L, H, w]
        offset = argmax - np.arange(w)
        in_window = np.zeros((n_layers, n_heads))
        for k in self.window:
            hits = (offset == k).sum(-1)
            in_window += hits
            self._add(f"argmax_offset_{k}", hits.astype(np.float64), w)
        self._add("argmax_offset_other", w - in_window, w)
        diag = np.einsum("lhii->lhi", a)
        self._add("attn_self", diag.sum(-1), w)
        if w > 1:
            self._add("attn_prev", np.einsum("lhii->lhi", a[:, :, 1:, :-1]).sum(-1), w - 1)
            self._add("attn_next", np.einsum("lhii->lhi", a[:, :, :-1, 1:]).sum(-1), w - 1)
        if words is not None:
            punct = np.array([is_punctuation(wd, upos[i] if upos else None) for i, wd in enumerate(words)])
            self._add("attn_punct", a[..., punct].sum(-1).sum(-1) if punct.any()
                      else np.zeros((n_layers, n_heads)), w)
        if rarest >= 0 and w > 1:
            rows = np.arange(w) != rarest
            self._add("attn_rarest", a[:, :, rows, rarest].sum(-1), rows.sum())
            self._add("argmax_rarest", (argmax[:, :, rows] == rarest).sum(-1).astype(np.float64), rows.sum())
        if special is not None:
            s = np.asarray(special, dtype=np.float64)
            if s.shape != (n_layers, n_heads, w, 2):
                raise WorkbenchError(f"special_attention must be [layers, heads, words, 2] = "
                                     f"{(n_layers, n_heads, w, 2)}, got {s.shape}")
            self._add("attn_cls", s[..., 0].sum(-1), w)
            self._add("attn_sep", s[..., 1].sum(-1), w)
            self._add("attn_special", s.sum(-1).sum(-1), w)

    def means(self) -> dict[str, np.ndarray]:
        """``{statistic: [layers, heads]}`` averages."""
        return {name: total / max(self.counts[name], 1) for name, total in self.sums.items()}

    def table(self) -> pd.DataFrame:
        """Tidy table: ``layer, head, statistic, value, n`` (n = attending words averaged over)."""
        rows = []
        for name, mean in self.means().items():
            layers, heads = np.indices(mean.shape)
            rows.append(pd.DataFrame({"layer": layers.ravel(), "head": heads.ravel(), "statistic": name,
                                      "value": mean.ravel(), "n": int(self.counts[name])}))
        if not rows:
            return pd.DataFrame(columns=["layer", "head", "statistic", "value", "n"])
        return pd.concat(rows, ignore_index=True)


def head_statistics(attentions: Iterable[np.ndarray], sentences: Iterable | None = None,
                    special_attention: Iterable[np.ndarray] | None = None,
                    frequencies: Mapping[str, float] | Callable[[str], float] | str | None = None,
                    window: Sequence[int] = DEFAULT_WINDOW, lang: str = "en") -> pd.DataFrame:
    """Statistics of every head over a corpus, one vectorised pass per sentence.

    attentions: per sentence ``[layers, heads, words, words]``; sentences: ``Sentence`` objects
    or word lists, same order (needed for punctuation and rare-token statistics);
    special_attention: per sentence ``[layers, heads, words, 2]`` (weight on [CLS], [SEP]) or None;
    frequencies: word -> frequency mapping (e.g. :func:`corpus_frequencies`), a callable,
    or None for ``wordfreq``.
    Returns tidy ``layer, head, statistic, value, n``.
    """
    stats = HeadStatistics(window)
    frequency = frequency_function(frequencies, lang)
    sentence_iter = iter(sentences) if sentences is not None else None
    special_iter = iter(special_attention) if special_attention is not None else None
    for index, attention in enumerate(attentions):
        words = upos = None
        rarest = -1
        if sentence_iter is not None:
            try:
                sentence = next(sentence_iter)
            except StopIteration:
                raise WorkbenchError(f"head_statistics: fewer sentences than attention arrays (at {index})") from None
            words, upos = _words(sentence), _upos(sentence)
            if len(words) != np.shape(attention)[-1]:
                raise WorkbenchError(f"sentence {getattr(sentence, 'sent_id', index)}: {len(words)} words but "
                                     f"attention over {np.shape(attention)[-1]}")
            rarest = rarest_word_index(words, frequency, upos)
        special = next(special_iter) if special_iter is not None else None
        stats.update(attention, words, upos, special, rarest)
    return stats.table()


def statistic_matrix(table: pd.DataFrame, statistic: str) -> pd.DataFrame:
    """``[layer x head]`` matrix of one statistic from a :func:`head_statistics` table."""
    sub = table[table["statistic"] == statistic]
    if sub.empty:
        raise WorkbenchError(f"statistic {statistic!r} not in table; have {sorted(table['statistic'].unique())}")
    return sub.pivot(index="layer", columns="head", values="value").sort_index()
