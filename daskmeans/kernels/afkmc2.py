"""AFK-MC2 seeding (Bachem, Lucic, Hassani & Krause, NIPS 2016) on weighted points: the Markov chains.

The proposal distribution is ``q(x) = 1/2 w_x d^2(x, c_1) / sum(w d^2) + 1/2 w_x / sum(w)``; every further
center is the last state of a Markov chain of ``chain_length`` proposals drawn from ``q``, where the chain moves
from ``x`` to the proposal ``y`` with probability ``min(1, (w_y d^2(y, C) q_x) / (w_x d^2(x, C) q_y))``
(``C``: the centers chosen so far). The proposals and the acceptance uniforms are drawn by the caller, so the
kernel is deterministic and the same draws give the same centers wherever it runs.
"""

from __future__ import annotations

import numba
import numpy as np

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
