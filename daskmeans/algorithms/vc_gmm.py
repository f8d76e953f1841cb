"""Truncated variational EM (var-GMM-S) for the isotropic GMM on a weighted point set: the vc-GMM loop.

The points are a coreset (or any weighted rows) cut into blocks of ``block_rows``. Each iteration runs, per
block (:mod:`daskmeans.passes.gmm`), the variational E-step
(:func:`daskmeans.kernels.truncated_em.truncated_estep`) and then the posterior sums
(:func:`~daskmeans.kernels.truncated_em.posterior_stats`); the driver merges the tree-reduced sums into the M-step
(means and the shared variance) and the new cluster neighbourhoods ``G_c``. The per-point state ``K_n`` stays with
its block from one iteration to the next.

Where the blocks run: a coreset of at most :data:`~daskmeans.config.GMM_DRIVER_MAX_ROWS` rows is iterated on
the driver (Dask's threaded scheduler, no transfers); a larger one, or ``where="workers"``, is spread over the
Dask workers, which keep its blocks and their ``K_n`` in memory. Both run the very same
block tasks and the same fixed reduction tree, so they give the same numbers.

Initial E-steps: ``K_n`` and ``G_c`` start at random (as in var-GMM-S). An M-step on random ``K_n`` would pull
every mean towards the data mean and undo the seeding, so E-steps alone run first (the paper's Suppl. F; no
variance is needed for them): each moves every point's ``K_n`` towards its nearest seeds along the ``G_c``
graph, until the weighted sum of nearest distances improves by less than
:data:`~daskmeans.config.INITIAL_ESTEP_RTOL` (at most
:data:`~daskmeans.config.MAX_INITIAL_ESTEPS`). Their distance evaluations are counted in the first history record.

Free energy (the lower bound): ``F = sum_n w_n log sum_{c in K_n} N(x_n; mu_c, sigma^2 I) / k``, reported per
unit of weight. Each iteration computes it for the parameters it starts with and the ``K_n`` its E-step found;
it never decreases from one iteration to the next (the E-step only ever replaces a cluster of ``K_n`` by a
nearer one, and the M-step maximises the bound for the posteriors it is given).
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np

from .. import config
from ..engine.client import compute_now
from ..engine.random import stage_generator, stage_key
from ..exceptions import InputDataError
from ..kernels import truncated_em as kernels
from ..passes import gmm
from .plan import FitPlan
from .result import FitResult, RunContext

#: Placements of the E-step blocks.
PLACEMENTS = ("auto", "driver", "workers")


# -- the loop -------------------------------------------------------------------------------------------------------
class _Runner:
    """Computes graphs on the driver (Dask's threaded scheduler: the block kernels release the GIL, so the blocks
    of a step run on every core) or on the cluster."""

    def __init__(self, client):
        self.client = client

    def persist(self, objects):
        if self.client is None:
            return list(dask.persist(*objects, scheduler="threads"))
        return list(self.client.persist(list(objects)))

    def compute(self, *objects):
        if self.client is None:
            return dask.compute(*objects, scheduler="threads")
        return tuple(self.client.gather(self.client.compute(list(objects))))


def choose_placement(n_rows, where, client):
    """``"driver"`` or ``"workers"`` for the E-step blocks (see the module docstring)."""
    return _choose_placement(n_rows, where, client)[0]


def _choose_placement(n_rows, where, client):
    """:func:`choose_placement` and why: ``(placement, reason)``."""
    if client is None:
        return "driver", f"where={where!r}, no distributed client"
    if where == "workers":
        return "workers", "where='workers'"
    if where == "auto" and n_rows > config.GMM_DRIVER_MAX_ROWS:
        return "workers", f"{n_rows:,} rows > GMM_DRIVER_MAX_ROWS={config.GMM_DRIVER_MAX_ROWS:,}"
    return "driver", f"where={where!r}" + (
        f": {n_rows:,} rows <= GMM_DRIVER_MAX_ROWS={config.GMM_DRIVER_MAX_ROWS:,}" if where == "auto" else ""
    )


@dataclass(frozen=True, kw_only=True)
class GMMPlan(FitPlan):
    """What a run of truncated variational EM does, decided before it starts
    (:class:`~daskmeans.algorithms.plan.FitPlan`).

    Attributes
    ----------
    coreset_rows : int
        Rows of the points fitted (the coreset's draws, or all the data's rows).
    n_truncated : int
        ``C'``: clusters per point, ``1 <= C' <= k``.
    search_size : int
        ``G``: neighbours per cluster, ``1 <= G <= k``.
    random_exploration : bool
        Add one random cluster to each point's search space (the paper's ``+1``).
    tol : float
        Stop when the free energy changes by less than ``tol`` relative to its value.
    max_iter : int
    seed : int
        Stage key of this fit's random draws (initial ``K_n`` and ``G_c``, exploration).
    where : {"driver", "workers"}
        Where the E-step blocks run (:func:`choose_placement`).
    block_rows : int
        Rows of an E-step block of points given as a NumPy array.
    max_initial_esteps : int
        E-steps at most before the first M-step (0 when every point keeps every cluster).
    """

    coreset_rows: int = 0
    n_truncated: int = 1
    search_size: int = 1
    random_exploration: bool = True
    tol: float = 1e-4
    max_iter: int = 100
    seed: int = 0
    where: str = "driver"
    block_rows: int
    max_initial_esteps: int = 0


def gmm_plan(n_rows, n_clusters, client=None, *, where="auto", block_rows=None, **given) -> GMMPlan:
    """The plan of truncated EM on ``n_rows`` points with ``n_clusters`` means: where the E-step blocks run
    (``where``, :func:`choose_placement`), their rows (``block_rows`` None: :func:`gmm_block_rows`) and the initial
    E-steps (:data:`~daskmeans.config.MAX_INITIAL_ESTEPS`, none when ``n_truncated`` is
    ``n_clusters``); the other fields of :class:`GMMPlan` are taken from ``given`` (``n_truncated`` and
    ``search_size`` are required)."""
    placement, why = _choose_placement(n_rows, where, client)
    reasons = {"where": why}
    if block_rows is None:
        block_rows = gmm_block_rows(n_rows)
        reasons["block_rows"] = (
            f"{n_rows:,} rows in GMM_MIN_BLOCKS={config.GMM_MIN_BLOCKS} blocks, at least "
            f"GMM_MIN_BLOCK_ROWS={config.GMM_MIN_BLOCK_ROWS:,} and at most "
            f"GMM_BLOCK_ROWS={config.GMM_BLOCK_ROWS:,} rows each"
        )
    initial = 0 if given["n_truncated"] == n_clusters else config.MAX_INITIAL_ESTEPS
    reasons["max_initial_esteps"] = "every point keeps every cluster" if initial == 0 else "MAX_INITIAL_ESTEPS"
    return GMMPlan(
        coreset_rows=int(n_rows),
        where=placement,
        block_rows=block_rows,
        max_initial_esteps=initial,
        reasons=reasons,
        **given,
    )


def gmm_block_rows(n_rows) -> int:
    """Rows per E-step block of ``n_rows`` points: a :data:`~daskmeans.config.GMM_MIN_BLOCKS`-th of them, so that the
    threads of the driver share the work of a small coreset, between :data:`~daskmeans.config.GMM_MIN_BLOCK_ROWS` and
    :data:`~daskmeans.config.GMM_BLOCK_ROWS`.

    Examples
    --------
    >>> gmm_block_rows(10_000), gmm_block_rows(1_000_000), gmm_block_rows(500)
    (2500, 20000, 2000)
    """
    wanted = -(-int(n_rows) // config.GMM_MIN_BLOCKS)
    return int(min(config.GMM_BLOCK_ROWS, max(config.GMM_MIN_BLOCK_ROWS, wanted)))


def initial_neighbours(n_clusters, search_size, rng):
    """Initial ``G_c``: ``c`` itself and ``G - 1`` other clusters drawn at random (without repeats)."""
    neighbours = np.empty((n_clusters, search_size), dtype=np.int32)
    for c in range(n_clusters):
        others = rng.choice(n_clusters - 1, size=search_size - 1, replace=False)
        others = others + (others >= c)
        neighbours[c, 0] = c
        neighbours[c, 1:] = others
    return neighbours


def truncated_em(points, means, plan, context=None):
    """Fit the isotropic GMM by truncated variational EM (var-GMM-S) from initial ``means``, as ``plan`` says
    (:class:`GMMPlan`, :func:`gmm_plan`).

    Parameters
    ----------
    points : ndarray or dask.array.Array (m, d)
        The (coreset) points. A NumPy array is cut into blocks of ``plan.block_rows``; a dask array keeps its
        chunks.
    means : ndarray (k, d)
        Initial means (e.g. AFK-MC2 seeds).
    plan : GMMPlan
    context : RunContext, optional
        ``weights``: the points' (coreset) weights, NumPy or dask (1 when None). ``passes``: passes over the full
        data already spent (coreset, seeding), carried into the records. A checkpoint saves the state (means,
        variance, ``G_c``, every point's ``K_n``, history) after the initial E-steps and after every iteration.

    Returns
    -------
    FitResult
        ``centers`` (the means, float64), ``sigma2``, ``lower_bound`` (free energy per unit of weight of the last
        iteration), ``where`` (``"driver"`` or ``"workers"``); ``inertia`` is None. ``history`` has per
        iteration: ``free_energy`` (per unit weight), ``energy`` (weighted mean squared distance of the points to
        their nearest mean found), ``sigma2`` (after the M-step), ``distances`` (distance evaluations of the
        E-step), ``distances_per_point``, ``full_search_distances`` (``m k``), ``initial_esteps`` and
        ``initial_distances`` (the E-steps before the first M-step, in the first record only; 0 in the others),
        ``wall_time`` and ``passes``.
    """
    context = context or RunContext()
    clock, client, weights, checkpoint, passes = (
        context.clock,
        context.client,
        context.weights,
        context.checkpoint,
        context.passes,
    )
    means = np.array(means, dtype=np.float64)
    n_clusters, n_features = means.shape
    if isinstance(points, da.Array):
        array = points
    else:
        array = da.from_array(np.ascontiguousarray(points), chunks=(plan.block_rows, n_features), name=False)
    m = array.shape[0]
    if weights is not None and not isinstance(weights, da.Array):
        weights = da.from_array(np.asarray(weights, dtype=np.float64), chunks=(array.chunks[0],), name=False)
    elif weights is not None:
        weights = weights.rechunk((array.chunks[0],))
    placement = plan.where
    seed, random_exploration, max_iter = plan.seed, plan.random_exploration, plan.max_iter
    runner = _Runner(client if placement == "workers" else None)
    if placement == "driver" and client is not None and isinstance(points, da.Array):
        # rows that live on the cluster (e.g. all the data as the "coreset") come to the driver once
        fetched = compute_now(array, *([weights] if weights is not None else []), client=client)
        array = da.from_array(np.ascontiguousarray(fetched[0]), chunks=(array.chunks[0], n_features), name=False)
        if weights is not None:
            weights = da.from_array(np.asarray(fetched[1], dtype=np.float64), chunks=(array.chunks[0],), name=False)
    if placement == "workers":
        persisted = runner.persist([array] + ([weights] if weights is not None else []))
        array = persisted[0]
        weights = persisted[1] if weights is not None else None
    (total_weight,) = runner.compute(weights.sum()) if weights is not None else (float(m),)
    total_weight = float(total_weight)

    resume = context.resume

    def result(stop_reason):
        return FitResult(
            means,
            None,
            n_iter,
            history,
            stop_reason,
            passes,
            sigma2=float(sigma2),
            lower_bound=float(lower_bound),
            where=placement,
        )

    def save(iteration, stop_reason):
        truncation_arrays = runner.compute(*gmm.truncation_parts(truncations))
        checkpoint.save(
            {
                "iteration": iteration,
                "means": means,
                "sigma2": sigma2,
                "sigma2_floor": sigma2_floor,
                "previous": previous,
                "neighbours": neighbours,
                "truncations": list(truncation_arrays),
                "history": history,
                "stop_reason": stop_reason,
                "lower_bound": None if lower_bound == -np.inf else lower_bound,
                "initial_steps": initial_steps,
                "initial_distances": initial_distances,
            }
        )

    history = []
    sigma2 = None
    sigma2_floor = 0.0
    previous = None
    stop_reason = "max_iter"
    lower_bound = -np.inf
    n_iter = 0
    if resume is not None:
        means, sigma2, sigma2_floor, previous, neighbours, history, n_iter = (
            resume[key] for key in ("means", "sigma2", "sigma2_floor", "previous", "neighbours", "history", "iteration")
        )
        initial_steps, initial_distances = resume["initial_steps"], resume["initial_distances"]
        lower_bound = -np.inf if resume["lower_bound"] is None else resume["lower_bound"]
        if resume["stop_reason"] is not None:
            return result(resume["stop_reason"])
        truncations = runner.persist([dask.delayed(t, pure=True) for t in resume["truncations"]])
    else:
        neighbours, truncations, initial_steps, initial_distances = _initial_esteps(array, weights, means, plan, runner)
        if checkpoint is not None:
            save(0, None)
    clock.begin_laps()
    for iteration in range(n_iter + 1, max_iter + 1):
        explore_key = stage_key(seed, "explore", iteration) if random_exploration else None
        estep_parts = runner.persist(
            gmm.estep_parts(array, weights, truncations, means, neighbours, explore_key, n_clusters)
        )
        summary = gmm.estep_summary_graph(estep_parts, n_clusters)
        if sigma2 is None:
            ((pairs, n_distances, nearest_sum),) = runner.compute(summary)
            # the paper's Eq. (8): the first E-step's nearest distances give the initial variance
            sigma2 = nearest_sum / (n_features * total_weight)
            if sigma2 <= 0.0:
                raise_degenerate(n_clusters)
            sigma2_floor = sigma2 * 1e-12
            stats_graph = gmm.posterior_stats_graph(array, weights, estep_parts, sigma2, n_clusters)
            (stats,) = runner.compute(stats_graph)
        else:
            stats_graph = gmm.posterior_stats_graph(array, weights, estep_parts, sigma2, n_clusters)
            (pairs, n_distances, nearest_sum), stats = runner.compute(summary, stats_graph)
        truncations = estep_parts
        sums, resp, spread, log_sum = stats
        free_energy = log_sum + kernels.free_energy_constant(total_weight, n_features, n_clusters, sigma2)
        lower_bound = free_energy / total_weight
        neighbours = kernels.update_neighbours(neighbours, *pairs) if pairs[0].shape[0] else neighbours
        # M-step: weighted means; the shared variance from the spread around the old means, shifted to the new
        filled = resp > 0
        new_means = means.copy()
        new_means[filled] = sums[filled] / resp[filled, None]
        shift = np.einsum("ij,ij->i", new_means - means, new_means - means)
        new_sigma2 = (spread - float(resp @ shift)) / (n_features * total_weight)
        sigma2_used = sigma2
        sigma2 = max(new_sigma2, sigma2_floor)
        means = new_means
        n_iter = iteration
        record = {
            "iteration": iteration,
            "free_energy": lower_bound,
            "energy": nearest_sum / total_weight,
            "sigma2_used": sigma2_used,
            "sigma2": sigma2,
            "distances": int(n_distances),
            "distances_per_point": n_distances / m,
            "full_search_distances": int(m) * int(n_clusters),
            "empty_clusters": int(np.sum(~filled)),
            "where": placement,
            "initial_esteps": initial_steps if iteration == 1 else 0,
            "initial_distances": initial_distances if iteration == 1 else 0,
            "wall_time": clock.elapsed(),
            "passes": passes,
        }
        history.append(record)
        context.report(record, centers=means)
        stop = None
        if previous is not None and abs(free_energy - previous) <= plan.tol * abs(free_energy):
            stop = "converged"
        else:
            previous = free_energy
            if clock.out_of_time(clock.lap()):  # the next iteration, as long as this one, would end past max_time
                stop = "max_time"
        if checkpoint is not None:
            save(iteration, stop or ("max_iter" if iteration == max_iter else None))
        if stop is not None:
            stop_reason = stop
            break
    return result(stop_reason)


def raise_degenerate(n_clusters):
    raise InputDataError(
        f"Every point lies exactly on one of the {n_clusters} initial means (zero spread), so the GMM variance is "
        f"zero: the points fitted (the data, or its coreset) have no more distinct rows than n_components="
        f"{n_clusters}, and a Gaussian mixture needs more. Lower n_components (KMeans with that many clusters has "
        "these rows as its centers)."
    )


def _initial_esteps(array, weights, means, plan, runner):
    """Random ``K_n`` and ``G_c``, then E-steps alone: ``(neighbours, truncations, steps, distances)``."""
    n_clusters, n_truncated, seed = means.shape[0], plan.n_truncated, plan.seed
    random_exploration = plan.random_exploration
    rng = stage_generator(seed, "neighbours")
    neighbours = initial_neighbours(n_clusters, plan.search_size, rng)
    truncations = runner.persist(
        gmm.initial_truncations(array, weights, stage_key(seed, "truncation"), n_clusters, n_truncated)
    )

    initial_distances = 0
    initial_steps = 0
    previous_nearest = None
    for step in range(plan.max_initial_esteps):
        explore_key = stage_key(seed, "initial-explore", step) if random_exploration else None
        estep_parts = runner.persist(
            gmm.estep_parts(
                array, weights, truncations, means, neighbours, explore_key, n_clusters, name="vc-gmm-initial-estep"
            )
        )
        ((pairs, n_distances, nearest_sum),) = runner.compute(gmm.estep_summary_graph(estep_parts, n_clusters))
        truncations = estep_parts
        neighbours = kernels.update_neighbours(neighbours, *pairs) if pairs[0].shape[0] else neighbours
        initial_distances += int(n_distances)
        initial_steps += 1
        if previous_nearest is not None and nearest_sum >= (1.0 - config.INITIAL_ESTEP_RTOL) * previous_nearest:
            break
        previous_nearest = nearest_sum
    return neighbours, truncations, initial_steps, initial_distances
