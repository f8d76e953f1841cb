"""make_blobs_zarr: real Zarr stores on disk, values independent of chunking and scheduler, clear errors."""

from __future__ import annotations

import os
import tracemalloc

import dask
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

from daskmeans import InvalidParameterError, OutputExistsError
from daskmeans.datasets import blob_rows, default_chunk_rows, generation_block_rows, make_blobs_zarr


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        yield client


def read(path, name="X"):
    group = zarr.open_group(store=str(path), mode="r")
    return group[name][...], group["y"][...], group["centers"][...], dict(group.attrs)


def test_writes_group_with_data_labels_and_centers(tmp_path):
    path = tmp_path / "blobs.zarr"
    returned = make_blobs_zarr(path, 5000, 6, 4, chunk_rows=1000, random_state=3)
    assert returned == os.fspath(path)
    X, y, centers, attrs = read(path)
    group = zarr.open_group(store=str(path), mode="r")
    assert X.shape == (5000, 6) and X.dtype == np.float32 and group["X"].chunks == (1000, 6)
    assert y.shape == (5000,) and y.dtype == np.int32 and set(np.unique(y)) == {0, 1, 2, 3}
    assert centers.shape == (4, 6) and centers.dtype == np.float64
    assert ((centers >= -10) & (centers <= 10)).all()
    assert attrs["daskmeans"]["seed"] == 3 and attrs["daskmeans"]["n_clusters"] == 4
    assert [name for name in os.listdir(tmp_path)] == ["blobs.zarr"]  # no temporary left behind


def test_rows_are_gaussian_around_their_true_center(tmp_path):
    make_blobs_zarr(tmp_path / "b.zarr", 40_000, 8, 5, random_state=0, cluster_std=2.0)
    X, y, centers, _ = read(tmp_path / "b.zarr")
    noise = X - centers[y]
    assert abs(noise.mean()) < 0.02
    assert noise.std() == pytest.approx(2.0, rel=0.01)
    counts = np.bincount(y, minlength=5)
    assert counts.min() > 0.9 * 40_000 / 5  # labels drawn uniformly


def test_values_depend_on_seed_not_on_chunk_rows(tmp_path):
    n_features = 16  # generation blocks of 4096 rows: the data below spans three of them
    assert generation_block_rows(n_features) == 4096
    make_blobs_zarr(tmp_path / "a.zarr", 10_000, n_features, 3, random_state=7)
    make_blobs_zarr(tmp_path / "b.zarr", 10_000, n_features, 3, random_state=7, chunk_rows=777)
    make_blobs_zarr(tmp_path / "c.zarr", 10_000, n_features, 3, random_state=8, chunk_rows=777)
    a, b, c = read(tmp_path / "a.zarr"), read(tmp_path / "b.zarr"), read(tmp_path / "c.zarr")
    for left, right in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(left, right)
    assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[2], c[2])


def test_rows_of_any_range_match_the_whole(tmp_path):
    centers = np.random.default_rng(0).uniform(-5, 5, size=(3, 40))
    whole, whole_labels = blob_rows(11, centers, 1.0, "float64", 0, 60_000)
    part, part_labels = blob_rows(11, centers, 1.0, "float64", 26_000, 53_123)
    np.testing.assert_array_equal(part, whole[26_000:53_123])
    np.testing.assert_array_equal(part_labels, whole_labels[26_000:53_123])
    assert whole.dtype == np.float64


def test_uint8_is_the_rounded_and_clipped_float_data(tmp_path):
    options = dict(random_state=5, cluster_std=40.0, center_box=(10.0, 245.0), chunk_rows=900)
    make_blobs_zarr(tmp_path / "f.zarr", 3000, 128, 6, dtype="float32", **options)
    make_blobs_zarr(tmp_path / "u.zarr", 3000, 128, 6, dtype="uint8", **options)
    floats, _, _, _ = read(tmp_path / "f.zarr")
    descriptors, _, _, attrs = read(tmp_path / "u.zarr")
    assert descriptors.dtype == np.uint8 and attrs["daskmeans"]["dtype"] == "uint8"
    np.testing.assert_array_equal(descriptors, np.clip(np.rint(floats), 0, 255).astype(np.uint8))
    assert descriptors.min() == 0 and descriptors.max() == 255  # wide noise: both ends clipped


