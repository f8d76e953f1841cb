"""The exact nearest center of every row, by GEMM scores settled with exact distances where they cannot decide.

Every assignment here is the *exact* nearest center: the smallest squared distance computed in float64
(:func:`daskmeans.kernels.distance.pair_dist2`, one fixed summation order), ties to the lowest center index.
GEMM scores in the data's precision only propose the winner: they come with an error bound proven from the float
format (:func:`daskmeans.kernels.score_error.score_error_allowance`), and rows whose two best scores are within it
are settled by exact distances. The same function returns lower bounds per group of centers
(:mod:`daskmeans.kernels.nested_groups`) for the kernels that revisit rows after the centers move
(:mod:`daskmeans.kernels.revisit`).
"""

from __future__ import annotations

import numpy as np

from .. import config
from .group_scan import scan_groups
from .one_group_assign import RowTiles, _assign_one_group, panels_pay
from .packed_bounds import LOWER_DTYPE
from .panel_scan import PANEL_ROWS, best_of_groups_by_panels, padded
from .score_error import _gamma, row_sq_norms, score_error_allowance
from .settle_scores import _finish_best_of_groups, _finish_slab
from .stats import _cluster_stats, cluster_stats

# -- full assignment (new samples, and revisited samples whose bounds fail widely) --------------------------


def _best_by_slot_blocks(tile, slots, padding_columns, n_groups, buffer, scratch):
    """The scores' summary that :func:`_finish_best_of_groups` takes, for every row of ``tile @ slots``, computed
    one block of ``buffer.shape[1]`` columns (whole slots) at a time: the same values as over the whole row
    (first column on ties).

    Returns
    -------
    best_col, best, group_min, own_second, other_second
    """
    n_rows = tile.shape[0]
    rows = np.arange(n_rows)
    best = np.full(n_rows, np.inf, dtype=slots.dtype)
    best_col = np.zeros(n_rows, dtype=np.int64)
    if n_groups == 1:
        second = np.full(n_rows, np.inf, dtype=slots.dtype)
    else:
        group_min = np.full((n_rows, n_groups), np.inf, dtype=slots.dtype)
        group_second = np.full((n_rows, n_groups), np.inf, dtype=slots.dtype)
        larger = scratch[:n_rows]
    columns = slots.shape[1]
    for c0 in range(0, columns, buffer.shape[1]):
        c1 = min(columns, c0 + buffer.shape[1])
        scores = buffer[:n_rows, : c1 - c0]
        np.matmul(tile, slots[:, c0:c1], out=scores)
        scores[:, padding_columns[(padding_columns >= c0) & (padding_columns < c1)] - c0] = np.inf
        block_col = scores.argmin(axis=1)
        block_best = scores[rows, block_col]
        better = block_best < best
        if n_groups == 1:
            block_second = _second_smallest(scores, rows, block_col)
            second = np.where(better, np.minimum(best, block_second), np.minimum(second, block_best))
        else:
            for t0 in range(0, c1 - c0, n_groups):  # one slot: one center of every group
                slot_scores = scores[:, t0 : t0 + n_groups]
                np.maximum(group_min, slot_scores, out=larger)
                np.minimum(group_second, larger, out=group_second)
                np.minimum(group_min, slot_scores, out=group_min)
        best_col = np.where(better, block_col + c0, best_col)
        best = np.where(better, block_best, best)
    if n_groups == 1:
        return best_col, best, best[:, None], second, np.full(n_rows, np.inf, dtype=slots.dtype)
    best_group = best_col % n_groups
    return best_col, best, group_min, group_second[rows, best_group], _second_smallest(group_min, rows, best_group)


def _second_smallest(values, rows, best):
    """Smallest of each row of ``values`` but its entry ``best[row]`` (vectorized: ``values`` is restored)."""
    kept = values[rows, best]
    values[rows, best] = np.inf
    second = values.min(axis=1)
    values[rows, best] = kept
    return second


