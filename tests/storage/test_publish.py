"""Outputs published whole, on local disks and on a real S3 server: an output appears complete or not at all, an
output that appeared meanwhile is never replaced without overwrite, faults and killed writers leave nothing that
looks valid, and published stores carry consolidated metadata."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import dask.array as da
import numpy as np
import pytest
import zarr

from daskmeans import KMeans, config, load, write_labels
from daskmeans.exceptions import ModelFileError, OutputExistsError
from daskmeans.storage import publish, renames
from daskmeans.storage.model import save_model
from daskmeans.storage.publish import (
    CLAIM_NAME,
    STAGING_PREFIX,
    atomic_output,
    check_complete,
    has_root_metadata,
    publication,
    rename_exclusive,
    settle_zarr_io,
)

LABELS = np.arange(1000, dtype=np.int32) % 7


@pytest.fixture(scope="module")
def model():
    X = np.random.default_rng(0).normal(size=(300, 3))
    return KMeans(n_clusters=3, random_state=0).fit(X)


def third_block_fails(values=LABELS, chunks=100):
    """A lazy labels array whose third block raises when computed: a fault in the middle of a write."""

    def compute(block, block_info=None):
        if block_info[0]["chunk-location"][0] == 2:
            raise RuntimeError("the third block failed")
        return block

    return da.from_array(values, chunks=chunks).map_blocks(compute, dtype=values.dtype)


def leftovers(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if ".tmp-" in name)


def keys(fs, url) -> list[str]:
    fs.invalidate_cache()
    try:
        return sorted(key[len(url.removeprefix("s3://")) :].lstrip("/") for key in fs.find(url.removeprefix("s3://")))
    except FileNotFoundError:
        return []


# -- local disks -----------------------------------------------------------------------------------------------------


def test_an_output_appears_only_when_complete(tmp_path):
    target = tmp_path / "x.zarr"
    with atomic_output(target) as tmp:
        zarr.create_array(tmp, shape=(3,), dtype="i4")[...] = [1, 2, 3]
        assert not target.exists()
    assert zarr.open_array(str(target), mode="r")[...].tolist() == [1, 2, 3]
    assert os.listdir(tmp_path) == ["x.zarr"]


@pytest.mark.parametrize("meanwhile", ["a folder with a file", "an empty folder", "a file"])
def test_what_appeared_meanwhile_is_kept_and_the_later_writer_fails(tmp_path, meanwhile):
    target = tmp_path / "x.zarr"
    with pytest.raises(OutputExistsError, match="exists already .*another run published it.*--overwrite") as caught:
        with atomic_output(target) as tmp:
            zarr.create_array(tmp, shape=(3,), dtype="i4")[...] = 7
            if meanwhile == "a file":
                target.write_text("theirs")
            else:
                target.mkdir()
                if meanwhile == "a folder with a file":
                    (target / "theirs").write_text("theirs")
    assert "\n" not in str(caught.value)
    assert leftovers(tmp_path) == []
    if meanwhile == "a file":
        assert target.read_text() == "theirs"
    else:
        assert os.listdir(target) == ([] if meanwhile == "an empty folder" else ["theirs"])


@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "fallback"])
def test_an_exclusive_rename_never_replaces(tmp_path, renameat2, monkeypatch):
    if not renameat2:
        monkeypatch.setattr(renames, "_RENAMEAT2", None)  # the systems without renameat2
    elif renames._RENAMEAT2 is None:
        pytest.skip("this system has no renameat2")
    for existing in ("empty", "full", "file"):
        source, target = tmp_path / f"src-{existing}", tmp_path / f"dst-{existing}"
        source.mkdir()
        (source / "ours").write_text("ours")
        if existing == "file":
            target.write_text("theirs")
        else:
            target.mkdir()
            if existing == "full":
                (target / "theirs").write_text("theirs")
        with pytest.raises(FileExistsError):
            rename_exclusive(str(source), str(target))
        assert (source / "ours").read_text() == "ours"
    rename_exclusive(str(tmp_path / "src-empty"), str(tmp_path / "new"))
    assert (tmp_path / "new" / "ours").read_text() == "ours"
    (tmp_path / "file").write_text("a file")
    rename_exclusive(str(tmp_path / "file"), str(tmp_path / "moved"))
    assert (tmp_path / "moved").read_text() == "a file" and not (tmp_path / "file").exists()


@pytest.mark.parametrize("renameat2", [True, False], ids=["exchange", "two-renames"])
def test_overwrite_replaces_and_removes_the_old_output(tmp_path, renameat2, monkeypatch):
    if not renameat2:
        monkeypatch.setattr(renames, "_RENAMEAT2", None)
    target = tmp_path / "x.zarr"
    for value in (1, 2):
        with atomic_output(target, overwrite=True) as tmp:
            zarr.create_array(tmp, shape=(2,), dtype="i4")[...] = value
    assert zarr.open_array(str(target), mode="r")[...].tolist() == [2, 2]
    assert os.listdir(tmp_path) == ["x.zarr"]


def test_outputs_published_together_are_taken_back_when_one_cannot_be(tmp_path):
    first, second = tmp_path / "model.zarr", tmp_path / "labels.zarr"
    with pytest.raises(OutputExistsError, match="labels.zarr"):
        with publication() as outputs:
            zarr.create_array(outputs.output(first), shape=(2,), dtype="i4")
            zarr.create_array(outputs.output(second), shape=(2,), dtype="i4")
            second.mkdir()  # another run published the second one meanwhile
    assert not first.exists()  # the first was published, then taken back
    assert os.listdir(second) == [] and leftovers(tmp_path) == []


@pytest.mark.parametrize("renameat2", [True, False], ids=["exchange", "two-renames"])
def test_overwritten_outputs_come_back_when_one_cannot_be_published(tmp_path, renameat2, monkeypatch):
    if not renameat2:
        monkeypatch.setattr(renames, "_RENAMEAT2", None)
    first, second = tmp_path / "a.zarr", tmp_path / "b.zarr"
    for path in (first, second):
        zarr.create_array(str(path), shape=(2,), dtype="i4")[...] = 1
    with pytest.raises(FileNotFoundError, match="Nothing was written"):
        with publication(overwrite=True) as outputs:
            zarr.create_array(outputs.output(first), shape=(2,), dtype="i4")[...] = 2
            outputs.output(second)  # never written: it cannot be published
    assert zarr.open_array(str(first), mode="r")[...].tolist() == [1, 1]
    assert zarr.open_array(str(second), mode="r")[...].tolist() == [1, 1]
    assert sorted(os.listdir(tmp_path)) == ["a.zarr", "b.zarr"]


def test_a_fault_in_the_middle_of_writing_labels_leaves_nothing(tmp_path):
    target = tmp_path / "labels.zarr"
    with pytest.raises(RuntimeError, match="the third block failed") as caught:
        write_labels(third_block_fails(), str(target))
    assert "\n" not in str(caught.value)
    assert os.listdir(tmp_path) == []
    write_labels(LABELS, str(target), overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(str(target), mode="r")[...], LABELS)


def test_a_local_folder_without_metadata_is_refused_by_load(tmp_path):
    (tmp_path / "model.zarr").mkdir()
    (tmp_path / "model.zarr" / "cluster_centers").mkdir()
    with pytest.raises(ModelFileError, match="not a daskmeans model"):
        load(tmp_path / "model.zarr")
    with pytest.raises(ValueError, match="was not completely written \\(an interrupted run\\?\\); write it again"):
        check_complete(tmp_path / "model.zarr", "'model.zarr'", ValueError)
    with pytest.raises(FileNotFoundError, match="Nothing at"):
        check_complete(tmp_path / "nothing.zarr", "'nothing.zarr'", ValueError)


def test_a_failed_output_waits_for_zarrs_writes_still_under_way(tmp_path):
    """When a write fails, the other writes of the same Zarr operation may still be running on Zarr's I/O loop, and
    a local store's write makes its file's folders: the temporary output is removed only once they have ended, so
    that nothing is made again after it."""
    from zarr.core.sync import _get_loop

    target = tmp_path / "out.zarr"
    late = threading.Event()

    async def late_write(folder):
        await asyncio.sleep(0.3)
        os.makedirs(folder / "c", exist_ok=True)  # what a local store's write does before writing its file
        (folder / "c" / "0").write_bytes(b"chunk")
        late.set()

    with pytest.raises(OSError, match="No space left"):
        with atomic_output(target) as tmp:
            zarr.open_group(store=tmp, mode="w")
            asyncio.run_coroutine_threadsafe(late_write(Path(tmp)), _get_loop())
            raise OSError(28, "No space left on device")
    assert late.is_set()  # the output was removed after the late write, not before
    assert os.listdir(tmp_path) == []


def test_settling_zarrs_io_returns_at_once_when_nothing_runs():
    assert settle_zarr_io(timeout=1.0) is True


# -- consolidated metadata -------------------------------------------------------------------------------------------


def open_zarr_strictly(path, **kwargs):
    """``xarray.open_zarr`` with every warning an error (e.g. no consolidated metadata)."""
    xr = pytest.importorskip("xarray")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return xr.open_zarr(path, **kwargs)


def test_published_stores_carry_consolidated_metadata(tmp_path, model):
    from daskmeans.datasets import make_blobs_zarr

    data = str(tmp_path / "data.zarr")
    make_blobs_zarr(data, 500, 3, 4, chunk_rows=100, random_state=0)
    assert json.loads((tmp_path / "data.zarr" / "zarr.json").read_text())["consolidated_metadata"]
    write_labels(LABELS[:500], f"{data}/labels")
    opened = open_zarr_strictly(data)
    assert set(opened.data_vars) >= {"X", "labels"}  # the group's consolidated metadata includes the labels
    np.testing.assert_array_equal(opened["labels"].values, LABELS[:500])
    write_labels(LABELS[:500][::-1], f"{data}/labels", overwrite=True)
    np.testing.assert_array_equal(open_zarr_strictly(data)["labels"].values, LABELS[:500][::-1])

    saved = model.save(str(tmp_path / "model.zarr"))
    assert json.loads((tmp_path / "model.zarr" / "zarr.json").read_text())["consolidated_metadata"]
    np.testing.assert_allclose(open_zarr_strictly(saved)["cluster_centers"].values, model.cluster_centers_)


# -- object stores ---------------------------------------------------------------------------------------------------


def test_a_model_round_trips_on_s3_and_is_published_whole(s3_server, s3_bucket, model):
    options, fs = s3_server.storage_options(), s3_server.filesystem()
    url = f"{s3_bucket}/model.zarr"
    save_model(model, url, storage_options=options)
    assert not any(CLAIM_NAME in key or STAGING_PREFIX in key for key in keys(fs, url))
    np.testing.assert_allclose(load(url, storage_options=options).cluster_centers_, model.cluster_centers_)
    with pytest.raises(OutputExistsError, match="exists already; .*overwrite=True"):
        save_model(model, url, storage_options=options)
    save_model(model, url, overwrite=True, storage_options=options)
    assert not any(CLAIM_NAME in key or STAGING_PREFIX in key for key in keys(fs, url))
    np.testing.assert_allclose(
        open_zarr_strictly(url, storage_options=options)["cluster_centers"], model.cluster_centers_
    )


def test_an_s3_output_is_claimed_at_the_start(s3_server, s3_bucket):
    options, url = s3_server.storage_options(), f"{s3_bucket}/x.zarr"
    with atomic_output(url, storage_options=options) as staged:
        assert STAGING_PREFIX in staged
        zarr.create_array(staged, shape=(2,), dtype="i4", storage_options=options)[...] = 1
        with pytest.raises(OutputExistsError, match="another run is writing it"):
            with atomic_output(url, storage_options=options):
                pass
        with pytest.raises(OSError):
            zarr.open_array(url, mode="r", storage_options=options)  # nothing readable before the commit
    assert zarr.open_array(url, mode="r", storage_options=options)[...].tolist() == [1, 1]
    assert keys(s3_server.filesystem(), url) == ["c/0", "zarr.json"]


def test_the_claim_is_a_conditional_create_on_the_server(s3_server, s3_bucket):
    """Two writers that both found the path free: the server's ``If-None-Match: *`` lets one claim it."""
    options, url = s3_server.storage_options(), f"{s3_bucket}/x.zarr"
    first = publication(storage_options=options)
    first_output = publish._Output(url, False, options)
    second_output = publish._Output(url, False, options)  # both checked before either claimed
    first_output.claim()
    with pytest.raises(OutputExistsError, match="another run is writing it") as refused:
        second_output.claim()
    assert refused.value.unfinished
    first.outputs.append(first_output)
    with first:
        zarr.create_array(first_output.staging, shape=(2,), dtype="i4", storage_options=options)[...] = 3
    assert zarr.open_array(url, mode="r", storage_options=options)[...].tolist() == [3, 3]


