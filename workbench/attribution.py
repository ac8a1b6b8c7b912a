"""Which input words a prediction rests on: per-word attribution scores for one sentence, as LIT
shows them, computed with Captum.

Three predictions can be explained (``T`` tokens with the special tokens, ``W`` words):

- **a masked word** (:func:`masked_word_attribution`; a model with an MLM head): word ``word`` is
  replaced by one mask token and the output explained is ``log p(target)`` at that position, the
  target being a vocabulary word or the model's top guess; with a ``foil``, the contrast
  ``log p(target) - log p(foil)`` there (Yin & Neubig 2022: why this word rather than that one);
- **a fine-tuned sequence classifier** (:func:`classifier_attribution`): the logit (or the
  log-probability) of a class, by default the predicted one;
- **a fine-tuned token classifier**: the same for word ``word``'s class, read at its first piece (the
  piece fine-tuning trains, :mod:`bertology.finetuning.data`).

Methods (:data:`METHODS`), each a score per input token ``[T]``:

- ``gxi``: gradient × input on the input (word-piece) embeddings, summed over the embedding
  dimensions (Captum's ``LayerGradientXActivation`` on ``model.get_input_embeddings()``);
- ``ig``: integrated gradients (Sundararajan et al. 2017; Captum's ``LayerIntegratedGradients``
  over the same layer): the straight path from a baseline where every word piece is replaced by
  the padding (or the mask) token and the special tokens are kept. Completeness: the scores sum to
  ``f(input) - f(baseline)`` up to Captum's convergence delta;
- ``attention``: the last layer's attention *from* the explained position, averaged over heads;
- ``rollout``: row of the explained position in :func:`bertology.inspection.attention_rollout`
  after the last layer (Abnar & Zuidema 2020).

Pieces are summed into words (a word's score is the sum of its pieces' scores; special tokens are
left out of the word table). :func:`attribute` picks the right one of the two entry points from
the model's head. Tensors stay on the model's device; the results are numpy / pandas on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch

from bertology.architectures import mlm_parts
from bertology.errors import ConfigError, CorpusError, ModelError
from bertology.features import model_max_tokens, tokenize_sentences
from bertology.inspection import attention_rollout
from bertology.models import LoadedModel, model_device, to_device
from bertology.progress import progress_bar

__all__ = [
    "Attribution",
    "attribute",
    "masked_word_attribution",
    "classifier_attribution",
    "head_kind",
    "resolve_methods",
    "METHODS",
    "METHOD_TITLES",
    "BASELINES",
    "CLASSIFIER_OUTPUTS",
    "IG_RULES",
]

METHODS = ("gxi", "ig", "attention", "rollout")
METHOD_TITLES = {
    "gxi": "gradient × input",
    "ig": "integrated gradients",
    "attention": "attention (last layer, mean of heads)",
    "rollout": "attention rollout",
}
BASELINES = ("pad", "mask")  # the token every word piece becomes in the integrated-gradients baseline
CLASSIFIER_OUTPUTS = ("logit", "log-probability")
IG_RULES = ("gausslegendre", "riemann_trapezoid", "riemann_middle", "riemann_left", "riemann_right")  # Captum's

ScoreFunction = Callable[[torch.Tensor], torch.Tensor]  # input ids [B, T] -> explained output [B]


@dataclass
class Attribution:
    """Attribution of one prediction for one sentence.

    ``table``: one row per word × method -- ``method``, ``position`` (the word's index in the
    sentence), ``word``, ``pieces`` (its number of tokens), ``score`` (the sum of its pieces'
    scores), ``normalised`` (``score / Σ_words |score|`` of that method: signed shares whose
    absolute values sum to 1) and ``target`` (True for the masked / classified word). A masked word
    is not in the input (the model reads the mask there): its row holds the mask token's scores,
    its ``normalised`` is NaN and it is left out of the other words' shares.
    ``token_scores``: the same per token (special tokens included; ``word`` -1 for them).

    ``kind``: ``masked-word``, ``sequence`` or ``token``. ``target`` / ``target_id``: the vocabulary
    token (id) or the class label (index) explained; ``output``: ``log-probability`` or ``logit``;
    ``position``: the token whose output is explained (the mask, the word's first piece, or 0 --
    the first token, which sequence heads read); ``input_ids`` / ``baseline_ids`` ``[T]``.
    ``score`` = ``f(input)``, ``baseline_score`` = ``f(baseline)``; ``delta``: Captum's convergence
    delta ``Σ ig - (f(input) - f(baseline))`` (None when ``ig`` was not asked for).
    """

    model_name: str
    kind: str
    words: list[str]
    word: int | None
    tokens: list[str]
    word_ids: list[int]
    input_ids: list[int]
    baseline_ids: list[int]
    position: int
    target: str
    target_id: int
    output: str
    score: float
    baseline_score: float
    delta: float | None
    n_steps: int
    methods: tuple[str, ...]
    token_scores: pd.DataFrame
    table: pd.DataFrame

    @property
    def difference(self) -> float:
        """``f(input) - f(baseline)``: what the integrated-gradients scores add up to."""
        return self.score - self.baseline_score

    def by_word(self, value: str = "normalised", masked: bool = False) -> pd.DataFrame:
        """``[W, methods]``: one row per word of the input (index ``position``, ``word``), one column
        per method; the masked word (not in the input) only with ``masked=True``."""
        table = self.table
        if self.kind == "masked-word" and not masked:
            table = table[~table["target"]]
        wide = table.pivot(index=["position", "word"], columns="method", values=value)
        return wide[[m for m in self.methods]]

    def masked_line(self) -> str | None:
        """For a masked word, one line with the mask token's raw scores, said to be apart from the
        shares (None for a classifier)."""
        if self.kind != "masked-word" or self.word is None:
            return None
        rows = self.table[self.table["target"]].set_index("method")["score"]
        scores = ", ".join(f"{m} {rows[m]:.4f}" for m in self.methods if m in rows)
        return (
            f"word {self.word} ({self.words[self.word]!r}) is the masked position: the model reads "
            f"{self.tokens[self.position]} there, not the word; its raw scores ({scores}) are the mask token's "
            "and are left out of the shares"
        )

    def summary(self) -> str:
        """One line: what is explained, its value at the input and at the baseline."""
        where = "" if self.kind == "sequence" else f" at word {self.word} ({self.words[self.word or 0]!r})"
        line = (
            f"{self.model_name}: {self.output} of {self.target!r}{where} = {self.score:.4f}; "
            f"baseline {self.baseline_score:.4f}; difference {self.difference:.4f}"
        )
        if self.delta is not None:
            line += f"; integrated gradients: {self.n_steps} steps, convergence delta {self.delta:.2e}"
        return line


@dataclass
class _Problem:
    """What is explained: the encoded sentence (``ids``, ``word_ids`` ``[T]``), the explained
    position and target, and the score function of a batch of input ids."""

    kind: str
    output: str
    word: int | None
    ids: list[int]
    word_ids: list[int]
    position: int
    target: str
    target_id: int
    score: ScoreFunction


@dataclass(frozen=True)
class _Settings:
    methods: tuple[str, ...]
    n_steps: int
    baseline: str
    ig_rule: str
    internal_batch_size: int | None


# --------------------------------------------------------------------------- entry points


def head_kind(model: Any) -> str:
    """``mlm``, ``sequence``, ``token`` (a fine-tuned classifier) or ``encoder`` (no head), from the
    model's class (``*ForMaskedLM``, ``*ForSequenceClassification``, ``*ForTokenClassification``)."""
    name = type(model).__name__
    for suffix, kind in (
        ("ForMaskedLM", "mlm"),
        ("ForSequenceClassification", "sequence"),
        ("ForTokenClassification", "token"),
    ):
        if name.endswith(suffix):
            return kind
    return "encoder"


