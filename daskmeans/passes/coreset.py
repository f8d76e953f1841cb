"""The lightweight coreset passes (Bachem, Lucic & Krause, KDD 2018).

With ``mu`` the (weighted) data mean, every row is drawn with probability
``q(x) = 1/2 w_x / sum(w) + 1/2 w_x ||x - mu||^2 / sum(w ||x' - mu||^2)`` (``w = 1`` without sample weights)
and a drawn row gets the weight ``w_x / (m q(x))``, so that ``sum_i weight_i f(x_i)`` is an unbiased estimate of
``sum_x w_x f(x)`` for any ``f``.

Passes: the mean comes from the summary pass every fit makes anyway (:mod:`daskmeans.passes.summary`); one pass
gives each block's ``sum(w ||x - mu||^2)`` and ``sum(w)`` (:func:`~daskmeans.passes.proposal.block_masses_graph`,
``q`` is that module's proposal with ``p = mu``); the ``m`` draws are allocated to the blocks by one
multinomial draw on the block masses, and a last pass draws each block's share inside the block, reading only
the blocks that received draws.

Randomness: the multinomial comes from ``stage_generator(seed, "lwcs", "allocate")``; the draws inside block
``b`` from a generator keyed by ``(seed, "lwcs", "block", first row of b, rows of b)``. The coreset is therefore
the same on any scheduler and any number of workers for a given chunking of the data; a different chunking
gives a different coreset from the same distribution (an equally valid sample, not the same rows).
"""

from __future__ import annotations

import numpy as np

from ..engine.graph import block_args, map_blocks_delayed, shared
from ..engine.random import stage_generator, stage_key
from ..engine.slabs import converted_rows, slabs
from .proposal import block_probabilities, row_probabilities


def allocate_draws(masses, m: int, seed: int) -> np.ndarray:
    """How many of the ``m`` draws fall in each block: one multinomial on the block probabilities."""
    probabilities = block_probabilities(masses)
    probabilities = probabilities / probabilities.sum()
    return stage_generator(seed, "lwcs", "allocate").multinomial(int(m), probabilities)


def _draw_block(block, offset, weights, n_draws, mean, total_spread, total_weight, m, seed):
    block = np.asarray(block)  # as stored: q is computed a slab at a time, the drawn rows leave as stored
    w = np.ones(block.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    q = np.concatenate(
        [
            row_probabilities(rows, slab_weights, mean, total_spread, total_weight)
            for _, rows, slab_weights in slabs(block, weights)
        ]
    )
    # inside the block, rows are drawn proportionally to q (the block's share of the draws is fixed already)
    cumulative = np.cumsum(q)
    rng = np.random.default_rng(stage_key(seed, "lwcs", "block", int(offset), int(block.shape[0])))
    local = np.searchsorted(cumulative, rng.random(int(n_draws)) * cumulative[-1], side="right")
    local = np.minimum(local, block.shape[0] - 1)
    return offset + local, block[local], w[local] / (m * q[local])


def concatenate_draws(parts) -> tuple:
    """``(row_indices, rows, coreset_weights)`` of all the draws from :func:`draw_parts`' computed parts, the rows in
    the compute dtype."""
    indices, rows, weights = (np.concatenate([part[i] for part in parts]) for i in range(3))
    return indices, converted_rows(rows, slice(None)), weights


def draw_parts(array, masses, mean, m: int, seed: int, weights=None) -> list:
    """Delayed ``(row_indices, rows, coreset_weights)`` of the ``m`` draws, one per block that received draws, in
    block order, the rows as stored (a uint8 row travels as one byte per value); :func:`concatenate_draws` joins them
    on the driver. Only the blocks that received at least one draw are read.
    """
    counts = allocate_draws(masses, m, seed)
    total_spread, total_weight = float(masses[:, 0].sum()), float(masses[:, 1].sum())
    args = block_args(array, weights)
    wanted = [args[i] + [int(counts[i])] for i in np.flatnonzero(counts)]
    parts = map_blocks_delayed(
        _draw_block,
        "lwcs-draw",
        wanted,
        shared(np.asarray(mean, np.float64), "mean"),
        total_spread,
        total_weight,
        int(m),
        int(seed),
        reads_data=True,
    )
    return parts
