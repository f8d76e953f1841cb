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
from ..engine.slabs import map_rows, slabs
from ..kernels.kernel_centers import SparseCenters
from .assign import check_finite_block


@dataclass
class KernelModel:
    """What a block task needs: the sparse centers and the kernel (small; broadcast once)."""

    centers: SparseCenters
    kernel: object


def _model_node(centers, kernel):
    return shared(KernelModel(centers, kernel), "kernel-centers")


def _labels_rows(rows, offset, model):
    check_finite_block(rows, offset)
    return model.centers.nearest(rows, model.kernel)[0]


def _transform_rows(rows, offset, model):
    check_finite_block(rows, offset)
    return np.sqrt(model.centers.distances(rows, model.kernel))


def lazy_kernel_labels(array, centers, kernel) -> da.Array:
    """Label of the nearest feature-space center for every row, lazy and chunk-aligned with ``array``."""
    return map_rows(array, _labels_rows, _model_node(centers, kernel), dtype=np.int32, name="daskmeans-kernel-labels")


def lazy_kernel_transform(array, centers, kernel) -> da.Array:
    """Feature-space distance of every row to every center, ``(n, k)`` float64, lazy."""
    return map_rows(
        array,
        _transform_rows,
        _model_node(centers, kernel),
        dtype=np.float64,
        name="daskmeans-kernel-transform",
        trailing=centers.n_clusters,
    )


def _energy_block(block, offset, weights, model, check_finite):
    k = model.centers.n_clusters
    counts, sse = np.zeros(k), np.zeros(k)
    for start, rows, w in slabs(block, weights):
        if check_finite:
            check_finite_block(rows, offset + start)
        labels, dist2 = model.centers.nearest(rows, model.kernel)
        counts += np.bincount(labels, weights=w, minlength=k)
        sse += np.bincount(labels, weights=dist2 if w is None else w * dist2, minlength=k)
    return counts, sse


def _combine(parts):
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def kernel_energy_graph(array, centers, kernel, check_finite=False, weights=None):
    """Delayed ``(counts, sse)`` per center: rows (or their weight) and summed (weighted) squared feature-space
    distances, over all rows."""
    parts = map_blocks_delayed(
        _energy_block,
        "kernel-assign",
        block_args(array, weights),
        _model_node(centers, kernel),
        bool(check_finite),
        reads_data=True,
    )
    return tree_reduce(parts, _combine, "kernel-assign")