def test_a_writer_whose_claim_was_taken_publishes_nothing(s3_server, s3_bucket):
    options, url = s3_server.storage_options(), f"{s3_bucket}/x.zarr"
    with pytest.raises(OutputExistsError, match="being written by another run at the same time"):
        with atomic_output(url, storage_options=options) as staged:
            zarr.create_array(staged, shape=(2,), dtype="i4", storage_options=options)[...] = 1
            with atomic_output(url, overwrite=True, storage_options=options) as theirs:
                zarr.create_array(theirs, shape=(2,), dtype="i4", storage_options=options)[...] = 2
    assert zarr.open_array(url, mode="r", storage_options=options)[...].tolist() == [2, 2]
    assert keys(s3_server.filesystem(), url) == ["c/0", "zarr.json"]


def test_a_fault_in_the_middle_of_writing_labels_to_s3_leaves_nothing(s3_server, s3_bucket):
    options, fs, url = s3_server.storage_options(), s3_server.filesystem(), f"{s3_bucket}/labels.zarr"
    with pytest.raises(RuntimeError, match="the third block failed") as caught:
        write_labels(third_block_fails(), url, storage_options=options)
    assert "\n" not in str(caught.value)
    assert keys(fs, url) == []
    write_labels(LABELS, url, storage_options=options)
    with pytest.raises(RuntimeError, match="the third block failed"):  # an existing output is kept as it was
        write_labels(third_block_fails(), url, overwrite=True, storage_options=options)
    np.testing.assert_array_equal(zarr.open_array(url, mode="r", storage_options=options)[...], LABELS)
    assert not any(CLAIM_NAME in key or STAGING_PREFIX in key for key in keys(fs, url))


