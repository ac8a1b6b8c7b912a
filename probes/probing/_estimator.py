"""The scikit-learn face of edge probing: :class:`EdgeProbe`, a single probe as a classifier on
already pooled span features, and :func:`pooled_features` to make them from a task."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from bertology.probes.probing._config import ProbeConfig
from bertology.probes.probing._spans import SpanFeatures, span_index
from bertology.probes.probing._training import fit_joint, predict_logits
from bertology.probes.probing.tasks import EdgeTask


class EdgeProbe(ClassifierMixin, BaseEstimator):
    """A single probe as a scikit-learn classifier.

    ``X``: ``[n_examples, n_features]`` already pooled span features (e.g. mean-pooled span 1,
    concatenated with span 2 for two-span tasks); ``y``: ``[n_examples]`` labels of any type.
    A random ``validation_fraction`` of the training rows drives early stopping.
    """

    def __init__(
        self,
        probe: str = "mlp",
        hidden_dim: int = 256,
        proj_dim: int = 256,
        dropout: float = 0.2,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        batch_size: int = 256,
        max_epochs: int = 100,
        patience: int = 5,
        validation_fraction: float = 0.1,
        standardize: bool = True,
        random_state: int | None = 0,
    ):
        self.probe = probe
        self.hidden_dim = hidden_dim
        self.proj_dim = proj_dim
        self.dropout = dropout
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.validation_fraction = validation_fraction
        self.standardize = standardize
        self.random_state = random_state

    def _config(self) -> ProbeConfig:
        return ProbeConfig(
            probe=self.probe,
            pooling="mean",
            proj_dim=self.proj_dim,
            hidden_dim=self.hidden_dim,
            dropout=self.dropout,
            lr=self.lr,
            weight_decay=self.weight_decay,
            batch_size=self.batch_size,
            max_epochs=self.max_epochs,
            patience=self.patience,
            standardize=self.standardize,
        )

    def _data(self, X: np.ndarray) -> SpanFeatures:
        X = np.asarray(X, dtype=np.float32)
        if self.standardize:
            X = (X - self.mean_) * self.scale_  # training-set statistics
        feats = np.ascontiguousarray(X, dtype=np.float32)[None]  # [1, n, d]
        n = feats.shape[1]
        tokens = np.arange(n, dtype=np.int64).reshape(n, 1, 1)
        return SpanFeatures(feats, tokens, np.ones((n, 1, 1), dtype=bool), False, "cpu")

    def fit(self, X: Any, y: Any) -> EdgeProbe:
        X, y = validate_data(self, X, y, dtype=np.float32)
        check_classification_targets(y)
        self.classes_, y_ids = np.unique(y, return_inverse=True)
        self.mean_ = X.mean(0).astype(np.float32)
        self.scale_ = (1.0 / (X.std(0) + 1e-6)).astype(np.float32)
        n = len(X)
        seed = 0 if self.random_state is None else int(self.random_state)
        order = np.random.default_rng(seed).permutation(n)
        n_dev = int(round(self.validation_fraction * n)) if n >= 10 else 0
        dev, train = (order[:n_dev], order[n_dev:]) if n_dev else (order, order)
        fit = fit_joint(
            self._data(X),
            y_ids,
            train,
            dev,
            n_labels=len(self.classes_),
            mixing=np.ones((1, 1), dtype=bool),
            learned_mix=False,
            config=self._config(),
            seed=seed,
        )
        self.model_ = fit.model
        self.n_epochs_ = fit.epochs
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float32, reset=False)
        logits = predict_logits(self.model_, self._data(X), np.arange(len(X)))[0]
        return torch.softmax(logits, -1).numpy().astype(np.float64)

    def predict(self, X: Any) -> np.ndarray:
        proba = self.predict_proba(X)
        return self.classes_[proba.argmax(1)]


def pooled_features(features: np.ndarray, sentence_offsets: np.ndarray, task: EdgeTask) -> np.ndarray:
    """Mean-pooled span features for :class:`EdgeProbe`: ``[n_examples, S * D]`` from ``[n_words, D]``."""
    tokens, mask = span_index(task, sentence_offsets)
    g = np.asarray(features)[tokens]  # [n, S, M, D]
    pooled = (g * mask[..., None]).sum(2) / mask.sum(2)[..., None]
    return pooled.reshape(len(tokens), -1).astype(np.float32)
