"""The truncated variational EM kernels (var-GMM-S) against plain NumPy references, float32 and float64."""

import math

import numpy as np
import pytest

from daskmeans import config
from daskmeans.kernels import truncated_em as kernels


def dist2(X, means):
    return ((X.astype(np.float64)[:, None, :] - means[None]) ** 2).sum(-1)


def reference_random_truncation(uniforms, k):
    out = np.empty(uniforms.shape, dtype=np.int64)
    for i, row in enumerate(uniforms):
        order = list(range(k))
        for j, u in enumerate(row):
            r = min(j + int(u * (k - j)), k - 1)
            order[j], order[r] = order[r], order[j]
            out[i, j] = order[j]
    return out


def reference_estep(X, means, truncation, neighbours, extra):
    """Search space = union of G_c over c in K_n (+ extra); keep the C' nearest; pairs for the G update."""
    D = dist2(X, means)
    c_trunc = truncation.shape[1]
    new_truncation, new_dist2, pairs, n_distances = [], [], {}, 0
    for i in range(X.shape[0]):
        space = sorted(
            {int(g) for c in truncation[i] for g in neighbours[c]} | ({int(extra[i])} if extra[i] >= 0 else set())
        )
        n_distances += len(space)
        best = sorted(space, key=lambda c: D[i, c])[:c_trunc]
        new_truncation.append(best)
        new_dist2.append(D[i, best])
        for c in space:
            if c != best[0]:
                total, count = pairs.get((best[0], c), (0.0, 0))
                pairs[(best[0], c)] = (total + D[i, c], count + 1)
    return np.array(new_truncation), np.array(new_dist2), pairs, n_distances


