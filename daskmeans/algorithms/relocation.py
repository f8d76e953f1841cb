"""Empty clusters are moved to the rows farthest from their centers (never to the origin)."""

from __future__ import annotations

import numpy as np


def relocate_empty_clusters(stats, n_empty_ok=True):
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


def centers_from_stats(stats, previous_centers):
    """Means of the clusters; a cluster left without weight keeps its previous center."""
    counts = stats.counts
    centers = np.array(previous_centers, dtype=np.float64)
    filled = counts > 0
    centers[filled] = stats.sums[filled] / counts[filled, None]
    return centers.astype(previous_centers.dtype)
