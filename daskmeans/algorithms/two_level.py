"""Two-level (hierarchical) k-means seeding for large k: a coarse k-means with about sqrt(k) centers, then k fine
centers split among the coarse clusters in proportion to their sizes, each coarse cluster's fine k-means run as a
task on the workers.

Three passes over the data: a uniform sample of rows (the coarse k-means runs on it on the driver), the rows per
coarse cluster, then a bounded sample of every coarse cluster, which stays on the workers where the fine problems
run. The driver never holds more than the k centers, the coarse sample and a few numbers per coarse cluster.
"""

from __future__ import annotations

import math

import numpy as np
from dask.base import tokenize
from dask.system import CPU_COUNT

from .. import config
from ..engine.client import compute_now
from ..engine.graph import task
from ..engine.random import stage_generator, stage_key
from ..exceptions import InputDataError, InvalidParameterError
from ..passes.sampling import sample_rows
from ..passes.two_level import cluster_samples_graphs, coarse_labels_and_counts, sample_thresholds
from .result import RunContext
from .sample_kmeans import batched_kmeans_plusplus, count_distinct, lloyd, more_distinct_than

#: Passes over the data of :func:`two_level_centers` (coarse sample, rows per coarse cluster, fine samples).
TWO_LEVEL_PASSES = 3


def _no_progress(done, total, note=None):
    """The default ``on_progress``: nothing is shown."""


def default_coarse_clusters(n_clusters: int) -> int:
    """Coarse centers for ``n_clusters`` fine ones: ``round(sqrt(n_clusters))``, at least 1."""
    return max(1, int(round(math.sqrt(n_clusters))))


def check_two_level_options(n_clusters, n_coarse, points_per_center, n_iter):
    """Validate the options of :func:`two_level_centers`.

    Raises
    ------
    InvalidParameterError
        ``n_coarse`` not None nor an integer in ``1 .. n_clusters``, ``points_per_center`` not an integer >= 1,
        ``n_iter`` not an integer >= 0.
    """

    def integer(value):
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))

    if n_coarse is not None and not (integer(n_coarse) and 1 <= n_coarse <= n_clusters):
        raise InvalidParameterError(
            f"n_coarse must be None (round(sqrt(n_clusters))) or an integer from 1 to n_clusters={n_clusters}, "
            f"got {n_coarse!r}."
        )
    if not (integer(points_per_center) and points_per_center >= 1):
        raise InvalidParameterError(f"points_per_center must be an integer >= 1, got {points_per_center!r}.")
    if not (integer(n_iter) and n_iter >= 0):
        raise InvalidParameterError(f"n_iter must be an integer >= 0, got {n_iter!r}.")


def sample_kmeans(points, n_clusters, rng, n_iter=None, threads=1, n_local_trials=None):
    """k-means on points in memory: greedy k-means++ with batched draws
    (:func:`~daskmeans.algorithms.sample_kmeans.batched_kmeans_plusplus`), then up to ``n_iter`` Lloyd iterations
    (:func:`~daskmeans.algorithms.sample_kmeans.lloyd`), both in the points' compute dtype.

    Parameters
    ----------
    points : ndarray (m, d)
    n_clusters : int
    rng : numpy.random.Generator
    n_iter : int, optional
        Default :data:`~daskmeans.config.TWO_LEVEL_LLOYD_ITER`.
    threads : int
        Threads of the Lloyd iterations (:func:`~daskmeans.algorithms.sample_kmeans.lloyd`).
    n_local_trials : int, optional
        Candidates per center of the k-means++ seeding; default ``2 + floor(log n_clusters)``.

    Returns
    -------
    ndarray (min(n_clusters, distinct rows), d), dtype of ``points``
        With no more distinct rows than ``n_clusters``, those rows (sorted): fewer centers than asked for when
        there are fewer.
    """
    points = np.asarray(points)
    if not more_distinct_than(points, n_clusters):
        return np.unique(points, axis=0)
    centers = batched_kmeans_plusplus(points, n_clusters, rng, n_local_trials)
    n_iter = config.TWO_LEVEL_LLOYD_ITER if n_iter is None else n_iter
    return lloyd(points, centers, max_iter=n_iter, threads=threads).astype(points.dtype)


