"""Nested mini-batch k-means, nmbatch (Newling & Fleuret, NIPS 2016), on the workers' state blocks.

Each iteration revisits the whole active batch with distance bounds, adds the new rows of a growth with a
full first assignment, and updates the centers from the running per-cluster sums S, counts v and SSE, in
which every active sample counts exactly once (its old contribution is removed before the new one is added).
The batch doubles (up to n) when the ``q``-quantile over clusters of ``sigma_C(j) / p(j)`` exceeds ``rho``, with
``sigma_C(j) = sqrt(sse(j) / (v(j) (v(j) - 1)))`` and ``p(j)`` the distance center j moved last. ``q = 0`` is the
paper's rule (the minimum: every cluster must have settled); the default ``q = 0.5`` is the rule of the authors'
reference code (eakmeans doubles when the *median* ratio exceeds a threshold), with ``rho = 2``: double once half
the centers move less than half their own standard error. With the minimum, one sample changing cluster moves a
center by about ``sigma_C(j) / sqrt(v(j))``, so on data with many clusters the batch doubles only when an
iteration changes (almost) nothing, which spends most of the time polishing small batches.
"""

from __future__ import annotations

import os

import numpy as np

from ..config import BOUNDS_MEMORY_FRACTION
from ..engine.driver import driver_rows as rows_on_driver, driver_work
from ..kernels.nested_groups import CenterGroups, choose_bounds, make_groups
from ..kernels.packed_bounds import LOWER_BYTES
from ..passes.nested_reread import RereadBatch
from ..passes.nested_state import NestedBatch
from .lloyd import SHIFT_SAFETY, center_displacement
from .relocation import centers_from_sums
from .result import FitResult, RunContext


#: ``NestedMiniBatchKMeans(batch_rows=...)``: keep the active batch's rows on the workers, re-read them from the
#: store every iteration, or choose by memory.
BATCH_ROWS = ("auto", "cached", "reread")


def state_bytes_per_row(n_features: int, n_groups: int, itemsize: int, cached: bool) -> int:
    """Bytes nmbatch keeps per active row, counted twice (the state blocks before and after an iteration).

    Cached: the row as computed, its index, label, distance, weight and group bounds
    (``d * itemsize + 28 + 2 * groups``). Re-read: its label, distance and group bounds (``12 + 2 * groups``):
    bounds are kept in 16 bits (:mod:`daskmeans.kernels.packed_bounds`).
    """
    per_row = 4 + 8 + LOWER_BYTES * n_groups + ((n_features * itemsize + 8 + 8) if cached else 0)
    return 2 * per_row


def choose_batch_rows(batch_rows, bounds, n_samples, n_features, n_clusters, itemsize, memory_bytes):
    """How nmbatch keeps its batch, and its bounds: ``(batch_rows, bounds)``, both resolved.

    The batch may grow to all ``n_samples`` rows, so ``"auto"`` caches the rows when the state of all of them
    (:func:`state_bytes_per_row`) takes at most ``BOUNDS_MEMORY_FRACTION`` of ``memory_bytes`` (the cluster's
    memory), and re-reads them otherwise. Re-reading with ``bounds="auto"`` keeps the groups that
    :func:`~daskmeans.kernels.nested_groups.choose_bounds` picks while their state fits that share, else
    Hamerly's single bound (``4 + 8 + 4`` bytes a row).
    """
    limit = BOUNDS_MEMORY_FRACTION * memory_bytes
    scheme, n_groups = choose_bounds(bounds, n_clusters, n_features * itemsize)
    if batch_rows == "auto":
        cached = n_samples * state_bytes_per_row(n_features, n_groups, itemsize, cached=True) <= limit
        batch_rows = "cached" if cached else "reread"
    if batch_rows == "reread" and bounds == "auto" and scheme not in ("none", "hamerly") and \
            n_samples * state_bytes_per_row(n_features, n_groups, itemsize, cached=False) > limit:
        return batch_rows, "hamerly"
    return batch_rows, scheme


def default_initial_batch_size(n_clusters: int) -> int:
    """``max(5000, 80 k)``: about eighty samples per cluster to start with.

    With fewer samples per cluster the first iterations spend their time on centers that a few samples drag far:
    at k = 1000 a first batch of 80 samples per cluster reached a given energy sooner than one of 10, 20 or 40,
    and one of 160 did no better. At smaller k the larger first batch can cost a little; pass
    ``initial_batch_size`` to keep a smaller one.
    """
    return max(5000, 80 * int(n_clusters))


