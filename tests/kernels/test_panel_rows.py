"""The panel's filling by transposed blocks against a NumPy transcription: every dtype, widths of both vector
sizes, features and rows that do not fill a block, and rows whose values are not adjacent."""

import numba
import numpy as np
import pytest

from daskmeans.kernels.panel_rows import panel_filler


def reference_panel(X, r0, rows, panel_rows):
    """Feature ``f`` of row ``r0 + r`` at ``f * panel_rows + r``, as ``np.float32`` converts it; zeros elsewhere."""
    d = X.shape[1]
    panel = np.zeros((d, panel_rows), dtype=np.float32)
    panel[:, :rows] = X[r0 : r0 + rows].astype(np.float32).T
    return panel.ravel()


FILLERS = {width: panel_filler(width, 2 * width) for width in (8, 16)}


def _caller(width):
    fill = FILLERS[width]

    @numba.njit
    def call(X, r0, rows, panel):
        fill(X, r0, rows, panel)

    return call


CALLERS = {width: _caller(width) for width in FILLERS}


def _rows(dtype, n, d, rng):
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        X = rng.integers(info.min, info.max, size=(n, d), endpoint=True, dtype=dtype)
        X[0] = info.max
        return X
    return (rng.normal(size=(n, d)) * 1e3).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("d", [5, 16, 128, 131])
def test_filled_panel_is_the_rows_transposed_in_float32(dtype, width, d):
    rng = np.random.default_rng(d)
    X = _rows(dtype, 3 * width + 5, d, rng)
    panel_rows = 2 * width
    for r0, rows in ((0, panel_rows), (width, panel_rows), (3, panel_rows - 3), (2 * width, width + 5), (1, 1)):
        panel = np.zeros(d * panel_rows, dtype=np.float32)
        CALLERS[width](X, r0, rows, panel)
        np.testing.assert_array_equal(panel, reference_panel(X, r0, rows, panel_rows), err_msg=f"{r0=} {rows=}")


@pytest.mark.parametrize("order", ["F", "strided rows"])
def test_rows_whose_values_are_not_adjacent_are_filled_alike(order):
    """A Fortran-ordered array (values of a row far apart) and a view of every other row."""
    rng = np.random.default_rng(3)
    X = _rows(np.uint8, 80, 40, rng)
    view = np.asfortranarray(X) if order == "F" else X[::2]
    panel = np.zeros(40 * 32, dtype=np.float32)
    CALLERS[16](view, 2, 32, panel)
    np.testing.assert_array_equal(panel, reference_panel(np.ascontiguousarray(view), 2, 32, 32))
