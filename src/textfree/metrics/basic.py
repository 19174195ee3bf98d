"""Basic metrics: per-row cosine similarity, mean with standard error, mean squared error, token recovery.

Inputs may be numpy arrays, torch tensors (any device, any float dtype; they are copied to CPU float64) or
nested lists. Shapes are checked and every mismatch is a ``ValueError`` that states both shapes.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

__all__ = ["cosine_similarity_rows", "mean_stderr", "mse", "token_recovery_rate"]


def _as_array(x: Any, *, dtype=np.float64) -> np.ndarray:
    """A numpy copy of ``x`` (torch tensors are detached and moved to CPU first)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch here
        x = x.detach().cpu()
        if dtype is not None and x.is_floating_point():
            x = x.double()
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


def _as_mask(mask: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    m = _as_array(mask, dtype=None)
    if m.shape != shape:
        raise ValueError(f"{what}: mask must have shape {shape}, got {m.shape}")
    if m.dtype != np.bool_:
        if not np.isin(m, (0, 1)).all():
            raise ValueError(f"{what}: mask must be boolean or 0/1")
        m = m.astype(bool)
    return m


def cosine_similarity_rows(a: Any, b: Any, mask: Any = None, *, eps: float = 1e-12) -> np.ndarray:
    """Cosine similarity of matching rows (vectors in the last dimension) of ``a`` and ``b``.

    ``a`` and ``b``: same shape ``[..., d]``. Returns a float64 array of shape ``a.shape[:-1]``; with ``mask``
    (shape ``a.shape[:-1]``, boolean or 0/1) only the cosines of the rows where the mask is true, as a flat
    1-D array in row-major order. A row whose norm is zero (in ``a`` or ``b``) has cosine 0: norms are clamped
    below at ``eps``.

    >>> cosine_similarity_rows([[1, 0], [1, 1]], [[0, 1], [2, 2]])
    array([0., 1.])
    """
    x, y = _as_array(a), _as_array(b)
    if x.shape != y.shape:
        raise ValueError(f"cosine_similarity_rows: a and b must have the same shape, got {x.shape} and {y.shape}")
    if x.ndim < 1:
        raise ValueError("cosine_similarity_rows: inputs need at least one dimension (the vector dimension)")
    dot = (x * y).sum(axis=-1)
    norms = np.maximum(np.linalg.norm(x, axis=-1), eps) * np.maximum(np.linalg.norm(y, axis=-1), eps)
    cos = dot / norms
    if mask is not None:
        cos = cos[_as_mask(mask, x.shape[:-1], "cosine_similarity_rows")]
    return cos


def mean_stderr(values: Iterable[float]) -> tuple[float, float]:
    """``(mean, standard error of the mean)`` of ``values``.

    stderr = sample standard deviation (ddof=1) / sqrt(n); exactly 0 when all values are equal. With one value
    the stderr is NaN (undefined); with none, both are NaN. NaN values are not dropped: they propagate.

    >>> mean_stderr([1.0, 2.0, 3.0])  # std = 1, n = 3
    (2.0, 0.5773502691896258)
    """
    v = _as_array(values if hasattr(values, "__len__") else list(values)).ravel()
    n = v.size
    if n == 0:
        return math.nan, math.nan
    if n > 1 and np.all(v == v[0]):  # a repeated value is its own mean, with stderr exactly 0 (no rounding residue)
        return float(v[0]), 0.0
    mean = math.fsum(v.tolist()) / n
    if n < 2:
        return mean, math.nan
    return mean, float(v.std(ddof=1) / math.sqrt(n))


def mse(a: Any, b: Any) -> float:
    """Mean over all elements of ``(a - b) ** 2``; ``a`` and ``b`` must have the same, non-empty shape.

    >>> mse([1.0, 2.0], [1.0, 4.0])
    2.0
    """
    x, y = _as_array(a), _as_array(b)
    if x.shape != y.shape:
        raise ValueError(f"mse: a and b must have the same shape, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("mse: inputs are empty")
    return float(np.mean((x - y) ** 2))


def token_recovery_rate(pred_ids: Any, true_ids: Any, mask: Any = None) -> float:
    """Fraction of positions where the predicted token id equals the true one.

    ``pred_ids``, ``true_ids`` (and ``mask``, boolean or 0/1): same shape, e.g. ``[B, T]``. Only positions where
    the mask is true count (all positions without a mask). NaN when no position counts.

    >>> token_recovery_rate([[1, 2, 3]], [[1, 5, 3]], mask=[[1, 1, 0]])
    0.5
    """
    p, t = _as_array(pred_ids, dtype=None), _as_array(true_ids, dtype=None)
    if p.shape != t.shape:
        raise ValueError(
            f"token_recovery_rate: pred_ids and true_ids must have the same shape, got {p.shape} and {t.shape}"
        )
    hits = p == t
    if mask is not None:
        m = _as_mask(mask, p.shape, "token_recovery_rate")
        hits = hits[m]
    if hits.size == 0:
        return math.nan
    return float(hits.mean())
