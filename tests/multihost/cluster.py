"""A Dask cluster of separate hosts on one Linux machine: network namespaces joined by a bridge (root only).

Hosts: ``scheduler`` (``dask scheduler``), ``worker-0``, ``worker-1``, ... (``dask worker``, one thread each),
``client`` (where the command line and driver scripts run) and ``s3`` (moto's S3 server, a real HTTP server).
Each host is a network namespace with one interface, ``eth0``, on a private /24 (``10.213.X.0/24``); the bridge
that joins them lives in a namespace of its own, so the machine's own network is untouched. Each host also has a
mount namespace with a tmpfs on ``/tmp``, its working directory ``/tmp/work`` and its ``HOME`` ``/tmp/home``: no
file one host writes there is seen by another, as on machines that share no disk.

The hosts get the test credentials in their environment (as users give them) and no ``AWS_ENDPOINT_URL*`` and no
``DASK_*`` variables: where the object store is must travel from the client, with the task graph.

Run by hand (as root, from the repository root)::

    python -m tests.multihost.cluster up           # prints the addresses and how to run a command on a host
    python -m tests.multihost.cluster run client -- daskmeans info
    python -m tests.multihost.cluster down
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from . import netns
from .netns import NamespacesUnavailable, ShapingUnsupported

try:  # under pytest, tests/ is on sys.path
    from s3_server import TEST_CREDENTIALS, S3Server, moto_server_command
except ImportError:  # python -m tests.multihost.cluster, from the repository root
    from tests.s3_server import TEST_CREDENTIALS, S3Server, moto_server_command

__all__ = ["Host", "MultiHostCluster", "NamespacesUnavailable", "ShapingUnsupported"]

#: Where each host's private tmpfs is mounted, and the working directory and home inside it.
PRIVATE_TMP = "/tmp"
WORK = "/tmp/work"
HOME = "/tmp/home"
#: Where a host's mount namespace keeps the machine's /tmp while its own tmpfs covers /tmp (in that namespace only).
HIDDEN_TMP = "/mnt"


def _paths_under_tmp() -> list[str]:
    """The checkout and the Python environment where they lie under /tmp (a CI clone): the hosts' private /tmp
    would hide them, so each host's namespace mounts them back in place."""
    needed = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    return sorted(str(path) for path in needed if path.is_relative_to(PRIVATE_TMP))


def _keep_visible_script() -> str:
    return f"mount --bind {PRIVATE_TMP} {HIDDEN_TMP} && " if _paths_under_tmp() else ""


def _restore_visible_script() -> str:
    parts = []
    for path in _paths_under_tmp():
        inside = os.path.join(HIDDEN_TMP, os.path.relpath(path, PRIVATE_TMP))
        parts.append(f"mkdir -p {shlex.quote(path)} && mount --bind {shlex.quote(inside)} {shlex.quote(path)} && ")
    return "".join(parts)


#: Environment variables the hosts do not inherit from the process that starts the cluster (by prefix).
NOT_INHERITED = ("AWS_", "DASK_", "PYTEST_")
DRIVER = Path(__file__).resolve().parent / "driver.py"


@dataclass
class Host:
    """One host of the cluster.

    Attributes
    ----------
    name : str
        ``scheduler``, ``worker-0``, ..., ``client`` or ``s3``.
    netns : str
        Its network namespace (``dmh<X>-<name>``).
    address : str
        The address of its ``eth0``.
    port : str
        The other end of its veth pair: a port of the bridge, in the bridge's namespace.
    anchor : int
        A process that holds the host's mount namespace (private ``/tmp``); commands enter its namespaces.
    """

    name: str
    netns: str
    address: str
    port: str
    anchor: int = 0


