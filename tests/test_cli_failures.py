"""Failures nobody planned for still end the real ``daskmeans`` command with one line and exit status 1 (one JSON
object with --json); ``daskmeans --debug`` shows the traceback."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from test_cli import environment

from daskmeans import KMeans
from daskmeans.datasets import make_blobs_zarr

pytestmark = pytest.mark.slow


def daskmeans_command(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "daskmeans", *map(str, args)],
        capture_output=True,
        text=True,
        env=environment(),
        cwd=cwd,
        timeout=240,
    )


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


@contextlib.contextmanager
def mounted_tmpfs(folder, options, what):
    """A tmpfs mounted on ``folder`` with mount ``options`` for the test and unmounted after it, or a skip (saying
    why) where mounting is not allowed (not root, no CAP_SYS_ADMIN, a container without mount)."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount {what} here ({done.stderr.strip() or done.returncode})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.fixture
def read_only_folder(tmp_path):
    """A read-only tmpfs mounted for the test (refused even to root), or a skip where mounting is not allowed."""
    with mounted_tmpfs(tmp_path / "read-only", "ro,size=1m", "a read-only tmpfs") as folder:
        yield folder


#: tmpfs mount options for a disk that fills up halfway through writing an output: 64 KiB of bytes (a labels chunk
#: of FULL_ROWS rows alone is larger, compressed), or 1 MiB of bytes but 4 inodes (the folder itself, then the
#: output's temporary folder, its zarr.json and chunk folder: the chunk file finds no inode). Either way the
#: write check before the fit passes and the write fails with ENOSPC.
FULL_DISKS = {"bytes": "size=64k", "inodes": "size=1m,nr_inodes=4"}
#: Rows (2 features, 16 blobs) whose labels do not fit in FULL_DISKS["bytes"] (about 0.8 byte per label).
FULL_ROWS = 200_000


