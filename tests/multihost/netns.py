"""Linux network namespaces, a bridge and traffic control for the multi-host test cluster (root only).

Each cluster is named ``dmh<X>``: its bridge lives in the namespace ``dmh<X>-br`` and each of its hosts in
``dmh<X>-<host>``, with addresses in ``10.213.<X>.0/24``. A record of the cluster (its owner's process id and
start time) is kept in :data:`STATE_DIR`, so that a later run can tell the leftovers of a killed run (owner gone)
from a cluster in use by another run on the same machine, and remove only the former.

Nothing here touches the machine's own network namespace: the bridge and every veth pair are made inside the
cluster's namespaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

#: Prefix of the namespaces of every multi-host cluster (``dmh<X>-<host>``).
PREFIX = "dmh"
#: The private range the clusters take their /24 subnets from (``10.213.<X>.0/24``).
NETWORK = ipaddress.ip_network("10.213.0.0/16")
#: The subnet indices ``X`` tried, in order.
SUBNET_INDICES = range(40, 250)
#: Where the records of running clusters (owner process, subnet) live; a tmpfs on most systems.
STATE_DIR = Path("/run/daskmeans-multihost")
#: Name of the bridge inside the bridge namespace, and of each host's interface inside its namespace.
BRIDGE = "br0"
INTERFACE = "eth0"

_NAME = re.compile(rf"^{PREFIX}(\d+)-(\S+)$")


class NamespacesUnavailable(RuntimeError):
    """Network namespaces, veth pairs or a bridge cannot be made here (not root, or a kernel or container that
    does not allow them); the message says which step failed."""


class ShapingUnsupported(RuntimeError):
    """The kernel lacks the queueing discipline a shaping request needs (``netem`` for delay and loss)."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``; raise ``RuntimeError`` with its message when it fails and ``check``."""
    return command(["ip", *args], check=check)


def command(argv: list[str], check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run ``argv`` (a short system command), capturing its output; raise ``RuntimeError`` with the command and
    its error output when it fails and ``check``."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip() or done.stdout}")
    return done


