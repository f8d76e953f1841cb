"""k-means on points in memory (the two-level seeding's levels): greedy k-means++ with batched draws against a
plain transcription of its rule, its quality against greedy k-means++, Lloyd in the rows' compute dtype against
NumPy, and the exact test for more distinct rows than centers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from daskmeans.algorithms.sample_kmeans import (
    LLOYD_CHUNK_ROWS,
    batched_kmeans_plusplus,
    count_distinct,
    lloyd,
    more_distinct_than,
    weighted_kmeans_plusplus,
)


def reference_batched_plusplus(points, n_clusters, rng, trials, batch):
    """The rule, plainly: the candidates of ``batch`` centers drawn from the same squared distances; a later
    center's candidate kept with probability (its squared distance now) / (the one it was drawn by), new draws
    from the current distances for those not kept; each center the candidate of its own that leaves the smallest
    potential given the centers chosen before it."""
    points = np.asarray(points, dtype=np.float64)
    m = len(points)

    def dist2(i):
        return ((points - points[i]) ** 2).sum(axis=1)

    def draw(weights, count):
        cumulative = np.cumsum(weights)
        targets = rng.random(count) * cumulative[-1]
        return np.minimum(np.searchsorted(cumulative, targets, side="right"), m - 1)

    first = int(rng.choice(m, p=np.full(m, 1.0 / m)))
    chosen, closest = [first], dist2(first)
    while len(chosen) < n_clusters:
        drawn = min(batch, n_clusters - len(chosen))
        drawn_from = closest
        candidates = draw(drawn_from, drawn * trials)
        keep = rng.random((drawn - 1) * trials) if drawn > 1 else None
        for j in range(drawn):
            own = list(candidates[j * trials : (j + 1) * trials])
            if j > 0:
                u = keep[(j - 1) * trials : j * trials]
                own = [i for i, ui in zip(own, u) if ui * drawn_from[i] < closest[i]]
                if len(own) < trials:
                    own += list(draw(closest, trials - len(own)))
            options = [np.minimum(dist2(i), closest) for i in own]
            best = int(np.argmin([o.sum() for o in options]))
            chosen.append(int(own[best]))
            closest = options[best]
    return np.array(chosen)


def small_integer_points(seed, m=600, d=3):
    """Points whose squared distances are exact in float32 (so the expansion's rounding cannot move a draw)."""
    return np.random.default_rng(seed).integers(0, 20, size=(m, d)).astype(np.float64)


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_plusplus_follows_its_rule(batch, seed):
    points = small_integer_points(seed)
    k, trials = 40, 2 + int(math.log(40))
    centers = batched_kmeans_plusplus(points, k, np.random.default_rng(seed), batch=batch)
    expected = reference_batched_plusplus(points, k, np.random.default_rng(seed), trials, batch)
    np.testing.assert_array_equal(centers, points[expected])


def test_one_center_a_batch_is_greedy_kmeans_plusplus():
    points = small_integer_points(5)
    greedy = weighted_kmeans_plusplus(points, np.ones(len(points)), 30, np.random.default_rng(9))
    np.testing.assert_array_equal(batched_kmeans_plusplus(points, 30, np.random.default_rng(9), batch=1), greedy)
    assert batched_kmeans_plusplus(points, 30, np.random.default_rng(9)).shape == (30, 3), "30 < 32: one a batch"


def test_descriptors_are_seeded_in_float32_with_distinct_rows():
    rng = np.random.default_rng(2)
    rows = rng.integers(0, 256, size=(3000, 16)).astype(np.uint8)
    centers = batched_kmeans_plusplus(rows, 200, np.random.default_rng(0))
    assert centers.dtype == np.float32 and centers.shape == (200, 16)
    assert count_distinct(centers) == 200
    as_rows = {tuple(r) for r in rows.astype(np.float32)}
    assert all(tuple(c) in as_rows for c in centers), "every center is a row"


def potential(points, centers):
    return float(((points[:, None, :] - centers[None]) ** 2).sum(-1).min(axis=1).sum())


def test_batched_draws_seed_about_as_well_as_greedy():
    """Over ten seeds of a mixture of 256 blobs, the batched draws (16 centers a batch at k = 256) leave a
    potential within 5% of greedy k-means++'s on average, and one center in nearly every blob. (Without the
    thinning and the new draws, a batch's later centers choose among stale or fewer candidates: about 11% more.)"""
    rng = np.random.default_rng(0)
    truth = rng.uniform(-10, 10, size=(256, 8))
    points = (truth[rng.integers(0, 256, 8000)] + 0.3 * rng.standard_normal((8000, 8))).astype(np.float32)
    batched, greedy, found = [], [], []
    for seed in range(10):
        centers = batched_kmeans_plusplus(points, 256, np.random.default_rng(seed))
        batched.append(potential(points, centers))
        ones = np.ones(len(points))
        greedy.append(potential(points, weighted_kmeans_plusplus(points, ones, 256, np.random.default_rng(seed))))
        found.append(len(np.unique(((truth[:, None] - centers[None]) ** 2).sum(-1).argmin(axis=0))))
    assert np.mean(batched) <= 1.05 * np.mean(greedy)
    assert min(found) >= 240


def numpy_lloyd(values, start, n_iter):
    """Lloyd's iterations plainly: each center the mean of the rows nearest to it (kept where it has none)."""
    centers = start.copy()
    for _ in range(n_iter):
        labels = np.argmin(((values[:, None, :] - centers[None]) ** 2).sum(-1), axis=1)
        for c in range(len(centers)):
            if np.any(labels == c):
                centers[c] = values[labels == c].mean(axis=0)
    return centers


def test_lloyd_assigns_in_the_rows_compute_dtype():
    """uint8 rows are assigned with float32 centers (as the passes assign them) and summed in float64; the
    result is NumPy's Lloyd on the same rows."""
    rng = np.random.default_rng(1)
    truth = rng.integers(20, 230, size=(12, 6))
    rows = np.clip(truth[rng.integers(0, 12, 4000)] + rng.normal(0, 4, (4000, 6)), 0, 255).astype(np.uint8)
    start = rows[rng.choice(4000, 12, replace=False)].astype(np.float64)
    reference = numpy_lloyd(rows.astype(np.float64), start, 4)
    found = lloyd(rows, start, max_iter=4)
    assert found.dtype == np.float64
    np.testing.assert_allclose(found, reference, rtol=1e-9)


def test_lloyd_in_chunks_on_threads_is_numpy_lloyd_whatever_the_threads():
    """Rows of several chunks: the centers are NumPy's Lloyd's, and the same to the last bit on 1 or 3 threads
    (the chunks and the order of their sums do not follow the threads)."""
    rng = np.random.default_rng(3)
    truth = rng.uniform(-20, 20, size=(9, 4))
    rows = truth[rng.integers(0, 9, 3 * LLOYD_CHUNK_ROWS + 100)] + rng.normal(size=(3 * LLOYD_CHUNK_ROWS + 100, 4))
    start = rows[:9].copy()
    reference = numpy_lloyd(rows, start, 5)
    one = lloyd(rows, start, max_iter=5)
    np.testing.assert_allclose(one, reference, rtol=1e-9)
    np.testing.assert_array_equal(lloyd(rows, start, max_iter=5, threads=3), one)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.uint8, np.int16])
def test_more_distinct_than_is_exact(dtype):
    rng = np.random.default_rng(4)
    distinct = rng.integers(0, 100, size=(50, 7)).astype(dtype)
    distinct = np.unique(distinct, axis=0)
    n = len(distinct)
    repeated = distinct[rng.integers(0, n, 5000)]
    repeated[:n] = distinct  # every distinct row present
    assert more_distinct_than(repeated, n - 1)
    assert not more_distinct_than(repeated, n)
    assert not more_distinct_than(repeated[:3], 3), "no more rows than the count"


def test_negative_zero_is_the_same_row_as_zero():
    rows = np.array([[0.0, 1.0], [-0.0, 1.0], [2.0, 3.0]])
    assert count_distinct(rows) == 2
    assert not more_distinct_than(rows, 2) and more_distinct_than(rows, 1)


def test_more_distinct_than_agrees_with_sorting_on_descriptors():
    rng = np.random.default_rng(6)
    rows = rng.integers(0, 4, size=(4000, 5)).astype(np.uint8)  # 1024 possible rows: many repeats
    exact = count_distinct(rows)
    for count in (exact - 1, exact, exact + 1, 10):
        assert more_distinct_than(rows, count) == (exact > count)
