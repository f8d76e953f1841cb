"""Faults around the real ``daskmeans`` command, made with real processes: scheduler addresses this installation
cannot use, a port that accepts connections and never answers, the scheduler killed during a fit, Ctrl-C to the
command's process group. Each ends with one line (or JSON with --json), no traceback, and no output written."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
from test_real_cluster import Processes, base_env, dask_command, wait_for_scheduler_file, wait_for_workers

from daskmeans.datasets import make_blobs_zarr

pytestmark = pytest.mark.slow

#: A fit that runs for many seconds on two workers of one thread (400,000 x 16 float32, k = 200, up to 1000 plain
#: Lloyd iterations with no tolerance): killed long before it could end.
LONG_FIT = (
    "--array",
    "X",
    "-k",
    "200",
    "--seed",
    "0",
    "--max-iter",
    "1000",
    "--param",
    "tol=0",
    "--param",
    "algorithm=lloyd",
)


def daskmeans_command(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "daskmeans", *map(str, args)],
        capture_output=True,
        text=True,
        env=base_env(),
        timeout=timeout,
    )


def assert_one_line(returncode, stderr, *fragments, status=1):
    assert returncode == status, (returncode, stderr[-3000:])
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-5000:]
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, stderr[-3000:]
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.fixture(scope="module")
def long_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("long") / "blobs.zarr"
    make_blobs_zarr(path, 400_000, 16, 20, chunk_rows=25_000, random_state=0)
    return path


@pytest.fixture(scope="module")
def small_npy(tmp_path_factory):
    import numpy as np

    path = tmp_path_factory.mktemp("small") / "small.npy"
    np.save(path, np.random.default_rng(0).random((100, 3), dtype=np.float32))
    return path


# -- addresses this installation cannot use ----------------------------------------------------------------------


def test_a_tls_address_without_tls_settings_says_what_is_needed(small_npy):
    done = daskmeans_command("fit", small_npy, "-k", 2, "--quiet", "--scheduler", "tls://127.0.0.1:9")
    assert_one_line(
        done.returncode, done.stderr, "tls://127.0.0.1:9", "no TLS settings", "DASK_DISTRIBUTED__COMM__TLS__CA_FILE"
    )


def test_a_tls_address_without_tls_settings_is_json_with_json(small_npy):
    done = daskmeans_command("fit", small_npy, "-k", 2, "--json", "--scheduler", "tls://127.0.0.1:9")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    error = json.loads(done.stdout)
    assert error["type"] == "SchedulerConnectionError" and "TLS" in error["error"]


def test_a_ucx_address_says_which_package_is_missing(small_npy):
    from distributed.comm.registry import get_backend

    try:
        get_backend("ucx").get_connector()
    except Exception:  # noqa: BLE001 - the transport cannot start: what the command must say
        pass
    else:
        pytest.skip("this installation has a working ucx:// transport")
    done = daskmeans_command("fit", small_npy, "-k", 2, "--quiet", "--scheduler", "ucx://127.0.0.1:9")
    assert_one_line(done.returncode, done.stderr, "ucx://", "distributed-ucxx")


# -- a port that accepts and never answers ------------------------------------------------------------------------


@pytest.fixture
def silent_port():
    """A plain TCP server on loopback that accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join(5)
        for connection in accepted:
            connection.close()
        server.close()


def test_a_silent_port_gives_up_after_the_connect_timeout(small_npy, silent_port):
    """The command's own 3 s timeout ends the wait (the message names it), not the default one: the command
    ends by itself, well within the run's deadline."""
    port, accepted = silent_port
    done = daskmeans_command(
        "fit", small_npy, "-k", 2, "--quiet", "--scheduler", f"tcp://127.0.0.1:{port}", "--connect-timeout", 3
    )
    assert_one_line(done.returncode, done.stderr, f"127.0.0.1:{port}", "did not answer within 3 s")
    assert accepted, "the command reached the server"


def test_the_api_connect_honours_its_timeout_on_a_silent_port(silent_port):
    from daskmeans import SchedulerConnectionError
    from daskmeans.engine.client import connect

    outcome = []

    def attempt():
        try:
            connect(f"tcp://127.0.0.1:{silent_port[0]}", timeout="2s")
        except Exception as error:  # noqa: BLE001 - checked below
            outcome.append(error)

    thread = threading.Thread(target=attempt, daemon=True)  # a hang must fail the test, not stop the run
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "connect() still waits after 60 s"
    assert isinstance(outcome[0], SchedulerConnectionError) and "did not answer within 2 s" in str(outcome[0])


# -- faults during a fit ------------------------------------------------------------------------------------------


