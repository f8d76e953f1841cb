"""Cluster means from per-cluster sums, and empty clusters moved to the rows farthest from their centers (never
to the origin)."""

from __future__ import annotations

import numpy as np

from ..engine.client import compute_now
from ..passes.assign import assign_stats_graph, finish_stats


def with_enough_far_rows(stats, array, centers, weights, client):
    """``stats`` of a pass over ``centers``, redone with more far rows when it holds fewer than empty clusters.

    Returns
    -------
    stats : ClusterStats
    passes : int
        Passes spent here (0, or 1 when the pass was redone).
    """
    n_empty = int(np.sum(stats.counts <= 0))
    if n_empty <= stats.far_rows.shape[0]:
        return stats, 0
    (raw,) = compute_now(assign_stats_graph(array, centers, weights, n_far=n_empty, client=client), client=client)
    return finish_stats(raw), 1


def relocate_empty_clusters(stats):
    """Give each empty cluster one of the farthest rows, taking it out of its donor cluster.

    Parameters
    ----------
    stats : ClusterStats
        Modified in place: ``sums`` and ``counts`` of empty clusters and their donors.

    Returns
    -------
    int
        Number of clusters relocated; fewer than the empty ones when ``stats`` holds too few far rows.
    """
    empty = np.flatnonzero(stats.counts <= 0)
    if empty.size == 0:
        return 0
    usable = min(empty.size, stats.far_rows.shape[0])
    for e, row, label, weight in zip(empty[:usable], stats.far_rows, stats.far_labels, stats.far_weights):
        row = row.astype(np.float64)
        stats.sums[label] -= weight * row
        stats.counts[label] -= weight
        stats.sums[e] = weight * row
        stats.counts[e] = weight
    return int(usable)


def centers_from_sums(sums, counts, previous_centers, members=None):
    """``S(j) / v(j)``: the means of the clusters; a cluster without weight keeps its previous center.

    ``members`` (the clusters' numbers of samples), when given, decides which clusters are empty too: with
    fractional weights, adding and removing a sample can leave a rounding residue in ``v(j)``.
    """
    centers = np.array(previous_centers, dtype=np.float64)
    filled = counts > 0 if members is None else (np.asarray(members) > 0) & (counts > 0)
    centers[filled] = sums[filled] / counts[filled, None]
    return centers.astype(previous_centers.dtype)
