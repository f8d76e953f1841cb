"""Lloyd's iterations submitted ahead of the driver (data held by the workers): the same iterates, history and
stops as one iteration at a time."""

from __future__ import annotations

import time

import dask.array as da
import numpy as np
import pytest

from daskmeans import KMeans
from daskmeans.algorithms.lloyd import _advance, final_inertia, held_by_workers, run_inertia
from daskmeans.algorithms.result import Clock
from daskmeans.engine.client import submit_now
from daskmeans.engine.placement import placed_groups
from daskmeans.passes.assign import assign_stats_chained
from daskmeans.storage.io import open_input, spread_on_workers

HISTORY_KEYS = ("iteration", "energy", "inertia", "center_shift", "relocated", "distances_computed", "passes")


def _same_fits(ahead, one_by_one):
    np.testing.assert_array_equal(ahead.cluster_centers_, one_by_one.cluster_centers_)
    assert (ahead.n_iter_, ahead.stop_reason_, ahead.inertia_) == (
        one_by_one.n_iter_,
        one_by_one.stop_reason_,
        one_by_one.inertia_,
    )
    assert ahead.history_[0]["bounds"] == one_by_one.history_[0]["bounds"]
    for a, b in zip(ahead.history_, one_by_one.history_, strict=True):
        assert {key: a[key] for key in HISTORY_KEYS} == {key: b[key] for key in HISTORY_KEYS}
        assert a["rows_per_second"] > 0


ALGORITHMS = ["lloyd", "yinyang", "elkan", "hamerly"]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("tol, max_iter, stop", [(0.0, 7, "max_iter"), (1e-3, 300, "converged")])
def test_iterations_ahead_are_lloyds_iterations(cluster_client, algorithm, dtype, tol, max_iter, stop):
    X = np.random.default_rng(4).normal(size=(6000, 5)).astype(dtype)
    X[:2000] += 6
    init = X[:24].copy()
    params = dict(init=init, tol=tol, max_iter=max_iter, algorithm=algorithm, driver_rows=0)  # not on the driver
    ahead = KMeans(24, **params, client=cluster_client).fit(X)
    one_by_one = KMeans(24, **params).fit(X)  # threads
    assert ahead.stop_reason_ == stop
    _same_fits(ahead, one_by_one)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n_empty, passes", [(40, 1), (70, 2)])
def test_a_pass_short_of_far_rows_is_redone_on_the_driver_and_the_run_goes_on(
    cluster_client, algorithm, n_empty, passes
):
    """k = 400 reports 50 far rows: 70 empty clusters make the update on the cluster give the pass back to the
    driver, which redoes it with 70 far rows (one more pass) and submits the next iterations from there."""
    X = np.random.default_rng(9).normal(size=(4000, 3)).astype(np.float32)
    init = np.vstack([X[: 400 - n_empty], np.full((n_empty, 3), 1e3, dtype=np.float32)])
    params = dict(init=init, max_iter=3, tol=0, algorithm=algorithm)
    ahead = KMeans(400, **params, driver_rows=0, client=cluster_client).fit(X)
    assert ahead.history_[0]["relocated"] == n_empty and ahead.history_[0]["passes"] == 1 + passes
    _same_fits(ahead, KMeans(400, **params, driver_rows=0).fit(X))
    _same_fits(ahead, KMeans(400, **params, client=cluster_client).fit(X))  # on the driver, redone there


def test_a_run_out_of_time_stops_where_one_by_one_would(cluster_client):
    X = np.random.default_rng(5).normal(size=(3000, 4)).astype(np.float32)
    model = KMeans(6, init=X[:6].copy(), max_time=1e-9, tol=0, algorithm="lloyd", client=cluster_client).fit(X)
    # the budget ended before the first pass did: it is cut, and the fit returns the centers it started from
    assert model.stop_reason_ == "max_time" and model.n_iter_ == 0 and model.history_ == []
    np.testing.assert_array_equal(model.cluster_centers_, X[:6])