def start_and_wait_for(command: list[str], marker: str, timeout: float = 180):
    """Start ``command`` in a process group of its own; return it once ``marker`` appeared on its stderr, with
    a function that returns all of its stderr once it has ended."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=base_env(), start_new_session=True
    )
    chunks = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: process.stderr.read(64), "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    while marker not in "".join(chunks):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            reader.join(5)
            raise AssertionError(f"{marker!r} never appeared:\n{''.join(chunks)[-3000:]}")
        time.sleep(0.05)

    def stderr_when_done():
        reader.join(60)
        return "".join(chunks)

    return process, stderr_when_done


def test_the_scheduler_killed_during_a_fit_is_one_line(tmp_path, long_data):
    processes = Processes(tmp_path)
    try:
        scheduler_file = tmp_path / "scheduler.json"
        scheduler = processes.start(
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
        processes.start(
            "worker",
            dask_command(
                "worker",
                address,
                "--nworkers",
                "2",
                "--nthreads",
                "1",
                "--no-dashboard",
                "--local-directory",
                str(tmp_path / "worker"),
            ),
            base_env(),
        )
        wait_for_workers(address, 2, processes)
        outputs = tmp_path / "outputs"
        outputs.mkdir()
        fit, stderr = start_and_wait_for(
            [
                sys.executable,
                "-m",
                "daskmeans",
                "fit",
                str(long_data),
                *LONG_FIT,
                "--scheduler",
                address,
                "--out",
                str(outputs / "model.zarr"),
                "--labels",
                str(outputs / "labels.zarr"),
            ],
            "k-means iterations",
        )
        os.killpg(scheduler.pid, signal.SIGKILL)
        fit.wait(120)
        assert_one_line(fit.returncode, stderr(), "Lost the Dask scheduler", address)
        assert os.listdir(outputs) == []
    finally:
        processes.stop()


def test_ctrl_c_during_a_fit_on_local_worker_processes(tmp_path, long_data):
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    fit, stderr = start_and_wait_for(
        [
            sys.executable,
            "-m",
            "daskmeans",
            "fit",
            str(long_data),
            *LONG_FIT,
            "--workers",
            "2",
            "--threads-per-worker",
            "1",
            "--out",
            str(outputs / "model.zarr"),
            "--labels",
            str(outputs / "labels.zarr"),
        ],
        "k-means iterations",
    )
    os.killpg(fit.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground process group
    try:
        fit.wait(120)
    except subprocess.TimeoutExpired:
        os.killpg(fit.pid, signal.SIGKILL)
        raise AssertionError(f"the fit still ran 120 s after Ctrl-C; its stderr:\n{stderr()[-5000:]}") from None
    assert_one_line(fit.returncode, stderr(), "interrupted", status=130)  # stopped by Ctrl-C, not by its end
    assert os.listdir(outputs) == []
    assert group_ends(fit.pid, within=60), "a process of the command's group (a worker) outlived it"


def group_ends(group: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    os.killpg(group, signal.SIGKILL)
    return False


#: A command whose clean-up after Ctrl-C never ends (as a cluster close that waits on a worker forever), with a
#: child process that ignores Ctrl-C (as the cluster's workers do): only the deadline can end it.
STUCK_AFTER_CTRL_C = """
import subprocess, sys, time
from daskmeans.cli import main as command
from daskmeans.cli.interrupts import interrupts_with_deadline

command.wants_json = "--json" in sys.argv
with interrupts_with_deadline(command.report_interrupted, grace_seconds=2):
    child = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGINT, "
                              "signal.SIG_IGN); print(flush=True); time.sleep(600)"], stdout=subprocess.PIPE)
    child.stdout.readline()
    try:  # the pid is printed inside the try: a Ctrl-C sent once it is read must land in the stuck clean-up
        print(child.pid, flush=True)
        time.sleep(600)
    finally:
        while True:
            try:
                time.sleep(600)
            except KeyboardInterrupt:
                pass
"""


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_command_stuck_after_ctrl_c_stops_at_its_deadline_and_takes_its_workers_with_it(as_json):
    process = subprocess.Popen(
        [sys.executable, "-c", STUCK_AFTER_CTRL_C, *(["--json"] if as_json else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=base_env(),
        start_new_session=True,
    )
    child = int(process.stdout.readline())
    os.killpg(process.pid, signal.SIGINT)
    start = time.monotonic()
    try:
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        ended = process.poll()
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(
            "the deadline did not end the command"
            if ended is None
            else f"the command exited ({ended}) but left its child holding its output"
        ) from None
    assert time.monotonic() - start > 1.5, "the command ended before its 2 s grace"  # only the deadline ends it
    assert process.returncode == 130, stderr
    if as_json:
        error = json.loads(stdout.splitlines()[-1])
        assert error["type"] == "KeyboardInterrupt" and error["exit_status"] == 130
        assert "did not close within 2 s" in error["error"]
    else:
        assert_one_line(process.returncode, stderr, "interrupted (Ctrl-C)", "did not close within 2 s", status=130)
    deadline = time.monotonic() + 30
    while not process_gone(child):
        assert time.monotonic() < deadline, "the command's child outlived it"
        time.sleep(0.1)


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie nobody reaped counts as ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
