"""Exact k-means (Lloyd): one assign + stats pass per iteration, plain or with distance bounds.

With bounds (``bounds`` other than ``"none"``), the rows, their exact labels and their group lower bounds stay on
the workers (:class:`daskmeans.passes.bounded_assign.BoundedAssignment`) and each iteration scores only the
centers the bounds cannot rule out. The iterates are Lloyd's: every label is the exact nearest center in both
cases and the statistics are computed from the labels by the same kernel and reduction, so the centers are the
same to the last bit (tested).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import config
from ..engine.client import compute_now, submit_now
from ..engine.deadline import BudgetSpent, budget_until, signal_stop, wait_for_futures
from ..engine.placement import held_by_workers, placed_groups
from ..kernels.nested_groups import choose_bounds, make_groups
from ..passes.assign import assign_stats_chained, assign_stats_graph, assign_stats_on_driver, finish_stats
from ..passes.bounded_assign import BoundedAssignment
from .plan import FitPlan, SeedingPlan
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
        self.placed = None

    def step(self, centers, previous):
        if self.driver is not None:
            raw = assign_stats_on_driver(self.driver, centers)
        else:
            (raw,) = compute_now(
                assign_stats_graph(self.array, centers, self.weights, client=self.client), client=self.client
            )
        return finish_stats(raw), self.array.shape[0] * centers.shape[0]

    def submit(self, centers, n_clusters, after=None, shift=None):
        """Submit one iteration whole to the cluster: the pass over ``centers`` (an array, or the previous
        iteration's :class:`_Submitted`, from whose passes' results each task of this pass computes them) and the
        update that ends it (``after`` and ``shift`` are for bounds)."""
        if self.placed is None:
            self.placed = placed_groups(self.array, self.client)
        dtype = self.array.dtype
        if isinstance(centers, _Submitted):
            previous, start = centers.chained, None
        else:
            previous, start = None, (np.ascontiguousarray(centers, dtype=dtype), centers)
        groups, workers = self.placed
        chained = assign_stats_chained(
            self.array, n_clusters, groups, _advance, (dtype,), self.weights, previous, start, workers
        )
        chained = chained.submitted(submit_now(*chained.objects(), client=self.client, placement=chained.placement))
        return _Submitted(chained)

    def release(self):
        pass


class _BoundedPasses:
    """Lloyd's passes with bounds kept on the workers between iterations."""

    def __init__(self, array, centers, weights, client, scheme, n_groups, driver=None):
        self.scheme, self.n_groups = scheme, n_groups
        self.state = BoundedAssignment(
            array, make_groups(centers, self.scheme, self.n_groups), weights=weights, client=client, driver=driver
        )
        self.placed = None

    def step(self, centers, previous):
        shift = None if previous is None else center_displacement(centers, previous) * SHIFT_SAFETY
        return self.state.step(centers, shift)

    def submit(self, centers, n_clusters, after=None, shift=None):
        """:meth:`_PlainPasses.submit` revisiting the states kept by the iteration ``after``, with ``shift`` the
        bound on the centers' moves when ``centers`` is an array; without ``after``, the pass sets the bounds up,
        from an array or from the update of an iteration of plain passes (chained to it on the cluster)."""
        if self.placed is None:
            self.placed = placed_groups(self.state.array, self.state.client)
        dtype = self.state.array.dtype
        if isinstance(centers, _Submitted):
            start, previous = None, centers.chained
        else:
            start = (np.ascontiguousarray(centers, dtype=dtype), centers, {}, shift)
            previous = None if after is None else after.chained
        chained = self.state.submit_chained(
            previous, start, self.placed, _advance_with_bounds, (dtype,), revisit=after is not None
        )
        return _Submitted(chained)

    def release(self):
        self.state.release()


