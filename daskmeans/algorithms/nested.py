"""Nested mini-batch k-means, nmbatch (Newling & Fleuret, NIPS 2016), on the workers' state blocks.

Each iteration revisits the whole active batch with distance bounds, adds the new rows of a growth with a
full first assignment, and updates the centers from the running per-cluster sums S, counts v and SSE, in
which every active sample counts exactly once (its old contribution is removed before the new one is added).
The batch doubles (up to n) when the ``q``-quantile over clusters of ``sigma_C(j) / p(j)`` exceeds ``rho``, with
``sigma_C(j) = sqrt(sse(j) / (v(j) (v(j) - 1)))`` and ``p(j)`` the distance center j moved last. ``q = 0`` is the
paper's rule (the minimum: every cluster must have settled); the default ``q = 0.5`` is the rule of the authors'
reference code (eakmeans doubles when the *median* ratio exceeds a threshold), with ``rho = 2``: double once half
the centers move less than half their own standard error. With the minimum, one sample changing cluster moves a
center by about ``sigma_C(j) / sqrt(v(j))``, so on data with many clusters the batch doubles only when an
iteration changes (almost) nothing, which spends most of the time polishing small batches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .. import config
from ..engine.capacity import cluster_free_memory_bytes, cluster_memory_bytes
from ..engine.deadline import BudgetSpent, budget_until
from ..engine.driver import driver_rows as rows_on_driver
from ..engine.driver import driver_work
from ..engine.worker_memory import release_freed_memory
from ..kernels.nested_groups import CenterGroups, choose_bounds, make_groups
from ..kernels.packed_bounds import LOWER_BYTES
from ..passes.nested_reread import RereadBatch
from ..passes.nested_state import NestedBatch
from .lloyd import SHIFT_SAFETY, center_displacement
from .nested_growth import LapForecast, next_growth
from .plan import FitPlan, SeedingPlan
from .relocation import centers_from_sums
from .result import FitResult, RunContext

#: ``NestedMiniBatchKMeans(batch_rows=...)``: keep the active batch's rows on the workers, re-read them from the
#: store every iteration, or choose by memory.
BATCH_ROWS = ("auto", "cached", "reread")


def state_bytes_per_row(n_features: int, n_groups: int, itemsize: int, cached: bool) -> int:
    """Bytes nmbatch keeps per active row, counted twice (the state blocks before and after an iteration).

    Cached: the row as computed, its index, label, distance, weight and group bounds
    (``d * itemsize + 28 + 2 * groups``). Re-read: its label, distance and group bounds (``12 + 2 * groups``):
    bounds are kept in 16 bits (:mod:`daskmeans.kernels.packed_bounds`).
    """
    per_row = 4 + 8 + LOWER_BYTES * n_groups + ((n_features * itemsize + 8 + 8) if cached else 0)
    return 2 * per_row


def choose_batch_rows(batch_rows, bounds, n_samples, n_features, n_clusters, itemsize, memory_bytes):
    """How nmbatch keeps its batch, and its bounds: ``(batch_rows, bounds)``, both resolved.

    The batch may grow to all ``n_samples`` rows, so ``"auto"`` caches the rows when the state of all of them
    (:func:`state_bytes_per_row`) takes at most ``BOUNDS_MEMORY_FRACTION`` of ``memory_bytes`` (the cluster's
    memory), and re-reads them otherwise. Re-reading with ``bounds="auto"`` keeps the groups that
    :func:`~daskmeans.kernels.nested_groups.choose_bounds` picks while their state fits that share, else
    Hamerly's single bound (``4 + 8 + 4`` bytes a row).
    """
    return _choose_batch_rows(batch_rows, bounds, n_samples, n_features, n_clusters, itemsize, memory_bytes)[:2]


def _choose_batch_rows(batch_rows, bounds, n_samples, n_features, n_clusters, itemsize, memory_bytes):
    """:func:`choose_batch_rows` and why: ``(batch_rows, bounds, {"batch_rows": why, "scheme": why})``."""
    limit = config.BOUNDS_MEMORY_FRACTION * memory_bytes
    share = f"{config.BOUNDS_MEMORY_FRACTION:g} of the cluster's {int(memory_bytes):,} bytes"
    scheme, n_groups = choose_bounds(bounds, n_clusters, n_features * itemsize)
    reasons = {"batch_rows": f"batch_rows={batch_rows!r}", "scheme": f"bounds={bounds!r}"}
    if batch_rows == "auto":
        needed = n_samples * state_bytes_per_row(n_features, n_groups, itemsize, cached=True)
        cached = needed <= limit
        batch_rows = "cached" if cached else "reread"
        reasons["batch_rows"] = (
            f"every row's cached state ({needed:,} bytes) " + ("within " if cached else "would exceed ") + share
        )
    if batch_rows == "reread" and bounds == "auto" and scheme not in ("none", "hamerly"):
        needed = n_samples * state_bytes_per_row(n_features, n_groups, itemsize, cached=False)
        if needed > limit:
            reasons["scheme"] = f"bounds='auto', re-read rows: {scheme}'s state ({needed:,} bytes) would exceed {share}"
            return batch_rows, "hamerly", reasons
    return batch_rows, scheme, reasons


@dataclass(frozen=True, kw_only=True)
class NestedPlan(FitPlan):
    """What a run of nmbatch does, decided before it starts (:class:`~daskmeans.algorithms.plan.FitPlan`).

    Attributes
    ----------
    seed : int
        Root seed of the run (fixes the shuffle).
    scheme : {"none", "elkan", "yinyang", "hamerly"}
        Distance bounds kept per sample; ``n_groups`` bounds a row.
    n_groups : int
    batch_rows : {"cached", "reread"}
        Keep the batch's rows on the workers (:class:`~daskmeans.passes.nested_state.NestedBatch`) or re-read
        them from the store at every iteration (:class:`~daskmeans.passes.nested_reread.RereadBatch`: bounded
        memory at any n, one read of the batch's chunks per iteration). The iterates are the same.
    reread_above : int, optional
        With ``batch_rows="cached"``: the batch size past which its rows would no longer fit the cluster's memory,
        so that a batch growing past it is re-read from then on (None: the batch stays cached).
    driver_rows : int
        Cached batches of at most this many rows are stepped on the driver, without a round trip to the workers
        per iteration (0: never). The iterates are the same.
    initial_batch_size : int
        Rows of the first batch (at most the data's).
    rho : float
        Doubling threshold.
    doubling_quantile : float in [0, 1]
        Which ratio over clusters is compared with ``rho`` (0: the minimum, as in the paper; 0.5: the median).
    max_iter : int
    tol : float
        Absolute tolerance on the sum of squared center moves, checked after iterations that revisit all n
        samples (and add none).
    max_blocks, min_block_rows : int, optional
        State block layout (see :class:`~daskmeans.passes.nested_state.NestedBatch`).
    keep_batch : bool
        Return the :class:`NestedBatch` too (``result.batch``); otherwise it is released.
    seeding : SeedingPlan, optional
        How the fit drew the centers the run starts from.
    """

    seed: int = 0
    scheme: str = "none"
    n_groups: int = 1
    batch_rows: str = "cached"
    reread_above: int | None = None
    driver_rows: int = 0
    initial_batch_size: int = 5000
    rho: float = 2.0
    doubling_quantile: float = 0.5
    max_iter: int = 1000
    tol: float = 0.0
    max_blocks: int | None = None
    min_block_rows: int | None = None
    keep_batch: bool = False
    seeding: SeedingPlan | None = None


def nested_plan(
    array, n_clusters, client=None, *, bounds="auto", batch_rows="cached", driver_rows=0, **given
) -> NestedPlan:
    """The plan of nmbatch over ``array`` with ``n_clusters`` centers, each choice made once.

    ``bounds`` and ``batch_rows`` are resolved by :func:`choose_batch_rows` (with ``client``'s workers' memory);
    where ``"auto"`` re-reads, the batch stays cached while its rows fit (:func:`cached_rows_within`) and is re-read
    once it grows past them (``reread_above``). ``driver_rows`` (``"auto"`` or rows) is resolved by
    :func:`~daskmeans.engine.driver.driver_rows` for a cached row and its bounds, ``initial_batch_size`` (in
    ``given``; None: :func:`default_initial_batch_size`) capped at the rows; the other fields of
    :class:`NestedPlan` are taken from ``given`` as they are (``reasons`` joins the reasons of the choices made
    here).
    """
    n, d = (int(s) for s in array.shape)
    itemsize = array.dtype.itemsize
    setting = driver_rows
    memory_bytes = cluster_memory_bytes(client)
    chosen, scheme, reasons = _choose_batch_rows(batch_rows, bounds, n, d, n_clusters, itemsize, memory_bytes)
    # the scheme's own groups (yinyang's count from YINYANG_GROUP_SIZE and YINYANG_MIN_GROUPS)
    _, n_groups = choose_bounds(scheme, n_clusters, d * itemsize)
    reasons["n_groups"] = f"the groups of {scheme!r} for k={n_clusters}"
    row_bytes = state_bytes_per_row(d, n_groups, itemsize, cached=True) // 2
    driver_rows = rows_on_driver(setting, n_clusters, d, row_bytes, driver_work(client))
    reasons["driver_rows"] = f"driver_rows={setting!r}" + (
        f": the work and memory limits for {row_bytes} bytes a row" if setting == "auto" else ""
    )
    asked = given.pop("initial_batch_size", None)
    size = min(n, int(asked or default_initial_batch_size(n_clusters)))
    reasons["initial_batch_size"] = f"initial_batch_size={asked}" if asked else "max(5000, 80 k)"
    if size == n:
        reasons["initial_batch_size"] += f", capped at the {n:,} rows"
    reread_above = None
    if batch_rows == "auto" and chosen == "reread":
        # a batch stepped on the driver takes no worker memory; beyond, its cached state takes the workers' free memory
        cached_rows = max(driver_rows, cached_rows_within(cluster_free_memory_bytes(client), d, n_groups, itemsize))
        if cached_rows >= size:
            chosen, reread_above = "cached", cached_rows
            reasons["batch_rows"] += (
                f"; cached while the batch holds at most {cached_rows:,} rows (stepped on the driver, or their "
                f"cached state within {config.BOUNDS_MEMORY_FRACTION:g} of the workers' free memory), re-read once "
                "it grows past them"
            )
    return NestedPlan(
        scheme=scheme,
        n_groups=n_groups,
        batch_rows=chosen,
        reread_above=reread_above,
        driver_rows=driver_rows,
        initial_batch_size=size,
        **{**given, "reasons": {**reasons, **given.get("reasons", {})}},
    )


def cached_rows_within(memory_bytes, n_features, n_groups, itemsize) -> int:
    """The most rows whose cached state (:func:`state_bytes_per_row`) takes at most ``BOUNDS_MEMORY_FRACTION`` of
    ``memory_bytes``: how far a batch that ``"auto"`` re-reads may grow cached on the workers first, given their free
    memory (:func:`~daskmeans.engine.capacity.cluster_free_memory_bytes`).

    Examples
    --------
    >>> cached_rows_within(2 * 768 * 2**20, n_features=128, n_groups=1, itemsize=4)  # 2 x 542 bytes a row
    742926
    """
    per_row = state_bytes_per_row(n_features, n_groups, itemsize, cached=True)
    return int(config.BOUNDS_MEMORY_FRACTION * memory_bytes // per_row)


def resumed_plan(plan, resume) -> NestedPlan:
    """``plan`` as a run resumed from the checkpoint state ``resume`` continues it: with the bounds and the batch's
    rows of the run that saved the state (its state blocks are in that layout)."""
    scheme, batch_rows = resume.get("bounds", plan.scheme), resume.get("batch_rows", "cached")
    if (scheme, batch_rows) == (plan.scheme, plan.batch_rows):
        return plan
    why = "as the checkpoint's state blocks"
    return replace(
        plan,
        scheme=scheme,
        batch_rows=batch_rows,
        reread_above=None,
        reasons={**plan.reasons, "scheme": why, "batch_rows": why},
    )


def default_initial_batch_size(n_clusters: int) -> int:
    """``max(5000, 80 k)``: about eighty samples per cluster to start with.

    With fewer samples per cluster the first iterations spend their time on centers that a few samples drag far:
    at k = 1000 a first batch of 80 samples per cluster reached a given energy sooner than one of 10, 20 or 40,
    and one of 160 did no better. At smaller k the larger first batch can cost a little; pass
    ``initial_batch_size`` to keep a smaller one.
    """
    return max(5000, 80 * int(n_clusters))


def doubling_ratio(sse, counts, displacement, quantile=0.0, members=None):
    """The ``quantile`` of ``sigma_C(j) / p(j)`` over the clusters with at least two samples.

    ``sigma_C(j) = sqrt(sse(j) / (v(j) (v(j) - 1)))`` estimates how far the center would move if the batch
    doubled (sec. 3.2 of the paper); ``p(j)`` is how far it just moved. A cluster that did not move counts as
    ``inf`` (it never holds the batch back); clusters with fewer than two samples do not vote. ``quantile=0``
    is the paper's minimum; otherwise the ratio of rank ``floor(quantile * m)`` among the ``m`` voters in
    ascending order (0.5: the median, as in the reference code). With sample weights, ``counts`` are the
    clusters' weights and ``members`` their numbers of samples: ``sigma_C(j) = sqrt(sse(j) / (v(j) (n_j - 1)))``,
    the weighted mean squared distance over ``n_j - 1`` (the same value with unit weights).
    """
    counts = np.asarray(counts, dtype=np.float64)
    members = counts if members is None else np.asarray(members, dtype=np.float64)
    displacement = np.asarray(displacement, dtype=np.float64)
    voters = (members >= 2) & (counts > 0)
    if not voters.any():
        return np.inf
    sigma = np.sqrt(
        np.maximum(np.asarray(sse, dtype=np.float64)[voters], 0.0) / (counts[voters] * (members[voters] - 1))
    )
    moved = displacement[voters]
    ratios = np.full(sigma.shape, np.inf)
    np.divide(sigma, moved, out=ratios, where=moved > 0)
    rank = min(int(quantile * ratios.size), ratios.size - 1)
    return float(np.partition(ratios, rank)[rank])


def nested_minibatch(array, centers, plan, context=None):
    """Run nmbatch from ``centers``, as ``plan`` says (:class:`NestedPlan`, made by :func:`nested_plan`).

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    plan : NestedPlan
    context : RunContext, optional
        With sample weights (chunked like ``array``), S, v and SSE are weighted sums, the centers weighted means.
        The callback gets each history record plus (under keys starting with ``_``, not stored in the history)
        the new centers, the :class:`NestedBatch` and the running S, v and SSE. A checkpoint saves the state
        blocks of the batch too, each written and read back by the worker that holds it, so that a resumed run
        continues exactly where it stopped (bounds included) instead of recomputing them: recomputed bounds
        would be tighter, which changes the distance counters, and recomputed distances could differ in the last
        bits, which changes the batch's SSE. Labels, distances and bounds are written every iteration; rows and
        indices only when the batch has grown or split since the last save (a shared checkpoint folder). A
        resumed run keeps the bounds and the batch's rows of the run that saved the state (:func:`resumed_plan`).

    Returns
    -------
    FitResult
        ``stop_reason`` is ``"converged"`` (an iteration over all n samples changed no assignment),
        ``"tol"``, ``"max_iter"`` or ``"max_time"``.
    """
    context = context or RunContext()
    resume = context.resume
    state = NestedState.start(centers, plan, context.passes) if resume is None else NestedState.resumed(resume)
    if resume is not None:
        plan = resumed_plan(plan, resume)
    run = _NestedRun(array, plan, context, state)
    with budget_until(context.clock.end()):
        run.iterate()
    total_passes = state.passes + run.batch.rows_read / int(array.shape[0])
    # without convergence the inertia of the final centers is one pass, made by the estimator on demand
    inertia = float(state.sse.sum()) if state.converged else None
    keep = plan.keep_batch and not run.cut
    if not keep:
        run.batch.release()
    return FitResult(
        state.centers,
        inertia,
        state.n_iter,
        state.history,
        state.stop_reason,
        total_passes,
        batch=run.batch if keep else None,
        batch_rows=run.batch_rows,
    )


@dataclass
class NestedState:
    """What nmbatch's iterations carry from one to the next (held by the driver): the centers, the batch size,
    the running per-cluster sums S, weights v, SSE and numbers of members, the last moves of the centers, the
    history and the iterations done."""

    centers: Any
    size: int
    sums: Any
    counts: Any
    sse: Any
    members: Any
    shift: Any
    history: list
    passes: float
    n_iter: int = 0
    converged: bool = False
    stop_reason: str = "max_iter"
    finished: str | None = None

    @classmethod
    def start(cls, centers, plan, passes):
        """The state before the first iteration."""
        k, d = centers.shape
        return cls(
            centers,
            plan.initial_batch_size,
            np.zeros((k, d)),
            np.zeros(k),
            np.zeros(k),
            np.zeros(k, dtype=np.int64),
            np.zeros(k),
            [],
            passes,
        )

    @classmethod
    def resumed(cls, resume):
        """The state saved in the checkpoint state ``resume`` (``finished``: the stop reason of a run that ended)."""
        finished = resume["stop_reason"]
        return cls(
            resume["centers"],
            *(resume[name] for name in ("size", "sums", "counts", "sse", "members", "shift")),
            list(resume["history"]),
            resume["passes"],
            resume["iteration"],
            resume["converged"],
            finished or "max_iter",
            finished,
        )


class _NestedRun:
    """One run of nmbatch: the prepared problem (rows, plan, run context), its batch and the state it carries."""

    def __init__(self, array, plan, context, state):
        self.array, self.plan, self.context, self.state = array, plan, context, state
        self.resume = context.resume
        resume = self.resume
        scheme = plan.scheme
        groups = (
            make_groups(state.centers, scheme, plan.n_groups)
            if resume is None
            else CenterGroups(resume["group_of"], scheme)
        )
        self.groups = groups
        self.batch = self._new_batch(plan.batch_rows)
        self.written_layouts = set()
        self.cut = False  # whether the max_time budget cut a step short, leaving the batch's blocks half-stepped

    def _new_batch(self, batch_rows):
        """An empty batch whose rows are kept (``"cached"``) or re-read (``"reread"``)."""
        plan, context = self.plan, self.context
        layout = {} if plan.min_block_rows is None else {"min_block_rows": plan.min_block_rows}
        options = dict(client=context.client, max_blocks=plan.max_blocks, weights=context.weights, **layout)
        if batch_rows == "reread":
            return RereadBatch(self.array, plan.seed, self.groups, **options)
        return NestedBatch(self.array, plan.seed, self.groups, **options, driver_rows=plan.driver_rows)

    @property
    def batch_rows(self) -> str:
        """Where the batch's rows are now: ``"cached"`` or ``"reread"``."""
        return "reread" if isinstance(self.batch, RereadBatch) else "cached"

    def reread_past_memory(self):
        """Re-read the batch from now on when it is about to grow past the rows whose cached state fits
        (``plan.reread_above``).

        The cached blocks are released before the re-read batch is made, so the two never take memory together, and
        the workers hand the memory they freed back (:func:`~daskmeans.engine.worker_memory.release_freed_memory`).
        The re-read batch starts empty and the coming step assigns all of its rows afresh against the current
        centers: the labels a revisit would give (they are exact either way), so the running sums start again from
        zero and the iterates stay nmbatch's, up to the order of the sums.
        """
        state, limit = self.state, self.plan.reread_above
        if limit is None or self.batch_rows == "reread" or state.size <= limit:
            return
        cached = self.batch
        cached.release()
        release_freed_memory(self.context.client)
        self.batch = self._new_batch("reread")
        self.batch.rows_read = cached.rows_read
        for total in (state.sums, state.counts, state.sse, state.members):
            total[...] = 0

    def checkpoint_state(self, final):
        """The checkpoint's state after the iterations done (``final``: the stop reason once the run has ended)."""
        state, batch = self.state, self.batch
        return {
            "iteration": state.n_iter,
            "centers": state.centers,
            "group_of": self.groups.group_of,
            "size": state.size,
            "batch_size": batch.size,
            "rows_read": batch.rows_read,
            "sums": state.sums,
            "counts": state.counts,
            "sse": state.sse,
            "members": state.members,
            "shift": state.shift,
            "history": state.history,
            "passes": state.passes,
            "converged": state.converged,
            "stop_reason": final,
            "layout_id": batch.layout_id,
            "batch_rows": self.batch_rows,
            "bounds": self.plan.scheme,
        }

    def write_blocks(self, directory):
        """The workers write the blocks: rows and indices only when the batch grew or split since the last save."""
        batch, checkpoint, resume = self.batch, self.context.checkpoint, self.resume
        layout = checkpoint.shared_path(batch.layout_id)
        fresh = batch.layout_id not in self.written_layouts and (
            resume is None or batch.layout_id != resume["layout_id"]
        )
        metadata = batch.write_checkpoint(
            os.path.join(directory, "blocks"), layout if fresh else None, checkpoint.storage_options
        )
        self.written_layouts.add(batch.layout_id)
        return metadata

    def restore(self):
        """The batch as the checkpoint saved it: its state blocks read back, or its size alone for a run that
        had ended or had no batch yet."""
        resume, batch, checkpoint = self.resume, self.batch, self.context.checkpoint
        if self.state.finished is None and resume["batch_size"]:
            layout = resume["layout_id"]
            batch.restore_checkpoint(
                checkpoint.extra,
                os.path.join(checkpoint.extra_directory, "blocks"),
                checkpoint.shared_path(layout),
                layout,
                resume["batch_size"],
                resume["rows_read"],
                checkpoint.storage_options,
            )
        else:
            batch.size, batch.rows_read = resume["batch_size"], resume["rows_read"]

    def budget_spent(self):
        """End the run where the ``max_time`` budget cut its step: the state stays that of the last iteration
        completed (checkpointed as the run's end, without the batch's blocks)."""
        self.cut, self.state.stop_reason = True, "max_time"
        if self.context.checkpoint is not None:
            self.context.checkpoint.save(self.checkpoint_state("max_time"))

    def iterate(self):
        """The iterations from ``state.n_iter + 1`` on, until a stop (``state.stop_reason``)."""
        state, plan, context = self.state, self.plan, self.context
        clock, weights, checkpoint = context.clock, context.weights, context.checkpoint
        n = int(self.array.shape[0])
        if self.resume is not None:
            with budget_until(None):  # the batch is read back whole, as it was saved
                self.restore()
        elif checkpoint is not None:
            checkpoint.save(self.checkpoint_state(None))
        clock.begin_laps()
        laps = LapForecast()
        for iteration in range(state.n_iter + 1, plan.max_iter + 1):
            if state.finished is not None:
                break
            centers = state.centers
            self.reread_past_memory()
            batch = self.batch
            try:
                d_sums, d_counts, d_sse, d_members, counters = batch.step(
                    centers, state.shift * SHIFT_SAFETY, state.size
                )
            except BudgetSpent:
                self.budget_spent()
                break
            state.sums += d_sums
            state.counts += d_counts
            state.sse += d_sse
            state.members += d_members
            sums, counts, sse, members = state.sums, state.counts, state.sse, state.members
            new_centers = centers_from_sums(sums, counts, centers, members)
            state.shift = center_displacement(new_centers, centers)
            ratio = doubling_ratio(sse, counts, state.shift, plan.doubling_quantile, members)
            batch_inertia = float(sse.sum())
            batch_weight = float(counts.sum()) if weights is not None else batch.size
            record = {
                "iteration": iteration,
                "batch_size": batch.size,
                "new_samples": counters["new"],
                "changed": counters["changed"],
                "distances_computed": counters["computed"],
                "distances_skipped": counters["skipped"],
                "energy": batch_inertia / batch_weight if batch_weight > 0 else 0.0,
                "inertia": batch_inertia,
                "center_shift": float(np.sum(state.shift**2)),
                "doubling_ratio": ratio if np.isfinite(ratio) else None,
                "bounds": plan.scheme,
                "wall_time": clock.elapsed(),
                "passes": state.passes + batch.rows_read / n,
            }
            state.history.append(record)
            if context.callback is not None:
                context.report(
                    record,
                    centers=new_centers,
                    batch=batch,
                    sums=sums.copy(),
                    counts=counts.copy(),
                    sse=sse.copy(),
                    members=members.copy(),
                )
            state.n_iter = iteration
            state.converged = batch.size == n and counters["new"] == 0 and counters["changed"] == 0
            state.centers = new_centers
            if state.converged:
                stop = "converged"
            elif batch.size == n and counters["new"] == 0 and record["center_shift"] <= plan.tol:
                stop = "tol"
            else:
                stop = None
            wanted = min(2 * state.size, n) - state.size if ratio > plan.rho else 0
            laps.add(clock.lap(), counters["new"], batch.size)
            # the next iteration starts only if it is expected to end within max_time, with a growth cut to the
            # rows that still fit (or none)
            growth = next_growth(laps, state.size, wanted, clock.time_left())
            if stop is None and growth is None:
                stop = "max_time"
            if stop is None:
                state.size += growth
            if checkpoint is not None:
                final = stop or ("max_iter" if iteration == plan.max_iter else None)
                if final:
                    checkpoint.save(self.checkpoint_state(final))
                else:
                    checkpoint.save(
                        self.checkpoint_state(final), extra_writer=self.write_blocks, keep_shared=[batch.layout_id]
                    )
            if stop is not None:
                state.stop_reason = stop
                break
