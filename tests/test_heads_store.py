"""Model-level planted heads through the real extraction path: a tiny BERT whose head (1, 2) is
forced to attend to the previous *token* comes out positional at offset -1, and no other head does
-- also on text full of multi-piece words, where the word-level view misses it."""

import pytest

from bertology.corpus import load_corpus
from bertology.models import from_modules
from bertology.probes.heads.classification import analyse_store
from bertology.store import extract
from bertology.testing import PLANTED_WORDS, plant_offset_head, planted_head_store, tiny_model, tiny_tokenizer

FORCED = (1, 2)  # 0-based array position (plant_offset_head's arguments)
NAMED = (2, 3)  # its (layer, head) numbers in the tables, both from 1
WORDS = PLANTED_WORDS


def test_forced_previous_token_head_through_store(tmp_path):
    """One piece per word: token and word views agree."""
    _, corpus, store = planted_head_store(tmp_path, FORCED, name="planted-previous", sentences=30, lengths=(14, 22))
    tables = analyse_store(store, corpus, frequencies={w: 1.0 for w in WORDS})
    types = tables["head_types"].set_index(["layer", "head"])
    assert types.loc[NAMED, "type"] == "positional"
    assert types.loc[NAMED, "positional_offset"] == -1
    positional = types[types["type"] == "positional"]
    assert list(positional.index) == [NAMED]
    # the notebook function returns the same table
    import pandas as pd

    from bertology.probes.heads import head_types

    pd.testing.assert_frame_equal(head_types(store, corpus, frequencies={w: 1.0 for w in WORDS}), tables["head_types"])


@pytest.fixture(scope="module")
def multi_piece_store(tmp_path_factory):
    """Brown sentences through a tiny WordPiece vocabulary (most words split into characters), a
    random tiny BERT with head (1, 2) planted on the previous token, extracted to a store."""
    tokenizer = tiny_tokenizer("bert")
    model = tiny_model("bert", layers=2, heads=4, hidden=32, seed=1)
    handle = plant_offset_head(model, *FORCED, offset=-1)
    corpus = load_corpus("brown-sample", limit=30)
    lm = from_modules("tiny-planted-prev", model, tokenizer)
    store = extract(lm, corpus, attentions=True, root=tmp_path_factory.mktemp("stores"), progress=False)
    handle.remove()
    return store, corpus, tokenizer


def test_planted_previous_token_head_on_multi_piece_words(multi_piece_store):
    store, corpus, tokenizer = multi_piece_store
    pieces = [len(tokenizer(s.words, is_split_into_words=True)["input_ids"]) - 2 for s in corpus]
    assert sum(pieces) > 2.5 * corpus.n_words  # most words are split
    # the store's counts: every query token but [CLS] (which attends to itself) at offset -1
    bins = store.token_offset_bins
    for i in range(len(corpus)):
        counts = store.token_offsets(i)[FORCED]
        n_tokens = pieces[i] + 2
        assert counts.sum() == n_tokens
        assert counts[bins.index(-1)] == n_tokens - 1 and counts[bins.index(0)] == 1
        special = store.token_offsets(i, queries="special")[FORCED]
        assert special[bins.index(0)] == 1 and special[bins.index(-1)] == 1  # [CLS] itself, [SEP] back
    tables = analyse_store(store, corpus, frequencies="wordfreq")
    types = tables["head_types"].set_index(["layer", "head"])
    share = 1 - len(corpus) / (sum(pieces) + 2 * len(corpus))
    assert types.loc[NAMED, "type"] == "positional"
    assert types.loc[NAMED, "positional_offset"] == -1
    assert types.loc[NAMED, "positional_share"] == pytest.approx(share)
    assert list(types[types["is_positional"]].index) == [NAMED]
    # the word-level view (Clark's conversion, specials dropped) misses it: a split word's pieces
    # attend within the word, so the word's row points at itself
    assert types.loc[NAMED, "word_share"] < 0.9
    words = analyse_store(store, corpus, frequencies="wordfreq", positional_level="word")["head_types"]
    assert not words.set_index(["layer", "head"]).loc[NAMED, "is_positional"]
    # leaving the special tokens' own rows out: every word piece points at the previous token
    pieces_only = analyse_store(store, corpus, frequencies="wordfreq", positional_queries="words")["head_types"]
    assert pieces_only.set_index(["layer", "head"]).loc[NAMED, "positional_share"] == pytest.approx(1.0)
