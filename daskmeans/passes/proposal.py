"""The squared-distance proposal ``q(x) = 1/2 w_x / sum(w) + 1/2 w_x d^2(x, p) / sum(w d^2(x', p))``.

Lightweight coresets draw rows from it with ``p`` the data mean (:mod:`daskmeans.passes.coreset`), AFK-MC2
proposes its Markov chain states from it with ``p`` the first center (``w = 1`` without sample weights). One
pass gives, for every block, ``sum(w d^2(x, p))`` and ``sum(w)`` (:func:`block_masses_graph`); from them the
driver knows the total proposal mass of each block (:func:`block_probabilities`), and :func:`row_probabilities`
gives ``q`` row by row, recomputed only in the blocks a draw lands in.
"""

from __future__ import annotations

import dask.array as da
import numpy as np

from .. import config
from ..engine.graph import block_args, map_blocks_delayed, shared, tree_reduce
from ..engine.slabs import slabs, stored_form
from ..kernels.distance import dist2_to_point


def _weights_of(block, weights):
    return np.ones(block.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64).ravel()


def _masses_block(block, offset, weights, point):
    mass, total = 0.0, 0.0
    for _, rows, w in slabs(block, weights):
        w = _weights_of(rows, w)
        mass += float(w @ dist2_to_point(rows, point))
        total += float(w.sum())
    return np.array([[mass, total]])


def block_masses_graph(array, point, weights=None, name="proposal-masses"):
    """Delayed ``(n_blocks, 2)`` array: per block, ``sum(w d^2(x, point))`` and ``sum(w)``.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    point : ndarray (d,)
    weights : dask.array.Array (n,), optional
    name : str
        Pass name in the task graph.
    """
    point = np.asarray(point, dtype=np.float64)
    parts = map_blocks_delayed(_masses_block, name, block_args(array, weights), shared(point, "point"), reads_data=True)
    return tree_reduce(parts, np.concatenate, name)


def block_probabilities(masses) -> np.ndarray:
    """Proposal mass of each block (the sum of ``q`` over its rows), from :func:`block_masses_graph`'s result."""
    total_d2, total_w = float(masses[:, 0].sum()), float(masses[:, 1].sum())
    probabilities = 0.5 * masses[:, 1] / total_w
    if total_d2 > 0:
        return probabilities + 0.5 * masses[:, 0] / total_d2
    return 2.0 * probabilities  # every row sits on the point: q is the weight alone


def row_probabilities(block, weights, point, total_d2, total_w) -> np.ndarray:
    """``q`` of every row of one block, given the totals ``sum(w d^2)`` and ``sum(w)`` over the data."""
    w = _weights_of(block, weights)
    q = 0.5 * w / total_w
    if total_d2 > 0:
        return q + 0.5 * w * dist2_to_point(block, point) / total_d2
    return 2.0 * q


def _proposal_block(block, weights, point, total_d2, total_w, settings=None):
    weights = np.asarray(weights, dtype=np.float64).ravel()
    with config.applied(settings):  # the settings the task carries (the slabs' size)
        return np.concatenate(
            [row_probabilities(rows, w, point, total_d2, total_w) for _, rows, w in slabs(block, weights)]
        )


def lazy_proposal(array, point, masses, weights=None):
    """``q`` of every row, as a lazy 1-D dask array chunk-aligned with ``array``."""
    point = np.asarray(point, dtype=np.float64)
    total_d2, total_w = float(masses[:, 0].sum()), float(masses[:, 1].sum())
    if weights is None:
        weights = da.ones(array.shape[0], chunks=(array.chunks[0],), dtype=np.float64)
    settings = config.carried()
    return da.map_blocks(
        _proposal_block,
        stored_form(array),
        weights[:, None],
        point,
        total_d2,
        total_w,
        drop_axis=1,
        dtype=np.float64,
        token="daskmeans-afkmc2-proposal",
        meta=np.empty(0, np.float64),
        **({} if settings is None else {"settings": settings}),
    )
