"""Truncated mini-batch kernel k-means (Jourdan & Schwartzman, arXiv 2410.05902), one batch at a time.

Each step assigns a batch ``B`` to the nearest centers in feature space and moves center ``j`` by
``C_j <- (1 - a_j) C_j + a_j cm(B_j)``. Centers are :class:`~daskmeans.kernels.kernel_centers.SparseCenters`:
the update scales the old coefficients by ``1 - a_j`` and appends the batch rows of ``B_j`` with coefficient
``a_j / b_j``. The inner products follow the recursive expansion of the update (section 4 of the paper)::

    <phi(x), C'> = (1 - a) <phi(x), C> + a <phi(x), cm(B_j)>
    <C', C'>     = (1 - a)^2 <C, C> + 2 a (1 - a) <C, cm(B_j)> + a^2 <cm(B_j), cm(B_j)>

so a step needs the kernel between the batch and the support, and within the batch: ``O(k b (b + tau))``.

Truncation (section 4.1): each center keeps the rows of its most recent batches, the fewest whose rows number
at least ``tau`` (``Q_i^j``), and forgets the older ones (the initial center included), as equation (1) of the
paper: the kept coefficients are not renormalised. Dropping ``D`` from ``C`` updates
``<C - D, C - D> = <C, C> - 2 <C, D> + <D, D>`` with the kernel between the center's support and ``D`` only, which
each center keeps from the steps that brought its rows (:mod:`~daskmeans.kernels.center_grams`).
With the "beta" rate, Lemma 3 bounds what is forgotten: ``||C_hat - C|| <= gamma exp(-sqrt(tau / b))``.
"""

from __future__ import annotations

import time

import numba
import numpy as np

from .. import config
from .center_grams import center_grams, gather_support_rows, truncated_center_grams
from .kernel_centers import SparseCenters, center_inner_products, nearest_from_inner
from .kernel_functions import symmetric_product_pays
from .minibatch import learning_rates


@numba.njit(cache=True, nogil=True)
def batch_cluster_means(K, labels, counts, weights):
    """``<phi(x_i), cm(B_j)> = sum of w_y K[i, y] / b_j`` over the batch rows ``y`` labelled ``j``.

    Parameters
    ----------
    K : float32 or float64 (b, b)
        Kernel within the batch (may be a column slice of a larger block).
    labels : int32 (b,)
    counts : float64 (k,)
        Weight of the batch rows of each center, ``b_j = sum of w_y``.
    weights : float64 (b,)
        Weight of each batch row (ones without sample weights).

    Returns
    -------
    float64 (b, k)
        Zero for centers without weight.
    """
    b = K.shape[0]
    k = counts.shape[0]
    out = np.zeros((b, k), dtype=np.float64)
    for i in range(b):
        for y in range(b):
            out[i, labels[y]] += weights[y] * K[i, y]
    for j in range(k):
        if counts[j] > 0:
            for i in range(b):
                out[i, j] /= counts[j]
    return out


@numba.njit(cache=True, nogil=True)
def truncation_mask(owner, segment, tau):
    """Which support rows the truncation keeps.

    The support is sorted by ``(owner, segment)``. Walking each center's segments from the newest, segments
    are kept until their rows number at least ``tau``; older segments are dropped. Segment 0 (the initial
    center) never counts towards ``tau``: it is kept only while the batches have brought fewer than ``tau`` rows.

    Returns
    -------
    bool (M,)
    """
    m = owner.shape[0]
    keep = np.ones(m, dtype=np.bool_)
    i = m - 1
    while i >= 0:
        center = owner[i]
        total = 0
        reached = False
        while i >= 0 and owner[i] == center:
            seg = segment[i]
            start = i
            while start >= 0 and owner[start] == center and segment[start] == seg:
                start -= 1
            if reached:
                for r in range(start + 1, i + 1):
                    keep[r] = False
            else:
                if seg > 0:
                    total += i - start
                if total >= tau:
                    reached = True
            i = start
    return keep


def _per_cluster_mean(values, labels, counts, weights):
    sums = np.bincount(labels, weights=values * weights, minlength=counts.shape[0])
    return np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)


