"""Mini-batch kernel k-means' pools of batch rows: the seeding sample taken from the first pool (the first distinct
rows the steps draw) is a uniform sample without replacement, the pool is fetched once for the seeding and the
steps, and the seeding falls back to a pass of its own where the pool is too small or the rows are weighted."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from daskmeans.algorithms.kernel_kmeans import KernelSpec, kernel_seeding
from daskmeans.algorithms.result import RunContext
from daskmeans.passes.kernel_pools import StepPools
from daskmeans.passes.minibatch_pool import step_indices

#: An RBF kernel of a given width (the seeding resolves it on its sample).
RBF = KernelSpec("rbf", {"kappa": 1e4})


def _rows(n=60, d=3):
    X = np.arange(n * d, dtype=np.float64).reshape(n, d)
    return X, da.from_array(X, chunks=(17, d))


def _first_distinct(flat, m):
    seen, out = set(), []
    for value in flat:
        if value not in seen:
            seen.add(value)
            out.append(value)
    return np.array(out[:m]) if len(out) >= m else None


@pytest.mark.parametrize("use_cluster", [False, True])
def test_first_distinct_rows_are_the_first_rows_the_steps_draw_and_the_pool_is_fetched_once(use_cluster, request):
    X, array = _rows()
    client = request.getfixturevalue("cluster_client") if use_cluster else None
    pools = StepPools(array, None, client, batch_size=7, max_iter=12, seed=3)
    index, rows = pools.first_distinct_rows(20)
    drawn = step_indices(60, 7, 3, 0, 12)
    np.testing.assert_array_equal(index, _first_distinct(drawn.ravel(), 20))
    np.testing.assert_array_equal(rows, X[index])
    fetch = pools._pending[0][2]
    indices, batches, weights, _ = pools.take(0)
    assert weights is None and pools._pending == {} and pools._arrived == {}
    np.testing.assert_array_equal(indices, drawn)
    for t in range(12):
        np.testing.assert_array_equal(batches[t], X[drawn[t]])
    if use_cluster:
        assert all(piece.status == "finished" for piece in fetch)  # the seeding's fetch is the one the steps took


def test_first_distinct_rows_is_none_when_the_first_pool_draws_too_few():
    _, array = _rows()
    pools = StepPools(array, None, None, batch_size=4, max_iter=2, seed=0)
    assert pools.first_distinct_rows(9) is None  # 8 draws
    assert pools.take(0)[0].shape == (2, 4)


def test_first_distinct_rows_sample_every_row_alike():
    """The first m distinct rows of uniform draws with replacement: each row is in the sample with probability m / n."""
    n, m, seeds = 20, 5, 300
    _, array = _rows(n=n)
    counts = np.zeros(n)
    for seed in range(seeds):
        index, _ = StepPools(array, None, None, batch_size=6, max_iter=3, seed=seed).first_distinct_rows(m)
        assert len(set(index)) == m
        counts[index] += 1
    expected = seeds * m / n
    assert np.abs(counts - expected).max() < 5 * np.sqrt(seeds * (m / n) * (1 - m / n))


def test_seeding_takes_its_sample_from_the_pool_or_from_a_pass_of_its_own():
    X, array = _rows(n=300, d=4)
    X[:, 0] = np.sin(X[:, 0])  # rows distinct and not on a line
    array = da.from_array(X, chunks=(70, 4))
    pools = StepPools(array, None, None, batch_size=20, max_iter=10, seed=7)
    _, centers, _ = kernel_seeding(array, 4, RBF, "k-means++", 11, sample_size=50, pools=pools)
    first = _first_distinct(step_indices(300, 20, 7, 0, 10).ravel(), 50)
    assert set(centers.row_index) <= set(first)
    np.testing.assert_array_equal(centers.rows, X[centers.row_index])
    # a first pool of fewer distinct rows than the sample: the sample pass, as without pools
    small = StepPools(array, None, None, batch_size=5, max_iter=2, seed=7)
    _, with_small, _ = kernel_seeding(array, 4, RBF, "k-means++", 11, sample_size=50, pools=small)
    _, without, _ = kernel_seeding(array, 4, RBF, "k-means++", 11, sample_size=50)
    np.testing.assert_array_equal(with_small.row_index, without.row_index)


def test_weighted_seeding_keeps_its_weighted_sample():
    """The batches are uniform and the sample must follow the weights: rows of weight 0 are never seeds."""
    X, array = _rows(n=300, d=4)
    X[:, 0] = np.sin(X[:, 0])
    array = da.from_array(X, chunks=(70, 4))
    weights = np.zeros(300)
    weights[::3] = 1.0
    pools = StepPools(array, da.from_array(weights, chunks=70), None, batch_size=50, max_iter=10, seed=7)
    for seed in range(5):
        _, centers, _ = kernel_seeding(
            array,
            6,
            RBF,
            "k-means++",
            seed,
            sample_size=80,
            context=RunContext(weights=da.from_array(weights, chunks=70)),
            pools=pools,
        )
        assert np.all(weights[centers.row_index] > 0)
