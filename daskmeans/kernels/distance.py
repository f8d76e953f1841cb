"""The one exact squared distance of daskmeans, used by every kernel that needs one.

"Exact" here means: every term is formed in float64 from the float64 values of the two vectors, and the terms
are always added in the same order, so the value depends on the two vectors only, never on the kernel, the
machine or the caller. Kernels that must agree on a distance to the last bit (an assignment checked by bounds, a
winner decided among candidates, the distance reported with a label) can therefore compare values computed in
different places.

The order: eight partial sums, feature ``f`` (in the first ``d - d % 8`` features) going to sum ``f % 8`` in
increasing ``f``, combined as ``((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))``, plus the plain sum of the last
``d % 8`` squares; ``t_f`` is the square of the float64 difference. The eight partial sums are the eight lanes of
one vector of float64 (:func:`_lane_sums`, written in LLVM IR: Numba leaves LLVM's SLP vectorizer off, so the same
sums written as eight scalars compile to slower scalar code). Each lane is a plain
sequence of IEEE additions, without fast-math or fused multiply-adds, so the value does not depend on the machine
or on its vector width. Every kernel only compares distances computed by this function, so labels stay exact.
Vectors whose elements are not adjacent in memory take the same sums in scalar code.

Callers inline :func:`pair_dist2`, and Numba's on-disk cache of a caller does not notice a change here: clear
the caches (``__pycache__/*.nbi``, ``*.nbc``) after editing this module.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

LANES = 8


def as_float_lanes(builder, vector, dtype, float_type):
    """A vector of values of ``dtype`` converted lane by lane to the LLVM float type ``float_type`` as NumPy converts
    a value (``np.float64(value)``, ``np.float32(value)``): exactly where it can be, else rounded to nearest."""
    lanes = ir.VectorType(float_type, vector.type.count)
    if isinstance(dtype, types.Float):
        wider = isinstance(float_type, ir.DoubleType) and dtype.bitwidth == 32
        narrower = isinstance(float_type, ir.FloatType) and dtype.bitwidth == 64
        return builder.fpext(vector, lanes) if wider else builder.fptrunc(vector, lanes) if narrower else vector
    if isinstance(dtype, types.Integer) and dtype.signed:
        return builder.sitofp(vector, lanes)
    return builder.uitofp(vector, lanes)


@intrinsic
def _lane_sums(typingctx, x, c, body):
    """The eight partial sums of :func:`pair_dist2` over features ``0 .. body - 1`` (a multiple of 8), as one
    float64 vector of eight lanes. ``x`` and ``c`` must hold their elements adjacently (unit stride)."""
    if not (isinstance(x, types.Array) and isinstance(c, types.Array) and isinstance(body, types.Integer)):
        return None
    signature = types.UniTuple(types.float64, LANES)(x, c, body)

    def codegen(context, builder, signature, args):
        x_type, c_type, _ = signature.args
        float64_lanes = ir.VectorType(ir.DoubleType(), LANES)
        sums = cgutils.alloca_once_value(builder, ir.Constant(float64_lanes, None))

        def load_lanes(array_type, array_value, first):
            array = context.make_array(array_type)(context, builder, array_value)
            element = context.get_data_type(array_type.dtype)
            pointer = builder.bitcast(builder.gep(array.data, [first]), ir.VectorType(element, LANES).as_pointer())
            vector = builder.load(pointer, align=max(1, array_type.dtype.bitwidth // 8))
            return as_float_lanes(builder, vector, array_type.dtype, ir.DoubleType())

        step = ir.Constant(args[2].type, LANES)
        with cgutils.for_range_slice(builder, ir.Constant(args[2].type, 0), args[2], step) as (first, _):
            difference = builder.fsub(load_lanes(x_type, args[0], first), load_lanes(c_type, args[1], first))
            builder.store(builder.fadd(builder.load(sums), builder.fmul(difference, difference)), sums)
        total = builder.load(sums)
        lanes = [builder.extract_element(total, ir.Constant(ir.IntType(32), lane)) for lane in range(LANES)]
        return context.make_tuple(builder, signature.return_type, lanes)

    return signature, codegen


@numba.njit(cache=True, nogil=True, inline="always")
def pair_dist2(x, c):
    """Squared distance between the vectors ``x`` and ``c`` (any real dtypes), in float64, in the fixed order."""
    d = x.shape[0]
    body = d - d % 8
    tail = 0.0
    for f in range(body, d):
        t = np.float64(x[f]) - np.float64(c[f])
        tail += t * t
    if body == 0:
        return tail
    if x.strides[0] == x.itemsize and c.strides[0] == c.itemsize:
        s0, s1, s2, s3, s4, s5, s6, s7 = _lane_sums(x, c, body)
    else:
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
        for f in range(0, body, 8):
            t0 = np.float64(x[f]) - np.float64(c[f])
            t1 = np.float64(x[f + 1]) - np.float64(c[f + 1])
            t2 = np.float64(x[f + 2]) - np.float64(c[f + 2])
            t3 = np.float64(x[f + 3]) - np.float64(c[f + 3])
            t4 = np.float64(x[f + 4]) - np.float64(c[f + 4])
            t5 = np.float64(x[f + 5]) - np.float64(c[f + 5])
            t6 = np.float64(x[f + 6]) - np.float64(c[f + 6])
            t7 = np.float64(x[f + 7]) - np.float64(c[f + 7])
            s0 += t0 * t0
            s1 += t1 * t1
            s2 += t2 * t2
            s3 += t3 * t3
            s4 += t4 * t4
            s5 += t5 * t5
            s6 += t6 * t6
            s7 += t7 * t7
    return (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))) + tail


#: Integer rows of at most this many bits have their squared norm summed in int64 (:func:`sq_norm`).
SMALL_INTEGER_BITS = 16


def sq_norm(x, zero):
    """The squared norm of the vector ``x`` as :func:`pair_dist2` of ``x`` and ``zero`` (a zero vector of ``x``'s
    length and dtype) gives it.

    For integers of up to 16 bits (uint8 descriptors) the squares are summed in int64 on integer vector lanes, and
    the exact sum is rounded once to float64. With fewer than ``2**21`` features every
    square and partial sum is an integer below ``2**53``, which float64 holds exactly in any order, so that is
    :func:`pair_dist2`'s value to the last bit; with more, it is the exact sum correctly rounded (the int64 sum
    holds up to ``2**31`` features). Numba code takes that path by the row's dtype; called from Python, this is
    :func:`pair_dist2`.

    Examples
    --------
    >>> float(sq_norm(np.array([3, 4], dtype=np.uint8), np.zeros(2, dtype=np.uint8)))
    25.0
    """
    return pair_dist2(x, zero)


@numba.njit(cache=True, nogil=True)
def _small_integer_sq_norm(x):
    """:func:`sq_norm` of integers of up to 16 bits: each value widened to int32 exactly, whose square numba takes
    in int64 (LLVM multiplies the known small values on 32-bit lanes, twice as many as 64-bit ones), summed in
    int64. A call of :func:`pair_dist2` in the same function keeps LLVM from vectorizing the loop, so there is no
    float64 path here."""
    total = 0
    for f in range(x.shape[0]):
        value = np.int32(x[f])
        total += value * value
    return np.float64(total)


@overload(sq_norm, jit_options={"cache": True, "nogil": True})
def _sq_norm_by_dtype(x, zero):
    if isinstance(x.dtype, types.Integer) and x.dtype.bitwidth <= SMALL_INTEGER_BITS:
        return lambda x, zero: _small_integer_sq_norm(x)
    return lambda x, zero: pair_dist2(x, zero)


@numba.njit(cache=True, nogil=True)
def exact_dist2(X, centers, labels):
    """Squared distance of every row of ``X`` to its center ``centers[labels[i]]`` (:func:`pair_dist2`).

    Parameters
    ----------
    X : ndarray (n, d)
    centers : ndarray (k, d)
    labels : int array (n,)

    Returns
    -------
    float64 (n,)
    """
    out = np.empty(X.shape[0], dtype=np.float64)
    for i in range(X.shape[0]):
        out[i] = pair_dist2(X[i], centers[labels[i]])
    return out


def dist2_to_point(X, point):
    """Squared distance of every row of ``X`` to one ``point`` (:func:`pair_dist2`, float64), reading the rows as
    they are stored: no float64 copy of ``X``.

    Examples
    --------
    >>> dist2_to_point(np.array([[0, 0], [3, 4]], dtype=np.uint8), np.zeros(2)).tolist()
    [0.0, 25.0]
    """
    rows = np.ascontiguousarray(X)
    return exact_dist2(rows, np.asarray(point, dtype=np.float64).reshape(1, -1), np.zeros(rows.shape[0], np.int32))
