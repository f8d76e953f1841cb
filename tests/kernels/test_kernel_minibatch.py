"""The mini-batch kernel k-means step: Numba helpers against NumPy, incremental inner products against a direct
recomputation, and the truncation error bound of Lemma 3 (Jourdan & Schwartzman)."""

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sparse_centers_reference import direct_norms

from daskmeans import config
from daskmeans.kernels.kernel_centers import single_point_centers
from daskmeans.kernels.kernel_functions import Kernel
from daskmeans.kernels.kernel_minibatch import (
    auto_tol,
    batch_cluster_means,
    batch_kernel_blocks,
    kernel_minibatch_step,
    merge_duplicates,
    run_kernel_steps,
    truncation_mask,
)
from daskmeans.kernels.minibatch import learning_rates

DTYPES = [np.float32, np.float64]


def ref_batch_cluster_means(K, labels, counts, weights):
    out = np.zeros((K.shape[0], len(counts)))
    for j in range(len(counts)):
        if counts[j]:
            mine = labels == j
            out[:, j] = K[:, mine] @ weights[mine] / weights[mine].sum()
    return out


def ref_truncation_mask(owner, segment, tau):
    keep = np.ones(len(owner), dtype=bool)
    for j in np.unique(owner):
        total = 0
        reached = False
        for seg in sorted(set(segment[owner == j]), reverse=True):
            rows = (owner == j) & (segment == seg)
            if reached:
                keep[rows] = False
                continue
            if seg > 0:
                total += rows.sum()
            reached = total >= tau
    return keep


def test_batch_cluster_means_matches_numpy():
    rng = np.random.default_rng(0)
    K = rng.random((30, 30))
    labels = rng.integers(0, 3, 30).astype(np.int32)  # center 3 gets nothing
    for weights in (np.ones(30), rng.random(30) * 3):
        counts = np.bincount(labels, weights=weights, minlength=4)
        np.testing.assert_allclose(
            batch_cluster_means(K, labels, counts, weights),
            ref_batch_cluster_means(K, labels, counts, weights),
            rtol=1e-12,
        )


@pytest.mark.parametrize("tau", [1, 5, 12, 40])
def test_truncation_mask_matches_numpy(tau):
    rng = np.random.default_rng(tau)
    owner = np.sort(rng.integers(0, 4, 200)).astype(np.int64)
    segment = np.concatenate([np.sort(rng.integers(0, 9, (owner == j).sum())) for j in range(4)]).astype(np.int64)
    np.testing.assert_array_equal(truncation_mask(owner, segment, tau), ref_truncation_mask(owner, segment, tau))


def test_truncation_keeps_the_initial_center_until_tau_rows_arrived():
    owner = np.zeros(6, dtype=np.int64)
    segment = np.array([0, 1, 1, 2, 3, 3])
    assert truncation_mask(owner, segment, 6).all()  # 5 batch rows < tau: nothing forgotten
    np.testing.assert_array_equal(truncation_mask(owner, segment, 3), [0, 0, 0, 1, 1, 1])
    np.testing.assert_array_equal(truncation_mask(owner, segment, 2), [0, 0, 0, 0, 1, 1])