def check_prerequisites() -> None:
    """Raise :class:`NamespacesUnavailable` unless this process is root and ``ip``, ``tc``, ``bridge``,
    ``unshare`` and ``nsenter`` are installed."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise NamespacesUnavailable("the multi-host cluster needs root (network namespaces, mounts); run as root")
    missing = [tool for tool in ("ip", "tc", "bridge", "unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        raise NamespacesUnavailable(f"{', '.join(missing)} not found: install iproute2 and util-linux")


def namespaces() -> list[str]:
    """The names of the network namespaces that exist now."""
    listed = ip("netns", "list", check=False).stdout.split("\n")
    return [line.split()[0] for line in listed if line.strip()]


def namespace_pids(netns: str) -> list[int]:
    """The processes whose network namespace is ``netns``."""
    done = ip("netns", "pids", netns, check=False)
    return [int(pid) for pid in done.stdout.split()]


def kill_pids(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM ``pids``, then SIGKILL those still alive after ``grace`` seconds; wait until they are gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        alive = [pid for pid in pids if _alive(pid)]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            alive = [pid for pid in alive if _alive(pid)]
            time.sleep(0.05)
        if not alive:
            return


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone: its parent reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (with the pid, it names one process), None if gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def remove_namespace(netns: str) -> None:
    """Kill every process in ``netns`` and delete it (its veth ends go with it)."""
    kill_pids(namespace_pids(netns))
    ip("netns", "delete", netns, check=False)


@contextlib.contextmanager
def state_lock():
    """An exclusive lock over the records in :data:`STATE_DIR` (held while a subnet is chosen and claimed)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with open(STATE_DIR / "lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def record_path(cluster: str) -> Path:
    return STATE_DIR / f"{cluster}.json"


def write_record(cluster: str, owner: int | None) -> None:
    """Record that ``cluster`` belongs to process ``owner`` (None: started by hand, kept until taken down)."""
    record = {"owner": owner, "owner_start": None if owner is None else process_start_time(owner)}
    record_path(cluster).write_text(json.dumps(record))


def is_abandoned(cluster: str) -> bool:
    """Whether ``cluster``'s owner is gone (a cluster without a record counts as abandoned; one started by hand
    is never abandoned)."""
    try:
        record = json.loads(record_path(cluster).read_text())
    except (OSError, ValueError):
        return True
    owner = record.get("owner")
    if owner is None:
        return False
    started = process_start_time(owner)
    return started is None or started != record.get("owner_start")


def clusters_present() -> dict[str, list[str]]:
    """The multi-host clusters whose namespaces exist now: cluster name -> its namespaces."""
    found: dict[str, list[str]] = {}
    for name in namespaces():
        match = _NAME.match(name)
        if match:
            found.setdefault(f"{PREFIX}{match.group(1)}", []).append(name)
    return found


def remove_cluster(cluster: str, netns_names: list[str] | None = None) -> None:
    """Remove every namespace of ``cluster`` (processes first, the bridge last) and its record."""
    names = netns_names if netns_names is not None else clusters_present().get(cluster, [])
    for name in sorted(names, key=lambda name: name.endswith("-br")):
        remove_namespace(name)
    with contextlib.suppress(FileNotFoundError):
        record_path(cluster).unlink()


def remove_abandoned() -> list[str]:
    """Remove the clusters left by runs that were killed (owner gone); return their names. Clusters of live
    runs and clusters started by hand are left alone."""
    removed = []
    for cluster, names in clusters_present().items():
        if is_abandoned(cluster):
            remove_cluster(cluster, names)
            removed.append(cluster)
    for stale in STATE_DIR.glob(f"{PREFIX}*.json") if STATE_DIR.exists() else ():
        if stale.stem not in clusters_present() and is_abandoned(stale.stem):
            stale.unlink(missing_ok=True)
    return removed


def routed_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks of this machine's own namespace (addresses and routes), which a subnet must avoid."""
    networks = []
    for line in ip("-4", "route", "show", "table", "all", check=False).stdout.splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("local", "broadcast", "unreachable", "blackhole", "prohibit"):
            first = line.split()[1]
        with contextlib.suppress(ValueError):
            if first != "default":
                networks.append(ipaddress.ip_network(first, strict=False))
    return networks


def choose_subnet_index() -> int:
    """A free ``X`` for ``10.213.X.0/24``: used by no cluster present or recorded, and overlapping no network of
    this machine. Call with :func:`state_lock` held."""
    taken = {int(name[len(PREFIX) :]) for name in clusters_present()}
    if STATE_DIR.exists():
        taken |= {int(path.stem[len(PREFIX) :]) for path in STATE_DIR.glob(f"{PREFIX}*.json")}
    routed = routed_networks()
    for index in SUBNET_INDICES:
        subnet = subnet_of(index)
        if index not in taken and not any(subnet.overlaps(network) for network in routed):
            return index
    raise NamespacesUnavailable(f"no free /24 left in {NETWORK} for another cluster: take some down")


def subnet_of(index: int) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(f"{NETWORK.network_address + (index << 8)}/24")


def make_bridge(netns: str) -> None:
    """A namespace ``netns`` holding the bridge :data:`BRIDGE`, up."""
    ip("netns", "add", netns)
    ip("-n", netns, "link", "set", "lo", "up")
    ip("-n", netns, "link", "add", BRIDGE, "type", "bridge")
    ip("-n", netns, "link", "set", BRIDGE, "up")


def make_host_network(netns: str, bridge_netns: str, port: str, address: str, prefix_length: int) -> None:
    """A namespace ``netns`` whose :data:`INTERFACE` has ``address`` and is joined to the bridge by a veth pair
    whose other end, ``port``, is a port of the bridge in ``bridge_netns``."""
    ip("netns", "add", netns)
    ip("-n", netns, "link", "set", "lo", "up")
    ip("-n", bridge_netns, "link", "add", port, "type", "veth", "peer", "name", INTERFACE, "netns", netns)
    ip("-n", bridge_netns, "link", "set", port, "master", BRIDGE)
    ip("-n", bridge_netns, "link", "set", port, "up")
    ip("-n", netns, "addr", "add", f"{address}/{prefix_length}", "dev", INTERFACE)
    ip("-n", netns, "link", "set", INTERFACE, "up")


def interface_counters(netns: str, interface: str = INTERFACE) -> dict[str, int]:
    """The byte and packet counters of ``interface`` in ``netns`` (``ip -n NETNS -s link``): ``rx_bytes``,
    ``tx_bytes``, ``rx_packets``, ``tx_packets``, ``rx_dropped``, ``tx_dropped``."""
    [link] = json.loads(ip("-n", netns, "-s", "-j", "link", "show", interface).stdout)
    stats = link.get("stats64") or link["stats"]
    return {
        f"{direction}_{name}": int(stats[direction][name])
        for direction in ("rx", "tx")
        for name in ("bytes", "packets", "dropped")
    }


def set_port_state(bridge_netns: str, port: str, forwarding: bool) -> None:
    """Let the bridge forward frames of ``port`` or drop them all, silently (bridge port state 3 or 0)."""
    command(["bridge", "-n", bridge_netns, "link", "set", "dev", port, "state", "3" if forwarding else "0"])


def clear_qdisc(netns: str, interface: str) -> None:
    """Remove the shaping of ``interface`` in ``netns`` (back to the default queue)."""
    command(["tc", "-n", netns, "qdisc", "del", "dev", interface, "root"], check=False)


def set_qdisc(netns: str, interface: str, delay_ms=None, rate_mbit=None, loss_pct=None) -> None:
    """Shape what ``interface`` in ``netns`` sends: ``netem`` for delay and loss (and rate with them), a token
    bucket (``tbf``) for a rate alone, which every kernel with traffic control has.

    Raises
    ------
    ShapingUnsupported
        Delay or loss asked for on a kernel without ``netem``.
    """
    clear_qdisc(netns, interface)
    if delay_ms is None and loss_pct is None:
        if rate_mbit is None:
            return
        rate_bytes = rate_mbit * 1e6 / 8
        burst = max(16_000, int(rate_bytes / 100))  # 10 ms of traffic, at least a few full frames
        argv = ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "200ms"]
    else:
        argv = ["netem", "delay", f"{delay_ms or 0}ms", "loss", f"{loss_pct or 0}%"]
        if rate_mbit is not None:
            argv += ["rate", f"{rate_mbit}mbit"]
    done = command(["tc", "-n", netns, "qdisc", "add", "dev", interface, "root", *argv], check=False)
    if done.returncode != 0:
        if argv[0] == "netem" and "unknown" in done.stderr.lower():
            raise ShapingUnsupported(
                "this kernel has no netem queueing discipline (sch_netem), so delay_ms and loss_pct cannot be "
                "emulated here; rate_mbit alone works (token bucket), and cut() drops all traffic"
            )
        raise RuntimeError(f"tc qdisc add dev {interface} {' '.join(argv)} in {netns} failed: {done.stderr.strip()}")


def netem_available(netns: str, interface: str = INTERFACE) -> bool:
    """Whether the kernel has ``netem`` (tried on ``interface`` in ``netns``, then removed)."""
    done = command(["tc", "-n", netns, "qdisc", "add", "dev", interface, "root", "netem", "delay", "0ms"], check=False)
    clear_qdisc(netns, interface)
    return done.returncode == 0
