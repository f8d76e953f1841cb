"""VRKM and VRKM++ (Zhao et al., "Large-scale k-means clustering via variance reduction"): epochs of one full pass,
a position correction and a sequential inner loop of variance-reduced steps with a constant learning rate.

Each epoch:

1. the epoch pass (:mod:`daskmeans.passes.epoch`) assigns every row to the current centers ``C~`` (its energy is
   recorded) and gathers the epoch's ``T`` sampled rows, drawn uniformly with replacement (weight-proportionally
   with sample weights), with their snapshot labels;
2. empty clusters are refilled with far rows (never reset to zero), then the position correction: VRKM
   (Algorithms 2-3) ``c~new = c~ - grad f~(c~)`` with ``grad f~(c~) = (1/v) sum (c~ - x)`` over the cluster, and
   the batch gradient ``G = (1/v) sum (c~new - x)`` at ``c~new`` for the variance-reduced steps; VRKM++
   (Algorithm 4) ``c~new`` = the cluster means and ``G = 0``. Over the same partition ``G`` is zero up to float64
   rounding, which is why the paper finds both variants give the same clustering; VRKM still computes and applies
   it, as Algorithm 3 does;
3. the inner loop runs the ``T`` steps from ``C_0 = C~new``, batched (:mod:`daskmeans.kernels.vrkm_batched`: the
   nearest centers of ``inner_batch_size`` draws at a time by one GEMM) or per sample as in the paper
   (:mod:`daskmeans.kernels.vrkm`, with candidate lists made in the pass), on the driver, or on one pinned worker
   when the sample is larger than ``driver_sample_bytes`` (on another one if that worker dies). The driver gets
   the sample with the pass's statistics, in the same round trip; for a worker it stays on the workers that
   gathered it and streams in one segment at a time. The result is the same either way;
4. ``C~ = C_T``.

It stops after ``max_epochs``, when the energy changed by at most ``tol`` (relative) between two passes (the
centers of that pass are kept), or when ``max_time`` is spent.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import replace

import numpy as np
import psutil

from ..config import MIN_SEGMENTS, REMAKE_COST, VRKM_INNER_BATCH_SIZE
from ..engine.client import compute_now, persist_now, run_pinned
from ..kernels.vrkm import InnerLoop
from ..kernels.vrkm_batched import BatchedInnerLoop
from ..passes.assign import finish_stats
from ..passes.epoch import (SegmentsHere, SegmentsOnCluster, epoch_pass_graph, epoch_pass_on_driver, ordered_segment,
                            segment_starts)
from ..passes.sampling import (
    uniform_indices_with_replacement,
    weight_totals_graph,
    weighted_indices_with_replacement_graph,
)
from .relocation import centers_from_sums, relocate_empty_clusters, with_enough_far_rows
from .result import FitResult, RunContext

VARIANTS = ("vrkm++", "vrkm")


def epoch_sizes(epoch_size, n_samples: int):
    """The number of inner steps of epoch ``s`` (1-based), as a function.

    Parameters
    ----------
    epoch_size : int, float or "doubling"
        An int is a number of steps, a float a fraction of ``n_samples`` (rounded up), ``"doubling"`` is the
        paper's ``T = 2**s``.
    """
    if isinstance(epoch_size, str):
        return lambda s: 2**s
    if isinstance(epoch_size, (int, np.integer)):
        return lambda s: int(epoch_size)
    steps = max(1, math.ceil(float(epoch_size) * n_samples))
    return lambda s: steps


def sample_budget(driver_sample_bytes):
    """The most bytes of an epoch's sample (its rows as computed) the driver holds: ``driver_sample_bytes``, by
    default a quarter of the driver's available memory."""
    return psutil.virtual_memory().available // 4 if driver_sample_bytes is None else int(driver_sample_bytes)


def largest_sample_bytes(epoch_size, max_epochs: int, n_samples: int, row_bytes: int) -> int:
    """Bytes of the largest epoch sample a run of ``max_epochs`` draws (``row_bytes`` a row): the first epoch's, or
    the last one's when the epochs grow (``"doubling"``)."""
    sizes = epoch_sizes(epoch_size, n_samples)
    return max(sizes(1), sizes(max_epochs)) * int(row_bytes)


