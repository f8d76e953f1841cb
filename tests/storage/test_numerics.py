"""Numbers that float32 cannot carry: wide integers compute in float64, magnitudes too small for a dtype and rows
lost around a large offset are refused with the reason and the fix, instead of "too few distinct rows"."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskmeans import InputDataError, KMeans, open_input

#: Rows of a few well-separated integer blobs around 0 (spread about 1000), as offsets.
OFFSETS = np.random.default_rng(0).integers(0, 1000, size=(3000, 2)) + np.repeat(
    [[0, 0], [5000, 0], [0, 5000]], 1000, axis=0
)


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (np.uint8, np.float32),
        (np.int8, np.float32),
        (np.int16, np.float32),
        (np.uint16, np.float32),
        (np.int32, np.float64),
        (np.uint32, np.float64),
        (np.int64, np.float64),
        (np.uint64, np.float64),
        (">i8", np.float64),
        (np.float16, np.float32),
        (np.float32, np.float32),
        (np.float64, np.float64),
    ],
)
def test_the_compute_dtype_holds_every_value_of_the_stored_dtype(dtype, expected):
    assert open_input(np.zeros((4, 2), dtype=dtype)).dtype == expected


@pytest.mark.parametrize("dtype, offset", [(np.int64, 2**30), (np.uint64, 2**31), (np.int32, 2**25 + 1)])
def test_wide_integers_beyond_float32_precision_are_clustered_exactly(dtype, offset):
    X = (offset + OFFSETS).astype(dtype)
    assert len(np.unique(X.astype(np.float32), axis=0)) < len(np.unique(X, axis=0)), "float32 merges rows"
    fitted = KMeans(3, random_state=0).fit(X)
    reference = KMeans(3, random_state=0).fit(OFFSETS.astype(np.float64))
    assert fitted.cluster_centers_.dtype == np.float64
    np.testing.assert_array_equal(np.sort(np.bincount(fitted.labels_)), [1000, 1000, 1000])
    np.testing.assert_allclose(
        np.sort(fitted.cluster_centers_ - offset, axis=0),
        np.sort(reference.cluster_centers_, axis=0),
        rtol=0,
        atol=1e-3,
    )
    assert fitted.inertia_ == pytest.approx(reference.inertia_, rel=1e-9)


def test_wide_integers_in_a_zarr_store_compute_in_float64(tmp_path):
    X = (2**40 + OFFSETS).astype(np.int64)
    zarr.create_array(store=str(tmp_path / "wide.zarr"), data=X, chunks=(500, 2))
    data = open_input(str(tmp_path / "wide.zarr"))
    assert data.dtype == np.float64 and data.source_dtype == np.int64
    np.testing.assert_array_equal(data.array.compute(), X.astype(np.float64))


def test_three_thousand_distinct_subnormal_float32_rows_are_refused_with_the_fix():
    X = (np.random.default_rng(1).random((3000, 2)) * 1e-39).astype(np.float32)
    assert np.all(np.abs(X) < np.finfo(np.float32).tiny) and len(np.unique(X, axis=0)) > 2900
    with pytest.raises(InputDataError, match=r"underflow float32.*Rescale.*multiply by 1e\+39.*float64") as raised:
        KMeans(3, random_state=0).fit(X)
    assert "distinct row(s)" not in str(raised.value)  # not the old "only 1 distinct row(s)"
    fitted = KMeans(3, random_state=0).fit(X.astype(np.float64))  # what the message offers
    assert len(np.unique(fitted.labels_)) == 3 and fitted.inertia_ > 0
    rescaled = KMeans(3, random_state=0).fit(
        (X.astype(np.float64) * 1e39).astype(np.float32)
    )  # and the other fix (in float64)
    assert len(np.unique(rescaled.labels_)) == 3


def test_tiny_float64_magnitudes_are_refused_and_zeros_are_not():
    with pytest.raises(InputDataError, match="underflow float64.*Rescale"):
        KMeans(2, random_state=0).fit(np.random.default_rng(2).random((50, 2)) * 1e-160)
    assert KMeans(1).fit(np.zeros((20, 2))).inertia_ == 0.0


def test_rows_lost_around_a_large_offset_are_refused_with_the_fix():
    X = (2**40 + OFFSETS).astype(np.int64)  # float64 holds them, but squares near 2**81 round by about 2**29
    with pytest.raises(InputDataError, match=r"vary by only.*Subtract the offset") as raised:
        KMeans(3, random_state=0).fit(X)
    assert "distinct row(s)" not in str(raised.value)  # not the old "only 1 distinct row(s)"
    fitted = KMeans(3, random_state=0).fit(X - X.min(axis=0))
    np.testing.assert_array_equal(np.sort(np.bincount(fitted.labels_)), [1000, 1000, 1000])
