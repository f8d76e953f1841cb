"""Row slabs: how a task walks a stored chunk, so that its memory is the chunk as stored plus a constant.

An input is stored in its own dtype (uint8 descriptors, float32 embeddings) and in chunks its writer chose, often
64 MB or more. A pass never converts a whole chunk: its task receives the chunk as stored and converts and
processes it a slab of rows at a time (:func:`row_slabs`, :func:`slab_rows`), so what a task allocates is the
stored chunk, one slab as floats with the kernels' temporaries for it (a constant set by ``SLAB_BYTES``), and the
pass's per-row outputs (a few bytes per row). Accumulating kernels carry their sums from slab to slab, so a slabbed
pass gives the same numbers as one call on the whole chunk wherever the kernel sums row by row. The exact
assignment goes further where it takes the chunk as stored (:func:`daskmeans.passes.assign.assigned_slabs`): it
converts each tile of rows just before scoring it, into a buffer far smaller than a slab.

The dask array the passes are given is the converted one (its dtype is the compute dtype, which the graph builders
need); :func:`with_stored_form` attaches the array as stored to it, and :func:`stored_blocks` hands the tasks the
stored blocks when it is there (an array derived from it, e.g. by slicing, has its own converted blocks).
"""

from __future__ import annotations

import threading

import dask.array as da
import numpy as np

from .. import config
from ..exceptions import InputDataError

#: The attribute of a converted dask array that holds the array as stored.
_STORED_ATTRIBUTE = "_daskmeans_stored"


#: Widest integers (bytes) whose every value float32 holds exactly (its significand has 24 bits: int8/16, uint8/16).
FLOAT32_EXACT_INTEGER_BYTES = 2


