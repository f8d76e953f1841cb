"""The Gram blocks the truncated kernel steps keep: the Numba kernels against NumPy, and steps with kept Gram
blocks against steps that recompute them from the support every time."""

import numpy as np
import pytest
from sparse_centers_reference import direct_norms

from daskmeans.kernels.center_grams import center_grams, gather_support_rows, truncated_center_grams
from daskmeans.kernels.kernel_centers import single_point_centers
from daskmeans.kernels.kernel_functions import Kernel
from daskmeans.kernels.kernel_minibatch import kernel_minibatch_step, truncation_mask
from daskmeans.passes.kernel_pools import PoolBatches

DTYPES = [np.float32, np.float64]


def ref_truncated_center_grams(all_kernel, n_old, source, owner, coef, keep, n_clusters):
    """Each center's grown block read from the kernel among all rows ``[old support | batch]``."""
    grams, center_dot, dropped_dot = [], np.zeros(n_clusters), np.zeros(n_clusters)
    for j in range(n_clusters):
        mine = np.flatnonzero(owner == j)
        block = all_kernel[np.ix_(source[mine], source[mine])].astype(np.float64)
        gone = ~keep[mine]
        center_dot[j] = coef[mine] @ block[:, gone] @ coef[mine][gone]
        dropped_dot[j] = coef[mine][gone] @ block[np.ix_(gone, gone)] @ coef[mine][gone]
        grams.append(block[np.ix_(~gone, ~gone)].ravel())
    return np.concatenate(grams), center_dot, dropped_dot


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_truncated_center_grams_match_numpy(dtype, seed):
    rng = np.random.default_rng(seed)
    k, n_old, b = 5, 60, 24
    kernel = Kernel("rbf", {"kappa": 3.0})
    rows = rng.normal(size=(n_old + b, 4)).astype(dtype)
    all_kernel = kernel.matrix(rows, rows)
    old_owner = np.sort(rng.integers(0, k - 1, n_old))  # the last center has no old rows
    old_gram = np.concatenate([all_kernel[np.ix_(old_owner == j, old_owner == j)].ravel() for j in range(k)])
    owner = np.concatenate([old_owner, rng.integers(0, k, b)])
    source = np.argsort(owner, kind="stable")
    owner = owner[source]
    segment = np.concatenate([rng.integers(0, 4, n_old), np.full(b, 5)])[source]
    keep = truncation_mask(owner, segment, 6)
    assert not keep.all() and keep[source >= n_old].all()
    coef = rng.random(n_old + b)
    gram, center_dot, dropped_dot = truncated_center_grams(
        old_gram,
        old_owner,
        np.ascontiguousarray(all_kernel[n_old:, :n_old]),
        np.ascontiguousarray(all_kernel[n_old:, n_old:]),
        source,
        owner,
        coef,
        keep,
        k,
    )
    expected = ref_truncated_center_grams(all_kernel, n_old, source, owner, coef, keep, k)
    assert gram.dtype == all_kernel.dtype
    np.testing.assert_array_equal(gram, expected[0].astype(all_kernel.dtype))
    np.testing.assert_allclose(center_dot, expected[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dropped_dot, expected[2], rtol=1e-12, atol=1e-12)


def test_gather_support_rows_matches_numpy():
    rng = np.random.default_rng(3)
    old, batch = rng.normal(size=(7, 3)), rng.normal(size=(4, 3))
    source = rng.permutation(11)[:9]
    np.testing.assert_array_equal(gather_support_rows(old, batch, source), np.concatenate([old, batch])[source])


def test_center_grams_are_each_centers_kernel_among_its_rows():
    rng = np.random.default_rng(4)
    kernel = Kernel("rbf", {"kappa": 2.0})
    X = rng.normal(size=(9, 3))
    centers = single_point_centers(X[:3], kernel)
    centers.rows, centers.owner = X, np.array([0, 0, 0, 0, 1, 1, 2, 2, 2])
    expected = np.concatenate([kernel.matrix(X[centers.owner == j], X[centers.owner == j]).ravel() for j in range(3)])
    np.testing.assert_allclose(center_grams(centers, kernel), expected, rtol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "kernel", [Kernel("rbf", {"kappa": 4.0}), Kernel("polynomial", {"degree": 2, "gamma": 0.5, "coef0": 1.0})]
)
def test_kept_gram_blocks_equal_blocks_recomputed_every_step(dtype, kernel):
    """A step grows the Gram blocks from its kernel block; forgetting them before every step (so that each step
    recomputes them from the support) gives the same support and, to rounding, the same norms."""
    rng = np.random.default_rng(9)
    X = rng.normal(size=(300, 5)).astype(dtype)
    kept = forgotten = single_point_centers(X[:3], kernel, np.arange(3))
    seen_kept = seen_forgotten = np.zeros(3)
    dropped = 0
    for step in range(1, 12):
        index = rng.integers(0, 300, 64)
        kept, seen_kept, record = kernel_minibatch_step(kept, seen_kept, X[index], index, kernel, step, tau=40)
        dropped += record["dropped"]
        forgotten.gram = None
        forgotten, seen_forgotten, _ = kernel_minibatch_step(
            forgotten, seen_forgotten, X[index], index, kernel, step, tau=40
        )
        np.testing.assert_allclose(kept.gram, center_grams(kept, kernel), rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert dropped > 0
    for field in ("rows", "owner", "segment", "row_index"):
        np.testing.assert_array_equal(getattr(kept, field), getattr(forgotten, field))
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(kept.norms, forgotten.norms, rtol=rtol)
    np.testing.assert_allclose(kept.norms, direct_norms(kept, kernel), rtol=rtol)


def test_pool_batches_gather_each_batch_when_used():
    rows = np.arange(20.0).reshape(10, 2)
    position = np.array([[0, 3], [9, 9], [4, 1]])
    batches = PoolBatches(rows, position)
    assert len(batches) == 3 and len(batches[1:]) == 2
    np.testing.assert_array_equal(batches[2], rows[[4, 1]])
    np.testing.assert_array_equal(batches[1:][0], rows[[9, 9]])
    assert [b.tolist() for b in batches] == [rows[p].tolist() for p in position]
