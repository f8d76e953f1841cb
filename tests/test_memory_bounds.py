"""Memory: no temporary grows with n x k or k x k, and workers limited below the data size finish every algorithm
without spilling or restarting, within :func:`daskmeans.memory.worker_memory_bound`.

* k = 100,000: the kernels that see every center at once (the assign kernel of the passes, nmbatch's full
  assignment, k-means||'s reclustering) are run under ``tracemalloc`` and stay within the documented bound,
  far below one ``n x k`` (or ``k x k``) matrix.
* Out of core: a uint8 Zarr store in 64 MiB chunks (an ordinary chunk size that daskmeans did not choose), larger
  than the memory limit of the only worker; each algorithm fits it with the worker's resident memory sampled every
  50 ms (psutil). Dask's default memory thresholds apply (spill at 70% of the limit). The limit, 768 MiB, is
  twelve chunks: a warm worker's own footprint is already about 300 MiB, and a chunk as float32 is 256 MiB (as
  float64 temporaries, 512 MiB), so only a pass that converts and works a slab at a time fits. The data is just
  above the limit, so the test stays within a few minutes on two cores.
"""

from __future__ import annotations

import math
import tracemalloc

import dask
import numpy as np
import pytest
import zarr

from daskmeans.algorithms.init import weighted_lloyd
from daskmeans.algorithms.nested import state_bytes_per_row
from daskmeans.bench.monitor import MemoryMonitor
from daskmeans.kernels.assign import nearest_centers
from daskmeans.kernels.exact_assign import assign_with_bounds
from daskmeans.kernels.nested_groups import choose_bounds, make_groups
from daskmeans.kernels.packed_bounds import LOWER_DTYPE
from daskmeans.memory import (
    minibatch_state_bytes,
    nmbatch_state_bytes,
    task_memory_bytes,
    vrkm_state_bytes,
    worker_memory_bound,
)
from daskmeans.registry import make_estimator

pytestmark = pytest.mark.slow

MiB = 2**20


def traced_peak(function, *args, **kwargs):
    """The function's result and the peak of the memory it allocated (Python and NumPy), in bytes."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        result = function(*args, **kwargs)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- k = 100,000 -----------------------------------------------------------------------------------------------
K_LARGE, D_LARGE, BLOCK_ROWS = 100_000, 16, 1024


@pytest.fixture(scope="module")
def large_k():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((K_LARGE, D_LARGE)).astype(np.float32)
    block = rng.standard_normal((BLOCK_ROWS, D_LARGE)).astype(np.float32)
    return block, centers


def test_bound_is_linear_in_k_and_free_of_n():
    small = worker_memory_bound(2048, 16, 1000)
    assert worker_memory_bound(2048, 16, 2000) - small == pytest.approx(
        worker_memory_bound(2048, 16, 3000) - worker_memory_bound(2048, 16, 2000), rel=1e-9
    )
    big = worker_memory_bound(2048, 16, K_LARGE)
    assert big < 400 * MiB, "k = 100,000 of 16 features fits a small worker"
    assert big < BLOCK_ROWS * K_LARGE * 4, "the bound is below one block-by-k distance matrix"


def test_assign_kernel_with_100k_centers_blocks_over_rows_and_centers(large_k):
    block, centers = large_k
    nearest_centers(block[:2], centers)  # load the compiled kernels first: Numba's own allocations are not the task's
    (labels, dist2), peak = traced_peak(nearest_centers, block, centers)
    bound = task_memory_bytes(BLOCK_ROWS, D_LARGE, K_LARGE)
    assert peak <= bound, f"peak {peak / MiB:.1f} MiB > bound {bound / MiB:.1f} MiB"
    assert peak < BLOCK_ROWS * K_LARGE * 4 / 10, "nothing near a (block x k) matrix"
    # the labels are right: check a few rows against the full distances
    for i in (0, 777, BLOCK_ROWS - 1):
        full = ((centers.astype(np.float64) - block[i].astype(np.float64)) ** 2).sum(axis=1)
        assert labels[i] == np.argmin(full) and dist2[i] == pytest.approx(full.min(), rel=1e-5)


def test_nested_full_assignment_with_100k_centers_stays_in_its_slab(large_k):
    block, centers = large_k
    block = block[:64]  # yinyang with 100,000 centers: slabs of two rows, slow in Python; 64 rows show the peak
    scheme, n_groups = choose_bounds("auto", K_LARGE, D_LARGE * 4)
    groups = make_groups(centers, scheme, n_groups)
    assign_with_bounds(block[:2], centers, groups)  # the compiled kernels loaded before the peak is traced
    (labels, dist2, lower, _), peak = traced_peak(assign_with_bounds, block, centers, groups)
    bound = task_memory_bytes(64, D_LARGE, K_LARGE) + groups.slot_center.nbytes
    assert peak <= bound, f"peak {peak / MiB:.1f} MiB > bound {bound / MiB:.1f} MiB"
    assert lower.shape == (64, n_groups) and lower[0].nbytes <= D_LARGE * 4, "bounds no larger than a row"
    np.testing.assert_array_equal(labels, nearest_centers(block, centers)[0])


def test_full_assignment_of_a_uint8_block_never_holds_it_as_float32():
    """A block kept as stored (uint8 descriptors) is converted a slab at a time: the peak stays far below the block
    as float32 (here 12.3 MB), whatever the block's size."""
    rng = np.random.default_rng(3)
    block = rng.integers(0, 256, size=(48_000, 64), dtype=np.uint8)
    centers = block[rng.choice(48_000, 256, replace=False)].astype(np.float32)
    scheme, n_groups = choose_bounds("auto", 256, 64 * 4)
    groups = make_groups(centers, scheme, n_groups)
    out = (np.empty(48_000, dtype=np.int32), np.empty(48_000), np.empty((48_000, n_groups), dtype=LOWER_DTYPE))
    assign_with_bounds(block[:2], centers, groups, slab_bytes=MiB)  # the compiled kernels loaded first
    (labels, _, _, _), peak = traced_peak(assign_with_bounds, block, centers, groups, slab_bytes=MiB, out=out)
    assert peak < 4 * MiB < block.nbytes * 4 / 2, f"peak {peak / MiB:.1f} MiB"
    np.testing.assert_array_equal(labels[:500], nearest_centers(block[:500].astype(np.float32), centers)[0])


