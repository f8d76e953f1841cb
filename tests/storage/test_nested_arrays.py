"""Arrays in subgroups of a Zarr group are named by their path (``array="sub/X"``); a name that is not there is
refused with the list of every array the group holds, nested ones by path."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskmeans import InputDataError, KMeans, open_input
from tests.conftest import make_blobs

X, _, _ = make_blobs(n=400, d=3, k=3, seed=5)


@pytest.fixture(params=[3, 2], ids=["v3", "v2"])
def nested(tmp_path, request):
    """A group with ``top`` at its root and ``X`` two subgroups down (``sub/deeper/X``) and ``sub/Y``."""
    path = str(tmp_path / "store.zarr")
    root = zarr.open_group(path, mode="w", zarr_format=request.param)
    root.create_array("top", data=X[:, :2], chunks=(100, 2))
    sub = root.create_group("sub")
    sub.create_array("Y", data=X[:50], chunks=(50, 3))
    sub.create_group("deeper").create_array("X", data=X, chunks=(100, 3))
    return path


def test_an_array_in_a_subgroup_is_opened_by_its_path(nested):
    data = open_input(nested, array="sub/deeper/X")
    assert data.location == f"{nested}/sub/deeper/X"
    np.testing.assert_array_equal(data.array.compute(), X)
    model = KMeans(3, random_state=0).fit(data)
    np.testing.assert_allclose(model.cluster_centers_, KMeans(3, random_state=0).fit(X).cluster_centers_, rtol=1e-6)
    assert open_input(nested, array="/sub/Y/").n_samples == 50  # slashes around the path are ignored


def test_a_missing_array_lists_every_array_by_path(nested):
    with pytest.raises(
        InputDataError,
        match=r"has no array 'sub/X'; it holds \['sub/Y', 'sub/deeper/X', "
        r"'top'\]",
    ):
        open_input(nested, array="sub/X")


@pytest.mark.parametrize("bad", ["sub/../top", "./top", "sub//Y", ".."])
def test_dot_parts_and_empty_parts_are_refused(nested, bad):
    with pytest.raises(InputDataError, match=r"not a path inside the Zarr group.*without '\.' or '\.\.'"):
        open_input(nested, array=bad)


def test_a_group_whose_only_array_is_nested_needs_no_name(tmp_path):
    path = str(tmp_path / "one.zarr")
    zarr.open_group(path, mode="w").create_group("sub").create_array("X", data=X, chunks=(200, 3))
    assert open_input(path).location == f"{path}/sub/X"


def test_without_a_name_the_only_top_level_array_is_taken_and_several_are_listed(nested):
    assert open_input(nested).location == f"{nested}/top"  # as before: nested arrays do not make it ambiguous
    zarr.open_group(nested, mode="a").create_array("other", data=X, chunks=(400, 3))
    with pytest.raises(InputDataError, match=r"holding arrays \['other', 'sub/Y', 'sub/deeper/X', 'top'\].*sub/X"):
        open_input(nested)
