"""Plain references for sparse kernel centers, shared by the kernel tests (not shipped: only tests use them)."""

import numpy as np

from daskmeans.kernels.kernel_centers import SparseCenters


def direct_norms(centers, kernel) -> np.ndarray:
    """``<C_j, C_j>`` recomputed from the support (``coef^T K coef`` per center)."""
    out = np.zeros(centers.n_clusters)
    for j in range(centers.n_clusters):
        mine = centers.owner == j
        rows, coef = centers.rows[mine], centers.coef[mine]
        out[j] = coef @ kernel.matrix(rows, rows) @ coef
    return out


def cluster_mean_centers(X, labels, n_clusters, kernel) -> SparseCenters:
    """Centers ``C_j = mean of phi(x)`` over the rows labelled ``j``, ``<C_j, C_j>`` from the members' kernel."""
    labels = np.asarray(labels, dtype=np.int64)
    counts = np.bincount(labels, minlength=n_clusters).astype(np.float64)
    order = np.argsort(labels, kind="stable")
    centers = SparseCenters(
        rows=np.ascontiguousarray(X[order]),
        coef=1.0 / counts[labels[order]],
        owner=labels[order],
        segment=np.zeros(len(order), np.int64),
        row_index=np.arange(len(X), dtype=np.int64)[order],
        norms=np.zeros(n_clusters),
    )
    centers.norms = direct_norms(centers, kernel)
    return centers
