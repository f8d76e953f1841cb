"""Settings (:mod:`daskmeans.config`): read where they are used, changed and reset at run time, carried to workers.

- no module copies a setting at import (``from ..config import NAME``) or freezes one as a function default;
- ``config.set`` (a plain call or a context manager), ``config.reset`` and ``config.get``, and their errors;
- every setting, changed at run time, changes what the code does (one check per setting), and the change is gone
  once the setting is restored;
- a setting changed on the driver reaches the tasks that run in worker processes.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import dask.array as da
import numpy as np
import pytest

from daskmeans import config
from daskmeans.exceptions import DaskmeansError, InvalidParameterError

PACKAGE = Path(__file__).resolve().parents[1] / "daskmeans"
SETTINGS = sorted(config.defaults())


# -- no copies made at import, no defaults frozen --------------------------------------------------------------


def _config_names_in(node) -> list[str]:
    return [
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if (isinstance(n, ast.Name) and n.id in SETTINGS) or (isinstance(n, ast.Attribute) and n.attr in SETTINGS)
    ]


def _frozen_settings(path: Path) -> list[str]:
    """Where ``path`` imports a setting's name from the config module, or freezes a setting as a function default
    or a class attribute's default (read once, when the module is imported)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[-1] == "config"
            and (node.level or node.module.startswith("daskmeans"))
        ):
            found += [f"line {node.lineno}: imports {a.name}" for a in node.names if a.name.isupper()]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            defaults = node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
            found += [f"line {node.lineno}: default {name}" for d in defaults for name in _config_names_in(d)]
        elif isinstance(node, ast.ClassDef):
            found += [
                f"line {st.lineno}: class attribute {name}"
                for st in node.body
                if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None
                for name in _config_names_in(st.value)
            ]
    return found


