"""Block-wise map and tree reduction, with task names that start with ``daskmeans-``."""

from __future__ import annotations

import dask
import numpy as np
from dask.base import tokenize
from dask.delayed import Delayed, delayed

from ..config import SPLIT_EVERY
from .slabs import stored_form


def blocks_of(array) -> list[Delayed]:
    """One delayed object per row block of a 2-D (or 1-D) dask array."""
    return list(array.to_delayed(optimize_graph=True).ravel())


def shared(value, name: str) -> Delayed:
    """Put a driver-side object (centers, a sample) into the graph once, shared by all block tasks."""
    return delayed(value, name=f"daskmeans-{name}-{tokenize(value)}", pure=True)


def map_blocks_delayed(function, name: str, block_args: list[list], *common_args) -> list[Delayed]:
    """Apply ``function(*per_block_args, *common_args)`` to every block.

    Parameters
    ----------
    function : callable
    name : str
        Pass name; task keys are ``("daskmeans-NAME-TOKEN", i)``.
    block_args : list of lists
        ``block_args[i]`` are the per-block arguments of block ``i`` (delayed blocks, offsets, ...).
    *common_args
        Arguments shared by every block (wrap large ones with :func:`shared`).
    """
    token = tokenize(function, name, block_args, common_args)
    key = f"daskmeans-{name}-{token}"
    return [
        delayed(function, pure=True)(*args, *common_args, dask_key_name=(key, i))
        for i, args in enumerate(block_args)
    ]


def tree_reduce(parts: list[Delayed], combine, name: str, split_every: int = SPLIT_EVERY) -> Delayed:
    """Reduce partial results pairwise in a fixed tree, so the result does not depend on the scheduler.

    Parameters
    ----------
    parts : list of Delayed
    combine : callable
        ``combine(list_of_partials) -> partial``; must be associative.
    name : str
    split_every : int
        Fan-in of the tree.
    """
    token = tokenize(parts, combine, name)
    level = 0
    while len(parts) > 1:
        key = f"daskmeans-{name}-combine-{token}-{level}"
        parts = [
            delayed(combine, pure=True)(parts[i : i + split_every], dask_key_name=(key, i // split_every))
            for i in range(0, len(parts), split_every)
        ]
        level += 1
    if len(parts) == 1 and level == 0:
        key = f"daskmeans-{name}-combine-{token}-0"
        return delayed(combine, pure=True)(parts, dask_key_name=(key, 0))
    return parts[0]


def block_offsets(array) -> np.ndarray:
    """Global index of the first row of each block."""
    return np.concatenate([[0], np.cumsum(array.chunks[0])[:-1]]).astype(np.int64)


def stored_blocks(array) -> list[Delayed]:
    """One delayed object per row block of the data *as stored* (see :mod:`daskmeans.engine.slabs`): a task
    converts it slab by slab (:func:`~daskmeans.engine.slabs.slabs`), never whole."""
    return blocks_of(stored_form(array))


def block_args(array, weights=None, *states) -> list[list]:
    """Per-block argument lists: the data block as stored, its first row's index, its weights (or None), states."""
    data_blocks = stored_blocks(array)
    offsets = block_offsets(array)
    weight_blocks = blocks_of(weights) if weights is not None else [None] * len(data_blocks)
    state_blocks = [list(state) for state in states]
    return [
        [data_blocks[i], int(offsets[i]), weight_blocks[i], *[state[i] for state in state_blocks]]
        for i in range(len(data_blocks))
    ]


__all__ = ["blocks_of", "stored_blocks", "shared", "map_blocks_delayed", "tree_reduce", "block_offsets", "block_args", "dask"]
