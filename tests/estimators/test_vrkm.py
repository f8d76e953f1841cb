"""VRKM and VRKM++: the inner loop against NumPy transcriptions of Algorithms 3 and 4, the candidate lists, the
epoch pass, position correction, known answers, reproducibility across schedulers, the streamed inner loop, and
bad parameters."""

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs

from daskmeans import InvalidParameterError, VRKMeans, config, load, open_input
from daskmeans.algorithms.relocation import centers_from_sums
from daskmeans.algorithms.vrkm import epoch_sizes, position_correction
from daskmeans.algorithms.vrkm_pools import pool_bounds, segment_rows_for
from daskmeans.config import VRKM_INNER_BATCH_SIZE
from daskmeans.engine.random import seed_from_random_state
from daskmeans.kernels.vrkm import InnerLoop, candidate_lists
from daskmeans.kernels.vrkm_batched import BatchedInnerLoop, batch_steps
from daskmeans.memory import vrkm_pool_rows, vrkm_sample_row_bytes, vrkm_state_bytes
from daskmeans.passes.assign import finish_stats
from daskmeans.passes.epoch import (
    SegmentsHere,
    epoch_pass_graph,
    ordered_segment,
    segment_graph,
    segment_starts,
)
from daskmeans.passes.sampling import uniform_indices_with_replacement
from daskmeans.registry import make_estimator


# -- NumPy transcriptions --------------------------------------------------------------------------------------
def run_inner_loop(snapshot_centers, segments, eta, *, batch_gradient=None, agree_rule="paper", n_candidates=16):
    """A whole inner loop in this thread over ``segments`` of ``(rows, labels)``, each segment's candidate lists
    made against the centers as they are when it begins; returns the final centers and the counts."""
    loop = InnerLoop(snapshot_centers, eta, batch_gradient=batch_gradient, agree_rule=agree_rule)
    for rows, labels in segments:
        loop.rebase()
        _, _, candidates, lower = candidate_lists(rows, loop.centers(), n_candidates)
        loop.run(rows, labels, candidates, lower)
    return loop.centers(), loop.counts()


def reference_nearest(X, C):
    d2 = ((X[:, None, :].astype(np.float64) - C[None, :, :].astype(np.float64)) ** 2).sum(-1)
    return d2.argmin(axis=1), d2


def reference_step(C, snapshot, x, a, j, eta, G, agree_rule):
    """One step of Algorithm 3 (with ``G``) or 4 (``G = 0``), lines 9-16 / 6-13, in matrix form:
    ``gamma = grad_x(C_t) - grad_x(C~new) + grad f~(C~new)``, ``C_{t+1} = C_t - eta gamma`` when the nearest
    center ``j`` differs from the snapshot label ``a``, else ``C_{t+1} = C_t`` (paper) or the authors' agree
    update. Returns the new centers and whether the step changed them."""
    if j != a:
        grad_current = np.zeros_like(C)
        grad_current[j] = C[j] - x
        grad_snapshot = np.zeros_like(C)
        grad_snapshot[a] = snapshot[a] - x
        return C - eta * (grad_current - grad_snapshot + G), True
    if agree_rule == "reference":
        C = C.copy()
        C[a] = C[a] - eta * (C[a] - snapshot[a])
    return C, False


def reference_inner_loop(snapshot, rows, labels, eta, batch_gradient=None, agree_rule="paper"):
    """The paper's loop: each step's nearest center (exact, float64) against the centers of that step."""
    return reference_batched_inner_loop(snapshot, rows, labels, eta, 1, batch_gradient, agree_rule)


