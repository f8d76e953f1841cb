"""The assign + stats pass: labels, distances and per-cluster sums, counts and SSE, tree-reduced."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import dask.array as da
import numpy as np

from ..config import N_FAR
from ..engine.graph import block_args, map_blocks_delayed, shared, tree_reduce
from ..exceptions import InputDataError
from ..kernels.assign import all_dist2, nearest_centers
from ..kernels.stats import cluster_stats


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


def _farthest(dist2, rows, labels, weights, keep):
    if len(dist2) > keep:
        top = np.argpartition(-dist2, keep - 1)[:keep]
        order = top[np.argsort(-dist2[top], kind="stable")]
    else:
        order = np.argsort(-dist2, kind="stable")
    return dist2[order], rows[order], labels[order], weights[order]


def _assign_stats_block(block, offset, weights, centers, n_far, check_finite):
    block = np.asarray(block)
    if check_finite:
        check_finite_block(block, offset)
    labels, dist2 = nearest_centers(block, centers)
    sums, counts, sse = cluster_stats(block, labels, dist2, centers.shape[0], weights)
    w = np.ones(len(labels)) if weights is None else np.asarray(weights, dtype=np.float64)
    # rows of weight 0 cannot refill an empty cluster
    eligible = np.flatnonzero(w > 0)
    far = _farthest(dist2[eligible], block[eligible], labels[eligible], w[eligible], n_far)
    return sums, counts, sse, far


def _combine_stats(parts, n_far):
    sums = parts[0][0].copy()
    counts = parts[0][1].copy()
    sse = parts[0][2].copy()
    for other in parts[1:]:
        sums += other[0]
        counts += other[1]
        sse += other[2]
    far = [np.concatenate([p[3][i] for p in parts]) for i in range(4)]
    return sums, counts, sse, _farthest(*far, n_far)


def assign_stats_graph(array, centers, weights=None, n_far=N_FAR, check_finite=False):
    """The delayed assign + stats pass of ``array`` against ``centers``.

    ``check_finite`` validates the values on the way (for data that no summary pass has checked, e.g. ``score``).
    """
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    parts = map_blocks_delayed(
        _assign_stats_block, "assign", block_args(array, weights), shared(centers, "centers"), n_far,
        bool(check_finite),
    )
    return tree_reduce(parts, partial(_combine_stats, n_far=int(n_far)), "assign")


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


def _offset(block_info):
    return block_info[0]["array-location"][0][0] if block_info else 0


def _labels_block(block, centers, block_info=None):
    block = np.asarray(block)
    check_finite_block(block, _offset(block_info))
    return nearest_centers(block, centers)[0]


def _dist2_block(block, centers, block_info=None):
    block = np.asarray(block)
    check_finite_block(block, _offset(block_info))
    return nearest_centers(block, centers)[1]


def lazy_labels(array, centers) -> da.Array:
    """Labels of every row as a lazy dask array, chunk-aligned with ``array``."""
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    return array.map_blocks(
        _labels_block, centers, drop_axis=1, dtype=np.int32, name="daskmeans-labels", meta=np.empty(0, np.int32)
    )


def lazy_min_dist2(array, centers) -> da.Array:
    """Squared distance of every row to its nearest center, lazy and chunk-aligned."""
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    return array.map_blocks(
        _dist2_block, centers, drop_axis=1, dtype=np.float64, name="daskmeans-min-dist2",
        meta=np.empty(0, np.float64),
    )


def _transform_block(block, centers, block_info=None):
    block = np.asarray(block)
    check_finite_block(block, _offset(block_info))
    return np.sqrt(all_dist2(block, centers))


def lazy_transform(array, centers) -> da.Array:
    """Euclidean distance of every row to every center, ``(n, k)``, lazy (one block at a time)."""
    centers = np.ascontiguousarray(centers, dtype=array.dtype)
    return array.map_blocks(
        _transform_block, centers, chunks=(array.chunks[0], (centers.shape[0],)), dtype=array.dtype,
        name="daskmeans-transform",
    )
