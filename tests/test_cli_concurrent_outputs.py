"""Two ``daskmeans fit`` commands started at once with the same ``--out`` and ``--labels`` (no ``--overwrite``):
exactly one succeeds, and the model and labels left are both that command's, on a local disk and on S3.

Both commands check that the outputs are free before they fit, so both get past the check; a pause before
publishing (:data:`daskmeans.config.PUBLISH_PAUSE_SECONDS`, set in each command's process) makes both hold
finished outputs at the same moment, which is when a publish that replaced what appeared meanwhile would let both
succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from daskmeans import load
from daskmeans.datasets import make_blobs_zarr

ROOT = Path(__file__).resolve().parents[1]

#: A ``daskmeans`` command with a pause before it publishes its outputs: ``python -c RUN PAUSE ARGS...``.
RUN = (
    "import sys\n"
    "from daskmeans import config\n"
    "config.set(PUBLISH_PAUSE_SECONDS=float(sys.argv[1]))\n"
    "from daskmeans.cli import main\n"
    "main(sys.argv[2:], prog_name='daskmeans')\n"
)
#: Seconds each command waits with its outputs complete before publishing them.
PAUSE_SECONDS = 4.0


def environment(**extra) -> dict:
    env = {name: value for name, value in os.environ.items() if not name.startswith("DASK_SCHEDULER")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**env, **extra}


def fit_twice_at_once(data, model, labels, env) -> list[subprocess.CompletedProcess]:
    """Start the same fit (but for its seed: 0 and 1) twice at once; return both results, seed 0's first."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", RUN, str(PAUSE_SECONDS), "fit", str(data), "--array", "X", "-k", "3"]
            + ["--seed", str(seed), "--out", model, "--labels", labels, "--local-workers", "scheduler"]
            + ["--quiet", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for seed in (0, 1)
    ]
    results = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=240)
        results.append(subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr))
    return results


def check_one_won(results, what_the_other_says) -> int:
    """Exactly one run succeeded and the other failed with one line; return the winner's seed."""
    codes = [result.returncode for result in results]
    assert sorted(codes) == [0, 1], [(r.returncode, r.stderr[-2000:]) for r in results]
    winner = codes.index(0)
    loser = results[1 - winner]
    assert "Traceback" not in loser.stderr, loser.stderr[-3000:]
    error = json.loads(loser.stdout)  # --json: the error as one JSON object, its message one line
    assert error["type"] == "OutputExistsError" and "\n" not in error["error"], error
    assert what_the_other_says in error["error"] and "--overwrite" in error["error"], error
    assert json.loads(results[winner].stdout)["random_state"] == winner
    return winner


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.zarr"
    make_blobs_zarr(path, 3000, 4, 6, chunk_rows=500, random_state=0)
    return path


@pytest.mark.slow
def test_two_fits_at_once_on_a_local_disk(tmp_path, data):
    model, labels = str(tmp_path / "model.zarr"), str(tmp_path / "labels.zarr")
    results = fit_twice_at_once(data, model, labels, environment())
    winner = check_one_won(results, "another run published it while this one was writing")
    fitted = load(model)
    assert fitted.random_state == winner
    X = zarr.open_array(str(data / "X"), mode="r")[...]
    np.testing.assert_array_equal(zarr.open_array(labels, mode="r")[...], fitted.predict(X))
    assert sorted(os.listdir(tmp_path)) == ["data.zarr", "labels.zarr", "model.zarr"]  # nothing of the other run


@pytest.mark.slow
def test_two_fits_at_once_on_s3(tmp_path, data, s3_server, s3_bucket):
    model, labels = f"{s3_bucket}/model.zarr", f"{s3_bucket}/labels.zarr"
    results = fit_twice_at_once(data, model, labels, environment(**s3_server.environment()))
    # refused at its claim, or (a command that starts late) at its check, which sees the other's claim
    winner = check_one_won(results, "another run is writing it")
    options = s3_server.storage_options()
    fitted = load(model, storage_options=options)
    assert fitted.random_state == winner
    X = zarr.open_array(str(data / "X"), mode="r")[...]
    np.testing.assert_array_equal(zarr.open_array(labels, mode="r", storage_options=options)[...], fitted.predict(X))
    fs = s3_server.filesystem()
    fs.invalidate_cache()
    assert not [key for key in fs.find(s3_bucket.removeprefix("s3://")) if "/.daskmeans-" in key]
