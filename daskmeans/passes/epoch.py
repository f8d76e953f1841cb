"""The VRKM epoch pass: one read of every block gives the assignment statistics and the epoch's sample.

Every row is assigned to the current centers ``C~`` (per-cluster sums, counts and SSE, tree-reduced as in the
assign pass, so the energy comes free), and the rows at the epoch's drawn indices are gathered with their snapshot
labels. The draws are global row indices decided on the driver, so the sample depends on the seed and ``n`` only,
never on chunking.

Each sampled row also gets its candidate list (:func:`daskmeans.kernels.vrkm.candidate_lists`: its nearest
centers and a bound on its distance to the others), in place of its plain nearest center, so no row is compared
twice. The sample is cut into segments of consecutive draws, kept on the workers as one piece per (segment, block).
When the centers have moved too far from the pass's for those lists to help, :func:`segment_graph` remakes a
segment's lists against the centers of that moment, on the workers that hold its pieces.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from ..engine.graph import block_args, map_blocks_delayed, reduce_in_tree, shared, tree_reduce
from ..engine.slabs import compute_dtype, slabs
from ..kernels.assign import nearest_centers
from ..kernels.stats import cluster_stats
from ..kernels.vrkm import candidate_lists
from .assign import _combine_stats, _farthest_eligible, _merge_farthest, assigned_slabs, far_rows, farthest_of_slab


@dataclass
class EpochSample:
    """Sampled rows in draw order, with what the inner loop needs about each.

    Attributes
    ----------
    rows : ndarray (t, d)
        As stored (uint8 data stays uint8 until the inner loop converts it).
    labels : int32 (t,)
        Nearest center in the pass (the snapshot label).
    candidates : int32 (t, m)
        The ``m`` nearest of the centers given to :func:`segment_graph`, nearest first.
    lower : float64 (t,)
        Lower bound of the distance to every other of those centers.
    """

    rows: np.ndarray
    labels: np.ndarray
    candidates: np.ndarray
    lower: np.ndarray

    def as_tuple(self):
        return self.rows, self.labels, self.candidates, self.lower


def segment_starts(n_draws: int, segment_rows: int) -> np.ndarray:
    """First draw of each segment."""
    if n_draws == 0:
        return np.zeros(1, dtype=np.int64)
    return np.arange(0, n_draws, max(1, int(segment_rows)), dtype=np.int64)


def _labels_of_sampled(block, offset, weights, centers, sampled, stats, n_far):
    """Every row of a block assigned (added to ``stats``), slab by slab: the labels of the ``sampled`` rows (sorted
    positions in the block) with empty candidate lists, and each slab's far rows."""
    lists, far = [], []
    for start, slab, labels, dist2, w in assigned_slabs(block, offset, weights, centers, stats):
        lo, hi = np.searchsorted(sampled, [start, start + slab.shape[0]])
        here = sampled[lo:hi] - start
        lists.append((labels[here], np.empty((here.size, 0), np.int32), np.full(here.size, np.inf)))
        far.append(farthest_of_slab(dist2, slab, labels, w, n_far, centers.dtype))
    return lists, far


def _candidate_lists_of_sampled(block, weights, centers, sampled, stats, n_candidates, n_far):
    """:func:`_labels_of_sampled` with the sampled rows' candidate lists (``n_candidates`` nearest centers) for the
    per-sample inner loop: the sampled rows get lists, the others their nearest center (no row is compared twice)."""
    k = centers.shape[0]
    lists, far = [], []
    for start, slab, w in slabs(block, weights, reuse=True):  # nothing below keeps a view of the slab
        lo, hi = np.searchsorted(sampled, [start, start + slab.shape[0]])
        here = sampled[lo:hi] - start
        labels = np.empty(slab.shape[0], dtype=np.int32)
        dist2 = np.empty(slab.shape[0], dtype=np.float64)
        others = np.ones(slab.shape[0], dtype=bool)
        others[here] = False
        if here.size < slab.shape[0]:
            labels[others], dist2[others] = nearest_centers(slab[others], centers)
        s_labels, s_dist2, s_candidates, s_lower = candidate_lists(slab[here], centers, n_candidates)
        labels[here] = s_labels
        dist2[here] = s_dist2
        lists.append((s_labels, s_candidates, s_lower))
        cluster_stats(slab, labels, dist2, k, w, out=stats)
        far.append(_farthest_eligible(dist2, slab, labels, w, n_far))
    return lists, far


