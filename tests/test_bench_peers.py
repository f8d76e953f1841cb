"""The bench's newer yardsticks: the scikit-learn-intelex and faiss-on-every-row peers (real runs on small data;
skipped with the reason when the package is absent) and E* as the converged Lloyd energy, cached."""

from __future__ import annotations

import dataclasses
import json

import dask.array as da
import numpy as np
import pytest
from click.testing import CliRunner

from daskmeans.bench import report
from daskmeans.bench.command import bench
from daskmeans.bench.energy import DaskEnergy, InMemoryEnergy
from daskmeans.bench.peers import PEERS, PeerContext, availability
from daskmeans.bench.reference import CACHE_SCHEMA, lloyd_reference, read_cache
from daskmeans.bench.workloads import BenchData
from daskmeans.exceptions import InvalidParameterError

N_SAMPLES, N_CLUSTERS = 3000, 5


@pytest.fixture(scope="module")
def blobs():
    """3,000 rows in 6 dimensions around 5 centers, and 5 of its rows as the shared initial centers."""
    rng = np.random.default_rng(0)
    centers = rng.uniform(-10, 10, size=(N_CLUSTERS, 6))
    X = (centers[rng.integers(0, N_CLUSTERS, N_SAMPLES)] + rng.normal(size=(N_SAMPLES, 6))).astype(np.float32)
    init = X[rng.choice(N_SAMPLES, N_CLUSTERS, replace=False)].copy()
    return X, init


def lloyd_centers(X, init, iterations):
    """scikit-learn's Lloyd after exactly ``iterations`` updates (tol=0: no early stop on a small shift)."""
    from sklearn.cluster import KMeans

    return KMeans(N_CLUSTERS, init=init, n_init=1, max_iter=iterations, tol=0.0, algorithm="lloyd").fit(X)


def context(X, init, budget=0.3):
    return PeerContext(X=X, array=None, client=None, init=init, k=N_CLUSTERS, seed=0, budget=budget)


def energy_of(X, centers):
    return float(((X[:, None, :].astype(np.float64) - centers[None]) ** 2).sum(-1).min(1).mean())


# -- scikit-learn-intelex --------------------------------------------------------------------------------------------
def test_sklearn_intelex_peer_runs_onedal_and_leaves_scikit_learn_alone(blobs):
    pytest.importorskip("sklearnex", reason="scikit-learn-intelex is not installed (pip install daskmeans[bench])")
    import sklearn.cluster

    X, init = blobs
    plain_before = PEERS["sklearn-lloyd"].run(context(X, init)).extend(3).centers
    # a budget well above oneDAL's first call (which loads its library), so the ladder climbs past its first rung
    trace = PEERS["sklearn-intelex"].run(context(X, init, budget=5.0))
    assert trace.params["backend"] == "oneDAL" and trace.stop_reason in ("converged", "time_budget", "max_iter")
    rungs = [c for c in trace.candidates if c.kind == "rung"]
    assert [c.step for c in rungs][:3] == [1, 2, 3] and all(c.time > 0 for c in rungs)
    energies = [energy_of(X, c.centers) for c in rungs]
    assert all(later <= earlier * (1 + 1e-6) for earlier, later in zip(energies, energies[1:]))
    # a rung with max_iter=m is oneDAL's Lloyd from the shared centers: scikit-learn's iterates, to rounding
    third = trace.extend(3)
    assert third.iteration == 3 and third.passes == 4.0
    np.testing.assert_allclose(third.centers, lloyd_centers(X, init, 3).cluster_centers_, rtol=1e-4, atol=1e-4)
    # scikit-learn itself is not patched: its KMeans is its own class and gives the same bits as before
    assert sklearn.cluster.KMeans.__module__ == "sklearn.cluster._kmeans"
    assert not hasattr(lloyd_centers(X, init, 2), "_onedal_estimator")
    np.testing.assert_array_equal(PEERS["sklearn-lloyd"].run(context(X, init)).extend(3).centers, plain_before)
    ok, version = availability(PEERS["sklearn-intelex"])
    import importlib.metadata

    assert ok and version == importlib.metadata.version("scikit-learn-intelex")


def test_an_absent_peer_package_is_reported_with_the_fix():
    absent = dataclasses.replace(PEERS["sklearn-intelex"], module="sklearnex_not_installed_here")
    ok, reason = availability(absent)
    assert not ok and "sklearnex_not_installed_here is not installed" in reason and "daskmeans[bench]" in reason


