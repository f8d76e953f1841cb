"""Mini-batch k-means: learning rates, scikit-learn parity, batches drawn by the workers, partial_fit, bad input."""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs

from daskmeans import InvalidParameterError, MiniBatchKMeans, load
from daskmeans.kernels.minibatch import EarlyStopping, Reassignment, learning_rates, minibatch_update, run_steps
from daskmeans.passes.minibatch_pool import step_indices
from daskmeans.registry import make_estimator


# -- NumPy references ----------------------------------------------------------------------------------------
def ref_rates(kind, batch_counts, batch_size, seen):
    out = np.zeros(len(batch_counts))
    for j, b in enumerate(batch_counts):
        if b > 0:
            out[j] = b / (seen[j] + b) if kind == "sklearn" else np.sqrt(b / batch_size)
    return out


def ref_update(centers, rows, labels, rates):
    new = centers.astype(np.float64).copy()
    for j in range(len(centers)):
        mine = rows[labels == j]
        if len(mine):
            new[j] += rates[j] * (mine.mean(axis=0) - new[j])
    return new


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["sklearn", "beta"])
def test_learning_rates_and_update_match_numpy(dtype, kind):
    rng = np.random.default_rng(0)
    k, b = 6, 50
    rows = rng.standard_normal((b, 3)).astype(dtype)
    centers = rng.standard_normal((k, 3)).astype(dtype)
    labels = rng.integers(0, k - 1, b)  # the last center gets no rows
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    sums = np.zeros((k, 3))
    np.add.at(sums, labels, rows.astype(np.float64))
    seen = rng.integers(0, 20, k).astype(np.float64)
    rates = learning_rates(kind, counts, b, seen)
    np.testing.assert_allclose(rates, ref_rates(kind, counts, b, seen), rtol=1e-12)
    assert rates[-1] == 0.0
    new = minibatch_update(centers, sums, counts, rates)
    assert new.dtype == dtype
    np.testing.assert_allclose(
        new, ref_update(centers, rows, labels, rates), rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6
    )
    np.testing.assert_array_equal(new[-1], centers[-1])


def test_the_sklearn_rate_makes_each_center_the_mean_of_its_samples():
    # with fixed assignments, 1/v(j) steps give the running mean of every sample ever assigned
    rng = np.random.default_rng(1)
    centers = np.zeros((1, 2))
    seen = np.zeros(1)
    everything = []
    for _ in range(5):
        rows = rng.standard_normal((7, 2)) + 3
        everything.append(rows)
        counts = np.array([7.0])
        rates = learning_rates("sklearn", counts, 7, seen)
        centers = minibatch_update(centers, rows.sum(0, keepdims=True), counts, rates)
        seen += counts
    np.testing.assert_allclose(centers[0], np.concatenate(everything).mean(0), rtol=1e-12)


def test_bad_rate_names_are_refused():
    with pytest.raises(ValueError, match="learning rate must be one of"):
        learning_rates("adam", np.ones(2), 2, np.zeros(2))
    with pytest.raises(ValueError, match="needs seen_counts"):
        learning_rates("sklearn", np.ones(2), 2)


def test_steps_match_scikit_learn_partial_fit():
    from sklearn.cluster import MiniBatchKMeans as SKMiniBatch

    X, _, _ = make_blobs(n=2000, d=5, k=6, spread=2.0, seed=3)
    init = X[:6].copy()
    batches = [X[idx] for idx in step_indices(len(X), 100, 9, 0, 15)]
    theirs = SKMiniBatch(6, init=init, n_init=1, batch_size=100, reassignment_ratio=0.0)
    for rows in batches:
        theirs.partial_fit(rows)
    centers, seen, records, reason = run_steps(batches, init, np.zeros(6), "sklearn")
    np.testing.assert_allclose(centers, theirs.cluster_centers_, rtol=1e-10, atol=1e-10)
    assert reason is None and len(records) == 15


