"""A real cluster, the way a deployment runs it: ``dask scheduler`` and ``dask worker --preload daskmeans.preload``
processes on loopback, driven by the ``daskmeans`` command line with ``--scheduler``.

Every process is started in its own process group and killed (group and all) when the module is done, even
when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import dask
import numpy as np
import pytest
import zarr

import daskmeans
from daskmeans.preload import compiled_signatures

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
#: Environment variables that would point a process at some other cluster.
OUTSIDE_CLUSTER_VARIABLES = ("DASK_SCHEDULER_ADDRESS", "DASK_GATEWAY__ADDRESS")
#: A worker's preload compiles every kernel when Numba's cache is cold: about 140 s on 2 idle cores.
START_TIMEOUT = 360


def base_env(**extra) -> dict:
    """This process's environment with the worktree first on the path and no outside cluster."""
    env = {name: value for name, value in os.environ.items() if name not in OUTSIDE_CLUSTER_VARIABLES}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env


@dataclass
class Processes:
    """Processes started for a test, each in its own process group, with their logs."""

    folder: Path
    started: list = field(default_factory=list)

    def start(self, name: str, command: list[str], env: dict) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "w")
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.folder, start_new_session=True
        )
        log.close()
        self.started.append((name, process))
        return process

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text()

    def check_alive(self):
        for name, process in self.started:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{self.log(name)[-3000:]}")

    def stop(self):
        """SIGTERM to every process group, then SIGKILL to what is left after 10 s."""
        for _, process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for _, process in self.started:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)  # the nanny's worker process too, if it lingers
            except ProcessLookupError:
                pass
            process.wait(timeout=10)


def dask_command(*args) -> list[str]:
    """``dask <args>`` with this interpreter (the `dask` script of another environment could differ)."""
    return [sys.executable, "-m", "dask", *args]


def wait_for_scheduler_file(path: Path, processes: Processes) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        processes.check_alive()
        if path.exists():
            try:
                return json.loads(path.read_text())["address"]
            except (json.JSONDecodeError, KeyError):
                pass  # being written
        time.sleep(0.2)
    raise TimeoutError(f"the scheduler did not write {path} within {START_TIMEOUT} s")


def wait_for_workers(address: str, count: int, processes: Processes, security=None):
    from distributed import Client

    deadline = time.monotonic() + START_TIMEOUT
    with Client(address, timeout=30, security=security, set_as_default=False) as client:
        while len(client.scheduler_info(n_workers=-1)["workers"]) < count:
            processes.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} workers did not join {address} within {START_TIMEOUT} s")
            time.sleep(0.2)


@dataclass
class LoopbackCluster:
    address: str
    processes: Processes
    folder: Path
    workers: tuple[str, ...]


@pytest.fixture(scope="module")
def loopback_cluster(tmp_path_factory):
    """`dask scheduler` on 127.0.0.1 (port chosen by the OS) and two `dask worker --preload daskmeans.preload`."""
    folder = tmp_path_factory.mktemp("loopback-cluster")
    processes = Processes(folder)
    env = base_env()
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
            env,
        )
        address = wait_for_scheduler_file(scheduler_file, processes)
        workers = ("worker-0", "worker-1")
        for name in workers:
            processes.start(
                name,
                dask_command(
                    "worker",
                    address,
                    "--name",
                    name,
                    "--nthreads",
                    "1",
                    "--preload",
                    "daskmeans.preload",
                    "--memory-limit",
                    "2GiB",
                    "--no-dashboard",
                    "--local-directory",
                    str(folder / name),
                ),
                env,
            )
        wait_for_workers(address, len(workers), processes)
        yield LoopbackCluster(address, processes, folder, workers)
    finally:
        processes.stop()


