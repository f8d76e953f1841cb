"""The active batch of nested mini-batch k-means, kept on the workers as persisted state blocks.

The data is shuffled once without moving it. The row blocks (chunks) are put in a random order and dealt
round-robin to ``L`` lanes; the rows of each chunk get a random order of their own
(:func:`~daskmeans.passes.nested_reads.chunk_order`). The
shuffled order takes rows from the lanes in turn, so any prefix holds about the same number of rows from each
lane: the batch of size ``b`` (the first ``b`` rows of the order) mixes ``L`` chunks from the start, even when
the stored order of the rows is not random (sorted by class, by time...), while a growth reads only the next
part of one or two chunks per lane. The workers read the new rows from the store themselves; nothing but
``k x d`` statistics ever reaches the driver, except while the batch is small enough to be stepped there
(:mod:`~daskmeans.passes.nested_driver`, ``driver_rows``): its new rows then come to the driver once.

The batch is split into state blocks (rows, row ids, labels, squared distances, group lower bounds). As in
section 3.3 of the paper, every state block receives an equal share of the rows added at each growth, so
that blocks cost the same to revisit; when the batch has grown enough for more blocks, every block is split in
two (every other row, so each half keeps an equal share of every growth).
"""

from __future__ import annotations

import os
import uuid

import numpy as np

from .. import config
from ..engine.client import compute_now, keep_and_reduce, persist_now, resolve_client
from ..engine.graph import block_offsets, blocks_of, map_blocks_delayed, shared, stored_blocks
from ..engine.random import stage_generator, stage_key
from ..engine.slabs import stored_form
from ..exceptions import CheckpointError
from ..kernels.packed_bounds import LOWER_DTYPE, as_stored_bounds
from ..storage.zarr_safe import read_group, write_group
from .assign import stats_part_bytes
from .bounded_assign import kept_dtype
from .nested_driver import joined_on_workers, step_on_driver, to_workers
from .nested_reads import GrowthReads
from .nested_step import COUNTERS, BatchBlock, StepOutput, _combine_reports, _report_of, _step_block


def _block_with_rows(rows, *fields):
    """A state block from its rows and its other arrays (:attr:`BatchBlock.FIELDS` order)."""
    return StepOutput(BatchBlock(rows, *fields), None)


def _block_content(output):
    block = output.block
    return block.index, block.labels, block.dist2, block.lower


def _block_size(output):
    return len(output.block)


#: The arrays of a state block in a checkpoint, with their dtypes (``None``: the data's dtype): those that change
#: only when the batch grows or splits (the layout), and those that change every iteration.
LAYOUT_ARRAYS = {"rows": None, "index": np.int64, "weights": np.float64}
STATE_ARRAYS = {"labels": np.int32, "dist2": np.float64, "lower": LOWER_DTYPE}
CHECKPOINT_ARRAYS = {**LAYOUT_ARRAYS, **STATE_ARRAYS}


def _write_block(output, state_path, layout_path, storage_options=None):
    """Write one state block into a checkpoint (runs where the block lives): its labels, distances and bounds,
    and its rows and indices when ``layout_path`` is given (``storage_options``: a checkpoint on object storage).
    Returns its number of rows."""
    block = output.block
    if layout_path is not None:
        write_group(layout_path, {name: getattr(block, name) for name in LAYOUT_ARRAYS}, None, storage_options)
    write_group(state_path, {name: getattr(block, name) for name in STATE_ARRAYS}, None, storage_options)
    return len(block)


def _read_block(state_path, layout_path, n_rows, n_features, n_lower, dtypes, storage_options=None):
    """Read one state block back from a checkpoint (on a worker), checking every array's dtype and shape.

    ``dtypes``: the dtypes the rows may have (as the state keeps them, or as computed: blocks written before the
    states kept integer rows as stored, and empty blocks)."""
    what = f"The checkpoint's state block {state_path!r}"
    arrays = read_group(layout_path, list(LAYOUT_ARRAYS), f"The checkpoint's rows {layout_path!r}", storage_options)
    arrays.update(read_group(state_path, list(STATE_ARRAYS), what, storage_options))
    arrays["lower"] = as_stored_bounds(arrays["lower"])
    for name, expected in CHECKPOINT_ARRAYS.items():
        allowed = [np.dtype(t) for t in dtypes] if expected is None else [np.dtype(expected)]
        expected = allowed[0]
        shape = {"rows": (n_rows, n_features), "lower": (n_rows, n_lower)}.get(name, (n_rows,))
        found = arrays[name].shape
        if name == "lower" and n_rows == 0:  # an empty block's bounds may have no columns
            shape = (0, found[1] if len(found) == 2 else n_lower)
        if arrays[name].dtype not in allowed or found != shape:
            raise CheckpointError(
                f"{what} is damaged: {name} is {arrays[name].dtype} {arrays[name].shape}, "
                f"expected {expected} {shape}. Delete the checkpoint to start the fit afresh."
            )
    return StepOutput(BatchBlock(*(np.ascontiguousarray(arrays[name]) for name in BatchBlock.FIELDS)), None)


