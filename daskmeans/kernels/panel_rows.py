"""Rows laid out as a panel: converted to float32 and transposed, feature by feature, for the panel scan.

The panel scan (:mod:`daskmeans.kernels.panel_scan`) reads one feature of a panel's rows as one vector, so a panel
stores feature ``f`` of row ``r`` at ``f * rows + r``. Storing a row's values one at a time there is one scalar
store per value, strided by the panel's width. Here a square block of ``width`` rows by ``width`` features is
loaded a row at a time (one vector load and one conversion per row), transposed in registers by ``log2(width)``
stages of two-vector shuffles, and stored a feature at a time (one vector store each). The values are those of
``np.float32(value)``: integers and float32 exactly, float64 rounded to nearest.

The panel scan inlines the filling, and Numba's on-disk cache of a caller does not notice a change here: clear the
caches (``__pycache__/*.nbi``, ``*.nbc``) after editing this module.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .distance import as_float_lanes


def _transposed(builder, vectors, width):
    """The ``width`` vectors of ``width`` lanes transposed (lane ``j`` of vector ``i`` becomes lane ``i`` of vector
    ``j``): at each stage ``h`` (``width / 2`` down to 1), the two ``h``-blocks off the diagonal of every
    ``2h``-block swap places between vectors ``i`` and ``i + h``, two shuffles a pair."""
    i32 = ir.IntType(32)
    vectors = list(vectors)
    h = width // 2
    while h >= 1:
        low_mask = ir.Constant(ir.VectorType(i32, width), [j if not j & h else width + j - h for j in range(width)])
        high_mask = ir.Constant(ir.VectorType(i32, width), [j + h if not j & h else width + j for j in range(width)])
        for i in range(width):
            if i & h:
                continue
            a, b = vectors[i], vectors[i + h]
            vectors[i] = builder.shuffle_vector(a, b, low_mask)
            vectors[i + h] = builder.shuffle_vector(a, b, high_mask)
        h //= 2
    return vectors


def transpose_block_intrinsic(width, panel_rows):
    """A Numba intrinsic ``put_block(X, row, feature, panel, r)`` that stores rows ``row .. row + width - 1`` of the
    2-d array ``X`` (any real dtype; its rows' values adjacent in memory), features
    ``feature .. feature + width - 1``, converted to float32, into the float32 panel as its rows ``r ..``: value
    ``(row + i, feature + j)`` at ``panel[(feature + j) * panel_rows + r + i]``. ``width`` is a power of two;
    the caller keeps every index in range."""

    @intrinsic
    def put_block(typingctx, X, row, feature, panel, r):
        if not (isinstance(X, types.Array) and X.ndim == 2 and isinstance(panel, types.Array)):
            return None
        signature = types.void(X, row, feature, panel, r)

        def codegen(context, builder, signature, args):
            x_type = signature.args[0]
            i64 = ir.IntType(64)
            element = context.get_data_type(x_type.dtype)
            itemsize = context.get_abi_sizeof(element)
            x_array = context.make_array(x_type)(context, builder, args[0])
            panel_array = context.make_array(signature.args[3])(context, builder, args[3])
            row_stride = builder.extract_value(x_array.strides, 0)
            first_row, first_feature, first_r = (
                builder.sext(value, i64) if value.type.width < 64 else value for value in (args[1], args[2], args[4])
            )
            x_bytes = builder.bitcast(x_array.data, ir.IntType(8).as_pointer())
            start = builder.add(
                builder.mul(first_row, row_stride), builder.mul(first_feature, ir.Constant(i64, itemsize))
            )
            loads = []
            for i in range(width):
                at = builder.add(start, builder.mul(ir.Constant(i64, i), row_stride))
                pointer = builder.bitcast(builder.gep(x_bytes, [at]), ir.VectorType(element, width).as_pointer())
                loaded = builder.load(pointer, align=itemsize)
                loads.append(as_float_lanes(builder, loaded, x_type.dtype, ir.FloatType()))
            floats = ir.VectorType(ir.FloatType(), width)
            for j, vector in enumerate(_transposed(builder, loads, width)):
                feature_j = builder.add(first_feature, ir.Constant(i64, j))
                at = builder.add(builder.mul(feature_j, ir.Constant(i64, panel_rows)), first_r)
                pointer = builder.bitcast(builder.gep(panel_array.data, [at]), floats.as_pointer())
                builder.store(vector, pointer, align=4)
            return context.get_dummy_value()

        return signature, codegen

    return put_block


def panel_filler(width, panel_rows):
    """A jitted ``fill(X, r0, rows, panel)`` that lays rows ``r0 .. r0 + rows - 1`` of ``X`` out as the panel's first
    ``rows`` rows (``panel[f * panel_rows + r]``): by :func:`transpose_block_intrinsic`'s blocks where ``width``
    rows and features fit and ``X``'s rows hold their values adjacently, one value at a time elsewhere."""
    put_block = transpose_block_intrinsic(width, panel_rows)

    @numba.njit(cache=True, nogil=True, inline="always")
    def fill(X, r0, rows, panel):
        d = X.shape[1]
        blocked_rows = rows - rows % width if X.strides[1] == X.itemsize else 0
        blocked_features = d - d % width
        for r in range(0, blocked_rows, width):
            for f in range(0, blocked_features, width):
                put_block(X, r0 + r, f, panel, r)
            for f in range(blocked_features, d):
                for i in range(r, r + width):
                    panel[f * panel_rows + i] = X[r0 + i, f]
        for r in range(blocked_rows, rows):
            for f in range(d):
                panel[f * panel_rows + r] = X[r0 + r, f]

    return fill