def run_cli(*args, cwd: Path, env: dict | None = None) -> dict:
    """``python -m daskmeans ARGS --json``; its JSON answer."""
    done = subprocess.run(
        [sys.executable, "-m", "daskmeans", *args, "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env or base_env(),
        timeout=300,
    )
    assert done.returncode == 0, f"daskmeans {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def test_cli_fit_and_predict_on_the_cluster_equal_the_in_process_result(loopback_cluster, tmp_path):
    from distributed import Client

    address = loopback_cluster.address
    for name in loopback_cluster.workers:
        assert "daskmeans.preload: warmed" in loopback_cluster.processes.log(name)
    with Client(address, set_as_default=False) as client:
        signatures_before = client.run(compiled_signatures)

    # Absolute paths, as on a shared volume: the workers' working directory is not this one.
    data, model, labels, predicted_labels = (
        str(tmp_path / name) for name in ("blobs.zarr", "model.zarr", "labels.zarr", "predicted.zarr")
    )
    made = run_cli(
        "make-data",
        data,
        "--samples",
        "24000",
        "--features",
        "16",
        "--clusters",
        "20",
        "--cluster-std",
        "3.0",
        "--chunk-rows",
        "2000",
        "--seed",
        "1",
        cwd=tmp_path,
    )
    assert made["n_samples"] == 24000
    fitted = run_cli(
        "fit",
        data,
        "--array",
        "X",
        "-k",
        "20",
        "--seed",
        "7",
        "--scheduler",
        address,
        "--out",
        model,
        "--labels",
        labels,
        "-q",
        cwd=tmp_path,
    )
    predicted = run_cli(
        "predict", model, data, "--array", "X", "--labels", predicted_labels, "--scheduler", address, cwd=tmp_path
    )
    assert fitted["workers"] == 2 and predicted["labels"] == predicted_labels

    # The same fit in this process, on the local threaded scheduler.
    with dask.config.set({"scheduler-address": None}):
        local = daskmeans.KMeans(n_clusters=20, random_state=7, client=None)
        local.fit(daskmeans.open_input(data, array="X"))
        local_labels = np.asarray(local.labels_)
    remote = daskmeans.load(model)
    assert fitted["n_iter"] == local.n_iter_ > 2, "the data should need several Lloyd iterations"
    np.testing.assert_array_equal(remote.cluster_centers_, local.cluster_centers_)
    assert remote.inertia_ == local.inertia_
    np.testing.assert_array_equal(zarr.open_array(labels, mode="r")[:], local_labels)
    np.testing.assert_array_equal(zarr.open_array(predicted_labels, mode="r")[:], local_labels)

    # The preload had compiled everything the passes used: the fit compiled nothing on the workers.
    with Client(address, set_as_default=False) as client:
        assert client.run(compiled_signatures) == signatures_before


def test_dask_daskmeans_is_the_daskmeans_cli(tmp_path):
    """Dask's CLI finds the ``dask_cli`` entry point (package metadata) and runs the same commands."""
    from click.testing import CliRunner

    from daskmeans.cli import main
    from daskmeans.datasets import make_blobs_zarr

    script = Path(sys.executable).parent / "dask"  # the `dask` command of this environment
    command = [str(script), "daskmeans"] if script.exists() else dask_command("daskmeans")
    store = make_blobs_zarr(str(tmp_path / "tiny.zarr"), 100, 3, 2, random_state=0)
    own_help = CliRunner().invoke(main, ["--help"], prog_name="daskmeans")
    own_info = CliRunner().invoke(main, ["info", store, "--json"])
    assert own_help.exit_code == 0 and own_info.exit_code == 0

    done = subprocess.run([*command, "--help"], capture_output=True, text=True, env=base_env(), timeout=120)
    assert done.returncode == 0, f"{' '.join(command)} --help:\n{done.stderr}"

    def command_names(help_text):
        # dask's CLI wraps help at its own width: compare the commands, not the wrapped summaries
        lines = help_text.split("Commands:")[1].splitlines()
        return [line.split()[0] for line in lines if line.startswith("  ") and not line.startswith("   ")]

    assert command_names(done.stdout) == command_names(own_help.output)
    info = subprocess.run(
        [*command, "info", store, "--json"], capture_output=True, text=True, env=base_env(), timeout=120
    )
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout) == json.loads(own_info.output)


def test_out_of_core_notebook_uses_the_configured_cluster(loopback_cluster, tmp_path):
    """With DASK_SCHEDULER_ADDRESS set (as in the Jupyter pod of the dask chart) the notebook runs on that cluster."""
    from test_notebooks import execute_notebook, text_output

    notebook = execute_notebook(
        ROOT / "notebooks" / "02-out-of-core-on-a-cluster.ipynb",
        tmp_path,
        env={"DASK_SCHEDULER_ADDRESS": loopback_cluster.address, "DASK_GATEWAY__ADDRESS": None},
        parameters={"N_SAMPLES": 40_000, "MAX_TIME": 5.0},
    )
    output = text_output(notebook)
    assert f"connected to the cluster at {loopback_cluster.address}: 2 workers" in output
    assert (tmp_path / "daskmeans-out-of-core" / "labels.zarr").is_dir()


# -- the TLS option of deploy/helm, for real ---------------------------------------------------------------------


def resolve_env(entries: list[dict], secrets: dict[str, dict[str, str]]) -> dict[str, str]:
    """Kubernetes ``env`` entries -> variables: literal values, and ``secretKeyRef``s looked up in ``secrets``
    (an optional reference to an absent Secret is left out, as the kubelet does)."""
    env = {}
    for entry in entries:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
            continue
        ref = entry["valueFrom"]["secretKeyRef"]
        if ref["name"] in secrets:
            env[entry["name"]] = secrets[ref["name"]][ref["key"]]
        elif not ref.get("optional", False):
            raise KeyError(f"{entry['name']} needs the Secret {ref['name']}")
    return env