# -- faiss on every row ----------------------------------------------------------------------------------------------
def test_faiss_all_rows_trains_on_every_row_where_the_default_subsamples(blobs):
    pytest.importorskip("faiss", reason="faiss is not installed (pip install daskmeans[bench])")
    X, init = blobs
    # 3,000 rows > 5 clusters x 256 points per centroid: faiss's default trains on a 1,280-row subsample
    default = PEERS["faiss"].run(context(X, init))
    everything = PEERS["faiss-all"].run(context(X, init))
    assert default.params["training_rows"] == N_CLUSTERS * 256 < N_SAMPLES
    assert everything.params["training_rows"] == N_SAMPLES
    assert everything.params["max_points_per_centroid"] * N_CLUSTERS >= N_SAMPLES
    assert all(c.passes == c.iteration for c in everything.candidates)
    assert "all 3,000 rows" in everything.notes[0] and "default subsample" in default.notes[0]
    # on every row, iteration m is Lloyd's m-th iterate; on the subsample it is not
    lloyd = lloyd_centers(X, init, 3).cluster_centers_
    third = next(c for c in everything.candidates if c.iteration == 3)
    np.testing.assert_allclose(third.centers, lloyd, rtol=1e-4, atol=1e-4)
    assert np.abs(default.extend(3).centers - lloyd).max() > 1e-3


