"""Model files are untrusted input: links, FIFOs, huge declared shapes, unknown or mistyped attributes and
runtime parameters in a model file are refused before any chunk is read, with a message naming the field.

The models are copies of the ones saved before the redesign (tests/data/models), edited on disk.
"""

import json
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import zarr

from daskmeans import ModelFileError, load
from daskmeans.registry import estimator_classes
from daskmeans.storage.model import SCALAR_KINDS

MODELS = Path(__file__).resolve().parents[1] / "data" / "models"


def copy_model(name, tmp_path, as_name=None):
    target = tmp_path / (as_name or f"{name}.zarr")
    shutil.copytree(MODELS / f"{name}.zarr", target)
    return target


def edit_attrs(path, edit):
    """Apply ``edit(attrs)`` to the model's JSON attributes, written back to its zarr.json."""
    meta_path = Path(path) / "zarr.json"
    meta = json.loads(meta_path.read_text())
    edit(meta["attributes"])
    meta_path.write_text(json.dumps(meta))


def declare_shape(path, array, shape, chunks):
    """Rewrite the metadata of ``array`` to declare ``shape`` in chunks of ``chunks`` (no chunk is written)."""
    meta_path = Path(path) / array / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = list(shape)
    meta["chunk_grid"]["configuration"]["chunk_shape"] = list(chunks)
    meta_path.write_text(json.dumps(meta))


def load_within(path, seconds=20):
    """``load(path)``, failing the test instead of hanging when it takes longer than ``seconds``."""
    outcome = {}

    def target():
        try:
            outcome["model"] = load(path)
        except BaseException as error:  # noqa: BLE001 (handed to the test thread)
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"load({path!r}) still runs after {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["model"]


# -- links and special files ----------------------------------------------------------------------------------------
def test_a_chunk_linked_to_another_models_chunk_is_refused(tmp_path):
    other = copy_model("kmeans", tmp_path, "other.zarr")
    model = copy_model("kmeans", tmp_path)
    chunk = model / "cluster_centers" / "c" / "0" / "0"
    chunk.unlink()
    chunk.symlink_to(other / "cluster_centers" / "c" / "0" / "0")
    with pytest.raises(ModelFileError, match=r"symbolic link 'cluster_centers/c/0/0'.*not read"):
        load_within(model)


def test_a_folder_linked_out_of_the_model_is_refused(tmp_path):
    other = copy_model("kmeans", tmp_path, "other.zarr")
    model = copy_model("kmeans", tmp_path)
    shutil.rmtree(model / "cluster_centers")
    (model / "cluster_centers").symlink_to(other / "cluster_centers", target_is_directory=True)
    with pytest.raises(ModelFileError, match="symbolic link 'cluster_centers'"):
        load_within(model)


@pytest.mark.parametrize("linked", [False, True])
def test_a_chunk_that_is_a_fifo_is_refused_without_hanging(tmp_path, linked):
    model = copy_model("kmeans", tmp_path)
    chunk = model / "cluster_centers" / "c" / "0" / "0"
    chunk.unlink()
    if linked:
        os.mkfifo(tmp_path / "fifo")
        chunk.symlink_to(tmp_path / "fifo")
    else:
        os.mkfifo(chunk)
    with pytest.raises(ModelFileError, match="symbolic link" if linked else "not a plain file"):
        load_within(model)


def test_a_model_path_that_is_itself_a_link_loads(tmp_path):
    model = copy_model("kmeans", tmp_path)
    (tmp_path / "alias.zarr").symlink_to(model, target_is_directory=True)
    loaded = load_within(tmp_path / "alias.zarr")
    np.testing.assert_array_equal(loaded.cluster_centers_, load(model).cluster_centers_)


def test_a_folder_of_countless_files_is_refused_before_reading(tmp_path):
    model = copy_model("kmeans", tmp_path)
    for index in range(1001):
        (model / "cluster_centers" / "c" / f"{index + 1}").mkdir()
    with pytest.raises(ModelFileError, match="more than 1000 files"):
        load_within(model)


# -- declared shapes ------------------------------------------------------------------------------------------------
def test_a_huge_declared_shape_is_refused_before_any_chunk_is_read(tmp_path, monkeypatch):
    model = copy_model("kmeans", tmp_path)
    declare_shape(model, "cluster_centers", (5_000_000, 6), (4, 6))  # 1.25M chunks, all missing
    keys_read = []
    get = zarr.storage.LocalStore.get

    async def recording_get(self, key, *args, **kwargs):
        keys_read.append(key)
        return await get(self, key, *args, **kwargs)

    monkeypatch.setattr(zarr.storage.LocalStore, "get", recording_get)
    with pytest.raises(
        ModelFileError,
        match=r"cluster_centers has shape \(5000000, 6\), expected \(7, 6\) "
        r"\(n_clusters=7 in the stored parameters and n_features_in_=6\)",
    ):
        load_within(model)
    assert keys_read, "the model was read through zarr's local store"
    assert not [key for key in keys_read if "/c/" in key or key.startswith("c/")], keys_read