def reference_batched_inner_loop(snapshot, rows, labels, eta, batch_size, batch_gradient=None, agree_rule="paper"):
    """The batched loop: each batch's nearest centers (exact, float64) against the centers at its start, then the
    paper's steps one row at a time with those nearest centers."""
    C = snapshot.copy()
    eta = C.dtype.type(eta)
    G = np.zeros_like(C) if batch_gradient is None else batch_gradient.astype(C.dtype)
    changed = 0
    for start in range(0, len(rows), batch_size):
        nearest, _ = reference_nearest(rows[start : start + batch_size], C)
        for x, a, j in zip(rows[start : start + batch_size], labels[start : start + batch_size], nearest):
            C, moved = reference_step(C, snapshot, x, a, int(j), eta, G, agree_rule)
            changed += moved
    return C, changed


def _problem(dtype, k=12, d=5, steps=1500, seed=0, spread=0.4):
    """Centers of a pass, their corrected snapshot, and a sample labelled by the pass."""
    rng = np.random.default_rng(seed)
    pass_centers = rng.normal(size=(k, d)).astype(dtype)
    snapshot = (pass_centers + spread * rng.normal(size=(k, d))).astype(dtype)
    rows = (pass_centers[rng.integers(0, k, steps)] + 0.8 * rng.normal(size=(steps, d))).astype(dtype)
    labels, _ = reference_nearest(rows, pass_centers)
    return pass_centers, snapshot, rows, labels.astype(np.int32)