def attribute(
    lm: LoadedModel,
    words: Sequence[str],
    word: int | None = None,
    target: str | None = None,
    *,
    methods: str | Sequence[str] = "all",
    n_steps: int = 50,
    baseline: str = "pad",
    output: str | None = None,
    ig_rule: str = "gausslegendre",
    internal_batch_size: int | None = None,
    foil: str | None = None,
) -> Attribution:
    """Attribution of ``lm``'s prediction, whichever head it has: a masked word for an MLM head
    (``word`` required, ``target`` a vocabulary word, ``foil`` a second one for the contrast
    ``log p(target) - log p(foil)``; the output is ``log-probability``, any other ``output`` is refused), a class for a fine-tuned classifier (``target`` a label; ``word``
    required for a token classifier; ``output`` ``logit``, the default, or ``log-probability``).
    Raises :class:`ModelError` for an encoder without a head."""
    kind = head_kind(lm.model)
    options: dict[str, Any] = dict(
        methods=methods, n_steps=n_steps, baseline=baseline, ig_rule=ig_rule, internal_batch_size=internal_batch_size
    )
    if kind == "mlm":
        if output not in (None, "log-probability"):
            raise ConfigError(
                f"output {output!r}: a masked word's attribution explains log p(target) at the mask "
                "(log-probability); logit and other outputs are for fine-tuned classifiers"
            )
        if word is None:
            raise CorpusError("masked-word attribution needs the index of the word to mask")
        return masked_word_attribution(lm, words, word, target, foil=foil, **options)
    if kind in ("sequence", "token"):
        if foil is not None:
            raise ConfigError("a foil contrasts two vocabulary words at a mask: it is for a model with an MLM head")
        return classifier_attribution(lm, words, target, word, output=output or "logit", **options)
    raise ModelError(
        f"{lm.name}: {type(lm.model).__name__} has no head to explain; load it with an MLM head "
        "(load_model(..., mlm_head=True)) or give a fine-tuned classifier (<run>@<step>)"
    )