def test_kmeans_parallel_reclustering_is_not_quadratic_in_k():
    """k-means|| reclusters about 10 k candidates against k centers: in slabs, not one candidates x k matrix."""
    k, m, d = 10_000, 20_000, 8
    rng = np.random.default_rng(1)
    points = rng.standard_normal((m, d))
    weights = rng.uniform(0.5, 2.0, m)
    start = points[rng.choice(m, k, replace=False)]
    centers, peak = traced_peak(weighted_lloyd, points, weights, start, max_iter=1)
    full_matrix = m * k * 8
    assert peak < 100 * MiB < full_matrix / 10, f"peak {peak / MiB:.1f} MiB"
    assert np.isfinite(centers).all()
    # the slabs give the result of one (points x centers) matrix, on a part small enough for that
    part, n_centers = slice(0, 4000), 500
    blocked = weighted_lloyd(points[part], weights[part], start[:n_centers], max_iter=2)
    reference = start[:n_centers].copy()
    for _ in range(2):
        labels = np.argmin(((points[part, None, :] - reference[None, :, :]) ** 2).sum(-1), axis=1)
        totals = np.bincount(labels, weights=weights[part], minlength=n_centers)
        sums = np.zeros_like(reference)
        np.add.at(sums, labels, weights[part, None] * points[part])
        reference[totals > 0] = sums[totals > 0] / totals[totals > 0, None]
    np.testing.assert_allclose(blocked, reference, rtol=1e-9, atol=1e-9)


# -- out of core -----------------------------------------------------------------------------------------------
N_FEATURES, CHUNK_ROWS, N_CLUSTERS = 128, 2**19, 16
#: 64 MiB per stored chunk
CHUNK_BYTES = CHUNK_ROWS * N_FEATURES
MEMORY_LIMIT = 768 * MiB
#: Just above the worker's memory limit (uint8 on disk; 4x that as float32 if it were all loaded).
DATA_BYTES = MEMORY_LIMIT + 48 * MiB
N_SAMPLES = math.ceil(DATA_BYTES / CHUNK_BYTES) * CHUNK_ROWS


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("out-of-core") / "descriptors.zarr")
    rng = np.random.default_rng(3)
    means = rng.integers(30, 225, size=(N_CLUSTERS, N_FEATURES)).astype(np.int16)
    store = zarr.create_array(
        path, shape=(N_SAMPLES, N_FEATURES), chunks=(CHUNK_ROWS, N_FEATURES), dtype="u1", compressors=None
    )
    for start in range(0, N_SAMPLES, CHUNK_ROWS):
        noise = rng.integers(-25, 26, size=(CHUNK_ROWS, N_FEATURES), dtype=np.int16)
        noise += means[rng.integers(0, N_CLUSTERS, CHUNK_ROWS)]
        store[start : start + CHUNK_ROWS] = noise.astype("u1")
    init = (means + rng.uniform(-3, 3, size=means.shape)).astype(np.float32)
    return path, init


def _bytes_spilled(dask_worker):
    metrics = getattr(dask_worker.data, "cumulative_metrics", {})
    return sum(value for (label, unit), value in metrics.items() if label == "disk-write" and unit == "bytes")


def _pid():
    import os

    return os.getpid()