def test_uint8_defaults_look_like_descriptors(tmp_path):
    make_blobs_zarr(tmp_path / "u.zarr", 2000, 128, 4, dtype="uint8", random_state=1)
    X, y, centers, attrs = read(tmp_path / "u.zarr")
    assert attrs["daskmeans"]["cluster_std"] == 12.0
    assert ((centers >= 24) & (centers <= 232)).all()
    assert np.abs(X.astype(np.float64) - centers[y]).mean() < 12.0


@pytest.mark.slow
def test_memory_stays_bounded_by_the_chunks(tmp_path):
    n_samples, n_features = 800_000, 16  # 51 MB of float32, in chunks of 0.5 MB
    make_blobs_zarr(tmp_path / "warm.zarr", 100, n_features, 8, random_state=0)  # imports, compiled kernels
    tracemalloc.start()
    try:
        with dask.config.set(num_workers=2):  # two chunks in flight, whatever the machine
            make_blobs_zarr(tmp_path / "b.zarr", n_samples, n_features, 8, chunk_rows=8192, random_state=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n_samples * n_features * 4 / 4


@pytest.mark.slow
def test_client_writes_the_same_values_in_parallel(tmp_path, client):
    make_blobs_zarr(tmp_path / "local.zarr", 12_000, 16, 4, random_state=2, chunk_rows=2500)
    make_blobs_zarr(tmp_path / "dist.zarr", 12_000, 16, 4, random_state=2, chunk_rows=2500, client=client)
    for left, right in zip(read(tmp_path / "local.zarr")[:3], read(tmp_path / "dist.zarr")[:3]):
        np.testing.assert_array_equal(left, right)


def test_custom_array_name_and_default_chunks(tmp_path):
    make_blobs_zarr(tmp_path / "b.zarr", 3000, 4, 2, random_state=0, array_name="descriptors")
    group = zarr.open_group(store=str(tmp_path / "b.zarr"), mode="r")
    assert sorted(group.array_keys()) == ["centers", "descriptors", "y"]
    assert group["descriptors"].chunks == (default_chunk_rows(3000, 4), 4) == (3000, 4)
    assert default_chunk_rows(10**9, 32) == 8 * 2**20 // (4 * 32)


def test_refuses_to_overwrite_unless_asked(tmp_path):
    path = tmp_path / "b.zarr"
    make_blobs_zarr(path, 1000, 3, 2, random_state=0)
    before = read(path)[0]
    with pytest.raises(OutputExistsError, match="exists already"):
        make_blobs_zarr(path, 1000, 3, 2, random_state=1)
    np.testing.assert_array_equal(read(path)[0], before)
    make_blobs_zarr(path, 500, 3, 2, random_state=1, overwrite=True)
    assert read(path)[0].shape == (500, 3)
    assert os.listdir(tmp_path) == ["b.zarr"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_samples=0), "n_samples must be >= 1"),
        (dict(n_features=0), "n_features must be >= 1"),
        (dict(n_clusters=0), "n_clusters must be >= 1"),
        (dict(n_samples=2.5), "n_samples must be an integer"),
        (dict(chunk_rows=0), "chunk_rows must be >= 1"),
        (dict(dtype="int16"), "dtype must be one of"),
        (dict(cluster_std=-1.0), "cluster_std must be >= 0"),
        (dict(center_box=(5.0, -5.0)), "low < high"),
        (dict(array_name="y"), "array_name"),
        (dict(array_name="a/b"), "array_name"),
    ],
)
def test_bad_parameters_fail_before_writing(tmp_path, kwargs, message):
    params = dict(n_samples=100, n_features=2, n_clusters=2)
    params.update(kwargs)
    with pytest.raises(InvalidParameterError, match=message):
        make_blobs_zarr(tmp_path / "b.zarr", **params)
    assert os.listdir(tmp_path) == []


def test_missing_parent_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        make_blobs_zarr(tmp_path / "no" / "b.zarr", 100, 2, 2)
