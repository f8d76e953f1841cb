"""Exact k-means (Lloyd): one assign + stats pass per iteration, plain or with distance bounds.

With bounds (``bounds`` other than ``"none"``), the rows, their exact labels and their group lower bounds stay on
the workers (:class:`daskmeans.passes.bounded_assign.BoundedAssignment`) and each iteration scores only the
centers the bounds cannot rule out. The iterates are Lloyd's: every label is the exact nearest center in both
cases and the statistics are computed from the labels by the same kernel and reduction, so the centers are the
same to the last bit (tested).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from ..config import AUTO_PLAIN_ITERATIONS
from ..engine.client import compute_now, submit_now
from ..engine.placement import blocks_by_worker, held_by_workers
from ..kernels.nested_groups import choose_bounds, make_groups
from ..passes.assign import assign_stats_chained, assign_stats_graph, assign_stats_on_driver, finish_stats
from ..passes.bounded_assign import BoundedAssignment
from .relocation import centers_from_sums, relocate_empty_clusters, with_enough_far_rows
from .result import FitResult, RunContext


def center_displacement(new_centers, old_centers):
    """Euclidean distance each center moved, in float64."""
    diff = np.asarray(new_centers, dtype=np.float64) - np.asarray(old_centers, dtype=np.float64)
    return np.sqrt(np.einsum("ij,ij->i", diff, diff))


#: Relative inflation of the center displacements handed to the bounds (covers float64 rounding of the moves).
SHIFT_SAFETY = 1.0 + 1e-12


class _PlainPasses:
    """Lloyd's passes without bounds: one assign + stats graph per iteration."""

    scheme = "none"
    n_groups = 0

    def __init__(self, array, weights, client, driver=None):
        self.array, self.weights, self.client, self.driver = array, weights, client, driver
        self.blocks = None

    def step(self, centers, previous):
        if self.driver is not None:
            raw = assign_stats_on_driver(self.driver, centers)
        else:
            (raw,) = compute_now(assign_stats_graph(self.array, centers, self.weights), client=self.client)
        return finish_stats(raw), self.array.shape[0] * centers.shape[0]

    def submit(self, centers, n_clusters, after=None, shift=None):
        """Submit one iteration whole to the cluster: the pass over ``centers`` (an array, or the previous
        iteration's :class:`_Submitted`, from whose passes' results each task of this pass computes them) and the
        update that ends it (``after`` and ``shift`` are for bounds)."""
        if self.blocks is None:
            self.blocks = blocks_by_worker(self.array, self.client)
        dtype = self.array.dtype
        if isinstance(centers, _Submitted):
            previous, start = centers.chained, None
        else:
            previous, start = None, (np.ascontiguousarray(centers, dtype=dtype), centers)
        chained = assign_stats_chained(self.array, n_clusters, self.blocks, _advance, (dtype,), self.weights,
                                       previous=previous, start=start)
        chained = chained.submitted(submit_now(*chained.objects(), client=self.client))
        return _Submitted(chained.result, chained=chained)

    def release(self):
        pass


class _BoundedPasses:
    """Lloyd's passes with bounds kept on the workers between iterations."""

    def __init__(self, array, centers, weights, client, bounds, driver=None):
        k, d = centers.shape
        self.scheme, self.n_groups = choose_bounds(bounds, k, d * array.dtype.itemsize)
        self.state = BoundedAssignment(array, make_groups(centers, self.scheme, self.n_groups), weights=weights,
                                       client=client, driver=driver)
        self.blocks = None

    def step(self, centers, previous):
        shift = None if previous is None else center_displacement(centers, previous) * SHIFT_SAFETY
        return self.state.step(centers, shift)

    def submit(self, centers, n_clusters, after=None, shift=None):
        """:meth:`_PlainPasses.submit` revisiting the states kept by the iteration ``after`` (None: the first
        pass), with ``shift`` the bound on the centers' moves when ``centers`` is an array."""
        if self.blocks is None:
            self.blocks = blocks_by_worker(self.state.array, self.state.client)
        dtype = self.state.array.dtype
        start = None if isinstance(centers, _Submitted) else \
            (np.ascontiguousarray(centers, dtype=dtype), centers, {}, shift)
        chained = self.state.submit_chained(None if after is None else after.chained, start, self.blocks,
                                            _advance_with_bounds, (dtype,))
        return _Submitted(chained.result, chained=chained)

    def release(self):
        self.state.release()


