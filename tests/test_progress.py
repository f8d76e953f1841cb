"""Progress of a fit: one bar per phase (seeding, iterations, final pass) whose totals, units and counts agree with
``history_``; no remaining-time estimate when the total is only ``max_iter``; the phases kept in ``fit_phases_``
and drawn by the demo's plot."""

from __future__ import annotations

import re

import numpy as np
import pytest

from daskmeans import KMeans, MiniBatchKMeans
from daskmeans.algorithms.init import initial_centers
from daskmeans.plots import energy_timeline
from daskmeans.registry import make_estimator
from tests.conftest import make_blobs

#: tqdm's remaining-time field: "[00:01<00:03" (elapsed<remaining).
REMAINING = re.compile(r"\[\d\d:\d\d<")


def bar_lines(stderr: str, label: str) -> list[str]:
    """Every state a bar whose label starts with ``label`` was drawn in (tqdm redraws with carriage returns)."""
    return [line.strip() for line in re.split(r"[\r\n]", stderr) if line.strip().startswith(label)]


def phases_of(model):
    return {phase["phase"]: phase for phase in model.fit_phases_}


@pytest.fixture(scope="module")
def data():
    X, _, _ = make_blobs(n=6000, d=4, k=5, spread=0.5, seed=3)
    return X


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, params, unit, label",
    [
        ("kmeans", {}, "iterations", "k-means iterations"),
        ("nmbatch", {}, "iterations", "nmbatch iterations"),
        ("vrkm++", {}, "epochs", "vrkm++ epochs"),
    ],
)
def test_iteration_bar_counts_the_history_against_a_cap(data, capsys, name, params, unit, label):
    model = make_estimator(name, n_clusters=5, random_state=0, progress=True, **params).fit(data)
    err = capsys.readouterr().err
    phases = phases_of(model)
    iterations = phases["iterations"]
    cap = model.max_epochs if name == "vrkm++" else model.max_iter
    assert iterations["unit"] == unit and iterations["count"] == len(model.history_)
    assert iterations["total"] == cap and iterations["total_is_cap"]
    lines = bar_lines(err, label)
    assert lines, err
    assert lines[-1].startswith(f"{label}: {len(model.history_)} of at most {cap} {unit}")
    assert f"energy={model.history_[-1]['energy']:.6g}" in lines[-1]
    assert not any(REMAINING.search(line) for line in lines), "a cap must not give a remaining time"
    # seeding: its own bar over the passes of k-means||, with the total it reached
    seeding = phases["seeding"]
    assert seeding["unit"] == "passes" and seeding["count"] == seeding["total"] == 2 + 2 * model.init_rounds
    seeding_lines = bar_lines(err, label.split()[0] + " seeding (k-means||)")
    assert seeding_lines and f"{seeding['total']}/{seeding['total']} passes" in seeding_lines[-1]
    assert seeding["end"] <= iterations["start"] <= model.history_[0]["wall_time"]


def test_minibatch_bar_advances_by_steps_with_the_time_budget(data, capsys):
    model = MiniBatchKMeans(5, batch_size=256, max_iter=2, max_time=600, random_state=0, progress=True).fit(data)
    err = capsys.readouterr().err
    iterations = phases_of(model)["iterations"]
    cap = 2 * data.shape[0] // 256
    assert iterations["unit"] == "steps" and iterations["total"] == cap
    assert iterations["count"] == model.history_[-1]["steps"] == model.n_steps_
    lines = bar_lines(err, "mini-batch k-means steps")
    assert lines[-1].startswith(f"mini-batch k-means steps: {model.n_steps_} of at most {cap} steps, max_time 600 s")
    assert not any(REMAINING.search(line) for line in lines)


def test_final_pass_has_its_own_line_and_span(data, capsys):
    model = KMeans(5, init="random", max_iter=1, random_state=0, progress=True).fit(data)
    assert model.stop_reason_ == "max_iter"
    capsys.readouterr()
    inertia = model.inertia_  # the centers moved in the last iteration: one more pass, now
    err = capsys.readouterr().err
    assert bar_lines(err, "KMeans final pass (inertia_ of the final centers)")
    final = phases_of(model)["final pass"]
    assert final["start"] >= model.history_[-1]["wall_time"] and final["end"] >= final["start"]
    assert inertia == model.inertia_ and len(model.fit_phases_) == 3  # made once


