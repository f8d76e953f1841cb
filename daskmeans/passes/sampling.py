"""Row sampling passes: uniform or weighted, with or without replacement.

Every row's random number comes from :func:`daskmeans.engine.random.row_uniforms` (seed, global row index), so the
sample does not depend on chunking, worker count or scheduler.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..engine.client import compute_now
from ..engine.graph import block_args, block_offsets, blocks_of, map_blocks_delayed, tree_reduce
from ..engine.random import row_uniforms, stage_generator
from ..engine.slabs import converted_rows


def _sort_keys(keys, index):
    return np.lexsort((index, keys))


def sample_keys(key: int, offset: int, count: int, weights=None) -> np.ndarray:
    """The random sort keys of rows ``offset .. offset + count - 1``: the ``m`` smallest are a sample of ``m`` rows.

    Uniform numbers without weights; with weights, Efraimidis-Spirakis keys ``-log(u) / w`` (a weight-proportional
    sample without replacement), ``inf`` for rows of weight 0 (never sampled).
    """
    u = row_uniforms(key, offset, count)
    if weights is None:
        return u
    w = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(w > 0, -np.log(u) / np.where(w > 0, w, 1.0), np.inf)


def _bottom_block(block, offset, weights, key, m, threshold=np.inf):
    block = np.asarray(block)  # as stored: only the chosen rows are converted
    keys = sample_keys(key, offset, block.shape[0], weights)
    index = np.arange(offset, offset + block.shape[0], dtype=np.int64)
    order = _sort_keys(keys, index)[:m]
    order = order[np.isfinite(keys[order]) & (keys[order] <= threshold)]
    return keys[order], index[order], converted_rows(block, order)


def _merge_bottom(parts, m):
    keys = np.concatenate([p[0] for p in parts])
    index = np.concatenate([p[1] for p in parts])
    rows = np.concatenate([p[2] for p in parts])
    order = _sort_keys(keys, index)[:m]
    return keys[order], index[order], rows[order]


def sample_without_replacement_graph(array, m: int, key: int, weights=None, threshold=np.inf):
    """Delayed sample of ``m`` distinct rows; weighted by Efraimidis-Spirakis keys when weights are given.

    The result is ``(keys, row_indices, rows)`` in the order of the random keys. With a ``threshold``, only rows
    of key at most it are candidates: fewer than ``m`` rows when fewer pass it (:func:`sample_rows`).
    """
    parts = map_blocks_delayed(
        _bottom_block, "sample", block_args(array, weights), key, int(m), float(threshold), reads_data=True
    )
    return tree_reduce(parts, partial(_merge_bottom, m=int(m)), "sample")


def uniform_threshold(n: int, m: int) -> float:
    """A key that about ``m + 8 sqrt(m) + 64`` of ``n`` uniform keys lie below: fewer than ``m`` of them do with
    a probability below 1e-15 (eight standard deviations)."""
    return min(1.0, (m + 8.0 * np.sqrt(m) + 64.0) / max(1, n))


def sample_rows(array, m: int, key: int, weights=None, client=None):
    """The sample of :func:`sample_without_replacement_graph`, computed.

    Without weights each block sends on only the rows whose key is below :func:`uniform_threshold`, about its
    share of ``m``, not its ``m`` smallest (a block of half the data would send ``m`` rows, a few times what the
    sample takes from it). In the rare case that fewer than ``m`` rows pass, the pass is made again without the
    threshold: the sample is the same either way, the ``m`` rows of smallest key.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    m : int
    key : int
        The stage key of the rows' random keys (:func:`daskmeans.engine.random.stage_key`).
    weights : dask.array.Array (n,), optional
    client : distributed.Client, optional

    Returns
    -------
    keys, row_indices, rows : ndarrays
        In the order of the random keys; ``min(m, rows of positive weight)`` of them.

    Examples
    --------
    >>> import dask, dask.array as da, numpy as np
    >>> X = da.from_array(np.arange(20.0).reshape(10, 2), chunks=5)
    >>> with dask.config.set(scheduler="sync"):
    ...     keys, index, rows = sample_rows(X, 3, key=7)
    >>> rows.shape, bool(np.all(rows[:, 0] == 2 * index))
    ((3, 2), True)
    """
    n = array.shape[0]
    threshold = uniform_threshold(n, m) if weights is None else np.inf
    (sample,) = compute_now(sample_without_replacement_graph(array, m, key, weights, threshold), client=client)
    if len(sample[0]) < min(m, n) and threshold < np.inf:
        (sample,) = compute_now(sample_without_replacement_graph(array, m, key, weights), client=client)
    return sample


def _gather_block(block, offset, weights, wanted):
    block = np.asarray(block)
    positions = np.flatnonzero((wanted >= offset) & (wanted < offset + block.shape[0]))
    return positions, converted_rows(block, wanted[positions] - offset)


def _merge_gather(parts):
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def gather_rows_graph(array, indices):
    """Delayed ``array[indices]`` for sorted or unsorted global row indices (repeats allowed).

    Only the blocks that hold a wanted row are read.
    """
    indices = np.asarray(indices, dtype=np.int64)
    offsets = block_offsets(array)
    ends = offsets + np.asarray(array.chunks[0])
    args = block_args(array)
    needed = [i for i in range(len(args)) if np.any((indices >= offsets[i]) & (indices < ends[i]))]
    parts = map_blocks_delayed(_gather_block, "gather", [args[i] for i in needed], indices)
    return tree_reduce(parts, _merge_gather, "gather")


def finish_gather(result, n_indices: int, n_features: int, dtype):
    positions, rows = result
    out = np.empty((n_indices, n_features), dtype=dtype)
    out[positions] = rows
    return out


def uniform_indices_with_replacement(n: int, m: int, seed: int, *stage) -> np.ndarray:
    """``m`` row indices drawn uniformly with replacement; they depend on ``n`` and the seed only."""
    return stage_generator(seed, "uniform-with-replacement", *stage).integers(0, n, size=m)


def _weight_totals_block(weights):
    return np.array([np.asarray(weights, dtype=np.float64).sum()])


def weight_totals_graph(weights):
    """Delayed per-block totals of a 1-D weights array."""
    parts = map_blocks_delayed(_weight_totals_block, "weight-totals", [[b] for b in blocks_of(weights)])
    return tree_reduce(parts, np.concatenate, "weight-totals")


def _locate_block(weights, offset, targets):
    cumulative = np.cumsum(np.asarray(weights, dtype=np.float64))
    local = np.searchsorted(cumulative, targets, side="right")
    return offset + np.minimum(local, len(cumulative) - 1)


def weighted_indices_with_replacement_graph(weights, block_totals, m: int, seed: int, *stage):
    """Delayed ``m`` row indices drawn with replacement with probability proportional to ``weights``.

    Inverse-CDF sampling over the global cumulative weights: block totals locate the block, a search inside
    the block the row. Returns the indices in draw order.
    """
    from dask.delayed import delayed

    targets = stage_generator(seed, "weighted-with-replacement", *stage).random(m) * block_totals.sum()
    edges = np.concatenate([[0.0], np.cumsum(block_totals)])
    owner = np.clip(np.searchsorted(edges, targets, side="right") - 1, 0, len(block_totals) - 1)
    offsets = block_offsets(weights)
    weight_blocks = blocks_of(weights)
    pieces, positions = [], []
    for b in np.unique(owner):
        where = np.flatnonzero(owner == b)
        pieces.append(delayed(_locate_block, pure=True)(weight_blocks[b], int(offsets[b]), targets[where] - edges[b]))
        positions.append(where)

    def _assemble(found):
        out = np.empty(m, dtype=np.int64)
        for where, idx in zip(positions, found):
            out[where] = idx
        return out

    return delayed(_assemble, pure=True)(pieces)
