"""nmbatch with its batch's rows re-read from the store (``batch_rows="reread"``): the same batch, the same labels,
the same iterates as with the rows cached on the workers, on bounded memory."""

from __future__ import annotations

from dataclasses import replace

import dask.array as da
import numpy as np
import pytest
import zarr

from daskmeans import NestedMiniBatchKMeans, open_input
from daskmeans.algorithms.nested import (
    cached_rows_within,
    choose_batch_rows,
    nested_minibatch,
    nested_plan,
    resumed_plan,
    state_bytes_per_row,
)
from daskmeans.algorithms.result import RunContext
from daskmeans.engine.capacity import cluster_free_memory_bytes, cluster_memory_bytes
from daskmeans.kernels.nested_groups import make_groups
from daskmeans.passes.nested_reread import RereadBatch
from daskmeans.passes.nested_state import NestedBatch

GiB = 2**30


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """30,000 uint8 rows in 7 chunks of unequal size, 12 blobs."""
    rng = np.random.default_rng(0)
    means = rng.integers(20, 235, size=(12, 16))
    X = np.clip(means[rng.integers(0, 12, 30_000)] + rng.integers(-12, 13, size=(30_000, 16)), 0, 255).astype("u1")
    path = str(tmp_path_factory.mktemp("reread") / "X.zarr")
    zarr.create_array(store=path, data=X, chunks=(4500, 16))
    return path, X


def test_the_chunks_prefixes_make_the_same_batch_as_the_cached_layout(store):
    path, X = store
    array = open_input(path).array
    groups = make_groups(X[:12].astype(np.float32), "hamerly", 1)
    cached, reread = NestedBatch(array, 5, groups, min_block_rows=1000), RereadBatch(array, 5, groups)
    centers = X[:12].astype(np.float32)
    for size in (700, 1400, 5000, 11_000, 30_000):
        counts = reread.chunk_counts(size)
        assert counts.sum() == size and np.all(counts <= reread.chunk_sizes)
        cached.step(centers, np.zeros(12), size)
        reread.step(centers, np.zeros(12), size)
        index_c, labels_c, dist2_c, _ = cached.content()
        index_r, labels_r, dist2_r, _ = reread.content()
        order_c, order_r = np.argsort(index_c), np.argsort(index_r)
        np.testing.assert_array_equal(index_c[order_c], index_r[order_r])
        np.testing.assert_array_equal(labels_c[order_c], labels_r[order_r])
        np.testing.assert_array_equal(dist2_c[order_c], dist2_r[order_r])
    assert cached.rows_read == 30_000, "cached: each row read once"
    assert reread.rows_read == 5 * 30_000, "re-read: 7 lanes, so every batch touches all 7 chunks, read each time"


@pytest.mark.slow
@pytest.mark.parametrize("bounds", ["yinyang", "hamerly", "none"])
def test_reread_gives_the_iterates_of_the_cached_batch(store, bounds):
    path, X = store
    params = dict(n_clusters=12, random_state=3, initial_batch_size=600, bounds=bounds, max_iter=25, tol=0.0)
    cached = NestedMiniBatchKMeans(batch_rows="cached", **params).fit(path)
    reread = NestedMiniBatchKMeans(batch_rows="reread", **params).fit(path)
    assert (cached.batch_rows_, reread.batch_rows_) == ("cached", "reread")
    for a, b in zip(cached.history_, reread.history_):
        for key in ("batch_size", "new_samples", "changed", "distances_computed", "distances_skipped"):
            assert a[key] == b[key], (key, a, b)
        assert a["inertia"] == pytest.approx(b["inertia"], rel=1e-9)
    assert len(cached.history_) == len(reread.history_)
    np.testing.assert_allclose(reread.cluster_centers_, cached.cluster_centers_, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(reread.labels_), np.asarray(cached.labels_))
    assert reread.history_[-1]["passes"] > cached.history_[-1]["passes"], "re-reading is counted as passes"
    rates = [r["rows_per_second"] for r in reread.history_ if "rows_per_second" in r]
    assert rates and all(rate > 0 for rate in rates), "the re-read chunks are the rows a step's pass reads"


@pytest.mark.slow
def test_reread_on_a_cluster_of_processes_equals_threads(store, cluster_client):
    path, _ = store
    params = dict(n_clusters=12, random_state=4, initial_batch_size=600, batch_rows="reread", max_iter=10, tol=0.0)
    threads = NestedMiniBatchKMeans(**params).fit(path)
    processes = NestedMiniBatchKMeans(client=cluster_client, **params).fit(path)
    np.testing.assert_array_equal(processes.cluster_centers_, threads.cluster_centers_)


