"""Record the golden fits: the centers every registered algorithm gives on a fixed dataset and seed, and one
saved model per estimator class. Run from the repository root with the code whose behaviour is the reference:

    python tests/data/make_golden.py            # everything
    python tests/data/make_golden.py vrkm vrkm++  # only these entries of golden_centers.npz

It writes ``tests/data/golden_centers.npz``, ``tests/data/models/<name>.zarr`` and the saved models' centers
``tests/data/golden_model_centers.npz``; ``tests/test_golden.py`` checks that the current code gives bitwise the
same centers and still loads the models. A deliberate change of one algorithm's results re-records only its entry
of ``golden_centers.npz`` (the saved models, and so their centers, stay as they were written).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

import daskmeans
from daskmeans.registry import algorithm_names, make_estimator

HERE = Path(__file__).resolve().parent

#: keyword arguments of each golden fit, beyond ``n_clusters`` and ``random_state``
GOLDEN_PARAMS = {
    "kmeans": {"max_iter": 4},
    "kmeans-lloyd": {"max_iter": 4},
    "vrkm": {"max_epochs": 2},
    "vrkm++": {"max_epochs": 2},
    "vrkm++-reference": {"max_epochs": 2},
    "nmbatch": {"max_iter": 8},
    "minibatch": {"max_iter": 5, "batch_size": 256},
    "minibatch-rows": {"max_iter": 5, "batch_size": 256},
    "vc-gmm": {"max_iter": 4, "coreset_size": 800},
    "kernel-minibatch": {"max_iter": 20, "batch_size": 256, "tau": 50},
    "kernel-minibatch-untruncated": {"max_iter": 20, "batch_size": 256},
    "kernel-kmeans": {"max_iter": 10},
}

#: the algorithm whose model stands for each estimator class in tests/data/models
MODEL_OF_CLASS = ("kmeans", "vrkm++", "nmbatch", "minibatch", "vc-gmm", "kernel-minibatch", "kernel-kmeans")


def golden_data():
    """3000 x 6 float64 Gaussian blobs around 7 centers, the same on every machine."""
    rng = np.random.default_rng(20261123)
    centers = rng.uniform(-10, 10, size=(7, 6))
    labels = rng.integers(0, 7, size=3000)
    return centers[labels] + 3.0 * rng.standard_normal((3000, 6))


def golden_fit(name):
    model = make_estimator(name, n_clusters=7, random_state=3, chunk_rows=700, **GOLDEN_PARAMS[name])
    return model.fit(golden_data())


def main(names=()):
    """Record every golden fit and model, or with ``names`` only those entries of ``golden_centers.npz``."""
    if names:
        unknown = sorted(set(names) - set(algorithm_names()))
        if unknown:
            raise SystemExit(f"unknown algorithms {unknown}; choose from {algorithm_names()}")
        with np.load(HERE / "golden_centers.npz") as recorded:
            centers = dict(recorded)
        for name in names:
            centers[name] = np.asarray(golden_fit(name).cluster_centers_)
            print(name, "re-recorded")
        np.savez(HERE / "golden_centers.npz", **centers)
        return
    centers = {}
    models = HERE / "models"
    shutil.rmtree(models, ignore_errors=True)
    models.mkdir()
    for name in algorithm_names():
        model = golden_fit(name)
        centers[name] = np.asarray(model.cluster_centers_)
        if name in MODEL_OF_CLASS:
            model.save(str(models / f"{name}.zarr"))
        print(name, centers[name].shape, float(model.inertia_))
    np.savez(HERE / "golden_centers.npz", **centers)
    np.savez(HERE / "golden_model_centers.npz", **{name: centers[name] for name in MODEL_OF_CLASS})
    print("daskmeans", daskmeans.__version__)


if __name__ == "__main__":
    main(sys.argv[1:])
