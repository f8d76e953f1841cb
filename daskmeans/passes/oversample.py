"""The k-means|| passes (Bahmani et al. 2012): distance state per block, Bernoulli oversampling, candidate weights.

The distance of every row to the nearest candidate so far is kept on the workers as persisted state blocks,
so each round only measures the distances to the round's new candidates.
"""

from __future__ import annotations

import numpy as np

from ..engine.graph import block_args, map_blocks_delayed, shared, tree_reduce
from ..engine.random import row_uniforms
from ..engine.slabs import converted_rows, slabs
from ..kernels.assign import nearest_centers


def _update_state_block(block, offset, weights, state, candidates, first_index):
    """Fold new candidates into a block's (min squared distance, nearest candidate) state."""
    parts = [nearest_centers(rows, candidates) for _, rows, _ in slabs(block)]
    labels, dist2 = (np.concatenate([p[i] for p in parts]) for i in range(2))
    if state is None:
        best_dist2, best_index = dist2, labels.astype(np.int32) + first_index
    else:
        best_dist2, best_index = state[0].copy(), state[1].copy()
        closer = dist2 < best_dist2
        best_dist2[closer] = dist2[closer]
        best_index[closer] = labels[closer] + first_index
    w = 1.0 if weights is None else np.asarray(weights, dtype=np.float64)
    cost = float(np.sum(w * best_dist2))
    return best_dist2, best_index, cost


def update_state_graph(array, weights, states, candidates, first_index):
    """Delayed per-block new states (each ``(dist2, index, cost)``) after adding ``candidates``."""
    candidates = np.ascontiguousarray(candidates, dtype=array.dtype)
    states = states if states is not None else [None] * array.numblocks[0]
    return map_blocks_delayed(
        _update_state_block,
        "kmeans-parallel-distances",
        block_args(array, weights, states),
        shared(candidates, "candidates"),
        int(first_index),
        reads_data=True,
    )


def _state_cost(state):
    return state[2]


def total_cost_graph(states):
    """Delayed sum of the block costs of the states."""
    costs = map_blocks_delayed(_state_cost, "kmeans-parallel-cost", [[s] for s in states])
    return tree_reduce(costs, sum, "kmeans-parallel-cost")


def _oversample_block(block, offset, weights, state, key, scale):
    w = 1.0 if weights is None else np.asarray(weights, dtype=np.float64)
    probability = np.minimum(1.0, scale * w * state[0])
    chosen = np.flatnonzero(row_uniforms(key, offset, np.asarray(block).shape[0]) < probability)
    return offset + chosen, converted_rows(block, chosen)


def _merge_oversample(parts):
    index = np.concatenate([p[0] for p in parts])
    rows = np.concatenate([p[1] for p in parts])
    order = np.argsort(index, kind="stable")
    return index[order], rows[order]


def oversample_graph(array, weights, states, key, scale):
    """Delayed rows chosen independently with probability ``min(1, scale * w * d^2)``."""
    parts = map_blocks_delayed(
        _oversample_block,
        "kmeans-parallel-oversample",
        block_args(array, weights, states),
        key,
        float(scale),
        reads_data=True,
    )
    return tree_reduce(parts, _merge_oversample, "kmeans-parallel-oversample")


def _candidate_weights_block(state, weights, n_candidates):
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    return np.bincount(state[1], weights=w, minlength=n_candidates).astype(np.float64)


def candidate_weights_graph(array, weights, states, n_candidates):
    """Delayed total weight of the rows nearest to each candidate."""
    weight_blocks = [a[2] for a in block_args(array, weights)]
    parts = map_blocks_delayed(
        _candidate_weights_block,
        "kmeans-parallel-weights",
        [[s, w] for s, w in zip(states, weight_blocks)],
        int(n_candidates),
    )
    return tree_reduce(parts, sum, "kmeans-parallel-weights")
