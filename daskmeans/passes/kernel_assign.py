"""The kernel assign pass: every block against k sparse centers in feature space.

The centers' support rows, coefficients, owners and ``<C_j, C_j>`` travel once (one shared graph node); each
block computes its kernel with the support a slab of rows at a time, so memory stays bounded whatever the
block size. Labels and distances are lazy and chunk-aligned with the input; the energy is a tree reduction.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask.array as da
import numpy as np

from ..engine.graph import block_args, map_blocks_delayed, shared, tree_reduce
from ..kernels.kernel_centers import SparseCenters
from .assign import _offset, check_finite_block


@dataclass
class KernelModel:
    """What a block task needs: the sparse centers and the kernel (small; broadcast once)."""

    centers: SparseCenters
    kernel: object


def _model_node(centers, kernel):
    return shared(KernelModel(centers, kernel), "kernel-centers")


def _labels_block(block, model, block_info=None):
    block = np.asarray(block)
    check_finite_block(block, _offset(block_info))
    return model.centers.nearest(block, model.kernel)[0]


def _transform_block(block, model, block_info=None):
    block = np.asarray(block)
    check_finite_block(block, _offset(block_info))
    return np.sqrt(model.centers.distances(block, model.kernel))


def lazy_kernel_labels(array, centers, kernel) -> da.Array:
    """Label of the nearest feature-space center for every row, lazy and chunk-aligned with ``array``."""
    return array.map_blocks(_labels_block, _model_node(centers, kernel), drop_axis=1, dtype=np.int32,
                            name="daskmeans-kernel-labels", meta=np.empty(0, np.int32))


def lazy_kernel_transform(array, centers, kernel) -> da.Array:
    """Feature-space distance of every row to every center, ``(n, k)`` float64, lazy."""
    return array.map_blocks(_transform_block, _model_node(centers, kernel),
                            chunks=(array.chunks[0], (centers.n_clusters,)), dtype=np.float64,
                            name="daskmeans-kernel-transform", meta=np.empty((0, 0), np.float64))


def _energy_block(block, offset, weights, model, check_finite):
    block = np.asarray(block)
    if check_finite:
        check_finite_block(block, offset)
    labels, dist2 = model.centers.nearest(block, model.kernel)
    k = model.centers.n_clusters
    if weights is None:
        return np.bincount(labels, minlength=k).astype(np.float64), np.bincount(labels, weights=dist2, minlength=k)
    weights = np.asarray(weights, dtype=np.float64)
    return np.bincount(labels, weights=weights, minlength=k), np.bincount(labels, weights=weights * dist2,
                                                                          minlength=k)


def _combine(parts):
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def kernel_energy_graph(array, centers, kernel, check_finite=False, weights=None):
    """Delayed ``(counts, sse)`` per center: rows (or their weight) and summed (weighted) squared feature-space
    distances, over all rows."""
    parts = map_blocks_delayed(_energy_block, "kernel-assign", block_args(array, weights),
                               _model_node(centers, kernel), bool(check_finite))
    return tree_reduce(parts, _combine, "kernel-assign")
