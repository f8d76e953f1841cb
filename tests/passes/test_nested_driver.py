"""Small nested batches stepped on the driver (daskmeans/passes/nested_driver.py), then moved to the workers."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
from dask.system import CPU_COUNT
from distributed import Client, LocalCluster

from daskmeans.algorithms.relocation import centers_from_sums
from daskmeans.config import DRIVER_BYTES, DRIVER_WORK, DRIVER_WORK_FEW_THREADS
from daskmeans.engine.client import compute_now
from daskmeans.engine.driver import driver_rows, driver_work
from daskmeans.kernels import nested_groups
from daskmeans.passes.nested_driver import to_workers
from daskmeans.passes.nested_state import NestedBatch
from daskmeans.storage.io import open_input

SIZES = (600, 1200, 1200, 2400, 2400, 4000, 4000)


def test_auto_takes_the_smaller_of_the_work_and_the_memory_limits():
    assert driver_rows(123, 50, 784, 1000) == 123
    assert driver_rows(0, 50, 784, 1000) == 0
    assert driver_rows("auto", 50, 784, 1000) == DRIVER_WORK // (50 * 784)
    assert driver_rows("auto", 2, 4, 10**6) == DRIVER_BYTES // 10**6


def test_the_driver_takes_on_more_work_when_the_workers_run_no_more_threads_than_its_cores(cluster_client):
    if CPU_COUNT < 2:
        pytest.skip("the session's cluster runs 2 threads: more than this machine's cores")
    assert driver_work(None) == DRIVER_WORK
    assert driver_work(cluster_client) == DRIVER_WORK_FEW_THREADS  # 2 worker processes of one thread
    with (
        LocalCluster(n_workers=1, threads_per_worker=CPU_COUNT + 1, processes=False, dashboard_address=None) as many,
        Client(many, set_as_default=False) as client,
    ):
        assert driver_work(client) == DRIVER_WORK
    # descriptors, k = 4096: 300,000 rows (not 600,000) are stepped on the driver of a local cluster
    rows = driver_rows("auto", 4096, 128, 356, DRIVER_WORK_FEW_THREADS)
    assert rows == DRIVER_WORK_FEW_THREADS // (4096 * 128) and 300_000 <= rows < 600_000
    # at k = 1000 the driver's memory bounds them first
    assert driver_rows("auto", 1000, 128, 356, DRIVER_WORK_FEW_THREADS) == DRIVER_BYTES // 356
    assert driver_rows("auto", 1000, 128, 10**4, DRIVER_WORK_FEW_THREADS) == DRIVER_BYTES // 10**4


def test_a_batch_moved_to_the_workers_raises_no_large_graph_warning(cluster_client):
    values = [np.arange(2 * 2**20, dtype=np.float64), np.ones(3)]  # 16 MiB: past Dask's 10 MB warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sent = to_workers(values, cluster_client, "test")
    assert not [w for w in caught if "large graph" in str(w.message)], [str(w.message) for w in caught]
    back = compute_now(*sent, client=cluster_client)
    np.testing.assert_array_equal(back[0], values[0])


def _step_through(batch, centers, sizes):
    """Step ``batch`` through ``sizes``, the centers moving to the running sums' means as nmbatch moves them; each
    step's deltas and where the blocks were after it."""
    shift = np.zeros(centers.shape[0])
    sums, counts, steps, on_driver = 0.0, 0.0, [], []
    for size in sizes:
        deltas = batch.step(centers, shift, size)
        steps.append(deltas)
        on_driver.append(batch.on_driver)
        sums, counts = sums + deltas[0], counts + deltas[1]
        new = centers_from_sums(sums, counts, centers).astype(np.float32)
        shift = np.sqrt(((new.astype(np.float64) - centers) ** 2).sum(axis=1)) * (1 + 1e-9)
        centers = new
    return steps, on_driver, centers


def _assert_same_steps(steps, expected):
    for got, want in zip(steps, expected, strict=True):
        for x, y in zip(got[:4], want[:4]):
            np.testing.assert_array_equal(x, y)
        assert got[4] == want[4]


