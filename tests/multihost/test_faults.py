"""Faults on the network in the middle of a fit from S3, on hosts that share no disk.

Each test starts ``daskmeans fit`` on the client host (input on the S3 host, model and labels written back to
it), waits until the fit is iterating on the workers, then breaks the network: a worker host cut off for 20 s, a
worker host killed, the S3 host unreachable for 10 s. Exact k-means with ``tol=0`` on overlapping blobs runs
about 60 iterations, each a pass over the blocks read from S3 by the workers (``driver_rows=0``: no iteration on
the client), so the fault lands between the first and the last iteration.

A fit either ends as the fit without the fault (centers bit for bit, the same labels), or stops with exit status
not 0 and one line on stderr that says what happened; either way the bucket holds no output that looks valid but
is not: the model and the labels are complete and load, or are absent, or are refused by ``daskmeans.load`` as
"not completely written". Every fault here is one Dask recovers from (a cut worker's connections resume when it
is back, the tasks of a killed worker run again on the other one, reads of S3 are retried), so each test asserts
the same result, and that the fit ends within a deadline of its own. The scheduler host killed is a fault no fit
survives without a checkpoint: that test asserts the clean stop. The client host killed, with the fit's checkpoint in
S3, is survived by running the same command on another host: it resumes from the checkpoint to the same result.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from .conftest import logs_of
from .driver import decode

pytestmark = pytest.mark.slow

ROWS, FEATURES, BLOBS, K, CHUNK_ROWS, SEED = 20_000, 4, 400, 16, 2000, 0
#: The fault starts once the progress bar shows this many iterations (of about 60).
FAULT_AT_ITERATION = 8
#: Seconds a fit may take beyond three times the fit without a fault plus the fault itself, before it counts as
#: hung: Linux retransmits a silently dropped TCP segment with a back-off that reaches tens of seconds.
DEADLINE_MARGIN = 180
#: Seconds from the scheduler's death to the end of the command (the client's attempts to reconnect included).
STOP_DEADLINE = 150
ITERATIONS = re.compile(r"iterations: (\d+) of")


def daskmeans_executable() -> str:
    """The ``daskmeans`` command of this Python's environment."""
    found = shutil.which("daskmeans", path=str(Path(sys.executable).parent)) or shutil.which("daskmeans")
    assert found, "the daskmeans command is not installed (pip install -e .)"
    return found


