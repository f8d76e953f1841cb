"""Kernel functions and sparse-center distances against plain NumPy references, in float32 and float64."""

import numpy as np
import pytest
from sparse_centers_reference import cluster_mean_centers, direct_norms

from daskmeans.exceptions import InvalidParameterError
from daskmeans.kernels.kernel_centers import (
    SparseCenters,
    center_inner_products,
    nearest_from_inner,
    single_point_centers,
)
from daskmeans.kernels.kernel_functions import (
    Kernel,
    auto_kappa,
    check_kernel,
    laplacian_matrix,
    polynomial_from_gram,
    rbf_from_gram,
    resolve_kernel,
    squared_norms,
    symmetric_product_pays,
)

DTYPES = [np.float32, np.float64]


def ref_kernel(name, X, Y, **p):
    X, Y = X.astype(np.float64), Y.astype(np.float64)
    diff = X[:, None, :] - Y[None, :, :]
    if name == "rbf":
        return np.exp(-(diff**2).sum(-1) / p["kappa"])
    if name == "laplacian":
        return np.exp(-np.abs(diff).sum(-1) / p["kappa"])
    return (p["gamma"] * X @ Y.T + p["coef0"]) ** p["degree"]


def data(dtype, seed=0, m=40, n=30, d=5):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(m, d)).astype(dtype), rng.normal(size=(n, d)).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "name,params",
    [("rbf", {"kappa": 2.5}), ("laplacian", {"kappa": 3.0}), ("polynomial", {"degree": 3, "gamma": 0.2, "coef0": 1.0})],
)
def test_kernel_matrix_and_diag_match_numpy(dtype, name, params):
    X, Y = data(dtype)
    kernel = Kernel(name, params)
    K = kernel.matrix(X, Y)
    # values in (0, 1] stay float32 for float32 rows; the unbounded polynomial kernel is always float64
    expected = np.float32 if dtype == np.float32 and name != "polynomial" else np.float64
    assert K.dtype == expected and K.shape == (40, 30)
    # float32 rows: the dot products come from a float32 GEMM (and RBF/Laplacian values are rounded to float32)
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(K, ref_kernel(name, X, Y, **params), **tolerance)
    np.testing.assert_allclose(kernel.diag(X), np.diagonal(ref_kernel(name, X, X, **params)), rtol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numba_elementwise_kernels_match_numpy(dtype):
    X, Y = data(dtype, seed=1)
    X64, Y64 = X.astype(np.float64), Y.astype(np.float64)
    gram = X64 @ Y64.T
    sq = (X64**2).sum(1), (Y64**2).sum(1)
    np.testing.assert_allclose(
        rbf_from_gram(gram.copy(), sq[0], sq[1], 1 / 4.0), ref_kernel("rbf", X, Y, kappa=4.0), rtol=1e-10
    )
    laplacian = laplacian_matrix(X, Y, 1 / 4.0)  # accumulated in float64, stored in the rows' dtype
    assert laplacian.dtype == dtype
    np.testing.assert_allclose(
        laplacian, ref_kernel("laplacian", X, Y, kappa=4.0), rtol=1e-6 if dtype == np.float32 else 1e-10
    )
    np.testing.assert_allclose(
        polynomial_from_gram(gram.copy(), 0.5, 2.0, 2),
        ref_kernel("polynomial", X, Y, gamma=0.5, coef0=2.0, degree=2),
        rtol=1e-10,
    )
    # identical rows: the expanded squared distance can come out slightly negative; it is clipped at 0
    same = rbf_from_gram(X64 @ X64.T, sq[0], sq[0], 1.0)
    assert np.all(same <= 1.0) and np.allclose(np.diagonal(same), 1.0)


def pairwise_reference(name, X, Y, params):
    """Kernel values pair by pair, in float64, straight from the definitions (no GEMM, no expansion)."""
    X, Y = X.astype(np.float64), Y.astype(np.float64)
    out = np.empty((len(X), len(Y)))
    for i in range(len(X)):
        for j in range(len(Y)):
            if name == "rbf":
                out[i, j] = np.exp(-np.sum((X[i] - Y[j]) ** 2) / params["kappa"])
            else:
                out[i, j] = (params["gamma"] * np.dot(X[i], Y[j]) + params["coef0"]) ** params["degree"]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "name,params",
    [("rbf", {"kappa": 40.0}), ("rbf", {"kappa": 0.5}), ("polynomial", {"degree": 2, "gamma": 0.05, "coef0": 1.0})],
)
def test_gemm_kernel_blocks_equal_a_pairwise_numpy_reference(dtype, name, params):
    # data far from the origin (|x|^2 about 400, like pixel data): the expansion |x|^2 + |y|^2 - 2 x.y cancels the
    # most there; identical rows (the batch meets itself in a step) must give distance 0, i.e. K = 1 for RBF
    rng = np.random.default_rng(5)
    X = (10.0 + rng.normal(size=(60, 12))).astype(dtype)
    Y = np.concatenate([X[:7], (10.0 + rng.normal(size=(50, 12))).astype(dtype)])
    block = Kernel(name, params).matrix(X, Y)
    reference = pairwise_reference(name, X, Y, params)
    if dtype == np.float64:
        tolerance = dict(rtol=1e-9, atol=1e-12)
    elif name == "rbf":
        # a float32 GEMM rounds x.y by about eps32 |x| |y|: the exponent is off by at most a few eps32 (|x|^2 +
        # |y|^2) / kappa (1e-4 at kappa = 0.5, 1e-6 at kappa = 40), the documented price of the float32 GEMM
        sq = (X.astype(np.float64) ** 2).sum(1).max() + (Y.astype(np.float64) ** 2).sum(1).max()
        tolerance = dict(rtol=2e-6, atol=8 * np.finfo(np.float32).eps * sq / params["kappa"])
    else:
        tolerance = dict(rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(block, reference, **tolerance)
    if name == "rbf":
        assert np.all(block <= 1.0)
        np.testing.assert_allclose(np.diagonal(block[:7, :7]), 1.0, atol=tolerance["atol"])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(40, 6), (6, 40), (30, 30)])