@pytest.fixture
def problem():
    rng = np.random.default_rng(8)
    X = (rng.standard_normal((4000, 10)) + 4 * rng.integers(0, 6, size=(4000, 1))).astype(np.float32)
    centers = X[rng.choice(4000, 9, replace=False)].copy()
    return X, centers, nested_groups.make_groups(centers, "yinyang", 3)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sizes, rows_ahead",
    [
        (SIZES, True),  # nmbatch's doublings: the rows go ahead once the next growth would leave the driver
        ((600, 600, 2800, 2800, 4000), False),  # a jump past the next doubling: the blocks go whole at the move
    ],
)
def test_a_small_batch_steps_on_the_driver_then_moves_to_the_workers_with_the_same_steps(
    problem, cluster_client, sizes, rows_ahead
):
    """Below ``driver_rows`` the blocks are values in this process; past it they live on the workers. Every step's
    sums, counts, SSE, members and counters are those of a batch stepped on the workers from the start, and the
    content of the batch is the same, whether the rows went to the workers ahead of the move or with it."""
    X, centers, groups = problem
    batches = {
        rows: NestedBatch(open_input(X, chunk_rows=500).array, 3, groups, client=cluster_client, driver_rows=rows)
        for rows in (0, 1500)
    }
    moves = []
    original = batches[1500]._blocks_to_workers

    def move():
        moves.append(batches[1500]._rows_ahead[0] == batches[1500].layout_id)
        original()

    batches[1500]._blocks_to_workers = move
    steps = {rows: _step_through(batch, centers, sizes) for rows, batch in batches.items()}
    assert moves == [rows_ahead]
    assert steps[0][1] == [False] * len(sizes)
    assert steps[1500][1] == [size <= 1500 for size in sizes]
    _assert_same_steps(steps[1500][0], steps[0][0])
    for x, y in zip(batches[1500].content(), batches[0].content()):
        np.testing.assert_array_equal(x, y)
    assert batches[1500].block_sizes() == batches[0].block_sizes()


@pytest.mark.slow
def test_weighted_steps_on_the_driver_are_those_of_the_workers(problem, cluster_client):
    """Sample weights are read with the new rows and counted in the sums the same way on the driver."""
    import dask.array as da

    X, centers, groups = problem
    weights = da.from_array(np.random.default_rng(2).random(4000) * 3, chunks=500)
    steps = {}
    for rows in (0, 1500):
        batch = NestedBatch(
            open_input(X, chunk_rows=500).array, 3, groups, client=cluster_client, driver_rows=rows, weights=weights
        )
        steps[rows] = _step_through(batch, centers, SIZES)
    assert steps[1500][1][:3] == [True] * 3
    _assert_same_steps(steps[1500][0], steps[0][0])


def test_a_batch_on_the_driver_holds_its_blocks_here_and_prefetches_the_next_growth(problem, cluster_client):
    X, centers, groups = problem
    batch = NestedBatch(open_input(X, chunk_rows=500).array, 3, groups, client=cluster_client, driver_rows=4000)
    batch.step(centers, np.zeros(9), 600)
    assert batch.on_driver and all(type(o).__name__ == "StepOutput" for o in batch.outputs)
    assert list(batch.reads.pending) == [(600, 1200)]
    batch.step(centers, np.zeros(9), 600)  # no growth: the prefetched rows wait
    assert list(batch.reads.pending) == [(600, 1200)]
    batch.step(centers, np.zeros(9), 1200)
    assert list(batch.reads.pending) == [(1200, 2400)]


def test_a_checkpoint_of_a_batch_on_the_driver_restores_on_the_workers(problem, cluster_client, tmp_path):
    """The driver writes the blocks it holds; they come back on the workers and step as the batch that wrote
    them would have."""
    X, centers, groups = problem
    array = open_input(X, chunk_rows=500).array
    batch = NestedBatch(array, 3, groups, client=cluster_client, driver_rows=4000)
    _, on_driver, last = _step_through(batch, centers, SIZES[:4])
    assert all(on_driver)
    written = batch.write_checkpoint(str(tmp_path / "blocks"), str(tmp_path / "layout"))
    restored = NestedBatch(array, 3, groups, client=cluster_client, driver_rows=4000)
    restored.restore_checkpoint(
        written, str(tmp_path / "blocks"), str(tmp_path / "layout"), batch.layout_id, batch.size, batch.rows_read
    )
    assert not restored.on_driver
    expected = _step_through(batch, last, SIZES[4:])
    again = _step_through(restored, last, SIZES[4:])
    _assert_same_steps(again[0], expected[0])
    assert again[1] == [False] * 3  # restored blocks stay on the workers


