"""The command line as a new user meets it: every algorithm through fit and predict, each algorithm's own
parameters (``--param``), consistent option names, exit status 1 and JSON errors, a fast start."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import zarr
from test_cli import assert_user_error, environment, invoke, run_module

from daskmeans.datasets import make_blobs_zarr
from daskmeans.engine.cluster import ClusterSpec
from daskmeans.exceptions import InvalidParameterError
from daskmeans.registry import algorithm_names

#: short runs of every algorithm (``--max-iter`` counts epochs for VRKM)
SHORT = {
    "kernel-minibatch": ["--param", "batch_size=128"],
    "kernel-minibatch-untruncated": ["--param", "batch_size=128"],
}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("small") / "blobs.zarr"
    make_blobs_zarr(path, 3000, 5, 4, chunk_rows=1000, random_state=3)
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", algorithm_names())
def test_every_algorithm_fits_and_predicts_from_the_command_line(tmp_path, small, algorithm):
    fitted = invoke(
        "fit",
        small,
        "--array",
        "X",
        "-k",
        4,
        "--algorithm",
        algorithm,
        "--random-state",
        1,
        "--max-iter",
        5,
        "--quiet",
        "--json",
        "--out",
        tmp_path / "model.zarr",
        *SHORT.get(algorithm, []),
    )
    assert fitted.exit_code == 0, (fitted.output, fitted.exception)
    summary = json.loads(fitted.stdout)
    assert summary["algorithm"] == algorithm and np.isfinite(summary["inertia"]) and summary["inertia"] > 0
    predicted = invoke(
        "predict", tmp_path / "model.zarr", small, "--array", "X", "--labels", tmp_path / "labels.zarr", "--json"
    )
    assert predicted.exit_code == 0, (predicted.output, predicted.exception)
    labels = zarr.open_array(str(tmp_path / "labels.zarr"), mode="r")[:]
    assert labels.shape == (3000,) and 0 <= labels.min() and labels.max() < 4


def test_param_reaches_the_estimator_and_the_saved_model(tmp_path, small):
    result = invoke(
        "fit",
        small,
        "--array",
        "X",
        "-k",
        4,
        "--algorithm",
        "nmbatch",
        "--quiet",
        "--json",
        "--param",
        "bounds=hamerly",
        "--param",
        "tol=0.001",
        "--param",
        "initial_batch_size=500",
        "--out",
        tmp_path / "m.zarr",
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["params"] == {"bounds": "hamerly", "tol": 0.001, "initial_batch_size": 500}
    info = json.loads(invoke("info", tmp_path / "m.zarr", "--json").stdout)
    assert info["params"]["bounds"] == "hamerly" and info["params"]["initial_batch_size"] == 500


def test_max_iter_caps_vrkm_epochs(small):
    result = invoke(
        "fit", small, "--array", "X", "-k", 4, "--algorithm", "vrkm++", "--max-iter", 2, "--quiet", "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["params"] == {"max_epochs": 2}
    assert json.loads(result.stdout)["n_iter"] <= 2


def test_bad_params_say_what_the_algorithm_takes(small):
    line = assert_user_error(
        invoke("fit", small, "--array", "X", "-k", 4, "--param", "batch_size=10"),
        "--param batch_size",
        "--algorithm kmeans has no such parameter",
    )
    assert "max_iter" in line and "n_clusters" not in line
    assert_user_error(invoke("fit", small, "--array", "X", "-k", 4, "--param", "n_clusters=3"), "-k/--n-clusters")
    assert_user_error(invoke("fit", small, "--array", "X", "-k", 4, "--param", "tol"), "NAME=VALUE")
    assert_user_error(invoke("fit", small, "--array", "X", "-k", 4, "--param", "tol=-1"), "tol")
    assert_user_error(invoke("fit", small, "--array", "X", "-k", 4, "--algorithm", "vc-gmm", "--init", "nope"), "init")


def test_option_names_agree_across_commands(tmp_path):
    long_names = invoke(
        "make-data",
        tmp_path / "a.zarr",
        "--n-samples",
        200,
        "--n-features",
        3,
        "--n-clusters",
        2,
        "--random-state",
        5,
        "--json",
    )
    old_names = invoke(
        "make-data", tmp_path / "b.zarr", "--samples", 200, "--features", 3, "--clusters", 2, "--seed", 5, "--json"
    )
    assert long_names.exit_code == 0 and old_names.exit_code == 0, (long_names.output, old_names.output)
    a = zarr.open_array(str(tmp_path / "a.zarr" / "X"), mode="r")[:]
    b = zarr.open_array(str(tmp_path / "b.zarr" / "X"), mode="r")[:]
    np.testing.assert_array_equal(a, b)
    for command in ("fit", "demo", "make-data"):
        help_text = invoke(command, "--help").stdout
        assert "--n-clusters" in help_text and "--random-state" in help_text


def test_errors_are_json_with_json(tmp_path, small):
    usage = invoke("fit", small, "-k", 0, "--json")
    assert usage.exit_code == 1
    assert json.loads(usage.stdout) == {
        "error": usage.stdout and json.loads(usage.stdout)["error"],
        "type": "UsageError",
        "exit_status": 1,
    }
    assert "-k" in json.loads(usage.stdout)["error"]
    missing = invoke("fit", tmp_path / "nope.zarr", "-k", 2, "--json")
    assert missing.exit_code == 1 and json.loads(missing.stdout)["error"].count("nope.zarr") >= 1
    assert "Traceback" not in missing.output


def test_errors_speak_the_command_line(tmp_path, small):
    (tmp_path / "m.zarr").mkdir()
    line = assert_user_error(
        invoke("fit", small, "--array", "X", "-k", 4, "--out", tmp_path / "m.zarr"),
        "--out",
        "exists already",
        "--overwrite",
    )
    assert "overwrite=True" not in line


def test_small_inputs_run_on_threads_unless_the_cluster_is_sized():
    assert not ClusterSpec().local_processes(10 * 2**20)
    assert ClusterSpec().local_processes(10 * 2**30)
    assert ClusterSpec().local_processes(None)
    assert ClusterSpec(workers=2).local_processes(10 * 2**20)


def test_local_workers_can_be_chosen(tmp_path, small):
    assert not ClusterSpec(workers=2, threads_per_worker=1, local_workers="threads").local_processes(10 * 2**30)
    assert ClusterSpec(local_workers="processes").local_processes(10 * 2**20)
    assert ClusterSpec(workers=2, threads_per_worker=3, local_workers="threads").local_threads() == 6
    with pytest.raises(InvalidParameterError, match="--local-workers"):
        ClusterSpec(scheduler="tcp://127.0.0.1:1", local_workers="threads").validate()
    done = invoke(
        "fit",
        small,
        "--array",
        "X",
        "-k",
        4,
        "--workers",
        2,
        "--threads-per-worker",
        1,
        "--local-workers",
        "threads",
        "--json",
        "--quiet",
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["workers"] == 1, "one threaded worker holding both threads"


@pytest.mark.slow
def test_the_threaded_scheduler_runs_a_fit_without_a_cluster(tmp_path, small):
    """``--local-workers scheduler``: no cluster, the same result as on a threaded local cluster, labels written."""
    fits = {}
    for mode in ("scheduler", "threads"):
        done = invoke(
            "fit",
            small,
            "--array",
            "X",
            "-k",
            4,
            "--algorithm",
            "nmbatch",
            "--random-state",
            2,
            "--workers",
            1,
            "--threads-per-worker",
            2,
            "--local-workers",
            mode,
            "--labels",
            tmp_path / f"{mode}.zarr",
            "--out",
            tmp_path / f"{mode}-model.zarr",
            "--json",
            "--quiet",
        )
        assert done.exit_code == 0, done.output
        fits[mode] = json.loads(done.output)
    assert fits["scheduler"]["workers"] is None and fits["threads"]["workers"] == 1
    assert fits["scheduler"]["inertia"] == fits["threads"]["inertia"]
    predicted = invoke(
        "predict",
        tmp_path / "threads-model.zarr",
        small,
        "--array",
        "X",
        "--labels",
        tmp_path / "predicted.zarr",
        "--local-workers",
        "scheduler",
        "--json",
    )
    assert predicted.exit_code == 0, predicted.output
    labels = [
        zarr.open_array(str(tmp_path / f"{name}.zarr"), mode="r")[:] for name in ("scheduler", "threads", "predicted")
    ]
    np.testing.assert_array_equal(labels[0], labels[1])
    np.testing.assert_array_equal(labels[0], labels[2])
    plain = invoke("fit", small, "--array", "X", "-k", 4, "--local-workers", "scheduler")
    assert plain.exit_code == 0 and "Dask's threaded scheduler" in plain.stdout, plain.output


@pytest.mark.slow
def test_the_demo_runs_on_the_threaded_scheduler(tmp_path):
    done = run_module("demo", "--samples", 20_000, "--local-workers", "scheduler", "--quiet", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["recovered_centers"] == summary["n_clusters"] == 20
    assert sorted(os.listdir(tmp_path / "daskmeans-demo")) == ["data.zarr", "energy.png", "model.zarr"]


def test_the_threaded_scheduler_refuses_a_worker_memory_limit(tmp_path, small):
    assert_user_error(
        invoke(
            "fit",
            small,
            "--array",
            "X",
            "-k",
            4,
            "--local-workers",
            "scheduler",
            "--memory-limit",
            "1GiB",
            "--out",
            tmp_path / "m.zarr",
        ),
        "--memory-limit",
        "--local-workers scheduler",
    )
    assert not (tmp_path / "m.zarr").exists()
    with pytest.raises(InvalidParameterError, match="'nope' is not one of auto, processes, threads, scheduler"):
        ClusterSpec(local_workers="nope").validate()


#: Heavy modules that `daskmeans --help` and `daskmeans info` must not import (they cost seconds).
HEAVY = ("dask.array", "distributed", "numba", "xarray", "pandas", "matplotlib")


def modules_loaded_by(args, cwd):
    code = (
        "import sys\nfrom daskmeans import cli\n"
        f"try:\n    cli.main({list(map(str, args))!r})\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment(), cwd=cwd, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.mark.slow
def test_help_and_info_import_nothing_heavy(tmp_path, small):
    model = tmp_path / "model.zarr"
    assert invoke("fit", small, "--array", "X", "-k", 4, "--quiet", "--out", model).exit_code == 0
    for args in (["--help"], ["fit", "--help"], ["info", small], ["info", model]):
        heavy = [name for name in HEAVY if name in modules_loaded_by(args, tmp_path)]
        assert not heavy, (args, heavy)


def test_stores_daskmeans_writes_open_with_xarray(tmp_path):
    xr = pytest.importorskip("xarray")
    store = tmp_path / "blobs.zarr"
    assert (
        invoke("make-data", store, "--n-samples", 500, "--n-features", 3, "-k", 2, "--chunk-rows", 100).exit_code == 0
    )
    assert invoke("fit", store, "--array", "X", "-k", 2, "--quiet", "--labels", store / "labels").exit_code == 0
    dataset = xr.open_zarr(store)
    assert dataset["X"].dims == ("sample", "feature") and dataset["labels"].dims == ("sample",)
    assert dataset["y"].dims == ("sample",) and dataset["centers"].dims == ("cluster", "feature")
    assert dataset.sizes["sample"] == 500 and int(dataset["labels"].max()) <= 1


@pytest.mark.slow
def test_fit_says_what_runs_after_the_iterations(tmp_path, small):
    result = invoke(
        "fit", small, "--array", "X", "-k", 4, "--labels", tmp_path / "labels.zarr", "--out", tmp_path / "model.zarr"
    )
    assert result.exit_code == 0, result.output
    assert "labelling 3,000 rows" in result.stderr and "saving the model" in result.stderr
    quiet = invoke("fit", small, "--array", "X", "-k", 4, "--quiet", "--labels", tmp_path / "l2.zarr")
    assert quiet.exit_code == 0 and "labelling" not in quiet.stderr
