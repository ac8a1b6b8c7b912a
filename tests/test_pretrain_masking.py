"""Planted-answer tests for MLM masking and NSP/SOP pair construction."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from bertology.pretraining.masking import (
    IGNORE_INDEX,
    MaskingConfig,
    choose_positions,
    corrupt,
    encode_pair,
    expected_span_length,
    make_sentence_pairs,
    mask_batch,
    ngram_length_probabilities,
    random_token_pool,
    sample_ngrams,
    span_ids,
    special_tokens_mask,
)
from bertology.pretraining.text_corpus import TokenizedDocument

PAD, CLS, SEP, MASK = 0, 2, 3, 4
SPECIALS = [0, 1, 2, 3, 4]
VOCAB = 1000


def _batch(n_rows: int = 400, T: int = 64, seed: int = 0):
    """Rows ``[CLS] tokens [SEP] [PAD]...`` with random lengths; words of 1-3 pieces."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((n_rows, T), PAD)
    words = torch.full((n_rows, T), -1)
    for r in range(n_rows):
        n = int(torch.randint(10, T - 2, (1,), generator=g))
        ids[r, 0], ids[r, 1 : n + 1], ids[r, n + 1] = CLS, torch.randint(5, VOCAB, (n,), generator=g), SEP
        w, pos = 0, 1
        while pos <= n:
            k = min(int(torch.randint(1, 4, (1,), generator=g)), n + 1 - pos)
            words[r, pos : pos + k] = w
            w, pos = w + 1, pos + k
    return ids, words


def _mask(ids, words, strategy="token", seed=0, epoch=0, dynamic=True, pool="vocab"):
    special = special_tokens_mask(ids, SPECIALS)
    return mask_batch(
        ids,
        special,
        sequence_indices=list(range(len(ids))),
        seed=seed,
        epoch=epoch,
        dynamic=dynamic,
        mask_token_id=MASK,
        random_token_ids=random_token_pool(VOCAB, SPECIALS, pool=pool),
        word_ids=words,
        config=MaskingConfig(strategy=strategy),
    )


def test_bert_masking_proportions():
    ids, words = _batch()
    masked, labels = _mask(ids, words)
    maskable = ~special_tokens_mask(ids, SPECIALS)
    chosen = labels != IGNORE_INDEX
    n = int(chosen.sum())
    assert abs(n / int(maskable.sum()) - 0.15) < 0.01
    assert torch.equal(labels[chosen], ids[chosen])
    frac_mask = float((masked[chosen] == MASK).sum()) / n
    unchanged = float((masked[chosen] == ids[chosen]).sum()) / n
    frac_random = 1 - frac_mask - unchanged
    assert abs(frac_mask - 0.8) < 0.02
    assert abs(unchanged - 0.1) < 0.02  # a random draw may hit the same token: 1/1000, negligible
    assert abs(frac_random - 0.1) < 0.02
    # nothing outside the chosen positions changes; replacements stay inside the vocabulary
    assert torch.equal(masked[~chosen], ids[~chosen])
    assert ((masked >= 0) & (masked < VOCAB)).all()
    # the option without special tokens: no random replacement is ever one
    masked_ns, labels_ns = _mask(ids, words, pool="non_special")
    assert torch.equal(labels_ns, labels)  # the pool changes the drawn ids only, not the choice
    assert not torch.isin(masked_ns[chosen & (masked_ns != MASK)], torch.tensor([0, 1, 2, 3])).any()


def test_random_token_pool_definitions():
    assert torch.equal(random_token_pool(10, [0, 2]), torch.arange(10))  # BERT: the whole vocabulary
    assert torch.equal(random_token_pool(10), torch.arange(10))
    assert random_token_pool(10, [0, 2], pool="non_special").tolist() == [1, 3, 4, 5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match="pool"):
        random_token_pool(10, [0], pool="words")


