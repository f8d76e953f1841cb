"""One plan per fit: every estimator resolves its data-dependent choices once, into an immutable plan with a reason
for each, that the fitted estimator keeps (``fit_plan_``) and shows; the algorithm reads it and decides nothing
again."""

from __future__ import annotations

import dataclasses
import json

import dask.array as da
import numpy as np
import pytest
from conftest import make_blobs

from daskmeans import KMeans
from daskmeans.algorithms import lloyd as lloyd_module
from daskmeans.algorithms.lloyd import LloydPlan, lloyd
from daskmeans.algorithms.plan import FitPlan, SeedingPlan
from daskmeans.algorithms.result import RunContext
from daskmeans.estimators import kmeans as kmeans_module
from daskmeans.registry import algorithm_names, make_estimator


@pytest.fixture(scope="module")
def blobs():
    X, _, _ = make_blobs(n=1200, d=4, k=5, spread=0.5, seed=2)
    return X


def test_a_plan_is_immutable_plain_data_with_its_reasons():
    plan = LloydPlan(
        scheme="elkan", n_groups=8, max_iter=5, seeding=SeedingPlan(sample_rows=100), reasons={"scheme": "asked for"}
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.scheme = "none"
    as_dict = plan.as_dict()
    assert as_dict["plan"] == "LloydPlan" and as_dict["scheme"] == "elkan"
    assert as_dict["reasons"] == {"scheme": "asked for"}
    assert as_dict["seeding"]["plan"] == "SeedingPlan" and as_dict["seeding"]["sample_rows"] == 100
    json.dumps(as_dict)
    assert "\n" not in plan.summary() and "scheme=elkan" in plan.summary()
    assert "scheme = 'elkan'  (asked for)" in str(plan)
    assert plan == dataclasses.replace(plan, reasons={})  # the reasons say why, they are not the choice


@pytest.mark.parametrize("name", algorithm_names())
def test_every_estimator_keeps_its_plan_with_reasons(name, blobs):
    model = make_estimator(name, n_clusters=5, random_state=0)
    if "max_iter" in model.get_params():
        model.set_params(max_iter=3)
    model.fit(blobs)
    plan = model.fit_plan_
    assert isinstance(plan, FitPlan)
    assert plan.reasons and set(plan.reasons) <= set(plan.choices())
    json.dumps(plan.as_dict())


def test_kmeans_resolves_its_bounds_once_per_fit(blobs, monkeypatch):
    X = np.random.default_rng(0).normal(size=(3000, 64)).astype(np.float32)
    calls = []
    for module in (kmeans_module, lloyd_module):
        original = module.choose_bounds
        monkeypatch.setattr(
            module, "choose_bounds", lambda *args, _original=original: calls.append(args) or _original(*args)
        )
    model = KMeans(32, algorithm="auto", max_iter=4, tol=0, random_state=0, driver_rows=0).fit(X)
    assert len(calls) == 1
    plan = model.fit_plan_
    assert plan.scheme in ("elkan", "yinyang") and plan.plain_iterations >= 1 and not plan.on_driver
    # the iterations ran as planned: plain ones first, then the plan's bounds
    assert [r["bounds"] for r in model.history_] == ["none"] * plan.plain_iterations + [plan.scheme] * (
        4 - plan.plain_iterations
    )
    assert plan.tol == 0 and plan.seeding.init == "k-means||" and plan.seeding.sample_rows == len(X)


def test_lloyd_runs_what_its_plan_says(blobs):
    array = da.from_array(blobs, chunks=400)
    centers = blobs[:5].copy()
    seen = []
    context = RunContext(total_weight=len(blobs), callback=seen.append)
    result = lloyd(array, centers, LloydPlan(scheme="hamerly", n_groups=1, plain_iterations=1, max_iter=3), context)
    assert [r["bounds"] for r in result.history] == ["none", "hamerly", "hamerly"]
    plain = lloyd(array, centers, LloydPlan(max_iter=3), RunContext(total_weight=len(blobs)))
    np.testing.assert_array_equal(plain.centers, result.centers)


def test_the_plan_is_shown_above_the_progress_bars(blobs, capsys):
    KMeans(5, max_iter=2, random_state=0, progress=True).fit(blobs)
    err = capsys.readouterr().err
    assert "k-means plan: scheme=none" in err and "seeding=(init=k-means||" in err
    KMeans(5, max_iter=2, random_state=0).fit(blobs)
    assert "plan:" not in capsys.readouterr().err
