"""VRKM's inner loop over the pools of an epoch keeps to ``max_time``: a further pool is read only if a read as long as
the last one ends in time, and a read under way when the budget ends is cut short after the blocks running then.

The data's blocks are slow to read (0.25 s each, 16 blocks: a pool's read takes about 2 s on 2 threads), so a read
that ran to its end would return the loop far past the budget."""

from __future__ import annotations

import time
from contextlib import nullcontext

import dask
import numpy as np
import pytest
from conftest import make_blobs, slow_blocks

from daskmeans.algorithms.result import Clock
from daskmeans.algorithms.vrkm import position_correction
from daskmeans.algorithms.vrkm_pools import EpochSampler, InnerLoopTask, epoch_inner_loop, pool_bounds

BLOCK = 0.25
#: What the loop may take past its budget besides one block: the threads' start, the steps of one small pool, a
#: round trip to a worker on a busy machine; half a pool's read (about 2 s), so a read run to its end still fails.
LATENCY = 1.0
BUDGET = 1.0


def one_epoch(read_seconds, client=None, on_worker=False):
    """The inner loop of an epoch of 8 pools of slow blocks, with ``BUDGET`` seconds left after its pass (on the
    local threads, or with ``client`` on a cluster, the loop on one of its workers with ``on_worker``); its progress,
    the pools it ran and the seconds it took."""
    X, _, _ = make_blobs(n=4000, d=2, k=4, spread=2.0, seed=3, dtype=np.float32)
    array = slow_blocks(X, BLOCK, 250, flag=None)
    rng = np.random.default_rng(0)
    centers = X[rng.choice(len(X), 4, replace=False)].astype(np.float64)
    draws = rng.integers(0, len(X), 800).astype(np.int64)  # in draw order: each pool falls in nearly every block
    pools = pool_bounds(draws.size, 100)
    with dask.config.set(scheduler="threads", num_workers=2) if client is None else nullcontext():
        sampler = EpochSampler(array, client, on_worker, 0)
        stats, first = sampler.epoch_pass(centers, draws[: pools[0][1]], None)
        snapshot, gradient = position_correction(stats, centers, "vrkm++")
        task = InnerLoopTask(None, 0, snapshot, centers, 1e-3, gradient, "paper", 0, 16, 4.0)
        clock = Clock(max_time=BUDGET)
        started = time.perf_counter()
        progress, where, pools_run = epoch_inner_loop(sampler, draws, pools, first, task, clock, read_seconds)
    return progress, pools_run, time.perf_counter() - started


WHERE = {
    "threads": {},
    "cluster, loop on the driver": {"on_worker": False},
    "cluster, loop on a worker": {"on_worker": True},
}


def where(name, request):
    """``one_epoch``'s keywords for the place ``name``."""
    options = WHERE[name]
    return options if not options else {**options, "client": request.getfixturevalue("cluster_client")}


@pytest.mark.parametrize("name", list(WHERE))
def test_no_further_pool_is_read_when_a_read_as_long_as_the_pass_would_end_past_the_budget(name, request):
    progress, pools_run, seconds = one_epoch(2.0, **where(name, request))
    assert pools_run == 1 and progress.loop.counts().steps == 100
    assert seconds < LATENCY


@pytest.mark.parametrize("name", list(WHERE))
def test_a_pool_read_under_way_when_the_budget_ends_is_cut_short(name, request):
    progress, pools_run, seconds = one_epoch(0.0, **where(name, request))  # a forecast that lets a read start
    assert pools_run == 1 and progress.loop.counts().steps == 100  # the loop ends with the pools it ran
    assert seconds < BUDGET + BLOCK + LATENCY, f"returned {seconds - BUDGET:.2f} s past the budget"