class _AheadPasses:
    """The passes of a run submitted ahead of the driver: plain ones up to iteration ``last_plain``, then those of
    the plan's scheme, whose first pass (it sets the bounds up) is chained on the cluster to the last plain one, so
    that the workers go on without waiting for the driver at the switch. Its bounds' groups are made from the
    centers the last plain iteration starts from (any grouping keeps the bounds exact)."""

    def __init__(self, run, last_plain):
        self.run, self.last_plain = run, last_plain
        self.plain, self.bounded = run.passes_of("none"), None

    def of(self, iteration):
        """The passes of ``iteration``."""
        if self.run.plan.scheme == "none" or iteration <= self.last_plain:
            return self.plain
        if self.bounded is None:
            self.bounded = self.run.passes_of(self.run.plan.scheme)
        return self.bounded

    def full(self, iteration) -> int:
        """1 when the pass of ``iteration`` computes every distance (plain, or setting the bounds up), else 0."""
        return int(self.of(iteration).scheme == "none" or iteration == self.last_plain + 1)

    def submit(self, iteration, centers, after=None, shift=None):
        """Submit ``iteration``'s pass over ``centers`` (an array, or the previous iteration's :class:`_Submitted`);
        ``after`` and ``shift`` as :meth:`_BoundedPasses.submit`, for passes of the same kind as ``after``'s."""
        engine = self.of(iteration)
        if after is not None and self.of(iteration - 1) is not engine:
            after, shift = None, None
        return engine.submit(centers, self.run.state.centers.shape[0], after=after, shift=shift)

    def release(self):
        self.plain.release()
        if self.bounded is not None:
            self.bounded.release()


@dataclass
class _Submitted:
    """An iteration submitted ahead of the driver: its pass, one task per worker thread
    (:class:`~daskmeans.engine.graph.GroupPass`, which keeps the bounds' states), whose reduced results the
    update that ends the iteration (:func:`_advance`) turns into its centers."""

    chained: Any

    def update(self):
        """Wait for the pass (within the budget, :func:`~daskmeans.engine.deadline.wait_for_futures`) and return
        its update, reduced on the driver from the groups' results."""
        wait_for_futures(self.chained.handed_over())
        return self.chained.result()


@dataclass(frozen=True, kw_only=True)
class LloydPlan(FitPlan):
    """What a run of Lloyd's iterations does, decided before it starts (:class:`~daskmeans.algorithms.plan.FitPlan`).

    Attributes
    ----------
    scheme : {"none", "elkan", "yinyang", "hamerly"}
        The distance bounds kept between iterations (:func:`daskmeans.kernels.nested_groups.choose_bounds`);
        ``"none"``: plain Lloyd.
    n_groups : int
        Lower bounds kept per row (0 without bounds).
    plain_iterations : int
        Iterations at the start that run without bounds (the centers move most then, and bounds made from them rule
        out next to nothing); the bounds start at the next.
    max_iter : int
    tol : float
        Absolute tolerance on the sum of squared center shifts.
    driver_rows : int
        Most rows whose iterations run on the driver's threads.
    on_driver : bool
        Whether the iterations run on the driver (on a :class:`~daskmeans.engine.driver.DriverCopy` of the rows).
    ahead : bool
        Whether each iteration is submitted to the workers before the driver has seen the one before it (rows
        held by the workers: :func:`~daskmeans.engine.placement.held_by_workers`).
    seeding : SeedingPlan, optional
        How the fit drew the centers the iterations start from (:class:`~daskmeans.algorithms.plan.SeedingPlan`).
    """

    scheme: str = "none"
    n_groups: int = 0
    plain_iterations: int = 0
    max_iter: int = 300
    tol: float = 0.0
    driver_rows: int = 0
    on_driver: bool = False
    ahead: bool = False
    seeding: SeedingPlan | None = None


def lloyd_plan(array, n_clusters, bounds="none", *, max_iter=300, tol=0.0, client=None) -> LloydPlan:
    """The plan of Lloyd's iterations over ``array`` on the workers (or local threads), with ``bounds``.

    ``bounds``: ``"none"`` (plain Lloyd), a scheme (``"elkan"``, ``"yinyang"``, ``"hamerly"``), or ``"auto"``: the
    scheme :func:`~daskmeans.kernels.nested_groups.choose_bounds` takes for the rows, after
    :data:`~daskmeans.config.AUTO_PLAIN_ITERATIONS` iterations without bounds.
    """
    scheme, n_groups = (
        ("none", 0) if bounds == "none" else choose_bounds(bounds, n_clusters, array.shape[1] * array.dtype.itemsize)
    )
    plain = min(max_iter, config.AUTO_PLAIN_ITERATIONS) if bounds == "auto" and scheme != "none" else 0
    ahead = held_by_workers(array, client)
    return LloydPlan(
        scheme=scheme,
        n_groups=n_groups,
        plain_iterations=plain,
        max_iter=max_iter,
        tol=tol,
        ahead=ahead,
        reasons={"scheme": f"bounds={bounds!r}", "ahead": "rows held by the workers" if ahead else "rows not held"},
    )