def masked_word_attribution(
    lm: LoadedModel,
    words: Sequence[str],
    word: int,
    target: str | None = None,
    *,
    foil: str | None = None,
    methods: str | Sequence[str] = "all",
    n_steps: int = 50,
    baseline: str = "pad",
    ig_rule: str = "gausslegendre",
    internal_batch_size: int | None = None,
) -> Attribution:
    """Attribution of ``log p(target)`` at word ``word`` of ``words``, replaced by one mask token.
    ``target``: a vocabulary word (one piece, as the tokenizer cuts it inside a sentence, or a
    vocabulary token such as ``##s``); None: the model's top guess (special tokens excluded).
    ``foil``: a second vocabulary word; the output explained is then the contrast ``log p(target) -
    log p(foil)`` at the mask (output ``log-probability contrast``; Yin & Neubig 2022), which is also the
    difference of the two logits.

    Raises :class:`ModelError` for a model without an MLM head, :class:`CorpusError` for an empty
    sentence, a word index out of range or a target that is not one vocabulary piece."""
    if head_kind(lm.model) != "mlm" or not lm.has_mlm_head:
        raise ModelError(
            f"{lm.name}: no MLM head loaded ({type(lm.model).__name__}), so there is no masked-word "
            "prediction to explain; load it with mlm_head=True (its weights must carry one)"
        )
    settings = _settings(methods, n_steps, baseline, ig_rule, internal_batch_size)
    ids, word_ids = _encode(lm, words)
    ids, word_ids, position = _mask_word(lm, ids, word_ids, word, len(words))
    encoder, mlm_head, _ = mlm_parts(lm.model)
    positions = _positions(lm, ids)

    def log_probabilities(batch: torch.Tensor) -> torch.Tensor:
        """``[B, V]`` at the mask; the vocabulary logits there only (the MLM head is position-wise)."""
        hidden = encoder(input_ids=batch, **positions(batch)).last_hidden_state[:, position]  # [B, H]
        return torch.log_softmax(_as_float(mlm_head(hidden)), dim=-1)

    with _eval_mode(lm.model):
        target_id = _top_guess(lm, ids, log_probabilities) if target is None else _vocabulary_target(lm, target)

        foil_id = None if foil is None else _vocabulary_target(lm, foil)
        if foil_id is not None and foil_id == target_id:
            raise CorpusError(f"the foil {foil!r} is the target itself: a contrast needs two different words")

        def score(batch: torch.Tensor) -> torch.Tensor:
            scores = log_probabilities(batch)
            return scores[:, target_id] if foil_id is None else scores[:, target_id] - scores[:, foil_id]

        token = str(lm.tokenizer.convert_ids_to_tokens(target_id))
        output = "log-probability"
        if foil_id is not None:
            output = "log-probability contrast"
            token = f"{token} rather than {lm.tokenizer.convert_ids_to_tokens(foil_id)}"
        problem = _Problem("masked-word", output, word, ids, word_ids, position, token, target_id, score)
        return _explain(lm, words, problem, settings)


