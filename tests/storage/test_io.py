"""Every accepted input becomes one row-chunked float dask array; bad inputs get clear errors."""

import os
import subprocess
import sys

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr
from conftest import permission_bits_apply

import daskmeans
from daskmeans import InputDataError, OutputExistsError, open_input, write_labels
from daskmeans.exceptions import InputDtypeError


def _zarr_array(path, data, chunks, zarr_format=3):
    array = zarr.open_array(
        store=str(path), mode="w", shape=data.shape, chunks=chunks, dtype=data.dtype, zarr_format=zarr_format
    )
    array[...] = data
    return str(path)


def test_zarr_array_v3_and_v2(tmp_path):
    data = np.arange(600, dtype=np.float32).reshape(200, 3)
    for fmt in (3, 2):
        path = _zarr_array(tmp_path / f"v{fmt}.zarr", data, (50, 3), zarr_format=fmt)
        ds = open_input(path)
        assert ds.array.dtype == np.float32 and ds.array.shape == (200, 3)
        assert len(ds.array.chunks[1]) == 1 and ds.location == path and not ds.in_memory
        np.testing.assert_array_equal(ds.array.compute(), data)


def test_zarr_group_needs_an_array_name_when_ambiguous(tmp_path):
    group = zarr.open_group(store=str(tmp_path / "g.zarr"), mode="w")
    group.create_array("X", shape=(10, 2), dtype="f8")[...] = 1.0
    group.create_array("Y", shape=(10, 2), dtype="f8")[...] = 2.0
    with pytest.raises(InputDataError, match=r"holding arrays \['X', 'Y'\].*array=NAME"):
        open_input(str(tmp_path / "g.zarr"))
    assert open_input(str(tmp_path / "g.zarr"), array="Y").array.compute()[0, 0] == 2.0
    with pytest.raises(InputDataError, match="has no array 'Z'"):
        open_input(str(tmp_path / "g.zarr"), array="Z")


def test_uint8_becomes_float32_block_by_block(tmp_path):
    data = np.random.default_rng(0).integers(0, 255, size=(100, 8), dtype=np.uint8)
    ds = open_input(_zarr_array(tmp_path / "u8.zarr", data, (25, 8)))
    assert ds.source_dtype == np.uint8 and ds.array.dtype == np.float32
    # conversion is part of the lazy graph, applied per block
    assert ds.array.npartitions >= 1
    np.testing.assert_array_equal(ds.array.compute(), data.astype(np.float32))


def test_npy_npz_numpy_dask_and_xarray(tmp_path):
    data = np.random.default_rng(1).normal(size=(50, 4))
    np.save(tmp_path / "x.npy", data)
    np.savez(tmp_path / "x.npz", X=data, other=data[:, :2])
    assert open_input(str(tmp_path / "x.npy")).array.dtype == np.float64
    np.testing.assert_array_equal(open_input(str(tmp_path / "x.npz")).array.compute(), data)
    assert open_input(str(tmp_path / "x.npz"), array="other").n_features == 2
    with pytest.raises(InputDataError, match="no array named 'nope'"):
        open_input(str(tmp_path / "x.npz"), array="nope")
    assert open_input(data).in_memory
    assert open_input(da.from_array(data, chunks=10)).array.chunks[0] == (10,) * 5
    labelled = xr.DataArray(data, dims=("descriptor", "feature"), coords={"descriptor": np.arange(100, 150)})
    ds = open_input(labelled)
    assert ds.is_xarray and ds.sample_dim == "descriptor" and "descriptor" in ds.sample_coords


@pytest.mark.slow
def test_arrays_daskmeans_chunks_are_cut_from_their_shape_alone(tmp_path):
    """Blocks of about 64 MiB as computed, at least 8 of them (of at least 1,024 rows) for smaller data, so that a
    small array keeps a few workers' threads busy; the same blocks whatever the cluster, for a NumPy array and a
    .npy file alike."""
    from daskmeans.config import MIN_CHOSEN_BLOCK_ROWS, MIN_CHOSEN_BLOCKS, TARGET_BLOCK_BYTES

    kdd_like = np.zeros((145_751, 74), dtype=np.float32)  # 43 MB: one block before
    chunks = open_input(kdd_like).array.chunks[0]
    assert len(chunks) == MIN_CHOSEN_BLOCKS and sum(chunks) == 145_751
    np.save(tmp_path / "kdd.npy", kdd_like)
    assert open_input(str(tmp_path / "kdd.npy")).array.chunks[0] == chunks
    assert open_input(np.zeros((3_000, 4))).array.chunks[0] == (MIN_CHOSEN_BLOCK_ROWS,) * 2 + (952,)
    assert open_input(np.zeros((500, 4))).array.chunks[0] == (500,)
    uint8_rows = np.zeros((2_000_000, 128), dtype=np.uint8)  # 1 GB as float32: blocks of 64 MiB as float32
    assert max(open_input(uint8_rows).array.chunks[0]) * 128 * 4 == TARGET_BLOCK_BYTES
    assert open_input(kdd_like, chunk_rows=50_000).array.chunks[0] == (50_000, 50_000, 45_751)


