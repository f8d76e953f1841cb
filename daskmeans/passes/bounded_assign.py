"""The assign + stats pass of exact k-means with distance bounds: per-block state persisted on the workers.

The first pass assigns every row exactly and keeps, per row block, the rows (as stored when they are integers of
up to 16 bits, else as computed: :func:`kept_rows`), their labels, exact squared distances and one lower bound per
group of centers. Each later pass revisits a block with the new centers
(:func:`daskmeans.kernels.revisit.revisit_with_bounds`): only the centers the bounds cannot rule out are scored,
and the labels stay the exact nearest centers. Every pass then computes the block's full statistics from its
labels (the same :func:`daskmeans.kernels.stats.cluster_stats` and the same tree reduction as
:func:`daskmeans.passes.assign.assign_stats_graph`), so the sums are those of a plain Lloyd pass over the same
blocks, to the last bit, and never accumulate rounding across iterations. A block of integer rows without weights
keeps its sums instead and moves only the rows that changed cluster (:func:`keeps_sums`): exact in float64, so the
same sums to the last bit, without a read of every row once few rows change cluster.

Memory: the state costs :func:`state_bytes_per_row` per row on the workers, on top of the persisted data. A
revisit writes the new labels, distances and bounds into the arrays of the state two passes back, once that state
is freed (:class:`~daskmeans.engine.recycle.Recycler`): between passes a block holds one such set more than its
state, which a revisit held anyway while it ran (the old state and the new), so the peak does not grow.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..engine.client import keep_and_reduce, resolve_client, submit_now
from ..engine.graph import block_args, chained_group_pass, map_blocks_delayed, reduce_in_tree, shared
from ..engine.grouped import group_pass, in_groups, revisit_group, run_group_keeping_states
from ..engine.recycle import RecycledState, Recycler
from ..engine.slabs import compute_dtype, converted_rows
from ..kernels.exact_assign import assign_with_bounds
from ..kernels.packed_bounds import LOWER_BYTES
from ..kernels.revisit import revisit_with_bounds
from ..kernels.stats import cluster_sse, cluster_stats, move_rows
from .assign import _combine_stats, _farthest_eligible, block_energy, far_rows, finish_stats, stats_part_bytes


def state_bytes_per_row(n_features: int, n_groups: int, itemsize: int = 4) -> int:
    """Worker memory one row's state takes: the row (``itemsize`` bytes a value: as computed, or as stored for
    integers up to 16 bits, :func:`kept_rows`), label, distance, weight (or its share of the block's kept sums,
    :func:`keeps_sums`) and group bounds (16 bits each)."""
    return int(n_features * itemsize + 4 + 8 + 8 + LOWER_BYTES * n_groups)


def keeps_sums(rows, weights, k) -> bool:
    """Whether a block keeps its clusters' sums and counts between passes, moving only the rows that changed
    cluster (:func:`~daskmeans.kernels.stats.move_rows`): rows of integers kept as stored and no weights (every
    update is then exact), and sums that take no more than the weights the block does not hold (``k (d + 1)``
    float64 values for at least as many rows).

    Examples
    --------
    >>> keeps_sums(np.zeros((37_500, 128), dtype=np.uint8), None, 256)
    True
    >>> keeps_sums(np.zeros((37_500, 128), dtype=np.float32), None, 256)
    False
    """
    return rows.dtype.kind in "iu" and weights is None and int(k) * (rows.shape[1] + 1) <= rows.shape[0]


class BoundedBlock(RecycledState):
    """The state of one row block: rows, weights, labels, exact squared distances, group lower bounds.

    ``recycler`` is shared by the states of one block's chain: a state that is freed leaves its labels, distances
    and bounds there for the next revisit to fill (:mod:`daskmeans.engine.recycle`).
    """

    __slots__ = ("rows", "weights", "labels", "dist2", "lower", "recycler", "kept_sums")

    def __init__(self, rows, weights, labels, dist2, lower, recycler=None):
        self.rows = rows
        self.weights = weights
        self.labels = labels
        self.dist2 = dist2
        self.lower = lower
        self.recycler = Recycler() if recycler is None else recycler
        self.kept_sums = None  # (sums, counts) of its labels where it keeps them (keeps_sums)

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state):
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)


def _block_stats(state, k, previous=None):
    """The block's sums, counts and SSE: moved from ``previous``'s kept sums by the rows that changed cluster
    where it kept them, else added up anew; kept in ``state`` where it keeps them (:func:`keeps_sums`)."""
    kept = None if previous is None else previous.kept_sums
    if kept is None:
        sums, counts, sse = cluster_stats(state.rows, state.labels, state.dist2, k, state.weights)
    else:
        sums, counts = kept[0].copy(), kept[1].copy()
        move_rows(state.rows, previous.labels, state.labels, sums, counts)
        sse = cluster_sse(state.labels, state.dist2, np.zeros(k))
    if not keeps_sums(state.rows, state.weights, k):
        return sums, counts, sse
    state.kept_sums = (sums, counts)
    return sums.copy(), counts.copy(), sse  # the report gets its own: what leaves the task never aliases the state


def _report(state, k, n_far, computed, previous=None):
    """The block's statistics in the form of the assign pass, plus the distances computed."""
    sums, counts, sse = _block_stats(state, k, previous)
    far_dist2, far_rows, far_labels, far_weights = _farthest_eligible(
        state.dist2, state.rows, state.labels, state.weights, n_far
    )
    far_rows = far_rows.astype(compute_dtype(far_rows.dtype), copy=False)  # as the plain pass reports them
    return (sums, counts, sse, (far_dist2, far_rows, far_labels, far_weights)), computed