@dataclass
class LloydState:
    """What Lloyd's iterations carry from one to the next: the centers, the history, the passes over the data and
    the iterations done (the checkpoint's state, :func:`_state`)."""

    centers: Any
    history: list
    passes: float
    n_iter: int = 0


@dataclass
class _Step:
    """One iteration as the driver records it: its number, the centers it made and what its pass measured
    (``more``: further items of its record)."""

    iteration: int
    new_centers: Any
    inertia: float
    shift: float
    relocated: int
    computed: int
    more: dict


def lloyd(array, centers, plan=None, context=None, driver=None):
    """Run Lloyd iterations from ``centers``, as ``plan`` says.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    plan : LloydPlan, optional
        The bounds, the iterations, the tolerance and where the iterations run (:func:`lloyd_plan`; default: plain
        Lloyd, at most 300 iterations, ``tol`` 0). Bounds keep the rows on the workers:
        :func:`~daskmeans.passes.bounded_assign.state_bytes_per_row`.
    context : RunContext, optional
        ``total_weight`` is required. Each record reaches the callback with the centers after that iteration
        (``"_centers"``).
    driver : DriverCopy, optional
        ``array`` and the weights gathered into the driver's memory (:class:`~daskmeans.engine.driver.DriverCopy`):
        the passes then run on the driver's threads, without a round trip to the workers per iteration. The
        iterates are the same.

    Returns
    -------
    FitResult
        ``inertia`` is None when the last iteration moved the centers (see :func:`final_inertia`).
    """
    plan = plan or LloydPlan()
    context = context or RunContext()
    state = LloydState(centers, [], context.passes)
    resume = context.resume
    if resume is not None:
        state = LloydState(resume["centers"], list(resume["history"]), resume["passes"], resume["iteration"])
        if resume["stop_reason"] is not None:
            return FitResult(
                state.centers, resume["inertia"], state.n_iter, state.history, resume["stop_reason"], state.passes
            )
    elif context.checkpoint is not None:
        context.checkpoint.save(_state(0, centers, state.history, state.passes, None, None))
    context.clock.begin_laps()
    with budget_until(context.clock.end()):
        if driver is not None:
            with driver.threads():
                on_driver = replace(context, client=None, weights=driver.weights)
                return _Run(driver.array, plan, on_driver, state, driver).phases()
        return _Run(array, plan, context, state).phases()


