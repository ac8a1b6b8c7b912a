"""Planted-answer tests for head statistics and head types on constructed attention arrays."""

from types import SimpleNamespace

import numpy as np
import pytest

from bertology.errors import WorkbenchError
from bertology.probes.heads.classification import (
    DEPENDENT_TO_HEAD,
    HEAD_TO_DEPENDENT,
    canonical_relation,
    classify_heads,
    dependency_scores,
    type_matrix,
)
from bertology.probes.heads.stats import corpus_frequencies, head_statistics, statistic_matrix

L, H = 2, 4
POSITIONAL, SYNTACTIC, RARE = (0, 1), (1, 2), (1, 0)  # 0-based positions in the attention arrays


def number(position: tuple[int, int]) -> tuple[int, int]:
    """The (layer, head) numbers the tables give the head at an array position (both from 1)."""
    return position[0] + 1, position[1] + 1


RELATIONS = ["nsubj", "dobj", "amod", "det", "obj", "nmod:poss"]


def planted_corpus(n_sentences=60, seed=0):
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(200)]
    freq = {w: 1.0 / (i + 1) for i, w in enumerate(vocab)}
    sentences, attentions, specials = [], [], []
    for s in range(n_sentences):
        w = int(rng.integers(15, 26))
        words = list(rng.choice(vocab, size=w, replace=False))
        root = int(rng.integers(w))
        heads = [0 if i == root else int(rng.choice([j for j in range(w) if j != i])) + 1 for i in range(w)]
        deprels = [str(rng.choice(RELATIONS)) for _ in range(w)]
        sentences.append(SimpleNamespace(sent_id=f"s{s}", words=words, upos=None, heads=heads, deprels=deprels))
        a = rng.dirichlet(np.ones(w), size=(L, H, w))  # background: diffuse random heads
        rarest = int(np.argmin([freq[x] for x in words]))

        def onehot(targets, w=w):
            m = np.full((w, w), 0.2 / (w - 1))
            m[np.arange(w), targets] = 0.8
            return m

        a[POSITIONAL] = onehot([max(i - 1, 0) for i in range(w)])
        a[SYNTACTIC] = onehot([h - 1 if h > 0 else i for i, h in enumerate(heads)])
        a[RARE] = onehot([rarest] * w)
        attentions.append(a / a.sum(-1, keepdims=True))
        sp = rng.uniform(0, 0.05, size=(L, H, w, 2))
        sp[0, 3, :, 1] = 0.9  # a [SEP] head
        specials.append(sp)
    return sentences, attentions, specials, freq


def test_statistics_recover_planted_heads():
    """special_tokens="drop": word rows renormalised (the word-only view)."""
    sentences, attentions, specials, freq = planted_corpus()
    stats = head_statistics(attentions, sentences, special_attention=specials, frequencies=freq, special_tokens="drop")
    assert set(stats.columns) == {"layer", "head", "statistic", "value", "n"}
    prev = statistic_matrix(stats, "argmax_offset_-1")
    others = prev.stack().drop(index=number(POSITIONAL))
    assert prev.loc[number(POSITIONAL)] > 0.9 and others.max() < 0.5
    rare = statistic_matrix(stats, "argmax_rarest")
    assert rare.loc[number(RARE)] == pytest.approx(1.0)
    conf = statistic_matrix(stats, "confidence")
    assert conf.loc[number(POSITIONAL)] == pytest.approx(0.8)
    assert statistic_matrix(stats, "attn_sep").loc[1, 4] == pytest.approx(0.9)  # array position (0, 3)
    ent = statistic_matrix(stats, "entropy_norm")
    assert ent.loc[number(POSITIONAL)] < ent.loc[1, 1]
    assert list(prev.index) == [1, 2] and list(prev.columns) == [1, 2, 3, 4]  # layers and heads from 1
    # rows of a word-level map sum to one, so offset shares sum to one per head
    offs = stats[stats.statistic.str.startswith("argmax_offset_")].groupby(["layer", "head"]).value.sum()
    np.testing.assert_allclose(offs.to_numpy(), 1.0)


def test_without_sentences_or_specials():
    _, attentions, _, _ = planted_corpus(5)
    stats = head_statistics(attentions)
    assert "attn_cls" not in set(stats.statistic) and "entropy" in set(stats.statistic)


