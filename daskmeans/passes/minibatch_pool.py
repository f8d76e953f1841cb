"""Random mini-batches drawn by the workers, a pool of steps at a time.

Two ways to draw the rows of step ``t`` (``batch_size`` indices, with replacement, from a generator keyed by the
seed and ``t``):

- ``"rows"``: uniformly over all rows, so they depend on neither chunking nor workers. A pool of 131,072 rows
  then touches nearly every block of a large store: each pool reads almost the whole data.
- ``"chunks"``: uniformly over the rows of the pool's blocks (:func:`pool_blocks`): a few whole blocks per pool,
  taken in the order of a random permutation of all blocks (a new one per sweep), so reads are whole chunks and
  every block is read once per sweep. The blocks' sizes are part of the draw: the same seed and the same chunking
  give the same rows.

For a pool of steps, each row block that holds drawn rows is read once by a worker, which keeps only those rows;
one task then assembles the pool's batches and runs the sequential steps on them. Only the ``k x d`` centers and
per-step numbers travel back to the driver.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from .. import config
from ..engine.graph import block_args, block_offsets, map_blocks_delayed, shared
from ..engine.random import stage_generator
from ..engine.slabs import converted_rows, stored_form
from ..kernels.minibatch import run_steps


def step_indices(n_samples: int, batch_size: int, seed: int, first_step: int, n_steps: int) -> np.ndarray:
    """Row indices of steps ``first_step .. first_step + n_steps - 1``, shape ``(n_steps, batch_size)``."""
    return np.stack(
        [
            stage_generator(seed, "minibatch", first_step + t).integers(0, n_samples, size=batch_size)
            for t in range(n_steps)
        ]
    )


def blocks_per_pool(block_rows, pool_rows: int) -> int:
    """Blocks a pool reads with ``sampling="chunks"``: enough for ``POOL_BLOCK_OVERSAMPLING`` times its rows (by
    the mean block size), at least ``MIN_POOL_BLOCKS``, at most all."""
    block_rows = np.asarray(block_rows)
    wanted = math.ceil(config.POOL_BLOCK_OVERSAMPLING * pool_rows / max(1.0, float(block_rows.mean())))
    return int(min(len(block_rows), max(config.MIN_POOL_BLOCKS, wanted)))


def choose_sampling(sampling: str, block_rows, pool_rows: int) -> str:
    """``"auto"`` becomes ``"chunks"`` when drawing a pool's rows uniformly would read at least
    ``CHUNK_SAMPLING_MIN_SAVING`` times more blocks than whole-block pools (blocks touched by uniform draws: about
    ``min(blocks, pool_rows)``), else ``"rows"``; other values stay."""
    if sampling != "auto":
        return sampling
    uniform_blocks = min(len(block_rows), pool_rows)
    return (
        "chunks"
        if uniform_blocks >= config.CHUNK_SAMPLING_MIN_SAVING * blocks_per_pool(block_rows, pool_rows)
        else "rows"
    )


def pool_blocks(n_blocks: int, per_pool: int, seed: int, pool: int) -> np.ndarray:
    """The blocks pool ``pool`` reads: positions ``pool * per_pool ...`` of the concatenated random permutations of
    the blocks (one permutation per sweep over the data, keyed by the seed and the sweep), sorted."""
    first = pool * per_pool
    taken = []
    while len(taken) < per_pool:
        sweep, position = divmod(first + len(taken), n_blocks)
        order = stage_generator(seed, "minibatch-blocks", sweep).permutation(n_blocks)
        taken.extend(order[position : position + per_pool - len(taken)])
    return np.unique(np.asarray(taken, dtype=np.int64))


def chunk_step_indices(
    block_rows, batch_size: int, seed: int, first_step: int, n_steps: int, steps_per_pool: int, per_pool: int
) -> np.ndarray:
    """Row indices of steps ``first_step ..`` (one pool: ``first_step`` is a multiple of ``steps_per_pool``) with
    ``sampling="chunks"``: each drawn uniformly, with replacement, from the rows of the pool's blocks."""
    block_rows = np.asarray(block_rows, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(block_rows)[:-1]])
    blocks = pool_blocks(len(block_rows), per_pool, seed, first_step // steps_per_pool)
    ends = np.cumsum(block_rows[blocks])
    local = step_indices(int(ends[-1]), batch_size, seed, first_step, n_steps)
    which = np.searchsorted(ends, local, side="right")
    return offsets[blocks][which] + local - (ends - block_rows[blocks])[which]


def _take_rows(block, offset, weights, positions, local):
    """The drawn rows held by one block (and their weights), with their positions in the pool."""
    taken_weights = None if weights is None else np.asarray(weights, dtype=np.float64)[local]
    return positions, converted_rows(block, local), taken_weights


def _run_pool(
    pieces,
    n_steps,
    batch_size,
    n_features,
    dtype,
    centers,
    seen_counts,
    learning_rate,
    stopping,
    time_left,
    weighted,
    reassignment,
    first_step,
):
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
    centers, seen_counts, records, stop_reason = run_steps(
        batches, centers, seen_counts, learning_rate, stopping, time_left, batch_weights, reassignment, first_step
    )
    return centers, seen_counts, records, stop_reason, stopping, reassignment


def pool_reads(array, indices) -> tuple[int, int]:
    """What drawing the rows ``indices`` (any shape, global row indices) reads: the number of blocks that hold
    any of them (:func:`draw_pieces` reads each once, whole) and those blocks' bytes as stored, before any
    compression (uint8 data counts one byte a value, whatever dtype the rows are computed in)."""
    block_rows = np.asarray(array.chunks[0], dtype=np.int64)
    held = np.unique(np.searchsorted(np.cumsum(block_rows), np.ravel(indices), side="right"))
    stored = stored_form(array)
    row_bytes = int(np.prod(stored.shape[1:], dtype=np.int64)) * stored.dtype.itemsize
    return len(held), int(block_rows[held].sum()) * row_bytes


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


def assemble_pieces(pieces, n_rows, n_features, dtype, weighted):
    """``(rows, weights)`` of ``n_rows`` drawn rows from the :func:`draw_pieces` results, taken as they come (any
    iterable: each piece can be dropped once written)."""
    rows = np.empty((n_rows, n_features), dtype=dtype)
    weights = np.empty(n_rows) if weighted else None
    for positions, taken, taken_weights in pieces:
        rows[positions] = taken
        if weighted:
            weights[positions] = taken_weights
    return rows, weights


def pool_graph(
    array,
    indices,
    centers,
    seen_counts,
    learning_rate,
    stopping=None,
    time_left=None,
    weights=None,
    reassignment=None,
    first_step=0,
):
    """Delayed run of the mini-batch steps whose rows are ``indices`` (one row of it per step).

    Returns (when computed) ``(centers, seen_counts, records, stop_reason, stopping, reassignment)`` as
    :func:`daskmeans.kernels.minibatch.run_steps`, with the updated ``stopping`` and ``reassignment`` states.
    """
    n_steps, batch_size = indices.shape
    pieces = draw_pieces(array, indices, weights)
    (run,) = map_blocks_delayed(
        _run_pool,
        "minibatch-steps",
        [[pieces]],
        n_steps,
        batch_size,
        array.shape[1],
        array.dtype,
        shared(np.asarray(centers), "minibatch-centers"),
        np.asarray(seen_counts, dtype=np.float64),
        learning_rate,
        stopping,
        time_left,
        weights is not None,
        reassignment,
        int(first_step),
    )
    return run
