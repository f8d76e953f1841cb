"""Mini-batch kernel k-means on data copied into the driver (``driver_rows``): the same clustering, its batches and
the training rows' labels found on the driver's threads, no pass of the workers after the copy."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import fit_driver_store, with_task_keys

from daskmeans import InvalidParameterError, MiniBatchKernelKMeans
from daskmeans.config import KERNEL_DRIVER_BYTES
from daskmeans.estimators.kernel import kernel_driver_rows


def _fit(store, client, weighted=False, **params):
    model = MiniBatchKernelKMeans(
        n_clusters=20,
        kernel_params={"kappa": "auto"},
        batch_size=200,
        tau=40,
        max_iter=30,
        random_state=5,
        client=client,
        **params,
    )
    return fit_driver_store(model, store, weighted)


def _assert_same_fit(model, reference):
    np.testing.assert_array_equal(model.support_rows_, reference.support_rows_)
    np.testing.assert_array_equal(model.support_coef_, reference.support_coef_)
    np.testing.assert_array_equal(model.support_index_, reference.support_index_)
    assert model.kernel_params_ == reference.kernel_params_
    assert [r["energy"] for r in model.history_] == [r["energy"] for r in reference.history_]


@pytest.mark.slow
@pytest.mark.parametrize("weighted", [False, True])
def test_a_fit_on_the_driver_is_the_fit_on_the_workers(driver_store, cluster_client, weighted):
    def fit_and_label(**params):
        model = _fit(driver_store, cluster_client, weighted, **params)
        return model, cluster_client.compute(model.labels_).result()

    (on_driver, driver_labels), driver_keys = with_task_keys(cluster_client, fit_and_label)
    (on_workers, worker_labels), worker_keys = with_task_keys(cluster_client, lambda: fit_and_label(driver_rows=0))
    _assert_same_fit(on_driver, on_workers)
    np.testing.assert_array_equal(driver_labels, worker_labels)
    assert on_driver.labels_.chunks == ((700,) * 7 + (100,),)  # chunk-aligned with the input, as on the workers
    # on the workers: the batches drawn and the labels found by their passes; on the driver: neither
    for name in ("daskmeans-minibatch-draw", "daskmeans-kernel-labels"):
        assert any(name in key for key in worker_keys)
        assert not any(name in key for key in driver_keys)


def test_data_past_driver_rows_stays_on_the_workers(driver_store, cluster_client):
    model, keys = with_task_keys(cluster_client, lambda: _fit(driver_store, cluster_client, driver_rows=4999))
    assert any("daskmeans-minibatch-draw" in key for key in keys)
    _assert_same_fit(model, _fit(driver_store, cluster_client, driver_rows=5000))


def test_auto_copies_data_of_at_most_one_pool_of_bytes():
    assert kernel_driver_rows(1234, 784, 4) == 1234
    assert kernel_driver_rows("auto", 784, 4) == KERNEL_DRIVER_BYTES // (784 * 4)  # MNIST float32: 21,399 rows
    assert kernel_driver_rows("auto", 784, 1) == KERNEL_DRIVER_BYTES // 784  # as stored, uint8


@pytest.mark.parametrize(
    "value, message",
    [
        ("many", 'driver_rows must be "auto" or an integer'),
        (-1, "driver_rows must be >= 0"),
        (2.5, "driver_rows must be an integer"),
    ],
)
def test_bad_driver_rows_fail_before_any_work(value, message):
    with pytest.raises(InvalidParameterError, match=message):
        MiniBatchKernelKMeans(2, driver_rows=value).fit(np.random.default_rng(0).normal(size=(50, 2)))


def test_numpy_input_gets_the_driver_labels_without_a_round_trip(driver_store, cluster_client):
    """NumPy in, NumPy out: the labels found on the driver are ``labels_`` as they are. No task of the fit sends
    them to the workers and back (every task is the data's own, the summary pass's or the copy's)."""
    import zarr

    path, _, _ = driver_store
    X = zarr.open_array(path, mode="r")[:]
    params = dict(
        n_clusters=20,
        kernel_params={"kappa": "auto"},
        batch_size=200,
        tau=40,
        max_iter=30,
        random_state=5,
        client=cluster_client,
    )
    on_driver, keys = with_task_keys(cluster_client, lambda: MiniBatchKernelKMeans(**params).fit(X))
    assert keys and all("daskmeans" in key for key in keys), sorted(keys)
    assert isinstance(on_driver.labels_, np.ndarray)
    np.testing.assert_array_equal(on_driver.labels_, MiniBatchKernelKMeans(**params, driver_rows=0).fit(X).labels_)
