"""Exact energies outside the timed region, and the machine's float32 GEMM rate.

The energy of centers is the mean squared distance of every row to its nearest center, on the full data:
nearest centers by blocked GEMM (:func:`daskmeans.kernels.assign.nearest_centers`), the winner's distance
recomputed exactly and accumulated in float64.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from ..engine.client import compute_now
from ..kernels.assign import nearest_centers
from ..passes.assign import assign_stats_graph, lazy_min_dist2

#: Rows per block of the in-driver evaluation.
EVAL_BLOCK_ROWS = 32_768


@contextmanager
def blas_threads(n):
    """Limit BLAS to ``n`` threads inside the block (needs threadpoolctl, which scikit-learn brings)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield False
        return
    with threadpool_limits(limits=n, user_api="blas"):
        yield True


class InMemoryEnergy:
    """Exact energy on a NumPy array held by the driver, blocks spread over a few threads.

    Parameters
    ----------
    X : ndarray (n, d) float32
    n_threads : int, optional
        Default: the number of CPUs. Each thread runs BLAS single-threaded on its own blocks.
    """

    def __init__(self, X, n_threads=None):
        self.X = X
        self.n_threads = n_threads or os.cpu_count() or 1
        self.seconds = 0.0
        self.calls = 0

    def _block_sum(self, centers, start):
        return float(nearest_centers(self.X[start : start + EVAL_BLOCK_ROWS], centers)[1].sum())

    def __call__(self, centers) -> float:
        start_time = time.perf_counter()
        centers = np.ascontiguousarray(centers, dtype=self.X.dtype)
        starts = range(0, self.X.shape[0], EVAL_BLOCK_ROWS)
        with blas_threads(1), ThreadPoolExecutor(self.n_threads) as pool:
            total = sum(pool.map(lambda s: self._block_sum(centers, s), starts))
        self.seconds += time.perf_counter() - start_time
        self.calls += 1
        return total / self.X.shape[0]


class DaskEnergy:
    """Exact energy computed by a pass on the cluster (for data the driver does not hold)."""

    def __init__(self, array, client):
        self.array = array
        self.client = client
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, centers) -> float:
        start_time = time.perf_counter()
        lazy = lazy_min_dist2(self.array, centers).sum(dtype=np.float64)
        (total,) = compute_now(lazy, client=self.client)
        self.seconds += time.perf_counter() - start_time
        self.calls += 1
        return float(total) / self.array.shape[0]


def measure_sgemm(size=2048, repeats=3) -> dict:
    """Best float32 matrix-multiply rate of NumPy's BLAS, single-threaded and with all its threads.

    Returns
    -------
    dict
        ``{"size", "one_thread_gflops", "all_threads_gflops", "threads"}``; ``one_thread_gflops`` is None
        without threadpoolctl.
    """
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    flop = 2.0 * size**3

    def best_rate():
        a @ b
        best = min(_timed(lambda: a @ b) for _ in range(repeats))
        return flop / best / 1e9

    all_threads = best_rate()
    with blas_threads(1) as limited:
        one_thread = best_rate() if limited else None
    threads = None
    try:
        from threadpoolctl import threadpool_info

        threads = max(
            (info.get("num_threads", 0) for info in threadpool_info() if info.get("user_api") == "blas"), default=None
        )
    except ImportError:
        pass
    return {"size": size, "one_thread_gflops": one_thread, "all_threads_gflops": all_threads, "threads": threads}


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def measure_assign_pass(array, centers, client, repeats=3, max_seconds=30.0) -> dict:
    """Time the assign + stats pass (the pass Lloyd spends each iteration) and its GEMM rate.

    The first pass is repeated at most ``repeats`` times while the total stays under ``max_seconds``.

    Returns
    -------
    dict
        ``{"seconds": [...], "median_seconds", "flop", "gflops"}`` with ``flop = 2 n k d`` (the GEMM part).
    """
    n, d = array.shape
    k = centers.shape[0]
    seconds = []
    while len(seconds) < repeats:
        # centers moved by a different tiny offset each time: new task keys, so no result of an earlier
        # repetition still held by the scheduler can be reused
        moved = (centers + np.float32(len(seconds) * 1e-3)).astype(centers.dtype)
        seconds.append(_timed(lambda: compute_now(assign_stats_graph(array, moved, client=client), client=client)))
        if sum(seconds) + seconds[-1] > max_seconds:
            break
    median = float(np.median(seconds))
    flop = 2.0 * n * k * d
    return {"seconds": seconds, "median_seconds": median, "flop": flop, "gflops": flop / median / 1e9}