def classifier_attribution(
    lm: LoadedModel,
    words: Sequence[str],
    target: str | int | None = None,
    word: int | None = None,
    *,
    output: str = "logit",
    methods: str | Sequence[str] = "all",
    n_steps: int = 50,
    baseline: str = "pad",
    ig_rule: str = "gausslegendre",
    internal_batch_size: int | None = None,
) -> Attribution:
    """Attribution of a fine-tuned classifier's ``output`` (``logit`` or ``log-probability``) for
    class ``target`` (a label of ``config.id2label`` or its index; None: the predicted class): of
    the sentence (sequence classifier) or of word ``word`` (token classifier, read at its first
    piece). Raises :class:`ModelError` for a model that is not a classifier, :class:`CorpusError`
    for bad words and :class:`ConfigError` for an unknown label or output."""
    kind = head_kind(lm.model)
    if kind not in ("sequence", "token"):
        raise ModelError(
            f"{lm.name}: {type(lm.model).__name__} is not a fine-tuned classifier "
            "(*ForSequenceClassification / *ForTokenClassification)"
        )
    if output not in CLASSIFIER_OUTPUTS:
        raise ConfigError(f"output must be one of {', '.join(CLASSIFIER_OUTPUTS)}, got {output!r}")
    settings = _settings(methods, n_steps, baseline, ig_rule, internal_batch_size)
    ids, word_ids = _encode(lm, words)
    position = 0 if kind == "sequence" else _first_piece(word_ids, word, len(words))
    model = lm.model
    positions = _positions(lm, ids)
    with _eval_mode(model):
        target_id = _class_target(lm, ids, position, kind, target)

        def score(batch: torch.Tensor) -> torch.Tensor:
            logits = _as_float(model(input_ids=batch, **positions(batch)).logits)  # [B, C] or [B, T, C]
            logits = logits if kind == "sequence" else logits[:, position]
            logits = logits if output == "logit" else torch.log_softmax(logits, dim=-1)
            return logits[:, target_id]

        label = str(model.config.id2label.get(target_id, target_id))
        explained = word if kind == "token" else None  # a sequence classifier's output is the sentence's
        problem = _Problem(kind, output, explained, ids, word_ids, position, label, target_id, score)
        return _explain(lm, words, problem, settings)


# --------------------------------------------------------------------------- checks and inputs


def resolve_methods(methods: str | Sequence[str]) -> tuple[str, ...]:
    """``"all"`` or names of :data:`METHODS` (one name or several) as a tuple in :data:`METHODS`
    order; :class:`ConfigError` for an unknown name or none."""
    names = [methods] if isinstance(methods, str) else list(methods)
    if "all" in names:
        return METHODS
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        raise ConfigError(f"methods must be 'all' or among {', '.join(METHODS)}; got {names!r}")
    return tuple(m for m in METHODS if m in names)


