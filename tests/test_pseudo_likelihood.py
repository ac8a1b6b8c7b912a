"""Pseudo-log-likelihood (Salazar et al. 2020): the batched scorer equals a plain loop that masks
each piece in turn, and the planted answers come out."""

from __future__ import annotations

import math

import pytest
import torch

from bertology.errors import ModelError
from bertology.models import from_modules
from bertology.pseudo_likelihood import pll_summary, pseudo_log_likelihood
from bertology.testing import make_tiny_bert

TEXTS = ["the cat sat on the mat .", "a dog ran home", "colourless green ideas sleep furiously tonight in paris"]


def _loop_pll(model, tokenizer, text: str) -> tuple[float, int]:
    """-PLL by hand: one unbatched, unpadded forward pass per masked piece."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    total, n = 0.0, 0
    for position in range(1, ids.shape[1] - 1):  # every piece but [CLS] and [SEP]
        masked = ids.clone()
        masked[0, position] = tokenizer.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=masked).logits[0, position]
        total -= float(torch.log_softmax(logits, -1)[ids[0, position]])
        n += 1
    return total, n


def test_batched_scores_equal_a_plain_loop(minilm_tokenizer):
    model = make_tiny_bert(minilm_tokenizer, mlm=True).eval()
    lm = from_modules("tiny", model, minilm_tokenizer)
    scores = pseudo_log_likelihood(lm, TEXTS, batch_size=5)  # batches mix sentences of different lengths
    for row, text in zip(scores.itertuples(), TEXTS):
        nll, n = _loop_pll(model, minilm_tokenizer, text)
        assert row.n_pieces == n and row.n_words == len(text.split())
        # batched rows are padded to the batch's longest sentence: other matrix shapes, other float32
        # kernels and summation orders than the one-sentence loop (~1e-6 relative per logit, summed
        # over the pieces' log-softmaxes), hence 1e-4, not bit equality
        assert row.nll == pytest.approx(nll, rel=1e-4)
    summary = pll_summary(scores)
    assert summary["nats_per_piece"].estimate == pytest.approx(scores["nll"].sum() / scores["n_pieces"].sum())
    assert summary["nats_per_word"].estimate == pytest.approx(scores["nll"].sum() / scores["n_words"].sum())
    assert summary["nats_per_piece"].low <= summary["nats_per_piece"].estimate <= summary["nats_per_piece"].high


def test_a_model_certain_of_every_piece_scores_zero_and_a_uniform_one_log_v(minilm_tokenizer):
    model = make_tiny_bert(minilm_tokenizer, mlm=True).eval()
    decoder = model.cls.predictions.decoder
    decoder.weight = torch.nn.Parameter(torch.zeros_like(decoder.weight))  # untie: logits = bias only
    with torch.no_grad():
        decoder.bias.zero_()
    uniform = pseudo_log_likelihood(from_modules("uniform", model, minilm_tokenizer), ["the the the"])
    assert uniform["nll"].iloc[0] / uniform["n_pieces"].iloc[0] == pytest.approx(
        math.log(len(minilm_tokenizer)), rel=1e-5
    )
    with torch.no_grad():
        decoder.bias[minilm_tokenizer.convert_tokens_to_ids("the")] = 60.0
    certain = pseudo_log_likelihood(from_modules("certain", model, minilm_tokenizer), ["the the the"])
    assert certain["nll"].iloc[0] == pytest.approx(0.0, abs=1e-6)


def test_truncation_is_reported_and_bad_input_named(minilm_tokenizer):
    model = make_tiny_bert(minilm_tokenizer, mlm=True).eval()
    lm = from_modules("tiny", model, minilm_tokenizer)
    scores = pseudo_log_likelihood(lm, ["word " * 20], max_length=8)
    assert bool(scores["truncated"].iloc[0]) and scores["n_pieces"].iloc[0] == 6
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        pseudo_log_likelihood(lm, ["fine", "  "])
    encoder_only = from_modules("encoder", make_tiny_bert(minilm_tokenizer).eval(), minilm_tokenizer)
    with pytest.raises(ModelError, match="MLM head"):
        pseudo_log_likelihood(encoder_only, TEXTS)


def test_the_modern_english_set_is_three_genres_of_fifty_and_not_in_the_bundled_corpus():
    """The held-out set of issue 42 (item 4): 50 sentences per genre, read in file order; none of them
    occurs in the bundled Brown text every shipped English model was trained on."""
    import gzip

    from bertology import paths
    from bertology.errors import CorpusError
    from bertology.pretraining.evaluation import MODERN_ENGLISH_GENRES, modern_english_sentences

    every = modern_english_sentences()
    parts = [modern_english_sentences(g) for g in MODERN_ENGLISH_GENRES]
    assert [len(p) for p in parts] == [50, 50, 50] and every == [s for p in parts for s in p]
    assert len(set(every)) == 150 and all(len(s.split()) >= 5 for s in every)
    with gzip.open(paths.package_data() / "brown.txt.gz", "rt", encoding="utf-8") as fh:
        brown = " ".join(fh.read().split()).lower()
    assert not [s for s in every if " ".join(s.split()).lower().rstrip(".?!") in brown]
    with pytest.raises(CorpusError, match="genre must be one of"):
        modern_english_sentences("poetry")
