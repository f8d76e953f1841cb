"""Bounds in 16 bits: every code's value from its exponent and mantissa, storing rounds down to the largest code
not above, and the Numba and NumPy forms agree with that reference on every code and on hard values."""

from __future__ import annotations

import numba
import numpy as np
import pytest

from daskmeans.kernels.packed_bounds import (
    INFINITE_CODE,
    LOWER_DTYPE,
    LOWEST_EXPONENT,
    as_stored_bounds,
    load_lower,
    pack_bounds,
    store_lower,
    unpack_bounds,
)


def reference_values():
    """The value of every code, from the format's definition: code ``e * 1024 + m`` (``e`` the 6 exponent bits,
    ``m`` the 10 mantissa bits) is ``(1 + m / 1024) * 2**(e + LOWEST_EXPONENT)``; code 0 is 0, the last infinity."""
    codes = np.arange(2**16)
    exponent, mantissa = codes >> 10, codes & 1023
    values = np.ldexp(1.0 + mantissa / 1024.0, exponent + LOWEST_EXPONENT)
    values[0] = 0.0
    values[INFINITE_CODE] = np.inf
    return values


def reference_store(values):
    """The largest code whose value is not above each value (negative values: code 0)."""
    table = reference_values()
    return (np.searchsorted(table, np.maximum(values, 0.0), side="right") - 1).astype(LOWER_DTYPE)


@numba.njit(cache=True)
def _store_all(values):
    out = np.empty(values.shape[0], dtype=np.uint16)
    for i in range(values.shape[0]):
        out[i] = store_lower(values[i])
    return out


@numba.njit(cache=True)
def _load_all(codes):
    out = np.empty(codes.shape[0])
    for i in range(codes.shape[0]):
        out[i] = load_lower(codes[i])
    return out


def hard_values():
    table = reference_values()
    finite = table[np.isfinite(table)]
    rng = np.random.default_rng(0)
    return np.concatenate(
        [
            finite,
            np.nextafter(finite, np.inf),
            np.nextafter(finite, -np.inf),  # every code, and just around it
            [-1.0, -0.0, 2.0**LOWEST_EXPONENT, 2.0**-40, 2.0**34, 1e30, np.finfo(np.float64).max, np.inf],
            rng.random(10_000) * 1000,
            np.exp(rng.uniform(-25, 25, 10_000)),
        ]
    )


def test_every_code_has_its_reference_value_in_numba_and_numpy():
    codes = np.arange(2**16).astype(LOWER_DTYPE)
    expected = reference_values()
    np.testing.assert_array_equal(unpack_bounds(codes), expected)
    np.testing.assert_array_equal(_load_all(codes), expected)
    assert np.all(np.diff(expected) > 0)  # codes are ordered as their values


def test_storing_rounds_down_to_the_largest_code_not_above():
    values = hard_values()
    expected = reference_store(values)
    np.testing.assert_array_equal(pack_bounds(values), expected)
    np.testing.assert_array_equal(_store_all(values), expected)
    stored = unpack_bounds(expected)
    assert np.all(stored <= np.maximum(values, 0.0))  # a bound stays a bound
    inside = (values >= reference_values()[1]) & (values < 2.0**33)  # code 0 is 0, not 2**LOWEST_EXPONENT
    assert np.all(stored[inside] >= values[inside] * (1 - 2.0**-10))  # and loses at most 2**-10 of itself


def test_extremes_store_as_zero_the_largest_code_and_infinity():
    codes = pack_bounds([-5.0, 0.0, 2.0**-35, 1e300, np.inf])
    assert codes.tolist() == [0, 0, 0, INFINITE_CODE - 1, INFINITE_CODE]
    assert unpack_bounds(codes)[-1] == np.inf


def test_float32_bounds_of_an_older_checkpoint_become_codes_and_codes_stay():
    old = np.array([[0.5, 3.25], [np.inf, 7.0]], dtype=np.float32)
    np.testing.assert_array_equal(as_stored_bounds(old), reference_store(old.astype(np.float64)))
    codes = pack_bounds(old)
    assert as_stored_bounds(codes) is codes


def test_unpacking_refuses_what_is_not_codes():
    with pytest.raises(TypeError, match="uint16"):
        unpack_bounds(np.zeros(3, dtype=np.float32))


def test_the_kernels_refuse_bounds_that_are_not_codes():
    from daskmeans.kernels.exact_assign import assign_with_bounds
    from daskmeans.kernels.nested_groups import make_groups
    from daskmeans.kernels.revisit import revisit_with_bounds

    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 4)).astype(np.float32)
    centers = X[:6].copy()
    groups = make_groups(centers, "yinyang", 2)
    out = (np.empty(50, dtype=np.int32), np.empty(50), np.empty((50, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="uint16"):
        assign_with_bounds(X, centers, groups, out=out)
    labels, dist2, lower, _ = assign_with_bounds(X, centers, groups)
    with pytest.raises(TypeError, match="uint16"):
        revisit_with_bounds(X, centers, labels, unpack_bounds(lower).astype(np.float32), np.zeros(6), groups)