def run(dtype, *, truncate, learning_rate, steps=25, b=48, tau=40, kernel=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, 3)).astype(dtype)
    kernel = kernel or Kernel("rbf", {"kappa": 2.0})
    centers = single_point_centers(X[:4], kernel, np.arange(4))
    seen = np.zeros(4)
    records = []
    for step in range(1, steps + 1):
        index = rng.integers(0, len(X), b)
        centers, seen, record = kernel_minibatch_step(
            centers, seen, X[index], index, kernel, step, learning_rate=learning_rate, tau=tau, truncate=truncate
        )
        records.append((index, record))
        # the incremental <C, C> equals coef^T K coef, and the batch energy after the step (from the incremental
        # <phi(x), C>) equals the one from distances recomputed directly
        # (float32 rows: the kernel's dot products come from float32 GEMMs, whose rounding depends on the shapes
        # multiplied, so two evaluations of one kernel value agree to about 1e-7 only)
        rtol = 1e-6 if dtype == np.float32 else 1e-9
        np.testing.assert_allclose(centers.norms, direct_norms(centers, kernel), rtol=rtol, atol=1e-12)
        direct_after = centers.distances(X[index], kernel).min(axis=1).mean()
        assert record["batch_energy_after"] == pytest.approx(direct_after, rel=rtol, abs=1e-12)
    return X, centers, records


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("truncate", [True, False])
@pytest.mark.parametrize("learning_rate", ["beta", "sklearn"])
def test_incremental_inner_products_equal_a_direct_recomputation(dtype, truncate, learning_rate):
    X, centers, records = run(dtype, truncate=truncate, learning_rate=learning_rate)
    assert sum(r["dropped"] for _, r in records) > 0 if truncate else all(r["dropped"] == 0 for _, r in records)
    # the batch energy before a step is the mean distance to the centers the step started from
    assert records[0][1]["batch_energy"] == pytest.approx(
        single_point_centers(X[:4], Kernel("rbf", {"kappa": 2.0}))
        .distances(X[records[0][0]], Kernel("rbf", {"kappa": 2.0}))
        .min(1)
        .mean(),
        rel=1e-12,
    )
    if not truncate:  # without truncation every center stays a convex combination of rows
        totals = np.bincount(centers.owner, weights=centers.coef, minlength=4)
        np.testing.assert_allclose(totals, 1.0, rtol=1e-12)
        assert len(np.unique(centers.owner * 1000 + centers.row_index)) == len(centers.owner)


@pytest.mark.parametrize("dtype", DTYPES)
def test_polynomial_kernel_keeps_exact_inner_products(dtype):
    run(
        dtype,
        truncate=True,
        learning_rate="beta",
        steps=10,
        kernel=Kernel("polynomial", {"degree": 2, "gamma": 0.5, "coef0": 1.0}),
    )


def test_the_update_follows_the_papers_recursion():
    # one step from single-point centers: C' = (1 - a) phi(c) + a cm(B_j), with a = sqrt(b_j / b)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 2))
    kernel = Kernel("rbf", {"kappa": 1.0})
    centers = single_point_centers(X[:2], kernel, np.arange(2))
    index = np.arange(10, 42)
    new, seen, record = kernel_minibatch_step(centers, np.zeros(2), X[index], index, kernel, 1, tau=1000)
    labels = record["labels"]
    counts = np.bincount(labels, minlength=2)
    alpha = np.sqrt(counts / 32)
    np.testing.assert_array_equal(seen, counts)
    for j in range(2):
        mine = new.owner == j
        expected = np.concatenate([[1 - alpha[j]], np.full(counts[j], alpha[j] / counts[j])])
        np.testing.assert_allclose(np.sort(new.coef[mine]), np.sort(expected), rtol=1e-12)


def untruncated_reference(X, records, kernel, k, learning_rate="beta"):
    """The untruncated centers C_i of the same run (same batches, assignments and rates), as dense coefficients
    over [the initial points X[:k]] + [every batch row], for Lemma 3."""
    coefs = [np.eye(k)]  # rows: the k initial points
    rows = [X[:k]]
    seen = np.zeros(k)
    history = []
    for index, record in records:
        labels = record["labels"]
        counts = np.bincount(labels, minlength=k).astype(float)
        alpha = learning_rates(learning_rate, counts, len(index), seen)
        seen += counts
        coefs = [c * (1 - alpha)[None, :] for c in coefs]
        new = np.zeros((len(index), k))
        new[np.arange(len(index)), labels] = (alpha / np.maximum(counts, 1))[labels]
        coefs.append(new)
        rows.append(X[index])
        history.append((np.concatenate(rows), np.concatenate(coefs)))
    return history


