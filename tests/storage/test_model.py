"""Model files: Zarr group with arrays and JSON attributes; damaged, foreign and pickle-carrying files refused."""

import json
import os

import numpy as np
import pytest
import zarr
from conftest import make_blobs

from daskmeans import KMeans, ModelFileError, NotFittedError, OutputExistsError, load


@pytest.fixture(scope="module")
def fitted():
    X, _, _ = make_blobs(n=500, d=3, k=4, seed=0, dtype=np.float32)
    return KMeans(4, random_state=0).fit(X), X


def test_round_trip(tmp_path, fitted):
    model, X = fitted
    path = model.save(tmp_path / "model.zarr")
    loaded = load(path)
    assert type(loaded) is KMeans and loaded.get_params() == {**model.get_params(), "client": None}
    np.testing.assert_array_equal(loaded.cluster_centers_, model.cluster_centers_)
    assert loaded.cluster_centers_.dtype == np.float32
    assert loaded.inertia_ == model.inertia_ and loaded.n_iter_ == model.n_iter_
    assert loaded.history_ == json.loads(json.dumps(model.history_))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    with pytest.raises(NotFittedError, match="call predict"):
        loaded.labels_  # noqa: B018 - the attribute access is what raises
    attrs = zarr.open_group(str(path), mode="r").attrs
    assert attrs["format"] == "daskmeans-model" and attrs["format_version"] == 1


def test_array_init_parameter_is_stored_as_an_array(tmp_path):
    X, _, _ = make_blobs(n=100, d=2, k=2, seed=1)
    model = KMeans(2, init=X[:2]).fit(X)
    loaded = load(model.save(tmp_path / "m.zarr"))
    np.testing.assert_array_equal(loaded.init, X[:2])


def test_save_refuses_to_overwrite_and_unfitted(tmp_path, fitted):
    model, _ = fitted
    path = model.save(tmp_path / "m.zarr")
    with pytest.raises(OutputExistsError, match="overwrite=True"):
        model.save(path)
    model.save(path, overwrite=True)
    with pytest.raises(NotFittedError):
        KMeans(2).save(tmp_path / "other.zarr")
    assert not os.path.exists(tmp_path / "other.zarr")
    assert sorted(os.listdir(tmp_path)) == ["m.zarr"]


def test_foreign_and_damaged_files(tmp_path, fitted):
    model, _ = fitted
    with pytest.raises(FileNotFoundError, match="No model"):
        load(tmp_path / "nothing.zarr")
    zarr.open_group(str(tmp_path / "foreign.zarr"), mode="w").attrs["format"] = "something-else"
    with pytest.raises(ModelFileError, match="not a daskmeans model"):
        load(tmp_path / "foreign.zarr")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ModelFileError, match="not a daskmeans model"):
        load(tmp_path / "plain")

    path = model.save(tmp_path / "newer.zarr")
    zarr.open_group(path, mode="r+").attrs["format_version"] = 99
    with pytest.raises(ModelFileError, match="format version 99"):
        load(path)

    path = model.save(tmp_path / "missing.zarr")
    import shutil

    shutil.rmtree(os.path.join(path, "cluster_centers"))
    with pytest.raises(ModelFileError, match="damaged.*cluster_centers"):
        load(path)

    path = model.save(tmp_path / "shape.zarr")
    group = zarr.open_group(path, mode="r+")
    del group["cluster_centers"]
    group.create_array("cluster_centers", shape=(3, 3), dtype="f4")[...] = 0
    with pytest.raises(ModelFileError, match=r"damaged: cluster_centers has shape \(3, 3\)"):
        load(path)

    path = model.save(tmp_path / "params.zarr")
    zarr.open_group(path, mode="r+").attrs["params"] = {"n_clusters": 4, "evil": 1}
    with pytest.raises(ModelFileError, match="unknown parameter 'evil'"):
        load(path)


class Payload:
    """Unpickling this creates the marker file: proof that something was unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _v2_model_with_payload(path, model_attrs, meta_overrides, payload):
    """A hand-made Zarr v2 model group whose centers chunk is a pickle."""
    import pickle

    os.makedirs(os.path.join(path, "cluster_centers"))
    json.dump({"zarr_format": 2}, open(os.path.join(path, ".zgroup"), "w"))
    json.dump(model_attrs, open(os.path.join(path, ".zattrs"), "w"))
    meta = {
        "zarr_format": 2,
        "shape": [1],
        "chunks": [1],
        "dtype": "|O",
        "compressor": None,
        "fill_value": 0,
        "order": "C",
        "filters": [{"id": "pickle", "protocol": 5}],
        **meta_overrides,
    }
    json.dump(meta, open(os.path.join(path, "cluster_centers", ".zarray"), "w"))
    with open(os.path.join(path, "cluster_centers", "0"), "wb") as chunk:
        chunk.write(pickle.dumps(np.array([payload], dtype=object)))


@pytest.mark.parametrize("dtype", ["|O", "<f4"])
def test_a_pickle_payload_is_never_unpickled(tmp_path, fitted, dtype):
    model, _ = fitted
    attrs = dict(zarr.open_group(model.save(tmp_path / "good.zarr"), mode="r").attrs)
    marker = tmp_path / "pwned"
    evil = str(tmp_path / "evil.zarr")
    _v2_model_with_payload(evil, attrs, {"dtype": dtype}, Payload(marker))
    with pytest.raises(ModelFileError, match="not read|damaged"):
        load(evil)
    assert not marker.exists()
