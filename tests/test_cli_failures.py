"""Failures nobody planned for still end the real ``daskmeans`` command with one line and exit status 1 (one JSON
object with --json); ``daskmeans --debug`` shows the traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from daskmeans.datasets import make_blobs_zarr
from test_cli import environment


def daskmeans_command(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "daskmeans", *map(str, args)], capture_output=True, text=True,
                          env=environment(), cwd=cwd, timeout=240)


def assert_one_line(done, *fragments):
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.fixture
def truncated_npy(tmp_path):
    np.save(tmp_path / "full.npy", np.zeros((1000, 4), dtype=np.float32))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "full.npy").read_bytes()[:500])
    return tmp_path / "cut.npy"


def test_a_truncated_npy_file_is_one_line(tmp_path, truncated_npy):
    done = daskmeans_command("fit", truncated_npy, "-k", 2, "--quiet", "--out", tmp_path / "m.zarr")
    assert_one_line(done, "ValueError", "--debug")
    assert not (tmp_path / "m.zarr").exists()


def test_debug_shows_the_traceback(truncated_npy):
    done = daskmeans_command("--debug", "fit", truncated_npy, "-k", 2, "--quiet")
    assert done.returncode != 0 and "Traceback" in done.stderr


def test_unplanned_failures_are_json_with_json(truncated_npy):
    done = daskmeans_command("fit", truncated_npy, "-k", 2, "--quiet", "--json")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    error = json.loads(done.stdout)
    assert error["type"] == "ValueError" and error["exit_status"] == 1


@pytest.mark.parametrize("cluster", [[], ["--workers", "2", "--threads-per-worker", "1"]], ids=["threads", "processes"])
def test_a_corrupt_chunk_is_one_line(tmp_path, cluster):
    store = tmp_path / "data.zarr"
    make_blobs_zarr(store, 2000, 4, 3, chunk_rows=500, random_state=0)
    chunks = sorted(path for path in (store / "X").rglob("*") if path.is_file() and path.name != "zarr.json")
    assert chunks, "the blobs store has chunk files"
    chunks[1].write_bytes(b"\x28\xb5\x2f\xfd" + os.urandom(64))  # a zstd frame header, then noise
    done = daskmeans_command("fit", store, "--array", "X", "-k", 3, "--quiet", "--labels", store / "labels", *cluster)
    assert_one_line(done)
    assert not (store / "labels").exists()


@pytest.fixture
def read_only_folder(tmp_path):
    """A read-only tmpfs mounted for the test (refused even to root), or a skip where mounting is not allowed."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here ({done.stderr.strip() or done.returncode})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_an_unwritable_output_is_refused_before_the_fit(tmp_path, read_only_folder):
    store = tmp_path / "data.zarr"
    make_blobs_zarr(store, 2000, 4, 3, chunk_rows=500, random_state=0)
    done = daskmeans_command("fit", store, "--array", "X", "-k", 3, "--out", read_only_folder / "model.zarr",
                             "--labels", store / "labels")
    assert_one_line(done, "--out", "cannot write")
    assert "iterations" not in done.stderr and not (store / "labels").exists()


def test_a_failed_model_save_leaves_no_labels(tmp_path, monkeypatch):
    from daskmeans.estimators.base import ClusteringEstimator
    from test_cli import assert_user_error, invoke

    store = tmp_path / "data.zarr"
    make_blobs_zarr(store, 2000, 4, 3, chunk_rows=500, random_state=0)

    def disk_full(self, path, *, overwrite=False):
        os.makedirs(path)  # half written, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ClusteringEstimator, "save", disk_full)
    result = invoke("fit", store, "--array", "X", "-k", 3, "--quiet", "--labels", store / "labels", "--out",
                    tmp_path / "model.zarr")
    assert_user_error(result, "No space left on device")
    assert not (store / "labels").exists() and not (tmp_path / "model.zarr").exists()
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".model.zarr")]