def merge_duplicates(centers: SparseCenters, newest_segment: bool = False) -> SparseCenters:
    """Merge support rows that are the same data row of the same center (summing their coefficients).

    Only rows with a known index merge; the result stays sorted by owner. Used by the untruncated version,
    whose support would otherwise grow by a batch per step, and by the truncated one (``newest_segment``: a merged
    row takes the newest segment of its copies and the support stays sorted by owner and segment), so that a row
    that a center keeps receiving is one support row, never dropped while it keeps coming: dropping its older
    copies would shrink the center towards the origin of the feature space (on small data, where every center
    receives the same few rows again and again, far enough to lose its rows to a neighbour).
    """
    known = centers.row_index >= 0
    if known.sum() < 2:
        return centers
    n_rows = int(centers.row_index.max()) + 1
    key = np.where(known, centers.owner * n_rows + centers.row_index, -1 - np.arange(len(known)))
    unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if len(unique) == len(key):
        return centers
    coef = np.bincount(inverse, weights=centers.coef, minlength=len(unique))
    merged = centers.take(first)
    merged.coef = coef
    merged.segment = np.zeros(len(first), dtype=np.int64)
    if newest_segment:
        np.maximum.at(merged.segment, inverse, centers.segment)
        return merged.take(np.lexsort((merged.segment, merged.owner)))
    order = np.argsort(merged.owner, kind="stable")
    return merged.take(order)


def keep_kept_rows_copies(keep, owner, row_index):
    """``keep`` with every copy of a kept support row of the same center kept too (rows of known index): the
    copies are merged after the step (:func:`merge_duplicates`), so the center loses nothing of a row it keeps."""
    known = row_index >= 0
    if keep.all() or known.sum() < 2:
        return keep
    n_rows = int(row_index.max()) + 1
    key = owner * n_rows + row_index
    kept_keys = np.unique(key[keep & known])
    return keep | (known & np.isin(key, kept_keys))


