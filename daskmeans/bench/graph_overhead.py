"""What a pass over as many blocks as a billion rows has costs the scheduler and the driver, apart from the compute.

A billion rows of 128 features in blocks of about 32 MB are 16,384 blocks. The data here has that many blocks of a
few rows each, so the compute is negligible and what is measured is the overhead of a pass's graph: building it on
the driver, scheduling its tasks, and the driver's and the scheduler's memory while it runs. An exact k-means
iteration (:class:`~daskmeans.KMeans`) and an nmbatch iteration on the workers with the whole data as its batch
(:class:`~daskmeans.NestedMiniBatchKMeans`, ``driver_rows=0``, its batch rows where ``batch_rows="auto"`` puts them)
are timed over a few iterations from the same
initial centers. The per-block overhead is set against the compute one 32 MB block carries (the sizing workload's
fitted cost per row), and projects an iteration at a billion rows on many workers.
"""

from __future__ import annotations

import os
import time

import numpy as np
import psutil

from .. import config
from ..engine.client import compute_now
from ..engine.grouped import group_levels
from ..estimators.kmeans import KMeans
from ..estimators.minibatch import NestedMiniBatchKMeans
from ..storage.io import open_input
from .common import table_lines
from .monitor import MemoryMonitor
from .stores import ensure_blobs

#: Blocks of a billion rows of 128 features in blocks of about 32 MB (61,035 rows of 4-byte values).
BILLION_ROW_BLOCKS = 16_384
#: Rows per block of the overhead data: a few, so that a block's compute is negligible beside its overhead.
ROWS_PER_BLOCK = 8
#: Clusters of the overhead runs: few, for the same reason.
CLUSTERS = 16
#: Iterations timed per algorithm (the median iteration is reported).
ITERATIONS = 4
#: Worker counts of the projection.
PROJECT_WORKERS = (16, 64, 256)


def _scheduler_usage(dask_scheduler=None):
    """CPU seconds and resident bytes of the scheduler's process (run on the scheduler)."""
    process = psutil.Process()
    times = process.cpu_times()
    return {"cpu_seconds": times.user + times.system, "rss": process.memory_info().rss, "pid": process.pid}


def _driver_cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


def _timed_fit(estimator, path, client, n_blocks) -> dict:
    """Fit ``estimator`` on ``path``; its median iteration, the CPU time and memory of the driver and scheduler."""
    scheduler_before = client.run_on_scheduler(_scheduler_usage)
    driver_before = _driver_cpu_seconds()
    with MemoryMonitor(client, 0.05) as memory:
        start = time.perf_counter()
        estimator.fit(path)
        wall = time.perf_counter() - start
    scheduler_after = client.run_on_scheduler(_scheduler_usage)
    driver_cpu = _driver_cpu_seconds() - driver_before
    walls = np.diff([0.0] + [record["wall_time"] for record in estimator.history_])
    iteration = float(np.median(walls[1:] if len(walls) > 1 else walls))
    n_iter = max(1, int(estimator.n_iter_))
    return {
        "iteration_seconds": iteration,
        "per_block_seconds": iteration / n_blocks,
        "fit_seconds": wall,
        "n_iter": int(estimator.n_iter_),
        "driver_cpu_seconds_per_iteration": driver_cpu / n_iter,
        "scheduler_cpu_seconds_per_iteration": (scheduler_after["cpu_seconds"] - scheduler_before["cpu_seconds"])
        / n_iter,
        "scheduler_in_driver_process": scheduler_before["pid"] == os.getpid(),
        "driver_peak_rss": memory.result["driver_peak_rss"],
        "driver_baseline_rss": memory.result["driver_baseline_rss"],
        "scheduler_rss_before": scheduler_before["rss"],
        "scheduler_rss_after": scheduler_after["rss"],
        "batch_rows": getattr(estimator, "batch_rows_", None),
    }


