"""Mini-batch k-means (Sculley 2010) on the engine: random batches drawn by the workers, pools of steps."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import config
from ..engine.client import compute_now
from ..kernels.minibatch import EarlyStopping, Reassignment, learning_rates, minibatch_update
from ..passes.assign import assign_stats_graph, finish_stats
from ..passes.minibatch_pool import (
    blocks_per_pool,
    choose_sampling,
    chunk_step_indices,
    pool_graph,
    pool_reads,
    step_indices,
)
from .plan import FitPlan, SeedingPlan
from .result import FitResult, RunContext

#: ``MiniBatchKMeans(sampling=...)``
SAMPLING_METHODS = ("auto", "rows", "chunks")


def resolve_sampling(sampling: str, block_rows, batch_size: int, pool_rows=None) -> str:
    """What ``sampling`` means for data in blocks of ``block_rows`` rows: ``"rows"`` or ``"chunks"``
    (:func:`daskmeans.passes.minibatch_pool.choose_sampling` for ``"auto"``; ``pool_rows`` None:
    :data:`~daskmeans.config.POOL_ROWS`)."""
    pool_rows = config.POOL_ROWS if pool_rows is None else pool_rows
    return choose_sampling(sampling, block_rows, max(1, pool_rows // batch_size) * batch_size)


@dataclass(frozen=True, kw_only=True)
class MiniBatchPlan(FitPlan):
    """What a run of mini-batch k-means does, decided before it starts (:class:`~daskmeans.algorithms.plan.FitPlan`).

    Attributes
    ----------
    seed : int
        Fixes the rows of every step.
    batch_size : int
    sampling : {"rows", "chunks"}
        How a step's rows are drawn: uniformly over all rows, or over the rows of a few whole blocks per pool
        (:mod:`daskmeans.passes.minibatch_pool`).
    total_steps : int
        Steps the run takes at most: ``max_iter * n // batch_size`` epochs' worth (as scikit-learn), at least 1.
    steps_per_pool : int
        Steps whose rows one pool draws (``pool_rows // batch_size``, at least 1).
    blocks_per_pool : int
        Whole blocks a pool reads with ``sampling="chunks"``.
    learning_rate : {"sklearn", "beta"}
        See :func:`daskmeans.kernels.minibatch.learning_rates`.
    tol : float
        Absolute tolerance on the squared center move of a step (0 disables).
    max_no_improvement : int or None
        Stop after this many steps without improvement of the smoothed batch inertia.
    reassignment_ratio : float
        Centers with less than this fraction of the largest weight are moved onto batch rows now and then
        (:class:`~daskmeans.kernels.minibatch.Reassignment`; 0 disables).
    seeding : SeedingPlan, optional
        How the fit drew the centers the run starts from.
    """

    seed: int = 0
    batch_size: int = 1024
    sampling: str = "rows"
    total_steps: int = 1
    steps_per_pool: int = 1
    blocks_per_pool: int = 1
    learning_rate: str = "sklearn"
    tol: float = 0.0
    max_no_improvement: int | None = 10
    reassignment_ratio: float = 0.01
    seeding: SeedingPlan | None = None


def minibatch_plan(array, batch_size=1024, sampling="rows", *, max_iter=100, pool_rows=None, **given) -> MiniBatchPlan:
    """The plan of mini-batch k-means over ``array``: the sampling (``"auto"`` resolved by
    :func:`resolve_sampling`), the steps (``max_iter`` epochs) and the pools (``pool_rows`` rows each, None:
    :data:`~daskmeans.config.POOL_ROWS`); the other fields of :class:`MiniBatchPlan` are taken from ``given`` (its
    ``reasons`` join those of the choices made here)."""
    n = int(array.shape[0])
    pool_rows = config.POOL_ROWS if pool_rows is None else pool_rows
    block_rows = array.chunks[0]
    steps_per_pool = max(1, pool_rows // batch_size)
    resolved = resolve_sampling(sampling, block_rows, batch_size, pool_rows)
    reasons = {
        "sampling": f"sampling={sampling!r}"
        + (
            f": {len(block_rows)} blocks, CHUNK_SAMPLING_MIN_SAVING={config.CHUNK_SAMPLING_MIN_SAVING}"
            if sampling == "auto"
            else ""
        ),
        "total_steps": f"max_iter={max_iter} epochs of {n:,} rows in batches of {batch_size}",
        "steps_per_pool": f"POOL_ROWS={pool_rows:,} rows a pool",
    }
    return MiniBatchPlan(
        batch_size=batch_size,
        sampling=resolved,
        total_steps=max(1, (max_iter * n) // batch_size),
        steps_per_pool=steps_per_pool,
        blocks_per_pool=blocks_per_pool(block_rows, steps_per_pool * batch_size),
        **{**given, "reasons": {**reasons, **given.get("reasons", {})}},
    )


@dataclass
class MiniBatchState:
    """What mini-batch k-means carries from one pool of steps to the next: the centers, the weight each has seen,
    the early-stopping and reassignment states, the history, the steps taken and the passes spent before."""

    centers: Any
    seen: Any
    stopping: Any
    reassignment: Any
    history: list
    passes: float
    step: int = 0
    finished: str | None = None

    def checkpoint_state(self, stop_reason):
        """The checkpoint state after the steps taken (``stop_reason`` set once the run has ended)."""
        return _state(
            self.step, self.centers, self.seen, self.stopping, self.reassignment, self.history, self.passes, stop_reason
        )

    @classmethod
    def resumed(cls, resume):
        """The state saved in the checkpoint state ``resume``."""
        return cls(
            resume["centers"],
            resume["seen"],
            _restore(EarlyStopping, resume["stopping"]),
            _restore(Reassignment, resume["reassignment"]),
            list(resume["history"]),
            resume["passes"],
            resume["step"],
            resume["stop_reason"],
        )


def minibatch_kmeans(array, centers, plan, context=None):
    """Run mini-batch k-means from ``centers``, as ``plan`` says (:class:`MiniBatchPlan`, :func:`minibatch_plan`).

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    plan : MiniBatchPlan
    context : RunContext, optional
        With sample weights, rows are drawn uniformly and weigh in the sums and counts (as scikit-learn). The
        callback is called after each pool of steps with its record and the centers (``"_centers"``). The step
        index keys the draws, so it is the position of the random stream a checkpoint resumes.

    Returns
    -------
    FitResult
        ``stop_reason``: ``"converged"`` (tol), ``"no_improvement"``, ``"max_iter"`` or ``"max_time"``;
        ``history`` has one record per pool of steps (with the blocks it read and their bytes as stored,
        :func:`~daskmeans.passes.minibatch_pool.pool_reads`); ``n_steps`` and ``seen_counts`` are set.
    """
    context = context or RunContext()
    clock, client, weights, checkpoint = context.clock, context.client, context.weights, context.checkpoint
    resume = context.resume
    n = int(array.shape[0])
    batch_size, total_steps, steps_per_pool, seed = plan.batch_size, plan.total_steps, plan.steps_per_pool, plan.seed
    if resume is not None:
        state = MiniBatchState.resumed(resume)
    else:
        k = centers.shape[0]
        state = MiniBatchState(
            centers,
            np.zeros(k),
            EarlyStopping(n, batch_size, plan.max_no_improvement, plan.tol),
            Reassignment(plan.reassignment_ratio, k, seed),
            [],
            context.passes,
        )
        if checkpoint is not None:
            checkpoint.save(state.checkpoint_state(None))
    stop_reason = state.finished or "max_iter"
    block_rows = array.chunks[0]
    while state.finished is None and state.step < total_steps:
        step, history, passes = state.step, state.history, state.passes
        n_steps = min(steps_per_pool, total_steps - step)
        if plan.sampling == "chunks":
            indices = chunk_step_indices(
                block_rows, batch_size, seed, step, n_steps, steps_per_pool, plan.blocks_per_pool
            )
        else:
            indices = step_indices(n, batch_size, seed, step, n_steps)
        blocks_read, bytes_read = pool_reads(array, indices)
        time_left = clock.time_left()
        ((state.centers, state.seen, records, reason, state.stopping, state.reassignment),) = compute_now(
            pool_graph(
                array,
                indices,
                state.centers,
                state.seen,
                plan.learning_rate,
                state.stopping,
                time_left,
                weights,
                state.reassignment,
                step,
            ),
            client=client,
        )
        state.step = step = step + len(records)
        record = {
            "iteration": len(history) + 1,
            "steps": step,
            "batch_size": batch_size,
            "energy": state.stopping.ewa,
            "batch_inertia": records[-1][0],
            "center_shift": records[-1][1],
            "wall_time": clock.elapsed(),
            "passes": passes + step * batch_size / n,
            "blocks_read": blocks_read,
            "bytes_read": bytes_read,
        }
        history.append(record)
        context.report(record, centers=state.centers)
        stop = reason if reason is not None else "max_time" if clock.out_of_time() else None
        if checkpoint is not None:
            final = stop or ("max_iter" if step >= total_steps else None)
            checkpoint.save(state.checkpoint_state(final))
        if stop is not None:
            stop_reason = stop
            break
    step = state.step
    # the inertia of the final centers is one pass, made by the estimator on demand
    return FitResult(
        state.centers,
        None,
        math.ceil(step * batch_size / n),
        state.history,
        stop_reason,
        state.passes + step * batch_size / n,
        n_steps=step,
        seen_counts=state.seen,
    )


def _state(step, centers, seen, stopping, reassignment, history, passes, stop_reason):
    """The checkpoint state after ``step`` steps (``stop_reason`` set once the run has ended)."""
    return {
        "step": step,
        "centers": centers,
        "seen": seen,
        "stopping": dict(vars(stopping)),
        "reassignment": dict(vars(reassignment)),
        "history": history,
        "passes": passes,
        "stop_reason": stop_reason,
    }


def _restore(cls, attributes):
    """An ``EarlyStopping`` or ``Reassignment`` with the saved attributes."""
    restored = cls.__new__(cls)
    restored.__dict__.update(attributes)
    return restored


def minibatch_partial_step(array, centers, seen_counts, learning_rate, weights=None, client=None):
    """One mini-batch update with all of ``array`` as the batch (``partial_fit``).

    Returns
    -------
    centers : ndarray (k, d)
    seen_counts : float64 (k,)
    batch_inertia : float
        Weighted SSE of the batch for the centers before the update.
    """
    (raw,) = compute_now(assign_stats_graph(array, centers, weights, client=client), client=client)
    stats = finish_stats(raw)
    total = float(stats.counts.sum())
    rates = learning_rates(learning_rate, stats.counts, total, seen_counts)
    new_centers = minibatch_update(centers, stats.sums, stats.counts, rates)
    return new_centers, np.asarray(seen_counts, dtype=np.float64) + stats.counts, stats.inertia
