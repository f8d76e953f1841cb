"""Approximate nearest center through a coarse level: each row is compared with the centers of a few lists only.

The centers are split into lists by a k-means of the centers themselves (:mod:`daskmeans.algorithms.coarse_index`);
a row is scored against the lists' coarse centers, and its nearest center is searched among the members of its
``n_probe`` nearest lists, with the exact assignment of :func:`daskmeans.kernels.assign.nearest_gemm` inside each
list. Where the nearest center belongs to a probed list the result is exact (label and distance, ties to the lowest
index, as :func:`~daskmeans.kernels.assign.nearest_centers`); otherwise it is the nearest of the probed ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .assign import all_dist2, nearest_gemm


@dataclass(frozen=True)
class CoarseIndex:
    """Lists of centers around coarse centers.

    Attributes
    ----------
    coarse_centers : float64 ndarray (n_lists, d)
    members : int32 ndarray (k,)
        The center indices, list by list (ascending within a list).
    offsets : int64 ndarray (n_lists + 1,)
        List ``j`` holds ``members[offsets[j]:offsets[j + 1]]``, at least one center.
    """

    coarse_centers: np.ndarray
    members: np.ndarray
    offsets: np.ndarray

    @property
    def n_lists(self) -> int:
        return int(self.coarse_centers.shape[0])

    def members_of(self, j) -> np.ndarray:
        return self.members[self.offsets[j] : self.offsets[j + 1]]


def probed_lists(rows, coarse_centers, n_probe) -> np.ndarray:
    """The ``n_probe`` lists whose coarse centers are nearest to each row, nearest first (ties to the lower list),
    shape ``(n, n_probe)``: nested in ``n_probe`` (up to exact ties of scores at the ``n_probe``-th place), so
    probing more lists never gives a farther center."""
    scores = all_dist2(rows, coarse_centers.astype(rows.dtype))
    n_lists = scores.shape[1]
    if 4 * n_probe >= n_lists:
        return np.argsort(scores, axis=1, kind="stable")[:, :n_probe]
    chosen = np.argpartition(scores, n_probe - 1, axis=1)[:, :n_probe]
    chosen.sort(axis=1)  # the lower list first among equal scores, as the stable sort
    order = np.argsort(np.take_along_axis(scores, chosen, axis=1), axis=1, kind="stable")
    return np.take_along_axis(chosen, order, axis=1)


def probe_nearest(rows, centers, index: CoarseIndex, n_probe):
    """Nearest center of each row among the members of its ``n_probe`` nearest lists.

    Parameters
    ----------
    rows : ndarray (n, d), float32 or float64
    centers : ndarray (k, d), the dtype of ``rows``
    index : CoarseIndex
    n_probe : int
        Lists searched per row (at least 1; all lists give the exact nearest center).

    Returns
    -------
    labels : int32 ndarray (n,)
    dist2 : float64 ndarray (n,)
        The exact squared distance to the returned center.
    """
    rows = np.ascontiguousarray(rows)
    n = rows.shape[0]
    labels = np.full(n, np.iinfo(np.int32).max, dtype=np.int32)
    dist2 = np.full(n, np.inf)
    if n == 0:
        return labels, dist2
    n_probe = min(int(n_probe), index.n_lists)
    lists = probed_lists(rows, index.coarse_centers, n_probe).ravel()
    by_list = np.argsort(lists, kind="stable")
    bounds = np.searchsorted(lists[by_list], np.arange(index.n_lists + 1))
    for j in range(index.n_lists):
        members = index.members_of(j)
        if bounds[j] == bounds[j + 1]:
            continue
        who = by_list[bounds[j] : bounds[j + 1]] // n_probe
        local, found = nearest_gemm(rows[who], np.ascontiguousarray(centers[members]))
        found_labels = members[local]
        better = (found < dist2[who]) | ((found == dist2[who]) & (found_labels < labels[who]))
        dist2[who[better]] = found[better]
        labels[who[better]] = found_labels[better]
    return labels, dist2