def feature_distance(kernel, rows_a, coef_a, rows_b, coef_b):
    return math.sqrt(
        max(
            0.0,
            coef_a @ kernel.matrix(rows_a, rows_a) @ coef_a
            - 2 * coef_a @ kernel.matrix(rows_a, rows_b) @ coef_b
            + coef_b @ kernel.matrix(rows_b, rows_b) @ coef_b,
        )
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_truncation_error_is_bounded_as_lemma_3_says(dtype):
    # Lemma 3: tau = ceil(b ln^2(28 gamma / eps)) keeps every truncated center within eps / 28 of the untruncated
    # center of the same run (gamma = 1 for the RBF kernel); more precisely within gamma exp(-sqrt(tau / b)).
    rng = np.random.default_rng(7)
    k, b, eps, gamma = 3, 8, 2.0, 1.0
    tau = math.ceil(b * math.log(28 * gamma / eps) ** 2)
    X = rng.normal(size=(300, 2)).astype(dtype)
    kernel = Kernel("rbf", {"kappa": 1.0})
    centers = single_point_centers(X[:k], kernel, np.arange(k))
    seen = np.zeros(k)
    records, snapshots = [], []
    for step in range(1, 61):
        index = rng.integers(0, len(X), b)
        centers, seen, record = kernel_minibatch_step(centers, seen, X[index], index, kernel, step, tau=tau)
        records.append((index, record))
        snapshots.append(centers)
    reference = untruncated_reference(X, records, kernel, k)
    worst, truncated_any = 0.0, False
    for centers, (rows, coefs) in zip(snapshots, reference):
        for j in range(k):
            mine = centers.owner == j
            error = feature_distance(kernel, centers.rows[mine], centers.coef[mine], rows, coefs[:, j])
            if not (centers.segment[mine] == 0).any():
                truncated_any = True
                assert error <= gamma * math.exp(-math.sqrt(tau / b)) + 1e-9
            else:  # nothing forgotten yet: the centers are equal
                assert error < 1e-6
            worst = max(worst, error)
    assert truncated_any, "the run must be long enough to truncate"
    assert 0 < worst <= eps / 28


def test_merge_duplicates_sums_coefficients_of_the_same_row():
    kernel = Kernel("rbf", {"kappa": 1.0})
    X = np.arange(12, dtype=np.float64).reshape(6, 2)
    centers = single_point_centers(X[[0, 1, 0]], kernel, [0, 1, 0])
    centers.owner = np.array([0, 0, 1])
    merged = merge_duplicates(centers)
    assert len(merged.coef) == 3
    centers.owner = np.array([0, 0, 0])
    merged = merge_duplicates(centers)
    np.testing.assert_array_equal(np.sort(merged.row_index), [0, 1])
    np.testing.assert_allclose(merged.coef[merged.row_index == 0], [2.0])


def test_run_kernel_steps_stops_when_the_batch_improvement_falls_below_tol():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(200, 2))
    kernel = Kernel("rbf", {"kappa": 1.0})
    batches = [rng.integers(0, 200, 32) for _ in range(40)]
    start = single_point_centers(X[:3], kernel, np.arange(3))
    _, _, records, reason = run_kernel_steps(start, np.zeros(3), [X[i] for i in batches], batches, kernel, 1, tol=0.04)
    # the constant "beta" rate leaves a noise floor of improvement (about 0.06 here, with b = 32)
    assert reason == "converged" and records[-1]["improvement"] < 0.04
    assert 1 < len(records) < 40 and all(r["improvement"] >= 0.04 for r in records[:-1])
    _, _, records, reason = run_kernel_steps(start, np.zeros(3), [X[i] for i in batches], batches, kernel, 1)
    assert reason is None and len(records) == 40


