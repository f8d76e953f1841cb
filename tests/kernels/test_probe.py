"""Approximate nearest center through a coarse level (kernels/probe.py, algorithms/coarse_index.py), against a
plain NumPy transcription: probe the lists nearest to each row, take the nearest member of those lists."""

from __future__ import annotations

import numpy as np
import pytest

from daskmeans.algorithms.coarse_index import build_coarse_index
from daskmeans.kernels.assign import nearest_centers
from daskmeans.kernels.probe import probe_nearest


def reference_probe(rows, centers, index, n_probe):
    """For each row: its n_probe nearest coarse centers (exact float64 distances, ties to the lower list), then the
    nearest of those lists' members (ties to the lower center index)."""
    rows = rows.astype(np.float64)
    coarse = ((rows[:, None, :] - index.coarse_centers[None]) ** 2).sum(-1)
    labels, dist2 = [], []
    for i, row in enumerate(rows):
        lists = np.argsort(coarse[i], kind="stable")[:n_probe]
        candidates = np.sort(np.concatenate([index.members_of(j) for j in lists]))
        d = ((centers[candidates].astype(np.float64) - row) ** 2).sum(-1)
        best = int(np.argmin(d))
        labels.append(candidates[best])
        dist2.append(d[best])
    return np.array(labels), np.array(dist2)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(7)
    centers = rng.normal(size=(300, 12)) * 3
    rows = centers[rng.integers(0, 300, 2000)] + rng.normal(size=(2000, 12)) * 2
    return rows, centers


def test_the_index_puts_each_center_in_the_list_of_its_nearest_coarse_center(problem):
    _, centers = problem
    index = build_coarse_index(centers)
    assert index.n_lists == round(np.sqrt(300))
    assert sorted(index.members.tolist()) == list(range(300))
    assert index.offsets[0] == 0 and index.offsets[-1] == 300 and np.all(np.diff(index.offsets) > 0)
    nearest = ((centers[:, None, :] - index.coarse_centers[None]) ** 2).sum(-1).argmin(1)
    for j in range(index.n_lists):
        members = index.members_of(j)
        assert np.all(np.diff(members) > 0) and np.all(nearest[members] == j)
    # a function of the centers alone
    again = build_coarse_index(centers.copy())
    np.testing.assert_array_equal(again.coarse_centers, index.coarse_centers)
    np.testing.assert_array_equal(again.members, index.members)


@pytest.mark.parametrize("n_probe", [1, 2, 5])
def test_probe_matches_the_numpy_transcription(problem, n_probe):
    rows, centers = problem
    index = build_coarse_index(centers)
    labels, dist2 = probe_nearest(rows, centers, index, n_probe)
    expected_labels, expected_dist2 = reference_probe(rows, centers, index, n_probe)
    np.testing.assert_array_equal(labels, expected_labels)
    np.testing.assert_allclose(dist2, expected_dist2, rtol=1e-12)
    assert labels.dtype == np.int32 and dist2.dtype == np.float64


@pytest.mark.slow
def test_probing_every_list_is_the_exact_assignment_and_more_lists_never_farther():
    rng = np.random.default_rng(1)
    centers = rng.integers(0, 256, size=(400, 32)).astype(np.float32)
    rows = rng.integers(0, 256, size=(3000, 32)).astype(np.float32)
    index = build_coarse_index(centers)
    exact_labels, exact_dist2 = nearest_centers(rows, centers)
    labels, dist2 = probe_nearest(rows, centers, index, index.n_lists + 3)
    np.testing.assert_array_equal(labels, exact_labels)
    np.testing.assert_array_equal(dist2, exact_dist2)
    previous = np.full(len(rows), np.inf)
    recalls = []
    for n_probe in range(1, index.n_lists + 1):
        _, dist2 = probe_nearest(rows, centers, index, n_probe)
        assert np.all(dist2 <= previous) and np.all(dist2 >= exact_dist2)
        previous = dist2
        recalls.append(np.mean(dist2 == exact_dist2))
    assert recalls[0] < 1.0 and recalls[-1] == 1.0


def test_edge_cases():
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    index = build_coarse_index(centers, n_lists=1)
    labels, dist2 = probe_nearest(np.array([[9.0, 1.0], [1.0, 8.0]]), centers, index, 1)
    np.testing.assert_array_equal(labels, [1, 2])
    np.testing.assert_array_equal(dist2, [2.0, 5.0])
    labels, dist2 = probe_nearest(np.empty((0, 2)), centers, index, 1)
    assert labels.shape == dist2.shape == (0,)
    # fewer distinct centers than lists asked for: one list per distinct center, none empty of meaning
    repeated = np.repeat(centers, 4, axis=0)
    index = build_coarse_index(repeated, n_lists=5)
    assert index.n_lists == 3 and sorted(index.members.tolist()) == list(range(12))
    labels, _ = probe_nearest(np.array([[9.0, 1.0]]), repeated, index, 1)
    assert labels.tolist() == [4]  # the lowest index among the equal centers