def measure_graph_overhead(client, work_dir, n_features, n_blocks=BILLION_ROW_BLOCKS) -> dict:
    """Time an exact k-means and an nmbatch iteration over ``n_blocks`` tiny blocks read from Zarr.

    Parameters
    ----------
    client : distributed.Client
    work_dir : str
        Where the Zarr store of tiny blocks goes (kept for later runs).
    n_features : int
    n_blocks : int

    Returns
    -------
    dict
        ``{"n_blocks", "rows_per_block", "k", "kmeans": {...}, "nmbatch": {...}}``, each algorithm with its median
        iteration, per-block seconds, the driver's and the scheduler's CPU seconds per iteration and their memory.
    """
    n_samples = n_blocks * ROWS_PER_BLOCK
    written = ensure_blobs(
        os.path.join(work_dir, f"graph-uint8-b{n_blocks}-r{ROWS_PER_BLOCK}-d{n_features}.zarr"),
        n_samples,
        n_features,
        CLUSTERS,
        "uint8",
        chunk_rows=ROWS_PER_BLOCK,
        client=client,
    )
    path = written["array"]
    array = open_input(path, chunk_rows=ROWS_PER_BLOCK).array
    index = np.sort(np.random.default_rng(0).choice(n_samples, CLUSTERS, replace=False))
    (init,) = compute_now(array[index], client=client)
    init = np.ascontiguousarray(init, dtype=np.float32)
    common = {"n_clusters": CLUSTERS, "init": init, "max_iter": ITERATIONS, "tol": 0.0, "random_state": 0}
    kmeans = KMeans(**common, driver_rows=0, client=client, chunk_rows=ROWS_PER_BLOCK)
    nmbatch = NestedMiniBatchKMeans(
        **common,
        initial_batch_size=n_samples,
        driver_rows=0,
        client=client,
        chunk_rows=ROWS_PER_BLOCK,
    )
    return {
        "n_blocks": n_blocks,
        "threads": sum(client.nthreads().values()),
        "rows_per_block": ROWS_PER_BLOCK,
        "k": CLUSTERS,
        "kmeans": _timed_fit(kmeans, path, client, n_blocks),
        "nmbatch": _timed_fit(nmbatch, path, client, n_blocks),
    }


def project(graph, per_row_thread_seconds, threads_per_worker, target_rows, tau=None) -> list:
    """Each algorithm's overhead against the compute of its blocks at ``target_rows``, and an iteration's time there.

    The compute of a block of ``target_rows / n_blocks`` rows is ``rows x per_row_thread_seconds`` on one thread,
    and spreads over ``W x threads_per_worker`` threads; an iteration takes at most the compute plus the overhead
    (:func:`overhead_on`).
    """
    rows_per_block = target_rows / graph["n_blocks"]
    block_compute = rows_per_block * per_row_thread_seconds
    projected = []
    for name in ("kmeans", "nmbatch"):
        measured = graph[name]
        overhead = graph["n_blocks"] * measured["per_block_seconds"]
        compute_cpu = graph["n_blocks"] * block_compute
        iterations = []
        for workers in PROJECT_WORKERS:
            threads = workers * threads_per_worker
            iterations.append(
                {"workers": workers, "seconds": compute_cpu / threads + overhead_on(graph, name, threads, tau)}
            )
        projected.append(
            {
                "algorithm": name,
                "overhead_seconds": overhead,
                "block_compute_seconds": block_compute,
                "overhead_fraction": measured["per_block_seconds"] / block_compute,
                "iterations": iterations,
            }
        )
    return projected


def overhead_on(graph, name, threads, tau=None) -> float:
    """The overhead of a pass of ``name`` over the graph's blocks on ``threads`` worker threads.

    An exact k-means pass on a cluster is a few group tasks per thread (:mod:`daskmeans.engine.grouped`): its
    measured overhead is the scheduler's ``tau`` per task, serial, and the rest, each block's own cost inside the
    group tasks, spread over the measuring run's threads; at ``threads`` threads the tasks are those
    :func:`~daskmeans.engine.grouped.group_levels` makes there, and the per-block part spreads over them. Without
    ``tau`` or the measuring run's threads (records made before), or for nmbatch, the whole measured overhead is
    taken as serial: the same at any number of threads.
    """
    overhead = graph["n_blocks"] * graph[name]["per_block_seconds"]
    measured_threads = graph.get("threads")
    if name != "kmeans" or tau is None or not measured_threads:
        return overhead
    n_blocks = graph["n_blocks"]
    in_tasks = max(overhead - exact_pass_tasks(n_blocks, measured_threads) * tau, 0.0) * measured_threads
    return exact_pass_tasks(n_blocks, threads) * tau + in_tasks / threads