def position_correction(stats, centers, variant):
    """The corrected snapshot centers ``C~new`` and the batch gradient at them (None for VRKM++).

    Parameters
    ----------
    stats : ClusterStats
        Sums and counts of the partition by ``centers`` (after relocating empty clusters).
    centers : ndarray (k, d)
        ``C~``, the centers of the pass.
    variant : {"vrkm++", "vrkm"}

    Returns
    -------
    corrected : ndarray (k, d), dtype of ``centers``
    batch_gradient : float64 ndarray (k, d) or None
        ``(1/v) sum (c~new - x)`` per cluster (zero for clusters without weight).
    """
    if variant == "vrkm++":
        return centers_from_sums(stats.sums, stats.counts, centers), None
    filled = stats.counts > 0
    means = stats.sums[filled] / stats.counts[filled, None]
    current = centers.astype(np.float64)
    gradient = np.zeros_like(current)
    gradient[filled] = current[filled] - means  # grad f~(c~) = (1/v) sum (c~ - x)
    corrected = current - gradient
    batch_gradient = np.zeros_like(current)
    batch_gradient[filled] = corrected[filled] - means  # grad f~(c~new), same partition
    return corrected.astype(centers.dtype), batch_gradient


def _draws(n, steps, seed, epoch, weights, block_totals, client):
    if weights is None:
        return uniform_indices_with_replacement(n, steps, seed, "vrkm", epoch)
    graph = weighted_indices_with_replacement_graph(weights, block_totals, steps, seed, "vrkm", epoch)
    return compute_now(graph, client=client)[0]


def segment_rows_for(n_draws: int, array) -> int:
    """Draws per segment: at least ``MIN_SEGMENTS`` segments (the candidate lists are remade for each), and none
    larger than one block of the data."""
    return max(1, min(math.ceil(n_draws / MIN_SEGMENTS), int(max(array.chunks[0]))))


def run_segments(pieces, compute, starts, n_draws, snapshot, pass_centers, eta, batch_gradient, agree_rule,
                 n_candidates, batch_size=1):
    """The inner loop over an epoch's sample, one segment at a time.

    With ``batch_size > 1`` the loop is batched (:class:`~daskmeans.kernels.vrkm_batched.BatchedInnerLoop`) and the
    segments carry no candidate lists. In the per-sample loop, the candidate lists made in the pass are used while
    they keep the steps cheap; once the centers have drifted so far from the pass's that a step needs more than
    ``REMAKE_COST`` distances per listed candidate, each remaining segment gets its lists remade against the
    centers of that moment. This changes the speed only.

    Parameters
    ----------
    pieces : list of list
        ``pieces[s][b]``: block ``b``'s part of segment ``s``: Delayed objects or Futures of a sample kept on the
        cluster, or the parts themselves when the pass brought them here (``compute`` None).
    compute : callable or None
        Computes a delayed object and returns its value (driver client, worker client or local scheduler).
    starts : int array
        First draw of each segment.
    n_draws : int
    snapshot : ndarray (k, d)
        ``C~new``.
    pass_centers : ndarray (k, d)
        ``C~``, the centers the pass made the candidate lists against.
    batch_gradient, agree_rule, n_candidates :
        See :class:`~daskmeans.kernels.vrkm.InnerLoop`.
    batch_size : int
        Draws whose nearest centers are found together (1: the paper's per-sample loop).

    Returns
    -------
    centers : ndarray (k, d)
    counts : InnerLoopCounts
    remade : int
        Segments whose candidate lists were remade.
    """
    if batch_size > 1:
        loop = BatchedInnerLoop(snapshot, eta, batch_size=batch_size, batch_gradient=batch_gradient,
                                agree_rule=agree_rule)
    else:
        loop = InnerLoop(snapshot, eta, batch_gradient=batch_gradient, agree_rule=agree_rule,
                         reference_centers=pass_centers)
    segments = SegmentsHere(pieces) if compute is None else SegmentsOnCluster(pieces, compute)
    ends = list(starts[1:]) + [n_draws]
    pass_lists = True
    remade = 0
    for s, (first, last) in enumerate(zip(starts, ends)):
        done = 0
        if pass_lists:
            sample = ordered_segment(segments.parts(s), int(first), int(last - first))
            done = loop.run(*sample.as_tuple(), max_cost=REMAKE_COST * (n_candidates + 1))
            pass_lists = done == sample.rows.shape[0]
        if done < last - first:
            loop.rebase()
            sample = ordered_segment(segments.parts(s, loop.centers(), n_candidates), int(first),
                                     int(last - first))
            loop.run(*(values[done:] for values in sample.as_tuple()))
            remade += 1
        del sample
    return loop.centers(), loop.counts(), remade


