"""Peak memory of the driver and of every worker while a run goes on.

A background thread samples the resident set size (RSS) of the driver process and of each worker process:
directly with psutil when the workers run on this host (a LocalCluster), otherwise from the memory the
workers report to the scheduler with their heartbeats. Peaks shorter than the sampling interval can be missed.
"""

from __future__ import annotations

import inspect
import os
import socket
import threading
import time

import psutil


def worker_processes(client) -> dict:
    """``{worker address: psutil.Process}`` for the workers that run on this host (empty otherwise)."""
    if client is None:
        return {}
    try:
        pids = client.run(os.getpid)
        hosts = client.run(socket.gethostname)
    except Exception:  # noqa: BLE001 - a scheduler that refuses client.run falls back to heartbeats
        return {}
    here = socket.gethostname()
    processes = {}
    for address, pid in pids.items():
        if hosts.get(address) == here and psutil.pid_exists(pid):
            processes[address] = psutil.Process(pid)
    return processes


class MemoryMonitor:
    """Context manager recording the peak RSS of the driver and the workers.

    Parameters
    ----------
    client : distributed.Client, optional
    interval : float
        Seconds between samples (heartbeat-based sampling uses at least 0.5 s).

    Attributes
    ----------
    result : dict
        After exit: ``driver_baseline_rss``, ``driver_peak_rss``, ``workers_peak_rss`` (per address),
        ``worker_peak_rss`` (the largest), ``workers_source`` (``"psutil"``, ``"scheduler"`` or None) and
        ``samples``.
    """

    def __init__(self, client=None, interval=0.05, processes=None):
        self.client = client
        self.interval = interval
        self.driver = psutil.Process()
        self.processes = worker_processes(client) if processes is None else processes
        self.source = "psutil" if self.processes else ("scheduler" if client is not None else None)
        self._stop = threading.Event()
        self.result = {}

    def _workers_now(self) -> dict:
        if self.source == "psutil":
            sizes = {}
            for address, process in self.processes.items():
                try:
                    sizes[address] = process.memory_info().rss
                except psutil.Error:
                    pass
            return sizes
        if self.source == "scheduler":
            info = (
                self.client.scheduler_info(n_workers=-1)
                if _takes_n_workers(self.client)
                else self.client.scheduler_info()
            )
            return {address: w.get("metrics", {}).get("memory", 0) for address, w in info.get("workers", {}).items()}
        return {}

    def _sample(self):
        self.driver_peak = max(self.driver_peak, self.driver.memory_info().rss)
        for address, rss in self._workers_now().items():
            self.workers_peak[address] = max(self.workers_peak.get(address, 0), int(rss))
        self.samples += 1

    def _loop(self):
        interval = self.interval if self.source != "scheduler" else max(self.interval, 0.5)
        while not self._stop.wait(interval):
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a worker restarting must not stop the run
                pass

    def __enter__(self):
        self.driver_baseline = self.driver.memory_info().rss
        self.driver_peak = self.driver_baseline
        self.workers_peak = {}
        self.samples = 0
        self.workers_baseline = self._workers_now()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="daskmeans-bench-memory")
        self._thread.start()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        try:
            self._sample()
        except Exception:  # noqa: BLE001 - the last sample is best effort: the monitor is stopping
            pass
        self.result = {
            "driver_baseline_rss": int(self.driver_baseline),
            "driver_peak_rss": int(self.driver_peak),
            "workers_baseline_rss": {a: int(v) for a, v in self.workers_baseline.items()},
            "workers_peak_rss": {a: int(v) for a, v in self.workers_peak.items()},
            "worker_peak_rss": int(max(self.workers_peak.values())) if self.workers_peak else None,
            "workers_source": self.source,
            "samples": self.samples,
            "interval_seconds": self.interval,
        }
        return False


def _takes_n_workers(client) -> bool:
    return "n_workers" in inspect.signature(client.scheduler_info).parameters
