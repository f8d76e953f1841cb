"""Every row's best score against all the centers and a lower bound on the others, without writing the scores: a
register-blocked float32 GEMM whose accumulators are scanned where they are.

The exact assignment against one group of centers needs, per row, only its best score ``||c||^2 - 2 x.c``, the
center that gives it and the smallest of the other scores less their proven errors
(:func:`daskmeans.kernels.tile_scan._best_and_lowest_other`). A BLAS GEMM writes every score of a tile to
memory and a second pass reads them back to find these; at k = 1000 and d = 128 the scores of a tile of 512 rows
are 2 MiB, the whole L2 cache. Here the rows are taken a *panel* at a time (``PANEL_ROWS`` rows, converted to
float32 and laid out feature by feature by :mod:`daskmeans.kernels.panel_rows`, so that one vector holds one
feature of ``LANES`` rows), and the centers
``CENTERS_PER_STEP`` at a time: ``CENTERS_PER_STEP x VECTORS_PER_PANEL`` vector accumulators stay in registers over
all the features (one fused multiply-add per center and vector of rows per feature, each center's coefficient
broadcast from memory), and are then folded into the rows' running summary. Nothing else is stored. The loop is
written in LLVM IR (:func:`_panel_scan_intrinsic`) because Numba does not keep arrays of vectors in registers.
The fold costs a few operations per score against ``d`` multiply-adds, so the bound comes almost free: only rows
that are near ties need their scores again.

On one thread the scan runs at about the rate of a large BLAS sgemm, so it costs less than BLAS tiles of the same
scores followed by a pass that reads them back.

The scores are those of a float32 dot product in some order with fused multiply-adds: within the error that
:func:`daskmeans.kernels.one_group_assign.center_errors` proves for any order, so the callers decide labels
exactly as from BLAS scores (near ties by exact distances).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import binding, ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .distance import sq_norm
from .panel_rows import panel_filler
from .score_error import score_error


def _has_wide_vectors() -> bool:
    """Whether LLVM reports AVX-512 on this machine (False where it cannot read the host's features: LLVM raises
    there, and ``import daskmeans`` must not)."""
    try:
        return bool(binding.get_host_cpu_features().get("avx512f", False))
    except RuntimeError:
        return False


#: Whether this machine has 512-bit vectors (AVX-512): 32 vector registers of 16 float32 lanes; else 8 lanes and
#: 16 registers are assumed (AVX2).
WIDE_VECTORS = _has_wide_vectors()
LANES = 16 if WIDE_VECTORS else 8
VECTORS_PER_PANEL = 2
#: Rows of one panel.
PANEL_ROWS = LANES * VECTORS_PER_PANEL
#: Centers scored per step: their accumulators (``CENTERS_PER_STEP * VECTORS_PER_PANEL``), the panel's vectors of
#: one feature and a broadcast coefficient fill the registers without spilling.
CENTERS_PER_STEP = 12 if WIDE_VECTORS else 6
#: The last centers are scored this many at a time; the centers are padded to a multiple of it (:func:`padded`).
TAIL_CENTERS = CENTERS_PER_STEP // 3


def _panel_scan_intrinsic(centers_per_step, grouped=False):
    """A Numba intrinsic ``scan(panel, scaled, column_add, err_sq, err_x, x_norm, best, best_col, best_low,
    other_low, start, stop, n_groups, group_min, group_second)`` that folds the scores of centers
    ``start .. stop - 1`` (``stop - start`` a multiple of ``centers_per_step``), in order, into the running
    summary of the panel's ``PANEL_ROWS`` rows (float32, the columns int32), as
    :func:`daskmeans.kernels.tile_scan._take_score` does: the best score and its column, the best score less
    its error (``best_low``) and the smallest of the other scores less their errors (``other_low``), the error of
    column ``c``'s score being ``err_sq[c] + x_norm * err_x[c]``.

    ``panel`` is float32 ``(d * PANEL_ROWS,)``, feature ``f`` of row ``r`` at ``f * PANEL_ROWS + r``; ``scaled``
    is float32 ``(k, d)``, C-ordered (the centers times -2); the score of column ``c`` is
    ``panel . scaled[c] + column_add[c]``. A score replaces the best only when smaller (the first among equals
    wins, as ``argmin``).

    ``grouped``: instead of ``best_low`` and ``other_low`` (then unused, as ``err_sq``, ``err_x`` and ``x_norm``),
    the smallest and second smallest score of each group (column ``c`` in group ``c % n_groups``) are folded into
    ``group_min`` and ``group_second``, float32 ``(n_groups * PANEL_ROWS,)`` (group ``g``'s at ``g * PANEL_ROWS``),
    as :func:`daskmeans.kernels.group_scan.scan_groups` folds them."""

    @intrinsic
    def scan(
        typingctx,
        panel,
        scaled,
        column_add,
        err_sq,
        err_x,
        x_norm,
        best,
        best_col,
        best_low,
        other_low,
        start,
        stop,
        n_groups,
        group_min,
        group_second,
    ):
        signature = types.void(
            panel,
            scaled,
            column_add,
            err_sq,
            err_x,
            x_norm,
            best,
            best_col,
            best_low,
            other_low,
            start,
            stop,
            n_groups,
            group_min,
            group_second,
        )

        def codegen(context, builder, signature, args):
            f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
            floats, ints = ir.VectorType(f32, LANES), ir.VectorType(i32, LANES)
            fma = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(floats, [floats] * 3), f"llvm.fma.v{LANES}f32"
            )
            arrays = [context.make_array(signature.args[i])(context, builder, args[i]) for i in (*range(10), 13, 14)]
            p_panel, p_scaled, p_add, p_err_sq, p_err_x, p_norm = (array.data for array in arrays[:6])
            p_group_min, p_group_second = arrays[10].data, arrays[11].data
            groups = builder.sext(args[12], i64) if args[12].type.width < 64 else args[12]
            summary_pointers = [(array.data, ints if i == 1 else floats) for i, array in enumerate(arrays[6:10])]
            n_features = builder.extract_value(arrays[1].shape, 1)
            first, last = (builder.sext(value, i64) if value.type.width < 64 else value for value in args[10:12])

            def constant(value):
                return ir.Constant(i64, value)

            def splat(vector_type, scalar):
                one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), scalar, ir.Constant(i32, 0))
                return builder.shuffle_vector(
                    one, ir.Constant(vector_type, ir.Undefined), ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
                )

            def vector_at(pointer, index, vector_type):
                return builder.bitcast(builder.gep(pointer, [index]), vector_type.as_pointer())

            def minimum(a, b):
                return builder.select(builder.fcmp_ordered("<", a, b), a, b)

            def fold_into_group(group, h, value):
                at = builder.add(builder.mul(group, constant(PANEL_ROWS)), constant(h * LANES))
                least, second = vector_at(p_group_min, at, floats), vector_at(p_group_second, at, floats)
                least_now = builder.load(least, align=4)
                larger = builder.select(builder.fcmp_ordered(">", least_now, value), least_now, value)
                builder.store(minimum(builder.load(second, align=4), larger), second, align=4)
                builder.store(minimum(least_now, value), least, align=4)

            # per vector of rows: best, best_col, best_low, other_low
            summary = [
                [cgutils.alloca_once(builder, vector_type) for _, vector_type in summary_pointers]
                for _ in range(VECTORS_PER_PANEL)
            ]
            norms = [
                builder.load(vector_at(p_norm, constant(h * LANES), floats), align=4) for h in range(VECTORS_PER_PANEL)
            ]
            acc = [
                [cgutils.alloca_once(builder, floats) for _ in range(VECTORS_PER_PANEL)]
                for _ in range(centers_per_step)
            ]
            for h in range(VECTORS_PER_PANEL):
                for slot, (pointer, vector_type) in zip(summary[h], summary_pointers):
                    builder.store(builder.load(vector_at(pointer, constant(h * LANES), vector_type), align=4), slot)
            with cgutils.for_range_slice(builder, first, last, constant(centers_per_step)) as (c0, _):
                for row in acc:
                    for slot in row:
                        builder.store(ir.Constant(floats, None), slot)
                center_rows = [
                    builder.gep(p_scaled, [builder.mul(builder.add(c0, constant(j)), n_features)])
                    for j in range(centers_per_step)
                ]
                with cgutils.for_range(builder, n_features) as loop:
                    base = builder.mul(loop.index, constant(PANEL_ROWS))
                    xs = [
                        builder.load(vector_at(p_panel, builder.add(base, constant(h * LANES)), floats), align=4)
                        for h in range(VECTORS_PER_PANEL)
                    ]
                    for j in range(centers_per_step):
                        coefficient = splat(floats, builder.load(builder.gep(center_rows[j], [loop.index])))
                        for h in range(VECTORS_PER_PANEL):
                            builder.store(builder.call(fma, [xs[h], coefficient, builder.load(acc[j][h])]), acc[j][h])
                # the group of column c0 + j: one division a step, then counting up (no division per column)
                group = builder.urem(c0, groups) if grouped else None
                for j in range(centers_per_step):
                    column = builder.add(c0, constant(j))
                    if grouped and j > 0:
                        group = builder.add(group, constant(1))
                        group = builder.select(builder.icmp_unsigned("==", group, groups), constant(0), group)
                    add, sq_part, x_part = (
                        splat(floats, builder.load(builder.gep(pointer, [column])))
                        for pointer in (p_add, p_err_sq, p_err_x)
                    )
                    column_v = splat(ints, builder.trunc(column, i32))
                    for h, (best_v, col_v, best_low_v, other_low_v) in enumerate(summary):
                        value = builder.fadd(builder.load(acc[j][h]), add)
                        best_now = builder.load(best_v)
                        new = builder.fcmp_ordered("<", value, best_now)
                        if grouped:
                            fold_into_group(group, h, value)
                        else:
                            low = builder.fsub(builder.fsub(value, sq_part), builder.fmul(norms[h], x_part))
                            best_low_now = builder.load(best_low_v)
                            builder.store(
                                minimum(builder.load(other_low_v), builder.select(new, best_low_now, low)), other_low_v
                            )
                            builder.store(builder.select(new, low, best_low_now), best_low_v)
                        builder.store(builder.select(new, column_v, builder.load(col_v)), col_v)
                        builder.store(builder.select(new, value, best_now), best_v)
            for h in range(VECTORS_PER_PANEL):
                for slot, (pointer, vector_type) in zip(summary[h], summary_pointers):
                    builder.store(builder.load(slot), vector_at(pointer, constant(h * LANES), vector_type), align=4)
            return context.get_dummy_value()

        return signature, codegen

    return scan


_scan_steps = _panel_scan_intrinsic(CENTERS_PER_STEP)
_scan_tail = _panel_scan_intrinsic(TAIL_CENTERS)
_scan_groups_steps = _panel_scan_intrinsic(CENTERS_PER_STEP, grouped=True)
_scan_groups_tail = _panel_scan_intrinsic(TAIL_CENTERS, grouped=True)
#: ``fill(X, r0, rows, panel)``: rows ``r0 ..`` of ``X`` as the panel's first ``rows`` rows, in float32.
_fill_panel = panel_filler(LANES, PANEL_ROWS)


def padded(scaled, column_add, err_sq=0, err_x=0):
    """The centers times -2 ``(k, d)``, the scores' additive terms ``(k,)`` and the two parts of their errors
    (:func:`daskmeans.kernels.one_group_assign.center_errors`; 0 for the grouped scan, which does not use them),
    float32, padded with zero centers whose term is ``inf`` and whose errors are 0 to a multiple of
    ``TAIL_CENTERS`` rows (they never win, nor lower a bound)."""
    k, d = scaled.shape
    columns = -(-k // TAIL_CENTERS) * TAIL_CENTERS
    scaled_out = np.zeros((columns, d), dtype=np.float32)
    scaled_out[:k] = scaled
    add_out = np.full(columns, np.inf, dtype=np.float32)
    add_out[:k] = column_add
    errors = [np.zeros(columns, dtype=np.float32) for _ in range(2)]
    errors[0][:k] = err_sq
    errors[1][:k] = err_x
    return scaled_out, add_out, errors[0], errors[1]


@numba.njit(cache=True, nogil=True, inline="always")
def _panel_buffers(X):
    """A zeroed float32 panel for rows of ``X`` (the rows past the last ones of a short panel stay finite) and a zero
    row of ``X``'s dtype (for the rows' norms)."""
    return np.zeros(X.shape[1] * PANEL_ROWS, dtype=np.float32), np.zeros(X.shape[1], dtype=X.dtype)


@numba.njit(cache=True, nogil=True)
def best_and_lowest_other_by_panels(X, scaled, column_add, err_sq, err_x, x_sq, best, best_col, other_low):
    """For every row ``i`` of ``X`` (any real dtype, converted to float32 a panel at a time), its squared norm
    ``x_sq[i]`` (:func:`~daskmeans.kernels.distance.sq_norm`), the smallest score
    ``X[i] . scaled[c] + column_add[c]`` over the columns ``c`` and its column (the first among equals), and the
    smallest over the other columns of the score less its error ``err_sq[c] + ||X[i]|| err_x[c]``, written to
    ``best``, ``best_col`` and ``other_low``: the values of
    :func:`daskmeans.kernels.tile_scan._best_and_lowest_other` on scores that are never stored.

    ``scaled``, ``column_add``, ``err_sq`` and ``err_x`` as :func:`padded` returns them.

    Parameters
    ----------
    X, scaled, column_add, err_sq, err_x : IN
        The rows and the padded centers.
    x_sq : OUT float64 (n,)
    best, best_col, other_low : OUT float32 (n,), int32 (n,), float32 (n,)
    """
    n, d = X.shape
    columns = scaled.shape[0]
    steps_end = columns - columns % CENTERS_PER_STEP
    panel, zero = _panel_buffers(X)
    x_norm = np.zeros(PANEL_ROWS, dtype=np.float32)
    run_best = np.empty(PANEL_ROWS, dtype=np.float32)
    run_col = np.empty(PANEL_ROWS, dtype=np.int32)
    run_best_low = np.empty(PANEL_ROWS, dtype=np.float32)
    run_other_low = np.empty(PANEL_ROWS, dtype=np.float32)
    no_groups = np.empty(0, dtype=np.float32)
    for r0 in range(0, n, PANEL_ROWS):
        rows = min(PANEL_ROWS, n - r0)
        for r in range(rows):  # a loop of its own: with the panel's filling in it, LLVM leaves the sums scalar
            x_sq[r0 + r] = sq_norm(X[r0 + r], zero)
        for r in range(rows):
            x_norm[r] = math.sqrt(x_sq[r0 + r])
        _fill_panel(X, r0, rows, panel)
        run_best[:] = np.inf
        run_best_low[:] = np.inf
        run_other_low[:] = np.inf
        run_col[:] = 0
        if steps_end > 0:
            _scan_steps(
                panel,
                scaled,
                column_add,
                err_sq,
                err_x,
                x_norm,
                run_best,
                run_col,
                run_best_low,
                run_other_low,
                0,
                steps_end,
                1,
                no_groups,
                no_groups,
            )
        if columns > steps_end:
            _scan_tail(
                panel,
                scaled,
                column_add,
                err_sq,
                err_x,
                x_norm,
                run_best,
                run_col,
                run_best_low,
                run_other_low,
                steps_end,
                columns,
                1,
                no_groups,
                no_groups,
            )
        best[r0 : r0 + rows] = run_best[:rows]
        best_col[r0 : r0 + rows] = run_col[:rows]
        other_low[r0 : r0 + rows] = run_other_low[:rows]


@numba.njit(cache=True, nogil=True)
def best_of_groups_by_panels(
    X,
    scaled,
    column_add,
    n_groups,
    center_norm,
    gamma,
    x_sq,
    allowance,
    best,
    best_col,
    group_min,
    own_second,
    other_second,
):
    """Yinyang's summary of every row's scores against centers in ``n_groups`` groups, the scores never stored:
    for every row ``i`` of ``X`` (any real dtype, converted to float32 a panel at a time) its squared norm and
    score allowance (:func:`~daskmeans.kernels.distance.sq_norm` and
    :func:`~daskmeans.kernels.score_error.score_error` for the largest center norm ``center_norm``), the smallest
    score and its column (the first among equals), the smallest score of every group ``group_min[i, g]`` (column
    ``c`` in group ``c % n_groups``), the second smallest of the best column's group and the smallest outside it:
    the values of :func:`daskmeans.kernels.group_scan.scan_groups` for
    :func:`daskmeans.kernels.settle_scores._finish_best_of_groups`.

    ``scaled`` and ``column_add`` as :func:`padded` returns them (padding slots of the groups score ``inf``).

    Parameters
    ----------
    X, scaled, column_add, n_groups, center_norm, gamma : IN
        The rows, the padded centers, the groups, the largest center norm, the unit rounding error.
    x_sq, allowance : OUT float64 (n,)
    best, best_col, own_second, other_second : OUT (n,)
        float32, int32, float32, float32.
    group_min : OUT float32 (n, n_groups)
    """
    n, d = X.shape
    columns = scaled.shape[0]
    steps_end = columns - columns % CENTERS_PER_STEP
    panel, zero = _panel_buffers(X)
    run_best = np.empty(PANEL_ROWS, dtype=np.float32)
    run_col = np.empty(PANEL_ROWS, dtype=np.int32)
    run_min = np.empty(n_groups * PANEL_ROWS, dtype=np.float32)
    run_second = np.empty(n_groups * PANEL_ROWS, dtype=np.float32)
    unused = np.empty(PANEL_ROWS, dtype=np.float32)
    for r0 in range(0, n, PANEL_ROWS):
        rows = min(PANEL_ROWS, n - r0)
        for r in range(rows):  # a loop of its own, as in best_and_lowest_other_by_panels
            x_sq[r0 + r] = sq_norm(X[r0 + r], zero)
        for r in range(rows):
            allowance[r0 + r] = score_error(math.sqrt(x_sq[r0 + r]), x_sq[r0 + r], center_norm, gamma)
        _fill_panel(X, r0, rows, panel)
        run_best[:] = np.inf
        run_col[:] = 0
        run_min[:] = np.inf
        run_second[:] = np.inf
        if steps_end > 0:
            _scan_groups_steps(
                panel,
                scaled,
                column_add,
                column_add,
                column_add,
                unused,
                run_best,
                run_col,
                unused,
                unused,
                0,
                steps_end,
                n_groups,
                run_min,
                run_second,
            )
        if columns > steps_end:
            _scan_groups_tail(
                panel,
                scaled,
                column_add,
                column_add,
                column_add,
                unused,
                run_best,
                run_col,
                unused,
                unused,
                steps_end,
                columns,
                n_groups,
                run_min,
                run_second,
            )
        for r in range(rows):
            i = r0 + r
            best[i] = run_best[r]
            best_col[i] = run_col[r]
            own = run_col[r] % n_groups
            other = np.float32(np.inf)
            for g in range(n_groups):
                value = run_min[g * PANEL_ROWS + r]
                group_min[i, g] = value
                if g != own:
                    other = min(other, value)
            own_second[i] = run_second[own * PANEL_ROWS + r]
            other_second[i] = other
