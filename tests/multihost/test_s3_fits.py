"""Every registered algorithm, fitted from S3 on hosts that share no disk, gives the centers of a fit in this process.

The data lives on the S3 host; the command line runs on the client host with the endpoint given once, as
``--storage-option``; the workers have credentials but no endpoint, so they can read the data only with the
options that travel with the task graph. The model and the labels are written to S3 and read back from the client
host with ``daskmeans.load``; the client's working directory stays empty. The reference fit runs in this process,
on Dask's threaded scheduler, from a local copy of the same data with the same chunks and seed.
"""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr

from daskmeans import open_input
from daskmeans.registry import algorithm_names, make_estimator

from .driver import blob_data, decode

pytestmark = pytest.mark.slow

ROWS, FEATURES, K, CHUNK_ROWS, SEED = 20_000, 16, 8, 2000, 0


def daskmeans_executable() -> str:
    """The ``daskmeans`` command of this Python's environment."""
    found = shutil.which("daskmeans", path=str(Path(sys.executable).parent)) or shutil.which("daskmeans")
    assert found, "the daskmeans command is not installed (pip install -e .)"
    return found


@pytest.fixture(scope="module")
def data(multihost, tmp_path_factory):
    """``(bucket URL, data URL, local copy)``: the blobs written to S3 from the client host, and the same rows in
    a local Zarr group of the same chunks for the fits in this process."""
    bucket = f"s3://fits-{uuid.uuid4().hex[:10]}"
    url = f"{bucket}/data.zarr"
    args = ["write-data", url, "--storage-options", json.dumps(multihost.storage_options()), "--rows", str(ROWS)]
    args += ["--features", str(FEATURES), "--centers", str(K), "--chunk-rows", str(CHUNK_ROWS)]
    multihost.driver("client", args)
    local = tmp_path_factory.mktemp("multihost-data") / "data.zarr"
    group = zarr.open_group(str(local), mode="w")
    rows = blob_data(ROWS, FEATURES, K, seed=0)
    group.create_array("X", shape=rows.shape, chunks=(CHUNK_ROWS, FEATURES), dtype=rows.dtype)[:] = rows
    return bucket, url, str(local)


def on_client(cluster, args: list[str], timeout: float = 480) -> str:
    """Run ``daskmeans ARGS`` on the client host against the cluster's scheduler and S3 server; its stdout."""
    argv = [daskmeans_executable(), *args, "--scheduler", cluster.scheduler_address]
    argv += ["--storage-option", f"endpoint_url={cluster.s3_endpoint}"]
    done = cluster.run("client", argv, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stderr[-4000:]}\n{cluster.logs()}"
    return done.stdout


def read_back(cluster, model: str, *labels: str) -> dict:
    """The model at ``model`` (``daskmeans.load`` on the client host, with the endpoint as its storage option):
    ``{"class", "centers", "labels"}``, the last the arrays at ``labels``."""
    args = ["read-back", "--model", model, "--storage-options", json.dumps({"endpoint_url": cluster.s3_endpoint})]
    for url in labels:
        args += ["--labels", url]
    result = json.loads(cluster.driver("client", args).stdout)
    return {**result, "centers": decode(result["centers"]), "labels": [decode(text) for text in result["labels"]]}


def computed(values) -> np.ndarray:
    return np.asarray(values.compute() if hasattr(values, "compute") else values)


def same_bits(actual: np.ndarray, expected: np.ndarray) -> bool:
    return actual.dtype == expected.dtype and actual.shape == expected.shape and actual.tobytes() == expected.tobytes()


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_fit_from_s3_on_separate_hosts_equals_the_fit_in_process(multihost, data, algorithm):
    bucket, url, local = data
    model, labels, predicted = (f"{bucket}/{name}-{algorithm}.zarr" for name in ("model", "labels", "predicted"))
    on_client(multihost, ["fit", url, "--array", "X", "-k", str(K), "--algorithm", algorithm, "--out", model,
                          "--labels", labels, "--random-state", str(SEED), "--quiet"])  # fmt: skip
    on_client(multihost, ["predict", model, url, "--array", "X", "--labels", predicted])

    reference = make_estimator(algorithm, n_clusters=K, random_state=SEED, progress=False)
    reference.fit(open_input(local, array="X"))
    loaded = read_back(multihost, model, labels, predicted)
    assert loaded["class"] == type(reference).__name__
    assert same_bits(loaded["centers"], np.asarray(reference.cluster_centers_)), (
        f"{algorithm}: the centers fitted on the cluster from S3 differ from the fit in this process"
    )
    fitted_labels, predicted_labels = loaded["labels"]
    assert np.array_equal(fitted_labels, computed(reference.labels_))
    assert np.array_equal(predicted_labels, computed(reference.predict(open_input(local, array="X"))))
    assert multihost.listdir("client") == [], "a command left files in the client host's working directory"


def test_python_api_reads_blocks_on_both_workers_with_options_given_once(multihost, data):
    _, url, local = data
    args = ["fit", url, "--storage-options", json.dumps({"endpoint_url": multihost.s3_endpoint})]
    args += ["--scheduler", multihost.scheduler_address, "--chunk-rows", str(CHUNK_ROWS), "-k", str(K)]
    before = {worker: multihost.counters(worker)["rx_bytes"] for worker in multihost.worker_names}
    result = json.loads(multihost.driver("client", args, timeout=480).stdout)
    reference = make_estimator("kmeans", n_clusters=K, random_state=SEED, progress=False)
    reference.fit(open_input(local, array="X", chunk_rows=CHUNK_ROWS))
    assert same_bits(decode(result["centers"]), np.asarray(reference.cluster_centers_))
    assert len(result["workers"]) == multihost.n_workers, f"tasks ran on {result['workers']} only"
    received = sum(multihost.counters(worker)["rx_bytes"] - before[worker] for worker in multihost.worker_names)
    assert received >= ROWS * FEATURES * 8 // 2, "the workers did not read the data from the S3 host"
    assert multihost.listdir("client") == []
