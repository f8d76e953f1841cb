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

from .. import config
from .assign import all_dist2, nearest_centers
from .distance import dist2_to_point, pair_dist2
from .score_error import score_error_allowance

#: Chains per block: each proposal is measured pair by pair against the centers chosen earlier in its block (on
#: average half this many), and by the block's GEMM against all the centers chosen before it.
CHAINS_PER_BLOCK = 32


@numba.njit(cache=True, nogil=True)
def _nearest_by_scores(rows, centers, scores, allowance, out):
    """Exact squared distance from each row to its nearest center, the centers proposed by GEMM scores.

    ``scores[i, j] = ||c_j||^2 - 2 x_i . c_j`` (float64) for the first ``scores.shape[1]`` centers, each within
    ``allowance[i]`` of its exact value: every center whose score is within twice that of the row's best score
    is measured exactly (:func:`~daskmeans.kernels.distance.pair_dist2`), so the minimum is the one that measuring
    every center would give, to the last bit.
    """
    for i in range(rows.shape[0]):
        best_score = np.inf
        for j in range(scores.shape[1]):
            if scores[i, j] < best_score:
                best_score = scores[i, j]
        limit = best_score + 2.0 * allowance[i]
        best = np.inf
        for j in range(scores.shape[1]):
            if scores[i, j] <= limit:
                value = pair_dist2(rows[i], centers[j])
                if value < best:
                    best = value
        out[i] = best


@numba.njit(cache=True, nogil=True)
def _run_chains(
    candidates,
    candidate_weights,
    candidate_q,
    uniforms,
    chain_length,
    first_chain,
    stop_chain,
    known_d2,
    centers,
    chosen,
):
    """Run the chains ``first_chain .. stop_chain - 1`` (chain ``c`` picks center ``c``).

    ``known_d2[p]`` is the exact squared distance from the block's ``p``-th proposal to its nearest center among
    the first ``first_chain`` centers; the centers this block chooses are measured here, one pair at a time.

    Parameters
    ----------
    candidates, candidate_weights, candidate_q, uniforms : IN
        Every chain's proposals, their weights, proposal probabilities and acceptance uniforms
        (:func:`afkmc2_chains`).
    chain_length, first_chain, stop_chain : IN
        Proposals per chain; the chains to run.
    known_d2 : IN float64 ((stop_chain - first_chain) * chain_length,)
        The block's proposals' squared distances to the centers before ``first_chain``.
    centers : IN-OUT float64 (n_clusters, d)
        The centers chosen so far; row ``c`` is set by chain ``c``.
    chosen : OUT int64 (n_clusters - 1,)
        ``chosen[c - 1]``: the proposal chain ``c`` ends on.
    """
    offset = (first_chain - 1) * chain_length
    for c in range(first_chain, stop_chain):
        base = (c - 1) * chain_length
        x = base
        x_d2 = known_d2[x - offset]
        for j in range(first_chain, c):
            x_d2 = min(x_d2, pair_dist2(candidates[x], centers[j]))
        for step in range(1, chain_length):
            y = base + step
            y_d2 = known_d2[y - offset]
            for j in range(first_chain, c):
                y_d2 = min(y_d2, pair_dist2(candidates[y], centers[j]))
            numerator = candidate_weights[y] * y_d2 * candidate_q[x]
            denominator = candidate_weights[x] * x_d2 * candidate_q[y]
            # a state on a center (d^2 = 0) has target mass 0: any proposal with mass is taken
            if denominator <= 0.0 or numerator >= uniforms[y] * denominator:
                x = y
                x_d2 = y_d2
        chosen[c - 1] = x
        for f in range(centers.shape[1]):
            centers[c, f] = np.float64(candidates[x, f])


