"""The budget's end stops the pass under way: no block task starts past it, and the driver stops waiting."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.array as da
import numpy as np
import pytest
from dask.callbacks import Callback

from daskmeans.engine.client import compute_now, persist_now
from daskmeans.engine.deadline import BudgetSpent, budget_until, check_budget, map_within_budget, seconds_left

#: Seconds each slow block takes; the budgets below end well before a pass of them could.
BLOCK = 0.5
#: What a pass stopped at the budget's end may take on top of one block: the scheduler's own latency.
LATENCY = 0.75


def slow_pass(n_blocks=40, seconds=BLOCK):
    """A sum over ``n_blocks`` blocks that take ``seconds`` each to make."""

    def block(i):
        time.sleep(seconds)
        return np.full((10, 2), float(i))

    blocks = [da.from_delayed(dask.delayed(block)(i), (10, 2), float) for i in range(n_blocks)]
    return da.concatenate(blocks).sum()


def test_without_an_end_a_pass_runs_whole():
    assert seconds_left() is None
    (total,) = compute_now(slow_pass(4, 0.01), client=None)
    assert total == 10 * 2 * sum(range(4))
    with budget_until(None):
        check_budget()
        assert compute_now(slow_pass(4, 0.01), client=None)[0] == total


def test_a_pass_ending_within_the_budget_gives_its_value():
    with budget_until(time.perf_counter() + 60.0):
        (total,) = compute_now(slow_pass(4, 0.01), client=None)
    assert total == 10 * 2 * sum(range(4))


def test_local_scheduler_stops_within_one_block_of_the_budget_end():
    end = time.perf_counter() + 1.0
    with dask.config.set(scheduler="threads", num_workers=2), budget_until(end), pytest.raises(BudgetSpent):
        compute_now(slow_pass(), client=None)
    # 40 blocks on 2 threads would take 10 s; the blocks running at the end finish, no other starts
    assert time.perf_counter() - end < BLOCK + LATENCY


def test_local_persist_stops_at_the_budget_end_too():
    end = time.perf_counter() + 1.0
    with dask.config.set(scheduler="threads", num_workers=2), budget_until(end), pytest.raises(BudgetSpent):
        persist_now(slow_pass(), client=None)
    assert time.perf_counter() - end < BLOCK + LATENCY


def test_driver_threads_stop_within_one_block_of_the_budget_end():
    def block(i):
        time.sleep(BLOCK)
        return i

    with ThreadPoolExecutor(2) as pool:
        assert map_within_budget(pool, block, range(4)) == [0, 1, 2, 3]
        end = time.perf_counter() + 1.0
        with budget_until(end), pytest.raises(BudgetSpent):
            map_within_budget(pool, block, range(40))
        assert time.perf_counter() - end < LATENCY  # the driver does not wait for the blocks running
    # leaving the pool waits for those: one block per thread
    assert time.perf_counter() - end < BLOCK + LATENCY


def test_cluster_pass_stops_at_the_budget_end_and_the_cluster_goes_on(cluster_client):
    end = time.perf_counter() + 1.0
    with budget_until(end), pytest.raises(BudgetSpent):
        compute_now(slow_pass(), client=cluster_client)
    assert time.perf_counter() - end < LATENCY
    # the dropped pass's tasks are released: the next pass is computed as usual
    (total,) = compute_now(slow_pass(4, 0.01), client=cluster_client)
    assert total == 10 * 2 * sum(range(4))


def test_an_inner_budget_without_end_lets_its_work_finish_past_the_outer_end():
    with budget_until(time.perf_counter() - 1.0):
        with pytest.raises(BudgetSpent):
            check_budget()
        with budget_until(None):
            assert compute_now(slow_pass(2, 0.01), client=None)[0] == 10 * 2 * 1


def test_active_dask_callbacks_still_run_inside_a_budget():
    started = []
    with Callback(pretask=lambda key, dsk, state: started.append(key)), budget_until(time.perf_counter() + 60.0):
        compute_now(slow_pass(4, 0.01), client=None)
    assert len(started) >= 4