def _settings(
    methods: str | Sequence[str], n_steps: int, baseline: str, ig_rule: str, internal_batch_size: int | None
) -> _Settings:
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 2:
        raise ConfigError(f"n_steps must be an integer >= 2, got {n_steps!r}")
    if baseline not in BASELINES:
        raise ConfigError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    if ig_rule not in IG_RULES:
        raise ConfigError(f"ig_rule must be one of {', '.join(IG_RULES)}, got {ig_rule!r}")
    if internal_batch_size is not None and internal_batch_size < 1:
        raise ConfigError(f"internal_batch_size must be >= 1 or None, got {internal_batch_size!r}")
    return _Settings(resolve_methods(methods), n_steps, baseline, ig_rule, internal_batch_size)


def _encode(lm: LoadedModel, words: Sequence[str]) -> tuple[list[int], list[int]]:
    """Token ids ``[T]`` (special tokens included) and each token's word (-1: special)."""
    if not words or not any(str(w).strip() for w in words):
        raise CorpusError("the sentence is empty: give at least one word")
    ids, word_ids = tokenize_sentences(lm.tokenizer, [list(words)])[0]
    limit = model_max_tokens(lm.model, lm.tokenizer)
    if len(ids) > limit:
        raise CorpusError(f"the sentence has {len(ids)} tokens; {lm.name} reads at most {limit}: shorten it")
    return ids, word_ids


def _positions(lm: LoadedModel, ids: list[int]) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """The ``position_ids`` keyword for a batch ``[B, T]``: the positions of the sentence itself,
    whatever the batch holds. The RoBERTa family (RoBERTa, XLM-R, CamemBERT, MPNet: embeddings with
    a ``padding_idx``) computes positions from the input ids, ``padding_idx + 1 + i`` for a real token
    and ``padding_idx`` for a padding one, so the [PAD] baseline would otherwise run with other
    positions than the path Captum integrates along (which embeds the sentence's own ids): the
    baseline's score, the reported difference and the convergence delta would be of another
    function. Models with positions 0..T-1 whatever the ids get no keyword."""
    embeddings = getattr(lm.model.base_model, "embeddings", None)
    padding_idx = getattr(embeddings, "padding_idx", None)
    if padding_idx is None:
        return lambda batch: {}
    real = torch.tensor(ids) != padding_idx
    fixed = (torch.cumsum(real.long(), 0) * real.long() + padding_idx)[None, :]  # [1, T], as Hugging Face's rule

    def keyword(batch: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"position_ids": fixed.to(batch.device).expand(batch.shape[0], -1)}

    return keyword


def _check_word(word: int | None, n_words: int) -> int:
    if word is None or isinstance(word, bool) or not isinstance(word, (int, np.integer)):
        raise CorpusError(f"a word index is needed (0..{n_words - 1}), got {word!r}")
    if not 0 <= int(word) < n_words:
        raise CorpusError(f"word {word} is outside the sentence of {n_words} words (0..{n_words - 1})")
    return int(word)


def _first_piece(word_ids: list[int], word: int | None, n_words: int) -> int:
    word = _check_word(word, n_words)
    return word_ids.index(word)


def _mask_word(
    lm: LoadedModel, ids: list[int], word_ids: list[int], word: int, n_words: int
) -> tuple[list[int], list[int], int]:
    """``ids`` and ``word_ids`` with word ``word``'s pieces replaced by one mask token, and its position."""
    word = _check_word(word, n_words)
    mask_id = lm.tokenizer.mask_token_id
    if mask_id is None:
        raise ModelError(f"{lm.name}: its tokenizer has no mask token")
    pieces = [t for t, w in enumerate(word_ids) if w == word]
    first, last = pieces[0], pieces[-1]
    return ids[:first] + [mask_id] + ids[last + 1 :], word_ids[:first] + [word] + word_ids[last + 1 :], first


def _special_ids(lm: LoadedModel, size: int) -> list[int]:
    """The ids never proposed as a guess: the special tokens, and the ids of an output layer larger
    than the tokenizer's vocabulary (no token spells them: they would print as ``None``)."""
    return sorted({i for i in lm.tokenizer.all_special_ids if i < size} | set(range(len(lm.tokenizer), size)))


