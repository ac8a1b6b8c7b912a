"""EdgeProbe is a scikit-learn classifier: clone, params, grid search, estimator checks."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from bertology.probes.probing.edge import EdgeProbe, pooled_features
from bertology.probes.probing.synthetic import planted_task

FAST = dict(hidden_dim=16, proj_dim=16, max_epochs=8, patience=2)


def test_params_clone_and_fit_returns_self(one_torch_thread):
    est = EdgeProbe(probe="linear", lr=1e-2, **FAST)
    assert est.get_params()["probe"] == "linear"
    est.set_params(hidden_dim=8)
    twin = clone(est)
    assert twin.get_params() == est.get_params() and not hasattr(twin, "classes_")
    data = planted_task(n_layers=2, n_words=600, dim=8, signal_layers={1: 3.0}, seed=0)
    X = pooled_features(data.features[1], data.sentence_offsets, data.task)
    y = np.array([e.labels[0] for e in data.task.examples])
    assert est.fit(X, y) is est
    assert set(est.classes_) == set(y) and est.n_features_in_ == 8
    proba = est.predict_proba(X)
    assert proba.shape == (len(X), 4) and np.allclose(proba.sum(1), 1, atol=1e-5)
    assert est.score(X, y) > 0.9
    X0 = pooled_features(data.features[0], data.sentence_offsets, data.task)
    assert clone(est).fit(X0, y).score(X0, y) < 0.6  # noise layer


def test_grid_search_and_pipeline(one_torch_thread):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5)).astype(np.float32)
    y = np.where(X[:, 0] + X[:, 1] > 0, "pos", "neg")
    grid = GridSearchCV(EdgeProbe(**FAST), {"probe": ["linear", "mlp"]}, cv=2).fit(X, y)
    assert grid.best_score_ > 0.85 and grid.best_params_["probe"] in ("linear", "mlp")
    pipe = make_pipeline(StandardScaler(), EdgeProbe(**FAST)).fit(X, y)
    assert pipe.score(X, y) > 0.85
    assert (EdgeProbe(**FAST).fit(X, y).predict(X) == EdgeProbe(**FAST).fit(X, y).predict(X)).all()


@pytest.mark.slow
def test_sklearn_estimator_checks(one_torch_thread):
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(EdgeProbe(hidden_dim=16, proj_dim=16, max_epochs=4, patience=2), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results if r["status"] == "failed"]
    assert not failed, failed
    assert sum(r["status"] == "passed" for r in results) > 40