class _Run:
    """One run of Lloyd's iterations: the prepared problem (the rows, the plan, the run context and, for rows in the
    driver's memory, their copy) and the state the iterations carry."""

    def __init__(self, array, plan, context, state, driver=None):
        self.array, self.plan, self.context, self.state, self.driver = array, plan, context, state, driver
        self.laps = []  # seconds of each iteration, for max_time

    def phases(self):
        """The iterations from ``state.n_iter + 1`` on: the plan's plain ones first, then those of its scheme (the
        same iterates either way)."""
        plan = self.plan
        if self.driver is None and plan.ahead:
            return self.iterate_ahead(_AheadPasses(self, last_plain=max(plan.plain_iterations, self.state.n_iter)))
        if self.state.n_iter < plan.plain_iterations:
            result = self.run("none", last=plan.plain_iterations)
            if result.stop_reason != "max_iter" or result.n_iter == plan.max_iter:
                return result
        return self.run(plan.scheme, last=plan.max_iter)

    def passes_of(self, scheme):
        """The passes of ``scheme`` over the run's rows (bounds made from the state's centers)."""
        context = self.context
        if scheme == "none":
            return _PlainPasses(self.array, context.weights, context.client, self.driver)
        return _BoundedPasses(
            self.array, self.state.centers, context.weights, context.client, scheme, self.plan.n_groups, self.driver
        )

    def run(self, scheme, last):
        """Iterations ``state.n_iter + 1 .. last`` with the passes of ``scheme``, one after the other;
        ``stop_reason`` is ``"max_iter"`` when they all ran."""
        engine = self.passes_of(scheme)
        try:
            return self.iterate(engine, last)
        finally:
            engine.release()

    def iterate(self, engine, last):
        """One iteration after the other, each waiting for its pass; on the driver's copy, the passes run on its
        blocks without a graph, and so without the block tasks' reports: ``rows_per_second`` is then the data's
        rows over the time since the previous record, as :meth:`iterate_ahead` gives it."""
        array, state = self.array, self.state
        client, weights, clock = self.context.client, self.context.weights, self.context.clock
        stop_reason, shift, stats = "max_iter", None, None
        previous = None
        started = clock.elapsed()
        try:
            for iteration in range(state.n_iter + 1, last + 1):
                centers = state.centers
                stats, computed = engine.step(centers, previous)
                stats, extra = with_enough_far_rows(stats, array, centers, weights, client)
                new_centers, shift, relocated = lloyd_update(stats, centers)
                state.passes += (1 if previous is None or engine.scheme == "none" else 0) + extra
                previous = centers
                more = {}
                if self.driver is not None:
                    seconds, started = clock.elapsed() - started, clock.elapsed()
                    more["rows_per_second"] = (1 + extra) * array.shape[0] / max(seconds, 1e-9)
                stop = self.close_iteration(
                    engine, _Step(iteration, new_centers, stats.inertia, shift, relocated, computed, more)
                )
                if stop is not None:
                    stop_reason = stop
                    break
        except BudgetSpent:
            stop_reason = self.budget_spent()
        # centers that did not move have the inertia of the last pass; otherwise it is left to final_inertia,
        # so that a fit ends with its last iteration
        inertia = stats.inertia if shift == 0.0 else None
        return FitResult(state.centers, inertia, state.n_iter, state.history, stop_reason, state.passes)

    def iterate_ahead(self, passes):
        """:meth:`iterate` with each iteration submitted whole before the driver has seen the one before it.

        An iteration's pass is one task per worker thread over the blocks its worker holds
        (:func:`~daskmeans.engine.graph.chained_group_pass`), and each such task computes its centers itself from
        the previous pass's statistics (:func:`_advance`, the same update as :func:`lloyd_update`), so that the
        workers never wait for a round trip to the driver or to one combining task; the pass that sets the bounds
        up is chained to the last plain one in the same way (:class:`_AheadPasses`). The driver records, reports,
        checkpoints and decides to stop as :meth:`iterate` does, iteration by iteration, and drops the one
        submitted ahead when it stops (with a ``max_time``, its group tasks stop after the block they are on,
        :func:`~daskmeans.engine.deadline.signal_stop`): the same iterates and the same history (the passes report
        no progress of their own: ``rows_per_second`` is the data's rows over the time since the previous record).
        The driver reduces each pass's results itself as soon as its groups end
        (:meth:`~daskmeans.engine.graph.GroupPass.result`), while the next pass runs. A pass whose
        far rows cannot refill its empty clusters is redone on the driver
        (:func:`~daskmeans.algorithms.relocation.with_enough_far_rows`).
        """
        array, state, last = self.array, self.state, self.plan.max_iter
        client, weights, clock = self.context.client, self.context.weights, self.context.clock
        stop_reason, shift, inertia, started = "max_iter", None, None, clock.elapsed()
        iteration, current = state.n_iter + 1, None
        try:
            current = passes.submit(iteration, state.centers) if iteration <= last else None
            while current is not None:
                centers = state.centers
                ahead = passes.submit(iteration + 1, current, after=current) if iteration < last else None
                _, new_centers, summary, _ = current.update()
                extra = 0
                if "stats" in summary:
                    ahead = None  # released, not cancelled: with Client.cancel the redone pass lost its data blocks
                    stats, extra = with_enough_far_rows(finish_stats(summary["stats"]), array, centers, weights, client)
                    new_centers, shift, relocated = lloyd_update(stats, centers)
                    summary = {**summary, "inertia": stats.inertia, "shift": shift, "relocated": relocated}
                    moves = center_displacement(new_centers, centers) * SHIFT_SAFETY
                    ahead = (
                        passes.submit(iteration + 1, new_centers, after=current, shift=moves)
                        if iteration < last
                        else None
                    )
                state.passes += passes.full(iteration) + extra
                shift, inertia = summary["shift"], summary["inertia"]
                seconds, started = clock.elapsed() - started, clock.elapsed()
                step = _Step(
                    iteration,
                    new_centers,
                    inertia,
                    shift,
                    summary["relocated"],
                    summary.get("computed", array.shape[0] * new_centers.shape[0]),
                    {"rows_per_second": (1 + extra) * array.shape[0] / seconds},
                )
                stop = self.close_iteration(passes.of(iteration), step)
                current, iteration = ahead, iteration + 1
                if stop is not None:
                    stop_reason = stop
                    break
        except BudgetSpent:
            stop_reason = self.budget_spent()
            current = None  # the stop signal is set
        finally:
            if current is not None:  # stopped with an iteration under way: its pass is not waited for
                signal_stop(client)
            passes.release()
        return FitResult(
            state.centers, inertia if shift == 0.0 else None, state.n_iter, state.history, stop_reason, state.passes
        )

    def budget_spent(self) -> str:
        """End the run where the ``max_time`` budget cut its pass: the state stays that of the last iteration
        completed (checkpointed as the run's end); the stop reason."""
        state, checkpoint = self.state, self.context.checkpoint
        if checkpoint is not None:
            checkpoint.save(_state(state.n_iter, state.centers, state.history, state.passes, "max_time", None))
        return "max_time"

    def close_iteration(self, engine, step):
        """Record ``step`` (with its ``more`` items), report it, checkpoint it, make its centers the state's and
        tell whether the run stops (the stop reason, or None)."""
        context, state = self.context, self.state
        clock, checkpoint = context.clock, context.checkpoint
        n, k = self.array.shape[0], step.new_centers.shape[0]
        record = {
            "iteration": step.iteration,
            "energy": step.inertia / context.total_weight,
            "inertia": step.inertia,
            "center_shift": step.shift,
            "relocated": step.relocated,
            "distances_computed": step.computed,
            "distances_skipped": n * k - step.computed,
            "bounds": engine.scheme,
            "bound_groups": engine.n_groups,
            "wall_time": clock.elapsed(),
            "passes": state.passes,
            **step.more,
        }
        state.history.append(record)
        context.report(record, centers=step.new_centers)
        self.laps.append(clock.lap())
        out_of_time = clock.out_of_time(next_lap_forecast(self.laps, context.final_pass))
        stop = "converged" if step.shift <= self.plan.tol else "max_time" if out_of_time else None
        if checkpoint is not None:
            final = stop or ("max_iter" if step.iteration == self.plan.max_iter else None)
            checkpoint.save(
                _state(
                    step.iteration,
                    step.new_centers,
                    state.history,
                    state.passes,
                    final,
                    step.inertia if final is not None and step.shift == 0.0 else None,
                )
            )
        state.centers, state.n_iter = step.new_centers, step.iteration
        return stop


