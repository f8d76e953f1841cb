"""Centers in feature space as sparse weighted sums of data rows, and distances of rows to them.

Center ``j`` is ``C_j = sum_s coef[s] phi(rows[s])`` over the support rows ``s`` with ``owner[s] == j``. The
squared distance of a row is ``K(x, x) - 2 <phi(x), C_j> + <C_j, C_j>``; ``<C_j, C_j>`` (``norms``) is kept
with the centers, so that a distance needs the kernel only between the row and the support.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .. import config


@numba.njit(cache=True, nogil=True)
def center_inner_products(K, coef, owner, n_clusters):
    """``<phi(x_i), C_j> = sum_s coef[s] K[i, s]`` over the support of each center.

    Parameters
    ----------
    K : float32 or float64 (m, M)
        Kernel values between the rows and the support rows (summed in float64).
    coef : float64 (M,)
    owner : int64 (M,)
        Center of each support row.
    n_clusters : int

    Returns
    -------
    float64 (m, n_clusters)
    """
    m, support = K.shape
    out = np.zeros((m, n_clusters), dtype=np.float64)
    # runs of equal owner (one per center: the support is kept sorted by owner) make contiguous dot products
    run_start = np.empty(support + 1, dtype=np.int64)
    n_runs = 0
    for s in range(support):
        if s == 0 or owner[s] != owner[s - 1]:
            run_start[n_runs] = s
            n_runs += 1
    run_start[n_runs] = support
    for i in range(m):
        for r in range(n_runs):
            lo, hi = run_start[r], run_start[r + 1]
            # four independent partial sums, combined in a fixed order: pipelined, and the same value anywhere
            a0 = a1 = a2 = a3 = 0.0
            s = lo
            while s + 4 <= hi:
                a0 += coef[s] * K[i, s]
                a1 += coef[s + 1] * K[i, s + 1]
                a2 += coef[s + 2] * K[i, s + 2]
                a3 += coef[s + 3] * K[i, s + 3]
                s += 4
            while s < hi:
                a0 += coef[s] * K[i, s]
                s += 1
            out[i, owner[lo]] += (a0 + a1) + (a2 + a3)
    return out


@numba.njit(cache=True, nogil=True)
def nearest_from_inner(diag, inner, norms):
    """Nearest center from ``K(x, x)``, ``<phi(x), C_j>`` and ``<C_j, C_j>`` (distances clipped at 0).

    Returns
    -------
    labels : int32 (m,)
    dist2 : float64 (m,)
    """
    m, k = inner.shape
    labels = np.empty(m, dtype=np.int32)
    dist2 = np.empty(m, dtype=np.float64)
    for i in range(m):
        best = np.inf
        best_j = 0
        for j in range(k):
            value = diag[i] - 2.0 * inner[i, j] + norms[j]
            if value < best:
                best = value
                best_j = j
        labels[i] = best_j
        dist2[i] = best if best > 0.0 else 0.0
    return labels, dist2


@dataclass
class SparseCenters:
    """k centers in feature space, each a weighted sum of support rows.

    Attributes
    ----------
    rows : ndarray (M, d)
        Support rows, in the dtype of the data.
    coef : float64 (M,)
    owner : int64 (M,)
        Center of each support row.
    segment : int64 (M,)
        Iteration whose batch brought the row in (0: the initial centers).
    row_index : int64 (M,)
        Global index of the row in the data (-1 when unknown, e.g. given initial centers).
    norms : float64 (k,)
        ``<C_j, C_j>``.
    row_norms : float64 (M,) or None
        The support rows' :meth:`Kernel.row_norms <daskmeans.kernels.kernel_functions.Kernel.row_norms>`, kept by
        the mini-batch steps so that each row's norm is computed once (None: not kept; never saved).
    gram : ndarray or None
        The kernel among each center's own support rows, kept by the truncated steps so that no kernel value is
        computed twice (:mod:`daskmeans.kernels.center_grams`; None: not kept, computed when a step needs it).
    """

    rows: np.ndarray
    coef: np.ndarray
    owner: np.ndarray
    segment: np.ndarray
    row_index: np.ndarray
    norms: np.ndarray
    row_norms: np.ndarray | None = None
    gram: np.ndarray | None = None

    @property
    def n_clusters(self) -> int:
        return int(self.norms.shape[0])

    def take(self, keep) -> SparseCenters:
        """The support rows ``keep`` (a boolean mask or indices), norms unchanged (the Gram blocks are not kept)."""
        return SparseCenters(
            self.rows[keep],
            self.coef[keep],
            self.owner[keep],
            self.segment[keep],
            self.row_index[keep],
            self.norms.copy(),
            None if self.row_norms is None else self.row_norms[keep],
        )

    def inner_products(self, X, kernel) -> np.ndarray:
        """``<phi(x), C_j>`` for every row of ``X``, float64 ``(len(X), k)``."""
        return center_inner_products(kernel.matrix(X, self.rows), self.coef, self.owner, self.n_clusters)

    def nearest(self, X, kernel, slab_bytes=None):
        """Nearest center and squared feature-space distance of every row of ``X``, a slab of ``slab_bytes`` of
        kernel values at a time (None: :data:`~daskmeans.config.KERNEL_CENTERS_SLAB_BYTES`, read at call time).

        Returns
        -------
        labels : int32 (n,)
        dist2 : float64 (n,)
        """
        n = X.shape[0]
        labels = np.empty(n, dtype=np.int32)
        dist2 = np.empty(n, dtype=np.float64)
        slab_bytes = config.KERNEL_CENTERS_SLAB_BYTES if slab_bytes is None else slab_bytes
        step = max(1, slab_bytes // (8 * max(1, self.rows.shape[0])))
        for start in range(0, n, step):
            block = X[start : start + step]
            labels[start : start + step], dist2[start : start + step] = nearest_from_inner(
                kernel.diag(block), self.inner_products(block, kernel), self.norms
            )
        return labels, dist2

    def distances(self, X, kernel, slab_bytes=None) -> np.ndarray:
        """Squared feature-space distance of every row of ``X`` to every center, float64 ``(n, k)``, a slab of
        ``slab_bytes`` of kernel values at a time (None: :data:`~daskmeans.config.KERNEL_CENTERS_SLAB_BYTES`)."""
        n = X.shape[0]
        out = np.empty((n, self.n_clusters))
        slab_bytes = config.KERNEL_CENTERS_SLAB_BYTES if slab_bytes is None else slab_bytes
        step = max(1, slab_bytes // (8 * max(1, self.rows.shape[0])))
        for start in range(0, n, step):
            block = X[start : start + step]
            value = kernel.diag(block)[:, None] - 2.0 * self.inner_products(block, kernel) + self.norms[None, :]
            out[start : start + step] = np.maximum(value, 0.0)
        return out

    def input_space_means(self, n_features, dtype) -> np.ndarray:
        """``sum_s coef[s] rows[s] / sum_s coef[s]`` per center: where each center sits in input space.

        The coefficients of a center are non-negative; this is the center itself for a linear kernel and a
        readable summary (e.g. for plots) for the others. A center without support gets zeros.
        """
        out = np.zeros((self.n_clusters, n_features))
        totals = np.bincount(self.owner, weights=self.coef, minlength=self.n_clusters)
        np.add.at(out, self.owner, self.coef[:, None] * self.rows.astype(np.float64))
        filled = totals > 0
        out[filled] /= totals[filled, None]
        return out.astype(dtype)


def single_point_centers(points, kernel, row_index=None) -> SparseCenters:
    """Centers ``C_j = phi(points[j])`` (coefficient 1), as k-means++ or given initial centers make them."""
    k = points.shape[0]
    return SparseCenters(
        rows=np.ascontiguousarray(points),
        coef=np.ones(k),
        owner=np.arange(k, dtype=np.int64),
        segment=np.zeros(k, dtype=np.int64),
        row_index=np.full(k, -1, dtype=np.int64) if row_index is None else np.asarray(row_index, dtype=np.int64),
        norms=kernel.diag(points),
    )
