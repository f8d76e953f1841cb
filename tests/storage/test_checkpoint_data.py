"""A checkpoint is resumed on its own data only: rows permuted or values swapped within a column (which keep the
mean, variance, extremes and weight exactly) are refused; a checkpoint's files are untrusted like a model's
(links, FIFOs, an older format)."""

from __future__ import annotations

import json
import os
import shutil
import threading

import dask.array as da
import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

from daskmeans import CheckpointError, CheckpointMismatchError, KMeans, MiniBatchKMeans, NestedMiniBatchKMeans
from daskmeans.engine.client import compute_now
from daskmeans.passes.summary import finish_summary, summary_graph
from daskmeans.storage.checkpoint import POINTER

N_SAMPLES, N_FEATURES, CHUNK_ROWS = 4_000, 4, 1_000
ESTIMATORS = {
    "kmeans": (KMeans, {"n_clusters": 4, "max_iter": 3, "init": "random"}),
    "minibatch": (MiniBatchKMeans, {"n_clusters": 4, "batch_size": 500, "max_iter": 2}),
    "nmbatch": (NestedMiniBatchKMeans, {"n_clusters": 4, "initial_batch_size": 500, "max_iter": 3}),
}


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def values():
    """Small integers as float32: permuting rows or swapping values within a column keeps every statistic."""
    return np.random.default_rng(0).integers(0, 256, (N_SAMPLES, N_FEATURES)).astype(np.float32)


def write(path, values):
    array = zarr.open_array(str(path), mode="w", shape=values.shape, chunks=(CHUNK_ROWS, N_FEATURES), dtype="float32")
    array[...] = values
    return str(path)


def fit(name, data, checkpoint, client):
    cls, params = ESTIMATORS[name]
    return cls(**params, random_state=1, chunk_rows=CHUNK_ROWS, client=client).fit(data, checkpoint=checkpoint)


def rows_permuted_within_blocks(values):
    order = np.concatenate(
        [start + np.random.default_rng(start).permutation(CHUNK_ROWS) for start in range(0, N_SAMPLES, CHUNK_ROWS)]
    )
    return values[order]


def values_swapped_in_a_column(values):
    changed = values.copy()
    first, second = 10, int(np.flatnonzero(values[:, 2] != values[10, 2])[0])
    changed[[first, second], 2] = changed[[second, first], 2]
    return changed


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize("change", [rows_permuted_within_blocks, values_swapped_in_a_column])
def test_a_resume_on_rows_with_the_same_statistics_is_refused(name, change, values, client, tmp_path):
    checkpoint = str(tmp_path / "run.ckpt")
    fit(name, write(tmp_path / "data.zarr", values), checkpoint, client)
    other = write(tmp_path / "other.zarr", change(values))
    before = sorted(os.listdir(checkpoint))
    with pytest.raises(
        CheckpointMismatchError,
        match="other data .*(values or their order|the rows) differ.*row hash .* in the checkpoint.*delete",
    ):
        fit(name, other, checkpoint, client)
    assert sorted(os.listdir(checkpoint)) == before
    fit(name, write(tmp_path / "same.zarr", values), checkpoint, client)  # the same values resume


def test_a_resume_on_other_values_says_the_values_differ(values, client, tmp_path):
    checkpoint = str(tmp_path / "run.ckpt")
    fit("kmeans", write(tmp_path / "data.zarr", values), checkpoint, client)
    with pytest.raises(CheckpointMismatchError, match="its values or their order differ"):
        fit("kmeans", write(tmp_path / "other.zarr", values + 1), checkpoint, client)


def test_the_row_hash_depends_on_the_rows_not_on_the_chunking(values):
    def row_hash(array, weights=None):
        (raw,) = compute_now(summary_graph(array, weights))
        return finish_summary(raw, array.shape[0]).row_hash

    reference = row_hash(da.from_array(values, chunks=(CHUNK_ROWS, N_FEATURES)))
    assert row_hash(da.from_array(values, chunks=((1, 999, 1500, 1500), N_FEATURES))) == reference
    assert row_hash(da.from_array(values.astype(">f8"), chunks=(700, N_FEATURES))) == reference
    assert row_hash(da.from_array(rows_permuted_within_blocks(values), chunks=(CHUNK_ROWS, N_FEATURES))) != reference
    assert row_hash(da.from_array(values_swapped_in_a_column(values), chunks=(CHUNK_ROWS, N_FEATURES))) != reference
    weights = np.arange(N_SAMPLES, dtype=np.float64)
    weighted = row_hash(da.from_array(values, chunks=(CHUNK_ROWS, N_FEATURES)), da.from_array(weights, CHUNK_ROWS))
    assert weighted != reference
    assert (
        row_hash(
            da.from_array(values, chunks=(CHUNK_ROWS, N_FEATURES)), da.from_array(weights[::-1].copy(), CHUNK_ROWS)
        )
        != weighted
    )


