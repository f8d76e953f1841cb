"""What every algorithm takes besides its data, centers and plan (:class:`RunContext`), what it returns
(:class:`FitResult`), and the checkpoint state of a result."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class FitResult:
    """Outcome of one run of an algorithm.

    Attributes
    ----------
    centers : ndarray (k, d) or SparseCenters
        The final centers (kernel k-means: sparse centers in the kernel's feature space).
    inertia : float or None
        Weighted sum of squared distances to the nearest center, for ``centers``; None when the algorithm
        stopped without a pass over the final centers (the estimator's ``inertia_`` then makes that pass
        on first access).
    n_iter : int
    history : list of dict
        One record per iteration; every record has ``iteration``, ``energy`` (vc-GMM: ``free_energy`` too),
        ``wall_time`` and ``passes``.
    stop_reason : str
        ``"converged"``, ``"max_iter"``, ``"max_time"`` or an algorithm-specific reason.
    passes : float
        Full passes over the data.
    counts : ndarray (k,), optional
        Weight of each cluster for ``centers``, where the algorithm knows it (full kernel k-means).
    n_steps : int, optional
        Mini-batch steps taken (mini-batch k-means, mini-batch kernel k-means).
    seen_counts : ndarray (k,), optional
        Weight each center has received over all steps (mini-batch k-means, mini-batch kernel k-means).
    gamma : float, optional
        ``max ||phi(x)||`` over the rows seen (mini-batch kernel k-means).
    labels : ndarray (n,), optional
        Label of every row for the final centers (full kernel k-means).
    sigma2 : float, optional
        The shared variance of the isotropic mixture (vc-GMM).
    lower_bound : float, optional
        Free energy per unit of weight of the last iteration (vc-GMM).
    where : str, optional
        Where the blocks ran, ``"driver"`` or ``"workers"`` (vc-GMM).
    batch : NestedBatch, optional
        The state blocks of nested mini-batch k-means, kept when asked (``keep_batch=True``).
    batch_rows : str, optional
        ``"cached"`` or ``"reread"``: where nested mini-batch k-means kept its batch's rows at the end.
    """

    centers: Any
    inertia: float | None
    n_iter: int
    history: list = field(default_factory=list)
    stop_reason: str = "max_iter"
    passes: float = 0
    counts: np.ndarray | None = None
    n_steps: int | None = None
    seen_counts: np.ndarray | None = None
    gamma: float | None = None
    labels: np.ndarray | None = None
    sigma2: float | None = None
    lower_bound: float | None = None
    where: str | None = None
    batch: Any = None
    batch_rows: str | None = None


class Clock:
    """Wall time since ``fit`` was called, and the ``max_time`` budget.

    A fit keeps to its budget by not starting work it expects to end past it: each iteration closes a lap
    (:meth:`lap`), and the next one starts only if its forecast from the laps so far still ends within the budget
    (:meth:`out_of_time` with ``ahead``). What the fit does after its last iteration within the budget (the pass
    that gives each run's inertia when ``KMeans`` keeps the best of several runs) is part of that forecast, and
    nested mini-batch k-means cuts a growth of its batch to the rows that still fit (:meth:`time_left`).

    Exact k-means and nested mini-batch k-means also run their iterations inside
    :func:`~daskmeans.engine.deadline.budget_until` (:meth:`end`): a pass still under way when the budget ends (the
    first iteration, which no lap has timed, or one slower than its forecast) is cut short there, and the fit
    returns the last iteration it completed. Such a fit returns past ``max_time`` by no more than the sum of

    - the opening of the data (its summary pass) and the seeding, which run to their end, except that k-means||
      starts no further round that one as long as the last says would end past the budget (once it has
      ``n_clusters`` distinct candidates) and stops reclustering its candidates on the driver when it is spent;
    - one block's work: on the driver's threads and on the local scheduler, the block tasks running when the budget
      ends finish (no other starts); on a cluster the driver stops waiting at once, and the workers finish the
      tasks they run in the background, their results unused;
    - the compilation of the kernels the fit is the first to use since the Numba cache was made (once: it caches
      them on disk).

    VRKM cuts its epochs' passes and its pools' reads so too, and reads a further pool only if one as long as the last
    still ends in time: it returns past the budget also by the steps of the pool under way. The other algorithms keep
    to the budget by their forecasts alone: they also return past it by their first iteration and by what the last
    iteration they started took beyond its forecast.

    Mini-batch k-means asks the clock at each step instead of forecasting one: after its seeding and first step, it
    overruns by at most the step, or the reading of a pool of rows, under way when the budget runs out.

    Parameters
    ----------
    max_time : float, optional
        The budget in seconds (None: no budget).
    start : float, optional
        ``time.perf_counter()`` when ``fit`` was called (default: now).

    Examples
    --------
    >>> clock = Clock(max_time=10.0)
    >>> clock.out_of_time()
    False
    >>> clock.out_of_time(ahead=60.0)  # an iteration of a minute would end past the budget
    True
    """

    def __init__(self, max_time=None, start=None):
        self.start = time.perf_counter() if start is None else start
        self.max_time = max_time
        self._lap_start = self.start

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def end(self):
        """The ``time.perf_counter()`` time the budget ends at, or None without a budget."""
        return None if self.max_time is None else self.start + self.max_time

    def time_left(self):
        """Seconds left of the budget (never negative), or None without a budget."""
        return None if self.max_time is None else max(0.0, self.max_time - self.elapsed())

    def out_of_time(self, ahead=0.0) -> bool:
        """Whether the budget is spent, or would be after ``ahead`` more seconds of work."""
        return self.max_time is not None and self.elapsed() + ahead >= self.max_time

    def begin_laps(self):
        """Start the first lap now (an algorithm calls it before its first iteration)."""
        self._lap_start = time.perf_counter()

    def lap(self) -> float:
        """Seconds since the previous lap (or :meth:`begin_laps`); the next lap starts now."""
        now = time.perf_counter()
        seconds, self._lap_start = now - self._lap_start, now
        return seconds


def restore_clock(clock, elapsed):
    """Continue ``clock`` from ``elapsed`` seconds (the time the run had spent before it was stopped)."""
    clock.start = time.perf_counter() - float(elapsed)
    return clock


@dataclass
class RunContext:
    """What every algorithm takes besides its data, its centers and its plan: where and how the run goes.

    Attributes
    ----------
    clock : Clock
        Carries the start time and the ``max_time`` budget.
    client : distributed.Client, optional
        Cluster to run on (None: the local scheduler).
    callback : callable, optional
        Called with each history record; :meth:`report` adds the algorithm's current centers (and other
        objects tests look at) under keys starting with ``_``, which are never stored in the history.
    passes : float
        Passes over the data already spent (seeding, summary), carried into the records.
    checkpoint : CheckpointHook, optional
        Resume from its state, and save the state after seeding and after every iteration
        (:mod:`daskmeans.storage.checkpoint`); ``centers`` and ``passes`` are then taken from the state.
    weights : dask.array.Array or ndarray (n,), optional
        Sample weights, chunked like the data (NumPy for the algorithms that run on the driver).
    total_weight : float, optional
        Sum of the weights (n without weights), to report energies as means.
    final_pass : bool
        The caller makes one pass over the final centers (the inertia of one of several runs) within the
        ``max_time`` budget: the algorithm counts it when it decides whether its next iteration still ends in time.
    """

    clock: Clock = field(default_factory=Clock)
    client: Any = None
    callback: Callable | None = None
    passes: float = 0
    checkpoint: Any = None
    weights: Any = None
    total_weight: float | None = None
    final_pass: bool = False

    @property
    def resume(self):
        """The state to resume from, or None to start afresh."""
        return None if self.checkpoint is None else self.checkpoint.resume

    def report(self, record, **private):
        """Hand ``record`` to the callback, with ``private`` objects under ``_name`` keys (e.g. ``centers=``).

        Keys the callback adds (the progress recorder's ``rows_per_second``) are added to ``record`` too, so the
        history keeps them."""
        if self.callback is None:
            return
        if not private:
            self.callback(record)
            return
        full = dict(record, **{f"_{name}": value for name, value in private.items()})
        self.callback(full)
        for key, value in full.items():
            if not key.startswith("_") and key not in record:
                record[key] = value


def result_to_state(result: FitResult) -> dict:
    """A :class:`FitResult` of the k-means family as checkpoint state."""
    state = {
        "centers": result.centers,
        "inertia": result.inertia,
        "n_iter": int(result.n_iter),
        "history": result.history,
        "stop_reason": result.stop_reason,
        "passes": result.passes,
    }
    if result.n_steps is not None:
        state["n_steps"] = result.n_steps
    if result.seen_counts is not None:
        state["seen_counts"] = result.seen_counts
    return state


def result_from_state(state) -> FitResult:
    """Inverse of :func:`result_to_state`."""
    return FitResult(
        state["centers"],
        state["inertia"],
        state["n_iter"],
        list(state["history"]),
        state["stop_reason"],
        state["passes"],
        n_steps=state["n_steps"] if "n_steps" in state else None,
        seen_counts=state["seen_counts"] if "seen_counts" in state else None,
    )
