"""The passes of the two-level seeding (:mod:`daskmeans.algorithms.two_level`): rows per coarse cluster (every row's
coarse label kept where its block is), then a bounded random sample of every coarse cluster by those labels,
delivered per batch of coarse clusters to the tasks that use it.

Every row's coarse cluster is its exact nearest coarse center (:func:`daskmeans.kernels.assign.nearest_centers`)
and its random key comes from its global index (:func:`daskmeans.passes.sampling.sample_keys`), so the counts and
the samples do not depend on chunking, worker count or scheduler.
"""

from __future__ import annotations

import numpy as np
from dask.base import tokenize

from .. import config
from ..engine.client import keep_and_reduce
from ..engine.graph import block_args, map_blocks_delayed, shared, task, tree_reduce
from ..engine.slabs import converted_rows, slabs
from ..kernels.assign import nearest_centers
from .sampling import sample_keys

#: Groups of batches that each block's candidates are split into before the merges fetch them: a batch's merge
#: waits for its group's part of every block, not for every block's candidates to reach its worker, and the other
#: groups move while the first fine problems run.
TRANSFER_GROUPS = 16


def _coarse_labels(block, coarse):
    """The coarse cluster of every row of a stored block, slab by slab."""
    parts = [nearest_centers(rows, coarse)[0] for _, rows, _ in slabs(block)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _coarse_labels_block(block, offset, weights, coarse):
    """A block's coarse labels (compact) and its rows of positive weight and weight per coarse cluster."""
    labels = _coarse_labels(block, coarse)
    k = coarse.shape[0]
    compact = labels.astype(np.uint16 if k <= np.iinfo(np.uint16).max else np.int32)
    if weights is None:
        rows = np.bincount(labels, minlength=k).astype(np.int64)
        return compact, rows, rows.astype(np.float64)
    w = np.asarray(weights, dtype=np.float64)
    positive = np.bincount(labels[w > 0], minlength=k).astype(np.int64)
    return compact, positive, np.bincount(labels, weights=w, minlength=k)


def _counts_of(labelled):
    return labelled[1], labelled[2]


def _sum_counts(parts):
    return sum(p[0] for p in parts), sum(p[1] for p in parts)


def coarse_labels_and_counts(array, coarse, weights=None, client=None):
    """The coarse cluster of every row, kept where its block is, and ``(rows, mass)`` per coarse cluster: its rows
    of positive weight (int64) and their total weight, in one pass.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    coarse : ndarray (k_coarse, d)
        The coarse centers.
    weights : dask.array.Array (n,), optional
        Without weights the mass is the number of rows.
    client : distributed.Client, optional

    Returns
    -------
    labelled : tuple of Delayed
        One per block, held on the cluster (in memory without a client): its labels (uint16 for up to 65,535
        coarse centers) with its counts, for :func:`cluster_samples_graphs`.
    counts : tuple (int64 ndarray, float64 ndarray)
    """
    coarse = np.ascontiguousarray(coarse, dtype=array.dtype)
    outputs = map_blocks_delayed(
        _coarse_labels_block,
        "two-level-labels",
        block_args(array, weights),
        shared(coarse, "coarse-centers"),
        reads_data=True,
    )
    return keep_and_reduce(outputs, _counts_of, _sum_counts, "two-level-counts", 16 * coarse.shape[0], client)


def bottom_per_cluster(labels, keys, index, caps):
    """Positions of the rows kept: per cluster ``c``, its ``caps[c]`` rows of smallest ``(key, index)``.

    Rows of infinite key (weight 0) are never kept. The positions come sorted by ``(label, key, index)``.
    """
    finite = np.flatnonzero(np.isfinite(keys))
    order = finite[np.lexsort((index[finite], keys[finite], labels[finite]))]
    sorted_labels = labels[order]
    rank = np.arange(len(order)) - np.searchsorted(sorted_labels, sorted_labels, side="left")
    return order[rank < caps[sorted_labels]]


def sample_thresholds(caps, rows, mass, weighted: bool):
    """The largest random key a row of each coarse cluster may have to be a candidate for its sample.

    About ``caps + 4 sqrt(caps) + 16`` rows of a cluster have a key below it (uniform keys: that many over its
    rows; Efraimidis-Spirakis keys: that many over its weight, fewer with very unequal weights), so the blocks
    send on only about that many candidates per cluster, not all their rows, and the sample is nearly always its
    ``caps`` smallest keys; ``inf`` where the sample is all the cluster's rows, ``-inf`` where it is none.
    """
    caps = np.asarray(caps, dtype=np.float64)
    size = np.asarray(mass if weighted else rows, dtype=np.float64)
    target = caps + 4.0 * np.sqrt(caps) + 16.0
    with np.errstate(divide="ignore", invalid="ignore"):
        thresholds = target / size
    thresholds = np.where(caps >= np.asarray(rows), np.inf, thresholds)
    return np.where(caps > 0, thresholds, -np.inf)


def _cluster_sample_block(block, offset, weights, labelled, caps, thresholds, key, batch_of, n_batches):
    """This block's candidates for every coarse cluster's sample, split by batch of coarse clusters."""
    block = np.asarray(block)  # as stored: only the kept rows are converted
    labels = labelled[0].astype(np.intp)
    keys = sample_keys(key, offset, block.shape[0], weights)
    keys = np.where(keys <= thresholds[labels], keys, np.inf)  # inf: never kept
    index = np.arange(offset, offset + block.shape[0], dtype=np.int64)
    kept = bottom_per_cluster(labels, keys, index, caps)
    rows = converted_rows(block, kept)
    labels, keys, index = labels[kept], keys[kept], index[kept]
    batch = batch_of[labels]
    out = []
    for b in range(n_batches):
        mine = np.flatnonzero(batch == b)
        out.append((labels[mine], keys[mine], index[mine], rows[mine]))
    return out


def _merge_samples(parts, caps):
    labels, keys, index, rows = (np.concatenate([p[i] for p in parts]) for i in range(4))
    kept = bottom_per_cluster(labels, keys, index, caps)
    return labels[kept], keys[kept], index[kept], rows[kept], caps


def _merge_first(block_parts, batch, caps):
    """The first level of a batch's merge: that batch's part of a few blocks' candidates."""
    return _merge_samples([p[batch] for p in block_parts], caps)


def _merge_next(parts):
    return _merge_samples(parts, parts[0][4])


def cluster_samples_graphs(array, labelled, caps, thresholds, batch_of, key, weights=None):
    """Delayed samples of every coarse cluster, one per batch of coarse clusters, in one pass over the data.

    Coarse cluster ``c`` gets its ``caps[c]`` rows of smallest random key (uniform without weights,
    weight-proportional without replacement with them) among those of key at most ``thresholds[c]``
    (:func:`sample_thresholds`): all its rows of positive weight when it has no more than ``caps[c]``, otherwise
    nearly always ``caps[c]`` rows. Which rows depends on the rows, their keys and the thresholds only, not on the
    chunking.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    labelled : sequence
        Per block, its rows' coarse labels first (:func:`coarse_labels_and_counts`' ``labelled``).
    caps : int ndarray (k_coarse,)
        Rows to sample in each coarse cluster.
    thresholds : float ndarray (k_coarse,)
        Largest key of a candidate row in each coarse cluster.
    batch_of : int ndarray (k_coarse,)
        The batch of each coarse cluster, ``0 .. n_batches - 1`` (any value for clusters of cap 0).
    key : int
        The stage key of the random keys (:func:`daskmeans.engine.random.stage_key`).
    weights : dask.array.Array (n,), optional

    Returns
    -------
    list of Delayed, one per batch
        Each ``(labels, keys, row_indices, rows, caps)``: the batch's samples sorted by ``(label, key, index)``.
        A worker holds each block's candidates (about the block's share of ``sum(caps)`` rows) until the
        batches' merges have read them.
    """
    caps = np.asarray(caps, dtype=np.int64)
    batch_of = np.asarray(batch_of, dtype=np.int64)
    n_batches = int(batch_of.max()) + 1 if len(batch_of) else 0
    caps_node = shared(caps, "two-level-caps")
    block_parts = map_blocks_delayed(
        _cluster_sample_block,
        "two-level-sample",
        block_args(array, weights, labelled),
        caps_node,
        shared(np.asarray(thresholds, dtype=np.float64), "two-level-thresholds"),
        int(key),
        shared(batch_of, "two-level-batches"),
        n_batches,
        reads_data=True,
    )
    token = tokenize(block_parts, caps, thresholds, batch_of)
    split_every, settings = config.SPLIT_EVERY, config.carried()
    groups = np.array_split(np.arange(n_batches), min(n_batches, TRANSFER_GROUPS))
    # each block's candidates split by group of batches, so that a batch's merge fetches only its group's
    parts = [
        [
            task((f"daskmeans-two-level-group-{token}", j, g), _slice, part, int(members[0]), int(members[-1]) + 1)
            for g, members in enumerate(groups)
        ]
        for j, part in enumerate(block_parts)
    ]
    batches = []
    for g, members in enumerate(groups):
        for b in members:
            name = f"daskmeans-two-level-merge-{token}-{b}"
            first = [
                task(
                    (name, j // split_every),
                    _merge_first,
                    [block[g] for block in parts[j : j + split_every]],
                    int(b - members[0]),
                    caps_node,
                    settings=settings,
                )
                for j in range(0, len(parts), split_every)
            ]
            batches.append(first[0] if len(first) == 1 else tree_reduce(first, _merge_next, f"two-level-merge-{b}"))
    return batches


def _slice(values, start, stop):
    return values[start:stop]