def block_draws(block_rows, draws):
    """The draws that fall in each block: per block, their positions in ``draws`` (sorted) and their rows in the
    block.

    Each block task gets only its own draws, so no task (and no worker) holds the draws of a whole pool.

    Parameters
    ----------
    block_rows : sequence of int
        Rows of each block (``array.chunks[0]``).
    draws : int array (t,)
        Global row indices, in step order (repeats allowed).

    Returns
    -------
    list of tuple
        ``(positions, local)`` per block: int64 positions in ``draws`` and int64 row indices within the block.

    Examples
    --------
    >>> import numpy as np
    >>> [(p.tolist(), r.tolist()) for p, r in block_draws([3, 3], np.array([4, 0, 2, 4]))]
    [([1, 2], [0, 2]), ([0, 3], [1, 1])]
    """
    draws = np.ascontiguousarray(draws, dtype=np.int64)
    ends = np.cumsum(np.asarray(block_rows, dtype=np.int64))
    offsets = ends - np.asarray(block_rows, dtype=np.int64)
    order = np.argsort(draws, kind="stable")
    sorted_rows = draws[order]
    lo, hi = np.searchsorted(sorted_rows, offsets), np.searchsorted(sorted_rows, ends)
    out = []
    for b in range(len(ends)):
        positions = np.sort(order[lo[b] : hi[b]])
        out.append((positions, draws[positions] - offsets[b]))
    return out


def _split_segments(positions, starts, rows, labels, candidates, lower):
    """One piece per segment of the sampled rows of a block (``positions`` sorted, so each segment is a slice)."""
    cuts = np.append(np.searchsorted(positions, starts), positions.size)
    return tuple(
        (positions[part], rows[part], labels[part], candidates[part], lower[part])
        for part in (slice(cuts[s], cuts[s + 1]) for s in range(len(starts)))
    )


def _epoch_block(block, offset, weights, positions, local, centers, starts, n_candidates, n_far):
    block = np.asarray(block)  # as stored
    rows = block[local]  # as stored: a quarter of the bytes of uint8 data as floats
    sampled, inverse = np.unique(local, return_inverse=True)
    k = centers.shape[0]
    stats = (np.zeros((k, block.shape[1])), np.zeros(k), np.zeros(k))
    if n_candidates == 0:
        lists, far = _labels_of_sampled(block, offset, weights, centers, sampled, stats, n_far)
    else:
        lists, far = _candidate_lists_of_sampled(block, weights, centers, sampled, stats, n_candidates, n_far)
    s_labels, s_candidates, s_lower = (np.concatenate([part[i] for part in lists])[inverse] for i in range(3))
    return (*stats, _merge_farthest(far, n_far)), _split_segments(
        positions, starts, rows, s_labels, s_candidates, s_lower
    )


def _sample_block(block, offset, weights, positions, local, centers, starts, n_candidates):
    """The drawn rows of a block with their labels against ``centers`` (and candidate lists), without the
    statistics of the block: the pass of a later pool of the epoch's sample."""
    rows = np.asarray(block)[local]  # as stored
    converted = np.ascontiguousarray(rows, dtype=compute_dtype(rows.dtype))
    if n_candidates == 0:
        labels, _ = nearest_centers(converted, centers)
        candidates, lower = np.empty((rows.shape[0], 0), np.int32), np.full(rows.shape[0], np.inf)
    else:
        labels, _, candidates, lower = candidate_lists(converted, centers, n_candidates)
    del converted
    return _split_segments(positions, starts, rows, labels.astype(np.int32, copy=False), candidates, lower)


def _stats_of(part):
    return part[0]


def _piece_of(part, segment):
    return part[1][segment]


def _pass_inputs(dtype, centers, draws, segment_rows, n_far):
    """The arguments every block of the epoch pass takes: the centers in the data's dtype, the draws, the first
    draw of each segment, the far rows kept."""
    centers = np.ascontiguousarray(centers, dtype=dtype)
    n_far = far_rows(centers.shape[0]) if n_far is None else int(n_far)
    draws = np.ascontiguousarray(draws, dtype=np.int64)
    return centers, draws, segment_starts(draws.size, segment_rows), n_far


def _with_draws(per_block, block_rows, draws):
    """Each block's arguments followed by the positions and rows of its own draws (:func:`block_draws`)."""
    return [[*args, *mine] for args, mine in zip(per_block, block_draws(block_rows, draws))]


