"""CoresetGaussianMixture (vc-GMM) end to end: exact EM in the limit, monotone free energy, cost independent of k,
reproducibility across schedulers, weighted coresets and AFK-MC2 seeding in every estimator, persistence, CLI."""

import json
import math
import os
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs

from daskmeans import CoresetGaussianMixture, KMeans, lightweight_coreset, load
from daskmeans.demo import recovered_centers
from daskmeans.exceptions import InputDataError, InvalidParameterError
from daskmeans.registry import FEATURE_SPACE_ALGORITHMS, algorithm_names, make_estimator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def exact_isotropic_em(X, means, n_iter):
    """Full EM for the isotropic GMM with equal mixing proportions and one shared variance, in NumPy.

    The initial variance is the paper's Eq. (8): the mean squared distance to the nearest initial mean per feature.
    Returns the means, the variance and the free energy (= log-likelihood here) per sample of every iteration.
    """
    n, d = X.shape
    k = means.shape[0]
    means = means.astype(np.float64).copy()
    D = ((X[:, None, :] - means[None]) ** 2).sum(-1)
    sigma2 = D.min(1).sum() / (n * d)
    energies = []
    for _ in range(n_iter):
        D = ((X[:, None, :] - means[None]) ** 2).sum(-1)
        log_joint = -D / (2 * sigma2) - 0.5 * d * math.log(2 * math.pi * sigma2) - math.log(k)
        log_likelihood = np.logaddexp.reduce(log_joint, axis=1)
        energies.append(log_likelihood.mean())
        q = np.exp(log_joint - log_likelihood[:, None])
        resp = q.sum(0)
        means = (q.T @ X) / resp[:, None]
        D_new = ((X[:, None, :] - means[None]) ** 2).sum(-1)
        sigma2 = (q * D_new).sum() / (n * d)
    return means, sigma2, np.array(energies)


def test_with_c_and_g_equal_to_k_and_unit_weights_it_is_exact_em():
    X, _, _ = make_blobs(n=400, d=3, k=4, spread=1.5, seed=2)
    init = X[[0, 1, 2, 3]].copy()
    model = CoresetGaussianMixture(
        4,
        coreset_size=None,
        n_truncated=4,
        search_size=4,
        random_exploration=False,
        init=init,
        tol=0.0,
        max_iter=15,
        random_state=0,
    ).fit(X)
    means, sigma2, energies = exact_isotropic_em(X, init, 15)
    np.testing.assert_allclose([r["free_energy"] for r in model.history_], energies, rtol=1e-10)
    np.testing.assert_allclose(model.means_, means, rtol=1e-9, atol=1e-9)
    assert model.covariance_ == pytest.approx(sigma2, rel=1e-9)
    assert model.n_iter_ == 15 and model.stop_reason_ == "max_iter"
    # every distance of the full E-step is evaluated: m k per iteration
    assert all(r["distances"] == 400 * 4 for r in model.history_)


@pytest.mark.slow
@pytest.mark.parametrize("n_truncated,search_size,exploration", [(1, 1, True), (2, 3, True), (3, 5, False)])
def test_free_energy_never_decreases(n_truncated, search_size, exploration):
    X, _, _ = make_blobs(n=3000, d=5, k=30, spread=1.0, seed=4)
    model = CoresetGaussianMixture(
        30,
        coreset_size=800,
        n_truncated=n_truncated,
        search_size=search_size,
        random_exploration=exploration,
        tol=0.0,
        max_iter=25,
        random_state=1,
    ).fit(X)
    energies = np.array([r["free_energy"] for r in model.history_])
    # tol = 0: it runs all 25 iterations unless it reaches a fixed point (the same free energy twice)
    assert len(energies) == 25 or (model.stop_reason_ == "converged" and energies[-1] == energies[-2])
    assert len(energies) >= 5
    assert np.all(np.diff(energies) >= -1e-10 * np.abs(energies[1:])), np.diff(energies).min()
    assert model.lower_bound_ == energies[-1]