def batch_kernel_blocks(rows, support, kernel, batch_row_norms, support_row_norms, pool=None):
    """The kernel between the batch and the support, and within the batch: ``(b, M)`` and ``(b, b)``.

    From :data:`~daskmeans.config.KERNEL_STEP_SPLIT_WORK` multiply-adds on, the support is cut in two: the batch
    against the first part is computed on ``pool``'s thread (when given; BLAS on one thread in each), against the
    rest and against the batch itself on this one, each about half of the work (the batch against itself counts
    half when :func:`~daskmeans.kernels.kernel_functions.symmetric_product_pays`). The cut depends
    only on the sizes, so the values (which a GEMM's tiling can change in the last bit) are the same with or
    without ``pool``, on any number of cores.
    """
    b, n_support = rows.shape[0], support.shape[0]
    if b * (n_support + b) * rows.shape[1] < config.KERNEL_STEP_SPLIT_WORK or n_support < 2:
        return (
            kernel.matrix(rows, support, x_sq=batch_row_norms, y_sq=support_row_norms),
            kernel.matrix(rows, rows, x_sq=batch_row_norms, y_sq=batch_row_norms),
        )
    # the batch against itself costs half its values when NumPy makes a symmetric update of it
    own = b // 2 if symmetric_product_pays(b, rows.shape[1]) else b
    cut = min(n_support - 1, (n_support + own) // 2)

    def columns(lo, hi):
        norms = None if support_row_norms is None else support_row_norms[lo:hi]
        return kernel.matrix(rows, support[lo:hi], x_sq=batch_row_norms, y_sq=norms)

    first = pool.submit(columns, 0, cut) if pool is not None else None
    rest = columns(cut, n_support)
    batch_kernel = kernel.matrix(rows, rows, x_sq=batch_row_norms, y_sq=batch_row_norms)
    first = columns(0, cut) if first is None else first.result()
    return np.concatenate([first, rest], axis=1), batch_kernel


def kernel_minibatch_step(
    centers: SparseCenters,
    seen,
    rows,
    row_index,
    kernel,
    step,
    *,
    learning_rate="beta",
    tau=200,
    truncate=True,
    weights=None,
    pool=None,
):
    """One step of (truncated) mini-batch kernel k-means.

    Parameters
    ----------
    centers : SparseCenters
        Sorted by ``(owner, segment)``.
    seen : float64 (k,)
        Batch rows each center has received before (for the ``"sklearn"`` rate).
    rows : ndarray (b, d)
        The batch.
    row_index : int64 (b,)
        Global indices of the batch rows.
    kernel : Kernel
    step : int
        Number of this step (1, 2, ...): the segment of the rows it brings.
    learning_rate : {"beta", "sklearn"}
        ``sqrt(b_j / b)`` (Schwartzman 2023, the paper's) or ``b_j / (v_j + b_j)`` (scikit-learn's).
    tau : int
        Rows each truncated center keeps (about).
    truncate : bool
        False: keep every contribution (duplicate rows of a center are merged).
    weights : float64 (b,), optional
        Sample weights of the batch rows: ``b_j`` and ``b`` become sums of weights and ``cm(B_j)`` the weighted
        mean (rows with weight ``w`` count as ``w`` copies, as in :class:`daskmeans.MiniBatchKMeans`).
    pool : concurrent.futures.ThreadPoolExecutor, optional
        A thread that computes part of the kernel blocks (:func:`batch_kernel_blocks`).

    Returns
    -------
    centers : SparseCenters
    seen : float64 (k,)
        Weight each center has received.
    record : dict
        ``batch_energy`` ((weighted) mean squared distance of the batch to the centers before the step),
        ``batch_energy_after`` (to the centers after it), ``improvement``, ``support`` (rows of all centers),
        ``dropped`` (rows forgotten by the truncation), ``labels`` (of the batch, before the update).
    """
    k = centers.n_clusters
    b = rows.shape[0]
    n_old = centers.rows.shape[0]
    rows = np.asarray(rows, dtype=centers.rows.dtype)
    diag = kernel.diag(rows)
    # the kernel between the batch and the support, and within the batch (two GEMMs, no stacked copy of the rows)
    batch_row_norms = kernel.row_norms(rows)
    support_row_norms = (
        None
        if batch_row_norms is None
        else kernel.row_norms(centers.rows)
        if centers.row_norms is None
        else centers.row_norms
    )
    batch_to_support, batch_kernel = batch_kernel_blocks(
        rows, centers.rows, kernel, batch_row_norms, support_row_norms, pool
    )
    inner = center_inner_products(batch_to_support, centers.coef, centers.owner, k)
    labels, dist2 = nearest_from_inner(diag, inner, centers.norms)
    weighted = weights is not None
    weights = np.asarray(weights, dtype=np.float64) if weighted else np.ones(b)
    total = float(weights.sum())
    before = float(weights @ dist2) / total if weighted else float(dist2.mean())
    counts = np.bincount(labels, weights=weights, minlength=k)
    alpha = learning_rates(learning_rate, counts, total, seen)
    to_means = batch_cluster_means(batch_kernel, labels, counts, weights)
    own = np.arange(b)
    means_norm = _per_cluster_mean(to_means[own, labels], labels, counts, weights)  # <cm(B_j), cm(B_j)>
    center_to_mean = _per_cluster_mean(inner[own, labels], labels, counts, weights)  # <C_j, cm(B_j)>
    keep_rate = 1.0 - alpha
    norms = keep_rate**2 * centers.norms + 2 * alpha * keep_rate * center_to_mean + alpha**2 * means_norm
    new_inner = keep_rate[None, :] * inner + alpha[None, :] * to_means

    # the grown support, sorted by owner (a center's old rows before its batch rows): ``order`` indexes
    # [old support | batch]
    coef = np.concatenate(
        [
            centers.coef * keep_rate[centers.owner],
            np.divide(alpha[labels] * weights, counts[labels], out=np.zeros(b), where=weights > 0),
        ]
    )
    owner = np.concatenate([centers.owner, labels.astype(np.int64)])
    order = np.argsort(owner, kind="stable")
    coef, owner = coef[order], owner[order]
    segment = np.concatenate([centers.segment, np.full(b, step, dtype=np.int64)])[order]
    row_index = np.concatenate([centers.row_index, np.asarray(row_index, dtype=np.int64)])[order]
    row_norms = None if batch_row_norms is None else np.concatenate([support_row_norms, batch_row_norms])[order]
    n_dropped = 0
    gram = None
    if truncate:
        keep = keep_kept_rows_copies(truncation_mask(owner, segment, int(tau)), owner, row_index)
        old_gram = centers.gram if centers.gram is not None else center_grams(centers, kernel)
        gram, center_dot_dropped, dropped_dot_dropped = truncated_center_grams(
            old_gram, centers.owner, batch_to_support, batch_kernel, order, owner, coef, keep, k
        )
        dropped = np.flatnonzero(~keep)
        n_dropped = len(dropped)
        if n_dropped:
            # a dropped row is never from this batch (its segment is the newest): its kernel with the batch is known
            new_inner -= center_inner_products(batch_to_support[:, order[dropped]], coef[dropped], owner[dropped], k)
            norms = norms - 2.0 * center_dot_dropped + dropped_dot_dropped
            order, coef, owner, segment, row_index = (a[keep] for a in (order, coef, owner, segment, row_index))
            row_norms = None if row_norms is None else row_norms[keep]
    combined = SparseCenters(
        rows=gather_support_rows(centers.rows, rows, order),
        coef=coef,
        owner=owner,
        segment=segment,
        row_index=row_index,
        norms=norms,
        row_norms=row_norms,
        gram=gram,
    )
    merged = merge_duplicates(combined, newest_segment=truncate)
    if truncate and merged is not combined:  # copies of rows merged: the Gram blocks of the merged support
        merged.gram = center_grams(merged, kernel)
    combined = merged
    _, after_dist2 = nearest_from_inner(diag, new_inner, combined.norms)
    after = float(weights @ after_dist2) / total if weighted else float(after_dist2.mean())
    record = {
        "batch_energy": before,
        "batch_energy_after": after,
        "improvement": before - after,
        "support": int(combined.rows.shape[0]),
        "dropped": n_dropped,
        "labels": labels,
        "new_support": n_old + b - n_dropped,
    }
    return combined, np.asarray(seen, dtype=np.float64) + counts, record


def auto_tol(gamma, n_clusters, batch_size) -> float:
    """The default early-stopping threshold: ``epsilon = gamma^2 sqrt(k / b)``.

    Theorem 1 of the paper guarantees termination within ``O(gamma^2 / epsilon)`` steps once the batch size is
    ``b = Omega(max(gamma^4, gamma^2) k epsilon^-2 log^2(gamma n / epsilon))``. Dropping the constant and the
    logarithm and solving for ``epsilon`` gives the smallest threshold that the batch size in use supports:
    ``epsilon = max(gamma^2, gamma) sqrt(k / b)`` (0.099 for a normalized kernel, k = 10, b = 1024). Below it the
    batch objective cannot resolve an improvement from the batch's sampling noise, by the paper's analysis.

    Parameters
    ----------
    gamma : float
        ``max ||phi(x)||`` (1 for RBF and Laplacian).
    n_clusters, batch_size : int
    """
    return float(max(gamma**2, gamma) * np.sqrt(n_clusters / batch_size))


def run_kernel_steps(
    centers,
    seen,
    batches,
    batch_indices,
    kernel,
    first_step,
    *,
    learning_rate="beta",
    tau=200,
    truncate=True,
    tol=0.0,
    time_left=None,
    batch_weights=None,
    pool=None,
):
    """Mini-batch kernel k-means steps, one per batch, in order, with the paper's early stopping.

    Parameters
    ----------
    centers : SparseCenters
    seen : float64 (k,)
    batches : list of ndarray (b, d)
    batch_indices : list of int64 (b,)
    kernel : Kernel
    first_step : int
        Number of the first step (1-based).
    learning_rate, tau, truncate :
        As :func:`kernel_minibatch_step`.
    tol : float
        Stop when a step improves the batch energy by less than ``tol`` (0 disables).
    time_left : float, optional
        Seconds left in the budget; checked after each step.
    batch_weights : list of float64 (b,), optional
        Sample weights of each batch's rows.
    pool : concurrent.futures.ThreadPoolExecutor, optional
        A thread that computes part of each step's kernel blocks (:func:`batch_kernel_blocks`).

    Returns
    -------
    centers : SparseCenters
    seen : float64 (k,)
    records : list of dict
        One per step (without the labels), with ``seconds`` since the first step began; the step that met the
        stopping rule also has ``stop_reason="converged"``.
    stop_reason : str or None
        ``"converged"`` (tol), ``"max_time"`` or None.
    """
    start = time.perf_counter()
    records = []
    stop_reason = None
    for t, (rows, index) in enumerate(zip(batches, batch_indices)):
        centers, seen, record = kernel_minibatch_step(
            centers,
            seen,
            rows,
            index,
            kernel,
            first_step + t,
            learning_rate=learning_rate,
            tau=tau,
            truncate=truncate,
            weights=None if batch_weights is None else batch_weights[t],
            pool=pool,
        )
        record.pop("labels")
        record["seconds"] = time.perf_counter() - start
        records.append(record)
        if tol > 0 and record["improvement"] < tol:  # Algorithm 1: f_B(C_i) - f_B(C_i+1) < epsilon
            stop_reason = record["stop_reason"] = "converged"
            break
        if time_left is not None and time.perf_counter() - start >= time_left:
            stop_reason = "max_time"
            break
    return centers, seen, records, stop_reason
