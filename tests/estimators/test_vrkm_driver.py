"""VRKM's epoch passes on the driver (``driver_rows``): the data gathered once, the same epochs."""

from __future__ import annotations

import dask
import numpy as np
import pytest
from conftest import fit_driver_store, with_task_keys

from daskmeans import InvalidParameterError, VRKMeans
from daskmeans.algorithms.vrkm import largest_sample_bytes
from daskmeans.config import DRIVER_BYTES, DRIVER_WORK
from daskmeans.estimators.vrkm import vrkm_driver_rows

EPOCH_PASS = "daskmeans-vrkm-epoch"


def _fit(store, client, weighted=False, **params):
    model = VRKMeans(
        n_clusters=24,
        init="random",
        max_epochs=6,
        tol=0.0,
        random_state=4,
        inner_batch_size=64,
        client=client,
        **params,
    )
    return fit_driver_store(model, store, weighted)


def _assert_same_epochs(model, reference):
    np.testing.assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    assert model.n_iter_ == reference.n_iter_
    for field in ("energy", "changed", "relocated"):
        assert [r.get(field) for r in model.history_] == [r.get(field) for r in reference.history_]


@pytest.mark.slow
@pytest.mark.parametrize("variant, weighted", [("vrkm++", False), ("vrkm", True)])
def test_epochs_on_the_driver_are_those_on_the_workers_and_on_the_threaded_scheduler(
    driver_store, cluster_client, variant, weighted
):
    params = dict(variant=variant, weighted=weighted)
    on_driver, driver_keys = with_task_keys(cluster_client, lambda: _fit(driver_store, cluster_client, **params))
    on_workers, worker_keys = with_task_keys(
        cluster_client, lambda: _fit(driver_store, cluster_client, driver_rows=0, **params)
    )
    with dask.config.set({"scheduler-address": None}):
        threaded = _fit(driver_store, None, **params)  # no client: on the driver as well
        threaded_graphs = _fit(driver_store, None, driver_rows=0, **params)  # Dask graphs on the threads
    assert sum(r.get("changed", 0) for r in on_driver.history_) > 0
    for other in (on_workers, threaded, threaded_graphs):
        _assert_same_epochs(on_driver, other)
    # the epoch passes ran on the workers only with driver_rows=0; the inner loop ran on the driver either way
    assert any(EPOCH_PASS in key for key in worker_keys)
    assert not any(EPOCH_PASS in key for key in driver_keys)
    assert {r["inner_on"] for r in on_driver.history_ if "inner_on" in r} == {"driver"}


@pytest.mark.slow
def test_data_past_driver_rows_stays_on_the_workers(driver_store, cluster_client):
    model, keys = with_task_keys(cluster_client, lambda: _fit(driver_store, cluster_client, driver_rows=4999))
    assert any(EPOCH_PASS in key for key in keys)
    _assert_same_epochs(model, _fit(driver_store, cluster_client, driver_rows=5000))


@pytest.mark.slow
def test_data_whose_epoch_sample_exceeds_driver_sample_bytes_stays_on_the_workers(driver_store, cluster_client):
    # every sample comes to the driver when the passes run there: a sample past the budget keeps them on the cluster
    model, keys = with_task_keys(cluster_client, lambda: _fit(driver_store, cluster_client, driver_sample_bytes=0))
    assert any(EPOCH_PASS in key for key in keys)
    places = [r["inner_on"] for r in model.history_ if "inner_on" in r]
    assert places and "driver" not in places  # no sample fits 0 bytes: every inner loop ran on a worker
    _assert_same_epochs(model, _fit(driver_store, cluster_client))
    # the largest sample: the first epoch's, or the last one's when the epochs double
    assert largest_sample_bytes(0.5, 30, 5000, 12) == 2500 * 12
    assert largest_sample_bytes("doubling", 30, 5000, 12) == 2**30 * 12


def test_auto_takes_the_smaller_of_the_work_and_the_memory_limits():
    assert vrkm_driver_rows(1234, 200, 74, np.float32) == 1234
    # kdd (k = 200, d = 74, float32): the work limit
    assert vrkm_driver_rows("auto", 200, 74, np.float32) == DRIVER_WORK // (200 * 74)
    # MNIST as float32 (k = 50, d = 784): the memory limit, the rows twice and a label and distance each
    assert vrkm_driver_rows("auto", 50, 784, np.float32) == DRIVER_BYTES // (2 * 784 * 4 + 12)
    assert vrkm_driver_rows("auto", 50, 784, np.uint8) == DRIVER_WORK // (50 * 784)


@pytest.mark.parametrize(
    "value, message", [("many", 'driver_rows must be "auto" or an integer'), (-1, "driver_rows"), (1.5, "driver_rows")]
)
def test_bad_driver_rows_fail_before_any_work(value, message):
    with pytest.raises(InvalidParameterError, match=message):
        VRKMeans(n_clusters=3, driver_rows=value).fit(np.zeros((4, 2)))
