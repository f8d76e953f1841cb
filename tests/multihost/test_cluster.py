"""The multi-host cluster itself: hosts share no files and no network with the machine, workers get no endpoint,
traffic is counted, shaped and cut, a host's processes can be killed and its service started again, leftovers of
a killed run are removed and the bad uses of the helper fail with what to do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from . import netns
from .cluster import WORK, MultiHostCluster, NamespacesUnavailable, ShapingUnsupported

pytestmark = pytest.mark.slow

CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))"


def connects(cluster, host, address, port, timeout=3.0) -> bool:
    """Whether a TCP connection from ``host`` to ``address:port`` opens within ``timeout`` seconds."""
    done = cluster.python(host, ["-c", CONNECT, address, str(port), str(timeout)], check=False, timeout=timeout + 30)
    return done.returncode == 0


def worker_count(cluster) -> int:
    done = cluster.driver("client", ["workers", "--scheduler", cluster.scheduler_address])
    return len(json.loads(done.stdout))


def test_each_host_has_its_own_files(multihost):
    multihost.run("worker-0", ["sh", "-c", "echo written > here.txt && echo written > /tmp/there.txt"])
    assert "here.txt" in multihost.listdir("worker-0")
    assert multihost.run("worker-0", ["pwd"]).stdout.strip() == WORK
    for other in ("worker-1", "client", "scheduler"):
        assert multihost.listdir(other) == []
        assert "there.txt" not in multihost.listdir(other, "/tmp")
    assert not os.path.exists(os.path.join(WORK, "here.txt")) and not os.path.exists("/tmp/there.txt")
    multihost.run("worker-0", ["rm", "here.txt", "/tmp/there.txt"])


def test_hosts_reach_each_other_and_the_machine_stays_apart(multihost):
    assert connects(multihost, "client", multihost.address("scheduler"), multihost.SCHEDULER_PORT)
    assert connects(multihost, "worker-1", multihost.address("s3"), multihost.S3_PORT)
    routes = subprocess.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    assert multihost.address("scheduler").rsplit(".", 1)[0] + "." not in routes  # no route from the machine
    addresses = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    assert multihost.address("scheduler").rsplit(".", 1)[0] + "." not in addresses
    assert multihost.name not in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


def test_workers_get_credentials_and_no_endpoint(multihost):
    report = json.loads(multihost.driver("client", ["workers", "--scheduler", multihost.scheduler_address]).stdout)
    assert len(report) == multihost.n_workers
    for worker in report.values():
        assert worker["cwd"] == WORK
        assert worker["environment"]["AWS_ACCESS_KEY_ID"] == "testing"
        assert not [name for name in worker["environment"] if "ENDPOINT" in name or name.startswith("DASK_")]


def test_counters_count_the_bytes_a_host_sends(multihost):
    before = multihost.counters("client")
    assert connects(multihost, "client", multihost.address("s3"), multihost.S3_PORT)
    after = multihost.counters("client")
    assert after["tx_bytes"] > before["tx_bytes"] and after["tx_packets"] > before["tx_packets"]
    assert after["rx_bytes"] > before["rx_bytes"]


def put_object(cluster, size: int) -> float:
    """Seconds the client host takes to PUT ``size`` bytes into a new bucket on the S3 server."""
    script = (
        "import json, sys, time, uuid, s3fs\n"
        "fs = s3fs.S3FileSystem(skip_instance_cache=True, **json.loads(sys.argv[1]))\n"
        "bucket = 'rate-' + uuid.uuid4().hex[:8]; fs.mkdir(bucket)\n"
        "start = time.perf_counter(); fs.pipe(bucket + '/blob', b'x' * int(sys.argv[2]))\n"
        "print(time.perf_counter() - start)\n"
    )
    done = cluster.python("client", ["-c", script, json.dumps(cluster.storage_options()), str(size)])
    return float(done.stdout.strip())


def test_a_rate_limit_slows_what_a_host_sends_and_restore_lifts_it(multihost):
    size = 2_000_000  # 16 Mbit: at least 2 s at 8 Mbit/s, whatever else the machine does
    multihost.shape("client", rate_mbit=8, direction="out")
    try:
        assert put_object(multihost, size) >= 0.8 * size * 8 / 8e6
    finally:
        multihost.restore("client")
    qdiscs = subprocess.run(
        ["tc", "-n", multihost.hosts["client"].netns, "qdisc", "show", "dev", "eth0"], text=True, capture_output=True
    ).stdout
    assert "tbf" not in qdiscs and "netem" not in qdiscs


def test_delay_and_loss_need_netem(multihost):
    if multihost.netem_available:
        multihost.shape("client", delay_ms=200, direction="out")
        try:
            timed = "import time; start = time.monotonic()\n" + CONNECT + "\nprint(time.monotonic() - start)"
            address, port = multihost.address("scheduler"), str(multihost.SCHEDULER_PORT)
            done = multihost.python("client", ["-c", timed, address, port, "10"])
            assert float(done.stdout) >= 0.2  # the SYN waited 200 ms on its way out
        finally:
            multihost.restore("client")
    else:
        with pytest.raises(ShapingUnsupported, match="no netem"):
            multihost.shape("client", delay_ms=50)
        with pytest.raises(ShapingUnsupported, match="rate_mbit alone works"):
            multihost.shape("client", loss_pct=1, rate_mbit=100)
        multihost.restore("client")


def test_a_cut_host_stops_answering_until_restored(multihost):
    address, port = multihost.address("scheduler"), multihost.SCHEDULER_PORT
    multihost.cut("scheduler")
    try:
        done = multihost.python("client", ["-c", CONNECT, address, str(port), "2"], check=False, timeout=60)
        assert done.returncode != 0 and "timed out" in done.stderr  # silence, not a refusal
    finally:
        multihost.restore("scheduler")
    assert connects(multihost, "client", address, port)
    multihost.wait_ready(timeout=60)


def test_a_killed_worker_leaves_and_a_restarted_one_joins(multihost):
    assert multihost.kill("worker-1")
    deadline = time.monotonic() + 60
    while worker_count(multihost) != 1:
        assert time.monotonic() < deadline, "the scheduler still lists the killed worker after 60 s"
        time.sleep(1)
    assert multihost.pids("worker-1") == []
    multihost.start_worker("worker-1")
    multihost.wait_ready(timeout=120)
    assert worker_count(multihost) == 2


def test_leftovers_of_a_killed_run_are_removed_and_live_clusters_kept():
    try:
        netns.check_prerequisites()
    except NamespacesUnavailable as error:
        pytest.skip(str(error))
    owner = subprocess.Popen(["sleep", "60"])  # the run that will be killed
    with netns.state_lock():
        left, live = netns.choose_subnet_index(), None
        netns.write_record(f"{netns.PREFIX}{left}", owner.pid)
        netns.make_bridge(f"{netns.PREFIX}{left}-br")
        live = netns.choose_subnet_index()
        netns.write_record(f"{netns.PREFIX}{live}", os.getpid())
        netns.make_bridge(f"{netns.PREFIX}{live}-br")
    try:
        assert not netns.is_abandoned(f"{netns.PREFIX}{left}")
        owner.kill()
        owner.wait()
        assert f"{netns.PREFIX}{left}" in netns.remove_abandoned()
        present = netns.clusters_present()
        assert f"{netns.PREFIX}{left}" not in present and f"{netns.PREFIX}{live}" in present
        assert not netns.record_path(f"{netns.PREFIX}{left}").exists()
    finally:
        netns.remove_cluster(f"{netns.PREFIX}{left}")
        netns.remove_cluster(f"{netns.PREFIX}{live}")


def test_bad_uses_say_what_to_do(multihost):
    with pytest.raises(ValueError, match="at least one worker"):
        MultiHostCluster(n_workers=0)
    with pytest.raises(KeyError, match="its hosts are scheduler, worker-0"):
        multihost.run("worker-7", ["true"])
    with pytest.raises(ValueError, match="choose 'out', 'in' or 'both'"):
        multihost.shape("client", rate_mbit=10, direction="up")
    with pytest.raises(LookupError, match="no multi-host cluster 'dmh999'"):
        MultiHostCluster.attach("dmh999")


def test_a_user_that_is_not_root_is_told_so():
    script = "import os; from multihost.netns import check_prerequisites\n"
    if os.geteuid() == 0:
        script += "os.setuid(65534)\n"  # after the imports: a user that cannot read this Python's install runs it
    done = subprocess.run(
        [sys.executable, "-c", script + "check_prerequisites()"],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert done.returncode != 0 and "needs root" in done.stderr
