"""VRKM's epoch sample in pools of draws, and the inner loop that streams through them.

An epoch draws ``T`` rows (``epoch_size``: by default half the data), far more than a worker's memory can hold on
large data. The draws are cut into consecutive pools of at most :func:`~daskmeans.memory.vrkm_pool_rows` draws
(:data:`~daskmeans.config.VRKM_POOL_BYTES` of sample). The first pool is gathered by the epoch's pass, with the
statistics; each later pool by a read of the blocks its draws fall in (:func:`~daskmeans.passes.epoch.pool_pass_graph`),
its rows labelled against the centers of the epoch's pass as the pass labels its own. The inner loop takes the
pools in draw order, carrying its state from one to the next (:class:`LoopProgress`), so the steps are those of
one loop over the whole sample, and only one pool is held at a time: on the workers that read it when the loop
runs on a worker, else on the driver. An epoch of one pool (the sample within ``VRKM_POOL_BYTES``) is one pass,
as it always was; a longer one costs a read per further pool, the price of bounded memory.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from .. import config
from ..engine.client import compute_now, persist_now, run_pinned, submit_now
from ..engine.deadline import BudgetSpent, budget_until, wait_for_futures
from ..engine.pass_progress import active_watch
from ..engine.slabs import stored_form
from ..kernels.vrkm import InnerLoop
from ..kernels.vrkm_batched import BatchedInnerLoop
from ..memory import vrkm_pool_rows
from ..passes.assign import finish_stats
from ..passes.epoch import (
    SegmentsHere,
    SegmentsOnCluster,
    epoch_pass_graph,
    epoch_pass_on_driver,
    ordered_segment,
    pool_pass_graph,
    pool_pass_on_driver,
    segment_starts,
)


def pool_bounds(n_draws: int, pool_rows: int) -> list[tuple[int, int]]:
    """First and last (excluded) draw of each pool of an epoch of ``n_draws`` draws.

    Examples
    --------
    >>> pool_bounds(10, 4)
    [(0, 4), (4, 8), (8, 10)]
    >>> pool_bounds(0, 4)
    [(0, 0)]
    """
    pool_rows = max(1, int(pool_rows))
    return [(first, min(first + pool_rows, n_draws)) for first in range(0, max(1, n_draws), pool_rows)]


def epoch_pools(array, n_draws: int, n_candidates: int) -> list[tuple[int, int]]:
    """The pools of an epoch of ``n_draws`` draws of ``array`` (:func:`pool_bounds`), each at most
    :data:`~daskmeans.config.VRKM_POOL_BYTES` of sample (rows as stored, with ``n_candidates`` listed per draw).

    Examples
    --------
    >>> import dask.array as da
    >>> from daskmeans import config
    >>> with config.set(VRKM_POOL_BYTES=2**20):
    ...     len(epoch_pools(da.zeros((10**6, 64), dtype="float32"), 10_000, 0))
    3
    """
    stored = stored_form(array)
    return pool_bounds(n_draws, vrkm_pool_rows(int(array.shape[1]), n_candidates, stored.dtype.itemsize))


def segment_rows_for(n_draws: int, array) -> int:
    """Draws per segment: at least ``MIN_SEGMENTS`` segments (the candidate lists are remade for each), and none
    larger than one block of the data.

    Examples
    --------
    >>> import dask.array as da
    >>> segment_rows_for(1000, da.zeros((10_000, 2), chunks=(5000, 2)))
    125
    """
    return max(1, min(math.ceil(n_draws / config.MIN_SEGMENTS), int(max(array.chunks[0]))))


@dataclass(frozen=True)
class InnerLoopTask:
    """What the inner loop over one pool of an epoch's sample runs from, besides the pool (:func:`run_segments`;
    sent whole to the worker that runs it).

    Attributes
    ----------
    starts : int array
        First draw of each segment of the pool (counted from the pool's first draw).
    n_draws : int
        Draws of the pool.
    snapshot : ndarray (k, d)
        ``C~new``.
    pass_centers : ndarray (k, d)
        ``C~``, the centers the pass made the candidate lists against.
    eta, batch_gradient, agree_rule, n_candidates :
        See :class:`~daskmeans.kernels.vrkm.InnerLoop`.
    batch_size : int
        Draws whose nearest centers are found together (1: the paper's per-sample loop).
    remake_cost : float
        :data:`~daskmeans.config.REMAKE_COST` (read on the driver).
    """

    starts: Any
    n_draws: int
    snapshot: Any
    pass_centers: Any
    eta: float
    batch_gradient: Any
    agree_rule: str
    n_candidates: int
    batch_size: int
    remake_cost: float


@dataclass
class LoopProgress:
    """The inner loop of an epoch between two pools: its state, whether the pass's candidate lists still serve,
    and the segments whose lists were remade so far.

    Attributes
    ----------
    loop : InnerLoop or BatchedInnerLoop
    pass_lists : bool
    remade : int
    """

    loop: Any
    pass_lists: bool = True
    remade: int = 0


def start_loop(task: InnerLoopTask) -> LoopProgress:
    """A new inner loop from ``task``'s snapshot: batched when ``task.batch_size > 1``, else per sample."""
    if task.batch_size > 1:
        loop = BatchedInnerLoop(
            task.snapshot,
            task.eta,
            batch_size=task.batch_size,
            batch_gradient=task.batch_gradient,
            agree_rule=task.agree_rule,
        )
    else:
        loop = InnerLoop(
            task.snapshot,
            task.eta,
            batch_gradient=task.batch_gradient,
            agree_rule=task.agree_rule,
            reference_centers=task.pass_centers,
        )
    return LoopProgress(loop)


def run_segments(pieces, compute, task, progress=None):
    """The inner loop over one pool of an epoch's sample, one segment at a time, from ``task``
    (:class:`InnerLoopTask`), continuing ``progress``.

    With ``task.batch_size > 1`` the loop is batched (:class:`~daskmeans.kernels.vrkm_batched.BatchedInnerLoop`) and
    the segments carry no candidate lists. In the per-sample loop, the candidate lists made in the pass are used
    while they keep the steps cheap; once the centers have drifted so far from the pass's that a step needs more
    than ``REMAKE_COST`` distances per listed candidate, each remaining segment (of this pool and the next) gets its
    lists remade against the centers of that moment. This changes the speed only.

    Parameters
    ----------
    pieces : list of list
        ``pieces[s][b]``: block ``b``'s part of segment ``s``: Delayed objects or Futures of a sample kept on the
        cluster, or the parts themselves when the pass brought them here (``compute`` None).
    compute : callable or None
        Computes a delayed object and returns its value (driver client, worker client or local scheduler).
    task : InnerLoopTask
    progress : LoopProgress, optional
        The loop as the previous pool of the epoch left it; None starts one (:func:`start_loop`).

    Returns
    -------
    LoopProgress
    """
    progress = start_loop(task) if progress is None else progress
    loop, starts, n_candidates = progress.loop, task.starts, task.n_candidates
    segments = SegmentsHere(pieces) if compute is None else SegmentsOnCluster(pieces, compute)
    ends = list(starts[1:]) + [task.n_draws]
    for s, (first, last) in enumerate(zip(starts, ends)):
        done = 0
        if progress.pass_lists:
            sample = ordered_segment(segments.parts(s), int(first), int(last - first))
            done = loop.run(*sample.as_tuple(), max_cost=task.remake_cost * (n_candidates + 1))
            progress.pass_lists = done == sample.rows.shape[0]
        if done < last - first:
            loop.rebase()
            sample = ordered_segment(segments.parts(s, loop.centers(), n_candidates), int(first), int(last - first))
            loop.run(*(values[done:] for values in sample.as_tuple()))
            progress.remade += 1
        del sample
    return progress


@dataclass(frozen=True)
class EpochSampler:
    """Where the pools of an epoch's sample are read and where the inner loop runs.

    Attributes
    ----------
    array : dask.array.Array (n, d)
        The data (the driver's copy with ``driver``).
    client : distributed.Client or None
    on_worker : bool
        The inner loop runs on one worker and each pool stays on the workers that read it (streamed a segment at a
        time), else the pools come to the driver.
    n_candidates : int
        Candidate centers listed per draw (0 for the batched loop).
    driver : DriverCopy, optional
        The data in the driver's memory: the pools are read there, by its threads.
    """

    array: Any
    client: Any
    on_worker: bool
    n_candidates: int
    driver: Any = None

    def segment_rows(self, n_draws: int) -> int:
        """Draws per segment of a pool: a worker streams it in segments, the driver takes it whole."""
        return segment_rows_for(n_draws, self.array) if self.on_worker else max(1, n_draws)

    def epoch_pass(self, centers, draws, weights):
        """The epoch's pass: the statistics of every row against ``centers`` and the first pool, at ``draws``.

        Returns
        -------
        stats : ClusterStats
        first : list
            ``[pieces, starts]`` of the first pool, for :func:`epoch_inner_loop` (which empties it, so the pool is
            released once used): ``pieces[s][b]`` on the workers that computed them (``on_worker``), else here
            (values), and the first draw of each segment.
        """
        rows = self.segment_rows(draws.size)
        starts = segment_starts(draws.size, rows)
        if self.driver is not None:
            raw, pieces = epoch_pass_on_driver(
                self.driver, centers, draws, segment_rows=rows, n_candidates=self.n_candidates
            )
            return finish_stats(raw), [pieces, starts]
        stats_graph, segments = epoch_pass_graph(
            self.array, centers, draws, weights=weights, segment_rows=rows, n_candidates=self.n_candidates
        )
        flat = [piece for segment in segments for piece in segment]
        if self.on_worker:
            persisted = persist_now(stats_graph, *flat, client=self.client)
            (raw,) = compute_now(persisted[0], client=self.client)
            flat = persisted[1:]
        else:
            # one round trip brings the statistics and the sample
            raw, *flat = compute_now(stats_graph, *flat, client=self.client)
        return finish_stats(raw), [_by_segment(flat, len(segments)), starts]

    def pool(self, centers, draws):
        """A later pool of the epoch: the rows at ``draws`` labelled against ``centers`` (the pass's).

        Returns
        -------
        pieces : list of list
        starts : int array
        """
        rows = self.segment_rows(draws.size)
        starts = segment_starts(draws.size, rows)
        if self.driver is not None:
            segments = pool_pass_on_driver(
                self.driver, centers, draws, segment_rows=rows, n_candidates=self.n_candidates
            )
            return segments, starts
        segments = pool_pass_graph(self.array, centers, draws, segment_rows=rows, n_candidates=self.n_candidates)
        flat = [piece for segment in segments for piece in segment]
        if self.on_worker:
            flat = _read_on_cluster(flat, self.client)
        else:
            flat = list(compute_now(*flat, client=self.client))
        return _by_segment(flat, len(segments)), starts

    def run(self, pieces, task, progress):
        """The inner loop over one pool, continuing ``progress``: ``(progress, where it ran)``."""
        if not self.on_worker:
            return run_segments(pieces, None, task, progress), "driver"
        # the pool stays on the workers that read it; one of them streams it in
        keys = [[piece.key for piece in segment] for segment in pieces]
        return run_pinned(
            self.client, run_segments, keys, task, progress, key=f"daskmeans-vrkm-inner-loop-{uuid.uuid4().hex}"
        )


def _by_segment(flat, n_segments):
    """``flat`` (segment after segment, a piece per block) as a list of pieces per segment."""
    per = len(flat) // max(1, n_segments)
    return [list(flat[s * per : (s + 1) * per]) for s in range(n_segments)]


def _read_on_cluster(flat, client):
    """Submit the pieces of a pool and wait until they are all on the workers (the pass then ends for a progress
    watch): their futures."""
    from distributed import as_completed

    futures = submit_now(*flat, client=client)
    wait_for_futures(futures)  # BudgetSpent when the budget ends first
    for _ in as_completed(futures, loop=client.loop):  # their results stay on the workers
        pass
    watch = active_watch()
    if watch is not None:
        watch.finished()
    return futures


def epoch_inner_loop(sampler, draws, pools, first, task, clock, read_seconds=0.0):
    """Run an epoch's inner loop over its pools in draw order, within the fit's ``max_time``.

    Parameters
    ----------
    sampler : EpochSampler
    draws : int array (T,)
        The epoch's draws.
    pools : list of (int, int)
        :func:`epoch_pools` of the draws.
    first : list
        ``[pieces, starts]`` of the first pool, from :meth:`EpochSampler.epoch_pass`; emptied here.
    task : InnerLoopTask
        Its ``starts`` and ``n_draws`` are set per pool.
    clock : Clock
        A further pool is read only if a read as long as the last one and its steps, at the last pool's seconds
        per draw, end within ``max_time``; a read under way when the budget ends is cut short. The loop then ends
        after the pools it ran.
    read_seconds : float
        Seconds of the epoch's pass, which read the first pool: the forecast of the second pool's read (each pool
        reads the blocks its draws fall in, nearly all of them).

    Returns
    -------
    progress : LoopProgress
    where : str
        Where the loop ran (``"driver"`` or the address of the last worker).
    pools_run : int
    """
    progress, where = None, "driver"
    seconds_per_draw = 0.0
    for p, (begin, end) in enumerate(pools):
        if p == 0:
            pieces, starts = first
            first.clear()  # the caller's reference: the pool is released once used
        else:
            if clock.out_of_time(read_seconds + seconds_per_draw * (end - begin)):
                return progress, where, p
            started = time.perf_counter()
            try:
                with budget_until(clock.end()):
                    pieces, starts = sampler.pool(task.pass_centers, draws[begin:end])
            except BudgetSpent:
                return progress, where, p
            read_seconds = time.perf_counter() - started
        started = time.perf_counter()
        progress, where = sampler.run(pieces, replace(task, starts=starts, n_draws=end - begin), progress)
        seconds_per_draw = (time.perf_counter() - started) / max(1, end - begin)
        del pieces
    return progress, where, len(pools)
