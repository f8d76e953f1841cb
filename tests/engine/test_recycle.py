"""The recycler that hands a freed state's arrays to the next state of its chain."""

import pickle
import time

import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

from daskmeans.engine.recycle import Recycler
from daskmeans.kernels import exact_assign as ka
from daskmeans.kernels.nested_groups import make_groups
from daskmeans.passes.bounded_assign import BoundedAssignment, BoundedBlock


def _block(recycler, n=10, n_groups=4):
    return BoundedBlock(
        np.zeros((n, 3), np.float32),
        None,
        np.zeros(n, np.int32),
        np.zeros(n),
        np.zeros((n, n_groups), np.float32),
        recycler,
    )


def test_a_freed_state_leaves_its_arrays_for_the_next_and_each_is_handed_out_once():
    recycler = Recycler()
    state = _block(recycler)
    addresses = {a.__array_interface__["data"][0] for a in (state.labels, state.dist2, state.lower)}
    del state
    assert recycler.held_bytes() == 10 * 4 + 10 * 8 + 10 * 4 * 4
    taken = [recycler.empty(10, np.int32), recycler.empty(10, np.float64), recycler.empty((10, 4), np.float32)]
    assert {a.__array_interface__["data"][0] for a in taken} == addresses
    assert recycler.held_bytes() == 0
    again = recycler.empty(10, np.int32)  # nothing held: a new array
    assert again.__array_interface__["data"][0] not in addresses


def test_arrays_something_else_still_refers_to_are_not_kept():
    recycler = Recycler()
    state = _block(recycler)
    labels = state.labels  # still used by the caller
    view = state.lower[2:]  # a view keeps its base alive
    del state
    assert recycler.held_bytes() == 10 * 8  # dist2 only
    assert recycler.empty(10, np.int32) is not labels
    assert recycler.empty((10, 4), np.float32).base is None and view.base is not None


def test_views_are_never_kept_and_only_one_array_of_a_kind_is_held():
    recycler = Recycler()
    base = np.zeros((20, 4), np.float32)
    assert recycler.keep(base[:10]) == 0
    assert recycler.keep(np.zeros(5), np.zeros(5)) == 1
    assert recycler.held_bytes() == 5 * 8


def test_a_growing_chain_holds_only_the_arrays_of_the_last_size():
    recycler = Recycler()
    recycler.keep(np.zeros(10), np.zeros((10, 4), np.float32))
    recycler.keep(np.zeros(20), np.zeros((20, 4), np.float32))
    assert recycler.held_bytes() == 20 * 8 + 20 * 4 * 4


def test_nested_batch_blocks_share_their_recycler_and_travel_without_it():
    from daskmeans.passes.nested_step import BatchBlock

    recycler = Recycler()
    block = BatchBlock(
        np.zeros((6, 3), np.float32),
        np.arange(6),
        np.zeros(6, np.int32),
        np.zeros(6),
        np.zeros((6, 2), np.float32),
        np.ones(6),
        recycler,
    )
    moved = pickle.loads(pickle.dumps(block))
    assert moved.recycler is not recycler and all(
        np.array_equal(getattr(moved, name), getattr(block, name)) for name in BatchBlock.FIELDS
    )
    del block
    assert recycler.held_bytes() == 6 * 4 + 6 * 8 + 6 * 2 * 4


def test_a_recycler_travels_empty():
    recycler = Recycler()
    recycler.keep(np.zeros(1000))
    state = _block(recycler)
    moved = pickle.loads(pickle.dumps(state))
    assert moved.recycler is not recycler and moved.recycler.held_bytes() == 0
    np.testing.assert_array_equal(moved.lower, state.lower)


def _problem(n=3000, d=8, k=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    centers = [X[rng.choice(n, k, replace=False)]]
    for _ in range(4):
        centers.append((centers[-1] + 0.05 * rng.standard_normal((k, d))).astype(np.float32))
    return X, centers


def _steps(assignment, centers):
    results = []
    previous = None
    for C in centers:
        shift = None if previous is None else np.sqrt(((C.astype(np.float64) - previous) ** 2).sum(axis=1)) * 1.01
        stats, computed = assignment.step(C, shift)
        results.append((stats.sums.copy(), stats.counts.copy(), computed))
        previous = C.astype(np.float64)
    return results


def test_a_chain_of_revisits_fills_the_arrays_of_the_state_two_passes_back_with_the_same_results():
    X, centers = _problem()
    groups = make_groups(centers[0], "yinyang", 4)
    array = da.from_array(X, chunks=(1000, X.shape[1]))
    assignment = BoundedAssignment(array, groups)  # the threaded scheduler: the states live in this process
    first = _steps(assignment, centers[:1])
    addresses = [_addresses(o.compute()[0]) for o in assignment.outputs]
    rest = _steps_from(assignment, centers)
    assert len(centers) == 5  # states 1, 3 and 5 share their arrays; 2 and 4 theirs
    assert [_addresses(o.compute()[0]) for o in assignment.outputs] == addresses
    # the same statistics as a plain exact assignment of every pass
    for C, (sums, counts, _) in zip(centers, first + rest):
        labels = ka.assign_with_bounds(X, C, groups)[0]
        np.testing.assert_array_equal(counts, np.bincount(labels, minlength=C.shape[0]))
        np.testing.assert_allclose(
            sums,
            np.stack([X[labels == j].sum(axis=0, dtype=np.float64) for j in range(C.shape[0])]),
            rtol=1e-12,
            atol=1e-9,
        )


def _addresses(state):
    return [a.__array_interface__["data"][0] for a in (state.labels, state.dist2, state.lower)]


def _steps_from(assignment, centers):
    results = []
    for previous, C in zip(centers, centers[1:]):
        shift = np.sqrt(((C.astype(np.float64) - previous.astype(np.float64)) ** 2).sum(axis=1)) * 1.01
        stats, computed = assignment.step(C, shift)
        results.append((stats.sums.copy(), stats.counts.copy(), computed))
    return results


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as c,
    ):
        yield c


@pytest.mark.slow
def test_on_worker_processes_the_states_reuse_their_arrays_and_give_the_threaded_results(client):
    X, centers = _problem()
    groups = make_groups(centers[0], "yinyang", 4)
    array = client.persist(da.from_array(X, chunks=(1000, X.shape[1])))
    on_threads = _steps(BoundedAssignment(da.from_array(X, chunks=(1000, X.shape[1])), groups), centers)
    assignment = BoundedAssignment(array, groups, client=client)
    on_workers = _steps(assignment, centers)
    for (s1, c1, n1), (s2, c2, n2) in zip(on_threads, on_workers):
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(c1, c2)
        assert n1 == n2

    def held():
        import gc

        from daskmeans.passes.bounded_assign import BoundedBlock

        states = [o for o in gc.get_objects() if isinstance(o, BoundedBlock)]
        return (
            len(states),
            sum(state.recycler.held_bytes() for state in states),
            sum(state.recycler.handed_out for state in states),
        )

    deadline = time.monotonic() + 30
    while True:  # the workers free the states of the passes before the last one when the scheduler says so
        n_states, held_bytes, handed_out = map(sum, zip(*client.run(held).values()))
        if n_states == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    # each block's chain holds the arrays of one freed state (labels, distances, 4 bounds of 16 bits per row) and
    # has reused
    assert n_states == 3 and held_bytes == len(X) * (4 + 8 + 2 * 4)
    assert handed_out >= 1