class NestedBatch:
    """The growing, shuffled batch on the workers.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    seed : int
        Root seed; fixes the order of chunks and of rows within each chunk.
    groups : CenterGroups
    client : distributed.Client, optional
        ``None`` runs on the local threaded scheduler (the blocks then live in this process).
    max_blocks : int, optional
        Most state blocks; default the number of row blocks of ``array``.
    min_block_rows : int, optional
        Blocks are split only while the halves keep this many rows; None:
        :data:`~daskmeans.config.MIN_BLOCK_ROWS`, read when the state is made.
    max_lanes : int, optional
        Most lanes; None: :data:`~daskmeans.config.MAX_LANES`, read when the state is made.
    weights : dask.array.Array (n,), optional
        Sample weights, chunked like ``array``; read with the rows.
    driver_rows : int
        Batches of at most this many rows are stepped on the driver (:mod:`~daskmeans.passes.nested_driver`;
        with a ``client`` only); 0: every step on the workers.
    """

    def __init__(
        self,
        array,
        seed,
        groups,
        *,
        client=None,
        max_blocks=None,
        min_block_rows=None,
        max_lanes=None,
        weights=None,
        driver_rows=0,
    ):
        self.array = array
        self.weight_blocks = None if weights is None else blocks_of(weights)
        self.n_samples, self.n_features = (int(s) for s in array.shape)
        self.groups = groups
        self.use_bounds = groups.scheme != "none"
        self.client = client if client is not None else resolve_client(None)
        self.chunk_sizes = np.asarray(array.chunks[0], dtype=np.int64)
        self.offsets = block_offsets(array)
        order_of_chunks = stage_generator(seed, "nmbatch", "chunk-order").permutation(len(self.chunk_sizes))
        self.n_lanes = min(len(self.chunk_sizes), config.MAX_LANES if max_lanes is None else int(max_lanes))
        self.lane_chunks = [order_of_chunks[lane :: self.n_lanes] for lane in range(self.n_lanes)]
        self.lane_ends = [np.cumsum(self.chunk_sizes[chunks]) for chunks in self.lane_chunks]
        self.lane_lengths = np.array([ends[-1] for ends in self.lane_ends], dtype=np.int64)
        self.row_key = stage_key(seed, "nmbatch", "row-order")
        self.max_blocks = int(max_blocks or len(self.chunk_sizes))
        self.min_block_rows = int(config.MIN_BLOCK_ROWS if min_block_rows is None else min_block_rows)
        self.data_blocks = stored_blocks(array)
        self.reads = GrowthReads(
            self.data_blocks, self.weight_blocks, self.offsets, self.row_key, self._pieces, self.client
        )
        #: The dtype of the rows the blocks keep: as stored for integers of up to 16 bits, else as computed.
        self.rows_dtype = kept_dtype(stored_form(array).dtype)
        self.size = 0
        self.outputs = []
        self.driver_rows = int(driver_rows)
        #: The state blocks are in the driver's memory (values), not on the workers (delayed references).
        self.on_driver = False
        #: ``(layout_id, rows)``: the rows of the blocks on the driver, sent to the workers ahead of the move.
        self._rows_ahead = (None, None)
        self.rows_read = 0
        #: Changes whenever the blocks' rows change (growth or split), so that a checkpoint writes them only then.
        self.layout_id = None

    @property
    def n_blocks(self) -> int:
        return len(self.outputs)

    def _blocks_for(self, size: int) -> int:
        """State blocks for a batch of ``size`` rows.

        The count only ever doubles (every block splits in two), so blocks stay equal: it is one of
        ``max_blocks / 2**j``, the smallest that gives blocks of at most ``min_block_rows`` rows.
        """
        allowed = [self.max_blocks]
        while allowed[-1] % 2 == 0:
            allowed.append(allowed[-1] // 2)
        wanted = min(self.max_blocks, -(-size // self.min_block_rows))
        blocks = min(b for b in allowed if b >= wanted)
        if self.outputs:
            blocks = max(self.n_blocks, min(blocks, 2 * self.n_blocks))
        return blocks

    def lane_counts(self, size: int) -> np.ndarray:
        """Rows each lane contributes to the first ``size`` rows of the order (lanes take turns; one that runs
        out of rows drops out)."""
        lengths = self.lane_lengths
        low, high = 0, int(lengths.max())
        while low < high:  # the largest h with sum(min(lengths, h)) <= size
            mid = (low + high + 1) // 2
            if np.minimum(lengths, mid).sum() <= size:
                low = mid
            else:
                high = mid - 1
        counts = np.minimum(lengths, low)
        extra = int(size - counts.sum())
        counts[np.flatnonzero(lengths > low)[:extra]] += 1
        return counts

    def _pieces(self, lo: int, hi: int):
        """``(chunk, start, stop)``: the rows at shuffled positions ``lo .. hi - 1`` as ranges of the chunks' own
        orders."""
        pieces = []
        for lane, (a, b) in enumerate(zip(self.lane_counts(lo), self.lane_counts(hi))):
            ends = self.lane_ends[lane]
            position = int(a)
            rank = int(np.searchsorted(ends, position, side="right"))
            while position < b:
                chunk = int(self.lane_chunks[lane][rank])
                chunk_start = int(ends[rank] - self.chunk_sizes[chunk])
                stop = min(int(b), int(ends[rank]))
                pieces.append((chunk, position - chunk_start, stop - chunk_start))
                position = stop
                rank += 1
        return pieces

    def step(self, centers, shift, target_size):
        """Revisit the batch with ``centers`` (which moved by ``shift``) and grow it to ``target_size``.

        Returns
        -------
        sums : float64 (k, d)
        counts, sse : float64 (k,)
            Changes of S, v and SSE (v: the clusters' weight).
        members : int64 (k,)
            Changes of the clusters' numbers of samples.
        counters : dict
            ``reused``, ``new``, ``changed``, ``computed``, ``skipped`` of this iteration.
        """
        target_size = int(min(max(target_size, self.size), self.n_samples))
        here = self.client is not None and target_size <= self.driver_rows and (self.on_driver or not self.outputs)
        if self.on_driver and not here:
            self._blocks_to_workers()
        old_blocks = self.n_blocks
        n_blocks = self._blocks_for(target_size)
        n_split = n_blocks - old_blocks if old_blocks else 0
        parents = []
        for s in range(n_blocks):
            if not old_blocks:
                parents.append((None, None))
            elif s < old_blocks:
                parents.append((self.outputs[s], 0 if s < n_split else None))
            else:
                parents.append((self.outputs[s - old_blocks], 1))
        # the new rows: an equal share of the order's next rows per state block, read by one task per chunk touched
        lo, hi = self.size, target_size
        shares = np.linspace(lo, hi, n_blocks + 1).round().astype(np.int64)
        share_pieces = [self._pieces(int(shares[s]), int(shares[s + 1])) for s in range(n_blocks)]
        extent, reads = self.reads.take(lo, hi, here)
        block_pieces = [
            [(reads[c], a - extent[c][0], b - extent[c][0]) for c, a, b in pieces] for pieces in share_pieces
        ]
        centers = np.ascontiguousarray(centers, dtype=self.array.dtype)
        block_args = [[parent, half, pieces] for (parent, half), pieces in zip(parents, block_pieces)]
        common = (np.asarray(shift, dtype=np.float64), self.groups, self.use_bounds, self.n_features)
        if here:
            outputs, report = step_on_driver(_step_block, block_args, (centers, *common), _combine_reports)
        else:
            outputs = map_blocks_delayed(
                _step_block,
                "nmbatch-step",
                block_args,
                shared(centers, "nmbatch-centers"),
                shared(common[0], "nmbatch-shift"),
                shared(self.groups, "nmbatch-groups"),
                *common[2:],
                reads_data=True,
            )
            outputs, report = keep_and_reduce(
                outputs,
                _report_of,
                _combine_reports,
                "nmbatch-deltas",
                stats_part_bytes(*centers.shape, 0),
                self.client,
            )
        self.outputs = list(outputs)
        self.on_driver = here
        self.rows_read += hi - lo
        self.size = target_size
        if hi > lo or n_split or self.layout_id is None:
            self.layout_id = uuid.uuid4().hex[:16]
        if here:  # the next doubling's rows, read while the driver steps
            following = min(2 * self.size, self.n_samples)
            self.reads.read_ahead(self.size, following)
            if following > self.driver_rows and self._rows_ahead[0] != self.layout_id:
                # the next growth leaves the driver: the blocks' rows (they change only when the batch grows or
                # splits) go to the workers now, while the driver steps, and only their labels, distances and
                # bounds at the move
                self._rows_ahead = (
                    self.layout_id,
                    to_workers([o.block.rows for o in self.outputs], self.client, "rows-from-driver"),
                )
        sums, counts, sse, members, counters = report
        return sums, counts, sse, members, dict(zip(COUNTERS, (int(c) for c in counters)))

    def _blocks_to_workers(self):
        """Move the state blocks from the driver to the workers (with the rows sent ahead when they still fit)."""
        layout, rows = self._rows_ahead
        if layout == self.layout_id:
            self.outputs = joined_on_workers(
                _block_with_rows,
                rows,
                [[getattr(o.block, name) for name in BatchBlock.FIELDS[1:]] for o in self.outputs],
                self.client,
            )
        else:
            self.outputs = to_workers(self.outputs, self.client)
        self.on_driver, self._rows_ahead = False, (None, None)

    def write_checkpoint(self, directory, layout_directory=None, storage_options=None):
        """Have each state block written into ``directory`` where it lives (nothing passes through the driver, which
        writes only the blocks it holds itself, :mod:`~daskmeans.passes.nested_driver`).

        Parameters
        ----------
        directory : str
            Where the labels, distances and bounds go (they change every iteration).
        layout_directory : str, optional
            Where the rows and indices go; None when they are there already (the batch has neither grown nor
            split since they were written: see :attr:`layout_id`).
        storage_options : dict, optional
            For a checkpoint on object storage: sent with the paths to the workers that write.

        Returns
        -------
        dict
            JSON metadata for :meth:`restore_checkpoint`: the sizes of the blocks.
        """
        args = [
            [
                o,
                os.path.join(directory, f"{i:05d}"),
                None if layout_directory is None else os.path.join(layout_directory, f"{i:05d}"),
            ]
            for i, o in enumerate(self.outputs)
        ]
        if self.on_driver:
            sizes = [_write_block(*a, storage_options) for a in args]
        else:
            writes = map_blocks_delayed(_write_block, "nmbatch-checkpoint", args, storage_options)
            sizes = compute_now(*writes, client=self.client)
        return {"block_sizes": [int(s) for s in sizes]}

    def restore_checkpoint(
        self, metadata, directory, layout_directory, layout_id, size, rows_read, storage_options=None
    ):
        """Load the state blocks written by :meth:`write_checkpoint` (each read by a worker, with
        ``storage_options`` for a checkpoint on object storage) and the batch size.

        Raises
        ------
        CheckpointError
            A block is missing, damaged, or does not fit this batch.
        """
        sizes = metadata.get("block_sizes") if isinstance(metadata, dict) else None
        if not isinstance(sizes, list) or sum(sizes) != size:
            raise CheckpointError(
                f"The checkpoint's state blocks in {directory!r} do not add up to the batch of "
                f"{size} rows it records: the checkpoint is damaged. Delete it to start afresh."
            )
        n_lower = self.groups.n_groups if self.use_bounds else 0
        parts = map_blocks_delayed(
            _read_block,
            "nmbatch-restore",
            [
                [os.path.join(directory, f"{i:05d}"), os.path.join(layout_directory, f"{i:05d}"), int(rows)]
                for i, rows in enumerate(sizes)
            ],
            self.n_features,
            n_lower,
            (self.rows_dtype.str, self.array.dtype.str),
            storage_options,
        )
        outputs = list(persist_now(*parts, client=self.client))
        self.on_driver, self.reads.pending, self._rows_ahead = False, {}, (None, None)
        self._sizes_of(outputs)  # waits for every block, raising what a read raised (only sizes reach the driver)
        self.outputs = outputs
        self.size = int(size)
        self.rows_read = rows_read
        self.layout_id = layout_id

    def content(self):
        """Row indices, labels, squared distances and bounds of the whole batch (for tests and checks)."""
        if self.on_driver:
            values = [_block_content(o) for o in self.outputs]
        else:
            values = compute_now(
                *map_blocks_delayed(_block_content, "nmbatch-content", [[o] for o in self.outputs]), client=self.client
            )
        return tuple(np.concatenate([v[i] for v in values]) for i in range(4))

    def block_sizes(self):
        """Rows in each state block."""
        return self._sizes_of(self.outputs)

    def _sizes_of(self, outputs):
        if self.on_driver:
            return [_block_size(o) for o in outputs]
        parts = map_blocks_delayed(_block_size, "nmbatch-sizes", [[o] for o in outputs])
        return list(compute_now(*parts, client=self.client))

    def release(self):
        """Drop the state blocks (the workers free their memory)."""
        self.outputs = []
        self.on_driver, self.reads.pending, self._rows_ahead = False, {}, (None, None)