def afkmc2_chains(
    candidates, candidate_weights, candidate_q, first_center, n_clusters, chain_length, uniforms, block_bytes=None
):
    """Run the ``n_clusters - 1`` Markov chains of AFK-MC2 over pre-drawn proposals.

    Chain ``c`` needs the distance from each of its proposals to the nearest of the ``c`` centers chosen before
    it. The chains run in blocks of consecutive chains: the distances of a block's proposals to the centers
    chosen before the block come from one float64 GEMM (scores settled exactly where they cannot decide,
    :func:`_nearest_by_scores`), the few centers chosen inside the block are measured pair by pair. Every
    distance is the exact :func:`~daskmeans.kernels.distance.pair_dist2` minimum, so the chains are those of the
    plain algorithm, decision for decision.

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
    block_bytes : int, optional
        Largest score matrix of a block (its proposals against the centers chosen before it); None:
        :data:`~daskmeans.config.RECLUSTER_SLAB_BYTES`, read at call time.

    Returns
    -------
    centers : float64 (n_clusters, d)
    chosen : int64 (n_clusters - 1,)
        Index into ``candidates`` of each center after the first.
    n_distances : int
        Distance evaluations of the algorithm (one per proposal and center chosen before its chain).
    """
    n_clusters, chain_length = int(n_clusters), int(chain_length)
    block_bytes = config.RECLUSTER_SLAB_BYTES if block_bytes is None else block_bytes
    d = first_center.shape[0]
    centers = np.empty((n_clusters, d), dtype=np.float64)
    centers[0] = np.asarray(first_center, dtype=np.float64)
    chosen = np.empty(n_clusters - 1, dtype=np.int64)
    center_sq = np.empty(n_clusters, dtype=np.float64)
    center_sq[0] = float(centers[0] @ centers[0])
    first_chain = 1
    while first_chain < n_clusters:
        rows_fit = max(chain_length, int(block_bytes) // (8 * first_chain))
        stop_chain = min(n_clusters, first_chain + max(1, min(CHAINS_PER_BLOCK, rows_fit // chain_length)))
        block = np.ascontiguousarray(
            candidates[(first_chain - 1) * chain_length : (stop_chain - 1) * chain_length], dtype=np.float64
        )
        known = centers[:first_chain]
        scores = block @ known.T
        scores *= -2.0
        scores += center_sq[:first_chain]
        block_sq = np.einsum("ij,ij->i", block, block)
        allowance = score_error_allowance(block_sq, math.sqrt(float(center_sq[:first_chain].max())), d, np.float64)
        known_d2 = np.empty(block.shape[0], dtype=np.float64)
        _nearest_by_scores(block, known, scores, allowance, known_d2)
        _run_chains(
            candidates,
            candidate_weights,
            candidate_q,
            uniforms,
            chain_length,
            first_chain,
            stop_chain,
            known_d2,
            centers,
            chosen,
        )
        center_sq[first_chain:stop_chain] = np.einsum(
            "ij,ij->i", centers[first_chain:stop_chain], centers[first_chain:stop_chain]
        )
        first_chain = stop_chain
    n_distances = chain_length * (n_clusters - 1) * n_clusters // 2
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
    d2 = dist2_to_point(points, first_center)  # no float64 copy of the points (as large as a coreset)
    weighted = weights * d2
    total = float(weighted.sum())
    uniform_part = 0.5 * weights / weights.sum()
    if total <= 0.0:
        return uniform_part * 2.0
    return 0.5 * weighted / total + uniform_part


def reduce_candidates(candidates, rows, row_weights, row_q, n_clusters, rng):
    """Keep ``n_clusters`` of the chains' candidates: ``(centers, distance evaluations)``.

    Each candidate's mass is the weight of the rows that have it as their nearest candidate, each row counting
    ``w / q``: the chains' proposals (i.i.d. draws from ``q``) estimate it, all the points (``q = 1``) give it
    exactly. Weighted greedy k-means++ on the distinct candidates (:func:`greedy_kmeans_plusplus_with_mode`) then
    picks ``n_clusters`` of them.

    Parameters
    ----------
    candidates : ndarray (n_candidates, d)
        The chains' centers, with at least ``n_clusters`` distinct rows.
    rows, row_weights, row_q : ndarray (n_rows, d), (n_rows,), (n_rows,)
        The rows that measure the masses, their weights and their ``q``: the proposals with theirs, or all the
        points with ``q = 1``.
    n_clusters : int
    rng : numpy.random.Generator
    """
    candidates = np.asarray(candidates, dtype=np.float64)
    _, first_of = np.unique(candidates, axis=0, return_index=True)
    distinct = candidates[np.sort(first_of)]  # in the order the chains chose them
    rows = np.asarray(rows)
    # the exact nearest candidate (GEMM in the data's precision, settled exactly; float32 for small integers)
    compute = rows.dtype if rows.dtype in (np.float32, np.float64) else np.float32
    nearest, _ = nearest_centers(np.ascontiguousarray(rows, dtype=compute), distinct.astype(compute))
    row_weights, row_q = np.asarray(row_weights, dtype=np.float64), np.asarray(row_q, dtype=np.float64)
    mass = np.bincount(nearest, weights=row_weights / row_q, minlength=distinct.shape[0])
    # a candidate that is a proposal has its own row (distance 0); the first center may be none: the least mass
    mass = np.where(mass > 0, mass, mass[mass > 0].min())
    n_trials = 2 + int(math.log(n_clusters))
    centers = greedy_kmeans_plusplus_with_mode(distinct, mass, n_clusters, rng, n_trials)
    n_distances = rows.shape[0] * distinct.shape[0] + distinct.shape[0] * (1 + (n_trials + 1) * (n_clusters - 1))
    return centers, n_distances


def greedy_kmeans_plusplus_with_mode(points, weights, n_clusters, rng, n_trials, matrix_bytes=None):
    """Greedy k-means++ on a few weighted points whose trials always include the point of largest ``w d^2``.

    With only ``n_trials`` random trials, the last uncovered clusters (small ``w d^2`` mass next to that of the
    many near-copies of chosen centers) are missed with high probability; the mode of ``w d^2`` is such a
    cluster's candidate, and it is kept only if it lowers the weighted potential most, as greedy k-means++ asks.

    The squared distances between the points come from one GEMM (:func:`~daskmeans.kernels.assign.all_dist2`)
    when their matrix takes at most ``matrix_bytes``, and the greedy steps then only look them up
    (:func:`_greedy_steps`); more points than that (k in the tens of thousands) get each step's trial rows from a
    GEMM of their own.

    Parameters
    ----------
    points : float64 (m, d)
        Distinct points, at least ``n_clusters`` of positive weight.
    weights : float64 (m,)
    n_clusters, n_trials : int
    rng : numpy.random.Generator
        Draws the first point, then ``n_trials`` uniforms per further center.
    matrix_bytes : int, optional
        Largest matrix of the points' squared distances computed at once; None:
        :data:`~daskmeans.config.GREEDY_DISTANCE_MATRIX_BYTES`, read at call time.

    Returns
    -------
    float64 (n_clusters, d)
    """
    points = np.ascontiguousarray(points, dtype=np.float64)
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    m = points.shape[0]
    first = int(rng.choice(m, p=weights / weights.sum()))
    uniforms = rng.random((max(n_clusters - 1, 0), n_trials))
    if 8 * m * m <= (config.GREEDY_DISTANCE_MATRIX_BYTES if matrix_bytes is None else matrix_bytes):
        d2 = all_dist2(points, points)
        np.fill_diagonal(d2, 0.0)
        chosen = np.empty(n_clusters, dtype=np.int64)
        _greedy_steps(d2, weights, first, uniforms, chosen)
        return points[chosen]
    points_sq = np.einsum("ij,ij->i", points, points)
    centers = np.empty((n_clusters, points.shape[1]))
    centers[0] = points[first]
    closest = np.maximum(points_sq - 2.0 * points @ points[first] + points_sq[first], 0.0)
    closest[first] = 0.0
    for c in range(1, n_clusters):
        target = weights * closest
        cumulative = np.cumsum(target)
        drawn = np.minimum(np.searchsorted(cumulative, uniforms[c - 1] * cumulative[-1], side="right"), m - 1)
        trials = np.append(drawn, np.argmax(target))
        d2 = points_sq[None, :] - 2.0 * points[trials] @ points.T + points_sq[trials][:, None]
        np.maximum(d2, 0.0, out=d2)
        d2[np.arange(trials.shape[0]), trials] = 0.0
        np.minimum(d2, closest[None, :], out=d2)
        best = int(np.argmin(d2 @ weights))
        centers[c] = points[trials[best]]
        closest = d2[best]
    return centers


@numba.njit(cache=True, nogil=True)
def _greedy_steps(d2, weights, first, uniforms, chosen):
    """The greedy k-means++ steps of :func:`greedy_kmeans_plusplus_with_mode` on the points' distance matrix.

    ``chosen[0] = first``; step ``c`` tries the points that ``uniforms[c - 1]`` draw from ``w d^2`` (searched in
    its running sum as ``numpy.searchsorted(..., side="right")``) and then the first point of largest ``w d^2``,
    and keeps the first trial of least weighted potential.
    """
    m = d2.shape[0]
    closest = d2[first].copy()
    cumulative = np.empty(m)
    chosen[0] = first
    for c in range(1, chosen.shape[0]):
        total = 0.0
        mode = 0
        mode_mass = -1.0
        for i in range(m):
            mass = weights[i] * closest[i]
            total += mass
            cumulative[i] = total
            if mass > mode_mass:
                mode_mass = mass
                mode = i
        best = -1
        best_potential = np.inf
        for t in range(uniforms.shape[1] + 1):
            if t < uniforms.shape[1]:
                trial = min(np.searchsorted(cumulative, uniforms[c - 1, t] * total, side="right"), m - 1)
            else:
                trial = mode
            potential = 0.0
            for i in range(m):
                potential += weights[i] * min(d2[trial, i], closest[i])
            if potential < best_potential:
                best_potential = potential
                best = trial
        chosen[c] = best
        for i in range(m):
            closest[i] = min(d2[best, i], closest[i])