def kept_dtype(stored_dtype) -> np.dtype:
    """The dtype of the rows a state keeps (:func:`kept_rows`) for rows stored as ``stored_dtype``."""
    stored_dtype = np.dtype(stored_dtype)
    computed = compute_dtype(stored_dtype)
    return stored_dtype if np.issubdtype(stored_dtype, np.integer) and computed == np.float32 else computed


def kept_rows(block) -> np.ndarray:
    """The rows a state keeps: a block stored as integers of up to 16 bits as it is (uint8 descriptors: a quarter
    of the bytes of float32, and the persisted block itself, not a copy), any other in the compute dtype."""
    block = np.asarray(block)
    if kept_dtype(block.dtype) == block.dtype and block.dtype.kind in "iu":
        return np.ascontiguousarray(block)
    return converted_rows(block, slice(None))


def _start_block(block, offset, weights, centers, groups, n_far):
    rows = kept_rows(block)
    weights = None if weights is None else np.asarray(weights, dtype=np.float64)
    labels, dist2, lower, _ = assign_with_bounds(rows, centers, groups)
    state = BoundedBlock(rows, weights, labels, dist2, lower)
    return state, _report(state, centers.shape[0], n_far, rows.shape[0] * centers.shape[0])


def _revisit_block(previous, centers, shift, groups, n_far):
    return _revisit_state(previous[0], centers, shift, groups, n_far)


def _revisit_state(state, centers, shift, groups, n_far):
    labels, dist2, lower, computed = revisit_with_bounds(
        state.rows, centers, state.labels, state.lower, shift, groups, dist2=state.dist2, out=state.empty_like_state()
    )
    revisited = BoundedBlock(state.rows, state.weights, labels, dist2, lower, state.recycler)
    return revisited, _report(revisited, centers.shape[0], n_far, computed, state)


def _start_block_carried(block, offset, weights, carried, groups, n_far):
    """:func:`_start_block` with the centers first in ``carried`` (:meth:`BoundedAssignment.submit_chained`)."""
    return _start_block(block, offset, weights, carried[0], groups, n_far)


def _revisit_state_carried(state, carried, groups, n_far):
    """:func:`_revisit_state` with the centers first in ``carried`` and the bound on their moves fourth (the
    update that ended the previous iteration, :func:`daskmeans.algorithms.lloyd._advance`)."""
    return _revisit_state(state, carried[0], carried[3], groups, n_far)


def _output_energy(output):
    return block_energy(output[1][0])


def _report_of(output):
    return output[1]


def _combine_reports(parts, n_far):
    stats = _combine_stats([p[0] for p in parts], n_far)
    return stats, sum(p[1] for p in parts)


