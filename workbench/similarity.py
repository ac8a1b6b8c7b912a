"""Representation similarity: linear CKA (Kornblith et al. 2019).

``linear_cka(X, Y)`` compares two sets of representations of the same ``n`` items (e.g. one layer
of a pretrained and of a fine-tuned model over the same held-out words): with the columns of
``X`` ``[n, d1]`` and ``Y`` ``[n, d2]`` centred,

    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F)

(Kornblith et al., equation 5: HSIC with linear kernels, normalised). It is 1 for identical
representations, invariant to orthogonal transforms and isotropic scaling of either side, not to
arbitrary invertible linear maps, and lies in [0, 1]. Computed in float64.
"""

from __future__ import annotations

import numpy as np

from bertology.errors import ConfigError

__all__ = ["linear_cka"]


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA of ``x`` ``[n, d1]`` and ``y`` ``[n, d2]`` (rows: the same ``n`` items). NaN when
    either side is constant over the items. ``ConfigError`` for mismatched or too few rows."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ConfigError(
            f"linear_cka: expected [n, d1] and [n, d2] arrays over the same items, got {x.shape} and {y.shape}"
        )
    if x.shape[0] < 2:
        raise ConfigError(f"linear_cka: needs at least 2 items, got {x.shape[0]}")
    x = x - x.mean(axis=0)
    y = y - y.mean(axis=0)
    # ||X^T X||_F = ||X X^T||_F; use whichever Gram matrix is smaller
    cross = np.linalg.norm(y.T @ x) ** 2
    norm_x = np.linalg.norm(x.T @ x) if x.shape[1] <= x.shape[0] else np.linalg.norm(x @ x.T)
    norm_y = np.linalg.norm(y.T @ y) if y.shape[1] <= y.shape[0] else np.linalg.norm(y @ y.T)
    if norm_x == 0 or norm_y == 0:
        return float("nan")
    return float(cross / (norm_x * norm_y))
