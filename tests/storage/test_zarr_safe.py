"""The shared pieces of storage: the JSON encoder, local paths, flushed groups read back safely, disk usage."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from daskmeans.exceptions import CheckpointError, ModelFileError
from daskmeans.storage.publish import is_local, local_path
from daskmeans.storage.sources import stored_bytes
from daskmeans.storage.zarr_safe import (
    MAX_ARRAY_BYTES,
    check_tree,
    json_default,
    open_safe_array,
    read_group,
    read_safe_array,
    to_jsonable,
    write_group,
)


def test_json_default_encodes_numpy_values_and_paths():
    record = {
        "count": np.int64(3),
        "energy": np.float32(0.5),
        "flag": np.bool_(True),
        "centers": np.eye(2),
        "path": Path("/data/x.zarr"),
    }
    assert json.loads(json.dumps(record, default=json_default)) == {
        "count": 3,
        "energy": 0.5,
        "flag": True,
        "centers": [[1.0, 0.0], [0.0, 1.0]],
        "path": "/data/x.zarr",
    }
    with pytest.raises(TypeError, match="object is not JSON serializable"):
        json.dumps({"x": object()}, default=json_default)


def test_to_jsonable_keeps_what_models_have_always_stored():
    value = {
        "n": np.int32(4),
        "tol": np.float32(0.25),
        1: (np.float64(2.0), [None, "s"]),
        "a": np.arange(3),
        "flag": np.bool_(True),
        "f": len,
    }
    assert to_jsonable(value) == {"n": 4, "tol": 0.25, "1": [2.0, [None, "s"]], "a": [0, 1, 2], "flag": None, "f": None}
    assert type(to_jsonable(np.int64(2))) is int and type(to_jsonable(np.float32(2))) is float


def test_to_jsonable_hands_the_rest_to_convert():
    described = to_jsonable([1, {"a": 1}, np.zeros(2)], convert=lambda value: type(value).__name__)
    assert described == [1, "dict", "ndarray"]


@pytest.mark.parametrize(
    "path, local", [("/a/b", True), ("rel/b", True), ("file:///a/b", True), ("s3://bucket/b", False), ("gs://b", False)]
)
def test_is_local(path, local):
    assert is_local(path) is local
    assert local_path(path) == (path.removeprefix("file://"))


def test_groups_are_written_and_read_back_with_the_checks(tmp_path):
    arrays = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "empty": np.zeros((0, 4)), "mask": np.ones(3, bool)}
    write_group(tmp_path / "g", arrays, attrs={"kind": "test"})
    back = read_group(tmp_path / "g", list(arrays))
    for name, value in arrays.items():
        np.testing.assert_array_equal(back[name], value)
        assert back[name].dtype == value.dtype
    assert dict(zarr.open_group(str(tmp_path / "g"), mode="r").attrs) == {"kind": "test"}
    with pytest.raises(CheckpointError, match="only numbers"):
        write_group(tmp_path / "h", {"s": np.array(["a"])})
    with pytest.raises(CheckpointError, match="'missing' is missing"):
        read_group(tmp_path / "g", ["missing"])
    with pytest.raises(CheckpointError, match="not a readable Zarr group"):
        read_group(tmp_path / "nothing", ["x"])
    with pytest.raises(ModelFileError, match="'missing' is missing"):
        read_safe_array(zarr.open_group(str(tmp_path / "g"), mode="r"), "missing", "'g'")


def test_stored_bytes_of_local_directories_only(tmp_path):
    (tmp_path / "store" / "sub").mkdir(parents=True)
    (tmp_path / "store" / "a").write_bytes(b"x" * 10)
    (tmp_path / "store" / "sub" / "b").write_bytes(b"y" * 5)
    store = str(tmp_path / "store")
    assert stored_bytes(store) == 15
    assert stored_bytes(tmp_path / "store") == 15 and stored_bytes(f"file://{store}") == 15
    assert stored_bytes(str(tmp_path / "store" / "a")) is None
    assert stored_bytes(str(tmp_path / "absent")) is None
    assert stored_bytes("s3://bucket/store.zarr") is None
    assert not os.path.exists(tmp_path / "absent")


def test_a_group_with_a_link_or_a_fifo_inside_is_refused_before_opening_a_file(tmp_path):
    write_group(tmp_path / "g", {"x": np.arange(3.0)})
    chunk = tmp_path / "g" / "x" / "0"
    os.rename(chunk, tmp_path / "moved")
    os.symlink(tmp_path / "moved", chunk)
    with pytest.raises(CheckpointError, match=r"symbolic link 'x/0'.*not read"):
        read_group(tmp_path / "g", ["x"])
    os.remove(chunk)
    os.mkfifo(chunk)
    with pytest.raises(CheckpointError, match="'x/0', which is not a plain file"):
        read_group(tmp_path / "g", ["x"])
    os.remove(chunk)
    os.rename(tmp_path / "moved", chunk)
    check_tree(tmp_path / "g", "'g'")
    with pytest.raises(ModelFileError, match="more than 2 files"):
        check_tree(tmp_path / "g", "'g'", ModelFileError, max_entries=2)
    os.symlink(tmp_path / "g", tmp_path / "alias")  # the named folder itself may be a link
    np.testing.assert_array_equal(read_group(tmp_path / "alias", ["x"])["x"], np.arange(3.0))


def test_declared_shapes_chunk_grids_and_sizes_are_checked_before_reading(tmp_path):
    group = zarr.open_group(str(tmp_path / "g"), mode="w", zarr_format=3)
    group.create_array("many", shape=(100_000, 2), chunks=(1, 2), dtype="f8")
    group.create_array("huge", shape=(MAX_ARRAY_BYTES // 8 + 1,), chunks=(MAX_ARRAY_BYTES // 8 + 1,), dtype="f8")
    group.create_array("x", shape=(3, 2), chunks=(3, 2), dtype="f4")[...] = 1
    with pytest.raises(ModelFileError, match="'many' declares 100,000 chunks of shape \\(1, 2\\), over the limit"):
        read_safe_array(group, "many", "'g'")
    with pytest.raises(CheckpointError, match="'huge' declares shape .* over the limit"):
        read_safe_array(group, "huge", "'g'", error=CheckpointError)
    with pytest.raises(ModelFileError, match=r"x has shape \(3, 2\), expected \(4, 2\) \(n_clusters=4\)"):
        open_safe_array(group, "x", "'g'", shape=(4, 2), expected="n_clusters=4")
    np.testing.assert_array_equal(read_safe_array(group, "x", "'g'", shape=(3, 2)), np.ones((3, 2)))
