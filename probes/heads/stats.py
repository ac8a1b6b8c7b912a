"""Per-head attention statistics over a corpus (Clark et al. 2019; Voita et al. 2019).

Input: word-level attention per sentence, ``[layers, heads, words, words]`` (rows = the attending
word), as ``FeatureStore.attention(i)`` returns, and optionally the mass each word puts on the
special tokens, ``[layers, heads, words, 2]`` (``FeatureStore.special_attention(i)``: ``[CLS]``-like,
``[SEP]``-like). Every statistic is computed for all layers and heads at once per sentence, then
averaged over attending words (word-weighted).

Rows (``special_tokens``):
- ``"keep"`` (default, Clark et al.: BERT's attention is largely on ``[CLS]``/``[SEP]``): each row is
  the full distribution over the sentence's words *and* the two special-token columns (words get
  ``1 - special mass``, split in proportion to the given word attention, so raw or renormalised word
  maps give the same rows); entropy, confidence, argmaxes and mean weights are taken over these
  ``w + 2`` entries. Without ``special_attention`` the given rows are taken as they are.
- ``"drop"``: special tokens removed and word rows renormalised to sum to 1 (the earlier behaviour).

Statistics (``statistic`` column):
- ``entropy`` (bits), ``entropy_norm`` (entropy / log2(entries per row): ``w + 2`` kept, ``w``
  dropped; in [0, 1]);
- ``confidence``: mean of the row maximum (Voita);
- ``argmax_special``: share of rows whose argmax is a special token (kept rows with special mass);
- ``argmax_offset_{k}`` for k in the window, ``argmax_offset_other``: share of rows whose argmax *over
  words* is at relative word position k (j - i) -- the word-level positional view;
- ``token_offset_{k}`` for k in ``-K..K``, ``token_offset_other``: share of *query tokens* whose
  token-level argmax (special tokens in place) is at relative token offset k, from the store's
  counts (``FeatureStore.token_offsets(i)``; ``n`` = query tokens) -- the token-level positional view
  (Voita et al.);
- ``attn_self``, ``attn_prev``, ``attn_next``, ``attn_punct``: mean weight on the word itself, the
  previous / next word, punctuation;
- ``attn_rarest``, ``argmax_rarest``: mean weight on / share of argmax at the least frequent word of
  the sentence (punctuation excluded; rows of the rarest word itself excluded);
- ``attn_cls``, ``attn_sep``, ``attn_special``: mean weight on [CLS] / [SEP] when
  ``special_attention`` ``[layers, heads, words, 2]`` is given.

With ``reach`` (local attention windows, ModernBERT; :func:`sentence_reach`), the same measures read on
what each head can see: ``entropy_norm_in_reach`` (entropy / log2(entries the row can reach)) and
``attn_cls_in_reach``, ``attn_sep_in_reach``, ``attn_special_in_reach`` (the mean weight over the rows
that can reach that special token; ``n`` per layer). For a global layer they equal the plain ones.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from typing import Any

import numpy as np
import pandas as pd

from bertology.errors import WorkbenchError
from bertology.numbering import head_number, layer_number, to_index
from bertology.progress import progress_bar

DEFAULT_WINDOW = tuple(range(-5, 6))
SPECIAL_TOKENS = ("keep", "drop")
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


def rarest_word_index(
    words: Sequence[str], frequency: Callable[[str], float], upos: Sequence[str] | None = None
) -> int:
    """Index of the least frequent non-punctuation word (first on ties); -1 if none."""
    best, best_f = -1, np.inf
    for i, word in enumerate(words):
        if is_punctuation(word, upos[i] if upos else None):
            continue
        f = frequency(word.lower())
        if f < best_f:
            best, best_f = i, f
    return best


def frequency_function(
    frequencies: Mapping[str, float] | Callable[[str], float] | str | None, lang: str = "en"
) -> Callable[[str], float]:
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
    """Accumulates sums over attending words for every ``[layer, head]``; ``table()`` averages.

    special_tokens: ``"keep"`` (rows over words + [CLS] + [SEP], Clark et al.) or ``"drop"`` (word
    rows renormalised); see the module docstring.
    """

    def __init__(self, window: Sequence[int] = DEFAULT_WINDOW, special_tokens: str = "keep"):
        if special_tokens not in SPECIAL_TOKENS:
            raise WorkbenchError(f"special_tokens must be one of {SPECIAL_TOKENS}, not {special_tokens!r}")
        self.window = tuple(int(k) for k in window)
        self.special_tokens = special_tokens
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, Any] = Counter()  # rows per statistic: a number, or [L, 1] rows per layer
        self.shape: tuple[int, int] | None = None

    def _add(self, name: str, value: np.ndarray, count: float | np.ndarray) -> None:
        """Add ``value [L, H]`` summed over ``count`` rows (a number, or ``[L, 1]`` rows per layer)."""
        if name in self.sums:
            self.sums[name] += value
        else:
            self.sums[name] = value.astype(np.float64)
        self.counts[name] += count

    def _check_shape(self, shape: tuple[int, int], what: str) -> None:
        if self.shape is None:
            self.shape = shape
        elif self.shape != shape:
            raise WorkbenchError(f"{what} shape {shape} differs from earlier {self.shape}")

    def update(
        self,
        attention: np.ndarray,
        words: Sequence[str] | None = None,
        upos=None,
        special: np.ndarray | None = None,
        rarest: int = -1,
        token_offsets: np.ndarray | None = None,
        reach: np.ndarray | None = None,
    ) -> None:
        """Add one sentence: ``attention [L, H, w, w]`` (raw or renormalised word attention),
        ``special [L, H, w, 2]`` or None, ``token_offsets [L, H, 2K+2]`` (counts of query tokens per
        token-level argmax offset ``-K..K`` and "other", :meth:`FeatureStore.token_offsets`) or None,
        ``reach [L, w, w + 2]`` bool (what a row can reach per layer: words, then [CLS], [SEP];
        :func:`sentence_reach`) or None."""
        a = np.asarray(attention, dtype=np.float64)
        if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
            raise WorkbenchError(f"attention must be [layers, heads, words, words], got {a.shape}")
        n_layers, n_heads, w, _ = a.shape
        self._check_shape((n_layers, n_heads), "attention")
        if token_offsets is not None:
            self.update_token_offsets(token_offsets)
        if w == 0:
            return
        s = None
        if special is not None:
            s = np.asarray(special, dtype=np.float64)
            if s.shape != (n_layers, n_heads, w, 2):
                raise WorkbenchError(
                    f"special_attention must be [layers, heads, words, 2] = {(n_layers, n_heads, w, 2)}, got {s.shape}"
                )
        eps = 1e-12
        argmax = a.argmax(-1)  # [L, H, w]: over words only (the word-level positional view)
        word_mass = np.clip(a.sum(-1, keepdims=True), eps, None)
        if self.special_tokens == "drop":
            a = a / word_mass  # word rows sum to 1
            full = a
        elif s is not None:
            a = a / word_mass * np.clip(1.0 - s.sum(-1, keepdims=True), 0.0, None)  # words get 1 - special
            full = np.concatenate([a, s], axis=-1)  # [L, H, w, w + 2]
        else:
            full = a  # rows taken as given
        n_entries = full.shape[-1]
        entropy = -(full * np.log2(full + eps)).sum(-1)  # [L, H, w]
        self._add("entropy", entropy.sum(-1), w)
        if n_entries > 1:
            self._add("entropy_norm", (entropy / np.log2(n_entries)).sum(-1), w)
        self._add("confidence", full.max(-1).sum(-1), w)
        full_argmax = full.argmax(-1)  # [L, H, w]; >= w: a special token
        if n_entries > w:
            self._add("argmax_special", (full_argmax >= w).sum(-1).astype(np.float64), w)
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
            self._add("attn_punct", a[..., punct].sum(-1).sum(-1) if punct.any() else np.zeros((n_layers, n_heads)), w)
        if rarest >= 0 and w > 1:
            rows = np.arange(w) != rarest
            self._add("attn_rarest", a[:, :, rows, rarest].sum(-1), rows.sum())
            self._add("argmax_rarest", (full_argmax[:, :, rows] == rarest).sum(-1).astype(np.float64), rows.sum())
        if s is not None:
            self._add("attn_cls", s[..., 0].sum(-1), w)
            self._add("attn_sep", s[..., 1].sum(-1), w)
            self._add("attn_special", s.sum(-1).sum(-1), w)
        if reach is not None:
            self._add_in_reach(np.asarray(reach, dtype=bool), entropy, full.shape[-1], s, (n_layers, w))

    def _add_in_reach(
        self, reach: np.ndarray, entropy: np.ndarray, n_entries: int, special: np.ndarray | None, shape: tuple[int, int]
    ) -> None:
        """The ``*_in_reach`` statistics of one sentence (see the module docstring)."""
        n_layers, w = shape
        if reach.shape != (n_layers, w, w + 2):
            raise WorkbenchError(
                f"reach must be [layers, words, words + 2] = {(n_layers, w, w + 2)}, got {reach.shape}"
            )
        entries = reach if n_entries == w + 2 else reach[..., :n_entries]  # special tokens dropped: words only
        reachable = np.maximum(entries.sum(-1), 2)  # [L, w]; one entry: entropy 0
        self._add("entropy_norm_in_reach", (entropy / np.log2(reachable)[:, None, :]).sum(-1), w)
        if special is None:
            return
        rows = {
            "attn_cls_in_reach": reach[..., w],
            "attn_sep_in_reach": reach[..., w + 1],
            "attn_special_in_reach": reach[..., w] | reach[..., w + 1],
        }  # [L, w] each
        masses = {
            "attn_cls_in_reach": special[..., 0],
            "attn_sep_in_reach": special[..., 1],
            "attn_special_in_reach": special.sum(-1),
        }  # [L, H, w]
        for name, can in rows.items():
            self._add(name, (masses[name] * can[:, None, :]).sum(-1), can.sum(-1, keepdims=True).astype(np.float64))

    def update_token_offsets(self, counts: np.ndarray) -> None:
        """Add one sentence's token-level argmax offset counts ``[L, H, 2K+2]`` (bins ``-K..K``, other)."""
        c = np.asarray(counts, dtype=np.float64)
        if c.ndim != 3 or c.shape[-1] < 4 or c.shape[-1] % 2:
            raise WorkbenchError(f"token_offsets must be [layers, heads, 2K+2] counts, got {c.shape}")
        self._check_shape(c.shape[:2], "token_offsets")
        n = c.sum(-1)
        if not np.allclose(n, n.flat[0]):
            raise WorkbenchError("token_offsets: every head must count the same query tokens")
        n_queries = float(n.flat[0])
        if n_queries == 0:
            return
        window = (c.shape[-1] - 2) // 2
        for b, k in enumerate(range(-window, window + 1)):
            self._add(f"token_offset_{k}", c[..., b], n_queries)
        self._add("token_offset_other", c[..., -1], n_queries)

    def means(self) -> dict[str, np.ndarray]:
        """``{statistic: [layers, heads]}`` averages."""
        return {name: total / np.maximum(self.counts[name], 1) for name, total in self.sums.items()}

    def table(self) -> pd.DataFrame:
        """Tidy table: ``layer, head, statistic, value, n`` (n = attending words -- query tokens for
        ``token_offset_*`` -- averaged over)."""
        rows = []
        for name, mean in self.means().items():
            layers, heads = np.indices(mean.shape)
            n = np.broadcast_to(np.asarray(self.counts[name]), mean.shape).astype(np.int64)
            rows.append(
                pd.DataFrame(
                    {
                        "layer": layer_number(layers.ravel()),
                        "head": head_number(heads.ravel()),
                        "statistic": name,
                        "value": mean.ravel(),
                        "n": n.ravel(),
                    }
                )
            )
        if not rows:
            return pd.DataFrame(columns=["layer", "head", "statistic", "value", "n"])
        return pd.concat(rows, ignore_index=True)


