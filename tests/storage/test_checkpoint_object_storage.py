"""Checkpoints on object storage (a real S3 HTTP server, moto): a driver killed with SIGKILL mid-fit resumes from
its S3 checkpoint to the result of an undisturbed run (nmbatch's workers write their pieces to S3 themselves, with
the options sent along); a checkpoint of other data is refused; foreign, damaged and unreachable checkpoints are
refused with a message that says so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zarr

import daskmeans
from daskmeans import CheckpointError, CheckpointMismatchError, KMeans
from daskmeans.storage.checkpoint import MARKER, POINTER

N_SAMPLES, N_FEATURES, CHUNK_ROWS = 10_000, 4, 2_000
ALGORITHMS = {
    "kmeans": ("KMeans", {"n_clusters": 16, "init": "random", "tol": 0.0, "max_iter": 8}),
    # the workers write each state block's labels, distances and bounds (and the batch's rows) to S3 themselves
    "nmbatch": (
        "NestedMiniBatchKMeans",
        {"n_clusters": 16, "initial_batch_size": 500, "rho": 2.0, "max_iter": 8, "tol": 0.0},
    ),
}
COMMON = {"random_state": 5, "chunk_rows": CHUNK_ROWS, "progress": False}

FIT_SCRIPT = """
import json
import sys

from distributed import Client

import daskmeans

if __name__ == "__main__":
    address, data, checkpoint, name, params, options = sys.argv[1:7]
    options = json.loads(options)
    with Client(address, set_as_default=False) as client:
        model = getattr(daskmeans, name)(**json.loads(params), client=client)
        model.fit(data, checkpoint=checkpoint, storage_options=options)
