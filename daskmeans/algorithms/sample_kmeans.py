"""k-means on a weighted point set held in memory: greedy k-means++ and Lloyd iterations, in float64.

Used on the driver (k-means|| reclustering its candidates, k-means++ on a sample, the coarse level of the
two-level seeding) and inside tasks on the workers (the fine problems of the two-level seeding).
"""

from __future__ import annotations

import math

import numpy as np

from .. import config
from ..exceptions import InputDataError
from ..kernels.assign import nearest_centers
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
        cumulative = np.cumsum(weights * closest)
        targets = rng.random(n_local_trials) * cumulative[-1]
        trials = np.minimum(np.searchsorted(cumulative, targets, side="right"), m - 1)
        trial_points = points[trials]
        d2 = points_sq[None, :] - 2.0 * trial_points @ points.T + points_sq[trials][:, None]
        np.maximum(d2, 0.0, out=d2)
        np.minimum(d2, closest[None, :], out=d2)
        potentials = d2 @ weights
        best = int(np.argmin(potentials))
        centers[c] = points[trials[best]]
        closest = d2[best]
    return centers


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


def lloyd(points, centers, max_iter=30):
    """Unweighted Lloyd iterations on points in memory, by the passes' kernels: exact nearest centers
    (:func:`daskmeans.kernels.assign.nearest_centers`, GEMM in slabs at large k) and float64 sums in row order
    (:func:`daskmeans.kernels.stats.cluster_stats`). Stops when no label changes; a center that loses all its
    points keeps its position.

    Parameters
    ----------
    points : ndarray (m, d), float32 or float64
    centers : ndarray (k, d)
    max_iter : int

    Returns
    -------
    float64 ndarray (k, d)
    """
    points = np.ascontiguousarray(points)
    centers = np.array(centers, dtype=np.float64)
    labels = None
    for _ in range(max_iter):
        new_labels, dist2 = nearest_centers(points, centers)
        if labels is not None and np.array_equal(new_labels, labels):
            break
        labels = new_labels
        sums, counts, _ = cluster_stats(points, labels, dist2, centers.shape[0])
        filled = counts > 0
        centers[filled] = sums[filled] / counts[filled, None]
    return centers
