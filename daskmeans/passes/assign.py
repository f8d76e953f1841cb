"""The assign + stats pass: labels, distances and per-cluster sums, counts and SSE, tree-reduced."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import dask.array as da
import numpy as np

from .. import config
from ..engine.client import resolve_client
from ..engine.graph import block_args, chained_group_pass, reduce_in_tree, shared
from ..engine.grouped import map_reduce_blocks
from ..engine.slabs import compute_dtype, is_aligned, map_rows, row_slabs, slab_rows, slabs
from ..exceptions import InputDataError
from ..kernels.assign import all_dist2, nearest_centers
from ..kernels.probe import probe_nearest
from ..kernels.stats import largest_positions


@dataclass
class ClusterStats:
    """The per-cluster statistics of one assignment of the data.

    Attributes
    ----------
    sums : float64 (k, d)
        Weighted sums of the rows assigned to each cluster.
    counts : float64 (k,)
        Total weight assigned to each cluster.
    sse : float64 (k,)
        Weighted squared distances of each cluster's rows to its center.
    far_dist2, far_rows, far_labels, far_weights : arrays
        The rows farthest from their centers (for relocating empty clusters), farthest first.
    """

    sums: np.ndarray
    counts: np.ndarray
    sse: np.ndarray
    far_dist2: np.ndarray
    far_rows: np.ndarray
    far_labels: np.ndarray
    far_weights: np.ndarray

    @property
    def inertia(self) -> float:
        return float(self.sse.sum())


def _farthest_order(dist2, keep):
    """Positions of the ``keep`` largest of ``dist2``, largest first (ties in position order)."""
    return largest_positions(np.asarray(dist2, dtype=np.float64), int(keep))


def _farthest(dist2, rows, labels, weights, keep):
    order = _farthest_order(dist2, keep)
    return dist2[order], rows[order], labels[order], weights[order]


def _farthest_eligible(dist2, rows, labels, weights, keep):
    """The ``keep`` rows farthest from their centers among those of positive weight (weight 0 cannot refill an
    empty cluster); only the chosen rows are copied."""
    if weights is None:
        chosen = _farthest_order(dist2, keep)
        return dist2[chosen], rows[chosen], labels[chosen], np.ones(len(chosen))
    eligible = np.flatnonzero(weights > 0)
    chosen = eligible[_farthest_order(dist2[eligible], keep)]
    return dist2[chosen], rows[chosen], labels[chosen], weights[chosen]


def _merge_farthest(parts, keep):
    return _farthest(*[np.concatenate([p[i] for p in parts]) for i in range(4)], keep)


def _assign_stats_block(block, offset, weights, centers, n_far, check_finite):
    k, d = centers.shape
    stats = (np.zeros((k, d)), np.zeros(k), np.zeros(k))
    far = [
        farthest_of_slab(dist2, rows, labels, w, n_far, centers.dtype)
        for _, rows, labels, dist2, w in assigned_slabs(block, offset, weights, centers, stats, check_finite)
    ]
    return (*stats, _merge_farthest(far, n_far))


def assigned_slabs(block, offset, weights, centers, stats, check_finite=False):
    """Assign a stored block to ``centers``, adding its rows to ``stats``; its results, slab by slab.

    The block is assigned in one call where the kernel takes it as stored (:func:`assigned_whole`), else a
    converted slab at a time (:func:`daskmeans.engine.slabs.slabs`); the slabs are the same either way, so what a
    caller makes of them (far rows chosen slab by slab) is too.

    Yields
    ------
    start : int
        The slab's first row in the block.
    rows : ndarray (m, d)
        Its rows, as stored (assigned whole) or converted into a buffer the next slab reuses: copy what is kept.
    labels, dist2, weights : ndarray (m,)
        Its rows' nearest centers, their exact squared distances and their weights (float64, or None).
    """
    block = np.asarray(block)
    if not assigned_whole(block, centers.dtype):
        for start, rows, w in slabs(block, weights, reuse=True):
            if check_finite:
                check_finite_block(rows, offset + start)
            yield (start, rows, *nearest_centers(rows, centers, stats=stats, weights=w), w)
        return
    weights = None if weights is None else np.asarray(weights, dtype=np.float64)
    parts = list(row_slabs(block.shape[0], slab_rows(block.shape[1], centers.dtype.itemsize)))
    if check_finite and block.dtype.kind == "f":
        for start, stop in parts:
            check_finite_block(block[start:stop], offset + start)
    labels, dist2 = nearest_centers(block, centers, stats=stats, weights=weights)
    for start, stop in parts:
        yield (
            start,
            block[start:stop],
            labels[start:stop],
            dist2[start:stop],
            None if weights is None else weights[start:stop],
        )


def farthest_of_slab(dist2, rows, labels, weights, keep, dtype):
    """:func:`_farthest_eligible` of a slab that :func:`assigned_slabs` gave, the chosen rows in ``dtype``."""
    chosen = _farthest_eligible(dist2, rows, labels, weights, keep)
    return chosen[0], chosen[1].astype(dtype, copy=False), *chosen[2:]


def assigned_whole(block, dtype) -> bool:
    """Whether the assign kernel takes ``block`` as it is, for centers of ``dtype`` (the compute dtype): rows
    already of that dtype, C-ordered and aligned, or native integers, C-ordered, that it converts a tile at a time
    (:func:`daskmeans.kernels.assign.nearest_centers`). One call per block then replaces one per slab, and so
    does the setting up of the centers, their errors and the score buffer: each is allocated once per block, and
    each fresh allocation costs page faults in Dask's worker processes (see
    :func:`daskmeans.engine.slabs.slabs`)."""
    if not block.flags.c_contiguous or compute_dtype(block.dtype) != dtype:
        return False
    if block.dtype.kind in "ui":
        return block.dtype.isnative
    return block.dtype == dtype and is_aligned(block)


def _combine_stats(parts, n_far):
    sums = parts[0][0].copy()
    counts = parts[0][1].copy()
    sse = parts[0][2].copy()
    for other in parts[1:]:
        sums += other[0]
        counts += other[1]
        sse += other[2]
    return sums, counts, sse, _merge_farthest([p[3] for p in parts], n_far)


def block_energy(stats):
    """``(sse, weight)`` of a block's statistics ``(sums, counts, sse, far)``: what a pass watch shows as energy."""
    return float(stats[2].sum()), float(stats[1].sum())


