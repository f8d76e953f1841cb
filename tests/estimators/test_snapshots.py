"""Center snapshots, one way for every estimator: ``snapshot_centers=True`` fills ``center_snapshots_``."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import make_blobs

from daskmeans import InvalidParameterError
from daskmeans.registry import algorithm_names, make_estimator

SHORT = {
    "kmeans": {"max_iter": 4, "tol": 0.0},
    "kmeans-lloyd": {"max_iter": 4, "tol": 0.0},
    "vrkm": {"max_epochs": 3},
    "vrkm++": {"max_epochs": 3},
    "vrkm++-reference": {"max_epochs": 3},
    "nmbatch": {"max_iter": 5},
    "minibatch": {"max_iter": 2},
    "minibatch-rows": {"max_iter": 2},
    "vc-gmm": {"max_iter": 4, "tol": 0.0, "coreset_size": 600},
    "kernel-minibatch": {"max_iter": 4, "batch_size": 64},
    "kernel-minibatch-untruncated": {"max_iter": 4, "batch_size": 64},
    "kernel-kmeans": {"max_iter": 4},
}


@pytest.mark.parametrize("name", algorithm_names())
def test_every_estimator_snapshots_its_centers_the_same_way(name):
    X, _, _ = make_blobs(n=1500, d=3, k=4, spread=1.0, seed=3, dtype=np.float32)
    model = make_estimator(name, n_clusters=4, random_state=0, snapshot_centers=True, **SHORT[name]).fit(X)
    snapshots = model.center_snapshots_
    assert len(snapshots) >= 2
    for snapshot in snapshots:
        assert set(snapshot) == {"iteration", "wall_time", "perf_counter", "centers"}
        assert snapshot["centers"].shape == model.cluster_centers_.shape
        assert snapshot["centers"].dtype == model.cluster_centers_.dtype
    assert snapshots[0]["iteration"] == 0
    iterations = [s["iteration"] for s in snapshots]
    assert iterations == sorted(iterations)
    times = [s["wall_time"] for s in snapshots]
    assert times == sorted(times)
    np.testing.assert_array_equal(snapshots[-1]["centers"], model.cluster_centers_)
    # without the option there is none, and a fit with it gives the same centers
    plain = make_estimator(name, n_clusters=4, random_state=0, **SHORT[name]).fit(X)
    assert not hasattr(plain, "center_snapshots_")
    np.testing.assert_array_equal(plain.cluster_centers_, model.cluster_centers_)


@pytest.mark.parametrize("name", algorithm_names())
def test_snapshot_centers_must_be_a_bool(name):
    with pytest.raises(InvalidParameterError, match="snapshot_centers must be True or False"):
        make_estimator(name, n_clusters=2, snapshot_centers="yes").fit(np.zeros((10, 2)))