@dataclass
class _Submitted:
    """An iteration submitted ahead of the driver: the future of the update that ends it (:func:`_advance`) and
    its pass, one task per worker thread (:class:`~daskmeans.engine.graph.GroupPass`, which keeps the bounds'
    states)."""

    update: Any
    chained: Any = None


def lloyd(array, centers, context=None, *, max_iter=300, tol=0.0, bounds="none", driver=None):
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
    bounds : {"none", "auto", "elkan", "yinyang", "hamerly"}
        Distance bounds kept between iterations (:mod:`daskmeans.kernels.nested_groups`); ``"none"`` is plain
        Lloyd. Bounds keep the rows on the workers: :func:`~daskmeans.passes.bounded_assign.state_bytes_per_row`.
        With ``"auto"`` the first :data:`~daskmeans.config.AUTO_PLAIN_ITERATIONS` iterations are plain (the centers
        move most then, and bounds made from them rule out next to nothing) and the bounds start at the next.
    driver : DriverCopy, optional
        ``array`` and the weights gathered into the driver's memory (:class:`~daskmeans.engine.driver.DriverCopy`):
        the passes then run on the driver's threads, without a round trip to the workers per iteration. The
        iterates are the same.

    Returns
    -------
    FitResult
        ``inertia`` is None when the last iteration moved the centers (see :func:`final_inertia`).
    """
    context = context or RunContext()
    client, checkpoint = context.client, context.checkpoint
    passes = context.passes
    history = []
    n_iter = 0
    resume = context.resume
    if resume is not None:
        centers, history, passes, n_iter = resume["centers"], list(resume["history"]), resume["passes"], \
            resume["iteration"]
        if resume["stop_reason"] is not None:
            return FitResult(centers, resume["inertia"], n_iter, history, resume["stop_reason"], passes)
    elif checkpoint is not None:
        checkpoint.save(_state(0, centers, history, passes, None, None))
    if driver is not None:
        with driver.threads():
            on_driver = replace(context, client=None, weights=driver.weights)
            return _run_phases(driver.array, centers, on_driver, bounds, partial(_iterate, driver=driver), max_iter,
                               tol, history, passes, n_iter, driver)
    iterate = _iterate_ahead if held_by_workers(array, client) else _iterate
    return _run_phases(array, centers, context, bounds, iterate, max_iter, tol, history, passes, n_iter)


def _run_phases(array, centers, context, bounds, iterate, max_iter, tol, history, passes, n_iter, driver=None):
    """The iterations from ``n_iter + 1`` on: with ``bounds="auto"``, plain ones up to ``AUTO_PLAIN_ITERATIONS``,
    then bounded ones (the same iterates either way)."""
    plain_until = min(max_iter, AUTO_PLAIN_ITERATIONS) if bounds == "auto" else 0
    if n_iter < plain_until:
        result = _run(array, centers, context, "none", iterate, max_iter, tol, history, passes, n_iter, driver,
                      last=plain_until)
        if result.stop_reason != "max_iter" or result.n_iter == max_iter:
            return result
        centers, history, passes, n_iter = result.centers, result.history, result.passes, result.n_iter
    return _run(array, centers, context, bounds, iterate, max_iter, tol, history, passes, n_iter, driver)


def _run(array, centers, context, bounds, iterate, max_iter, tol, history, passes, n_iter, driver=None, last=None):
    """Iterations ``n_iter + 1 .. last`` (default ``max_iter``) with one engine; ``stop_reason`` is ``"max_iter"``
    when they all ran."""
    engine = _PlainPasses(array, context.weights, context.client, driver) if bounds == "none" else \
        _BoundedPasses(array, centers, context.weights, context.client, bounds, driver)
    try:
        return iterate(engine, array, centers, context, max_iter, tol, history, passes, n_iter,
                       last=max_iter if last is None else last)
    finally:
        engine.release()


def _iterate(engine, array, centers, context, max_iter, tol, history, passes, n_iter, last, driver=None):
    """One iteration after the other, each waiting for its pass; with ``driver``, the passes run on the driver's
    blocks without a graph, and so without the block tasks' reports: ``rows_per_second`` is then the data's rows
    over the time since the previous record, as :func:`_iterate_ahead` gives it."""
    client, weights, clock = context.client, context.weights, context.clock
    stop_reason = "max_iter"
    previous = None
    started = clock.elapsed()
    for iteration in range(n_iter + 1, last + 1):
        stats, computed = engine.step(centers, previous)
        stats, extra = with_enough_far_rows(stats, array, centers, weights, client)
        new_centers, shift, relocated = lloyd_update(stats, centers)
        passes += (1 if previous is None or engine.scheme == "none" else 0) + extra
        previous = centers
        more = {}
        if driver is not None:
            seconds, started = clock.elapsed() - started, clock.elapsed()
            more["rows_per_second"] = (1 + extra) * array.shape[0] / max(seconds, 1e-9)
        centers, stop = _close_iteration(engine, context, history, iteration, new_centers, stats.inertia, shift,
                                         relocated, computed, passes, tol, max_iter, array.shape[0], **more)
        n_iter = iteration
        if stop is not None:
            stop_reason = stop
            break
    # centers that did not move have the inertia of the last pass; otherwise it is left to final_inertia,
    # so that a fit ends with its last iteration
    inertia = stats.inertia if shift == 0.0 else None
    return FitResult(centers, inertia, n_iter, history, stop_reason, passes)


def _iterate_ahead(engine, array, centers, context, max_iter, tol, history, passes, n_iter, last):
    """:func:`_iterate` with each iteration submitted whole before the driver has seen the one before it.

    An iteration's pass is one task per worker thread over the blocks its worker holds
    (:func:`~daskmeans.engine.graph.chained_group_pass`), and each such task computes its centers itself from the
    previous pass's statistics (:func:`_advance`, the same update as :func:`lloyd_update`), so that the workers
    never wait for a round trip to the driver or to one combining task. The driver records, reports, checkpoints
    and decides to stop as :func:`_iterate` does, iteration by iteration, and drops the one submitted ahead when it
    stops: the same iterates and the same history (the passes report no progress of their own:
    ``rows_per_second`` is the data's rows over the time since the previous record). A pass whose far rows cannot
    refill its empty clusters is redone on the driver (:func:`~daskmeans.algorithms.relocation.with_enough_far_rows`).
    """
    client, weights, clock = context.client, context.weights, context.clock
    stop_reason, shift, inertia, started = "max_iter", None, None, clock.elapsed()
    k, first = centers.shape[0], n_iter + 1
    iteration = first
    current = engine.submit(centers, k) if iteration <= last else None
    while current is not None:
        ahead = engine.submit(current, k, after=current) if iteration < last else None
        _, new_centers, summary, _ = current.update.result()
        extra = 0
        if "stats" in summary:
            ahead = None  # released, not cancelled: with Client.cancel the redone pass lost its data blocks
            stats, extra = with_enough_far_rows(finish_stats(summary["stats"]), array, centers, weights, client)
            new_centers, shift, relocated = lloyd_update(stats, centers)
            summary = {**summary, "inertia": stats.inertia, "shift": shift, "relocated": relocated}
            moves = center_displacement(new_centers, centers) * SHIFT_SAFETY
            ahead = engine.submit(new_centers, k, after=current, shift=moves) if iteration < last else None
        passes += (1 if iteration == first or engine.scheme == "none" else 0) + extra
        shift, inertia = summary["shift"], summary["inertia"]
        seconds, started = clock.elapsed() - started, clock.elapsed()
        centers, stop = _close_iteration(engine, context, history, iteration, new_centers, inertia, shift,
                                         summary["relocated"], summary.get("computed", array.shape[0] * k), passes,
                                         tol, max_iter, array.shape[0],
                                         rows_per_second=(1 + extra) * array.shape[0] / seconds)
        n_iter = iteration
        current, iteration = ahead, iteration + 1
        if stop is not None:
            stop_reason = stop
            break
    return FitResult(centers, inertia if shift == 0.0 else None, n_iter, history, stop_reason, passes)


def _advance(raw, centers, dtype):
    """The update that ends an iteration on the cluster: :func:`lloyd_update` from the pass's combined statistics
    ``raw``, with ``centers`` the pass's centers (an array, or the previous ``_advance``'s result).

    Returns ``(block_centers, new_centers, summary, moves)``: the new centers in the data's ``dtype`` (what the
    next pass reads) and as the update gives them, and the bound on each center's move (what the next pass's
    bounds drop by). When the pass's far rows cannot refill its empty clusters, the summary holds the pass's
    statistics instead (``"stats"``), for the driver to redo the pass, and the centers are those of the pass
    (the pass submitted after it is dropped).
    """
    centers = centers if isinstance(centers, np.ndarray) else centers[1]
    stats = finish_stats(raw)
    if np.sum(stats.counts <= 0) > stats.far_rows.shape[0]:
        return np.ascontiguousarray(centers, dtype=dtype), centers, {"stats": raw}, np.zeros(centers.shape[0])
    new_centers, shift, relocated = lloyd_update(stats, centers)
    summary = {"inertia": stats.inertia, "shift": shift, "relocated": relocated}
    moves = center_displacement(new_centers, centers) * SHIFT_SAFETY
    return np.ascontiguousarray(new_centers, dtype=dtype), new_centers, summary, moves


def _advance_with_bounds(reduced, centers, dtype):
    """:func:`_advance` from a bounded pass's ``(statistics, distances computed)``; the count joins the summary."""
    raw, computed = reduced
    block_centers, new_centers, summary, moves = _advance(raw, centers, dtype)
    return block_centers, new_centers, {**summary, "computed": computed}, moves


