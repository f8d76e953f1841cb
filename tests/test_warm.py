"""``daskmeans warm`` and :func:`daskmeans.warm_up`: after a warm-up, no fit compiles a kernel, on the driver or on
a worker (Numba's own cache statistics tell: a signature not found in the on-disk cache is compiled)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import daskmeans
from daskmeans import cli
from daskmeans.warm import INPUT_DTYPES, cache_counts, check_dtypes, compiled_kernels

ROOT = Path(__file__).resolve().parents[1]


def environment(cache_dir):
    """This environment with its own Numba cache (the workers of a local cluster inherit it) and no scheduler."""
    env = {key: value for key, value in os.environ.items() if key != "DASK_SCHEDULER_ADDRESS"}
    env["NUMBA_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def run_python(args, cache_dir, tmp_path):
    """``python ARGS`` in a new process with the Numba cache ``cache_dir``; the JSON of its last line of output."""
    done = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=environment(cache_dir), cwd=tmp_path, timeout=900
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def warm_command(cache_dir, tmp_path):
    """The report of ``daskmeans warm --json`` for the default dtypes and int16, with the Numba cache ``cache_dir``."""
    return run_python(
        ["-m", "daskmeans", "warm", "--json", "--dtypes", "float32,float64,uint8,int16"], cache_dir, tmp_path
    )


#: Fits a user makes, on sizes, dtypes and options the warm-up's own fits do not use, on worker processes (the
#: driver runs the iterations of small data, the workers the passes of larger data), with predict, transform,
#: score and sample weights; then the signatures compiled on the driver and on each worker.
FITS_AFTER_WARMING = r"""
import json
import numpy as np
import dask.array as da
from distributed import Client, LocalCluster
from daskmeans import (CoresetGaussianMixture, KMeans, KernelKMeans, MiniBatchKMeans, MiniBatchKernelKMeans,
                       NestedMiniBatchKMeans, VRKMeans)
from daskmeans.warm import cache_statistics

