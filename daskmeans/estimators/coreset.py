"""Lightweight coresets (Bachem, Lucic & Krause, KDD 2018) of data of any size, as distributed passes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._validation import check_int
from ..algorithms.coreset import draw_coreset
from ..engine.client import resolve_client
from ..engine.random import seed_from_random_state, stage_key
from .base import prepare_input

if TYPE_CHECKING:  # for type checkers only
    import dask.array as da
    from distributed import Client
    from numpy.typing import ArrayLike

    from .base import InputData


def lightweight_coreset(
    X: InputData,
    m: int,
    random_state: int | np.random.Generator | None = None,
    *,
    sample_weight: ArrayLike | da.Array | None = None,
    chunk_rows: int | None = None,
    client: Client | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A lightweight coreset of ``X``: ``m`` rows drawn with replacement, and their weights.

    Every row ``x`` is drawn with probability ``q(x) = 1/(2n) + ||x - mu||^2 / (2 sum ||x' - mu||^2)``
    (``mu``: the mean of the rows) and gets the weight ``1 / (m q(x))``; weighted sums over the coreset are
    unbiased estimates of the sums over the data, and k-means or a GMM fitted to the weighted coreset
    approximates the one fitted to all of ``X`` (Bachem et al. 2018). With ``sample_weight`` the probabilities
    and weights carry the sample weights: ``q(x) = w/(2 sum w) + w ||x - mu||^2 / (2 sum w ||x' - mu||^2)``, weight
    ``w / (m q(x))``.

    Three passes over the data: the summary (mean, and the checks every fit makes), the spread of every block,
    and the draws (which read only the blocks that received draws). The ``m`` draws are split among the blocks
    by one multinomial on the block masses, then drawn inside each block.

    Parameters
    ----------
    X : array-like, dask array, xarray.DataArray or path to a Zarr store / .npy file, shape (n, d)
    m : int
        Coreset size (>= 1; may exceed n: draws are with replacement).
    random_state : int, numpy Generator or None
        Same value, same coreset on any scheduler and any number of workers, for a given chunking of ``X``
        (another chunking draws an equally valid but different coreset).
    sample_weight : array-like (n,), optional
        Non-negative weight of each row.
    chunk_rows : int, optional
        Rows per block when daskmeans chunks the input.
    client : distributed.Client, optional

    Returns
    -------
    points : ndarray (m, d)
        The drawn rows (float32 or float64, as the data is computed in).
    weights : float64 ndarray (m,)
        Their coreset weights; pass them as ``sample_weight`` to any daskmeans estimator.

    Raises
    ------
    InvalidParameterError
        ``m`` is not a positive integer.
    InputDataError
        Non-finite values or bad weights in the data.

    See Also
    --------
    CoresetGaussianMixture : Draws such a coreset and fits a Gaussian mixture on it.
    KMeans : Fits the weighted coreset like any data, with ``sample_weight``.

    References
    ----------
    - O. Bachem, M. Lucic, A. Krause, "Scalable k-Means Clustering via Lightweight Coresets", Proceedings of
      the 24th ACM SIGKDD International Conference on Knowledge Discovery & Data Mining (KDD 2018).
      doi:10.1145/3219819.3219973, arXiv:1702.08248.

    Examples
    --------
    >>> import numpy as np
    >>> from daskmeans import lightweight_coreset
    >>> rng = np.random.default_rng(0)
    >>> blobs = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    >>> X = np.concatenate([center + rng.normal(size=(100, 2)) for center in blobs])
    >>> points, weights = lightweight_coreset(X, 60, random_state=0)
    >>> points.shape, weights.shape
    ((60, 2), (60,))

    The weighted coreset stands for the data: k-means fitted on its 60 points finds the three blobs.

    >>> from daskmeans import KMeans
    >>> model = KMeans(n_clusters=3, random_state=0).fit(points, sample_weight=weights)
    >>> sorted(np.bincount(model.predict(X)).tolist())
    [100, 100, 100]
    """
    m = check_int(m, "m (the coreset size)", minimum=1)
    seed = seed_from_random_state(random_state)
    client = resolve_client(client)
    data, weights, summary = prepare_input(X, sample_weight, client, chunk_rows=chunk_rows)
    _, points, coreset_weights, _ = draw_coreset(
        data.array, m, stage_key(seed, "lwcs"), mean=summary.mean, weights=weights, client=client
    )
    return points, coreset_weights
