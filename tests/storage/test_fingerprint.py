"""Fingerprints of fits: checkpoints written before must be recognised by the same fit now.

The expected values were computed by the fingerprint code that wrote checkpoints before the redesign; a change
here makes every existing checkpoint be refused as "written by another fit".
"""

from types import SimpleNamespace

import numpy as np

from daskmeans import KMeans
from daskmeans.estimators.kernel_full import KernelKMeans
from daskmeans.storage.fingerprint import content_differences, content_digest, differences, fit_fingerprint
from daskmeans.storage.io import open_input

ROW_CHUNKS = {"count": 3, "largest": 8, "sha256": "ff03a9cafc6f581f4c6c7fdcf302ee6e"}


def small_data():
    return open_input(np.arange(40, dtype=np.float32).reshape(20, 2), chunk_rows=8)


def test_the_fingerprint_of_a_fit_is_the_one_checkpoints_recorded():
    estimator = KMeans(
        n_clusters=3, init=np.array([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]), random_state=np.int64(7), max_iter=5
    )
    assert fit_fingerprint(estimator, small_data(), None) == {
        "dtype": "float32",
        "estimator": "KMeans",
        "params": {
            "chunk_rows": None,
            "init": {"array": [3, 2], "dtype": "float64", "sha256": "a14eff7ebf5677582a104eb9d19d5e23"},
            "init_rounds": 5,
            "init_sample_size": None,
            "max_iter": 5,
            "max_time": None,
            "n_clusters": 3,
            "n_init": 1,
            "oversampling_factor": 2.0,
            "random_state": 7,
            "tol": 0.0001,
        },
        "row_chunks": ROW_CHUNKS,
        "shape": [20, 2],
        "source_dtype": "float32",
        "weighted": False,
    }


def test_parameters_that_are_objects_are_named_by_their_type():
    estimator = KernelKMeans(n_clusters=2, kernel="rbf", kernel_params={"gamma": 0.5}, random_state=3)
    fingerprint = fit_fingerprint(estimator, small_data(), np.ones(20))
    assert fingerprint["params"]["kernel_params"] == {"object": "dict"}
    assert fingerprint["weighted"] is True and fingerprint["row_chunks"] == ROW_CHUNKS


def test_content_digest_and_differences():
    summary = SimpleNamespace(
        mean=np.array([1.5, 2.5]),
        variance=np.array([0.25, 4.0]),
        max_abs=np.float32(39),
        total_weight=20.0,
        n_samples=20,
        row_hash=2**64 - 2,
    )
    assert content_digest(summary) == {"statistics": "f737eefa995d65732ab59d9844379e81", "rows": "fffffffffffffffe"}
    saved = {"estimator": "KMeans", "params": {"n_clusters": 16, "tol": 0.0001}, "shape": [20, 2]}
    now = {"estimator": "KMeans", "params": {"n_clusters": 12, "tol": 0.0001}, "shape": [20, 3]}
    assert differences(saved, now) == [
        "parameter n_clusters: 16 in the checkpoint, 12 now",
        "shape: [20, 2] in the checkpoint, [20, 3] now",
    ]
    assert differences(saved, saved) == []


def test_content_differences_say_what_differs():
    now = {"statistics": "a", "rows": "01"}
    assert "older format" in content_differences("f737eefa995d65732ab59d9844379e81", now)
    assert content_differences({"statistics": "b", "rows": "02"}, now).startswith("its values or their order differ")
    assert content_differences({"statistics": "a", "rows": "02"}, now).startswith(
        "the rows differ with the same mean, variance, extremes and weight"
    )
