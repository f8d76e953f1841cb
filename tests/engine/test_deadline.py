"""The budget's end stops the pass under way: no block task starts past it, the driver stops waiting, and a task
working through a group of blocks stops after the block it is on."""

from __future__ import annotations

import pathlib
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.array as da
import numpy as np
import pytest
from dask.callbacks import Callback

from daskmeans.engine.client import compute_now, persist_now, submit_now
from daskmeans.engine.deadline import (
    BudgetSpent,
    GivenUp,
    budget_until,
    check_budget,
    map_within_budget,
    seconds_left,
    wait_for_futures,
)
from daskmeans.engine.graph import chained_group_pass
from daskmeans.engine.grouped import run_group

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


def counted_block(folder, i, *carried):
    """A slow block that leaves a file behind, so that a test can count the blocks a group task worked through."""
    time.sleep(0.2)
    (pathlib.Path(folder) / str(i)).touch()
    return i


def total(parts):
    return sum(parts)


def kept(reduced, carried):
    return reduced


def blocks_done(folder):
    return len(list(pathlib.Path(folder).iterdir()))


def settle(client, seconds=30.0):
    """Wait until no task runs on the cluster (the tasks of a dropped pass end on their own)."""
    stop = time.perf_counter() + seconds
    while any(client.processing().values()) and time.perf_counter() < stop:
        time.sleep(0.05)


def test_a_group_task_stops_after_its_block_once_its_pass_is_given_up(cluster_client, tmp_path):
    """``run_group`` on a worker: every block while the pass's stop signal is not set; after the block it is on
    once it is, and then it hands on a ``GivenUp`` instead of a result."""
    from distributed import Event

    name = f"daskmeans-stop-test-{uuid.uuid4().hex}"
    whole, given_up = tmp_path / "whole", tmp_path / "given-up"
    whole.mkdir(), given_up.mkdir()
    reduction = (total, 8, 1)
    blocks = [[str(whole), i] for i in range(5)]
    assert cluster_client.submit(run_group, counted_block, blocks, [], reduction, None, name).result() == 10
    assert blocks_done(whole) == 5
    Event(name, client=cluster_client).set()
    blocks = [[str(given_up), i] for i in range(5)]
    result = cluster_client.submit(run_group, counted_block, blocks, [], reduction, None, name).result()
    assert isinstance(result, GivenUp) and blocks_done(given_up) == 1


def test_a_cut_pass_on_a_cluster_stops_its_group_tasks_after_their_block(cluster_client, tmp_path):
    """A pass of one task per group of blocks (two groups of ten 0.2 s blocks) cut at 0.5 s: the driver sets the
    budget's stop signal as it stops waiting, and each group task stops after the block it is on, instead of
    working through the blocks of a pass nobody waits for."""
    with budget_until(time.perf_counter() + 0.5), pytest.raises(BudgetSpent):
        chained = chained_group_pass(  # built in the budget: its tasks take the budget's stop signal
            counted_block,
            "counted",
            [[str(tmp_path), i] for i in range(20)],
            groups=[list(range(10)), list(range(10, 20))],
            combine=total,
            finish=kept,
            start=0,
        )
        futures = submit_now(*chained.objects(), client=cluster_client)
        wait_for_futures(futures)
    del futures
    settle(cluster_client)
    assert blocks_done(tmp_path) < 20, "the group tasks stopped before their last block"
    # the cluster goes on: the next pass runs whole
    assert compute_now(slow_pass(4, 0.01), client=cluster_client)[0] == 10 * 2 * sum(range(4))


def slept_block(seconds, i, carried):
    time.sleep(seconds)
    return i


def test_the_driver_has_a_pass_s_result_while_the_pass_chained_after_it_runs(cluster_client):
    """Two passes submitted at once, the second chained to the first (one group of 0.5 s blocks per worker): the
    driver reduces the first pass's results as soon as its groups end, while the second pass's group tasks hold
    both workers' only threads."""
    blocks = [[0.5, i] for i in range(4)]
    passes = {"groups": [[0, 1], [2, 3]], "combine": total, "finish": kept}
    first = chained_group_pass(slept_block, "first", blocks, start=0, **passes)
    first = first.submitted(submit_now(*first.objects(), client=cluster_client))
    second = chained_group_pass(slept_block, "second", blocks, previous=first, **passes)
    second = second.submitted(submit_now(*second.objects(), client=cluster_client))
    assert first.result() == sum(range(4))
    assert not any(group.done() for group in second.groups), "the first pass's result came before the second ended"
    assert second.result() == sum(range(4))
