"""Exact nearest center against one group of centers (no group bounds): the plain assignment, and Hamerly's single
bound per row.

Tiles of rows are scored center by center (``-2 C X_tile^T``, one GEMM), and one Numba pass per tile finds every
row's best score and a lower bound on the others, each score less its own center's proven error (vectorized over
the rows), and settles the rows while the tile is in cache: the exact nearest center (near ties by exact
distances), its exact distance, the cluster's float64 sums and the bound. Labels and distances are those of every
other assignment kernel (:mod:`daskmeans.kernels.exact_assign`).

In float32 with at most ``PANEL_MAX_FEATURES`` features the scores need not be written at all: the GEMM and the
scan can be one register-blocked loop (:mod:`daskmeans.kernels.panel_scan`, :func:`_assign_by_panels`). Which of the
two is faster depends on the processor (the panels run ahead of BLAS tiles on some and behind them on others),
so it is measured once per process (:func:`panels_pay`); both give the same results to the last bit.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time

import numba
import numpy as np
from threadpoolctl import threadpool_limits

from .. import config
from ..exceptions import InvalidParameterError
from .distance import pair_dist2
from .packed_bounds import LOWER_DTYPE, store_lower
from .panel_scan import PANEL_ROWS, best_and_lowest_other_by_panels, padded
from .score_error import _gamma, row_sq_norms
from .stats import _cluster_stats, add_to_cluster
from .tile_scan import _best_and_lowest_other, _best_and_second, _lowest_other_where_near


@numba.njit(cache=True, nogil=True)
def _settle_one_group(
    X,
    centers,
    scores_t,
    column_sq,
    slot_center,
    err_sq,
    err_x,
    best,
    best_col,
    best_low,
    other_low,
    x_sq,
    x_norm,
    x_norm_scan,
    labels,
    dist2,
    lower,
    norms_here,
    weights,
    sums,
    counts,
    sse,
):
    """Settle every row of a tile from the raw GEMM products ``scores_t[c, i] = -2 x_i.c`` (center by center, the
    center of column ``c`` being ``slot_center[c]``; ``column_sq[c]`` its squared norm is added here, in the data's
    precision): each row's norm (``norms_here``; else ``x_sq`` is given; ``x_norm`` float64 and ``x_norm_scan`` in
    the data's precision are filled), its best score and a lower bound on the others
    (:func:`~daskmeans.kernels.tile_scan._best_and_lowest_other`; without bounds
    :func:`~daskmeans.kernels.tile_scan._best_and_second`, then
    :func:`~daskmeans.kernels.tile_scan._lowest_other_where_near`), then each row settled while the tile is in cache:
    the exact nearest center (near ties by exact distances, lowest center index among equals), its exact distance,
    its cluster's float64 sums and (``lower`` not ``(n, 0)``) the lower bound on its distance to every other center.

    The score of column ``c`` is within ``err_sq[c] + ||x|| err_x[c] + 1e-12 ||x||^2`` of its exact value
    (:func:`center_errors`): a row is a near tie when some other center's score, less its own error, is not above
    the best score plus the best's error.

    Parameters
    ----------
    X, centers, scores_t, column_sq, slot_center, err_sq, err_x, norms_here, weights : IN
        The tile's rows, the centers, the GEMM products, the layout and error terms described above, the rows'
        weights (empty: 1).
    best, best_col, best_low, other_low, x_norm, x_norm_scan : OUT (rows,)
        Scratch of the scan (each row's summary and norms).
    x_sq : IN-OUT float64 (rows,)
        Read, or written with ``norms_here``.
    labels, dist2 : OUT int32 (rows,), float64 (rows,)
        Exact nearest center, squared distance to it.
    lower : OUT uint16 (rows, 1) or (rows, 0)
        The bound, as stored (:mod:`daskmeans.kernels.packed_bounds`).
    sums, counts, sse : IN-OUT float64 (k, d), (k,), (k,) or empty
        Cluster statistics the rows are added to.
    """
    rows = X.shape[0]
    columns = scores_t.shape[0]
    zero = np.zeros(X.shape[1], dtype=X.dtype)
    for i in range(rows):
        if norms_here:
            x_sq[i] = pair_dist2(X[i], zero)
        x_norm[i] = math.sqrt(x_sq[i])
        x_norm_scan[i] = x_norm[i]
    with_bounds = lower.shape[1] > 0
    if with_bounds:
        _best_and_lowest_other(scores_t, column_sq, err_sq, err_x, x_norm_scan, best, best_col, best_low, other_low)
    else:
        _best_and_second(scores_t, column_sq, best, best_col, best_low)
        _lowest_other_where_near(
            scores_t, column_sq, err_sq, err_x, x_norm, x_norm_scan, x_sq, best, best_col, best_low, other_low
        )
    with_stats = sums.shape[0] > 0
    rechecked = 0
    for i in range(rows):
        col = best_col[i]
        label = slot_center[col]
        row_err = 1e-12 * x_sq[i]
        limit = np.float64(best[i]) + np.float64(err_sq[col]) + x_norm[i] * np.float64(err_x[col]) + row_err
        others = np.float64(other_low[i]) - row_err
        if others <= limit:
            # a near tie: only exact distances decide
            rechecked += 1
            best_exact = np.inf
            label_col = col
            for c in range(columns):
                low = np.float64(scores_t[c, i]) + column_sq[c] - err_sq[c] - x_norm[i] * np.float64(err_x[c]) - row_err
                if low > limit:
                    continue
                j = slot_center[c]
                value = pair_dist2(X[i], centers[j])
                if value < best_exact or (value == best_exact and j < label):
                    best_exact = value
                    label = j
                    label_col = c
            dist2[i] = best_exact
            if label_col != col:
                others = np.inf
                for c in range(columns):
                    if c != label_col:
                        others = min(
                            others,
                            np.float64(scores_t[c, i])
                            + column_sq[c]
                            - err_sq[c]
                            - x_norm[i] * np.float64(err_x[c])
                            - row_err,
                        )
        else:
            dist2[i] = pair_dist2(X[i], centers[label])
        labels[i] = label
        if with_stats:
            add_to_cluster(sums, counts, sse, label, weights[i] if weights.shape[0] > 0 else 1.0, dist2[i], X[i])
        if with_bounds:
            lower[i, 0] = store_lower(math.sqrt(max(others + x_sq[i], 0.0)))
    return rechecked


def center_errors(column_sq, n_features, dtype):
    """Each center's share of the proven error of its score ``||c||^2 - 2 x.c`` for a row ``x``:
    ``err_sq[c] + ||x|| err_x[c]`` (plus ``1e-12 ||x||^2`` for the float64 terms), in the data's precision.

    The per-center form of :func:`daskmeans.kernels.score_error.score_error_allowance` (there with the largest
    center norm for every center): ``2 gamma (||x|| ||c|| + ||c||^2)``, with ``gamma`` for two more terms, which
    covers rounding the score less its error to the data's precision
    (:func:`~daskmeans.kernels.tile_scan._best_and_lowest_other`). One far center (kdd has a center 22 times the
    median norm) then no longer widens every row's near-tie test.
    """
    norm = np.sqrt(np.asarray(column_sq, dtype=np.float64))
    factor = 2.0 * _gamma(n_features + 2, dtype) * 1.0001
    err_sq = (factor + 1e-12) * norm * norm
    err_x = factor * norm
    return err_sq.astype(dtype), err_x.astype(dtype)


class RowTiles:
    """Tiles of rows in the compute dtype: views of ``X`` when it has that dtype, else each tile converted
    (exactly: integers as stored) into one small buffer just before it is scored, so that the GEMM and the settling
    read it from the cache. Converting a larger slab first (8 MiB) left them to read it from memory."""

    def __init__(self, X, tile_rows, dtype):
        self.X = X
        self.buffer = None if X.dtype == dtype else np.empty((min(tile_rows, X.shape[0]), X.shape[1]), dtype=dtype)

    def rows(self, start, stop):
        """Rows ``start:stop`` (at most ``tile_rows``), valid until the next call."""
        if self.buffer is None:
            return self.X[start:stop]
        rows = self.buffer[: stop - start]
        rows[...] = self.X[start:stop]
        return rows


def _assign_one_group(
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
    panels=None,
):
    """:func:`_assign_tiles` for one group of centers (no padding slots): tiles of ``ONE_GROUP_TILE_ROWS`` rows
    (fewer when their scores would pass ``slab_bytes``), each one GEMM of the centers scaled by -2 against the
    tile's rows, laid out center by center, then :func:`_settle_one_group`. Rows of another dtype than the slots'
    (integers as stored) are converted a tile at a time (:class:`RowTiles`). In float32, where the panel scan is the
    faster here (``panels`` None: :func:`panels_pay`), the scores are never written: :func:`_assign_by_panels`."""
    n, d = X.shape
    dtype = slots.dtype
    columns = slots.shape[1]
    scaled_centers = np.ascontiguousarray(slots[:d].T)
    column_sq = np.ascontiguousarray(slots[d])
    err_sq, err_x = center_errors(column_sq, d, dtype)
    if dtype == np.float32 and (panels_pay(d) if panels is None else panels):
        return _assign_by_panels(
            X,
            centers,
            scaled_centers,
            column_sq,
            slot_center,
            err_sq,
            err_x,
            x_sq,
            labels,
            dist2,
            lower,
            weights,
            sums,
            counts,
            sse,
        )
    row_step = max(1, min(n, config.ONE_GROUP_TILE_ROWS, int(slab_bytes) // max(1, columns * dtype.itemsize)))
    buffer = np.empty(columns * row_step, dtype=dtype)
    best, best_low, other_low = (np.empty(row_step, dtype=dtype) for _ in range(3))
    best_col = np.empty(row_step, dtype=np.int32)
    x_norm = np.empty(row_step)
    x_norm_scan = np.empty(row_step, dtype=dtype)
    tiles = RowTiles(X, row_step, dtype)
    rechecked = 0
    for r0 in range(0, n, row_step):
        r1 = min(n, r0 + row_step)
        rows = tiles.rows(r0, r1)
        scores_t = buffer[: columns * (r1 - r0)].reshape(columns, r1 - r0)
        np.matmul(scaled_centers, rows.T, out=scores_t)
        rechecked += _settle_one_group(
            rows,
            centers,
            scores_t,
            column_sq,
            slot_center,
            err_sq,
            err_x,
            best,
            best_col,
            best_low,
            other_low,
            x_sq[r0:r1],
            x_norm,
            x_norm_scan,
            labels[r0:r1],
            dist2[r0:r1],
            lower[r0:r1],
            norms_here,
            weights[r0:r1] if weights.shape[0] else weights,
            sums,
            counts,
            sse,
        )
    return rechecked


@numba.njit(cache=True, nogil=True)
def _settle_clear_rows(
    X, centers, slot_center, err_sq, err_x, best, best_col, other_low, x_sq, labels, dist2, lower, near
):
    """Settle the rows of a tile that are not near ties, from the summary of their float32 scores
    (:func:`~daskmeans.kernels.panel_scan.best_and_lowest_other_by_panels`): the label, the exact distance and
    (``lower`` not ``(n, 0)``) the lower bound on the distance to every other center, as
    :func:`_settle_one_group` settles them. The near ties' positions go to ``near``; their number is returned.

    Parameters
    ----------
    X, centers, slot_center, err_sq, err_x, x_sq : IN
        As :func:`_settle_one_group`.
    best, best_col, other_low : IN (rows,)
        The scan's summary.
    labels, dist2, lower : OUT
        As :func:`_settle_one_group`, for the rows settled here.
    near : OUT int64 (rows,)
        The near ties' positions, first the returned count.
    """
    with_bounds = lower.shape[1] > 0
    n_near = 0
    for i in range(X.shape[0]):
        x_norm = math.sqrt(x_sq[i])
        col = best_col[i]
        row_err = 1e-12 * x_sq[i]
        limit = np.float64(best[i]) + np.float64(err_sq[col]) + x_norm * np.float64(err_x[col]) + row_err
        others = np.float64(other_low[i]) - row_err
        if others <= limit:
            near[n_near] = i
            n_near += 1
            continue
        label = slot_center[col]
        labels[i] = label
        dist2[i] = pair_dist2(X[i], centers[label])
        if with_bounds:
            lower[i, 0] = store_lower(math.sqrt(max(others + x_sq[i], 0.0)))
    return n_near


def _assign_by_panels(
    X,
    centers,
    scaled_centers,
    column_sq,
    slot_center,
    err_sq,
    err_x,
    x_sq,
    labels,
    dist2,
    lower,
    weights,
    sums,
    counts,
    sse,
):
    """:func:`_assign_one_group` in float32, a tile of ``PANEL_TILE_BYTES`` of rows at a time: the summary of
    every row's scores without writing them
    (:func:`~daskmeans.kernels.panel_scan.best_and_lowest_other_by_panels`, rows of any dtype converted a panel at
    a time), the rows it decides settled at once (:func:`_settle_clear_rows`), the near ties scored again by one
    GEMM and settled as any tile (:func:`_settle_one_group`: by exact distances), then every row added to its
    cluster's sums in row order (the same sums as :func:`_settle_one_group` adds as it goes)."""
    n, d = X.shape
    padded_centers = padded(scaled_centers, column_sq, err_sq, err_x)
    tile = min(n, max(PANEL_ROWS, config.PANEL_TILE_BYTES // (d * X.itemsize)))
    best, other_low = np.empty(tile, dtype=np.float32), np.empty(tile, dtype=np.float32)
    best_col = np.empty(tile, dtype=np.int32)
    near = np.empty(tile, dtype=np.int64)
    rechecked = 0
    for r0 in range(0, n, tile):
        r1 = min(n, r0 + tile)
        rows = X[r0:r1]
        best_and_lowest_other_by_panels(rows, *padded_centers, x_sq[r0:r1], best, best_col, other_low)
        n_near = _settle_clear_rows(
            rows,
            centers,
            slot_center,
            err_sq,
            err_x,
            best,
            best_col,
            other_low,
            x_sq[r0:r1],
            labels[r0:r1],
            dist2[r0:r1],
            lower[r0:r1],
            near,
        )
        if n_near:
            rechecked += _settle_near_ties(
                X,
                r0 + near[:n_near],
                centers,
                scaled_centers,
                column_sq,
                slot_center,
                err_sq,
                err_x,
                labels,
                dist2,
                lower,
            )
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


def _settle_near_ties(X, at, centers, scaled_centers, column_sq, slot_center, err_sq, err_x, labels, dist2, lower):
    """Rows ``at`` of ``X`` scored by one GEMM and settled by :func:`_settle_one_group` (without statistics);
    their labels, distances and bounds written at ``at``. Returns the rows it settled by exact distances."""
    m = len(at)
    rows = np.asarray(X[at], dtype=np.float32)
    scores_t = np.matmul(scaled_centers, rows.T)
    row_labels, row_dist2 = np.empty(m, dtype=np.int32), np.empty(m)
    row_lower = np.empty((m, lower.shape[1]), dtype=lower.dtype)
    scratch = [np.empty(m, dtype=np.float32) for _ in range(4)]
    no_stats = (np.empty((0, X.shape[1])), np.empty(0), np.empty(0))
    rechecked = _settle_one_group(
        rows,
        centers,
        scores_t,
        column_sq,
        slot_center,
        err_sq,
        err_x,
        scratch[0],
        np.empty(m, dtype=np.int32),
        scratch[1],
        scratch[2],
        np.empty(m),
        np.empty(m),
        scratch[3],
        row_labels,
        row_dist2,
        row_lower,
        True,
        np.empty(0),
        *no_stats,
    )
    labels[at] = row_labels
    dist2[at] = row_dist2
    lower[at] = row_lower
    return rechecked


#: Per number of features, whether the panel scan assigned float32 rows faster than BLAS tiles in this process
#: (:func:`panels_pay` measures it once).
_PANELS_MEASURED: dict = {}
#: Held while a measurement runs: the threads of a process measure one at a time, and each width once.
_MEASURING = threading.Lock()


def panels_pay(n_features: int) -> bool:
    """Whether float32 rows of ``n_features`` features are scored by the panel scan
    (:mod:`~daskmeans.kernels.panel_scan`, scores never written) rather than by BLAS tiles.

    Never above ``config.PANEL_MAX_FEATURES`` features. ``config.PANEL_SCAN`` decides: ``"panels"``, ``"blas"``, or
    ``"auto"``, measured once per process and number of features (:func:`panel_seconds`): the register-blocked scan runs
    ahead of a BLAS GEMM plus a scan of its scores on some processors and behind it on others. Both give
    the same labels, distances, bounds and sums to the last bit, so the choice changes only the time. The
    grouped (yinyang) assignment follows the same choice.

    Examples
    --------
    >>> from daskmeans import config
    >>> with config.set(PANEL_SCAN="blas"):
    ...     panels_pay(128)
    False

    Raises
    ------
    InvalidParameterError
        ``config.PANEL_SCAN`` is none of the three.
    """
    setting = config.PANEL_SCAN
    if setting not in ("auto", "panels", "blas"):
        raise InvalidParameterError(f"config.PANEL_SCAN must be 'auto', 'panels' or 'blas', not {setting!r}.")
    if n_features > config.PANEL_MAX_FEATURES:
        return False
    if setting != "auto":
        return setting == "panels"
    if n_features not in _PANELS_MEASURED:
        with _MEASURING:
            if n_features not in _PANELS_MEASURED:
                panels, tiles = panel_seconds(n_features)
                _PANELS_MEASURED[n_features] = panels < tiles
    return _PANELS_MEASURED[n_features]


def panel_seconds(n_features: int, repeats: int = 3) -> tuple[float, float]:
    """Seconds of the plain float32 assignment of ``config.PANEL_CALIBRATION_ROWS`` random rows of ``n_features``
    features to ``config.PANEL_CALIBRATION_CENTERS`` of them, by the panel scan and by BLAS tiles: the best of
    ``repeats`` runs each, taken in turns (after one run each that compiles and warms the caches).

    BLAS runs on one thread here, as in every pass (one per task, :mod:`daskmeans.engine.blas`): the panel scan
    runs on one, and a GEMM on every core of the driver's main thread would make the tiles look faster than they
    are in the passes that use the choice. Only the main thread sets that limit: other threads measure inside the
    limit of the pool that runs them (a worker process's, or the driver's for its passes), and a limit set and
    restored from them could undo the one their pool holds (some BLAS builds keep one count for all threads)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((config.PANEL_CALIBRATION_ROWS, n_features), dtype=np.float32)
    centers = np.ascontiguousarray(X[: config.PANEL_CALIBRATION_CENTERS])
    n, k = X.shape[0], centers.shape[0]
    slots = np.empty((n_features + 1, k), dtype=np.float32)
    slots[:n_features] = -2 * centers.T
    slots[n_features] = row_sq_norms(centers)
    out = (np.empty(n, dtype=np.int32), np.empty(n), np.empty((n, 0), dtype=LOWER_DTYPE))
    no_stats = (np.empty(0), np.empty((0, n_features)), np.empty(0), np.empty(0))

    def seconds(panels):
        started = time.perf_counter()
        _assign_one_group(
            X, centers, slots, np.arange(k), np.empty(n), config.ASSIGN_SLAB_BYTES, *out, True, *no_stats, panels
        )
        return time.perf_counter() - started

    best = {True: np.inf, False: np.inf}
    on_main_thread = threading.current_thread() is threading.main_thread()
    with threadpool_limits(limits=1, user_api="blas") if on_main_thread else contextlib.nullcontext():
        for _ in range(repeats + 1):
            for panels in best:
                best[panels] = min(best[panels], seconds(panels))
    return best[True], best[False]