class MultiHostCluster:
    """A scheduler, workers, a client host and an S3 server, each on a host (network + mount namespace) of its own.

    Parameters
    ----------
    n_workers : int
        Worker hosts, ``worker-0`` ... (each one ``dask worker`` with one thread).
    worker_memory : str
        ``--memory-limit`` of each worker.
    log_dir : str or Path, optional
        Where the services' output goes (one file per service, on the machine, outside the hosts); a new
        temporary folder by default.
    by_hand : bool
        A cluster started by hand, kept until :meth:`stop` or ``down``. Otherwise this process owns it: when it
        ends without stopping the cluster (killed), the next cluster that starts removes it.

    Examples
    --------
    >>> with MultiHostCluster() as cluster:                     # doctest: +SKIP
    ...     cluster.run("client", ["daskmeans", "info"]).stdout
    ...     cluster.shape("worker-0", rate_mbit=10)
    ...     cluster.counters("worker-0")["tx_bytes"]
    """

    SCHEDULER_PORT = 8786
    S3_PORT = 9000

    def __init__(self, n_workers: int = 2, worker_memory: str = "2GiB", log_dir=None, by_hand: bool = False):
        if n_workers < 1:
            raise ValueError(f"n_workers={n_workers}: a cluster needs at least one worker")
        self.n_workers = n_workers
        self.worker_memory = worker_memory
        self.owner = None if by_hand else os.getpid()
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.name = ""
        self.hosts: dict[str, Host] = {}
        self.processes: dict[str, list[subprocess.Popen]] = {}
        self._netem: bool | None = None

    # -- addresses -------------------------------------------------------------------------------------------

    @property
    def host_names(self) -> list[str]:
        """Every host's name: the scheduler, the workers, the client, the S3 server."""
        return ["scheduler", *self.worker_names, "client", "s3"]

    @property
    def worker_names(self) -> list[str]:
        """The workers' host names, ``worker-0`` ...."""
        return [f"worker-{i}" for i in range(self.n_workers)]

    @property
    def bridge_netns(self) -> str:
        """The namespace that holds the bridge and the hosts' bridge ports."""
        return f"{self.name}-br"

    def address(self, host: str) -> str:
        """The IP address of ``host``."""
        return self._host(host).address

    @property
    def scheduler_address(self) -> str:
        """``tcp://ADDRESS:8786``, as workers and clients connect to it."""
        return f"tcp://{self.address('scheduler')}:{self.SCHEDULER_PORT}"

    @property
    def s3_endpoint(self) -> str:
        """``http://ADDRESS:9000``, the S3 server's endpoint URL."""
        return self.s3.endpoint_url

    @property
    def s3(self) -> S3Server:
        """The S3 server on host ``s3`` as an :class:`S3Server` (its endpoint, options and environment; its
        process is run by :meth:`start_s3`, in the host)."""
        return S3Server(host=self.address("s3"), port=self.S3_PORT)

    def storage_options(self) -> dict:
        """fsspec/s3fs options that reach the cluster's S3 server with the test credentials."""
        return self.s3.storage_options()

    def _host(self, host: str) -> Host:
        try:
            return self.hosts[host]
        except KeyError:
            raise KeyError(f"no host {host!r} in this cluster; its hosts are {', '.join(self.hosts)}") from None

    # -- start and stop --------------------------------------------------------------------------------------

    def start(self, timeout: float = 120) -> MultiHostCluster:
        """Make the hosts and start the S3 server, the scheduler and the workers; return when every worker has
        joined. Leftovers of killed runs are removed first; a failed start removes what it made.

        Raises
        ------
        NamespacesUnavailable
            Not root, a tool is missing, or the kernel refuses namespaces, veth pairs or bridges.
        """
        netns.check_prerequisites()
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="multihost-logs-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with netns.state_lock():
            netns.remove_abandoned()
            index = netns.choose_subnet_index()
            self.name = f"{netns.PREFIX}{index}"
            netns.write_record(self.name, self.owner)
        try:
            self._make_network(netns.subnet_of(index))
            self._save_record()
            self.start_s3()
            self.start_scheduler()
            for worker in self.worker_names:
                self.start_worker(worker)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _make_network(self, subnet: ipaddress.IPv4Network) -> None:
        try:
            netns.make_bridge(self.bridge_netns)
        except RuntimeError as error:
            raise NamespacesUnavailable(f"cannot make a network namespace with a bridge here: {error}") from error
        hosts = list(subnet.hosts())
        for number, name in enumerate(self.host_names):
            host = Host(name, f"{self.name}-{name}", str(hosts[number + 1]), f"p{number}")
            try:
                netns.make_host_network(host.netns, self.bridge_netns, host.port, host.address, subnet.prefixlen)
            except RuntimeError as error:
                raise NamespacesUnavailable(f"cannot join a namespace to the bridge by a veth pair: {error}") from error
            self.hosts[name] = host
            host.anchor = self._start_anchor(host)

    def _start_anchor(self, host: Host) -> int:
        """Start the process that holds ``host``'s mount namespace (tmpfs on /tmp); return its pid."""
        script = (
            f"{_keep_visible_script()}mount -t tmpfs -o size=2g,mode=1777 tmpfs {PRIVATE_TMP} && "
            f"{_restore_visible_script()}mkdir -p {WORK} {HOME} && echo $$ && exec sleep infinity"
        )
        argv = ["ip", "netns", "exec", host.netns, "unshare", "--mount", "--propagation", "private", "--fork"]
        anchor = subprocess.Popen(
            [*argv, "sh", "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.setdefault(host.name, []).append(anchor)
        line = anchor.stdout.readline().strip()
        if not line.isdigit():
            anchor.wait(timeout=10)
            raise NamespacesUnavailable(
                f"cannot give host {host.name} a private /tmp (unshare --mount + tmpfs): {anchor.stderr.read().strip()}"
            )
        return int(line)

    def _save_record(self) -> None:
        record = {
            "owner": self.owner,
            "owner_start": None if self.owner is None else netns.process_start_time(self.owner),
            "n_workers": self.n_workers,
            "log_dir": str(self.log_dir),
            "hosts": {name: asdict(host) for name, host in self.hosts.items()},
        }
        netns.record_path(self.name).write_text(json.dumps(record, indent=1))

    @classmethod
    def attach(cls, name: str | None = None) -> MultiHostCluster:
        """The running cluster ``name`` (``dmh<X>``), or the only one started by hand, to run commands on it from
        another process (its services are not this object's processes).

        Raises
        ------
        LookupError
            No such cluster, or several started by hand and no name given.
        """
        records = {path.stem: path for path in netns.STATE_DIR.glob(f"{netns.PREFIX}*.json")}
        if name is None:
            manual = [stem for stem, path in records.items() if json.loads(path.read_text()).get("owner") is None]
            if len(manual) != 1:
                raise LookupError(f"{len(manual)} clusters started by hand ({', '.join(manual)}): name one")
            name = manual[0]
        if name not in records:
            raise LookupError(f"no multi-host cluster {name!r}; running: {', '.join(records) or 'none'}")
        record = json.loads(records[name].read_text())
        cluster = cls(n_workers=record["n_workers"], log_dir=record["log_dir"], by_hand=record["owner"] is None)
        cluster.name, cluster.owner = name, record["owner"]
        cluster.hosts = {key: Host(**value) for key, value in record["hosts"].items()}
        return cluster

    def stop(self) -> None:
        """Kill every process on every host and delete the namespaces and the bridge (safe to call twice)."""
        if self.name:
            netns.remove_cluster(self.name)
        for processes in self.processes.values():
            for process in processes:
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    process.kill()
                    process.wait(timeout=10)
        self.processes.clear()
        self.hosts.clear()

    def __enter__(self) -> MultiHostCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- services --------------------------------------------------------------------------------------------

    def start_s3(self) -> subprocess.Popen:
        """Start moto's S3 server on host ``s3``, listening on its address."""
        return self.start_service("s3", moto_server_command(self.address("s3"), self.S3_PORT))

    def start_scheduler(self) -> subprocess.Popen:
        """Start ``dask scheduler`` on host ``scheduler`` (no dashboard)."""
        argv = [dask_executable(), "scheduler", "--host", self.address("scheduler")]
        return self.start_service("scheduler", [*argv, "--port", str(self.SCHEDULER_PORT), "--no-dashboard"])

    def start_worker(self, host: str) -> subprocess.Popen:
        """Start ``dask worker`` (one thread, its memory limit, no dashboard) on ``host``, named as the host."""
        argv = [dask_executable(), "worker", self.scheduler_address, "--nthreads", "1"]
        argv += ["--memory-limit", self.worker_memory, "--no-dashboard", "--name", host, "--host", self.address(host)]
        return self.start_service(host, argv)

    def start_service(self, host: str, argv: list[str]) -> subprocess.Popen:
        """Start ``argv`` on ``host`` in the background, its output appended to ``LOG_DIR/<host>.log``."""
        with open(self.log_path(host), "ab") as log:
            process = self.popen(host, argv, stdout=log, stderr=subprocess.STDOUT)
        return process

    def log_path(self, host: str) -> Path:
        """The file that collects the output of ``host``'s services."""
        return Path(self.log_dir) / f"{host}.log"

    def log_tail(self, host: str, lines: int = 40) -> str:
        """The last ``lines`` lines of ``host``'s service log ('' when it has none)."""
        try:
            return "\n".join(self.log_path(host).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def logs(self) -> str:
        """The last lines of every service's log (fewer of the S3 server's, which logs each request), for the
        message of a failure."""
        tails = {host: self.log_tail(host, 8 if host == "s3" else 40) for host in self.host_names if host != "client"}
        return "\n".join(f"--- {host}:\n{tail}" for host, tail in tails.items())

    def wait_ready(self, timeout: float = 120, n_workers: int | None = None) -> None:
        """Block until the S3 server answers and ``n_workers`` workers (all by default) have joined the scheduler,
        checked from the client host.

        Raises
        ------
        RuntimeError
            Not ready within ``timeout`` seconds; the message holds the services' last log lines.
        """
        workers = self.n_workers if n_workers is None else n_workers
        args = ["probe", "--s3", self.s3_endpoint, "--scheduler", self.scheduler_address]
        args += ["--workers", str(workers), "--timeout", str(timeout)]
        done = self.driver("client", args, check=False, timeout=timeout + 60)
        if done.returncode != 0:
            raise RuntimeError(f"the multi-host cluster did not come up: {done.stderr.strip()}\n{self.logs()}")

    # -- commands on hosts -----------------------------------------------------------------------------------

    def environment(self, host: str, extra: dict | None = None) -> dict:
        """The environment of a command on ``host``: this process's, less ``AWS_*``, ``DASK_*`` and ``PYTEST_*``
        variables, plus the test credentials, ``HOME`` and ``TMPDIR`` in the host's private /tmp, and ``extra``."""
        self._host(host)
        env = {key: value for key, value in os.environ.items() if not key.startswith(NOT_INHERITED)}
        env.update(TEST_CREDENTIALS, HOME=HOME, TMPDIR=PRIVATE_TMP, PWD=WORK)
        env.update(extra or {})
        return env

    def command(self, host: str, argv: list[str]) -> list[str]:
        """``argv`` wrapped to run on ``host``: in its network and mount namespaces, in its working directory."""
        anchor = self._host(host).anchor
        return ["nsenter", f"--target={anchor}", "--mount", "--net", f"--wdns={WORK}", "--", *argv]

    def popen(self, host: str, argv: list[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
        """Start ``argv`` on ``host`` (keywords as for ``subprocess.Popen``; ``env`` adds to
        :meth:`environment`); the process is killed by :meth:`kill` or :meth:`stop`."""
        kwargs.setdefault("start_new_session", True)
        process = subprocess.Popen(self.command(host, argv), env=self.environment(host, env), **kwargs)
        self.processes.setdefault(host, []).append(process)
        return process

    def run(
        self, host: str, argv: list[str], env: dict | None = None, timeout: float = 300, check: bool = True, input=None
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` and wait; its output is captured as text.

        Raises
        ------
        subprocess.CalledProcessError
            It failed and ``check`` (the error carries its output).
        subprocess.TimeoutExpired
            It ran past ``timeout`` seconds (it is killed).
        """
        done = subprocess.run(
            self.command(host, argv),
            env=self.environment(host, env),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
        return done

    def python(self, host: str, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Run this Python (``sys.executable``) with ``args`` on ``host``, as :meth:`run`."""
        return self.run(host, [sys.executable, *args], **kwargs)

    def driver(self, host: str, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Run ``driver.py`` (data, model and readiness helpers) with ``args`` on ``host``, as :meth:`run`."""
        return self.python(host, [str(DRIVER), *args], **kwargs)

    def listdir(self, host: str, path: str = WORK) -> list[str]:
        """The names in ``path`` as seen on ``host`` (its working directory by default)."""
        return sorted(self.run(host, ["ls", "-A", path]).stdout.split())

    def pids(self, host: str) -> list[int]:
        """The processes running on ``host``, less the one that holds its mount namespace."""
        anchor = self._host(host).anchor
        return [pid for pid in netns.namespace_pids(self._host(host).netns) if pid != anchor]

    def kill(self, host: str, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every process on ``host`` (its service and any command), as a crash or a stop of the
        machine would end them; the host itself stays, so a service can be started on it again. Returns the
        pids signalled."""
        pids = self.pids(host)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    # -- the network -----------------------------------------------------------------------------------------

    def counters(self, host: str) -> dict[str, int]:
        """Byte, packet and drop counters of ``host``'s ``eth0`` since it was made (``ip -n NETNS -s link``):
        ``rx_bytes``, ``tx_bytes``, ``rx_packets``, ``tx_packets``, ``rx_dropped``, ``tx_dropped``."""
        return netns.interface_counters(self._host(host).netns)

    @property
    def netem_available(self) -> bool:
        """Whether this kernel can delay and drop packets (``netem``); a rate limit and :meth:`cut` need not."""
        if self._netem is None:
            self._netem = netns.netem_available(self._host("client").netns)
        return self._netem

    def shape(self, host: str, delay_ms=None, rate_mbit=None, loss_pct=None, direction: str = "both") -> None:
        """Shape ``host``'s traffic: ``delay_ms`` and ``loss_pct`` (netem) and ``rate_mbit`` (netem with them, a
        token bucket alone), each applied to what it sends (``direction="out"``), what it receives (``"in"``,
        on its bridge port) or both. Replaces an earlier shaping of the same direction; :meth:`restore` undoes.

        Raises
        ------
        ShapingUnsupported
            Delay or loss on a kernel without netem (see :attr:`netem_available`).
        ValueError
            An unknown ``direction``.
        """
        entry = self._host(host)
        ends = {"out": [(entry.netns, netns.INTERFACE)], "in": [(self.bridge_netns, entry.port)]}
        ends["both"] = ends["out"] + ends["in"]
        if direction not in ends:
            raise ValueError(f"direction={direction!r}: choose 'out', 'in' or 'both'")
        for namespace, interface in ends[direction]:
            netns.set_qdisc(namespace, interface, delay_ms=delay_ms, rate_mbit=rate_mbit, loss_pct=loss_pct)

    def cut(self, host: str) -> None:
        """Drop every frame to and from ``host``, silently (its bridge port stops forwarding): to the others it
        is a machine that stopped answering, its processes keep running. :meth:`restore` reconnects it."""
        entry = self._host(host)
        netns.set_port_state(self.bridge_netns, entry.port, forwarding=False)

    def restore(self, host: str) -> None:
        """Undo :meth:`shape` and :meth:`cut` on ``host``."""
        entry = self._host(host)
        netns.clear_qdisc(entry.netns, netns.INTERFACE)
        netns.clear_qdisc(self.bridge_netns, entry.port)
        netns.set_port_state(self.bridge_netns, entry.port, forwarding=True)

    def describe(self) -> str:
        """Where everything is and how to run a command on a host, for a person."""
        lines = [
            f"multi-host cluster {self.name} (bridge in namespace {self.bridge_netns}), logs in {self.log_dir}",
            f"  scheduler   {self.scheduler_address}",
            f"  S3 endpoint {self.s3_endpoint}  (key/secret: testing/testing)",
        ]
        lines += [f"  {name:<11} {host.address:<14} netns {host.netns}" for name, host in self.hosts.items()]
        example = " ".join(shlex.quote(part) for part in self.command("client", ["daskmeans", "info"]))
        lines += [
            "run a command on a host:",
            "  python -m tests.multihost.cluster run client -- daskmeans info",
            f"  or: AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing {example}",
            "take it down: python -m tests.multihost.cluster down",
        ]
        return "\n".join(lines)


def dask_executable() -> str:
    """The ``dask`` command of this Python's environment."""
    found = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if found is None:
        raise RuntimeError("the dask command is not installed: pip install 'distributed'")
    return found


def main(argv: list[str] | None = None) -> int:
    """``up``, ``run HOST -- COMMAND...``, ``status`` and ``down`` of a cluster started by hand."""
    parser = argparse.ArgumentParser(prog="python -m tests.multihost.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "run", "status", "down"])
    parser.add_argument("host", nargs="?", help="with run: the host (client, scheduler, worker-0, s3, ...)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="with run: the command")
    parser.add_argument("--name", help="the cluster (dmh<X>); default: the one started by hand")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        return act(parser, args)
    except (LookupError, NamespacesUnavailable) as error:  # no such cluster or host; no namespaces here
        print(f"error: {error.args[0]}", file=sys.stderr)
        return 2


def act(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Carry out the action of :func:`main`'s command line."""
    if args.action == "up":
        cluster = MultiHostCluster(n_workers=args.workers, by_hand=True).start()
        print(cluster.describe())
        return 0
    if args.action == "status":
        for name, names in netns.clusters_present().items():
            print(f"{name}: {', '.join(sorted(names))}{' (abandoned)' if netns.is_abandoned(name) else ''}")
        return 0
    if args.action == "down":
        cluster = MultiHostCluster.attach(args.name)
        netns.remove_cluster(cluster.name)
        print(f"removed {cluster.name}")
        return 0
    if not args.host or not args.command:
        parser.error("run needs a host and a command: run client -- daskmeans info")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    cluster = MultiHostCluster.attach(args.name)
    return subprocess.call(cluster.command(args.host, command), env=cluster.environment(args.host))


if __name__ == "__main__":
    sys.exit(main())