def test_feature_chunking_is_fixed_with_a_warning():
    array = da.ones((100, 10), chunks=(20, 5))
    with pytest.warns(UserWarning, match="chunked along features"):
        ds = open_input(array)
    assert ds.array.chunks[1] == (10,)


def test_zero_length_chunks_are_dropped():
    array = da.concatenate([da.ones((10, 2), chunks=5), da.ones((0, 2)), da.ones((7, 2), chunks=7)])
    ds = open_input(array)
    assert 0 not in ds.array.chunks[0] and ds.n_samples == 17


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.ones(5), "2-D array.*1-D.*reshape"),
        (np.ones((2, 3, 4)), "2-D array.*3-D"),
        (np.ones((0, 3)), "0 samples"),
        (np.ones((3, 0)), "0 feature"),
        (np.ones((3, 2), dtype=bool), "dtype bool"),
        (np.ones((3, 2), dtype=complex), "Complex data not supported"),
        (np.array([["a", "b"]]), "dtype <U1"),
    ],
)
def test_bad_shapes_and_dtypes(bad, match):
    with pytest.raises(InputDataError, match=match):
        open_input(bad)


def test_object_arrays_of_numbers_work_and_others_are_refused():
    assert open_input(np.ones((3, 2), dtype=object)).array.dtype == np.float64
    bad = np.ones((3, 2), dtype=object)
    bad[0, 0] = {"a": 1}
    with pytest.raises(InputDtypeError, match="not numbers"):
        open_input(bad)


def test_sparse_input_is_refused():
    sparse = pytest.importorskip("scipy.sparse")
    with pytest.raises(InputDataError, match="Sparse input is not supported.*toarray"):
        open_input(sparse.csr_matrix(np.eye(3)))