def random_state(n=300, d=5, k=40, c_trunc=3, g=4, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(dtype)
    means = rng.normal(size=(k, d))
    truncation = np.stack([rng.choice(k, c_trunc, replace=False) for _ in range(n)]).astype(np.int32)
    neighbours = np.empty((k, g), dtype=np.int32)
    for c in range(k):
        neighbours[c, 0] = c
        neighbours[c, 1:] = rng.choice(np.delete(np.arange(k), c), g - 1, replace=False)
    extra = np.where(rng.random(n) < 0.5, rng.integers(0, k, n), -1).astype(np.int32)
    return X, means, truncation, neighbours, extra


def test_random_truncation_matches_numpy_and_is_distinct():
    uniforms = np.random.default_rng(1).random((200, 4))
    out = kernels.random_truncation(uniforms, 9)
    np.testing.assert_array_equal(out, reference_random_truncation(uniforms, 9))
    assert all(len(set(row)) == 4 for row in out)
    assert out.dtype == np.int32


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,c_trunc,g", [(40, 3, 4), (6, 2, 6), (5, 5, 5), (30, 1, 1)])
def test_estep_matches_numpy(dtype, k, c_trunc, g):
    X, means, truncation, neighbours, extra = random_state(k=k, c_trunc=c_trunc, g=g, dtype=dtype)
    new_truncation, new_dist2, best, candidate, pair_dist2, n_distances = kernels.truncated_estep(
        X, means, truncation, neighbours, extra
    )
    ref_truncation, ref_dist2, ref_pairs, ref_n = reference_estep(X, means, truncation, neighbours, extra)
    np.testing.assert_array_equal(new_truncation, ref_truncation)
    np.testing.assert_allclose(new_dist2, ref_dist2, rtol=1e-12)
    assert n_distances == ref_n
    keys, sums, counts = kernels.aggregate_pairs(best, candidate, pair_dist2, k)
    assert len(keys) == len(ref_pairs)
    for key, total, count in zip(keys, sums, counts):
        ref_total, ref_count = ref_pairs[(int(key // k), int(key % k))]
        assert count == ref_count and total == pytest.approx(ref_total, rel=1e-12)


def test_estep_never_loses_a_cluster_it_had_unless_a_nearer_one_replaces_it():
    X, means, truncation, neighbours, extra = random_state(k=50, c_trunc=3, g=3)
    new_truncation, new_dist2, *_ = kernels.truncated_estep(X, means, truncation, neighbours, extra)
    D = dist2(X, means)
    old = np.sort(D[np.arange(len(X))[:, None], truncation], axis=1)
    # the new K_n holds the C' nearest of a superset of the old K_n: each order statistic can only improve
    assert np.all(new_dist2 <= old + 1e-12)


def test_estep_cost_depends_on_c_and_g_not_on_k():
    for k in (20, 200, 2000):
        X, means, truncation, neighbours, extra = random_state(n=200, k=k, c_trunc=3, g=3)
        *_, n_distances = kernels.truncated_estep(X, means, truncation, neighbours, extra)
        assert n_distances <= 200 * (3 * 3 + 1)


def reference_update_neighbours(neighbours, pairs):
    out = neighbours.copy()
    k, g = neighbours.shape
    for c in range(k):
        mine = {cand: total / count for (best, cand), (total, count) in pairs.items() if best == c}
        if not mine:
            continue
        chosen = [c] + sorted(mine, key=lambda cand: (mine[cand], cand))[: g - 1]
        for old in neighbours[c, 1:]:
            if len(chosen) < g and old not in chosen:
                chosen.append(int(old))
        out[c, : len(chosen)] = chosen
    return out


@pytest.mark.parametrize("g", [1, 3, 8])
def test_update_neighbours_matches_numpy(g):
    X, means, truncation, neighbours, extra = random_state(n=200, k=25, c_trunc=2, g=g)
    new_truncation, _, best, candidate, pair_dist2, _ = kernels.truncated_estep(X, means, truncation, neighbours, extra)
    keys, sums, counts = kernels.aggregate_pairs(best, candidate, pair_dist2, 25)
    updated = kernels.update_neighbours(neighbours, keys, sums, counts)
    _, _, ref_pairs, _ = reference_estep(X, means, truncation, neighbours, extra)
    np.testing.assert_array_equal(updated, reference_update_neighbours(neighbours, ref_pairs))
    assert np.all(updated[:, 0] == np.arange(25))
    assert all(len(set(row)) == g for row in updated)


def test_merged_pairs_equal_pairs_of_the_whole():
    X, means, truncation, neighbours, extra = random_state(n=300, k=30)
    whole = kernels.aggregate_pairs(*kernels.truncated_estep(X, means, truncation, neighbours, extra)[2:5], 30)
    parts = [
        kernels.aggregate_pairs(*kernels.truncated_estep(X[s], means, truncation[s], neighbours, extra[s])[2:5], 30)
        for s in (slice(0, 100), slice(100, 300))
    ]
    merged = kernels.merge_pairs(parts, 30)
    np.testing.assert_array_equal(merged[0], whole[0])
    np.testing.assert_allclose(merged[1], whole[1], rtol=1e-12)
    np.testing.assert_array_equal(merged[2], whole[2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_posterior_stats_match_numpy(dtype):
    X, means, truncation, neighbours, extra = random_state(n=250, k=12, c_trunc=3, dtype=dtype)
    weights = np.random.default_rng(2).uniform(0.2, 4.0, 250)
    D = dist2(X, means)[np.arange(250)[:, None], truncation]
    sigma2 = 0.7
    sums, resp, spread, log_sum = kernels.posterior_stats(X, weights, truncation, D, sigma2, 12)
    log_joint = -D / (2 * sigma2)
    top = log_joint.max(1, keepdims=True)
    q = np.exp(log_joint - top)
    ref_log_sum = float(weights @ (np.log(q.sum(1)) + top[:, 0]))
    q /= q.sum(1, keepdims=True)
    r = weights[:, None] * q
    ref_resp = np.zeros(12)
    ref_sums = np.zeros((12, X.shape[1]))
    np.add.at(ref_resp, truncation, r)
    for a in range(3):
        np.add.at(ref_sums, truncation[:, a], r[:, a, None] * X.astype(np.float64))
    np.testing.assert_allclose(resp, ref_resp, rtol=1e-12)
    np.testing.assert_allclose(sums, ref_sums, rtol=1e-10, atol=1e-12)
    assert spread == pytest.approx(float((r * D).sum()), rel=1e-12)
    assert log_sum == pytest.approx(ref_log_sum, rel=1e-12)


def test_posterior_stats_survive_far_points():
    """Distances far beyond sigma^2 would underflow a plain exp; the log-sum-exp keeps them finite."""
    X = np.array([[1e4, 0.0]])
    means = np.array([[0.0, 0.0], [1.0, 0.0]])
    truncation = np.array([[1, 0]], dtype=np.int32)
    D = dist2(X, means)[:, [1, 0]]
    sums, resp, spread, log_sum = kernels.posterior_stats(X, np.ones(1), truncation, D, 1e-3, 2)
    assert np.isfinite(log_sum) and resp[1] == pytest.approx(1.0) and np.isfinite(sums).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_truncated_posterior_matches_numpy(dtype):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(100, 4)).astype(dtype)
    means = rng.normal(size=(9, 4))
    sigma2 = 0.5
    indices, probabilities, log_likelihood = kernels.truncated_posterior(X, means, sigma2, 3)
    D = dist2(X, means)
    order = np.argsort(D, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(indices, order)
    log_joint = -np.take_along_axis(D, order, 1) / (2 * sigma2) - 0.5 * 4 * math.log(2 * math.pi * sigma2) - math.log(9)
    ref_ll = np.logaddexp.reduce(log_joint, axis=1)
    np.testing.assert_allclose(log_likelihood, ref_ll, rtol=1e-10)
    np.testing.assert_allclose(probabilities, np.exp(log_joint - ref_ll[:, None]), rtol=1e-10, atol=1e-300)
    # with C' = k it is the exact GMM posterior and log-likelihood
    _, full_p, full_ll = kernels.truncated_posterior(X, means, sigma2, 9)
    exact = -D / (2 * sigma2) - 0.5 * 4 * math.log(2 * math.pi * sigma2) - math.log(9)
    np.testing.assert_allclose(full_ll, np.logaddexp.reduce(exact, axis=1), rtol=1e-10)
    assert np.allclose(full_p.sum(1), 1.0)


def test_dense_and_sorted_pair_aggregation_agree(monkeypatch):
    X, means, truncation, neighbours, extra = random_state(n=300, k=30)
    pairs = kernels.truncated_estep(X, means, truncation, neighbours, extra)[2:5]
    dense = kernels.aggregate_pairs(*pairs, 30)
    monkeypatch.setattr(config, "DENSE_PAIRS_LIMIT", 0)
    by_sorting = kernels.aggregate_pairs(*pairs, 30)
    for a, b in zip(dense, by_sorting):
        np.testing.assert_array_equal(a, b)
