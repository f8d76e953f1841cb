"""Dot products of many rows with one group of centers, the group's centers side by side in vector lanes.

A revisit (:mod:`daskmeans.kernels.revisit`) scores each row against every center of the groups its bounds cannot
rule out: a few groups per row, a different few for each row. Taken one at a time, a dot product is bound by its
latency (its center read from L2, then a horizontal sum) and costs several times a GEMM's cost per distance. Here
a block of rows is revisited together: the (row, group) pairs are sorted by group, and each group
scores all its rows in turn while its centers stay in L1. The centers of a group are stored *transposed*, ``LANES``
centers side by side (:func:`transposed_groups`), so that one fused multiply-add per feature (the row's value
broadcast) scores a row against the whole group, without a horizontal sum; four rows go through the features
together, each with two accumulators, so that eight independent chains of multiply-adds are in flight. The loop
is written in LLVM IR (:func:`_rows_dots_intrinsic`), as :mod:`daskmeans.kernels.panel_scan`'s is, because Numba
does not keep vectors in registers.

The values are float32 dot products in some order with fused multiply-adds, within the error that
:func:`daskmeans.kernels.score_error.score_error` proves for any order, as the one-at-a-time products were.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .panel_scan import LANES

#: Rows that go through the features together (each with 2 accumulators: even and odd features).
ROWS_PER_STEP = 4


def _rows_dots_intrinsic(rows_per_step, accumulators):
    """A Numba intrinsic ``dots(rows, pair_row, start, stop, transposed, chunk, out)``: for ``q`` in
    ``start .. stop - 1`` (a multiple of ``rows_per_step`` apart), ``out[q * LANES + l]`` = the dot product of row
    ``pair_row[q]`` of ``rows`` (float32 ``(m, d)``, C-ordered) with lane ``l`` of chunk ``chunk`` of
    ``transposed`` (float32 ``(chunks, d, LANES)``, C-ordered). Each row's features are taken ``accumulators`` at a
    time into as many vector accumulators (the last ``d % accumulators`` into the first), summed at the end."""

    @intrinsic
    def dots(typingctx, rows, pair_row, start, stop, transposed, chunk, out):
        signature = types.void(rows, pair_row, start, stop, transposed, chunk, out)

        def codegen(context, builder, signature, args):
            f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
            floats = ir.VectorType(f32, LANES)
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(floats, [floats] * 3), f"llvm.fma.v{LANES}f32"
            )
            rows_array, pairs_array, chunks_array, out_array = (
                context.make_array(signature.args[i])(context, builder, args[i]) for i in (0, 1, 4, 6)
            )
            n_features = builder.extract_value(rows_array.shape, 1)

            def as_i64(value):
                return builder.sext(value, i64) if value.type.width < 64 else value

            first, last, chunk = as_i64(args[2]), as_i64(args[3]), as_i64(args[5])

            def constant(value):
                return ir.Constant(i64, value)

            def splat(scalar):
                one = builder.insert_element(ir.Constant(floats, ir.Undefined), scalar, ir.Constant(i32, 0))
                return builder.shuffle_vector(
                    one, ir.Constant(floats, ir.Undefined), ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
                )

            def vector_at(pointer, index):
                return builder.bitcast(builder.gep(pointer, [index]), floats.as_pointer())

            p_chunk = builder.gep(chunks_array.data, [builder.mul(chunk, builder.mul(n_features, constant(LANES)))])
            body_end = builder.sub(n_features, builder.urem(n_features, constant(accumulators)))
            acc = [[cgutils.alloca_once(builder, floats) for _ in range(accumulators)] for _ in range(rows_per_step)]

            def multiply_add(row_pointers, f, a):
                column = builder.load(vector_at(p_chunk, builder.mul(f, constant(LANES))), align=4)
                for r, row_pointer in enumerate(row_pointers):
                    value = splat(builder.load(builder.gep(row_pointer, [f])))
                    builder.store(builder.call(fma, [value, column, builder.load(acc[r][a])]), acc[r][a])

            with cgutils.for_range_slice(builder, first, last, constant(rows_per_step)) as (q0, _):
                row_pointers = []
                for r in range(rows_per_step):
                    i = as_i64(builder.load(builder.gep(pairs_array.data, [builder.add(q0, constant(r))])))
                    row_pointers.append(builder.gep(rows_array.data, [builder.mul(i, n_features)]))
                    for slot in acc[r]:
                        builder.store(ir.Constant(floats, None), slot)
                with cgutils.for_range_slice(builder, constant(0), body_end, constant(accumulators)) as (f0, _):
                    for a in range(accumulators):
                        multiply_add(row_pointers, builder.add(f0, constant(a)), a)
                with cgutils.for_range_slice(builder, body_end, n_features, constant(1)) as (f, _):
                    multiply_add(row_pointers, f, 0)
                for r in range(rows_per_step):
                    total = builder.load(acc[r][0])
                    for a in range(1, accumulators):
                        total = builder.fadd(total, builder.load(acc[r][a]))
                    at = builder.mul(builder.add(q0, constant(r)), constant(LANES))
                    builder.store(total, vector_at(out_array.data, at), align=4)
            return context.get_dummy_value()

        return signature, codegen

    return dots


_dots_steps = _rows_dots_intrinsic(ROWS_PER_STEP, 2)
_dots_single = _rows_dots_intrinsic(1, 4)


@numba.njit(cache=True, nogil=True, inline="always")
def rows_dots(rows, pair_row, start, stop, transposed, chunk, out):
    """``out[q * LANES + l]`` = ``rows[pair_row[q]] . transposed[chunk, :, l]`` for ``start <= q < stop``.

    Parameters
    ----------
    rows : IN float32 (m, d)
    pair_row, start, stop : IN
        The row of each pair, and the pairs to score.
    transposed, chunk : IN
        The centers as :func:`transposed_groups` gives them, and the chunk to score against.
    out : OUT float32 (pairs * LANES,)
        Entries ``start * LANES .. stop * LANES - 1`` are written.
    """
    steps_end = start + (stop - start) // ROWS_PER_STEP * ROWS_PER_STEP
    if steps_end > start:
        _dots_steps(rows, pair_row, start, steps_end, transposed, chunk, out)
    if stop > steps_end:
        _dots_single(rows, pair_row, steps_end, stop, transposed, chunk, out)


def transposed_groups(centers, groups):
    """The centers of each group in chunks of ``LANES``, transposed, for :func:`rows_dots`.

    Parameters
    ----------
    centers : ndarray (k, d)
    groups : CenterGroups

    Returns
    -------
    transposed : float32 (n_groups * chunks_per_group, d, LANES)
        Chunk ``g * chunks_per_group + c`` holds group ``g``'s centers ``c * LANES ..`` (in ``members`` order), one
        per lane; lanes past the group's last center hold zeros.
    slot_center : int32 (n_groups * chunks_per_group * LANES,)
        The center in each lane, -1 for the zeros.
    chunks_per_group : int
    """
    sizes = np.diff(groups.ptr)
    chunks_per_group = max(1, int(-(-sizes.max() // LANES)))
    slot_center = np.full((groups.n_groups, chunks_per_group * LANES), -1, dtype=np.int32)
    for g in range(groups.n_groups):
        slot_center[g, : sizes[g]] = groups.members[groups.ptr[g] : groups.ptr[g + 1]]
    slot_center = slot_center.ravel()
    padded = np.zeros((slot_center.size, centers.shape[1]), dtype=np.float32)
    real = slot_center >= 0
    padded[real] = centers[slot_center[real]]
    transposed = np.ascontiguousarray(padded.reshape(-1, LANES, centers.shape[1]).transpose(0, 2, 1))
    return transposed, slot_center, chunks_per_group
