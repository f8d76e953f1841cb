"""VRKM and VRKM++ (Zhao et al., "Large-scale k-means clustering via variance reduction"): epochs of one full pass,
a position correction and a sequential inner loop of variance-reduced steps with a constant learning rate.

Each epoch:

1. the epoch pass (:mod:`daskmeans.passes.epoch`) assigns every row to the current centers ``C~`` (its energy is
   recorded) and gathers the epoch's ``T`` sampled rows, drawn uniformly with replacement (weight-proportionally
   with sample weights), with their snapshot labels: all of them, or the first pool of
   :data:`~daskmeans.config.VRKM_POOL_BYTES` when the sample is larger (:mod:`daskmeans.algorithms.vrkm_pools`);
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
   gathered it and streams in one segment at a time. The result is the same either way. The pools after the first
   are read one at a time, each by a pass over the blocks its draws fall in, and the loop continues through them;
4. ``C~ = C_T``.

It stops after ``max_epochs``, when the energy changed by at most ``tol`` (relative) between two passes (the
centers of that pass are kept), or when ``max_time`` is spent.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import psutil

from .. import config
from ..engine.client import compute_now
from ..engine.deadline import BudgetSpent, budget_until
from ..passes.sampling import (
    uniform_indices_with_replacement,
    weight_totals_graph,
    weighted_indices_with_replacement_graph,
)
from .plan import FitPlan, SeedingPlan
from .relocation import centers_from_sums, relocate_empty_clusters, with_enough_far_rows
from .result import FitResult, RunContext
from .vrkm_pools import (
    EpochSampler,
    InnerLoopTask,
    epoch_inner_loop,
    epoch_pools,
)

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


def _state(epoch, centers, history, passes, previous_energy, stop_reason, inertia):
    """The checkpoint state after ``epoch`` (``stop_reason`` set once the run has ended)."""
    return {
        "epoch": epoch,
        "centers": centers,
        "history": history,
        "passes": passes,
        "previous_energy": previous_energy,
        "stop_reason": stop_reason,
        "inertia": inertia,
    }


@dataclass(frozen=True, kw_only=True)
class VRKMPlan(FitPlan):
    """What a run of VRKM or VRKM++ does, decided before it starts (:class:`~daskmeans.algorithms.plan.FitPlan`).

    Attributes
    ----------
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
    sample_bytes : int
        With a distributed client, an epoch's inner loop runs on the driver when its sample (bytes of its rows) is
        at most this (it then comes with the pass, whole), else on one worker (it streams in one segment at a
        time); the result is the same.
    driver_rows : int
        Most rows whose epoch passes run on the driver.
    on_driver : bool
        Whether the epoch passes run on the driver (on a :class:`~daskmeans.engine.driver.DriverCopy` of the rows).
    seeding : SeedingPlan, optional
        How the fit drew the centers the run starts from.
    """

    variant: str = "vrkm++"
    eta: float = 0.0
    epoch_size: Any = 0.5
    max_epochs: int = 100
    tol: float = 1e-5
    seed: int = 0
    agree_rule: str = "paper"
    n_candidates: int = 16
    inner_batch_size: int
    sample_bytes: int = 0
    driver_rows: int = 0
    on_driver: bool = False
    seeding: SeedingPlan | None = None


def vrkm_plan(array, *, driver_sample_bytes=None, inner_batch_size=None, driver_rows=0, **given) -> VRKMPlan:
    """The plan of VRKM over ``array``: the sample budget of the driver (``driver_sample_bytes``,
    :func:`sample_budget`), the inner loop's batch (``inner_batch_size`` None:
    :data:`~daskmeans.config.VRKM_INNER_BATCH_SIZE`) and whether the epoch passes run on the driver: at most
    ``driver_rows`` rows (resolved rows) and the largest epoch sample within the budget. The other fields of
    :class:`VRKMPlan` are taken from ``given`` (``eta`` is required)."""
    n, d = (int(s) for s in array.shape)
    budget = sample_budget(driver_sample_bytes)
    reasons = {
        "sample_bytes": f"driver_sample_bytes={driver_sample_bytes}"
        if driver_sample_bytes is not None
        else "a quarter of the driver's available memory"
    }
    if inner_batch_size is None:
        inner_batch_size = config.VRKM_INNER_BATCH_SIZE
        reasons["inner_batch_size"] = "VRKM_INNER_BATCH_SIZE"
    plan = VRKMPlan(inner_batch_size=inner_batch_size, sample_bytes=budget, driver_rows=driver_rows, **given)
    sample = largest_sample_bytes(plan.epoch_size, plan.max_epochs, n, d * array.dtype.itemsize)
    on_driver = n <= driver_rows and sample <= budget
    reasons["on_driver"] = (
        f"{n:,} rows {'<=' if n <= driver_rows else '>'} {driver_rows:,}, the largest epoch "
        f"sample {sample:,} bytes {'<=' if sample <= budget else '>'} {budget:,}"
    )
    return replace(plan, on_driver=on_driver, reasons=reasons)


@dataclass
class VRKMState:
    """What VRKM's epochs carry from one to the next: the centers, the history, the passes over the data, the
    energy of the last pass and the epochs done (the checkpoint's state, :func:`_state`)."""

    centers: Any
    history: list
    passes: float
    previous_energy: float | None = None
    n_epochs: int = 0


def vrkm(array, centers, plan, context=None, driver=None):
    """Run VRKM or VRKM++ epochs from ``centers``, as ``plan`` says (:class:`VRKMPlan`, :func:`vrkm_plan`).

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    plan : VRKMPlan
    context : RunContext, optional
        With sample weights, draws are weight-proportional and the statistics weighted. The epoch index keys the
        draws, so it is the position of the random stream a checkpoint resumes. The record of an epoch with an
        inner loop reaches the callback with the centers after that loop (``"_centers"``).
    driver : DriverCopy, optional
        ``array`` and the weights gathered into the driver's memory (:class:`~daskmeans.engine.driver.DriverCopy`):
        the epoch passes then run on the driver's threads without a Dask graph or a round trip to the workers
        (:func:`~daskmeans.passes.epoch.epoch_pass_on_driver`), with the same result.

    Returns
    -------
    FitResult
    """
    context = context or RunContext()
    if driver is None:
        return _epochs(array, centers, plan, context)
    with driver.threads():
        return _epochs(driver.array, centers, plan, replace(context, client=None, weights=driver.weights), driver)


def _epochs(array, centers, plan, context, driver=None):
    """The epochs of :func:`vrkm` (``array`` and the context's weights those of ``driver`` when given)."""
    clock, client, weights, checkpoint = context.clock, context.client, context.weights, context.checkpoint
    n, n_features = array.shape
    total_weight = float(n if context.total_weight is None else context.total_weight)
    sizes = epoch_sizes(plan.epoch_size, n)
    block_totals = None
    if weights is not None:
        (block_totals,) = compute_now(weight_totals_graph(weights), client=client)
    listed = 0 if plan.inner_batch_size > 1 else plan.n_candidates  # the batched loop needs no candidate lists
    state = VRKMState(centers, [], context.passes)
    stop_reason = "max_epochs"
    final_stats = None
    resume = context.resume
    if resume is not None:
        state = VRKMState(
            resume["centers"], list(resume["history"]), resume["passes"], resume["previous_energy"], resume["epoch"]
        )
        if resume["stop_reason"] is not None:
            return FitResult(
                state.centers, resume["inertia"], state.n_epochs, state.history, resume["stop_reason"], state.passes
            )
    elif checkpoint is not None:
        checkpoint.save(_state(0, centers, state.history, state.passes, None, None, None))
    history = state.history
    inner_seconds_per_step = 0.0  # unknown until an inner loop has run
    for epoch in range(state.n_epochs + 1, plan.max_epochs + 1):
        centers = state.centers
        steps = int(sizes(epoch))
        draws = _draws(n, steps, plan.seed, epoch, weights, block_totals, client)
        started = time.perf_counter()
        on_worker = client is not None and steps * n_features * array.dtype.itemsize > plan.sample_bytes
        sampler = EpochSampler(array, client, on_worker, listed, driver)
        pools = epoch_pools(array, steps, listed)
        try:
            with budget_until(clock.end()):  # the epoch's pass is cut short when the budget ends
                stats, first = sampler.epoch_pass(centers, draws[: pools[0][1]], weights)
                stats, extra = with_enough_far_rows(stats, array, centers, weights, client)
        except BudgetSpent:
            stop_reason = "max_time"
            if checkpoint is not None:
                checkpoint.save(
                    _state(state.n_epochs, centers, history, state.passes, state.previous_energy, stop_reason, None)
                )
            break
        state.passes += 1 + extra
        passes = state.passes
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
        state.n_epochs = epoch
        previous_energy = state.previous_energy
        converged = previous_energy is not None and abs(previous_energy - energy) <= plan.tol * previous_energy
        # the inner loop starts only if, as long per step as the last epoch's, it ends within max_time
        if converged or clock.out_of_time(inner_seconds_per_step * steps):
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
        snapshot, batch_gradient = position_correction(stats, centers, plan.variant)
        started = time.perf_counter()
        task = InnerLoopTask(
            None,  # the segments of each pool
            0,
            snapshot,
            centers,
            plan.eta,
            batch_gradient,
            plan.agree_rule,
            plan.n_candidates,
            plan.inner_batch_size,
            config.REMAKE_COST,
        )
        progress, where, pools_run = epoch_inner_loop(sampler, draws, pools, first, task, clock, record["pass_time"])
        centers, counts = progress.loop.centers(), progress.loop.counts()
        state.centers = centers
        state.passes += pools_run - 1  # a read of the data per pool after the first
        passes = record["passes"] = state.passes
        record.update(
            {
                "inner_steps": counts.steps,
                "changed": counts.changed,
                "agree_updates": counts.agree_updates,
                "distances_per_step": counts.distances / max(1, counts.steps),
                "lists_remade": progress.remade,
                "pools": pools_run,
                "inner_time": time.perf_counter() - started,
                "inner_on": where,
            }
        )
        history.append(record)
        context.report(record, centers=centers)
        state.previous_energy = energy
        inner_seconds_per_step = record["inner_time"] / max(1, steps)
        out_of_time = clock.out_of_time(record["pass_time"])  # the next epoch's pass would end past max_time
        if checkpoint is not None:
            final = "max_time" if out_of_time else "max_epochs" if epoch == plan.max_epochs else None
            if final is not None:
                record["stop_reason"] = final
            checkpoint.save(_state(epoch, centers, history, passes, energy, final, None))
        if out_of_time:
            stop_reason = "max_time"
            break
    if history:
        history[-1]["stop_reason"] = stop_reason
    # centers that moved after the last pass: their inertia is one pass, made by the estimator on demand
    inertia = None if final_stats is None else final_stats.inertia
    return FitResult(state.centers, inertia, state.n_epochs, history, stop_reason, state.passes)