@pytest.mark.parametrize("learning_rate", ["beta", "sklearn"])
def test_integer_weights_step_like_repeated_rows(learning_rate):
    # a batch row of weight w moves the centers as w copies of it would: same inner products, norms and rates
    rng = np.random.default_rng(11)
    X = rng.normal(size=(200, 3))
    kernel = Kernel("rbf", {"kappa": 2.0})
    weights = rng.integers(1, 4, size=200).astype(np.float64)
    weighted = repeated = single_point_centers(X[:3], kernel, np.arange(3))
    seen_w = seen_r = np.zeros(3)
    for step in range(1, 8):
        index = rng.integers(0, 200, 24)
        copies = np.repeat(index, weights[index].astype(int))
        weighted, seen_w, rec_w = kernel_minibatch_step(
            weighted,
            seen_w,
            X[index],
            index,
            kernel,
            step,
            learning_rate=learning_rate,
            truncate=False,
            weights=weights[index],
        )
        repeated, seen_r, rec_r = kernel_minibatch_step(
            repeated, seen_r, X[copies], copies, kernel, step, learning_rate=learning_rate, truncate=False
        )
        np.testing.assert_allclose(seen_w, seen_r)
        np.testing.assert_allclose(weighted.norms, repeated.norms, rtol=1e-9)
        np.testing.assert_allclose(weighted.distances(X, kernel), repeated.distances(X, kernel), rtol=1e-9, atol=1e-12)
        assert rec_w["batch_energy"] == pytest.approx(rec_r["batch_energy"], rel=1e-9)
        assert rec_w["batch_energy_after"] == pytest.approx(rec_r["batch_energy_after"], rel=1e-9)


def test_zero_weight_rows_do_not_move_the_centers():
    rng = np.random.default_rng(12)
    X = rng.normal(size=(50, 2))
    kernel = Kernel("rbf", {"kappa": 1.0})
    centers = single_point_centers(X[:2], kernel, np.arange(2))
    index = np.arange(2, 34)
    weights = np.ones(32)
    weights[::2] = 0.0
    with_zeros, _, _ = kernel_minibatch_step(
        centers, np.zeros(2), X[index], index, kernel, 1, tau=1000, weights=weights
    )
    kept = index[1::2]
    without, _, _ = kernel_minibatch_step(centers, np.zeros(2), X[kept], kept, kernel, 1, tau=1000)
    np.testing.assert_allclose(with_zeros.distances(X, kernel), without.distances(X, kernel), rtol=1e-10, atol=1e-12)


def test_early_stopping_follows_the_papers_rule_exactly():
    # Algorithm 1: stop after the first step whose batch improvement f_B(C_i) - f_B(C_i+1) is below epsilon, and
    # never before. The run without the rule gives every step's improvement; with epsilon placed between them the
    # run must stop at exactly the first step below it, with the same steps up to there.
    rng = np.random.default_rng(21)
    X = rng.normal(size=(300, 3))
    kernel = Kernel("rbf", {"kappa": 2.0})
    batches = [rng.integers(0, 300, 48) for _ in range(30)]
    start = single_point_centers(X[:4], kernel, np.arange(4))

    def run(tol):
        return run_kernel_steps(start, np.zeros(4), [X[i] for i in batches], batches, kernel, 1, tol=tol)

    _, _, free, reason = run(0.0)
    assert reason is None and len(free) == 30 and all("stop_reason" not in r for r in free)
    improvements = np.array([r["improvement"] for r in free])
    for target in (3, 10):
        # the smallest epsilon that stops at step `target`: just above its improvement, and no earlier step is below
        epsilon = improvements[target - 1] + 1e-12
        first = int(np.flatnonzero(improvements < epsilon)[0]) + 1
        _, _, records, reason = run(epsilon)
        assert reason == "converged" and len(records) == first and records[-1]["stop_reason"] == "converged"
        np.testing.assert_allclose([r["improvement"] for r in records], improvements[:first], rtol=0, atol=0)
    # an epsilon at or below every improvement never stops the run
    _, _, records, reason = run(float(improvements.min()))
    assert reason is None and len(records) == 30


