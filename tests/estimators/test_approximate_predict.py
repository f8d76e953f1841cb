"""``predict(X, n_probe=...)``: labels through a coarse level of the fitted centers, on a real cluster and a real
Zarr store; exact when every list is probed, a known recall otherwise, the same on every scheduler and chunking."""

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from conftest import make_blobs

from daskmeans import InvalidParameterError, KMeans, MiniBatchKMeans, NotFittedError


@pytest.fixture(scope="module")
def fitted():
    """400 blobs in 8 dimensions, a KMeans of 400 centers fitted on them (20 lists of centers)."""
    X, _, _ = make_blobs(n=20_000, d=8, k=400, spread=0.6, seed=11, dtype=np.float32)
    model = KMeans(400, init="random", max_iter=5, random_state=0).fit(X)
    return X, model


def test_probing_every_list_gives_predict_and_fewer_lists_a_high_recall(fitted, cluster_client):
    X, model = fitted
    model.client = cluster_client
    array = da.from_array(X, chunks=(3000, 8))
    exact = model.predict(array).compute()
    index = model.coarse_index()
    assert index.n_lists == 20
    everything = model.predict(array, n_probe=index.n_lists)
    assert isinstance(everything, da.Array)
    np.testing.assert_array_equal(everything.compute(), exact)
    recalls = [np.mean(model.predict(X, n_probe=n_probe) == exact) for n_probe in (1, 3, 8)]
    assert recalls[0] < recalls[1] <= recalls[2] <= 1.0
    assert recalls[0] > 0.5 and recalls[2] > 0.99


def test_the_same_labels_on_every_scheduler_and_chunking(fitted, cluster_client, tmp_path):
    X, model = fitted
    model.client = None
    with dask.config.set(scheduler="sync"):
        sync = model.predict(da.from_array(X, chunks=(7000, 8)), n_probe=2).compute()
    np.testing.assert_array_equal(model.predict(X, n_probe=2), sync)
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store=store, data=X, chunks=(2500, 8))
    model.client = cluster_client
    from_zarr = model.predict(store, n_probe=2)
    assert isinstance(from_zarr, da.Array)
    np.testing.assert_array_equal(from_zarr.compute(), sync)
    labelled = model.predict(xr.DataArray(X, dims=("sample", "feature")), n_probe=2)
    assert isinstance(labelled, xr.DataArray) and labelled.dims == ("sample",)
    np.testing.assert_array_equal(labelled.values, sync)


def test_the_index_is_built_once_per_set_of_centers():
    X, _, _ = make_blobs(n=3000, d=4, k=30, seed=3)
    model = MiniBatchKMeans(30, random_state=0, max_iter=3).fit(X)
    first = model.coarse_index()
    assert model.coarse_index() is first
    model.fit(X[::-1].copy())
    assert model.coarse_index() is not first
    np.testing.assert_array_equal(model.predict(X, n_probe=first.n_lists + 10), model.predict(X))


@pytest.mark.parametrize("n_probe", [0, -2, 1.5, "4", True])
def test_a_bad_n_probe_is_refused_before_any_work(n_probe):
    with pytest.raises(InvalidParameterError, match="n_probe must be"):
        KMeans(3).predict(np.zeros((4, 2)), n_probe=n_probe)  # not even fitted: the argument is checked first
    with pytest.raises(NotFittedError):
        KMeans(3).predict(np.zeros((4, 2)), n_probe=2)
