"""The S3 server the object-storage tests use answers over HTTP, and each bucket starts empty."""

from __future__ import annotations

import numpy as np
import zarr


def test_a_zarr_array_round_trips_through_the_server(s3_server, s3_bucket):
    url = f"{s3_bucket}/x.zarr"
    written = np.arange(12, dtype=np.float32).reshape(4, 3)
    zarr.create_array(url, data=written, chunks=(2, 3), storage_options=s3_server.storage_options())
    read = zarr.open_array(url, mode="r", storage_options=s3_server.storage_options())[...]
    np.testing.assert_array_equal(read, written)
    assert s3_server.filesystem().ls(s3_bucket.removeprefix("s3://")) != []


def test_buckets_are_separate(s3_server):
    first, second = s3_server.new_bucket(), s3_server.new_bucket()
    assert first != second
    assert s3_server.filesystem().ls(second.removeprefix("s3://")) == []
