"""Model-level planted heads through the real extraction path: a tiny BERT whose head (1, 2) is
forced to attend to the previous token comes out positional at offset -1, and no other head does."""

import numpy as np
import pytest
import torch
import transformers.models.bert.modeling_bert as modeling_bert
from transformers import BertTokenizerFast

from bertology.testing import tiny_bert
from bertology.probes.heads.head_types import analyse_store

FORCED = (1, 2)
WORDS = [f"w{i}" for i in range(30)]


@pytest.fixture
def forced_model(monkeypatch):
    model = tiny_bert(seed=3, mlm=False, layers=2, heads=4, hidden=32)
    target = model.encoder.layer[FORCED[0]].attention.self
    original = modeling_bert.eager_attention_forward

    def forced(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        out, weights = original(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
        if module is not target:
            return out, weights
        t = weights.shape[-1]
        shifted = torch.zeros(t, t)
        shifted[torch.arange(1, t), torch.arange(t - 1)] = 1.0
        shifted[0, 0] = 1.0
        weights = weights.clone()
        weights[:, FORCED[1]] = shifted
        return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights

    monkeypatch.setattr(modeling_bert, "eager_attention_forward", forced)
    return model


def test_forced_previous_token_head_through_store(forced_model, tmp_path):
    from bertology.corpus import Corpus, Sentence
    from bertology.models import from_modules
    from bertology.store import extract

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)})
    rng = np.random.default_rng(0)
    sentences = [Sentence(f"s{i}", list(rng.choice(WORDS, size=int(rng.integers(14, 22)))))
                 for i in range(30)]
    corpus = Corpus("planted-previous", sentences)
    lm = from_modules("tiny-forced", forced_model, tokenizer)
    store = extract(lm, corpus, attentions=True, root=tmp_path, progress=False)
    tables = analyse_store(store, corpus, frequencies={w: 1.0 for w in WORDS})
    types = tables["head_types"].set_index(["layer", "head"])
    assert types.loc[FORCED, "type"] == "positional"
    assert types.loc[FORCED, "positional_offset"] == -1
    positional = types[types["type"] == "positional"]
    assert list(positional.index) == [FORCED]