def far_rows(n_clusters: int) -> int:
    """Far rows an assign pass reports for ``n_clusters`` centers (see :data:`~daskmeans.config.N_FAR`)."""
    return int(min(config.N_FAR_MAX, max(config.N_FAR, int(n_clusters) // config.N_FAR_PER_CLUSTERS)))


def assign_stats_graph(array, centers, weights=None, n_far=None, check_finite=False, client=None):
    """The delayed assign + stats pass of ``array`` against ``centers``.

    ``n_far`` far rows are reported (default :func:`far_rows` of the number of centers).

    ``check_finite`` validates the values on the way (for data that no summary pass has checked, e.g. ``score``).

    ``client`` is where the pass will run (None: :func:`~daskmeans.engine.client.resolve_client`'s choice): on a
    cluster, blocks that each pass reads run as one task per group of blocks
    (:func:`~daskmeans.engine.grouped.map_reduce_blocks`), with the same statistics to the last bit.
    """
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    n_far = far_rows(centers.shape[0]) if n_far is None else int(n_far)
    return map_reduce_blocks(
        _assign_stats_block,
        "assign",
        block_args(array, weights),
        shared(centers, "centers"),
        n_far,
        bool(check_finite),
        combine=partial(_combine_stats, n_far=int(n_far)),
        client=resolve_client(client),
        part_bytes=stats_part_bytes(*centers.shape, n_far),
        energy_of=block_energy,
    )


def assign_stats_on_driver(driver, centers, n_far=None):
    """:func:`assign_stats_graph` computed on the blocks of ``driver`` (a
    :class:`~daskmeans.engine.driver.DriverCopy`) on its threads, without a Dask graph: the same block function and
    the same reduction tree, so the same statistics to the last bit."""
    centers = np.ascontiguousarray(centers, dtype=driver.array.dtype)
    n_far = far_rows(centers.shape[0]) if n_far is None else int(n_far)
    parts = driver.map(_assign_stats_block, driver.block_args, centers, n_far, False)
    return reduce_in_tree(parts, partial(_combine_stats, n_far=n_far))


def assign_stats_chained(
    array, n_clusters, groups, finish, finish_args=(), weights=None, previous=None, start=None, workers=None
):
    """:func:`assign_stats_graph` as one task per group of blocks, each pass chained to the one before on the
    cluster (:func:`~daskmeans.engine.graph.chained_group_pass`), without progress reports: the passes of
    iterations submitted ahead of the driver on blocks held by the workers
    (:func:`daskmeans.engine.placement.held_by_workers`, :func:`~daskmeans.engine.placement.placed_groups`).

    The blocks take a tuple whose first element is the centers in the data's dtype: ``start`` for the first pass,
    else ``finish(statistics of the previous pass, its tuple, *finish_args)``, which each group's task computes
    from the previous pass's ``previous`` group tasks (the same statistics, reduced in the same tree as
    :func:`assign_stats_graph`'s). ``workers``: the worker of each group's task
    (:func:`~daskmeans.engine.placement.placed_groups`).

    Returns
    -------
    GroupPass
        Its :meth:`~daskmeans.engine.graph.GroupPass.result` is ``finish`` of this pass's statistics, for the
        driver.
    """
    n_far = far_rows(n_clusters)
    return chained_group_pass(
        _assign_stats_block_of_first,
        "assign",
        block_args(array, weights),
        n_far,
        False,
        groups=groups,
        combine=partial(_combine_stats, n_far=n_far),
        finish=finish,
        finish_args=finish_args,
        previous=previous,
        start=start,
        workers=workers,
    )


def _assign_stats_block_of_first(block, offset, weights, carried, n_far, check_finite):
    return _assign_stats_block(block, offset, weights, carried[0], n_far, check_finite)


def stats_part_bytes(n_clusters, n_features, n_far=None) -> int:
    """An upper bound on the bytes of one block's statistics (or a report holding them and a few per-cluster
    totals): what :func:`~daskmeans.engine.graph.tree_reduce` weighs to combine them on the driver."""
    n_far = far_rows(n_clusters) if n_far is None else n_far
    return 8 * int(n_clusters) * (int(n_features) + 8) + 8 * int(n_far) * (int(n_features) + 2)


def finish_stats(result) -> ClusterStats:
    sums, counts, sse, far = result
    return ClusterStats(sums, counts, sse, *far)


def check_finite_block(block, offset):
    """Raise a clear error when a block holds NaN or infinity (predict-time validation, in the same pass)."""
    finite = np.isfinite(block)
    if not finite.all():
        bad_rows = np.flatnonzero(~finite.all(axis=1))
        raise InputDataError(
            f"Input X contains {int(block.size - finite.sum())} non-finite value(s) (NaN or infinity) in this block; "
            f"the first is in row {offset + int(bad_rows[0])}. Remove or impute them first."
        )


def _labels_rows(rows, offset, centers):
    check_finite_block(rows, offset)
    return nearest_centers(rows, centers)[0]


def _dist2_rows(rows, offset, centers):
    check_finite_block(rows, offset)
    return nearest_centers(rows, centers)[1]


def lazy_labels(array, centers) -> da.Array:
    """Labels of every row as a lazy dask array, chunk-aligned with ``array``."""
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    return map_rows(array, _labels_rows, centers, dtype=np.int32, name="daskmeans-labels")


def _probe_labels_rows(rows, offset, centers, index, n_probe):
    check_finite_block(rows, offset)
    return probe_nearest(rows, centers, index, n_probe)[0]


def lazy_probe_labels(array, centers, index, n_probe) -> da.Array:
    """Approximate labels of every row (:func:`daskmeans.kernels.probe.probe_nearest`: the nearest center among
    the ``n_probe`` lists of ``index`` nearest to the row), lazy and chunk-aligned with ``array``."""
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    return map_rows(
        array, _probe_labels_rows, centers, index, int(n_probe), dtype=np.int32, name="daskmeans-probe-labels"
    )


def lazy_min_dist2(array, centers) -> da.Array:
    """Squared distance of every row to its nearest center, lazy and chunk-aligned."""
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    return map_rows(array, _dist2_rows, centers, dtype=np.float64, name="daskmeans-min-dist2")


def _transform_rows(rows, offset, centers):
    check_finite_block(rows, offset)
    return np.sqrt(all_dist2(rows, centers))


def lazy_transform(array, centers) -> da.Array:
    """Euclidean distance of every row to every center, ``(n, k)``, lazy (one block at a time)."""
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    return map_rows(
        array, _transform_rows, centers, dtype=array.dtype, name="daskmeans-transform", trailing=centers.shape[0]
    )