def unknown_words(lm: LoadedModel, words: Sequence[str]) -> list[int]:
    """The indices of the ``words`` that ``lm``'s tokenizer makes nothing but its unknown token of
    (``[UNK]``): the model sees none of them (a tokenizer whose vocabulary lacks the words)."""
    unk = lm.tokenizer.unk_token_id
    if unk is None or not words:
        return []
    ids, word_ids = tokenize_sentences(lm.tokenizer, [list(words)])[0]
    pieces: dict[int, list[int]] = {}
    for i, w in zip(ids, word_ids):
        if w >= 0:
            pieces.setdefault(w, []).append(i)
    return [w for w, p in sorted(pieces.items()) if all(i == unk for i in p)]


def _vocabulary_target(lm: LoadedModel, target: str) -> int:
    """The vocabulary id of ``target``: the one piece the tokenizer makes of it inside a sentence,
    else a vocabulary token spelled exactly so (``##s``); :class:`CorpusError` otherwise."""
    tok = lm.tokenizer
    if not str(target).strip():
        raise CorpusError("the target word is empty: give a vocabulary word or leave it out for the top guess")
    ids, word_ids = tokenize_sentences(tok, [[str(target)]])[0]
    pieces = [i for i, w in zip(ids, word_ids) if w == 0]
    special = set(tok.all_special_ids)
    exact = tok.convert_tokens_to_ids(str(target))
    for candidate in ([pieces[0]] if len(pieces) == 1 else []) + ([exact] if isinstance(exact, int) else []):
        if candidate in special and candidate != tok.unk_token_id:
            raise CorpusError(
                f"target {target!r} is the special token {tok.convert_ids_to_tokens(int(candidate))}: "
                "give a word of the vocabulary (special tokens are never the masked word)"
            )
    if len(pieces) == 1 and pieces[0] != tok.unk_token_id:
        return int(pieces[0])
    if isinstance(exact, int) and exact != tok.unk_token_id:
        return exact
    spelled = " ".join(tok.convert_ids_to_tokens(pieces))
    raise CorpusError(
        f"target {target!r} is not one piece of {lm.name}'s vocabulary (it is cut into: {spelled}); "
        "the MLM head predicts one piece: give a word that is one piece, or a vocabulary token"
    )


@torch.no_grad()
def _top_guess(lm: LoadedModel, ids: list[int], log_probabilities: ScoreFunction) -> int:
    """The MLM head's most probable token at the mask (special tokens excluded)."""
    batch = to_device(torch.tensor([ids]), model_device(lm.model))
    scores = log_probabilities(batch)[0].clone()  # [V]
    scores[_special_ids(lm, scores.shape[-1])] = float("-inf")
    if not torch.isfinite(scores).any():
        raise ModelError(f"{lm.name}: its tokenizer's vocabulary holds no token to guess (special tokens only)")
    return int(scores.argmax())


@torch.no_grad()
def _class_target(lm: LoadedModel, ids: list[int], position: int, kind: str, target: str | int | None) -> int:
    """The class index of ``target`` (a label or an index; None: the predicted class)."""
    labels = {int(i): str(label) for i, label in lm.model.config.id2label.items()}
    if target is None:
        batch = to_device(torch.tensor([ids]), model_device(lm.model))
        logits = lm.model(input_ids=batch).logits[0]
        return int((logits if kind == "sequence" else logits[position]).argmax())
    by_name = {label: i for i, label in labels.items()}
    if str(target) in by_name:
        return by_name[str(target)]
    if str(target).isdigit() and int(target) in labels:
        return int(target)
    names = list(labels.values())
    more = f", ... and {len(names) - 20} more" if len(names) > 20 else ""  # a 10,000-label head: one readable line
    raise ConfigError(f"target {target!r} is not a class of {lm.name}: its labels are {', '.join(names[:20])}{more}")


def _as_float(tensor: torch.Tensor) -> torch.Tensor:
    """float32 for half-precision outputs (a log-softmax in float16 loses the small scores)."""
    return tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


