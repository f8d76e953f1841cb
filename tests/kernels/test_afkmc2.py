"""The AFK-MC2 chain kernel and the in-memory seeding against plain NumPy references, float32 and float64."""

import numpy as np
import pytest

from daskmeans.algorithms.init import afkmc2_in_memory
from daskmeans.exceptions import InputDataError, InvalidParameterError
from daskmeans.kernels.afkmc2 import afkmc2_chains, greedy_kmeans_plusplus_with_mode, proposal_distribution


def reference_proposal(points, weights, first):
    d2 = ((points.astype(np.float64) - first.astype(np.float64)) ** 2).sum(1)
    return 0.5 * weights * d2 / (weights * d2).sum() + 0.5 * weights / weights.sum()


def reference_chains(candidates, weights, q, first, k, chain_length, uniforms):
    """AFK-MC2 (Bachem et al. 2016, Algorithm 1 with weights), written plainly."""
    centers = [first.astype(np.float64)]

    def d2(row):
        return min(float(((row.astype(np.float64) - c) ** 2).sum()) for c in centers)

    chosen = []
    for c in range(1, k):
        base = (c - 1) * chain_length
        x = base
        for y in range(base + 1, base + chain_length):
            target_y, target_x = weights[y] * d2(candidates[y]), weights[x] * d2(candidates[x])
            if target_x == 0 or target_y * q[x] / (target_x * q[y]) >= uniforms[y]:
                x = y
        chosen.append(x)
        centers.append(candidates[x].astype(np.float64))
    return np.array(centers), np.array(chosen)


def chains_against_reference(points, weights, first, k, chain_length, rng, block_bytes):
    """The kernel's chains and the plain transcription's over the same draws: ``(kernel, reference)`` results."""
    q = proposal_distribution(points, weights, first)
    proposals = rng.choice(points.shape[0], size=(k - 1) * chain_length, p=q)
    uniforms = rng.random(proposals.shape[0])
    candidates = np.ascontiguousarray(points[proposals])
    args = (candidates, weights[proposals], q[proposals], first, k, chain_length, uniforms)
    return afkmc2_chains(*args, block_bytes=block_bytes), reference_chains(*args)


