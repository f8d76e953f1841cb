"""``max_time`` as a user times it: the budget counts from the call to ``fit``, and a fit does not start an iteration
that one as long as the last would end past it."""

from __future__ import annotations

import time

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs

from daskmeans.algorithms.nested import LapForecast
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


def slow_blocks(X, seconds_per_block, rows_per_block):
    """``X`` as a dask array whose blocks take ``seconds_per_block`` each to make."""

    def block(start):
        time.sleep(seconds_per_block)
        return X[start : start + rows_per_block]

    blocks = [
        da.from_delayed(dask.delayed(block)(start), (min(rows_per_block, len(X) - start), X.shape[1]), X.dtype)
        for start in range(0, len(X), rows_per_block)
    ]
    return da.concatenate(blocks)


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
    laps.add(2.0, new_rows=1000)  # the first batch: every row new
    assert laps.next(0) == 2.0
    laps.add(0.5, new_rows=0)  # an iteration over the cached batch
    assert laps.next(0) == 0.5
    assert laps.next(1000) == pytest.approx(0.5 + 1000 * 0.002)
    laps.add(1.5, new_rows=1000)  # a doubling: 1 s beyond the cached batch's cost, for 1000 rows
    laps.add(0.8, new_rows=0)
    assert laps.next(2000) == pytest.approx(0.8 + 2000 * 0.001)