class FitOnClient:
    """``daskmeans fit`` running on the client host (or ``host``), with ``extra`` arguments, its stderr read as it
    comes (progress bars end lines with carriage returns, so both end a line here)."""

    def __init__(self, cluster, bucket: str, name: str, extra: tuple = (), host: str = "client"):
        self.cluster = cluster
        self.model, self.labels = f"{bucket}/{name}-model.zarr", f"{bucket}/{name}-labels.zarr"
        argv = [daskmeans_executable(), "fit", f"{bucket}/data.zarr", "--array", "X", "-k", str(K)]
        argv += ["--max-iter", "500", "--param", "tol=0", "--param", "driver_rows=0", "--random-state", str(SEED)]
        argv += ["--scheduler", cluster.scheduler_address, "--storage-option", f"endpoint_url={cluster.s3_endpoint}"]
        argv += ["--out", self.model, "--labels", self.labels, *extra]
        self.lines: list[str] = []
        self.started = time.monotonic()
        self.process = cluster.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for chunk in iter(lambda: self.process.stderr.read1(4096), b""):
            text = chunk.decode(errors="replace").replace("\r", "\n")
            self.lines.extend(line for line in text.split("\n") if line.strip())

    def iteration(self) -> int:
        """The last iteration the progress bar showed (0 before the iterations)."""
        for line in reversed(self.lines):
            found = ITERATIONS.search(line)
            if found:
                return int(found.group(1))
        return 0

    def wait_for_iteration(self, iteration: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.iteration() < iteration:
            if self.process.poll() is not None:
                pytest.fail(f"the fit ended before iteration {iteration}:\n" + "\n".join(self.lines[-20:]))
            if time.monotonic() > deadline:
                pytest.fail(f"no iteration {iteration} within {timeout:.0f} s:\n" + "\n".join(self.lines[-20:]))
            time.sleep(0.1)

    def finish(self, timeout: float) -> tuple[int, str, float]:
        """Wait for the fit to end: ``(exit status, stdout, seconds since it started)``; fail if it runs past
        ``timeout`` seconds from its start (it is killed)."""
        try:
            returncode = self.process.wait(timeout=max(1.0, self.started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(
                f"the fit did not end within {timeout:.0f} s (hung?):\n"
                + "\n".join(self.lines[-20:])
                + f"\n{logs_of(self.cluster)}"
            )
        self.reader.join(timeout=10)
        return returncode, self.process.stdout.read().decode(errors="replace"), time.monotonic() - self.started


def on_client_python(cluster, code: str) -> str:
    """Run Python ``code`` on the client host; its stdout."""
    done = cluster.python("client", ["-c", code], check=False, timeout=300)
    assert done.returncode == 0, f"{code}\nfailed:\n{done.stderr[-3000:]}"
    return done.stdout


def read_outputs(cluster, fit: FitOnClient) -> dict:
    """What ``daskmeans.load`` makes of the model, and the labels array, read on the client host: for each,
    ``{"state": "complete"|"absent"|"refused", ...}`` with ``centers``/``labels`` when complete and the message
    when refused."""
    code = f"""
import json, sys, zarr, daskmeans
from daskmeans.storage.publish import check_complete
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from driver import encode
options = {{"endpoint_url": {cluster.s3_endpoint!r}}}
result = {{}}
for key, url in (("model", {fit.model!r}), ("labels", {fit.labels!r})):
    try:
        check_complete(url, url, ValueError, options)
    except FileNotFoundError:
        result[key] = {{"state": "absent"}}
        continue
    except ValueError as error:
        result[key] = {{"state": "refused", "message": str(error)}}
        continue
    if key == "model":
        value = daskmeans.load(url, storage_options=options).cluster_centers_
    else:
        value = zarr.open_array(url, mode="r", storage_options=options)[:]
    result[key] = {{"state": "complete", "value": encode(value)}}
print(json.dumps(result))
"""
    result = json.loads(on_client_python(cluster, code).strip().splitlines()[-1])
    for entry in result.values():
        if "value" in entry:
            entry["value"] = decode(entry["value"])
    return result


def bucket_names(cluster, bucket: str) -> list[str]:
    """The names at the top of ``bucket`` (``s3://NAME``), listed from the client host."""
    code = f"""
import s3fs
filesystem = s3fs.S3FileSystem(skip_instance_cache=True, endpoint_url={cluster.s3_endpoint!r})
print("\\n".join(sorted(path.rsplit("/", 1)[-1] for path in filesystem.ls({bucket.split("://", 1)[1]!r}))))
"""
    return on_client_python(cluster, code).split()


def same_bits(actual, expected) -> bool:
    return actual.dtype == expected.dtype and actual.shape == expected.shape and actual.tobytes() == expected.tobytes()


@pytest.fixture(scope="module")
def bucket(multihost):
    """A bucket with the overlapping blobs written from the client host as ``data.zarr/X``."""
    name = f"s3://faults-{uuid.uuid4().hex[:10]}"
    args = ["write-data", f"{name}/data.zarr", "--storage-options", json.dumps(multihost.storage_options())]
    args += ["--rows", str(ROWS), "--features", str(FEATURES), "--centers", str(BLOBS)]
    args += ["--chunk-rows", str(CHUNK_ROWS), "--seed", str(SEED)]
    multihost.driver("client", args)
    return name


@pytest.fixture(scope="module")
def reference(multihost, bucket):
    """The fit without a fault: ``{"centers", "labels", "seconds"}``."""
    fit = FitOnClient(multihost, bucket, "reference")
    returncode, stdout, seconds = fit.finish(timeout=900)
    assert returncode == 0, "\n".join(fit.lines[-20:]) + f"\n{logs_of(multihost)}"
    outputs = read_outputs(multihost, fit)
    assert outputs["model"]["state"] == outputs["labels"]["state"] == "complete", outputs
    assert fit.iteration() > 3 * FAULT_AT_ITERATION, f"the fit ran {fit.iteration()} iterations only: too short"
    return {"centers": outputs["model"]["value"], "labels": outputs["labels"]["value"], "seconds": seconds}


@pytest.fixture
def whole_cluster(multihost):
    """After the test, every host reconnected and unshaped, and every worker killed by the test started again."""
    yield multihost
    for host in multihost.host_names:
        multihost.restore(host)
    if not multihost.pids("scheduler"):  # a new scheduler, and workers that join it
        for worker in multihost.worker_names:
            multihost.kill(worker)
            deadline = time.monotonic() + 30
            while multihost.pids(worker) and time.monotonic() < deadline:
                time.sleep(0.2)
        multihost.start_scheduler()
    for worker in multihost.worker_names:
        if not multihost.pids(worker):
            multihost.start_worker(worker)
    multihost.wait_ready(timeout=120)


def check_outcome(cluster, fit: FitOnClient, reference: dict, fault_seconds: float, bucket: str) -> None:
    """The fit ended in time with the reference's result, its outputs complete; the bucket holds nothing else of
    it and the client's working directory is empty."""
    returncode, stdout, seconds = fit.finish(timeout=3 * reference["seconds"] + fault_seconds + DEADLINE_MARGIN)
    if returncode != 0:
        last = check_clean_stop(cluster, fit)
        pytest.fail(f"the fit stopped (exit status {returncode}) instead of recovering: {last}")
    outputs = read_outputs(cluster, fit)
    assert outputs["model"]["state"] == outputs["labels"]["state"] == "complete", outputs
    assert same_bits(outputs["model"]["value"], reference["centers"]), "the centers differ from the fit without a fault"
    assert same_bits(outputs["labels"]["value"], reference["labels"]), "the labels differ from the fit without a fault"
    name = fit.model.rsplit("/", 1)[1].split("-model")[0]
    assert sorted(entry for entry in bucket_names(cluster, bucket) if entry.startswith(f"{name}-")) == [
        f"{name}-labels.zarr",
        f"{name}-model.zarr",
    ], "the fit left something besides its model and labels in the bucket"
    assert cluster.listdir("client") == [], "the fit left files in the client host's working directory"


def check_clean_stop(cluster, fit: FitOnClient) -> str:
    """The failed fit's last line of stderr is one error line, there is no traceback, and its model and labels
    are absent or refused as not completely written; returns the line."""
    last = fit.lines[-1] if fit.lines else ""
    assert "Traceback" not in "\n".join(fit.lines), "\n".join(fit.lines[-30:])
    assert last.startswith("Error: "), f"the last line of stderr is not the error: {last!r}"
    for key, entry in read_outputs(cluster, fit).items():
        assert entry["state"] in ("absent", "refused"), f"the failed fit left a {key} that loads"
        assert entry["state"] == "absent" or "not completely written" in entry["message"], entry
    return last


def test_worker_cut_off_for_20_seconds_mid_fit_gives_the_same_centers(whole_cluster, bucket, reference):
    """Every frame to and from worker-1 dropped for 20 s: its connections stall (no reset, no error) and resume
    when it is back, so the fit goes on with both workers and ends as without the cut."""
    fit = FitOnClient(whole_cluster, bucket, "cut-worker")
    fit.wait_for_iteration(FAULT_AT_ITERATION)
    whole_cluster.cut("worker-1")
    time.sleep(20)
    whole_cluster.restore("worker-1")
    check_outcome(whole_cluster, fit, reference, 20, bucket)


def test_worker_killed_mid_fit_gives_the_same_centers(whole_cluster, bucket, reference):
    """Every process of worker-1 SIGKILLed: the scheduler sees its connections close, runs its tasks (and the
    reads of its blocks) again on worker-0, and the sums are reduced in the same order, so the centers are the
    same bits."""
    fit = FitOnClient(whole_cluster, bucket, "killed-worker")
    fit.wait_for_iteration(FAULT_AT_ITERATION)
    assert whole_cluster.kill("worker-1"), "worker-1 ran nothing to kill"
    check_outcome(whole_cluster, fit, reference, 0, bucket)


def test_s3_unreachable_for_10_seconds_mid_fit_gives_the_same_centers(whole_cluster, bucket, reference):
    """The S3 host drops every frame for 10 s while the workers read blocks from it each pass: the reads stall
    and are retransmitted (or retried by the S3 client) when it is back, and the fit ends as without the cut."""
    fit = FitOnClient(whole_cluster, bucket, "cut-s3")
    fit.wait_for_iteration(FAULT_AT_ITERATION)
    whole_cluster.cut("s3")
    time.sleep(10)
    whole_cluster.restore("s3")
    check_outcome(whole_cluster, fit, reference, 10, bucket)


def test_scheduler_killed_mid_fit_stops_with_one_line_and_no_output(whole_cluster, bucket):
    """Every process of the scheduler host SIGKILLed: the fit cannot end as without the fault (the scheduler held
    every task's state and the workers' results; a new one knows nothing of the fit, and this fit keeps no
    checkpoint), so it must stop within :data:`STOP_DEADLINE` s with one line that says the scheduler was lost,
    and leave no model or labels that load."""
    fit = FitOnClient(whole_cluster, bucket, "killed-scheduler")
    fit.wait_for_iteration(FAULT_AT_ITERATION)
    killed = time.monotonic()
    assert whole_cluster.kill("scheduler"), "the scheduler host ran nothing to kill"
    returncode, _, _ = fit.finish(timeout=killed - fit.started + STOP_DEADLINE)
    assert returncode != 0, "the fit ended well without its scheduler"
    last = check_clean_stop(whole_cluster, fit)
    assert "scheduler" in last.lower(), f"the error does not say the scheduler was lost: {last!r}"


def test_driver_killed_mid_fit_resumes_from_its_s3_checkpoint_on_another_host(whole_cluster, bucket, reference):
    """Every process of the client host SIGKILLed during a fit with ``--checkpoint s3://...``: the same command
    run on another host (the scheduler's, which never saw the first driver's files) resumes from the checkpoint in
    S3, without seeding again, and ends as the fit without the fault, bit for bit."""
    extra = ("--checkpoint", f"{bucket}/checkpoint-of-resumed-elsewhere.ckpt")
    fit = FitOnClient(whole_cluster, bucket, "resumed-elsewhere", extra)
    fit.wait_for_iteration(FAULT_AT_ITERATION)
    assert whole_cluster.kill("client"), "the client host ran nothing to kill"
    returncode, _, _ = fit.finish(timeout=time.monotonic() - fit.started + 60)
    assert returncode != 0, "the fit ended well although its driver was killed"
    assert {entry["state"] for entry in read_outputs(whole_cluster, fit).values()} == {"absent"}
    resumed = FitOnClient(whole_cluster, bucket, "resumed-elsewhere", extra, host="scheduler")
    check_outcome(whole_cluster, resumed, reference, 0, bucket)
    assert not [line for line in resumed.lines if " seeding (" in line], "the resumed fit seeded again"
    shown = [int(found.group(1)) for line in resumed.lines if (found := ITERATIONS.search(line))]
    assert min(count for count in shown if count > 0) > FAULT_AT_ITERATION // 2, f"it counted from the start: {shown}"