def sealed(fs, url) -> bool:
    """Whether an output staged under ``url`` is complete: its consolidated root metadata is written."""
    for key in keys(fs, url):
        if key.startswith(STAGING_PREFIX) and key.count("/") == 1 and key.endswith("/zarr.json"):
            return "consolidated_metadata" in json.loads(fs.cat_file(f"{url.removeprefix('s3://')}/{key}"))
    return False


def test_a_save_into_a_bucket_that_disappears_leaves_nothing_valid(s3_server, model):
    options, fs = s3_server.storage_options(), s3_server.filesystem()
    bucket = s3_server.new_bucket()
    url = f"{bucket}/model.zarr"
    failure = []

    def save():
        try:
            save_model(model, url, storage_options=options)
        except Exception as error:  # noqa: BLE001 - checked below
            failure.append(error)

    with config.set(PUBLISH_PAUSE_SECONDS=2.0):
        writer = threading.Thread(target=save)
        writer.start()
        deadline = time.monotonic() + 30
        while not sealed(fs, url) and time.monotonic() < deadline:
            time.sleep(0.05)
        fs.invalidate_cache()
        fs.rm(bucket.removeprefix("s3://"), recursive=True)  # the bucket goes while the save waits to publish
        writer.join(60)
    assert len(failure) == 1 and isinstance(failure[0], OSError)
    assert "\n" not in str(failure[0])
    fs.mkdir(bucket.removeprefix("s3://"))
    assert not has_root_metadata(url, options)
    save_model(model, url, overwrite=True, storage_options=options)
    np.testing.assert_allclose(load(url, storage_options=options).cluster_centers_, model.cluster_centers_)