def next_lap_forecast(laps, final_pass=False) -> float:
    """Seconds the next iteration is expected to take, from the ``laps`` of those so far (at least one), with the
    pass over the final centers that follows the run when ``final_pass`` is true.

    An iteration costs no more than the one before it, except the first with bounds (it sets them up): the next is
    taken as long as the shorter of the last two. The final pass computes every distance, as the first iteration
    did (with or without bounds): it is taken as long as the first lap.

    Examples
    --------
    >>> next_lap_forecast([3.0, 1.0, 2.0])
    1.0
    >>> next_lap_forecast([3.0, 1.0, 2.0], final_pass=True)
    4.0
    """
    return min(laps[-2:]) + (laps[0] if final_pass else 0.0)


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


def _state(iteration, centers, history, passes, stop_reason, inertia):
    """Lloyd's checkpoint state after ``iteration`` (``stop_reason`` set once the run has ended)."""
    return {
        "iteration": iteration,
        "centers": centers,
        "history": history,
        "passes": passes,
        "stop_reason": stop_reason,
        "inertia": inertia,
    }


def final_inertia(array, centers, weights=None, client=None) -> float:
    """Inertia of ``centers`` on the data: one assign + stats pass."""
    (raw,) = compute_now(assign_stats_graph(array, centers, weights, client=client), client=client)
    return finish_stats(raw).inertia


def run_inertia(array, centers, weights, clock, client=None):
    """:func:`final_inertia` within ``clock``'s ``max_time`` budget (the inertia that picks the best of several
    runs): None when the budget ends before the pass does."""
    with budget_until(clock.end()):
        try:
            return final_inertia(array, centers, weights, client)
        except BudgetSpent:
            return None
