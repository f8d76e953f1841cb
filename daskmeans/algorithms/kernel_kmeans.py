"""Kernel k-means on the engine: seeding in feature space, truncated mini-batch steps, and the exact full batch.

- Seeding: a uniform sample (for the mini-batch, the first distinct rows of its first pool of batches when that
  holds enough; else one pass draws it); ``kappa="auto"`` is measured on it; greedy k-means++ with kernel
  distances picks the initial centers among its rows (each center starts as ``phi`` of one row).
- Mini-batch (Jourdan & Schwartzman): batches are drawn by the workers (block-aware random rows, as the
  linear mini-batch k-means draws them; by the driver's threads for data the estimator copied there); the steps run
  on the driver, ``O(k b (b + tau))`` kernel values each, independent of n.
- Full batch: Lloyd's algorithm in feature space on the whole kernel matrix, held in the driver (float32,
  ``4 n^2`` bytes); for n up to about 50,000.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from dask.system import CPU_COUNT

from .. import config
from ..engine.blas import one_blas_thread
from ..engine.client import compute_now
from ..engine.random import stage_generator, stage_key
from ..exceptions import InputDataError
from ..kernels.kernel_centers import SparseCenters, nearest_from_inner, single_point_centers
from ..kernels.kernel_functions import resolve_kernel
from ..kernels.kernel_minibatch import run_kernel_steps
from ..passes.kernel_pools import StepPools
from ..passes.sampling import sample_rows
from .plan import FitPlan
from .result import FitResult, RunContext


def kernel_kmeans_plusplus(rows, kernel, n_clusters, rng, n_local_trials=None):
    """Greedy k-means++ with feature-space distances ``K(x,x) + K(y,y) - 2 K(x,y)``.

    Parameters
    ----------
    rows : ndarray (m, d)
    kernel : Kernel
    n_clusters : int
    rng : numpy.random.Generator
    n_local_trials : int, optional
        Candidates tried per center; default ``2 + floor(log k)`` as scikit-learn.

    Returns
    -------
    int64 (n_clusters,)
        Positions of the chosen rows.

    Raises
    ------
    InputDataError
        Fewer rows distinct in feature space than ``n_clusters``.
    """
    m = rows.shape[0]
    if n_local_trials is None:
        n_local_trials = 2 + int(math.log(n_clusters))
    diag = kernel.diag(rows)
    norms = kernel.row_norms(rows)  # once, not in every kernel block against the sample

    def against(picked):
        return kernel.matrix(rows, rows[picked], x_sq=norms, y_sq=None if norms is None else norms[picked])

    chosen = np.empty(n_clusters, dtype=np.int64)
    chosen[0] = rng.integers(m)
    closest = np.maximum(diag + diag[chosen[0]] - 2.0 * against(chosen[:1])[:, 0], 0.0)
    for c in range(1, n_clusters):
        cumulative = np.cumsum(closest)
        if cumulative[-1] <= 0:
            raise InputDataError(
                f"The seeding sample has only {c} row(s) distinct in the kernel's feature space but n_clusters="
                f"{n_clusters}; lower n_clusters, raise init_sample_size, or check the kernel parameters."
            )
        targets = rng.random(n_local_trials) * cumulative[-1]
        trials = np.minimum(np.searchsorted(cumulative, targets, side="right"), m - 1)
        d2 = diag[:, None] + diag[trials][None, :] - 2.0 * against(trials)
        np.maximum(d2, 0.0, out=d2)
        np.minimum(d2, closest[:, None], out=d2)
        potentials = d2.sum(axis=0)
        best = int(np.argmin(potentials))
        chosen[c] = trials[best]
        closest = d2[:, best]
    return chosen


@dataclass(frozen=True)
class KernelSpec:
    """The kernel as the estimator's parameters give it: a name or a callable, and its parameters (``kappa`` may
    be ``"auto"``), resolved on the seeding sample (:func:`~daskmeans.kernels.kernel_functions.resolve_kernel`)."""

    kernel: Any = "rbf"
    params: dict | None = None


def seeding_sample_rows(n_samples, n_clusters, sample_size=None) -> int:
    """Rows of the kernel seeding's sample: ``sample_size`` when given, else
    ``max(20 * n_clusters, INIT_SAMPLE_ROWS)`` (:data:`~daskmeans.config.INIT_SAMPLE_ROWS`), at most ``n_samples``."""
    return min(n_samples, sample_size or max(20 * n_clusters, config.INIT_SAMPLE_ROWS))


def kernel_seeding(array, n_clusters, kernel, init, seed, *, sample_size=None, context=None, pools=None):
    """Draw the seeding sample, resolve the kernel on it and pick the initial centers.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    n_clusters : int
    kernel : KernelSpec
    init : {"k-means++", "random"} or ndarray (n_clusters, d)
        k-means++ in feature space on the sample, distinct random rows of the sample, or given points (each
        center is ``phi`` of one point).
    seed : int
    sample_size : int, optional
        Rows of the sample (default :func:`seeding_sample_rows`: ``max(20 k, INIT_SAMPLE_ROWS)``, at most n).
    context : RunContext, optional
        ``client`` and ``weights`` (dask array (n,)): with weights the sample is drawn with probability
        proportional to them (Efraimidis-Spirakis), so that it represents the weighted data.
    pools : StepPools, optional
        The mini-batch steps' pools. Without weights, when the first pool draws at least the sample's number of
        distinct rows, the sample is the first of them, also a uniform sample without replacement
        (:meth:`~daskmeans.passes.kernel_pools.StepPools.first_distinct_rows`): its rows travel once, with the
        pool, and no pass of their own draws them.

    Returns
    -------
    kernel : Kernel
    centers : SparseCenters
    gamma : float
        ``max sqrt(K(x, x))`` over the sample (1 for RBF and Laplacian).
    """
    context = context or RunContext()
    client, weights = context.client, context.weights
    n = int(array.shape[0])
    m = seeding_sample_rows(n, n_clusters, sample_size)
    if weights is not None:
        m = min(m, int(compute_now((weights > 0).sum(), client=client)[0]))
    drawn = pools.first_distinct_rows(m) if pools is not None and weights is None else None
    if drawn is None:
        sample = sample_rows(array, m, stage_key(seed, "kernel-init", "sample"), weights, client=client)
        drawn = sample[1], sample[2]
    index, rows = np.asarray(drawn[0]), np.ascontiguousarray(drawn[1])
    resolved = resolve_kernel(
        kernel.kernel, kernel.params, array.shape[1], sample=rows, rng=stage_generator(seed, "kernel-init", "kappa")
    )
    gamma = float(np.sqrt(max(0.0, float(resolved.diag(rows).max()))))
    if isinstance(init, str) and init == "k-means++":
        chosen = kernel_kmeans_plusplus(rows, resolved, n_clusters, stage_generator(seed, "kernel-init", "k-means++"))
        centers = single_point_centers(rows[chosen], resolved, index[chosen])
    elif isinstance(init, str):  # "random": the first distinct rows of the (randomly ordered) sample
        _, first = np.unique(rows, axis=0, return_index=True)
        first = np.sort(first)
        if first.shape[0] < n_clusters:
            raise InputDataError(
                f"A sample of {m} rows has only {first.shape[0]} distinct row(s) but n_clusters={n_clusters}; "
                "lower n_clusters or raise init_sample_size."
            )
        chosen = first[:n_clusters]
        centers = single_point_centers(rows[chosen], resolved, index[chosen])
    else:
        centers = single_point_centers(np.ascontiguousarray(init, dtype=array.dtype), resolved)
    return resolved, centers, gamma


@dataclass(frozen=True, kw_only=True)
class KernelPlan(FitPlan):
    """What a run of mini-batch kernel k-means does, decided before it starts
    (:class:`~daskmeans.algorithms.plan.FitPlan`).

    Attributes
    ----------
    seed : int
        Fixes the rows of every step.
    batch_size, tau, truncate, learning_rate :
        See :func:`daskmeans.kernels.kernel_minibatch.kernel_minibatch_step`.
    max_iter : int
        Steps (mini-batch iterations).
    tol : float or "auto"
        Stop when a step improves its batch's energy by less than ``tol`` (0 disables); ``"auto"`` until the
        seeding has measured ``gamma`` (:func:`~daskmeans.kernels.kernel_minibatch.auto_tol`), a number after.
    sample_rows : int
        Rows of the seeding's sample (:func:`seeding_sample_rows`; fewer with weights when fewer rows weigh).
    driver_rows : int
        Most rows copied into the driver, whose steps' batches then come from its copy.
    on_driver : bool
        Whether the rows are copied into the driver.
    """

    seed: int = 0
    batch_size: int = 128
    tau: int = 25
    truncate: bool = True
    learning_rate: str = "beta"
    max_iter: int = 150
    tol: Any = 0.0
    sample_rows: int = 0
    driver_rows: int = 0
    on_driver: bool = False


@dataclass(frozen=True, kw_only=True)
class FullKernelPlan(FitPlan):
    """What a run of exact (full-batch) kernel k-means does, decided before it starts
    (:class:`~daskmeans.algorithms.plan.FitPlan`).

    Attributes
    ----------
    max_iter : int
    max_samples : int
        The most rows whose kernel matrix the driver holds (larger inputs are refused).
    sample_rows : int
        Rows of the seeding's sample (:func:`seeding_sample_rows`; fewer with weights when fewer rows weigh).
    """

    max_iter: int = 100
    max_samples: int = 0
    sample_rows: int = 0


@dataclass
class KernelState:
    """What mini-batch kernel k-means carries from one step to the next: the sparse centers, the weight each has
    seen, ``gamma**2`` over the rows seen, the history and the steps taken."""

    centers: Any
    seen: Any
    gamma_sq: float
    history: list
    step: int = 0


def minibatch_kernel_kmeans(array, centers: SparseCenters, kernel, plan, context=None, pools=None):
    """Run (truncated) mini-batch kernel k-means from ``centers``, as ``plan`` says (:class:`KernelPlan`, its ``tol``
    a number).

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : SparseCenters
    kernel : Kernel
    plan : KernelPlan
    context : RunContext, optional
        With sample weights, rows are drawn uniformly and weigh in each step (as :class:`daskmeans.MiniBatchKMeans`).
        The callback gets each step's record; the last record of each round of steps also carries the centers
        (``"_centers"``, a :class:`SparseCenters`). A checkpoint saves the state (sparse centers, counts, history)
        after every step; pools keep their boundaries (multiples of the steps per pool) on resume, so the rows
        seen are those of a run without interruption.
    pools : StepPools, optional
        The run's pools, made by the caller with the plan's ``seed``, ``batch_size`` and ``max_iter`` (the first one
        may already be on its way: :meth:`~daskmeans.passes.kernel_pools.StepPools.request`); by default made here
        (:data:`~daskmeans.config.POOL_BYTES` of batch rows each).

    Returns
    -------
    FitResult
        ``centers`` is the :class:`SparseCenters`; ``history`` has one record per step (``energy`` is the
        batch's mean squared distance before the step); ``stop_reason`` is ``"converged"``, ``"max_iter"`` or
        ``"max_time"``; ``gamma`` (max ``||phi(x)||`` over the rows seen), ``n_steps`` and ``seen_counts`` are set.
    """
    context = context or RunContext()
    if pools is None:
        pools = StepPools(
            array, context.weights, context.client, batch_size=plan.batch_size, max_iter=plan.max_iter, seed=plan.seed
        )
    # BLAS on one thread, each step's kernel blocks split over two threads of this process: an OpenBLAS thread pool
    # keeps spinning on its cores for a while after its last multi-threaded call, taking them from the workers'
    # pass that follows the fit (the labels)
    try:
        with one_blas_thread(), ThreadPoolExecutor(1) if CPU_COUNT > 1 else nullcontext() as step_pool:
            return _run_pools(array, centers, kernel, plan, context, pools, step_pool)
    finally:
        pools.release()


def _run_pools(array, centers, kernel, plan, context, pools, step_pool):
    clock, checkpoint, passes = context.clock, context.checkpoint, context.passes
    n = int(array.shape[0])
    resume = context.resume
    stop_reason = "max_iter"
    if resume is not None:
        state = KernelState(
            SparseCenters(**resume["centers"]), *(resume[key] for key in ("seen", "gamma_sq", "history", "step"))
        )
        if resume["stop_reason"] is not None:
            return _minibatch_result(state, resume["stop_reason"], passes, plan.batch_size, n)
    else:
        state = KernelState(
            centers, np.zeros(centers.n_clusters), 1.0 if kernel.normalized else float(centers.norms.max()), []
        )
        if checkpoint is not None:
            checkpoint.save(_minibatch_state(state, None))
    while state.step < plan.max_iter:
        indices, batches, batch_weights, rows = pools.take(state.step)
        n_steps = indices.shape[0]
        if not kernel.normalized:
            state.gamma_sq = max(state.gamma_sq, float(kernel.diag(rows).max()))
        # with a checkpoint, the steps run one at a time, each followed by a save
        rounds = [(t, t + 1) for t in range(n_steps)] if checkpoint is not None else [(0, n_steps)]
        for first, stop in rounds:
            pool_start = clock.elapsed()
            time_left = None if clock.max_time is None else max(0.0, clock.max_time - pool_start)
            state.centers, state.seen, records, reason = run_kernel_steps(
                state.centers,
                state.seen,
                batches[first:stop],
                list(indices[first:stop]),
                kernel,
                state.step + 1,
                learning_rate=plan.learning_rate,
                tau=plan.tau,
                truncate=plan.truncate,
                tol=plan.tol,
                time_left=time_left,
                batch_weights=None if batch_weights is None else batch_weights[first:stop],
                pool=step_pool,
            )
            _record_steps(records, state, plan.batch_size, n, pool_start, passes, context)
            if reason is None and clock.out_of_time():
                reason = "max_time"
            if checkpoint is not None:
                final = reason or ("max_iter" if state.step == plan.max_iter else None)
                checkpoint.save(_minibatch_state(state, final))
            if reason is not None:
                break
        if reason is not None:
            stop_reason = reason
            break
    return _minibatch_result(state, stop_reason, passes, plan.batch_size, n)


def _minibatch_state(state, stop_reason):
    """The checkpoint state of mini-batch kernel k-means after ``state.step`` steps."""
    centers = state.centers
    return {
        "step": state.step,
        "seen": state.seen,
        "gamma_sq": state.gamma_sq,
        "history": state.history,
        "stop_reason": stop_reason,
        "centers": {
            "rows": centers.rows,
            "coef": centers.coef,
            "owner": centers.owner,
            "segment": centers.segment,
            "row_index": centers.row_index,
            "norms": centers.norms,
            **({} if centers.gram is None else {"gram": centers.gram}),
        },
    }


def _minibatch_result(state, stop_reason, passes, batch_size, n):
    step = state.step
    return FitResult(
        state.centers,
        None,
        step,
        state.history,
        stop_reason,
        passes + step * batch_size / n,
        gamma=float(np.sqrt(state.gamma_sq)),
        n_steps=step,
        seen_counts=state.seen,
    )


def _record_steps(records, state, batch_size, n, pool_start, passes, context):
    """Append the history entries of the steps just run (the last with the centers they led to) and report
    them; advances ``state.step``."""
    for position, record in enumerate(records, start=1):
        state.step += 1
        step = state.step
        entry = {
            "iteration": step,
            "batch_size": batch_size,
            "energy": record["batch_energy"],
            "batch_energy_after": record["batch_energy_after"],
            "improvement": record["improvement"],
            "support": record["support"],
            "dropped": record["dropped"],
            "wall_time": pool_start + record["seconds"],
            "passes": passes + step * batch_size / n,
        }
        if "stop_reason" in record:
            entry["stop_reason"] = record["stop_reason"]
        state.history.append(entry)
        if position == len(records):
            context.report(entry, centers=state.centers)
        else:
            context.report(entry)


def kernel_matrix_float32(X, kernel, slab_bytes=64 * 2**20):
    """The full ``(n, n)`` kernel matrix in float32, computed a slab of rows at a time in float64."""
    n = X.shape[0]
    out = np.empty((n, n), dtype=np.float32)
    step = max(1, slab_bytes // (8 * max(1, n)))
    for start in range(0, n, step):
        out[start : start + step] = kernel.matrix(X[start : start + step], X)
    return out


def _mean_indicator(labels, weights, mass, k):
    """``H`` with ``H[i, labels[i]] = w_i / mass[labels[i]]``: ``K H`` holds ``<phi(x), C_j>`` (float32, n x k)."""
    indicator = np.zeros((labels.shape[0], k), dtype=np.float32)
    indicator[np.arange(labels.shape[0]), labels] = weights / mass[labels]
    return indicator


def full_kernel_kmeans(X, centers: SparseCenters, kernel, context=None, *, max_iter=100):
    """Exact (full-batch) kernel k-means: Lloyd's algorithm in feature space on the whole kernel matrix.

    Each iteration computes ``<phi(x), C_j> = (K H)_{xj}`` with ``H`` the cluster-mean indicator matrix (one
    GEMM), ``<C_j, C_j>`` as the mean of those over the cluster, and reassigns every row; it stops when no row
    changes cluster. A cluster that empties takes the row farthest from its center.

    Parameters
    ----------
    X : ndarray (n, d)
        All rows, in the driver.
    centers : SparseCenters
        Initial centers (the first labels are the rows' nearest ones).
    kernel : Kernel
    context : RunContext, optional
        ``weights`` (NumPy, optional): each center is the weighted mean of its cluster in feature space (a row of
        weight ``w`` counts as ``w`` copies). The callback gets each iteration's record with the labels that
        define the centers after it (``"_labels"``). No checkpoint: the kernel matrix would be rebuilt anyway.
    max_iter : int

    Returns
    -------
    FitResult
        ``centers`` (a :class:`SparseCenters` whose support is every row, coefficient ``w / (cluster weight)``),
        ``inertia`` ((weighted) sum of squared feature-space distances to them), ``counts`` (weight per
        cluster), ``labels``, ``stop_reason`` ``"converged"``, ``"max_iter"`` or ``"max_time"``.
    """
    context = context or RunContext()
    clock, weights = context.clock, context.weights
    n = X.shape[0]
    k = centers.n_clusters
    labels, dist2 = centers.nearest(X, kernel)
    gram = kernel_matrix_float32(X, kernel)
    diag = kernel.diag(X)
    weighted = weights is not None
    weights = np.asarray(weights, dtype=np.float64) if weighted else np.ones(n)
    history = []
    stop_reason = "max_iter"
    rows = np.arange(n)
    n_iter = 0
    clock.begin_laps()
    for iteration in range(1, max_iter + 1):
        mass = np.bincount(labels, weights=weights, minlength=k)
        for j in np.flatnonzero(mass == 0):
            # an empty cluster (or one of zero weight) takes the farthest row of weight > 0 from a cluster that
            # keeps weight without it
            spare = (weights > 0) & (mass[labels] > weights)
            far = int(np.argmax(np.where(spare, dist2, -1.0)))
            mass[labels[far]] -= weights[far]
            labels[far] = j
            mass[j] = weights[far]
            dist2[far] = 0.0
        inner = (gram @ _mean_indicator(labels, weights, mass, k)).astype(np.float64)
        norms = np.bincount(labels, weights=weights * inner[rows, labels], minlength=k) / mass
        new_labels, dist2 = nearest_from_inner(diag, inner, norms)
        changed = int((new_labels != labels).sum())
        n_iter = iteration
        energy = float(weights @ dist2) / float(weights.sum()) if weighted else float(dist2.mean())
        record = {
            "iteration": iteration,
            "energy": energy,
            "changed": changed,
            "wall_time": clock.elapsed(),
            "passes": 0,
        }
        history.append(record)
        context.report(record, labels=new_labels)
        labels = new_labels
        if changed == 0:
            stop_reason = "converged"
            break
        if clock.out_of_time(clock.lap()):  # the next iteration, as long as this one, would end past max_time
            stop_reason = "max_time"
            break
    mass = np.bincount(labels, weights=weights, minlength=k)
    safe_mass = np.where(mass > 0, mass, 1.0)
    inner = (gram @ _mean_indicator(labels, weights, safe_mass, k)).astype(np.float64)
    norms = np.bincount(labels, weights=weights * inner[rows, labels], minlength=k) / safe_mass
    del gram
    order = np.argsort(labels, kind="stable")
    final = SparseCenters(
        rows=np.ascontiguousarray(X[order]),
        coef=(weights / safe_mass[labels])[order],
        owner=labels[order].astype(np.int64),
        segment=np.zeros(n, dtype=np.int64),
        row_index=order.astype(np.int64),
        norms=norms,
    )
    final_dist2 = np.maximum(diag - 2.0 * inner[rows, labels] + norms[labels], 0.0)
    inertia = float(weights @ final_dist2) if weighted else float(final_dist2.sum())
    return FitResult(final, inertia, n_iter, history, stop_reason, 1, mass, labels=labels)
