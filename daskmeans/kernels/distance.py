"""The one exact squared distance of daskmeans, used by every kernel that needs one.

"Exact" here means: every term is formed in float64 from the float64 values of the two vectors, and the terms
are always added in the same order, so the value depends on the two vectors only, never on the kernel, the
machine or the caller. Kernels that must agree on a distance to the last bit (an assignment checked by bounds, a
winner decided among candidates, the distance reported with a label) can therefore compare values computed in
different places.

The order is the plain one: ``((t_0 + t_1) + t_2) + ...`` over the features in their order, ``t_f`` the square
of the float64 difference: the order the assignment, AFK-MC2 and truncated-EM kernels had before they shared
this one, so their results stayed the same to the last bit (interleaved partial sums would pipeline better but
change the last bits of vc-GMM's posteriors). The nested mini-batch and VRKM kernels only compare distances
computed by this function, so any fixed order keeps their labels exact.

Callers inline :func:`pair_dist2`, and Numba's on-disk cache of a caller does not notice a change here: clear
the caches (``__pycache__/*.nbi``, ``*.nbc``) after editing this module.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def pair_dist2(x, c):
    """Squared distance between the vectors ``x`` and ``c`` (any float dtypes), in float64, in the fixed order."""
    total = 0.0
    for f in range(x.shape[0]):
        t = np.float64(x[f]) - np.float64(c[f])
        total += t * t
    return total


@numba.njit(cache=True, nogil=True)
def exact_dist2(X, centers, labels):
    """Squared distance of every row of ``X`` to its center ``centers[labels[i]]`` (:func:`pair_dist2`).

    Parameters
    ----------
    X : ndarray (n, d)
    centers : ndarray (k, d)
    labels : int array (n,)

    Returns
    -------
    float64 (n,)
    """
    out = np.empty(X.shape[0], dtype=np.float64)
    for i in range(X.shape[0]):
        out[i] = pair_dist2(X[i], centers[labels[i]])
    return out
