"""Per-row states held on the workers count, for Dask, as the arrays they hold (placement, stealing, spilling)."""

import dask.array as da
import numpy as np
from dask.sizeof import sizeof

from daskmeans.engine.recycle import Recycler
from daskmeans.kernels.nested_groups import make_groups
from daskmeans.passes.bounded_assign import BoundedAssignment, BoundedBlock
from daskmeans.passes.nested_reread import ChunkState
from daskmeans.passes.nested_state import NestedBatch
from daskmeans.passes.nested_step import BatchBlock, StepOutput


def _arrays(m=500, d=16, n_groups=4):
    rng = np.random.default_rng(0)
    return (
        rng.integers(0, 255, (m, d), dtype=np.uint8),
        np.arange(m, dtype=np.int64),
        np.zeros(m, dtype=np.int32),
        rng.random(m),
        rng.random((m, n_groups)).astype(np.float32),
        np.ones(m),
    )


def test_each_state_counts_the_bytes_of_its_arrays_and_not_its_shared_recycler():
    rows, index, labels, dist2, lower, weights = _arrays()
    bounded = BoundedBlock(rows, weights, labels, dist2, lower)
    held = rows.nbytes + weights.nbytes + labels.nbytes + dist2.nbytes + lower.nbytes
    assert held <= sizeof(bounded) < held + 2000
    batch = BatchBlock(rows, index, labels, dist2, lower, weights)
    assert held + index.nbytes <= sizeof(batch) < held + index.nbytes + 2000
    report = (np.zeros((3, 16)), np.zeros(3))
    assert sizeof(StepOutput(batch, report)) >= sizeof(batch) + report[0].nbytes
    assert sizeof(ChunkState(labels, dist2, lower)) >= labels.nbytes + dist2.nbytes + lower.nbytes

    recycler = Recycler()
    recycler.keep(np.zeros(500, dtype=np.int32), np.zeros(500), np.zeros((500, 4), dtype=np.float32))
    assert recycler.held_bytes() > 0
    assert sizeof(BoundedBlock(rows, weights, labels, dist2, lower, recycler)) == sizeof(bounded)


def _scheduler_nbytes(client, keys):
    def nbytes(dask_scheduler, keys):
        return [dask_scheduler.tasks[key].nbytes for key in keys]

    return client.run_on_scheduler(nbytes, keys=list(keys))


def test_the_scheduler_knows_the_size_of_the_states_the_workers_hold(cluster_client):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((4000, 12)).astype(np.float32)
    centers = X[rng.choice(len(X), 20, replace=False)]
    groups = make_groups(centers, "yinyang", 4)
    array = cluster_client.persist(da.from_array(X, chunks=(1000, 12)))
    # rows (as computed, float32), labels, distances, 4 bounds of 16 bits: what one row's state holds at least
    row_bytes = 12 * 4 + 4 + 8 + 2 * 4

    assignment = BoundedAssignment(array, groups, client=cluster_client)
    assignment.step(centers)
    assignment.step(centers * 1.01, np.full(20, 1.0))
    sizes = _scheduler_nbytes(cluster_client, [o.key for o in assignment.outputs])
    assert len(sizes) == 4 and all(size >= 1000 * row_bytes for size in sizes)
    assignment.release()

    batch = NestedBatch(array, 0, groups, client=cluster_client)
    batch.step(centers, np.zeros(20), 4000)
    batch.step(centers * 1.01, np.full(20, 1.0), 4000)
    sizes = _scheduler_nbytes(cluster_client, [o.key for o in batch.outputs])
    # a nested batch's blocks also hold each row's global index
    assert sum(sizes) >= 4000 * (row_bytes + 8) and all(size > 0 for size in sizes)
    batch.release()
