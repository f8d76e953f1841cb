"""nmbatch's active batch without its rows: each iteration re-reads them from the store, chunk by chunk.

:class:`~daskmeans.passes.nested_state.NestedBatch` keeps the batch's rows as floats on the workers, which is
fastest while they fit. When the batch can outgrow the workers' memory (n rows of d floats: 51 GB for 100 million
SIFT descriptors), :class:`RereadBatch` keeps per active row only its label, its exact squared distance and its
group lower bounds (``12 + 2 * groups`` bytes), in one state block per stored chunk: the batch's rows of a chunk are
always a prefix of that chunk's own random order (the shuffle of :mod:`~daskmeans.passes.nested_state` takes each
lane's rows chunk after chunk), so a block is the state of its chunk's first ``m`` rows in that order. Each
iteration, one task per chunk in the batch reads the chunk as stored, revisits those ``m`` rows with the bounds and
assigns the rows the growth adds, a slab of rows at a time: a task holds the stored chunk, one slab as floats and
its chunk's state. The iterates are nmbatch's (the same batch, the same labels); only the order in which the
blocks' deltas are summed differs from the cached layout.

The price is reading every chunk the batch touches at each iteration: about ``batch / chunk_rows`` chunks plus
one partly used chunk per lane.
"""

from __future__ import annotations

import os

import numpy as np

from ..engine.client import compute_now, keep_and_reduce, persist_now
from ..engine.graph import map_blocks_delayed, shared
from ..engine.sizes import SizedSlots
from ..engine.slabs import converted_rows, slab_rows
from ..exceptions import CheckpointError
from ..kernels.exact_assign import assign_with_bounds
from ..kernels.nested import batch_deltas
from ..kernels.packed_bounds import LOWER_DTYPE, as_stored_bounds
from ..kernels.revisit import revisit_with_bounds
from ..storage.zarr_safe import read_group, write_group
from .assign import stats_part_bytes
from .nested_reads import chunk_order
from .nested_state import NestedBatch
from .nested_step import COUNTERS, StepOutput, _combine_reports, _report_of


class ChunkState(SizedSlots):
    """The state of the batch's rows of one chunk: its first ``m`` rows in the chunk's own order.

    Attributes
    ----------
    labels : int32 (m,)
    dist2 : float64 (m,)
        Exact squared distance to the assigned center.
    lower : uint16 (m, n_groups)
        Group lower bounds (``(m, 0)`` without bounds).
    """

    __slots__ = ("labels", "dist2", "lower")

    def __init__(self, labels, dist2, lower):
        self.labels = labels
        self.dist2 = dist2
        self.lower = lower

    def __len__(self):
        return self.labels.shape[0]

    def __getstate__(self):
        return (self.labels, self.dist2, self.lower)

    def __setstate__(self, state):
        self.labels, self.dist2, self.lower = state


#: The arrays of a chunk's state in a checkpoint, with their dtypes.
STATE_ARRAYS = {"labels": np.int32, "dist2": np.float64, "lower": LOWER_DTYPE}


def _slab_bounds(m_old: int, m_new: int, step: int) -> list[int]:
    """Slab boundaries over ``0 .. m_new`` that also cut at ``m_old`` (revisited rows and new rows apart)."""
    return sorted(set(range(0, m_new, step)) | {m_old, m_new})


def _chunk_step(block, offset, weights, previous, key, m_new, centers, shift, groups, use_bounds):
    """Revisit the chunk's first ``m_old`` rows of its order, add rows ``m_old .. m_new``, report the deltas.

    The chunk as read comes first: it is what the task reports to a pass watch as the rows it read."""
    block = np.asarray(block)
    order = chunk_order(key, offset, block.shape[0])[:m_new]
    state = previous.block if previous is not None else None
    m_old = 0 if state is None else len(state)
    k, d = centers.shape
    weights = None if weights is None else np.asarray(weights, dtype=np.float64)
    labels = np.empty(m_new, dtype=np.int32)
    dist2 = np.empty(m_new, dtype=np.float64)
    lower = np.empty((m_new, groups.n_groups if use_bounds else 0), dtype=LOWER_DTYPE)
    totals = [np.zeros((k, d)), np.zeros(k), np.zeros(k), np.zeros(k, dtype=np.int64)]
    counters = np.zeros(len(COUNTERS), dtype=np.int64)
    cuts = _slab_bounds(m_old, m_new, slab_rows(d, centers.dtype.itemsize))
    for a, b in zip(cuts[:-1], cuts[1:]):
        rows = converted_rows(block, order[a:b])
        w = None if weights is None else weights[order[a:b]]
        if b <= m_old:
            old_labels, old_dist2 = state.labels[a:b], state.dist2[a:b]
            if use_bounds:
                labels[a:b], dist2[a:b], lower[a:b], computed = revisit_with_bounds(
                    rows, centers, old_labels, state.lower[a:b], shift, groups, dist2=old_dist2
                )
            else:
                labels[a:b], dist2[a:b], _, _ = assign_with_bounds(rows, centers, groups, with_bounds=False)
                computed = (b - a) * k
            *deltas, changed = batch_deltas(rows, old_labels, old_dist2, labels[a:b], dist2[a:b], k, w)
            counters += (b - a, 0, changed, computed, max(0, (b - a) * k - computed))
        else:
            labels[a:b], dist2[a:b], new_lower, _ = assign_with_bounds(rows, centers, groups, with_bounds=use_bounds)
            lower[a:b] = new_lower
            *deltas, _ = batch_deltas(rows, np.empty(0, dtype=np.int32), np.empty(0), labels[a:b], dist2[a:b], k, w)
            counters += (0, b - a, 0, (b - a) * k, 0)
        for total, delta in zip(totals, deltas):
            total += delta
    return StepOutput(ChunkState(labels, dist2, lower), (*totals, counters))