@pytest.mark.parametrize("pool", ["vocab", "non_special"])
def test_random_replacements_follow_the_pool_and_80_10_10(pool):
    """One long sequence, every position chosen; sentinels outside the vocabulary (input -2,
    [MASK] -1) make each position's decision visible: -1 = masked, -2 = kept, else = the drawn id."""
    V, T = 50, 200_000
    pool_ids = random_token_pool(V, SPECIALS, pool=pool)
    ids = torch.full((T,), -2)
    out, labels = corrupt(
        ids,
        torch.ones(T, dtype=torch.bool),
        torch.Generator().manual_seed(7),
        mask_token_id=-1,
        random_token_ids=pool_ids,
    )
    assert (labels == -2).all()
    masked, kept = int((out == -1).sum()), int((out == -2).sum())
    drawn = out[(out != -1) & (out != -2)]
    # 80/10/10 within 4 standard deviations (sd of a share p over T draws: sqrt(p(1-p)/T))
    for share, p in ((masked / T, 0.8), (kept / T, 0.1), (len(drawn) / T, 0.1)):
        assert abs(share - p) < 4 * (p * (1 - p) / T) ** 0.5
    # every drawn id is in the pool, and each pool id is equally likely (chi-square, fixed seed)
    counts = torch.bincount(drawn, minlength=V).numpy()
    in_pool = np.zeros(V, dtype=bool)
    in_pool[pool_ids.numpy()] = True
    assert counts[~in_pool].sum() == 0
    assert chisquare(counts[in_pool]).pvalue > 0.001
    if pool == "vocab":  # BERT: special tokens are drawn like any other id
        assert in_pool.all() and (counts[SPECIALS] > 0).all()
    else:
        assert not in_pool[SPECIALS].any() and in_pool.sum() == V - len(SPECIALS)


def test_special_tokens_and_padding_never_masked():
    ids, words = _batch(200)
    special = special_tokens_mask(ids, SPECIALS)
    for strategy in ("token", "whole_word", "span", "ngram"):
        masked, labels = _mask(ids, words, strategy)
        assert (labels[special] == IGNORE_INDEX).all()
        assert torch.equal(masked[special], ids[special])


def test_whole_word_masking_never_splits_a_word():
    ids, words = _batch(300)
    for strategy in ("whole_word", "span", "ngram"):
        _, labels = _mask(ids, words, strategy)
        chosen = labels != IGNORE_INDEX
        for r in range(len(ids)):
            for w in torch.unique(words[r][words[r] >= 0]):
                piece = chosen[r][words[r] == w]
                assert piece.all() or not piece.any(), (strategy, r, int(w))
        maskable = ~special_tokens_mask(ids, SPECIALS)
        share = float(chosen.sum()) / float(maskable.sum())
        assert 0.12 < share < 0.18, (strategy, share)


def test_span_lengths_follow_truncated_geometric():
    assert abs(expected_span_length(0.2, 10) - 3.8) < 0.01  # SpanBERT's mean span length
    g = torch.Generator().manual_seed(0)
    T = 400
    maskable = torch.ones(T, dtype=torch.bool)
    lengths = []
    for _ in range(100):
        chosen = choose_positions(maskable, g, MaskingConfig(strategy="span"))
        runs = torch.diff(torch.cat([torch.tensor([0]), chosen.int(), torch.tensor([0])]))
        starts, ends = torch.nonzero(runs == 1).flatten(), torch.nonzero(runs == -1).flatten()
        lengths += (ends - starts).tolist()
        assert int(chosen.sum()) == round(0.15 * T)
    # adjacent spans merge and the last span is trimmed to the budget, so the mean runs a bit above/below 3.8
    assert 3.0 < sum(lengths) / len(lengths) < 5.5


# --------------------------------------------------------------------------- 80/10/10 per span (SpanBERT)