def test_faiss_on_every_row_steps_through_the_iterates_of_one_fit_bit_for_bit():
    """One candidate per iteration, each faiss's own ``train(niter=m)`` result, also when empty clusters are split
    (many centers in a corner where no row is), and timed as the sum of the iterations up to it."""
    faiss = pytest.importorskip("faiss", reason="faiss is not installed (pip install daskmeans[bench])")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 8)).astype(np.float32)
    k = 40
    init = np.concatenate([X[:20], 50 + rng.normal(size=(20, 8))]).astype(np.float32)
    trace = PEERS["faiss-all"].run(PeerContext(X=X, array=None, client=None, init=init, k=k, seed=0, budget=60))
    iterations = [c.iteration for c in trace.candidates]
    assert iterations == list(range(1, len(iterations) + 1)) and len(iterations) >= 4
    assert trace.candidates[-1].kind == "final" and trace.stop_reason in ("converged", "max_iter")
    times = [c.time for c in trace.candidates]
    assert all(b > a > 0 for a, b in zip(times, times[1:])) and trace.fit_seconds == times[-1]
    split_any = False
    for m in (1, 2, 4):
        one_fit = faiss.Kmeans(8, k, niter=m, seed=0, max_points_per_centroid=len(X) // k + 1)
        one_fit.train(X, init_centroids=init)
        split_any |= any(stats["nsplit"] > 0 for stats in one_fit.iteration_stats)
        np.testing.assert_array_equal(trace.candidates[m - 1].centers, one_fit.centroids)
    assert split_any, "the test data must make faiss split empty clusters"
    # faiss's default niter as a limit (--versus faiss-all@25 sets it)
    limited = PEERS["faiss-all"].run(
        PeerContext(X=X, array=None, client=None, init=init, k=k, seed=0, budget=60, max_iter=2)
    )
    assert [c.iteration for c in limited.candidates] == [1, 2] and limited.stop_reason == "max_iter"
    np.testing.assert_array_equal(limited.candidates[-1].centers, trace.candidates[1].centers)


def test_faiss_sample_trains_on_whole_chunks_of_a_zarr_store_that_fit_the_driver_budget(tmp_path, cluster_client):
    """Out of core, faiss gets the largest sample the driver budget holds, read as whole chunks of the store in a
    seeded order: the iterates are faiss's on exactly those rows, the read is timed, passes count the fraction."""
    pytest.importorskip("faiss", reason="faiss is not installed (pip install daskmeans[bench])")
    import zarr

    from daskmeans.bench.peers import sample_chunks

    rng = np.random.default_rng(2)
    X = rng.integers(0, 256, size=(10_000, 8)).astype(np.uint8)
    store = zarr.open_array(store=str(tmp_path / "x.zarr"), mode="w", shape=X.shape, chunks=(700, 8), dtype="uint8")
    store[...] = X
    array = da.from_zarr(str(tmp_path / "x.zarr"))
    init = X[:N_CLUSTERS].astype(np.float32)
    budget_rows = 2_500
    ctx = PeerContext(
        X=None,
        array=array,
        client=cluster_client,
        init=init,
        k=N_CLUSTERS,
        seed=1,
        budget=60,
        max_iter=3,
        driver_memory=budget_rows * 8 * (4 + 1),
    )
    assert not PEERS["faiss-sample"].in_memory
    trace = PEERS["faiss-sample"].run(ctx)
    chosen = sample_chunks(array.chunks[0], budget_rows, 1)
    assert sum(rows for _, rows in chosen) == budget_rows and all(rows == 700 for _, rows in chosen[:-1])
    assert len({chunk for chunk, _ in chosen}) == len(chosen) and [c for c, _ in chosen] != sorted(c for c, _ in chosen)
    sample = np.concatenate([X[700 * chunk : 700 * chunk + rows] for chunk, rows in chosen]).astype(np.float32)
    assert trace.params["sample_rows"] == budget_rows and trace.params["training_rows"] == budget_rows
    every_row = PEERS["faiss-all"].run(
        PeerContext(X=sample, array=None, client=None, init=init, k=N_CLUSTERS, seed=1, budget=60, max_iter=3)
    )
    for ours, reference in zip(trace.candidates, every_row.candidates):
        np.testing.assert_array_equal(ours.centers, reference.centers)
        assert ours.passes == pytest.approx(reference.iteration * budget_rows / 10_000)
    # the first snapshot's time includes the read (recorded rounded to the millisecond)
    assert trace.candidates[0].time > trace.params["read_seconds"] - 0.0005 and trace.params["read_seconds"] > 0
    assert "2,500 of 10,000 rows" in trace.notes[0]
    # a budget above the data takes every row, each chunk once
    whole = sample_chunks(array.chunks[0], 10_000, 1)
    assert sorted(chunk for chunk, _ in whole) == list(range(15)) and sum(rows for _, rows in whole) == 10_000


def test_faiss_two_level_finds_known_centers_of_well_separated_blobs_and_seeds_itself():
    """faiss's large-k method as a peer: k centroids on blobs whose centers are known (most of them on a true center:
    k-means from random rows may leave a few in local minima), one final candidate, marked as seeding itself (so the
    bench adds no shared-initial-centers point at time 0)."""
    pytest.importorskip("faiss", reason="faiss is not installed (pip install daskmeans[bench])")
    rng = np.random.default_rng(5)
    k, d = 64, 16
    truth = rng.uniform(-100, 100, size=(k, d))
    X = (np.repeat(truth, 100, axis=0) + 0.1 * rng.normal(size=(100 * k, d))).astype(np.float32)
    trace = PEERS["faiss-two-level"].run(PeerContext(X=X, array=None, client=None, init=None, k=k, seed=0, budget=60))
    [final] = trace.candidates
    assert final.kind == "final" and final.centers.shape == (k, d) and final.time == trace.fit_seconds > 0
    assert isinstance(trace.params["init"], str) and trace.params["coarse_centroids"] == 8
    on_a_center = np.linalg.norm(final.centers[:, None, :] - truth[None], axis=2).min(axis=1) < 1.0
    assert on_a_center.mean() >= 0.75


# -- faiss SuperKMeans ------------------------------------------------------------------------------------------------
def test_superkmeans_seeds_itself_and_climbs_a_ladder_to_the_blobs_on_the_default_subsample_or_every_row():
    """SuperKMeans (faiss >= 1.15) as a peer: each rung is a fit of its own with m iterations and the same seed, so
    the rungs are deterministic and the initial centers given play no part (it seeds itself, and says so); at its
    defaults it trains on faiss's subsample, the -all variant on every row; its energy never rises from rung to rung,
    and it ends on a fixed point of Lloyd's iteration (every center the mean of its rows)."""
    faiss = pytest.importorskip("faiss", reason="faiss is not installed (pip install daskmeans[bench])")
    if not hasattr(faiss, "SuperKMeans"):
        pytest.skip(f"faiss {faiss.__version__} has no SuperKMeans (faiss-cpu >= 1.15 has)")
    rng = np.random.default_rng(4)
    k, d = 4, 32
    truth = rng.uniform(-20, 20, size=(k, d))
    X = (truth[rng.integers(0, k, 3000)] + rng.normal(size=(3000, d))).astype(np.float32)
    init = X[:k].copy()
    default = PEERS["superkmeans"].run(PeerContext(X=X, array=None, client=None, init=init, k=k, seed=0, budget=1.0))
    every = PEERS["superkmeans-all"].run(PeerContext(X=X, array=None, client=None, init=init, k=k, seed=0, budget=1.0))
    assert default.params["training_rows"] == k * 256 < len(X) and every.params["training_rows"] == len(X)
    assert isinstance(every.params["init"], str) and "seeds itself" in every.notes[0]
    rungs = [c for c in every.candidates if c.kind in ("rung", "final")]
    assert [c.iteration for c in rungs][:3] == [1, 2, 3] and all(c.passes == c.iteration for c in rungs)
    other_init = PEERS["superkmeans-all"].run(
        PeerContext(X=X, array=None, client=None, init=init + 5, k=k, seed=0, budget=1.0)
    )
    np.testing.assert_array_equal(other_init.extend(3).centers, every.extend(3).centers)
    energies = [energy_of(X, every.extend(m).centers) for m in (1, 2, 5, 20)]
    assert all(later <= earlier * (1 + 1e-6) for earlier, later in zip(energies, energies[1:])), energies
    final = every.extend(20).centers  # Lloyd's fixed point: every center the mean of the rows nearest to it
    labels = ((X[:, None, :] - final[None]) ** 2).sum(-1).argmin(1)
    means = np.stack([X[labels == j].mean(axis=0) for j in range(k)])
    np.testing.assert_allclose(final, means, atol=1e-3)
    assert default.candidates[0].passes == pytest.approx(k * 256 / len(X))


def test_a_faiss_without_superkmeans_is_reported_with_the_fix():
    pytest.importorskip("faiss", reason="faiss is not installed (pip install daskmeans[bench])")
    older = dataclasses.replace(PEERS["superkmeans"], attribute="SuperKMeansOfTheFuture")
    ok, reason = availability(older)
    assert not ok and "has no SuperKMeansOfTheFuture" in reason and "pip install -U" in reason


def test_superkmeans_refuses_data_narrower_than_it_can_prune_in_words(blobs):
    faiss = pytest.importorskip("faiss", reason="faiss is not installed (pip install daskmeans[bench])")
    if not hasattr(faiss, "SuperKMeans"):
        pytest.skip(f"faiss {faiss.__version__} has no SuperKMeans (faiss-cpu >= 1.15 has)")
    X, init = blobs
    with pytest.raises(ValueError, match="needs at least 32 features .* this data has 6"):
        PEERS["superkmeans"].run(context(X, init))


# -- E*: the converged Lloyd energy ----------------------------------------------------------------------------------
def test_converged_lloyd_reference_is_computed_once_and_cached(blobs, tmp_path, cluster_client):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (pip install daskmeans[test])")
    X, init = blobs
    array = da.from_array(X, chunks=(750, X.shape[1]))
    in_driver = BenchData(X=X, array=array, fit_input=array, location=None, source_dtype="float32")
    cache = str(tmp_path / "cache" / "reference.json")
    first = lloyd_reference("blobs", in_driver, init, 0, cluster_client, InMemoryEnergy(X), cache)
    converged = lloyd_centers(X, init, 300)
    # daskmeans' Lloyd (with bounds) converges where scikit-learn's does, to the same energy
    assert first["converged"] and abs(first["n_iter"] - converged.n_iter_) <= 1 and not first["from_cache"]
    assert "daskmeans KMeans(algorithm='auto'" in first["implementation"]
    assert first["energy"] == pytest.approx(energy_of(X, converged.cluster_centers_), rel=1e-6)
    with open(cache) as f:
        stored = json.load(f)
    assert stored["schema"] == CACHE_SCHEMA and list(stored["entries"]) == [first["key"]]
    assert f"n={N_SAMPLES} d=6 k={N_CLUSTERS} seed=0" in first["key"]
    # the second time it is read back, not run again
    again = lloyd_reference("blobs", in_driver, init, 0, cluster_client, InMemoryEnergy(X), cache)
    assert again["from_cache"] and again["energy"] == first["energy"] and again["seconds"] == first["seconds"]
    # other initial centers are another entry
    other = lloyd_reference("blobs", in_driver, X[10:15].copy(), 0, cluster_client, InMemoryEnergy(X), cache)
    assert not other["from_cache"] and len(read_cache(cache)) == 2
    # data the driver does not hold: the same on the cluster
    on_cluster = BenchData(X=None, array=array, fit_input=array, location=None, source_dtype="float32")
    remote = lloyd_reference(
        "blobs-remote", on_cluster, init, 0, cluster_client, DaskEnergy(array, cluster_client), cache
    )
    assert "daskmeans" in remote["implementation"] and remote["converged"]
    assert remote["energy"] == pytest.approx(first["energy"], rel=1e-6)


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "cannot be read as JSON"),
        ('{"entries": {}}', "not a cache of converged Lloyd energies"),
    ],
)
def test_a_broken_cache_is_refused_before_any_work(tmp_path, content, message):
    cache = tmp_path / "reference.json"
    cache.write_text(content)
    with pytest.raises(InvalidParameterError, match=message):
        read_cache(str(cache))
    result = CliRunner().invoke(
        bench, ["synthetic", "--quick", "--out", str(tmp_path / "out"), "--reference-cache", str(cache)]
    )
    assert result.exit_code != 0 and message in result.output and "delete it" in result.output
    assert not (tmp_path / "out").exists()
    folder = CliRunner().invoke(
        bench, ["synthetic", "--quick", "--out", str(tmp_path / "out"), "--reference-cache", str(tmp_path)]
    )
    assert folder.exit_code != 0 and not (tmp_path / "out").exists()


