"""The lightweight coreset passes and their proposal: unbiased weighted sums (by simulation), the probabilities,
reproducibility."""

import dask
import dask.array as da
import numpy as np
import pytest

from daskmeans import lightweight_coreset
from daskmeans.algorithms.coreset import draw_coreset
from daskmeans.exceptions import InputDataError, InvalidParameterError
from daskmeans.passes import proposal


def skewed_data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    X[: n // 20] *= 12.0  # a few far rows: q differs much from uniform
    return X


def test_block_probabilities_are_the_sums_of_q():
    X = skewed_data()
    mean = X.mean(0)
    array = da.from_array(X, chunks=(90, 3))
    (masses,) = dask.compute(proposal.block_masses_graph(array, mean), scheduler="sync")
    spread = ((X - mean) ** 2).sum(1)
    q = 1 / (2 * len(X)) + spread / (2 * spread.sum())
    edges = np.cumsum([0, *array.chunks[0]])
    expected = [q[a:b].sum() for a, b in zip(edges[:-1], edges[1:])]
    np.testing.assert_allclose(proposal.block_probabilities(masses), expected, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("weighted", [False, True])
def test_weighted_sums_are_unbiased(weighted):
    """Over many coresets, sum_i w_i f(x_i) averages to sum_x f(x) (within 4 standard errors)."""
    X = skewed_data()
    sample_weight = np.random.default_rng(1).uniform(0.0, 3.0, len(X)) if weighted else np.ones(len(X))
    array = da.from_array(X, chunks=(90, 3))
    weights = da.from_array(sample_weight, chunks=90) if weighted else None
    functions = {
        "count": lambda P: np.ones(len(P)),
        "x0": lambda P: P[:, 0],
        "norm2": lambda P: (P**2).sum(1),
        "far": lambda P: (np.abs(P[:, 1]) > 2).astype(float),
    }
    truth = {name: float(sample_weight @ f(X)) for name, f in functions.items()}
    estimates = {name: [] for name in functions}
    with dask.config.set(scheduler="sync"):
        for seed in range(400):
            _, points, w, _ = draw_coreset(array, 40, seed, mean=X.mean(0), weights=weights)
            for name, f in functions.items():
                estimates[name].append(float(w @ f(points)))
    for name, values in estimates.items():
        values = np.asarray(values)
        standard_error = values.std(ddof=1) / np.sqrt(len(values))
        assert abs(values.mean() - truth[name]) < 4 * standard_error + 1e-9 * abs(truth[name]), name


def test_weights_are_one_over_m_q():
    X = skewed_data()
    array = da.from_array(X, chunks=(100, 3))
    indices, points, w, passes = draw_coreset(array, 64, 3, mean=X.mean(0))
    spread = ((X - X.mean(0)) ** 2).sum(1)
    q = 1 / (2 * len(X)) + spread / (2 * spread.sum())
    np.testing.assert_array_equal(points, X[indices])
    np.testing.assert_allclose(w, 1 / (64 * q[indices]), rtol=1e-12)
    assert passes == 2 and len(indices) == 64


def test_stored_integer_rows_travel_as_stored_and_arrive_in_the_compute_dtype():
    X = np.random.default_rng(2).integers(0, 255, size=(300, 8), dtype=np.uint8)
    array = da.from_array(X, chunks=(70, 8))
    indices, points, _, _ = draw_coreset(array, 50, 1, mean=X.mean(0, dtype=np.float64))
    assert points.dtype == np.float32 and points.flags.c_contiguous
    np.testing.assert_array_equal(points, X[indices].astype(np.float32))


def test_rows_of_zero_weight_are_never_drawn():
    X = skewed_data()
    sample_weight = (np.arange(len(X)) % 3 == 0).astype(float)
    points, w = lightweight_coreset(X, 200, random_state=0, sample_weight=sample_weight, chunk_rows=70)
    allowed = {tuple(row) for row in X[sample_weight > 0]}
    assert all(tuple(row) in allowed for row in points)


def test_same_seed_same_coreset_on_a_cluster_and_locally(cluster_client):
    X = skewed_data(n=3000).astype(np.float32)
    local = lightweight_coreset(X, 500, random_state=7, chunk_rows=400)
    remote = lightweight_coreset(X, 500, random_state=7, chunk_rows=400, client=cluster_client)
    np.testing.assert_array_equal(local[0], remote[0])
    np.testing.assert_array_equal(local[1], remote[1])
    assert local[0].dtype == np.float32 and local[1].dtype == np.float64
    other_seed = lightweight_coreset(X, 500, random_state=8, chunk_rows=400)
    assert not np.array_equal(local[0], other_seed[0])


def test_another_chunking_draws_another_valid_coreset():
    X = skewed_data(n=2000)
    a_points, a_w = lightweight_coreset(X, 3000, random_state=1, chunk_rows=250)
    b_points, b_w = lightweight_coreset(X, 3000, random_state=1, chunk_rows=1000)
    assert not np.array_equal(a_points, b_points)
    # both estimate n
    assert a_w.sum() == pytest.approx(2000, rel=0.1) and b_w.sum() == pytest.approx(2000, rel=0.1)


@pytest.mark.parametrize("m", [0, -3, 2.5, "10", None, True])
def test_bad_coreset_size_is_a_clear_error(m):
    with pytest.raises(InvalidParameterError, match="coreset size"):
        lightweight_coreset(np.ones((10, 2)), m)


def test_non_finite_data_is_refused_before_drawing():
    X = skewed_data()
    X[5, 1] = np.nan
    with pytest.raises(InputDataError, match="non-finite"):
        lightweight_coreset(X, 10)
