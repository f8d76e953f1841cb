"""Truncated variational EM for the isotropic GMM (var-GMM-S, Forster & Lücke 2018) on one block of points.

The model: ``k`` clusters with means ``mu_c``, equal mixing proportions ``1/k`` and one shared variance
``sigma^2``. Every point ``n`` keeps ``K_n``, its ``C'`` best clusters so far (its truncated posterior is the
softmax of the log-joints over ``K_n`` only); every cluster ``c`` keeps ``G_c``, its ``G`` nearest clusters
(``G_c[0] = c``). The E-step of a point searches the union of ``G_c`` over ``c`` in ``K_n`` (plus, optionally,
one random cluster) and keeps the ``C'`` nearest: with equal mixing proportions and a shared variance the
largest joints are the smallest distances, so the search needs no ``sigma^2``. Its cost is at most
``C' G + 1`` distances per point, whatever ``k``.

All kernels take NumPy arrays and return NumPy arrays; distances and sums are accumulated in float64.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .. import config
from .distance import pair_dist2
from .stats import add_scaled_row


@numba.njit(cache=True, nogil=True)
def random_truncation(uniforms, n_clusters):
    """Initial ``K_n``: ``C'`` distinct clusters per point, drawn uniformly (partial Fisher-Yates).

    Parameters
    ----------
    uniforms : float64 (n, C')
        Uniform numbers in [0, 1), one per point and slot.
    n_clusters : int

    Returns
    -------
    int32 (n, C')
    """
    n, c_trunc = uniforms.shape
    order = np.arange(n_clusters)
    swaps = np.empty(c_trunc, dtype=np.int64)
    out = np.empty((n, c_trunc), dtype=np.int32)
    for i in range(n):
        for j in range(c_trunc):
            r = j + int(uniforms[i, j] * (n_clusters - j))
            if r >= n_clusters:
                r = n_clusters - 1
            swaps[j] = r
            tmp = order[j]
            order[j] = order[r]
            order[r] = tmp
            out[i, j] = order[j]
        for j in range(c_trunc - 1, -1, -1):  # undo, so the next point starts from 0..k-1 again
            r = swaps[j]
            tmp = order[j]
            order[j] = order[r]
            order[r] = tmp
    return out


@numba.njit(cache=True, nogil=True)
def truncated_estep(X, means, truncation, neighbours, extra):
    """The variational E-step of every point of a block: search ``union(G_c for c in K_n)``, keep the ``C'`` best.

    Parameters
    ----------
    X : ndarray (n, d), float32 or float64
    means : float64 (k, d)
    truncation : int32 (n, C')
        ``K_n`` of each point (distinct clusters).
    neighbours : int32 (k, G)
        ``G_c`` of each cluster, ``neighbours[c, 0] == c``.
    extra : int32 (n,)
        One more cluster to search for each point (random exploration), or -1 for none.

    Returns
    -------
    new_truncation : int32 (n, C')
        The ``C'`` nearest clusters of the search space, nearest first.
    new_dist2 : float64 (n, C')
        Their squared distances.
    pair_best, pair_candidate : int32 (n_pairs,)
        For every point and every searched cluster other than the point's best: the best cluster and the
        searched one (what the ``G_c`` update averages over).
    pair_dist2 : float64 (n_pairs,)
        The squared distance of the point to the searched cluster.
    n_distances : int
        Distances computed (the size of all search spaces).
    """
    n = X.shape[0]
    k = means.shape[0]
    c_trunc = truncation.shape[1]
    g = neighbours.shape[1]
    max_search = c_trunc * g + 1
    stamp = np.full(k, -1, dtype=np.int64)
    space = np.empty(max_search, dtype=np.int32)
    space_d2 = np.empty(max_search, dtype=np.float64)
    taken = np.zeros(max_search, dtype=np.bool_)
    new_truncation = np.empty((n, c_trunc), dtype=np.int32)
    new_dist2 = np.empty((n, c_trunc), dtype=np.float64)
    pair_best = np.empty(n * max_search, dtype=np.int32)
    pair_candidate = np.empty(n * max_search, dtype=np.int32)
    pair_d2 = np.empty(n * max_search, dtype=np.float64)
    n_pairs = 0
    n_distances = 0
    for i in range(n):
        size = 0
        for a in range(c_trunc):
            c = truncation[i, a]
            for b in range(g):
                candidate = neighbours[c, b]
                if stamp[candidate] != i:
                    stamp[candidate] = i
                    space[size] = candidate
                    size += 1
        if extra[i] >= 0 and stamp[extra[i]] != i:
            stamp[extra[i]] = i
            space[size] = extra[i]
            size += 1
        for s in range(size):
            space_d2[s] = pair_dist2(X[i], means[space[s]])
            taken[s] = False
        n_distances += size
        # selection of the C' smallest (C' is small): nearest first; ties keep the search order
        for a in range(c_trunc):
            best = -1
            best_d2 = np.inf
            for s in range(size):
                if not taken[s] and (best < 0 or space_d2[s] < best_d2):
                    best = s
                    best_d2 = space_d2[s]
            taken[best] = True
            new_truncation[i, a] = space[best]
            new_dist2[i, a] = best_d2
        winner = new_truncation[i, 0]
        for s in range(size):
            if space[s] != winner:
                pair_best[n_pairs] = winner
                pair_candidate[n_pairs] = space[s]
                pair_d2[n_pairs] = space_d2[s]
                n_pairs += 1
    return (
        new_truncation,
        new_dist2,
        pair_best[:n_pairs].copy(),
        pair_candidate[:n_pairs].copy(),
        pair_d2[:n_pairs].copy(),
        n_distances,
    )


def aggregate_pairs(pair_best, pair_candidate, pair_dist2, n_clusters):
    """Sum and count the distances of each (best cluster, searched cluster) pair.

    Returns
    -------
    keys : int64 (n_unique,)
        ``best * n_clusters + candidate``, sorted.
    sums : float64 (n_unique,)
    counts : float64 (n_unique,)
    """
    keys = pair_best.astype(np.int64) * int(n_clusters) + pair_candidate.astype(np.int64)
    if n_clusters * n_clusters <= config.DENSE_PAIRS_LIMIT:
        # few clusters: one bincount over all k^2 pairs beats sorting the keys (same sums, same order)
        counts = np.bincount(keys, minlength=n_clusters * n_clusters)
        unique = np.flatnonzero(counts)
        sums = np.bincount(keys, weights=pair_dist2, minlength=n_clusters * n_clusters)[unique]
        return unique.astype(np.int64), sums, counts[unique].astype(np.float64)
    unique, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse, weights=pair_dist2, minlength=unique.shape[0])
    counts = np.bincount(inverse, minlength=unique.shape[0]).astype(np.float64)
    return unique, sums, counts


def merge_pairs(parts, n_clusters):
    """Merge several :func:`aggregate_pairs` results into one (sorted keys, summed sums and counts)."""
    keys = np.concatenate([p[0] for p in parts])
    unique, inverse = np.unique(keys, return_inverse=True)
    sums = np.bincount(inverse, weights=np.concatenate([p[1] for p in parts]), minlength=unique.shape[0])
    counts = np.bincount(inverse, weights=np.concatenate([p[2] for p in parts]), minlength=unique.shape[0])
    return unique, sums, counts


@numba.njit(cache=True, nogil=True)
def update_neighbours(neighbours, keys, sums, counts):
    """New ``G_c``: ``c`` and the ``G - 1`` clusters nearest on average to the points whose best cluster is ``c``.

    Parameters
    ----------
    neighbours : int32 (k, G)
        The current ``G_c`` (kept where a cluster is nobody's best; used to fill up when fewer than ``G - 1``
        clusters were searched by its points).
    keys : int64 (n_pairs,)
        Sorted ``best * k + candidate`` keys from :func:`aggregate_pairs` (never ``best == candidate``).
    sums, counts : float64 (n_pairs,)

    Returns
    -------
    int32 (k, G)
    """
    k, g = neighbours.shape
    out = neighbours.copy()
    mean = np.empty(keys.shape[0], dtype=np.float64)
    for p in range(keys.shape[0]):
        mean[p] = sums[p] / counts[p]
    start = 0
    chosen = np.empty(g, dtype=np.int32)
    while start < keys.shape[0]:
        c = keys[start] // k
        stop = start
        while stop < keys.shape[0] and keys[stop] // k == c:
            stop += 1
        chosen[0] = c
        n_chosen = 1
        used = np.zeros(stop - start, dtype=np.bool_)
        while n_chosen < g:
            best = -1
            for p in range(start, stop):
                if not used[p - start] and (best < 0 or mean[p] < mean[best]):
                    best = p
            if best < 0:
                break
            used[best - start] = True
            chosen[n_chosen] = keys[best] % k
            n_chosen += 1
        b = 1
        while n_chosen < g and b < g:  # fewer searched clusters than G - 1: keep old neighbours
            old = neighbours[c, b]
            present = False
            for a in range(n_chosen):
                if chosen[a] == old:
                    present = True
            if not present:
                chosen[n_chosen] = old
                n_chosen += 1
            b += 1
        for a in range(n_chosen):
            out[c, a] = chosen[a]
        start = stop
    return out


@numba.njit(cache=True, nogil=True)
def posterior_stats(X, weights, truncation, dist2, sigma2, n_clusters):
    """Truncated posteriors and the M-step sums of a block.

    The posterior of point ``n`` over ``K_n`` is the softmax of ``-dist2 / (2 sigma^2)`` (equal mixing
    proportions and a shared variance cancel in it).

    Parameters
    ----------
    X : ndarray (n, d)
    weights : float64 (n,)
        Coreset weights.
    truncation : int32 (n, C')
    dist2 : float64 (n, C')
        Squared distances of each point to its ``K_n`` (from the E-step, for the current means).
    sigma2 : float
    n_clusters : int

    Returns
    -------
    sums : float64 (k, d)
        ``sum_n w_n q_nc x_n``.
    resp : float64 (k,)
        ``sum_n w_n q_nc``.
    spread : float
        ``sum_n w_n sum_c q_nc dist2_nc`` (to the current means; the M-step shifts it to the new means).
    log_sum : float
        ``sum_n w_n log sum_{c in K_n} exp(-dist2_nc / (2 sigma^2))``: the free energy without its constants.
    """
    n, d = X.shape
    c_trunc = truncation.shape[1]
    sums = np.zeros((n_clusters, d), dtype=np.float64)
    resp = np.zeros(n_clusters, dtype=np.float64)
    q = np.empty(c_trunc, dtype=np.float64)
    spread = 0.0
    log_sum = 0.0
    scale = -0.5 / sigma2
    for i in range(n):
        top = -np.inf
        for a in range(c_trunc):
            value = scale * dist2[i, a]
            if value > top:
                top = value
        total = 0.0
        for a in range(c_trunc):
            q[a] = math.exp(scale * dist2[i, a] - top)
            total += q[a]
        w = weights[i]
        log_sum += w * (math.log(total) + top)
        for a in range(c_trunc):
            r = w * q[a] / total
            c = truncation[i, a]
            resp[c] += r
            spread += r * dist2[i, a]
            add_scaled_row(sums[c], r, X[i])
    return sums, resp, spread, log_sum


def free_energy_constant(total_weight, n_features, n_clusters, sigma2):
    """The constant part of the free energy: ``-W (d/2 log(2 pi sigma^2) + log k)``."""
    return -total_weight * (0.5 * n_features * math.log(2.0 * math.pi * sigma2) + math.log(n_clusters))


@numba.njit(cache=True, nogil=True)
def truncated_posterior(X, means, sigma2, n_truncated):
    """The truncated posterior of new points: their ``C'`` nearest means (all ``k`` searched) and softmax weights.

    Returns
    -------
    indices : int32 (n, C'), nearest first
    probabilities : float64 (n, C')
    log_likelihood : float64 (n,)
        ``log sum_{c in K_n} p(x_n, c)``: the truncated log-likelihood of each point.
    """
    n, d = X.shape
    k = means.shape[0]
    indices = np.empty((n, n_truncated), dtype=np.int32)
    probabilities = np.empty((n, n_truncated), dtype=np.float64)
    log_likelihood = np.empty(n, dtype=np.float64)
    row = np.empty(k, dtype=np.float64)
    constant = -0.5 * d * math.log(2.0 * math.pi * sigma2) - math.log(k)
    for i in range(n):
        for c in range(k):
            row[c] = pair_dist2(X[i], means[c])
        order = np.argsort(row, kind="mergesort")[:n_truncated]
        top = -0.5 * row[order[0]] / sigma2
        total = 0.0
        for a in range(n_truncated):
            probabilities[i, a] = math.exp(-0.5 * row[order[a]] / sigma2 - top)
            total += probabilities[i, a]
        for a in range(n_truncated):
            indices[i, a] = order[a]
            probabilities[i, a] /= total
        log_likelihood[i] = math.log(total) + top + constant
    return indices, probabilities, log_likelihood