def _record(method, lloyd, runs):
    """A record as the runner writes it: runs with their evaluated points and the seeds' Lloyd references."""

    def run(name, seed, energies):
        points = [{"time": float(t), "energy": e} for t, e in enumerate(energies)]
        return {
            "name": name,
            "label": name,
            "kind": "peer",
            "seed": seed,
            "status": "ok",
            "reason": None,
            "points": points,
            "final_energy": energies[-1],
            "fit_seconds": 1.0,
            "timed_seconds": 1.0,
            "n_iter": 1,
            "passes": 1,
            "memory": {"driver_peak_rss": 1},
            "uses_cluster": False,
        }

    seeds = {
        str(seed): {
            "seed": seed,
            "energy": energy,
            "implementation": "scikit-learn KMeans(...)",
            "version": "1",
            "n_iter": 40,
            "max_iter": 300,
            "converged": True,
            "seconds": 2.0,
            "cache": "c.json",
            "from_cache": seed == 1,
        }
        if energy is not None
        else {"seed": seed, "error": "MemoryError: too big"}
        for seed, energy in lloyd.items()
    }
    return {
        "targets": [0.01],
        "seeds": sorted(lloyd) or [0],
        "evaluation": {"method": "driver"},
        "reference": {"method": method, "cache": "c.json" if method == "lloyd" else None, "seeds": seeds},
        "runs": [run(name, seed, energies) for name, seed, energies in runs],
    }


