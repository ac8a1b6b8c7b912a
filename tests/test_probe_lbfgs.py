"""Full-batch L-BFGS linear probes: the same optimum as scikit-learn, planted layer recovered."""

import numpy as np
import pytest
import torch

from bertology.errors import ConfigError
from bertology.probes.probing import _lbfgs
from bertology.probes.probing._lbfgs import _LinearObjective
from bertology.probes.probing.edge import ProbeConfig, SpanFeatures, fit_joint, predict_logits, probe_arrays, span_index
from bertology.probes.probing.synthetic import planted_task
from bertology.probes.probing.tasks import split_by_sentence
from bertology.spill import Spill

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def planted():
    return planted_task(n_layers=3, n_words=900, dim=12, signal_layers={1: 1.0}, seed=3)


def test_converged_lbfgs_matches_sklearn_logistic_regression():
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    # weak signal: no layer is separable, so the unpenalised optimum is finite
    planted = planted_task(n_layers=3, n_words=900, dim=12, signal_layers={1: 0.3}, seed=3)

    tokens, mask = span_index(planted.task, planted.sentence_offsets)
    data = SpanFeatures(planted.features, tokens, mask, True, "cpu")
    y = planted.task.label_ids()
    split = split_by_sentence(planted.task, seed=0)
    # unpenalised, dev = train: the kept "best dev" parameters are the training-loss minimum
    cfg = ProbeConfig(
        probe="linear", solver="lbfgs", precision="float32", C=float("inf"), patience=10**6, max_epochs=100
    )
    fit = fit_joint(
        data,
        y,
        split["train"],
        split["train"],
        n_labels=4,
        mixing=np.eye(3, dtype=bool),
        learned_mix=False,
        config=cfg,
        seed=0,
    )
    proba = torch.softmax(predict_logits(fit.model, data, split["test"]), -1).numpy()  # [3, n, 4]
    X = data.cached[:, :, 0, 0].numpy()
    for layer in range(3):
        clf = LogisticRegression(C=np.inf, max_iter=5000, tol=1e-8).fit(X[layer][split["train"]], y[split["train"]])
        ref = clf.predict_proba(X[layer][split["test"]])
        # same minimum (kept parameters improve on the last kept ones by >= 1e-4 in loss)
        train_loss = log_loss(y[split["train"]], clf.predict_proba(X[layer][split["train"]]))
        assert fit.best_dev_loss[layer] == pytest.approx(train_loss, abs=2e-4), layer
        assert np.abs(proba[layer] - ref).max() < 0.03, layer


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_lbfgs_recovers_planted_layer(planted, precision):
    cfg = ProbeConfig(probe="linear", precision=precision)
    df = probe_arrays(planted.features, planted.sentence_offsets, planted.task, seeds=(0,), config=cfg)
    acc = df[(df.split == "test") & (df.metric == "accuracy")].set_index("layer")["value"]
    assert acc.idxmax() == 1 and acc[1] > 0.75 and acc.drop(1).max() < 0.45
    evals = df[df.metric == "epochs"]["value"].iloc[0]
    assert 1 <= evals <= cfg.max_epochs * cfg.lbfgs_steps


def test_solver_choice_and_validation(planted):
    with pytest.raises(ConfigError, match="solver must be"):
        ProbeConfig(solver="newton")
    with pytest.raises(ConfigError, match="precision must be"):
        ProbeConfig(precision="half")
    tokens, mask = span_index(planted.task, planted.sentence_offsets)
    data = SpanFeatures(planted.features, tokens, mask, True, "cpu")
    split = split_by_sentence(planted.task, seed=0)
    with pytest.raises(ConfigError, match="lbfgs"):  # an MLP cannot use L-BFGS
        _fit(data, planted, split, config=ProbeConfig(probe="mlp", solver="lbfgs"))


