"""Cloze predictions of an MLM: planted answers with a tiny model whose output is forced."""

from __future__ import annotations

import pytest
import torch

from bertology.corpus import Sentence
from bertology.errors import ModelError
from bertology.models import from_modules
from bertology.probes.probing.cloze import cloze_accuracy, cloze_predictions
from bertology.testing import make_tiny_bert


@pytest.fixture
def biased_mlm(minilm_tokenizer):
    """A tiny MLM whose decoder bias makes "the" the certain prediction, "a" the runner-up."""
    model = make_tiny_bert(minilm_tokenizer, mlm=True)
    the, a = minilm_tokenizer.convert_tokens_to_ids(["the", "a"])
    # the decoder weight is tied to the input embeddings: give it its own zero matrix
    model.cls.predictions.decoder.weight = torch.nn.Parameter(torch.zeros_like(model.cls.predictions.decoder.weight))
    with torch.no_grad():
        bias = model.cls.predictions.decoder.bias
        bias.zero_()
        bias[the] = 30.0
        bias[a] = 25.0
    return from_modules("biased", model.eval(), minilm_tokenizer)


def test_top_predictions_and_accuracy_are_the_planted_ones(biased_mlm):
    sentences = [
        Sentence("s1", ["the", "cat", "sat"]),
        Sentence("s2", ["a", "dog", "ran", "home"]),
        Sentence("s3", ["The", "end"]),
    ]
    df = cloze_predictions(biased_mlm, sentences, words_per_sentence=4, k=2, seed=0)
    assert set(df["rank"]) == {1, 2}
    top = df[df["rank"] == 1]
    assert (top["prediction"] == "the").all() and (top["probability"] > 0.99).all()
    assert (df[df["rank"] == 2]["prediction"] == "a").all()
    # every single-piece word is masked once; correct where the word is "the"
    assert len(top) == 3 + 4 + 2
    assert sorted(top[top["correct"]]["masked"]) == ["The", "the"]  # uncased tokenizer folds case
    row = top[(top["sentence"] == "s2") & (top["position"] == 1)].iloc[0]
    assert row["text"] == "a ___ ran home" and row["masked"] == "dog"
    acc = cloze_accuracy(df)
    assert acc == {"n": 9, "top1": 2 / 9, "top5": 3 / 9}  # "a" is found at rank 2


def test_needs_the_mlm_head(minilm_tokenizer):
    lm = from_modules("enc", make_tiny_bert(minilm_tokenizer), minilm_tokenizer)
    with pytest.raises(ModelError, match="mlm_head=True"):
        cloze_predictions(lm, [Sentence("s", ["the", "cat"])])