def _chunk_content(output, offset, size, key):
    state = output.block
    index = offset + chunk_order(key, offset, size)[: len(state)].astype(np.int64)
    return index, state.labels, state.dist2, state.lower


def _chunk_size(output):
    return len(output.block)


def _write_chunk(output, path, storage_options=None):
    write_group(path, {name: getattr(output.block, name) for name in STATE_ARRAYS}, None, storage_options)
    return len(output.block)


def _read_chunk(path, n_rows, n_lower, storage_options=None):
    what = f"The checkpoint's chunk state {path!r}"
    arrays = read_group(path, list(STATE_ARRAYS), what, storage_options)
    arrays["lower"] = as_stored_bounds(arrays["lower"])
    for name, dtype in STATE_ARRAYS.items():
        shape = (n_rows, n_lower) if name == "lower" else (n_rows,)
        if arrays[name].dtype != np.dtype(dtype) or arrays[name].shape != shape:
            raise CheckpointError(
                f"{what} is damaged: {name} is {arrays[name].dtype} {arrays[name].shape}, "
                f"expected {np.dtype(dtype)} {shape}. Delete the checkpoint to start the fit "
                "afresh."
            )
    return StepOutput(ChunkState(*(np.ascontiguousarray(arrays[name]) for name in STATE_ARRAYS)), None)


