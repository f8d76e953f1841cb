"""Named dimensions decide which axis holds the samples (``sample`` / ``feature``, or ``sample_dim=``), whatever
their order: an xarray DataArray backed by NumPy, by dask or by a Zarr store, and a Zarr array with dimension
names opened by path. Labels carry the sample dimension's name and coordinates."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

from daskmeans import InputDataError, KMeans, open_input, write_labels
from tests.conftest import make_blobs

X, _, _ = make_blobs(n=600, d=3, k=4, seed=3)
SAMPLE_IDS = np.arange(1000, 1600)


def reference_centers():
    return KMeans(4, random_state=0).fit(X).cluster_centers_


def as_dataarray(dims, backing=np.asarray):
    """``X`` as a DataArray with ``dims``: the samples on the dimension not named "feature" (ours have it)."""
    values = X if dims.index("feature") == 1 else X.T
    sample = next(d for d in dims if d != "feature")
    return xr.DataArray(backing(values), dims=dims, coords={sample: SAMPLE_IDS, "feature": [10, 20, 30]})


@pytest.mark.parametrize(
    "backing",
    [np.asarray, lambda v: da.from_array(v, chunks=(3, 100)) if v.shape[0] == 3 else da.from_array(v, chunks=(100, 3))],
    ids=["numpy", "dask"],
)
def test_a_transposed_dataarray_gives_the_centers_of_the_untransposed_one(backing):
    expected = reference_centers()
    for dims in [("sample", "feature"), ("feature", "sample")]:
        model = KMeans(4, random_state=0).fit(as_dataarray(dims, backing))
        np.testing.assert_allclose(model.cluster_centers_, expected, rtol=1e-6)
        assert model.labels_.dims == ("sample",)
        np.testing.assert_array_equal(model.labels_["sample"].values, SAMPLE_IDS)


def test_feature_first_is_followed_whatever_the_sample_dimension_is_called():
    data = open_input(as_dataarray(("feature", "descriptor")))
    assert (data.n_samples, data.n_features, data.sample_dim) == (600, 3, "descriptor")
    np.testing.assert_array_equal(data.array.compute(), X)
    np.testing.assert_array_equal(data.sample_coords["descriptor"].values, SAMPLE_IDS)


def test_without_known_names_the_first_dimension_holds_the_samples():
    data = open_input(xr.DataArray(X, dims=("row", "column")))
    assert (data.n_samples, data.sample_dim) == (600, "row")


def test_sample_dim_names_the_sample_dimension():
    transposed = xr.DataArray(X.T, dims=("band", "pixel"), coords={"pixel": SAMPLE_IDS})
    data = open_input(transposed, sample_dim="pixel")
    assert (data.n_samples, data.sample_dim) == (600, "pixel")
    model = KMeans(4, random_state=0).fit(data)
    np.testing.assert_allclose(model.cluster_centers_, reference_centers(), rtol=1e-6)
    assert model.labels_.dims == ("pixel",)
    np.testing.assert_array_equal(model.labels_["pixel"].values, SAMPLE_IDS)


def test_an_unknown_sample_dim_is_refused_with_the_dimensions():
    with pytest.raises(
        InputDataError,
        match=r"sample_dim='time' is not a dimension of X; its dimensions are "
        r"\['band', 'pixel'\]",
    ):
        open_input(xr.DataArray(X.T, dims=("band", "pixel")), sample_dim="time")
    with pytest.raises(InputDataError, match="sample_dim='pixel' names a dimension, but X has no dimension names"):
        open_input(X, sample_dim="pixel")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_transposed_zarr_store_through_xarray_and_by_path(tmp_path, zarr_format):
    path = str(tmp_path / "data.zarr")
    dataset = xr.Dataset({"X": as_dataarray(("feature", "sample"))})
    dataset.to_zarr(path, zarr_format=zarr_format, encoding={"X": {"chunks": (3, 150)}})
    expected = reference_centers()

    opened = xr.open_zarr(path)["X"]
    assert opened.dims == ("feature", "sample") and isinstance(opened.data, da.Array)
    model = KMeans(4, random_state=0).fit(opened)
    np.testing.assert_allclose(model.cluster_centers_, expected, rtol=1e-6)
    np.testing.assert_array_equal(model.labels_["sample"].values, SAMPLE_IDS)

    by_path = open_input(path, array="X")  # the store's dimension names decide too
    assert (by_path.n_samples, by_path.n_features, by_path.sample_dim) == (600, 3, "sample")
    np.testing.assert_allclose(KMeans(4, random_state=0).fit(by_path).cluster_centers_, expected, rtol=1e-6)

    labels_path = str(tmp_path / "labels.zarr")
    write_labels(model.labels_, labels_path)
    written = zarr.open_array(labels_path, mode="r")
    assert tuple(written.metadata.dimension_names) == ("sample",)
    np.testing.assert_array_equal(written[...], np.asarray(model.labels_))


def test_sample_dim_by_path_for_a_store_with_unknown_names(tmp_path):
    path = str(tmp_path / "pixels.zarr")
    zarr.create_array(store=path, data=X.T.copy(), chunks=(3, 600), dimension_names=("band", "pixel"))
    assert open_input(path).n_samples == 3  # no known name: the first dimension, as documented
    data = open_input(path, sample_dim="pixel")
    assert (data.n_samples, data.n_features, data.sample_dim) == (600, 3, "pixel")
    np.testing.assert_array_equal(data.array.compute(), X)
    with pytest.raises(InputDataError, match=r"its dimensions are \['band', 'pixel'\]"):
        open_input(path, sample_dim="row")