def test_an_edited_k_names_the_stored_parameter(tmp_path):
    model = copy_model("kmeans", tmp_path)
    edit_attrs(model, lambda attrs: attrs["params"].update(n_clusters=3))
    with pytest.raises(ModelFileError, match=r"has shape \(7, 6\), expected \(3, 6\) \(n_clusters=3 in the stored"):
        load(model)
    edit_attrs(model, lambda attrs: attrs["params"].update(n_clusters="7"))
    with pytest.raises(ModelFileError, match="stored parameter is invalid: n_clusters must be an integer, got '7'"):
        load(model)
    edit_attrs(model, lambda attrs: (attrs["params"].update(n_clusters=7), attrs["scalars"].update(n_features_in_=8)))
    with pytest.raises(ModelFileError, match=r"expected \(7, 8\) \(n_clusters=7 .* n_features_in_=8\)"):
        load(model)


def test_a_mixture_names_n_components(tmp_path):
    model = copy_model("vc-gmm", tmp_path)
    edit_attrs(model, lambda attrs: attrs["params"].update(n_components=5))
    with pytest.raises(ModelFileError, match=r"means has shape \(7, 6\), expected \(5, 6\) \(n_components=5"):
        load(model)


def test_kernel_support_arrays_must_agree(tmp_path):
    model = copy_model("kernel-kmeans", tmp_path)
    declare_shape(model, "support_coef", (2999,), (2999,))
    with pytest.raises(
        ModelFileError,
        match=r"support_coef has shape \(2999,\), expected \(3000,\) "
        r"\(m = the number of rows of support_rows\)",
    ):
        load(model)


def test_too_many_chunks_are_refused_even_with_the_right_shape(tmp_path):
    model = copy_model("kernel-kmeans", tmp_path)
    for name in ("support_rows", "support_coef", "support_owner", "support_index"):
        shape = json.loads((model / name / "zarr.json").read_text())["shape"]
        declare_shape(model, name, [10_000_000] + shape[1:], [1] + shape[1:])
    with pytest.raises(ModelFileError, match="support_rows.*declares 10,000,000 chunks.*limit"):
        load_within(model)


def test_the_parameter_init_may_name_only_its_own_array(tmp_path):
    model = copy_model("kmeans", tmp_path)
    edit_attrs(model, lambda attrs: attrs["params"].update(init={"array": "cluster_centers"}))
    with pytest.raises(
        ModelFileError, match="parameter 'init' names the array 'cluster_centers', expected 'param_init'"
    ):
        load(model)


# -- attributes -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, value, message",
    [
        ("predict", 1, r"unknown fitted attribute\(s\) \['predict'\]"),
        ("__dict__", {}, r"unknown fitted attribute\(s\) \['__dict__'\]"),
        ("cluster_centers_", [[0.0] * 6] * 7, r"unknown fitted attribute\(s\) \['cluster_centers_'\]"),
        ("n_iter_", "3", "'n_iter_' is '3', expected an integer >= 0"),
        ("n_features_in_", 0, "'n_features_in_' is 0, expected an integer >= 1"),
        ("stop_reason_", ["converged"], "'stop_reason_' is \\['converged'\\], expected a string"),
    ],
)
def test_only_the_estimators_scalars_of_their_type_are_restored(tmp_path, name, value, message):
    model = copy_model("kmeans", tmp_path)
    edit_attrs(model, lambda attrs: attrs["scalars"].update({name: value}))
    with pytest.raises(ModelFileError, match=message):
        load(model)


def test_a_missing_scalar_that_predict_needs_is_refused(tmp_path):
    model = copy_model("vc-gmm", tmp_path)
    edit_attrs(model, lambda attrs: attrs["scalars"].pop("covariance_"))
    with pytest.raises(ModelFileError, match="'covariance_' is missing"):
        load(model)
    edit_attrs(model, lambda attrs: attrs["scalars"].update(covariance_=-1.0))
    with pytest.raises(ModelFileError, match="'covariance_' is -1.0, expected a positive number"):
        load(model)


@pytest.mark.parametrize("name", ["client", "progress"])
def test_runtime_parameters_are_never_read_from_a_file(tmp_path, name):
    model = copy_model("kmeans", tmp_path)
    edit_attrs(model, lambda attrs: attrs["params"].update({name: "tcp://attacker:8786"}))
    with pytest.raises(ModelFileError, match=f"parameter '{name}', which says where a fit runs"):
        load(model)


def test_unknown_parameters_and_bad_history_are_refused(tmp_path):
    model = copy_model("kmeans", tmp_path)
    edit_attrs(model, lambda attrs: attrs["params"].update(evil=1))
    with pytest.raises(ModelFileError, match="unknown parameter 'evil' for KMeans; it takes"):
        load(model)
    edit_attrs(model, lambda attrs: (attrs["params"].pop("evil"), attrs.update(history={"a": 1})))
    with pytest.raises(ModelFileError, match="'history' attribute is dict, expected a list"):
        load(model)


def test_every_scalar_an_estimator_saves_has_a_known_type():
    for cls in estimator_classes().values():
        assert set(cls._model_scalars) <= set(SCALAR_KINDS), cls.__name__


def test_the_golden_models_still_load_with_every_check(tmp_path):
    for path in sorted(MODELS.glob("*.zarr")):
        model = load(path)
        assert np.isfinite(model.cluster_centers_).all()
        assert zarr.open_group(str(path), mode="r").attrs["format_version"] == 1
