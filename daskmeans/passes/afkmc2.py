"""The AFK-MC2 proposal pass: per-block masses of ``q(x) = 1/2 w d^2(x, c1) / sum(w d^2) + 1/2 w / sum(w)``.

One pass gives, for every block, ``sum(w d^2(x, c1))`` and ``sum(w)``; from them the driver knows the total
proposal mass of each block, and :func:`lazy_proposal` gives ``q`` itself row by row (recomputed only in the
blocks a proposal lands in).
"""

from __future__ import annotations

import numpy as np

from ..engine.graph import block_args, map_blocks_delayed, shared, tree_reduce


def _dist2_to(block, center):
    diff = np.asarray(block, dtype=np.float64) - center
    return np.einsum("ij,ij->i", diff, diff)


def _masses_block(block, offset, weights, center):
    block = np.asarray(block)
    w = np.ones(block.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    return np.array([[float(w @ _dist2_to(block, center)), float(w.sum())]])


def block_masses_graph(array, first_center, weights=None):
    """Delayed ``(n_blocks, 2)`` array: per block, ``sum(w d^2(x, first_center))`` and ``sum(w)``."""
    center = np.asarray(first_center, dtype=np.float64)
    parts = map_blocks_delayed(_masses_block, "afkmc2-masses", block_args(array, weights), shared(center, "center"))
    return tree_reduce(parts, np.concatenate, "afkmc2-masses")


def _proposal_block(block, weights, center, total_d2, total_w):
    block = np.asarray(block)
    w = np.asarray(weights, dtype=np.float64).ravel()
    part = 0.5 * w / total_w
    if total_d2 > 0:
        part = part + 0.5 * w * _dist2_to(block, center) / total_d2
    else:
        part = 2.0 * part
    return part


def lazy_proposal(array, first_center, masses, weights=None):
    """The proposal probability ``q`` of every row, as a lazy 1-D dask array chunk-aligned with ``array``."""
    import dask.array as da

    center = np.asarray(first_center, dtype=np.float64)
    total_d2, total_w = float(masses[:, 0].sum()), float(masses[:, 1].sum())
    if weights is None:
        weights = da.ones(array.shape[0], chunks=(array.chunks[0],), dtype=np.float64)
    return da.map_blocks(_proposal_block, array, weights[:, None], center, total_d2, total_w, drop_axis=1,
                         dtype=np.float64, name="daskmeans-afkmc2-proposal", meta=np.empty(0, np.float64))


def block_proposal_totals(masses) -> np.ndarray:
    """Proposal mass of each block from the :func:`block_masses_graph` result."""
    total_d2, total_w = float(masses[:, 0].sum()), float(masses[:, 1].sum())
    totals = 0.5 * masses[:, 1] / total_w
    if total_d2 > 0:
        return totals + 0.5 * masses[:, 0] / total_d2
    return 2.0 * totals


__all__ = ["block_masses_graph", "lazy_proposal", "block_proposal_totals", "tree_reduce"]