def score_rows(n_rows, columns, itemsize, slab_bytes=None, tile_bytes=None, min_rows=None):
    """Rows per GEMM tile of scores: about ``tile_bytes`` of scores (cache-resident for the reductions after the
    GEMM), at least ``min_rows`` rows (a GEMM of few rows runs far below the BLAS rate at large ``k``), never more
    than ``slab_bytes`` of scores (the memory bound) nor than ``n_rows``; at least one row. Each None is its setting
    (:data:`~daskmeans.config.ASSIGN_SLAB_BYTES`, :data:`~daskmeans.config.ASSIGN_TILE_BYTES`,
    :data:`~daskmeans.config.ASSIGN_MIN_TILE_ROWS`), read at call time."""
    slab_bytes = config.ASSIGN_SLAB_BYTES if slab_bytes is None else slab_bytes
    tile_bytes = config.ASSIGN_TILE_BYTES if tile_bytes is None else tile_bytes
    min_rows = config.ASSIGN_MIN_TILE_ROWS if min_rows is None else min_rows
    row_bytes = max(1, columns * itemsize)
    cap = max(1, int(slab_bytes) // row_bytes)
    return max(1, min(n_rows, cap, max(int(tile_bytes) // row_bytes, int(min_rows))))


def assign_with_bounds(
    X, centers, groups, slab_bytes=None, with_bounds=True, column_blocks=True, stats=None, weights=None, out=None
):
    """Exact nearest center of every row, and fresh group lower bounds.

    The scores ``||c||^2 - 2 x.c`` come from one GEMM per tile of rows against the centers laid out slot by
    slot (slot ``t`` of every group side by side), with the scores center by center (``-2 C X_tile^T``); one Numba
    pass per tile adds the centers' norms (one more rounding, covered by the proven error of
    :func:`score_error_allowance`) and finds each row's best score, its column, the minimum of every group and the
    second best in and outside the best group, vectorized over the rows
    (:func:`daskmeans.kernels.group_scan.scan_groups`). Labels and winners' distances are exact whatever the scores'
    rounding. Padding slots (groups of unequal sizes) score ``inf``. After the scan each row is read once more,
    for its norm, its winner's exact distance and (with ``stats``) its cluster's sums, while the tile is in cache.
    With one group (the plain nearest center, or one bound per row) a similar pass finds the best two scores
    (:func:`_assign_one_group`). In float32 with at most ``PANEL_MAX_FEATURES`` features the GEMM and the scan are
    one loop and the scores are never stored (:mod:`daskmeans.kernels.panel_scan`,
    :func:`_assign_groups_by_panels`). With very many centers, blocks of centers are scored at a time
    (``column_blocks``, where the norms are folded into the GEMM as one more coordinate).

    Parameters
    ----------
    X : ndarray (n, d)
        float32 or float64, or integers kept as stored (uint8 descriptors): those are computed exactly in the
        centers' dtype, converted a tile at a time just before its GEMM
        (:class:`~daskmeans.kernels.one_group_assign.RowTiles`) when they are C-ordered and not scored by column
        blocks, else a slab of ``slab_bytes`` at a time into one buffer (:func:`_assign_stored_rows`).
    centers : ndarray (k, d)
        The rows' dtype when they are floating.
    groups : CenterGroups
    slab_bytes : int, optional
        Most bytes of scores held at once (at least one row); tiles are smaller (:func:`score_rows`). None:
        :data:`~daskmeans.config.ASSIGN_SLAB_BYTES`, read at call time.
    with_bounds : bool
        False skips the bounds (``lower`` is then ``(n, 0)``).
    column_blocks : bool
        With at least ``4 * ASSIGN_COLUMN_BLOCK`` slots of centers (and no more groups than ``ASSIGN_COLUMN_BLOCK``),
        score them a block of slots at a time (:func:`_assign_by_column_blocks`); False scores all the slots of a
        tile of rows at once.
    stats : tuple (sums, counts, sse), optional
        float64 accumulators ``(k, d)``, ``(k,)``, ``(k,)`` that every row is added to, in row order: the same
        numbers as :func:`daskmeans.kernels.stats.cluster_stats` on the result (modified in place).
    weights : ndarray (n,), optional
        Sample weights of the rows, for ``stats``.
    out : tuple of ndarray, optional
        ``(labels, dist2, lower)`` to fill and return instead of new arrays (contiguous, of the results' shapes and
        dtypes; e.g. slices of a larger state's arrays).

    Returns
    -------
    labels : int32 (n,)
    dist2 : float64 (n,)
        Exact squared distance to the assigned center.
    lower : uint16 (n, n_groups)
        Lower bound on the distance to every center of each group other than the assigned one (``inf`` for a
        group holding only the assigned center), rounded down into 16 bits (:mod:`daskmeans.kernels.packed_bounds`).
    rechecked : int
        Rows whose GEMM scores were too close to call and were settled by exact distances.
    """
    X = np.asarray(X)
    n, d = X.shape
    n_groups = groups.n_groups
    slab_bytes = config.ASSIGN_SLAB_BYTES if slab_bytes is None else slab_bytes
    if out is None:
        out = (
            np.empty(n, dtype=np.int32),
            np.empty(n, dtype=np.float64),
            np.empty((n, n_groups if with_bounds else 0), dtype=LOWER_DTYPE),
        )
    labels, dist2, lower = out
    if lower.dtype != LOWER_DTYPE:
        raise TypeError(f"bounds are stored as {LOWER_DTYPE} (daskmeans.kernels.packed_bounds), not {lower.dtype}")
    if n == 0:
        return labels, dist2, lower, 0
    columns = groups.slot_center.shape[0]
    column_block = config.ASSIGN_COLUMN_BLOCK
    by_column_blocks = column_blocks and n_groups <= column_block and columns >= 4 * column_block
    if X.dtype.kind == "f":
        X = np.ascontiguousarray(X)
        dtype = X.dtype
    elif by_column_blocks or not X.flags.c_contiguous:
        return _assign_stored_rows(X, centers, groups, slab_bytes, with_bounds, column_blocks, stats, weights, out)
    else:
        # each tile of rows is converted as it is scored (_assign_tiles, _assign_one_group)
        dtype = stored_rows_dtype(centers)
    centers = np.ascontiguousarray(centers, dtype=dtype)
    slot_center = groups.slot_center
    padding = slot_center < 0
    slot_sq = np.where(padding, np.inf, row_sq_norms(centers)[np.maximum(slot_center, 0)])
    # (d + 1, columns): -2 c (exact in floating point) over the norm; padding slots are all zeros, and their scores
    # are set to inf after each GEMM (an inf inside the GEMM raises a spurious 'invalid value' from BLAS kernels
    # that multiply it by the zeros they pad a tile with)
    slots = np.empty((d + 1, columns), dtype=dtype)
    step = max(1, slab_bytes // max(1, d * dtype.itemsize))  # a slab of centers at a time: no k x d temporaries
    for c0 in range(0, columns, step):
        part = centers[np.maximum(slot_center[c0 : c0 + step], 0)]
        part *= -2
        part[padding[c0 : c0 + step]] = 0
        slots[:d, c0 : c0 + step] = part.T
    slots[d] = np.where(padding, 0, slot_sq)
    if by_column_blocks:
        x_sq = row_sq_norms(X)
        allowance = score_error_allowance(x_sq, slot_norms(centers, slot_center, n_groups)[2], d, X.dtype)
        rechecked = _assign_by_column_blocks(
            X, centers, groups, slots, x_sq, allowance, slab_bytes, labels, dist2, lower
        )
        if stats is not None:
            cluster_stats(X, labels, dist2, centers.shape[0], weights, out=stats)
        return labels, dist2, lower, rechecked
    rechecked = _assign_tiles(
        X,
        centers,
        slots,
        slot_center,
        n_groups,
        np.empty(n),
        np.empty(n),
        slab_bytes,
        labels,
        dist2,
        lower,
        norms_here=True,
        stats=stats,
        weights=weights,
    )
    return labels, dist2, lower, rechecked


def _assign_stored_rows(X, centers, groups, slab_bytes, with_bounds, column_blocks, stats, weights, out):
    """:func:`assign_with_bounds` of integer rows it cannot convert a tile at a time (scored by column blocks, or
    not C-ordered), converted into the centers' floating dtype (exactly: up to 16-bit integers in float32) a slab of
    ``slab_bytes`` at a time, into one buffer.

    Converting a whole block at once instead makes a temporary of the block's size in float32 (61 MB for 120,000
    SIFT descriptors), above glibc's ``mmap`` threshold in Dask's workers: fresh pages on every pass, each a page
    fault, which costs most on a virtual machine that hands freed memory back to its host. Each row's results are
    those of converting the whole block (rows are independent; the statistics are added in row order either
    way)."""
    dtype = stored_rows_dtype(centers)
    n, d = X.shape
    labels, dist2, lower = out
    step = max(1, int(slab_bytes) // max(1, d * dtype.itemsize))
    buffer = np.empty((min(n, step), d), dtype=dtype)
    rechecked = 0
    for start in range(0, n, step):
        stop = min(n, start + step)
        rows = buffer[: stop - start]
        rows[...] = X[start:stop]
        rechecked += assign_with_bounds(
            rows,
            centers,
            groups,
            slab_bytes,
            with_bounds,
            column_blocks,
            stats,
            None if weights is None else weights[start:stop],
            out=(labels[start:stop], dist2[start:stop], lower[start:stop]),
        )[3]
    return labels, dist2, lower, rechecked


def stored_rows_dtype(centers) -> np.dtype:
    """The floating dtype integer rows are computed in against ``centers``: the centers' own, else float64."""
    dtype = np.asarray(centers).dtype
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def slot_norms(centers, slot_center, n_groups):
    """The norm of each slot's center (0 for padding), the largest in each group and the largest of all, in float64:
    the centers' share of each score's proven error."""
    padding = slot_center < 0
    column_norm = np.sqrt(np.where(padding, 0.0, row_sq_norms(centers)[np.maximum(slot_center, 0)]))
    group_norm = column_norm.reshape(-1, n_groups).max(axis=0)
    return column_norm, group_norm, float(column_norm.max())


def _assign_tiles(
    X,
    centers,
    slots,
    slot_center,
    n_groups,
    x_sq,
    allowance,
    slab_bytes,
    labels,
    dist2,
    lower,
    norms_here=False,
    stats=None,
    weights=None,
    panels=True,
):
    """The body of :func:`assign_with_bounds`: each tile of rows scored against all the slots at once; fills
    ``labels``, ``dist2`` and ``lower`` and returns the rows settled by exact distances.

    ``norms_here``: ``x_sq`` and ``allowance`` are filled row by row as the rows are settled, else they are given.
    ``stats`` and ``weights``: as :func:`assign_with_bounds`. ``panels``: groups in float32 of at most
    ``PANEL_MAX_FEATURES`` features are scored without storing the scores (:func:`_assign_groups_by_panels`)."""
    n, d = X.shape
    sums, counts, sse = stats if stats is not None else (np.empty((0, d)), np.empty(0), np.empty(0))
    weights = np.empty(0) if weights is None else np.asarray(weights, dtype=np.float64)
    if n_groups == 1:
        return _assign_one_group(
            X,
            centers,
            slots,
            slot_center,
            x_sq,
            slab_bytes,
            labels,
            dist2,
            lower,
            norms_here,
            weights,
            sums,
            counts,
            sse,
        )
    dtype = slots.dtype
    if panels and dtype == np.float32 and panels_pay(d):
        return _assign_groups_by_panels(
            X,
            centers,
            slots,
            slot_center,
            n_groups,
            x_sq,
            allowance,
            slab_bytes,
            labels,
            dist2,
            lower,
            weights,
            sums,
            counts,
            sse,
        )
    gamma = _gamma(d, dtype)
    column_norm, group_norm, center_norm = slot_norms(centers, slot_center, n_groups)
    columns = slots.shape[1]
    # scores laid out center by center (rows innermost, for the vectorized scan); the squared norms are added by
    # the scan, inf for padding slots (whose zero centers score 0 in the GEMM)
    scaled_centers = np.ascontiguousarray(slots[:d].T)
    column_add = np.where(slot_center < 0, np.inf, slots[d]).astype(dtype)
    row_step = score_rows(n, columns, dtype.itemsize, slab_bytes)
    buffer = np.empty(columns * row_step, dtype=dtype)
    best = np.empty(row_step, dtype=dtype)
    other_second = np.empty(row_step, dtype=dtype)
    best_col = np.empty(row_step, dtype=np.int32)
    best_group = np.empty(row_step, dtype=np.int32)
    own_second = np.empty(row_step, dtype=dtype)
    group_min = np.empty(n_groups * row_step, dtype=dtype)
    group_second = np.empty(n_groups * row_step, dtype=dtype)
    tiles = RowTiles(X, row_step, dtype)
    rechecked = 0
    for r0 in range(0, n, row_step):
        r1 = min(n, r0 + row_step)
        rows = tiles.rows(r0, r1)
        scores_t = buffer[: columns * (r1 - r0)].reshape(columns, r1 - r0)
        np.matmul(scaled_centers, rows.T, out=scores_t)
        tile_min = group_min[: n_groups * (r1 - r0)].reshape(n_groups, r1 - r0)
        scan_groups(
            scores_t,
            column_add,
            n_groups,
            best,
            best_col,
            best_group,
            tile_min,
            group_second[: n_groups * (r1 - r0)].reshape(n_groups, r1 - r0),
            own_second,
            other_second,
        )
        rechecked += _finish_slab(
            rows,
            centers,
            scores_t,
            best_col,
            tile_min.T.copy(),
            own_second,
            other_second,
            slot_center,
            n_groups,
            x_sq[r0:r1],
            allowance[r0:r1],
            labels[r0:r1],
            dist2[r0:r1],
            lower[r0:r1],
            norms_here,
            gamma,
            center_norm,
            column_norm,
            group_norm,
            weights[r0:r1] if weights.shape[0] else weights,
            sums,
            counts,
            sse,
        )
    return rechecked


def _assign_groups_by_panels(
    X,
    centers,
    slots,
    slot_center,
    n_groups,
    x_sq,
    allowance,
    slab_bytes,
    labels,
    dist2,
    lower,
    weights,
    sums,
    counts,
    sse,
):
    """:func:`_assign_tiles` for groups, a tile of ``PANEL_TILE_BYTES`` of rows at a time: the summary of every
    row's scores without storing them (:func:`~daskmeans.kernels.panel_scan.best_of_groups_by_panels`), the rows it
    decides settled at once (:func:`_finish_best_of_groups`), the near ties by the GEMM tiles (all their scores),
    then every row added to its cluster's sums in row order (the sums :func:`_finish_slab` adds as it goes)."""
    n, d = X.shape
    gamma = _gamma(d, np.float32)
    column_norm, group_norm, center_norm = slot_norms(centers, slot_center, n_groups)
    scaled, column_add, _, _ = padded(slots[:d].T, np.where(slot_center < 0, np.inf, slots[d]))
    tile = min(n, max(PANEL_ROWS, config.PANEL_TILE_BYTES // (d * X.itemsize)))
    best, own_second, other_second = (np.empty(tile, dtype=np.float32) for _ in range(3))
    best_col, near_ties = np.empty(tile, dtype=np.int32), np.empty(tile, dtype=np.int64)
    group_min = np.empty((tile, n_groups), dtype=np.float32)
    rechecked = 0
    for r0 in range(0, n, tile):
        r1 = min(n, r0 + tile)
        rows = X[r0:r1]
        best_of_groups_by_panels(
            rows,
            scaled,
            column_add,
            n_groups,
            center_norm,
            gamma,
            x_sq[r0:r1],
            allowance[r0:r1],
            best,
            best_col,
            group_min,
            own_second,
            other_second,
        )
        n_ties = _finish_best_of_groups(
            rows,
            centers,
            best_col[: r1 - r0],
            best,
            group_min,
            own_second,
            other_second,
            slot_center,
            n_groups,
            x_sq[r0:r1],
            allowance[r0:r1],
            gamma,
            column_norm,
            group_norm,
            labels[r0:r1],
            dist2[r0:r1],
            lower[r0:r1],
            near_ties,
        )
        if n_ties:
            at = r0 + near_ties[:n_ties]
            out = (
                np.empty(n_ties, dtype=labels.dtype),
                np.empty(n_ties),
                np.empty((n_ties, lower.shape[1]), dtype=lower.dtype),
            )
            rechecked += _assign_tiles(
                np.ascontiguousarray(X[at]),
                centers,
                slots,
                slot_center,
                n_groups,
                x_sq[at],
                allowance[at],
                slab_bytes,
                *out,
                panels=False,
            )
            labels[at], dist2[at], lower[at] = out
        if sums.shape[0] > 0:
            _cluster_stats(
                rows,
                labels[r0:r1],
                dist2[r0:r1],
                weights[r0:r1] if weights.shape[0] else weights,
                weights.shape[0] > 0,
                sums,
                counts,
                sse,
            )
    return rechecked


def _assign_by_column_blocks(X, centers, groups, slots, x_sq, allowance, slab_bytes, labels, dist2, lower):
    """:func:`assign_with_bounds` for many centers: tiles of rows against blocks of about ``ASSIGN_COLUMN_BLOCK``
    centers (whole slots) at a time, keeping each row's best score, its group minima and second best scores.

    At large k a tile of all the centers' scores holds only a few rows within the tile size, and a GEMM of few
    rows runs far below the BLAS rate (at k = 16,384, 64 rows run well below the rate of 1,024 rows); blocks of
    centers keep both the rows per GEMM and the scores held at once in bounds. The rare rows whose two best scores
    cannot decide are settled from all their scores (:func:`_assign_tiles` on those rows alone). Labels, the
    winners' distances and the bounds are those of :func:`_assign_tiles`.
    """
    n, d = X.shape
    n_groups = groups.n_groups
    block = max(1, config.ASSIGN_COLUMN_BLOCK // n_groups) * n_groups
    row_step = score_rows(n, block, X.dtype.itemsize, slab_bytes, tile_bytes=config.ASSIGN_BLOCKED_TILE_BYTES)
    buffer = np.empty((row_step, block), dtype=X.dtype)
    scratch = np.empty((row_step, n_groups), dtype=X.dtype)
    augmented = np.ones((row_step, d + 1), dtype=X.dtype)
    near_ties = np.empty(row_step, dtype=np.int64)
    padding_columns = np.flatnonzero(groups.slot_center < 0)
    gamma = _gamma(d, X.dtype)
    column_norm, group_norm, _ = slot_norms(centers, groups.slot_center, n_groups)
    tied = []
    for r0 in range(0, n, row_step):
        r1 = min(n, r0 + row_step)
        tile = augmented[: r1 - r0]
        tile[:, :d] = X[r0:r1]
        summary = _best_by_slot_blocks(tile, slots, padding_columns, n_groups, buffer, scratch)
        n_ties = _finish_best_of_groups(
            X[r0:r1],
            centers,
            *summary,
            groups.slot_center,
            n_groups,
            x_sq[r0:r1],
            allowance[r0:r1],
            gamma,
            column_norm,
            group_norm,
            labels[r0:r1],
            dist2[r0:r1],
            lower[r0:r1],
            near_ties,
        )
        tied.append(r0 + near_ties[:n_ties])
    del buffer, scratch, augmented
    tied = np.concatenate(tied)
    if tied.shape[0] == 0:
        return 0
    tie_labels = np.empty(tied.shape[0], dtype=labels.dtype)
    tie_dist2 = np.empty(tied.shape[0], dtype=dist2.dtype)
    tie_lower = np.empty((tied.shape[0], lower.shape[1]), dtype=lower.dtype)
    rechecked = _assign_tiles(
        X[tied],
        centers,
        slots,
        groups.slot_center,
        n_groups,
        x_sq[tied],
        allowance[tied],
        slab_bytes,
        tie_labels,
        tie_dist2,
        tie_lower,
    )
    labels[tied], dist2[tied], lower[tied] = tie_labels, tie_dist2, tie_lower
    return rechecked