def test_types_recover_planted_heads():
    sentences, attentions, specials, freq = planted_corpus()
    stats = head_statistics(attentions, sentences, special_attention=specials, frequencies=freq)
    dep = dependency_scores(attentions, sentences)
    assert set(dep.direction) == {DEPENDENT_TO_HEAD, HEAD_TO_DEPENDENT}
    syn = dep[(dep["layer"] == 2) & (dep["head"] == 3) & (dep.direction == DEPENDENT_TO_HEAD)]  # SYNTACTIC
    assert (syn.accuracy > 0.99).all() and set(syn.relation) >= {"nsubj", "dobj", "poss"}
    assert "obj" not in set(dep.relation)  # UD alias folded
    with pytest.raises(WorkbenchError, match="token-level"):
        classify_heads(stats, dep, min_count=20)  # the default positional view needs token counts
    types = classify_heads(stats, dep, min_count=20, positional_level="word")
    by_head = types.set_index(["layer", "head"])
    assert by_head.loc[number(POSITIONAL), "type"] == "positional"
    assert by_head.loc[number(POSITIONAL), "positional_offset"] == -1
    assert by_head.loc[number(SYNTACTIC), "type"] == "syntactic"
    assert by_head.loc[number(RARE), "type"] == "rare-token"
    assert by_head.loc[(1, 4), "type"] == "special"
    assert (types.type == "positional").sum() == 1
    assert (types.type == "syntactic").sum() == 1
    assert (types.type == "rare-token").sum() == 1
    m = type_matrix(types)
    assert m.shape == (L, H) and m.loc[1, 2] == "positional"


def test_relation_labels():
    assert canonical_relation("obj") == "dobj"
    assert canonical_relation("nsubj:pass") == "nsubjpass"
    assert canonical_relation("acl:relcl") == "acl"
    assert canonical_relation("PREP") == "prep"


def test_corpus_frequencies_counts_lowercase():
    c = corpus_frequencies([["The", "the", "dog"]])
    assert c["the"] == 2 and c["dog"] == 1


# --------------------------------------------------------------------------- special tokens kept (Clark)


def two_word_sentence():
    """One sentence, one head, two words: raw word attention and the mass on [CLS] / [SEP].

    full rows (word 0, word 1, [CLS], [SEP]): row 0 = 0.1 0.2 0.3 0.4, row 1 = 0.6 0.1 0.1 0.2
    """
    words = np.array([[[[0.1, 0.2], [0.6, 0.1]]]])
    special = np.array([[[[0.3, 0.4], [0.1, 0.2]]]])
    return words, special


def test_statistics_over_full_rows_by_hand():
    words, special = two_word_sentence()
    keep = statistic_matrix  # shorthand
    stats = head_statistics([words], special_attention=[special])
    # entropy of 0.1 0.2 0.3 0.4 = 1.84644 bits, of 0.6 0.1 0.1 0.2 = 1.57095 bits
    assert keep(stats, "entropy").loc[1, 1] == pytest.approx((1.8464393 + 1.5709506) / 2)
    assert keep(stats, "entropy_norm").loc[1, 1] == pytest.approx((1.8464393 + 1.5709506) / 2 / 2)  # log2(4) = 2
    assert keep(stats, "confidence").loc[1, 1] == pytest.approx((0.4 + 0.6) / 2)
    assert keep(stats, "argmax_special").loc[1, 1] == pytest.approx(0.5)  # row 0's maximum is [SEP]
    assert keep(stats, "attn_special").loc[1, 1] == pytest.approx((0.7 + 0.3) / 2)
    assert keep(stats, "attn_sep").loc[1, 1] == pytest.approx(0.3)
    assert keep(stats, "attn_self").loc[1, 1] == pytest.approx((0.1 + 0.1) / 2)
    # renormalised word maps (FeatureStore.attention(i)) give the same full rows
    normalised = words / words.sum(-1, keepdims=True)
    again = head_statistics([normalised], special_attention=[special])
    np.testing.assert_allclose(again.value, stats.value)
    # the word-only view: rows 1/3 2/3 and 6/7 1/7
    drop = head_statistics([words], special_attention=[special], special_tokens="drop")
    assert keep(drop, "entropy").loc[1, 1] == pytest.approx((0.9182958 + 0.5916728) / 2)
    assert keep(drop, "entropy_norm").loc[1, 1] == pytest.approx((0.9182958 + 0.5916728) / 2)  # log2(2) = 1
    assert keep(drop, "confidence").loc[1, 1] == pytest.approx((2 / 3 + 6 / 7) / 2)
    assert "argmax_special" not in set(drop.statistic)
    assert keep(drop, "attn_special").loc[1, 1] == pytest.approx(0.5)  # still reported
    # word-level argmax offsets are over words in both views: row 0 -> word 1 (+1), row 1 -> word 0 (-1)
    for table in (stats, drop):
        assert keep(table, "argmax_offset_1").loc[1, 1] == pytest.approx(0.5)
        assert keep(table, "argmax_offset_-1").loc[1, 1] == pytest.approx(0.5)


