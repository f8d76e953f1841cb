"""The kernel within each truncated center's support, kept from step to step instead of recomputed.

Truncation drops ``D`` from a center ``C`` and updates ``<C - D, C - D> = <C, C> - 2 <C, D> + <D, D>``, which
needs the kernel between the center's support rows and its dropped rows. Every such value was computed once
already: two rows of one center's support met in the step that brought the later of them, whose kernel block
holds the batch against the whole support and the batch against itself. So each center keeps its *Gram block*,
the kernel among its own support rows, and a step grows it from its kernel block and cuts the dropped rows out:
no kernel value is evaluated twice, and the support rows are gathered once per step (:func:`gather_support_rows`)
instead of copied for every center that drops rows.

Layout: the support is sorted by owner; the Gram blocks are stored flat, center after center, each row-major
over its rows in support order (``n_j * n_j`` values for the ``n_j`` rows of center ``j``).
"""

from __future__ import annotations

import numba
import numpy as np


def center_grams(centers, kernel) -> np.ndarray:
    """The flat Gram blocks of ``centers`` (a :class:`~daskmeans.kernels.kernel_centers.SparseCenters`),
    computed from the support rows: what a step starts from when the centers carry none (given or resumed
    centers, or the first step)."""
    counts = np.bincount(centers.owner, minlength=centers.n_clusters)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    row_norms = centers.row_norms if centers.row_norms is not None else kernel.row_norms(centers.rows)
    blocks = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi > lo:
            own = None if row_norms is None else row_norms[lo:hi]
            blocks.append(kernel.matrix(centers.rows[lo:hi], centers.rows[lo:hi], x_sq=own, y_sq=own).ravel())
    if not blocks:
        return np.zeros(0)
    return np.concatenate(blocks)


@numba.njit(cache=True, nogil=True)
def truncated_center_grams(old_gram, old_owner, batch_to_support, batch_kernel, source, owner, coef, keep,
                           n_clusters):
    """The Gram blocks after a step, and what the dropped rows take from each center's squared norm.

    Parameters
    ----------
    old_gram : float32 or float64 (sum of n_j^2,)
        The Gram blocks of the support before the step (see the module's layout).
    old_owner : int64 (M,)
        Owner of each support row before the step (sorted).
    batch_to_support : (b, M)
        Kernel between the batch and the support before the step.
    batch_kernel : (b, b)
        Kernel within the batch.
    source : int64 (M + b,)
        For each row of the grown support (sorted by owner, the old rows of a center before its batch rows),
        its place in ``[old support | batch]``.
    owner, coef : (M + b,)
        Owner and coefficient of each row of the grown support.
    keep : bool (M + b,)
        The rows the truncation keeps (dropped rows are old rows).
    n_clusters : int

    Returns
    -------
    gram : (sum of kept_j^2,)
        The Gram blocks of the kept rows, in the dtype of ``batch_kernel``.
    center_dot_dropped : float64 (n_clusters,)
        ``<C_j, D_j>`` with ``C_j`` the grown center and ``D_j`` its dropped part (0 where nothing is dropped).
    dropped_dot_dropped : float64 (n_clusters,)
        ``<D_j, D_j>``.
    """
    n_old = old_owner.shape[0]
    old_lo = np.zeros(n_clusters + 1, dtype=np.int64)
    for s in range(n_old):
        old_lo[old_owner[s] + 1] += 1
    old_offset = np.zeros(n_clusters + 1, dtype=np.int64)
    for j in range(n_clusters):
        old_offset[j + 1] = old_offset[j] + old_lo[j + 1] * old_lo[j + 1]
        old_lo[j + 1] += old_lo[j]
    lo = np.zeros(n_clusters + 1, dtype=np.int64)
    kept = np.zeros(n_clusters, dtype=np.int64)
    for p in range(owner.shape[0]):
        lo[owner[p] + 1] += 1
        if keep[p]:
            kept[owner[p]] += 1
    size = 0
    for j in range(n_clusters):
        lo[j + 1] += lo[j]
        size += kept[j] * kept[j]
    gram = np.empty(size, dtype=batch_kernel.dtype)
    center_dot_dropped = np.zeros(n_clusters)
    dropped_dot_dropped = np.zeros(n_clusters)
    largest = 0
    for j in range(n_clusters):
        largest = max(largest, lo[j + 1] - lo[j])
    block = np.empty((largest, largest), dtype=batch_kernel.dtype)
    out = 0
    for j in range(n_clusters):
        m = lo[j + 1] - lo[j]
        old_n = old_lo[j + 1] - old_lo[j]
        # the grown block, read row by row from where each value lies (batch rows: their rows of the kernel
        # block; old rows among themselves: the old Gram block), the old rows against the batch rows by symmetry
        for r in range(m):
            a = source[lo[j] + r]
            for c in range(m):
                other = source[lo[j] + c]
                if a >= n_old:
                    block[r, c] = batch_to_support[a - n_old, other] if other < n_old else \
                        batch_kernel[a - n_old, other - n_old]
                elif other < n_old:
                    block[r, c] = old_gram[old_offset[j] + (a - old_lo[j]) * old_n + (other - old_lo[j])]
        for r in range(m):
            if source[lo[j] + r] < n_old:
                for c in range(m):
                    if source[lo[j] + c] >= n_old:
                        block[r, c] = block[c, r]
        for c in range(m):
            q = lo[j] + c
            if keep[q]:
                continue
            column = 0.0
            dropped_column = 0.0
            for r in range(m):
                value = coef[lo[j] + r] * np.float64(block[r, c])
                column += value
                if not keep[lo[j] + r]:
                    dropped_column += value
            center_dot_dropped[j] += column * coef[q]
            dropped_dot_dropped[j] += dropped_column * coef[q]
        for r in range(m):
            if keep[lo[j] + r]:
                for c in range(m):
                    if keep[lo[j] + c]:
                        gram[out] = block[r, c]
                        out += 1
    return gram, center_dot_dropped, dropped_dot_dropped


@numba.njit(cache=True, nogil=True)
def gather_support_rows(old_rows, batch_rows, source):
    """Rows ``[old_rows | batch_rows][source]`` without building the stacked array."""
    n_old = old_rows.shape[0]
    out = np.empty((source.shape[0], old_rows.shape[1]), dtype=old_rows.dtype)
    for i in range(source.shape[0]):
        s = source[i]
        if s < n_old:
            out[i, :] = old_rows[s, :]
        else:
            out[i, :] = batch_rows[s - n_old, :]
    return out
