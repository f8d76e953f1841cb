"""Exact k-means with distance bounds: Lloyd's iterates, to the last bit, with far fewer distances."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from daskmeans import KMeans
from daskmeans.algorithms.lloyd import lloyd, lloyd_plan
from daskmeans.algorithms.result import RunContext
from daskmeans.config import AUTO_PLAIN_ITERATIONS
from daskmeans.engine.placement import held_by_workers
from daskmeans.estimators.kmeans import choose_algorithm
from daskmeans.passes.bounded_assign import state_bytes_per_row
from tests.conftest import make_blobs, shared_dataset


def descriptors(n, dtype):
    X = shared_dataset("cifar_dsift")["X"][:n].astype(dtype)
    return X, X[np.random.default_rng(0).choice(n, 100, replace=False)]


def exact_labels(X, centers):
    """Brute force in float64: the nearest center of every row, ties to the lowest index."""
    X64, C64 = X.astype(np.float64), centers.astype(np.float64)
    d2 = ((X64[:, None, :] - C64[None, :, :]) ** 2).sum(-1)
    return d2.argmin(axis=1)


def run(array, centers, bounds, max_iter, client=None):
    steps = []

    def record(entry):
        steps.append((entry, entry["_centers"]))

    context = RunContext(client=client, total_weight=array.shape[0], callback=record)
    plan = lloyd_plan(array, len(centers), bounds, max_iter=max_iter, client=client)
    return lloyd(array, centers, plan, context), steps


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bounds", ["yinyang", "elkan", "hamerly"])
def test_bounds_give_lloyds_iterates_to_the_last_bit_on_real_descriptors(dtype, bounds):
    X, centers = descriptors(6000, dtype)
    array = da.from_array(X, chunks=(1500, X.shape[1]))
    plain, plain_steps = run(array, centers, "none", 12)
    bounded, bounded_steps = run(array, centers, bounds, 12)
    assert len(plain_steps) == len(bounded_steps) == 12
    previous = centers
    for (p, p_centers), (b, b_centers) in zip(plain_steps, bounded_steps):
        np.testing.assert_array_equal(b_centers, p_centers)
        assert b["inertia"] == p["inertia"]
        assert b["bounds"] == bounds and p["bounds"] == "none" and p["bound_groups"] == 0
        # 100 centers: one bound per center (Elkan), per group of about eight (yinyang's groups of at least
        # YINYANG_MIN_GROUP_SIZE, more than groups of YINYANG_GROUP_SIZE), one per row (Hamerly)
        assert b["bound_groups"] == {"elkan": 100, "yinyang": 12, "hamerly": 1}[bounds]
        # the labels behind each iterate are the exact nearest centers: their means are the next centers
        labels = exact_labels(X, previous)
        means = np.stack([X[labels == j].astype(np.float64).mean(0) for j in range(len(centers))])
        np.testing.assert_allclose(b_centers, means.astype(dtype), rtol=1e-5, atol=1e-4)
        previous = b_centers
    late = [entry for entry, _ in bounded_steps[-4:]]
    assert min(entry["distances_computed"] for entry in late) < 0.5 * X.shape[0] * centers.shape[0]
    for entry in late:
        assert entry["distances_computed"] + entry["distances_skipped"] == X.shape[0] * centers.shape[0]


@pytest.mark.slow
def test_bounds_on_worker_processes_match_threads(cluster_client):
    X, centers = descriptors(4000, np.float32)
    array = da.from_array(X, chunks=(1000, X.shape[1]))
    threads, _ = run(array, centers, "yinyang", 8)
    workers, _ = run(array, centers, "yinyang", 8, client=cluster_client)
    np.testing.assert_array_equal(workers.centers, threads.centers)
    assert [h["inertia"] for h in workers.history] == [h["inertia"] for h in threads.history]


def test_empty_clusters_are_refilled_as_lloyd_does():
    X, _, _ = make_blobs(n=2000, d=6, k=4, seed=1, dtype=np.float32)
    centers = np.concatenate([X[:10], np.full((2, 6), 1e4, dtype=np.float32)])  # two centers no row is near
    array = da.from_array(X, chunks=(500, 6))
    plain, _ = run(array, centers, "none", 6)
    bounded, _ = run(array, centers, "elkan", 6)
    assert bounded.history[0]["relocated"] == plain.history[0]["relocated"] == 2
    np.testing.assert_array_equal(bounded.centers, plain.centers)


def test_auto_takes_bounds_only_where_they_pay_and_fit():
    row = state_bytes_per_row(128, 100)
    assert choose_algorithm("auto", 10**6, 128, 1000, 4, 10**6 * row * 2) == "auto"
    assert choose_algorithm("auto", 10**6, 128, 1000, 4, 10**6 * row) == "none"  # more than half the memory
    assert choose_algorithm("auto", 10**6, 128, 4, 4, 10**12) == "none"  # too few clusters to pay
    assert choose_algorithm("auto", 10**6, 2, 50, 4, 10**12) == "none"  # k * d small: the direct loop
    assert choose_algorithm("lloyd", 10, 128, 1000, 4, 10**12) == "none"
    assert choose_algorithm("hamerly", 10, 128, 1000, 4, 1) == "hamerly"


def test_estimator_auto_and_lloyd_agree_and_say_what_ran():
    X, centers = descriptors(3000, np.float32)
    fits = {
        name: KMeans(len(centers), init=centers, algorithm=name, max_iter=10, tol=0).fit(X)
        for name in ("auto", "lloyd")
    }
    np.testing.assert_array_equal(fits["auto"].cluster_centers_, fits["lloyd"].cluster_centers_)
    np.testing.assert_array_equal(fits["auto"].labels_, fits["lloyd"].labels_)
    assert fits["auto"].algorithm_ == "yinyang" and fits["lloyd"].algorithm_ == "lloyd"
    assert fits["auto"].inertia_ == fits["lloyd"].inertia_


@pytest.mark.slow
@pytest.mark.parametrize("where", ["driver", "threads", "workers ahead"])
def test_auto_starts_its_bounds_after_plain_iterations_with_lloyds_iterates(cluster_client, where):
    X, centers = descriptors(3000, np.float32)
    client = cluster_client if where == "workers ahead" else None
    data = cluster_client.persist(da.from_array(X, chunks=(750, X.shape[1]))) if client is not None else X
    assert held_by_workers(data, client) == (where == "workers ahead")  # iterations then run ahead of the driver
    params = dict(init=centers, max_iter=7, tol=0, client=client, driver_rows="auto" if where == "driver" else 0)
    auto = KMeans(len(centers), algorithm="auto", **params).fit(data)
    lloyd_fit = KMeans(len(centers), algorithm="lloyd", **params).fit(data)
    np.testing.assert_array_equal(auto.cluster_centers_, lloyd_fit.cluster_centers_)
    plain = AUTO_PLAIN_ITERATIONS
    assert [r["bounds"] for r in auto.history_] == ["none"] * plain + ["yinyang"] * (7 - plain)
    assert [r["inertia"] for r in auto.history_] == [r["inertia"] for r in lloyd_fit.history_]
    assert all(r["distances_computed"] == X.shape[0] * len(centers) for r in auto.history_[: plain + 1])
    # yinyang's 12 groups rule out about half of the distances by the last of these early iterations
    assert auto.history_[-1]["distances_computed"] < 0.75 * X.shape[0] * len(centers)
    assert auto.algorithm_ == "yinyang"
    # explicit bounds start at the first iteration
    elkan = KMeans(len(centers), algorithm="elkan", **params).fit(data)
    assert {r["bounds"] for r in elkan.history_} == {"elkan"}


@pytest.mark.slow
def test_auto_ending_within_its_plain_iterations_is_lloyd():
    X, centers = descriptors(3000, np.float32)
    fit = KMeans(len(centers), init=centers, algorithm="auto", max_iter=1, tol=0).fit(X)
    assert fit.n_iter_ == 1 and fit.stop_reason_ == "max_iter" and fit.history_[0]["bounds"] == "none"
    np.testing.assert_array_equal(
        fit.cluster_centers_,
        KMeans(len(centers), init=centers, algorithm="lloyd", max_iter=1, tol=0).fit(X).cluster_centers_,
    )


def test_unknown_algorithm_is_refused_before_any_work():
    with pytest.raises(ValueError, match="algorithm"):
        KMeans(3, algorithm="elkan-ish").fit(np.random.default_rng(0).random((50, 3)))


def _state_row_dtypes(dask_worker):
    """The dtypes of the rows in the bounded states a worker holds. Read from the worker's data on its event loop,
    not from ``gc.get_objects()``: that exposes a tuple another thread is still building (Numba compiling in the
    task thread), and CPython then fails that thread with ``SystemError: bad argument to internal function``."""
    from daskmeans.passes.bounded_assign import BoundedBlock

    found = set()

    def visit(value, depth):  # a group pass's task holds its blocks' states in a list inside a tuple
        if isinstance(value, BoundedBlock):
            found.add(str(value.rows.dtype))
        elif isinstance(value, (list, tuple)) and depth < 3:
            for item in value:
                visit(item, depth + 1)

    for value in list(dask_worker.data.values()):
        visit(value, 0)
    return sorted(found)


@pytest.mark.slow
@pytest.mark.parametrize("bounds", ["yinyang", "elkan"])
def test_rows_stored_as_uint8_stay_uint8_in_the_states_with_the_same_iterates(cluster_client, bounds):
    from daskmeans.engine.slabs import with_stored_form

    X8 = shared_dataset("cifar_dsift")["X"][:4000]
    assert X8.dtype == np.uint8
    X = X8.astype(np.float32)
    centers = X[np.random.default_rng(3).choice(len(X), 100, replace=False)]
    stored = cluster_client.persist(da.from_array(X8, chunks=(1000, X8.shape[1])))
    seen = []

    def record(entry):
        seen.extend(cluster_client.run(_state_row_dtypes).values())

    context = RunContext(client=cluster_client, total_weight=len(X), callback=record)
    array = with_stored_form(stored.astype(np.float32), stored)
    kept = lloyd(array, centers, lloyd_plan(array, len(centers), bounds, max_iter=8, client=cluster_client), context)
    assert ("uint8",) in set(map(tuple, seen)) and set(map(tuple, seen)) <= {("uint8",), ()}  # the stored rows
    as_float, _ = run(da.from_array(X, chunks=(1000, X.shape[1])), centers, bounds, 8)
    np.testing.assert_array_equal(kept.centers, as_float.centers)
    for a, b in zip(kept.history, as_float.history):
        assert (a["inertia"], a["distances_computed"]) == (b["inertia"], b["distances_computed"])
