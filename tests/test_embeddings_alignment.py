"""Alignment: planted rotations, self-learning, CSLS hubs, batched = full reference."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ortho_group

from bertology.probes.embeddings.alignment import (
    AlignmentError,
    align,
    lstsq_map,
    mean_topk_cosine,
    most_moved_words,
    normalize_embeddings,
    procrustes,
    retrieve,
    topk_cosine,
)
from bertology.probes.embeddings.static_vectors import StaticVectors, unit_rows


def _rotated(n=600, d=16, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    q = ortho_group.rvs(d, random_state=seed + 1).astype(np.float32)
    y = x @ q + noise * rng.normal(size=(n, d)).astype(np.float32)
    perm = rng.permutation(n)  # target rows in another order, other names
    src = StaticVectors([f"s{i}" for i in range(n)], x, "src")
    tgt = StaticVectors([f"t{i}" for i in perm], y[perm], "tgt")
    pairs = pd.DataFrame({"source": [f"s{i}" for i in range(n)], "target": [f"t{i}" for i in range(n)]})
    return src, tgt, q, pairs


@pytest.mark.parametrize("normalization", [None, "unit-center-unit"])
def test_procrustes_recovers_rotation_exactly(normalization):
    src, tgt, q, pairs = _rotated()
    train, test = pairs.iloc[:300], pairs.iloc[300:]
    res = align(src, tgt, train, method="procrustes", normalization=normalization)
    assert np.allclose(res.W, q, atol=1e-4)
    assert np.allclose(res.W @ res.W.T, np.eye(16), atol=1e-5)
    ev = res.evaluate(src, tgt, test)
    assert set(ev["retrieval"]) == {"nn", "csls"} and (ev["value"] == 1.0).all()
    assert (ev["n_queries"] == 300).all() and (ev["coverage"] == 1.0).all()


def test_procrustes_declines_gracefully_with_noise():
    p1 = []
    for noise in (0.0, 0.3, 1.0, 3.0):
        src, tgt, q, pairs = _rotated(noise=noise)
        res = align(src, tgt, pairs.iloc[:300], normalization=None)
        ev = res.evaluate(src, tgt, pairs.iloc[300:], retrieval=("nn",), ks=(1,))
        p1.append(float(ev["value"].iloc[0]))
    assert p1[0] == 1.0 and p1[-1] < 0.5
    assert all(a >= b for a, b in zip(p1, p1[1:])), p1


def test_lstsq_fits_a_general_linear_map_that_procrustes_cannot():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8))
    a = rng.normal(size=(8, 8))
    assert np.allclose(lstsq_map(x, x @ a), a, atol=1e-4)
    w = procrustes(x, x @ a)
    assert np.allclose(w.T @ w, np.eye(8), atol=1e-5)


def test_self_learning_recovers_rotation_from_ten_seed_pairs():
    src, tgt, q, pairs = _rotated(n=1000, noise=0.01)
    res = align(src, tgt, pairs.iloc[:10], method="self-learning", normalization=None)
    assert np.allclose(res.W, q, atol=0.01)
    hist = res.history
    assert list(hist.columns) == ["iteration", "n_pairs", "objective", "improvement"]
    assert len(hist) >= 3 and hist["n_pairs"].iloc[0] == 10
    ev = res.evaluate(src, tgt, pairs.iloc[10:], ks=(1,))
    assert (ev["value"] == 1.0).all()


def test_self_learning_needs_a_seed():
    src, tgt, _, _ = _rotated(n=50)
    with pytest.raises(AlignmentError, match="seed"):
        align(src, tgt, method="self-learning", seed_dictionary="numerals")
    with pytest.raises(AlignmentError, match="unknown method"):
        align(src, tgt, method="magic")


def _hub_case(n=300, d=32, seed=0):
    """Sources clustered around a direction c; the target holds c itself (a hub) plus noisy translations."""
    rng = np.random.default_rng(seed)
    c = unit_rows(rng.normal(size=(1, d)))[0]
    x = unit_rows(c + 0.175 * rng.normal(size=(n, d)))
    y = unit_rows(x + 0.24 * rng.normal(size=(n, d)))
    target = np.vstack([y, c[None]]).astype(np.float32)
    return x.astype(np.float32), target, n  # hub index n


def test_csls_beats_nn_on_a_planted_hub():
    x, target, hub = _hub_case()
    _, nn = retrieve(x, target, 1, "nn")
    _, cs = retrieve(x, target, 1, "csls", source_pool=x)
    gold = np.arange(len(x))
    nn_p1, cs_p1 = np.mean(nn[:, 0] == gold), np.mean(cs[:, 0] == gold)
    assert np.mean(nn[:, 0] == hub) > 0.2  # the hub captures many queries under NN
    assert np.mean(cs[:, 0] == hub) < np.mean(nn[:, 0] == hub) / 4
    assert cs_p1 > nn_p1 + 0.15, (nn_p1, cs_p1)


def test_batched_csls_equals_full_matrix_reference():
    rng = np.random.default_rng(3)
    q = unit_rows(rng.normal(size=(37, 12)))
    t = unit_rows(rng.normal(size=(53, 12)))
    pool = unit_rows(rng.normal(size=(41, 12)))
    sims = q @ t.T
    r_t = np.sort(sims, axis=1)[:, -10:].mean(axis=1)
    r_s = np.sort(t @ pool.T, axis=1)[:, -10:].mean(axis=1)
    full = 2 * sims - r_t[:, None] - r_s[None, :]
    ref_idx = np.argsort(-full, axis=1)[:, :5]
    scores, idx = retrieve(q, t, 5, "csls", csls_k=10, source_pool=pool, batch_size=7)
    assert np.array_equal(idx, ref_idx)
    assert np.allclose(scores, np.take_along_axis(full, ref_idx, axis=1), atol=1e-5)
    assert np.allclose(mean_topk_cosine(q, t, 10, batch_size=4), r_t, atol=1e-6)
    # one-pass path: the source pool is the queries themselves
    r_s_q = np.sort(sims.T, axis=1)[:, -10:].mean(axis=1)
    full_q = 2 * sims - r_t[:, None] - r_s_q[None, :]
    ref_q = np.argsort(-full_q, axis=1)[:, :5]
    scores_q, idx_q = retrieve(q, t, 5, "csls", csls_k=10, batch_size=6)
    assert np.array_equal(idx_q, ref_q)
    assert np.allclose(scores_q, np.take_along_axis(full_q, ref_q, axis=1), atol=1e-5)
    s, i = topk_cosine(q, q, 3, batch_size=5, exclude_self=True)
    assert not np.any(i == np.arange(37)[:, None])


def test_normalise_centre_normalise():
    """Artetxe et al. (2018): rows to unit length, subtract the mean row, rows to unit length again."""
    rng = np.random.default_rng(0)
    offset = np.full(5, 3.0)  # a planted common direction shared by every row
    x = rng.normal(size=(100, 5)) + offset
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    assert np.linalg.norm(unit.mean(axis=0)) > 0.8  # before centring, the rows share the offset
    centred = unit - unit.mean(axis=0)
    expected = centred / np.linalg.norm(centred, axis=1, keepdims=True)

    out, means = normalize_embeddings(x, ("unit", "center", "unit"))
    assert len(means) == 1 and np.allclose(means[0], unit.mean(axis=0), atol=1e-6)
    assert np.allclose(np.linalg.norm(out, axis=1), 1, atol=1e-5)
    assert np.allclose(out, expected, atol=1e-5)
    assert np.linalg.norm(out.mean(axis=0)) < 0.2  # the offset is gone

    # other rows are transformed with the means of x, not their own
    y = rng.normal(size=(20, 5)) - offset
    unit_y = y / np.linalg.norm(y, axis=1, keepdims=True)
    centred_y = unit_y - unit.mean(axis=0)
    again, _ = normalize_embeddings(y, ("unit", "center", "unit"), means)
    assert np.allclose(again, centred_y / np.linalg.norm(centred_y, axis=1, keepdims=True), atol=1e-5)
    with pytest.raises(AlignmentError, match="unknown normalisation"):
        normalize_embeddings(x, ("whiten",))


def test_most_moved_words_finds_planted_shifts():
    rng = np.random.default_rng(0)
    n, d = 400, 20
    words = [f"w{i}" for i in range(n)]
    x = rng.normal(size=(n, d)).astype(np.float32)
    q = ortho_group.rvs(d, random_state=5).astype(np.float32)
    y = x @ q
    moved = [7, 42, 99]
    y[moved] = rng.normal(size=(3, d))  # these words changed meaning
    a, b = StaticVectors(words, x), StaticVectors(words, y)
    res = align(a, b, normalization="unit")  # default pairs: the shared vocabulary
    df = most_moved_words(a, b, res, k=3)
    assert set(df["word"]) == {f"w{i}" for i in moved}
    assert list(df.columns) == ["rank", "word", "similarity", "source_neighbours", "target_neighbours"]
    df2 = most_moved_words(a, b, res.W, k=3)
    assert set(df2["word"]) == set(df["word"])


def test_each_embedding_analysis_is_one_function_for_study_and_cli():
    from typer.testing import CliRunner

    from bertology.cli import app
    from bertology.probes.embeddings import analysis
    from bertology.studies import load_study

    for study, defaults, run in (
        ("contextuality", analysis.CONTEXTUALITY_DEFAULTS, analysis.contextuality_analysis),
        ("alignment", analysis.ALIGNMENT_DEFAULTS, analysis.alignment_analysis),
        ("align_spaces", analysis.ALIGN_SPACES_DEFAULTS, analysis.align_spaces_analysis),
    ):
        module = load_study(study)
        assert module.DEFAULTS is defaults and module.run is run
    runner = CliRunner()
    for command in ("embeddings", "align"):
        assert "--force" in runner.invoke(app, [command, "--help"]).output
    assert "--full" in runner.invoke(app, ["embeddings", "--help"]).output  # quick (500 sentences) unless --full


def test_bfloat16_screening_gives_the_float32_neighbours():
    # blocks screened in bfloat16 (precision="auto" on AMX / AVX512-BF16 CPUs) and rescored in
    # float32 must return float32's neighbours and CSLS scores (ties aside: random data has none)
    rng = np.random.default_rng(5)
    q = unit_rows(rng.normal(size=(300, 24)))
    t = unit_rows(rng.normal(size=(900, 24)))
    pool = unit_rows(rng.normal(size=(700, 24)))
    for args in [dict(), dict(exclude_self=True)]:
        keys = q if args else t
        exact = topk_cosine(q, keys, 10, batch_size=128, precision="float32", **args)
        screened = topk_cosine(q, keys, 10, batch_size=128, precision="bfloat16", **args)
        assert np.array_equal(exact[1], screened[1])
        assert np.allclose(exact[0], screened[0], atol=1e-6)
    for kwargs in [dict(source_pool=pool), dict(), dict(source_pool=q)]:
        exact = retrieve(q, t, 5, "csls", batch_size=128, precision="float32", **kwargs)
        screened = retrieve(q, t, 5, "csls", batch_size=128, precision="bfloat16", **kwargs)
        assert np.array_equal(exact[1], screened[1])
        assert np.allclose(exact[0], screened[0], atol=1e-5)
    # the pool given as the queries themselves takes the one-pass path: same numbers
    assert np.allclose(
        retrieve(q, t, 5, "csls", source_pool=q, precision="float32")[0],
        retrieve(q, t, 5, "csls", precision="float32")[0],
        atol=1e-6,
    )


def test_methods_are_compared_word_by_word_with_a_paired_interval():
    from bertology.probes.embeddings.alignment import compare_methods

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(400)]
    base = (rng.random(400) < 0.5).astype(int)  # 0 = first-rank hit, 1 = missed at k=1
    better = np.where(rng.random(400) < 0.4, 0, base)  # fixes ~40% of the misses
    hits = pd.concat(
        [
            pd.DataFrame({"method": m, "retrieval": "csls", "source": words, "first_hit": h})
            for m, h in (("procrustes", better), ("lstsq", base), ("copy", base))
        ]
    )
    table = compare_methods(hits, ks=(1,))
    assert list(zip(table["method_a"], table["method_b"])) == [
        ("procrustes", "lstsq"),
        ("procrustes", "copy"),
        ("lstsq", "copy"),
    ]
    first = table.iloc[0]
    assert first["difference"] == pytest.approx((better == 0).mean() - (base == 0).mean())
    assert first["low"] > 0 and first["p_value"] < 0.01 and first["mcnemar_p"] < 0.01
    tie = table.iloc[2]  # identical hits: no difference, p = 1
    assert tie["difference"] == 0 and tie["p_value"] == 1.0 and tie["mcnemar_p"] == 1.0
    assert not table["small_sample"].any()
