"""``max_time`` as a user times it: the budget counts from the call to ``fit``, and a fit does not start an iteration
that one as long as the last would end past it."""

from __future__ import annotations

import time

import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import make_blobs, slow_blocks

from daskmeans.algorithms.init import kmeans_parallel
from daskmeans.algorithms.lloyd import next_lap_forecast
from daskmeans.algorithms.nested import nested_minibatch, nested_plan
from daskmeans.algorithms.nested_growth import LapForecast, next_growth
from daskmeans.algorithms.plan import SeedingPlan
from daskmeans.algorithms.result import Clock, RunContext
from daskmeans.algorithms.sample_kmeans import weighted_lloyd
from daskmeans.registry import make_estimator

#: Seconds each iteration's progress callback sleeps: the laps are this long, give or take the (tiny) compute.
LAP = 0.5
BUDGET = 1.2


def sleeping_progress(record):
    """A progress callback that makes every iteration last about ``LAP`` seconds."""
    time.sleep(LAP)


@pytest.mark.parametrize("name", ["kmeans", "nmbatch", "vc-gmm", "kernel-kmeans"])
def test_no_iteration_starts_that_would_end_past_max_time(name):
    # uniform data: no cluster structure, so that no algorithm converges within a few iterations
    X = np.random.default_rng(1).uniform(size=(800, 2))
    make_estimator(name, n_clusters=30, max_iter=2, random_state=0, progress=False).fit(X)  # compiled beforehand
    model = make_estimator(name, n_clusters=30, max_time=BUDGET, random_state=0, progress=sleeping_progress)
    start = time.perf_counter()
    model.fit(X)
    seconds = time.perf_counter() - start
    assert model.stop_reason_ == "max_time"
    # iterations end at about LAP, 2 LAP, 3 LAP: the third would end past BUDGET, so it is not started (before, the
    # fit ran until an iteration ended past the budget, at 3 LAP = BUDGET + 0.3 s)
    assert model.n_iter_ <= 2
    assert seconds < BUDGET + 0.1, f"{name} returned {seconds - BUDGET:.2f} s after its max_time"


@pytest.mark.parametrize("name", ["kmeans", "nmbatch", "minibatch", "vrkm++", "vc-gmm"])
def test_max_time_counts_from_the_call_to_fit(name):
    X, _, _ = make_blobs(n=400, d=3, k=4, spread=0.3, seed=2)
    # each of the input's blocks takes 0.25 s to make, so opening the data (its summary pass) takes at least that
    lazy = slow_blocks(X, 0.25, 100)
    model = make_estimator(name, n_clusters=4, random_state=0, progress=False).fit(lazy)
    # the phases after the opening (seeding, iterations) are on the clock of history_ and max_time
    assert model.fit_phases_[0]["start"] >= 0.25
    assert model.history_[0]["wall_time"] >= 0.25


