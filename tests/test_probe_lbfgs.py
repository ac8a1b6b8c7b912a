"""Full-batch L-BFGS linear probes: the same optimum as scikit-learn, planted layer recovered."""

import numpy as np
import pytest
import torch

from probes.edge_probing import (ProbeConfig, _Features, fit_joint, predict_logits, probe_arrays,
                                 span_index)
from probes.synthetic import planted_task
from probes.tasks import TaskError, split_by_sentence


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
    data = _Features(planted.features, tokens, mask, True, "cpu")
    y = planted.task.label_ids()
    split = split_by_sentence(planted.task, seed=0)
    # unpenalised, dev = train: the kept "best dev" parameters are the training-loss minimum
    cfg = ProbeConfig(probe="linear", solver="lbfgs", precision="float32", C=float("inf"),
                      patience=10**6, max_epochs=100)
    fit = fit_joint(data, y, split["train"], split["train"], n_labels=4, mixing=np.eye(3, dtype=bool),
                    learned_mix=False, config=cfg, seed=0)
    proba = torch.softmax(predict_logits(fit.model, data, split["test"]), -1).numpy()   # [3, n, 4]
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
    with pytest.raises(TaskError):
        ProbeConfig(solver="newton")
    with pytest.raises(TaskError):
        ProbeConfig(precision="half")
    tokens, mask = span_index(planted.task, planted.sentence_offsets)
    data = _Features(planted.features, tokens, mask, True, "cpu")
    split = split_by_sentence(planted.task, seed=0)
    with pytest.raises(TaskError, match="lbfgs"):            # an MLP cannot use L-BFGS
        fit_joint(data, planted.task.label_ids(), split["train"], split["dev"], n_labels=4,
                  mixing=np.eye(3, dtype=bool), learned_mix=False,
                  config=ProbeConfig(probe="mlp", solver="lbfgs"), seed=0)