def test_early_stopping_follows_scikit_learn():
    stop = EarlyStopping(n_samples=99, batch_size=50, max_no_improvement=2)
    assert stop.alpha == 1.0
    assert stop.update(10.0, 1.0) is None  # the first step is not judged
    assert stop.update(5.0, 1.0) is None
    assert stop.update(6.0, 1.0) is None
    assert stop.update(7.0, 1.0) == "no_improvement"
    assert EarlyStopping(100, 10, None, tol=0.5).update(1.0, 0.1) is None
    tol_stop = EarlyStopping(100, 10, None, tol=0.5)
    tol_stop.update(1.0, 1.0)
    assert tol_stop.update(1.0, 0.1) == "converged"


def test_starved_centers_are_reassigned_to_batch_rows_reproducibly():
    rng = np.random.default_rng(4)
    rows = rng.standard_normal((40, 3))
    centers = rng.standard_normal((5, 3))
    seen = np.array([100.0, 0.0, 50.0, 0.5, 80.0])
    moved = {}
    for attempt in range(2):
        c, counts = centers.copy(), seen.copy()
        assert Reassignment(0.01, 5, seed=9).apply(3, rows, None, c, counts) == 2
        moved[attempt] = c
        # centers 1 (nothing seen) and 3 (0.5 < 0.01 * 100) now sit on batch rows, weighted like the lightest other
        for j in (1, 3):
            assert np.any(np.all(rows == c[j], axis=1))
        np.testing.assert_array_equal(counts, [100.0, 50.0, 50.0, 50.0, 80.0])
        np.testing.assert_array_equal(c[[0, 2, 4]], centers[[0, 2, 4]])
    np.testing.assert_array_equal(moved[0], moved[1])
    # not due yet: fewer than 10 k samples since the last time and every center has weight
    later = Reassignment(0.01, 5, seed=9)
    assert later.apply(0, rows, None, centers.copy(), np.ones(5)) == 0
    assert Reassignment(0.0, 5, seed=9).apply(0, rows, None, centers.copy(), seen.copy()) == 0


# -- the estimator ---------------------------------------------------------------------------------------------
def test_fit_finds_blobs_with_both_rates():
    X, labels, _ = make_blobs(n=6000, d=4, k=6, spread=0.4, seed=8, dtype=np.float32)
    from sklearn.metrics import adjusted_rand_score

    for rate in ("sklearn", "beta"):
        model = MiniBatchKMeans(6, batch_size=256, learning_rate=rate, random_state=0, max_iter=20).fit(X)
        assert adjusted_rand_score(labels, model.labels_) == 1.0
        assert model.cluster_centers_.dtype == np.float32
        assert model.n_steps_ >= 1 and model.counts_.sum() == pytest.approx(model.n_steps_ * 256)
        assert model.score(X) == pytest.approx(-model.inertia_)
        assert model.history_[-1]["steps"] == model.n_steps_


def test_steps_are_the_same_on_every_scheduler_worker_count_and_chunking(cluster_client):
    X, _, _ = make_blobs(n=5000, d=6, k=8, spread=2.5, seed=4, dtype=np.float32)
    params = dict(n_clusters=8, random_state=7, batch_size=200, max_iter=3, init="random", max_no_improvement=None)
    results = []
    for chunks in (700, 1800):
        array = da.from_array(X, chunks=(chunks, 6))
        with dask.config.set(scheduler="sync"):
            results.append(MiniBatchKMeans(**params).fit(array))
        with dask.config.set(scheduler="threads"):
            results.append(MiniBatchKMeans(**params).fit(array))
        results.append(MiniBatchKMeans(**params, client=cluster_client).fit(array))
    for other in results[1:]:
        np.testing.assert_array_equal(other.cluster_centers_, results[0].cluster_centers_)
        assert other.n_steps_ == results[0].n_steps_ == 3 * 5000 // 200


