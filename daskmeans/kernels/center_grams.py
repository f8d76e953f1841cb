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
def truncated_center_grams(old_gram, old_owner, batch_to_support, batch_kernel, source, owner, coef, keep, n_clusters):
    """The Gram blocks after a step, and what the dropped rows take from each center's squared norm.

    Parameters
    ----------
    old_gram : IN float32 or float64 (sum of n_j^2,)
        The Gram blocks of the support before the step (see the module's layout).
    old_owner : IN int64 (M,)
        Owner of each support row before the step (sorted).
    batch_to_support : IN (b, M)
        Kernel between the batch and the support before the step.
    batch_kernel : IN (b, b)
        Kernel within the batch.
    source : IN int64 (M + b,)
        For each row of the grown support, its place in ``[old support | batch]``: sorted by owner, the old rows
        of a center first and in their old order (a stable sort), then its batch rows.
    owner, coef : IN (M + b,)
        Owner and coefficient of each row of the grown support.
    keep : IN bool (M + b,)
        The rows the truncation keeps (dropped rows are old rows).
    n_clusters : IN int

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
    kept_at = np.empty(largest, dtype=np.int64)
    dropped_at = np.empty(largest, dtype=np.int64)
    out = 0
    for j in range(n_clusters):
        base, m = lo[j], lo[j + 1] - lo[j]
        old_n, old_first = old_lo[j + 1] - old_lo[j], old_lo[j]
        # the grown block: the old rows (source old_first, old_first + 1, ...) among themselves from the old
        # block, each batch row from its rows of the kernel block, the old rows against the batch rows by symmetry
        for r in range(old_n):
            start = old_offset[j] + r * old_n
            for c in range(old_n):
                block[r, c] = old_gram[start + c]
        for r in range(old_n, m):
            batch_row = source[base + r] - n_old
            for c in range(old_n):
                block[r, c] = batch_to_support[batch_row, old_first + c]
            for c in range(old_n, m):
                block[r, c] = batch_kernel[batch_row, source[base + c] - n_old]
        for r in range(old_n):
            for c in range(old_n, m):
                block[r, c] = block[c, r]
        n_kept = n_dropped = 0
        for r in range(m):
            if keep[base + r]:
                kept_at[n_kept] = r
                n_kept += 1
            else:
                dropped_at[n_dropped] = r
                n_dropped += 1
        for t in range(n_dropped):
            q = dropped_at[t]
            column = 0.0  # <C_j, phi(row q)>, from row q of the (symmetric) block
            for r in range(m):
                column += coef[base + r] * np.float64(block[q, r])
            dropped_column = 0.0
            for u in range(n_dropped):
                dropped_column += coef[base + dropped_at[u]] * np.float64(block[q, dropped_at[u]])
            center_dot_dropped[j] += column * coef[base + q]
            dropped_dot_dropped[j] += dropped_column * coef[base + q]
        for t in range(n_kept):
            r = kept_at[t]
            for u in range(n_kept):
                gram[out] = block[r, kept_at[u]]
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
