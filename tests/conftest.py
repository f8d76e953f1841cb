"""Shared fixtures: a real LocalCluster with worker processes, the shared datasets, small blob data."""

from __future__ import annotations

import ctypes
import os
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
TESTS = Path(__file__).resolve().parent

#: Slow tests named here instead of by a ``@pytest.mark.slow`` in their file (path under tests/ -> test functions,
#: every parametrization included). ``python -m pytest -m "not slow"`` leaves them out, as it leaves out the tests
#: marked in their files.
SLOW_TESTS = {
    "test_bench.py": {
        "test_every_algorithm_and_peer_on_the_threaded_scheduler",
        "test_module_entry_point",
        "test_out_of_core_zarr_skips_in_memory_peers_with_reason",
        "test_quick_slice_of_a_shared_dataset",
        "test_quick_synthetic_with_peers_and_seeds",
        "test_sizing_quick",
        "test_user_npy_file",
    },
    "test_bench_vc_gmm.py": {"test_the_study_compares_vc_gmm_with_both_baselines"},
    "test_readme.py": {
        "test_the_python_quickstart_runs_as_a_script",
        "test_the_command_line_quickstart_runs_in_a_shell",
    },
    "estimators/test_kmeans.py": {
        "test_same_seed_same_centers_on_every_scheduler_and_worker_count",
        "test_scheduler_that_does_not_answer_fails_fast",
    },
    "estimators/test_vrkm.py": {
        "test_same_seed_same_centers_on_every_scheduler_and_the_streamed_inner_loop",
        "test_vrkm_plus_plus_steps_equal_algorithm_4",
    },
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Mark :data:`SLOW_TESTS` slow before ``-m`` selects (``tryfirst``: ahead of pytest's own selection)."""
    for item in items:
        try:
            where = item.path.relative_to(TESTS).as_posix()
        except ValueError:
            continue
        if getattr(item, "originalname", item.name) in SLOW_TESTS.get(where, ()):
            item.add_marker(pytest.mark.slow)


def shared_dataset(name: str):
    """Load ``../shared/data/NAME.npz`` or skip the test when the folder is absent."""
    path = SHARED_DATA / f"{name}.npz"
    if not path.exists():
        pytest.skip(f"{path} is not present (the shared datasets live beside the checkout)")
    with np.load(path) as archive:
        return {key: archive[key] for key in archive.files}


@pytest.fixture(scope="session")
def cluster_client():
    """A LocalCluster with 2 worker processes of 1 thread each, shared by the whole session."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="2GiB"
    )
    client = Client(cluster, set_as_default=False)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def make_blobs(n=3000, d=4, k=5, spread=0.3, seed=0, dtype=np.float64):
    """Well-separated Gaussian blobs: data, true labels, true centers."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(k, d))
    labels = rng.integers(0, k, size=n)
    X = centers[labels] + spread * rng.standard_normal((n, d))
    return X.astype(dtype), labels, centers


def slow_blocks(X, seconds_per_block, rows_per_block, flag=None):
    """``X`` as a dask array whose blocks take ``seconds_per_block`` each to make; with ``flag`` (a path), only while
    that file exists (seen by worker processes too)."""

    def block(start):
        if flag is None or os.path.exists(flag):
            time.sleep(seconds_per_block)
        return X[start : start + rows_per_block]

    blocks = [
        da.from_delayed(dask.delayed(block)(start), (min(rows_per_block, len(X) - start), X.shape[1]), X.dtype)
        for start in range(0, len(X), rows_per_block)
    ]
    return da.concatenate(blocks)


@pytest.fixture
def blobs():
    return make_blobs()


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


#: Capabilities that let root write (or read) whatever the permission bits say.
OVERRIDING_CAPABILITIES = (1, 2, 3)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
PR_CAPBSET_DROP = 24


def drop_overriding_capabilities():
    """``preexec_fn`` (root only): the child and what it runs lose the capabilities that ignore permissions."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in OVERRIDING_CAPABILITIES:
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def permission_bits_apply():
    """``preexec_fn`` for a subprocess that must obey permission bits: None for a user, or, for root, one that
    drops the capabilities that override them."""
    return drop_overriding_capabilities if is_root() else None


@pytest.fixture(scope="module")
def driver_store(tmp_path_factory):
    """``(path, weights, chunk_rows)``: 5,000 x 12 uint8 blobs around 20 centers in a Zarr store of chunks of
    ``chunk_rows`` = 700 rows (8 blocks; k = 24 takes bounds), and weights for its rows."""
    rng = np.random.default_rng(11)
    means = rng.uniform(40, 215, size=(20, 12))
    X = np.clip(means[rng.integers(0, 20, 5000)] + 12 * rng.standard_normal((5000, 12)), 0, 255).astype(np.uint8)
    path = str(tmp_path_factory.mktemp("driver") / "X.zarr")
    zarr.create_array(path, shape=X.shape, chunks=(700, 12), dtype=X.dtype)[:] = X
    return path, rng.uniform(0.5, 2.0, size=5000), 700


def fit_driver_store(estimator, store, weighted=False):
    """``estimator`` fitted on :func:`driver_store`'s rows, in its chunks, with its weights when ``weighted``."""
    from daskmeans import open_input

    path, weights, chunk_rows = store
    return estimator.fit(open_input(path, chunk_rows=chunk_rows), sample_weight=weights if weighted else None)


def with_task_keys(client, fit):
    """``(fit(), keys)``: the result of ``fit()`` and the keys of the tasks it ran on ``client``'s workers."""
    from distributed import get_task_stream

    with get_task_stream(client) as stream:
        model = fit()
    return model, {str(task["key"]) for task in stream.data}


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible HTTP server (moto) for the session; skipped when moto's server is not installed."""
    pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'daskmeans[s3]')")
    from s3_server import S3Server, moto_server_command

    try:
        moto_server_command("127.0.0.1", 0)
    except RuntimeError as error:
        pytest.skip(str(error))
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server):
    """A new empty bucket on :func:`s3_server`, as ``s3://NAME``."""
    return s3_server.new_bucket()
