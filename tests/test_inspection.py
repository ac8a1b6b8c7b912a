"""bertology.inspection (the live page's computations) against known answers: a plain forward pass,
the eager attention formula, Clark et al.'s word pooling done by hand, rollouts worked out by hand,
and an MLM head with a planted favourite token."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertology.errors import CorpusError, ModelError
from bertology.inspection import (
    EXACT_SCORE_TYPES,
    attention_rollout,
    attention_scores,
    inspect_sentence,
    masked_input,
    masked_predictions,
    qk_contributions,
    split_words,
)
from bertology.models import from_modules
from bertology.testing import tiny_model, tiny_tokenizer

SENTENCE = "The unbelievably old jury said nothing, didn't it?"


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_split_words_keeps_apostrophes_and_splits_punctuation():
    assert split_words("Don't stop, <b>x</b>!") == ["Don't", "stop", ",", "<", "b", ">", "x", "<", "/", "b", ">", "!"]
    with pytest.raises(CorpusError, match="empty"):
        split_words("   ")


def test_attentions_equal_a_plain_forward_pass(tiny_lm):
    words = split_words(SENTENCE)
    ins = inspect_sentence(tiny_lm, words)
    enc = tiny_lm.tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        plain = tiny_lm.model(**enc, output_attentions=True).attentions
    expected = torch.stack([a[0] for a in plain]).numpy()
    assert ins.attentions.shape == (2, 4, len(ins.tokens), len(ins.tokens))
    np.testing.assert_allclose(ins.attentions, expected, atol=1e-7)
    assert ins.tokens == tiny_lm.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert ins.tokens[0] == "[CLS]" and ins.tokens[-1] == "[SEP]" and ins.word_ids[0] == ins.word_ids[-1] == -1
    assert ins.queries.shape == ins.keys.shape == (2, 4, len(ins.tokens), 8)


def test_word_maps_pool_pieces_as_clark_et_al(tiny_lm):
    words = split_words(SENTENCE)
    ins = inspect_sentence(tiny_lm, words)
    assert len(ins.tokens) > len(words) + 2  # some words are split into pieces
    wid = np.array(ins.word_ids)
    to_word = np.stack([(wid == w) for w in range(len(words))]).astype(float)  # [W, T]
    from_word = to_word / to_word.sum(1, keepdims=True)
    by_hand = np.einsum("wt,lhts,vs->lhwv", from_word, ins.attentions.astype(float), to_word)
    np.testing.assert_allclose(ins.word_attention, by_hand, atol=1e-6)
    np.testing.assert_allclose(
        ins.special_attention[..., 0], np.einsum("wt,lht->lhw", from_word, ins.attentions[..., 0]), atol=1e-6
    )
    rows, columns, maps = ins.maps("word")
    assert rows == words and columns == ["[CLS]", *words, "[SEP]"]
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)  # every piece of mass is in some column


@pytest.mark.parametrize("model_type", sorted(EXACT_SCORE_TYPES))
def test_qk_contributions_sum_to_the_scores_that_softmax_into_the_map(model_type):
    lm = from_modules(model_type, tiny_model(model_type), tiny_tokenizer(model_type))
    ins = inspect_sentence(lm, split_words("the dog sat with the old man"))
    assert ins.exact_scores
    scores = attention_scores(ins.queries, ins.keys)  # [L, H, T, T]
    np.testing.assert_allclose(softmax(scores), ins.attentions, atol=1e-5)
    layer, head, query = 1, 2, 3
    parts = qk_contributions(ins.queries[layer, head], ins.keys[layer, head], query)  # [T, d]
    assert parts.shape == (len(ins.tokens), ins.head_size)
    np.testing.assert_allclose(parts.sum(-1) / np.sqrt(ins.head_size), scores[layer, head, query], rtol=1e-5, atol=1e-6)


def test_relative_position_models_are_flagged_as_content_scores_only():
    lm = from_modules("deberta", tiny_model("deberta-v2"), tiny_tokenizer("deberta-v2"))
    ins = inspect_sentence(lm, split_words("the dog sat"))
    assert not ins.exact_scores
    assert ins.queries.shape[:2] == (2, 4)  # its relative-position projections were not recorded as layers


def test_rollout_of_identity_attention_is_identity():
    eye = np.broadcast_to(np.eye(5), (3, 2, 5, 5))
    np.testing.assert_allclose(attention_rollout(eye), np.broadcast_to(np.eye(5), (3, 5, 5)), atol=1e-7)


def test_rollout_matches_a_two_layer_example_worked_by_hand():
    # layer 0: both heads put everything on token 0; layer 1: head 0 on token 1, head 1 uniform
    a0 = np.array([[[1.0, 0.0], [1.0, 0.0]]] * 2)
    a1 = np.array([[[0.0, 1.0], [0.0, 1.0]], [[0.5, 0.5], [0.5, 0.5]]])
    out = attention_rollout(np.stack([a0, a1]))
    # A'0 = 0.5 I + 0.5 [[1,0],[1,0]] = [[1, 0], [0.5, 0.5]]
    # A'1 = 0.5 I + 0.5 [[.25,.75],[.25,.75]] = [[.625, .375], [.125, .875]]
    first = np.array([[1.0, 0.0], [0.5, 0.5]])
    second = np.array([[0.625, 0.375], [0.125, 0.875]]) @ first
    np.testing.assert_allclose(out[0], first, atol=1e-7)
    np.testing.assert_allclose(out[1], second, atol=1e-7)
    np.testing.assert_allclose(out[1], [[0.8125, 0.1875], [0.5625, 0.4375]], atol=1e-7)
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-6)


def planted_mlm(favourite: str):
    tok = tiny_tokenizer("bert")
    model = tiny_model("bert", mlm=True)
    with torch.no_grad():
        model.cls.predictions.bias[tok.convert_tokens_to_ids(favourite)] += 50.0
        model.cls.predictions.bias[tok.sep_token_id] += 100.0  # a special token is never proposed
    return from_modules("planted-mlm", model, tok)


def test_masked_prediction_ranks_the_planted_token_first():
    lm = planted_mlm("cat")
    top = masked_predictions(lm, ["the", "dog", "sat"], 1, k=5)
    assert list(top.columns) == ["rank", "token", "probability"] and len(top) == 5
    assert top["token"].iloc[0] == "cat" and top["probability"].iloc[0] > 0.99
    assert "[SEP]" not in set(top["token"]) and top["rank"].tolist() == [1, 2, 3, 4, 5]


def test_a_word_of_several_pieces_is_masked_as_one_token():
    lm = planted_mlm("cat")
    words = ["the", "zqxw", "sat"]
    ids = lm.tokenizer(words, is_split_into_words=True)["input_ids"]
    masked, position = masked_input(lm, words, 1)
    assert len(ids) > 5  # "zqxw" has several pieces
    assert masked == [ids[0], ids[1], lm.tokenizer.mask_token_id, *ids[-2:]] and position == 2
    with pytest.raises(CorpusError, match="outside the sentence"):
        masked_input(lm, words, 3)


def test_clear_errors_for_no_mlm_head_and_a_too_long_sentence(tiny_lm):
    with pytest.raises(ModelError, match="no MLM head"):
        masked_predictions(tiny_lm, ["the", "dog"], 0)
    with pytest.raises(CorpusError, match="reads at most 64"):
        inspect_sentence(tiny_lm, ["word"] * 80)


def test_a_sentence_given_as_a_string_is_split_into_words_not_characters(tiny_lm):
    ins = inspect_sentence(tiny_lm, "the dog barked.")
    assert ins.words == ["the", "dog", "barked", "."]
    np.testing.assert_array_equal(ins.attentions, inspect_sentence(tiny_lm, ["the", "dog", "barked", "."]).attentions)
    with pytest.raises(CorpusError, match="empty"):
        inspect_sentence(tiny_lm, "   ")
