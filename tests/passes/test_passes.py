"""The full-data passes against NumPy on small data, and their independence from chunking and scheduler."""

import dask
import dask.array as da
import numpy as np
import pytest

from daskmeans.engine.client import compute_now
from daskmeans.engine.graph import unfold_driver_combines
from daskmeans.engine.random import stage_key
from daskmeans.exceptions import InputDataError
from daskmeans.passes.assign import assign_stats_graph, finish_stats, lazy_labels, lazy_min_dist2
from daskmeans.passes.sampling import (
    finish_gather,
    gather_rows_graph,
    sample_rows,
    sample_without_replacement_graph,
    uniform_threshold,
    weight_totals_graph,
    weighted_indices_with_replacement_graph,
)
from daskmeans.passes.summary import check_summary, finish_summary, summary_graph, summary_on_driver


def _summary(X, chunks, weights=None):
    array = da.from_array(X, chunks=(chunks, X.shape[1]))
    w = None if weights is None else da.from_array(weights, chunks=chunks)
    (raw,) = dask.compute(summary_graph(array, w))
    return finish_summary(raw, len(X))


def test_summary_matches_numpy():
    X = np.random.default_rng(0).normal(3.0, 2.0, size=(1000, 5))
    s = _summary(X, 137)
    np.testing.assert_allclose(s.mean, X.mean(0), rtol=1e-12)
    np.testing.assert_allclose(s.variance, X.var(0), rtol=1e-10)
    assert s.n_nonfinite == 0 and s.first_nonfinite_row == -1 and s.total_weight == 1000
    assert s.max_abs == np.abs(X).max()


@pytest.mark.parametrize("weighted", [False, True])
def test_the_summary_of_a_driver_copy_is_the_summary_pass_to_the_last_bit(weighted):
    """The summary a fit on the driver takes from its copy of the rows: the same block function over the same blocks,
    reduced in the same tree, so the same moments, counts and row hash as the pass over the cluster's blocks."""
    from daskmeans.engine.driver import DriverCopy

    rng = np.random.default_rng(3)
    X = rng.normal(50.0, 20.0, size=(2900, 7)).astype(np.float32)
    X[[17, 2100], [2, 5]] = np.nan
    array = da.from_array(X, chunks=(230, 7))  # 13 blocks: more than one level of the tree
    weights = da.from_array(rng.uniform(0.5, 2.0, 2900), chunks=230) if weighted else None
    (on_cluster,) = dask.compute(summary_graph(array, weights, True))
    on_driver = summary_on_driver(DriverCopy.gather(array, weights, None), True)
    assert len(on_driver) == len(on_cluster)
    for ours, theirs in zip(on_driver, on_cluster):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert finish_summary(on_driver, len(X)).n_nonfinite == 2


def test_summary_reports_nonfinite_count_and_first_row():
    X = np.ones((500, 3))
    X[321, 1] = np.nan
    X[400, 0] = np.inf
    X[401, 2] = -np.inf
    s = _summary(X, 100)
    assert s.n_nonfinite == 3 and s.first_nonfinite_row == 321
    with pytest.raises(InputDataError, match=r"3 non-finite.*row 321"):
        check_summary(s, np.float64)


def test_summary_refuses_bad_weights_and_overflowing_values():
    X = np.ones((10, 2))
    w = np.ones(10)
    w[4] = -1
    with pytest.raises(InputDataError, match="sample_weight has 1 negative.*row 4"):
        check_summary(_summary(X, 3, w), np.float64)
    with pytest.raises(InputDataError, match="sums to zero"):
        check_summary(_summary(X, 3, np.zeros(10)), np.float64)
    big = np.full((10, 2), 3e19, dtype=np.float32)
    with pytest.raises(InputDataError, match="overflow float32"):
        check_summary(_summary(big, 3), np.float32)


def computed_on(scheduler, graph):
    """A pass's value computed by a local Dask scheduler, its last combine (a ``DriverCombine``) applied here as
    :func:`compute_now` does."""
    flat, finish = unfold_driver_combines([graph])
    (value,) = finish(dask.compute(*flat, scheduler=scheduler))
    return value


@pytest.mark.parametrize("weighted", [False, True])
def test_assign_stats_matches_numpy(weighted):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(700, 4))
    C = rng.normal(size=(6, 4))
    w = rng.random(700) if weighted else None
    array = da.from_array(X, chunks=(100, 4))
    raw = computed_on("sync", assign_stats_graph(array, C, None if w is None else da.from_array(w, chunks=100)))
    stats = finish_stats(raw)
    d2 = ((X[:, None] - C[None]) ** 2).sum(-1)
    labels = d2.argmin(1)
    ww = np.ones(700) if w is None else w
    for j in range(6):
        m = labels == j
        np.testing.assert_allclose(stats.sums[j], (ww[m, None] * X[m]).sum(0), atol=1e-10)
        np.testing.assert_allclose(stats.counts[j], ww[m].sum())
        np.testing.assert_allclose(stats.sse[j], (ww[m] * d2.min(1)[m]).sum(), rtol=1e-10)
    # the farthest rows, farthest first
    far = np.argsort(-d2.min(1))[: len(stats.far_dist2)]
    np.testing.assert_allclose(stats.far_dist2, d2.min(1)[far])
    np.testing.assert_array_equal(stats.far_labels, labels[far])
    np.testing.assert_array_equal(lazy_labels(array, C).compute(), labels)
    np.testing.assert_allclose(lazy_min_dist2(array, C).compute(), d2.min(1))


