"""How much memory a fit needs: the bounds that size a worker, derived from the block size and ``k``.

A worker never holds the data set: it reads one row block at a time from the store, so what it needs above its
idle footprint (the Python process with NumPy, Dask and the compiled kernels, about 200-300 MiB) is

* per running task (one per worker thread): the block as stored (never as floats: a task converts and processes
  it a slab of rows at a time, see :mod:`daskmeans.engine.slabs`), one slab as floats with its temporaries, one
  slab of the distance matrix (the assign kernels block over rows *and* centers, so the slab has a fixed size
  whatever ``k``), and a few ``k x d`` arrays (the centers, their float64 sums);
* the partial results of the tree reduction waiting on the worker (``k x d`` float64 sums each);
* the algorithm's state, which lives on the workers by design and does not depend on the data size:
  mini-batch k-means' pool of drawn rows, VRKM's epoch sample (streamed a pool of draws at a time), nmbatch's
  active batch.

Nothing is ``n x k`` (``transform`` excepted: it returns distances to every center, one block at a time) and
nothing is ``k x k``: k-means|| reclusters its ~10 k candidates against the k centers in slabs of rows.
:func:`worker_memory_bound` is the sum; the tests hold the workers' measured peak to it.
"""

from __future__ import annotations

from . import config
from .engine.slabs import slab_rows
from .kernels.packed_bounds import LOWER_BYTES


def task_memory_bytes(
    block_rows: int, n_features: int, n_clusters: int, *, source_itemsize: int = 4, compute_itemsize: int = 4
) -> int:
    """Bytes one pass task allocates for a block of ``block_rows`` rows, whatever the pass.

    A task walks its block in slabs (:mod:`daskmeans.engine.slabs`), so only the block as stored grows with the
    block; everything else is a constant set by ``SLAB_BYTES`` and ``k``.

    Parameters
    ----------
    block_rows, n_features, n_clusters : int
    source_itemsize : int
        Bytes per value as stored (1 for uint8 descriptors).
    compute_itemsize : int
        Bytes per value computed with (4 for float32, 8 for float64).

    Returns
    -------
    int
        The block as stored, twice (Zarr reads a chunk's bytes, then copies them into the block it returns); per
        row of the block, its label and distance (the outputs of a labels pass); per slab, the rows as computed, one
        float64 temporary of them (the summary's deviations) and the per-row vectors of the assign kernels; the
        score slab of the assign kernel (with its tile of rows); the centers (two casts), their squared norms and the
        float64 sums and counts of the statistics.
    """
    stored = 2 * block_rows * n_features * source_itemsize
    outputs = block_rows * (4 + 8)
    rows = min(block_rows, slab_rows(n_features, compute_itemsize))
    slab = rows * n_features * (compute_itemsize + 8) + rows * config.PER_ROW_BYTES
    centers = n_clusters * n_features * (2 * compute_itemsize + 8) + n_clusters * (compute_itemsize + 16)
    return int(stored + outputs + slab + config.ASSIGN_SLAB_BYTES + centers)


def reduction_bytes(n_clusters: int, n_features: int) -> int:
    """Bytes of the partial statistics a worker may hold while the tree reduction waits for its siblings."""
    return int(config.SPLIT_EVERY * (n_clusters * (n_features + 2) * 8))


def minibatch_state_bytes(n_features: int, compute_itemsize: int = 4) -> int:
    """Mini-batch k-means: the rows of one pool of steps (``POOL_ROWS``) gathered for the steps, with indices."""
    return int(config.POOL_ROWS * (n_features * compute_itemsize + 16))


def vrkm_sample_row_bytes(n_features: int, n_candidates: int = 16, source_itemsize: int = 4) -> int:
    """VRKM: bytes of one draw of an epoch's sample as held: the row as stored, its snapshot label, the lower bound
    and position that come with it, and its candidate list (``n_candidates`` int32; none for the batched loop).

    Examples
    --------
    >>> vrkm_sample_row_bytes(64, 0)
    276
    """
    return int(n_features * source_itemsize + 4 + 8 + 8 + 4 * n_candidates)


def vrkm_pool_rows(n_features: int, n_candidates: int = 16, source_itemsize: int = 4) -> int:
    """VRKM: draws per pool of an epoch's sample, :data:`~daskmeans.config.VRKM_POOL_BYTES` of them (at least one).

    Examples
    --------
    >>> from daskmeans import config
    >>> with config.set(VRKM_POOL_BYTES=276_000):
    ...     vrkm_pool_rows(64, 0)
    1000
    """
    return max(1, int(config.VRKM_POOL_BYTES) // vrkm_sample_row_bytes(n_features, n_candidates, source_itemsize))


def vrkm_state_bytes(epoch_steps: int, n_features: int, n_candidates: int = 16, compute_itemsize: int = 4) -> int:
    """VRKM: what the epoch's sample holds on the workers at once, however long the epoch: two pools (one streaming
    into the inner loop while the next is read, :func:`vrkm_pool_rows`) and the segment in use, merged and put in
    draw order (at most a pool), each draw with its label, position, bound and candidate list.

    Parameters
    ----------
    epoch_steps : int
        Draws of the longest epoch (a shorter epoch is one pool of that many draws).
    n_features, n_candidates : int
    compute_itemsize : int
        Bytes per value of the rows as held (their stored itemsize).

    Examples
    --------
    >>> vrkm_state_bytes(1000, 64, 0)
    828000
    >>> vrkm_state_bytes(10**9, 64, 0) == vrkm_state_bytes(10**8, 64, 0)  # bounded by the pools
    True
    """
    pool = min(int(epoch_steps), vrkm_pool_rows(n_features, n_candidates, compute_itemsize))
    return int(3 * pool * vrkm_sample_row_bytes(n_features, n_candidates, compute_itemsize))


def nmbatch_state_bytes(batch_rows: int, n_features: int, n_groups: int, compute_itemsize: int = 4) -> int:
    """nmbatch: the active batch's rows, row ids, labels, distances and group bounds (all workers).

    Held twice while an iteration runs (the blocks before and after the step).
    """
    return int(2 * batch_rows * (n_features * compute_itemsize + 8 + 4 + 8 + LOWER_BYTES * n_groups))


def worker_memory_bound(
    block_rows: int,
    n_features: int,
    n_clusters: int,
    *,
    source_itemsize: int = 4,
    compute_itemsize: int = 4,
    threads: int = 1,
    state_bytes: int = 0,
) -> int:
    """Most memory one worker uses above its idle footprint while a fit runs.

    Parameters
    ----------
    block_rows : int
        Rows per block (the largest block of the input, after daskmeans' chunking).
    n_features, n_clusters : int
    source_itemsize, compute_itemsize : int
        Bytes per stored and per computed value.
    threads : int
        Threads of the worker (tasks running at once).
    state_bytes : int
        The algorithm's state on the workers (:func:`minibatch_state_bytes`, :func:`vrkm_state_bytes`,
        :func:`nmbatch_state_bytes`; 0 for k-means), counted whole: it may all sit on one worker.

    Returns
    -------
    int
        ``threads * task + reduction + state + slack``; does not depend on the number of samples.
    """
    task = task_memory_bytes(
        block_rows, n_features, n_clusters, source_itemsize=source_itemsize, compute_itemsize=compute_itemsize
    )
    return int(threads * task + reduction_bytes(n_clusters, n_features) + state_bytes + config.ALLOCATOR_SLACK)
