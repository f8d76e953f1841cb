"""The sizing model and the billion-row projection count a pass's tasks as the groups an exact pass makes."""

from __future__ import annotations

import pytest

from daskmeans import config
from daskmeans.bench.graph_overhead import exact_pass_tasks, overhead_on, project
from daskmeans.bench.sizing import fit_pass_model, pass_tasks


def test_an_exact_pass_makes_a_few_tasks_per_thread_once_there_are_blocks_enough():
    with config.set(SPLIT_EVERY=8, GROUP_TASKS_PER_THREAD=2):
        assert pass_tasks(8 * 131_072, 131_072, 2, 1000, 128) == 8  # 8 blocks: too few to group for 2 threads
        assert pass_tasks(32 * 131_072, 131_072, 2, 1000, 128) == 4  # 4 groups of 8 blocks
        assert exact_pass_tasks(16_384, 2) == 4
        assert exact_pass_tasks(16_384, 512) == 2_048  # 1,024 wanted: groups of 8 blocks
        assert pass_tasks(32 * 131_072, 131_072, 2, 65_536, 128) == 32  # large k: partials too large to hold


def test_the_fitted_model_takes_the_scheduler_share_of_each_size_out():
    tau, threads, a, per_thread = 0.004, 2, 0.5, 10e-6
    rows, tasks = [1_000_000, 4_000_000], [8, 4]
    seconds = [a + n * per_thread / threads + t * tau for n, t in zip(rows, tasks)]
    model = fit_pass_model(rows, seconds, tasks, threads, tau)
    assert model["a"] == pytest.approx(a)
    assert model["b_per_thread"] == pytest.approx(per_thread)


GRAPH = {
    "n_blocks": 16_384,
    "threads": 2,
    "kmeans": {"per_block_seconds": 0.5e-3},
    "nmbatch": {"per_block_seconds": 0.02e-3},
}


def test_the_overhead_of_group_tasks_spreads_over_the_threads_and_the_scheduler_s_share_does_not():
    tau = 0.004
    measured = GRAPH["n_blocks"] * GRAPH["kmeans"]["per_block_seconds"]
    assert overhead_on(GRAPH, "kmeans", 2, tau) == pytest.approx(measured), "the measuring run's own threads"
    in_tasks = (measured - 4 * tau) * 2
    for threads in (32, 512):
        expected = exact_pass_tasks(16_384, threads) * tau + in_tasks / threads
        assert overhead_on(GRAPH, "kmeans", threads, tau) == pytest.approx(expected)
    assert overhead_on(GRAPH, "kmeans", 32, tau) < measured, "more threads share the per-block work"
    older = {key: value for key, value in GRAPH.items() if key != "threads"}
    assert overhead_on(older, "kmeans", 512, tau) == pytest.approx(measured), "records without threads: serial"
    assert overhead_on(GRAPH, "nmbatch", 512, tau) == pytest.approx(16_384 * 0.02e-3)


def test_an_iteration_is_projected_as_its_compute_over_the_threads_plus_the_overhead_there():
    tau, per_row = 0.004, 5e-6
    projected = {row["algorithm"]: row for row in project(GRAPH, per_row, 1, 10**9, tau)}
    compute = 10**9 * per_row
    for iteration in projected["kmeans"]["iterations"]:
        workers = iteration["workers"]
        assert iteration["seconds"] == pytest.approx(compute / workers + overhead_on(GRAPH, "kmeans", workers, tau))
