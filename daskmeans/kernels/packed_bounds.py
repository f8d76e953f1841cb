"""Lower bounds on distances kept in 16 bits each, rounded down.

The group bounds are most of the per-row state of the bounded kernels (yinyang's 100 groups at k = 1000: 200
bytes a row here, 400 as float32), and every byte of state is memory a worker first touches when the state is
made and reads and writes on every revisit. A bound only needs to be *below* the distance it bounds and close to
it, so it is stored in a 16-bit unsigned floating format of our own: 6 exponent bits and 10 mantissa bits (as
IEEE half precision, whose sign bit a distance does not need, is spent on range instead): codes ``1 .. 0xFFFE``
are the float64 values whose bits are ``(code + OFFSET) << 42``, from ``2**-30`` to just under ``2**34``, each
within ``2**-10`` of the next; code 0 is 0 and ``0xFFFF`` is infinity.

:func:`store_lower` rounds a bound *down* to the next code (dropping the low mantissa bits of a non-negative
float64 rounds it down; a value below the range becomes 0, one above it the largest code, both still lower
bounds), so a stored bound is always a bound: bounds only spare work, they never change a label. Bounds are
looser by at most ``2**-10`` relative, which costs a few percent more distances than float32 bounds; data whose
distances lie far outside the range keep exact labels with looser bounds.

Numba has no 16-bit float on the CPU, so the conversions are integer operations on the float64 bit pattern
(:func:`_float64_bits`, :func:`_float64_from_bits`), which vectorize. :func:`pack_bounds` and
:func:`unpack_bounds` are the NumPy forms (tests, checkpoints written with float32 bounds).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

#: dtype of a stored lower bound.
LOWER_DTYPE = np.dtype(np.uint16)
#: Bytes of one stored lower bound (memory rules).
LOWER_BYTES = LOWER_DTYPE.itemsize
#: Smallest non-zero stored bound is just above ``2**LOWEST_EXPONENT``.
LOWEST_EXPONENT = -30
_MANTISSA_SHIFT = 52 - 10
_OFFSET = (1023 + LOWEST_EXPONENT) << 10
_LARGEST = 0xFFFE
INFINITE_CODE = 0xFFFF


@intrinsic
def _float64_bits(typingctx, value):
    """The IEEE bit pattern of a float64, as int64."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))

    return types.int64(types.float64), codegen


@intrinsic
def _float64_from_bits(typingctx, bits):
    """The float64 whose IEEE bit pattern is the int64 ``bits``."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return types.float64(types.int64), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def store_lower(value):
    """The 16-bit code of the largest stored bound not above the float64 ``value`` (never NaN): 0 for values
    below ``2**LOWEST_EXPONENT`` (negative ones included), ``INFINITE_CODE`` for infinity."""
    code = (_float64_bits(np.float64(value)) >> _MANTISSA_SHIFT) - _OFFSET
    code = min(max(code, 0), _LARGEST) + (value == np.inf)
    return np.uint16(code)


@numba.njit(cache=True, nogil=True, inline="always")
def load_lower(code):
    """The float64 value of a stored bound."""
    code = np.int64(code)
    value = _float64_from_bits((code + _OFFSET) << _MANTISSA_SHIFT)
    value = 0.0 if code == 0 else value
    return np.inf if code == INFINITE_CODE else value


def pack_bounds(values):
    """:func:`store_lower` of every value of a float array (NumPy): the codes, ``uint16``."""
    values = np.asarray(values, dtype=np.float64)
    codes = (values.view(np.int64) >> _MANTISSA_SHIFT) - _OFFSET
    codes = np.clip(codes, 0, _LARGEST) + (values == np.inf)
    return codes.astype(LOWER_DTYPE)


def unpack_bounds(codes):
    """:func:`load_lower` of every code of a ``uint16`` array (NumPy): float64 values."""
    codes = np.asarray(codes)
    if codes.dtype != LOWER_DTYPE:
        raise TypeError(f"stored bounds are {LOWER_DTYPE}, not {codes.dtype}")
    wide = codes.astype(np.int64)
    values = ((wide + _OFFSET) << _MANTISSA_SHIFT).view(np.float64)
    return np.where(wide == 0, 0.0, np.where(wide == INFINITE_CODE, np.inf, values))


def as_stored_bounds(bounds):
    """Bounds as the kernels keep them: ``uint16`` codes as they are; float32 bounds (checkpoints written before
    the bounds were packed) rounded down into codes, which keeps them bounds. Any other dtype is returned as it is,
    for the caller's check to refuse."""
    bounds = np.asarray(bounds)
    return pack_bounds(bounds) if bounds.dtype == np.float32 else bounds