def test_n_init_runs_each_have_a_bar_and_a_final_pass(data, capsys):
    model = KMeans(5, n_init=2, max_iter=1, init="k-means++", random_state=0, progress=True).fit(data)
    err = capsys.readouterr().err
    assert [p["phase"] for p in model.fit_phases_] == ["seeding", "iterations", "final pass"] * 2
    assert bar_lines(err, "k-means run 2/2: 1 of at most 1 iterations")
    assert bar_lines(err, "k-means seeding (k-means++)")


def test_progress_off_shows_nothing_but_keeps_the_phases(data, capsys):
    model = KMeans(5, random_state=0).fit(data)
    assert capsys.readouterr().err == ""
    assert [p["phase"] for p in model.fit_phases_] == ["seeding", "iterations"]


def test_progress_callable_gets_only_history_records(data):
    seen = []
    model = KMeans(5, random_state=0, progress=seen.append).fit(data)
    assert seen == model.history_  # no phase records: callbacks keyed on "iteration" keep working


def test_results_do_not_depend_on_progress(data):
    quiet = make_estimator("minibatch", n_clusters=5, random_state=1, max_iter=2).fit(data)
    shown = make_estimator("minibatch", n_clusters=5, random_state=1, max_iter=2, progress=True).fit(data)
    np.testing.assert_array_equal(quiet.cluster_centers_, shown.cluster_centers_)


@pytest.mark.parametrize(
    "init, expected", [("k-means||", 12), ("k-means++", 1), ("random", 1), ("afk-mc2", 4), ("two-level", 3)]
)
def test_seeding_reports_its_passes(data, init, expected):
    import dask.array as da

    calls = []
    _, passes = initial_centers(
        da.from_array(data, chunks=1000),
        5,
        init,
        7,
        on_progress=lambda done, total, note=None: calls.append((done, total)),
    )
    assert passes == expected
    assert calls[-1] == (passes, passes)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


def test_vc_gmm_and_kernel_phases(data, capsys):
    gmm = make_estimator("vc-gmm", n_clusters=5, random_state=0, progress=True).fit(data)
    assert [p["phase"] for p in gmm.fit_phases_] == ["seeding", "iterations"]
    assert phases_of(gmm)["iterations"]["count"] == len(gmm.history_)
    gmm.inertia_  # noqa: B018 (the quantization error: a final pass, made on first access)
    assert [p["phase"] for p in gmm.fit_phases_] == ["seeding", "iterations", "final pass"]
    kernel = make_estimator("kernel-minibatch", n_clusters=5, random_state=0, max_iter=20, progress=True).fit(data)
    iterations = phases_of(kernel)["iterations"]
    assert iterations["unit"] == "steps" and iterations["count"] == len(kernel.history_) == kernel.n_iter_
    err = capsys.readouterr().err
    assert bar_lines(err, "vc-GMM seeding") and bar_lines(err, "mini-batch kernel k-means steps")


def test_energy_timeline_starts_at_the_end_of_seeding(data):
    import time

    started = time.perf_counter()
    model = KMeans(5, init="random", max_iter=1, random_state=0).fit(data)
    model.inertia_  # noqa: B018 (the final pass)
    timeline = energy_timeline(model, fit_started=started)
    spans = {span["phase"]: span for span in timeline["phases"]}
    assert list(spans) == ["input check", "seeding", "iterations", "final pass"]
    assert spans["input check"]["start"] == 0.0 and spans["input check"]["end"] <= spans["seeding"]["start"]
    points = timeline["points"]
    assert points[0]["wall_time"] == pytest.approx(spans["seeding"]["end"])
    assert points[0]["energy"] == model.history_[0]["energy"]  # the seeds' energy
    assert len(points) == len(model.history_) + 1
    assert points[-1]["energy"] == pytest.approx(model.inertia_ / data.shape[0])