def test_vc_gmm_returns_with_its_means_and_makes_the_quantization_pass_on_first_access():
    X, _, _ = make_blobs(n=2000, d=4, k=5, spread=0.5, seed=3)
    model = make_estimator("vc-gmm", n_clusters=5, random_state=0, progress=False).fit(X)
    assert [phase["phase"] for phase in model.fit_phases_].count("final pass") == 0
    distances = ((X[:, None, :] - model.means_[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(model.inertia_, distances.min(axis=1).sum(), rtol=1e-5)
    assert [phase["phase"] for phase in model.fit_phases_].count("final pass") == 1


def test_nmbatch_forecasts_a_doubling_by_what_its_last_added_rows_cost():
    laps = LapForecast()
    laps.add(2.0, new_rows=1000, size=1000)  # the first batch: every row new
    assert laps.next(0, size=1000) == 2.0
    laps.add(0.5, new_rows=0, size=1000)  # an iteration over the cached batch: 0.5 ms a row
    assert laps.next(0, size=1000) == 0.5
    assert laps.next(1000, size=1000) == pytest.approx(0.5 + 1000 * 0.002)
    laps.add(1.5, new_rows=1000, size=2000)  # a doubling: 1 s beyond revisiting the 1000 rows, for 1000 rows
    assert laps.per_new_row == pytest.approx(0.001)
    # the first revisit after a doubling: no shorter than the doubling was
    assert laps.next(0, size=2000) == pytest.approx(1.5)
    laps.add(0.8, new_rows=0, size=2000)
    # a revisit scales with the rows revisited
    assert laps.next(0, size=2000) == pytest.approx(0.8)
    assert laps.next(2000, size=2000) == pytest.approx(0.8 + 2000 * 0.001)
    assert laps.rows_within(1.3, size=2000) == 500


def test_nmbatch_cuts_a_doubling_to_the_rows_that_fit_in_the_time_left():
    laps = LapForecast()
    laps.add(1.0, new_rows=10_000, size=10_000)  # 0.1 ms a new row
    laps.add(0.5, new_rows=0, size=10_000)  # a revisit: 0.5 s
    assert next_growth(laps, 10_000, 10_000, seconds_left=None, min_rows=4096) == 10_000  # no budget
    assert next_growth(laps, 10_000, 10_000, seconds_left=1.5, min_rows=4096) == 10_000  # 0.5 + 1.0 s: in time
    assert next_growth(laps, 10_000, 10_000, seconds_left=1.0, min_rows=4096) == 5000  # 0.5 + 0.5 s
    assert next_growth(laps, 10_000, 10_000, seconds_left=0.8, min_rows=4096) == 0  # 3000 rows: too few
    assert next_growth(laps, 10_000, 2000, seconds_left=0.8, min_rows=4096) == 2000  # all it asks for fits
    assert next_growth(laps, 10_000, 0, seconds_left=0.6, min_rows=4096) == 0  # no growth asked: a revisit
    assert next_growth(laps, 10_000, 10_000, seconds_left=0.4, min_rows=4096) is None  # not even a revisit


def test_lloyd_counts_the_final_pass_of_a_run_with_its_last_iteration():
    # the next lap: the shorter of the last two; the final pass: as long as the first lap (every distance)
    assert next_lap_forecast([4.0]) == 4.0
    assert next_lap_forecast([4.0, 1.0, 1.5]) == 1.0
    assert next_lap_forecast([4.0, 1.0, 1.5], final_pass=True) == 5.0
    clock = Clock(max_time=10.0, start=time.perf_counter() - 6.0)  # a fit called 6 s ago
    assert not clock.out_of_time(next_lap_forecast([4.0, 1.0, 1.5]))
    assert clock.out_of_time(next_lap_forecast([4.0, 1.0, 1.5], final_pass=True))


def test_kmeans_parallel_starts_no_round_once_the_budget_is_spent():
    X, _, _ = make_blobs(n=2000, d=3, k=6, spread=0.3, seed=4)
    array = da.from_array(X, chunks=(500, 3))
    plan = SeedingPlan(rounds=5)
    _, passes = kmeans_parallel(array, 6, 0, plan)
    assert passes == 12  # the first row, then a cost and a sampling pass per round, and the last cost pass
    spent = RunContext(clock=Clock(max_time=1.0, start=time.perf_counter() - 2.0))  # a fit called 2 s ago
    centers, passes = kmeans_parallel(array, 6, 0, plan, context=spent)
    # one round gives far more than 6 distinct candidates: no further round starts
    assert passes == 4
    assert centers.shape == (6, 3) and np.isfinite(centers).all()


def test_reclustering_keeps_its_centers_once_the_budget_is_spent():
    points = np.random.default_rng(0).standard_normal((200, 2))
    start = points[:5].copy()
    np.testing.assert_array_equal(weighted_lloyd(points, np.ones(200), start, out_of_time=lambda: True), start)
    assert not np.array_equal(weighted_lloyd(points, np.ones(200), start), start)


class ScriptedClock(Clock):
    """A :class:`Clock` on which every iteration lasts ``lap_seconds``, exactly: the forecasts have no noise."""

    def __init__(self, max_time, lap_seconds):
        super().__init__(max_time)
        self.now, self.lap_seconds = 0.0, lap_seconds

    def elapsed(self):
        return self.now

    def end(self):
        """No end on the real clock: the passes on the workers are never cut short however slow the machine is,
        so that only the scripted laps decide (a busy machine would otherwise stop the first pass)."""
        return None

    def begin_laps(self):
        pass

    def lap(self):
        self.now += self.lap_seconds
        return self.lap_seconds


def test_a_doubling_cut_short_gives_a_valid_batch_and_centers(cluster_client, tmp_path):
    n, d, k = 40_000, 4, 8
    X = np.random.default_rng(5).uniform(size=(n, d)).astype(np.float32)
    store = zarr.open_array(str(tmp_path / "X.zarr"), mode="w", shape=(n, d), chunks=(5000, d), dtype="f4")
    store[:] = X
    array = da.from_zarr(str(tmp_path / "X.zarr"))
    # a tiny rho asks for a doubling at every iteration; on the workers (driver_rows 0)
    plan = nested_plan(
        array, k, cluster_client, seed=3, initial_batch_size=10_000, rho=1e-12, bounds="none", keep_batch=True
    )
    # the first iteration takes 1 s for 10,000 new rows; 1.6 s are left: the revisit (1 s) and 6000 new rows
    clock = ScriptedClock(max_time=2.6, lap_seconds=1.0)
    seen = []
    context = RunContext(clock=clock, client=cluster_client, callback=seen.append)
    result = nested_minibatch(array, X[:k].copy(), plan, context)
    assert [r["batch_size"] for r in result.history] == [10_000, 16_000]
    assert result.history[1]["new_samples"] == 6000
    assert result.stop_reason == "max_time" and result.n_iter == 2
    # the batch holds 16,000 distinct rows, each counted once in the clusters' weights; the centers are the
    # means of their rows
    index, labels, _, _ = result.batch.content()
    assert len(np.unique(index)) == 16_000
    np.testing.assert_array_equal(seen[-1]["_counts"], np.bincount(labels, minlength=k))
    assert np.isfinite(result.centers).all()
    for j in np.unique(labels):
        np.testing.assert_allclose(result.centers[j], X[index[labels == j]].astype(np.float64).mean(axis=0), rtol=1e-5)
    result.batch.release()


@pytest.mark.parametrize("name", ["kmeans", "nmbatch"])
def test_a_fit_on_a_cluster_returns_within_max_time_and_a_pass(name, cluster_client, tmp_path):
    n, d, k, rows = 120_000, 32, 64, 10_000
    path = str(tmp_path / "X.zarr")
    store = zarr.open_array(path, mode="w", shape=(n, d), chunks=(rows, d), dtype="f4")
    store[:] = np.random.default_rng(6).uniform(size=(n, d)).astype(np.float32)  # no clusters: no early convergence
    # every iteration on the workers, a pass over the store's blocks
    options = dict(n_clusters=k, init="random", tol=0.0, driver_rows=0, random_state=0, client=cluster_client)
    warm = make_estimator(name, **options, max_iter=3).fit(path)  # compiled on the workers beforehand
    # the blocks' work: one assign pass over the data's blocks on the workers
    start = time.perf_counter()
    warm.score(path)
    pass_seconds = time.perf_counter() - start
    # a budget that ends after a few iterations, past the opening, the seeding and the first iteration
    budget = 2 * warm.history_[0]["wall_time"] + 4 * pass_seconds
    model = make_estimator(name, **options, max_iter=100_000, max_time=budget)
    start = time.perf_counter()
    model.fit(path)
    seconds = time.perf_counter() - start
    assert model.stop_reason_ == "max_time" and model.n_iter_ > 1
    # past the budget: what the last iteration took beyond its forecast, at most an iteration, itself about a pass
    # over the blocks (a growth of the nested batch: its revisit and at most half the rows); twice the pass measured,
    # and a second for the scheduling noise of a shared machine
    assert seconds <= budget + 2 * pass_seconds + 1.0, f"{seconds:.2f} s for max_time={budget:.2f} s"
    assert np.isfinite(model.cluster_centers_).all()