@contextmanager
def _eval_mode(model: Any) -> Iterator[None]:
    """``model`` in eval mode (no dropout: attributions are deterministic), restored afterwards."""
    training = bool(model.training)
    model.eval()
    try:
        yield
    finally:
        model.train(training)


# --------------------------------------------------------------------------- the methods


def _baseline_ids(lm: LoadedModel, problem: _Problem, baseline: str) -> list[int]:
    """Every word piece replaced by the padding (or mask) token; the special tokens, and in a
    masked-word problem the mask itself, kept."""
    tok = lm.tokenizer
    fill = tok.pad_token_id if baseline == "pad" else tok.mask_token_id
    if fill is None:
        other = "mask" if baseline == "pad" else "pad"
        raise ModelError(f"{lm.name}: its tokenizer has no {baseline} token; use baseline={other!r}")
    keep = [w < 0 or (problem.kind == "masked-word" and t == problem.position) for t, w in enumerate(problem.word_ids)]
    return [i if kept else int(fill) for i, kept in zip(problem.ids, keep)]


def _gradient_x_input(model: Any, score: ScoreFunction, ids: torch.Tensor) -> np.ndarray:
    """Gradient × input on the input embeddings, summed over their dimensions: ``[T]`` for ``ids [1, T]``."""
    from captum.attr import LayerGradientXActivation

    method = LayerGradientXActivation(score, model.get_input_embeddings())
    scores = method.attribute(ids)  # [1, T, E]
    return scores[0].sum(-1).detach().double().cpu().numpy()