def lloyd_update(stats, centers):
    """Lloyd's update from one pass's statistics: empty clusters relocated (``stats`` modified in place), then the
    clusters' means.

    Returns
    -------
    new_centers : ndarray (k, d)
    shift : float
        Sum of the squared moves of the centers, in float64.
    relocated : int
    """
    relocated = relocate_empty_clusters(stats)
    new_centers = centers_from_sums(stats.sums, stats.counts, centers)
    shift = float(np.sum((new_centers.astype(np.float64) - centers.astype(np.float64)) ** 2))
    return new_centers, shift, relocated


def _close_iteration(engine, context, history, iteration, new_centers, inertia, shift, relocated, computed, passes,
                     tol, max_iter, n_rows, **more):
    """Record an iteration (with ``more`` items), report it, checkpoint it and tell whether the run stops:
    ``(new_centers, stop)``."""
    clock, checkpoint = context.clock, context.checkpoint
    n, k = n_rows, new_centers.shape[0]
    record = {
        "iteration": iteration,
        "energy": inertia / context.total_weight,
        "inertia": inertia,
        "center_shift": shift,
        "relocated": relocated,
        "distances_computed": computed,
        "distances_skipped": n * k - computed,
        "bounds": engine.scheme,
        "bound_groups": engine.n_groups,
        "wall_time": clock.elapsed(),
        "passes": passes,
        **more,
    }
    history.append(record)
    context.report(record, centers=new_centers)
    stop = "converged" if shift <= tol else "max_time" if clock.out_of_time() else None
    if checkpoint is not None:
        final = stop or ("max_iter" if iteration == max_iter else None)
        checkpoint.save(_state(iteration, new_centers, history, passes, final,
                               inertia if final is not None and shift == 0.0 else None))
    return new_centers, stop


def _state(iteration, centers, history, passes, stop_reason, inertia):
    """Lloyd's checkpoint state after ``iteration`` (``stop_reason`` set once the run has ended)."""
    return {"iteration": iteration, "centers": centers, "history": history, "passes": passes,
            "stop_reason": stop_reason, "inertia": inertia}


def final_inertia(array, centers, weights=None, client=None) -> float:
    """Inertia of ``centers`` on the data: one assign + stats pass."""
    (raw,) = compute_now(assign_stats_graph(array, centers, weights), client=client)
    return finish_stats(raw).inertia