def test_an_output_without_its_root_metadata_is_refused_and_rewritten(s3_server, s3_bucket, model):
    options, fs, url = s3_server.storage_options(), s3_server.filesystem(), f"{s3_bucket}/model.zarr"
    save_model(model, url, storage_options=options)
    fs.rm_file(f"{url.removeprefix('s3://')}/zarr.json")  # as a replace stopped after removing the old one
    with pytest.raises(ModelFileError, match="was not completely written \\(an interrupted run\\?\\); write it"):
        load(url, storage_options=options)
    with pytest.raises(OutputExistsError):
        save_model(model, url, storage_options=options)
    save_model(model, url, overwrite=True, storage_options=options)
    assert isinstance(load(url, storage_options=options), KMeans)


KILLED_WRITER = """
import sys, time
import dask.array as da, numpy as np
from daskmeans import write_labels

def slow(block):
    time.sleep(0.2)
    return block

labels = da.from_array(np.arange(4000, dtype=np.int32) % 7, chunks=100).map_blocks(slow, dtype=np.int32)
write_labels(labels, sys.argv[1], overwrite=sys.argv[2] == "overwrite")
"""


@pytest.mark.slow
@pytest.mark.parametrize("existing", [False, True], ids=["new", "replacing"])
def test_a_killed_writer_leaves_nothing_that_looks_valid(s3_server, s3_bucket, existing):
    fs, options, url = s3_server.filesystem(), s3_server.storage_options(), f"{s3_bucket}/labels.zarr"
    if existing:
        write_labels(LABELS, url, storage_options=options)
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, url, "overwrite" if existing else "new"],
        env={**os.environ, **s3_server.environment()},
    )
    try:
        deadline = time.monotonic() + 60
        while sum(STAGING_PREFIX in key for key in keys(fs, url)) < 4 and time.monotonic() < deadline:
            assert writer.poll() is None, "the writer ended before it was killed"
            time.sleep(0.05)
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert any(key == CLAIM_NAME for key in keys(fs, url))
    if existing:  # killed while staging: the old labels are still whole
        np.testing.assert_array_equal(zarr.open_array(url, mode="r", storage_options=options)[...], LABELS)
        return
    assert not has_root_metadata(url, options)
    with pytest.raises(Exception):  # noqa: B017, PT011 - Zarr's own error: no array there
        zarr.open_array(url, mode="r", storage_options=options)
    with pytest.raises(ValueError, match="was not completely written"):
        check_complete(url, repr(url), ValueError, options)
    with pytest.raises(OutputExistsError, match="an interrupted run left it|exists already"):
        write_labels(LABELS, url, storage_options=options)
    write_labels(LABELS[::-1], url, overwrite=True, storage_options=options)
    np.testing.assert_array_equal(zarr.open_array(url, mode="r", storage_options=options)[...], LABELS[::-1])
    assert not any(CLAIM_NAME in key or STAGING_PREFIX in key for key in keys(fs, url))
