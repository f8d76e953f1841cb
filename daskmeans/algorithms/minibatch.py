"""Mini-batch k-means (Sculley 2010) on the engine: random batches drawn by the workers, pools of steps."""

from __future__ import annotations

import math

import numpy as np

from ..config import POOL_ROWS
from ..engine.client import compute_now
from ..kernels.minibatch import EarlyStopping, Reassignment, learning_rates, minibatch_update
from ..passes.assign import assign_stats_graph, finish_stats
from ..passes.minibatch_pool import (blocks_per_pool, choose_sampling, chunk_step_indices, pool_graph, pool_reads,
                                     step_indices)
from .result import FitResult, RunContext


#: ``MiniBatchKMeans(sampling=...)``
SAMPLING_METHODS = ("auto", "rows", "chunks")


def resolve_sampling(sampling: str, block_rows, batch_size: int, pool_rows: int = POOL_ROWS) -> str:
    """What ``sampling`` means for data in blocks of ``block_rows`` rows: ``"rows"`` or ``"chunks"``
    (:func:`daskmeans.passes.minibatch_pool.choose_sampling` for ``"auto"``)."""
    return choose_sampling(sampling, block_rows, max(1, pool_rows // batch_size) * batch_size)


def minibatch_kmeans(array, centers, context=None, *, seed, batch_size=1024, learning_rate="sklearn", max_iter=100,
                     tol=0.0, max_no_improvement=10, reassignment_ratio=0.01, pool_rows=POOL_ROWS, sampling="rows"):
    """Run mini-batch k-means from ``centers``.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    context : RunContext, optional
        With sample weights, rows are drawn uniformly and weigh in the sums and counts (as scikit-learn). The
        callback is called after each pool of steps with its record and the centers (``"_centers"``). The step
        index keys the draws, so it is the position of the random stream a checkpoint resumes.
    seed : int
        Fixes the rows of every step.
    batch_size : int
    learning_rate : {"sklearn", "beta"}
        See :func:`daskmeans.kernels.minibatch.learning_rates`.
    max_iter : int
        Epochs: the run takes at most ``max_iter * n // batch_size`` steps (as scikit-learn).
    tol : float
        Absolute tolerance on the squared center move of a step (0 disables).
    max_no_improvement : int or None
        Stop after this many steps without improvement of the smoothed batch inertia.
    reassignment_ratio : float
        Centers with less than this fraction of the largest weight are moved onto batch rows now and then
        (:class:`~daskmeans.kernels.minibatch.Reassignment`; 0 disables).
    pool_rows : int
        Rows drawn per pool of steps.
    sampling : {"rows", "chunks"}
        How a step's rows are drawn: uniformly over all rows, or over the rows of a few whole blocks per pool
        (:mod:`daskmeans.passes.minibatch_pool`).

    Returns
    -------
    FitResult
        ``stop_reason``: ``"converged"`` (tol), ``"no_improvement"``, ``"max_iter"`` or ``"max_time"``;
        ``history`` has one record per pool of steps (with the blocks it read and their bytes as stored,
        :func:`~daskmeans.passes.minibatch_pool.pool_reads`); ``n_steps`` and ``seen_counts`` are set.
    """
    context = context or RunContext()
    clock, client, weights, checkpoint = context.clock, context.client, context.weights, context.checkpoint
    passes = context.passes
    resume = context.resume
    if resume is not None:
        centers = resume["centers"]
    n = int(array.shape[0])
    k = centers.shape[0]
    total_steps = max(1, (max_iter * n) // batch_size)
    steps_per_pool = max(1, pool_rows // batch_size)
    seen = np.zeros(k)
    stopping = EarlyStopping(n, batch_size, max_no_improvement, tol)
    reassignment = Reassignment(reassignment_ratio, k, seed)
    history = []
    stop_reason = "max_iter"
    step = 0
    finished = None
    if resume is not None:
        centers, seen, history, step, passes = (resume["centers"], resume["seen"], list(resume["history"]),
                                                resume["step"], resume["passes"])
        stopping = _restore(EarlyStopping, resume["stopping"])
        reassignment = _restore(Reassignment, resume["reassignment"])
        finished = resume["stop_reason"]
        stop_reason = finished or stop_reason
    elif checkpoint is not None:
        checkpoint.save(_state(step, centers, seen, stopping, reassignment, history, passes, None))
    block_rows = array.chunks[0]
    per_pool = blocks_per_pool(block_rows, steps_per_pool * batch_size)
    while finished is None and step < total_steps:
        n_steps = min(steps_per_pool, total_steps - step)
        if sampling == "chunks":
            indices = chunk_step_indices(block_rows, batch_size, seed, step, n_steps, steps_per_pool, per_pool)
        else:
            indices = step_indices(n, batch_size, seed, step, n_steps)
        blocks_read, bytes_read = pool_reads(array, indices)
        time_left = clock.time_left()
        ((centers, seen, records, reason, stopping, reassignment),) = compute_now(
            pool_graph(array, indices, centers, seen, learning_rate, stopping, time_left, weights, reassignment, step),
            client=client,
        )
        step += len(records)
        record = {
            "iteration": len(history) + 1,
            "steps": step,
            "batch_size": batch_size,
            "energy": stopping.ewa,
            "batch_inertia": records[-1][0],
            "center_shift": records[-1][1],
            "wall_time": clock.elapsed(),
            "passes": passes + step * batch_size / n,
            "blocks_read": blocks_read,
            "bytes_read": bytes_read,
        }
        history.append(record)
        context.report(record, centers=centers)
        stop = reason if reason is not None else "max_time" if clock.out_of_time() else None
        if checkpoint is not None:
            final = stop or ("max_iter" if step >= total_steps else None)
            checkpoint.save(_state(step, centers, seen, stopping, reassignment, history, passes, final))
        if stop is not None:
            stop_reason = stop
            break
    # the inertia of the final centers is one pass, made by the estimator on demand
    return FitResult(centers, None, math.ceil(step * batch_size / n), history, stop_reason,
                     passes + step * batch_size / n, n_steps=step, seen_counts=seen)


def _state(step, centers, seen, stopping, reassignment, history, passes, stop_reason):
    """The checkpoint state after ``step`` steps (``stop_reason`` set once the run has ended)."""
    return {"step": step, "centers": centers, "seen": seen, "stopping": dict(vars(stopping)),
            "reassignment": dict(vars(reassignment)), "history": history, "passes": passes,
            "stop_reason": stop_reason}


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
    (raw,) = compute_now(assign_stats_graph(array, centers, weights), client=client)
    stats = finish_stats(raw)
    total = float(stats.counts.sum())
    rates = learning_rates(learning_rate, stats.counts, total, seen_counts)
    new_centers = minibatch_update(centers, stats.sums, stats.counts, rates)
    return new_centers, np.asarray(seen_counts, dtype=np.float64) + stats.counts, stats.inertia