class BoundedAssignment:
    """Exact assignments of every row kept up to date with distance bounds, block by block on the workers.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    groups : CenterGroups
        The groups of centers that share a bound (fixed for the whole run).
    weights : dask.array.Array (n,), optional
        Chunked like ``array``.
    client : distributed.Client, optional
        None: the local threaded scheduler (the state then lives in this process).
    n_far : int, optional
        Farthest rows each block reports (candidates for empty clusters; default
        :func:`~daskmeans.passes.assign.far_rows` of the number of centers).
    driver : DriverCopy, optional
        ``array``'s blocks in this process (:class:`~daskmeans.engine.driver.DriverCopy`): :meth:`step` then runs
        the same block functions on them with :meth:`~daskmeans.engine.driver.DriverCopy.map`, without a Dask graph,
        and reduces the reports in the same tree.
    """

    def __init__(self, array, groups, *, weights=None, client=None, n_far=None, driver=None):
        self.array = array
        self.weights = weights
        self.groups = groups
        self.driver = driver
        self.client = client if client is not None or driver is not None else resolve_client(None)
        self.n_far = far_rows(len(groups.group_of)) if n_far is None else int(n_far)
        self.outputs = None
        self.layout = None  # groups of block reads and their tree level, when the passes run in groups

    def _run(self, outputs):
        """Keep ``outputs`` (block or group states) on the cluster and reduce their reports, in one submission."""
        outputs, (stats, computed) = keep_and_reduce(
            outputs, _report_of, self._combine(), "bounded-stats", self._part_bytes(), self.client
        )
        self.outputs = list(outputs)
        return finish_stats(stats), int(computed)

    def _combine(self):
        return partial(_combine_reports, n_far=self.n_far)

    def _part_bytes(self):
        return stats_part_bytes(len(self.groups.group_of), self.array.shape[1], self.n_far)

    def step(self, centers, shift=None):
        """Assign every row to ``centers`` (exactly) and return the pass's statistics.

        Parameters
        ----------
        centers : ndarray (k, d)
        shift : ndarray (k,), optional
            An upper bound of how far each center moved since the last step (ignored on the first).

        Returns
        -------
        stats : ClusterStats
            As :func:`daskmeans.passes.assign.finish_stats` gives for a plain assign pass.
        computed : int
            Distances computed (``n k`` on the first step, far fewer once the centers settle).
        """
        centers = np.ascontiguousarray(centers, dtype=self.array.dtype)
        if self.driver is not None:
            return self._step_on_driver(centers, shift)
        if self.outputs is None:
            self.layout = in_groups(block_args(self.array, self.weights), self.client, self._part_bytes())
        if self.layout is not None:
            return self._run(self._group_tasks(centers, shift))
        if self.outputs is None:
            parts = map_blocks_delayed(
                _start_block,
                "bounded-start",
                block_args(self.array, self.weights),
                shared(centers, "bounded-centers"),
                shared(self.groups, "bounded-groups"),
                self.n_far,
                reads_data=True,
                energy_of=_output_energy,
            )
        else:
            parts = map_blocks_delayed(
                _revisit_block,
                "bounded-revisit",
                [[o] for o in self.outputs],
                shared(centers, "bounded-centers"),
                shared(np.asarray(shift, dtype=np.float64), "bounded-shift"),
                shared(self.groups, "bounded-groups"),
                self.n_far,
                reads_data=True,
                energy_of=_output_energy,
            )
        return self._run(parts)

    def _group_tasks(self, centers, shift):
        """One task per group of blocks (:func:`~daskmeans.engine.grouped.in_groups`): the first pass reads each
        group's blocks in turn and keeps their states in its output, each later one revisits them there."""
        groups, levels = self.layout
        common = [shared(centers, "bounded-centers")]
        if self.outputs is None:
            runner, function, name, per_group = run_group_keeping_states, _start_block, "bounded-start", groups
        else:
            runner, function, name, per_group = revisit_group, _revisit_state, "bounded-revisit", self.outputs
            common.append(shared(np.asarray(shift, dtype=np.float64), "bounded-shift"))
        return group_pass(
            runner,
            function,
            name,
            per_group,
            *common,
            shared(self.groups, "bounded-groups"),
            self.n_far,
            combine=self._combine(),
            levels=levels,
            n_blocks=sum(len(group) for group in groups),
            energy_of=_output_energy,
        )

    def _step_on_driver(self, centers, shift):
        if self.outputs is None:
            outputs = self.driver.map(_start_block, self.driver.block_args, centers, self.groups, self.n_far)
        else:
            outputs = self.driver.map(
                _revisit_block,
                [[o] for o in self.outputs],
                centers,
                np.asarray(shift, dtype=np.float64),
                self.groups,
                self.n_far,
            )
        self.outputs = outputs
        stats, computed = reduce_in_tree([_report_of(o) for o in outputs], partial(_combine_reports, n_far=self.n_far))
        return finish_stats(stats), int(computed)

    def submit_chained(self, previous, start, placed, finish, finish_args, revisit=True):
        """Submit one pass whole as one task per group of blocks, chained to the pass before on the cluster
        (:func:`~daskmeans.engine.graph.chained_group_pass`), without waiting for it: the passes of iterations
        run ahead of the driver on blocks held by the workers. Each group's task keeps its blocks' states for
        the next pass; the statistics are those of :meth:`step` (the same kernels, the same reduction tree).

        Parameters
        ----------
        previous : GroupPass or None
            The submitted pass before this one, whose states this pass revisits; None: the first pass.
        start : tuple or None
            The value the blocks take, centers in the data's dtype first and (when revisiting) the bound on each
            center's move fourth; None: from ``previous``'s statistics by its own ``finish``.
        placed : tuple
            The groups of blocks and the worker of each (:func:`~daskmeans.engine.placement.placed_groups`), the
            same for every pass.
        finish, finish_args :
            ``finish((stats, computed), carried, *finish_args)``: the update that gives the next pass's
            ``carried`` (:func:`daskmeans.algorithms.lloyd._advance_with_bounds`).
        revisit : bool
            False: ``previous`` is a pass of another kind (a plain pass,
            :func:`~daskmeans.passes.assign.assign_stats_chained`) whose update gives this pass's centers, and this
            pass sets the bounds up.

        Returns
        -------
        GroupPass
            Submitted: futures.
        """
        if previous is None or not revisit:
            function, name, args = _start_block_carried, "bounded-start", block_args(self.array, self.weights)
        else:
            function, name, args = _revisit_state_carried, "bounded-revisit", None
        chained = chained_group_pass(
            function,
            name,
            args,
            self.groups,
            self.n_far,
            groups=placed[0],
            workers=placed[1],
            combine=partial(_combine_reports, n_far=self.n_far),
            finish=finish,
            finish_args=finish_args,
            previous=previous,
            start=start,
            keeps_state=True,
        )
        return chained.submitted(submit_now(*chained.objects(), client=self.client, placement=chained.placement))

    def release(self):
        """Drop the state blocks (the workers free their memory)."""
        self.outputs = None
