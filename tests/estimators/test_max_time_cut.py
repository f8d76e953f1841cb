"""``max_time`` kept within one block's work: a pass under way when the budget ends is cut short, and the fit returns
the last iterate it completed.

The data's blocks become slow to read once the first iteration has been reported (a flag file, seen by worker
processes too): the iterations' forecasts, made from fast laps, let the second iteration start, and only the cut
keeps the fit from running until its pass is done.
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext

import dask
import numpy as np
import pytest
from conftest import make_blobs, slow_blocks

from daskmeans.registry import make_estimator

#: Seconds a block takes to read once the flag is set: a pass of 40 blocks then takes 10 s on 2 threads.
BLOCK = 0.5
MAX_TIME = 4.0
#: What a fit cut at its budget's end may take on top of one block: the scheduler's latency, the fit's return.
LATENCY = 1.0


def flag_after_the_first_iteration(flag):
    def progress(record):
        if "iteration" in record:
            open(flag, "w").close()

    return progress


ESTIMATORS = {
    "kmeans": dict(driver_rows=0, algorithm="lloyd"),
    "nmbatch": dict(driver_rows=0, initial_batch_size=400, rho=1e-12, bounds="none"),
    "vrkm++": dict(driver_rows=0),
}
#: How each estimator names its most iterations.
MOST = {"kmeans": "max_iter", "nmbatch": "max_iter", "vrkm++": "max_epochs"}


def fit_until_cut(name, tmp_path, client=None, checkpoint=None):
    """A fit whose second iteration's pass is slow; its model, seconds from call to return, its data (read fast
    from then on) and the estimator's options."""
    X, _, _ = make_blobs(n=4000, d=2, k=6, spread=2.0, seed=5)
    options = dict(n_clusters=6, random_state=0, init="random", client=client, **ESTIMATORS[name])
    make_estimator(name, progress=False, **{MOST[name]: 2}, **options).fit(X)  # compiled beforehand
    flag = str(tmp_path / "slow")
    lazy = slow_blocks(X, BLOCK, 100, flag)
    model = make_estimator(name, max_time=MAX_TIME, progress=flag_after_the_first_iteration(flag), **options)
    start = time.perf_counter()
    with dask.config.set(scheduler="threads", num_workers=2) if client is None else nullcontext():
        model.fit(lazy, checkpoint=checkpoint)
    seconds = time.perf_counter() - start
    os.remove(flag)
    return model, seconds, lazy, options


def check_cut(model, seconds, lazy, options, name):
    assert model.stop_reason_ == "max_time"
    assert seconds >= MAX_TIME * 0.9, "the budget was meant to end during the slow pass"
    # a pass of the slow blocks takes 10 s: only the cut returns the fit within one block of its budget
    assert seconds < MAX_TIME + BLOCK + LATENCY, f"{name} returned {seconds - MAX_TIME:.2f} s after its max_time"
    assert model.n_iter_ == 1 and len(model.history_) == 1
    one = make_estimator(name, progress=False, **{MOST[name]: 1}, **options).fit(lazy)  # the same blocks, read fast
    np.testing.assert_array_equal(model.cluster_centers_, one.cluster_centers_)


@pytest.mark.parametrize("name", ["kmeans", "nmbatch", "vrkm++"])
def test_a_pass_under_way_at_the_budget_end_is_cut_on_local_threads(name, tmp_path):
    check_cut(*fit_until_cut(name, tmp_path), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kmeans", "nmbatch", "vrkm++"])
def test_a_pass_under_way_at_the_budget_end_is_cut_on_a_cluster(name, tmp_path, cluster_client):
    check_cut(*fit_until_cut(name, tmp_path, cluster_client), name)


@pytest.mark.parametrize("name", ["kmeans", "nmbatch"])
def test_a_cut_fit_is_checkpointed_as_ended(name, tmp_path):
    checkpoint = tmp_path / "fit.ckpt"
    model, seconds, lazy, options = fit_until_cut(name, tmp_path, checkpoint=checkpoint)
    check_cut(model, seconds, lazy, options, name)
    again = make_estimator(name, max_time=MAX_TIME, progress=False, **options)
    with dask.config.set(scheduler="threads", num_workers=2):
        again.fit(lazy, checkpoint=checkpoint)  # the ended run is taken as it is, not run on
    assert again.stop_reason_ == "max_time" and again.n_iter_ == 1 and again.history_ == model.history_
    np.testing.assert_array_equal(again.cluster_centers_, model.cluster_centers_)


@pytest.mark.parametrize("name", ["kmeans", "nmbatch"])
def test_a_budget_spent_before_the_first_iteration_returns_the_initial_centers(name, tmp_path):
    X, _, _ = make_blobs(n=800, d=2, k=6, spread=2.0, seed=5)
    flag = str(tmp_path / "slow")
    open(flag, "w").close()
    lazy = slow_blocks(X, BLOCK, 100, flag)  # the opening of the data alone takes 8 blocks of BLOCK s on 2 threads
    init = X[:6].copy()
    options = {key: value for key, value in ESTIMATORS[name].items() if key != "driver_rows"}
    model = make_estimator(name, n_clusters=6, init=init, max_time=1.0, progress=False, **options)
    with dask.config.set(scheduler="threads", num_workers=2):
        model.fit(lazy)
    os.remove(flag)
    assert model.stop_reason_ == "max_time"
    assert model.n_iter_ == 0 and model.history_ == []
    np.testing.assert_array_equal(model.cluster_centers_, init)
    distances = ((X[:, None, :] - init[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(model.inertia_, distances.min(axis=1).sum(), rtol=1e-9)
    np.testing.assert_array_equal(model.predict(X), distances.argmin(axis=1))