# -- the checkpoint's files ---------------------------------------------------------------------------------------
@pytest.fixture
def written(values, client, tmp_path):
    """``(checkpoint, data)`` of a finished KMeans fit."""
    data = write(tmp_path / "data.zarr", values)
    checkpoint = str(tmp_path / "run.ckpt")
    fit("kmeans", data, checkpoint, client)
    return checkpoint, data


def version_directory(checkpoint):
    with open(os.path.join(checkpoint, POINTER)) as handle:
        return os.path.join(checkpoint, json.load(handle)["directory"])


def fit_within(name, data, checkpoint, client, seconds=60):
    outcome = {}

    def target():
        try:
            fit(name, data, checkpoint, client)
        except BaseException as error:  # noqa: BLE001 (handed to the test thread)
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the fit with checkpoint {checkpoint!r} still runs after {seconds} s")
    if "error" in outcome:
        raise outcome["error"]


def test_a_checkpoint_of_the_older_format_is_refused_with_the_fix(written, client):
    checkpoint, data = written
    pointer = os.path.join(checkpoint, POINTER)
    with open(pointer) as handle:
        content = json.load(handle)
    with open(pointer, "w") as handle:
        json.dump({**content, "format_version": 1}, handle)
    with pytest.raises(CheckpointError, match="written by an older format.*delete .* to start afresh"):
        fit("kmeans", data, checkpoint, client)


def test_a_pointer_linked_to_a_fifo_is_refused_without_hanging(written, client, tmp_path):
    checkpoint, data = written
    os.mkfifo(tmp_path / "fifo")
    os.remove(os.path.join(checkpoint, POINTER))
    os.symlink(tmp_path / "fifo", os.path.join(checkpoint, POINTER))
    with pytest.raises(CheckpointError, match="CURRENT is not readable.*symbolic link"):
        fit_within("kmeans", data, checkpoint, client)


def test_a_version_linked_out_of_the_checkpoint_is_refused(written, client, tmp_path):
    checkpoint, data = written
    directory = version_directory(checkpoint)
    shutil.move(directory, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", directory, target_is_directory=True)
    with pytest.raises(CheckpointError, match="is a symbolic link"):
        fit("kmeans", data, checkpoint, client)


def test_a_linked_state_chunk_is_refused(written, client, tmp_path):
    checkpoint, data = written
    chunk = os.path.join(version_directory(checkpoint), "arrays", "a0", "0.0")
    shutil.copy(chunk, tmp_path / "copy")
    os.remove(chunk)
    os.symlink(tmp_path / "copy", chunk)
    with pytest.raises(CheckpointError, match=r"symbolic link 'arrays/a0/0.0'"):
        fit("kmeans", data, checkpoint, client)


def test_a_resume_on_values_moved_without_changing_any_statistic_names_the_rows(client, tmp_path):
    """Four rows of small integers repeated (every statistic exact whatever the order), two neighbours swapped."""
    pattern = np.array([[2, 0, 4, 8], [8, 4, 0, 2], [0, 8, 2, 4], [4, 2, 8, 0]], dtype=np.float32)
    values = np.tile(pattern, (N_SAMPLES // 4, 1))
    checkpoint = str(tmp_path / "run.ckpt")
    fit("kmeans", write(tmp_path / "data.zarr", values), checkpoint, client)
    with pytest.raises(
        CheckpointMismatchError,
        match="the rows differ with the same mean, variance, extremes and weight: rows permuted",
    ):
        fit("kmeans", write(tmp_path / "other.zarr", values[[1, 0, *range(2, N_SAMPLES)]]), checkpoint, client)
