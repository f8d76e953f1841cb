"""A fit whose tasks run in the driver's process runs BLAS on one thread; the driver's own limit comes back after."""

import ast
import subprocess
import sys

import numpy as np
import pytest
from distributed import Client, LocalCluster
from threadpoolctl import threadpool_info, threadpool_limits

from daskmeans import KMeans
from daskmeans.engine.blas import one_blas_thread_for, tasks_run_in_this_process
from daskmeans.engine.client import compute_now
from daskmeans.engine.graph import map_blocks_delayed


def blas_threads(*_):
    """The thread counts of the BLAS libraries NumPy and SciPy call (threaded by pthreads). An OpenBLAS threaded by
    OpenMP (faiss's, once a test imported faiss) keeps a count per thread, which a limit set by the driver's thread
    does not reach in a worker's threads; daskmeans never calls it, and its own pools limit it where they start
    (:func:`daskmeans.engine.blas.one_blas_thread_in_this_thread`)."""
    return sorted(
        {
            info["num_threads"]
            for info in threadpool_info()
            if info["user_api"] == "blas" and info.get("threading_layer") != "openmp"
        }
    )


@pytest.fixture
def two_blas_threads():
    with threadpool_limits(limits=2, user_api="blas"):
        if blas_threads() != [2]:
            pytest.skip(f"BLAS here cannot run two threads ({blas_threads()})")
        yield


def fit_seeing_blas_threads(client, **params):
    seen = []
    X = np.random.default_rng(0).standard_normal((4000, 16)).astype(np.float32)
    KMeans(
        8, max_iter=3, random_state=0, client=client, progress=lambda record: seen.append(blas_threads()), **params
    ).fit(X)
    return seen


def test_threaded_workers_get_one_blas_thread_during_the_fit(two_blas_threads):
    with (
        LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        assert tasks_run_in_this_process(client)
        with one_blas_thread_for(client):
            seen = compute_now(*map_blocks_delayed(blas_threads, "blas-check", [[i] for i in range(4)]), client=client)
            assert all(threads == [1] for threads in seen), seen
        assert blas_threads() == [2], "the driver's limit is restored after the block"
        assert fit_seeing_blas_threads(client) and all(t == [1] for t in fit_seeing_blas_threads(client))
        assert blas_threads() == [2], "and after a fit"


@pytest.mark.slow
def test_worker_processes_and_the_sync_scheduler_leave_blas_alone(two_blas_threads):
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        assert not tasks_run_in_this_process(client)
        assert all(t == [2] for t in fit_seeing_blas_threads(client, driver_rows=0))
        # iterations on the driver (small data, driver_rows="auto") run there on threads of one BLAS thread each
        assert all(t == [1] for t in fit_seeing_blas_threads(client)[1:])
        assert blas_threads() == [2], "the driver's limit is restored after the fit"
    import dask

    with dask.config.set(scheduler="sync"):
        assert not tasks_run_in_this_process(None)
    with dask.config.set(scheduler="threads"):
        assert tasks_run_in_this_process(None)


def test_machine_threads_give_code_beside_a_fit_every_core_back():
    """The bench runs its peers with :func:`machine_threads` inside the BLAS limit of an in-process cluster: every
    pool, OpenMP included (which an OpenBLAS built on OpenMP limits with it), at one thread per core, and the limit
    back afterwards."""
    from daskmeans.engine.blas import machine_threads, one_blas_thread

    pytest.importorskip("sklearn")  # brings an OpenMP runtime
    from dask.system import CPU_COUNT as cores

    with one_blas_thread():
        assert blas_threads() == [1]
        with machine_threads():
            assert {info["num_threads"] for info in threadpool_info()} == {cores}
        assert blas_threads() == [1]


def test_a_blas_loaded_after_the_first_limit_is_limited_too(tmp_path):
    """The thread pools are looked up again when modules were imported since: SciPy's OpenBLAS, loaded after a
    first limit, is limited with NumPy's (in a fresh interpreter, so that SciPy is not loaded yet)."""
    script = tmp_path / "later_blas.py"
    script.write_text(
        "import sys\n"
        "from threadpoolctl import threadpool_info, threadpool_limits\n"
        "from daskmeans.engine.blas import one_blas_thread\n"
        "assert 'scipy.linalg' not in sys.modules\n"
        "with one_blas_thread():\n"
        "    pass\n"
        "import scipy.linalg\n"
        "with threadpool_limits(limits=2, user_api='blas'):\n"
        "    with one_blas_thread():\n"
        "        blas = [i for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "        print(sorted((i['filepath'], i['num_threads']) for i in blas))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pools = ast.literal_eval(done.stdout.strip())
    assert len(pools) >= 2, f"SciPy brought no BLAS of its own here: {pools}"
    assert all(threads == 1 for _, threads in pools), pools
