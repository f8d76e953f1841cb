"""The batched inner loop of VRKM and VRKM++: the steps of Algorithms 3 and 4, their nearest centers found a batch
of rows at a time by one GEMM.

The sample is cut into batches of ``batch_size`` consecutive draws (counted from the epoch's first draw, so the
cut does not depend on how the sample is streamed). At the start of a batch the current centers ``C_t`` are
materialized and every row of the batch gets its exact nearest center among them
(:func:`daskmeans.kernels.assign.nearest_centers`: GEMM scores, settled by exact distances where they cannot
decide, ties to the lowest index). The steps are then taken one row at a time, in draw order, with exactly the
update of the per-sample loop (:func:`daskmeans.kernels.vrkm_steps.take_step`); only the nearest center is that of the
batch's start instead of the step's. With ``batch_size = 1`` this is the paper's loop.

Why: in the per-sample loop every distance is a dot product computed alone, about 25 times the cost per distance
of a GEMM; a batch computes ``batch_size * k`` distances at the GEMM rate. The staleness it adds is small while
``eta`` times the rows a center gets in one batch (about ``eta * batch_size / k``) is small: the constant learning
rate ``eta = learning_rate * k / n`` keeps it below ``learning_rate * batch_size / n``.
"""

from __future__ import annotations

import numba
import numpy as np

from .assign import nearest_centers
from .vrkm_steps import InnerLoopState, check_inner_loop_inputs, take_step


@numba.njit(cache=True, nogil=True)
def batch_steps(rows, labels, nearest, base, snapshot, shift, eta, steps_taken, agree_reference, counters):
    """One step per row, in order, each with its given nearest center (:func:`~daskmeans.kernels.vrkm_steps.take_step`).

    Parameters
    ----------
    rows, labels, nearest : IN (t, d), (t,), (t,)
        The sampled rows, their snapshot labels, their nearest current centers.
    base : IN-OUT (k, d)
        ``B`` of the lazy centers: the steps move it.
    snapshot, shift, eta, steps_taken, agree_reference : IN
        As :func:`~daskmeans.kernels.vrkm_steps.take_step`.
    counters : IN-OUT int64 (5,)
        Steps, changing steps, agree-rule steps (and the distance counts, left as they are).

    Returns
    -------
    int
        ``m``, the changing steps so far.
    """
    step_count = np.empty(1, dtype=base.dtype)
    for i in range(rows.shape[0]):
        steps_taken, _ = take_step(
            rows[i],
            np.int64(labels[i]),
            np.int64(nearest[i]),
            base,
            snapshot,
            shift,
            eta,
            steps_taken,
            agree_reference,
            step_count,
            counters,
        )
    return steps_taken


class BatchedInnerLoop(InnerLoopState):
    """One epoch's batched inner loop, fed the sample in one or more consecutive segments.

    Parameters
    ----------
    snapshot_centers : ndarray (k, d), float32 or float64
        ``C~new``; the loop starts from ``C_0 = C~new``.
    eta : float
        The constant learning rate.
    batch_size : int
        Draws whose nearest centers are found together, against the centers at the batch's start.
    batch_gradient : ndarray (k, d), optional
        ``G`` (VRKM); None for VRKM++.
    agree_rule : {"paper", "reference"}
        As in :class:`~daskmeans.kernels.vrkm.InnerLoop`.
    """

    def __init__(self, snapshot_centers, eta, *, batch_size, batch_gradient=None, agree_rule="paper"):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}.")
        self.snapshot, self.shift, self.eta, self.agree_reference = check_inner_loop_inputs(
            snapshot_centers, eta, batch_gradient, agree_rule
        )
        self.base = self.snapshot.copy()
        self.batch_size = int(batch_size)
        self.steps_taken = 0
        self.counters = np.zeros(5, dtype=np.int64)
        self._batch_centers = None
        self._rows_done = 0

    def rebase(self):
        """Nothing to do: the batched loop keeps no candidate lists (kept for the interface of ``InnerLoop``)."""
        return self

    def run(self, rows, labels, candidates=None, lower=None, *, max_cost=None):
        """Take one step per row of ``rows``, in order, continuing the batch the last call left open.

        Parameters
        ----------
        rows : ndarray (t, d)
            The sampled rows (cast to the centers' dtype a batch at a time).
        labels : int array (t,)
            Their snapshot labels.
        candidates, lower, max_cost :
            Ignored (the interface of :meth:`daskmeans.kernels.vrkm.InnerLoop.run`).

        Returns
        -------
        int
            The number of rows processed: all of them.
        """
        rows = np.asarray(rows)  # converted a batch at a time
        labels = np.ascontiguousarray(labels, dtype=np.int32)
        k, d = self.base.shape
        t = rows.shape[0]
        if rows.ndim != 2 or rows.shape[1] != d or labels.shape != (t,):
            raise ValueError(f"run() needs rows (t, {d}) and labels (t,); got {rows.shape} and {labels.shape}.")
        if t and (labels.min() < 0 or labels.max() >= k):
            raise ValueError(f"labels must lie in [0, {k}).")
        start = 0
        while start < t:
            if self._rows_done % self.batch_size == 0:
                self._batch_centers = self.centers()
            stop = min(t, start + self.batch_size - self._rows_done % self.batch_size)
            batch = np.ascontiguousarray(rows[start:stop], dtype=self.snapshot.dtype)
            nearest, _ = nearest_centers(batch, self._batch_centers)
            self.counters[3] += (stop - start) * k
            self.steps_taken = batch_steps(
                batch,
                labels[start:stop],
                nearest,
                self.base,
                self.snapshot,
                self.shift,
                self.eta,
                self.steps_taken,
                self.agree_reference,
                self.counters,
            )
            self._rows_done += stop - start
            start = stop
        return t
