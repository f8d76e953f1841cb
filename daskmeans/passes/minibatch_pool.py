"""Random mini-batches drawn by the workers, a pool of steps at a time.

The rows of step ``t`` are ``batch_size`` indices drawn uniformly with replacement from a generator keyed by
the seed and ``t`` (so they depend on neither chunking nor workers). For a pool of steps, each row block
that holds drawn rows is read once by a worker, which keeps only those rows; one task then assembles the
pool's batches and runs the sequential steps on them. Only the ``k x d`` centers and per-step numbers travel
back to the driver.
"""

from __future__ import annotations

import copy

import numpy as np

from ..engine.graph import block_args, block_offsets, map_blocks_delayed, shared
from ..engine.random import stage_generator
from ..kernels.minibatch import run_steps


def step_indices(n_samples: int, batch_size: int, seed: int, first_step: int, n_steps: int) -> np.ndarray:
    """Row indices of steps ``first_step .. first_step + n_steps - 1``, shape ``(n_steps, batch_size)``."""
    return np.stack([
        stage_generator(seed, "minibatch", first_step + t).integers(0, n_samples, size=batch_size)
        for t in range(n_steps)
    ])


def _take_rows(block, offset, weights, positions, local):
    """The drawn rows held by one block (and their weights), with their positions in the pool."""
    taken_weights = None if weights is None else np.asarray(weights, dtype=np.float64)[local]
    return positions, np.ascontiguousarray(np.asarray(block)[local]), taken_weights


def _run_pool(pieces, n_steps, batch_size, n_features, dtype, centers, seen_counts, learning_rate, stopping,
              time_left, weighted, reassignment, first_step):
    rows = np.empty((n_steps * batch_size, n_features), dtype=dtype)
    weights = np.empty(n_steps * batch_size) if weighted else None
    for positions, taken, taken_weights in pieces:
        rows[positions] = taken
        if weighted:
            weights[positions] = taken_weights
    steps = [slice(t * batch_size, (t + 1) * batch_size) for t in range(n_steps)]
    batches = [rows[s] for s in steps]
    batch_weights = [weights[s] for s in steps] if weighted else None
    stopping = copy.deepcopy(stopping)
    reassignment = copy.deepcopy(reassignment)
    centers, seen_counts, records, stop_reason = run_steps(batches, centers, seen_counts, learning_rate, stopping,
                                                           time_left, batch_weights, reassignment, first_step)
    return centers, seen_counts, records, stop_reason, stopping, reassignment


def draw_pieces(array, indices, weights=None):
    """Delayed ``(positions, rows, weights)`` pieces: each block holding drawn rows is read once, by a worker.

    ``indices`` (any shape) are global row indices, repeats allowed; ``positions`` index its flattened form.
    """
    flat = np.asarray(indices).ravel()
    offsets = block_offsets(array)
    ends = offsets + np.asarray(array.chunks[0])
    args = block_args(array, weights)
    order = np.argsort(flat, kind="stable")
    sorted_rows = flat[order]
    take_args = []
    for b, (start, end) in enumerate(zip(offsets, ends)):
        lo, hi = np.searchsorted(sorted_rows, [start, end])
        if hi > lo:
            positions = order[lo:hi]
            take_args.append([*args[b][:3], positions, sorted_rows[lo:hi] - start])
    return map_blocks_delayed(_take_rows, "minibatch-draw", take_args)


def _assemble_rows(pieces, n_rows, n_features, dtype, weighted):
    rows = np.empty((n_rows, n_features), dtype=dtype)
    weights = np.empty(n_rows) if weighted else None
    for positions, taken, taken_weights in pieces:
        rows[positions] = taken
        if weighted:
            weights[positions] = taken_weights
    return rows, weights


def gather_steps_graph(array, indices, weights=None):
    """Delayed ``(rows, weights)``: ``array[indices.ravel()]`` (in that order) and their sample weights (None
    without ``weights``), drawn as the mini-batch pools draw them.

    For algorithms whose steps run on the driver (mini-batch kernel k-means): only the drawn rows travel.
    """
    pieces = draw_pieces(array, indices, weights)
    (rows,) = map_blocks_delayed(_assemble_rows, "minibatch-gather", [[pieces]], int(np.asarray(indices).size),
                                 int(array.shape[1]), array.dtype, weights is not None)
    return rows


def pool_graph(array, indices, centers, seen_counts, learning_rate, stopping=None, time_left=None, weights=None,
               reassignment=None, first_step=0):
    """Delayed run of the mini-batch steps whose rows are ``indices`` (one row of it per step).

    Returns (when computed) ``(centers, seen_counts, records, stop_reason, stopping, reassignment)`` as
    :func:`daskmeans.kernels.minibatch.run_steps`, with the updated ``stopping`` and ``reassignment`` states.
    """
    n_steps, batch_size = indices.shape
    pieces = draw_pieces(array, indices, weights)
    (run,) = map_blocks_delayed(
        _run_pool, "minibatch-steps", [[pieces]], n_steps, batch_size, array.shape[1], array.dtype,
        shared(np.asarray(centers), "minibatch-centers"), np.asarray(seen_counts, dtype=np.float64), learning_rate,
        stopping, time_left, weights is not None, reassignment, int(first_step),
    )
    return run
