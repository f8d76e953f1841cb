"""Worker preload: compile daskmeans' Numba kernels when a Dask worker starts.

The kernels are compiled (or loaded from Numba's on-disk cache) on tiny arrays before the worker joins the
scheduler, so the first real task runs at full speed instead of paying one to several seconds of compilation
per kernel and dtype. Use it with::

    dask worker tcp://scheduler:8786 --preload daskmeans.preload

or, where the worker command cannot be changed (dask-gateway, the operator), with the Dask configuration
``DASK_DISTRIBUTED__WORKER__PRELOAD='["daskmeans.preload"]'``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time

import numpy as np

from .engine import random as engine_random
from .engine.random import row_uniforms
from .kernels import (
    afkmc2,
    assign,
    exact_assign,
    group_scan,
    kernel_centers,
    kernel_functions,
    kernel_minibatch,
    one_group_assign,
    panel_scan,
    revisit,
    score_error,
    settle_scores,
    stats,
    truncated_em,
)
from .kernels.afkmc2 import afkmc2_chains
from .kernels.assign import nearest_direct, nearest_gemm
from .kernels.kernel_centers import single_point_centers
from .kernels.kernel_functions import Kernel
from .kernels.kernel_minibatch import kernel_minibatch_step
from .kernels.nested_groups import make_groups
from .kernels.stats import cluster_stats

#: Logged under ``distributed.`` so that the worker's own log configuration shows it.
logger = logging.getLogger("distributed.preload.daskmeans")

#: The dtypes daskmeans computes in (integer and float16 input is converted to float32 block by block).
COMPUTE_DTYPES = (np.float32, np.float64)

#: Variables that cap the threads of BLAS, OpenMP and Numba inside one worker thread.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
#: Of those, the ones that matter to daskmeans' own work (its kernels never use Numba's parallel threads).
BLAS_THREAD_VARIABLES = THREAD_VARIABLES[:3]


def _tiny_block(dtype, rows=8, features=3):
    """A small C-contiguous block of the given dtype, with distinct rows."""
    values = np.arange(rows * features, dtype=np.float64).reshape(rows, features) / (rows * features)
    return np.ascontiguousarray(values, dtype=dtype)


def _warm_assign(dtype):
    """``nearest_direct``; the exact assignment against groups of centers with their bounds (exact k-means with
    bounds, nmbatch); through ``nearest_gemm`` the exact assignment against one group; each with near ties (equal
    centers) and, in float32, of uint8 rows too (descriptors as stored, with their statistics)."""
    block = _tiny_block(dtype)
    centers = np.ascontiguousarray(block[:4])
    tied = np.ascontiguousarray(centers[[0, 0, 1, 2]])
    nearest_direct(block, centers[:2])
    rows = [block, np.ascontiguousarray(block * 100, dtype=np.uint8)] if dtype == np.float32 else [block]
    for stored in rows:
        for scheme_centers in (centers, tied):
            exact_assign.assign_with_bounds(stored, scheme_centers, make_groups(scheme_centers, "yinyang", 2))
        nearest_gemm(stored, tied[:2])
        nearest_gemm(stored, centers[:2], stats=(np.zeros((2, block.shape[1])), np.zeros(2), np.zeros(2)))
    return nearest_gemm(block, centers[:2])


def _warm_revisit(dtype):
    """The revisit after the centers moved (exact k-means with bounds, nmbatch): in float32 with groups a block of
    rows at a time, of float32 rows and of uint8 rows as stored; with Hamerly's single bound (and in float64) one
    dot product at a time."""
    block = _tiny_block(dtype, rows=24)
    centers = np.ascontiguousarray(block[:16])
    moved = np.ascontiguousarray(centers + dtype.type(0.01))
    shift = np.full(centers.shape[0], 0.02 * np.sqrt(block.shape[1]))
    rows = [block, np.ascontiguousarray(block * 100, dtype=np.uint8)] if dtype == np.float32 else [block]
    for stored in rows:
        for groups in (make_groups(centers, "yinyang", 2), make_groups(centers, "hamerly", 1)):
            labels, dist2, lower, _ = exact_assign.assign_with_bounds(stored, centers, groups)
            revisit.revisit_with_bounds(stored, moved, labels, lower, shift, groups, dist2=dist2)


def _warm_stats(dtype):
    """``_cluster_stats`` without and with sample weights (one compiled signature serves both); the kept sums of
    exact k-means with bounds moved by int32 labels (rows of the dtype and uint8) and its far rows."""
    block = _tiny_block(dtype)
    labels, dist2 = _warm_assign(dtype)
    sums, counts, _ = cluster_stats(block, labels, dist2, 2)
    cluster_stats(block, labels, dist2, 2, weights=np.ones(block.shape[0]))
    labels = labels.astype(np.int32)
    for rows in (block, np.ascontiguousarray(block * 100, dtype=np.uint8)):
        stats.move_rows(rows, labels, labels[::-1].copy(), sums, counts)
    stats.cluster_sse(labels, dist2, np.zeros(2))
    stats.largest_positions(dist2, 2)


def _warm_random(dtype):
    """The counter-based uniforms used by every sampling pass (independent of the data's dtype)."""
    row_uniforms(12345, 0, 4)


def _warm_afkmc2(dtype):
    """The AFK-MC2 Markov chains, their GEMM-proposed distances settled exactly and the chains' steps (float64
    weights, proposals and uniforms; rows of the data's dtype), and the greedy k-means++ that keeps the centers."""
    block = _tiny_block(dtype)
    ones = np.ones(block.shape[0])
    afkmc2_chains(block, ones, ones / block.shape[0], block[0].astype(np.float64), 3, 4, np.full(block.shape[0], 0.5))
    afkmc2.greedy_kmeans_plusplus_with_mode(block.astype(np.float64), ones, 2, np.random.default_rng(0), 1)


def _warm_truncated_em(dtype):
    """The vc-GMM kernels: initial truncation, E-step, neighbourhood update, posteriors (float64 means)."""
    block = _tiny_block(dtype)
    rows = block.shape[0]
    means = np.ascontiguousarray(block[:3], dtype=np.float64)
    truncation = truncated_em.random_truncation(np.full((rows, 2), 0.5), 3)
    neighbours = np.array([[0, 1], [1, 2], [2, 0]], dtype=np.int32)
    result = truncated_em.truncated_estep(block, means, truncation, neighbours, np.full(rows, -1, dtype=np.int32))
    keys, sums, counts = truncated_em.aggregate_pairs(result[2], result[3], result[4], 3)
    truncated_em.update_neighbours(neighbours, keys, sums, counts)
    truncated_em.posterior_stats(block, np.ones(rows), result[0], result[1], 1.0, 3)
    truncated_em.truncated_posterior(block, means, 1.0, 2)


def _warm_kernel_kmeans(dtype):
    """Kernel k-means: the kernel matrices (RBF, Laplacian, polynomial), sparse-center distances (what the
    predict pass runs on workers) and the mini-batch step's helpers (run on the driver)."""
    block = _tiny_block(dtype)
    for kernel in (
        Kernel("rbf", {"kappa": 1.0}),
        Kernel("laplacian", {"kappa": 1.0}),
        Kernel("polynomial", {"degree": 2, "gamma": 1.0, "coef0": 1.0}),
    ):
        centers = single_point_centers(np.ascontiguousarray(block[:2]), kernel, np.arange(2))
        centers.nearest(block, kernel)
        kernel_minibatch_step(centers, np.zeros(2), block, np.arange(block.shape[0]), kernel, 1, tau=2)


#: name -> function(dtype) that runs the kernels of one concern once on tiny arrays.
WARMUPS = {
    "kernels.assign": _warm_assign,
    "kernels.stats": _warm_stats,
    "kernels.revisit": _warm_revisit,
    "_random": _warm_random,
    "kernels.afkmc2": _warm_afkmc2,
    "kernels.truncated_em": _warm_truncated_em,
    "kernels.kernel_kmeans": _warm_kernel_kmeans,
}


def _dispatchers():
    """The Numba dispatchers warmed here, by qualified name."""
    return {
        "kernels.assign.nearest_direct": assign.nearest_direct,
        "kernels.settle_scores._finish_slab": settle_scores._finish_slab,
        "kernels.group_scan.scan_groups": group_scan.scan_groups,
        "kernels.one_group_assign._settle_one_group": one_group_assign._settle_one_group,
        "kernels.one_group_assign._settle_clear_rows": one_group_assign._settle_clear_rows,
        "kernels.panel_scan.best_and_lowest_other_by_panels": panel_scan.best_and_lowest_other_by_panels,
        "kernels.panel_scan.best_of_groups_by_panels": panel_scan.best_of_groups_by_panels,
        "kernels.settle_scores._finish_best_of_groups": settle_scores._finish_best_of_groups,
        "kernels.score_error.row_sq_norms": score_error.row_sq_norms,
        "kernels.revisit._revisit": revisit._revisit,
        "kernels.revisit._revisit_by_groups": revisit._revisit_by_groups,
        "kernels.stats._cluster_stats": stats._cluster_stats,
        "kernels.stats.move_rows": stats.move_rows,
        "kernels.stats.cluster_sse": stats.cluster_sse,
        "kernels.stats.largest_positions": stats.largest_positions,
        "_random._row_uniforms": engine_random._row_uniforms,
        "kernels.afkmc2._nearest_by_scores": afkmc2._nearest_by_scores,
        "kernels.afkmc2._run_chains": afkmc2._run_chains,
        "kernels.afkmc2._greedy_steps": afkmc2._greedy_steps,
        "kernels.truncated_em.random_truncation": truncated_em.random_truncation,
        "kernels.truncated_em.truncated_estep": truncated_em.truncated_estep,
        "kernels.truncated_em.update_neighbours": truncated_em.update_neighbours,
        "kernels.truncated_em.posterior_stats": truncated_em.posterior_stats,
        "kernels.truncated_em.truncated_posterior": truncated_em.truncated_posterior,
        "kernels.kernel_functions.rbf_exponent": kernel_functions.rbf_exponent,
        "kernels.kernel_functions.laplacian_exponent": kernel_functions.laplacian_exponent,
        "kernels.kernel_functions.polynomial_from_gram": kernel_functions.polynomial_from_gram,
        "kernels.kernel_centers.center_inner_products": kernel_centers.center_inner_products,
        "kernels.kernel_centers.nearest_from_inner": kernel_centers.nearest_from_inner,
        "kernels.kernel_minibatch.batch_cluster_means": kernel_minibatch.batch_cluster_means,
        "kernels.kernel_minibatch.truncation_mask": kernel_minibatch.truncation_mask,
    }


def compiled_signatures() -> dict[str, list[str]]:
    """The argument types each kernel has been compiled for in this process.

    Returns
    -------
    dict
        Qualified kernel name -> list of signatures (as text), e.g. ``"(Array(float32, 2, 'C'), ...)"``.
    """
    return {name: sorted(str(sig) for sig in dispatcher.signatures) for name, dispatcher in _dispatchers().items()}


def warm_kernels(dtypes=COMPUTE_DTYPES) -> dict[str, float]:
    """Compile (or load from Numba's cache) every daskmeans kernel for each compute dtype.

    Parameters
    ----------
    dtypes : sequence of numpy dtypes
        The dtypes to compile for; float32 and float64 by default.

    Returns
    -------
    dict
        ``"concern/dtype"`` -> seconds it took.
    """
    seconds = {}
    for name, warm in WARMUPS.items():
        for dtype in dtypes:
            start = time.perf_counter()
            warm(np.dtype(dtype))
            seconds[f"{name}/{np.dtype(dtype).name}"] = time.perf_counter() - start
    return seconds


def thread_settings() -> dict[str, str | None]:
    """The thread-capping variables as this process sees them (None where unset)."""
    return {name: os.environ.get(name) for name in THREAD_VARIABLES}


async def dask_setup(dask_object):
    """Preload entry point: warm the kernels on a worker (off the event loop), and log what was done.

    Parameters
    ----------
    dask_object : distributed.Worker, distributed.Scheduler or distributed.Client
        Given by Dask. Only workers run kernels; on anything else this logs and does nothing.
    """
    from distributed import Worker

    if not isinstance(dask_object, Worker):
        logger.info("daskmeans.preload: %s runs no kernels; nothing to warm", type(dask_object).__name__)
        return
    start = time.perf_counter()
    seconds = await asyncio.to_thread(warm_kernels)
    total = time.perf_counter() - start
    slowest = max(seconds, key=seconds.get)
    logger.info(
        "daskmeans.preload: warmed %d kernels for %s in %.2fs (slowest %s: %.2fs); NUMBA_CACHE_DIR=%s",
        len(_dispatchers()),
        "/".join(np.dtype(d).name for d in COMPUTE_DTYPES),
        total,
        slowest,
        seconds[slowest],
        os.environ.get("NUMBA_CACHE_DIR", "(next to the sources)"),
    )
    threads = dask_object.state.nthreads
    settings = thread_settings()
    uncapped = [name for name in BLAS_THREAD_VARIABLES if settings[name] != "1"]
    if threads and threads > 1 and uncapped:
        logger.warning(
            "daskmeans.preload: this worker runs %d threads but %s %s not 1; BLAS/OpenMP may "
            "oversubscribe the cores (set them to 1, as the daskmeans image does)",
            threads,
            ", ".join(uncapped),
            "is" if len(uncapped) == 1 else "are",
        )
    else:
        logger.info("daskmeans.preload: thread settings %s", settings)
