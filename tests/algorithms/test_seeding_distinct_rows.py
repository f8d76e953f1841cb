"""Seeding when the data has exactly (or fewer than) n_clusters distinct rows, some of them rare: AFK-MC2's
chains may miss a rare row, so the seeding looks at every row before it blames the data. With exactly k distinct
rows every one is a center; with fewer the message gives their true number; vc-GMM, whose variance is then zero,
says so."""

from __future__ import annotations

import numpy as np
import pytest

from daskmeans import CoresetGaussianMixture, InputDataError, KMeans
from daskmeans.algorithms.init import afkmc2_in_memory

#: 12 distinct rows: 8 common (500 copies each) and 4 rare (one copy each), 4004 rows in all.
DISTINCT = np.random.default_rng(7).normal(size=(12, 3)) * 10
COUNTS = np.array([500] * 8 + [1] * 4)
X = np.repeat(DISTINCT, COUNTS, axis=0)


def same_rows(centers, rows, atol=0.0):
    """Whether ``centers`` are ``rows`` in some order (within ``atol``: Lloyd's means of copies of a row)."""
    distance = np.abs(centers[:, None, :] - rows[None, :, :]).max(axis=2)
    nearest = distance.argmin(axis=1)
    return sorted(nearest) == list(range(len(rows))) and distance.min(axis=1).max() <= atol


@pytest.mark.parametrize("init", ["afk-mc2", "k-means||", "two-level"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kmeans_with_exactly_k_distinct_rows_makes_every_row_a_center(seed, init):
    model = KMeans(12, init=init, random_state=seed, max_iter=3).fit(X)
    assert same_rows(model.cluster_centers_, DISTINCT, atol=1e-9)
    assert model.inertia_ < 1e-15


def test_kmeans_afkmc2_with_fewer_distinct_rows_than_k_gives_their_number():
    with pytest.raises(InputDataError, match=r"The data has only 12 distinct row\(s\).*n_clusters=13"):
        KMeans(13, init="afk-mc2", random_state=0).fit(X)


def test_kmeans_plusplus_on_a_sample_says_the_sample_missed_a_row():
    many = np.repeat(DISTINCT, [2000] * 8 + [1] * 4, axis=0)  # 16004 rows: k-means++ seeds on 10000 of them
    with pytest.raises(
        InputDataError,
        match=r"A sample of 10000 rows \(init='k-means\|\|' looks at every row\) "
        r"has only 11 distinct row\(s\)",
    ):
        KMeans(12, init="k-means++", random_state=1).fit(many)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_in_memory_afkmc2_with_exactly_k_distinct_weighted_points(seed):
    weights = COUNTS.astype(np.float64)
    centers, _ = afkmc2_in_memory(DISTINCT, weights, 12, np.random.default_rng(seed))
    assert same_rows(centers, DISTINCT)
    with pytest.raises(InputDataError, match=r"The data has only 12 distinct row\(s\).*n_clusters=13"):
        afkmc2_in_memory(DISTINCT, weights, 13, np.random.default_rng(seed))


@pytest.mark.parametrize("coreset_size", [None, 600], ids=["all rows", "coreset"])
def test_vc_gmm_with_exactly_k_distinct_rows_says_the_variance_is_zero(coreset_size):
    even = np.repeat(DISTINCT, 50, axis=0)  # a coreset of 600 draws holds every row
    model = CoresetGaussianMixture(12, coreset_size=coreset_size, n_truncated=12, search_size=12, random_state=0)
    with pytest.raises(
        InputDataError,
        match=r"zero spread.*variance is zero.*no more distinct rows than "
        r"n_components=12",
    ) as raised:
        model.fit(even if coreset_size else X)
    assert "AFK-MC2" not in str(raised.value)


def test_vc_gmm_names_the_coreset_when_the_coreset_missed_a_rare_row():
    with pytest.raises(
        InputDataError,
        match=r"The coreset of 2000 rows has only 11 distinct row\(s\).*n_clusters=12",
    ):
        CoresetGaussianMixture(12, coreset_size=2000, random_state=0).fit(X)  # a draw that misses one rare row


def test_vc_gmm_with_fewer_distinct_rows_than_k_gives_their_number():
    with pytest.raises(InputDataError, match=r"The data has only 12 distinct row\(s\).*n_clusters=13"):
        CoresetGaussianMixture(13, coreset_size=None, random_state=0).fit(X)