def _epoch_pass(array, centers, draws, weights, n_candidates, client, keep_sample, driver=None):
    """Run the epoch pass (on the driver's threads with ``driver``, the data gathered there).

    Returns
    -------
    stats : ClusterStats
    pieces : list of list
        ``pieces[s][b]``: persisted on the workers that computed them (``keep_sample``), else here (values).
    starts : int array
        First draw of each segment.
    """
    # the driver takes the sample whole; a worker streams it in segments
    segment_rows = segment_rows_for(draws.size, array) if keep_sample else max(1, draws.size)
    if driver is not None:
        raw, pieces = epoch_pass_on_driver(driver, centers, draws, segment_rows=segment_rows,
                                           n_candidates=n_candidates)
        return finish_stats(raw), pieces, segment_starts(draws.size, segment_rows)
    stats_graph, segments = epoch_pass_graph(array, centers, draws, weights=weights, segment_rows=segment_rows,
                                             n_candidates=n_candidates)
    flat = [piece for segment in segments for piece in segment]
    n_blocks = len(segments[0])
    if keep_sample:
        persisted = persist_now(stats_graph, *flat, client=client)
        (raw,) = compute_now(persisted[0], client=client)
        flat = persisted[1:]
    else:
        # one round trip brings the statistics and the sample
        raw, *flat = compute_now(stats_graph, *flat, client=client)
    pieces = [list(flat[s * n_blocks:(s + 1) * n_blocks]) for s in range(len(segments))]
    return finish_stats(raw), pieces, segment_starts(draws.size, segment_rows)


def _state(epoch, centers, history, passes, previous_energy, stop_reason, inertia):
    """The checkpoint state after ``epoch`` (``stop_reason`` set once the run has ended)."""
    return {"epoch": epoch, "centers": centers, "history": history, "passes": passes,
            "previous_energy": previous_energy, "stop_reason": stop_reason, "inertia": inertia}


def vrkm(array, centers, context=None, *, variant="vrkm++", eta, epoch_size=0.5, max_epochs=100, tol=1e-5, seed=0,
         agree_rule="paper", n_candidates=16, inner_batch_size=VRKM_INNER_BATCH_SIZE, driver_sample_bytes=None,
         driver=None):
    """Run VRKM or VRKM++ epochs from ``centers``.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    context : RunContext, optional
        With sample weights, draws are weight-proportional and the statistics weighted. The epoch index keys the
        draws, so it is the position of the random stream a checkpoint resumes. The record of an epoch with an
        inner loop reaches the callback with the centers after that loop (``"_centers"``).
    variant : {"vrkm++", "vrkm"}
    eta : float
        The constant learning rate.
    epoch_size : int, float or "doubling"
        Inner steps per epoch (see :func:`epoch_sizes`).
    max_epochs : int
    tol : float
        Stop when ``|E_prev - E| <= tol * E_prev`` between two consecutive passes.
    seed : int
        Root seed of the draws.
    agree_rule : {"paper", "reference"}
    n_candidates : int
        Candidate centers per sampled row of the per-sample loop (speed only: the result does not depend on it).
    inner_batch_size : int
        Draws of the inner loop whose nearest centers are found together, by one GEMM against the centers at the
        start of their batch (:mod:`daskmeans.kernels.vrkm_batched`); 1 is the paper's per-sample loop.
    driver_sample_bytes : int, optional
        With a distributed client, the inner loop runs on the driver when the epoch's sample (bytes of its rows)
        is at most this (it then comes with the pass, whole), else on one worker (it streams in one segment at a
        time); the result is the same. Default: a quarter of the driver's available memory.
    driver : DriverCopy, optional
        ``array`` and the weights gathered into the driver's memory (:class:`~daskmeans.engine.driver.DriverCopy`):
        the epoch passes then run on the driver's threads without a Dask graph or a round trip to the workers
        (:func:`~daskmeans.passes.epoch.epoch_pass_on_driver`), with the same result.

    Returns
    -------
    FitResult
    """
    context = context or RunContext()
    settings = dict(variant=variant, eta=eta, epoch_size=epoch_size, max_epochs=max_epochs, tol=tol, seed=seed,
                    agree_rule=agree_rule, n_candidates=n_candidates, inner_batch_size=inner_batch_size,
                    driver_sample_bytes=driver_sample_bytes)
    if driver is None:
        return _epochs(array, centers, context, None, **settings)
    with driver.threads():
        return _epochs(driver.array, centers, replace(context, client=None, weights=driver.weights), driver,
                       **settings)


