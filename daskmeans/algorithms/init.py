"""Seeding shared by every algorithm: k-means||, k-means++ on a sample, AFK-MC2, two-level k-means (large k), random
rows, or given centers."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np

from .. import config
from ..engine.capacity import cluster_memory_bytes
from ..engine.client import compute_now, persist_now
from ..engine.random import stage_generator, stage_key
from ..engine.slabs import stored_form
from ..exceptions import InputDataError, InvalidParameterError
from ..kernels.afkmc2 import afkmc2_chains, proposal_distribution, reduce_candidates
from ..passes import oversample, proposal
from ..passes.row_sample import sampled_rows
from ..passes.sampling import (
    finish_gather,
    gather_rows_graph,
    sample_rows,
    weighted_indices_with_replacement_graph,
)
from .plan import SeedingPlan
from .result import RunContext
from .sample_kmeans import count_distinct as _count_distinct
from .sample_kmeans import weighted_kmeans_plusplus, weighted_lloyd
from .two_level import two_level_centers

INIT_METHODS = ("k-means||", "k-means++", "random", "afk-mc2", "two-level")
#: Passes over the data of :func:`afkmc2_distributed` (first center, proposal masses, proposals, their rows).
AFKMC2_PASSES = 4
#: Rounds k-means|| adds, at most, beyond its ``rounds`` while it has fewer than ``n_clusters`` distinct candidates.
MAX_EXTRA_ROUNDS = 10


def _no_progress(done, total, note=None):
    """The default ``on_progress`` of the seeding functions: nothing is shown."""


def kmeans_parallel(array, n_clusters, seed, plan=None, *, context=None, recluster_iter=30, on_progress=_no_progress):
    """k-means|| seeding (Bahmani et al. 2012) as distributed passes.

    One uniform row, then ``plan.rounds`` rounds that each keep every row independently with probability
    ``min(1, l w d^2 / phi)`` (``l = plan.oversampling_factor * n_clusters``; ``plan`` a
    :class:`~daskmeans.algorithms.plan.SeedingPlan`, default 5 rounds and a factor of 2), and up to
    :data:`MAX_EXTRA_ROUNDS` more while there are fewer than ``n_clusters`` distinct candidates; candidates are
    weighted by the weight of the rows they attract and reduced to ``n_clusters`` centers by weighted k-means++, then
    refined by up to ``recluster_iter`` weighted Lloyd iterations on the candidates (as Spark MLlib does; cheap, on
    the driver).

    ``on_progress(passes_done, passes_expected, note)`` is called after every pass (``2 + 2 * rounds`` passes
    unless extra rounds are needed for ``n_clusters`` candidates) and before the reclustering on the driver.

    ``context`` (:class:`~daskmeans.algorithms.result.RunContext`) gives the cluster, the sample weights and the
    fit's clock: once there are ``n_clusters`` distinct candidates, no further round starts that, as long as the
    last, would end past the clock's ``max_time``, and the reclustering keeps the centers it has once that is spent.

    Returns
    -------
    centers : ndarray (n_clusters, d)
    n_passes : int
        Full passes over the data spent.
    """
    plan = plan or SeedingPlan()
    context = context or RunContext()
    weights, client, clock = context.weights, context.client, context.clock
    rounds, max_extra_rounds = plan.rounds, MAX_EXTRA_ROUNDS
    scale_l = plan.oversampling_factor * n_clusters
    first = sample_rows(array, 1, stage_key(seed, "k-means||", "first"), weights, client=client)
    candidates = np.asarray(first[2])
    passes = 1
    expected = 2 + 2 * rounds
    on_progress(passes, expected, "first center")
    states = None
    n_done = 0
    round_index, round_start = 0, None
    while True:
        new = candidates[n_done:]
        if new.shape[0] or states is None:
            graphs = oversample.update_state_graph(array, weights, states, new, n_done)
            states = list(persist_now(*graphs, client=client))
            n_done = candidates.shape[0]
            (phi,) = compute_now(oversample.total_cost_graph(states), client=client)
            passes += 1
            on_progress(passes, max(expected, passes), f"round {round_index}/{rounds}: {n_done} candidates")
        if phi <= 0:
            distinct = _count_distinct(candidates)
            if distinct < n_clusters:
                raise InputDataError(
                    f"The data has only {distinct} distinct row(s) (with positive weight) but n_clusters="
                    f"{n_clusters}; lower n_clusters or remove duplicate rows."
                )
            break
        enough = _count_distinct(candidates) >= n_clusters
        if round_index >= rounds and (enough or round_index >= rounds + max_extra_rounds):
            break
        # the next round (a sampling pass and the cost pass after it) starts only if one as long as the last ends
        # in time
        if enough and clock.out_of_time(0.0 if round_start is None else time.perf_counter() - round_start):
            break
        round_start = time.perf_counter()
        key = stage_key(seed, "k-means||", "round", round_index)
        ((_, rows),) = compute_now(
            oversample.oversample_graph(array, weights, states, key, scale_l / phi), client=client
        )
        passes += 1
        round_index += 1
        candidates = np.concatenate([candidates, rows.astype(candidates.dtype)])
        if round_index > rounds:  # an extra round: n_clusters candidates were not reached yet
            expected = passes + 1
        on_progress(passes, max(expected, passes + 1), f"round {round_index}/{rounds}: sampled {len(rows)} rows")
    (candidate_weights,) = compute_now(
        oversample.candidate_weights_graph(array, weights, states, candidates.shape[0]), client=client
    )
    keep = candidate_weights > 0
    rng = stage_generator(seed, "k-means||", "recluster")
    points, point_weights = candidates[keep], candidate_weights[keep]
    on_progress(passes, passes, f"reclustering {len(points)} candidates on the driver")
    centers = weighted_kmeans_plusplus(points, point_weights, n_clusters, rng)
    centers = weighted_lloyd(points, point_weights, centers, max_iter=recluster_iter, out_of_time=clock.out_of_time)
    return centers.astype(array.dtype), passes


def kmeans_parallel_rows(n_samples: int, n_clusters: int, sample_size=None, row_bytes=None, memory_bytes=None) -> int:
    """Rows k-means|| looks at, never more than ``n_samples``: ``sample_size`` when given; else every row up to
    ``max(KMEANS_PARALLEL_MIN_ROWS, KMEANS_PARALLEL_ROWS_PER_CENTER * n_clusters)`` rows, and for more rows a sample
    of that many, or of fewer when those would not fit in ``KMEANS_PARALLEL_MEMORY_FRACTION`` of ``memory_bytes``
    (the workers' memory) at ``row_bytes`` each (a row as stored and its state) (:mod:`daskmeans.config`)."""
    if sample_size:
        return int(min(n_samples, sample_size))
    wanted = max(config.KMEANS_PARALLEL_MIN_ROWS, config.KMEANS_PARALLEL_ROWS_PER_CENTER * int(n_clusters))
    if wanted < n_samples and row_bytes and memory_bytes:
        wanted = min(wanted, max(1, int(memory_bytes * config.KMEANS_PARALLEL_MEMORY_FRACTION) // int(row_bytes)))
    return int(min(n_samples, wanted))


def kmeans_plusplus_rows(n_samples: int, n_clusters: int, sample_size=None) -> int:
    """Rows k-means++ on a sample looks at: ``sample_size`` when given, else ``max(20 * n_clusters, 10_000)``,
    never more than ``n_samples``."""
    return int(min(n_samples, sample_size or max(20 * n_clusters, 10_000)))


def seeding_plan(
    array, n_clusters, init="k-means||", client=None, *, rounds=5, oversampling_factor=2.0, sample_size=None
) -> SeedingPlan:
    """The seeding's choices for ``array``, made once (:class:`~daskmeans.algorithms.plan.SeedingPlan`): the rows
    k-means|| looks at (:func:`kmeans_parallel_rows`, with the rows' stored size and ``client``'s workers' memory
    when the data has more rows than it takes whole) or k-means++'s sample (:func:`kmeans_plusplus_rows`)."""
    n = int(array.shape[0])
    method = init if isinstance(init, str) else "given"
    rows, reasons = None, {}
    if method == "k-means||":
        rows = kmeans_parallel_rows(n, n_clusters, sample_size)
        if rows >= n:
            reasons["sample_rows"] = f"every row: {n:,} rows <= " + (
                f"init_sample_size={sample_size}"
                if sample_size
                else f"max(KMEANS_PARALLEL_MIN_ROWS, KMEANS_PARALLEL_ROWS_PER_CENTER * k) = {rows:,}"
            )
        else:
            stored = stored_form(array)
            row_bytes = int(np.prod(stored.shape[1:])) * stored.dtype.itemsize + config.KMEANS_PARALLEL_STATE_BYTES
            memory = cluster_memory_bytes(client)
            rows = kmeans_parallel_rows(n, n_clusters, sample_size, row_bytes, memory)
            reasons["sample_rows"] = (
                f"a sample of {n:,} rows: init_sample_size={sample_size}"
                if sample_size
                else f"a sample of {n:,} rows: at most {rows:,}, within KMEANS_PARALLEL_MEMORY_FRACTION of the "
                f"workers' {memory:,} bytes at {row_bytes} bytes a row"
            )
    elif method == "k-means++":
        rows = kmeans_plusplus_rows(n, n_clusters, sample_size)
        reasons["sample_rows"] = f"init_sample_size={sample_size}" if sample_size else "max(20 k, 10,000) rows"
    return SeedingPlan(
        init=method, rounds=rounds, oversampling_factor=oversampling_factor, sample_rows=rows, reasons=reasons
    )


def kmeans_parallel_bounded(array, n_clusters, seed, plan=None, *, context=None, on_progress=_no_progress):
    """:func:`kmeans_parallel` on every row when ``plan.sample_rows`` (:func:`seeding_plan`, which is called
    without a plan) is the data's number of rows, else on a uniform sample of about that many rows, drawn in one
    pass and held by the workers (:func:`daskmeans.passes.row_sample.sampled_rows`; weighted rows keep their
    weights).

    When the sample holds fewer than ``n_clusters`` distinct rows (data with about ``n_clusters`` distinct rows, a
    few of them rare), k-means|| looks at every row instead, as without a sample.

    Returns
    -------
    centers : ndarray (n_clusters, d)
    n_passes : float
        Passes over the data: the sample pass plus k-means||'s passes over the sample times its share of the rows.
    """
    n = int(array.shape[0])
    context = context or RunContext()
    weights, client = context.weights, context.client
    plan = plan or seeding_plan(array, n_clusters, client=client)
    rounds = plan.rounds
    if plan.sample_rows >= n:
        return kmeans_parallel(array, n_clusters, seed, plan, context=context, on_progress=on_progress)
    m = plan.sample_rows
    on_progress(0, 3 + 2 * rounds, f"sampling about {m:,} of {n:,} rows")
    sample, sample_weights = sampled_rows(array, weights, m / n, stage_key(seed, "k-means||", "sample"), client)
    kept = int(sample.shape[0])

    def on_sample(done, total, note=None):
        on_progress(1 + done, 1 + total, f"on {kept:,} sampled rows: {note}" if note else None)

    if kept >= n_clusters:
        on_sample(0, 2 + 2 * rounds)
        try:
            on_the_sample = replace(context, weights=sample_weights)
            centers, passes = kmeans_parallel(
                sample, n_clusters, seed, plan, context=on_the_sample, on_progress=on_sample
            )
            return centers, 1 + passes * kept / n
        except InputDataError:
            (values,) = compute_now(sample, client=client)
            if _count_distinct(values) >= n_clusters:
                raise
    on_progress(1, 3 + 2 * rounds, f"fewer than {n_clusters} distinct rows in the sample of {kept:,}: every row")
    centers, passes = kmeans_parallel(array, n_clusters, seed, plan, context=context)
    return centers, 1 + passes


def kmeans_plusplus_on_sample(
    array, n_clusters, seed, *, weights=None, sample_size=None, client=None, on_progress=_no_progress
):
    """Greedy k-means++ on a uniform (or weight-proportional) sample of rows drawn in one pass: ``sample_size`` rows
    (by default ``max(20 * n_clusters, 10_000)``, :func:`kmeans_plusplus_rows`).

    ``on_progress(passes_done, 1, note)`` is called before and after the sample pass.
    """
    n = array.shape[0]
    m = kmeans_plusplus_rows(n, n_clusters, sample_size)
    on_progress(0, 1, f"sampling {m} rows")
    sample = sample_rows(array, m, stage_key(seed, "k-means++", "sample"), weights, client=client)
    rows = np.asarray(sample[2])
    on_progress(1, 1, f"k-means++ on {m} rows on the driver")
    rng = stage_generator(seed, "k-means++", "seed")
    what = "The data" if m == n else f"A sample of {m} rows (init='k-means||' looks at every row)"
    centers = weighted_kmeans_plusplus(rows, np.ones(rows.shape[0]), n_clusters, rng, what=what)
    return centers.astype(array.dtype), 1


def random_rows(array, n_clusters, seed, *, weights=None, client=None, on_progress=_no_progress):
    """``n_clusters`` distinct rows drawn at random (weight-proportional when weighted); ``on_progress(passes_done,
    1, note)`` is called before and after the one pass."""
    n = array.shape[0]
    m = min(n, max(2 * n_clusters, n_clusters + 100))
    on_progress(0, 1, f"sampling {m} rows")
    sample = sample_rows(array, m, stage_key(seed, "random", "sample"), weights, client=client)
    rows = np.asarray(sample[2])
    on_progress(1, 1)
    _, first_seen = np.unique(rows, axis=0, return_index=True)
    distinct = rows[np.sort(first_seen)]
    if distinct.shape[0] < n_clusters:
        where = "the data" if m == n else f"a sample of {m} rows"
        raise InputDataError(
            f"{where} has only {distinct.shape[0]} distinct row(s) but n_clusters={n_clusters}; lower n_clusters "
            "or remove duplicate rows (init='k-means||' looks at every row)."
        )
    return distinct[:n_clusters].astype(array.dtype), 1


def afkmc2_candidates(n_clusters, oversampling=None) -> int:
    """Centers the chains draw for ``n_clusters``: ``ceil(oversampling * n_clusters)`` (at least ``n_clusters``;
    ``oversampling`` None: :data:`~daskmeans.config.AFKMC2_OVERSAMPLING`)."""
    oversampling = config.AFKMC2_OVERSAMPLING if oversampling is None else oversampling
    if not oversampling >= 1.0:
        raise InvalidParameterError(f"AFK-MC2 oversampling must be >= 1 (1: no oversampling), got {oversampling!r}.")
    return max(int(n_clusters), int(math.ceil(oversampling * n_clusters)))


def afkmc2_in_memory(points, weights, n_clusters, rng, chain_length=None, oversampling=None, what="The data"):
    """AFK-MC2 seeding (Bachem et al. 2016) of weighted points held in memory (e.g. a coreset), oversampled.

    The chains draw ``ceil(oversampling * n_clusters)`` candidates, of which weighted greedy k-means++ keeps
    ``n_clusters`` (:func:`daskmeans.kernels.afkmc2.reduce_candidates`; each candidate weighted by the points
    nearest to it, or where the points outnumber the chains' proposals, by the proposals), as k-means|| reclusters its
    oversampled candidates: D^2 sampling alone, which the chains approximate, leaves well-separated clusters
    without a center (about 10 of 100 blobs), and the few uncovered clusters it misses at the end are covered by
    the extra candidates.

    When the chains find fewer than ``n_clusters`` distinct candidates (data with about ``n_clusters`` distinct
    rows, some of them rare), greedy k-means++ on all the points takes over: it looks at every point, so with
    exactly ``n_clusters`` distinct points every one is a center, and with fewer the message gives their number.

    Parameters
    ----------
    points : ndarray (m, d)
    weights : ndarray (m,)
        Non-negative, positive sum.
    n_clusters : int
    rng : numpy.random.Generator
        Draws the first center, the proposals and the acceptance uniforms (all before the chains run).
    chain_length : int, optional
        Length of each Markov chain (>= 1; 1 takes every first proposal); default
        :data:`~daskmeans.config.AFKMC2_CHAIN_LENGTH`.
    oversampling : float, optional
        Centers drawn per center kept (>= 1; 1 is plain AFK-MC2); default :data:`~daskmeans.config.AFKMC2_OVERSAMPLING`.
    what : str
        What ``points`` are, for the message (``"The data"``, ``"The coreset of 20000 rows"``).

    Returns
    -------
    centers : ndarray (n_clusters, d), dtype of ``points``
    n_distances : int
        Distance evaluations: one per point for the proposal, one per proposal and candidate so far, then one per
        point (or proposal, whichever are fewer) and candidate and those of the greedy k-means++ on the
        candidates.

    Raises
    ------
    InputDataError
        Fewer distinct points of positive weight than ``n_clusters``.
    """
    points = np.ascontiguousarray(points)
    weights = np.asarray(weights, dtype=np.float64)
    m = points.shape[0]
    chain_length = config.AFKMC2_CHAIN_LENGTH if chain_length is None else chain_length
    n_candidates = afkmc2_candidates(n_clusters, oversampling)
    first = int(rng.choice(m, p=weights / weights.sum()))
    if n_clusters == 1:
        return points[first][None, :].copy(), 0
    q = proposal_distribution(points, weights, points[first])
    n_proposals = (n_candidates - 1) * chain_length
    proposals = np.minimum(np.searchsorted(np.cumsum(q), rng.random(n_proposals) * q.sum(), side="right"), m - 1)
    uniforms = rng.random(n_proposals)
    rows = np.ascontiguousarray(points[proposals])
    centers, _, n_distances = afkmc2_chains(
        rows,
        weights[proposals],
        q[proposals],
        points[first].astype(np.float64),
        int(n_candidates),
        int(chain_length),
        uniforms,
    )
    if n_candidates > n_clusters and _count_distinct(centers) >= n_clusters:
        # the candidates' masses: exact from the points where they are fewer than the proposals
        mass_rows = (points, weights, np.ones(m)) if m <= n_proposals else (rows, weights[proposals], q[proposals])
        centers, reduce_distances = reduce_candidates(centers, *mass_rows, n_clusters, rng)
        n_distances += reduce_distances
    if _count_distinct(centers) < n_clusters:
        n_trials = 2 + int(math.log(n_clusters))
        centers = weighted_kmeans_plusplus(points, weights, n_clusters, rng, n_trials, what=what)
        n_distances += m * (1 + n_trials * (n_clusters - 1))
    return centers.astype(points.dtype), int(n_distances) + m


def afkmc2_distributed(array, n_clusters, seed, *, weights=None, chain_length=None, oversampling=None, client=None):
    """AFK-MC2 seeding of a dask array: the proposal comes from distributed passes, the chains run on the driver.

    One pass draws the first center (weight-proportional), one measures each block's proposal mass; the
    ``(n_candidates - 1) * chain_length`` proposals (``n_candidates = ceil(oversampling * n_clusters)``) are then
    located and read in the blocks they fall in, and the Markov chains run on the driver over those rows only;
    ``n_clusters`` of the candidates are kept as in :func:`afkmc2_in_memory` (no further pass).

    When the chains find fewer than ``n_clusters`` distinct candidates (data with about ``n_clusters`` distinct
    rows, some of them rare), :func:`kmeans_parallel` takes over: it looks at every row, so with exactly
    ``n_clusters`` distinct rows every one is a center, and with fewer the message gives their number.

    ``chain_length`` and ``oversampling`` None: :data:`~daskmeans.config.AFKMC2_CHAIN_LENGTH` and
    :data:`~daskmeans.config.AFKMC2_OVERSAMPLING`.

    Returns
    -------
    centers : ndarray (n_clusters, d)
    n_passes : int
    """
    chain_length = config.AFKMC2_CHAIN_LENGTH if chain_length is None else chain_length
    n_candidates = afkmc2_candidates(n_clusters, oversampling)
    first = sample_rows(array, 1, stage_key(seed, "afk-mc2", "first"), weights, client=client)
    first_center = np.asarray(first[2])[0].astype(np.float64)
    if n_clusters == 1:
        return first_center[None, :].astype(array.dtype), 1
    masses_graph = proposal.block_masses_graph(array, first_center, weights, name="afkmc2-masses")
    (masses,) = compute_now(masses_graph, client=client)
    q = proposal.lazy_proposal(array, first_center, masses, weights)
    totals = proposal.block_probabilities(masses)
    n_proposals = (n_candidates - 1) * chain_length
    (indices,) = compute_now(
        weighted_indices_with_replacement_graph(q, totals, n_proposals, seed, "afk-mc2", "proposals"), client=client
    )
    unique, inverse = np.unique(indices, return_inverse=True)
    graphs = [gather_rows_graph(array, unique), gather_rows_graph(q[:, None], unique)]
    if weights is not None:
        graphs.append(gather_rows_graph(weights[:, None], unique))
    gathered = compute_now(*graphs, client=client)
    rows = finish_gather(gathered[0], len(unique), array.shape[1], array.dtype)[inverse]
    candidate_q = finish_gather(gathered[1], len(unique), 1, np.float64)[inverse, 0]
    candidate_w = (
        finish_gather(gathered[2], len(unique), 1, np.float64)[inverse, 0]
        if weights is not None
        else np.ones(n_proposals)
    )
    uniforms = stage_generator(seed, "afk-mc2", "accept").random(n_proposals)
    rows = np.ascontiguousarray(rows)
    centers, _, _ = afkmc2_chains(
        rows, candidate_w, candidate_q, first_center, int(n_candidates), int(chain_length), uniforms
    )
    if n_candidates > n_clusters and _count_distinct(centers) >= n_clusters:
        centers, _ = reduce_candidates(
            centers, rows, candidate_w, candidate_q, n_clusters, stage_generator(seed, "afk-mc2", "reduce")
        )
    if _count_distinct(centers) < n_clusters:
        where = RunContext(client=client, weights=weights)
        centers, passes = kmeans_parallel(array, n_clusters, seed, context=where)
        return centers, AFKMC2_PASSES + passes
    return centers.astype(array.dtype), AFKMC2_PASSES


def check_init(init, n_clusters, n_features=None, methods=INIT_METHODS):
    """Validate ``init``: a method name of ``methods`` or an explicit ``(n_clusters, n_features)`` array.

    ``n_features`` None (the data not opened yet) leaves the array's width unchecked.
    """
    if isinstance(init, str):
        if init not in methods:
            raise InvalidParameterError(
                f"init must be one of {', '.join(repr(m) for m in methods)} or an array of shape "
                f"(n_clusters, n_features); got {init!r}."
            )
        return init
    centers = np.asarray(init)
    if centers.dtype.kind not in "fiu":
        raise InvalidParameterError(f"init array must be numeric, got dtype {centers.dtype}.")
    if (
        centers.ndim != 2
        or centers.shape[0] != n_clusters
        or (n_features is not None and centers.shape[1] != n_features)
    ):
        data = "" if n_features is None else f" and the data has {n_features} features"
        width = "n_features" if n_features is None else n_features
        raise InvalidParameterError(
            f"init array has shape {centers.shape}, but n_clusters={n_clusters}{data}: init must be an array of "
            f"shape ({n_clusters}, {width})."
        )
    if not np.isfinite(centers).all():
        raise InvalidParameterError("init array contains NaN or infinity.")
    return centers


def initial_centers(array, n_clusters, init, seed, *, context=None, plan=None, on_progress=_no_progress):
    """Initial centers by the chosen method; returns ``(centers, passes_over_data)``.

    ``plan`` (:class:`~daskmeans.algorithms.plan.SeedingPlan`, default :func:`seeding_plan` at its defaults) gives
    k-means||' rounds, oversampling factor and rows, and k-means++'s sample.

    ``on_progress(passes_done, passes_expected, note)`` follows the seeding's passes (AFK-MC2: once before
    its passes and chains, once after). ``context`` (:class:`~daskmeans.algorithms.result.RunContext`) gives the
    cluster, the sample weights and the fit's clock: k-means|| starts no round that would end past its ``max_time``
    and stops its reclustering once it is spent (:func:`kmeans_parallel`); the other methods run to their end.

    ``"two-level"`` (:func:`daskmeans.algorithms.two_level.two_level_centers`, for large k) takes none of the
    k-means|| and k-means++ options; when one of its coarse clusters has fewer distinct rows than the fine centers
    it was given (data with about ``n_clusters`` distinct rows), k-means|| seeds instead, as AFK-MC2 does.
    """
    init = check_init(init, n_clusters, array.shape[1])
    if not isinstance(init, str):
        on_progress(0, 0)
        return np.array(init, dtype=array.dtype), 0
    context = context or RunContext()
    weights, client = context.weights, context.client
    plan = plan or seeding_plan(array, n_clusters, init, client)
    if init == "k-means||":
        return kmeans_parallel_bounded(array, n_clusters, seed, plan, context=context, on_progress=on_progress)
    if init == "afk-mc2":
        on_progress(0, AFKMC2_PASSES, "proposal passes, then the Markov chains on the driver")
        centers, passes = afkmc2_distributed(array, n_clusters, seed, weights=weights, client=client)
        on_progress(passes, passes)
        return centers, passes
    if init == "two-level":
        centers, passes = two_level_centers(array, n_clusters, seed, context=context, on_progress=on_progress)
        if centers.shape[0] < n_clusters:  # about n_clusters distinct rows: k-means|| looks at every row
            on_progress(passes, passes + 2 + 2 * plan.rounds, "too few distinct rows in a coarse cluster: k-means||")
            centers, more = kmeans_parallel(array, n_clusters, seed, plan, context=context)
            passes += more
            on_progress(passes, passes)
        return centers, passes
    if init == "k-means++":
        return kmeans_plusplus_on_sample(
            array,
            n_clusters,
            seed,
            weights=weights,
            sample_size=plan.sample_rows,
            client=client,
            on_progress=on_progress,
        )
    return random_rows(array, n_clusters, seed, weights=weights, client=client, on_progress=on_progress)
