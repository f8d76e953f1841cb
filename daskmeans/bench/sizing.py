"""The ``sizing`` workload: how a pass and a k-means fit grow with n, and what that means at a billion rows.

It also times a pass over as many blocks as a billion rows has (:mod:`daskmeans.bench.graph_overhead`).

Synthetic uint8 descriptors are written to Zarr on disk at growing n; for each n the harness times the assign
pass (the pass Lloyd spends each iteration) and a KMeans fit of a few iterations, both reading from Zarr, and
records the workers' peak memory. A linear model fitted on those times, plus a measured per-task scheduler
cost, extrapolates the time of a pass to ``target_rows`` on W workers.
"""

from __future__ import annotations

import os
import time

import numpy as np
from dask import delayed

from .. import config
from ..engine.client import compute_now
from ..engine.grouped import group_levels
from ..estimators.kmeans import KMeans
from ..passes.assign import stats_part_bytes
from ..storage.io import open_input
from ..storage.sources import stored_bytes
from .common import (
    cluster_info,
    code_commit,
    created,
    gib,
    machine_text,
    provenance_lines,
    table_lines,
    warm_up,
    write_report,
)
from .energy import measure_assign_pass
from .graph_overhead import BILLION_ROW_BLOCKS, graph_lines, measure_graph_overhead, project
from .monitor import MemoryMonitor, worker_processes
from .stores import ensure_blobs

TARGET_ROWS = 1_000_000_000
TARGET_ITERATIONS = 20
EXTRAPOLATE_WORKERS = (1, 4, 16, 64, 256)


def output_name(quick) -> str:
    """The name of the sizing workload's outputs: ``sizing``, or ``sizing-quick`` for the quick variant."""
    return "sizing-quick" if quick else "sizing"


def _noop(i):
    return i


def measure_task_overhead(client, n_tasks=500) -> float:
    """Seconds of scheduling per task: a graph of ``n_tasks`` empty tasks and one sum, divided by ``n_tasks``."""
    compute_now(delayed(sum)([delayed(_noop, pure=False)(i) for i in range(8)]), client=client)
    start = time.perf_counter()
    compute_now(delayed(sum)([delayed(_noop, pure=False)(i) for i in range(n_tasks)]), client=client)
    return (time.perf_counter() - start) / n_tasks