def _epochs(array, centers, context, driver, *, variant, eta, epoch_size, max_epochs, tol, seed, agree_rule,
            n_candidates, inner_batch_size, driver_sample_bytes):
    """The epochs of :func:`vrkm` (``array`` and the context's weights those of ``driver`` when given)."""
    clock, client, weights, checkpoint = context.clock, context.client, context.weights, context.checkpoint
    passes = context.passes
    n, n_features = array.shape
    total_weight = float(n if context.total_weight is None else context.total_weight)
    sizes = epoch_sizes(epoch_size, n)
    driver_sample_bytes = sample_budget(driver_sample_bytes)
    block_totals = None
    if weights is not None:
        (block_totals,) = compute_now(weight_totals_graph(weights), client=client)
    listed = 0 if inner_batch_size > 1 else n_candidates  # the batched loop needs no candidate lists
    history = []
    previous_energy = None
    stop_reason = "max_epochs"
    final_stats = None
    n_epochs = 0
    resume = context.resume
    if resume is not None:
        centers, history, passes = resume["centers"], list(resume["history"]), resume["passes"]
        previous_energy, n_epochs = resume["previous_energy"], resume["epoch"]
        if resume["stop_reason"] is not None:
            return FitResult(centers, resume["inertia"], n_epochs, history, resume["stop_reason"], passes)
    elif checkpoint is not None:
        checkpoint.save(_state(0, centers, history, passes, None, None, None))
    for epoch in range(n_epochs + 1, max_epochs + 1):
        steps = int(sizes(epoch))
        draws = _draws(n, steps, seed, epoch, weights, block_totals, client)
        started = time.perf_counter()
        on_worker = client is not None and steps * n_features * array.dtype.itemsize > driver_sample_bytes
        stats, pieces, starts = _epoch_pass(array, centers, draws, weights, listed, client, keep_sample=on_worker,
                                            driver=driver)
        stats, extra = with_enough_far_rows(stats, array, centers, weights, client)
        passes += 1 + extra
        energy = stats.inertia / total_weight
        record = {
            "iteration": epoch,
            "epoch": epoch,
            "energy": energy,
            "inertia": stats.inertia,
            "epoch_size": steps,
            "pass_time": time.perf_counter() - started,
            "wall_time": clock.elapsed(),
            "passes": passes,
        }
        n_epochs = epoch
        converged = previous_energy is not None and abs(previous_energy - energy) <= tol * previous_energy
        if converged or clock.out_of_time():
            # these centers are the result: their energy is known, no inner loop nor final pass is needed
            stop_reason = "converged" if converged else "max_time"
            final_stats = stats
            history.append(record)
            context.report(record)
            if checkpoint is not None:
                record["stop_reason"] = stop_reason
                checkpoint.save(_state(epoch, centers, history, passes, previous_energy, stop_reason, stats.inertia))
            break
        record["relocated"] = relocate_empty_clusters(stats)
        snapshot, batch_gradient = position_correction(stats, centers, variant)
        started = time.perf_counter()
        loop_args = (starts, steps, snapshot, centers, eta, batch_gradient, agree_rule, n_candidates,
                     inner_batch_size)
        if on_worker:
            # the sample stays on the workers that gathered it; one of them streams it in
            keys = [[piece.key for piece in segment] for segment in pieces]
            (centers, counts, remade), where = run_pinned(client, run_segments, keys, *loop_args,
                                                          key=f"daskmeans-vrkm-inner-loop-{uuid.uuid4().hex}")
        else:
            where = "driver"
            centers, counts, remade = run_segments(pieces, None, *loop_args)
        del pieces
        record.update({
            "inner_steps": counts.steps,
            "changed": counts.changed,
            "agree_updates": counts.agree_updates,
            "distances_per_step": counts.distances / max(1, counts.steps),
            "lists_remade": remade,
            "inner_time": time.perf_counter() - started,
            "inner_on": where,
        })
        history.append(record)
        context.report(record, centers=centers)
        previous_energy = energy
        out_of_time = clock.out_of_time()
        if checkpoint is not None:
            final = "max_time" if out_of_time else "max_epochs" if epoch == max_epochs else None
            if final is not None:
                record["stop_reason"] = final
            checkpoint.save(_state(epoch, centers, history, passes, previous_energy, final, None))
        if out_of_time:
            stop_reason = "max_time"
            break
    if history:
        history[-1]["stop_reason"] = stop_reason
    # centers that moved after the last pass: their inertia is one pass, made by the estimator on demand
    inertia = None if final_stats is None else final_stats.inertia
    return FitResult(centers, inertia, n_epochs, history, stop_reason, passes)
