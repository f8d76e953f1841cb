"""AFK-MC2 seeding (Bachem, Lucic, Hassani & Krause, NIPS 2016) on weighted points: the Markov chains.

The proposal distribution is ``q(x) = 1/2 w_x d^2(x, c_1) / sum(w d^2) + 1/2 w_x / sum(w)``; every further
center is the last state of a Markov chain of ``chain_length`` proposals drawn from ``q``, where the chain moves
from ``x`` to the proposal ``y`` with probability ``min(1, (w_y d^2(y, C) q_x) / (w_x d^2(x, C) q_y))``
(``C``: the centers chosen so far). The proposals and the acceptance uniforms are drawn by the caller, so the
kernel is deterministic and the same draws give the same centers wherever it runs.

Oversampled (:func:`reduce_candidates`): D^2 sampling, which the chains approximate however long they are, leaves
well-separated clusters without a center (about 10 of 100 blobs: once few clusters are uncovered, their mass is
small next to the spread of the covered ones). The chains therefore draw more candidates than centers, and
weighted greedy k-means++ on the candidates keeps the centers, as k-means|| reclusters its own.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ..config import RECLUSTER_SLAB_BYTES
from .distance import pair_dist2


@numba.njit(cache=True, nogil=True)
def _dist2_to_centers(candidate, centers, n_centers):
    """Squared distance from one row to the nearest of the first ``n_centers`` centers (float64)."""
    best = np.inf
    for j in range(n_centers):
        value = pair_dist2(candidate, centers[j])
        if value < best:
            best = value
    return best


@numba.njit(cache=True, nogil=True)
def afkmc2_chains(candidates, candidate_weights, candidate_q, first_center, n_clusters, chain_length, uniforms):
    """Run the ``n_clusters - 1`` Markov chains of AFK-MC2 over pre-drawn proposals.

    Parameters
    ----------
    candidates : ndarray (n_clusters - 1) * chain_length x d
        The proposals, chain after chain: rows ``j * chain_length ... (j + 1) * chain_length - 1`` are the
        proposals of the chain that picks center ``j + 1``.
    candidate_weights : float64 (n_candidates,)
        Weight of each proposal (its sample weight; all positive).
    candidate_q : float64 (n_candidates,)
        Proposal probability ``q`` of each proposal.
    first_center : ndarray (d,)
    n_clusters : int
    chain_length : int
    uniforms : float64 ((n_clusters - 1) * chain_length,)
        Acceptance uniforms in (0, 1), one per proposal (the first of each chain is not used: the chain starts
        there).

    Returns
    -------
    centers : float64 (n_clusters, d)
    chosen : int64 (n_clusters - 1,)
        Index into ``candidates`` of each center after the first.
    n_distances : int
        Distance evaluations made (one per candidate and center so far).
    """
    d = first_center.shape[0]
    centers = np.empty((n_clusters, d), dtype=np.float64)
    for f in range(d):
        centers[0, f] = np.float64(first_center[f])
    chosen = np.empty(n_clusters - 1, dtype=np.int64)
    n_distances = 0
    for c in range(1, n_clusters):
        base = (c - 1) * chain_length
        x = base
        x_d2 = _dist2_to_centers(candidates[x], centers, c)
        n_distances += c
        for step in range(1, chain_length):
            y = base + step
            y_d2 = _dist2_to_centers(candidates[y], centers, c)
            n_distances += c
            numerator = candidate_weights[y] * y_d2 * candidate_q[x]
            denominator = candidate_weights[x] * x_d2 * candidate_q[y]
            # a state on a center (d^2 = 0) has target mass 0: any proposal with mass is taken
            if denominator <= 0.0 or numerator >= uniforms[y] * denominator:
                x = y
                x_d2 = y_d2
        chosen[c - 1] = x
        for f in range(d):
            centers[c, f] = np.float64(candidates[x, f])
    return centers, chosen, n_distances


def proposal_distribution(points, weights, first_center):
    """The AFK-MC2 proposal ``q`` of every point (float64, sums to 1): one distance per point.

    Parameters
    ----------
    points : ndarray (m, d)
    weights : ndarray (m,)
        Non-negative, with a positive sum.
    first_center : ndarray (d,)
    """
    weights = np.asarray(weights, dtype=np.float64)
    diff = np.asarray(points, dtype=np.float64) - np.asarray(first_center, dtype=np.float64)
    d2 = np.einsum("ij,ij->i", diff, diff)
    weighted = weights * d2
    total = float(weighted.sum())
    uniform_part = 0.5 * weights / weights.sum()
    if total <= 0.0:
        return uniform_part * 2.0
    return 0.5 * weighted / total + uniform_part


def reduce_candidates(candidates, rows, row_weights, row_q, n_clusters, rng):
    """Keep ``n_clusters`` of the chains' candidates: ``(centers, distance evaluations)``.

    Each candidate's mass is estimated from the chains' proposals (i.i.d. draws from ``q``, so a row counts
    ``w / q``) that have it as their nearest candidate; weighted greedy k-means++ on the distinct candidates
    (:func:`greedy_kmeans_plusplus_with_mode`) then picks ``n_clusters`` of them.

    Parameters
    ----------
    candidates : ndarray (n_candidates, d)
        The chains' centers, with at least ``n_clusters`` distinct rows.
    rows, row_weights, row_q : ndarray (n_proposals, d), (n_proposals,), (n_proposals,)
        The proposals, their weights and their ``q``.
    n_clusters : int
    rng : numpy.random.Generator
    """
    candidates = np.asarray(candidates, dtype=np.float64)
    _, first_of = np.unique(candidates, axis=0, return_index=True)
    distinct = candidates[np.sort(first_of)]  # in the order the chains chose them
    rows = np.asarray(rows, dtype=np.float64)
    row_weights, row_q = np.asarray(row_weights, dtype=np.float64), np.asarray(row_q, dtype=np.float64)
    distinct_sq = np.einsum("ij,ij->i", distinct, distinct)
    nearest = np.empty(rows.shape[0], dtype=np.intp)
    slab_rows = max(1, RECLUSTER_SLAB_BYTES // (8 * distinct.shape[0]))
    for r0 in range(0, rows.shape[0], slab_rows):
        block = rows[r0:r0 + slab_rows]
        nearest[r0:r0 + slab_rows] = np.argmin(distinct_sq[None, :] - 2.0 * block @ distinct.T, axis=1)
    mass = np.bincount(nearest, weights=row_weights / row_q, minlength=distinct.shape[0])
    # a candidate that is a proposal has its own row (distance 0); the first center may be none: the least mass
    mass = np.where(mass > 0, mass, mass[mass > 0].min())
    n_trials = 2 + int(math.log(n_clusters))
    centers = greedy_kmeans_plusplus_with_mode(distinct, mass, n_clusters, rng, n_trials)
    n_distances = rows.shape[0] * distinct.shape[0] + distinct.shape[0] * (1 + (n_trials + 1) * (n_clusters - 1))
    return centers, n_distances


def greedy_kmeans_plusplus_with_mode(points, weights, n_clusters, rng, n_trials):
    """Greedy k-means++ on a few weighted points whose trials always include the point of largest ``w d^2``.

    With only ``n_trials`` random trials, the last uncovered clusters (small ``w d^2`` mass next to that of the
    many near-copies of chosen centers) are missed with high probability; the mode of ``w d^2`` is such a
    cluster's candidate, and it is kept only if it lowers the weighted potential most, as greedy k-means++ asks.

    Parameters
    ----------
    points : float64 (m, d)
        Distinct points, at least ``n_clusters`` of positive weight.
    weights : float64 (m,)
    n_clusters, n_trials : int
    rng : numpy.random.Generator

    Returns
    -------
    float64 (n_clusters, d)
    """
    points_sq = np.einsum("ij,ij->i", points, points)
    centers = np.empty((n_clusters, points.shape[1]))
    first = int(rng.choice(points.shape[0], p=weights / weights.sum()))
    centers[0] = points[first]
    closest = np.maximum(points_sq - 2.0 * points @ points[first] + points_sq[first], 0.0)
    for c in range(1, n_clusters):
        target = weights * closest
        cumulative = np.cumsum(target)
        drawn = np.minimum(np.searchsorted(cumulative, rng.random(n_trials) * cumulative[-1], side="right"),
                           points.shape[0] - 1)
        trials = np.append(drawn, np.argmax(target))
        d2 = points_sq[None, :] - 2.0 * points[trials] @ points.T + points_sq[trials][:, None]
        np.maximum(d2, 0.0, out=d2)
        np.minimum(d2, closest[None, :], out=d2)
        best = int(np.argmin(d2 @ weights))
        centers[c] = points[trials[best]]
        closest = d2[best]
    return centers