@pytest.fixture(params=list(FULL_DISKS))
def full_disk(request, tmp_path):
    """A small writable tmpfs that an output fills up (too few bytes, or too few inodes), or a skip."""
    with mounted_tmpfs(
        tmp_path / "full-disk", FULL_DISKS[request.param], f"a tmpfs with {FULL_DISKS[request.param]}"
    ) as folder:
        yield folder


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 64 KiB (too few bytes for the outputs of the disk-full tests), or a skip."""
    with mounted_tmpfs(tmp_path / "small-disk", FULL_DISKS["bytes"], "a 64 KiB tmpfs") as folder:
        yield folder


def snapshot(folder):
    """Every file under ``folder`` (relative path -> contents) and every folder: to show nothing was written."""
    files = {}
    for path in sorted(folder.rglob("*")):
        files[str(path.relative_to(folder))] = path.read_bytes() if path.is_file() else None
    return files


@pytest.fixture
def big_store(tmp_path):
    """FULL_ROWS x 2 blobs in 4 chunks, on the ordinary disk."""
    store = tmp_path / "data.zarr"
    make_blobs_zarr(store, FULL_ROWS, 2, 16, chunk_rows=FULL_ROWS // 4, random_state=0)
    return store


def test_an_unwritable_output_is_refused_before_the_fit(tmp_path, read_only_folder):
    store = tmp_path / "data.zarr"
    make_blobs_zarr(store, 2000, 4, 3, chunk_rows=500, random_state=0)
    done = daskmeans_command(
        "fit", store, "--array", "X", "-k", 3, "--out", read_only_folder / "model.zarr", "--labels", store / "labels"
    )
    assert_one_line(done, "--out", "cannot write")
    assert "iterations" not in done.stderr and not (store / "labels").exists()


def labels_on_a_full_disk(store, disk, *cluster):
    """``daskmeans fit --labels`` onto a disk the labels do not fit on: one line, nothing left, the input as it was."""
    before = snapshot(store)
    done = daskmeans_command(
        "fit",
        store,
        "--array",
        "X",
        "-k",
        16,
        "--random-state",
        0,
        "--quiet",
        "--labels",
        disk / "labels.zarr",
        *cluster,
    )
    assert_one_line(done, f"--labels {str(disk / 'labels.zarr')!r} could not be written", "No space left on device")
    assert "--debug" not in done.stderr  # the user's disk, not a fault of daskmeans: nothing to debug
    assert os.listdir(disk) == []  # no labels, no temporary folder, no write-check file
    assert snapshot(store) == before


def test_a_disk_full_while_writing_labels_is_one_line_and_leaves_nothing(big_store, full_disk):
    labels_on_a_full_disk(big_store, full_disk)


def test_a_disk_full_while_workers_write_labels_is_one_line_and_leaves_nothing(big_store, small_disk):
    labels_on_a_full_disk(big_store, small_disk, "--workers", 2, "--threads-per-worker", 1)


def test_labels_larger_than_the_free_space_are_announced_before_the_fit(big_store, small_disk):
    done = daskmeans_command(
        "fit", big_store, "--array", "X", "-k", 16, "--random-state", 0, "--labels", small_disk / "labels.zarr"
    )
    warning = [line for line in done.stderr.splitlines() if line.startswith("Warning:")]
    assert len(warning) == 1 and "--labels" in warning[0] and "may not fit" in warning[0], done.stderr
    assert "781.2 KiB uncompressed" in warning[0] and "64.0 KiB free" in warning[0], warning[0]
    assert done.stderr.index("Warning:") < done.stderr.index("iterations")  # said before any work


def fill_up(folder, what):
    """Take every free byte (one file written until ENOSPC) or every free inode (empty files until ENOSPC)."""
    if what == "bytes":
        with open(folder / "filler", "wb", buffering=0) as filler:
            with contextlib.suppress(OSError):
                while True:
                    filler.write(b"\0" * 4096)
    else:
        with contextlib.suppress(OSError):
            for i in range(10_000):
                (folder / f"filler-{i}").touch()


#: A tmpfs that will be filled up: every byte, or every inode.
FILLED_DISKS = {"bytes": "size=64k", "inodes": "size=1m,nr_inodes=8"}


@pytest.fixture(params=list(FILLED_DISKS))
def filled_disk(request, tmp_path):
    """A small tmpfs with no free byte (or no free inode) left, or a skip where mounting is not allowed."""
    with mounted_tmpfs(
        tmp_path / "filled-disk", FILLED_DISKS[request.param], f"a tmpfs with {FILLED_DISKS[request.param]}"
    ) as folder:
        fill_up(folder, request.param)
        yield folder


def test_a_full_disk_is_refused_before_the_fit(tmp_path, filled_disk):
    store = tmp_path / "data.zarr"
    make_blobs_zarr(store, 2000, 4, 3, chunk_rows=500, random_state=0)
    before, disk_before = snapshot(store), snapshot(filled_disk)
    for option in ("--labels", "--out"):
        done = daskmeans_command("fit", store, "--array", "X", "-k", 3, option, filled_disk / "output.zarr")
        assert_one_line(done, option, "the disk of", "is full", "nothing was computed")
        assert "iterations" not in done.stderr and "seeding" not in done.stderr, done.stderr
    model = tmp_path / "model.zarr"
    KMeans(n_clusters=3, random_state=0).fit(np.random.default_rng(0).normal(size=(100, 4))).save(model)
    done = daskmeans_command("predict", model, store, "--array", "X", "--labels", filled_disk / "labels.zarr")
    assert_one_line(done, "--labels", "is full")
    done = daskmeans_command("make-data", filled_disk / "data.zarr", "--n-samples", 100, "--n-features", 2, "-k", 2)
    assert_one_line(done, "OUT", "is full")
    assert snapshot(store) == before and snapshot(filled_disk) == disk_before


def test_a_model_that_does_not_fit_on_the_disk_leaves_no_labels(tmp_path, small_disk):
    store = tmp_path / "data.zarr"
    make_blobs_zarr(store, 1000, 128, 8, random_state=0)
    before = snapshot(store)
    # 200 x 128 float32 centers: about 100 KiB, compressed or not; the labels (beside X) fit, and are written first
    done = daskmeans_command(
        "fit",
        store,
        "--array",
        "X",
        "-k",
        200,
        "--init",
        "random",
        "--max-iter",
        1,
        "--random-state",
        0,
        "--quiet",
        "--labels",
        store / "labels",
        "--out",
        small_disk / "model.zarr",
    )
    assert_one_line(done, "--out", "could not be written", "No space left on device")
    assert os.listdir(small_disk) == []
    assert snapshot(store) == before  # no labels, no temporary labels folder beside X, X untouched


def test_a_disk_full_while_predict_writes_labels_is_one_line_and_leaves_nothing(tmp_path, big_store, full_disk):
    model = tmp_path / "model.zarr"
    KMeans(n_clusters=16, random_state=0).fit(np.random.default_rng(0).normal(size=(1000, 2))).save(model)
    before = snapshot(big_store), snapshot(model)
    done = daskmeans_command("predict", model, big_store, "--array", "X", "--labels", full_disk / "labels.zarr")
    assert_one_line(done, "--labels", "could not be written", "No space left on device")
    assert os.listdir(full_disk) == []
    assert (snapshot(big_store), snapshot(model)) == before


def test_a_disk_full_while_making_data_is_one_line_and_leaves_nothing(full_disk):
    done = daskmeans_command(
        "make-data", full_disk / "data.zarr", "--n-samples", FULL_ROWS, "--n-features", 2, "-k", 16, "--seed", 0
    )
    assert_one_line(done, "OUT", "could not be written", "No space left on device")
    assert os.listdir(full_disk) == []