def sep_heads_corpus(n_sentences=30, w=20):
    """Head 0: 0.6 on [SEP], the rest spread evenly over the words; head 1: 0.45 on [SEP], same."""
    attentions, specials = [], []
    for _ in range(n_sentences):
        sep = np.array([0.6, 0.45])[None, :, None]  # [1, 2, 1]
        words = np.broadcast_to((1 - sep)[..., None] / w, (1, 2, w, w)).copy()
        special = np.zeros((1, 2, w, 2))
        special[..., 1] = sep
        attentions.append(words)
        specials.append(special)
    return attentions, specials


def test_heads_that_attend_to_sep_are_special_not_broad():
    attentions, specials = sep_heads_corpus()
    offsets = [np.array([[[0] * 4 + [20] + [0] * 5] * 2]) for _ in attentions]  # all at token offset 0
    kw = dict(special_attention=specials, token_offsets=offsets)
    keep = classify_heads(head_statistics(attentions, **kw), positional_threshold=1.1).set_index("head")
    drop = classify_heads(head_statistics(attentions, special_tokens="drop", **kw), positional_threshold=1.1).set_index(
        "head"
    )
    # rows over words + [CLS] + [SEP]: entropy of (0.6, 20 x 0.02) / log2(22) = 0.605 -> not broad
    assert keep.loc[1, "types"] == "special"
    assert keep.loc[1, "entropy_norm"] == pytest.approx(
        -(0.6 * np.log2(0.6) + 0.4 * np.log2(0.02)) / np.log2(22), rel=1e-6
    )
    assert keep.loc[2, "type"] == "other" and keep.loc[2, "entropy_norm"] < 0.8
    assert keep.loc[2, "special_argmax_share"] == pytest.approx(1.0)
    # word rows renormalised: every word gets 1/20, entropy_norm 1 -> "broad"
    assert drop.loc[1, "types"] == "special;broad"
    assert drop.loc[2, "type"] == "broad" and drop.loc[2, "entropy_norm"] == pytest.approx(1.0)


# --------------------------------------------------------------------------- token-level positional view


def test_token_level_offsets_decide_positional_heads():
    """Head 0: its token-level argmax is the previous token for 28 of 30 query tokens, but its
    word-level maps point at the word itself (multi-piece words); head 1 the reverse."""
    w = 10
    word_self = np.broadcast_to(np.eye(w) * 0.9 + 0.01, (w, w))
    word_prev = np.full((w, w), 0.01)
    word_prev[np.arange(1, w), np.arange(w - 1)] = 0.9
    word_prev[0, 0] = 0.9
    attention = np.stack([word_self, word_prev])[None]  # [1, 2, w, w]
    window = 3
    counts = np.zeros((1, 2, 2 * window + 2), dtype=np.int64)
    counts[0, 0, window - 1] = 28  # offset -1
    counts[0, 0, window] = 2  # offset 0 ([CLS], its own row)
    counts[0, 1, window - 1] = 12
    counts[0, 1, -1] = 18  # "other"
    stats = head_statistics([attention], token_offsets=[counts])
    assert statistic_matrix(stats, "token_offset_-1").loc[1].tolist() == pytest.approx([28 / 30, 12 / 30])
    assert statistic_matrix(stats, "token_offset_other").loc[1, 2] == pytest.approx(18 / 30)
    assert set(stats.loc[stats.statistic.str.startswith("token_offset_"), "n"]) == {30}
    token = classify_heads(stats).set_index("head")
    assert token.loc[1, "type"] == "positional" and token.loc[1, "positional_offset"] == -1
    assert token.loc[1, "positional_share"] == pytest.approx(28 / 30) and token.loc[2, "type"] != "positional"
    assert token.loc[1, "word_offset"] == 0 and token.loc[2, "word_share"] == pytest.approx(0.9)
    word = classify_heads(stats, positional_level="word").set_index("head")
    assert word.loc[1, "positional_offset"] == 0 and word.loc[1, "positional_share"] == pytest.approx(1.0)
    assert word.loc[2, "type"] == "positional" and word.loc[2, "positional_offset"] == -1
    assert (word["positional_level"] == "word").all() and (token["positional_level"] == "token").all()


# --------------------------------------------------------------------------- syntactic heads