if __name__ == "__main__":
    rng = np.random.default_rng(5)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for dtype, n, d, k in ((np.float32, 60_000, 48, 64), (np.uint8, 30_000, 128, 1000), (np.float64, 9_000, 5, 7),
                               (np.int16, 5_000, 12, 40), (np.float32, 20_000, 24, 2048)):
            X = (rng.random((n, d)) * 200).astype(dtype)
            for data in (X, da.from_array(X, chunks=(n // 3, d))):
                common = {"random_state": 1, "client": client, "max_time": 2}
                estimators = [
                    KMeans(k, **common), KMeans(k, init="two-level", **common), KMeans(k, init="afk-mc2", **common),
                    NestedMiniBatchKMeans(k, **common), MiniBatchKMeans(k, **common),
                    VRKMeans(k, variant="vrkm++", **common), VRKMeans(k, variant="vrkm", **common),
                ]
                if k < 100:
                    laplacian = {"kernel": "laplacian", "kernel_params": {"kappa": 30.0}}
                    estimators += [CoresetGaussianMixture(k, **common), MiniBatchKernelKMeans(k, **laplacian, **common)]
                for estimator in estimators:
                    estimator.fit(data, sample_weight=rng.random(n) + 0.5 if isinstance(estimator, KMeans) else None)
                    estimator.predict(X[:100])
                    if hasattr(estimator, "score"):
                        estimator.score(X[:100])
        X = rng.random((800, 6))
        KernelKMeans(5, kernel="rbf", kernel_params={"kappa": 0.5}, random_state=1, client=client).fit_predict(X)
        print(json.dumps({"driver": cache_statistics(), "workers": client.run(cache_statistics)}))
"""


@pytest.mark.slow
def test_after_warming_no_fit_compiles_a_kernel(tmp_path):
    """From an empty cache, ``daskmeans warm`` compiles the kernels; then the fits of another process compile
    nothing, on the driver or on the workers, and a second ``daskmeans warm`` only loads."""
    cache_dir = tmp_path / "numba"
    first = warm_command(cache_dir, tmp_path)
    assert first["compiled"] > 0 and first["kernels"] > 0
    assert first["workers"] == {}
    statistics = run_python(["-c", FITS_AFTER_WARMING], cache_dir, tmp_path)
    assert len(statistics["workers"]) == 2
    for where, kernels in [("the driver", statistics["driver"]), *statistics["workers"].items()]:
        compiled = {name: counts[0] for name, counts in kernels.items() if counts[0]}
        assert not compiled, f"{where} compiled kernels the warm-up did not: {compiled}"
        assert sum(counts[1] for counts in kernels.values()) > 0, f"{where} loaded nothing from the cache"
    again = warm_command(cache_dir, tmp_path)
    assert again["compiled"] == 0
    assert again["loaded"] > 0


def test_warm_up_warms_every_worker_of_a_client(cluster_client):
    """Each worker runs the small fits too, not only the preload's pass kernels: it then holds the kernels that
    only fits run (VRKM's inner loop, nmbatch's batch changes)."""
    report = daskmeans.warm_up(cluster_client)
    assert set(report.workers) == set(cluster_client.scheduler_info()["workers"])
    assert all(seconds > 0 for seconds in report.workers.values())
    assert report.kernels == len(compiled_kernels()) > 10
    fits_only = {"daskmeans.kernels.vrkm_batched.batch_steps", "daskmeans.kernels.nested._batch_deltas"}
    assert fits_only <= set(compiled_kernels())
    for worker, names in cluster_client.run(compiled_kernels).items():
        assert fits_only <= set(names), worker
    assert f"{len(report.workers)} workers warmed" in report.summary()
    compiled, loaded = cache_counts()
    assert compiled >= report.compiled and loaded >= report.loaded


def test_warm_up_in_a_process_leaves_every_kernel_callable_without_compiling():
    """A second warm-up in the same process neither compiles nor loads: everything is in memory."""
    daskmeans.warm_up()
    report = daskmeans.warm_up()
    assert report.compiled == 0 and report.loaded == 0
    assert report.workers == {}
    assert "0 signatures compiled, 0 loaded" in report.summary()
    assert report.cache_dir and os.path.isdir(report.cache_dir)
    assert np.isfinite(report.seconds)


def test_warm_command_refuses_a_scheduler_it_cannot_reach():
    runner = CliRunner(env={"DASK_SCHEDULER_ADDRESS": None})
    result = runner.invoke(cli.main, ["warm", "--scheduler", "tcp://127.0.0.1:1", "--connect-timeout", "1"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert "Could not connect" in line and "tcp://127.0.0.1:1" in line


@pytest.mark.parametrize(
    "dtypes, fragment",
    [("bool", "dtype 'bool'"), ("complex64", "dtype 'complex64'"), ("nonsense", "dtype 'nonsense'"), (",", "No dtype")],
)
def test_warm_command_refuses_dtypes_it_cannot_warm(dtypes, fragment):
    runner = CliRunner(env={"DASK_SCHEDULER_ADDRESS": None})
    result = runner.invoke(cli.main, ["warm", "--dtypes", dtypes])
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert fragment in line
    assert "Traceback" not in result.output


def test_one_dtype_is_taken_as_one_not_as_its_letters():
    assert check_dtypes("int16") == [np.dtype("int16")]
    assert check_dtypes(np.float32) == [np.dtype("float32")]
    with pytest.raises(daskmeans.InputDataError, match="dtype 'object'"):
        check_dtypes("object")


def test_the_commands_default_dtypes_are_the_warm_ups():
    assert importlib.import_module("daskmeans.cli.warm").INPUT_DTYPES == INPUT_DTYPES


def test_warm_command_reports_what_it_did(cluster_client):
    runner = CliRunner(env={"DASK_SCHEDULER_ADDRESS": None})
    result = runner.invoke(cli.main, ["warm", "--json", "--scheduler", cluster_client.scheduler.address])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(report) == {"seconds", "kernels", "compiled", "loaded", "cache_dir", "workers"}
    assert set(report["workers"]) == set(cluster_client.scheduler_info()["workers"])
    text = runner.invoke(cli.main, ["warm"])
    assert text.exit_code == 0 and text.stdout.startswith("daskmeans warm: warmed ")
