"""The block tasks of the isotropic GMM (vc-GMM): truncated E-steps, posterior sums, posteriors and likelihoods.

Each function of a block is a plain NumPy function; the graph builders map it over the blocks of a dask array
(with its weights and per-block state) and tree-reduce the parts, under names that start with
``daskmeans-vc-gmm-``. The same tasks run on the driver (threaded scheduler) or on the workers.
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from ..engine.graph import block_args, blocks_of, map_blocks_delayed, shared, stored_blocks, tree_reduce
from ..engine.random import row_uniforms, stage_key
from ..engine.slabs import converted_rows, map_rows, slabs
from ..kernels import truncated_em as kernels
from .assign import check_finite_block


# -- truncated EM on a (coreset) point set ---------------------------------------------------------------------------
def _initial_truncation_block(block, offset, weights, key, n_clusters, n_truncated):
    rows = np.asarray(block).shape[0]
    if n_truncated == n_clusters:
        return np.tile(np.arange(n_clusters, dtype=np.int32), (rows, 1))
    uniforms = np.empty((rows, n_truncated))
    for slot in range(n_truncated):
        uniforms[:, slot] = row_uniforms(stage_key(key, slot), offset, rows)
    return kernels.random_truncation(uniforms, n_clusters)


def _estep_block(block, offset, weights, state, means, neighbours, explore_key, n_clusters):
    # the state is the initial K_n of the block, or the previous E-step's result (K_n first)
    truncation = state[0] if isinstance(state, tuple) else state
    rows = np.asarray(block).shape[0]
    if explore_key is None:
        extra = np.full(rows, -1, dtype=np.int32)
    else:
        extra = np.minimum(row_uniforms(explore_key, offset, rows) * n_clusters, n_clusters - 1).astype(np.int32)
    parts = [
        kernels.truncated_estep(
            slab, means, truncation[start : start + len(slab)], neighbours, extra[start : start + len(slab)]
        )
        for start, slab, _ in slabs(block)
    ]
    new_truncation, new_dist2, best, candidate, pair_dist2 = (np.concatenate([p[i] for p in parts]) for i in range(5))
    n_distances = sum(int(p[5]) for p in parts)
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
    block = converted_rows(block, slice(None))  # coreset points, in blocks of at most GMM_BLOCK_ROWS
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


def initial_truncations(array, weights, key, n_clusters, n_truncated):
    """Delayed random ``K_n`` of every block (all clusters when ``n_truncated == n_clusters``)."""
    return map_blocks_delayed(
        _initial_truncation_block,
        "vc-gmm-init-truncation",
        block_args(array, weights),
        key,
        n_clusters,
        n_truncated,
        reads_data=True,
    )


def estep_parts(array, weights, truncations, means, neighbours, explore_key, n_clusters, name="vc-gmm-estep"):
    """Delayed E-step of every block from its ``K_n`` (``truncations``): new ``K_n``, distances and pair lists.

    ``explore_key`` (None: no random exploration) keys the one random cluster each point searches more.
    """
    return map_blocks_delayed(
        _estep_block,
        name,
        block_args(array, weights, truncations),
        shared(means, "means"),
        shared(neighbours, "neighbours"),
        explore_key,
        n_clusters,
        reads_data=True,
    )


def estep_summary_graph(parts, n_clusters):
    """Delayed ``(pairs, distance evaluations, weighted sum of nearest squared distances)`` of E-step ``parts``."""
    summaries = map_blocks_delayed(_estep_summary, "vc-gmm-estep-summary", [[p] for p in parts])
    return tree_reduce(summaries, partial(_combine_summaries, n_clusters=n_clusters), "vc-gmm-estep-summary")


def truncation_parts(parts):
    """Delayed ``K_n`` of every block, from E-step results or initial truncations (for a checkpoint)."""
    return map_blocks_delayed(_truncation_of, "vc-gmm-truncation", [[part] for part in parts])


def posterior_stats_graph(array, weights, parts, sigma2, n_clusters):
    """Delayed tree-reduced ``(sums, responsibilities, spread, log-likelihood sum)`` for the M-step."""
    data_blocks = stored_blocks(array)
    weight_blocks = blocks_of(weights) if weights is not None else [None] * len(data_blocks)
    stats = map_blocks_delayed(
        _stats_block,
        "vc-gmm-posteriors",
        [[data_blocks[i], weight_blocks[i], parts[i]] for i in range(len(data_blocks))],
        float(sigma2),
        n_clusters,
        reads_data=True,
    )
    return tree_reduce(stats, _combine_stats, "vc-gmm-posteriors")


# -- the fitted model on new data ------------------------------------------------------------------------------------
def _posterior_rows(rows, offset, means, sigma2, n_truncated, check_finite):
    if check_finite:
        check_finite_block(rows, offset)
    return kernels.truncated_posterior(rows, means, sigma2, n_truncated)


def _posterior_block(block, offset, weights, means, sigma2, n_truncated, check_finite):
    parts = [
        _posterior_rows(rows, offset + start, means, sigma2, n_truncated, check_finite)
        for start, rows, _ in slabs(block)
    ]
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def _log_likelihood_block(block, offset, weights, means, sigma2, n_truncated):
    total = np.zeros(2)
    for start, rows, w in slabs(block, weights):
        _, _, log_likelihood = _posterior_rows(rows, offset + start, means, sigma2, n_truncated, True)
        w = np.ones(rows.shape[0]) if w is None else w
        total += [float(w @ log_likelihood), float(w.sum())]
    return total


def _dense_posterior_rows(rows, offset, means, sigma2, n_truncated):
    indices, probabilities, _ = _posterior_rows(rows, offset, means, sigma2, n_truncated, True)
    out = np.zeros((rows.shape[0], means.shape[0]), dtype=np.float64)
    np.put_along_axis(out, indices.astype(np.int64), probabilities, axis=1)
    return out


def _sum_parts(parts):
    return np.sum(parts, axis=0)


def lazy_dense_posterior(array, means, sigma2, n_truncated):
    """Lazy ``(n, k)`` truncated posteriors: zeros outside each row's ``n_truncated`` nearest components."""
    return map_rows(
        array,
        _dense_posterior_rows,
        means,
        sigma2,
        int(n_truncated),
        dtype=np.float64,
        name="daskmeans-vc-gmm-posterior",
        trailing=means.shape[0],
    )


def sparse_posterior_parts(array, means, sigma2, n_truncated):
    """Delayed ``(indices, probabilities, log-likelihoods)`` of every block (non-finite values refused)."""
    return map_blocks_delayed(
        _posterior_block,
        "vc-gmm-posterior",
        block_args(array),
        shared(means, "means"),
        sigma2,
        int(n_truncated),
        True,
        reads_data=True,
    )


def log_likelihood_graph(array, weights, means, sigma2, n_truncated):
    """Delayed ``[weighted sum of truncated log-likelihoods, total weight]`` over the blocks."""
    parts = map_blocks_delayed(
        _log_likelihood_block,
        "vc-gmm-score",
        block_args(array, weights),
        shared(means, "means"),
        sigma2,
        int(n_truncated),
        reads_data=True,
    )
    return tree_reduce(parts, _sum_parts, "vc-gmm-score")