def head_statistics(
    attentions: Iterable[np.ndarray],
    sentences: Iterable | None = None,
    special_attention: Iterable[np.ndarray] | None = None,
    frequencies: Mapping[str, float] | Callable[[str], float] | str | None = None,
    window: Sequence[int] = DEFAULT_WINDOW,
    lang: str = "en",
    *,
    token_offsets: Iterable[np.ndarray] | None = None,
    special_tokens: str = "keep",
    reach: Iterable[np.ndarray] | None = None,
) -> pd.DataFrame:
    """Statistics of every head over a corpus, one vectorised pass per sentence.

    attentions: per sentence ``[layers, heads, words, words]`` (raw, ``FeatureStore.attention(i,
    normalise=False)``, or renormalised); sentences: ``Sentence`` objects or word lists, same order
    (needed for punctuation and rare-token statistics); special_attention: per sentence
    ``[layers, heads, words, 2]`` (weight on [CLS], [SEP]) or None; frequencies: word -> frequency
    mapping (e.g. :func:`corpus_frequencies`), a callable, or None for ``wordfreq``;
    token_offsets: per sentence ``[layers, heads, 2K+2]`` token-level argmax offset counts
    (``FeatureStore.token_offsets(i)``) or None; special_tokens: ``"keep"`` (default: rows over
    words + [CLS] + [SEP], Clark et al.) or ``"drop"`` (word rows renormalised); reach: per sentence
    ``[layers, words, words + 2]`` (:func:`sentence_reach`; local attention windows) or None.
    Returns tidy ``layer, head, statistic, value, n``.
    """
    stats = HeadStatistics(window, special_tokens)
    frequency = frequency_function(frequencies, lang)
    sentence_iter = iter(sentences) if sentences is not None else None
    special_iter = iter(special_attention) if special_attention is not None else None
    offsets_iter = iter(token_offsets) if token_offsets is not None else None
    reach_iter = iter(reach) if reach is not None else None
    total = len(attentions) if isinstance(attentions, Sized) else None
    for index, attention in enumerate(progress_bar(attentions, total=total, desc="head statistics", unit="sent")):
        words = upos = None
        rarest = -1
        if sentence_iter is not None:
            try:
                sentence = next(sentence_iter)
            except StopIteration:
                raise WorkbenchError(f"head_statistics: fewer sentences than attention arrays (at {index})") from None
            words, upos = _words(sentence), _upos(sentence)
            if len(words) != np.shape(attention)[-1]:
                raise WorkbenchError(
                    f"sentence {getattr(sentence, 'sent_id', index)}: {len(words)} words but "
                    f"attention over {np.shape(attention)[-1]}"
                )
            rarest = rarest_word_index(words, frequency, upos)
        special = next(special_iter) if special_iter is not None else None
        offsets = next(offsets_iter) if offsets_iter is not None else None
        stats.update(
            attention,
            words,
            upos,
            special,
            rarest,
            token_offsets=offsets,
            reach=next(reach_iter) if reach_iter is not None else None,
        )
    return stats.table()