def _integrated_gradients(
    model: Any, score: ScoreFunction, ids: torch.Tensor, baseline: torch.Tensor, settings: _Settings
) -> tuple[np.ndarray, float]:
    """Integrated gradients on the input embeddings, summed over their dimensions (``[T]``), and
    Captum's convergence delta ``Σ scores - (f(ids) - f(baseline))``.

    A progress bar over Captum's forwards (:func:`bertology.progress.progress_bar`): the path's
    ``n_steps`` points in batches of ``internal_batch_size`` (one batch when None), and the two
    forwards of the end points; ``score`` is only wrapped to count its calls, so the numbers are
    Captum's own. Pass ``internal_batch_size`` to see progress along a long path."""
    from captum.attr import LayerIntegratedGradients

    size = settings.internal_batch_size or settings.n_steps
    bar = progress_bar(total=-(-settings.n_steps // size) + 2, desc="integrated gradients", unit="batch")

    def counted(batch: torch.Tensor, *rest: Any, **kwargs: Any) -> torch.Tensor:
        bar.update(1 if bar.n < bar.total else 0)
        return score(batch, *rest, **kwargs)

    method = LayerIntegratedGradients(counted, model.get_input_embeddings())
    try:
        scores, delta = method.attribute(
            ids,
            baselines=baseline,
            n_steps=settings.n_steps,
            method=settings.ig_rule,
            internal_batch_size=settings.internal_batch_size,
            return_convergence_delta=True,
        )  # [1, T, E], [1]
    finally:
        bar.close()
    return scores[0].sum(-1).detach().double().cpu().numpy(), float(delta.reshape(-1)[0])


@torch.no_grad()
def _attention_scores(
    lm: LoadedModel, ids: torch.Tensor, position: int, methods: Sequence[str]
) -> dict[str, np.ndarray]:
    """``attention`` (last layer, mean over heads) and ``rollout`` rows of ``position``, ``[T]`` each."""
    config = lm.model.config
    if getattr(config, "_attn_implementation", "eager") != "eager":
        raise ModelError(
            f"{lm.name}: loaded without eager attention, so it returns no attention maps; load it with "
            "attentions=True (or model.set_attn_implementation('eager')), or ask for methods gxi / ig only"
        )
    maps = lm.model(input_ids=ids, output_attentions=True).attentions
    attentions = torch.stack([a[0].float() for a in maps]).cpu().numpy()  # [L, H, T, T]
    out = {}
    if "attention" in methods:
        out["attention"] = attentions[-1].mean(axis=0)[position].astype(np.float64)
    if "rollout" in methods:
        out["rollout"] = attention_rollout(attentions)[-1][position].astype(np.float64)
    return out


def _explain(lm: LoadedModel, words: Sequence[str], problem: _Problem, settings: _Settings) -> Attribution:
    """Run the asked methods on ``problem`` and gather the tables."""
    model = lm.model
    device = model_device(model)
    ids = to_device(torch.tensor([problem.ids]), device)  # [1, T]
    baseline_ids = _baseline_ids(lm, problem, settings.baseline)
    baseline = to_device(torch.tensor([baseline_ids]), device)
    with torch.no_grad():
        score, baseline_score = (float(problem.score(x)[0]) for x in (ids, baseline))
    scores: dict[str, np.ndarray] = {}
    delta = None
    if "gxi" in settings.methods:
        scores["gxi"] = _gradient_x_input(model, problem.score, ids)
    if "ig" in settings.methods:
        scores["ig"], delta = _integrated_gradients(model, problem.score, ids, baseline, settings)
    wanted_attention = [m for m in ("attention", "rollout") if m in settings.methods]
    if wanted_attention:
        scores.update(_attention_scores(lm, ids, problem.position, wanted_attention))
    tokens = [str(t) for t in lm.tokenizer.convert_ids_to_tokens(problem.ids)]
    token_scores = _token_table(tokens, problem.word_ids, scores)
    return Attribution(
        model_name=lm.name,
        kind=problem.kind,
        words=[str(w) for w in words],
        word=problem.word,
        tokens=tokens,
        word_ids=list(problem.word_ids),
        input_ids=list(problem.ids),
        baseline_ids=baseline_ids,
        position=problem.position,
        target=problem.target,
        target_id=problem.target_id,
        output=problem.output,
        score=score,
        baseline_score=baseline_score,
        delta=delta,
        n_steps=settings.n_steps,
        methods=settings.methods,
        token_scores=token_scores,
        table=word_table(token_scores, [str(w) for w in words], problem.word, masked=problem.kind == "masked-word"),
    )


# --------------------------------------------------------------------------- tables


def _token_table(tokens: list[str], word_ids: list[int], scores: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per method × token: ``method``, ``token_position``, ``token``, ``word``, ``score``."""
    frames = [
        pd.DataFrame(
            {
                "method": method,
                "token_position": np.arange(len(tokens)),
                "token": tokens,
                "word": np.asarray(word_ids, dtype=int),
                "score": np.asarray(values, dtype=np.float64),
            }
        )
        for method, values in scores.items()
    ]
    return pd.concat(frames, ignore_index=True)


def word_table(
    token_scores: pd.DataFrame, words: list[str], target_word: int | None, masked: bool = False
) -> pd.DataFrame:
    """Pieces summed into words (special tokens left out): one row per method × word with
    ``method``, ``position``, ``word``, ``pieces``, ``score``, ``normalised`` (``score`` over the
    sum of the words' absolute scores of that method; 0 when they are all 0) and ``target``.
    ``masked``: the target word was replaced by the mask (it is not in the input): its row keeps the
    mask token's score, its ``normalised`` is NaN and it does not enter the other words' total."""
    pieces = token_scores[token_scores["word"] >= 0]
    summed = pieces.groupby(["method", "word"], sort=False)["score"].agg(["sum", "size"]).reset_index()
    summed = summed.rename(columns={"word": "position", "sum": "score", "size": "pieces"})
    summed["target"] = summed["position"] == (-1 if target_word is None else target_word)
    shared = summed["score"].where(~(summed["target"] & masked), 0.0)
    total = shared.groupby(summed["method"], sort=False).transform(lambda s: s.abs().sum())
    summed["normalised"] = np.where(total > 0, summed["score"] / total.where(total > 0, 1.0), 0.0)
    if masked:
        summed.loc[summed["target"], "normalised"] = np.nan
    summed["word"] = [words[p] for p in summed["position"]]
    return summed[["method", "position", "word", "pieces", "score", "normalised", "target"]]