def test_weighted_fit_counts_the_weights():
    X, _, _ = make_blobs(n=3000, d=3, k=4, spread=0.5, seed=5)
    weights = np.full(3000, 2.0)
    params = dict(n_clusters=4, init=X[:4], batch_size=100, random_state=0, max_iter=2, max_no_improvement=None)
    model = MiniBatchKMeans(**params).fit(X, sample_weight=weights)
    assert model.counts_.sum() == pytest.approx(2.0 * 100 * model.n_steps_)
    plain = MiniBatchKMeans(**params).fit(X)
    np.testing.assert_allclose(model.cluster_centers_, plain.cluster_centers_, rtol=1e-10)


def test_max_time_and_no_improvement_stop_the_run():
    X, _, _ = make_blobs(n=4000, d=4, k=5, spread=3.0, seed=9)
    timed = MiniBatchKMeans(5, batch_size=50, random_state=0, max_time=1e-6, max_no_improvement=None).fit(X)
    assert timed.stop_reason_ == "max_time" and timed.n_steps_ == 1
    patient = MiniBatchKMeans(5, batch_size=50, random_state=0, max_no_improvement=3, max_iter=50).fit(X)
    assert patient.stop_reason_ == "no_improvement"
    assert patient.n_steps_ < 50 * 4000 // 50


def test_partial_fit_streams_batches_and_continues_after_load(tmp_path):
    X, labels, _ = make_blobs(n=6000, d=4, k=5, spread=0.4, seed=2, dtype=np.float32)
    stream = MiniBatchKMeans(5, random_state=0, init="k-means++")
    for start in range(0, 4000, 1000):
        stream.partial_fit(X[start : start + 1000])
    assert stream.n_steps_ == 4 and stream.counts_.sum() == pytest.approx(4000)
    # each call is one step with the whole call's data as the batch
    manual = MiniBatchKMeans(5, random_state=0, init="k-means++").partial_fit(X[:1000])
    centers, seen, _, _ = run_steps(
        [X[s : s + 1000] for s in range(1000, 4000, 1000)], manual.cluster_centers_, manual.counts_, "sklearn"
    )
    np.testing.assert_allclose(stream.cluster_centers_, centers, rtol=1e-5)
    stream.save(tmp_path / "stream.zarr")
    back = load(tmp_path / "stream.zarr")
    np.testing.assert_array_equal(back.counts_, stream.counts_)
    back.partial_fit(X[4000:5000])
    stream.partial_fit(X[4000:5000])
    np.testing.assert_array_equal(back.cluster_centers_, stream.cluster_centers_)
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(labels, stream.predict(X)) == 1.0
    with pytest.raises(Exception, match="features"):
        stream.partial_fit(X[:100, :3])
    assert make_estimator("minibatch", n_clusters=2, batch_size=10).batch_size == 10


# -- bad parameters ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params, message",
    [
        ({"batch_size": 0}, "batch_size must be >= 1"),
        ({"batch_size": -3}, "batch_size must be >= 1"),
        ({"batch_size": 2.5}, "batch_size must be an integer"),
        ({"learning_rate": "adam"}, "learning_rate must be one of"),
        ({"max_iter": 0}, "max_iter must be >= 1"),
        ({"max_no_improvement": 0}, "max_no_improvement must be >= 1"),
        ({"tol": -0.1}, "tol must be >= 0"),
        ({"reassignment_ratio": -0.1}, "reassignment_ratio must be >= 0"),
        ({"reassignment_ratio": 2.0}, "reassignment_ratio must be <= 1"),
    ],
)
def test_bad_parameters_fail_before_any_work(params, message):
    never_computed = da.random.random((10**10, 4), chunks=(10**6, 4))
    with pytest.raises(InvalidParameterError, match=message):
        MiniBatchKMeans(3, **params).fit(never_computed)
    with pytest.raises(InvalidParameterError, match=message):
        MiniBatchKMeans(3, **params).partial_fit(never_computed)


def test_first_partial_fit_batch_must_seed_every_center():
    X, _, _ = make_blobs(n=20)
    with pytest.raises(Exception, match="at least n_clusters"):
        MiniBatchKMeans(30).partial_fit(X)
