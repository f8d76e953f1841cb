"""A uniform sample of rows kept on the workers, drawn in one pass: what k-means|| looks at when the data holds far
more rows than its candidates need (:func:`daskmeans.algorithms.init.kmeans_parallel_rows`).

Each row is kept independently with the same probability, decided by a uniform number keyed by the stage key and
the row's global index (:func:`daskmeans.engine.random.row_uniforms`), so the sample depends on neither the
chunking nor the workers. The kept rows stay as stored (uint8 stays uint8) in the workers' memory, regrouped into
blocks of about :data:`~daskmeans.config.ROW_SAMPLE_BLOCK_ROWS` rows, with their weights beside them.
"""

from __future__ import annotations

import dask.array as da
import numpy as np

from .. import config
from ..engine.client import compute_now, persist_now
from ..engine.graph import block_args, map_blocks_delayed, task
from ..engine.random import row_uniforms
from ..engine.slabs import stored_form, with_stored_form


def _keep_rows(block, offset, weights, key, probability):
    """The rows of a block whose uniform is below ``probability``, as stored, and their weights (or None)."""
    block = np.asarray(block)
    keep = row_uniforms(key, offset, block.shape[0]) < probability
    kept_weights = None if weights is None else np.asarray(weights, dtype=np.float64)[keep]
    return block[keep], kept_weights


def _rows_kept(part):
    return part[0].shape[0]


def _part_item(part, index):
    return part[index]


def _key_beside(name: str, key):
    """A task key for ``name`` of the part under ``key`` (a string or a ``(name, index)`` tuple)."""
    return (f"daskmeans-row-sample-{name}-{key[0]}", key[1]) if isinstance(key, tuple) else f"{name}-{key}"


def sampled_rows(array, weights, probability: float, key: int, client=None):
    """Every row of ``array`` kept with probability ``probability``, held by the workers.

    Parameters
    ----------
    array : dask.array.Array (n, d)
        The data (its stored form is what is read and kept).
    weights : dask.array.Array (n,) or None
        The rows' weights; the kept rows keep theirs.
    probability : float
        In (0, 1].
    key : int
        The stage key of the draws.
    client : distributed.Client, optional

    Returns
    -------
    sample : dask.array.Array (m, d)
        In ``array``'s dtype, its stored form attached (:func:`~daskmeans.engine.slabs.with_stored_form`), the
        blocks persisted.
    sample_weights : dask.array.Array (m,) or None
    """
    parts = persist_now(
        *map_blocks_delayed(
            _keep_rows, "row-sample", block_args(array, weights), int(key), float(probability), reads_data=True
        ),
        client=client,
    )
    sizes = compute_now(*[task(_key_beside("size", part.key), _rows_kept, part) for part in parts], client=client)
    stored = stored_form(array)
    kept = [(part, int(size)) for part, size in zip(parts, sizes) if size]
    if not kept:
        empty = da.zeros((0, array.shape[1]), dtype=stored.dtype)
        return with_stored_form(empty.astype(array.dtype), empty), (None if weights is None else da.zeros(0))
    rows = da.concatenate(
        [
            da.from_delayed(
                task(_key_beside("rows", part.key), _part_item, part, 0),
                shape=(size, array.shape[1]),
                dtype=stored.dtype,
            )
            for part, size in kept
        ]
    )
    total = rows.shape[0]
    block = max(1, min(total, config.ROW_SAMPLE_BLOCK_ROWS))
    rows = rows.rechunk({0: block, 1: -1})
    sample_weights = None
    if weights is not None:
        sample_weights = da.concatenate(
            [
                da.from_delayed(
                    task(_key_beside("weights", part.key), _part_item, part, 1), shape=(size,), dtype=np.float64
                )
                for part, size in kept
            ]
        ).rechunk({0: block})
        rows, sample_weights = persist_now(rows, sample_weights, client=client)
    else:
        (rows,) = persist_now(rows, client=client)
    return with_stored_form(rows.astype(array.dtype), rows), sample_weights


__all__ = ["sampled_rows"]
