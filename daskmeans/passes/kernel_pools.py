"""The batch rows of mini-batch kernel k-means' steps, fetched a pool of steps at a time, the next pool while the
driver runs the steps of the one before.

The steps run on the driver (:func:`daskmeans.kernels.kernel_minibatch.run_kernel_steps`); their rows are drawn by
the workers (:func:`~daskmeans.passes.minibatch_pool.draw_pieces`: each block holding drawn rows is read once, by a
worker), and each worker's pieces travel straight to the driver, which assembles the pool. So each distinct row of a
pool crosses the network once, where a pool assembled on a worker would cross it twice. A pool is submitted to the
cluster before its steps are due: the first one before the seeding (by the estimator, :meth:`StepPools.request`),
each next one as soon as the one before has arrived, so that its rows travel while the driver steps. Pools start
at multiples of :attr:`StepPools.steps_per_pool` (also on resume): the rows of every step depend only on the seed
and the step's number, never on when they were fetched.
"""

from __future__ import annotations

import numpy as np

from .. import config
from ..engine.client import compute_now, submit_now
from .minibatch_pool import assemble_pieces, draw_pieces, step_indices


class StepPools:
    """The pools of batch rows of a mini-batch kernel k-means run.

    Parameters
    ----------
    array : dask.array.Array (n, d)
    weights : dask.array.Array (n,) or None
    client : distributed.Client or None
        Without a client a pool is computed when it is taken (nothing runs ahead).
    batch_size, max_iter : int
    seed : int
        The steps' root seed (:func:`~daskmeans.passes.minibatch_pool.step_indices`).
    pool_bytes : int, optional
        Bytes of batch rows per pool (several steps per round trip); default :data:`~daskmeans.config.POOL_BYTES`.
    """

    def __init__(self, array, weights, client, *, batch_size, max_iter, seed, pool_bytes=None):
        self.array, self.weights, self.client = array, weights, client
        self.n_samples = int(array.shape[0])
        self.batch_size, self.max_iter, self.seed = int(batch_size), int(max_iter), seed
        row_bytes = self.batch_size * array.shape[1] * array.dtype.itemsize
        pool_bytes = config.POOL_BYTES if pool_bytes is None else int(pool_bytes)
        self.steps_per_pool = max(1, min(self.max_iter, pool_bytes // max(1, row_bytes)))
        self._pending = {}
        self._arrived = {}

    def steps_from(self, step: int) -> int:
        """Steps of the pool that holds step ``step`` (0-based) from it on: to the pool's end or ``max_iter``."""
        return min(self.steps_per_pool - step % self.steps_per_pool, self.max_iter - step)

    def request(self, step: int):
        """Start fetching the pool from step ``step`` on (nothing past ``max_iter``, nothing twice)."""
        if step >= self.max_iter or step in self._pending:
            return
        indices = step_indices(self.n_samples, self.batch_size, self.seed, step, self.steps_from(step))
        # each distinct row travels once (on small data a pool draws most rows several times)
        distinct, position = np.unique(indices.ravel(), return_inverse=True)
        pieces = draw_pieces(self.array, distinct, self.weights)
        fetch = pieces if self.client is None else submit_now(*pieces, client=self.client)
        self._pending[step] = (indices, position.reshape(indices.shape), fetch)

    def first_distinct_rows(self, m: int):
        """The first ``m`` distinct rows the steps draw, in the order first drawn, from the first pool (fetched
        now if it is not yet here; :meth:`take` then reuses it).

        Each step's rows are drawn uniformly with replacement, so the first ``m`` distinct ones are a uniform sample
        of ``m`` rows without replacement (every order in which rows first appear is equally likely).

        Returns
        -------
        row_index : int64 (m,)
        rows : ndarray (m, d)
        or None when the first pool holds fewer than ``m`` distinct rows.
        """
        self.request(0)
        if 0 not in self._pending:
            return None
        indices, position, _ = self._pending[0]
        flat = indices.ravel()
        _, first = np.unique(flat, return_index=True)
        if first.shape[0] < m:
            return None
        drawn = np.sort(first)[:m]
        rows, _ = self._result(0)
        return flat[drawn], rows[position.ravel()[drawn]]

    def _result(self, step: int):
        """The fetched ``(rows, weights)`` of the pending pool from ``step`` (waited for once, then kept)."""
        if step not in self._arrived:
            _, position, fetch = self._pending[step]
            if self.client is None:
                pieces = compute_now(*fetch)
            else:
                from distributed import as_completed

                pieces = (piece for _, piece in as_completed(fetch, loop=self.client.loop, with_results=True))
            n_rows = int(position.max()) + 1
            self._arrived[step] = assemble_pieces(
                pieces, n_rows, self.array.shape[1], self.array.dtype, self.weights is not None
            )
        return self._arrived[step]

    def take(self, step: int):
        """The pool from step ``step`` on, and the next pool's fetch started.

        Returns
        -------
        indices : int64 (steps, batch_size)
            Global row indices of each step's batch.
        batches : PoolBatches of ndarray (batch_size, d)
        batch_weights : PoolBatches of float64 (batch_size,), or None without sample weights
        rows : ndarray (distinct rows, d)
            The pool's distinct rows.
        """
        self.request(step)
        rows, row_weights = self._result(step)
        indices, position, _ = self._pending.pop(step)
        del self._arrived[step]
        self.request(step + indices.shape[0])
        batch_weights = None if row_weights is None else PoolBatches(row_weights, position)
        return indices, PoolBatches(rows, position), batch_weights, rows

    def release(self):
        """Drop the pools fetched ahead and not taken (their results are released on the cluster)."""
        self._pending.clear()
        self._arrived.clear()


class PoolBatches:
    """The batches of a pool, each gathered from the pool's distinct rows when it is used: a sequence (``len``,
    indexing, slices, iteration) of ``rows[position[t]]``.

    Gathering each batch as its step comes, rather than all of them when the pool arrives, reuses one batch's
    memory for the next: on MNIST (10,000 x 784) a pool of 80 steps would otherwise take 64 MB of fresh memory
    at once.
    """

    def __init__(self, rows, position):
        self.rows, self.position = rows, position

    def __len__(self):
        return self.position.shape[0]

    def __getitem__(self, item):
        if isinstance(item, slice):
            return PoolBatches(self.rows, self.position[item])
        return self.rows[self.position[item]]

    def __iter__(self):
        return (self.rows[position] for position in self.position)