class RereadBatch(NestedBatch):
    """The growing, shuffled batch, its rows re-read from the store at every iteration (see the module).

    Same parameters and the same shuffle as :class:`~daskmeans.passes.nested_state.NestedBatch` (``max_blocks``
    and ``min_block_rows`` do not apply: there is one state block per chunk in the batch). ``rows_read`` counts
    every row of every chunk read, so ``rows_read / n`` is the passes over the data.
    """

    #: The layout never changes (it follows from the batch size) and checkpoints hold no rows: the shared
    #: checkpoint folder of this name is never written.
    LAYOUT = "0"

    def __init__(self, array, seed, groups, *, client=None, max_lanes=None, weights=None, **_):
        super().__init__(array, seed, groups, client=client, max_lanes=max_lanes, weights=weights)
        self.chunks_in_batch = np.empty(0, dtype=np.int64)
        self.layout_id = self.LAYOUT

    def chunk_counts(self, size: int) -> np.ndarray:
        """Rows of each chunk among the first ``size`` rows of the shuffled order (a prefix of its own order)."""
        counts = np.zeros(len(self.chunk_sizes), dtype=np.int64)
        for lane, taken in enumerate(self.lane_counts(size)):
            chunks = self.lane_chunks[lane]
            starts = self.lane_ends[lane] - self.chunk_sizes[chunks]
            counts[chunks] = np.clip(taken - starts, 0, self.chunk_sizes[chunks])
        return counts

    def step(self, centers, shift, target_size):
        """As :meth:`NestedBatch.step`: revisit the batch with ``centers`` (moved by ``shift``), grow it to
        ``target_size``, return the changes of S, v, SSE, the members and the counters."""
        target_size = int(min(max(target_size, self.size), self.n_samples))
        counts = self.chunk_counts(target_size)
        chunks = np.flatnonzero(counts)
        previous = dict(zip(self.chunks_in_batch.tolist(), self.outputs))
        centers = np.ascontiguousarray(centers, dtype=self.array.dtype)
        weight_blocks = self.weight_blocks if self.weight_blocks is not None else [None] * len(self.data_blocks)
        args = [
            [
                self.data_blocks[c],
                int(self.offsets[c]),
                weight_blocks[c],
                previous.get(int(c)),
                self.row_key,
                int(counts[c]),
            ]
            for c in chunks
        ]
        outputs = map_blocks_delayed(
            _chunk_step,
            "nmbatch-reread-step",
            args,
            shared(centers, "nmbatch-centers"),
            shared(np.asarray(shift, dtype=np.float64), "nmbatch-shift"),
            shared(self.groups, "nmbatch-groups"),
            self.use_bounds,
            reads_data=True,
        )
        outputs, report = keep_and_reduce(
            outputs, _report_of, _combine_reports, "nmbatch-deltas", stats_part_bytes(*centers.shape, 0), self.client
        )
        self.outputs = list(outputs)
        self.chunks_in_batch = chunks
        self.rows_read += int(self.chunk_sizes[chunks].sum())
        self.size = target_size
        sums, counts_delta, sse, members, counters = report
        return sums, counts_delta, sse, members, dict(zip(COUNTERS, (int(c) for c in counters)))

    def content(self):
        """Row indices, labels, squared distances and bounds of the whole batch (for tests and checks)."""
        parts = map_blocks_delayed(
            _chunk_content,
            "nmbatch-content",
            [
                [o, int(self.offsets[c]), int(self.chunk_sizes[c]), self.row_key]
                for o, c in zip(self.outputs, self.chunks_in_batch)
            ],
        )
        values = compute_now(*parts, client=self.client)
        return tuple(np.concatenate([v[i] for v in values]) for i in range(4))

    def block_sizes(self):
        """Rows in each state block (one per chunk in the batch)."""
        parts = map_blocks_delayed(_chunk_size, "nmbatch-sizes", [[o] for o in self.outputs])
        return list(compute_now(*parts, client=self.client))

    def write_checkpoint(self, directory, layout_directory=None, storage_options=None):
        """Have each chunk's state written into ``directory`` where it lives (with ``storage_options`` for a
        checkpoint on object storage); no rows (they are in the store).

        Returns
        -------
        dict
            JSON metadata for :meth:`restore_checkpoint`: the chunks in the batch and their rows in it.
        """
        parts = map_blocks_delayed(
            _write_chunk,
            "nmbatch-checkpoint",
            [[o, os.path.join(directory, f"{int(c):06d}")] for o, c in zip(self.outputs, self.chunks_in_batch)],
            storage_options,
        )
        sizes = compute_now(*parts, client=self.client)
        return {"chunks": [int(c) for c in self.chunks_in_batch], "chunk_rows": [int(s) for s in sizes]}

    def restore_checkpoint(
        self, metadata, directory, layout_directory, layout_id, size, rows_read, storage_options=None
    ):
        """Load the chunk states written by :meth:`write_checkpoint` (each read by a worker, with
        ``storage_options`` for a checkpoint on object storage) and the batch size.

        Raises
        ------
        CheckpointError
            A state is missing, damaged, or does not fit a batch of ``size`` rows of this data.
        """
        chunks = metadata.get("chunks") if isinstance(metadata, dict) else None
        rows = metadata.get("chunk_rows") if isinstance(metadata, dict) else None
        expected = self.chunk_counts(int(size))
        if (
            not isinstance(chunks, list)
            or not isinstance(rows, list)
            or chunks != np.flatnonzero(expected).tolist()
            or rows != expected[expected > 0].tolist()
        ):
            raise CheckpointError(
                f"The checkpoint's chunk states in {directory!r} do not match a batch of {size} "
                "rows of this data: the checkpoint is damaged. Delete it to start afresh."
            )
        n_lower = self.groups.n_groups if self.use_bounds else 0
        parts = map_blocks_delayed(
            _read_chunk,
            "nmbatch-restore",
            [[os.path.join(directory, f"{c:06d}"), int(r)] for c, r in zip(chunks, rows)],
            n_lower,
            storage_options,
        )
        outputs = list(persist_now(*parts, client=self.client))
        compute_now(*map_blocks_delayed(_chunk_size, "nmbatch-sizes", [[o] for o in outputs]), client=self.client)
        self.outputs = outputs
        self.chunks_in_batch = np.asarray(chunks, dtype=np.int64)
        self.size = int(size)
        self.rows_read = rows_read
        self.layout_id = self.LAYOUT

    def release(self):
        """Drop the chunk states (the workers free their memory)."""
        self.outputs = []
        self.chunks_in_batch = np.empty(0, dtype=np.int64)


__all__ = ["ChunkState", "RereadBatch"]
