"""The run contract shared by every algorithm: RunContext in, FitResult out, and a result as checkpoint state."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

from daskmeans.algorithms.lloyd import lloyd, lloyd_plan
from daskmeans.algorithms.result import Clock, FitResult, RunContext, result_from_state, result_to_state


def test_every_optional_field_is_declared_and_none_by_default():
    result = FitResult(np.zeros((2, 3)), None, 0)
    for name in ("counts", "n_steps", "seen_counts", "gamma", "labels", "sigma2", "lower_bound", "where", "batch"):
        assert getattr(result, name) is None
    with pytest.raises(TypeError):
        FitResult(np.zeros((2, 3)), None, 0, unknown=1)


@pytest.mark.parametrize("extra", [{}, {"n_steps": 7, "seen_counts": np.array([3.0, 4.0])}])
def test_a_result_survives_its_checkpoint_state(extra):
    result = FitResult(np.arange(6.0).reshape(2, 3), 1.5, 4, [{"iteration": 1}], "converged", 2.5, **extra)
    state = result_to_state(result)
    assert ("n_steps" in state) == bool(extra)  # a state holds only what the algorithm set
    back = result_from_state(state)
    np.testing.assert_array_equal(back.centers, result.centers)
    assert (back.inertia, back.n_iter, back.history, back.stop_reason, back.passes) == (
        1.5,
        4,
        [{"iteration": 1}],
        "converged",
        2.5,
    )
    assert back.n_steps == extra.get("n_steps")
    if extra:
        np.testing.assert_array_equal(back.seen_counts, extra["seen_counts"])


def test_report_adds_private_objects_under_underscore_keys_and_never_to_the_record():
    seen = []
    context = RunContext(callback=seen.append)
    record = {"iteration": 1, "energy": 2.0}
    centers = np.ones((2, 2))
    context.report(record, centers=centers)
    context.report(record)
    assert seen[0]["_centers"] is centers and "_centers" not in record
    assert seen[1] is record
    RunContext().report(record, centers=centers)  # no callback: nothing to do


def test_clock_time_left():
    assert Clock().time_left() is None
    assert 0.0 <= Clock(max_time=60.0).time_left() <= 60.0
    assert Clock(max_time=1e-9).time_left() == 0.0 or Clock(max_time=1e-9).out_of_time()


def test_clock_counts_from_its_start_and_looks_ahead_by_laps():
    import time

    clock = Clock(max_time=10.0, start=time.perf_counter() - 9.5)  # a fit called 9.5 s ago
    assert 9.5 <= clock.elapsed() < 10.0 and not clock.out_of_time()
    assert clock.out_of_time(ahead=1.0)  # work of a second more would end past the budget
    assert not Clock().out_of_time(ahead=1e9)  # no budget, nothing is ever out of time
    clock.begin_laps()
    time.sleep(0.05)
    first = clock.lap()
    second = clock.lap()
    assert first >= 0.05 and 0.0 <= second < first  # each lap counts from the end of the previous one


def test_an_algorithm_takes_its_data_centers_parameters_and_one_context():
    X = np.random.default_rng(0).normal(size=(300, 2))
    seen = []
    context = RunContext(callback=seen.append, passes=1, total_weight=300.0)
    array = da.from_array(X, chunks=100)
    result = lloyd(array, X[:3].copy(), lloyd_plan(array, 3, max_iter=4, tol=0.0), context)
    assert isinstance(result, FitResult) and 1 <= result.n_iter <= 4
    assert [r["iteration"] for r in seen] == list(range(1, result.n_iter + 1))
    # the callback sees the centers after each iteration; the history does not keep them
    np.testing.assert_array_equal(seen[-1]["_centers"], result.centers)
    assert all(not key.startswith("_") for record in result.history for key in record)
    assert result.history[0]["passes"] == 2  # the context's passes carried into the records