def doubling_ratio(sse, counts, displacement, quantile=0.0, members=None):
    """The ``quantile`` of ``sigma_C(j) / p(j)`` over the clusters with at least two samples.

    ``sigma_C(j) = sqrt(sse(j) / (v(j) (v(j) - 1)))`` estimates how far the center would move if the batch
    doubled (sec. 3.2 of the paper); ``p(j)`` is how far it just moved. A cluster that did not move counts as
    ``inf`` (it never holds the batch back); clusters with fewer than two samples do not vote. ``quantile=0``
    is the paper's minimum; otherwise the ratio of rank ``floor(quantile * m)`` among the ``m`` voters in
    ascending order (0.5: the median, as in the reference code). With sample weights, ``counts`` are the
    clusters' weights and ``members`` their numbers of samples: ``sigma_C(j) = sqrt(sse(j) / (v(j) (n_j - 1)))``,
    the weighted mean squared distance over ``n_j - 1`` (the same value with unit weights).
    """
    counts = np.asarray(counts, dtype=np.float64)
    members = counts if members is None else np.asarray(members, dtype=np.float64)
    displacement = np.asarray(displacement, dtype=np.float64)
    voters = (members >= 2) & (counts > 0)
    if not voters.any():
        return np.inf
    sigma = np.sqrt(np.maximum(np.asarray(sse, dtype=np.float64)[voters], 0.0)
                    / (counts[voters] * (members[voters] - 1)))
    moved = displacement[voters]
    ratios = np.full(sigma.shape, np.inf)
    np.divide(sigma, moved, out=ratios, where=moved > 0)
    rank = min(int(quantile * ratios.size), ratios.size - 1)
    return float(np.partition(ratios, rank)[rank])


def nested_minibatch(array, centers, context=None, *, seed, initial_batch_size=None, rho=2.0, doubling_quantile=0.5,
                     bounds="auto", max_iter=1000, tol=0.0, max_blocks=None, min_block_rows=None, keep_batch=False,
                     batch_rows="cached", driver_rows=0):
    """Run nmbatch from ``centers``.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    centers : ndarray (k, d)
    context : RunContext, optional
        With sample weights (chunked like ``array``), S, v and SSE are weighted sums, the centers weighted means.
        The callback gets each history record plus (under keys starting with ``_``, not stored in the history)
        the new centers, the :class:`NestedBatch` and the running S, v and SSE. A checkpoint saves the state
        blocks of the batch too, each written and read back by the worker that holds it, so that a resumed run
        continues exactly where it stopped (bounds included) instead of recomputing them: recomputed bounds
        would be tighter, which changes the distance counters, and recomputed distances could differ in the last
        bits, which changes the batch's SSE. Labels, distances and bounds are written every iteration; rows and
        indices only when the batch has grown or split since the last save (a shared checkpoint folder).
    seed : int
        Root seed (fixes the shuffle).
    initial_batch_size : int, optional
        Default :func:`default_initial_batch_size`.
    rho : float
        Doubling threshold.
    doubling_quantile : float in [0, 1]
        Which ratio over clusters is compared with ``rho`` (0: the minimum, as in the paper; 0.5: the median).
    bounds : {"auto", "elkan", "yinyang", "hamerly", "none"}
    max_iter : int
    tol : float
        Absolute tolerance on the sum of squared center moves, checked after iterations that revisit all n
        samples (and add none).
    max_blocks, min_block_rows : int, optional
        State block layout (see :class:`~daskmeans.passes.nested_state.NestedBatch`).
    keep_batch : bool
        Return the :class:`NestedBatch` too (``result.batch``); otherwise it is released.
    batch_rows : {"cached", "reread"}
        Keep the batch's rows on the workers (:class:`~daskmeans.passes.nested_state.NestedBatch`) or re-read
        them from the store at every iteration (:class:`~daskmeans.passes.nested_reread.RereadBatch`: bounded
        memory at any n, one read of the batch's chunks per iteration). The iterates are the same.
    driver_rows : "auto" or int
        Cached batches of at most this many rows are stepped on the driver, without a round trip to the workers
        per iteration (:func:`~daskmeans.passes.nested_driver.driver_rows`; 0: never). The iterates are the same.

    Returns
    -------
    FitResult
        ``stop_reason`` is ``"converged"`` (an iteration over all n samples changed no assignment),
        ``"tol"``, ``"max_iter"`` or ``"max_time"``.
    """
    context = context or RunContext()
    return _nested_minibatch(array, centers, context, seed, initial_batch_size, rho, doubling_quantile, bounds,
                             max_iter, tol, max_blocks, min_block_rows, keep_batch, batch_rows, driver_rows)