@pytest.mark.parametrize(
    "name,params", [("rbf", {"kappa": 40.0}), ("polynomial", {"degree": 2, "gamma": 0.05, "coef0": 1.0})]
)
def test_a_block_against_itself_matches_numpy_as_a_symmetric_update_or_a_general_product(dtype, shape, name, params):
    """``matrix(X, X)``: NumPy's symmetric update where the rows are at least as long as they are many, a general
    product of ``X`` and a copy otherwise; either way the values of the pairwise reference, symmetric."""
    assert symmetric_product_pays(*shape) == (shape[1] >= shape[0])
    X = (10.0 + np.random.default_rng(2).normal(size=shape)).astype(dtype)
    block = Kernel(name, params).matrix(X, X)
    sq = 2 * (X.astype(np.float64) ** 2).sum(1).max()
    tolerance = (
        dict(rtol=1e-9, atol=1e-12)
        if dtype == np.float64
        else dict(rtol=2e-5, atol=8 * np.finfo(np.float32).eps * sq / params.get("kappa", 1.0))
    )  # as for any block
    np.testing.assert_allclose(block, pairwise_reference(name, X, X, params), **tolerance)
    np.testing.assert_allclose(block, block.T, **tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
def test_squared_norms_accumulate_in_float64(dtype):
    rng = np.random.default_rng(6)
    X = (rng.normal(size=(33, 700)) * 100).astype(dtype)
    norms = squared_norms(X)
    assert norms.dtype == np.float64
    np.testing.assert_allclose(norms, (X.astype(np.float64) ** 2).sum(axis=1), rtol=1e-13)


def test_callable_kernel_gets_its_params_and_is_checked():
    X, Y = data(np.float64)

    def linear(A, B, scale=1.0):
        return scale * A @ B.T

    kernel = resolve_kernel(linear, {"scale": 2.0}, 5)
    np.testing.assert_allclose(kernel.matrix(X, Y), 2.0 * X @ Y.T)
    np.testing.assert_allclose(kernel.diag(X), 2.0 * (X**2).sum(1))
    bad = resolve_kernel(lambda A, B: np.ones((2, 2)), None, 5)
    with pytest.raises(InvalidParameterError, match=r"must return the \(40, 30\) matrix"):
        bad.matrix(X, Y)
    nan = resolve_kernel(lambda A, B: np.full((len(A), len(B)), np.nan), None, 5)
    with pytest.raises(InvalidParameterError, match="NaN"):
        nan.matrix(X, Y)


def test_auto_kappa_is_the_mean_pairwise_distance():
    rng = np.random.default_rng(2)
    X = rng.normal(scale=3.0, size=(20000, 4))
    # E ||x - y||^2 = 2 * sum of variances = 2 * 4 * 9
    assert auto_kappa("rbf", X, np.random.default_rng(0)) == pytest.approx(72.0, rel=0.03)
    kernel = resolve_kernel("rbf", None, 4, sample=X, rng=np.random.default_rng(0))
    assert kernel.params["kappa"] == pytest.approx(72.0, rel=0.03)
    assert resolve_kernel("rbf", {"kappa": 5}, 4).params == {"kappa": 5.0}
    assert resolve_kernel("polynomial", None, 4).params == {"degree": 3, "gamma": 0.25, "coef0": 1.0}
    lap = auto_kappa("laplacian", X, np.random.default_rng(0))
    assert lap == pytest.approx(4 * 2 * 3.0 / np.sqrt(np.pi), rel=0.03)  # E|x - y| = 2 sigma / sqrt(pi)


@pytest.mark.parametrize(
    "kernel,params,match",
    [
        ("sigmoid", None, "kernel must be one of"),
        ("rbf", {"kappa": 0.0}, "kappa"),
        ("rbf", {"kappa": -1.0}, "kappa"),
        ("laplacian", {"kappa": float("nan")}, "kappa"),
        ("rbf", {"kappa": "big"}, "kappa"),
        ("rbf", {"gamma": 1.0}, "do not apply to the rbf kernel"),
        ("polynomial", {"degree": 0}, "degree"),
        ("polynomial", {"gamma": -1.0}, "gamma"),
        ("polynomial", {"coef0": -1.0}, "coef0"),
        ("rbf", [1.0], "kernel_params must be a dict"),
    ],
)
def test_bad_kernels_are_refused(kernel, params, match):
    with pytest.raises(InvalidParameterError, match=match):
        check_kernel(kernel, params)


def ref_inner(K, coef, owner, k):
    W = np.zeros((K.shape[1], k))
    W[np.arange(K.shape[1]), owner] = coef
    return K @ W


@pytest.mark.parametrize("dtype", DTYPES)
def test_center_inner_products_and_nearest_match_numpy(dtype):
    rng = np.random.default_rng(3)
    X, S = data(dtype, seed=3, m=50, n=25)
    kernel = Kernel("rbf", {"kappa": 3.0})
    owner = rng.integers(0, 4, size=25).astype(np.int64)
    owner[:4] = np.arange(4)
    coef = rng.random(25)
    K = kernel.matrix(X, S)
    inner = center_inner_products(K, coef, owner, 4)
    np.testing.assert_allclose(inner, ref_inner(K, coef, owner, 4), rtol=1e-12)
    norms = np.array(
        [coef[owner == j] @ kernel.matrix(S[owner == j], S[owner == j]) @ coef[owner == j] for j in range(4)]
    )
    labels, dist2 = nearest_from_inner(kernel.diag(X), inner, norms)
    full = 1.0 - 2.0 * inner + norms[None, :]
    np.testing.assert_array_equal(labels, full.argmin(1))
    np.testing.assert_allclose(dist2, full.min(1), rtol=1e-12)
    order = np.argsort(owner, kind="stable")
    centers = SparseCenters(S[order], coef[order], owner[order], np.zeros(25, np.int64), np.arange(25)[order], norms)
    np.testing.assert_allclose(direct_norms(centers, kernel), norms, rtol=1e-12)
    slab_labels, slab_dist2 = centers.nearest(X, kernel, slab_bytes=8 * 25 * 7)  # 7 rows per slab
    np.testing.assert_array_equal(slab_labels, labels)
    # float32 kernel values come from a float32 GEMM, whose rounding may depend on the rows in the product (on an
    # AMD EPYC, slabs of 7 rows and of 50 gave distances 3e-7 apart; a Sapphire Rapids gave equal ones)
    rtol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(slab_dist2, dist2, rtol=rtol)
    np.testing.assert_allclose(centers.distances(X, kernel, slab_bytes=8 * 25 * 3), np.maximum(full, 0), rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_single_point_and_cluster_mean_centers(dtype):
    X, _ = data(dtype, seed=4)
    kernel = Kernel("laplacian", {"kappa": 2.0})
    points = single_point_centers(X[:3], kernel, np.arange(3))
    np.testing.assert_allclose(points.distances(X[:3], kernel)[np.arange(3), np.arange(3)], 0.0, atol=1e-12)
    labels = np.arange(40) % 3
    means = cluster_mean_centers(X, labels, 3, kernel)
    K = ref_kernel("laplacian", X, X, kappa=2.0)
    for j in range(3):
        mine = labels == j
        expected = 1.0 - 2.0 * K[:, mine].mean(1) + K[np.ix_(mine, mine)].mean()
        # float32 rows: Laplacian kernel values are stored in float32 (rounding about 6e-8)
        np.testing.assert_allclose(
            means.distances(X, kernel)[:, j], expected, rtol=1e-6 if dtype == np.float32 else 1e-10, atol=1e-12
        )
    # the input-space mean of a cluster's support is the cluster's mean row
    np.testing.assert_allclose(
        means.input_space_means(5, np.float64)[1], X[labels == 1].astype(np.float64).mean(0), rtol=1e-5
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_given_row_norms_give_the_same_kernel_matrix(dtype):
    X, Y = data(dtype, seed=4)
    rbf = Kernel("rbf", {"kappa": 2.5})
    x_sq, y_sq = rbf.row_norms(X), rbf.row_norms(Y)
    np.testing.assert_allclose(x_sq, (X.astype(np.float64) ** 2).sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(rbf.matrix(X, Y, x_sq=x_sq, y_sq=y_sq), rbf.matrix(X, Y))
    # the other kernels use no norms: none are made for them, and the matrix is the same without
    for kernel in (Kernel("laplacian", {"kappa": 3.0}), Kernel("polynomial", {"degree": 2, "gamma": 0.5, "coef0": 1})):
        assert kernel.row_norms(X) is None
        np.testing.assert_array_equal(kernel.matrix(X, Y, x_sq=None, y_sq=None), kernel.matrix(X, Y))


def test_taking_support_rows_takes_their_kept_norms():
    rows = np.arange(12.0).reshape(4, 3)
    centers = SparseCenters(
        rows,
        np.ones(4),
        np.array([0, 0, 1, 1]),
        np.zeros(4, dtype=np.int64),
        np.arange(4),
        np.ones(2),
        row_norms=(rows**2).sum(axis=1),
    )
    taken = centers.take(np.array([True, False, False, True]))
    np.testing.assert_array_equal(taken.row_norms, (rows[[0, 3]] ** 2).sum(axis=1))
    assert (
        SparseCenters(rows, np.ones(4), centers.owner, centers.segment, centers.row_index, np.ones(2))
        .take([1])
        .row_norms
        is None
    )
