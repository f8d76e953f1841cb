"""Progress within a pass: block tasks report their end and rows (directly on the threaded scheduler, as scheduler
events from worker processes), the watch counts them against what it submitted, draws a bar with chunks, rows/s and
the time left for passes longer than the delay, and each history record gets the rows per second of its passes."""

from __future__ import annotations

import math
import re

import dask.array as da
import dask.system
import numpy as np
import pytest

from daskmeans import KMeans, config
from daskmeans.engine.client import compute_now, persist_now
from daskmeans.engine.graph import map_blocks_delayed, tree_reduce
from daskmeans.engine.pass_progress import PassWatch, active_watch, report_block
from daskmeans.passes.assign import assign_stats_graph

N_ROWS, N_CHUNKS, D, K = 40_000, 16, 8, 6


@pytest.fixture(scope="module")
def array():
    X = np.random.default_rng(11).normal(size=(N_ROWS, D)).astype(np.float32)
    return da.from_array(X, chunks=(N_ROWS // N_CHUNKS, D))


def _bar_states(stderr, label):
    return [part.strip() for part in re.split(r"[\r\n]", stderr) if part.strip().startswith(label)]


@pytest.mark.parametrize("where", ["threads", "worker processes"])
def test_a_pass_counts_every_block_and_its_rows(array, cluster_client, where):
    client = cluster_client if where == "worker processes" else None
    centers = np.asarray(array[:K].compute())
    with PassWatch("test", show=False) as watch:
        assert active_watch() is watch
        (stats,) = compute_now(assign_stats_graph(array, centers), client=client)
    assert active_watch() is None
    (record,) = watch.passes
    assert record["names"] == ["assign"] and record["chunks"] == N_CHUNKS
    assert record["rows"] == N_ROWS and record["rows_per_second"] == pytest.approx(N_ROWS / record["seconds"])
    assert stats[1].sum() == N_ROWS
    assert record["energy"] == pytest.approx(stats[2].sum() / N_ROWS), "the pass's energy from the blocks' reports"
    (plain,) = compute_now(assign_stats_graph(array, centers), client=client)
    np.testing.assert_array_equal(plain[0], stats[0]), "the watch never changes a result"


def _plugin_state():
    from daskmeans.engine import pass_progress

    return (
        pass_progress._REPORTS_BY_PLUGIN.is_set(),
        len(pass_progress._PENDING_REPORTS),
        pass_progress.BlockReports.sent,
    )


def test_worker_processes_send_the_reports_from_their_event_loop(array, cluster_client):
    """On worker processes a block task leaves its report for the worker plugin, which sends it once the task has
    finished (from the event loop: no wake-up while the task holds the GIL); every report arrives, none is left
    behind."""
    centers = np.asarray(array[:K].compute())
    with PassWatch("test", show=False) as watch:
        compute_now(assign_stats_graph(array, centers), client=cluster_client)
    before = cluster_client.run(_plugin_state)
    with PassWatch("test", show=False) as watch:
        compute_now(assign_stats_graph(array, centers * 2), client=cluster_client)
    assert watch.passes[0]["chunks"] == N_CHUNKS and watch.passes[0]["rows"] == N_ROWS
    after = cluster_client.run(_plugin_state)
    assert {state[:2] for state in after.values()} == {(True, 0)}
    assert sum(after[w][2] - before[w][2] for w in after) == N_CHUNKS, "every report went through the plugin"


def _slow_block(block, offset, weights):
    import time

    time.sleep(0.05)
    return int(np.asarray(block).shape[0])


def _two_per_row(rows):
    """A block's ``(sse, weight)`` for a pass whose every row is at squared distance 2."""
    return 2.0 * rows, float(rows)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["threads", "worker processes"])
def test_persisted_blocks_and_the_computation_after_them_are_one_pass(array, cluster_client, where):
    client = cluster_client if where == "worker processes" else None
    from daskmeans.engine.graph import block_args

    with PassWatch("test", show=False) as watch:
        parts = map_blocks_delayed(_slow_block, "slow", block_args(array), reads_data=True)
        persisted = persist_now(*parts, client=client)
        (total,) = compute_now(tree_reduce(list(persisted), sum, "slow-total"), client=client)
        # the persisted results feed the next computation without counting again
        (again,) = compute_now(tree_reduce(list(persisted), sum, "slow-again"), client=client)
    assert total == again == N_ROWS
    (first,) = watch.passes  # the second computation read no data: no pass
    assert (first["names"], first["chunks"], first["rows"]) == (["slow"], N_CHUNKS, N_ROWS)
    # the pass lasted at least as long as its blocks' sleeps, shared by the threads that ran them
    threads = sum(cluster_client.nthreads().values()) if client else dask.system.CPU_COUNT
    assert first["seconds"] >= 0.05 * math.ceil(N_CHUNKS / threads) * 0.9


def test_without_a_watch_blocks_do_not_report(array):
    from daskmeans.engine.graph import block_args

    (task,) = map_blocks_delayed(_slow_block, "plain", block_args(array)[:1], reads_data=True)
    assert task.dask[task.key].func is _slow_block
    with PassWatch("test", show=False):
        (watched,) = map_blocks_delayed(_slow_block, "plain", block_args(array)[:1], reads_data=True)
        (derived,) = map_blocks_delayed(_slow_block, "derived", block_args(array)[:1])
    assert watched.key != task.key, "a reporting task has a key of its own"
    assert watched.dask[watched.key].func is report_block
    assert derived.dask[derived.key].func is _slow_block, "only passes over the data report"


@pytest.mark.parametrize("where", ["threads", "worker processes"])
def test_a_long_pass_gets_a_bar_with_chunks_rows_per_second_and_time_left(array, cluster_client, capsys, where):
    client = cluster_client if where == "worker processes" else None
    from daskmeans.engine.graph import block_args

    with PassWatch("test", show=True, delay=0.0) as watch:
        parts = map_blocks_delayed(_slow_block, "slow-bar", block_args(array), reads_data=True, energy_of=_two_per_row)
        (total,) = compute_now(tree_reduce(parts, sum, "slow-bar-total"), client=client)
    assert total == N_ROWS and watch.passes[0]["rows"] == N_ROWS and watch.passes[0]["energy"] == 2.0
    lines = _bar_states(capsys.readouterr().err, "test pass (slow-bar)")
    assert any(
        re.search(
            rf": +\d+%\|.*\| \d+/{N_CHUNKS} chunks \[\d\d:\d\d<\d\d:\d\d, rows/s=\d.*, "
            r"energy=2\]",
            line,
        )
        for line in lines
    ), lines


@pytest.mark.slow
@pytest.mark.parametrize("where", ["threads", "worker processes"])
def test_a_fit_shows_its_passes_and_records_rows_per_second(array, cluster_client, capsys, monkeypatch, where):
    client = cluster_client if where == "worker processes" else None
    monkeypatch.setattr(config, "PASS_BAR_DELAY_SECONDS", 0.0)
    model = KMeans(K, random_state=0, max_iter=3, tol=0, progress=True, client=client, driver_rows=0).fit(array)
    err = capsys.readouterr().err
    assert _bar_states(err, "k-means pass (assign)") or _bar_states(err, "k-means pass (bounded-start)"), err
    assert _bar_states(err, "k-means pass (kmeans-parallel-distances)"), "the seeding's passes too"
    assert all(record["rows_per_second"] > 0 for record in model.history_)
    assert "rows/s=" in _bar_states(err, "k-means iterations")[-1]
    # iterated on the driver, without block tasks: the rows over the time since the previous record
    model = KMeans(K, random_state=0, max_iter=3, tol=0, progress=True, client=client).fit(array)
    err = capsys.readouterr().err
    assert all(record["rows_per_second"] > 0 for record in model.history_)
    assert "rows/s=" in _bar_states(err, "k-means iterations")[-1]


def test_a_short_pass_shows_no_bar(array, capsys):
    KMeans(K, random_state=0, max_iter=2, progress=True).fit(array)
    err = capsys.readouterr().err
    assert config.PASS_BAR_DELAY_SECONDS >= 1.0
    assert not _bar_states(err, "k-means pass ("), err