def _nested_minibatch(array, centers, context, seed, initial_batch_size, rho, doubling_quantile, bounds, max_iter, tol,
                      max_blocks, min_block_rows, keep_batch, batch_rows, driver_rows):
    clock, client, weights, checkpoint = context.clock, context.client, context.weights, context.checkpoint
    passes = context.passes
    n, d = (int(s) for s in array.shape)
    resume = context.resume
    if resume is not None:
        centers = resume["centers"]
    k = centers.shape[0]
    scheme, n_groups = choose_bounds(bounds, k, d * array.dtype.itemsize)
    if resume is not None:  # the saved state blocks are in the layout and with the bounds of the first run
        scheme, batch_rows = resume.get("bounds", scheme), resume.get("batch_rows", "cached")
    groups = make_groups(centers, scheme, n_groups) if resume is None else CenterGroups(resume["group_of"], scheme)
    layout = {} if min_block_rows is None else {"min_block_rows": min_block_rows}
    if batch_rows == "reread":
        batch = RereadBatch(array, seed, groups, client=client, max_blocks=max_blocks, weights=weights, **layout)
    else:
        row_bytes = state_bytes_per_row(d, groups.n_groups, array.dtype.itemsize, cached=True) // 2
        batch = NestedBatch(array, seed, groups, client=client, max_blocks=max_blocks, weights=weights, **layout,
                            driver_rows=rows_on_driver(driver_rows, k, d, row_bytes, driver_work(client)))
    size = min(n, int(initial_batch_size or default_initial_batch_size(k)))
    sums = np.zeros((k, d))
    counts = np.zeros(k)
    sse = np.zeros(k)
    members = np.zeros(k, dtype=np.int64)
    shift = np.zeros(k)
    history = []
    stop_reason = "max_iter"
    n_iter = 0
    converged = False
    finished = None

    def state(final):
        return {"iteration": n_iter, "centers": centers, "group_of": groups.group_of, "size": size,
                "batch_size": batch.size, "rows_read": batch.rows_read, "sums": sums, "counts": counts, "sse": sse,
                "members": members,
                "shift": shift, "history": history, "passes": passes, "converged": converged, "stop_reason": final,
                "layout_id": batch.layout_id, "batch_rows": batch_rows, "bounds": scheme}

    written_layouts = set()

    def write_blocks(directory):
        """The workers write the blocks: rows and indices only when the batch grew or split since the last save."""
        layout = checkpoint.shared_path(batch.layout_id)
        fresh = batch.layout_id not in written_layouts and (resume is None or batch.layout_id != resume["layout_id"])
        metadata = batch.write_checkpoint(os.path.join(directory, "blocks"), layout if fresh else None)
        written_layouts.add(batch.layout_id)
        return metadata

    if resume is not None:
        n_iter, size, sums, counts, sse, members, shift, history, passes, converged, finished = (
            resume[name] for name in ("iteration", "size", "sums", "counts", "sse", "members", "shift", "history",
                                      "passes", "converged", "stop_reason"))
        history = list(history)
        stop_reason = finished or stop_reason
        if finished is None and resume["batch_size"]:
            layout = resume["layout_id"]
            batch.restore_checkpoint(checkpoint.extra, os.path.join(checkpoint.extra_directory, "blocks"),
                                     checkpoint.shared_path(layout), layout, resume["batch_size"],
                                     resume["rows_read"])
        else:
            batch.size, batch.rows_read = resume["batch_size"], resume["rows_read"]
    elif checkpoint is not None:
        checkpoint.save(state(None))
    for iteration in range(n_iter + 1, max_iter + 1):
        if finished is not None:
            break
        d_sums, d_counts, d_sse, d_members, counters = batch.step(centers, shift * SHIFT_SAFETY, size)
        sums += d_sums
        counts += d_counts
        sse += d_sse
        members += d_members
        new_centers = centers_from_sums(sums, counts, centers, members)
        shift = center_displacement(new_centers, centers)
        ratio = doubling_ratio(sse, counts, shift, doubling_quantile, members)
        batch_inertia = float(sse.sum())
        batch_weight = float(counts.sum()) if weights is not None else batch.size
        record = {
            "iteration": iteration,
            "batch_size": batch.size,
            "new_samples": counters["new"],
            "changed": counters["changed"],
            "distances_computed": counters["computed"],
            "distances_skipped": counters["skipped"],
            "energy": batch_inertia / batch_weight if batch_weight > 0 else 0.0,
            "inertia": batch_inertia,
            "center_shift": float(np.sum(shift**2)),
            "doubling_ratio": ratio if np.isfinite(ratio) else None,
            "bounds": scheme,
            "wall_time": clock.elapsed(),
            "passes": passes + batch.rows_read / n,
        }
        history.append(record)
        if context.callback is not None:
            context.report(record, centers=new_centers, batch=batch, sums=sums.copy(), counts=counts.copy(),
                           sse=sse.copy(), members=members.copy())
        n_iter = iteration
        converged = batch.size == n and counters["new"] == 0 and counters["changed"] == 0
        centers = new_centers
        if converged:
            stop = "converged"
        elif batch.size == n and counters["new"] == 0 and record["center_shift"] <= tol:
            stop = "tol"
        else:
            stop = "max_time" if clock.out_of_time() else None
        if stop is None and ratio > rho and size < n:
            size = min(2 * size, n)
        if checkpoint is not None:
            final = stop or ("max_iter" if iteration == max_iter else None)
            if final:
                checkpoint.save(state(final))
            else:
                checkpoint.save(state(final), extra_writer=write_blocks, keep_shared=[batch.layout_id])
        if stop is not None:
            stop_reason = stop
            break
    total_passes = passes + batch.rows_read / n
    # without convergence the inertia of the final centers is one pass, made by the estimator on demand
    inertia = float(sse.sum()) if converged else None
    if not keep_batch:
        batch.release()
    return FitResult(centers, inertia, n_iter, history, stop_reason, total_passes,
                     batch=batch if keep_batch else None, batch_rows=batch_rows)
