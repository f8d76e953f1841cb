"""Worker loss: a real ``dask scheduler`` with three ``dask worker`` processes; one worker is killed (SIGKILL, by
its process id) in the middle of a fit, and the fit still ends with the result of an undisturbed run.

The workers run without a nanny, so a killed worker stays dead and the fit finishes on the two that are left
(a fresh worker is started before the next test). The undisturbed run is the same fit on the local threaded
scheduler in this process: every algorithm's result depends on the seed and the chunking only, so the centers
must be bitwise identical, not merely close.

The kill is triggered by the fit's own progress (a ``progress`` callback or, for the VRKM inner loop, the moment
the scheduler reports the inner-loop task running on a worker), never by a timer.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass

import dask
import numpy as np
import pytest
import zarr
from test_real_cluster import Processes, base_env, dask_command, wait_for_scheduler_file, wait_for_workers

import daskmeans

#: Slow; a hang (a task waiting for a worker that is gone) fails the test instead of the whole run.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

N_WORKERS = 3
CHUNK_ROWS = 1500


@dataclass
class KillableCluster:
    address: str
    processes: Processes
    client: object
    folder: object
    started: int = 0

    def worker_pids(self) -> dict[str, int]:
        """Worker address -> process id, as the workers themselves report it."""
        return self.client.run(os.getpid)

    def start_worker(self):
        name = f"worker-{self.started}"
        self.started += 1
        self.processes.start(
            name,
            dask_command(
                "worker",
                self.address,
                "--name",
                name,
                "--nthreads",
                "1",
                "--no-nanny",
                "--memory-limit",
                "1GiB",
                "--no-dashboard",
                "--local-directory",
                str(self.folder / name),
            ),
            base_env(),
        )

    def fill(self):
        """Start workers until there are ``N_WORKERS`` again, and wait for them."""
        missing = N_WORKERS - len(self.client.scheduler_info(n_workers=-1)["workers"])
        for _ in range(missing):
            self.start_worker()
        wait_for_workers(self.address, N_WORKERS, self.processes)
        self.client.wait_for_workers(N_WORKERS)

    def kill(self, address: str) -> int:
        """SIGKILL the worker at ``address`` by its process id; returns the pid."""
        pid = self.worker_pids()[address]
        for entry in list(self.processes.started):
            if entry[1].pid == pid:
                self.processes.started.remove(entry)  # a killed worker is not a failure of the cluster
                os.kill(pid, signal.SIGKILL)
                entry[1].wait(timeout=30)
                return pid
        raise AssertionError(f"{address} (pid {pid}) is not one of the workers this test started")


@pytest.fixture(scope="module")
def killable_cluster(tmp_path_factory):
    from distributed import Client

    folder = tmp_path_factory.mktemp("worker-loss")
    processes = Processes(folder)
    client = None
    try:
        scheduler_file = folder / "scheduler.json"
        processes.start(
            "scheduler",
            dask_command(
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
            ),
            base_env(),
        )
        address = wait_for_scheduler_file(scheduler_file, processes)
        client = Client(address, timeout=30, set_as_default=False)
        cluster = KillableCluster(address, processes, client, folder)
        cluster.fill()
        yield cluster
    finally:
        if client is not None:
            client.close()
        processes.stop()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """12,000 x 6 float32 blobs in chunks of 1,500 rows: eight blocks spread over the workers."""
    rng = np.random.default_rng(5)
    means = rng.uniform(-6, 6, size=(30, 6))
    X = (means[rng.integers(0, 30, 12_000)] + rng.standard_normal((12_000, 6))).astype(np.float32)
    path = str(tmp_path_factory.mktemp("worker-loss-data") / "X.zarr")
    zarr.create_array(path, shape=X.shape, chunks=(CHUNK_ROWS, 6), dtype=X.dtype)[:] = X
    return path


def undisturbed(make, store):
    """The same fit on the local threaded scheduler of this process."""
    with dask.config.set({"scheduler-address": None}):
        model = make(client=None, progress=False)
        model.fit(daskmeans.open_input(store, chunk_rows=CHUNK_ROWS))
    return model


def holders_of(client, prefix: str) -> list[str]:
    """Workers that hold at least one result whose key starts with ``prefix``."""
    return sorted(
        address
        for address, keys in client.has_what().items()
        if any(str(key).startswith(f"('{prefix}") or str(key).startswith(prefix) for key in keys)
    )


def fit_killing_at(cluster, make, store, iteration, victim_of):
    """Fit on the cluster; at the progress record of ``iteration`` kill the worker ``victim_of(client)`` chose."""
    cluster.fill()
    client = cluster.client
    killed = {}

    def on_progress(record):
        if record["iteration"] == iteration and not killed:
            victim = victim_of(client)
            killed["address"] = victim
            killed["pid"] = cluster.kill(victim)

    model = make(client=client, progress=on_progress)
    model.fit(daskmeans.open_input(store, chunk_rows=CHUNK_ROWS))
    assert killed, f"the fit ended before iteration {iteration}: nothing was killed"
    assert model.n_iter_ > iteration, "the kill must happen in the middle of the fit"
    assert killed["address"] not in client.scheduler_info(n_workers=-1)["workers"]
    return model


def any_worker(client):
    return sorted(client.scheduler_info(n_workers=-1)["workers"])[-1]


def assert_same_fit(model, reference):
    np.testing.assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    assert model.n_iter_ == reference.n_iter_
    assert model.stop_reason_ == reference.stop_reason_
    assert [r["energy"] for r in model.history_] == [r["energy"] for r in reference.history_]


def test_kmeans_survives_a_killed_worker(killable_cluster, store):
    def make(**kw):
        return daskmeans.KMeans(n_clusters=30, init="random", max_iter=12, tol=0.0, random_state=3, **kw)

    model = fit_killing_at(killable_cluster, make, store, 3, any_worker)
    assert_same_fit(model, undisturbed(make, store))


def test_minibatch_survives_a_killed_worker(killable_cluster, store):
    def make(**kw):
        # a pool of steps draws 2**17 rows: 60 epochs of 12,000 rows are six pools
        return daskmeans.MiniBatchKMeans(
            n_clusters=30, batch_size=500, max_iter=60, max_no_improvement=None, random_state=3, **kw
        )

    model = fit_killing_at(killable_cluster, make, store, 2, any_worker)
    assert_same_fit(model, undisturbed(make, store))


@pytest.mark.parametrize("driver_rows", [0, 2000])
def test_nested_minibatch_recomputes_lost_state_blocks(killable_cluster, store, driver_rows):
    """The worker killed holds state blocks of the active batch: they are rebuilt from their lineage, also when
    the batch was stepped on the driver before it grew past ``driver_rows`` (its blocks then came from the
    driver, inside tasks of their own)."""

    def make(**kw):
        return daskmeans.NestedMiniBatchKMeans(
            n_clusters=30,
            initial_batch_size=1000,
            rho=1e9,
            max_iter=25,
            tol=0.0,
            random_state=3,
            driver_rows=driver_rows,
            **kw,
        )

    def holder_of_state(client):
        holders = holders_of(client, "daskmeans-nmbatch-step")
        assert holders, "the state blocks should live on the workers"
        return holders[0]

    reference = undisturbed(make, store)
    assert reference.history_[5]["batch_size"] < 12_000, "the kill should come while the batch still grows"
    sizes = [r["batch_size"] for r in reference.history_[:5]]
    assert driver_rows == 0 or sizes[0] <= driver_rows < sizes[-1], "the batch should have left the driver by then"
    model = fit_killing_at(killable_cluster, make, store, 5, holder_of_state)
    assert_same_fit(model, reference)
    assert [r["batch_size"] for r in model.history_] == [r["batch_size"] for r in reference.history_]


@pytest.mark.parametrize("variant", ["vrkm", "vrkm++"])
def test_vrkm_pinned_inner_loop_moves_when_its_worker_dies(killable_cluster, store, variant):
    """The inner loop runs on one pinned worker (driver_sample_bytes=0); that worker is killed while it runs."""
    cluster = killable_cluster
    cluster.fill()
    client = cluster.client

    def make(**kw):
        return daskmeans.VRKMeans(
            n_clusters=30,
            variant=variant,
            epoch_size=60_000,
            max_epochs=6,
            tol=0.0,
            driver_sample_bytes=0,
            driver_rows=0,
            random_state=3,
            **kw,
        )

    reference = undisturbed(make, store)
    killed = {}
    records = []

    def watch():
        # kill the worker the moment the scheduler reports it running the inner loop of epoch 2
        while not done.is_set():
            if len(records) >= 1:
                for address, keys in client.processing().items():
                    if any(str(key).startswith("daskmeans-vrkm-inner-loop") for key in keys):
                        killed["address"] = address
                        killed["pid"] = cluster.kill(address)
                        killed["epochs_before"] = len(records)
                        return
            time.sleep(0.002)

    done = threading.Event()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        model = make(client=client, progress=records.append)
        model.fit(daskmeans.open_input(store, chunk_rows=CHUNK_ROWS))
    finally:
        done.set()
        watcher.join(timeout=60)
    assert killed, "the inner loop was never seen running on a worker"
    assert killed["epochs_before"] < model.n_iter_
    ran_on = [r.get("inner_on") for r in model.history_]
    epoch = killed["epochs_before"]  # the index of the epoch whose inner loop was running
    assert ran_on[epoch - 1] == killed["address"], "the worker killed is the one the inner loop was pinned to"
    assert ran_on[epoch] not in (None, "driver", killed["address"]), "that epoch's loop finished on another worker"
    assert_same_fit(model, reference)


def test_vc_gmm_recomputes_lost_estep_blocks(killable_cluster, store):
    """The coreset and the truncated posteriors live on the workers (estep_on="workers"); a holder is killed."""
    from daskmeans.estimators.mixture import CoresetGaussianMixture

    def make(**kw):
        return CoresetGaussianMixture(
            30,
            coreset_size=4000,
            n_truncated=3,
            search_size=3,
            max_iter=8,
            tol=0.0,
            estep_on="workers",
            random_state=3,
            **kw,
        )

    def holder_of_estep(client):
        holders = holders_of(client, "daskmeans-vc-gmm-estep")
        assert holders, "the E-step blocks should live on the workers"
        return holders[0]

    reference = undisturbed(make, store)
    model = fit_killing_at(killable_cluster, make, store, 3, holder_of_estep)
    assert model.history_[-1]["where"] == "workers" and reference.history_[-1]["where"] == "driver"
    assert_same_fit(model, reference)
    assert model.covariance_ == reference.covariance_ and model.lower_bound_ == reference.lower_bound_
    assert model.inertia_ == reference.inertia_


def test_kernel_minibatch_survives_a_killed_worker(killable_cluster, store, monkeypatch):
    """The steps run on the driver; the workers read each pool's batch rows (here 3 steps per pool)."""
    from daskmeans import config
    from daskmeans.estimators.kernel import MiniBatchKernelKMeans

    monkeypatch.setattr(config, "POOL_BYTES", 3 * 200 * 6 * 4)

    def make(**kw):  # driver_rows=0: the data stays on the workers (small data is otherwise copied to the driver)
        return MiniBatchKernelKMeans(
            30, batch_size=200, max_iter=12, init_sample_size=1000, random_state=3, driver_rows=0, **kw
        )

    reference = undisturbed(make, store)
    model = fit_killing_at(killable_cluster, make, store, 4, any_worker)
    assert_same_fit(model, reference)
    for name in ("support_rows_", "support_coef_", "support_index_"):
        np.testing.assert_array_equal(getattr(model, name), getattr(reference, name))
    assert model.inertia_ == reference.inertia_  # one more pass over all the data, on the workers left