"""


def uniform(seed):
    return np.random.default_rng(seed).random((N_SAMPLES, N_FEATURES), dtype=np.float32)


def write_array(url, values, storage_options=None):
    array = zarr.open_array(
        store=url,
        mode="w",
        shape=values.shape,
        chunks=(CHUNK_ROWS, N_FEATURES),
        dtype=values.dtype,
        storage_options=storage_options,
    )
    array[...] = values
    return url


def clean_environment():
    """This environment without AWS settings or a scheduler address: the subprocess reaches S3 by options only."""
    return {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "DASK_SCHEDULER"))}


def current_version(fs, checkpoint):
    try:
        return json.loads(fs.cat_file(f"{checkpoint}/{POINTER}"))["version"]
    except FileNotFoundError:
        return None


def kill_mid_fit(command, fs, checkpoint, min_version, timeout=240):
    """Start ``command``, SIGKILL it once the S3 checkpoint has ``min_version`` versions; fail if it ends first."""
    process = subprocess.Popen(
        command, env=clean_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + timeout
    while (current_version(fs, checkpoint) or 0) < min_version:
        if process.poll() is not None:
            pytest.fail(f"the fit ended before it could be killed (rc {process.returncode}): {process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("no checkpoint appeared in time")
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL


@pytest.fixture(scope="module")
def s3_data(s3_server):
    bucket = s3_server.new_bucket()
    return write_array(f"{bucket}/uniform.zarr", uniform(0), s3_server.storage_options())


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_fit_killed_mid_way_resumes_from_s3_to_the_undisturbed_result(
    name, s3_server, s3_bucket, s3_data, cluster_client, tmp_path
):
    cls_name, params = ALGORITHMS[name]
    options = s3_server.storage_options()
    fs = s3_server.filesystem()
    checkpoint = f"{s3_bucket}/{name}.ckpt"
    script = tmp_path / "fit_script.py"
    script.write_text(FIT_SCRIPT)
    address = cluster_client.scheduler.address
    args = [address, s3_data, checkpoint, cls_name, json.dumps({**params, **COMMON}), json.dumps(options)]
    kill_mid_fit([sys.executable, str(script), *args], fs, checkpoint, min_version=3)

    names = {path.rsplit("/", 1)[-1] for path in fs.ls(checkpoint, detail=False, refresh=True)}
    assert {MARKER, POINTER} <= names
    if cls_name == "NestedMiniBatchKMeans":  # what the workers wrote: the state blocks and the batch's rows
        pointer = json.loads(fs.cat_file(f"{checkpoint}/{POINTER}"))
        written = fs.find(f"{checkpoint}/{pointer['directory']}/extra")
        assert any("/extra/blocks/" in path for path in written)
        assert any(name.startswith("shared-") for name in names)

    resumed = getattr(daskmeans, cls_name)(**params, **COMMON, client=cluster_client)
    resumed.fit(s3_data, checkpoint=checkpoint, storage_options=options)
    local = write_array(str(tmp_path / "uniform.zarr"), uniform(0))
    reference = getattr(daskmeans, cls_name)(**params, **COMMON, client=cluster_client).fit(local)
    np.testing.assert_array_equal(resumed.cluster_centers_, reference.cluster_centers_)
    assert resumed.inertia_ == reference.inertia_
    assert resumed.n_iter_ == reference.n_iter_ and resumed.stop_reason_ == reference.stop_reason_
    # older versions are deleted: one is left
    left = [path for path in fs.ls(checkpoint, detail=False, refresh=True) if path.rsplit("/", 1)[-1][0] in "vs"]
    assert len(left) == 1, left


@pytest.fixture
def finished_checkpoint(s3_server, s3_bucket):
    """A checkpoint on S3 of a short fit of in-memory data, finished."""
    checkpoint = f"{s3_bucket}/short.ckpt"
    KMeans(3, init="random", max_iter=2, random_state=0, chunk_rows=100, progress=False).fit(
        uniform(1)[:300], checkpoint=checkpoint, storage_options=s3_server.storage_options()
    )
    return checkpoint


def short_fit(values, checkpoint, storage_options):
    return KMeans(3, init="random", max_iter=2, random_state=0, chunk_rows=100, progress=False).fit(
        values, checkpoint=checkpoint, storage_options=storage_options
    )


def test_a_finished_s3_checkpoint_gives_the_result_again(s3_server, finished_checkpoint):
    first = short_fit(uniform(1)[:300], finished_checkpoint, s3_server.storage_options())
    again = short_fit(uniform(1)[:300], finished_checkpoint, s3_server.storage_options())
    np.testing.assert_array_equal(first.cluster_centers_, again.cluster_centers_)
    assert again.history_ == first.history_  # wall times included: nothing was run again


def test_an_s3_checkpoint_of_other_data_is_refused(s3_server, finished_checkpoint):
    with pytest.raises(CheckpointMismatchError, match="fit of other data"):
        short_fit(uniform(2)[:300], finished_checkpoint, s3_server.storage_options())
    with pytest.raises(CheckpointMismatchError, match="another fit"):
        short_fit(uniform(1)[:200], finished_checkpoint, s3_server.storage_options())


def test_prefixes_that_are_not_checkpoints_are_refused(s3_server, s3_bucket):
    fs, options = s3_server.filesystem(), s3_server.storage_options()
    fs.pipe_file(f"{s3_bucket}/busy/notes.txt", b"mine")
    with pytest.raises(CheckpointError, match="not a daskmeans checkpoint"):
        short_fit(uniform(1)[:300], f"{s3_bucket}/busy", options)
    with pytest.raises(CheckpointError, match="is a file"):
        short_fit(uniform(1)[:300], f"{s3_bucket}/busy/notes.txt", options)
    assert fs.cat_file(f"{s3_bucket}/busy/notes.txt") == b"mine"


def test_a_damaged_s3_checkpoint_is_refused(s3_server, finished_checkpoint):
    fs, options = s3_server.filesystem(), s3_server.storage_options()
    pointer = json.loads(fs.cat_file(f"{finished_checkpoint}/{POINTER}"))
    fs.rm(f"{finished_checkpoint}/{pointer['directory']}", recursive=True)
    with pytest.raises(CheckpointError, match="which is missing"):
        short_fit(uniform(1)[:300], finished_checkpoint, options)
    fs.pipe_file(f"{finished_checkpoint}/{POINTER}", b"{not json")
    with pytest.raises(CheckpointError, match="CURRENT is not readable JSON"):
        short_fit(uniform(1)[:300], finished_checkpoint, options)


def test_an_unreachable_checkpoint_store_is_said_before_the_fit(s3_server, s3_bucket):
    options = {**s3_server.storage_options(), "endpoint_url": "http://127.0.0.1:9"}
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="Cannot reach the object store .*checkpoint"):
        short_fit(uniform(1)[:300], f"{s3_bucket}/run.ckpt", options)
    assert time.monotonic() - start < 60