def _planted_spans(n_rows: int = 300, T: int = 120, seed: int = 0):
    """Rows of ids 5..99 with planted spans (lengths 1-6, at least one unchosen token between two):
    ``(ids [B, T], chosen [B, T], spans [(row, start, end)])``, ends exclusive."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (n_rows, T), generator=g)
    chosen = torch.zeros(n_rows, T, dtype=torch.bool)
    spans = []
    for r in range(n_rows):
        pos = int(torch.randint(0, 4, (1,), generator=g))
        while True:
            length = int(torch.randint(1, 7, (1,), generator=g))
            if pos + length > T:
                break
            chosen[r, pos : pos + length] = True
            spans.append((r, pos, pos + length))
            pos += length + int(torch.randint(1, 6, (1,), generator=g))
    return ids, chosen, spans


def _span_cases(unit: str | None, strategy: str = "span"):
    """The case of every planted span after :func:`corrupt`: mask / random / kept / mixed."""
    ids, chosen, spans = _planted_spans()
    pool = torch.arange(500, 1000)  # disjoint from the planted ids: a random draw never equals the original
    config = MaskingConfig(strategy=strategy, replacement_unit=unit)
    out = torch.empty_like(ids)
    for r in range(len(ids)):
        out[r], labels = corrupt(
            ids[r],
            chosen[r],
            torch.Generator().manual_seed(r),
            mask_token_id=MASK,
            random_token_ids=pool,
            config=config,
        )
        assert torch.equal(labels[chosen[r]], ids[r][chosen[r]]) and (labels[~chosen[r]] == IGNORE_INDEX).all()
        assert torch.equal(out[r][~chosen[r]], ids[r][~chosen[r]])
    cases = []
    for r, a, b in spans:
        got, orig = out[r, a:b], ids[r, a:b]
        if (got == MASK).all():
            cases.append("mask")
        elif (got >= 500).all():
            cases.append("random")
        elif torch.equal(got, orig):
            cases.append("kept")
        else:
            cases.append("mixed")
    return cases


def test_span_masking_replaces_whole_spans_80_10_10():
    assert MaskingConfig(strategy="span").unit == "span"  # SpanBERT's default
    assert all(MaskingConfig(strategy=s).unit == "token" for s in ("token", "whole_word", "ngram"))
    cases = _span_cases(None)
    n = len(cases)
    assert n > 5000 and "mixed" not in cases  # every span wholly one case
    share = {c: cases.count(c) / n for c in ("mask", "random", "kept")}
    assert abs(share["mask"] - 0.8) < 4 * (0.8 * 0.2 / n) ** 0.5, share  # 4 binomial s.d.
    assert abs(share["random"] - 0.1) < 4 * (0.1 * 0.9 / n) ** 0.5, share
    assert abs(share["kept"] - 0.1) < 4 * (0.1 * 0.9 / n) ** 0.5, share
    random_spans = _span_cases("span", "token")  # the unit works for any strategy
    assert "mixed" not in random_spans


def test_per_token_replacement_stays_reachable_for_span_masking():
    cases = _span_cases("token")
    assert cases.count("mixed") / len(cases) > 0.2  # spans of 2+ tokens get mixed


def test_span_ids_number_maximal_runs():
    chosen = torch.tensor([0, 1, 1, 0, 1, 0, 0, 1, 1, 1], dtype=torch.bool)
    assert span_ids(chosen)[chosen].tolist() == [0, 0, 1, 2, 2, 2]


# --------------------------------------------------------------------------- n-gram masking (ALBERT)


def test_ngram_length_distribution_on_planted_words():
    probs = ngram_length_probabilities(3)
    assert torch.allclose(probs, torch.tensor([6 / 11, 3 / 11, 2 / 11], dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    first, every = [0, 0, 0], [0, 0, 0]
    tokens_per_word = [1, 2, 1, 3] * 30  # planted words of 1-3 pieces
    for _ in range(3000):
        ngrams = sample_ngrams(tokens_per_word, budget=30, generator=g)
        # disjoint n-grams of 1-3 whole words, within the token budget
        words = [w for start, n in ngrams for w in range(start, start + n)]
        assert len(words) == len(set(words)) and sum(tokens_per_word[w] for w in words) <= 30
        start, n = ngrams[0]
        if start + 3 <= len(tokens_per_word):
            first[n - 1] += 1  # the first draw: no overlap, no budget yet, every length fits -> exactly p(n)
        for _, n in ngrams:
            every[n - 1] += 1
    assert chisquare(first, probs.numpy() * sum(first)).pvalue > 1e-3, first
    # over all n-grams, overlaps and the budget's end favour the short ones, as in ALBERT's algorithm
    share = np.array(every) / sum(every)
    assert share[0] > probs[0] and share[2] < probs[2] and np.abs(share - probs.numpy()).max() < 0.08, share


def test_ngram_masking_chooses_whole_words_to_the_token_budget():
    g = torch.Generator().manual_seed(1)
    word_ids = torch.repeat_interleave(torch.arange(60), torch.tensor([1, 2, 3] * 20))  # 120 tokens
    maskable = torch.ones(120, dtype=torch.bool)
    for _ in range(50):
        chosen = choose_positions(maskable, g, MaskingConfig(strategy="ngram"), word_ids)
        assert 15 <= int(chosen.sum()) <= 18  # round(0.15 * 120) = 18 at most
        for w in range(60):
            assert chosen[word_ids == w].all() or not chosen[word_ids == w].any()


def test_static_vs_dynamic_masking():
    ids, words = _batch(50)
    static0 = _mask(ids, words, epoch=0, dynamic=False)[1]
    static1 = _mask(ids, words, epoch=1, dynamic=False)[1]
    dyn0 = _mask(ids, words, epoch=0, dynamic=True)[1]
    dyn1 = _mask(ids, words, epoch=1, dynamic=True)[1]
    assert torch.equal(static0, static1)  # same mask every epoch
    assert not torch.equal(dyn0, dyn1)  # a new mask each epoch
    assert torch.equal(dyn0, _mask(ids, words, epoch=0, dynamic=True)[1])  # reproducible
    # the global RNG is never touched
    torch.manual_seed(123)
    state = torch.get_rng_state()
    _mask(ids, words)
    assert torch.equal(state, torch.get_rng_state())


def _docs(n_docs=30, seed=0):
    """Documents whose token ids encode (doc, sentence): token = 1000*doc + 10*sent + k."""
    g = torch.Generator().manual_seed(seed)
    docs = []
    for d in range(n_docs):
        n_sent = int(torch.randint(2, 12, (1,), generator=g))
        sents = [
            [1000 * (d + 1) + 10 * s + k for k in range(int(torch.randint(3, 9, (1,), generator=g)))]
            for s in range(n_sent)
        ]
        words = [list(range(len(s))) for s in sents]
        docs.append(TokenizedDocument(sents, words))
    return docs


def _origin(tok):
    return tok // 1000 - 1, (tok % 1000) // 10


def test_nsp_pairs_balanced_and_segments_correct():
    pairs = make_sentence_pairs(_docs(200), objective="nsp", max_seq_len=48, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([p.label for p in pairs], dtype=torch.float)
    assert len(pairs) > 300
    assert abs(float(labels.mean()) - 0.5) < 0.08
    for p in pairs:
        assert len(p.tokens_a) + len(p.tokens_b) <= 48 - 3
        docs_a = {_origin(t)[0] for t in p.tokens_a}
        docs_b = {_origin(t)[0] for t in p.tokens_b}
        assert len(docs_a) == 1 and len(docs_b) == 1
        if p.label == 0:  # IsNext: B continues A in the same document (truncation may trim the seam)
            assert docs_a == docs_b and p.source_a[0] == p.source_b[0]
            assert p.tokens_a + p.tokens_b == sorted(p.tokens_a + p.tokens_b)
            assert p.source_b[1] > p.source_a[1]
        else:  # NotNext: B comes from another document
            assert docs_a != docs_b and p.source_b[0] != p.source_a[0]
        ids, types, words = encode_pair(p, cls_id=CLS, sep_id=SEP)
        assert ids[0] == CLS and ids[len(p.tokens_a) + 1] == SEP and ids[-1] == SEP
        assert types == [0] * (len(p.tokens_a) + 2) + [1] * (len(p.tokens_b) + 1)
        assert len(words) == len(ids) and words[0] == -1


def test_sop_pairs_balanced_and_swapped():
    pairs = make_sentence_pairs(_docs(200), objective="sop", max_seq_len=48, generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([p.label for p in pairs], dtype=torch.float)
    assert abs(float(labels.mean()) - 0.5) < 0.08
    for p in pairs:
        da, _ = _origin(p.tokens_a[0])
        db, _ = _origin(p.tokens_b[0])
        assert da == db  # both segments always from one document
        first_a, first_b = p.tokens_a[0] % 1000, p.tokens_b[0] % 1000
        if p.label == 0:
            assert first_a < first_b  # in order
        else:
            assert first_a > first_b  # swapped