def with_attention_windows(table: pd.DataFrame, windows: Sequence[int | None]) -> pd.DataFrame:
    """A copy of a per-head table (a ``layer`` column) with ``attention_window``: how many tokens
    each side the layer's heads can see (``|query - key| <= window``, ModernBERT's local layers;
    :func:`bertology.architectures.attention_windows`), ``<NA>`` where attention is global.

    A local head's statistics are bounded by its window: it cannot put weight on ``[CLS]`` / ``[SEP]``
    or on a word farther than ``window`` tokens away, so ``attn_cls`` / ``attn_special``,
    ``entropy_norm`` (normalised by the whole row) and relations between distant words read low by
    construction, not by what the head learned (docs/METHODS.md, "Local attention windows")."""
    if "layer" not in table.columns:
        raise WorkbenchError(f"with_attention_windows: the table has no layer column ({list(table.columns)})")
    layers = table["layer"].astype(int).to_numpy()  # transformer layers 1..L (bertology.numbering)
    if len(layers) and (layers.min() < 1 or layers.max() > len(windows)):
        raise WorkbenchError(
            f"with_attention_windows: layers {layers.min()}..{layers.max()} but windows for layers 1..{len(windows)}"
        )
    out = table.copy()
    out["attention_window"] = pd.array([windows[to_index(layer)] for layer in layers], dtype="Int64")
    return out