def self_heavy_corpus(n_sentences=40, seed=0):
    """Head (0, 0): 0.5 on the word itself, 0.3 on its gold head, the rest spread; relations nsubj /
    amod only. Head (0, 1): the same, but right only on det dependents."""
    rng = np.random.default_rng(seed)
    sentences, attentions = [], []
    for s in range(n_sentences):
        w = int(rng.integers(8, 14))
        root = int(rng.integers(w))
        heads = [0 if i == root else int(rng.choice([j for j in range(w) if j != i])) + 1 for i in range(w)]
        rels = [str(rng.choice(["nsubj", "amod", "det"])) for _ in range(w)]
        a = np.zeros((1, 2, w, w))
        for head_index, good in ((0, {"nsubj", "amod", "det"}), (1, {"det"})):
            for i, (h, rel) in enumerate(zip(heads, rels)):
                row = np.full(w, 0.2 / (w - 1))
                row[i] = 0.5
                target = h - 1 if h > 0 and rel in good else int(rng.choice([j for j in range(w) if j != i]))
                row[target] += 0.3
                a[0, head_index, i] = row / row.sum()
        sentences.append(
            SimpleNamespace(sent_id=f"s{s}", words=[f"w{i}" for i in range(w)], upos=None, heads=heads, deprels=rels)
        )
        attentions.append(a)
    return sentences, attentions


def test_syntactic_argmax_excludes_the_word_itself():
    sentences, attentions = self_heavy_corpus()
    dep = dependency_scores(attentions, sentences)
    rows = dep[(dep["layer"] == 1) & (dep["head"] == 1) & (dep.direction == DEPENDENT_TO_HEAD)].set_index("relation")
    assert rows.loc["nsubj", "accuracy"] == 1.0 and rows.loc["all", "accuracy"] == 1.0
    with_self = dependency_scores(attentions, sentences, exclude_self=False)
    assert (with_self.loc[with_self.direction == DEPENDENT_TO_HEAD, "accuracy"] == 0.0).all()  # self always wins
    stats = head_statistics(attentions, sentences, frequencies={})
    types = classify_heads(stats, dep, positional_level="word", min_count=10).set_index("head")
    assert types.loc[1, "types"] == "positional;syntactic"  # its argmax over all words is itself (offset 0)
    assert types.loc[1, "syntactic_relation"] in ("nsubj", "amod")
    assert types.loc[1, "syntactic_direction"] == DEPENDENT_TO_HEAD
    assert not classify_heads(stats, with_self, positional_level="word", min_count=10)["is_syntactic"].any()


def test_syntactic_relations_default_to_voita():
    """Head (0, 1) tracks only det: not syntactic on Voita's nsubj/dobj/amod/advmod, syntactic on all."""
    sentences, attentions = self_heavy_corpus()
    dep = dependency_scores(attentions, sentences)
    det = dep[(dep["head"] == 2) & (dep.relation == "det") & (dep.direction == DEPENDENT_TO_HEAD)]
    assert det["accuracy"].iloc[0] == 1.0
    stats = head_statistics(attentions, sentences, frequencies={})
    voita = classify_heads(stats, dep, positional_level="word", min_count=10).set_index("head")
    assert not voita.loc[2, "is_syntactic"] and voita.loc[2, "syntactic_relation"] != "det"
    every = classify_heads(stats, dep, positional_level="word", min_count=10, relations="all").set_index("head")
    assert every.loc[2, "is_syntactic"] and every.loc[2, "syntactic_relation"] == "det"


def test_held_out_best_head_is_chosen_on_dev_and_reported_on_test():
    """The planted syntactic head wins every relation's dependent-to-head direction on dev; on test it
    is reported with an interval holding its accuracy and a significant gain over the offset baseline.
    Sentences are split by sentence: dev and test cases add up to all cases."""
    from bertology.probes.heads.classification import held_out_best_heads

    sentences, attentions, _, _ = planted_corpus(n_sentences=80)
    best = held_out_best_heads(attentions, sentences, dev_share=0.5, seed=3, min_count=5)
    d2h = best[best.direction == DEPENDENT_TO_HEAD].set_index("relation")
    assert (d2h[["layer", "head"]].apply(tuple, axis=1) == number(SYNTACTIC)).all()
    assert (best.selected_on == "dev").all()
    row = d2h.loc["all"]
    everything = dependency_scores(attentions, sentences)
    total = everything[(everything.relation == "all") & (everything.direction == DEPENDENT_TO_HEAD)]["n"].iloc[0]
    assert row.n_dev + row.n == total  # a split of the cases
    assert row.accuracy == pytest.approx(1.0) and row.accuracy_low < 1.0  # never a zero-width interval
    assert row.gain > 0.5 and row.gain_low > 0 and row.gain_p_value < 0.01
    assert not row.small_sample and d2h.loc["amod"].small_sample == (d2h.loc["amod"].n < 100)
    with pytest.raises(WorkbenchError, match="min_count"):
        held_out_best_heads(attentions, sentences, min_count=10**6)
