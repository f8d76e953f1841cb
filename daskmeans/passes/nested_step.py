"""One step of a state block of nmbatch's active batch: the block task that revisits its samples, adds its share
of the new rows and reports the changes of the running sums (:class:`~daskmeans.passes.nested_state.NestedBatch`
runs it on every block, on the workers or on the driver)."""

from __future__ import annotations

import numpy as np

from ..engine.recycle import RecycledState, Recycler
from ..engine.sizes import SizedSlots
from ..kernels.exact_assign import assign_with_bounds
from ..kernels.nested import batch_deltas
from ..kernels.packed_bounds import LOWER_DTYPE
from ..kernels.revisit import revisit_with_bounds


class BatchBlock(RecycledState):
    """One state block of the active batch.

    Attributes
    ----------
    rows : ndarray (m, d)
    index : int64 (m,)
        Global row index of each sample.
    labels : int32 (m,)
    dist2 : float64 (m,)
        Exact squared distance to the center the sample was last assigned to.
    lower : uint16 (m, n_groups)
        Group lower bounds (``(m, 0)`` without bounds).
    weights : float64 (m,)
        Sample weights (ones without ``sample_weight``).
    recycler : Recycler
        Shared by the block's states from pass to pass: a freed state leaves its labels, distances and bounds there
        for the revisit after next to fill (:mod:`daskmeans.engine.recycle`).
    """

    #: The per-row arrays, in the order of the constructor's arguments.
    FIELDS = ("rows", "index", "labels", "dist2", "lower", "weights")
    __slots__ = FIELDS + ("recycler",)

    def __init__(self, rows, index, labels, dist2, lower, weights, recycler=None):
        self.rows = rows
        self.index = index
        self.labels = labels
        self.dist2 = dist2
        self.lower = lower
        self.weights = weights
        self.recycler = Recycler() if recycler is None else recycler

    def __len__(self):
        return self.rows.shape[0]

    def half(self, which):
        """Every other sample, starting at ``which`` (0 or 1)."""
        part = slice(which, None, 2)
        return BatchBlock(
            np.ascontiguousarray(self.rows[part]),
            self.index[part].copy(),
            self.labels[part].copy(),
            self.dist2[part].copy(),
            np.ascontiguousarray(self.lower[part]),
            self.weights[part].copy(),
        )

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state):
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)


class StepOutput(SizedSlots):
    """What one state block task returns: the new block and its report (kept together on the worker)."""

    __slots__ = ("block", "report")

    def __init__(self, block, report):
        self.block = block
        self.report = report

    def __getstate__(self):
        return (self.block, self.report)

    def __setstate__(self, state):
        self.block, self.report = state


#: Counters in a report, in order.
COUNTERS = ("reused", "new", "changed", "computed", "skipped")


def _step_block(previous, half, pieces, centers, shift, groups, use_bounds, n_features):
    """Revisit a block's samples with the new centers, add its share of new rows, report the deltas.

    A block that grows gets its arrays once, at the new size: the revisit and the new rows' assignment fill their
    parts, and the old and the new rows are copied into it once (not gathered, then joined).
    """
    k = centers.shape[0]
    block = previous.block if previous is not None else None
    if block is not None and half is not None:
        block = block.half(half)
    block = block if block is not None and len(block) else None
    n_old = len(block) if block is not None else 0
    n_new = sum(b - a for _, a, b in pieces) if pieces else 0
    n_lower = groups.n_groups if use_bounds else 0
    # the changes of S, v, SSE and the members, and the counters, summed over the old and the new rows
    report = (
        np.zeros((k, n_features)),
        np.zeros(k),
        np.zeros(k),
        np.zeros(k, dtype=np.int64),
        np.zeros(len(COUNTERS), dtype=np.int64),
    )
    if n_old + n_new == 0:
        return StepOutput(
            BatchBlock(
                np.empty((0, n_features), dtype=centers.dtype),
                np.empty(0, dtype=np.int64),
                np.empty(0, dtype=np.int32),
                np.empty(0),
                np.empty((0, 0), dtype=LOWER_DTYPE),
                np.empty(0),
            ),
            report,
        )
    if n_new:
        rows_dtype = block.rows.dtype if block is not None else pieces[0][0][1].dtype
        grown = BatchBlock(
            np.empty((n_old + n_new, n_features), dtype=rows_dtype),
            np.empty(n_old + n_new, dtype=np.int64),
            np.empty(n_old + n_new, dtype=np.int32),
            np.empty(n_old + n_new),
            np.empty((n_old + n_new, n_lower), dtype=LOWER_DTYPE),
            np.empty(n_old + n_new),
            block.recycler if block is not None else None,
        )
        _copy_rows(grown, block, pieces, n_old)
    if block is not None:
        out = (grown.labels[:n_old], grown.dist2[:n_old], grown.lower[:n_old]) if n_new else block.empty_like_state()
        if use_bounds:
            labels, dist2, lower, computed = revisit_with_bounds(
                block.rows, centers, block.labels, block.lower, shift, groups, dist2=block.dist2, out=out
            )
        else:
            labels, dist2, lower, _ = assign_with_bounds(block.rows, centers, groups, with_bounds=False, out=out)
            computed = n_old * k
        *deltas, changed = batch_deltas(block.rows, block.labels, block.dist2, labels, dist2, k, block.weights)
        _add(report, deltas, (n_old, 0, changed, computed, max(0, n_old * k - computed)))
        if not n_new:
            return StepOutput(
                BatchBlock(block.rows, block.index, labels, dist2, lower, block.weights, block.recycler), report
            )
    new = slice(n_old, None)
    labels, dist2, _, _ = assign_with_bounds(
        grown.rows[new],
        centers,
        groups,
        with_bounds=use_bounds,
        out=(grown.labels[new], grown.dist2[new], grown.lower[new]),
    )
    empty = np.empty(0, dtype=np.int32)
    *deltas, _ = batch_deltas(grown.rows[new], empty, np.empty(0), labels, dist2, k, grown.weights[new])
    _add(report, deltas, (0, n_new, 0, n_new * k, 0))
    return StepOutput(grown, report)


def _add(report, deltas, counts):
    """Add the changes ``deltas`` (S, v, SSE, members) and the ``counts`` (:data:`COUNTERS`) to ``report``."""
    for total, value in zip(report, (*deltas, counts)):
        total += value


def _copy_rows(grown, block, pieces, n_old):
    """The rows, indices and weights of a grown block: the old block's first, then the pieces' rows ``a:b`` of each
    read ``(index, rows, weights)``, in order."""
    if block is not None:
        grown.rows[:n_old] = block.rows
        grown.index[:n_old] = block.index
        grown.weights[:n_old] = block.weights
    position = n_old
    for piece, a, b in pieces:
        stop = position + b - a
        grown.index[position:stop] = piece[0][a:b]
        grown.rows[position:stop] = piece[1][a:b]
        grown.weights[position:stop] = piece[2][a:b]
        position = stop


def _report_of(output):
    return output.report


def _combine_reports(parts):
    totals = [np.array(a, copy=True) for a in parts[0]]
    for other in parts[1:]:
        for total, value in zip(totals, other):
            total += value
    return tuple(totals)