def exact_pass_tasks(n_blocks, threads) -> int:
    """The block tasks of an exact pass over ``n_blocks`` blocks on ``threads`` worker threads (small k)."""
    return -(-int(n_blocks) // config.SPLIT_EVERY ** group_levels(n_blocks, threads, None))


def _overhead_note(graph) -> str:
    if graph.get("threads"):
        return (
            f"Exact k-means runs each pass as a few group tasks per worker thread: its overhead at W workers is the "
            f"scheduler's time per task (the record's tau) times the tasks made there, plus the per-block work inside "
            f"the tasks measured here on {graph['threads']} threads, spread over the W workers' threads. nmbatch's "
            "overhead is taken as serial."
        )
    return "The overhead of a pass is taken as serial: the same at any number of workers."


def _shared_process_note(graph) -> str:
    if graph["kmeans"]["scheduler_in_driver_process"]:
        return "; the scheduler runs in the driver's process here, so both CPU columns count that process)."
    return ")."


def graph_lines(record) -> list:
    """The measured overhead and its projection, as Markdown lines (empty for records without the measurement)."""
    graph = record.get("graph")
    if not graph:
        return []
    names = {
        "kmeans": "exact k-means (KMeans)",
        "nmbatch": f"nmbatch, whole data as batch, {graph['nmbatch'].get('batch_rows', 'cached')} on the workers",
    }
    measured = table_lines(
        [
            "iteration",
            f"pass over {graph['n_blocks']:,} blocks",
            "per block",
            "driver CPU",
            "scheduler CPU",
            "driver peak RSS",
            "scheduler RSS after",
        ],
        [
            [
                names[name],
                f"{graph[name]['iteration_seconds']:.2f} s",
                f"{graph[name]['per_block_seconds'] * 1e3:.3f} ms",
                f"{graph[name]['driver_cpu_seconds_per_iteration']:.2f} s",
                f"{graph[name]['scheduler_cpu_seconds_per_iteration']:.2f} s",
                f"{graph[name]['driver_peak_rss'] / 2**30:.2f} GiB",
                f"{graph[name]['scheduler_rss_after'] / 2**30:.2f} GiB",
            ]
            for name in ("kmeans", "nmbatch")
        ],
    )
    target = record["target_rows"]
    projection = table_lines(
        [
            "iteration",
            "overhead per pass",
            f"compute per block at {target:,.0f} rows",
            "overhead / compute",
            *(f"iteration on {workers} workers" for workers in PROJECT_WORKERS),
        ],
        [
            [
                names[row["algorithm"]],
                f"{row['overhead_seconds']:.1f} s",
                f"{row['block_compute_seconds']:.3f} s",
                f"{100 * row['overhead_fraction']:.2f}%",
                *(f"{iteration['seconds']:.1f} s" for iteration in row["iterations"]),
            ]
            for row in record["graph_projection"]
        ],
    )
    return [
        "",
        f"## A pass over {graph['n_blocks']:,} blocks",
        "",
        f"The block count of {target:,.0f} rows of 128 features in 32 MB blocks, with {graph['rows_per_block']} rows "
        f"each and k = {graph['k']}, so that only the overhead is measured (median of {ITERATIONS} iterations; "
        "CPU seconds per iteration" + _shared_process_note(graph),
        "",
        *measured,
        "",
        "Projected: the compute of a 32 MB block is the k-means iteration's fitted cost per row above times its "
        "rows, spread over the workers' threads; an iteration takes at most the compute plus the overhead. "
        + _overhead_note(graph),
        "",
        *projection,
    ]