def test_auto_tol_is_theorem_1s_batch_size_condition_solved_for_epsilon():
    # b = gamma^4 k / epsilon^2 (constants and logarithms dropped), for gamma >= 1; gamma^2 k / epsilon^2 below 1
    assert auto_tol(1.0, 10, 1024) == pytest.approx(np.sqrt(10 / 1024))
    assert 2.0**4 * 10 / auto_tol(2.0, 10, 1000) ** 2 == pytest.approx(1000)
    assert 0.5**2 * 8 / auto_tol(0.5, 8, 256) ** 2 == pytest.approx(256)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("truncate", [True, False])
def test_kept_row_norms_change_no_step(dtype, truncate):
    """The steps keep the support rows' squared norms (computed once per row); forgetting them before every step
    (so that each is recomputed) gives the same centers bit for bit, and the kept norms are the rows' own."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 5)).astype(dtype)
    kernel = Kernel("rbf", {"kappa": 4.0})
    kept = forgotten = single_point_centers(X[:3], kernel, np.arange(3))
    seen_kept = seen_forgotten = np.zeros(3)
    for step in range(1, 9):
        index = rng.integers(0, 300, 64)
        kept, seen_kept, _ = kernel_minibatch_step(
            kept, seen_kept, X[index], index, kernel, step, tau=40, truncate=truncate
        )
        forgotten.row_norms = None
        forgotten, seen_forgotten, _ = kernel_minibatch_step(
            forgotten, seen_forgotten, X[index], index, kernel, step, tau=40, truncate=truncate
        )
    for field in ("rows", "coef", "owner", "segment", "row_index", "norms", "row_norms"):
        np.testing.assert_array_equal(getattr(kept, field), getattr(forgotten, field))
    np.testing.assert_allclose(kept.row_norms, (kept.rows.astype(np.float64) ** 2).sum(axis=1), rtol=1e-12)


@pytest.mark.parametrize(
    "name,params",
    [
        ("rbf", {"kappa": 40.0}),
        ("laplacian", {"kappa": 30.0}),
        ("polynomial", {"degree": 2, "gamma": 0.1, "coef0": 1.0}),
    ],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_kernel_blocks_split_match_numpy_and_do_not_depend_on_the_thread(name, params, dtype, monkeypatch):
    """Both blocks against NumPy, computed whole and cut in two; the cut gives the same bits with the first part on
    another thread as on this one (the driver's core count must not change a fit)."""
    rng = np.random.default_rng(5)
    rows, support = (rng.normal(size=(n, 37)).astype(dtype) for n in (29, 45))
    kernel = Kernel(name, params)
    row_norms, support_norms = kernel.row_norms(rows), kernel.row_norms(support)
    whole = batch_kernel_blocks(rows, support, kernel, row_norms, support_norms)
    monkeypatch.setattr(config, "KERNEL_STEP_SPLIT_WORK", 1)
    here = batch_kernel_blocks(rows, support, kernel, row_norms, support_norms)
    with ThreadPoolExecutor(1) as pool:
        threaded = batch_kernel_blocks(rows, support, kernel, row_norms, support_norms, pool)
    for position, other in enumerate((support, rows)):
        np.testing.assert_array_equal(threaded[position], here[position])
        x, y = rows.astype(np.float64), other.astype(np.float64)
        if name == "rbf":
            reference = np.exp(-((x[:, None, :] - y[None, :, :]) ** 2).sum(-1) / params["kappa"])
        elif name == "laplacian":
            reference = np.exp(-np.abs(x[:, None, :] - y[None, :, :]).sum(-1) / params["kappa"])
        else:
            reference = (0.1 * x @ y.T + 1.0) ** 2
        for got in (whole[position], here[position]):
            assert got.dtype == (np.float32 if dtype == np.float32 and name != "polynomial" else np.float64)
            np.testing.assert_allclose(got, reference, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-6)
