"""Truncated variational EM (var-GMM-S) for the isotropic GMM on a weighted point set: the vc-GMM loop.

The points are a coreset (or any weighted rows) cut into blocks of ``block_rows``. Each iteration runs, per
block, the variational E-step (:func:`daskmeans.kernels.truncated_em.truncated_estep`) and then the posterior
sums (:func:`~daskmeans.kernels.truncated_em.posterior_stats`); the driver merges the tree-reduced sums into the
M-step (means and the shared variance) and the new cluster neighbourhoods ``G_c``. The per-point state ``K_n``
stays with its block from one iteration to the next.

Where the blocks run: a coreset of at most :data:`DRIVER_MAX_ROWS` rows is iterated on the driver (Dask's
synchronous scheduler, no transfers: a few ms of overhead per iteration); a larger one, or ``where="workers"``,
is spread over the Dask workers, which keep its blocks and their ``K_n`` in memory. Both run the very same
block tasks and the same fixed reduction tree, so they give the same numbers.

Initial E-steps: ``K_n`` and ``G_c`` start at random (as in var-GMM-S). An M-step on random ``K_n`` would pull
every mean towards the data mean and undo the seeding, so E-steps alone run first (the paper's Suppl. F; no
variance is needed for them): each moves every point's ``K_n`` towards its nearest seeds along the ``G_c``
graph, until the weighted sum of nearest distances improves by less than :data:`INITIAL_ESTEP_RTOL` (at most
:data:`MAX_INITIAL_ESTEPS`). Their distance evaluations are counted in the first history record.

Free energy (the lower bound): ``F = sum_n w_n log sum_{c in K_n} N(x_n; mu_c, sigma^2 I) / k``, reported per
unit of weight. Each iteration computes it for the parameters it starts with and the ``K_n`` its E-step found;
it never decreases from one iteration to the next (the E-step only ever replaces a cluster of ``K_n`` by a
nearer one, and the M-step maximises the bound for the posteriors it is given).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import dask
import numpy as np

from ..engine.graph import block_args, map_blocks_delayed, shared, tree_reduce
from ..engine.random import row_uniforms, stage_generator, stage_key
from ..kernels import truncated_em as kernels
from .result import Clock

#: Coresets with at most this many rows are iterated on the driver; larger ones on the Dask workers.
DRIVER_MAX_ROWS = 200_000
#: Rows per E-step block (the unit of work, on the driver as on the workers).
BLOCK_ROWS = 20_000
#: Initial E-steps (no M-step) at most, before the first M-step ...
MAX_INITIAL_ESTEPS = 20
#: ... stopped once the weighted sum of nearest distances improves by less than this fraction.
INITIAL_ESTEP_RTOL = 0.01
#: Placements of the E-step blocks.
PLACEMENTS = ("auto", "driver", "workers")


@dataclass
class TruncatedEMResult:
    """Outcome of :func:`truncated_em`.

    Attributes
    ----------
    means : float64 (k, d)
    sigma2 : float
    lower_bound : float
        Free energy per unit of weight of the last iteration.
    n_iter : int
    history : list of dict
    stop_reason : str
        ``"converged"``, ``"max_iter"`` or ``"max_time"``.
    where : str
        ``"driver"`` or ``"workers"``.
    """

    means: np.ndarray
    sigma2: float
    lower_bound: float
    n_iter: int
    history: list = field(default_factory=list)
    stop_reason: str = "max_iter"
    where: str = "driver"


# -- block tasks ----------------------------------------------------------------------------------------------------
def _initial_truncation_block(block, offset, weights, key, n_clusters, n_truncated):
    rows = np.asarray(block).shape[0]
    if n_truncated == n_clusters:
        return np.tile(np.arange(n_clusters, dtype=np.int32), (rows, 1))
    uniforms = np.empty((rows, n_truncated))
    for slot in range(n_truncated):
        uniforms[:, slot] = row_uniforms(stage_key(key, slot), offset, rows)
    return kernels.random_truncation(uniforms, n_clusters)


def _estep_block(block, offset, weights, state, means, neighbours, explore_key, n_clusters):
    block = np.ascontiguousarray(block)
    # the state is the initial K_n of the block, or the previous E-step's result (K_n first)
    truncation = state[0] if isinstance(state, tuple) else state
    rows = block.shape[0]
    if explore_key is None:
        extra = np.full(rows, -1, dtype=np.int32)
    else:
        extra = np.minimum(row_uniforms(explore_key, offset, rows) * n_clusters, n_clusters - 1).astype(np.int32)
    new_truncation, new_dist2, best, candidate, pair_dist2, n_distances = kernels.truncated_estep(
        block, means, truncation, neighbours, extra
    )
    w = np.ones(rows) if weights is None else np.asarray(weights, dtype=np.float64)
    pairs = kernels.aggregate_pairs(best, candidate, pair_dist2, n_clusters)
    return new_truncation, new_dist2, pairs, int(n_distances), float(w @ new_dist2[:, 0])


def _truncation_of(part):
    return part[0] if isinstance(part, tuple) else part  # an E-step's result, or an initial K_n


def _estep_summary(part):
    return part[2], part[3], part[4]


def _combine_summaries(parts, n_clusters):
    pairs = kernels.merge_pairs([p[0] for p in parts], n_clusters)
    return pairs, sum(p[1] for p in parts), math.fsum(p[2] for p in parts)


def _stats_block(block, weights, part, sigma2, n_clusters):
    block = np.ascontiguousarray(block)
    w = np.ones(block.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    return kernels.posterior_stats(block, w, part[0], part[1], sigma2, n_clusters)


def _combine_stats(parts):
    sums = parts[0][0].copy()
    resp = parts[0][1].copy()
    spread, log_sum = parts[0][2], parts[0][3]
    for other in parts[1:]:
        sums += other[0]
        resp += other[1]
        spread += other[2]
        log_sum += other[3]
    return sums, resp, spread, log_sum


# -- the loop -------------------------------------------------------------------------------------------------------
class _Runner:
    """Computes graphs on the driver (synchronous scheduler) or on the cluster."""

    def __init__(self, client):
        self.client = client

    def persist(self, objects):
        if self.client is None:
            return list(dask.persist(*objects, scheduler="sync"))
        return list(self.client.persist(list(objects)))

    def compute(self, *objects):
        if self.client is None:
            return dask.compute(*objects, scheduler="sync")
        return tuple(self.client.gather(self.client.compute(list(objects))))


def choose_placement(n_rows, where, client):
    """``"driver"`` or ``"workers"`` for the E-step blocks (see the module docstring)."""
    if where == "workers" and client is not None:
        return "workers"
    if where == "auto" and client is not None and n_rows > DRIVER_MAX_ROWS:
        return "workers"
    return "driver"


def initial_neighbours(n_clusters, search_size, rng):
    """Initial ``G_c``: ``c`` itself and ``G - 1`` other clusters drawn at random (without repeats)."""
    neighbours = np.empty((n_clusters, search_size), dtype=np.int32)
    for c in range(n_clusters):
        others = rng.choice(n_clusters - 1, size=search_size - 1, replace=False)
        others = others + (others >= c)
        neighbours[c, 0] = c
        neighbours[c, 1:] = others
    return neighbours


def truncated_em(points, weights, means, *, n_truncated, search_size, random_exploration=True, tol=1e-4,
                 max_iter=100, seed=0, clock=None, client=None, where="auto", block_rows=BLOCK_ROWS, callback=None,
                 passes=0, checkpoint=None):
    """Fit the isotropic GMM by truncated variational EM (var-GMM-S) from initial ``means``.

    Parameters
    ----------
    points : ndarray or dask.array.Array (m, d)
        The (coreset) points. A NumPy array is cut into blocks of ``block_rows``; a dask array keeps its chunks.
    weights : ndarray or dask.array.Array (m,), optional
        Coreset weights (1 when None).
    means : ndarray (k, d)
        Initial means (e.g. AFK-MC2 seeds).
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
    clock : Clock, optional
    client : distributed.Client, optional
    where : {"auto", "driver", "workers"}
    block_rows : int
    callback : callable, optional
        Called with each history record.
    passes : int
        Passes over the full data already spent (coreset, seeding), carried into the records.
    checkpoint : CheckpointHook, optional
        Saves the state (means, variance, ``G_c``, every point's ``K_n``, history) after the initial E-steps and
        after every iteration, and resumes from ``checkpoint.resume`` (:mod:`daskmeans.storage.checkpoint`).

    Returns
    -------
    TruncatedEMResult
        ``history`` has per iteration: ``free_energy`` (per unit weight), ``energy`` (weighted mean squared
        distance of the points to their nearest mean found), ``sigma2`` (after the M-step), ``distances``
        (distance evaluations of the E-step), ``distances_per_point``, ``full_search_distances`` (``m k``),
        ``initial_esteps`` and ``initial_distances`` (the E-steps before the first M-step, in the first record
        only; 0 in the others), ``wall_time`` and ``passes``.
    """
    import dask.array as da

    clock = clock or Clock()
    means = np.array(means, dtype=np.float64)
    n_clusters, n_features = means.shape
    if isinstance(points, da.Array):
        array = points
    else:
        array = da.from_array(np.ascontiguousarray(points), chunks=(block_rows, n_features), name=False)
    m = array.shape[0]
    if weights is not None and not isinstance(weights, da.Array):
        weights = da.from_array(np.asarray(weights, dtype=np.float64), chunks=(array.chunks[0],), name=False)
    elif weights is not None:
        weights = weights.rechunk((array.chunks[0],))
    placement = choose_placement(m, where, client)
    runner = _Runner(client if placement == "workers" else None)
    if placement == "driver" and client is not None and isinstance(points, da.Array):
        # rows that live on the cluster (e.g. all the data as the "coreset") come to the driver once
        from ..engine.client import compute_now

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

    resume = checkpoint.resume if checkpoint is not None else None

    def save(iteration, stop_reason):
        truncation_arrays = runner.compute(*map_blocks_delayed(_truncation_of, "vc-gmm-truncation",
                                                               [[part] for part in truncations]))
        checkpoint.save({
            "iteration": iteration, "means": means, "sigma2": sigma2, "sigma2_floor": sigma2_floor,
            "previous": previous, "neighbours": neighbours, "truncations": list(truncation_arrays),
            "history": history, "stop_reason": stop_reason,
            "lower_bound": None if lower_bound == -np.inf else lower_bound,
            "initial_steps": initial_steps, "initial_distances": initial_distances,
        })

    history = []
    sigma2 = None
    sigma2_floor = 0.0
    previous = None
    stop_reason = "max_iter"
    lower_bound = -np.inf
    n_iter = 0
    if resume is not None:
        means, sigma2, sigma2_floor, previous, neighbours, history, n_iter = (resume[key] for key in (
            "means", "sigma2", "sigma2_floor", "previous", "neighbours", "history", "iteration"))
        initial_steps, initial_distances = resume["initial_steps"], resume["initial_distances"]
        lower_bound = -np.inf if resume["lower_bound"] is None else resume["lower_bound"]
        if resume["stop_reason"] is not None:
            return TruncatedEMResult(means, float(sigma2), float(lower_bound), n_iter, history,
                                     resume["stop_reason"], placement)
        truncations = runner.persist([dask.delayed(t, pure=True) for t in resume["truncations"]])
    else:
        neighbours, truncations, initial_steps, initial_distances = _initial_esteps(
            array, weights, means, n_clusters, n_truncated, search_size, random_exploration, seed, runner)
        if checkpoint is not None:
            save(0, None)
    for iteration in range(n_iter + 1, max_iter + 1):
        explore_key = stage_key(seed, "explore", iteration) if random_exploration else None
        estep_parts = map_blocks_delayed(
            _estep_block, "vc-gmm-estep", block_args(array, weights, truncations),
            shared(means, "means"), shared(neighbours, "neighbours"), explore_key, n_clusters,
        )
        estep_parts = runner.persist(estep_parts)
        summaries = map_blocks_delayed(_estep_summary, "vc-gmm-estep-summary", [[p] for p in estep_parts])
        summary = tree_reduce(summaries, partial(_combine_summaries, n_clusters=n_clusters), "vc-gmm-estep-summary")
        if sigma2 is None:
            ((pairs, n_distances, nearest_sum),) = runner.compute(summary)
            # the paper's Eq. (8): the first E-step's nearest distances give the initial variance
            sigma2 = nearest_sum / (n_features * total_weight)
            if sigma2 <= 0.0:
                raise_degenerate()
            sigma2_floor = sigma2 * 1e-12
            stats_graph = _stats_graph(array, weights, estep_parts, sigma2, n_clusters)
            (stats,) = runner.compute(stats_graph)
        else:
            stats_graph = _stats_graph(array, weights, estep_parts, sigma2, n_clusters)
            (pairs, n_distances, nearest_sum), stats = runner.compute(summary, stats_graph)
        truncations = estep_parts
        sums, resp, spread, log_sum = stats
        free_energy = (log_sum + kernels.free_energy_constant(total_weight, n_features, n_clusters, sigma2))
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
        if callback is not None:
            callback(record)
        stop = None
        if previous is not None and abs(free_energy - previous) <= tol * abs(free_energy):
            stop = "converged"
        else:
            previous = free_energy
            if clock.out_of_time():
                stop = "max_time"
        if checkpoint is not None:
            save(iteration, stop or ("max_iter" if iteration == max_iter else None))
        if stop is not None:
            stop_reason = stop
            break
    return TruncatedEMResult(means, float(sigma2), float(lower_bound), n_iter, history, stop_reason, placement)


def _stats_graph(array, weights, estep_parts, sigma2, n_clusters):
    from ..engine.graph import blocks_of

    data_blocks = blocks_of(array)
    weight_blocks = blocks_of(weights) if weights is not None else [None] * len(data_blocks)
    parts = map_blocks_delayed(
        _stats_block, "vc-gmm-posteriors",
        [[data_blocks[i], weight_blocks[i], estep_parts[i]] for i in range(len(data_blocks))],
        float(sigma2), n_clusters,
    )
    return tree_reduce(parts, _combine_stats, "vc-gmm-posteriors")


def raise_degenerate():
    from ..exceptions import InputDataError

    raise InputDataError(
        "Every point lies exactly on one of the initial means (zero spread), so the GMM variance is zero; the "
        "data has no more distinct points than n_components. Lower n_components."
    )


def _initial_esteps(array, weights, means, n_clusters, n_truncated, search_size, random_exploration, seed, runner):
    """Random ``K_n`` and ``G_c``, then E-steps alone: ``(neighbours, truncations, steps, distances)``."""
    rng = stage_generator(seed, "neighbours")
    neighbours = initial_neighbours(n_clusters, search_size, rng)
    truncation_parts = map_blocks_delayed(
        _initial_truncation_block, "vc-gmm-init-truncation", block_args(array, weights),
        stage_key(seed, "truncation"), n_clusters, n_truncated,
    )
    truncations = runner.persist(truncation_parts)

    initial_distances = 0
    initial_steps = 0
    previous_nearest = None
    n_initial = 0 if n_truncated == n_clusters else MAX_INITIAL_ESTEPS
    for step in range(n_initial):
        explore_key = stage_key(seed, "initial-explore", step) if random_exploration else None
        estep_parts = runner.persist(map_blocks_delayed(
            _estep_block, "vc-gmm-initial-estep", block_args(array, weights, truncations),
            shared(means, "means"), shared(neighbours, "neighbours"), explore_key, n_clusters,
        ))
        summaries = map_blocks_delayed(_estep_summary, "vc-gmm-estep-summary", [[p] for p in estep_parts])
        ((pairs, n_distances, nearest_sum),) = runner.compute(
            tree_reduce(summaries, partial(_combine_summaries, n_clusters=n_clusters), "vc-gmm-estep-summary")
        )
        truncations = estep_parts
        neighbours = kernels.update_neighbours(neighbours, *pairs) if pairs[0].shape[0] else neighbours
        initial_distances += int(n_distances)
        initial_steps += 1
        if previous_nearest is not None and nearest_sum >= (1.0 - INITIAL_ESTEP_RTOL) * previous_nearest:
            break
        previous_nearest = nearest_sum
    return neighbours, truncations, initial_steps, initial_distances