def test_auto_rereads_only_when_the_cached_batch_would_not_fit():
    # descriptors in memory: 960,000 x 128 float32, k = 1000, 24 GiB
    assert choose_batch_rows("auto", "auto", 960_000, 128, 1000, 4, 24 * GiB) == ("cached", "yinyang")
    # 100 million descriptors on 2 x 4 GiB: re-read, and yinyang's 100 groups (about 80 GB) give way to Hamerly
    assert choose_batch_rows("auto", "auto", 10**8, 128, 1000, 4, 8 * GiB) == ("reread", "hamerly")
    # 20 million: yinyang's state (2 x 212 bytes a row, bounds in 16 bits: 8.5 GB) does not fit 4 GiB, Hamerly's
    # does; 10 million (4.2 GB) fits
    assert choose_batch_rows("reread", "auto", 2 * 10**7, 128, 1000, 4, 8 * GiB) == ("reread", "hamerly")
    assert choose_batch_rows("reread", "auto", 10**7, 128, 1000, 4, 8 * GiB) == ("reread", "yinyang")
    assert choose_batch_rows("reread", "elkan", 10**8, 128, 1000, 4, 8 * GiB) == ("reread", "elkan"), (
        "an explicit scheme is kept"
    )
    assert state_bytes_per_row(128, 100, 4, cached=False) == 2 * (12 + 2 * 100)
    assert state_bytes_per_row(128, 1, 4, cached=False) == 2 * 14
    assert state_bytes_per_row(128, 1, 4, cached=True) == 2 * (512 + 30)


def test_reread_runs_through_the_algorithm_with_sample_weights(store):
    path, X = store
    array = open_input(path).array
    weights = da.from_array(np.random.default_rng(1).uniform(0.5, 2, len(X)), chunks=(array.chunks[0],))
    centers = X[np.random.default_rng(2).choice(len(X), 12, replace=False)].astype(np.float32)
    plans = [
        nested_plan(array, 12, seed=9, initial_batch_size=30_000, max_iter=8, batch_rows=mode)
        for mode in ("cached", "reread")
    ]
    results = [nested_minibatch(array, centers, plan, RunContext(weights=weights)) for plan in plans]
    np.testing.assert_allclose(results[1].centers, results[0].centers, rtol=1e-9)


def test_a_cached_batch_that_outgrows_its_memory_is_re_read_with_the_same_iterates(store):
    path, X = store
    array = open_input(path).array
    centers = X[np.random.default_rng(5).choice(len(X), 12, replace=False)].astype(np.float32)
    options = dict(seed=6, initial_batch_size=700, max_iter=20, tol=0.0, bounds="hamerly")
    cached = nested_minibatch(array, centers, nested_plan(array, 12, batch_rows="cached", **options))
    plan = replace(nested_plan(array, 12, batch_rows="cached", **options), reread_above=3000)
    switched = nested_minibatch(array, centers, plan)
    assert (cached.batch_rows, switched.batch_rows) == ("cached", "reread")
    sizes = [record["batch_size"] for record in switched.history]
    assert sizes == [record["batch_size"] for record in cached.history] and max(sizes) > 3000
    first_reread = next(i for i, size in enumerate(sizes) if size > 3000)
    assert switched.history[first_reread]["new_samples"] == sizes[first_reread], "the re-read batch starts afresh"
    for a, b in zip(cached.history, switched.history):
        assert a["inertia"] == pytest.approx(b["inertia"], rel=1e-9)
    np.testing.assert_allclose(switched.centers, cached.centers, rtol=1e-9, atol=1e-9)
    assert switched.passes > cached.passes, "the re-read chunks count as reads of the data"


@pytest.mark.slow
def test_auto_caches_the_batch_while_it_fits_the_workers_then_re_reads(store, cluster_client):
    n, d = 10**8, 128  # every row's cached state far beyond the cluster's 4 GiB
    array = da.zeros((n, d), dtype=np.float32, chunks=(2**20, d))
    plan = nested_plan(array, 256, cluster_client, batch_rows="auto", driver_rows="auto", bounds="hamerly")
    free = cluster_free_memory_bytes(cluster_client)
    assert 0 < free < cluster_memory_bytes(cluster_client), "the worker processes hold some of their limits"
    assert plan.batch_rows == "cached" and plan.reread_above == max(plan.driver_rows, cached_rows_within(free, d, 1, 4))
    assert plan.initial_batch_size <= plan.reread_above < n
    assert "re-read once it grows past them" in plan.reasons["batch_rows"]
    explicit = nested_plan(array, 256, cluster_client, batch_rows="reread", bounds="hamerly")
    assert (explicit.batch_rows, explicit.reread_above) == ("reread", None), "an explicit choice is kept"
    path, X = store
    params = dict(n_clusters=12, random_state=2, initial_batch_size=600, max_iter=12, tol=0.0)
    fitted = NestedMiniBatchKMeans(client=cluster_client, **params).fit(path)
    assert (fitted.batch_rows_, fitted.fit_plan_.reread_above) == ("cached", None), "small data stays cached"


def test_a_resumed_run_keeps_the_batch_where_the_checkpoint_left_it(store):
    path, _ = store
    array = open_input(path).array
    plan = replace(nested_plan(array, 12, batch_rows="cached", bounds="hamerly"), reread_above=3000)
    still_cached = resumed_plan(plan, {"batch_rows": "cached", "bounds": "hamerly"})
    assert still_cached.reread_above == 3000, "a batch saved while cached still moves to re-reading later"
    re_read = resumed_plan(plan, {"batch_rows": "reread", "bounds": "hamerly"})
    assert (re_read.batch_rows, re_read.reread_above) == ("reread", None)