@pytest.mark.slow
def test_distance_evaluations_per_iteration_do_not_grow_with_k():
    X, _, _ = make_blobs(n=4000, d=4, k=50, spread=2.0, seed=5)
    per_point = {}
    for k in (20, 80, 320):
        model = CoresetGaussianMixture(
            k, coreset_size=1000, n_truncated=3, search_size=3, tol=0.0, max_iter=6, random_state=0
        ).fit(X)
        counts = [r["distances"] for r in model.history_]
        assert all(c <= 1000 * (3 * 3 + 1) for c in counts)
        assert all(r["full_search_distances"] == 1000 * k for r in model.history_)
        per_point[k] = np.mean([r["distances_per_point"] for r in model.history_])
    assert per_point[320] <= 1.25 * per_point[20]
    assert per_point[320] < 320 / 20


def test_converges_by_tol_and_reports_a_quantization_error():
    X, _, centers = make_blobs(n=5000, d=4, k=8, spread=0.5, seed=7)
    model = CoresetGaussianMixture(8, coreset_size=1500, random_state=3).fit(X)
    assert model.converged_ and model.stop_reason_ == "converged" and model.n_iter_ < 100
    # the final pass: inertia_ is the quantization error of the nearest-mean labels on all rows
    assert model.inertia_ == pytest.approx(float(((X - model.means_[model.labels_]) ** 2).sum()), rel=1e-9)
    nearest = ((X[:, None, :] - model.means_[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_array_equal(model.labels_, nearest)
    assert model.means_.dtype == X.dtype and model.weights_ == pytest.approx(np.full(8, 1 / 8))
    assert model.coreset_size_ == 1500 and model.seeding_distances_ > 0
    assert model.history_[0]["passes"] == 3  # summary, block spreads, draws


@pytest.mark.slow
def test_same_seed_same_result_on_a_cluster_and_synchronously(cluster_client):
    X, _, _ = make_blobs(n=6000, d=4, k=12, spread=1.0, seed=8)
    array = da.from_array(X.astype(np.float32), chunks=(1500, 4))
    params = dict(coreset_size=2000, n_truncated=3, search_size=3, max_iter=10, random_state=11)
    local = CoresetGaussianMixture(12, **params).fit(array)
    remote = CoresetGaussianMixture(12, estep_on="workers", client=cluster_client, **params).fit(array)
    assert local.history_[0]["where"] == "driver" and remote.history_[0]["where"] == "workers"
    np.testing.assert_array_equal(local.means_, remote.means_)
    assert local.lower_bound_ == remote.lower_bound_ and local.covariance_ == remote.covariance_
    assert local.inertia_ == remote.inertia_
    assert [r["distances"] for r in local.history_] == [r["distances"] for r in remote.history_]


def test_a_small_coreset_is_cut_into_a_block_per_thread():
    from daskmeans import config
    from daskmeans.algorithms.vc_gmm import gmm_block_rows, gmm_plan

    assert gmm_block_rows(10_000) == -(-10_000 // config.GMM_MIN_BLOCKS)
    assert gmm_block_rows(10**7) == config.GMM_BLOCK_ROWS
    assert gmm_block_rows(100) == config.GMM_MIN_BLOCK_ROWS
    plan = gmm_plan(10_000, 50, n_truncated=5, search_size=10)
    assert plan.block_rows == gmm_block_rows(10_000) and "GMM_MIN_BLOCKS" in plan.reasons["block_rows"]


@pytest.mark.slow
def test_the_e_step_blocks_give_the_same_numbers_on_the_driver_and_on_the_workers(cluster_client):
    """A coreset of several E-step blocks: one block or several, driver or workers, same result."""
    from daskmeans.algorithms.result import RunContext
    from daskmeans.algorithms.vc_gmm import gmm_plan, truncated_em

    rng = np.random.default_rng(0)
    points = rng.normal(size=(5000, 3))
    weights = rng.uniform(0.5, 2, 5000)
    means = points[:15].copy()
    options = dict(n_truncated=2, search_size=4, max_iter=8, tol=0.0, seed=5, block_rows=1200)
    on_driver = truncated_em(points, means, gmm_plan(5000, 15, **options), RunContext(weights=weights))
    on_workers = truncated_em(
        points,
        means,
        gmm_plan(5000, 15, cluster_client, where="workers", **options),
        RunContext(weights=weights, client=cluster_client),
    )
    assert on_workers.where == "workers"
    np.testing.assert_array_equal(on_driver.centers, on_workers.centers)
    assert on_driver.lower_bound == on_workers.lower_bound


@pytest.mark.slow
def test_predict_proba_score_and_predict_agree():
    X, _, _ = make_blobs(n=2000, d=3, k=6, spread=1.0, seed=9)
    model = CoresetGaussianMixture(6, coreset_size=600, n_truncated=2, search_size=3, random_state=0).fit(X)
    dense = model.predict_proba(X[:50])
    sparse = model.predict_proba(X[:50], sparse=True)
    assert dense.shape == (50, 6) and np.allclose(dense.sum(1), 1.0)
    assert np.all((dense > 0).sum(1) <= 2)
    np.testing.assert_allclose(sparse.toarray(), dense)
    np.testing.assert_array_equal(dense.argmax(1), model.predict(X[:50]))
    lazy = model.predict_proba(da.from_array(X[:50], chunks=(20, 3)))
    np.testing.assert_allclose(lazy.compute(), dense)
    full = CoresetGaussianMixture(6)
    full.__dict__.update({k: v for k, v in model.__dict__.items() if k.endswith("_")})
    full.n_truncated_ = 6
    assert full.score(X) >= model.score(X) - 1e-12  # more terms in the truncated sum, never less likelihood
    assert np.isfinite(model.score(X))


@pytest.mark.slow
def test_save_and_load_round_trip(tmp_path):
    X, _, _ = make_blobs(n=1500, d=3, k=5, seed=10)
    model = CoresetGaussianMixture(5, coreset_size=500, random_state=0).fit(X)
    model.save(tmp_path / "gmm.zarr")
    loaded = load(tmp_path / "gmm.zarr")
    assert type(loaded) is CoresetGaussianMixture
    np.testing.assert_array_equal(loaded.means_, model.means_)
    assert loaded.covariance_ == model.covariance_ and loaded.lower_bound_ == model.lower_bound_
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    np.testing.assert_allclose(loaded.predict_proba(X[:10]), model.predict_proba(X[:10]))
    assert loaded.history_[-1]["free_energy"] == model.history_[-1]["free_energy"]
    assert loaded.get_params() == {**model.get_params(), "client": None}


@pytest.mark.slow
@pytest.mark.parametrize("name", algorithm_names())
def test_every_estimator_takes_the_weighted_coreset(name):
    X, _, _ = make_blobs(n=3000, d=3, k=4, seed=11)
    points, weights = lightweight_coreset(X, 600, random_state=0)
    estimator = make_estimator(name, n_clusters=4, random_state=0)  # to its own stop, not the clock's
    estimator.fit(points, sample_weight=weights)
    assert estimator.cluster_centers_.shape == (4, 3)
    # clusters found on the weighted coreset are reasonable on all the data (within 50% of a full fit)
    full = KMeans(4, random_state=0).fit(X)
    assert -KMeans(4, init=estimator.cluster_centers_, max_iter=1).fit(X).score(X) <= 1.5 * full.inertia_


@pytest.mark.parametrize("name", algorithm_names())
def test_every_estimator_accepts_afk_mc2_seeding(name):
    X, _, _ = make_blobs(n=2000, d=3, k=5, seed=12)
    estimator = make_estimator(name, n_clusters=5, init="afk-mc2", random_state=0)
    if name in FEATURE_SPACE_ALGORITHMS:  # their seedings work in the kernel's feature space: AFK-MC2 is refused
        with pytest.raises(InvalidParameterError, match="init must be one of 'k-means\\+\\+', 'random'"):
            estimator.fit(X)
        return
    estimator.fit(da.from_array(X, chunks=(500, 3)))
    assert estimator.cluster_centers_.shape == (5, 3) and np.isfinite(estimator.cluster_centers_).all()


@pytest.mark.parametrize(
    "params,match",
    [
        ({"coreset_size": 3}, "smaller than n_components"),
        ({"coreset_size": "big"}, "coreset_size"),
        ({"coreset_size": 2.5}, "coreset_size"),
        ({"n_truncated": 0}, "n_truncated"),
        ({"search_size": 0}, "search_size"),
        ({"chain_length": 0}, "chain_length"),
        ({"tol": -1.0}, "tol"),
        ({"max_iter": 0}, "max_iter"),
        ({"init": "kmeans"}, "init must be one of"),
        ({"init": np.zeros((3, 2))}, "init array has shape"),
        ({"estep_on": "gpu"}, "estep_on"),
        ({"random_exploration": "yes"}, "random_exploration"),
        ({"n_components": 0}, "n_components"),
    ],
)
def test_bad_parameters_are_clear_errors(params, match):
    X = np.random.default_rng(0).normal(size=(100, 3))
    with pytest.raises(InvalidParameterError, match=match):
        CoresetGaussianMixture(**{"n_components": 8, **params}).fit(X)


def test_c_and_g_above_k_mean_all_clusters():
    X, _, _ = make_blobs(n=500, d=2, k=3, seed=14)
    model = CoresetGaussianMixture(3, coreset_size=200, n_truncated=5, search_size=9, random_state=0).fit(X)
    assert (model.n_truncated_, model.search_size_) == (3, 3)
    assert all(r["distances_per_point"] == 3 for r in model.history_)


def test_too_few_distinct_points_is_a_clear_error():
    X = np.repeat(np.eye(3), 100, axis=0)
    with pytest.raises(InputDataError, match="distinct"):
        CoresetGaussianMixture(5, coreset_size=100, random_state=0).fit(X)


def test_more_components_than_samples_is_a_clear_error():
    with pytest.raises(InputDataError, match="n_clusters"):
        CoresetGaussianMixture(50, coreset_size=60).fit(np.random.default_rng(0).normal(size=(20, 2)))


@pytest.mark.slow
def test_cli_fits_vc_gmm(tmp_path):
    X, _, _ = make_blobs(n=2000, d=3, k=4, seed=13)
    np.save(tmp_path / "X.npy", X.astype(np.float32))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "daskmeans",
            "fit",
            str(tmp_path / "X.npy"),
            "-k",
            "4",
            "--algorithm",
            "vc-gmm",
            "--seed",
            "0",
            "--max-iter",
            "30",
            "--out",
            str(tmp_path / "model.zarr"),
            "--json",
            "-q",
            "--workers",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["algorithm"] == "vc-gmm" and summary["n_clusters"] == 4
    model = load(tmp_path / "model.zarr")
    assert isinstance(model, CoresetGaussianMixture) and model.n_components == 4


@pytest.mark.slow
def test_all_rows_as_the_coreset_on_a_cluster(cluster_client):
    """coreset_size=None with data persisted on the cluster: the rows come to the driver (small) or stay (workers)."""
    X, _, _ = make_blobs(n=3000, d=3, k=5, seed=15)
    array = cluster_client.persist(da.from_array(X, chunks=(1000, 3)))
    weights = np.random.default_rng(0).uniform(0.5, 2.0, 3000)
    params = dict(coreset_size=None, n_truncated=2, search_size=3, max_iter=5, random_state=0, client=cluster_client)
    on_driver = CoresetGaussianMixture(5, **params).fit(array, sample_weight=weights)
    on_workers = CoresetGaussianMixture(5, estep_on="workers", **params).fit(array, sample_weight=weights)
    assert on_driver.history_[0]["where"] == "driver" and on_workers.history_[0]["where"] == "workers"
    np.testing.assert_array_equal(on_driver.means_, on_workers.means_)
    assert on_driver.coreset_size_ == 3000


def hundred_blobs(n_samples, n_features, seed=0):
    """``n_samples`` rows around 100 centers drawn in a box of side 20, noise 1: well separated (about 20 noise
    radii apart), on which k-means|| finds 98 to 100 of the centers."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(100, n_features))
    X = centers[rng.integers(0, 100, n_samples)] + rng.standard_normal((n_samples, n_features))
    return X.astype(np.float32), centers


@pytest.mark.slow
def test_the_defaults_find_the_centers_of_well_separated_blobs():
    # issue 20 at 200,000 x 64 (the 2M x 64 takes minutes); before (plain AFK-MC2, G = 5): 78, 84, 85 of 100
    X, centers = hundred_blobs(200_000, 64)
    found = [
        recovered_centers(centers, CoresetGaussianMixture(100, random_state=seed).fit(X).means_, 2.0)
        for seed in range(3)
    ]
    assert min(found) >= 98, found


def test_kmeans_seeded_by_afk_mc2_finds_the_centers_of_well_separated_blobs():
    # the distributed AFK-MC2 keeps its candidates the same way; plain AFK-MC2 found 80, 84 and 91 of 100
    X, centers = hundred_blobs(60_000, 32)
    found = [
        recovered_centers(
            centers, KMeans(100, init="afk-mc2", max_iter=20, random_state=seed).fit(X).cluster_centers_, 2.0
        )
        for seed in range(3)
    ]
    assert min(found) >= 98, found


@pytest.mark.parametrize("coreset_size", ["auto", 40, 10_000])
def test_a_coreset_of_at_least_n_rows_takes_every_row_once(coreset_size):
    """40 draws with replacement from 40 rows would hit about 25 of them, too few distinct rows for 40 components:
    a coreset size of at least n takes every row once, with its weight, and fits."""
    rows = np.random.default_rng(0).normal(size=(40, 3))
    model = CoresetGaussianMixture(n_components=40, coreset_size=coreset_size, random_state=0).fit(rows)
    assert model.coreset_size_ == 40 == model.fit_plan_.coreset_rows
    assert "every row once" in model.fit_plan_.reasons["coreset_rows"]
    assert np.isfinite(model.means_).all() and len(np.unique(model.means_, axis=0)) == 40
    # the coreset is the data itself: the same fit whatever size at least n, and sample weights carried over
    weights = np.linspace(1.0, 2.0, 40)
    fits = [
        CoresetGaussianMixture(n_components=5, coreset_size=size, random_state=3).fit(rows, sample_weight=weights)
        for size in (40, 1000)
    ]
    np.testing.assert_array_equal(fits[0].means_, fits[1].means_)
    unweighted = CoresetGaussianMixture(n_components=5, coreset_size=40, random_state=3).fit(rows)
    assert not np.array_equal(unweighted.means_, fits[0].means_)


def test_a_coreset_of_fewer_rows_than_n_is_still_drawn():
    rows = np.random.default_rng(1).normal(size=(400, 2))
    model = CoresetGaussianMixture(n_components=4, coreset_size=100, random_state=0).fit(rows)
    assert model.coreset_size_ == 100 and "every row" not in model.fit_plan_.reasons["coreset_rows"]


def test_the_auto_coreset_takes_rows_per_component_within_a_floor_a_byte_cap_and_n():
    from daskmeans import config
    from daskmeans.estimators.mixture import auto_coreset_size

    per, floor = config.AUTO_CORESET_PER_COMPONENT, config.AUTO_CORESET_MIN
    assert auto_coreset_size(10**9, 1000, 128) == per * 1000
    assert auto_coreset_size(10**9, 3, 128) == floor  # few components: the floor
    assert auto_coreset_size(5000, 1000, 128) == 5000  # never more rows than the data has
    with config.set(AUTO_CORESET_MAX_BYTES=128 * 20_000):
        assert auto_coreset_size(10**9, 1000, 128) == 20_000  # rows of 128 bytes, at most the cap
        assert auto_coreset_size(10**9, 1000, 4 * 128) == 5_000  # the same rows as float32 take four times more
        assert auto_coreset_size(10**9, 30_000, 128) == 30_000  # never fewer rows than components


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64])
def test_a_fit_with_the_auto_coreset_draws_the_rows_its_rule_gives_for_the_rows_it_holds(dtype):
    from daskmeans import config

    rows = np.random.default_rng(2).integers(0, 200, size=(3000, 4)).astype(dtype)
    with config.set(AUTO_CORESET_MIN=10, AUTO_CORESET_PER_COMPONENT=100, AUTO_CORESET_MAX_BYTES=4 * 1000):
        model = CoresetGaussianMixture(n_components=5, max_iter=2, random_state=0).fit(rows)
    # 500 rows per the rule; 4,000 bytes hold 250 rows of 4 features in float32 (integer rows are drawn as float32)
    # and 125 in float64
    assert model.coreset_size_ == {np.uint8: 250, np.float32: 250, np.float64: 125}[dtype]
    assert "AUTO_CORESET_MAX_BYTES" in model.fit_plan_.reasons["coreset_rows"]
