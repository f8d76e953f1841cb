"""Exact k-means (Lloyd): one assign + stats pass per iteration."""

from __future__ import annotations

import numpy as np

from ..engine.client import compute_now
from ..passes.assign import assign_stats_graph, finish_stats
from .relocation import centers_from_sums, relocate_empty_clusters, with_enough_far_rows
from .result import FitResult, RunContext


def assign_and_relocate(array, centers, weights, client):
    """One assign + stats pass; empty clusters refilled from the farthest rows (a second pass only when the
    far rows reported by the blocks do not suffice). Returns ``(stats, relocated, passes)``."""
    (raw,) = compute_now(assign_stats_graph(array, centers, weights), client=client)
    stats, extra = with_enough_far_rows(finish_stats(raw), array, centers, weights, client)
    relocated = relocate_empty_clusters(stats)
    return stats, relocated, 1 + extra


def lloyd(array, centers, context=None, *, max_iter=300, tol=0.0):
    """Run Lloyd iterations from ``centers``.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    context : RunContext, optional
        ``total_weight`` is required. Each record reaches the callback with the centers after that iteration
        (``"_centers"``).
    max_iter : int
    tol : float
        Absolute tolerance on the sum of squared center shifts.

    Returns
    -------
    FitResult
        ``inertia`` is None when the last iteration moved the centers (see :func:`final_inertia`).
    """
    context = context or RunContext()
    clock, client, weights, checkpoint = context.clock, context.client, context.weights, context.checkpoint
    total_weight = context.total_weight
    passes = context.passes
    history = []
    stop_reason = "max_iter"
    n_iter = 0
    resume = context.resume
    if resume is not None:
        centers, history, passes, n_iter = resume["centers"], list(resume["history"]), resume["passes"], \
            resume["iteration"]
        if resume["stop_reason"] is not None:
            return FitResult(centers, resume["inertia"], n_iter, history, resume["stop_reason"], passes)
    elif checkpoint is not None:
        checkpoint.save(_state(0, centers, history, passes, None, None))
    for iteration in range(n_iter + 1, max_iter + 1):
        stats, relocated, spent = assign_and_relocate(array, centers, weights, client)
        passes += spent
        new_centers = centers_from_sums(stats.sums, stats.counts, centers)
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
        context.report(record, centers=new_centers)
        centers = new_centers
        n_iter = iteration
        stop = "converged" if shift <= tol else "max_time" if clock.out_of_time() else None
        if checkpoint is not None:
            final = stop or ("max_iter" if iteration == max_iter else None)
            checkpoint.save(_state(iteration, centers, history, passes, final,
                                   stats.inertia if final is not None and shift == 0.0 else None))
        if stop is not None:
            stop_reason = stop
            break
    # centers that did not move have the inertia of the last pass; otherwise it is left to final_inertia,
    # so that a fit ends with its last iteration
    inertia = stats.inertia if shift == 0.0 else None
    return FitResult(centers, inertia, n_iter, history, stop_reason, passes)


def _state(iteration, centers, history, passes, stop_reason, inertia):
    """Lloyd's checkpoint state after ``iteration`` (``stop_reason`` set once the run has ended)."""
    return {"iteration": iteration, "centers": centers, "history": history, "passes": passes,
            "stop_reason": stop_reason, "inertia": inertia}


def final_inertia(array, centers, weights=None, client=None) -> float:
    """Inertia of ``centers`` on the data: one assign + stats pass."""
    (raw,) = compute_now(assign_stats_graph(array, centers, weights), client=client)
    return finish_stats(raw).inertia
