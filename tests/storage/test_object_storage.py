"""Object storage as an input: a Zarr store on a real S3 HTTP server (moto) is opened with storage options alone,
the options reach worker processes that have no AWS configuration, a fit of it equals bitwise a fit of the same
store on a local disk, and a store that cannot be reached or a missing bucket is said as such, early."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import zarr

import daskmeans
from daskmeans import InputDataError, InvalidParameterError, KMeans, open_input
from daskmeans.storage.sources import open_source, stored_bytes

#: Environment variables through which s3fs (botocore) would find credentials or an endpoint on its own.
AWS_SETTINGS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL")
N_SAMPLES, N_FEATURES, CHUNK_ROWS = 3_000, 5, 1_000


def uniform(seed=0):
    return np.random.default_rng(seed).random((N_SAMPLES, N_FEATURES), dtype=np.float32)


def write_store(url, values, storage_options=None):
    """``values`` as a Zarr group with the array ``X`` at ``url`` (a local path or a URL)."""
    group = zarr.open_group(store=url, mode="w", zarr_format=3, storage_options=storage_options)
    array = group.create_array("X", shape=values.shape, chunks=(CHUNK_ROWS, values.shape[1]), dtype=values.dtype)
    array[...] = values
    return url


@pytest.fixture
def no_aws_environment(monkeypatch):
    """This process without any AWS setting: only storage options can reach the server."""
    for name in AWS_SETTINGS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def s3_data(s3_server, s3_bucket):
    values = uniform()
    return write_store(f"{s3_bucket}/data.zarr", values, s3_server.storage_options()), values


def test_open_input_reads_a_store_with_storage_options_only(s3_server, s3_data, no_aws_environment):
    url, values = s3_data
    data = open_input(url, storage_options=s3_server.storage_options(), chunk_rows=CHUNK_ROWS)
    assert data.location == f"{url}/X" and data.array.shape == values.shape
    assert data.array.numblocks == (N_SAMPLES // CHUNK_ROWS, 1)
    np.testing.assert_array_equal(data.array.compute(scheduler="sync"), values)
    array, location = open_source(url, "X", s3_server.storage_options())
    assert location == f"{url}/X" and array.shape == values.shape
    assert stored_bytes(url) is None  # an object store's size is not listed


def test_each_chunk_is_read_by_one_get_request_and_nothing_else(s3_server, s3_data, no_aws_environment):
    """A pass over the data sends the S3 server one GET per chunk and no HEAD (s3fs sizes an object before reading
    it unless its max_concurrency is 1: a round trip per block); a max_concurrency given is the user's."""
    url, values = s3_data
    data = open_input(url, storage_options=s3_server.storage_options(), chunk_rows=CHUNK_ROWS)
    before = len(s3_server.requests())
    np.testing.assert_array_equal(data.array.compute(scheduler="sync"), values)
    chunks = [(method, path) for method, path in s3_server.requests()[before:] if "/data.zarr/X/c/" in path]
    assert sorted(chunks) == [("GET", f"{url[len('s3:/') :]}/X/c/{i}/0") for i in range(3)], chunks
    array, _ = open_source(url, "X", {**s3_server.storage_options(), "max_concurrency": 4})
    assert array.store.fs.max_concurrency == 4


@pytest.mark.slow
def test_the_options_reach_worker_processes_without_aws_settings(s3_server, s3_data, cluster_client, tmp_path):
    """A fit from S3 on worker processes that have no AWS setting gives bitwise the centers of a fit of the same
    store on a local disk: the options travel with the graph."""
    url, values = s3_data

    def aws_settings():
        return sorted(name for name in AWS_SETTINGS if name in os.environ)

    assert all(found == [] for found in cluster_client.run(aws_settings).values())
    local = write_store(str(tmp_path / "data.zarr"), values)
    params = {"n_clusters": 6, "init": "random", "random_state": 3, "max_iter": 4, "chunk_rows": CHUNK_ROWS}
    params["progress"] = False
    from_s3 = KMeans(**params, client=cluster_client).fit(
        open_input(url, storage_options=s3_server.storage_options(), chunk_rows=CHUNK_ROWS)
    )
    from_disk = KMeans(**params, client=cluster_client).fit(local)
    np.testing.assert_array_equal(from_s3.cluster_centers_, from_disk.cluster_centers_)
    assert from_s3.inertia_ == from_disk.inertia_
    # a URL with storage_options given to fit is the same input
    by_url = KMeans(**params).fit(url, storage_options=s3_server.storage_options())
    np.testing.assert_array_equal(by_url.cluster_centers_, from_disk.cluster_centers_)
    labels = cluster_client.compute(from_s3.predict(open_input(url, storage_options=s3_server.storage_options())))
    np.testing.assert_array_equal(labels.result(), from_disk.predict(values))