def replace_option(args: list[str], option: str, value: str) -> list[str]:
    """Set ``option``'s value in an argument list (``--opt value`` or ``--opt=value``)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == option:
            out += [option, value]
            skip = True
        elif arg.startswith(option + "="):
            out.append(f"{option}={value}")
        else:
            out.append(arg)
    return out


def test_helm_tls_values_secure_a_real_cluster(tmp_path):
    """Scheduler, worker and notebook started with the command lines and environments that dask-values.yaml plus
    dask-values-tls.yaml give the pods: the cluster works over TLS and refuses plain TCP."""
    pytest.importorskip("cryptography", reason="cryptography is needed to make a test certificate")
    from distributed import Security
    from test_deploy import DASK_TLS_VALUES, DASK_VALUES, dask_chart_objects, load, merge_values

    objects = dask_chart_objects(merge_values(load(DASK_VALUES), load(DASK_TLS_VALUES)))
    containers = {
        part: objects[part]["spec"]["template"]["spec"]["containers"][0] for part in ("scheduler", "worker", "jupyter")
    }
    certificate = Security.temporary()  # one self-signed certificate, as the README's openssl command makes
    secrets = {
        "daskmeans-tls": {
            "ca.crt": certificate.tls_ca_file,
            "tls.crt": certificate.tls_scheduler_cert,
            "tls.key": certificate.tls_scheduler_key,
        }
    }
    local_paths = {"DASK_TEMPORARY_DIRECTORY": str(tmp_path / "scratch")}  # the volume's path
    envs = {
        part: base_env(**{**resolve_env(container["env"], secrets), **local_paths})
        for part, container in containers.items()
    }
    for env in envs.values():  # the image's cache path: this suite's own cache instead, already warm
        env.pop("NUMBA_CACHE_DIR", None)
        if "NUMBA_CACHE_DIR" in os.environ:
            env["NUMBA_CACHE_DIR"] = os.environ["NUMBA_CACHE_DIR"]

    scheduler_args = containers["scheduler"]["args"]
    assert scheduler_args[0] == "dask-scheduler"
    scheduler_args = replace_option(replace_option(scheduler_args[1:], "--port", "0"), "--dashboard-address", ":0")
    worker_args = containers["worker"]["args"]
    assert worker_args[0] == "dask-worker" and worker_args[1] == "daskmeans-scheduler:8786"
    worker_args = replace_option(replace_option(worker_args[2:], "--nthreads", "1"), "--dashboard-address", ":0")

    processes = Processes(tmp_path)
    try:
        scheduler_file = tmp_path / "scheduler.json"
        processes.start(
            "scheduler",
            dask_command("scheduler", *scheduler_args, "--host", "127.0.0.1", "--scheduler-file", str(scheduler_file)),
            envs["scheduler"],
        )
        address = wait_for_scheduler_file(scheduler_file, processes)
        assert address.startswith("tls://127.0.0.1:")
        host_port = address.removeprefix("tls://")  # the chart gives the worker the address without a scheme
        processes.start("worker", dask_command("worker", host_port, *worker_args), envs["worker"])
        client_security = Security(
            tls_ca_file=certificate.tls_ca_file,
            tls_client_cert=certificate.tls_client_cert,
            tls_client_key=certificate.tls_client_key,
            require_encryption=True,
        )
        wait_for_workers(address, 1, processes, security=client_security)
        assert "daskmeans.preload: warmed" in processes.log("worker")

        # The notebook pod: `Client()` with only the chart's DASK_SCHEDULER_ADDRESS (no scheme) and the TLS env.
        notebook_code = (
            "import numpy as np, daskmeans\n"
            "from distributed import Client\n"
            "client = Client(timeout=30)\n"
            "X = np.random.default_rng(0).normal(size=(2000, 4)) + np.repeat(np.eye(4) * 8, 500, axis=0)\n"
            "model = daskmeans.KMeans(n_clusters=4, random_state=0).fit(X)\n"
            "print(client.scheduler.address, sorted(np.bincount(model.labels_).tolist()))\n"
        )
        notebook_env = dict(envs["jupyter"], DASK_SCHEDULER_ADDRESS=host_port)
        done = subprocess.run(
            [sys.executable, "-c", notebook_code], capture_output=True, text=True, env=notebook_env, timeout=180
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == [address, "[500,", "500,", "500,", "500]"]

        plain = subprocess.run(
            [sys.executable, "-c", f"from distributed import Client; Client('tcp://{host_port}', timeout=5)"],
            capture_output=True,
            text=True,
            env=base_env(),
            timeout=120,
        )
        assert plain.returncode != 0, "a plain TCP client must be refused"
        processes.check_alive()
    finally:
        processes.stop()
