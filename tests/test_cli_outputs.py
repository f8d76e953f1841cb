"""No output of a command can destroy its input: outputs that are, lie inside or contain the input data, the
model, or another output are refused before any work, whatever symlinks or ``..`` lead there; an input array in a
subgroup (``--array sub/X``) included."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from test_cli import assert_user_error, invoke, run_module

from daskmeans.datasets import make_blobs_zarr


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "data.zarr"
    make_blobs_zarr(path, 600, 3, 2, chunk_rows=200, random_state=0)
    return path


def data_of(store):
    return zarr.open_array(str(store / "X"), mode="r")[:]


@pytest.mark.parametrize("labels", ["{store}/X/c", "{store}/X", "{store}/X/../X/c"])
def test_labels_inside_the_input_array_are_refused(store, labels):
    before = data_of(store)
    result = invoke(
        "fit", store, "--array", "X", "-k", 2, "--quiet", "--overwrite", "--labels", labels.format(store=store)
    )
    assert_user_error(result, "--labels", "input data")
    np.testing.assert_array_equal(data_of(store), before)


def test_an_output_reached_through_a_symlink_is_refused(tmp_path, store):
    os.symlink(store, tmp_path / "alias.zarr")
    before = data_of(store)
    result = invoke(
        "fit", store, "--array", "X", "-k", 2, "--quiet", "--overwrite", "--labels", tmp_path / "alias.zarr" / "X"
    )
    assert_user_error(result, "--labels", "is the input data")
    np.testing.assert_array_equal(data_of(store), before)


def test_a_model_over_the_input_group_is_refused(store):
    result = invoke("fit", store / "X", "-k", 2, "--quiet", "--overwrite", "--out", store)
    assert_user_error(result, "--out", "contains the input data")
    assert (store / "X").is_dir()


def test_predict_refuses_labels_over_its_input_or_its_model(tmp_path, store):
    model = tmp_path / "model.zarr"
    assert invoke("fit", store, "--array", "X", "-k", 2, "--quiet", "--out", model).exit_code == 0
    before = data_of(store)
    assert_user_error(
        invoke("predict", model, store, "--array", "X", "--labels", store / "X" / "c", "--overwrite"),
        "--labels",
        "input data",
    )
    assert_user_error(
        invoke("predict", model, store, "--array", "X", "--labels", model / "labels", "--overwrite"),
        "--labels",
        "the model",
    )
    np.testing.assert_array_equal(data_of(store), before)
    assert (model / "cluster_centers").is_dir()


def test_outputs_may_not_nest(tmp_path, store):
    result = invoke(
        "fit",
        store,
        "--array",
        "X",
        "-k",
        2,
        "--quiet",
        "--out",
        tmp_path / "m.zarr",
        "--labels",
        tmp_path / "m.zarr" / "labels",
    )
    assert_user_error(result, "--out", "contains --labels")


def test_labels_beside_the_data_array_are_fine(store):
    result = invoke("fit", store, "--array", "X", "-k", 2, "--quiet", "--labels", store / "labels")
    assert result.exit_code == 0, result.output
    assert zarr.open_array(str(store / "labels"), mode="r").shape == (600,)


@pytest.fixture
def nested(tmp_path):
    """A group holding its data only in a subgroup: ``sub/X`` (600 x 3)."""
    path = tmp_path / "nested.zarr"
    make_blobs_zarr(tmp_path / "blobs.zarr", 600, 3, 2, chunk_rows=200, random_state=0)
    zarr.open_group(str(path), mode="w").create_group("sub").create_array(
        "X", data=data_of(tmp_path / "blobs.zarr"), chunks=(200, 3)
    )
    return path


def nested_data(nested):
    return zarr.open_array(str(nested / "sub" / "X"), mode="r")[:]


@pytest.mark.slow
def test_fit_and_info_take_an_array_in_a_subgroup_by_its_path(tmp_path, nested):
    done = run_module(
        "fit",
        nested,
        "--array",
        "sub/X",
        "-k",
        2,
        "--quiet",
        "--labels",
        nested / "sub" / "labels",
        "--out",
        tmp_path / "model.zarr",
    )
    assert done.returncode == 0, done.stderr
    assert f"on {nested}/sub/X (600 x 3 float32)" in done.stdout
    assert zarr.open_array(str(nested / "sub" / "labels"), mode="r").shape == (600,)
    info = invoke("info", nested)
    assert info.exit_code == 0 and "sub/X" in info.output and "sub/labels" in info.output
    assert "sub/X" in invoke("info", nested, "--array", "sub/X").output


def test_a_missing_array_is_named_with_the_nested_ones(nested):
    assert_user_error(invoke("fit", nested, "--array", "X", "-k", 2, "--quiet"), "has no array 'X'; it holds ['sub/X']")


@pytest.mark.slow
@pytest.mark.parametrize(
    "option, path, relation",
    [
        ("--labels", "{nested}/sub/X/c", "lies inside the input data"),
        ("--labels", "{nested}/sub/X", "is the input data"),
        ("--labels", "{nested}/sub", "contains the input data"),
        ("--out", "{nested}", "contains the input data"),
        ("--labels", "{nested}/sub/../sub/X", "is the input data"),
    ],
)
def test_outputs_over_an_input_array_in_a_subgroup_are_refused(nested, option, path, relation):
    before = nested_data(nested)
    result = invoke(
        "fit", nested, "--array", "sub/X", "-k", 2, "--quiet", "--overwrite", option, path.format(nested=nested)
    )
    assert_user_error(result, option, relation)
    np.testing.assert_array_equal(nested_data(nested), before)
    model = nested.parent / "model.zarr"
    assert invoke("fit", nested, "--array", "sub/X", "-k", 2, "--quiet", "--out", model, "--overwrite").exit_code == 0
    assert_user_error(
        invoke("predict", model, nested, "--array", "sub/X", "--labels", path.format(nested=nested), "--overwrite"),
        "--labels" if option == "--labels" else "input data",
    )
    np.testing.assert_array_equal(nested_data(nested), before)