def _tolerance(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


# -- the inner loop kernel -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("agree_rule", ["paper", "reference"])
def test_vrkm_plus_plus_steps_equal_algorithm_4(dtype, agree_rule):
    pass_centers, snapshot, rows, labels = _problem(dtype)
    eta = 0.05
    expected, expected_changed = reference_inner_loop(snapshot, rows, labels, eta, agree_rule=agree_rule)
    # lists from the pass (against the pass centers), as the algorithm feeds them, in two segments
    loop = InnerLoop(snapshot, eta, agree_rule=agree_rule, reference_centers=pass_centers)
    for part in (slice(0, 700), slice(700, None)):
        _, _, candidates, lower = candidate_lists(rows[part], pass_centers, 3)
        assert loop.run(rows[part], labels[part], candidates, lower) == rows[part].shape[0]
    np.testing.assert_array_equal(loop.centers(), expected)
    counts = loop.counts()
    assert counts.changed == expected_changed > 0
    assert counts.steps == len(rows)
    assert (counts.agree_updates == len(rows) - expected_changed) == (agree_rule == "reference")
    assert loop.centers().dtype == dtype


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("agree_rule", ["paper", "reference"])
def test_vrkm_steps_with_batch_gradient_equal_algorithm_3(dtype, agree_rule):
    pass_centers, snapshot, rows, labels = _problem(dtype, seed=1)
    gradient = 0.02 * np.random.default_rng(2).normal(size=snapshot.shape)
    gradient[3] = 0.0  # some clusters have no batch gradient
    eta = 0.05
    expected, expected_changed = reference_inner_loop(snapshot, rows, labels, eta, gradient, agree_rule)
    centers, counts = run_inner_loop(
        snapshot,
        [(rows[:400], labels[:400]), (rows[400:], labels[400:])],
        eta,
        batch_gradient=gradient,
        agree_rule=agree_rule,
        n_candidates=4,
    )
    np.testing.assert_allclose(centers, expected, **_tolerance(dtype))
    assert counts.changed == expected_changed


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("agree_rule", ["paper", "reference"])
@pytest.mark.parametrize("with_gradient", [False, True])
def test_batched_steps_equal_the_transcription_whatever_the_segments(dtype, agree_rule, with_gradient):
    pass_centers, snapshot, rows, labels = _problem(dtype, seed=4)
    gradient = 0.02 * np.random.default_rng(5).normal(size=snapshot.shape) if with_gradient else None
    eta = 0.05
    expected, expected_changed = reference_batched_inner_loop(snapshot, rows, labels, eta, 64, gradient, agree_rule)
    # segments cut inside batches: a batch's rows all use the centers of its start
    for cuts in ([0, 1500], [0, 100, 101, 700, 1500]):
        loop = BatchedInnerLoop(snapshot, eta, batch_size=64, batch_gradient=gradient, agree_rule=agree_rule)
        for first, last in zip(cuts[:-1], cuts[1:]):
            assert loop.rebase().run(rows[first:last], labels[first:last]) == last - first
        if with_gradient:  # the lazy form B - m E rounds otherwise than the transcription's C - eta G
            np.testing.assert_allclose(loop.centers(), expected, **_tolerance(dtype))
        else:
            np.testing.assert_array_equal(loop.centers(), expected)
        counts = loop.counts()
        assert counts.changed == expected_changed > 0
        assert counts.steps == len(rows) and counts.distances == len(rows) * snapshot.shape[0]
        assert (counts.agree_updates == len(rows) - expected_changed) == (agree_rule == "reference")
        assert loop.centers().dtype == dtype
    # a batch of one is the paper's loop; labels from the centers of the batch's start differ from it
    one = BatchedInnerLoop(snapshot, eta, batch_size=1, agree_rule=agree_rule)
    one.run(rows, labels)
    paper, _ = reference_inner_loop(snapshot, rows, labels, eta, agree_rule=agree_rule)
    np.testing.assert_array_equal(one.centers(), paper)
    whole = BatchedInnerLoop(snapshot, eta, batch_size=len(rows), agree_rule=agree_rule)
    whole.run(rows, labels)
    assert not np.array_equal(whole.centers(), paper)


def test_batch_steps_kernel_equals_the_numpy_steps():
    _, snapshot, rows, labels = _problem(np.float64, seed=6)
    nearest = np.random.default_rng(7).integers(0, snapshot.shape[0], len(rows)).astype(np.int32)
    base = snapshot.copy()
    counters = np.zeros(5, dtype=np.int64)
    steps = batch_steps(rows, labels, nearest, base, snapshot, np.zeros_like(snapshot), 0.05, 0, False, counters)
    C, changed = snapshot.copy(), 0
    for x, a, j in zip(rows, labels, nearest):
        C, moved = reference_step(C, snapshot, x, a, int(j), 0.05, np.zeros_like(C), "paper")
        changed += moved
    np.testing.assert_allclose(base, C, rtol=1e-12, atol=1e-12)
    assert steps == changed == counters[1] and counters[0] == len(rows)


def test_batched_inner_loop_rejects_bad_inputs():
    _, snapshot, rows, labels = _problem(np.float64, k=4, d=3, steps=10)
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        BatchedInnerLoop(snapshot, 0.1, batch_size=0)
    loop = BatchedInnerLoop(snapshot, 0.1, batch_size=4)
    with pytest.raises(ValueError, match="run\\(\\) needs rows"):
        loop.run(rows[:, :2], labels)
    with pytest.raises(ValueError, match="labels must lie in"):
        loop.run(rows, labels + 4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inner_loop_result_does_not_depend_on_candidate_lists_or_segments(dtype):
    pass_centers, snapshot, rows, labels = _problem(dtype, k=30, d=8, steps=3000, seed=3, spread=1.0)
    eta = 0.1
    expected, _ = reference_inner_loop(snapshot, rows, labels, eta)
    results = []
    for m in (1, 5, 30):
        for segments in (1, 7):
            cuts = np.linspace(0, len(rows), segments + 1).astype(int)
            centers, _ = run_inner_loop(
                snapshot, [(rows[a:b], labels[a:b]) for a, b in zip(cuts[:-1], cuts[1:])], eta, n_candidates=m
            )
            results.append(centers)
    # stale lists (made against the pass centers for the whole sample) and a forced early stop
    loop = InnerLoop(snapshot, eta, reference_centers=pass_centers)
    _, _, candidates, lower = candidate_lists(rows, pass_centers, 2)
    done = loop.run(rows, labels, candidates, lower, max_cost=0.5)
    assert 0 < done < len(rows)
    loop.rebase()
    _, _, candidates, lower = candidate_lists(rows[done:], loop.centers(), 2)
    loop.run(rows[done:], labels[done:], candidates, lower)
    results.append(loop.centers())
    for centers in results:
        np.testing.assert_array_equal(centers, expected)


def test_inner_loop_rejects_inconsistent_inputs():
    _, snapshot, rows, labels = _problem(np.float64)
    with pytest.raises(ValueError, match="agree_rule"):
        InnerLoop(snapshot, 0.1, agree_rule="sometimes")
    with pytest.raises(ValueError, match="eta"):
        InnerLoop(snapshot, 0.0)
    loop = InnerLoop(snapshot, 0.1)
    _, _, candidates, lower = candidate_lists(rows, snapshot, 3)
    with pytest.raises(ValueError, match="labels must lie"):
        loop.run(rows, labels + 100, candidates, lower)
    with pytest.raises(ValueError, match="needs rows"):
        loop.run(rows[:, :2], labels, candidates, lower)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_candidate_lists_match_numpy(dtype):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(700, 6)).astype(dtype)
    C = rng.normal(size=(40, 6)).astype(dtype)
    labels, dist2, candidates, lower = candidate_lists(X, C, 5)
    ref_labels, d2 = reference_nearest(X, C)
    order = np.argsort(d2, axis=1, kind="stable")
    np.testing.assert_array_equal(labels, ref_labels)
    np.testing.assert_allclose(dist2, d2[np.arange(len(X)), ref_labels], rtol=1e-12)
    assert (candidates == order[:, :5]).mean() > 0.999  # float32 GEMM may swap near-equal neighbours
    assert labels.dtype == np.int32 and candidates.dtype == np.int32
    # the bound holds for every center outside the list, and is close to the sixth distance
    outside = np.ones_like(d2, dtype=bool)
    np.put_along_axis(outside, candidates.astype(np.int64), False, axis=1)
    assert np.all(lower[:, None] <= np.where(outside, np.sqrt(d2), np.inf))
    np.testing.assert_allclose(lower, np.sqrt(np.take_along_axis(d2, order[:, 5:6], 1))[:, 0], rtol=1e-3)
    # a list of every center has no outside
    _, _, all_candidates, no_bound = candidate_lists(X, C, 100)
    assert all_candidates.shape == (700, 40) and np.all(np.isinf(no_bound))


# -- the epoch pass and the position correction ----------------------------------------------------------------
def _epoch_problem(draw_seed, dtype=np.float64):
    """Rows, centers, 900 draws, and the rows' exact labels and squared distances to every center."""
    X, _, _ = make_blobs(n=2000, d=3, k=6, spread=1.0, seed=5)
    C = X[:6].copy()
    if dtype == np.uint8:  # centers between the integer rows
        X = np.clip(np.round(20 * X + 128), 0, 255).astype(np.uint8)
        C = X[:6].astype(np.float32) + 0.25
    ref_labels, d2 = reference_nearest(X, C)
    return X, C, uniform_indices_with_replacement(len(X), 900, draw_seed, "test"), ref_labels, d2


def _assert_pass_stats(raw, ref_labels, d2):
    stats = finish_stats(raw)
    np.testing.assert_array_equal(stats.counts, np.bincount(ref_labels, minlength=6))
    np.testing.assert_allclose(stats.sse, np.bincount(ref_labels, d2.min(1), minlength=6), rtol=1e-10)


def test_epoch_pass_gathers_the_draws_in_order_with_pass_labels_whatever_the_chunks():
    X, C, draws, ref_labels, d2 = _epoch_problem(11)
    for chunk in (2000, 333):
        array = da.from_array(X, chunks=(chunk, 3))
        segment_rows = segment_rows_for(len(draws), array)
        stats_graph, segments = epoch_pass_graph(array, C, draws, segment_rows=segment_rows, n_candidates=4)
        starts = segment_starts(len(draws), segment_rows)
        assert len(starts) == len(segments) >= 8
        _assert_pass_stats(dask.compute(stats_graph)[0], ref_labels, d2)
        ends = list(starts[1:]) + [len(draws)]
        for s, (first, last) in enumerate(zip(starts, ends)):
            (merged,) = dask.compute(segment_graph(segments[s]))
            sample = ordered_segment([merged], first, last - first)
            np.testing.assert_array_equal(sample.rows, X[draws[first:last]])
            np.testing.assert_array_equal(sample.labels, ref_labels[draws[first:last]])
            np.testing.assert_array_equal(sample.candidates[:, 0], sample.labels)
            (remade,) = dask.compute(segment_graph(segments[s], C + 1.0, 2))
            resample = ordered_segment([remade], first, last - first)
            np.testing.assert_array_equal(resample.rows, sample.rows)
            np.testing.assert_array_equal(resample.candidates[:, 0], reference_nearest(sample.rows, C + 1.0)[0])


@pytest.mark.parametrize("dtype", [np.float64, np.uint8])
def test_epoch_pass_without_lists_brings_the_sample_here_in_draw_order(dtype):
    """The batched loop's pass (no candidate lists) computed with its sample in one go, as the driver does; the
    rows travel as stored."""
    X, C, draws, ref_labels, d2 = _epoch_problem(12, dtype)
    for chunk in (2000, 333):
        array = open_input(X, chunk_rows=chunk).array  # float32 for uint8 rows, read as stored
        stats_graph, segments = epoch_pass_graph(array, C, draws, segment_rows=400, n_candidates=0)
        raw, *flat = dask.compute(stats_graph, *[piece for segment in segments for piece in segment])
        _assert_pass_stats(raw, ref_labels, d2)
        n_blocks = len(segments[0])
        here = SegmentsHere([flat[s * n_blocks : (s + 1) * n_blocks] for s in range(len(segments))])
        for s, first in enumerate(segment_starts(len(draws), 400)):
            last = min(first + 400, len(draws))
            parts = here.parts(s, C + 1.0, 2) if s == 1 else here.parts(s)
            sample = ordered_segment(parts, first, last - first)
            np.testing.assert_array_equal(sample.rows, X[draws[first:last]])
            assert sample.rows.dtype == X.dtype
            np.testing.assert_array_equal(sample.labels, ref_labels[draws[first:last]])
            if s == 1:  # lists remade here against other centers
                np.testing.assert_array_equal(sample.candidates[:, 0], reference_nearest(sample.rows, C + 1.0)[0])
            else:
                assert sample.candidates.shape == (last - first, 0) and np.all(np.isinf(sample.lower))
        assert here.pieces == [None] * len(segments)  # each segment released once used


def test_position_correction_of_vrkm_plus_plus_is_the_cluster_means():
    X, _, _ = make_blobs(n=1500, d=4, k=5, spread=1.0, seed=6, dtype=np.float32)
    C = X[:5].copy()
    array = da.from_array(X, chunks=(400, 4))
    stats_graph, _ = epoch_pass_graph(array, C, np.arange(10), segment_rows=10)
    stats = finish_stats(dask.compute(stats_graph)[0])
    labels, _ = reference_nearest(X, C)
    means = np.stack([X[labels == j].astype(np.float64).mean(0) for j in range(5)])
    corrected, gradient = position_correction(stats, C, "vrkm++")
    assert gradient is None
    np.testing.assert_allclose(corrected, means, rtol=1e-6)
    np.testing.assert_array_equal(corrected, centers_from_sums(stats.sums, stats.counts, C))
    # VRKM: c~new = c~ - (1/v) sum (c~ - x), and the batch gradient at c~new over the same partition is zero
    corrected_vrkm, batch_gradient = position_correction(stats, C, "vrkm")
    by_hand = np.stack([C[j] - (C[j].astype(np.float64) - X[labels == j]).mean(0) for j in range(5)])
    np.testing.assert_allclose(corrected_vrkm, by_hand, rtol=1e-6)
    np.testing.assert_allclose(batch_gradient, 0.0, atol=1e-9)


# -- the estimator ---------------------------------------------------------------------------------------------
def _match_centers(found, truth):
    d2 = ((truth[:, None] - found[None]) ** 2).sum(-1)
    return np.sqrt(d2.min(1)).max()


@pytest.mark.parametrize("variant", ["vrkm++", "vrkm"])
@pytest.mark.parametrize("agree_rule", ["paper", "reference"])
def test_finds_the_true_centers_of_separated_blobs(variant, agree_rule):
    X, labels, centers = make_blobs(n=3000, d=4, k=5, seed=1)
    model = VRKMeans(5, variant=variant, agree_rule=agree_rule, random_state=0).fit(X)
    assert _match_centers(model.cluster_centers_, centers) < 0.1
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(labels, model.labels_) == 1.0
    assert model.stop_reason_ == "converged"
    assert model.score(X) == pytest.approx(-model.inertia_)
    record = model.history_[0]
    for key in (
        "energy",
        "inner_steps",
        "changed",
        "pass_time",
        "inner_time",
        "wall_time",
        "passes",
        "distances_per_step",
        "inner_on",
    ):
        assert key in record
    assert record["inner_steps"] == 1500  # epoch_size 0.5 of 3000
    energies = [r["energy"] for r in model.history_]
    assert energies[-1] <= energies[0]


@pytest.mark.parametrize("inner_batch_size", [1, 96, None])
def test_one_epoch_equals_the_numpy_transcription(inner_batch_size):
    X, _, _ = make_blobs(n=2000, d=3, k=6, spread=1.5, seed=7)
    init = X[:6].copy()
    batching = {} if inner_batch_size is None else {"inner_batch_size": inner_batch_size}
    model = VRKMeans(
        6, init=init, max_epochs=1, learning_rate=3.0, epoch_size=800, random_state=5, chunk_rows=300, **batching
    ).fit(X)
    # the epoch by hand: assign, correct to the means, 800 steps on the drawn rows with their pass labels
    labels, _ = reference_nearest(X, init)
    means = np.stack([X[labels == j].mean(0) for j in range(6)])
    draws = uniform_indices_with_replacement(len(X), 800, seed_from_random_state(5), "vrkm", 1)
    expected, changed = reference_batched_inner_loop(
        means, X[draws], labels[draws], 3.0 * 6 / len(X), inner_batch_size or VRKM_INNER_BATCH_SIZE
    )
    np.testing.assert_allclose(model.cluster_centers_, expected, rtol=1e-12, atol=1e-12)
    assert model.history_[0]["changed"] == changed
    if inner_batch_size != 1:  # every draw's distance to every center, by GEMM
        assert model.history_[0]["distances_per_step"] == 6
    assert model.eta_ == pytest.approx(3.0 * 6 / len(X))


@pytest.mark.parametrize("inner_batch_size", [1, 150])
def test_same_seed_same_centers_on_every_scheduler_and_the_streamed_inner_loop(cluster_client, inner_batch_size):
    """The streamed loop gets the sample in segments of 250 draws: batches of 150 straddle them."""
    X, _, _ = make_blobs(n=4000, d=6, k=8, spread=2.0, seed=4, dtype=np.float32)
    array = da.from_array(X, chunks=(700, 6))
    params = dict(
        n_clusters=8, random_state=123, max_epochs=4, tol=0.0, learning_rate=4.0, inner_batch_size=inner_batch_size
    )
    with dask.config.set(scheduler="sync"):
        sync = VRKMeans(**params).fit(array)
    with dask.config.set(scheduler="threads"):
        threads = VRKMeans(**params).fit(array)
    on_driver = VRKMeans(**params, client=cluster_client, driver_rows=0).fit(array)
    streamed = VRKMeans(**params, client=cluster_client, driver_rows=0, driver_sample_bytes=0).fit(array)
    assert on_driver.history_[0]["inner_on"] == "driver"
    assert streamed.history_[0]["inner_on"].startswith("tcp://")
    assert sum(r.get("changed", 0) for r in sync.history_) > 0
    for other in (threads, on_driver, streamed):
        np.testing.assert_array_equal(sync.cluster_centers_, other.cluster_centers_)
        assert [r["energy"] for r in sync.history_] == [r["energy"] for r in other.history_]


@pytest.mark.parametrize("inner_batch_size", [1, 150])
def test_an_epoch_in_pools_takes_the_steps_of_one_sample_in_bounded_memory(cluster_client, inner_batch_size):
    """An epoch whose sample exceeds VRKM_POOL_BYTES streams through the inner loop a pool at a time, each pool after
    the first read by a pass of its own: the same steps as one pool, on the driver as on a worker, and on the
    driver's copy of the data."""
    X, _, _ = make_blobs(n=3000, d=5, k=6, spread=2.0, seed=9, dtype=np.float32)
    array = da.from_array(X, chunks=(700, 5))
    params = dict(
        n_clusters=6, random_state=7, max_epochs=3, tol=0.0, learning_rate=4.0, inner_batch_size=inner_batch_size
    )
    whole = VRKMeans(**params).fit(array)
    assert [r["pools"] for r in whole.history_ if "pools" in r] == [1, 1, 1]
    with config.set(VRKM_POOL_BYTES=200 * vrkm_sample_row_bytes(5, 0 if inner_batch_size > 1 else 16)):
        runs = {
            "threads": VRKMeans(**params).fit(array),
            "driver": VRKMeans(**params, client=cluster_client, driver_rows=0).fit(array),
            "worker": VRKMeans(**params, client=cluster_client, driver_rows=0, driver_sample_bytes=0).fit(array),
            "driver copy": VRKMeans(**params, client=cluster_client, driver_rows=10**6).fit(array),
        }
    assert runs["worker"].history_[0]["inner_on"].startswith("tcp://")
    assert runs["driver copy"].fit_plan_.on_driver
    for name, model in runs.items():
        pooled = [r for r in model.history_ if "pools" in r]
        assert [r["pools"] for r in pooled] == [8, 8, 8], name  # 1500 draws, 200 a pool
        assert [r["inner_steps"] for r in pooled] == [1500] * 3, name
        assert model.history_[-1]["passes"] == whole.history_[-1]["passes"] + 3 * 7, name  # a read per further pool
        np.testing.assert_allclose(model.cluster_centers_, whole.cluster_centers_, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(model.cluster_centers_, runs["threads"].cluster_centers_)


def test_pools_hold_bounded_memory_whatever_the_epoch():
    assert pool_bounds(1000, 300) == [(0, 300), (300, 600), (600, 900), (900, 1000)]
    assert vrkm_state_bytes(10**9, 64, 0) == vrkm_state_bytes(10**7, 64, 0) <= 3 * config.VRKM_POOL_BYTES
    with config.set(VRKM_POOL_BYTES=10**6):
        assert vrkm_pool_rows(64, 0) == 10**6 // 276 and vrkm_state_bytes(10**9, 64, 0) <= 3 * 10**6


def test_doubling_epochs_weights_and_relocation():
    X, _, centers = make_blobs(n=2000, d=2, k=4, spread=0.2, seed=8)
    assert [epoch_sizes("doubling", 2000)(s) for s in (1, 2, 3, 4)] == [2, 4, 8, 16]
    snapshots = VRKMeans(4, max_epochs=2, tol=0.0, random_state=1, snapshot_centers=True).fit(X)
    assert [s["iteration"] for s in snapshots.center_snapshots_] == [0, 1, 2]
    np.testing.assert_array_equal(snapshots.center_snapshots_[-1]["centers"], snapshots.cluster_centers_)
    assert epoch_sizes(0.25, 2000)(7) == 500 and epoch_sizes(300, 2000)(1) == 300
    overlapping, _, _ = make_blobs(n=2000, d=2, k=4, spread=4.0, seed=8)
    model = VRKMeans(4, epoch_size="doubling", init="random", max_epochs=3, tol=0.0, random_state=1).fit(overlapping)
    assert [r["epoch_size"] for r in model.history_] == [2, 4, 8]
    assert model.stop_reason_ == "max_epochs" == model.history_[-1]["stop_reason"] and model.n_iter_ == 3
    # an init center far from all data gets no rows: it is relocated, never left at the origin or far away
    init = np.vstack([centers[:3], [[1e3, 1e3]]])
    relocated = VRKMeans(4, init=init, random_state=1).fit(X)
    assert relocated.history_[0]["relocated"] == 1
    assert _match_centers(relocated.cluster_centers_, centers) < 0.1
    # weighted: rows of weight zero are never drawn nor counted
    outliers = np.vstack([X, np.full((50, 2), 500.0)])
    weights = np.r_[np.ones(len(X)), np.zeros(50)]
    weighted = VRKMeans(4, random_state=2).fit(outliers, sample_weight=weights)
    assert _match_centers(weighted.cluster_centers_, centers) < 0.1
    assert np.abs(weighted.cluster_centers_).max() < 100


def test_max_time_stops_and_model_round_trips(tmp_path):
    X, _, _ = make_blobs(n=2000, d=3, k=5, spread=1.0, seed=9)
    model = make_estimator("vrkm", n_clusters=5, max_time=1e-9, random_state=3).fit(X)
    # the budget ended during the seeding: the first epoch's pass is cut, and the fit keeps the seeds
    assert model.variant == "vrkm" and model.stop_reason_ == "max_time" and model.n_iter_ == 0
    assert model.history_ == []
    model.save(tmp_path / "model.zarr")
    loaded = load(tmp_path / "model.zarr")
    assert type(loaded) is VRKMeans and loaded.variant == "vrkm" and loaded.eta_ == model.eta_ == 4.0 * 5 / 2000
    np.testing.assert_array_equal(loaded.predict(X), model.labels_)


@pytest.mark.parametrize(
    "params,match",
    [
        (dict(learning_rate=0.0), "learning_rate must be > 0"),
        (dict(learning_rate=-1.0), "learning_rate must be > 0"),
        (dict(learning_rate=1e6), "exceeds 1"),
        (dict(learning_rate="fast"), "learning_rate must be a number > 0 or 'auto'"),
        (dict(epoch_size=0), "epoch_size .a number of steps. must be >= 1"),
        (dict(epoch_size=-0.5), "epoch_size .a fraction of n_samples. must be > 0"),
        (dict(epoch_size=True), "epoch_size must be a fraction"),
        (dict(epoch_size="halving"), "epoch_size must be one of 'doubling'"),
        (dict(variant="vrkm+"), "variant must be one of 'vrkm\\+\\+', 'vrkm'"),
        (dict(agree_rule="always"), "agree_rule must be one of"),
        (dict(max_epochs=0), "max_epochs must be >= 1"),
        (dict(n_candidates=0), "n_candidates must be >= 1"),
        (dict(inner_batch_size=0), "inner_batch_size must be >= 1"),
        (dict(inner_batch_size=2.5), "inner_batch_size must be an integer"),
        (dict(tol=-1.0), "tol must be >= 0"),
        (dict(snapshot_centers="yes"), "snapshot_centers must be True or False"),
    ],
)
def test_bad_parameters_give_clear_errors(params, match):
    X, _, _ = make_blobs(n=300, d=2, k=3, seed=10)
    with pytest.raises(InvalidParameterError, match=match):
        VRKMeans(3, **params).fit(X)
