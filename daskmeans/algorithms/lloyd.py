"""Exact k-means (Lloyd): one assign + stats pass per iteration."""

from __future__ import annotations

import time

import numpy as np

from .._client import compute_now
from ..passes.assign import assign_stats_graph, finish_stats
from .relocation import centers_from_stats, relocate_empty_clusters
from .result import Clock, FitResult


def assign_and_relocate(array, centers, weights, client):
    """One assign + stats pass; empty clusters refilled from the farthest rows (a second pass only when the
    far rows reported by the blocks do not suffice)."""
    (raw,) = compute_now(assign_stats_graph(array, centers, weights), client=client)
    stats = finish_stats(raw)
    passes = 1
    n_empty = int(np.sum(stats.counts <= 0))
    if n_empty > stats.far_rows.shape[0]:
        (raw,) = compute_now(assign_stats_graph(array, centers, weights, n_far=n_empty), client=client)
        stats = finish_stats(raw)
        passes += 1
    relocated = relocate_empty_clusters(stats)
    return stats, relocated, passes


def _snapshot(snapshots, iteration, clock, centers):
    if snapshots is not None:
        snapshots.append({"iteration": iteration, "wall_time": clock.elapsed(), "perf_counter": time.perf_counter(),
                          "centers": np.array(centers, copy=True)})


def lloyd(array, centers, *, weights=None, total_weight, max_iter=300, tol=0.0, clock=None, client=None,
          callback=None, passes=0, snapshots=None):
    """Run Lloyd iterations from ``centers``.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    weights : dask.array.Array (n,), optional
    total_weight : float
        Sum of the weights (n without weights), to report the energy as a mean.
    max_iter : int
    tol : float
        Absolute tolerance on the sum of squared center shifts.
    clock : Clock, optional
        Carries the start time and the ``max_time`` budget.
    client : distributed.Client, optional
    callback : callable, optional
        Called with each history record.
    passes : int
        Passes already spent (seeding), carried into the records.
    snapshots : list, optional
        When given, a copy of the centers is appended to it at the start and after every iteration, as
        ``{"iteration", "wall_time", "perf_counter", "centers"}`` (``perf_counter``: ``time.perf_counter()``
        at that moment, to line the snapshot up with a caller's own clock). Used by the benchmark harness to
        evaluate the energy of intermediate centers outside the timed region.

    Returns
    -------
    FitResult
        ``inertia`` is None when the last iteration moved the centers (see :func:`final_inertia`).
    """
    clock = clock or Clock()
    history = []
    stop_reason = "max_iter"
    n_iter = 0
    _snapshot(snapshots, 0, clock, centers)
    for iteration in range(1, max_iter + 1):
        stats, relocated, spent = assign_and_relocate(array, centers, weights, client)
        passes += spent
        new_centers = centers_from_stats(stats, centers)
        shift = float(np.sum((new_centers.astype(np.float64) - centers.astype(np.float64)) ** 2))
        record = {
            "iteration": iteration,
            "energy": stats.inertia / total_weight,
            "inertia": stats.inertia,
            "center_shift": shift,
            "relocated": relocated,
            "wall_time": clock.elapsed(),
            "passes": passes,
        }
        history.append(record)
        if callback is not None:
            callback(record)
        centers = new_centers
        n_iter = iteration
        _snapshot(snapshots, iteration, clock, centers)
        if shift <= tol:
            stop_reason = "converged"
            break
        if clock.out_of_time():
            stop_reason = "max_time"
            break
    # centers that did not move have the inertia of the last pass; otherwise it is left to final_inertia,
    # so that a fit ends with its last iteration
    inertia = stats.inertia if shift == 0.0 else None
    return FitResult(centers, inertia, n_iter, history, stop_reason, passes, None)


def final_inertia(array, centers, weights=None, client=None) -> float:
    """Inertia of ``centers`` on the data: one assign + stats pass."""
    (raw,) = compute_now(assign_stats_graph(array, centers, weights), client=client)
    return finish_stats(raw).inertia