def _quotas(n_clusters, mass, low, high):
    """Real quotas ``clip(t * mass, low, high)`` summing to ``n_clusters`` (``mass > 0``, ``sum(low) <= n_clusters
    <= sum(high)``): ``t = n_clusters / sum(mass)`` when no bound binds, else the ``t`` that makes the sum right
    (the sum is piecewise linear and nondecreasing in ``t``; found between its breakpoints)."""
    quota = mass * (n_clusters / mass.sum())
    if np.all((quota >= low) & (quota <= high)):
        return quota
    breaks = np.unique(np.concatenate([low / mass, high / mass]))
    sums = np.array([np.clip(b * mass, low, high).sum() for b in breaks])
    i = int(np.searchsorted(sums, n_clusters, side="left"))
    if i == 0 or sums[i] == n_clusters:
        t = breaks[i]
    else:
        t = breaks[i - 1] + (n_clusters - sums[i - 1]) * (breaks[i] - breaks[i - 1]) / (sums[i] - sums[i - 1])
    return np.clip(t * mass, low, high)


def split_centers(n_clusters, mass, rows):
    """Fine centers per coarse cluster: proportional to its mass by largest remainder, within ``[1, rows]``.

    Every coarse cluster with rows gets at least one center (when ``n_clusters`` is at least their number) and
    never more centers than rows. Without binding bounds each cluster gets the floor of its quota
    ``n_clusters * mass / sum(mass)``, and the clusters of largest remainder (lowest index first among equal
    remainders) one more each (Hamilton's method). Where a bound binds, the quotas are ``clip(t * mass, low,
    high)`` with the ``t`` that keeps their sum ``n_clusters``, rounded the same way.

    Parameters
    ----------
    n_clusters : int
    mass : float ndarray (k_coarse,)
        Size of each coarse cluster (its rows, or their total weight).
    rows : int ndarray (k_coarse,)
        Rows of positive weight of each coarse cluster.

    Returns
    -------
    int64 ndarray (k_coarse,)
        Summing to exactly ``n_clusters``.

    Raises
    ------
    InputDataError
        Fewer rows (of positive weight) than ``n_clusters``.
    """
    mass = np.asarray(mass, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.int64)
    k = int(n_clusters)
    if rows.sum() < k:
        raise InputDataError(
            f"The data has only {int(rows.sum())} row(s) (with positive weight) but n_clusters={k}; lower n_clusters."
        )
    usable = np.flatnonzero((rows > 0) & (mass > 0))
    if len(usable) == 0:
        raise InputDataError("The data has no row of positive weight; check sample_weight.")
    low = np.full(len(usable), 1.0 if k >= len(usable) else 0.0)
    high = rows[usable].astype(np.float64)
    quota = _quotas(k, mass[usable], low, high)
    counts = np.clip(np.floor(quota), low, high).astype(np.int64)
    short = k - int(counts.sum())
    if short > 0:
        open_ = np.flatnonzero(counts < high)
        remainder = quota[open_] - counts[open_]
        counts[open_[np.lexsort((open_, -remainder))[:short]]] += 1
    out = np.zeros(len(mass), dtype=np.int64)
    out[usable] = counts
    return out