def test_assign_stats_same_on_every_scheduler(cluster_client):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(5000, 8)).astype(np.float32)
    C = rng.normal(size=(20, 8)).astype(np.float32)
    array = da.from_array(X, chunks=(700, 8))
    graph = assign_stats_graph(array, C)
    results = [
        computed_on("sync", graph),
        computed_on("threads", graph),
        compute_now(graph, client=cluster_client)[0],
    ]
    for other in results[1:]:
        np.testing.assert_array_equal(results[0][0], other[0])
        np.testing.assert_array_equal(results[0][2], other[2])


def test_predict_time_nan_is_reported_with_its_row():
    X = np.zeros((100, 2))
    X[57, 0] = np.nan
    with pytest.raises(InputDataError, match="row 57"):
        lazy_labels(da.from_array(X, chunks=(30, 2)), np.zeros((1, 2))).compute()


@pytest.mark.parametrize("weighted", [False, True])
def test_sample_without_replacement_does_not_depend_on_chunking(weighted):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 3))
    w = rng.random(2000) if weighted else None
    key = stage_key(11, "test")
    picks = []
    for chunks in (2000, 333, 64):
        array = da.from_array(X, chunks=(chunks, 3))
        weights = None if w is None else da.from_array(w, chunks=chunks)
        (result,) = dask.compute(sample_without_replacement_graph(array, 50, key, weights))
        picks.append(result)
    for other in picks[1:]:
        np.testing.assert_array_equal(picks[0][1], other[1])
    keys, index, rows = picks[0]
    assert len(np.unique(index)) == 50
    np.testing.assert_array_equal(rows, X[index])


@pytest.mark.parametrize("m", [1, 50, 1999, 2000, 2500])
def test_sample_rows_is_the_sample_of_the_graph(m, cluster_client):
    """With the threshold each block sends on about its share of the sample; the sample is the same rows."""
    X = np.random.default_rng(8).normal(size=(2000, 3))
    array = da.from_array(X, chunks=(700, 3))
    key = stage_key(3, "rows")
    keys, index, rows = sample_rows(array, m, key, client=cluster_client)
    (expected,) = dask.compute(sample_without_replacement_graph(array, m, key))
    np.testing.assert_array_equal(index, expected[1])
    np.testing.assert_array_equal(rows, X[index])
    assert len(index) == min(m, 2000)


def test_blocks_send_on_about_their_share_below_the_threshold():
    from daskmeans.passes.sampling import _bottom_block

    block = np.zeros((10_000, 2))
    threshold = uniform_threshold(100_000, 5_000)  # a tenth of the data, for a sample of 5,000
    keys, _, _ = _bottom_block(block, 0, None, stage_key(1, "share"), 5_000, threshold)
    assert 500 < len(keys) < 500 + 8 * np.sqrt(5_000) + 64 + 4 * np.sqrt(1_000), "about 500, not 5,000"
    assert np.all(keys <= threshold)


def test_too_few_rows_below_the_threshold_are_read_again_without_it(monkeypatch):
    """Fewer than m rows below the threshold (here forced by a tiny one) make a second pass without it."""
    import daskmeans.passes.sampling as sampling

    X = np.arange(600.0).reshape(300, 2)
    array = da.from_array(X, chunks=(70, 2))
    key = stage_key(5, "again")
    (short,) = dask.compute(sample_without_replacement_graph(array, 40, key, threshold=1e-6))
    assert len(short[1]) < 40
    monkeypatch.setattr(sampling, "uniform_threshold", lambda n, m: 1e-6)
    with dask.config.set(scheduler="threads"):
        _, index, _ = sample_rows(array, 40, key)
    (expected,) = dask.compute(sample_without_replacement_graph(array, 40, key))
    np.testing.assert_array_equal(index, expected[1])


def test_weighted_sampling_never_picks_zero_weight_and_follows_weights():
    X = np.arange(40, dtype=np.float64).reshape(20, 2)
    w = np.zeros(20)
    w[[3, 7, 11]] = [1.0, 2.0, 3.0]
    array = da.from_array(X, chunks=(6, 2))
    (result,) = dask.compute(sample_without_replacement_graph(array, 10, stage_key(0, "w"), da.from_array(w, 6)))
    assert set(result[1]) == {3, 7, 11}
    weights = da.from_array(w, chunks=6)
    (totals,) = dask.compute(weight_totals_graph(weights))
    np.testing.assert_allclose(totals, [w[0:6].sum(), w[6:12].sum(), w[12:18].sum(), w[18:].sum()])
    (drawn,) = dask.compute(weighted_indices_with_replacement_graph(weights, totals, 6000, 5, "t"))
    counts = np.bincount(drawn, minlength=20)
    assert counts[[3, 7, 11]].sum() == 6000
    np.testing.assert_allclose(counts[[3, 7, 11]] / 6000, [1 / 6, 2 / 6, 3 / 6], atol=0.03)


def test_gather_rows_in_any_order_with_repeats():
    X = np.arange(60, dtype=np.float32).reshape(30, 2)
    array = da.from_array(X, chunks=(7, 2))
    wanted = np.array([29, 0, 5, 5, 14])
    (raw,) = dask.compute(gather_rows_graph(array, wanted))
    np.testing.assert_array_equal(finish_gather(raw, 5, 2, np.float32), X[wanted])
