"""The coarse level of an approximate ``predict``: the fitted centers grouped into lists by a k-means of the
centers themselves (the inverted-file layout of vector indexes), built on the driver once per model."""

from __future__ import annotations

import numpy as np

from .. import config
from ..kernels.assign import nearest_centers
from ..kernels.probe import CoarseIndex
from .two_level import default_coarse_clusters, sample_kmeans


def build_coarse_index(centers, n_lists=None) -> CoarseIndex:
    """Group ``centers`` into ``n_lists`` lists around the centers of a k-means of the centers.

    The k-means is :func:`~daskmeans.algorithms.two_level.sample_kmeans` (greedy k-means++ with batched draws and
    up to ``TWO_LEVEL_LLOYD_ITER`` Lloyd iterations) in float64, seeded by
    ``config.COARSE_INDEX_SEED``, so the index is a function of the centers alone (the same for every call, process
    and scheduler). Each center joins the list of its nearest coarse center.

    Parameters
    ----------
    centers : ndarray (k, d)
    n_lists : int, optional
        Default ``round(sqrt(k))``; fewer when the centers have fewer distinct rows.

    Returns
    -------
    CoarseIndex
        Every list has at least one member.
    """
    centers = np.asarray(centers, dtype=np.float64)
    k = centers.shape[0]
    n_lists = default_coarse_clusters(k) if n_lists is None else int(n_lists)
    coarse = sample_kmeans(
        centers, n_lists, np.random.default_rng(config.COARSE_INDEX_SEED), n_iter=config.TWO_LEVEL_LLOYD_ITER
    )
    list_of, _ = nearest_centers(centers, coarse)
    # a coarse center Lloyd left without members (it stops after n_iter) gets no list: every list is searched
    used = np.unique(list_of)
    coarse, list_of = coarse[used], np.searchsorted(used, list_of)
    members = np.argsort(list_of, kind="stable").astype(np.int32)
    offsets = np.searchsorted(list_of[members], np.arange(coarse.shape[0] + 1)).astype(np.int64)
    return CoarseIndex(coarse_centers=np.ascontiguousarray(coarse), members=members, offsets=offsets)