def fine_batches(caps, n_blocks: int):
    """The batch (one fine task) of every coarse cluster: one per cluster with a sample, or contiguous batches of
    them when that would make more than ``TWO_LEVEL_MAX_MERGE_TASKS`` first-level merge tasks (each batch merges
    ``ceil(n_blocks / SPLIT_EVERY)`` groups of blocks). Clusters without a sample get -1."""
    sampled = np.flatnonzero(np.asarray(caps) > 0)
    groups = max(1, math.ceil(n_blocks / config.SPLIT_EVERY))
    n_batches = max(1, min(len(sampled), config.TWO_LEVEL_MAX_MERGE_TASKS // groups))
    batch_of = np.full(len(caps), -1, dtype=np.int64)
    for b, members in enumerate(np.array_split(sampled, n_batches)):
        batch_of[members] = b
    return batch_of


def _fine_batch(sample, clusters, fine_k, seed, n_iter, trials):
    """The fine k-means of each coarse cluster of a batch, on its sample (a task on a worker)."""
    labels, _, _, rows, _ = sample
    out = []
    for c, k in zip(clusters, fine_k):
        start, stop = np.searchsorted(labels, [c, c + 1])
        rng = stage_generator(seed, "two-level", "fine", int(c))
        out.append(sample_kmeans(rows[start:stop], int(k), rng, n_iter, n_local_trials=trials))
    return out


def _fine_settings(n_iter):
    """The fine problems' Lloyd iterations (``n_iter``, else :data:`~daskmeans.config.TWO_LEVEL_FINE_LLOYD_ITER`)
    and k-means++ candidates per center (:data:`~daskmeans.config.TWO_LEVEL_FINE_TRIALS`), checked."""
    fine_iter = config.TWO_LEVEL_FINE_LLOYD_ITER if n_iter is None else n_iter
    trials = config.TWO_LEVEL_FINE_TRIALS
    for name, value, low in (("TWO_LEVEL_FINE_LLOYD_ITER", fine_iter, 0), ("TWO_LEVEL_FINE_TRIALS", trials, 1)):
        if not (isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= low):
            raise InvalidParameterError(
                f"config.{name} must be an integer >= {low}, got {value!r}; set it with "
                f"daskmeans.config.set({name}=...)."
            )
    return int(fine_iter), int(trials)


def two_level_centers(
    array,
    n_clusters,
    seed,
    *,
    context=None,
    n_coarse=None,
    points_per_center=None,
    n_iter=None,
    on_progress=_no_progress,
):
    """Two-level k-means seeding: a coarse k-means, then fine k-means in each coarse cluster, on the workers.

    1. Coarse level (driver): ``n_coarse`` (default ``round(sqrt(n_clusters))``) centers by k-means++ and up to
       ``n_iter`` Lloyd iterations on a sample of ``points_per_center * n_coarse`` rows (uniform, or
       weight-proportional with ``weights``), drawn in one pass.
    2. One pass counts the rows (and their weight) nearest to each coarse center; :func:`split_centers` splits
       ``n_clusters`` among the coarse clusters in proportion to their weight, each non-empty one at least one
       center, none more than its rows.
    3. One pass draws a sample of every coarse cluster, ``points_per_center`` rows per fine center it was given
       (all its rows when it has fewer; each block sends on only about its share of that,
       :func:`~daskmeans.passes.two_level.sample_thresholds`); a task per coarse cluster (or per batch of them, for
       very many blocks) runs its k-means (k-means++ with :data:`~daskmeans.config.TWO_LEVEL_FINE_TRIALS`
       candidates per center, up to ``n_iter`` Lloyd iterations, by default
       :data:`~daskmeans.config.TWO_LEVEL_FINE_LLOYD_ITER`) on the workers where the
       sample lies, and returns its fine centers. They are concatenated in coarse-cluster order.

    The same ``seed`` gives the same centers on any scheduler, number of workers or chunking: every random draw
    is made per row from its global index or on the driver from a stage key, the coarse labels are exact nearest
    centers, and each fine problem has its own generator. (With weights, the coarse clusters' masses are float
    sums whose last bits may follow the chunking.)

    Memory: the driver holds ``O(n_clusters * d)`` for the centers, the coarse sample (``points_per_center *
    n_coarse * d`` values: with the defaults ``256 sqrt(k) d``, and a copy in the compute dtype when it is stored
    otherwise), the distances of a batch of k-means++ candidates (about ``128 x sample``), Lloyd's assignment (in
    slabs of ``ASSIGN_SLAB_BYTES``), a few numbers per coarse cluster, and the graph of the fine pass (one task per
    block, batch and group of blocks); nothing of size ``n`` or ``n_clusters ** 2``. Measured under tracemalloc at
    k = 4096, d = 4 (tests/algorithms/test_two_level.py): about 6 MiB, against a stated bound of 16 MiB plus 64
    bytes per center value. A worker's fine task holds its batch's samples (``points_per_center`` rows per fine
    center) and the k-means temporaries for them.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    n_clusters : int
    seed : int
        A stage key (:func:`daskmeans.engine.random.stage_key`) or root seed.
    context : RunContext, optional
        ``client``, and ``weights`` (dask array (n,)): with sample weights the samples are weight-proportional and
        the split follows the clusters' weights.
    n_coarse : int, optional
        Coarse centers (``1 .. n_clusters``); default ``round(sqrt(n_clusters))``.
    points_per_center : int, optional
        Rows sampled per center at both levels (faiss's ``max_points_per_centroid``); default
        :data:`~daskmeans.config.TWO_LEVEL_POINTS_PER_CENTER`.
    n_iter : int, optional
        Most Lloyd iterations of each k-means on a sample (0: k-means++ only); default
        :data:`~daskmeans.config.TWO_LEVEL_LLOYD_ITER` at the coarse level and
        :data:`~daskmeans.config.TWO_LEVEL_FINE_LLOYD_ITER` at the fine one.
    on_progress : callable
        ``on_progress(passes_done, passes_expected, note)`` after each pass and before the driver's work.

    Returns
    -------
    centers : ndarray (n_clusters, d), dtype of ``array``
        Fewer rows when a coarse cluster's sample had fewer distinct rows than its fine centers (data with about
        ``n_clusters`` distinct rows): :func:`daskmeans.algorithms.init.initial_centers` then seeds by k-means||,
        which looks at every row.
    n_passes : int

    Raises
    ------
    InvalidParameterError
        An option out of range (:func:`check_two_level_options`),
        :data:`~daskmeans.config.TWO_LEVEL_FINE_LLOYD_ITER` negative or
        :data:`~daskmeans.config.TWO_LEVEL_FINE_TRIALS` below 1.
    InputDataError
        Fewer rows (or distinct rows, when the coarse sample holds them all) of positive weight than
        ``n_clusters``.
    """
    context = context or RunContext()
    client, weights = context.client, context.weights
    points_per_center = config.TWO_LEVEL_POINTS_PER_CENTER if points_per_center is None else points_per_center
    coarse_iter = config.TWO_LEVEL_LLOYD_ITER if n_iter is None else n_iter
    check_two_level_options(n_clusters, n_coarse, points_per_center, coarse_iter)
    fine_iter, fine_trials = _fine_settings(n_iter)
    n = array.shape[0]
    n_coarse = default_coarse_clusters(n_clusters) if n_coarse is None else int(n_coarse)
    m = min(n, points_per_center * n_coarse)
    on_progress(0, TWO_LEVEL_PASSES, f"coarse sample of {m} rows")
    sample = sample_rows(array, m, stage_key(seed, "two-level", "coarse-sample"), weights, client=client)
    rows = np.asarray(sample[2])
    holds_every_row = len(rows) < m or m == n  # every row of positive weight is in the sample
    if len(rows) == 0 or (holds_every_row and not more_distinct_than(rows, n_clusters - 1)):
        raise InputDataError(
            f"The data has only {count_distinct(rows)} distinct row(s) (with positive weight) but "
            f"n_clusters={n_clusters}; lower n_clusters or remove duplicate rows."
        )
    on_progress(1, TWO_LEVEL_PASSES, f"coarse k-means: {n_coarse} centers on {len(rows)} rows on the driver")
    coarse = sample_kmeans(rows, n_coarse, stage_generator(seed, "two-level", "coarse"), coarse_iter, CPU_COUNT)
    labelled, counts = coarse_labels_and_counts(array, coarse, weights, client)
    fine_k = split_centers(n_clusters, counts[1], counts[0])
    caps = np.minimum(counts[0], points_per_center * fine_k)
    batch_of = fine_batches(caps, array.numblocks[0])
    on_progress(
        2,
        TWO_LEVEL_PASSES,
        f"fine k-means: {n_clusters} centers in {int((fine_k > 0).sum())} coarse clusters on the workers",
    )
    thresholds = sample_thresholds(caps, counts[0], counts[1], weights is not None)
    samples = cluster_samples_graphs(
        array, labelled, caps, thresholds, batch_of, stage_key(seed, "two-level", "fine-sample"), weights
    )
    members = [np.flatnonzero(batch_of == b) for b in range(len(samples))]
    name = f"daskmeans-two-level-fine-{tokenize(samples, fine_k, seed, fine_iter, fine_trials)}"
    fine = [
        task((name, b), _fine_batch, sample, members[b], fine_k[members[b]], int(seed), fine_iter, fine_trials)
        for b, sample in enumerate(samples)
    ]
    results = compute_now(*fine, client=client)
    centers = np.concatenate([c for batch in results for c in batch]).astype(array.dtype, copy=False)
    on_progress(TWO_LEVEL_PASSES, TWO_LEVEL_PASSES, None)
    return centers, TWO_LEVEL_PASSES
