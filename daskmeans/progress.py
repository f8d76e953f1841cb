"""Progress over iterations: a bar (tqdm.auto: terminals and notebooks alike), or a function of each record; and
the center snapshots of a fit, taken from the same records."""

from __future__ import annotations

import time

import numpy as np


class ProgressReporter:
    """A context manager that shows one bar; ``update(record)`` advances it and shows the energy.

    Parameters
    ----------
    enabled : bool or callable
        True shows a bar; a callable is called with a copy of each history record instead (keys starting with
        ``_`` left out), e.g. to log progress or to watch a fit from another thread.
    total : int
        Upper bound on the number of iterations.
    desc : str
    """

    def __init__(self, enabled, total=None, desc="daskmeans"):
        self.function = enabled if callable(enabled) else None
        self.enabled = bool(enabled) and self.function is None
        self.total = total
        self.desc = desc
        self.bar = None

    def __enter__(self):
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, desc=self.desc, unit="it", leave=True)
        return self

    def update(self, record):
        if self.function is not None:
            self.function({key: value for key, value in record.items() if not key.startswith("_")})
        if self.bar is None:
            return
        self.bar.update(1)
        postfix = {"energy": f"{record['energy']:.6g}"}
        if "batch_size" in record:
            postfix["batch"] = record["batch_size"]
        self.bar.set_postfix(postfix, refresh=False)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False


def centers_in_record(record):
    """The centers an algorithm reported with ``record`` (None when it reported none)."""
    return record.get("_centers")


class SnapshotRecorder:
    """The progress of one fit and, with ``snapshot_centers=True``, copies of the centers as the fit goes.

    Used as the algorithm's callback (:class:`~daskmeans.algorithms.result.RunContext`): every record advances the
    progress bar; every record that carries centers adds a snapshot. The estimator adds the initial centers with
    :meth:`start` and keeps the snapshots with :meth:`keep`. This is the one place where snapshots are taken.

    Parameters
    ----------
    estimator : daskmeans estimator
        Its ``progress`` and ``snapshot_centers`` parameters decide what is shown and kept.
    clock : Clock
        The fit's clock (a snapshot's ``wall_time`` is on it).
    total : int, optional
        Upper bound on the number of records, for the bar.
    desc : str
    centers_of : callable, optional
        ``centers_of(record)``: the centers in input space that ``cluster_centers_`` will show, or None when
        the record carries none (default: the record's ``"_centers"``).
    """

    def __init__(self, estimator, clock, *, total=None, desc="daskmeans", centers_of=centers_in_record):
        self.snapshots = [] if estimator.snapshot_centers else None
        self.clock = clock
        self.reporter = ProgressReporter(estimator.progress, total=total, desc=desc)
        self.centers_of = centers_of

    def __enter__(self):
        self.reporter.__enter__()
        return self

    def __exit__(self, *exc):
        return self.reporter.__exit__(*exc)

    def start(self, centers):
        """Snapshot of the initial centers (a fit that starts afresh)."""
        self._add(0, centers)

    def __call__(self, record):
        self.reporter.update(record)
        if self.snapshots is not None:
            centers = self.centers_of(record)
            if centers is not None:
                self._add(record["iteration"], centers)

    def _add(self, iteration, centers):
        if self.snapshots is not None:
            self.snapshots.append({"iteration": iteration, "wall_time": self.clock.elapsed(),
                                   "perf_counter": time.perf_counter(), "centers": np.array(centers, copy=True)})

    def keep(self, estimator):
        """Set ``estimator.center_snapshots_`` (only with ``snapshot_centers=True``)."""
        if self.snapshots is not None:
            estimator.center_snapshots_ = self.snapshots
