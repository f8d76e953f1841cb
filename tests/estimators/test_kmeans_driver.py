"""Exact k-means iterated on the driver (``driver_rows``): the data gathered once, the same iterates."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from conftest import fit_driver_store, with_task_keys

from daskmeans import InvalidParameterError, KMeans, config
from daskmeans.config import DRIVER_BYTES, DRIVER_WORK
from daskmeans.engine.client import resolve_client
from daskmeans.estimators.kmeans import lloyd_driver_rows
from daskmeans.passes.bounded_assign import state_bytes_per_row


def _fit(store, client, weighted=False, **params):
    model = KMeans(n_clusters=24, init="random", max_iter=15, tol=0.0, random_state=4, client=client, **params)
    return fit_driver_store(model, store, weighted)


def _assert_same_fit(model, reference):
    np.testing.assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    assert model.n_iter_ == reference.n_iter_
    assert [r["energy"] for r in model.history_] == [r["energy"] for r in reference.history_]
    assert [r["distances_computed"] for r in model.history_] == [r["distances_computed"] for r in reference.history_]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["auto", "lloyd", "hamerly"])
def test_iterations_on_the_driver_are_those_on_the_workers_and_on_the_threaded_scheduler(
    driver_store, cluster_client, algorithm
):
    on_driver, driver_keys = with_task_keys(
        cluster_client, lambda: _fit(driver_store, cluster_client, algorithm=algorithm)
    )
    on_workers, worker_keys = with_task_keys(
        cluster_client, lambda: _fit(driver_store, cluster_client, algorithm=algorithm, driver_rows=0)
    )
    with dask.config.set({"scheduler-address": None}):
        threaded = _fit(driver_store, None, algorithm=algorithm)  # no client: on the driver as well
        threaded_graphs = _fit(driver_store, None, algorithm=algorithm, driver_rows=0)  # Dask graphs on the threads
    _assert_same_fit(on_driver, on_workers)
    _assert_same_fit(on_driver, threaded)
    _assert_same_fit(on_driver, threaded_graphs)
    # the passes of the iterations ran on the workers only with driver_rows=0
    pass_name = "daskmeans-assign" if algorithm == "lloyd" else "daskmeans-bounded-revisit"
    assert any(pass_name in key for key in worker_keys)
    assert not any(pass_name in key for key in driver_keys)
    # and so did the summary pass: on the driver it runs on the rows copied there, without a round trip of its own
    assert any("summary" in key for key in worker_keys)
    assert not any("summary" in key for key in driver_keys)


@pytest.mark.slow
def test_weighted_restarts_on_the_driver_are_those_on_the_workers(driver_store, cluster_client):
    params = dict(n_init=2, weighted=True)
    _assert_same_fit(
        _fit(driver_store, cluster_client, **params), _fit(driver_store, cluster_client, driver_rows=0, **params)
    )


@pytest.mark.slow
def test_a_cluster_of_few_threads_iterates_larger_data_on_the_driver(driver_store, cluster_client):
    """Workers running no more threads than the driver has cores (2 processes of one thread here) compute no faster
    than the driver's threads: passes up to DRIVER_WORK_FEW_THREADS multiply-adds run on the driver, not only up to
    DRIVER_WORK."""
    work = 5000 * 24 * 12  # rows x k x d of driver_store at k = 24
    with config.set(DRIVER_WORK=work - 1, DRIVER_WORK_FEW_THREADS=work):
        model, keys = with_task_keys(cluster_client, lambda: _fit(driver_store, cluster_client))
    assert model.fit_plan_.on_driver
    assert "DRIVER_WORK_FEW_THREADS" in model.fit_plan_.reasons["driver_rows"]
    assert not any("daskmeans-bounded-revisit" in key for key in keys)
    with config.set(DRIVER_WORK=work - 1, DRIVER_WORK_FEW_THREADS=work - 1):
        past, keys = with_task_keys(cluster_client, lambda: _fit(driver_store, cluster_client))
    assert not past.fit_plan_.on_driver
    assert any("daskmeans-bounded-revisit" in key for key in keys)
    _assert_same_fit(model, past)


@pytest.mark.slow
def test_data_past_driver_rows_stays_on_the_workers(driver_store, cluster_client):
    model, keys = with_task_keys(cluster_client, lambda: _fit(driver_store, cluster_client, driver_rows=4999))
    assert any("daskmeans-bounded-revisit" in key for key in keys)
    _assert_same_fit(model, _fit(driver_store, cluster_client, driver_rows=5000))


def test_auto_takes_the_smaller_of_the_work_and_the_memory_limits():
    assert lloyd_driver_rows(1234, "auto", 200, 74, np.float32) == 1234
    # kdd (k = 200, d = 74, float32): the work limit
    assert lloyd_driver_rows("auto", "auto", 200, 74, np.float32) == DRIVER_WORK // (200 * 74)
    # one feature, many centers: a row of bounds per center; the memory limit
    row = 8 + state_bytes_per_row(1, 1, 8)
    assert lloyd_driver_rows("auto", "none", 1, 1, np.float64) == DRIVER_BYTES // 8
    assert lloyd_driver_rows("auto", "hamerly", 1, 1, np.float64) == DRIVER_BYTES // row
    # as the fit takes them: 10 centers are one group (Hamerly's bound), 64 are 8 yinyang groups, whatever the dtype
    assert lloyd_driver_rows("auto", "auto", 10, 5, np.float64) == DRIVER_BYTES // (40 + state_bytes_per_row(5, 1, 8))
    assert lloyd_driver_rows("auto", "auto", 10, 5, np.float32) == DRIVER_BYTES // (20 + state_bytes_per_row(5, 1, 4))
    assert lloyd_driver_rows("auto", "auto", 64, 5, np.float64) == DRIVER_BYTES // (40 + state_bytes_per_row(5, 8, 8))


def test_a_local_scheduler_setting_takes_precedence_over_the_active_client(cluster_client):
    with cluster_client.as_current():
        assert resolve_client(None) is cluster_client
        with dask.config.set(scheduler="threads"):
            assert resolve_client(None) is None
            assert resolve_client(cluster_client) is cluster_client


@pytest.mark.parametrize(
    "value, message", [("many", 'driver_rows must be "auto" or an integer'), (-1, "driver_rows"), (1.5, "driver_rows")]
)
def test_bad_driver_rows_fail_before_any_work(driver_store, value, message):
    with pytest.raises(InvalidParameterError, match=message):
        KMeans(n_clusters=3, driver_rows=value).fit(np.zeros((4, 2)))