def epoch_pass_graph(array, centers, draws, *, weights=None, segment_rows, n_candidates=16, n_far=None):
    """The delayed epoch pass of ``array`` against ``centers``, sampling the rows at ``draws``.

    Each block task gets only the draws that fall in its block, so what a worker holds grows with the draws of its
    blocks, never with all of them.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    draws : int array (t,)
        Global row indices, in step order (repeats allowed).
    weights : dask.array.Array (n,), optional
    segment_rows : int
        Draws per segment.
    n_candidates : int
        Candidate centers listed per sampled row; 0 lists none (the batched inner loop needs only the labels).
    n_far : int, optional
        Farthest rows kept for relocating empty clusters (default :func:`~daskmeans.passes.assign.far_rows` of k).

    Returns
    -------
    stats : Delayed
        Reduces to the assign pass's result (use :func:`daskmeans.passes.assign.finish_stats`).
    segments : list of list of Delayed
        ``segments[s][b]`` is block ``b``'s part of segment ``s``: ``(positions, rows, labels, candidates,
        lower)``, the candidate lists made against ``centers``.

    Examples
    --------
    >>> import dask
    >>> import dask.array as da
    >>> import numpy as np
    >>> X = da.from_array(np.arange(12.0).reshape(6, 2), chunks=(3, 2))
    >>> stats, segments = epoch_pass_graph(X, np.array([[0.0, 0.0], [10.0, 10.0]]), np.array([5, 0]), segment_rows=2)
    >>> [len(segment) for segment in segments]
    [2]
    >>> pieces = dask.compute(*segments[0])
    >>> ordered_segment(pieces, 0, 2).labels.tolist()
    [1, 0]
    """
    centers, draws, starts, n_far = _pass_inputs(array.dtype, centers, draws, segment_rows, n_far)
    parts = map_blocks_delayed(
        _epoch_block,
        "vrkm-epoch",
        _with_draws(block_args(array, weights), array.chunks[0], draws),
        shared(centers, "centers"),
        starts,
        int(n_candidates),
        n_far,
        reads_data=True,
    )
    stats = tree_reduce(
        map_blocks_delayed(_stats_of, "vrkm-epoch-stats", [[p] for p in parts]),
        partial(_combine_stats, n_far=n_far),
        "vrkm-epoch-stats",
    )
    segments = [
        map_blocks_delayed(_piece_of, "vrkm-epoch-segment", [[p] for p in parts], s) for s in range(len(starts))
    ]
    return stats, segments


def epoch_pass_on_driver(driver, centers, draws, *, segment_rows, n_candidates=16, n_far=None):
    """:func:`epoch_pass_graph` computed on the driver's threads, without a graph, for data gathered into the
    driver (:class:`~daskmeans.engine.driver.DriverCopy`): the same block function over the same blocks, reduced
    in the same tree, so the statistics and the sample are those of the graph to the last bit.

    Returns
    -------
    stats : tuple
        The assign pass's result (use :func:`daskmeans.passes.assign.finish_stats`).
    segments : list of list of tuple
        ``segments[s][b]``: block ``b``'s part of segment ``s``, as :func:`epoch_pass_graph` gives them computed.
    """
    centers, draws, starts, n_far = _pass_inputs(driver.array.dtype, centers, draws, segment_rows, n_far)
    per_block = _with_draws(driver.block_args, driver.array.chunks[0], draws)
    parts = driver.map(_epoch_block, per_block, centers, starts, int(n_candidates), n_far)
    stats = reduce_in_tree([_stats_of(part) for part in parts], partial(_combine_stats, n_far=n_far))
    return stats, [[_piece_of(part, s) for part in parts] for s in range(len(starts))]


def _drawn_blocks(per_block):
    """The argument lists of the blocks that hold at least one draw (the others are not read)."""
    return [args for args in per_block if args[-2].size]


def pool_pass_graph(array, centers, draws, *, segment_rows, n_candidates=16):
    """The delayed read of a later pool of an epoch's sample: the rows at ``draws`` with their labels against
    ``centers`` (the centers of the epoch's pass) and their candidate lists, in segments as
    :func:`epoch_pass_graph` gives them, without the statistics. Only the blocks that hold a draw are read.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    draws : int array (t,)
        Global row indices of the pool's draws, in step order; positions count from the pool's first draw.
    segment_rows : int
    n_candidates : int

    Returns
    -------
    list of list of Delayed
        ``segments[s][b]``: the part of segment ``s`` of the ``b``-th block read.

    Examples
    --------
    >>> import dask
    >>> import dask.array as da
    >>> import numpy as np
    >>> X = da.from_array(np.arange(12.0).reshape(6, 2), chunks=(3, 2))
    >>> segments = pool_pass_graph(X, np.array([[0.0, 0.0], [10.0, 10.0]]), np.array([1, 5, 1]), segment_rows=2)
    >>> [len(segment) for segment in segments]  # two segments; the second block is read for the draw of row 5
    [2, 2]
    >>> ordered_segment(dask.compute(*segments[0]), 0, 2).labels.tolist()
    [0, 1]
    """
    centers, draws, starts, _ = _pass_inputs(array.dtype, centers, draws, segment_rows, 0)
    parts = map_blocks_delayed(
        _sample_block,
        "vrkm-pool",
        _drawn_blocks(_with_draws(block_args(array), array.chunks[0], draws)),
        shared(centers, "centers"),
        starts,
        int(n_candidates),
        reads_data=True,
    )
    return [
        map_blocks_delayed(_piece_of_pool, "vrkm-pool-segment", [[p] for p in parts], s) for s in range(len(starts))
    ]


