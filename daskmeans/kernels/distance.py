"""The one exact squared distance of daskmeans, used by every kernel that needs one.

"Exact" here means: every term is formed in float64 from the float64 values of the two vectors, and the terms
are always added in the same order, so the value depends on the two vectors only, never on the kernel, the
machine or the caller. Kernels that must agree on a distance to the last bit (an assignment checked by bounds, a
winner decided among candidates, the distance reported with a label) can therefore compare values computed in
different places.

The order is fixed by the source: eight partial sums, feature ``f`` (in the first ``d - d % 8`` features) going
to sum ``f % 8`` in increasing ``f``, combined as ``((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))``, plus the
plain sum of the last ``d % 8`` squares; ``t_f`` is the square of the float64 difference. Without fast-math, the
compiler keeps every partial sum's sequence, so the value does not depend on the machine; the eight independent
sums let it use SIMD lanes and overlap the additions (about 3x faster than one running sum, which made the exact
winner's distance cost as much as the GEMM that proposed it at d = 784). Every kernel only compares distances
computed by this function, so labels stay exact.

Callers inline :func:`pair_dist2`, and Numba's on-disk cache of a caller does not notice a change here: clear
the caches (``__pycache__/*.nbi``, ``*.nbc``) after editing this module.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def pair_dist2(x, c):
    """Squared distance between the vectors ``x`` and ``c`` (any float dtypes), in float64, in the fixed order."""
    d = x.shape[0]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    body = d - d % 8
    for f in range(0, body, 8):
        t0 = np.float64(x[f]) - np.float64(c[f])
        t1 = np.float64(x[f + 1]) - np.float64(c[f + 1])
        t2 = np.float64(x[f + 2]) - np.float64(c[f + 2])
        t3 = np.float64(x[f + 3]) - np.float64(c[f + 3])
        t4 = np.float64(x[f + 4]) - np.float64(c[f + 4])
        t5 = np.float64(x[f + 5]) - np.float64(c[f + 5])
        t6 = np.float64(x[f + 6]) - np.float64(c[f + 6])
        t7 = np.float64(x[f + 7]) - np.float64(c[f + 7])
        s0 += t0 * t0
        s1 += t1 * t1
        s2 += t2 * t2
        s3 += t3 * t3
        s4 += t4 * t4
        s5 += t5 * t5
        s6 += t6 * t6
        s7 += t7 * t7
    tail = 0.0
    for f in range(body, d):
        t = np.float64(x[f]) - np.float64(c[f])
        tail += t * t
    return (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))) + tail


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