def test_e_star_is_the_converged_lloyd_energy_unless_a_run_goes_lower():
    runs = [("faiss", 0, [10.0, 4.1]), ("faiss", 1, [9.0, 4.3]), ("sklearn-lloyd", 0, [10.0, 4.05])]
    record = _record("lloyd", {0: 4.0, 1: 4.02}, runs)
    summary = record["summary"] = report.summarize(record)
    assert summary["E_star"] == 4.0 and summary["E_star_source"] == "lloyd"
    assert summary["E_star_lloyd"] == {"seed": 0, "energy": 4.0}
    assert summary["E_star_run"] == {"name": "sklearn-lloyd", "seed": 0, "energy": 4.05}
    # faiss stopped 2.5% above the converged energy: it never came within 1%, though it did of the best run
    assert summary["algorithms"]["faiss"]["time_to"]["0.01"]["median"] is None
    lines = report.e_star_lines(record)
    assert lines[0].startswith("E* = 4, the converged Lloyd energy from the initial centers of seed 0")
    assert "1.0125 x E* (sklearn-lloyd, seed 0)" in lines[0]
    assert lines[1].startswith("Converged Lloyd energy (seed 0): 4 (scikit-learn") and "computed in 2 s" in lines[1]
    assert "converged after 40 iterations" in lines[1] and "read from the cache c.json" in lines[2]

    lower = _record("lloyd", {0: 4.0, 1: None}, runs + [("faiss", 1, [9.0, 3.9])])
    lower["summary"] = report.summarize(lower)
    assert lower["summary"]["E_star"] == 3.9 and lower["summary"]["E_star_source"] == "run"
    text = "\n".join(report.e_star_lines(lower))
    assert "E* = 3.9, the lowest energy any run reached (faiss, seed 1), below the converged Lloyd energy" in text
    assert "the lowest converged Lloyd energy (seed 0) is 1.0256 x E*" in text
    assert "Converged Lloyd energy (seed 1): failed (MemoryError: too big)" in text

    best = _record("best", {}, runs)
    best["summary"] = report.summarize(best)
    assert best["summary"]["E_star"] == 4.05 and best["summary"]["E_star_lloyd"] is None
    assert report.e_star_lines(best)[0].startswith(
        "E* = 4.05, the lowest energy any run reached (sklearn-lloyd, seed 0): the older yardstick (--reference best)"
    )


