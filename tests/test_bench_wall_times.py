"""The bench times a daskmeans run to a target as a user would: by a whole fit, call to return, stopped after the
iteration of the first snapshot within the target, or given the ``max_time`` at which that snapshot was taken
(longer until its result is)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import make_blobs

from daskmeans.bench import report
from daskmeans.bench.common import settle
from daskmeans.bench.energy import InMemoryEnergy
from daskmeans.bench.estimator_runs import run_daskmeans
from daskmeans.bench.refinement import (
    REFIT_GROWTH,
    REFIT_TRIES,
    confirm_wall_times,
    fit_exact_to_yardsticks,
    fit_until_reached,
)
from daskmeans.bench.traces import Candidate, Trace, evaluate


def test_a_target_is_timed_by_a_whole_fit_that_returns_within_it():
    X, _, _ = make_blobs(n=100_000, d=16, k=60, spread=4.0, seed=4, dtype=np.float32)
    init = X[np.random.default_rng(0).choice(len(X), 60, replace=False)]
    trace = run_daskmeans("kmeans", SimpleNamespace(fit_input=X), init, 60, 0, 20.0, None, {"tol": 0.0})
    energy = InMemoryEnergy(X)
    evaluate(trace.candidates, energy)
    snapshots = [c for c in trace.candidates if c.kind == "snapshot"]
    assert len(snapshots) >= 6
    middle = snapshots[len(snapshots) // 2]
    threshold = middle.energy * (1 + 1e-12)

    fit_until_reached(trace, threshold, energy)

    fits = [c for c in trace.candidates if c.kind == "fit"]
    assert 1 <= len(fits) <= REFIT_TRIES
    assert all(c.energy > threshold for c in fits[:-1])  # every fit but the last stopped short of the target
    points = [c.as_record() for c in trace.candidates if c.energy is not None]
    assert report.time_to_reach(points, threshold, snapshots=True) <= middle.time
    if fits[-1].energy <= threshold:  # the last fit returned within the target: its time is the run's
        assert report.time_to_reach(points, threshold) == fits[-1].time
        # a second call finds the target already timed by a whole fit
        fit_until_reached(trace, threshold, energy)
        assert len([c for c in trace.candidates if c.kind == "fit"]) == len(fits)
    else:  # on a loaded machine every fit may stop short: the run's own fit, the last resort, is its time
        budgets = middle.time * REFIT_GROWTH ** len(fits)
        assert len(fits) == REFIT_TRIES or budgets >= trace.fit_seconds
        assert report.time_to_reach(points, threshold) == trace.final().time


def test_whole_fits_time_a_run_that_has_them_and_snapshots_stand_beside_them():
    points = [
        {"kind": "init", "time": 0.0, "energy": 10.0},
        {"kind": "snapshot", "time": 1.0, "energy": 5.0},
        {"kind": "snapshot", "time": 2.0, "energy": 4.0},
        {"kind": "fit", "time": 1.8, "energy": 4.4},
        {"kind": "fit", "time": 2.6, "energy": 4.0},
        {"kind": "final", "time": 3.0, "energy": 3.9},
    ]
    assert report.time_to_reach(points, 4.0) == 2.6
    assert report.time_to_reach(points, 4.0, snapshots=True) == 2.0
    assert report.time_to_reach(points, 3.95) == 3.0  # no fit within it: the run's own fit, at its end
    # a record without whole fits of its own (a peer, an older record) is timed by its points as before
    without = [p for p in points if p["kind"] != "fit"]
    assert report.time_to_reach(without, 4.0) == 2.0
    algorithm = {
        "time_to": {"0.01": report._spread([2.6])},
        "snapshot_time_to": {"0.01": report._spread([2.0])},
    }
    assert report.time_to_cell(algorithm, "0.01", many=False) == "2.6 s (snapshot 2 s)"


def _sleep_then_return(seconds):
    import time

    time.sleep(seconds)
    return seconds


def _executing(dask_worker):
    return dask_worker.state.executing_count


def test_a_timed_run_starts_only_once_no_worker_runs_what_an_earlier_fit_abandoned(cluster_client):
    future = cluster_client.submit(_sleep_then_return, 1.5, pure=False)
    while not any(cluster_client.run(_executing).values()):
        pass
    future.cancel()  # as a fit returning on max_time cancels a pass: the worker still runs the task to its end
    assert any(cluster_client.run(_executing).values())

    settle(cluster_client)

    assert not any(cluster_client.run(_executing).values())
    settle(None)  # without a client (the threaded scheduler) there is nothing to wait for


class _EnergyOfCenters:
    """Exact energies of scripted candidates: their "centers" hold the energy itself."""

    def __call__(self, centers):
        return float(centers[0])


def test_a_looser_reference_target_is_timed_by_its_own_earlier_fit_not_by_one_for_a_tighter_target():
    """A reference energy (a peer's final, here one Lloyd iteration's) looser than 2% of E* is timed by a fit
    given the max_time of the first snapshot within it, not by the later fit made for 2%."""
    asked = []

    def refit(max_time, max_iter=None):
        asked.append(max_time)
        energy = 60.0 if max_time < 2.0 else 10.3 if max_time < 6.0 else 10.1
        return Candidate(step=-1, time=max_time + 0.1, centers=np.array([energy]), kind="fit")

    snapshots = [(1.0, 60.0), (2.0, 43.0), (4.0, 12.0), (6.0, 10.15), (9.0, 10.0)]
    ours = Trace(
        candidates=[Candidate(step=0, time=0.0, centers=np.array([100.0]), kind="init")]
        + [Candidate(step=i + 1, time=s, centers=np.array([e]), kind="snapshot") for i, (s, e) in enumerate(snapshots)],
        fit_seconds=9.5,
        timed_seconds=9.5,
        refit=refit,
    )
    peer = Trace(
        candidates=[Candidate(step=1, time=7.0, centers=np.array([43.0]), kind="rung")],
        fit_seconds=7.0,
        timed_seconds=7.0,
    )
    runs = [
        SimpleNamespace(name="nmbatch", seed=0, trace=ours),
        SimpleNamespace(name="sklearn-lloyd", seed=0, trace=peer),
    ]
    energy = _EnergyOfCenters()
    for run in runs:
        evaluate(run.trace.candidates, energy)
    confirm_wall_times(runs, energy, [0.02], versus=[{"name": "sklearn-lloyd", "iteration": None, "within": 1e-4}])

    points = [c.as_record() for c in ours.candidates if c.energy is not None]
    assert asked[0] == 2.0  # the loosest target (the peer's 43.0) first, from its first snapshot
    assert report.time_to_reach(points, report.reach_threshold(43.0, 1e-4)) == 2.1
    assert report.time_to_reach(points, 10.0 * 1.02) == 6.1


def _refit_recording(asked):
    def refit(max_time, max_iter=None):
        asked.append(max_time)
        return Candidate(step=-1, time=max_time + 0.5, centers=np.array([5.0]), kind="fit")

    return refit


@pytest.mark.parametrize("kind", ["snapshot", "final"])
def test_a_snapshot_is_fitted_again_from_when_it_was_taken_not_when_its_run_returned(kind):
    """A run seeded at large k returns long after its seeds (its first pass cut by the budget): their candidate
    counts that tail (and is the run's final one when no iteration ended), but the fit made again is given the
    time the seeds were held."""
    asked = []
    seeds = Candidate(step=0, time=30.0, centers=np.array([5.0]), kind=kind)
    seeds.available_time = 14.0
    trace = Trace(candidates=[seeds], fit_seconds=30.0, timed_seconds=30.0, refit=_refit_recording(asked))
    energy = _EnergyOfCenters()
    evaluate(trace.candidates, energy)

    fit_until_reached(trace, 5.0, energy)

    assert asked == [14.0]
    points = [c.as_record() for c in trace.candidates if c.energy is not None]
    assert report.time_to_reach(points, 5.0) == 14.5


def test_a_final_point_held_until_its_run_returned_is_not_fitted_again():
    asked = []
    final = Candidate(step=3, time=30.0, centers=np.array([5.0]), kind="final")
    final.available_time = 29.9  # the last iteration ended just before the run returned
    trace = Trace(candidates=[final], fit_seconds=30.0, timed_seconds=30.0, refit=_refit_recording(asked))
    evaluate(trace.candidates, _EnergyOfCenters())
    fit_until_reached(trace, 5.0, _EnergyOfCenters())
    assert asked == []


@pytest.mark.parametrize("iterates_repeat", [True, False])
def test_a_target_is_timed_first_by_a_fit_stopped_after_the_snapshot_s_iteration(iterates_repeat):
    """As the peers' ladders stop a fit after a given number of iterations, a daskmeans run is fitted again with
    ``max_iter`` the iteration of its first snapshot within the target (and its own budget); where that fit's
    result is not within it (iterates that depend on the time), with ``max_time`` from the snapshot's time."""
    asked = []

    def refit(max_time, max_iter=None):
        asked.append((max_time, max_iter))
        energy = 5.0 if max_iter is None or iterates_repeat else 6.0
        return Candidate(step=-1, time=3.5 if max_iter else 4.5, centers=np.array([energy]), kind="fit")

    snapshots = [
        Candidate(step=i, time=float(i), centers=np.array([9.0 - i]), iteration=i, kind="snapshot") for i in range(1, 5)
    ]
    trace = Trace(candidates=snapshots, fit_seconds=30.0, timed_seconds=30.0, refit=refit)
    energy = _EnergyOfCenters()
    evaluate(trace.candidates, energy)

    fit_until_reached(trace, 5.0, energy)

    points = [c.as_record() for c in trace.candidates if c.energy is not None]
    if iterates_repeat:
        assert asked == [(None, 4)] and report.time_to_reach(points, 5.0) == 3.5
    else:
        assert asked == [(None, 4), (4.0, None)] and report.time_to_reach(points, 5.0) == 4.5


# -- exact k-means against a converged yardstick ---------------------------------------------------------------------
YARDSTICK = {"name": "sklearn-lloyd", "iteration": None, "within": 1e-4}


def test_exact_kmeans_cut_by_its_budget_is_fitted_again_to_a_converged_lloyds_energy():
    """A k-means run whose budget ended before Lloyd's converged energy is fitted once more, given the time Lloyd
    took: a fit that returns within it is its time to Lloyd's energy (the same iterates converge there: a fit
    without a time limit does), one that does not was slower than Lloyd."""
    from daskmeans.bench.peers import PEERS, PeerContext

    X, _, _ = make_blobs(n=20_000, d=8, k=40, spread=6.0, seed=5, dtype=np.float32)
    init = X[np.random.default_rng(1).choice(len(X), 40, replace=False)]
    energy = InMemoryEnergy(X)
    context = PeerContext(X=X, array=None, client=None, init=init, k=40, seed=0, budget=1e-9, converge=True)
    lloyd = PEERS["sklearn-lloyd"].run(context)
    assert lloyd.stop_reason == "converged"
    ours = run_daskmeans("kmeans", SimpleNamespace(fit_input=X), init, 40, 0, 1e-9, None)
    runs = [
        SimpleNamespace(name="kmeans", seed=0, trace=ours),
        SimpleNamespace(name="sklearn-lloyd", seed=0, trace=lloyd),
    ]
    for run in runs:
        evaluate(run.trace.candidates, energy)
    threshold = report.reach_threshold(lloyd.final().energy, YARDSTICK["within"])
    assert all(c.energy > threshold for c in ours.evaluated())  # the budget cut it short
    asked, refit = [], ours.refit

    def recording_refit(max_time, max_iter=None):
        asked.append((max_time, max_iter))
        return refit(max_time, max_iter)

    ours.refit = recording_refit

    fit_exact_to_yardsticks(runs, energy, [YARDSTICK])

    assert asked == [(lloyd.final().time, None)]
    fits = [c for c in ours.candidates if c.kind == "fit"]
    assert len(fits) == 1
    points = [c.as_record() for c in ours.candidates if c.energy is not None]
    if fits[0].energy <= threshold:
        assert report.time_to_reach(points, threshold) == fits[0].time
    else:  # slower than Lloyd on such small data: not reached, which the table shows
        assert report.time_to_reach(points, threshold) is None
    unlimited = refit(3600.0)  # as long as it takes: converged
    assert energy(unlimited.centers) <= threshold


def test_only_exact_kmeans_short_of_a_final_yardstick_is_fitted_again_with_the_yardsticks_time():
    def trace_asking(asked, energies):
        def refit(max_time, max_iter=None):
            asked.append(max_time)
            return Candidate(step=-1, time=max_time * 0.4, centers=np.array([10.0]), kind="fit")

        candidates = [Candidate(step=i, time=float(i), centers=np.array([e]), kind="snapshot") for i, e in energies]
        return Trace(candidates=candidates, fit_seconds=2.0, timed_seconds=2.0, refit=refit)

    asked = {name: [] for name in ("kmeans", "nmbatch", "kmeans-reached")}
    lloyd = Trace(
        candidates=[
            Candidate(step=1, time=1.0, centers=np.array([30.0]), kind="rung"),
            Candidate(step=300, time=7.0, centers=np.array([10.0]), kind="rung"),
        ],
        fit_seconds=7.0,
        timed_seconds=8.0,
    )
    runs = [
        SimpleNamespace(name="kmeans", seed=0, trace=trace_asking(asked["kmeans"], [(1, 40.0), (2, 20.0)])),
        SimpleNamespace(name="nmbatch", seed=0, trace=trace_asking(asked["nmbatch"], [(1, 40.0), (2, 20.0)])),
        SimpleNamespace(name="kmeans", seed=1, trace=trace_asking(asked["kmeans-reached"], [(1, 20.0), (2, 10.0)])),
        SimpleNamespace(name="sklearn-lloyd", seed=0, trace=lloyd),
        SimpleNamespace(name="sklearn-lloyd", seed=1, trace=lloyd),
    ]
    energy = _EnergyOfCenters()
    for run in runs:
        evaluate(run.trace.candidates, energy)

    fit_exact_to_yardsticks(runs, energy, [{**YARDSTICK, "iteration": 1}])  # an iterate, not the final: nothing
    assert asked == {"kmeans": [], "nmbatch": [], "kmeans-reached": []}
    fit_exact_to_yardsticks(runs, energy, [YARDSTICK])
    assert asked == {"kmeans": [7.0], "nmbatch": [], "kmeans-reached": []}
    points = [c.as_record() for c in runs[0].trace.candidates if c.energy is not None]
    assert report.time_to_reach(points, report.reach_threshold(10.0, 1e-4)) == pytest.approx(2.8)
