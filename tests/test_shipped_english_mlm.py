"""The English MLM the workbench ships (`minilm-english-mlm`: MiniLM-L6 after continued MLM
pretraining on the offline English corpus): listed, loadable with its MLM head, float16 on disk,
within the size budget, its recipe and starting point on the card, and it knows English better
than the small from-scratch model: on sentences of the bundled Brown sample it needs fewer nats per
word, paired on the same sentences."""

from __future__ import annotations

import json

import pytest
from conftest import shipped_release

from bertology.models import list_models, load_model

NAME = "minilm-english-mlm"
pytestmark = [pytest.mark.real_model, pytest.mark.slow]


@pytest.fixture(scope="module")
def release():
    return shipped_release(NAME)


def test_listed_within_budget_with_its_recipe_and_pll_on_the_card(release):
    assert {NAME, f"{NAME}@{release['final']}"} <= set(list_models()["name"])
    size = sum(f.stat().st_size for f in release["path"].rglob("*") if f.is_file())
    assert size <= 60 * 2**20, size
    card = json.loads((release["path"] / "release.json").read_text())
    first = card.get("recipe_first_stretch", card["recipe"])  # trained in stretches: the first one's start
    assert first["init_from"] == "minilm-l6" and card["recipe"]["objective"] == "mlm"
    final = card["checkpoints"][-1]
    # measured at release (three stretches, step 4,000): 4.32 [4.25, 4.41] nats per piece (4.83 after two); target <= 5.0
    assert final["pll_nats_per_piece"] <= 5.0 and final["pll_nats_per_piece_ci"][1] <= 5.0, final
    assert [s["last_step"] for s in card["stretches"]] == [1000, 2000, 4000] and final["step"] == 4000
    assert len(card["stretch_configs"]) == 3 and "email_ham" in card["corpus"]["sources"]
    low, high = final["pll_nats_per_piece_ci"]
    assert low <= final["pll_nats_per_piece"] <= high
    assert card["pll_texts"]["sentences"] == 400
    text = (release["path"] / "README.md").read_text()
    assert "started from | `minilm-l6`" in text and "PLL nats/piece" in text


def test_knows_english_better_than_the_from_scratch_model_per_word(release):
    from bertology.corpus import load_corpus
    from bertology.pseudo_likelihood import pseudo_log_likelihood
    from bertology.uncertainty import paired_bootstrap

    texts = [s.text for s in load_corpus("brown-sample", limit=30)]
    scores = {
        name: pseudo_log_likelihood(load_model(name, mlm_head=True, attentions=False), texts, batch_size=128)
        for name in (NAME, "bert-mini-english")
    }
    ours, small = scores[NAME], scores["bert-mini-english"]
    assert (ours["n_words"] == small["n_words"]).all()
    comparison = paired_bootstrap(ours["nll"], small["nll"], ours["n_words"], small["n_words"])
    assert comparison.difference < 0 and comparison.high < 0, comparison  # fewer nats per word, paired


def test_predicts_modern_news_like_english_within_the_target():
    """Issue 42 item 4: <= 5.0 nats per piece on the project's held-out modern news-like sentences
    (never trained on), the whole 95% interval; 5.30 [5.13, 5.48] before the third stretch, 4.75
    [4.57, 4.94] with the trainer's float32 weights after it."""
    from bertology.pretraining.evaluation import modern_english_sentences
    from bertology.pseudo_likelihood import pll_summary, pseudo_log_likelihood

    lm = load_model(NAME, mlm_head=True, attentions=False)
    news = pll_summary(pseudo_log_likelihood(lm, modern_english_sentences("news")))["nats_per_piece"]
    assert news.estimate <= 5.0 and news.high <= 5.0, news