def compute_dtype(dtype, name: str = "X") -> np.dtype:
    """The floating dtype an input stored as ``dtype`` is computed with, from the dtype alone (no value read).

    - float32 and float64 stay, in the machine's byte order (big-endian stores are converted slab by slab).
    - float16 and integers of up to 16 bits (uint8 descriptors, int16 samples) compute as float32, which holds
      each of their values exactly.
    - Wider integers (int32, uint32, int64, uint64) compute as float64: float32 holds integers exactly only up to
      2**24 in magnitude, so larger ones would be rounded (distinct rows merged, sums off). float64 holds every
      int32/uint32 value, and int64/uint64 values up to 2**53 in magnitude (beyond, they are rounded to 53
      significant bits, a relative 1e-16). Cast to float32 yourself (``X.astype('float32')``) to halve the memory
      of small-valued wide integers.
    - Anything else (complex, boolean, text, objects, dates) is refused.

    Raises
    ------
    InputDataError
        A dtype that is not a real number.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        return dtype.newbyteorder("=")
    if dtype.kind in "iu":
        return np.dtype(np.float32 if dtype.itemsize <= FLOAT32_EXACT_INTEGER_BYTES else np.float64)
    if dtype == np.float16:
        return np.dtype(np.float32)
    if dtype.kind == "c":
        raise InputDataError(
            f"Complex data not supported: {name} has dtype {dtype}. Cluster the real and imaginary parts as "
            "separate features, e.g. numpy.hstack([X.real, X.imag])."
        )
    kinds = {
        "b": "boolean",
        "O": "object",
        "U": "string",
        "S": "bytes",
        "M": "datetime",
        "m": "timedelta",
        "V": "structured",
    }
    kind = kinds.get(dtype.kind, str(dtype))
    raise InputDataError(
        f"{name} has dtype {dtype} ({kind}); daskmeans clusters real numbers only. "
        "Convert the data to float32 (or float64, or an integer type) first, e.g. X.astype('float32')."
    )


#: Alignment (bytes) of the rows the kernels read: what NumPy's allocator gives every new array. Blocks that
#: arrived in a worker through Dask's serialization (scattered, persisted from the client, moved between workers)
#: can start at any byte of the message they came in; read in place, such a block's vector loads straddle cache
#: lines, which makes its assignment slower than that of an aligned copy.
ROW_ALIGNMENT = 16


def is_aligned(array: np.ndarray) -> bool:
    """Whether ``array`` starts at a multiple of :data:`ROW_ALIGNMENT` bytes (an empty array always does)."""
    return array.size == 0 or array.ctypes.data % ROW_ALIGNMENT == 0


def slab_rows(n_features: int, itemsize: int = 8, slab_bytes: int | None = None) -> int:
    """Rows of one slab: ``slab_bytes`` of rows with ``n_features`` values of ``itemsize`` bytes (at least one);
    ``slab_bytes`` None: :data:`~daskmeans.config.SLAB_BYTES`, read at call time."""
    slab_bytes = config.SLAB_BYTES if slab_bytes is None else slab_bytes
    return max(1, int(slab_bytes) // max(1, int(n_features) * int(itemsize)))


def row_slabs(n_rows: int, rows_per_slab: int):
    """``(start, stop)`` of consecutive slabs covering ``n_rows`` rows (one empty slab when there are none)."""
    if n_rows == 0:
        yield 0, 0
        return
    for start in range(0, n_rows, rows_per_slab):
        yield start, min(n_rows, start + rows_per_slab)


#: The reused slab buffer of each thread, kept between tasks (see :func:`slabs`).
_THREAD_SLAB_BUFFER = threading.local()


def _take_thread_buffer(n_bytes: int) -> np.ndarray:
    """This thread's slab buffer of at least ``n_bytes`` (raw bytes), taken out of its slot while in use: a walk
    nested in another on the same thread gets a buffer of its own."""
    buffer = getattr(_THREAD_SLAB_BUFFER, "buffer", None)
    _THREAD_SLAB_BUFFER.buffer = None
    if buffer is None or buffer.nbytes < n_bytes:
        buffer = np.empty(n_bytes, dtype=np.uint8)
    return buffer


def _return_thread_buffer(buffer: np.ndarray):
    kept = getattr(_THREAD_SLAB_BUFFER, "buffer", None)
    if kept is None or kept.nbytes < buffer.nbytes:
        _THREAD_SLAB_BUFFER.buffer = buffer


def slabs(block, weights=None, slab_bytes: int | None = None, reuse=False):
    """Walk a stored block: ``(start, rows, weights)`` per slab, ``rows`` converted to the compute dtype.

    Parameters
    ----------
    block : ndarray (n, d)
        The block as stored (any dtype :func:`compute_dtype` accepts; a converted block is walked as it is).
    weights : ndarray (n,), optional
        Sample weights, sliced along (float64).
    slab_bytes : int, optional
        Bytes of one slab as computed; None: :data:`~daskmeans.config.SLAB_BYTES`, read at call time.
    reuse : bool
        Convert every slab into the same buffer (for a caller that keeps nothing of ``rows`` from one slab to the
        next, nor after the walk): in Dask's worker processes, whose ``malloc`` hands every large array fresh pages
        from the system (the nanny sets ``MALLOC_TRIM_THRESHOLD_``), this spares the page faults of a new slab each
        time. The buffer is the thread's own and outlives the walk, so the next task on the thread reuses it too;
        each thread that ran such a walk keeps one slab (at most ``slab_bytes``) for its lifetime.

    A block already in the compute dtype, C-contiguous and aligned (:func:`is_aligned`) is walked in place; any
    other is converted (or copied) a slab at a time.

    Yields
    ------
    start : int
        The slab's first row within the block.
    rows : ndarray (m, d)
        C-contiguous, aligned, in the compute dtype (a view of the block when it is walked in place).
    weights : float64 ndarray (m,) or None
    """
    block = np.asarray(block)
    dtype = compute_dtype(block.dtype)
    step = slab_rows(block.shape[1], dtype.itemsize, slab_bytes)
    if weights is not None:
        weights = np.asarray(weights, dtype=np.float64)
    in_place = block.dtype == dtype and block.flags.c_contiguous and is_aligned(block)
    if in_place or not reuse:
        for start, stop in row_slabs(block.shape[0], step):
            rows = block[start:stop] if in_place else np.array(block[start:stop], dtype=dtype, order="C")
            yield start, rows, (None if weights is None else weights[start:stop])
        return
    raw = _take_thread_buffer(min(step, block.shape[0]) * block.shape[1] * dtype.itemsize)
    try:
        for start, stop in row_slabs(block.shape[0], step):
            rows = (
                raw[: (stop - start) * block.shape[1] * dtype.itemsize]
                .view(dtype)
                .reshape(stop - start, block.shape[1])
            )
            rows[...] = block[start:stop]
            yield start, rows, (None if weights is None else weights[start:stop])
    finally:
        _return_thread_buffer(raw)


def converted_rows(block, index) -> np.ndarray:
    """Rows ``index`` (an integer array or a slice) of a stored block, in the compute dtype."""
    block = np.asarray(block)
    rows = np.ascontiguousarray(block[index], dtype=compute_dtype(block.dtype))
    return rows if is_aligned(rows) else rows.copy()


def map_slabs(block, function, *args, block_info=None, slab_bytes: int | None = None, settings=None):
    """``function(rows, offset, *args)`` on each slab of a stored block (``offset``: the slab's first row in the
    whole array), its per-row results concatenated.

    For per-row outputs (labels, distances, posteriors): the result is that of one call on the whole converted
    block, with a task's memory bounded by one slab. Used as a ``map_blocks`` function (see :func:`map_rows`);
    ``slab_bytes`` None: :data:`~daskmeans.config.SLAB_BYTES`, read at call time; ``settings``: the settings the
    task carries (:func:`daskmeans.config.carried`), applied while it runs.
    """
    with config.applied(settings):
        offset = block_info[0]["array-location"][0][0] if block_info else 0
        parts = [function(rows, offset + start, *args) for start, rows, _ in slabs(block, slab_bytes=slab_bytes)]
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def with_stored_form(converted: da.Array, stored: da.Array) -> da.Array:
    """Attach ``stored`` (same shape and chunks, any dtype) to ``converted`` (its values in the compute dtype)."""
    if stored is not converted and stored.chunks == converted.chunks:
        setattr(converted, _STORED_ATTRIBUTE, stored)
    return converted


def stored_form(array: da.Array) -> da.Array:
    """The array as stored when :func:`with_stored_form` attached it, else ``array`` itself."""
    return getattr(array, _STORED_ATTRIBUTE, array)


def map_rows(array: da.Array, function, *args, dtype, name: str, trailing: int | None = None) -> da.Array:
    """A lazy per-row map of ``array``: ``function(rows, offset, *args)`` on slabs of each stored block, chunk-aligned.

    Parameters
    ----------
    array : dask.array.Array (n, d)
        The converted input (its stored form is used when attached).
    function : callable
        ``function(rows, offset, *args) -> ndarray`` with one result (or one row of results) per row; ``offset``
        is the global index of the first of ``rows`` (for error messages).
    dtype : numpy dtype
        The result's dtype.
    name : str
        Task name prefix (the keys are ``name-<token of the arguments>``: maps with other centers never share
        keys).
    trailing : int, optional
        Columns of the result (``(n, trailing)``); by default the result is 1-D ``(n,)``.
    """
    stored = stored_form(array)
    settings = config.carried()
    carry = {} if settings is None else {"settings": settings}  # the same keys as ever with the defaults
    if trailing is None:
        return stored.map_blocks(
            map_slabs, function, *args, drop_axis=1, dtype=dtype, token=name, meta=np.empty(0, dtype), **carry
        )
    return stored.map_blocks(
        map_slabs,
        function,
        *args,
        chunks=(stored.chunks[0], (int(trailing),)),
        dtype=dtype,
        token=name,
        meta=np.empty((0, 0), dtype),
        **carry,
    )


__all__ = [
    "ROW_ALIGNMENT",
    "is_aligned",
    "compute_dtype",
    "slab_rows",
    "row_slabs",
    "slabs",
    "converted_rows",
    "map_slabs",
    "with_stored_form",
    "stored_form",
    "map_rows",
]
