"""The proven error of a GEMM score, and the bounds derived from it.

A GEMM score ``||c||^2 - 2 x.c`` in the data's precision only proposes a nearest center; its error is bounded
from the float format (:func:`score_error_allowance`), so that kernels can tell when the scores decide and settle
the rest by exact distances (:func:`daskmeans.kernels.distance.pair_dist2`). Lower bounds derived from scores are
stored rounded down in 16 bits (:func:`daskmeans.kernels.packed_bounds.store_lower`).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .distance import pair_dist2, sq_norm

#: Relative margin of every "bound beats distance" test, far above float64 rounding of the distances.
TEST_MARGIN = 1e-9


@numba.njit(cache=True, nogil=True)
def row_sq_norms(X):
    """Squared norm of every row, accumulated in float64 in :func:`~daskmeans.kernels.distance.pair_dist2`'s fixed
    order (error bounds, scores and the RBF kernel use it)."""
    out = np.empty(X.shape[0], dtype=np.float64)
    zero = np.zeros(X.shape[1], dtype=X.dtype)
    for i in range(X.shape[0]):
        out[i] = sq_norm(X[i], zero)
    return out


def _gamma(n_features, dtype):
    """``gamma_{d+2} = (d + 2) u / (1 - (d + 2) u)`` for the unit roundoff ``u`` of ``dtype``."""
    unit = np.finfo(dtype).eps / 2
    terms = n_features + 2
    return terms * unit / (1 - terms * unit)


@numba.njit(cache=True, nogil=True, inline="always")
def score_error(x_norm, x_sq, center_norm, gamma):
    """The proven error of the GEMM score of a row (norm ``x_norm``, squared ``x_sq``) against centers of norm at
    most ``center_norm``: :func:`score_error_allowance` for one row."""
    scale = x_norm * center_norm + center_norm * center_norm
    return 2.0 * gamma * scale * 1.0001 + 1e-12 * (x_sq + center_norm * center_norm)


def score_error_allowance(x_sq, max_center_norm, n_features, dtype):
    """Largest possible error of a GEMM score ``||c||^2 - 2 x.c`` for each row, in squared-distance units.

    A dot product of ``d`` terms in floating point, in any summation order, is within
    ``gamma_d * sum_f |x_f c_f| <= gamma_d ||x|| ||c||`` of the exact value, ``gamma_d = d u / (1 - d u)``
    with ``u`` the unit roundoff of ``dtype`` (Higham, *Accuracy and Stability of Numerical Algorithms*,
    sec. 3.1). Twice that covers ``2 x.c``; ``2 gamma ||c||^2`` covers rounding ``||c||^2`` to the data's
    precision and the sum; a little more covers the float64 terms.
    """
    gamma = _gamma(n_features, dtype)
    scale = np.sqrt(x_sq) * max_center_norm + max_center_norm**2
    return 2.0 * gamma * scale * 1.0001 + 1e-12 * (x_sq + max_center_norm**2)


@numba.njit(cache=True, nogil=True, inline="always")
def norm_and_allowance(row, zero, center_norm, gamma):
    """A row's squared norm (the exact distance to ``zero``, a zero vector of its length) and its score allowance."""
    x_sq = pair_dist2(row, zero)
    return x_sq, score_error(math.sqrt(x_sq), x_sq, center_norm, gamma)