class _Seen:
    def __init__(self, threads):
        self.report = [threads]


def test_driver_steps_run_blas_on_one_thread_per_step_thread():
    """As on the workers: each thread's GEMM on one core (BLAS on every core in each thread oversubscribes them)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from daskmeans.passes.nested_driver import step_on_driver

    def blas_threads(*_):
        return sorted({info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"})

    with threadpool_limits(limits=2, user_api="blas"):
        if blas_threads() != [2]:
            pytest.skip(f"BLAS here cannot run two threads ({blas_threads()})")
        outputs, seen = step_on_driver(
            lambda i: _Seen(blas_threads()),
            [[i] for i in range(4)],
            (),
            lambda parts: [s for part in parts for s in part],
        )
        assert seen == [[1]] * 4
        assert blas_threads() == [2]  # the caller's limit is back


def test_driver_steps_run_blas_on_one_thread_with_an_openmp_blas_loaded():
    """An OpenBLAS built on OpenMP (faiss's wheels) keeps its thread count per thread: each step thread is limited
    itself. Run in a process of its own, as faiss's BLAS stays loaded once imported."""
    pytest.importorskip("faiss")
    script = "import faiss\n" + _BLAS_STEP + "with threadpool_limits(limits=2, user_api='blas'):\n    print(step())\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str([[1]] * 4)


#: A script's start: ``step()`` steps four blocks on the driver, each reporting its thread's BLAS thread counts.
_BLAS_STEP = (
    "from threadpoolctl import threadpool_info, threadpool_limits\n"
    "from daskmeans.passes.nested_driver import step_on_driver\n"
    "class Seen:\n"
    "    def __init__(self, threads):\n"
    "        self.report = [threads]\n"
    "def blas_threads():\n"
    "    return sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'})\n"
    "def step():\n"
    "    return step_on_driver(lambda i: Seen(blas_threads()), [[i] for i in range(4)], (),\n"
    "                          lambda parts: [s for part in parts for s in part])[1]\n"
)


def test_driver_steps_keep_one_pool_of_threads():
    """Every step runs on the same threads (no pool started and joined per step), one per core at most."""
    import threading

    from daskmeans.passes.nested_driver import driver_threads, step_on_driver

    def names(parts):
        return [name for part in parts for name in part]

    seen = [
        step_on_driver(lambda i: _Seen(threading.current_thread().name), [[i] for i in range(8)], (), names)[1]
        for _ in range(3)
    ]
    assert driver_threads() is driver_threads()
    threads = set(names(seen))
    assert len(threads) <= CPU_COUNT
    assert all(name.startswith("daskmeans-driver-step") for name in threads)


def test_a_forked_process_steps_on_threads_of_its_own():
    """The pool's threads do not follow a fork: a child forked after the parent stepped makes its own pool (with
    the parent's pool it would wait forever for threads it does not have)."""
    script = (
        "import multiprocessing, sys\n"
        "from daskmeans.passes.nested_driver import step_on_driver\n"
        "class Seen:\n"
        "    def __init__(self, value):\n"
        "        self.report = [value]\n"
        "def step():\n"
        "    return step_on_driver(lambda i: Seen(i * i), [[i] for i in range(4)], (),\n"
        "                          lambda parts: [s for part in parts for s in part])[1]\n"
        "def child(queue):\n"
        "    queue.put(step())\n"
        "if __name__ == '__main__':\n"
        "    assert step() == [0, 1, 4, 9]\n"
        "    context = multiprocessing.get_context('fork')\n"
        "    queue = context.Queue()\n"
        "    process = context.Process(target=child, args=(queue,))\n"
        "    process.start()\n"
        "    print(queue.get(timeout=60))\n"
        "    process.join(60)\n"
        "    sys.exit(process.exitcode)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[0, 1, 4, 9]"


def test_driver_steps_limit_a_blas_loaded_after_the_first_step():
    """A pool thread limits BLAS again once modules were imported since its last limit: faiss's OpenMP BLAS,
    imported after the pool's threads started, runs on one thread in each of them too."""
    pytest.importorskip("faiss")
    script = (
        _BLAS_STEP + "step()\nimport faiss\nwith threadpool_limits(limits=2, user_api='blas'):\n    print(step())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str([[1]] * 4)