def test_resampled_data_written_to_s3_by_worker_processes_equals_a_local_copy(
    s3_server, s3_bucket, cluster_client, tmp_path
):
    """``make_resampled_zarr`` with storage options: the workers, which have no AWS setting, write the chunks to
    S3, and the store holds the values a local write gives."""
    from daskmeans.datasets import make_resampled_zarr

    source = np.random.default_rng(5).integers(0, 256, size=(200, N_FEATURES), dtype=np.uint8)
    settings = {"chunk_rows": 700, "random_state": 4}
    url = make_resampled_zarr(
        f"{s3_bucket}/resampled.zarr",
        source,
        N_SAMPLES,
        client=cluster_client,
        storage_options=s3_server.storage_options(),
        **settings,
    )
    local = make_resampled_zarr(tmp_path / "resampled.zarr", source, N_SAMPLES, **settings)
    stored = zarr.open_group(store=url, mode="r", storage_options=s3_server.storage_options())
    expected = zarr.open_group(local, mode="r")
    np.testing.assert_array_equal(stored["X"][...], expected["X"][...])
    assert stored.attrs["daskmeans"] == expected.attrs["daskmeans"]
    assert stored["X"].dtype == np.uint8
    data = daskmeans.open_input(url, storage_options=s3_server.storage_options())
    assert (data.n_samples, data.n_features) == (N_SAMPLES, N_FEATURES)


def test_a_model_saved_to_s3_loads_back(s3_server, s3_bucket, no_aws_environment):
    model = KMeans(3, random_state=0, progress=False).fit(uniform()[:600])
    url = model.save(f"{s3_bucket}/model.zarr", storage_options=s3_server.storage_options())
    loaded = daskmeans.load(url, storage_options=s3_server.storage_options())
    np.testing.assert_array_equal(loaded.cluster_centers_, model.cluster_centers_)


def test_a_missing_bucket_is_said_early(s3_server, no_aws_environment):
    with pytest.raises(FileNotFoundError, match="bucket 'no-such-bucket-x1' .* does not exist"):
        open_input("s3://no-such-bucket-x1/data.zarr", storage_options=s3_server.storage_options())


def test_a_missing_or_incomplete_store_in_a_bucket_is_said(s3_server, s3_bucket, no_aws_environment):
    options = s3_server.storage_options()
    with pytest.raises(FileNotFoundError, match="Nothing at .*nothing.zarr"):
        open_input(f"{s3_bucket}/nothing.zarr", storage_options=options)
    s3_server.filesystem().pipe_file(f"{s3_bucket}/partial.zarr/X/c/0/0", b"chunk")  # no root metadata
    with pytest.raises(InputDataError, match="was not completely written"):
        open_input(f"{s3_bucket}/partial.zarr", storage_options=options)


def test_a_wrong_endpoint_is_said_early(s3_server, s3_bucket, no_aws_environment):
    options = {**s3_server.storage_options(), "endpoint_url": "http://127.0.0.1:9"}
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="Cannot reach the object store .* endpoint_url"):
        open_input(f"{s3_bucket}/data.zarr", storage_options=options)
    assert time.monotonic() - start < 60


def test_missing_credentials_are_said(s3_server, s3_bucket, no_aws_environment, monkeypatch):
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    with pytest.raises(PermissionError, match="No credentials .* storage options"):
        open_input(f"{s3_bucket}/data.zarr", storage_options={"endpoint_url": s3_server.endpoint_url})


def test_bad_storage_options_are_refused(tmp_path):
    with pytest.raises(InvalidParameterError, match="storage_options must be a dict"):
        open_input("s3://bucket/data.zarr", storage_options="endpoint_url=http://x")
    with pytest.raises(InvalidParameterError, match="storage_options apply to a path or URL"):
        open_input(np.zeros((10, 2)), storage_options={"anon": True})
    with pytest.raises(InvalidParameterError, match="storage_options must be a dict"):
        KMeans(2).fit(np.zeros((10, 2)), storage_options=["anon"])
    with pytest.raises(InputDataError, match=r"\.npy/\.npz file at a URL"):
        open_input("s3://bucket/data.npy", storage_options={"anon": True})
    from daskmeans.datasets import make_blobs_zarr, make_resampled_zarr

    with pytest.raises(InvalidParameterError, match="storage_options must be a dict"):
        make_blobs_zarr(tmp_path / "blobs.zarr", 100, 2, 3, storage_options="anon=true")
    source = np.zeros((10, 2), dtype=np.uint8)
    with pytest.raises(InvalidParameterError, match="storage_options must be a dict"):
        make_resampled_zarr(tmp_path / "resampled.zarr", source, 100, storage_options="anon=true")
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_options_are_ignored_for_a_local_path(tmp_path):
    local = write_store(str(tmp_path / "data.zarr"), uniform()[:100])
    data = open_input(local, storage_options={"anon": True})
    assert data.array.shape == (100, N_FEATURES)
