"""The groups of centers that share a bound: the principal axis the yinyang groups are split along, and the groups."""

import numpy as np
import pytest

from daskmeans.kernels.nested_groups import make_groups, principal_axis


def eigen_axis(centered):
    """Reference: the eigenvector of the largest eigenvalue of the scatter matrix, its largest component positive."""
    direction = np.linalg.eigh(centered.T @ centered)[1][:, -1]
    return direction if direction[np.argmax(np.abs(direction))] >= 0 else -direction


@pytest.mark.parametrize("rows, d", [(500, 16), (40, 128), (3, 8)])
def test_principal_axis_is_the_top_eigenvector_of_the_scatter_matrix(rows, d):
    rng = np.random.default_rng(rows)
    scales = np.r_[3.0, np.linspace(1.5, 1.0, d - 1)]  # one principal axis, well apart from the others
    points = rng.standard_normal((rows, d)) * scales @ np.linalg.qr(rng.standard_normal((d, d)))[0]
    centered = points - points.mean(axis=0)
    axis = principal_axis(centered)
    assert np.linalg.norm(axis) == pytest.approx(1.0)
    assert axis[np.argmax(np.abs(axis))] > 0
    reference = eigen_axis(centered)
    # the variance along the axis is the largest to 1e-4, and the direction the top eigenvector where that is unique
    assert axis @ centered.T @ centered @ axis == pytest.approx(reference @ centered.T @ centered @ reference, rel=1e-4)
    if rows > d:
        np.testing.assert_allclose(axis, reference, atol=1e-3)


def test_principal_axis_of_close_variances_has_nearly_the_largest_variance():
    rng = np.random.default_rng(2)
    points = rng.standard_normal((500, 16)) * np.linspace(3.0, 1.0, 16)  # top variances 9 and 8.2: slow to converge
    centered = points - points.mean(axis=0)
    axis, reference = principal_axis(centered), eigen_axis(centered)
    largest = reference @ centered.T @ centered @ reference
    assert largest * 0.99 <= axis @ centered.T @ centered @ axis <= largest * (1 + 1e-12)


def test_principal_axis_of_identical_points_is_a_unit_vector():
    np.testing.assert_array_equal(principal_axis(np.zeros((5, 3))), [1.0, 0.0, 0.0])


def test_yinyang_groups_are_equal_sized_groups_of_nearby_centers():
    # 16 tight clumps of 4 centers, far apart: each group of 4 is one clump
    rng = np.random.default_rng(0)
    clumps = rng.uniform(-100, 100, size=(16, 8))
    centers = np.repeat(clumps, 4, axis=0) + rng.normal(scale=0.01, size=(64, 8))
    order = rng.permutation(64)
    groups = make_groups(centers[order], "yinyang", 16)
    sizes = np.diff(groups.ptr)
    assert groups.n_groups == 16 and (sizes == 4).all()
    clump_of = (np.arange(64) // 4)[order]
    for g in range(16):
        members = groups.members[groups.ptr[g] : groups.ptr[g + 1]]
        assert len(np.unique(clump_of[members])) == 1


def test_groups_split_unequal_counts_at_most_one_apart():
    centers = np.random.default_rng(1).standard_normal((100, 5))
    sizes = np.diff(make_groups(centers, "yinyang", 7).ptr)
    assert sizes.sum() == 100 and sizes.max() - sizes.min() <= 1