def reachable_words(word_ids: Sequence[int], window: int | None, n_words: int) -> np.ndarray:
    """``[n_words, n_words]`` bool: where a head whose queries see at most ``window`` tokens each
    side can put any weight from word i (rows) on word j -- some piece of i lies within ``window``
    tokens of some piece of j (the word-level maps pool pieces). All True for global attention
    (``window`` None). ``word_ids``: the word of each token, -1 for special tokens."""
    if window is None:
        return np.ones((n_words, n_words), dtype=bool)
    ids = np.asarray(word_ids)
    positions = np.arange(len(ids))
    token_reach = np.abs(positions[:, None] - positions[None, :]) <= window  # [T, T]
    pieces = (ids[None, :] == np.arange(n_words)[:, None]).astype(np.int64)  # [W, T]
    return (pieces @ token_reach.astype(np.int64) @ pieces.T) > 0


def special_reach(word_ids: Sequence[int], window: int | None, n_words: int) -> np.ndarray:
    """``[n_words, 2]`` bool: whether some piece of each word is within ``window`` tokens of the
    leading special token (``[CLS]``-like, column 0) and of the trailing one (``[SEP]``-like,
    column 1); False where the input has no such token, all True for global attention."""
    ids = np.asarray(word_ids)
    out = np.zeros((n_words, 2), dtype=bool)
    specials = [0 if len(ids) and ids[0] == -1 else None, len(ids) - 1 if len(ids) and ids[-1] == -1 else None]
    for column, position in enumerate(specials):
        if position is None:
            continue
        if window is None:
            out[:, column] = True
            continue
        near = np.abs(np.arange(len(ids)) - position) <= window
        out[:, column] = [bool(near[ids == word].any()) for word in range(n_words)]
    return out


