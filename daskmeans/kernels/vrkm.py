"""The inner loop of VRKM and VRKM++ (Zhao et al., Algorithms 3 and 4), and the candidate lists that make it fast.

Each step takes the next sample row ``x`` with its snapshot label ``a`` (its nearest center in the epoch's full
pass), finds the nearest center ``j`` in the current centers ``C_t`` and, when ``j != a``, moves::

    c_j -= eta * (c_j - x)            # the stochastic gradient at C_t ...
    c_a += eta * (c~new_a - x)        # ... minus the same gradient at the snapshot C~new
    C   -= eta * G                    # VRKM only: the batch gradient at C~new (VRKM++: G = 0)

When ``j == a`` the paper leaves the centers unchanged (``agree_rule="paper"``); the authors' code instead moves
``c_a -= eta * (c_a - c~new_a)`` (``agree_rule="reference"``).

Finding ``j`` without computing all k distances: each sampled row comes with its ``m`` nearest *reference*
centers (its candidates; the reference is the centers of the epoch's pass, or the centers when a segment's lists
were remade) and a lower bound ``l`` on its distance to every other reference center. A center that has drifted by
``delta_j`` from its reference position is at least ``l - delta_j`` away, so only the candidates and the few
centers that drifted more than ``l - best`` need their distance computed. Centers are kept sorted by drift, so that
set is found without looking at the others. Distances are computed in the data's dtype (SIMD) and the winner is
decided in float64 among those within the rounding bound of the smallest: the result is the nearest center
exactly as a direct float64 search over all k centers finds it (lowest index on ties), on any machine, whatever
the lists. The lists come from one batched GEMM per block in the full pass: a partial-distance or
triangle-inequality search from scratch at every step cannot rule out many centers in high dimension, where the
distances to the centers are all alike, and would cost nearly k distances per step.

The batch gradient is applied lazily: the centers are kept as ``C_t = B - m * E`` with ``E = eta * G`` and ``m`` the
number of steps that changed the centers so far, so a VRKM step costs O(d), not O(k d).
"""

from __future__ import annotations

import numba
import numpy as np

from .. import config
from .distance import exact_dist2, pair_dist2
from .vrkm_steps import MOVED_BOTH, MOVED_NONE, InnerLoopState, check_inner_loop_inputs, take_step


def rounding_bound(dtype, n_features: int) -> float:
    """Relative rounding-error bound of a length-``n_features`` sum of products in ``dtype`` (any order, with or
    without FMA), with a little slack."""
    unit = np.finfo(dtype).eps / 2
    terms = n_features + 3
    return 1.01 * terms * unit / (1 - terms * unit)


# -- candidate lists (run in the full pass, per block) ----------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _select_smallest(cross, centers_sq, keep, candidates, bound_scores, first_row):
    """For each row of a slab, the ``keep`` centers of smallest ``||c||^2 - 2 x.c`` (ascending, lowest index first
    on ties) and the next smallest score (``inf`` when there is none)."""
    rows, k = cross.shape
    values = np.empty(keep + 1, dtype=np.float64)
    ids = np.empty(keep + 1, dtype=np.int32)
    for i in range(rows):
        filled = 0
        for j in range(k):
            score = centers_sq[j] - 2.0 * np.float64(cross[i, j])
            if filled < keep + 1:
                p = filled
                filled += 1
            elif score < values[keep]:
                p = keep
            else:
                continue
            while p > 0 and values[p - 1] > score:
                values[p] = values[p - 1]
                ids[p] = ids[p - 1]
                p -= 1
            values[p] = score
            ids[p] = j
        for q in range(keep):
            candidates[first_row + i, q] = ids[q]
        bound_scores[first_row + i] = values[keep] if filled > keep else np.inf


