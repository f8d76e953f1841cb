"""Lightweight coresets (Bachem et al.): the sampling distribution pass and the weighted draw."""

from __future__ import annotations

import numpy as np

from ..engine.client import compute_now
from ..passes import coreset as coreset_pass
from ..passes.proposal import block_masses_graph


def draw_coreset(array, m: int, seed: int, *, mean, weights=None, client=None):
    """The coreset of a validated dask array whose mean is known (the summary pass gives it).

    Parameters
    ----------
    array : dask.array.Array (n, d)
    m : int
        Number of draws (with replacement).
    seed : int
        Stage key of the draws.
    mean : ndarray (d,)
    weights : dask.array.Array (n,), optional
    client : distributed.Client, optional

    Returns
    -------
    indices : int64 (m,)
        Global row of each draw (block order; a row drawn twice appears twice).
    points : ndarray (m, d)
        The drawn rows in the compute dtype (float32 for integer rows).
    coreset_weights : float64 (m,)
    passes : int
        Passes over the data made here (2: masses and draws; the draws read only the blocks that got some).
    """
    (masses,) = compute_now(block_masses_graph(array, mean, weights, name="lwcs-masses"), client=client)
    parts = compute_now(*coreset_pass.draw_parts(array, masses, mean, m, seed, weights), client=client)
    indices, points, coreset_weights = coreset_pass.concatenate_draws(parts)
    return indices, points, coreset_weights, 2


def every_row(array, weights=None, client=None):
    """The coreset that a coreset size of at least ``n`` stands for: every row once, with its weight.

    Draws with replacement would repeat some rows and leave others out (40 draws from 40 rows hit about 25 of
    them), while the data itself is the most faithful coreset there is: one read brings it.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    weights : dask.array.Array (n,), optional
    client : distributed.Client, optional

    Returns
    -------
    points : ndarray (n, d), dtype of ``array``
    coreset_weights : float64 (n,)
        The sample weights (ones without them).
    passes : int
        1.

    Examples
    --------
    >>> import dask.array as da
    >>> import numpy as np
    >>> points, point_weights, _ = every_row(da.from_array(np.eye(3), chunks=(2, 3)))
    >>> points.shape, point_weights.tolist()
    ((3, 3), [1.0, 1.0, 1.0])
    """
    if weights is None:
        (points,) = compute_now(array, client=client)
        return np.ascontiguousarray(points), np.ones(points.shape[0]), 1
    points, point_weights = compute_now(array, weights, client=client)
    return np.ascontiguousarray(points), np.asarray(point_weights, dtype=np.float64).ravel(), 1