def pool_pass_on_driver(driver, centers, draws, *, segment_rows, n_candidates=16):
    """:func:`pool_pass_graph` computed on the driver's threads for data gathered into the driver: the same
    block function over the same blocks.

    Returns
    -------
    list of list of tuple
        ``segments[s][b]``, as :func:`pool_pass_graph` gives them computed.
    """
    centers, draws, starts, _ = _pass_inputs(driver.array.dtype, centers, draws, segment_rows, 0)
    per_block = _drawn_blocks(_with_draws(driver.block_args, driver.array.chunks[0], draws))
    parts = driver.map(_sample_block, per_block, centers, starts, int(n_candidates))
    return [[part[s] for part in parts] for s in range(len(starts))]


def _piece_of_pool(part, segment):
    return part[segment]


def _candidates_of_piece(piece, centers, n_candidates):
    positions, rows, labels = piece[:3]
    converted = np.ascontiguousarray(rows, dtype=compute_dtype(rows.dtype))
    _, _, candidates, lower = candidate_lists(converted, centers, n_candidates)
    return positions, rows, labels, candidates, lower


def _merge_pieces(parts):
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(5))


def segment_graph(pieces, centers=None, n_candidates=16):
    """Delayed merge of one segment's pieces, with candidate lists remade against ``centers`` if given.

    Parameters
    ----------
    pieces : list of Delayed or Future
        The segment's part of each block (``epoch_pass_graph``'s ``segments[s]``, persisted).
    centers : ndarray (k, d), optional
        Remake the candidate lists against these centers (on the workers holding the pieces); None keeps the
        lists of the pass.
    n_candidates : int

    Returns
    -------
    Delayed
        ``(positions, rows, labels, candidates, lower)``; :func:`ordered_segment` puts it in draw order.
    """
    if centers is None:
        return tree_reduce(list(pieces), _merge_pieces, "vrkm-segment")
    centers = np.ascontiguousarray(centers)
    parts = map_blocks_delayed(
        _candidates_of_piece, "vrkm-candidates", [[p] for p in pieces], shared(centers, "centers"), int(n_candidates)
    )
    return tree_reduce(parts, _merge_pieces, "vrkm-candidates")


def ordered_segment(parts, first_draw: int, n_draws: int) -> EpochSample:
    """The parts of one segment (``(positions, rows, labels, candidates, lower)`` each, e.g. one per block) as one
    sample in draw order, each row copied once."""
    if sum(part[0].size for part in parts) != n_draws:
        raise RuntimeError(
            f"a segment of the VRKM sample has {sum(part[0].size for part in parts)} rows, expected {n_draws}"
        )
    first = parts[0]
    out = [np.empty((n_draws,) + values.shape[1:], dtype=values.dtype) for values in first[1:]]
    for positions, *values in parts:
        where = positions - first_draw
        for target, source in zip(out, values):
            target[where] = source
    return EpochSample(*out)


class SegmentsOnCluster:
    """The segments of an epoch sample kept on the cluster, merged on the workers and fetched one at a time.

    Parameters
    ----------
    pieces : list of list of Delayed or Future
        ``pieces[s][b]``: block ``b``'s part of segment ``s``, persisted.
    compute : callable
        Computes a delayed object and returns its value.
    """

    def __init__(self, pieces, compute):
        self.pieces = pieces
        self.compute = compute

    def parts(self, s, centers=None, n_candidates=16):
        """Segment ``s`` merged on the workers (see :func:`segment_graph`), as one part, its lists remade against
        ``centers`` if given."""
        return [self.compute(segment_graph(self.pieces[s], centers, n_candidates))]


class SegmentsHere:
    """The segments of an epoch sample already in this process (computed with the pass).

    Parameters
    ----------
    pieces : list of list of tuple
        ``pieces[s][b]``: block ``b``'s part of segment ``s``.
    """

    def __init__(self, pieces):
        self.pieces = pieces
        self._last = None

    def parts(self, s, centers=None, n_candidates=16):
        """Segment ``s`` as its parts (one per block), its lists remade against ``centers`` if given; the segment is
        released here. The segment taken last is kept until the next is taken: the inner loop takes a segment
        once more, with ``centers``, when its lists must be remade partway through it."""
        parts, self.pieces[s] = self.pieces[s], None
        if parts is None and self._last is not None and self._last[0] == s:
            parts = self._last[1]
        self._last = (s, parts)
        if centers is not None:
            centers = np.ascontiguousarray(centers)
            parts = [_candidates_of_piece(part, centers, n_candidates) for part in parts]
        return parts