def candidate_lists(X, centers, n_candidates, slab_bytes=None):
    """Nearest center, its distance, the ``n_candidates`` nearest centers and a distance bound for every row.

    Parameters
    ----------
    X : ndarray (n, d), float32 or float64
    centers : ndarray (k, d)
        Cast to the dtype of ``X``.
    n_candidates : int
        Centers listed per row (at most k).
    slab_bytes : int, optional
        Most bytes of GEMM scores held at once; None: :data:`~daskmeans.config.VRKM_SLAB_BYTES`, read at call time.

    Returns
    -------
    labels : int32 (n,)
        Nearest center (the first candidate).
    dist2 : float64 (n,)
        Squared distance to it, computed directly.
    candidates : int32 (n, min(n_candidates, k))
        The nearest centers, nearest first.
    lower : float64 (n,)
        A lower bound on the distance (not squared) of the row to every center not in its list; ``inf`` when the
        list holds every center. It allows for the rounding of the float GEMM that ranks the centers.
    """
    X = np.ascontiguousarray(X)
    centers = np.ascontiguousarray(centers, dtype=X.dtype)
    n, d = X.shape
    k = centers.shape[0]
    keep = int(min(n_candidates, k))
    candidates = np.empty((n, keep), dtype=np.int32)
    bound_scores = np.empty(n, dtype=np.float64)
    if n == 0:
        return np.empty(0, np.int32), np.empty(0, np.float64), candidates, bound_scores
    centers64 = centers.astype(np.float64)
    centers_sq = np.einsum("ij,ij->i", centers64, centers64)
    slab_bytes = config.VRKM_SLAB_BYTES if slab_bytes is None else slab_bytes
    row_step = max(1, min(n, slab_bytes // (k * X.dtype.itemsize)))
    cross = np.empty((row_step, k), dtype=X.dtype)
    for r0 in range(0, n, row_step):
        r1 = min(n, r0 + row_step)
        out = cross[: r1 - r0]
        np.matmul(X[r0:r1], centers.T, out=out)
        _select_smallest(out, centers_sq, keep, candidates, bound_scores, r0)
    labels = np.ascontiguousarray(candidates[:, 0])
    dist2 = exact_dist2(X, centers, labels)
    X64 = X.astype(np.float64)
    x_sq = np.einsum("ij,ij->i", X64, X64)
    # the GEMM score of a center is off by at most gamma * ||x|| * ||c|| (twice, as it enters as -2 x.c)
    slack = 2.0 * rounding_bound(X.dtype, d) * np.sqrt(x_sq) * np.sqrt(centers_sq.max())
    slack += 8 * np.finfo(np.float64).eps * (x_sq + centers_sq.max())
    with np.errstate(invalid="ignore"):
        lower = np.sqrt(np.maximum(bound_scores + x_sq - 2.0 * slack, 0.0))
    lower[np.isinf(bound_scores)] = np.inf
    return labels, dist2, candidates, lower


# -- the inner loop --------------------------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True, fastmath=True)
def _approx_dist2(x, center):
    """Squared distance in the data's dtype, vectorised (rounding bounded by :func:`rounding_bound`)."""
    s = center[0] * 0
    for f in range(x.shape[0]):
        t = x[f] - center[f]
        s += t * t
    return s


@numba.njit(cache=True, nogil=True)
def _exact_dist2(x, base, shift, j, steps_taken, shifted, center):
    """``||x - (B_j - m E_j)||^2`` (:func:`~daskmeans.kernels.distance.pair_dist2`).

    Parameters
    ----------
    x, base, shift, j, steps_taken, shifted : IN
        The row, the lazy centers ``B`` and ``E``, the center, ``m``, and whether center ``j`` moves with ``E``.
    center : OUT float64 (d,)
        Scratch: the shifted center.
    """
    if not shifted:
        return pair_dist2(x, base[j])
    m = np.float64(steps_taken)
    for f in range(x.shape[0]):
        center[f] = np.float64(base[j, f]) - m * np.float64(shift[j, f])
    return pair_dist2(x, center)


@numba.njit(cache=True, nogil=True, inline="always")
def _contender_dist2(x, base, shift, j, steps_taken, shift_norm, counters, center):
    """Squared distance to candidate ``j``: exact when it moved since the pass, approximate otherwise (counted).

    Parameters
    ----------
    x, base, shift, j, steps_taken, shift_norm : IN
        As :func:`_exact_dist2` (``shift_norm``: each center's ``||E_j||``).
    counters : IN-OUT int64 (5,)
        The distance counts (see :func:`_steps`).
    center : OUT float64 (d,)
        Scratch.
    """
    if shift_norm[j] > 0.0:
        counters[4] += 1
        return _exact_dist2(x, base, shift, j, steps_taken, True, center)
    counters[3] += 1
    return np.float64(_approx_dist2(x, base[j]))


@numba.njit(cache=True, nogil=True)
def _drift(base, reference, j):
    s = 0.0
    for f in range(base.shape[1]):
        t = np.float64(base[j, f]) - np.float64(reference[j, f])
        s += t * t
    return np.sqrt(s)


@numba.njit(cache=True, nogil=True)
def _resort(j, drift, order, where):
    """Move center ``j`` to its place in ``order`` (centers by decreasing drift) after its drift changed."""
    p = where[j]
    k = order.shape[0]
    while p > 0 and drift[order[p - 1]] < drift[j]:
        order[p] = order[p - 1]
        where[order[p]] = p
        p -= 1
    while p < k - 1 and drift[order[p + 1]] > drift[j]:
        order[p] = order[p + 1]
        where[order[p]] = p
        p += 1
    order[p] = j
    where[j] = p


@numba.njit(cache=True, nogil=True)
def _moved(j, base, reference, drift, order, where):
    drift[j] = _drift(base, reference, j)
    _resort(j, drift, order, where)


@numba.njit(cache=True, nogil=True)
def _steps(
    rows,
    labels,
    candidates,
    lower,
    base,
    snapshot,
    reference,
    reference_steps,
    shift,
    shift_norm,
    eta,
    steps_taken,
    agree_reference,
    rho,
    drift,
    order,
    where,
    seen,
    contenders,
    contender_dist,
    counters,
    max_cost,
    cost_window,
):
    """Run one step per row, in order; see the module docstring.

    ``counters``: steps, changing steps, steps moving a center under the reference agree rule, distances computed
    (in the data's dtype), distances computed in float64. When ``max_cost > 0``, stop early once a window of
    ``cost_window`` steps needed more than ``max_cost`` distances per step on average.

    Parameters
    ----------
    rows, labels, candidates, lower : IN (t, d), (t,), (t, m), float64 (t,)
        The sampled rows, their snapshot labels, candidate lists and bounds on the unlisted centers.
    base : IN-OUT (k, d)
        ``B`` of the lazy centers ``C_t = B - m E``: the steps move it.
    snapshot, shift, shift_norm, eta, agree_reference, rho : IN
        ``C~new``, ``E``, each ``||E_j||``, the learning rate, the agree rule, the rounding bound.
    reference, reference_steps : IN
        The centers the lists were made against, and ``m`` then.
    steps_taken : IN int
        ``m`` before the first row; the new value is returned.
    drift, order, where : IN-OUT float64 (k,), int64 (k,), int64 (k,)
        Each center's drift from the reference, the centers by decreasing drift, each center's place in it.
    seen, contenders, contender_dist : IN-OUT (k,)
        Scratch of the steps (``seen``: the step that last looked at each center).
    counters : IN-OUT int64 (5,)
        The counts above.
    max_cost, cost_window : IN
        The early stop above.

    Returns
    -------
    next_row : int
        Rows processed.
    steps_taken : int
        Changing steps so far (``m``).
    """
    k, d = base.shape
    n_listed = candidates.shape[1]
    max_shift = 0.0
    for j in range(k):
        max_shift = max(max_shift, shift_norm[j])
    step_count = np.empty(1, dtype=base.dtype)  # the step count in the centers' dtype: updates stay in it
    center = np.empty(d, dtype=np.float64)  # a center moved by the batch gradient, for its exact distance
    grow = (1.0 + rho) / (1.0 - rho)
    window_cost = counters[3] + counters[4]
    for i in range(rows.shape[0]):
        if max_cost > 0 and i > 0 and i % cost_window == 0:
            spent = counters[3] + counters[4] - window_cost
            if spent > max_cost * cost_window:
                return i, steps_taken
            window_cost = counters[3] + counters[4]
        x = rows[i]
        a = np.int64(labels[i])
        m = np.float64(steps_taken)
        stamp = counters[0] + 1  # marks the centers looked at in this step

        # the candidates from the pass
        n_cont = 0
        best_approx = np.inf
        for q in range(n_listed):
            j = np.int64(candidates[i, q])
            seen[j] = stamp
            value = _contender_dist2(x, base, shift, j, steps_taken, shift_norm, counters, center)
            contenders[n_cont] = j
            contender_dist[n_cont] = value
            n_cont += 1
            best_approx = min(best_approx, value)

        # the centers that drifted too far since the pass to be ruled out by the bound
        for p in range(k):
            j = order[p]
            reach = np.sqrt(best_approx / (1.0 - rho)) * (1.0 + 1e-12)  # >= the nearest distance
            if lower[i] - (drift[j] + (m - reference_steps) * max_shift) * (1.0 + 1e-12) > reach:
                break
            if seen[j] == stamp:
                continue
            seen[j] = stamp
            value = _contender_dist2(x, base, shift, j, steps_taken, shift_norm, counters, center)
            contenders[n_cont] = j
            contender_dist[n_cont] = value
            n_cont += 1
            best_approx = min(best_approx, value)

        # decide in float64 among the contenders within rounding of the best
        limit = best_approx * grow
        best = np.inf
        best_j = -1
        for q in range(n_cont):
            if contender_dist[q] > limit:
                continue
            j = contenders[q]
            value = _exact_dist2(x, base, shift, j, steps_taken, shift_norm[j] > 0.0, center)
            counters[4] += 1
            if value < best or (value == best and j < best_j):
                best = value
                best_j = j

        steps_taken, moved = take_step(
            x, a, best_j, base, snapshot, shift, eta, steps_taken, agree_reference, step_count, counters
        )
        if moved == MOVED_BOTH:
            _moved(best_j, base, reference, drift, order, where)
        if moved != MOVED_NONE:
            _moved(a, base, reference, drift, order, where)
    return rows.shape[0], steps_taken


class InnerLoop(InnerLoopState):
    """The state of one epoch's inner loop, fed the sample in one or more consecutive segments.

    Parameters
    ----------
    snapshot_centers : ndarray (k, d), float32 or float64
        ``C~new``, the position-corrected centers; the loop starts from ``C_0 = C~new``.
    eta : float
        The constant learning rate.
    batch_gradient : ndarray (k, d), optional
        ``G``, the batch gradient at ``C~new`` (VRKM): every changing step subtracts ``eta * G`` from all
        centers. None (or zeros) for VRKM++.
    agree_rule : {"paper", "reference"}
        What a step does when the nearest center is the snapshot label: nothing (paper), or
        ``c_a -= eta * (c_a - c~new_a)`` (the authors' code).
    reference_centers : ndarray (k, d), optional
        The centers the candidate lists of the first segments were made against (default ``C~new``); after
        :meth:`rebase` they are the centers of that moment.

    Examples
    --------
    >>> loop = InnerLoop(snapshot, eta=0.01)                                # doctest: +SKIP
    >>> for rows, labels in segments:                                      # doctest: +SKIP
    ...     loop.rebase()
    ...     _, _, candidates, lower = candidate_lists(rows, loop.centers(), 16)
    ...     loop.run(rows, labels, candidates, lower)
    >>> centers = loop.centers()                                           # doctest: +SKIP
    """

    def __init__(self, snapshot_centers, eta, *, batch_gradient=None, agree_rule="paper", reference_centers=None):
        self.snapshot, self.shift, self.eta, self.agree_reference = check_inner_loop_inputs(
            snapshot_centers, eta, batch_gradient, agree_rule
        )
        k, d = self.snapshot.shape
        dtype = self.dtype = self.snapshot.dtype
        self.base = self.snapshot.copy()
        shift64 = self.shift.astype(np.float64)
        self.shift_norm = np.sqrt(np.einsum("ij,ij->i", shift64, shift64))
        self.rho = rounding_bound(dtype, d)
        self.seen = np.zeros(k, dtype=np.int64)
        self.contenders = np.empty(k, dtype=np.int64)
        self.contender_dist = np.empty(k, dtype=np.float64)
        self.steps_taken = 0
        self.counters = np.zeros(5, dtype=np.int64)
        if reference_centers is None:
            self.rebase()
        else:
            reference = np.ascontiguousarray(reference_centers, dtype=dtype)
            if reference.shape != (k, d):
                raise ValueError(f"reference_centers has shape {reference.shape}, expected {(k, d)}.")
            self._set_reference(reference.copy())

    def _set_reference(self, reference):
        self.reference = reference
        self.reference_steps = self.steps_taken
        diff = self.base.astype(np.float64) - reference
        self.drift = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        self.order = np.argsort(-self.drift, kind="stable").astype(np.int64)
        self.where = np.empty_like(self.order)
        self.where[self.order] = np.arange(self.order.size)

    def rebase(self):
        """Declare that the candidate lists of the next rows are made against the current centers."""
        # kept in the lazy form: the reference is B, and the batch-gradient drift counts from this step on
        self._set_reference(self.base.copy())
        return self

    def run(self, rows, labels, candidates, lower, *, max_cost=None):
        """Take one step per row of ``rows``, in order.

        Parameters
        ----------
        rows : ndarray (t, d)
            The sampled rows (cast to the centers' dtype).
        labels : int array (t,)
            Their snapshot labels (nearest center in the pass).
        candidates : int array (t, m)
            Their nearest reference centers (from :func:`candidate_lists`).
        lower : float64 array (t,)
            Lower bounds of their distance to the reference centers not in their list.
        max_cost : float, optional
            Stop early once the steps need more than this many distance computations each (averaged over
            :data:`~daskmeans.config.VRKM_COST_WINDOW` steps, read at call time): the centers have drifted too
            far from the reference for the lists to help.

        Returns
        -------
        int
            The number of rows processed (all of them unless ``max_cost`` stopped the loop).
        """
        rows = np.ascontiguousarray(rows, dtype=self.dtype)
        labels = np.ascontiguousarray(labels, dtype=np.int32)
        candidates = np.ascontiguousarray(candidates, dtype=np.int32)
        lower = np.ascontiguousarray(lower, dtype=np.float64)
        k, d = self.base.shape
        t = rows.shape[0]
        if (
            rows.ndim != 2
            or rows.shape[1] != d
            or labels.shape != (t,)
            or lower.shape != (t,)
            or candidates.ndim != 2
            or candidates.shape[0] != t
        ):
            raise ValueError(
                f"run() needs rows (t, {d}), labels (t,), candidates (t, m) and lower (t,); got "
                f"{rows.shape}, {labels.shape}, {candidates.shape} and {lower.shape}."
            )
        for name, values in (("labels", labels), ("candidates", candidates)):
            if values.size and (values.min() < 0 or values.max() >= k):
                raise ValueError(f"{name} must lie in [0, {k}).")
        processed, self.steps_taken = _steps(
            rows,
            labels,
            candidates,
            lower,
            self.base,
            self.snapshot,
            self.reference,
            self.reference_steps,
            self.shift,
            self.shift_norm,
            self.eta,
            self.steps_taken,
            self.agree_reference,
            self.rho,
            self.drift,
            self.order,
            self.where,
            self.seen,
            self.contenders,
            self.contender_dist,
            self.counters,
            0.0 if max_cost is None else float(max_cost),
            max(1, int(config.VRKM_COST_WINDOW)),
        )
        return processed
