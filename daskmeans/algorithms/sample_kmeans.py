"""k-means on a point set held in memory: greedy k-means++ and Lloyd iterations.

Used on the driver (k-means|| reclustering its candidates, k-means++ on a sample, the coarse level of the
two-level seeding) and inside tasks on the workers (the fine problems of the two-level seeding). The weighted
functions compute in float64; the two-level seeding's (:func:`batched_kmeans_plusplus`, :func:`lloyd`) compute in
the rows' compute dtype (float32 for descriptors), where their GEMMs run twice as fast.
"""

from __future__ import annotations

import contextlib
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import config
from ..engine.blas import one_blas_thread, one_blas_thread_in_this_thread
from ..engine.slabs import compute_dtype
from ..exceptions import InputDataError
from ..kernels.assign import nearest_centers
from ..kernels.plusplus_choice import choose_candidate, choose_in_batch
from ..kernels.row_hashes import row_hashes
from ..kernels.stats import cluster_stats


def _dist2_to(points, center):
    diff = points - center
    return np.einsum("ij,ij->i", diff, diff)


def weighted_kmeans_plusplus(points, weights, n_clusters, rng, n_local_trials=None, what="The data"):
    """Greedy k-means++ (Arthur & Vassilvitskii) on weighted points, in float64 on the driver.

    Parameters
    ----------
    points : ndarray (m, d)
    weights : ndarray (m,)
        Non-negative; a point of weight w counts as w copies.
    n_clusters : int
    rng : numpy.random.Generator
    n_local_trials : int, optional
        Candidates tried per center; default ``2 + floor(log k)`` as in scikit-learn.
    what : str
        What ``points`` are, for the message (``"The data"``, ``"A sample of 10000 rows"``).

    Returns
    -------
    ndarray (n_clusters, d)
        With exactly ``n_clusters`` distinct points of positive weight, every one of them.

    Raises
    ------
    InputDataError
        Fewer distinct points (of positive weight) than ``n_clusters``.
    """
    points = np.asarray(points, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    # counted exactly: the expanded distances below leave rounding residues where a point lies on a center
    distinct = np.unique(points[weights > 0], axis=0)
    if distinct.shape[0] <= n_clusters:
        if distinct.shape[0] == n_clusters:
            return distinct
        raise InputDataError(
            f"{what} has only {distinct.shape[0]} distinct row(s) (with positive weight) but n_clusters="
            f"{n_clusters}; lower n_clusters or remove duplicate rows."
        )
    m = points.shape[0]
    if n_local_trials is None:
        n_local_trials = 2 + int(math.log(n_clusters))
    centers = np.empty((n_clusters, points.shape[1]))
    first = rng.choice(m, p=weights / weights.sum())
    centers[0] = points[first]
    closest = _dist2_to(points, centers[0])
    points_sq = np.einsum("ij,ij->i", points, points)
    for c in range(1, n_clusters):
        trials = _draw(weights * closest, n_local_trials, rng)
        trial_points = points[trials]
        d2 = points_sq[None, :] - 2.0 * trial_points @ points.T + points_sq[trials][:, None]
        np.maximum(d2, 0.0, out=d2)
        np.minimum(d2, closest[None, :], out=d2)
        potentials = d2 @ weights
        best = int(np.argmin(potentials))
        centers[c] = points[trials[best]]
        closest = d2[best]
    return centers


def batched_kmeans_plusplus(points, n_clusters, rng, n_local_trials=None, batch=None):
    """Greedy k-means++ on unweighted points, the candidates of a batch of centers drawn at once.

    Greedy k-means++ (:func:`weighted_kmeans_plusplus`) draws ``n_local_trials`` candidates from the current
    squared distances for every center and keeps the one that lowers the potential most: one skinny
    ``(trials x d) @ (d x m)`` product per center, which BLAS runs far below its peak. Here the candidates of
    ``batch`` centers are drawn from the same distances and their distances to every point computed in one
    product; the centers are then chosen one by one, each among its own candidates, against the distances the
    centers chosen before it left (as greedy k-means++ chooses). Only the draws are older: a later center of a
    batch may draw a point near one chosen earlier in it: such a candidate is kept with probability its current
    squared distance over the one it was drawn by (thinning), and new draws replace those not kept, so every
    center's candidates are drawn from the current distances, as greedy k-means++ draws them. Distances are
    expanded in the rows' compute dtype (float32 for descriptors) and clipped at zero; the potentials are summed
    in float64.

    Parameters
    ----------
    points : ndarray (m, d)
        Holding more than ``n_clusters`` distinct rows (:func:`sample_kmeans` checks).
    n_clusters : int
    rng : numpy.random.Generator
    n_local_trials : int, optional
        Candidates per center; default ``2 + floor(log k)``, as in scikit-learn.
    batch : int, optional
        Centers whose candidates are drawn together; default about 128 candidates a product (where the product
        runs near BLAS's peak), and at most ``n_clusters / 16`` centers so that few of a batch's candidates are
        drawn again. With 1 (the default below 32 centers) the draws and choices are those of
        :func:`weighted_kmeans_plusplus` with unit weights, up to the rounding of the distances.

    Returns
    -------
    ndarray (n_clusters, d), the compute dtype of ``points``
        Rows of ``points``.

    Examples
    --------
    >>> import numpy as np
    >>> points = np.array([[0.0, 0.0], [0.1, 0.0], [10.0, 0.0], [10.1, 0.0]])
    >>> centers = batched_kmeans_plusplus(points, 2, np.random.default_rng(0))
    >>> sorted(round(float(c[0])) for c in centers)
    [0, 10]
    """
    rows = np.ascontiguousarray(points, dtype=compute_dtype(np.asarray(points).dtype))
    m = rows.shape[0]
    trials = 2 + int(math.log(n_clusters)) if n_local_trials is None else int(n_local_trials)
    batch = max(1, min(128 // trials, n_clusters // 16)) if batch is None else int(batch)
    squares = np.einsum("ij,ij->i", rows, rows)
    first = np.array([rng.choice(m, p=np.full(m, 1.0 / m))])  # drawn as weighted_kmeans_plusplus draws it
    picked = [int(first[0])]
    closest = np.full(m, np.inf, dtype=rows.dtype)
    choose_candidate(_scaled_dots(rows, first), squares, first, closest)
    while len(picked) < n_clusters:
        drawn = min(batch, n_clusters - len(picked))
        drawn_from = closest.copy()
        candidates = _draw(drawn_from, drawn * trials, rng)
        keep = rng.random((drawn - 1) * trials) if drawn > 1 else np.empty(0)
        dots = _scaled_dots(rows, candidates)
        chosen = np.empty(drawn, dtype=np.int64)
        j = choose_in_batch(dots, candidates, keep, drawn_from, squares, closest, 0, chosen)
        while j < drawn:
            # thinning: a candidate drawn from the batch's old distances stays with probability new / old, so
            # the ones that stay are drawn from the current distances, as greedy k-means++ draws them; as many
            # new draws replace those that do not
            own, options = candidates[j * trials : (j + 1) * trials], dots[j * trials : (j + 1) * trials]
            stays = keep[(j - 1) * trials : j * trials] * drawn_from[own] < closest[own]
            more = _draw(closest, trials - int(stays.sum()), rng)
            own = np.concatenate([own[stays], more])
            options = np.concatenate([options[stays], _scaled_dots(rows, more)])
            chosen[j] = own[choose_candidate(options, squares, own, closest)]
            j = choose_in_batch(dots, candidates, keep, drawn_from, squares, closest, j + 1, chosen)
        picked.extend(chosen.tolist())
    return rows[np.array(picked)]


def _draw(closest, count, rng):
    """``count`` row indices drawn with probability proportional to ``closest`` (with replacement)."""
    cumulative = np.cumsum(closest, dtype=np.float64)
    targets = rng.random(count) * cumulative[-1]
    return np.minimum(np.searchsorted(cumulative, targets, side="right"), len(closest) - 1)


def _scaled_dots(rows, chosen):
    """``-2 * rows[chosen] @ rows.T``, the dot products that :func:`choose_candidate` expands into distances."""
    return (rows[chosen] * rows.dtype.type(-2)) @ rows.T


def weighted_lloyd(points, weights, centers, max_iter=30, out_of_time=None):
    """Lloyd iterations on a small weighted point set on the driver (reclustering of k-means|| candidates).

    A center that loses all its points keeps its position. ``out_of_time``, when given, is asked before each
    iteration; the iterations stop when it returns true (the fit's ``max_time`` is spent).
    """
    points = np.asarray(points, dtype=np.float64)
    centers = np.array(centers, dtype=np.float64)
    points_sq = np.einsum("ij,ij->i", points, points)
    # the (points x centers) distances in slabs of rows: about 10 k candidates x k centers would be O(k^2)
    slab_rows = max(1, config.RECLUSTER_SLAB_BYTES // (8 * centers.shape[0]))
    labels = None
    for _ in range(max_iter):
        if out_of_time is not None and out_of_time():
            break
        centers_sq = np.einsum("ij,ij->i", centers, centers)[None, :]
        new_labels = np.empty(points.shape[0], dtype=np.intp)
        for r0 in range(0, points.shape[0], slab_rows):
            r1 = min(points.shape[0], r0 + slab_rows)
            d2 = points_sq[r0:r1, None] - 2.0 * points[r0:r1] @ centers.T + centers_sq
            new_labels[r0:r1] = np.argmin(d2, axis=1)
        if labels is not None and np.array_equal(new_labels, labels):
            break
        labels = new_labels
        totals = np.bincount(labels, weights=weights, minlength=centers.shape[0])
        sums = np.zeros_like(centers)
        np.add.at(sums, labels, weights[:, None] * points)
        filled = totals > 0
        centers[filled] = sums[filled] / totals[filled, None]
    return centers


def count_distinct(rows) -> int:
    """Number of distinct rows of ``rows`` (exact, by sorting)."""
    return int(np.unique(rows, axis=0).shape[0]) if len(rows) else 0


def more_distinct_than(rows, count: int) -> bool:
    """Whether ``rows`` holds more than ``count`` distinct rows (exact).

    Sorting the rows (:func:`count_distinct`) costs as much as a few Lloyd iterations on them. Equal rows have
    equal 64-bit hashes, so more distinct hashes than ``count`` answer at the cost of hashing; only when there
    are not (few distinct rows, or a collision) are the rows sorted.

    Examples
    --------
    >>> import numpy as np
    >>> more_distinct_than(np.array([[1.0, 2.0], [1.0, 2.0], [3.0, 4.0]]), 1)
    True
    >>> more_distinct_than(np.array([[1.0, 2.0], [1.0, 2.0], [-0.0, 4.0], [0.0, 4.0]]), 2)
    False
    """
    rows = np.asarray(rows)
    if len(rows) <= count:
        return False
    return len(np.unique(row_hashes(rows))) > count or count_distinct(rows) > count


#: Rows a thread of :func:`lloyd` assigns at a time: the chunks, and the order their sums are added in, do not
#: depend on the number of threads, so neither do the centers.
LLOYD_CHUNK_ROWS = 16384


def lloyd(points, centers, max_iter=30, threads=1):
    """Unweighted Lloyd iterations on points in memory, by the passes' kernels: exact nearest centers in the
    points' compute dtype (:func:`daskmeans.kernels.assign.nearest_centers`, GEMM in slabs at large k; float32
    for descriptors, as the passes over the data assign them) and float64 sums
    (:func:`daskmeans.kernels.stats.cluster_stats`), a chunk of :data:`LLOYD_CHUNK_ROWS` rows at a time on up to
    ``threads`` threads, the chunks' sums added in chunk order. Stops when no label changes; a center that loses
    all its points keeps its position.

    Parameters
    ----------
    points : ndarray (m, d), float32 or float64
    centers : ndarray (k, d)
    max_iter : int
    threads : int
        1 in a task on a worker (its thread is one of the worker's); the driver's cores on the driver.

    Returns
    -------
    float64 ndarray (k, d)

    Examples
    --------
    >>> import numpy as np
    >>> points = np.array([[0.0], [1.0], [10.0], [11.0]])
    >>> lloyd(points, np.array([[0.0], [1.0]])).ravel().tolist()
    [0.5, 10.5]
    """
    points = np.ascontiguousarray(points)
    centers = np.array(centers, dtype=np.float64)
    assigned_as = compute_dtype(points.dtype)
    k = centers.shape[0]
    chunks = [points[start : start + LLOYD_CHUNK_ROWS] for start in range(0, len(points), LLOYD_CHUNK_ROWS)]
    labels = None
    with _chunk_map(min(threads, len(chunks))) as map_chunks:
        for _ in range(max_iter):
            assigned_centers = centers.astype(assigned_as, copy=False)
            parts = list(map_chunks(lambda rows, c=assigned_centers: _assign_and_sum(rows, c, k), chunks))
            new_labels = np.concatenate([part[0] for part in parts])
            if labels is not None and np.array_equal(new_labels, labels):
                break
            labels = new_labels
            sums, counts = parts[0][1], parts[0][2]
            for part in parts[1:]:
                sums, counts = sums + part[1], counts + part[2]
            filled = counts > 0
            centers[filled] = sums[filled] / counts[filled, None]
    return centers


def _assign_and_sum(rows, centers, k):
    """Labels of ``rows`` and the sums and counts of the rows per label."""
    labels, dist2 = nearest_centers(rows, centers)
    sums, counts, _ = cluster_stats(rows, labels, dist2, k)
    return labels, sums, counts


@contextlib.contextmanager
def _chunk_map(threads):
    """``map`` on ``threads`` threads, each with one BLAS thread (the calling thread's own ``map`` for one)."""
    if threads <= 1:
        yield map
        return
    with one_blas_thread(), ThreadPoolExecutor(threads, initializer=one_blas_thread_in_this_thread) as pool:
        yield pool.map