@pytest.mark.parametrize("block_bytes", [1, 2000, 2**23], ids=["one-chain-blocks", "small-blocks", "one-block"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k,chain_length", [(2, 1), (5, 3), (12, 20), (60, 7)])
def test_chains_match_numpy(dtype, k, chain_length, block_bytes):
    rng = np.random.default_rng(k)
    points = rng.normal(size=(400, 6)).astype(dtype)
    weights = rng.uniform(0.1, 3.0, size=400)
    first = points[7].astype(np.float64)
    q = proposal_distribution(points, weights, first)
    np.testing.assert_allclose(q, reference_proposal(points, weights, first), rtol=1e-12)
    assert q.sum() == pytest.approx(1.0)
    (centers, chosen, n_distances), (ref_centers, ref_chosen) = chains_against_reference(
        points, weights, first, k, chain_length, rng, block_bytes
    )
    np.testing.assert_array_equal(chosen, ref_chosen)
    np.testing.assert_allclose(centers, ref_centers)
    # every proposal is measured against every center chosen before it
    assert n_distances == sum(c * chain_length for c in range(1, k))


@pytest.mark.parametrize("block_bytes", [1, 2**23])
def test_chains_on_integer_data_with_repeated_rows_match_numpy(block_bytes):
    """Proposals that repeat chosen centers (distance exactly 0) and near ties between centers, as in uint8 SIFT
    data: the GEMM-proposed distances are settled exactly, so every decision is the plain algorithm's."""
    rng = np.random.default_rng(5)
    points = rng.integers(0, 4, size=(300, 16)).astype(np.float32)
    (centers, chosen, _), (ref_centers, ref_chosen) = chains_against_reference(
        points, np.ones(300), points[0].astype(np.float64), 40, 10, rng, block_bytes
    )
    np.testing.assert_array_equal(chosen, ref_chosen)
    np.testing.assert_array_equal(centers, ref_centers)


def test_a_chain_never_moves_to_a_proposal_of_zero_weight_times_distance():
    points = np.array([[0.0], [0.0], [5.0], [6.0]])
    weights = np.ones(4)
    first = points[0]
    q = proposal_distribution(points, weights, first)
    candidates = points[[2, 1]]  # start at 5.0, then propose a copy of the first center
    centers, chosen, _ = afkmc2_chains(candidates, weights[[2, 1]], q[[2, 1]], first, 2, 2, np.array([0.5, 1e-9]))
    assert chosen[0] == 0 and centers[1, 0] == 5.0


def reference_greedy_with_mode(points, weights, k, rng, n_trials):
    """Weighted greedy k-means++ whose trials are n_trials D^2 draws plus the point of largest w d^2, plainly."""

    def d2(a, b):
        return float(((a - b) ** 2).sum())

    first = int(rng.choice(len(points), p=weights / weights.sum()))
    chosen = [first]
    closest = np.array([d2(p, points[first]) for p in points])
    for _ in range(1, k):
        mass = weights * closest
        cumulative = np.cumsum(mass)
        trials = [
            min(int(np.searchsorted(cumulative, u * cumulative[-1], side="right")), len(points) - 1)
            for u in rng.random(n_trials)
        ]
        trials.append(int(np.argmax(mass)))
        after = [np.minimum(closest, [d2(p, points[t]) for p in points]) for t in trials]
        best = int(np.argmin([(weights * a).sum() for a in after]))
        chosen.append(trials[best])
        closest = after[best]
    return points[chosen]


@pytest.mark.parametrize("matrix_bytes", [0, 2**27], ids=["gemm-per-step", "distance-matrix"])
@pytest.mark.parametrize("k,n_trials", [(1, 3), (2, 1), (9, 3), (40, 5)])
def test_greedy_kmeans_plusplus_with_mode_matches_numpy(k, n_trials, matrix_bytes):
    rng = np.random.default_rng(k)
    points = rng.normal(size=(120, 5)) * rng.uniform(0.5, 4.0, size=(120, 1))
    weights = rng.uniform(0.1, 3.0, size=120)
    centers = greedy_kmeans_plusplus_with_mode(
        points, weights, k, np.random.default_rng(7), n_trials, matrix_bytes=matrix_bytes
    )
    np.testing.assert_array_equal(
        centers, reference_greedy_with_mode(points, weights, k, np.random.default_rng(7), n_trials)
    )


def test_greedy_with_mode_takes_a_lone_far_point_the_random_trials_miss():
    """A far point of tiny weight has little w d^2 mass but the largest w d^2: the mode trial keeps it."""
    points = np.concatenate([np.random.default_rng(0).normal(size=(200, 2)) * 0.01, [[0.0, 100.0]]])
    weights = np.concatenate([np.full(200, 1.0), [0.0005]])
    for matrix_bytes in (0, 2**27):
        centers = greedy_kmeans_plusplus_with_mode(
            points, weights, 2, np.random.default_rng(1), 1, matrix_bytes=matrix_bytes
        )
        assert any(c[1] == 100.0 for c in centers)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_memory_seeding_is_reproducible_and_spreads_the_centers(dtype):
    rng = np.random.default_rng(3)
    blob_centers = rng.uniform(-50, 50, size=(8, 3))
    points = (blob_centers[rng.integers(0, 8, 2000)] + rng.normal(size=(2000, 3))).astype(dtype)
    weights = rng.uniform(0.5, 2.0, 2000)
    a, n_distances = afkmc2_in_memory(points, weights, 8, np.random.default_rng(1), chain_length=50)
    b, _ = afkmc2_in_memory(points, weights, 8, np.random.default_rng(1), chain_length=50)
    np.testing.assert_array_equal(a, b)
    # 16 candidates: the chains, then every proposal against every candidate, then greedy k-means++ on the
    # candidates (the first center, then 2 + floor(log 8) random trials and the mode per further center)
    chains = sum(c * 50 for c in range(1, 16))
    assert a.dtype == dtype and n_distances == 2000 + chains + 15 * 50 * 16 + 16 * (1 + 5 * 7)
    nearest_blob = ((a[:, None, :] - blob_centers[None]) ** 2).sum(-1).argmin(1)
    assert len(set(nearest_blob)) == 8
    plain, plain_distances = afkmc2_in_memory(
        points, weights, 8, np.random.default_rng(1), chain_length=50, oversampling=1.0
    )
    assert plain_distances == 2000 + sum(c * 50 for c in range(1, 8))


def hundred_blobs(n_samples, n_features, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(100, n_features))
    return centers[rng.integers(0, 100, n_samples)] + rng.standard_normal((n_samples, n_features)), centers


def blobs_with_a_center(seeds, centers):
    return len(set(((seeds[:, None, :] - centers[None]) ** 2).sum(-1).argmin(1)))


def test_oversampling_gives_every_well_separated_blob_a_center():
    points, centers = hundred_blobs(10_000, 16)
    weights = np.ones(len(points))
    covered = [
        blobs_with_a_center(afkmc2_in_memory(points, weights, 100, np.random.default_rng(seed))[0], centers)
        for seed in range(3)
    ]
    assert covered == [100, 100, 100]
    # D^2 sampling alone, which the chains approximate however long, leaves about 10 of them without one
    plain = [
        blobs_with_a_center(
            afkmc2_in_memory(points, weights, 100, np.random.default_rng(seed), chain_length=50, oversampling=1.0)[0],
            centers,
        )
        for seed in range(3)
    ]
    assert max(plain) < 97


def test_oversampling_below_one_is_a_clear_error():
    with pytest.raises(InvalidParameterError, match="oversampling must be >= 1"):
        afkmc2_in_memory(np.eye(3), np.ones(3), 2, np.random.default_rng(0), oversampling=0.5)


def test_zero_weight_points_are_never_centers():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(300, 2))
    weights = np.where(np.arange(300) % 2 == 0, 1.0, 0.0)
    centers, _ = afkmc2_in_memory(points, weights, 10, np.random.default_rng(0))
    allowed = points[weights > 0]
    assert all(np.any(np.all(allowed == c, axis=1)) for c in centers)


def test_too_few_distinct_points_is_a_clear_error():
    points = np.repeat(np.eye(3), 50, axis=0)
    with pytest.raises(InputDataError, match="distinct"):
        afkmc2_in_memory(points, np.ones(150), 5, np.random.default_rng(0))
