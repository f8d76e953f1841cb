"""The network a fit uses on the multi-host cluster: bytes per iteration, and an iteration's time against the RTT.

Run as root from the repository root::

    python -m tests.multihost.measure_network --out docs/benchmarks/network          # the record
    python -m tests.multihost.measure_network --out /tmp/network --quick             # a check that it works

It starts a :class:`~tests.multihost.cluster.MultiHostCluster` (scheduler, 2 workers, a client host, the S3
server), writes blobs to S3 from the client host, and fits on the cluster from a Python process on the client
host, with every iteration on the workers (``driver_rows=0`` where the algorithm has it), reading the data from
S3.

Bytes: each worker's traffic is counted by peer with traffic control on its interface and its bridge port (an
``htb`` queue of two classes, the S3 host's address in one, everything else in the other), so the reads from S3
are apart from the traffic with the scheduler, the client and the other worker. Each algorithm is fitted with
``N`` iterations (``tol=0``), paused after each iteration (its progress callback waits) while the counters, the
S3 server's request log and the scheduler's graph count are read: an iteration's cost is the median over the
iterations after the first, so seeding, the start and the end of a fit are left out, and so is an iteration in
which Dask moved blocks between workers to balance them (the mean is in ``network.json``). A fit that stopped
before its iterations is marked in the table.

Time: an iteration's seconds (the median step of the fit's ``history_`` wall times) at each RTT, set with
``tc netem`` on every host's outgoing traffic (delay RTT/2, rate 1 Gbit/s); where the kernel has no netem, the
delay is emulated in the processes (:mod:`tests.multihost.latency`: Dask messages and S3 requests held back) and
the notes say so. The slope of seconds per iteration against the RTT is the
number of round trips an iteration waits for; the passes (graphs submitted) per iteration, counted by the fit
itself and by a scheduler plugin, say where they come from.

It writes ``network.json`` and ``network.md`` (the machine, the commit, the date, the exact command, the tables)
into ``--out``. The client-side process is this file run with ``--serve`` on the client host.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: Parameters that make an algorithm iterate on the workers for exactly its iterations (when it has them).
FORCED = {"driver_rows": 0, "tol": 0.0, "max_no_improvement": None}
#: The parameter that counts an algorithm's iterations where it is not ``max_iter``.
ITERATION_PARAMETER = {"vrkm": "max_epochs", "vrkm++": "max_epochs", "vrkm++-reference": "max_epochs"}
#: Algorithms that hold a kernel matrix of every pair of rows on the driver (refused above this n by default).
QUADRATIC = {"kernel-kmeans": 50_000}
#: The row of the bytes table for exact k-means on the blocks daskmeans chooses by default (Zarr chunks under
#: ``config.MIN_BLOCK_BYTES`` merged into larger blocks), where the other rows have one block per Zarr chunk.
MERGED = "kmeans, default blocks"
#: The method of a request in the S3 server's log (werkzeug's access lines).
S3_REQUEST = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) ')
#: An htb rate that never limits (the classes only count).
UNLIMITED = ["rate", "100gbit", "burst", "16mb", "cburst", "16mb"]
#: A class and its bytes sent in ``tc -s class show`` (this tc prints no JSON for classes).
CLASS_BYTES = re.compile(r"^class htb (\S+) .*?\n\s*Sent (\d+) bytes", re.MULTILINE)


# -- the client-side process (run with --serve on the client host; imports nothing of the tests) --------------


def serve(scheduler: str, storage_options: str) -> None:
    """Read one JSON request a line from stdin, answer one JSON line on stdout: ``fit`` and ``counts``."""
    from distributed import Client
    from distributed.diagnostics.plugin import SchedulerPlugin

    import daskmeans
    from daskmeans.registry import make_estimator

    class GraphCounter(SchedulerPlugin):
        """Graphs the scheduler received (each a round trip of the client) and their tasks."""

        name = "measure-network-graphs"

        def __init__(self):
            self.graphs = 0
            self.tasks = 0

        def update_graph(self, scheduler, *, tasks=(), **kwargs):
            self.graphs += 1
            self.tasks += len(tasks)

    def counts(dask_scheduler=None):
        plugin = dask_scheduler.plugins["measure-network-graphs"]
        return {"graphs": plugin.graphs, "tasks": plugin.tasks}

    def transfers(dask_worker=None):
        return dask_worker.state.transfer_incoming_count_total

    def fit(client, options: dict, request: dict) -> dict:
        """Fit; with ``pause``, after each iteration tell the measuring side and wait for its go-ahead (it reads
        the counters meanwhile)."""

        def iteration_done(step):
            state = client.run_on_scheduler(counts)  # the scheduler only: no traffic of the workers
            print(json.dumps({"iteration": step.get("iteration"), **state}), flush=True)
            sys.stdin.readline()

        chunk_rows = request.get("chunk_rows")
        data = daskmeans.open_input(request["url"], array="X", chunk_rows=chunk_rows, storage_options=options)
        progress = iteration_done if request.get("pause") else False
        estimator = make_estimator(request["algorithm"], **request["params"], progress=progress)
        estimator.set_params(client=client)
        started = time.perf_counter()
        estimator.fit(data)
        seconds = time.perf_counter() - started
        history = [step for step in (getattr(estimator, "history_", None) or []) if isinstance(step, dict)]
        return {
            "seconds": seconds,
            "n_iter": int(getattr(estimator, "n_iter_", None) or len(history)),
            "wall_times": [step.get("wall_time") for step in history],
            "passes": [step.get("passes") for step in history],
        }

    import cloudpickle
    import latency  # this file's folder is first on sys.path: it runs as a script

    cloudpickle.register_pickle_by_value(latency)  # the workers and the scheduler have no such module
    options = json.loads(storage_options)
    with Client(scheduler, set_as_default=False) as client:
        client.register_plugin(GraphCounter())
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            if request["action"] == "counts":
                answer = client.run_on_scheduler(counts)
                answer["transfers"] = sum(client.run(transfers).values())
            elif request["action"] == "latency":
                seconds = latency.set_one_way_delay(request["one_way"])
                client.run_on_scheduler(latency.set_one_way_delay, request["one_way"])
                client.run(latency.set_one_way_delay, request["one_way"])
                answer = {"one_way": seconds}
            else:
                try:
                    answer = fit(client, options, request)
                except Exception as error:  # one algorithm's failure is a line of the record, not its end
                    answer = {"error": f"{type(error).__name__}: {' '.join(str(error).split())}"}
            print(json.dumps(answer), flush=True)


# -- counting by peer ------------------------------------------------------------------------------------------


def classify_by_peer(cluster, host: str, peer: str) -> None:
    """Count ``host``'s traffic with ``peer`` apart from the rest: an htb queue (no limit) on its interface (what
    it sends, class 1:10 to ``peer``) and on its bridge port (what it receives, class 1:10 from ``peer``)."""
    from .netns import command

    entry = cluster.hosts[host]
    address = cluster.address(peer)
    for namespace, device, match in ((entry.netns, "eth0", "dst"), (cluster.bridge_netns, entry.port, "src")):
        tc = ["tc", "-n", namespace]
        command([*tc, "qdisc", "del", "dev", device, "root"], check=False)
        command([*tc, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "20", "r2q", "100000"])
        for klass in ("1:10", "1:20"):
            command([*tc, "class", "add", "dev", device, "parent", "1:", "classid", klass, "htb", *UNLIMITED])
        command([*tc, "filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1", "u32"]
                + ["match", "ip", match, f"{address}/32", "flowid", "1:10"])  # fmt: skip


def peer_bytes(cluster, host: str) -> dict[str, int]:
    """Bytes ``host`` sent and received with the peer of :func:`classify_by_peer` and with everyone else:
    ``{"peer_tx", "peer_rx", "other_tx", "other_rx"}``."""
    from .netns import command

    entry = cluster.hosts[host]
    result = {}
    for namespace, device, direction in ((entry.netns, "eth0", "tx"), (cluster.bridge_netns, entry.port, "rx")):
        listed = command(["tc", "-n", namespace, "-s", "class", "show", "dev", device]).stdout
        sent = dict(CLASS_BYTES.findall(listed))
        result[f"peer_{direction}"] = int(sent.get("1:10", 0))
        result[f"other_{direction}"] = int(sent.get("1:20", 0))
    return result


# -- the measuring side ----------------------------------------------------------------------------------------


class ClientProcess:
    """The ``--serve`` process on the client host: one request, one answer."""

    def __init__(self, cluster, log: Path):
        self.log = open(log, "ab")  # noqa: SIM115 - open for the life of the process, closed by close()
        argv = [sys.executable, str(Path(__file__).resolve()), "--serve", cluster.scheduler_address]
        argv.append(json.dumps(cluster.storage_options()))
        self.process = cluster.popen("client", argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.ask_raw(None)

    def send(self, request) -> None:
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        self.process.stdin.flush()

    def answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the client-side process ended; its output is in {self.log.name}")
        return json.loads(line)

    def ask_raw(self, request: dict | None) -> dict:
        if request is not None:
            self.send(request)
        return self.answer()

    def fit(self, algorithm: str, url: str, params: dict, chunk_rows: int | None, on_iteration=None) -> dict:
        """Fit on the cluster, the input in blocks of ``chunk_rows`` rows (None: daskmeans's choice). With
        ``on_iteration``, the fit waits after each iteration while ``on_iteration(message)`` runs (the message has
        the iteration and the scheduler's graph counts)."""
        request = {"action": "fit", "algorithm": algorithm, "url": url, "params": params, "chunk_rows": chunk_rows}
        self.send({**request, "pause": on_iteration is not None})
        while "iteration" in (message := self.answer()):
            on_iteration(message)
            self.send("go on")
        return message

    def counts(self) -> dict:
        return self.ask_raw({"action": "counts"})

    def set_latency(self, rtt_ms: float) -> None:
        """Delay every Dask message and S3 request by half ``rtt_ms`` in every process (:mod:`latency`)."""
        self.ask_raw({"action": "latency", "one_way": rtt_ms / 2000})

    def close(self) -> None:
        """End the process: at once when a fit is under way (an interrupted measurement)."""
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.log.close()


def fit_params(algorithm: str, k: int, iterations: int, seed: int) -> dict:
    """The parameters of a fit of ``iterations`` iterations on the workers, as far as ``algorithm`` has them."""
    from daskmeans.registry import make_estimator

    known = make_estimator(algorithm, n_clusters=k).get_params()
    params = {"n_clusters": k, "random_state": seed}
    params[ITERATION_PARAMETER.get(algorithm, "max_iter")] = iterations
    params.update({name: value for name, value in FORCED.items() if name in known})
    return params


def worker_snapshot(cluster) -> dict:
    return {worker: peer_bytes(cluster, worker) for worker in cluster.worker_names}


def difference(after: dict, before: dict) -> dict:
    return {worker: {key: after[worker][key] - before[worker][key] for key in after[worker]} for worker in after}


def s3_requests(cluster) -> dict[str, int]:
    """The requests the S3 server has logged from the workers so far, by method (``GET``, ``HEAD``, ...)."""
    workers = tuple(f"{cluster.address(worker)} " for worker in cluster.worker_names)
    found: dict[str, int] = {}
    for line in cluster.log_path("s3").read_text(errors="replace").splitlines():
        method = S3_REQUEST.search(line)
        if method and line.startswith(workers):
            found[method.group(1)] = found.get(method.group(1), 0) + 1
    return found


def measured_fit(cluster, client: ClientProcess, algorithm: str, url: str, params: dict, chunk_rows) -> dict:
    """One fit, paused after each iteration to read what each worker exchanged (by peer), the requests the S3
    server got from the workers and the graphs the scheduler received; and the transfers of results between
    workers over the whole fit."""
    snapshots = []

    def snapshot(message):
        snapshots.append({"bytes": worker_snapshot(cluster), "s3": s3_requests(cluster), **message})

    transfers = client.counts()["transfers"]
    result = client.fit(algorithm, url, params, chunk_rows, on_iteration=snapshot)
    if "error" not in result:
        result["snapshots"] = snapshots
        result["transfers"] = client.counts()["transfers"] - transfers
    return result


def per_iteration(fit: dict, iterations: int) -> dict:
    """What one iteration costs: the median, over the iterations after the first, of what was exchanged between
    the end of one iteration and the end of the next (the median leaves out an iteration where Dask moved blocks
    between workers to balance them, which the mean shows)."""
    snapshots = fit["snapshots"]
    steps = []
    for before, after in zip(snapshots[:-1], snapshots[1:]):
        step = {}
        for worker in after["bytes"]:
            delta = {key: after["bytes"][worker][key] - before["bytes"][worker][key] for key in after["bytes"][worker]}
            step[worker] = {
                "cluster_tx": delta["other_tx"],
                "cluster_rx": delta["other_rx"],
                "s3_tx": delta["peer_tx"],
                "s3_rx": delta["peer_rx"],
            }
        step["total"] = {key: sum(step[w][key] for w in after["bytes"]) for key in step[next(iter(after["bytes"]))]}
        step["graphs"] = after["graphs"] - before["graphs"]
        step["tasks"] = after["tasks"] - before["tasks"]
        for method in set(after["s3"]) | set(before["s3"]):
            step[f"s3_{method}"] = after["s3"].get(method, 0) - before["s3"].get(method, 0)
        steps.append(step)
    if not steps:
        return {"complete": False, "iterations": fit["n_iter"], "steps": 0}

    def median(*path):
        values = []
        for step in steps:
            value = step
            for key in path:
                value = value.get(key, 0) if isinstance(value, dict) else 0
            values.append(value)
        return statistics.median(values), statistics.fmean(values)

    workers = [key for key in steps[0] if key.startswith("worker-")]
    keys = ("cluster_tx", "cluster_rx", "s3_tx", "s3_rx")
    methods = sorted({key[3:] for step in steps for key in step if key.startswith("s3_") and key[3:].isupper()})
    return {
        "complete": fit["n_iter"] == iterations,
        "iterations": fit["n_iter"],
        "steps": len(steps),
        "workers": {worker: {key: median(worker, key)[0] for key in keys} for worker in workers},
        "total": {key: median("total", key)[0] for key in keys},
        "total_mean": {key: median("total", key)[1] for key in keys},
        "graphs_per_iteration": median("graphs")[0],
        "tasks_per_iteration": median("tasks")[0],
        "s3_requests_per_iteration": {method: median(f"s3_{method}")[1] for method in methods},  # the mean
        "transfers_per_fit": fit["transfers"],
    }


def iteration_seconds(result: dict) -> tuple[float | None, float | None]:
    """The median seconds of an iteration after the first, and its passes, from the fit's history."""
    times = [value for value in result["wall_times"] if value is not None]
    steps = [b - a for a, b in zip(times[:-1], times[1:])]
    passes = [value for value in result["passes"] if value is not None]
    pass_steps = [b - a for a, b in zip(passes[:-1], passes[1:])]
    if not steps:
        return None, None
    return statistics.median(steps), (statistics.median(pass_steps) if pass_steps else None)


def shape_every_host(cluster, rtt_ms: float | None, rate_mbit: int) -> None:
    """Delay RTT/2 and limit the rate on what every host sends (None: remove all shaping)."""
    for host in cluster.host_names:
        cluster.restore(host)
        if rtt_ms is None:
            continue
        if rtt_ms == 0:
            cluster.shape(host, rate_mbit=rate_mbit, direction="out")
        else:
            cluster.shape(host, delay_ms=rtt_ms / 2, rate_mbit=rate_mbit, direction="out")


def write_data(cluster, url: str, rows: int, args) -> None:
    options = json.dumps(cluster.storage_options())
    argv = ["write-data", url, "--storage-options", options, "--rows", str(rows), "--features", str(args.features)]
    argv += ["--centers", str(args.blobs), "--chunk-rows", str(args.chunk_rows), "--seed", "0"]
    cluster.driver("client", argv, timeout=900)


def measure(args) -> dict:
    """Start the cluster, measure the bytes, then the times, stop it; the record."""
    from .cluster import MultiHostCluster

    record: dict = {"bytes": {}, "time": {}, "notes": []}
    with MultiHostCluster(n_workers=2, worker_memory=args.worker_memory) as cluster:
        client = ClientProcess(cluster, Path(cluster.log_dir) / "measure-client.log")
        try:
            record["netem"] = cluster.netem_available
            urls = {rows: f"s3://network/data-{rows}.zarr" for rows in args.rows}
            for rows, url in urls.items():
                write_data(cluster, url, rows, args)
                log(f"wrote {rows} rows x {args.features} features to {url}")
            measure_bytes(cluster, client, urls, args, record)
            measure_times(cluster, client, urls[args.rows[0]], args, record)
        finally:
            client.close()
    record["round_trips"] = round_trips(record["time"])
    return record


def left_out(algorithm: str, rows: int, record: dict) -> bool:
    """Whether ``algorithm`` cannot fit ``rows`` rows here (noted in the record once)."""
    if rows <= QUADRATIC.get(algorithm, rows):
        return False
    note = f"{algorithm} left out at {rows:,} rows: it holds an n x n kernel matrix on the driver (refused by default)"
    if note not in record["notes"]:
        record["notes"].append(note)
    return True


def failed(algorithm: str, result: dict, record: dict) -> bool:
    """Whether the fit failed (its error noted in the record)."""
    if "error" not in result:
        return False
    record["notes"].append(f"{algorithm} failed: {result['error']}")
    log(f"{algorithm} failed: {result['error']}")
    return True


def measure_bytes(cluster, client: ClientProcess, urls: dict, args, record: dict) -> None:
    """Bytes per iteration of each algorithm at each size, counted by peer after each iteration of a fit."""
    for worker in cluster.worker_names:
        classify_by_peer(cluster, worker, "s3")
    for url in urls.values():  # the workers' first reads of each store (file system objects, metadata)
        client.fit("kmeans", url, fit_params("kmeans", args.k, 1, args.seed), args.chunk_rows)
    runs = [(algorithm, algorithm, args.chunk_rows) for algorithm in args.algorithms]
    if "kmeans" in args.algorithms:  # the blocks daskmeans makes of small Zarr chunks by default
        runs.insert(args.algorithms.index("kmeans") + 1, (MERGED, "kmeans", None))
    for label, algorithm, chunk_rows in runs:
        for rows, url in urls.items():
            if left_out(algorithm, rows, record):
                continue
            params = fit_params(algorithm, args.k, args.iterations, args.seed)
            fit = measured_fit(cluster, client, algorithm, url, params, chunk_rows)
            if failed(label, fit, record):
                break
            entry = per_iteration(fit, args.iterations)
            if not entry["steps"]:
                record["notes"].append(f"{label} at {rows:,} rows ran {entry['iterations']} iteration(s): not measured")
                continue
            record["bytes"].setdefault(label, {})[str(rows)] = entry
            log(f"{label} {rows} rows: {summary_line(entry)}")
    for worker in cluster.worker_names:
        cluster.restore(worker)


def measure_times(cluster, client: ClientProcess, url: str, args, record: dict) -> None:
    """Seconds per iteration at each RTT: netem on every host, or where the kernel has none, the delay emulated
    in the processes (:mod:`latency`)."""
    rows = args.rows[0]
    emulated = not cluster.netem_available
    if emulated:
        record["notes"].append(
            "this kernel has no netem: the RTT was emulated in the processes (tests/multihost/latency.py: every "
            "Dask message held RTT/2 after it arrived, every S3 request started one RTT late), with a "
            f"{args.rate_mbit} Mbit/s token bucket on every host; TCP's own round trips (connection set-up, slow "
            "start) were not delayed"
        )
    try:
        for rtt in args.rtts:
            shape_every_host(cluster, 0 if emulated else rtt, args.rate_mbit)
            if emulated:
                client.set_latency(rtt)
            for algorithm in args.time_algorithms or args.algorithms:
                if left_out(algorithm, rows, record):
                    continue
                params = fit_params(algorithm, args.k, args.time_iterations, args.seed)
                result = client.fit(algorithm, url, params, args.chunk_rows)
                if failed(algorithm, result, record):
                    continue
                seconds, passes = iteration_seconds(result)
                record["time"].setdefault(algorithm, {})[str(rtt)] = {
                    "seconds_per_iteration": seconds,
                    "passes_per_iteration": passes,
                    "n_iter": result["n_iter"],
                }
                log(f"{algorithm} at RTT {rtt} ms: {seconds} s per iteration, {passes} passes per iteration")
    finally:
        shape_every_host(cluster, None, args.rate_mbit)
        if emulated:
            client.set_latency(0)


def counted_round_trips(entry: dict, n_workers: int = 2) -> float:
    """Round trips an iteration waits for at least, counted rather than timed: two per graph the client submits
    (client to scheduler and back, scheduler to a worker and back) and one per S3 request of a worker (its one
    thread reads its blocks one after the other), the requests shared by the workers. Transfers of results between
    workers (a reduction's) add to it; they are counted per fit only, so they are left out."""
    requests = sum((entry.get("s3_requests_per_iteration") or {}).values())
    return 2 * entry["graphs_per_iteration"] + requests / n_workers


def round_trips(times: dict) -> dict:
    """Seconds per iteration per second of RTT (the slope between the smallest and the largest RTT measured):
    the round trips an iteration waits for."""
    slopes = {}
    for algorithm, by_rtt in times.items():
        rtts = sorted((float(rtt), entry["seconds_per_iteration"]) for rtt, entry in by_rtt.items())
        rtts = [(rtt, seconds) for rtt, seconds in rtts if seconds is not None]
        if len(rtts) >= 2 and rtts[-1][0] > rtts[0][0]:
            slopes[algorithm] = (rtts[-1][1] - rtts[0][1]) / ((rtts[-1][0] - rtts[0][0]) / 1000)
    return slopes


def summary_line(entry: dict) -> str:
    total = entry["total"]
    return (
        f"per iteration, both workers: {total['cluster_tx'] / 1e3:.1f} kB sent and {total['cluster_rx'] / 1e3:.1f} kB "
        f"received with the cluster, {total['s3_rx'] / 1e6:.2f} MB from S3"
    )


def log(text: str) -> None:
    print(f"[{datetime.datetime.now():%H:%M:%S}] {text}", file=sys.stderr, flush=True)


# -- the report ------------------------------------------------------------------------------------------------


def machine() -> dict:
    """The machine and the commit the record was taken on."""
    root = Path(__file__).resolve().parents[2]

    def git(*argv):
        done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True)
        return done.stdout.strip()

    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def markdown(record: dict) -> str:
    """``network.md``: the settings, the bytes table, the times table and the round trips."""
    info, settings = record["machine"], record["settings"]
    lines = [
        "# The network a fit uses (multi-host cluster)",
        "",
        f"Taken {info['date']} on {info['host']} (Linux {info['kernel']}, {info['cpus']} CPUs, Python "
        f"{info['python']}), commit `{info['commit'][:12]}`{' with local changes' if info['dirty'] else ''}.",
        "",
        f"Command: `{record['command']}`",
        "",
        f"Data: blobs of {settings['features']} features on S3, Zarr chunks of {settings['chunk_rows']} rows, one "
        f"block each (but in '{MERGED}'), "
        f"k = {settings['k']}, 2 workers (one thread each), every iteration on the workers, read from S3 each pass. "
        f"Per iteration: the median over iterations 2 to {settings['iterations']} of a fit paused after each "
        "iteration while the counters are read.",
        "",
        "## Bytes per iteration",
        "",
        "Both workers together, in kB. Cluster: with the scheduler, the client and the other worker; S3: with the "
        "S3 host (the reads of the blocks, which grow with n). Graphs: graphs the client submitted to the "
        "scheduler; transfers: results one worker fetched from the other in the whole fit (seeding included).",
        "",
        "| algorithm | rows | cluster sent | cluster received | S3 received | S3 sent | graphs/it | tasks/it | "
        "transfers/fit | S3 requests/it | iterations |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for algorithm, by_rows in record["bytes"].items():
        for rows, entry in by_rows.items():
            total = {key: value / 1e3 for key, value in entry["total"].items()}
            done = "" if entry["complete"] else " (stopped early)"
            lines.append(
                f"| {algorithm} | {int(rows):,} | {total['cluster_tx']:.1f} | {total['cluster_rx']:.1f} | "
                f"{total['s3_rx']:.1f} | {total['s3_tx']:.1f} | {entry['graphs_per_iteration']:.1f} | "
                f"{entry['tasks_per_iteration']:.1f} | {entry['transfers_per_fit']} | "
                f"{requests_text(entry)} | {entry['iterations']}{done} |"
            )
    rtts = sorted({float(rtt) for by_rtt in record["time"].values() for rtt in by_rtt})
    lines += [
        "",
        "## Seconds per iteration against the RTT",
        "",
        f"netem on every host's outgoing traffic (or emulated: see the notes): delay RTT/2, rate "
        f"{settings['rate_mbit']} Mbit/s; "
        f"{settings['rows'][0]:,} rows. Round trips timed: the slope of seconds per iteration over the RTT; "
        "counted (a lower bound): 2 per graph the client submits, plus a worker's share of the S3 requests (from the "
        "bytes table).",
        "",
        "| algorithm | "
        + " | ".join(f"RTT {rtt:g} ms" for rtt in rtts)
        + " | passes/it | round trips/it (timed) | round trips/it (counted) |",
        "|---|" + "---:|" * (len(rtts) + 3),
    ]
    for algorithm, by_rtt in record["time"].items():
        cells = []
        for rtt in rtts:
            entry = by_rtt.get(str(rtt)) or {}
            seconds = entry.get("seconds_per_iteration")
            cells.append("" if seconds is None else f"{seconds:.3f}")
        passes = next(
            (e["passes_per_iteration"] for e in by_rtt.values() if e["passes_per_iteration"] is not None), None
        )
        slope = record["round_trips"].get(algorithm)
        entry = record["bytes"].get(algorithm, {}).get(str(settings["rows"][0]))
        counted = "" if entry is None else f"{counted_round_trips(entry):.1f}"
        lines.append(
            f"| {algorithm} | {' | '.join(cells)} | {'' if passes is None else f'{passes:g}'} | "
            f"{'' if slope is None else f'{slope:.1f}'} | {counted} |"
        )
    if record["notes"]:
        lines += ["", "## Notes", ""] + [f"- {note}" for note in record["notes"]]
    return "\n".join(lines) + "\n"


def requests_text(entry: dict) -> str:
    """``GET 4, HEAD 4``: the S3 requests of the workers per iteration."""
    found = entry.get("s3_requests_per_iteration") or {}
    return ", ".join(f"{method} {count:g}" for method, count in sorted(found.items()) if count) or "0"


def parse_args(argv=None) -> argparse.Namespace:
    from daskmeans.registry import algorithm_names

    parser = argparse.ArgumentParser(
        prog="python -m tests.multihost.measure_network", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, help="folder for network.json and network.md")
    parser.add_argument("--quick", action="store_true", help="small data, few iterations, kmeans and nmbatch only")
    parser.add_argument("--algorithms", type=lambda text: text.split(","), default=None, help="comma-separated")
    parser.add_argument("--time-algorithms", type=lambda text: text.split(","), default=None)
    parser.add_argument("--rows", type=lambda text: [int(v) for v in text.split(",")], default=None)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("-k", type=int, default=16)
    parser.add_argument("--blobs", type=int, default=400, help="blobs in the data (many more than k: long fits)")
    parser.add_argument("--chunk-rows", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=None, help="iterations of each fit that counts bytes")
    parser.add_argument("--time-iterations", type=int, default=None)
    parser.add_argument("--rtts", type=lambda text: [float(v) for v in text.split(",")], default=[0.2, 2.0, 10.0])
    parser.add_argument("--rate-mbit", type=int, default=1000)
    parser.add_argument("--worker-memory", default="4GiB")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--serve", nargs=2, metavar=("SCHEDULER", "STORAGE_OPTIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return args
    if args.out is None:
        parser.error("--out is required: the folder for network.json and network.md")
    quick = args.quick
    args.algorithms = args.algorithms or (["kmeans", "nmbatch"] if quick else algorithm_names())
    unknown = sorted(set(args.algorithms) - set(algorithm_names()))
    if unknown:
        parser.error(f"unknown algorithms {', '.join(unknown)}; choose from {', '.join(algorithm_names())}")
    args.rows = args.rows or ([20_000, 80_000] if quick else [100_000, 400_000])
    args.iterations = args.iterations or (5 if quick else 8)
    args.time_iterations = args.time_iterations or (4 if quick else 10)
    if quick:
        args.chunk_rows = min(args.chunk_rows, 5_000)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    command = "python -m tests.multihost.measure_network " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    record = measure(args)
    record.update(machine=machine(), command=command)
    record["settings"] = {
        key: getattr(args, key)
        for key in (
            "rows",
            "features",
            "k",
            "blobs",
            "chunk_rows",
            "iterations",
            "time_iterations",
            "rtts",
            "rate_mbit",
        )
    }
    record["settings"]["algorithms"] = args.algorithms
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "network.json").write_text(json.dumps(record, indent=1) + "\n")
    (args.out / "network.md").write_text(markdown(record))
    log(f"wrote {args.out / 'network.json'} and {args.out / 'network.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
