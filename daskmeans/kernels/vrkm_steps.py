"""The step of VRKM and VRKM++ (Zhao et al., Algorithms 3 and 4) that both inner loops take, and their shared state.

The centers are kept in the lazy form ``C_t = B - m E`` (``E = eta * G``, the batch gradient; ``m`` the changing
steps so far), so a VRKM step costs O(d), not O(k d). Used by the per-sample loop (:mod:`daskmeans.kernels.vrkm`)
and the batched one (:mod:`daskmeans.kernels.vrkm_batched`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

AGREE_RULES = ("paper", "reference")

MOVED_NONE, MOVED_BOTH, MOVED_SNAPSHOT_LABEL = 0, 1, 2


@numba.njit(cache=True, nogil=True, inline="always")
def take_step(x, a, j, base, snapshot, shift, eta, steps_taken, agree_reference, step_count, counters):
    """One step of Algorithm 3 or 4 for row ``x`` with snapshot label ``a`` whose nearest current center is ``j``,
    on the centers in the lazy form ``C_t = base - steps_taken * shift`` (``step_count``: scratch of the centers'
    dtype, so the update stays in it).

    Parameters
    ----------
    x, a, j, snapshot, shift, eta, steps_taken, agree_reference : IN
        The row, its snapshot label and nearest center, ``C~new``, ``E``, the learning rate, ``m``, the agree
        rule.
    base : IN-OUT (k, d)
        ``B``: rows ``j`` and ``a`` move.
    step_count : OUT (1,)
        Scratch.
    counters : IN-OUT int64 (5,)
        Steps, changing steps, agree-rule steps counted.

    Returns
    -------
    steps_taken : int
        ``m`` after the step (one more when the step changed the centers).
    moved : int
        ``MOVED_BOTH`` (centers ``j`` and ``a``), ``MOVED_SNAPSHOT_LABEL`` (center ``a``, the reference agree rule)
        or ``MOVED_NONE``.
    """
    d = base.shape[1]
    counters[0] += 1
    if j != a:
        step_count[0] = steps_taken
        m_cast = step_count[0]
        for f in range(d):
            current = base[j, f] - m_cast * shift[j, f]
            base[j, f] = base[j, f] - eta * (current - x[f])
            base[a, f] = base[a, f] + eta * (snapshot[a, f] - x[f])
        counters[1] += 1
        return steps_taken + 1, MOVED_BOTH
    if agree_reference:
        step_count[0] = steps_taken
        m_cast = step_count[0]
        for f in range(d):
            current = base[a, f] - m_cast * shift[a, f]
            base[a, f] = base[a, f] - eta * (current - snapshot[a, f])
        counters[2] += 1
        return steps_taken, MOVED_SNAPSHOT_LABEL
    return steps_taken, MOVED_NONE


@dataclass
class InnerLoopCounts:
    """What an inner loop did.

    Attributes
    ----------
    steps : int
        Samples processed.
    changed : int
        Steps whose nearest center differed from the snapshot label (they moved two centers).
    agree_updates : int
        Steps that moved the snapshot label's center under ``agree_rule="reference"``.
    distances : int
        Distances computed to find the nearest centers, over all steps (``k * steps`` for a full search).
    """

    steps: int = 0
    changed: int = 0
    agree_updates: int = 0
    distances: int = 0


def check_inner_loop_inputs(snapshot_centers, eta, batch_gradient, agree_rule):
    """The checked state an inner loop starts from.

    Returns
    -------
    snapshot : ndarray (k, d)
        A C-ordered copy of ``C~new`` (float32 or float64).
    shift : ndarray (k, d), dtype of ``snapshot``
        ``E = eta * G`` (zeros without a batch gradient).
    eta : scalar of the snapshot's dtype
    agree_reference : bool
        Whether ``agree_rule`` is the authors' ``"reference"``.

    Raises
    ------
    ValueError
        On centers that are not 2-D float, an unknown rule, a non-positive ``eta`` or a gradient of another shape.
    """
    snapshot = np.array(snapshot_centers, order="C", copy=True)
    if snapshot.ndim != 2 or snapshot.dtype not in (np.float32, np.float64):
        raise ValueError("snapshot_centers must be a 2-D float32 or float64 array.")
    if agree_rule not in AGREE_RULES:
        raise ValueError(f"agree_rule must be one of {AGREE_RULES}, got {agree_rule!r}.")
    if not (np.isfinite(eta) and eta > 0):
        raise ValueError(f"eta must be a positive finite number, got {eta!r}.")
    if batch_gradient is None:
        shift = np.zeros_like(snapshot)
    else:
        gradient = np.asarray(batch_gradient, dtype=np.float64)
        if gradient.shape != snapshot.shape:
            raise ValueError(f"batch_gradient has shape {gradient.shape}, expected {snapshot.shape}.")
        shift = np.ascontiguousarray(eta * gradient, dtype=snapshot.dtype)
    return snapshot, shift, snapshot.dtype.type(eta), agree_rule == "reference"


def lazy_centers(base, shift, steps_taken) -> np.ndarray:
    """``C_t = B - m E`` in the centers' dtype (a new array)."""
    if not np.any(shift):
        return base.copy()
    return (base - base.dtype.type(steps_taken) * shift).astype(base.dtype, copy=False)


class InnerLoopState:
    """What both inner loops keep: the centers in the lazy form (``base``, ``shift``, ``steps_taken``) and the
    counters (steps, changing steps, agree updates, distances in the data's dtype, distances in float64)."""

    base: np.ndarray
    shift: np.ndarray
    steps_taken: int
    counters: np.ndarray

    def centers(self) -> np.ndarray:
        """The current centers ``C_t`` (a new array)."""
        return lazy_centers(self.base, self.shift, self.steps_taken)

    def counts(self) -> InnerLoopCounts:
        steps, changed, agree_updates, approx, exact = (int(v) for v in self.counters)
        return InnerLoopCounts(steps, changed, agree_updates, approx + exact)