def test_only_data_held_by_the_workers_runs_ahead(cluster_client, tmp_path):
    X = np.random.default_rng(6).normal(size=(2000, 3)).astype(np.float32)
    placed = spread_on_workers(open_input(X, chunk_rows=500).array, cluster_client)
    assert held_by_workers(placed, cluster_client)
    assert not held_by_workers(placed, None)  # the threaded scheduler: no driver round trip to hide
    assert not held_by_workers(da.from_array(X, chunks=500), cluster_client)  # read by each pass


@pytest.mark.parametrize("n_blocks", [16, 128])
def test_an_input_spread_in_runs_makes_each_worker_share_one_tree_node(cluster_client, n_blocks):
    """A NumPy input on a cluster is placed as one run of consecutive blocks per worker, and a pass run ahead of the
    driver hands the other worker the tree nodes its run covers: runs of 8 and of 64 blocks are one node each,
    where one result per block would be 8 and 64."""
    X = np.random.default_rng(7).normal(size=(25_600, 16)).astype(np.float32)
    array = spread_on_workers(open_input(X, chunk_rows=25_600 // n_blocks).array, cluster_client)
    groups, _ = placed_groups(array, cluster_client)
    assert groups == [list(range(n_blocks // 2)), list(range(n_blocks // 2, n_blocks))]
    centers = np.ascontiguousarray(X[:32])
    chained = assign_stats_chained(array, 32, groups, _advance, (np.float32,), start=(centers, centers))
    submitted = chained.submitted(submit_now(*chained.objects(), client=cluster_client))
    outputs = cluster_client.gather(submitted.groups)
    assert [len(nodes) for _, nodes, _ in outputs] == [1, 1]
    (level, index), _ = outputs[1][1][0]
    assert 8**level == n_blocks // 2 and index == 1, "each run is one whole subtree"


def test_the_inertia_that_picks_a_run_is_none_once_the_budget_has_ended():
    X = np.random.default_rng(8).normal(size=(1000, 3))
    array, centers = da.from_array(X, chunks=250), X[:4].copy()
    assert run_inertia(array, centers, None, Clock()) == pytest.approx(final_inertia(array, centers), rel=1e-12)
    assert run_inertia(array, centers, None, Clock(max_time=1.0, start=time.perf_counter() - 2.0)) is None


def _stop_signals_set(client) -> set:
    """The budgets' stop signals set on ``client``'s scheduler (:func:`daskmeans.engine.deadline.signal_stop`)."""

    def set_ones(dask_scheduler):
        events = dask_scheduler.extensions["events"]._events
        return {name for name, event in events.items() if name.startswith("daskmeans-stop-") and event.is_set()}

    return set(client.run_on_scheduler(set_ones))


def test_a_run_that_stops_with_a_pass_under_way_tells_its_group_tasks_to_stop(cluster_client):
    """A run with a ``max_time`` that converges while the next iteration's pass, submitted ahead, is under way sets
    its budget's stop signal: that pass's group tasks stop after the block they are on instead of keeping the
    workers busy for a pass nobody waits for. A run that ends at ``max_iter`` submits nothing past its last
    iteration and sets none."""
    X = np.random.default_rng(9).normal(size=(6000, 5))
    X[:2000] += 6
    params = dict(init=X[:8].copy(), driver_rows=0, max_time=600.0, client=cluster_client)
    before = _stop_signals_set(cluster_client)
    converged = KMeans(8, tol=1e-2, **params).fit(X)
    assert converged.stop_reason_ == "converged" and converged.n_iter_ > 1
    assert len(_stop_signals_set(cluster_client) - before) == 1
    before = _stop_signals_set(cluster_client)
    assert KMeans(8, tol=0.0, max_iter=3, **params).fit(X).stop_reason_ == "max_iter"
    assert _stop_signals_set(cluster_client) == before