#: VRKM++ at its default epoch (half the rows: a sample of about 500 MB as stored, more than the worker can hold)
#: streams it in pools to the driver, with the batched inner loop; VRKM runs the per-sample loop (candidate lists) on
#: the worker (driver_sample_bytes=0), its pools kept there.
CASES = {
    "kmeans": ({"max_iter": 1, "tol": 0.0}, lambda model: 0),
    "vrkm++": (
        {"max_epochs": 1},
        lambda model: vrkm_state_bytes(model.history_[0]["epoch_size"], N_FEATURES, 0, compute_itemsize=1),
    ),
    "vrkm": (
        {"max_epochs": 1, "epoch_size": 1_000_000, "inner_batch_size": 1, "driver_sample_bytes": 0},
        lambda model: vrkm_state_bytes(1_000_000, N_FEATURES, 16, compute_itemsize=1),
    ),
    # driver_rows=0: the batch's state on the workers from the first step ("auto" would step batches this small on
    # the driver)
    "nmbatch": (
        {"max_iter": 2, "initial_batch_size": 50_000, "tol": 0.0, "batch_rows": "cached", "driver_rows": 0},
        lambda model: nmbatch_state_bytes(max(r["batch_size"] for r in model.history_), N_FEATURES, N_CLUSTERS),
    ),
    # a batch of 1,000,000 rows: cached as floats with its bounds it would take about 1.1 GB (the worker has
    # 768 MiB), so "auto" re-reads its rows from the store and keeps the bounds of its two yinyang groups
    "nmbatch-reread": (
        {"max_iter": 2, "initial_batch_size": 1_000_000, "tol": 0.0},
        lambda model: 1_000_000 * state_bytes_per_row(N_FEATURES, model.fit_plan_.n_groups, 4, cached=False),
    ),
    "minibatch": ({"max_time": 0.5, "max_no_improvement": None}, lambda model: minibatch_state_bytes(N_FEATURES)),
    # the coreset (10,000 rows) is drawn by two passes and iterated on the driver
    "vc-gmm": ({"max_iter": 2}, lambda model: 0),
}


#: Warm-up fits on 4096 rows need smaller epochs and batches.
WARM_UP = {
    "vrkm++": {"epoch_size": 1000},
    "vrkm": {"epoch_size": 1000},
    "nmbatch": {"initial_batch_size": 1000},
    "nmbatch-reread": {"initial_batch_size": 1000, "batch_rows": "reread"},
}
#: The registered algorithm of each case.
ALGORITHM = {"nmbatch-reread": "nmbatch"}


@pytest.mark.timeout(900)
def test_streaming_algorithms_fit_data_larger_than_worker_memory_without_spilling(big_store, tmp_path):
    from distributed import Client, LocalCluster

    path, init = big_store
    assert N_SAMPLES * N_FEATURES > MEMORY_LIMIT, "the data must not fit in the worker's memory"
    config = {
        "distributed.worker.memory.target": 0.6,
        "distributed.worker.memory.spill": 0.7,
        "distributed.worker.memory.pause": 0.8,
        "distributed.worker.memory.terminate": 0.95,
    }
    with (
        dask.config.set(config),
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=MEMORY_LIMIT
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        (address,) = client.scheduler_info(n_workers=-1)["workers"]
        pid = client.run(_pid)[address]
        # the idle footprint is that of a worker that has run every algorithm once (kernels compiled, modules
        # imported), on a small store of the same dtype
        small = str(tmp_path / "small.zarr")
        zarr.create_array(small, shape=(4096, N_FEATURES), chunks=(1024, N_FEATURES), dtype="u1")[:] = zarr.open_array(
            path, mode="r"
        )[:4096]
        for name, (params, _) in CASES.items():
            make_estimator(
                ALGORITHM.get(name, name),
                n_clusters=N_CLUSTERS,
                init=init,
                random_state=0,
                client=client,
                chunk_rows=1024,
                **{**params, **WARM_UP.get(name, {})},
            ).fit(small)
        measured = {}
        for name, (params, state_of) in CASES.items():
            model = make_estimator(
                ALGORITHM.get(name, name),
                n_clusters=N_CLUSTERS,
                init=init,
                random_state=0,
                client=client,
                chunk_rows=CHUNK_ROWS,
                **params,
            )
            spilled_before = client.run(_bytes_spilled)[address]
            with MemoryMonitor(client, interval=0.05) as monitor:
                model.fit(path)
            assert np.isfinite(model.cluster_centers_).all()
            if name in ("vrkm++", "vrkm"):
                record = model.history_[0]
                assert record["inner_steps"] == record["epoch_size"] and record["pools"] > 1, record
                assert record["inner_on"].startswith("tcp://") == (name == "vrkm"), record
            if name == "nmbatch-reread":
                assert (model.batch_rows_, model.bounds_, model.fit_plan_.n_groups) == ("reread", "yinyang", 2)
                assert model.history_[-1]["batch_size"] >= 1_000_000
            bound = worker_memory_bound(
                CHUNK_ROWS, N_FEATURES, N_CLUSTERS, source_itemsize=1, state_bytes=state_of(model)
            )
            measured[name] = {
                "baseline": monitor.result["workers_baseline_rss"][address],
                "peak": monitor.result["workers_peak_rss"][address],
                "bound": bound,
                "spilled": client.run(_bytes_spilled)[address] - spilled_before,
            }
        pid_after = client.run(_pid)
    report = {name: {key: round(value / MiB) for key, value in values.items()} for name, values in measured.items()}
    print("worker memory in MiB:", report)
    for name, values in measured.items():
        assert values["spilled"] == 0, f"{name} spilled to disk: {report}"
        assert values["peak"] - values["baseline"] <= values["bound"], f"{name} is above its bound: {report}"
    assert pid_after == {address: pid}, "the worker was never restarted"