def test_missing_path_and_not_a_store(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_input(str(tmp_path / "missing.zarr"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputDataError, match="not a Zarr array or group"):
        open_input(str(tmp_path / "plain"))
    (tmp_path / "notes.txt").write_text("not data")
    with pytest.raises(InputDataError, match="is a file, not a Zarr store"):
        open_input(str(tmp_path / "notes.txt"))
    with pytest.raises(FileNotFoundError, match="No such .npy"):
        open_input(str(tmp_path / "x.npy"))


#: Opens the store named on the command line; prints the error open_input raises.
OPEN_AND_REPORT = """
import sys
from daskmeans import open_input
try:
    open_input(sys.argv[1])
except Exception as error:
    print(type(error).__name__, error)
else:
    print("opened")
"""


@pytest.mark.slow
def test_unreadable_store(tmp_path):
    """A store without read permission, opened by a process that obeys permission bits (for root: one without
    the capabilities that override them), is a PermissionError that says so."""
    path = _zarr_array(tmp_path / "locked.zarr", np.ones((4, 2)), (4, 2))
    os.chmod(path, 0)
    try:
        try:
            done = subprocess.run(
                [sys.executable, "-c", OPEN_AND_REPORT, str(path)],
                capture_output=True,
                text=True,
                timeout=120,
                preexec_fn=permission_bits_apply(),
            )
        except (subprocess.SubprocessError, OSError) as error:
            pytest.skip(f"cannot start a process that obeys permission bits here: {error}")
        if done.stdout.strip() == "opened":
            pytest.skip(
                "a folder without permissions is readable for the test's subprocess here (root whose "
                "capabilities cannot be dropped)"
            )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.startswith("PermissionError") and "permission" in done.stdout.lower(), done.stdout
    finally:
        os.chmod(path, 0o755)


def test_write_labels_is_atomic_and_refuses_to_overwrite(tmp_path):
    labels = da.from_array(np.arange(100, dtype=np.int32) % 7, chunks=30)
    target = tmp_path / "data.zarr"
    zarr.open_group(store=str(target), mode="w")
    out = write_labels(labels, str(target / "labels"))
    np.testing.assert_array_equal(zarr.open_array(store=out, mode="r")[...], np.arange(100) % 7)
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        write_labels(labels, out)
    # a failing computation leaves the existing labels untouched and no temporary output behind
    broken = labels.map_blocks(
        lambda b: b / 0 if b[0] > 1000 else (_ for _ in ()).throw(RuntimeError("boom")), dtype=np.int32
    )
    with pytest.raises(RuntimeError, match="boom"):
        write_labels(broken, out, overwrite=True)
    np.testing.assert_array_equal(zarr.open_array(store=out, mode="r")[...], np.arange(100) % 7)
    assert [p for p in os.listdir(target) if "tmp" in p] == []
    write_labels(labels[::-1], out, overwrite=True)
    assert zarr.open_array(store=out, mode="r")[0] == 99 % 7
    with pytest.raises(InputDataError, match="1-D"):
        write_labels(np.ones((3, 3)), str(tmp_path / "two_d"))


def test_fsspec_urls(tmp_path):
    data = np.arange(40, dtype=np.float32).reshape(20, 2)
    store = zarr.open_array(
        store="memory://daskmeans-test/x.zarr", mode="w", shape=data.shape, chunks=(5, 2), dtype="f4"
    )
    store[...] = data
    ds = open_input("memory://daskmeans-test/x.zarr")
    assert ds.location == "memory://daskmeans-test/x.zarr"
    np.testing.assert_array_equal(ds.array.compute(scheduler="threads"), data)
    local = _zarr_array(tmp_path / "f.zarr", data, (5, 2))
    np.testing.assert_array_equal(open_input(f"file://{local}").array.compute(), data)


def test_relative_paths_become_absolute_for_the_workers(tmp_path, monkeypatch):
    _zarr_array(tmp_path / "rel.zarr", np.ones((10, 2), np.float32), (5, 2))
    monkeypatch.chdir(tmp_path)
    ds = open_input("rel.zarr")
    assert ds.location == str(tmp_path / "rel.zarr")
    monkeypatch.chdir("/")
    np.testing.assert_array_equal(ds.array.compute(), np.ones((10, 2)))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [">f4", ">f8"])
def test_big_endian_data_is_read_and_gives_the_native_result(tmp_path, dtype):
    X = np.random.default_rng(5).normal(size=(400, 3))
    native = daskmeans.KMeans(3, random_state=0).fit(X.astype(np.dtype(dtype).newbyteorder("="))).cluster_centers_
    in_memory = daskmeans.KMeans(3, random_state=0).fit(X.astype(dtype)).cluster_centers_
    store = zarr.open_array(
        str(tmp_path / "be.zarr"), mode="w", shape=X.shape, dtype=dtype, chunks=(100, 3), zarr_format=2
    )
    store[:] = X.astype(dtype)
    from_zarr = daskmeans.KMeans(3, random_state=0).fit(str(tmp_path / "be.zarr")).cluster_centers_
    assert in_memory.dtype.isnative and from_zarr.dtype.isnative
    np.testing.assert_array_equal(in_memory, native)
    np.testing.assert_array_equal(from_zarr, native)


def test_in_memory_input_is_dealt_to_the_workers_as_stored(cluster_client):
    """A NumPy input is held by the workers block by block in turn, in its stored dtype (uint8, not the float32 it
    is computed in), each block in aligned memory, with the same values."""
    import distributed

    from daskmeans.engine.graph import stored_blocks
    from daskmeans.engine.slabs import ROW_ALIGNMENT, stored_form
    from daskmeans.storage.io import spread_on_workers

    X = np.random.default_rng(0).integers(0, 256, size=(8000, 24), dtype=np.uint8)
    data = open_input(X, chunk_rows=1000)
    placed = spread_on_workers(data.array, cluster_client)
    assert placed.dtype == np.float32 and placed.chunks == data.array.chunks
    assert stored_form(placed).dtype == np.uint8
    futures = distributed.futures_of(stored_form(placed))
    cluster_client.gather(futures)  # persisted: wait until every block is held
    holders = cluster_client.who_has(futures)
    assert len(holders) == len(stored_blocks(placed)) == 8 and all(len(workers) == 1 for workers in holders.values())
    per_worker = {}
    for (worker,) in holders.values():
        per_worker[worker] = per_worker.get(worker, 0) + 1
    assert sorted(per_worker.values()) == [4, 4]

    def layout(block):
        return str(block.dtype), bool(block.flags.c_contiguous), block.ctypes.data % ROW_ALIGNMENT

    # each block read by the worker that holds it (a block moved to another worker would be deserialized anew)
    layouts = cluster_client.gather(
        [
            cluster_client.submit(layout, future, pure=False, workers=holders[future.key], allow_other_workers=False)
            for future in futures
        ]
    )
    assert set(layouts) == {("uint8", True, 0)}
    np.testing.assert_array_equal(placed.compute(scheduler=cluster_client.get), X.astype(np.float32))


@pytest.mark.slow
def test_an_opened_numpy_input_can_be_fitted_twice_on_a_cluster(cluster_client):
    """Fitting spreads a NumPy input over the workers without changing the caller's :class:`Dataset`: the same
    ``open_input`` result fits again (it failed with "Missing dependency") and predicts, with the same result."""
    X = np.random.default_rng(0).normal(size=(4000, 6)).astype(np.float32)
    data = open_input(X, chunk_rows=500)
    array_before = data.array
    first = daskmeans.KMeans(4, random_state=0, client=cluster_client).fit(data)
    assert data.array is array_before
    second = daskmeans.KMeans(4, random_state=0, client=cluster_client).fit(data)
    np.testing.assert_array_equal(first.cluster_centers_, second.cluster_centers_)
    np.testing.assert_array_equal(np.asarray(second.predict(data)), np.asarray(first.predict(X)))