def pass_tasks(n_samples, chunk_rows, threads, k, d) -> int:
    """The block tasks of an exact pass over ``n_samples`` rows in blocks of ``chunk_rows`` on ``threads`` worker
    threads: one per group of blocks (:func:`~daskmeans.engine.grouped.group_levels`), one per block when the
    blocks are too few to group."""
    blocks = -(-int(n_samples) // int(chunk_rows))
    levels = group_levels(blocks, threads, stats_part_bytes(k, d))
    return -(-blocks // config.SPLIT_EVERY**levels)


def fit_pass_model(n_samples, seconds, tasks, threads, tau) -> dict:
    """Least-squares ``seconds - tau * tasks = a + slope * n``: the per-thread row cost is the slope once the
    scheduler's share of each size (``tasks`` of its pass, ``tau`` each) is taken out."""
    n = np.asarray(n_samples, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64) - tau * np.asarray(tasks, dtype=np.float64)
    if len(n) >= 2 and np.ptp(n) > 0:
        slope, intercept = np.polyfit(n, t, 1)
    else:
        slope, intercept = t[0] / n[0], 0.0
    intercept = max(float(intercept), 0.0)
    per_row = max(float(slope), 1e-12)
    return {"a": intercept, "slope": float(slope), "b_per_thread": per_row * threads, "tau": tau}


def run_sizing(options, client, machine, sgemm) -> dict:
    """Run the sizing workload and return its JSON record (tables and plot come from it)."""
    quick = options.quick
    sizes = (
        list(options.sizes)
        if options.sizes
        else ([20_000, 40_000, 80_000] if quick else [250_000, 1_000_000, 2_000_000])
    )
    d = options.n_features or (32 if quick else 128)
    k = options.k or (20 if quick else 1000)
    iterations = 2 if quick else 3
    cluster = cluster_info(client)
    threads = max(1, cluster["threads"])
    # the block size a large store would have, so that the per-task term extrapolates as it would
    chunk_rows = int(config.TARGET_BLOCK_BYTES // (4 * d))
    work_dir = options.work_dir or os.path.join(options.out_dir, "data")
    warm_up(client, ["kmeans"], d, np.float32, k)
    processes = worker_processes(client)
    tau = measure_task_overhead(client)
    measured = []
    for n in sizes:
        start = time.perf_counter()
        written = ensure_blobs(
            os.path.join(work_dir, f"sizing-uint8-n{n}-d{d}-c{k}-r{chunk_rows}.zarr"),
            n,
            d,
            k,
            "uint8",
            chunk_rows=chunk_rows,
            client=client,
        )
        write_seconds = time.perf_counter() - start
        path = written["array"]
        array = open_input(path, chunk_rows=chunk_rows).array
        index = np.sort(np.random.default_rng(0).choice(n, k, replace=False))
        (init,) = compute_now(array[index], client=client)
        init = np.ascontiguousarray(init, dtype=np.float32)
        with MemoryMonitor(client, 0.05, processes) as pass_memory:
            assign = measure_assign_pass(array, init, client, repeats=2)
        model = KMeans(
            n_clusters=k, init=init, max_iter=iterations, tol=0.0, random_state=0, client=client, chunk_rows=chunk_rows
        )
        with MemoryMonitor(client, 0.05, processes) as fit_memory:
            start = time.perf_counter()
            model.fit(path)
            fit_seconds = time.perf_counter() - start
        walls = [0.0] + [r["wall_time"] for r in model.history_]
        iteration_seconds = float(np.median(np.diff(walls)))
        measured.append(
            {
                "n_samples": n,
                "path": path,
                "bytes": written["bytes"],
                "stored_bytes": stored_bytes(path),
                "reused_store": written["reused"],
                "write_seconds": write_seconds,
                "assign_seconds": assign["median_seconds"],
                "assign_all_seconds": assign["seconds"],
                "gflops": assign["gflops"],
                "rows_per_second_per_thread": n / assign["median_seconds"] / threads,
                "iteration_seconds": iteration_seconds,
                "fit_seconds": fit_seconds,
                "n_iter": model.n_iter_,
                "history": [
                    {key: value for key, value in r.items() if isinstance(value, (int, float, str))}
                    for r in model.history_
                ],
                "worker_peak_rss": max(
                    filter(None, [pass_memory.result["worker_peak_rss"], fit_memory.result["worker_peak_rss"]]),
                    default=None,
                ),
                "driver_peak_rss": max(pass_memory.result["driver_peak_rss"], fit_memory.result["driver_peak_rss"]),
                "memory": {"assign": pass_memory.result, "fit": fit_memory.result},
            }
        )
    rows = [m["n_samples"] for m in measured]
    tasks = [pass_tasks(n, chunk_rows, threads, k, d) for n in rows]
    model = fit_pass_model(rows, [m["assign_seconds"] for m in measured], tasks, threads, tau)
    iteration_model = fit_pass_model(rows, [m["iteration_seconds"] for m in measured], tasks, threads, tau)
    per_worker = max(cluster["threads_per_worker"] or [1])
    model.update({"tau_tasks": 500, "threads_per_worker": per_worker, "pass_tasks": tasks})

    def extrapolate(fitted, workers):
        target_tasks = pass_tasks(TARGET_ROWS, chunk_rows, workers * per_worker, k, d)
        return fitted["a"] + TARGET_ROWS * fitted["b_per_thread"] / (workers * per_worker) + target_tasks * tau

    graph = measure_graph_overhead(client, work_dir, d, n_blocks=512 if quick else BILLION_ROW_BLOCKS)
    extrapolation = []
    for workers in EXTRAPOLATE_WORKERS:
        pass_seconds = extrapolate(model, workers)
        iteration_seconds = extrapolate(iteration_model, workers)
        extrapolation.append(
            {
                "workers": workers,
                "pass_seconds": pass_seconds,
                "iteration_seconds": iteration_seconds,
                "kmeans_seconds": 2 * pass_seconds + TARGET_ITERATIONS * iteration_seconds,
            }
        )
    return {
        "schema": "daskmeans-bench-sizing/1",
        "name": output_name(quick),
        "created": created(),
        **code_commit(),
        "command": options.command_line,
        "machine": machine,
        "cluster": cluster,
        "gemm": sgemm,
        "n_features": d,
        "k": k,
        "dtype": "uint8",
        "chunk_rows": chunk_rows,
        "kmeans_iterations": iterations,
        "sizes": measured,
        "model": model,
        "iteration_model": iteration_model,
        "target_rows": TARGET_ROWS,
        "target_iterations": TARGET_ITERATIONS,
        "extrapolation": extrapolation,
        "graph": graph,
        "graph_projection": project(graph, iteration_model["b_per_thread"], per_worker, TARGET_ROWS, tau),
        "assumptions": "t(n, W) = a + n b / (W T) + tasks(n, W T) tau, fitted separately for the assign "
        "pass and the k-means iteration; k-means = 2 passes (summary, final statistics) + iterations; "
        "worker memory independent of n; storage bandwidth scales with W.",
    }


# -- outputs -----------------------------------------------------------------------------------------------------------
def markdown_table(record) -> str:
    """Measured sizes and the extrapolation to a billion rows, as Markdown."""
    c, m = record["cluster"], record["machine"]
    model = record["model"]
    lines = [
        f"# {record['name']}: assign pass and k-means on synthetic descriptors in Zarr",
        "",
        *provenance_lines(record),
        "",
        (
            f"{record['n_features']} features stored as {record['dtype']}, k = {record['k']}, "
            f"{record['chunk_rows']:,} rows per block; machine: {machine_text(m)}; cluster: {c['n_workers']} workers x "
            f"{'/'.join(map(str, c['threads_per_worker']))} thread(s) ({c['threads']} threads)."
        ),
        "",
    ]
    lines += sizes_lines(record)
    iteration = record["iteration_model"]
    lines += [
        "",
        f"Model: t(n, W) = a + n * b / (W * T) + tasks(n, W * T) * tau, fitted on the sizes above: assign pass "
        f"a = {model['a']:.3f} s, b = {model['b_per_thread'] * 1e6:.3f} s per million rows per thread; k-means "
        f"iteration a = {iteration['a']:.3f} s, b = {iteration['b_per_thread'] * 1e6:.3f} s per million rows per "
        f"thread; tau = {model['tau'] * 1e3:.2f} ms of scheduler time per task (measured with {model['tau_tasks']} "
        f"empty tasks), {record['chunk_rows']:,} rows per block, T = {model['threads_per_worker']} thread(s) per "
        f"worker; tasks(n, W * T) is a pass's block tasks: one per group of blocks on a cluster (a few per worker "
        f"thread), one per block when there are too few blocks to group ({_tasks_text(record)} at the sizes above). "
        f"A k-means fit = 2 passes (summary, final statistics) + {record['target_iterations']} iterations. "
        "Assumptions: work per pass scales with n / W; the scheduler's per-task time is serial; the worker memory "
        "peak does not grow with n (blocks are streamed from Zarr); storage bandwidth grows with W.",
        "",
    ]
    lines += extrapolation_lines(record)
    lines += graph_lines(record)
    return "\n".join(lines) + "\n"


def _tasks_text(record) -> str:
    tasks = record["model"].get("pass_tasks")
    if tasks is None:  # a record made when every block was a task of its own
        return "one per block"
    blocks = [-(-size["n_samples"] // record["chunk_rows"]) for size in record["sizes"]]
    return ", ".join(f"{t} for {b} blocks" for t, b in zip(tasks, blocks))


def sizes_lines(record) -> list:
    """The table of the measured sizes: bytes, pass and iteration times, rates and memory."""
    columns = [
        "rows",
        "on disk",
        "assign pass",
        "rows/s per thread",
        "GFLOP/s",
        "k-means iteration",
        "k-means fit (iterations)",
        "worker peak RSS",
        "driver peak RSS",
    ]
    return table_lines(
        columns,
        [
            [
                f"{size['n_samples']:,}",
                gib(size.get("stored_bytes", size["bytes"])),
                f"{size['assign_seconds']:.2f} s",
                f"{size['rows_per_second_per_thread']:,.0f}",
                f"{size['gflops']:.0f}",
                f"{size['iteration_seconds']:.2f} s",
                f"{size['fit_seconds']:.1f} s ({size['n_iter']})",
                gib(size["worker_peak_rss"]),
                gib(size["driver_peak_rss"]),
            ]
            for size in record["sizes"]
        ],
    )


def extrapolation_lines(record) -> list:
    """The table of the model's times at :data:`TARGET_ROWS` rows on 1 to 256 workers."""
    columns = [
        "workers W",
        f"assign pass at {record['target_rows']:,.0f} rows",
        "k-means iteration",
        f"k-means, {record['target_iterations']} iterations",
    ]
    return table_lines(
        columns,
        [
            [
                f"{row['workers']}",
                _duration(row["pass_seconds"]),
                _duration(row["iteration_seconds"]),
                _duration(row["kmeans_seconds"]),
            ]
            for row in record["extrapolation"]
        ],
    )


def _duration(seconds):
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def plot_sizing(record, path):
    """Assign pass and k-means iteration seconds against the rows, with the fitted model."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sizes = record["sizes"]
    n = [s["n_samples"] for s in sizes]
    figure = Figure(figsize=(6, 4), dpi=110)
    FigureCanvasAgg(figure)
    axis = figure.add_subplot()
    axis.plot(n, [s["assign_seconds"] for s in sizes], marker="o", label="assign pass")
    axis.plot(n, [s["iteration_seconds"] for s in sizes], marker="s", label="k-means iteration")
    model = record["model"]
    grid = np.linspace(0, max(n), 50)
    threads = record["cluster"]["threads"]
    tasks = [pass_tasks(n, record["chunk_rows"], threads, record["k"], record["n_features"]) for n in grid]
    axis.plot(
        grid,
        model["a"] + grid * model["b_per_thread"] / threads + np.asarray(tasks) * model["tau"],
        linestyle="--",
        color="grey",
        label="model",
    )
    axis.set_xlabel("rows")
    axis.set_ylabel("seconds")
    axis.grid(True, alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, format="png")


def write_outputs(record, out_dir) -> list:
    """Write ``NAME.json``, ``NAME.md`` and ``NAME.png`` (pass and iteration times against n, with the model)."""
    return write_report(out_dir, record["name"], record, markdown_table(record), PLOTS)


#: The plot of the sizing workload: ``NAME.png``.
PLOTS = {"png": plot_sizing}