def test_scikit_learns_mini_batch_peer_takes_batches_of_at_least_k_rows():
    X = np.random.default_rng(0).standard_normal((3000, 4)).astype(np.float32)
    k = 40
    init = X[:k].copy()
    trace = PEERS["sklearn-minibatch"].run(
        PeerContext(X=X, array=None, client=None, init=init, k=k, seed=0, budget=0.2, batch_size=16)
    )
    assert trace.params["batch_size"] == k
    assert trace.notes == [f"batch {k} (raised to k); passes = rows seen / n"]
    assert trace.passes == trace.n_iter * k / len(X)


def test_faiss_sample_reads_a_store_in_the_driver_and_a_persisted_array_from_the_workers(tmp_path, cluster_client):
    """The sample of a store is read by the driver's threads (a faiss user has no cluster; the workers may be too small
    to hold it); that of an array the workers hold comes from them: the same rows either way."""
    pytest.importorskip("faiss", reason="faiss is not installed (pip install daskmeans[bench])")
    import zarr

    from daskmeans.bench.peers import _read_sample, sample_chunks

    X = np.random.default_rng(3).integers(0, 256, size=(5_000, 6)).astype(np.uint8)
    zarr.create_array(store=str(tmp_path / "x.zarr"), data=X, chunks=(600, 6))
    stored = da.from_zarr(str(tmp_path / "x.zarr"))
    persisted = cluster_client.persist(stored)
    chosen = sample_chunks(stored.chunks[0], 2_000, 4)
    expected = np.concatenate([X[600 * chunk : 600 * chunk + rows] for chunk, rows in chosen]).astype(np.float32)
    for array in (stored, persisted):
        ctx = PeerContext(X=None, array=array, client=cluster_client, init=None, k=2, seed=4, budget=1)
        np.testing.assert_array_equal(_read_sample(ctx, chosen, 2_000), expected)


# -- a yardstick runs to convergence ---------------------------------------------------------------------------------
def test_a_yardstick_lloyd_runs_on_past_its_budget_to_scikit_learns_own_converged_fit(blobs):
    """``--versus sklearn-lloyd`` takes Lloyd's final energy as the yardstick: the ladder the budget stops gets one
    more rung without an iteration limit, scikit-learn's converged fit bit for bit."""
    from sklearn.cluster import KMeans

    X, init = blobs
    converged = KMeans(N_CLUSTERS, init=init, n_init=1, algorithm="lloyd").fit(X)  # scikit-learn's defaults
    assert converged.n_iter_ > 2
    cut = PEERS["sklearn-lloyd"].run(context(X, init, budget=1e-9))
    assert cut.stop_reason == "time_budget" and cut.n_iter < converged.n_iter_
    whole = PEERS["sklearn-lloyd"].run(dataclasses.replace(context(X, init, budget=1e-9), converge=True))
    assert whole.stop_reason == "converged" and whole.n_iter == converged.n_iter_
    np.testing.assert_array_equal(whole.final().centers, converged.cluster_centers_)
    assert whole.fit_seconds == whole.final().time  # the converged fit's own time, not the ladder's sum
    assert any("beyond the time budget" in note for note in whole.notes)
    assert not any("beyond the time budget" in note for note in cut.notes)


def test_a_yardstick_ladder_that_never_converges_says_it_stopped_at_max_iter():
    from daskmeans.bench.traces import LADDER_MAX_ITER, ladder_trace

    asked = []

    def fit_rung(m):
        asked.append(m)
        return np.zeros((1, 1), dtype=np.float32), m, 0.1 * m, False, float(m)

    trace = ladder_trace(fit_rung, 0.5, {}, [], converge=True)
    assert asked == [1, 2, 3, 4, LADDER_MAX_ITER]
    assert trace.stop_reason == "max_iter" and trace.n_iter == LADDER_MAX_ITER
    assert trace.timed_seconds == pytest.approx(0.1 * (1 + 2 + 3 + 4 + LADDER_MAX_ITER))