def test_no_module_copies_a_setting_at_import_or_freezes_one_as_a_default():
    frozen = {
        str(path.relative_to(PACKAGE.parent)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "config.py" and (found := _frozen_settings(path))
    }
    assert not frozen, f"read config.NAME where it is used (None defaults read at call time): {frozen}"


def test_the_check_finds_a_copy_and_a_frozen_default(tmp_path):
    module = tmp_path / "module.py"
    module.write_text(
        "from ..config import SLAB_BYTES, config\n"
        "def f(x, slab_bytes=SLAB_BYTES, split=config.SPLIT_EVERY, other=None):\n    pass\n"
    )
    assert _frozen_settings(module) == [
        "line 1: imports SLAB_BYTES",
        "line 2: default SLAB_BYTES",
        "line 2: default SPLIT_EVERY",
    ]


# -- set, reset, get ---------------------------------------------------------------------------------------------


def test_set_as_a_context_manager_restores_the_values_on_leaving_the_block_even_on_an_error():
    with config.set(SLAB_BYTES=2**20, WRITES_SETTLE_SECONDS=3):
        assert config.SLAB_BYTES == config.get("SLAB_BYTES") == 2**20
        assert config.WRITES_SETTLE_SECONDS == 3.0 and isinstance(config.WRITES_SETTLE_SECONDS, float)
        with config.set(SLAB_BYTES=2**10):
            assert config.SLAB_BYTES == 2**10
        assert config.SLAB_BYTES == 2**20
    assert config.SLAB_BYTES == config.defaults()["SLAB_BYTES"]
    with pytest.raises(RuntimeError), config.set(POOL_ROWS=10):
        raise RuntimeError
    assert config.POOL_ROWS == config.defaults()["POOL_ROWS"]


def test_set_as_a_plain_call_persists_until_reset():
    try:
        config.set(POOL_ROWS=100, N_FAR=7)
        assert (config.POOL_ROWS, config.N_FAR) == (100, 7)
        config.reset("POOL_ROWS")
        assert (config.POOL_ROWS, config.N_FAR) == (config.defaults()["POOL_ROWS"], 7)
        config.SPLIT_EVERY = 3  # an assignment is a change like any other
        config.reset()
        assert all(config.get(name) == value for name, value in config.defaults().items())
    finally:
        config.reset()


def test_unknown_names_and_wrong_types_are_refused_before_anything_changes():
    with pytest.raises(InvalidParameterError, match="no setting 'SLAB_BYTE'. Did you mean SLAB_BYTES"):
        config.set(POOL_ROWS=5, SLAB_BYTE=1)
    with pytest.raises(InvalidParameterError, match="no setting 'slab_bytes'"):
        config.get("slab_bytes")
    with pytest.raises(InvalidParameterError):
        config.reset("NOT_A_SETTING")
    for bad in (
        {"SLAB_BYTES": 1.5},
        {"SLAB_BYTES": True},
        {"SLAB_BYTES": "8MiB"},
        {"WRITES_SETTLE_SECONDS": "1"},
        {"LOCAL_WORKERS": "threads"},
        {"WORKER_MALLOC_ENVIRON": 1},
        {"POOL_ROWS": None},
    ):
        with pytest.raises(TypeError, match="takes a value of type"):
            config.set(**bad)
    assert config.POOL_ROWS == config.defaults()["POOL_ROWS"]
    with config.set(SLAB_BYTES=np.int64(4096), KMEANS_PARALLEL_MEMORY_FRACTION=1, LOCAL_WORKERS=["auto"]):
        assert type(config.SLAB_BYTES) is int and config.KMEANS_PARALLEL_MEMORY_FRACTION == 1.0
        assert config.LOCAL_WORKERS == ("auto",)


def test_defaults_are_a_copy_and_every_setting_is_documented_in_config_py():
    defaults = config.defaults()
    defaults["WORKER_MALLOC_ENVIRON"]["MALLOC_TRIM_THRESHOLD_"] = 0
    assert config.defaults()["WORKER_MALLOC_ENVIRON"]["MALLOC_TRIM_THRESHOLD_"] != 0
    assert SETTINGS == sorted(name for name in vars(config) if name.isupper() and not name.startswith("_"))
    text = (PACKAGE / "config.py").read_text().splitlines()
    undocumented = [
        name
        for name in SETTINGS
        if not any(
            line.startswith("#:")
            for line in text[: next(i for i, line in enumerate(text) if line.startswith(f"{name} = "))][-1:]
        )
    ]
    assert len(undocumented) <= 3, undocumented  # settings set one after another share the comment of the first


def test_tasks_carry_only_the_changed_settings_and_apply_them_elsewhere_only():
    assert config.carried() is None
    with config.set(SLAB_BYTES=4096):
        settings = config.carried()
    assert settings[1] == (("SLAB_BYTES", 4096),)
    assert config.run_with(settings, config.get, "SLAB_BYTES") == config.SLAB_BYTES, "the process that built it"
    elsewhere = ((-1, "another process"), settings[1])
    assert config.run_with(elsewhere, config.get, "SLAB_BYTES") == 4096
    assert config.SLAB_BYTES == config.defaults()["SLAB_BYTES"], "restored after the task"


def test_tasks_carrying_other_settings_wait_for_the_running_ones():
    first, second = ((-1, "a"), (("SLAB_BYTES", 1),)), ((-1, "b"), (("SLAB_BYTES", 2),))
    seen, entered, leave = [], threading.Event(), threading.Event()

    def hold():
        with config.applied(first):
            entered.set()
            leave.wait(10)
            seen.append(config.SLAB_BYTES)

    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(hold)
        entered.wait(10)
        later = pool.submit(config.run_with, second, config.get, "SLAB_BYTES")
        same = config.run_with(first, config.get, "SLAB_BYTES")  # the same settings run alongside
        leave.set()
        assert (held.result(), later.result(), same, seen) == (None, 2, 1, [1])
    assert config.SLAB_BYTES == config.defaults()["SLAB_BYTES"]


def test_a_progress_watch_finds_its_block_tasks_when_they_carry_settings():
    from daskmeans.engine.graph import map_blocks_delayed
    from daskmeans.engine.pass_progress import PassWatch, report_block

    with PassWatch(show=False) as watch, config.set(SLAB_BYTES=4096):
        (block,) = map_blocks_delayed(np.sum, "probe", [[np.ones((3, 2))]], reads_data=True)
        assert block.dask[block.key].func is report_block
        watch.submitted(dict(block.dask))
        assert block.compute(scheduler="sync") == 6.0
    assert watch.passes[0]["chunks"] == 1 and watch.passes[0]["rows"] == 3


# -- settings reach the tasks in worker processes ---------------------------------------------------------------


def _slab_rows_here(rows, offset):
    return np.full(rows.shape[0], rows.shape[0], dtype=np.int64)


def _setting_where_pinned(pieces, compute, name):
    return config.get(name), os.getpid()


def test_a_setting_changed_on_the_driver_reaches_the_tasks_in_worker_processes(cluster_client):
    from daskmeans.engine.client import compute_now, run_pinned
    from daskmeans.engine.graph import map_blocks_delayed, task, tree_reduce
    from daskmeans.engine.slabs import map_rows

    default = config.SLAB_BYTES
    X = da.from_array(np.zeros((4000, 4), dtype=np.float32), chunks=(1000, 4))

    def observed():
        reads = map_blocks_delayed(config.get, "read-setting", [["SLAB_BYTES"]] * 4)
        pids = compute_now(*[task(f"daskmeans-pid-{i}", os.getpid) for i in range(2)], client=cluster_client)
        combined = tree_reduce(reads, max, "read-setting-max")
        slabs = map_rows(X, _slab_rows_here, dtype=np.int64, name="daskmeans-slab-rows")
        values = compute_now(*reads, combined, client=cluster_client)
        (slab_rows,) = compute_now(slabs, client=cluster_client)
        (pinned, pid), _ = run_pinned(
            cluster_client,
            _setting_where_pinned,
            [],
            "SLAB_BYTES",
            key=f"daskmeans-pinned-{len(X.chunks[0])}-{config.SLAB_BYTES}",
        )
        assert os.getpid() not in (pid, *pids), "the tasks ran in worker processes"
        return set(values), int(slab_rows.max()), pinned

    assert observed() == ({default}, 1000, default)
    with config.set(SLAB_BYTES=16 * 100):  # slabs of 100 rows of 4 float32
        assert observed() == ({1600}, 100, 1600)
    assert observed() == ({default}, 1000, default), "the workers are back to their own settings"


# -- every setting, changed at run time, takes effect -------------------------------------------------------------


def _counting(monkeypatch, module, name):
    """Replace ``module.name`` by a wrapper that records each call's arguments (returned list)."""
    calls, original = [], getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def _data(n=2000, d=4, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(10, d))
    return (centers[rng.integers(0, 10, n)] + rng.normal(size=(n, d))).astype(dtype)


# engine ------------------------------------------------------------------------------------------------------


def _tree_shape(mp):
    from daskmeans.engine.graph import reduce_in_tree

    return repr(reduce_in_tree(list(range(20)), tuple))


def _group_level(mp):
    from daskmeans.engine.grouped import group_levels

    return group_levels(16_384, 4, 6_000)


def _shared_kind(mp):
    from daskmeans.engine.graph import shared

    return type(shared(np.zeros(4), "probe")).__name__


def _last_combine(mp):
    from daskmeans.engine.graph import task, tree_reduce

    parts = [task(f"daskmeans-part-{i}", int, i) for i in range(3)]
    return type(tree_reduce(parts, sum, "probe", part_bytes=64)).__name__


class _FakeTime:
    """A clock that advances one second per look, and a sleep that records its argument."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def monotonic(self):
        self.now += 1.0
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)


def _writes_settling(mp):
    from daskmeans.engine import writes

    clock = _FakeTime()
    mp.setattr(writes, "time", clock)
    client = SimpleNamespace(looks=0)

    def run(*args, **kwargs):
        client.looks += 1
        return {"worker": ["key"]}  # a write that never ends

    client.run = run
    writes._wait_until_none_executes(client, {"key"})
    return client.looks, sorted(set(clock.sleeps))


def _zarr_settle_timeout(mp):
    import zarr

    from daskmeans.storage import publish

    zarr.create_array({}, shape=(2,), dtype="f4")[:] = 1  # Zarr's I/O loop runs
    waited = []

    class Future:
        def result(self, timeout):
            waited.append(timeout)
            return True

    def run_coroutine_threadsafe(coroutine, loop):
        coroutine.close()
        return Future()

    mp.setattr(publish, "asyncio", SimpleNamespace(run_coroutine_threadsafe=run_coroutine_threadsafe))
    publish.settle_zarr_io()
    mp.undo()
    return waited


def _publish_pause(mp):
    import tempfile

    from daskmeans.storage import publish

    paused = []
    mp.setattr(publish, "time", SimpleNamespace(sleep=paused.append, time=time.time))
    with tempfile.TemporaryDirectory() as folder:
        with publish.atomic_output(os.path.join(folder, "out")) as tmp:
            os.mkdir(tmp)
    mp.undo()
    return paused


def _connect_timeout(mp):
    from daskmeans.engine.cluster import ClusterSpec

    return ClusterSpec().validate().connect_timeout


def _handshake_wait(mp):
    from daskmeans.engine.client import await_handshake
    from daskmeans.exceptions import SchedulerConnectionError

    waits, real = [], asyncio.wait_for

    async def wait_for(awaitable, timeout):
        if getattr(awaitable, "__qualname__", "").endswith("handshake"):
            waits.append(timeout)
            awaitable.close()
            raise TimeoutError
        return await real(awaitable, timeout)

    mp.setattr(asyncio, "wait_for", wait_for)
    try:
        with pytest.raises(SchedulerConnectionError):
            await_handshake("tcp://127.0.0.1:9", 1.0, {})
    finally:
        mp.undo()
    return waits


def _local_processes(mp):
    from daskmeans.engine.cluster import ClusterSpec

    return ClusterSpec().local_processes(input_bytes=1000)


def _local_workers(mp):
    from daskmeans.cli.common import SettingChoice
    from daskmeans.engine.cluster import ClusterSpec

    try:
        ClusterSpec(local_workers="threads").validate()
        threads = "accepted"
    except InvalidParameterError:
        threads = "refused"
    return SettingChoice("LOCAL_WORKERS").choices, threads


def _worker_environ(mp):
    import dask

    from daskmeans.engine.worker_memory import worker_malloc_settings

    mp.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {}}), worker_malloc_settings():
        return os.environ.get("MALLOC_TRIM_THRESHOLD_")


def _workers_trimmed(mp, client):
    from daskmeans.engine.worker_memory import release_freed_memory

    return len(release_freed_memory(client))  # no worker of the test cluster holds half its 2 GiB


_workers_trimmed.needs_cluster = True


def _bar_delay(mp):
    from daskmeans.engine.pass_progress import PassWatch

    return PassWatch(show=False).delay


def _late_report_wait(mp):
    from daskmeans.engine.pass_progress import PassWatch

    watch = PassWatch(show=False)
    waits = []

    class Lock(type(watch._lock)):
        def wait_for(self, predicate, timeout=None):
            waits.append(timeout)
            return predicate()

    watch._lock = Lock()
    watch._client, watch.started, watch.total = object(), 0.0, 1  # a report still on its way
    watch.finished()
    return waits


# storage, datasets, memory --------------------------------------------------------------------------------------


def _chosen_rows(n, d):
    def observe(mp):
        from daskmeans.storage.io import chosen_block_rows

        return chosen_block_rows(n, d, 4)

    return observe


def _merged_chunks(mp):
    from daskmeans.storage.io import _normalize_chunks

    return _normalize_chunks(da.zeros((1000, 4), chunks=(100, 4)), None, "X", merge_small=True).chunks[0]


def _slab_count(mp):
    from daskmeans.engine.slabs import slabs

    return len(list(slabs(np.zeros((1000, 4), dtype=np.float32))))


def _generation_rows(mp):
    from daskmeans.datasets import generation_block_rows

    return generation_block_rows(4)


def _chunk_rows(mp):
    from daskmeans.datasets import default_chunk_rows

    return default_chunk_rows(10**8, 4)


def _memory_bound(mp):
    from daskmeans.memory import worker_memory_bound

    return worker_memory_bound(10_000, 8, 10)


def _minibatch_state(mp):
    from daskmeans.memory import minibatch_state_bytes

    return minibatch_state_bytes(4)


# kernels ---------------------------------------------------------------------------------------------------------


def _gemm_calls(mp):
    from daskmeans.kernels import assign

    calls = _counting(mp, assign, "nearest_gemm")
    X = _data()
    assign.nearest_centers(X, X[:5])
    return len(calls)


def _score_rows(columns):
    def observe(mp):
        from daskmeans.kernels.exact_assign import score_rows

        return score_rows(10**6, columns, 4)

    return observe


def _one_group_tiles(dtype, name):
    def observe(mp):
        from daskmeans.kernels import one_group_assign
        from daskmeans.kernels.exact_assign import assign_with_bounds
        from daskmeans.kernels.nested_groups import make_groups

        calls = _counting(mp, one_group_assign, name)
        X = _data(1000, dtype=dtype)
        with config.set(PANEL_SCAN="panels"):
            assign_with_bounds(X, X[:10], make_groups(X[:10], "none", 1), with_bounds=False)
        return len(calls)

    return observe


def _panel_choice(mp):
    """How many times the choice between the panels and BLAS tiles was measured, and its shapes."""
    from daskmeans.kernels import one_group_assign

    mp.setattr(one_group_assign, "_PANELS_MEASURED", {})
    calls = _counting(mp, one_group_assign, "_assign_one_group")
    one_group_assign.panels_pay(4)
    return [args[0].shape + args[1].shape for args, _ in calls]


def _column_blocks(mp):
    from daskmeans.kernels import exact_assign
    from daskmeans.kernels.nested_groups import make_groups

    calls = _counting(mp, exact_assign, "_assign_by_column_blocks")
    X = _data(500)
    exact_assign.assign_with_bounds(X, X[:100], make_groups(X[:100], "none", 1), with_bounds=False)
    return len(calls)


def _blocked_tile_bytes(mp):
    from daskmeans.kernels import exact_assign
    from daskmeans.kernels.nested_groups import make_groups

    calls = _counting(mp, exact_assign, "score_rows")
    X = _data(500)
    with config.set(ASSIGN_COLUMN_BLOCK=16):
        exact_assign.assign_with_bounds(X, X[:100], make_groups(X[:100], "none", 1), with_bounds=False)
    return [kwargs.get("tile_bytes") for _, kwargs in calls]


def _kernel_centers_slabs(mp):
    from daskmeans.kernels import kernel_centers
    from daskmeans.kernels.kernel_functions import Kernel

    calls = _counting(mp, kernel_centers, "nearest_from_inner")
    X = _data(1000)
    kernel = Kernel("rbf", {"kappa": 1.0})
    kernel_centers.single_point_centers(X[:5], kernel).nearest(X, kernel)
    return len(calls)


def _kernel_step_split(mp):
    from daskmeans.kernels.kernel_functions import Kernel
    from daskmeans.kernels.kernel_minibatch import batch_kernel_blocks

    rows, support = _data(29), _data(45, seed=1)
    kernel = Kernel("rbf", {"kappa": 1.0})
    with ThreadPoolExecutor(1) as pool:
        submitted = _counting(mp, pool, "submit")
        batch_kernel_blocks(rows, support, kernel, kernel.row_norms(rows), kernel.row_norms(support), pool)
    return len(submitted)


def _vrkm_cost_window(mp):
    from daskmeans.kernels.vrkm import InnerLoop, candidate_lists

    X = _data(2000)
    loop = InnerLoop(X[:10].copy(), 0.01)
    labels, _, candidates, lower = candidate_lists(X, loop.centers(), 2)
    return loop.run(X, labels, candidates, lower, max_cost=1e-9)


def _vrkm_slabs(mp):
    from daskmeans.kernels import vrkm

    calls = _counting(mp, vrkm, "_select_smallest")
    X = _data(1000)
    vrkm.candidate_lists(X, X[:10], 3)
    return len(calls)


def _yinyang_groups(k):
    def observe(mp):
        from daskmeans.kernels.nested_groups import choose_bounds

        return choose_bounds("yinyang", k, 10**9)

    return observe


def _revisit(name, move=0.01, probe_rows=None):
    def observe(mp):
        from daskmeans.algorithms.lloyd import center_displacement
        from daskmeans.kernels import revisit as kr
        from daskmeans.kernels.exact_assign import assign_with_bounds
        from daskmeans.kernels.nested_groups import make_groups

        rng = np.random.default_rng(0)
        X = rng.integers(0, 256, size=(900, 12)).astype(np.float32)
        C = X[rng.choice(900, 40, replace=False)] + np.float32(0.25)
        groups = make_groups(C, "yinyang", 5)
        labels, dist2, lower, _ = assign_with_bounds(X, C, groups)
        moved = (C + move * rng.standard_normal(C.shape)).astype(np.float32)
        shift = center_displacement(moved, C) * (1 + 1e-12)
        calls = _counting(mp, kr, name)
        kr.revisit_with_bounds(X, moved, labels, lower, shift, groups, dist2=dist2, probe_rows=probe_rows)
        if name == "_revisit_by_groups":  # the calls and the rows revisited together
            return [len(calls), [args[-1] for args, _ in calls]]
        return [args[0].shape[0] for args, _ in calls]  # the rows reassigned against all centers

    return observe


def _pair_aggregation(mp):
    from daskmeans.kernels import truncated_em

    uniques = []

    class Counting:
        def __getattr__(self, attribute):
            if attribute == "unique":
                uniques.append(attribute)
            return getattr(np, attribute)

    mp.setattr(truncated_em, "np", Counting())
    rng = np.random.default_rng(0)
    best, candidate = (rng.integers(0, 30, 200).astype(np.int32) for _ in range(2))
    truncated_em.aggregate_pairs(best, candidate, rng.random(200), 30)
    return len(uniques)


def _greedy_distances(mp):
    from daskmeans.kernels import afkmc2

    calls = _counting(mp, afkmc2, "all_dist2")
    points = _data(50, 3)
    afkmc2.greedy_kmeans_plusplus_with_mode(points, np.ones(50), 5, np.random.default_rng(0), 3)
    return [(a.shape[0], b.shape[0]) for (a, b, *_), _ in calls]


def _chain_blocks(mp):
    from daskmeans.kernels import afkmc2

    calls = _counting(mp, afkmc2, "_nearest_by_scores")
    rng = np.random.default_rng(0)
    candidates = _data(25, 3)
    afkmc2.afkmc2_chains(candidates, np.ones(25), np.full(25, 1 / 25), candidates[0], 6, 5, rng.random(25))
    return len(calls)


# passes ----------------------------------------------------------------------------------------------------------


def _far_rows(mp):
    from daskmeans.passes.assign import far_rows

    return far_rows(1000)


def _pool_blocks(mp):
    from daskmeans.passes.minibatch_pool import blocks_per_pool

    return blocks_per_pool(np.full(100, 1000), 4000)


def _sampling(mp):
    from daskmeans.passes.minibatch_pool import choose_sampling

    return choose_sampling("auto", np.full(1000, 1000), 4000)


def _nested_batch(mp):
    from daskmeans.kernels.nested_groups import make_groups
    from daskmeans.passes.nested_state import NestedBatch

    X = _data(10_000)
    batch = NestedBatch(da.from_array(X, chunks=(100, 4)), 0, make_groups(X[:10], "none", 1))
    return batch.n_lanes, batch.min_block_rows


def _cut_growth(mp):
    from daskmeans.algorithms.nested_growth import LapForecast, next_growth

    laps = LapForecast()
    laps.add(1.0, new_rows=10_000, size=10_000)
    laps.add(0.5, new_rows=0, size=10_000)
    return next_growth(laps, 10_000, 10_000, seconds_left=0.8)  # room for 3000 new rows


def _driver_rows(mp):
    from daskmeans.engine.driver import driver_rows

    return driver_rows("auto", 10, 10, 1000)


def _driver_work(mp):
    from daskmeans.engine.driver import driver_work

    return driver_work(SimpleNamespace(nthreads=lambda: {"worker": 1}))


def _steps_per_pool(mp):
    from daskmeans.passes.kernel_pools import StepPools

    return StepPools(da.zeros((1000, 4)), None, None, batch_size=10, max_iter=100, seed=0).steps_per_pool


def _row_sample_blocks(mp):
    from daskmeans.passes.row_sample import sampled_rows

    rows, _ = sampled_rows(da.from_array(_data(2000), chunks=(500, 4)), None, 1.0, 0)
    return rows.chunks[0]


# algorithms and estimators, through the public API ---------------------------------------------------------------


def _kmeans_bounds(mp):
    from daskmeans import KMeans

    X = np.random.default_rng(0).normal(size=(2000, 32))  # no clusters: many iterations
    model = KMeans(10, max_iter=4, tol=0, random_state=0).fit(X)
    assert model.n_iter_ == 4
    return [record["bounds"] for record in model.history_]


def _fit_centers(estimator_factory, n=3000, d=4):
    def observe(mp):
        model = estimator_factory().fit(_data(n, d))
        return model.cluster_centers_.tobytes()

    return observe


def _kmeans(init, **kw):
    from daskmeans import KMeans

    return lambda: KMeans(10, init=init, max_iter=1, random_state=0, **kw)


def _seeding_rows(**nested):
    def observe(mp):
        from daskmeans import KMeans
        from daskmeans.engine import capacity

        memory = SimpleNamespace(available=2**34, total=2**35)  # the machine's free memory changes: fixed here
        mp.setattr(capacity, "psutil", SimpleNamespace(virtual_memory=lambda: memory))
        cluster_memory_bytes = capacity.cluster_memory_bytes
        settings = dict(nested)
        if "fraction_rows" in settings:  # the memory bound allows about that many rows of 4 float64 and state
            rows = settings.pop("fraction_rows")
            settings["KMEANS_PARALLEL_MEMORY_FRACTION"] = rows * (32 + 12) / cluster_memory_bytes(None)
        with config.set(**settings):
            model = KMeans(10, max_iter=1, random_state=0).fit(_data(3000))
        return model.fit_plan_.seeding.sample_rows

    return observe


def _merge_batches(mp):
    import dask
    from dask.callbacks import Callback

    from daskmeans import KMeans

    names = set()
    with (
        Callback(pretask=lambda key, dsk, state: names.add(key[0] if isinstance(key, tuple) else key)),
        dask.config.set(scheduler="threads"),
    ):
        KMeans(10, init="two-level", max_iter=1, random_state=0).fit(_data(3000))
    first_level = re.compile(r"daskmeans-two-level-merge-[0-9a-f]+-[0-9]+$")  # one name per batch
    return len({name for name in names if first_level.match(name)})


def _coarse_index(mp):
    from daskmeans import KMeans

    model = KMeans(16, max_iter=1, random_state=0).fit(_data(2000))
    return model.coarse_index().coarse_centers.tobytes()


def _vrkm(attribute, on_worker=False, **nested):
    def observe(mp, cluster=None):
        from daskmeans import VRKMeans

        kw = {"n_candidates": 2, "inner_batch_size": 1} if attribute == "history" else {}  # the per-sample loop
        if on_worker:  # the epoch sample stays on the workers, streamed to the inner loop in segments
            kw.update(client=cluster, driver_rows=0, driver_sample_bytes=1)
        with config.set(**nested):
            model = VRKMeans(40, max_epochs=2, random_state=0, **kw).fit(_data(3000))
        if attribute == "block_rows":
            return model.fit_plan_.block_rows
        if attribute == "history":
            return [(r["lists_remade"], r["distances_per_step"]) for r in model.history_]
        return getattr(model, attribute).tobytes() if attribute == "cluster_centers_" else getattr(model, attribute)

    observe.needs_cluster = on_worker
    return observe


def _vrkm_pools(mp):
    from daskmeans import VRKMeans

    model = VRKMeans(4, max_epochs=2, tol=0.0, random_state=0).fit(_data(3000))
    return [record.get("pools") for record in model.history_]


def _kernel_energy(mp):
    from daskmeans import MiniBatchKernelKMeans

    return MiniBatchKernelKMeans(5, max_iter=2, random_state=0).fit(_data(3000)).history_[0]["energy"]


def _kernel_driver_rows(mp):
    from daskmeans.estimators.kernel import kernel_driver_rows

    return kernel_driver_rows("auto", 4, 4)


def _full_batch_limit(mp):
    from daskmeans import KernelKMeans

    try:
        KernelKMeans(3, max_iter=1, random_state=0).fit(_data(500))
        return "fitted"
    except DaskmeansError:
        return "refused"


def _gmm(attribute, client=False):
    def observe(mp, cluster=None):
        from daskmeans import CoresetGaussianMixture

        kw = {"client": cluster} if client else {}
        model = CoresetGaussianMixture(20, n_truncated=3, search_size=5, max_iter=2, random_state=0, **kw).fit(
            _data(12_000)
        )
        if attribute == "block_rows":
            return model.fit_plan_.block_rows
        if attribute == "history":
            return [(r["initial_esteps"], r["passes"]) for r in model.history_], model.means_.tobytes()
        return getattr(model, attribute)

    observe.needs_cluster = client
    return observe


#: setting -> (a value other than the default, a function of the monkeypatch fixture observing what it changes)
CHECKS = {
    "SPLIT_EVERY": (4, _tree_shape),
    "SHARED_INLINE_BYTES": (0, _shared_kind),
    "DRIVER_COMBINE_BYTES": (0, _last_combine),
    "GROUP_TASKS_PER_THREAD": (64, _group_level),
    "GROUP_PARTIALS_BYTES": (6_000, _group_level),
    "WRITES_SETTLE_SECONDS": (3.0, _writes_settling),
    "WRITES_POLL_SECONDS": (0.5, _writes_settling),
    "ZARR_SETTLE_SECONDS": (2.0, _zarr_settle_timeout),
    "PUBLISH_PAUSE_SECONDS": (0.5, _publish_pause),
    "CONNECT_TIMEOUT_SECONDS": (3.0, _connect_timeout),
    "CONNECT_HANDSHAKE_GRACE_SECONDS": (5.0, _handshake_wait),
    "LOCAL_THREADS_MAX_BYTES": (10, _local_processes),
    "LOCAL_WORKERS": (("auto", "processes"), _local_workers),
    "WORKER_MALLOC_ENVIRON": ({"MALLOC_TRIM_THRESHOLD_": 2**20}, _worker_environ),
    "WORKER_TRIM_FRACTION": (0.0, _workers_trimmed),
    "PASS_BAR_DELAY_SECONDS": (0.0, _bar_delay),
    "LATE_REPORT_SECONDS": (1.5, _late_report_wait),
    "TARGET_BLOCK_BYTES": (2**20, _chosen_rows(10**8, 16)),
    "MIN_BLOCK_BYTES": (1, _merged_chunks),
    "MIN_CHOSEN_BLOCKS": (2, _chosen_rows(100_000, 4)),
    "MIN_CHOSEN_BLOCK_ROWS": (100, _chosen_rows(4000, 4)),
    "SLAB_BYTES": (1600, _slab_count),
    "ASSIGN_DIRECT_LIMIT": (0, _gemm_calls),
    "ONE_GROUP_TILE_ROWS": (100, _one_group_tiles(np.float64, "_settle_one_group")),
    "ASSIGN_SLAB_BYTES": (400, _score_rows(10)),
    "PANEL_TILE_BYTES": (1, _one_group_tiles(np.float32, "best_and_lowest_other_by_panels")),
    "PANEL_MAX_FEATURES": (0, _one_group_tiles(np.float32, "best_and_lowest_other_by_panels")),
    "PANEL_SCAN": ("blas", _panel_choice),
    "PANEL_CALIBRATION_ROWS": (100, _panel_choice),
    "PANEL_CALIBRATION_CENTERS": (20, _panel_choice),
    "ASSIGN_TILE_BYTES": (4000, _score_rows(10)),
    "ASSIGN_MIN_TILE_ROWS": (1, _score_rows(26_214)),
    "ASSIGN_COLUMN_BLOCK": (16, _column_blocks),
    "ASSIGN_BLOCKED_TILE_BYTES": (2**16, _blocked_tile_bytes),
    "KERNEL_CENTERS_SLAB_BYTES": (400, _kernel_centers_slabs),
    "KERNEL_STEP_SPLIT_WORK": (1, _kernel_step_split),
    "VRKM_COST_WINDOW": (64, _vrkm_cost_window),
    "VRKM_SLAB_BYTES": (800, _vrkm_slabs),
    "YINYANG_GROUP_SIZE": (5, _yinyang_groups(1000)),
    "YINYANG_MIN_GROUPS": (8, _yinyang_groups(256)),
    "YINYANG_MIN_GROUP_SIZE": (2, _yinyang_groups(64)),
    "REVISIT_PROBE_ROWS": (100, _revisit("_revisit_by_groups")),
    "REVISIT_GIVE_UP_FRACTION": (0.0, _revisit("assign_with_bounds", probe_rows=100)),
    "REVISIT_BLOCK_ROWS": (64, _revisit("_revisit_by_groups")),
    "REVISIT_BLOCK_PAIRS": (2**9, _revisit("_revisit_by_groups")),
    "DENSE_PAIRS_LIMIT": (0, _pair_aggregation),
    "N_FAR": (200, _far_rows),
    "N_FAR_PER_CLUSTERS": (4, _far_rows),
    "N_FAR_MAX": (100, _far_rows),
    "POOL_ROWS": (2**10, _minibatch_state),
    "MIN_POOL_BLOCKS": (20, _pool_blocks),
    "POOL_BLOCK_OVERSAMPLING": (5, _pool_blocks),
    "CHUNK_SAMPLING_MIN_SAVING": (1000, _sampling),
    "MIN_BLOCK_ROWS": (100, _nested_batch),
    "MAX_LANES": (4, _nested_batch),
    "MIN_GROWTH_ROWS": (1000, _cut_growth),
    "DRIVER_WORK": (100 * 500, _driver_rows),
    "DRIVER_WORK_FEW_THREADS": (10**6, _driver_work),
    "DRIVER_BYTES": (1000 * 1000, _driver_rows),
    "BOUNDS_MIN_CLUSTERS": (11, _kmeans_bounds),
    "BOUNDS_MEMORY_FRACTION": (0.0, _kmeans_bounds),
    "AUTO_PLAIN_ITERATIONS": (0, _kmeans_bounds),
    "AFKMC2_CHAIN_LENGTH": (2, _fit_centers(_kmeans("afk-mc2"))),
    "AFKMC2_OVERSAMPLING": (1.0, _fit_centers(_kmeans("afk-mc2"))),
    "GREEDY_DISTANCE_MATRIX_BYTES": (0, _greedy_distances),
    "KMEANS_PARALLEL_MIN_ROWS": (100, _seeding_rows()),
    "KMEANS_PARALLEL_ROWS_PER_CENTER": (10, _seeding_rows(KMEANS_PARALLEL_MIN_ROWS=100)),
    "KMEANS_PARALLEL_MEMORY_FRACTION": (1e-12, _seeding_rows(KMEANS_PARALLEL_MIN_ROWS=100)),
    "KMEANS_PARALLEL_STATE_BYTES": (1012, _seeding_rows(KMEANS_PARALLEL_MIN_ROWS=2000, fraction_rows=2000)),
    "ROW_SAMPLE_BLOCK_ROWS": (500, _row_sample_blocks),
    "RECLUSTER_SLAB_BYTES": (8, _chain_blocks),
    "TWO_LEVEL_POINTS_PER_CENTER": (10, _fit_centers(_kmeans("two-level"))),
    "TWO_LEVEL_LLOYD_ITER": (0, _coarse_index),
    "TWO_LEVEL_FINE_LLOYD_ITER": (0, _fit_centers(_kmeans("two-level"))),
    "TWO_LEVEL_FINE_TRIALS": (1, _fit_centers(_kmeans("two-level"))),
    "TWO_LEVEL_MAX_MERGE_TASKS": (1, _merge_batches),
    "COARSE_INDEX_SEED": (1, _coarse_index),
    "MIN_SEGMENTS": (1, _vrkm("history", on_worker=True, VRKM_COST_WINDOW=16, REMAKE_COST=1)),
    "REMAKE_COST": (1, _vrkm("history", VRKM_COST_WINDOW=16)),
    "VRKM_POOL_BYTES": (20_000, _vrkm_pools),
    "POOL_BYTES": (3200, _steps_per_pool),
    "KERNEL_DRIVER_BYTES": (16 * 100, _kernel_driver_rows),
    "INIT_SAMPLE_ROWS": (200, _kernel_energy),
    "GMM_DRIVER_MAX_ROWS": (100, _gmm("estep_on_", client=True)),
    "GMM_BLOCK_ROWS": (1000, _gmm("block_rows")),
    "GMM_MIN_BLOCKS": (2, _gmm("block_rows")),
    "GMM_MIN_BLOCK_ROWS": (3000, _gmm("block_rows")),
    "MAX_INITIAL_ESTEPS": (0, _gmm("history")),
    "INITIAL_ESTEP_RTOL": (0.9, _gmm("history")),
    "AUTO_LEARNING_RATE": (1.0, _vrkm("eta_")),
    "VRKM_INNER_BATCH_SIZE": (16, _vrkm("cluster_centers_")),
    "AUTO_CORESET_PER_COMPONENT": (3000, _gmm("coreset_size_")),
    "AUTO_CORESET_MIN": (1000, _gmm("coreset_size_")),
    "AUTO_CORESET_MAX_BYTES": (32 * 5000, _gmm("coreset_size_")),
    "MAX_FULL_BATCH_SAMPLES": (100, _full_batch_limit),
    "TARGET_CHUNK_BYTES": (2**16, _chunk_rows),
    "GENERATION_BLOCK_VALUES": (400, _generation_rows),
    "PER_ROW_BYTES": (1000, _memory_bound),
    "ALLOCATOR_SLACK": (0, _memory_bound),
}


def test_every_setting_has_a_check():
    assert sorted(CHECKS) == SETTINGS


@pytest.mark.parametrize("name", SETTINGS)
def test_changing_a_setting_at_run_time_takes_effect(name, monkeypatch, request):
    value, observe = CHECKS[name]
    args = [request.getfixturevalue("cluster_client")] if getattr(observe, "needs_cluster", False) else []
    before = observe(monkeypatch, *args)
    with config.set(**{name: value}):
        during = observe(monkeypatch, *args)
    after = observe(monkeypatch, *args)
    assert during != before, f"{name}={value!r} changed nothing: {before!r}"
    assert after == before, f"{name} restored, yet {after!r} != {before!r}"
