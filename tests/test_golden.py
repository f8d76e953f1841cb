"""The golden fits: every registered algorithm gives bitwise the centers recorded before the package's redesign,
and the models saved then still load (``tests/data/make_golden.py`` recorded both)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import daskmeans
from daskmeans.registry import algorithm_names

DATA = Path(__file__).resolve().parent / "data"


def _maker():
    spec = importlib.util.spec_from_file_location("make_golden", DATA / "make_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()
GOLDEN = dict(np.load(DATA / "golden_centers.npz"))
#: centers of the saved models (they differ from GOLDEN where a fit was re-recorded after a deliberate change)
MODEL_CENTERS = {**GOLDEN, **dict(np.load(DATA / "golden_model_centers.npz"))}


def test_every_algorithm_has_a_golden_record():
    assert sorted(GOLDEN) == sorted(algorithm_names())


@pytest.mark.parametrize("name", algorithm_names())
def test_fit_gives_the_recorded_centers_bitwise(name):
    model = MAKER.golden_fit(name)
    np.testing.assert_array_equal(np.asarray(model.cluster_centers_), GOLDEN[name])


@pytest.mark.parametrize("name", MAKER.MODEL_OF_CLASS)
def test_model_saved_before_the_redesign_loads_and_predicts(name):
    model = daskmeans.load(str(DATA / "models" / f"{name}.zarr"))
    np.testing.assert_array_equal(np.asarray(model.cluster_centers_), MODEL_CENTERS[name])
    X = MAKER.golden_data()[:500]
    labels = np.asarray(model.predict(X))
    assert labels.shape == (500,)
    assert labels.min() >= 0 and labels.max() < 7