@pytest.mark.parametrize("multilabel", [False, True])
def test_linear_objective_matches_autograd(multilabel):
    """The hand-written loss and gradients (transposed weights, dev rows scored but not trained
    on) equal autograd on the textbook formulation."""
    gen = torch.Generator().manual_seed(0)
    P, n_train, n_dev, F_, K, C = 3, 40, 9, 6, 5, 2.0
    X = torch.randn(P, n_train + n_dev, F_, generator=gen)
    y = (
        (torch.rand(n_train + n_dev, K, generator=gen) < 0.3).float()
        if multilabel
        else torch.randint(0, K, (n_train + n_dev,), generator=gen)
    )
    Wt = torch.randn(P, K, F_, generator=gen, requires_grad=True)
    b = torch.randn(P, K, generator=gen, requires_grad=True)
    loss, dWt, db, dev_loss = _LinearObjective(X, y, n_train, multilabel, C)(Wt.detach(), b.detach())

    logits = torch.einsum("pnf,pkf->pnk", X, Wt) + b[:, None]
    if multilabel:
        rows = torch.nn.functional.binary_cross_entropy_with_logits(logits, y.expand_as(logits), reduction="none").sum(
            -1
        )
    else:
        rows = -torch.log_softmax(logits, -1).gather(-1, y.view(1, -1, 1).expand(P, -1, 1))[..., 0]
    alpha = 1.0 / (C * n_train)
    ref = (rows[:, :n_train].mean(1) + 0.5 * alpha * (Wt * Wt).sum((1, 2))).sum()
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5)
    torch.testing.assert_close(dWt, Wt.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(db, b.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(dev_loss, rows[:, n_train:].mean(1).detach(), rtol=1e-5, atol=1e-6)


def _chunked(X: torch.Tensor, n_train: int, sizes: list[int], tmp_path) -> _lbfgs._Chunks:
    """``X``'s rows as a streamed design: chunks of the given sizes (training rows, then dev rows),
    in a spill file (cache 0 bytes)."""
    spill = Spill(tmp_path, cache_bytes=0)
    for start, end in zip(np.cumsum([0, *sizes[:-1]]), np.cumsum(sizes)):
        block = X[:, start:end]
        spill.append((block.view(torch.int16) if X.dtype == torch.bfloat16 else block).numpy())
    assert spill.spilled and sum(sizes[: len(sizes) // 2]) == n_train  # chunks do not straddle train/dev
    return _lbfgs._Chunks(spill, sizes, tuple(X.shape), X.dtype, torch.device("cpu"))


@pytest.mark.parametrize("multilabel", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_objective_equals_the_whole_one(multilabel, dtype, tmp_path):
    """Passing over a spilled design chunk by chunk gives the same loss, gradients and dev loss as
    the design in one tensor (up to summation order), also on a subset of the probes (a restart)."""
    gen = torch.Generator().manual_seed(1)
    P, n_train, n_dev, F_, K, C = 4, 50, 17, 6, 5, 2.0
    X = torch.randn(P, n_train + n_dev, F_, generator=gen).to(dtype)
    y = (
        (torch.rand(n_train + n_dev, K, generator=gen) < 0.3).float()
        if multilabel
        else torch.randint(0, K, (n_train + n_dev,), generator=gen)
    )
    Wt = torch.randn(P, K, F_, generator=gen)
    b = torch.randn(P, K, generator=gen)
    chunks = _chunked(X, n_train, [20, 20, 10, 8, 8, 1], tmp_path)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-3)
    for probes in (None, torch.tensor([0, 2, 3])):
        whole_X, part_X, W_, b_ = X, chunks, Wt, b
        if probes is not None:
            whole_X, part_X, W_, b_ = X.index_select(0, probes), chunks.index_select(0, probes), Wt[probes], b[probes]
        whole = _LinearObjective(whole_X, y, n_train, multilabel, C)(W_, b_)
        streamed = _LinearObjective(part_X, y, n_train, multilabel, C)(W_, b_)
        for a, s in zip(whole, streamed):
            torch.testing.assert_close(s, a, **tol)
    chunks.spill.close()


def _fit(data, planted, split, precision="float32", config=None):
    """Per-layer probes of the planted task (``config``: default a linear probe at ``precision``)."""
    cfg = config or ProbeConfig(probe="linear", precision=precision, patience=2)
    return fit_joint(
        data,
        planted.task.label_ids(),
        split["train"],
        split["dev"],
        n_labels=4,
        mixing=np.eye(3, dtype=bool),
        learned_mix=False,
        config=cfg,
        seed=0,
    )


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_spilled_features_stream_the_lbfgs_design(planted, precision, monkeypatch):
    """Features not cached: the design goes chunk by chunk through a spill file (no tensor of all
    its rows) and the probes come out as with cached features, planted layer first."""
    tokens, mask = span_index(planted.task, planted.sentence_offsets)
    split = split_by_sentence(planted.task, seed=0)
    cached = SpanFeatures(planted.features, tokens, mask, True, "cpu")
    held = _fit(cached, planted, split, precision)
    monkeypatch.setattr(_lbfgs, "SPILL_CACHE_BYTES", 0)  # every design to the file
    monkeypatch.setattr(_lbfgs, "CHUNK_BYTES", 3 * 12 * 4 * 97)  # 97 rows a chunk
    monkeypatch.setattr(_lbfgs, "READ_BYTES", 3 * 12 * 4 * 40)  # pooled from reads of 40
    designs, restarts = [], []
    fit_inputs, select = _lbfgs._fit_inputs, _lbfgs._Chunks.index_select

    def spy(*args):
        design = fit_inputs(*args)
        designs.append((design, isinstance(design, _lbfgs._Chunks) and design.spill.spilled))
        return design

    monkeypatch.setattr(_lbfgs, "_fit_inputs", spy)
    monkeypatch.setattr(_lbfgs._Chunks, "index_select", lambda self, *a: restarts.append(a) or select(self, *a))
    spilled = SpanFeatures(planted.features, tokens, mask, True, "cpu", cache_bytes=1)
    assert spilled.cached is None
    streamed = _fit(spilled, planted, split, precision)
    ((design, in_file),) = designs
    assert in_file and len(design.sizes) > 4
    assert restarts  # the finished layers' probes dropped: a restart on the chunks of the others
    if precision == "float32":  # the same path to the same probes (bfloat16 gradients round per chunk)
        assert streamed.epochs == held.epochs
        np.testing.assert_allclose(streamed.best_dev_loss, held.best_dev_loss, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(streamed.model.w2, held.model.w2, rtol=1e-3, atol=1e-4)
    else:
        np.testing.assert_allclose(streamed.best_dev_loss, held.best_dev_loss, rtol=0.05, atol=0.01)
    acc = []
    for fit, data in ((held, cached), (streamed, spilled)):
        logits = predict_logits(fit.model, data, split["test"])
        acc.append((logits.argmax(-1).numpy() == planted.task.label_ids()[split["test"]]).mean(1))
    np.testing.assert_allclose(acc[1], acc[0], atol=0.01)
    assert acc[1].argmax() == 1 and acc[1][1] > 0.75