def sentence_reach(word_ids: Sequence[int], windows: Sequence[int | None], n_words: int) -> np.ndarray:
    """``[layers, n_words, n_words + 2]`` bool: per layer (``windows``: tokens seen each side, None =
    global) where word i can put weight -- on word j (:func:`reachable_words`), on the leading and
    the trailing special token (:func:`special_reach`). ``word_ids``: the word of each token, -1
    for special tokens."""
    cache: dict[int | None, np.ndarray] = {}
    for window in set(windows):
        cache[window] = np.concatenate(
            [reachable_words(word_ids, window, n_words), special_reach(word_ids, window, n_words)], axis=1
        )
    return np.stack([cache[window] for window in windows])


def corpus_reach(tokenizer, sentences: Sequence, windows: Sequence[int | None]) -> Iterable[np.ndarray]:
    """:func:`sentence_reach` of every sentence, tokenised whole as extraction does (a generator)."""
    from bertology.features import tokenize_sentences

    words = [_words(s) for s in sentences]
    for sentence_words, (_, word_ids) in zip(words, tokenize_sentences(tokenizer, words)):
        yield sentence_reach(word_ids, windows, len(sentence_words))


def window_reach(tokenizer, sentences: Sequence, windows: Sequence[int | None]) -> pd.DataFrame:
    """What local attention can reach in this corpus, per local layer: ``layer, attention_window,
    statistic, value, n`` with statistics ``word_pairs_in_reach`` (share of ordered pairs of distinct
    words, n pairs), ``arcs_in_reach`` (share of gold dependency arcs, n arcs; when the sentences have
    heads), ``cls_in_reach`` / ``sep_in_reach`` (share of words within the window of the leading /
    trailing special token, n words). Global layers get no rows (everything is in reach).

    A local head's syntactic accuracy cannot exceed ``arcs_in_reach``, and its ``attn_cls`` /
    ``attn_sep`` are zero for the other words. Sentences are tokenised whole, as extraction does
    below the model's input limit."""
    from bertology.features import tokenize_sentences

    local = sorted({w for w in windows if w is not None})
    if not local:
        return pd.DataFrame(columns=["layer", "attention_window", "statistic", "value", "n"])
    words = [_words(s) for s in sentences]
    encoded = tokenize_sentences(tokenizer, words)
    totals = {w: dict.fromkeys(("pairs", "pairs_in", "arcs", "arcs_in", "words", "cls_in", "sep_in"), 0) for w in local}
    for sentence, sentence_words, (_, word_ids) in zip(sentences, words, encoded):
        n = len(sentence_words)
        heads = getattr(sentence, "heads", None)
        for window in local:
            t = totals[window]
            reach = reachable_words(word_ids, window, n)
            off_diagonal = ~np.eye(n, dtype=bool)
            t["pairs"] += int(off_diagonal.sum())
            t["pairs_in"] += int(reach[off_diagonal].sum())
            special = special_reach(word_ids, window, n)
            t["words"] += n
            t["cls_in"] += int(special[:, 0].sum())
            t["sep_in"] += int(special[:, 1].sum())
            if heads is not None:
                arcs = [(d, h - 1) for d, h in enumerate(heads) if h > 0]
                t["arcs"] += len(arcs)
                t["arcs_in"] += sum(bool(reach[d, h]) for d, h in arcs)
    rows = []
    for layer, layer_window in enumerate(windows):
        if layer_window is None:
            continue
        t = totals[layer_window]
        for statistic, hit, total in (
            ("word_pairs_in_reach", "pairs_in", "pairs"),
            ("arcs_in_reach", "arcs_in", "arcs"),
            ("cls_in_reach", "cls_in", "words"),
            ("sep_in_reach", "sep_in", "words"),
        ):
            if t[total]:
                rows.append(
                    {
                        "layer": layer_number(layer),
                        "attention_window": layer_window,
                        "statistic": statistic,
                        "value": t[hit] / t[total],
                        "n": t[total],
                    }
                )
    return pd.DataFrame(rows, columns=["layer", "attention_window", "statistic", "value", "n"])


def statistic_matrix(table: pd.DataFrame, statistic: str) -> pd.DataFrame:
    """``[layer x head]`` matrix of one statistic from a :func:`head_statistics` table."""
    sub = table[table["statistic"] == statistic]
    if sub.empty:
        raise WorkbenchError(f"statistic {statistic!r} not in table; have {sorted(table['statistic'].unique())}")
    return sub.pivot(index="layer", columns="head", values="value").sort_index()
