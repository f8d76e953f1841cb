"""The command line on real Zarr stores and real Dask clusters: embedded (in a subprocess) and connected."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import click
import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from distributed import Client, LocalCluster

import daskmeans
from daskmeans import cli
from daskmeans.datasets import make_blobs_zarr
from daskmeans.demo import recovered_centers
from daskmeans.plots import plot_energy_curves

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SEED = 4
N_SAMPLES, N_FEATURES, N_CLUSTERS = 20_000, 8, 5


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def client(cluster):
    with Client(cluster) as client:
        yield client


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A blobs group (arrays X, y, centers) shared by the module; tests never write into it."""
    path = tmp_path_factory.mktemp("data") / "blobs.zarr"
    make_blobs_zarr(path, N_SAMPLES, N_FEATURES, N_CLUSTERS, chunk_rows=4000, random_state=1)
    return str(path)


def environment():
    """This environment (so the worktree stays on the path), without a scheduler address from outside."""
    return {key: value for key, value in os.environ.items() if key != "DASK_SCHEDULER_ADDRESS"}


def run_module(*args, cwd=None, timeout=240):
    """``python -m daskmeans ARGS`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "daskmeans", *map(str, args)],
        capture_output=True,
        text=True,
        env=environment(),
        cwd=cwd,
        timeout=timeout,
    )


def invoke(*args, env=None):
    """Run the CLI in this process (fast: no interpreter or cluster start-up when --scheduler is given)."""
    runner = CliRunner(env={"DASK_SCHEDULER_ADDRESS": None, **(env or {})})
    return runner.invoke(cli.main, [str(a) for a in args], catch_exceptions=True)


def assert_user_error(result, *fragments, exit_code=1):
    """Exit status non-zero, one clear line on stderr, no traceback."""
    assert result.exit_code == exit_code, (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in error_lines[0], error_lines[0]
    return error_lines[0]


@pytest.mark.slow
def test_help_through_python_dash_m_and_dask():
    result = run_module("--help")
    assert result.returncode == 0, result.stderr
    for command in ("make-data", "fit", "predict", "info", "demo"):
        assert command in result.stdout
    through_dask = subprocess.run(
        [sys.executable, "-m", "dask", "daskmeans", "fit", "--help"],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=120,
    )
    assert through_dask.returncode == 0, through_dask.stderr
    assert "dask daskmeans fit [OPTIONS] INPUT" in through_dask.stdout


@pytest.mark.slow
def test_end_to_end_on_an_embedded_cluster(tmp_path, client):
    """make-data -> fit -> predict -> info, each a separate process; fit and predict start their own cluster."""
    made = run_module(
        "make-data",
        "blobs.zarr",
        "--samples",
        30_000,
        "--features",
        6,
        "--clusters",
        4,
        "--chunk-rows",
        5000,
        "--seed",
        2,
        "--json",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    made = json.loads(made.stdout)
    assert made["n_samples"] == 30_000 and made["chunks"] == [5000, 6] and made["seed"] == 2

    fitted = run_module(
        "fit",
        "blobs.zarr",
        "--array",
        "X",
        "-k",
        4,
        "--seed",
        SEED,
        "--out",
        "model.zarr",
        "--labels",
        "blobs.zarr/labels",
        "--workers",
        2,
        "--threads-per-worker",
        1,
        "--memory-limit",
        "1GiB",
        "--json",
        cwd=tmp_path,
    )
    assert fitted.returncode == 0, fitted.stderr
    assert "k-means" in fitted.stderr  # the progress bar
    summary = json.loads(fitted.stdout)  # stdout is one JSON object and nothing else
    assert summary["n_samples"] == 30_000 and summary["n_features"] == 6 and summary["n_clusters"] == 4
    assert summary["workers"] == 2 and summary["algorithm"] == "kmeans"
    assert summary["stop_reason"] in ("converged", "max_iter") and summary["n_iter"] >= 1
    assert summary["energy"] == pytest.approx(summary["inertia"] / 30_000)

    # The CLI's model is the in-process estimator's model for the same seed (here on another cluster).
    model = daskmeans.load(tmp_path / "model.zarr")
    reference = daskmeans.KMeans(n_clusters=4, random_state=SEED, client=client).fit(
        daskmeans.open_input(str(tmp_path / "blobs.zarr"), array="X")
    )
    np.testing.assert_allclose(model.cluster_centers_, reference.cluster_centers_, rtol=1e-5, atol=1e-5)
    assert summary["inertia"] == pytest.approx(reference.inertia_, rel=1e-6)
    assert summary["n_iter"] == reference.n_iter_

    group = zarr.open_group(store=str(tmp_path / "blobs.zarr"), mode="r")
    fit_labels = group["labels"][...]
    np.testing.assert_array_equal(fit_labels, reference.labels_.compute())

    predicted = run_module(
        "predict",
        "model.zarr",
        "blobs.zarr",
        "--array",
        "X",
        "--labels",
        "predicted.zarr",
        "--workers",
        2,
        "--threads-per-worker",
        1,
        cwd=tmp_path,
    )
    assert predicted.returncode == 0, predicted.stderr
    assert "Labelled 30,000 rows" in predicted.stdout
    np.testing.assert_array_equal(zarr.open_array(store=str(tmp_path / "predicted.zarr"), mode="r")[...], fit_labels)

    model_info = run_module("info", "model.zarr", "--json", cwd=tmp_path)
    assert model_info.returncode == 0, model_info.stderr
    model_info = json.loads(model_info.stdout)
    assert model_info["kind"] == "model" and model_info["estimator"] == "KMeans"
    assert model_info["n_clusters"] == 4 and model_info["n_features"] == 6
    assert model_info["inertia"] == pytest.approx(summary["inertia"])
    assert model_info["params"]["random_state"] == SEED
    assert model_info["daskmeans_version"] == daskmeans.__version__

    data_info = run_module("info", "blobs.zarr", cwd=tmp_path)
    assert data_info.returncode == 0, data_info.stderr
    assert "X         30,000 x 6 float32, chunks (5000, 6)" in data_info.stdout
    assert "labels" in data_info.stdout and "4 blobs, seed 2" in data_info.stdout


@pytest.mark.slow
def test_fit_on_a_running_scheduler_prints_a_summary(tmp_path, cluster, data):
    result = invoke(
        "fit",
        data,
        "--array",
        "X",
        "-k",
        N_CLUSTERS,
        "--seed",
        SEED,
        "--max-iter",
        50,
        "--scheduler",
        cluster.scheduler_address,
        "--out",
        tmp_path / "m.zarr",
    )
    assert result.exit_code == 0, result.output
    assert f"kmeans: k={N_CLUSTERS} on {data}/X (20,000 x 8 float32), 2 Dask workers" in result.stdout
    for field in ("energy", "inertia", "iterations", "time", "model"):
        assert f"  {field}" in result.stdout
    assert "k-means" in result.stderr  # progress bar over iterations
    model = daskmeans.load(tmp_path / "m.zarr")
    assert model.max_iter == 50 and model.random_state == SEED


@pytest.mark.slow
def test_fit_json_quiet_and_options_reach_the_estimator(tmp_path, cluster, data):
    result = invoke(
        "fit",
        data,
        "--array",
        "X",
        "-k",
        3,
        "--seed",
        9,
        "--init",
        "random",
        "--max-iter",
        2,
        "--max-time",
        100,
        "--scheduler",
        cluster.scheduler_address,
        "--quiet",
        "--json",
        "--out",
        tmp_path / "m.zarr",
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # --quiet: no bar
    summary = json.loads(result.stdout)
    assert summary["n_clusters"] == 3 and summary["n_iter"] <= 2 and summary["random_state"] == 9
    params = daskmeans.load(tmp_path / "m.zarr").get_params()
    assert params["init"] == "random" and params["max_iter"] == 2 and params["max_time"] == 100


@pytest.mark.slow
def test_existing_outputs_are_replaced_only_with_overwrite(tmp_path, cluster, data):
    model_path = tmp_path / "m.zarr"
    first = invoke(
        "fit",
        data,
        "--array",
        "X",
        "-k",
        2,
        "--seed",
        1,
        "--quiet",
        "--scheduler",
        cluster.scheduler_address,
        "--out",
        model_path,
    )
    assert first.exit_code == 0, first.output
    # An unreachable scheduler proves the check comes first: the message is about the output, not the scheduler.
    again = invoke(
        "fit", data, "--array", "X", "-k", 3, "--quiet", "--scheduler", "tcp://127.0.0.1:1", "--out", model_path
    )
    assert_user_error(again, "exists already", "--overwrite")
    assert daskmeans.load(model_path).n_clusters == 2
    labels_exist = invoke(
        "fit", data, "--array", "X", "-k", 3, "--quiet", "--scheduler", "tcp://127.0.0.1:1", "--labels", model_path
    )
    assert_user_error(labels_exist, "exists already")
    replaced = invoke(
        "fit",
        data,
        "--array",
        "X",
        "-k",
        3,
        "--seed",
        1,
        "--quiet",
        "--overwrite",
        "--scheduler",
        cluster.scheduler_address,
        "--out",
        model_path,
    )
    assert replaced.exit_code == 0, replaced.output
    assert daskmeans.load(model_path).n_clusters == 3
    assert sorted(os.listdir(tmp_path)) == ["m.zarr"]


@pytest.mark.slow
def test_predict_on_the_scheduler_named_by_the_environment(tmp_path, cluster, client, data):
    model = daskmeans.KMeans(n_clusters=N_CLUSTERS, random_state=0, client=client).fit(
        daskmeans.open_input(data, array="X")
    )
    model.save(tmp_path / "m.zarr")
    result = invoke(
        "predict",
        tmp_path / "m.zarr",
        data,
        "--array",
        "X",
        "--labels",
        tmp_path / "l.zarr",
        "--json",
        env={"DASK_SCHEDULER_ADDRESS": cluster.scheduler_address},
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n_samples"] == N_SAMPLES
    # The address came from the environment, as if given with --scheduler:
    sized = invoke(
        "predict",
        tmp_path / "m.zarr",
        data,
        "--array",
        "X",
        "--labels",
        tmp_path / "l2.zarr",
        "--workers",
        2,
        env={"DASK_SCHEDULER_ADDRESS": cluster.scheduler_address},
    )
    assert_user_error(sized, "--workers", "cannot be used with --scheduler")
    np.testing.assert_array_equal(
        zarr.open_array(store=str(tmp_path / "l.zarr"), mode="r")[...], model.labels_.compute()
    )


def test_info_of_a_single_array_and_of_npy(tmp_path, data):
    result = invoke("info", data, "--array", "X", "--json")
    assert result.exit_code == 0, result.output
    details = json.loads(result.stdout)
    assert [a["name"] for a in details["arrays"]] == ["X"]
    assert details["arrays"][0] == {
        "name": "X",
        "shape": [N_SAMPLES, N_FEATURES],
        "dtype": "float32",
        "chunks": [4000, N_FEATURES],
        "nbytes": N_SAMPLES * N_FEATURES * 4,
    }
    np.save(tmp_path / "d.npy", np.zeros((10, 3), dtype=np.uint8))
    result = invoke("info", tmp_path / "d.npy", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["arrays"][0]["shape"] == [10, 3]
    assert json.loads(result.stdout)["arrays"][0]["dtype"] == "uint8"


# -- every mistake a user can make: exit status non-zero, one line, no traceback, nothing written ---------------


def test_missing_input(tmp_path):
    result = invoke("fit", tmp_path / "nope.zarr", "-k", 2, "--out", tmp_path / "m.zarr")
    assert_user_error(result, "nope.zarr", "does not exist")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("k", ["0", "-3", "two"])
def test_bad_k_is_a_usage_error_with_status_1(data, k):
    result = invoke("fit", data, "--array", "X", "-k", k)
    assert result.exit_code == 1
    assert "Invalid value for '-k'" in result.stderr and "Traceback" not in result.output


def test_k_larger_than_the_data(tmp_path, data):
    result = invoke("fit", data, "--array", "X", "-k", N_SAMPLES + 1, "--scheduler", "tcp://127.0.0.1:1")
    assert_user_error(result, "-k 20001", "20,000 rows")


def test_bad_init_and_options_foreign_to_the_algorithm(data):
    result = invoke("fit", data, "--array", "X", "-k", 2, "--init", "kmeans-plus", "--scheduler", "tcp://127.0.0.1:1")
    assert_user_error(result, "init", "k-means||")


def test_unreachable_scheduler_fails_after_the_timeout(data):
    result = invoke(
        "fit", data, "--array", "X", "-k", 2, "--quiet", "--scheduler", "tcp://127.0.0.1:1", "--connect-timeout", 1
    )
    assert_user_error(result, "Could not connect", "tcp://127.0.0.1:1")


@pytest.mark.parametrize("address", ["notanaddress", "foo://host:1"])
def test_malformed_scheduler_address(data, address):
    result = invoke("fit", data, "--array", "X", "-k", 2, "--quiet", "--scheduler", address)
    assert_user_error(result, "Bad scheduler address", address)


def test_local_cluster_options_with_a_scheduler(data):
    result = invoke("fit", data, "--array", "X", "-k", 2, "--scheduler", "tcp://127.0.0.1:1", "--workers", 2)
    assert_user_error(result, "--workers", "cannot be used with --scheduler")


def test_bad_memory_limit(data):
    result = invoke("fit", data, "--array", "X", "-k", 2, "--memory-limit", "lots")
    assert_user_error(result, "--memory-limit 'lots'", "4GiB")


def test_group_with_several_arrays_needs_array(data):
    result = invoke("fit", data, "-k", 2, "--scheduler", "tcp://127.0.0.1:1")
    assert_user_error(result, "holding arrays", "--array")
    result = invoke("fit", data, "--array", "Z", "-k", 2)
    assert_user_error(result, "no array 'Z'")


def test_outputs_must_differ_from_each_other_and_from_the_input(tmp_path, data):
    result = invoke("fit", data, "--array", "X", "-k", 2, "--out", tmp_path / "o", "--labels", tmp_path / "o")
    assert_user_error(result, "--out", "is --labels")
    result = invoke("fit", data, "--array", "X", "-k", 2, "--labels", f"{data}/X", "--overwrite")
    assert_user_error(result, "--labels", "is the input data")


@pytest.mark.slow
def test_predict_with_n_probe_writes_the_approximate_labels(tmp_path, cluster, client, data):
    model = daskmeans.KMeans(n_clusters=N_CLUSTERS, random_state=0, client=client).fit(
        daskmeans.open_input(data, array="X")
    )
    model.save(tmp_path / "m.zarr")
    result = invoke(
        "predict",
        tmp_path / "m.zarr",
        data,
        "--array",
        "X",
        "--labels",
        tmp_path / "l.zarr",
        "--n-probe",
        1,
        "--json",
        "--scheduler",
        cluster.scheduler_address,
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n_probe"] == 1
    expected = model.predict(daskmeans.open_input(data, array="X"), n_probe=1).compute()
    np.testing.assert_array_equal(zarr.open_array(store=str(tmp_path / "l.zarr"), mode="r")[...], expected)
    refused = invoke(
        "predict",
        tmp_path / "m.zarr",
        data,
        "--array",
        "X",
        "--labels",
        tmp_path / "l2.zarr",
        "--n-probe",
        0,
        "--scheduler",
        cluster.scheduler_address,
    )
    assert_user_error(refused, "--n-probe")
    kernel = daskmeans.MiniBatchKernelKMeans(n_clusters=2, max_iter=2, random_state=0, client=client).fit(
        daskmeans.open_input(data, array="X")
    )
    kernel.save(tmp_path / "kernel.zarr")
    assert_user_error(
        invoke(
            "predict",
            tmp_path / "kernel.zarr",
            data,
            "--array",
            "X",
            "--labels",
            tmp_path / "l3.zarr",
            "--n-probe",
            2,
            "--scheduler",
            cluster.scheduler_address,
        ),
        "--n-probe",
        "MiniBatchKernelKMeans",
        "leave --n-probe out",
    )
    assert not (tmp_path / "l2.zarr").exists() and not (tmp_path / "l3.zarr").exists()


def test_output_folder_missing(tmp_path, data):
    result = invoke("fit", data, "--array", "X", "-k", 2, "--out", tmp_path / "no" / "m.zarr")
    assert_user_error(result, "does not exist")


def test_plain_file_as_input_model_or_info(tmp_path, data):
    text = tmp_path / "notes.txt"
    text.write_text("not data")
    assert_user_error(invoke("fit", text, "-k", 2), "is a file, not a Zarr store")
    assert_user_error(invoke("info", text), "is a file")
    assert_user_error(
        invoke("predict", text, data, "--array", "X", "--labels", tmp_path / "l.zarr"), "not a daskmeans model"
    )


def test_data_given_as_a_model(tmp_path, data):
    result = invoke("predict", data, data, "--array", "X", "--labels", tmp_path / "l.zarr")
    assert_user_error(result, "is not a daskmeans model")
    assert not (tmp_path / "l.zarr").exists()


@pytest.mark.slow
def test_predict_with_data_of_another_width(tmp_path, client, data):
    model = daskmeans.KMeans(n_clusters=2, random_state=0, client=client).fit(np.arange(60.0).reshape(20, 3))
    model.save(tmp_path / "m.zarr")
    result = invoke("predict", tmp_path / "m.zarr", data, "--array", "X", "--labels", tmp_path / "l.zarr")
    assert_user_error(result, "8 features", "fitted on 3")


@pytest.mark.slow
def test_info_of_nothing_and_of_a_model_with_array(tmp_path, client):
    assert_user_error(invoke("info", tmp_path / "nope"), "Nothing at")
    (tmp_path / "empty").mkdir()
    assert_user_error(invoke("info", tmp_path / "empty"), "neither a daskmeans model nor a Zarr store")
    model = daskmeans.KMeans(n_clusters=2, random_state=0, client=client).fit(np.arange(60.0).reshape(20, 3))
    model.save(tmp_path / "m.zarr")
    assert_user_error(invoke("info", tmp_path / "m.zarr", "--array", "X"), "is a model")


@pytest.mark.slow
def test_failed_fit_leaves_nothing_behind(tmp_path, cluster):
    values = np.ones((100, 2), dtype=np.float32)
    values[37, 1] = np.nan
    zarr.create_array(store=str(tmp_path / "nan.zarr"), data=values, chunks=(50, 2))
    result = invoke(
        "fit",
        tmp_path / "nan.zarr",
        "-k",
        2,
        "--quiet",
        "--scheduler",
        cluster.scheduler_address,
        "--out",
        tmp_path / "m.zarr",
        "--labels",
        tmp_path / "l.zarr",
    )
    assert_user_error(result, "NaN")
    assert sorted(os.listdir(tmp_path)) == ["nan.zarr"]


def test_make_data_refuses_to_overwrite(tmp_path):
    assert invoke("make-data", tmp_path / "b.zarr", "--samples", 100, "--features", 2, "--clusters", 2).exit_code == 0
    result = invoke("make-data", tmp_path / "b.zarr", "--samples", 100, "--features", 2, "--clusters", 2)
    assert_user_error(result, "exists already")
    result = invoke("make-data", tmp_path / "c.zarr", "--samples", 0, "--features", 2, "--clusters", 2)
    assert result.exit_code == 1 and "Invalid value for '--n-samples' / '--samples'" in result.stderr


# -- demo and plot ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_demo_makes_data_fits_and_plots(tmp_path):
    result = run_module(
        "demo", "--samples", 20_000, "--workers", 2, "--threads-per-worker", 1, "--quiet", "--json", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    out = tmp_path / "daskmeans-demo"
    assert summary["out_dir"] == "daskmeans-demo" and sorted(os.listdir(out)) == [
        "data.zarr",
        "energy.png",
        "model.zarr",
    ]
    plot = (out / "energy.png").read_bytes()
    assert plot.startswith(PNG_SIGNATURE) and len(plot) > 1024
    labels = zarr.open_array(store=str(out / "data.zarr" / "labels"), mode="r")
    assert labels.shape == (20_000,)
    assert summary["recovered_centers"] == summary["n_clusters"] == 20
    assert summary["energy"] == pytest.approx(summary["expected_energy"], rel=0.05)
    assert daskmeans.load(out / "model.zarr").n_clusters == 20
    # the plot's time axis starts when fit is called: input check, then seeding, then the iterations
    phases = [span["phase"] for span in summary["phases"]]
    assert phases[:3] == ["input check", "seeding", "iterations"]
    assert summary["phases"][0]["start"] == 0.0
    assert summary["phases"][-1]["end"] <= summary["fit_seconds"]

    again = run_module("demo", "--samples", 20_000, cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines()[-1].startswith("Error: ")
    assert "exists already" in again.stderr and "Traceback" not in again.stderr


def test_demo_output_folder_must_be_a_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    assert_user_error(invoke("demo", "--out", tmp_path / "file"), "is a file")
    assert_user_error(invoke("demo", "--out", tmp_path / "a" / "b"), "does not exist")


def test_demo_bad_options_are_usage_errors():
    for args in (["--cluster-std", "0"], ["--samples", "0"], ["--clusters", "30", "--samples", "20"]):
        result = invoke("demo", *args)
        assert result.exit_code in (1, 2) and "Error:" in result.stderr and "Traceback" not in result.output


def test_recovered_centers_matches_each_found_center_once():
    true_centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    found = np.array([[0.0, 10.2], [0.1, -0.1], [5.0, 0.0]])  # the third true center was missed
    assert recovered_centers(true_centers, found, radius=0.5) == 2
    assert recovered_centers(true_centers, found[[1, 1, 0]], radius=0.5) == 2  # one found center, one match
    assert recovered_centers(true_centers, true_centers[::-1], radius=1e-9) == 3


def test_plot_shades_and_labels_each_phase(tmp_path):
    from matplotlib.figure import Figure

    from daskmeans.plots import draw_phases

    phases = [
        {"phase": "input check", "start": 0.0, "end": 0.5},
        {"phase": "seeding", "start": 0.5, "end": 2.0},
        {"phase": "iterations", "start": 2.0, "end": 5.0},
        {"phase": "final pass", "start": 5.0, "end": 5.5},
    ]
    axes = Figure().add_subplot()
    draw_phases(axes, phases)
    assert [text.get_text() for text in axes.texts] == ["input check", "seeding", "final pass"]
    spans = [patch for patch in axes.patches if patch.get_label() == "seeding"]
    assert len(spans) == 1 and spans[0].get_x() == 0.5
    curve = [{"energy": 10.0, "wall_time": 2.0}, {"energy": 4.0, "wall_time": 3.0}]
    path = plot_energy_curves({"k-means": curve}, tmp_path / "phases.png", "phases", phases=phases)
    assert (tmp_path / "phases.png").read_bytes().startswith(PNG_SIGNATURE) and path.endswith("phases.png")


def test_plot_energy_curves(tmp_path):
    curves = {
        "lloyd": [{"energy": 10.0 / i, "wall_time": 0.1 * i} for i in range(1, 6)],
        "other": [{"energy": 8.0 / i, "wall_time": 0.15 * i} for i in range(1, 4)],
    }
    path = plot_energy_curves(curves, tmp_path / "curves.png", "two runs")
    assert path == str(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes().startswith(PNG_SIGNATURE)
    assert os.listdir(tmp_path) == ["curves.png"]
    with pytest.raises(ValueError, match="at least one curve"):
        plot_energy_curves({}, tmp_path / "x.png", "none")
    with pytest.raises(ValueError, match="without 'energy' or 'wall_time'"):
        plot_energy_curves({"bad": [{"energy": 1.0}]}, tmp_path / "x.png", "bad")
    assert os.listdir(tmp_path) == ["curves.png"]


# -- optional commands (bench) load on demand; only their absence is tolerated ------------------------------------


def test_lazy_command_is_listed_and_loaded_on_demand(tmp_path, monkeypatch):
    package = tmp_path / "extra_cli_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "command.py").write_text(
        textwrap.dedent("""
        import click

        @click.command("hello")
        def hello():
            click.echo("hello from a lazy command")
    """)
    )
    (package / "broken.py").write_text("import a_module_that_is_not_installed_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.LAZY_COMMANDS, "hello", ("extra_cli_pkg.command", "hello"))
    monkeypatch.setitem(cli.LAZY_COMMANDS, "ghost", ("extra_cli_pkg.missing.command", "ghost"))
    help_text = invoke("--help").stdout
    assert "hello" in help_text and "ghost" not in help_text
    assert invoke("hello").stdout == "hello from a lazy command\n"
    assert invoke("ghost").exit_code == 1  # absent module: no such command

    assert cli._module_exists("extra_cli_pkg.nothing_here") is False
    assert cli._module_exists("no_such_top_level_pkg.command") is False
    monkeypatch.setitem(cli.LAZY_COMMANDS, "broken", ("extra_cli_pkg.broken", "broken"))
    with pytest.raises(ModuleNotFoundError, match="a_module_that_is_not_installed_anywhere"):
        cli.main.get_command(click.Context(cli.main), "broken")


def test_bench_is_registered_exactly_when_its_module_exists():
    import importlib.util

    try:
        present = importlib.util.find_spec("daskmeans.bench.command") is not None
    except ModuleNotFoundError:
        present = False
    assert ("bench" in cli.main.list_commands(click.Context(cli.main))) == present
