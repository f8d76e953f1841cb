"""Nested mini-batch k-means: exact kernels and bounds, one sample one vote, doubling, reproducibility, memory."""

from __future__ import annotations

from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import make_blobs

from daskmeans import InvalidParameterError, NestedMiniBatchKMeans, config, load
from daskmeans.algorithms.nested import (
    center_displacement,
    default_initial_batch_size,
    doubling_ratio,
    nested_minibatch,
    nested_plan,
    state_bytes_per_row,
)
from daskmeans.algorithms.relocation import centers_from_sums
from daskmeans.algorithms.result import RunContext
from daskmeans.kernels import exact_assign as ka
from daskmeans.kernels import nested as kn
from daskmeans.kernels import nested_groups
from daskmeans.kernels import revisit as kr
from daskmeans.kernels.distance import exact_dist2
from daskmeans.kernels.packed_bounds import unpack_bounds
from daskmeans.passes.nested_reads import chunk_order
from daskmeans.passes.nested_state import NestedBatch
from daskmeans.registry import make_estimator

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


# -- NumPy references ----------------------------------------------------------------------------------------
def ref_dist2(X, C):
    """All squared distances in float64 (the exact distances the kernels must agree with)."""
    X64, C64 = X.astype(np.float64), C.astype(np.float64)
    return ((X64[:, None, :] - C64[None, :, :]) ** 2).sum(-1)


def ref_assign(X, C):
    D = ref_dist2(X, C)
    labels = np.argmin(D, axis=1)
    return labels, D[np.arange(len(X)), labels], D


def ref_group_minima(D, labels, groups):
    """Distance from each row to the nearest center of each group other than its own center."""
    out = np.full((D.shape[0], groups.n_groups), np.inf)
    for g in range(groups.n_groups):
        members = groups.members[groups.ptr[g] : groups.ptr[g + 1]]
        sub = np.sqrt(D[:, members])
        sub[members[None, :] == labels[:, None]] = np.inf
        out[:, g] = sub.min(axis=1)
    return out


def ref_deltas(X, old_labels, old_dist2, new_labels, new_dist2, k, weights=None):
    m = len(old_labels)
    w = np.ones(len(X)) if weights is None else weights
    sums = np.zeros((k, X.shape[1]))
    counts = np.zeros(k)
    sse = np.zeros(k)
    np.add.at(sums, new_labels, w[:, None] * X.astype(np.float64))
    np.add.at(counts, new_labels, w)
    np.add.at(sse, new_labels, w * new_dist2)
    np.add.at(sums, old_labels, -w[:m, None] * X[:m].astype(np.float64))
    np.add.at(counts, old_labels, -w[:m])
    np.add.at(sse, old_labels, -w[:m] * old_dist2)
    return sums, counts, sse


SCHEMES = [("elkan", None), ("yinyang", 4), ("hamerly", 1)]


def groups_for(centers, scheme, n_groups):
    n_groups = centers.shape[0] if n_groups is None else n_groups
    return nested_groups.make_groups(centers, scheme, n_groups)


def tied_problem(dtype, n=1500, d=7, k=24, seed=0):
    """Random rows and centers, with an exact duplicate center and rows sitting on centers (ties)."""
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) * 3).astype(dtype)
    C = X[rng.choice(n, k, replace=False)].copy()
    C[3] = C[11]
    return X, C


# -- kernels -------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_exact_distances_and_nearest_match_numpy(dtype):
    X, C = tied_problem(dtype)
    labels, dist2, D = ref_assign(X, C)
    np.testing.assert_allclose(exact_dist2(X, C, labels.astype(np.int32)), dist2, rtol=1e-13)
    np.testing.assert_allclose(ka.row_sq_norms(X), (X.astype(np.float64) ** 2).sum(1), rtol=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scheme, n_groups", SCHEMES)
def test_full_assignment_is_exact_and_bounds_are_valid_and_tight(dtype, scheme, n_groups):
    X, C = tied_problem(dtype)
    groups = groups_for(C, scheme, n_groups)
    labels, dist2, lower, rechecked = ka.assign_with_bounds(X, C, groups)
    ref_labels, ref_d2, D = ref_assign(X, C)
    np.testing.assert_array_equal(labels, ref_labels)  # ties go to the lowest index, like numpy's argmin
    np.testing.assert_array_equal(dist2, exact_dist2(X, C, labels))
    assert rechecked > 0  # the duplicate center forces exact tie-breaking
    truth = ref_group_minima(D, ref_labels, groups)
    bounds = unpack_bounds(lower)
    assert np.all(bounds <= truth)
    finite = np.isfinite(truth)
    # the scores' error, and bounds stored in 16 bits rounded down (2**-10 relative)
    slack = (1e-3 if dtype == np.float32 else 1e-6) + 2.0**-10
    assert np.all(bounds[finite] >= truth[finite] * (1 - slack) - slack)
    assert np.array_equal(np.isinf(bounds), np.isinf(truth))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scheme, n_groups", [("yinyang", 5), ("hamerly", 1), ("none", 1)])
def test_full_assignment_in_small_slabs_matches(dtype, scheme, n_groups):
    X, C = tied_problem(dtype, n=700)
    groups = groups_for(C, scheme, n_groups)
    whole = ka.assign_with_bounds(X, C, groups)
    slabs = ka.assign_with_bounds(X, C, groups, slab_bytes=C.shape[0] * X.dtype.itemsize * 3)
    for a, b in zip(whole[:3], slabs[:3]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("scheme, n_groups", [("yinyang", 5), ("elkan", None), ("hamerly", 1), ("none", 1)])
@pytest.mark.parametrize("slab_rows", [700, 64, 1])
def test_full_assignment_of_uint8_rows_converted_by_slabs_is_that_of_their_float32_values(scheme, n_groups, slab_rows):
    """Rows kept as stored (uint8) are converted a slab at a time: labels, exact distances, bounds, the statistics
    added in row order (weighted) and the rows settled by exact distances are those of the converted block."""
    rng = np.random.default_rng(12)
    X8 = rng.integers(0, 256, size=(700, 20)).astype(np.uint8)
    X8[100:140] = X8[0]  # duplicate rows and a row on a center: ties settled by exact distances
    C = X8[rng.choice(700, 24, replace=False)].astype(np.float32)
    C[5] = C[7]
    weights = rng.uniform(0.5, 2.0, 700)
    groups = groups_for(C, scheme, n_groups)
    slab_bytes = slab_rows * 20 * 4
    results = []
    for X in (X8.astype(np.float32), X8):
        stats = (np.zeros((24, 20)), np.zeros(24), np.zeros(24))
        results.append(
            (*ka.assign_with_bounds(X, C, groups, slab_bytes=slab_bytes, stats=stats, weights=weights), *stats)
        )
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)
    assert results[1][3] > 0


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scheme, n_groups", [("hamerly", 1), ("none", 1), ("yinyang", 5), ("yinyang", 7)])
def test_large_k_assignment_by_blocks_of_centers_is_the_one_block_assignment(dtype, scheme, n_groups, monkeypatch):
    """Many centers are scored a block of centers (whole slots of the groups) at a time (here blocks of about 16,
    so that 100 centers take that path): the same labels, exact distances and bounds as scoring all of them at
    once, near ties (a duplicate center, rows on centers), groups of unequal sizes (7) and tiles smaller than the
    data included. With one group, scoring all at once bounds the other centers by each one's own score error
    and the blocks by the largest center's: bounds there are valid, not equal."""
    X, C = tied_problem(dtype, n=900, d=9, k=100, seed=3)
    groups = groups_for(C, scheme, n_groups)
    whole = ka.assign_with_bounds(X, C, groups, column_blocks=False)
    monkeypatch.setattr(config, "ASSIGN_COLUMN_BLOCK", 16)
    for slab_bytes in (config.ASSIGN_SLAB_BYTES, 16 * X.dtype.itemsize * 50):  # one tile; tiles of 50 rows
        blocks = ka.assign_with_bounds(X, C, groups, slab_bytes=slab_bytes)
        compared = whole[:2] if n_groups == 1 else whole
        for a, b in zip(compared, blocks):
            np.testing.assert_array_equal(a, b)
    ref_labels, ref_d2, D = ref_assign(X, C)
    np.testing.assert_array_equal(blocks[0], ref_labels)
    np.testing.assert_array_equal(blocks[1], exact_dist2(X, C, ref_labels))
    assert blocks[3] > 0  # the near ties were settled by exact distances
    assert np.all(unpack_bounds(blocks[2]) <= ref_group_minima(D, ref_labels, groups))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scheme, n_groups", SCHEMES)
@pytest.mark.parametrize("move", [0.02, 0.5, 3.0])
def test_revisit_gives_exact_labels_and_valid_bounds_after_centers_move(dtype, scheme, n_groups, move):
    X, C = tied_problem(dtype)
    groups = groups_for(C, scheme, n_groups)
    labels, _, lower, _ = ka.assign_with_bounds(X, C, groups)
    rng = np.random.default_rng(1)
    C2 = (C + move * rng.standard_normal(C.shape)).astype(dtype)
    C2[3] = C2[11]
    shift = center_displacement(C2, C) * (1 + 1e-12)
    new_labels, new_dist2, new_lower, computed = kr.revisit_with_bounds(X, C2, labels, lower, shift, groups)
    ref_labels, ref_d2, D = ref_assign(X, C2)
    np.testing.assert_array_equal(new_labels, ref_labels)
    np.testing.assert_array_equal(new_dist2, exact_dist2(X, C2, new_labels))
    assert np.all(unpack_bounds(new_lower) <= ref_group_minima(D, ref_labels, groups))
    assert len(X) <= computed <= len(X) * (C.shape[0] + 1)
    if move == 0.02:
        assert computed < 0.5 * len(X) * C.shape[0]  # small moves: the bounds rule out most centers


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scalar_limit", [0, 1, 3, 10**6])
def test_revisit_agrees_whatever_the_rule_for_a_full_reassignment(dtype, scalar_limit):
    X, C = tied_problem(dtype)
    groups = groups_for(C, "yinyang", 5)
    labels, _, lower, _ = ka.assign_with_bounds(X, C, groups)
    C2 = (C + 0.3 * np.random.default_rng(4).standard_normal(C.shape)).astype(dtype)
    shift = center_displacement(C2, C) * (1 + 1e-12)
    new_labels, new_dist2, new_lower, _ = kr.revisit_with_bounds(
        X, C2, labels, lower, shift, groups, scalar_limit=scalar_limit
    )
    ref_labels, _, D = ref_assign(X, C2)
    np.testing.assert_array_equal(new_labels, ref_labels)
    np.testing.assert_array_equal(new_dist2, exact_dist2(X, C2, new_labels))
    assert np.all(unpack_bounds(new_lower) <= ref_group_minima(D, ref_labels, groups))


def test_revisit_reuses_the_distance_of_rows_whose_center_did_not_move():
    X, C = tied_problem(np.float32)
    groups = groups_for(C, "yinyang", 5)
    labels, dist2, lower, _ = ka.assign_with_bounds(X, C, groups)
    C2 = C.copy()
    C2[0] += 0.5  # only center 0 moves
    shift = center_displacement(C2, C) * (1 + 1e-12)
    fresh = kr.revisit_with_bounds(X, C2, labels, lower, shift, groups)
    reused = kr.revisit_with_bounds(X, C2, labels, lower, shift, groups, dist2=dist2)
    for a, b in zip(fresh[:3], reused[:3]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(reused[0], ref_assign(X, C2)[0])
    assert reused[3] <= fresh[3] - np.count_nonzero(labels != 0)


def far_moved_problem():
    """A yinyang state and centers moved so far that a revisit's probe gives up on the bounds."""
    X, C = tied_problem(np.float32)
    groups = groups_for(C, "yinyang", 5)
    labels, dist2, lower, _ = ka.assign_with_bounds(X, C, groups)
    C2 = (C + 3.0 * np.random.default_rng(5).standard_normal(C.shape)).astype(np.float32)
    shift = center_displacement(C2, C) * (1 + 1e-12)
    return X, C, groups, labels, dist2, lower, C2, shift


@pytest.mark.parametrize("give_up", [0.0, 0.5, 1.0])
def test_revisit_gives_up_on_the_bounds_after_a_costly_probe_with_the_same_labels(give_up):
    X, C, groups, labels, dist2, lower, C2, shift = far_moved_problem()
    out = kr.revisit_with_bounds(X, C2, labels, lower, shift, groups, dist2=dist2, probe_rows=64, give_up=give_up)
    ref_labels, _, D = ref_assign(X, C2)
    np.testing.assert_array_equal(out[0], ref_labels)
    np.testing.assert_array_equal(out[1], exact_dist2(X, C2, out[0]))
    assert np.all(unpack_bounds(out[2]) <= ref_group_minima(D, ref_labels, groups))
    if give_up == 0.0:  # every row after the probe is reassigned against all centers
        assert out[3] >= (len(X) - 64) * C.shape[0]


@pytest.mark.parametrize("give_up", [0.0, 1.0])
def test_revisit_fills_the_arrays_it_is_given_with_the_values_it_would_return(give_up):
    X, C, groups, labels, dist2, lower, C2, shift = far_moved_problem()
    fresh = kr.revisit_with_bounds(X, C2, labels, lower, shift, groups, dist2=dist2, probe_rows=64, give_up=give_up)
    out = (np.full_like(labels, -1), np.full_like(dist2, np.nan), np.full_like(lower, 0x7777))
    filled = kr.revisit_with_bounds(
        X, C2, labels, lower, shift, groups, dist2=dist2, probe_rows=64, give_up=give_up, out=out
    )
    assert all(a is b for a, b in zip(filled[:3], out))
    for a, b in zip(fresh, filled):
        np.testing.assert_array_equal(a, b)
    # and the full assignment writes into slices of a larger state's arrays
    tail = (np.full_like(labels, -1), np.full_like(dist2, np.nan), np.full_like(lower, 0x7777))
    ka.assign_with_bounds(X[100:], C2, groups, out=(tail[0][100:], tail[1][100:], tail[2][100:]))
    whole = ka.assign_with_bounds(X[100:], C2, groups)
    for a, b in zip(tail, whole[:3]):
        np.testing.assert_array_equal(a[100:], b)
    assert np.all(tail[0][:100] == -1)


@pytest.mark.parametrize("give_up", [0.0, 1.0])
def test_revisit_of_rows_kept_as_uint8_gives_what_their_float32_values_give(give_up):
    rng = np.random.default_rng(8)
    X8 = rng.integers(0, 256, size=(700, 20)).astype(np.uint8)
    X = X8.astype(np.float32)
    C = X[rng.choice(700, 40, replace=False)] + np.float32(0.25)
    groups = groups_for(C, "yinyang", 5)
    labels, dist2, lower, _ = ka.assign_with_bounds(X, C, groups)
    for move in (2.0, 40.0):  # a revisit that keeps most bounds; one whose probe gives up on them
        C2 = (C + move * rng.standard_normal(C.shape)).astype(np.float32)
        shift = center_displacement(C2, C) * (1 + 1e-12)
        as_float = kr.revisit_with_bounds(
            X, C2, labels, lower, shift, groups, dist2=dist2, probe_rows=64, give_up=give_up
        )
        as_stored = kr.revisit_with_bounds(
            X8, C2, labels, lower, shift, groups, dist2=dist2, probe_rows=64, give_up=give_up
        )
        for a, b in zip(as_float, as_stored):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(as_stored[0], ref_assign(X, C2)[0])


@pytest.mark.parametrize("scheme, n_groups", SCHEMES)
def test_bounds_stay_valid_over_many_moves(scheme, n_groups):
    X, C = tied_problem(np.float32, n=600)
    groups = groups_for(C, scheme, n_groups)
    labels, _, lower, _ = ka.assign_with_bounds(X, C, groups)
    rng = np.random.default_rng(2)
    for _ in range(25):
        C2 = (C + 0.05 * rng.standard_normal(C.shape)).astype(np.float32)
        shift = center_displacement(C2, C) * (1 + 1e-12)
        labels, _, lower, _ = kr.revisit_with_bounds(X, C2, labels, lower, shift, groups)
        C = C2
        ref_labels, _, D = ref_assign(X, C)
        np.testing.assert_array_equal(labels, ref_labels)
        assert np.all(unpack_bounds(lower) <= ref_group_minima(D, ref_labels, groups))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batch_deltas_match_numpy(dtype, weighted):
    rng = np.random.default_rng(3)
    k, m, extra = 6, 300, 120
    X = rng.standard_normal((m + extra, 5)).astype(dtype)
    old_labels = rng.integers(0, k, m).astype(np.int32)
    new_labels = np.where(
        rng.random(m + extra) < 0.3,
        rng.integers(0, k, m + extra),
        np.concatenate([old_labels, rng.integers(0, k, extra)]),
    ).astype(np.int32)
    old_d2, new_d2 = rng.random(m), rng.random(m + extra)
    weights = rng.random(m + extra) * 3 if weighted else None
    sums, counts, sse, members, changed = kn.batch_deltas(X, old_labels, old_d2, new_labels, new_d2, k, weights)
    ref = ref_deltas(X, old_labels, old_d2, new_labels, new_d2, k, weights)
    np.testing.assert_allclose(sums, ref[0], atol=1e-9)
    np.testing.assert_allclose(counts, ref[1], atol=1e-12)
    np.testing.assert_allclose(sse, ref[2], atol=1e-12)
    np.testing.assert_array_equal(members, np.bincount(new_labels, minlength=k) - np.bincount(old_labels, minlength=k))
    assert changed == int(np.sum(old_labels != new_labels[:m]))


def test_groups_partition_the_centers_and_auto_fits_the_memory_budget():
    C = np.random.default_rng(0).standard_normal((57, 3))
    for scheme, n_groups in [("elkan", 57), ("yinyang", 6), ("hamerly", 1)]:
        groups = nested_groups.make_groups(C, scheme, n_groups)
        np.testing.assert_array_equal(np.sort(groups.members), np.arange(57))
        for g in range(groups.n_groups):
            members = groups.members[groups.ptr[g] : groups.ptr[g + 1]]
            assert np.all(groups.group_of[members] == g) and np.all(np.diff(members) > 0)
        shift = np.random.default_rng(1).random(57)
        expected = [shift[groups.group_of == g].max() for g in range(groups.n_groups)]
        np.testing.assert_array_equal(groups.group_shift(shift), expected)
        sizes = np.diff(groups.ptr)
        assert groups.n_groups == n_groups and sizes.max() - sizes.min() <= 1
        # the slot layout lists every center once, padding as -1
        slots = groups.slot_center.reshape(-1, groups.n_groups)
        np.testing.assert_array_equal(np.sort(slots[slots >= 0]), np.arange(57))
        assert np.all(groups.group_of[slots[0]] == np.arange(groups.n_groups))
    # auto: yinyang groups, as many as fit at 2 bytes a bound (packed bounds), else one bound; never Elkan's bound
    # per center, which only asking for it gives
    assert nested_groups.choose_bounds("auto", 50, 784 * 4) == ("yinyang", 6)
    assert nested_groups.choose_bounds("auto", 64, 128 * 4) == ("yinyang", 8)
    assert nested_groups.choose_bounds("auto", 128, 128 * 4) == ("yinyang", 16)
    assert nested_groups.choose_bounds("auto", 1000, 128 * 4) == ("yinyang", 100)
    assert nested_groups.choose_bounds("auto", 4096, 128 * 4) == ("yinyang", 256)
    assert nested_groups.choose_bounds("auto", 1000, 16 * 4) == ("yinyang", 32)
    assert nested_groups.choose_bounds("auto", 1000, 4) == ("yinyang", 2)
    assert nested_groups.choose_bounds("auto", 1000, 3) == ("hamerly", 1)
    assert nested_groups.choose_bounds("elkan", 1000, 4) == ("elkan", 1000)
    assert nested_groups.choose_bounds("none", 10, 40) == ("none", 1)
    # a few hundred centers: YINYANG_MIN_GROUPS groups rather than groups of YINYANG_GROUP_SIZE, within the row's
    # bytes, and never groups of fewer than YINYANG_MIN_GROUP_SIZE centers that way
    assert nested_groups.choose_bounds("auto", 256, 128 * 4) == ("yinyang", 32)
    assert nested_groups.choose_bounds("auto", 256, 32) == ("yinyang", 16)
    assert nested_groups.choose_bounds("yinyang", 40, 10**9) == ("yinyang", 5)
    assert nested_groups.choose_bounds("yinyang", 3, 10**9) == ("hamerly", 1)
    assert nested_groups.choose_bounds("yinyang", 12, 10**9) == ("yinyang", 2)


# -- the doubling rule ---------------------------------------------------------------------------------------
def test_doubling_ratio_by_hand():
    sse = np.array([8.0, 18.0, 5.0, 1.0])
    counts = np.array([3.0, 4.0, 1.0, 10.0])
    moved = np.array([0.1, 0.5, 9.0, 0.0])
    # clusters 2 (one sample) and 3 (did not move) do not vote
    expected = min(np.sqrt(8 / 6) / 0.1, np.sqrt(18 / 12) / 0.5)
    assert doubling_ratio(sse, counts, moved) == pytest.approx(expected)
    assert doubling_ratio(sse, counts, np.zeros(4)) == np.inf
    # the median rule: voters are clusters 0, 1 and 3 (3 did not move: inf); rank floor(0.5 * 3) = 1
    ratios = sorted([np.sqrt(8 / 6) / 0.1, np.sqrt(18 / 12) / 0.5, np.inf])
    assert doubling_ratio(sse, counts, moved, 0.5) == pytest.approx(ratios[1])
    assert doubling_ratio(sse, counts, moved, 1.0) == np.inf
    assert doubling_ratio(sse, np.ones(4), moved, 0.5) == np.inf  # nobody votes
    assert default_initial_batch_size(10) == 5000 and default_initial_batch_size(1000) == 80_000
    # S / v, and a cluster without samples keeps its center
    previous = np.array([[1.0, 1.0], [5.0, 5.0]], dtype=np.float32)
    new = centers_from_sums(np.array([[4.0, 6.0], [0.0, 0.0]]), np.array([2.0, 0.0]), previous)
    np.testing.assert_array_equal(new, [[2.0, 3.0], [5.0, 5.0]])
    assert new.dtype == np.float32


def test_doubling_rule_on_a_constructed_case():
    # one cluster: the first iteration moves the center from far away (ratio tiny: no doubling), the next
    # changes nothing (p = 0: the batch doubles), and so on until all 64 rows are in and nothing changes
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 2))
    array = da.from_array(X, chunks=(16, 2))
    start = np.array([[50.0, 0.0]])
    seen = []
    plan = nested_plan(
        array, 1, seed=7, initial_batch_size=8, rho=100.0, doubling_quantile=0.0, bounds="elkan", keep_batch=True
    )
    result = nested_minibatch(array, start, plan, RunContext(callback=seen.append))
    sizes = [r["batch_size"] for r in result.history]
    assert sizes == [8, 8, 16, 16, 32, 32, 64, 64]
    assert result.stop_reason == "converged"
    first = seen[0]
    # iteration 1 by hand: the batch's mean, its SSE to the start center, sigma_C / p
    index = np.sort(result.batch.content()[0])
    order = NestedBatch(array, 7, nested_groups.make_groups(start, "elkan", 1))
    rows = X[_first_rows(order, 8)]
    mean = rows.mean(axis=0)
    sse = ((rows - start[0]) ** 2).sum()
    p = np.linalg.norm(mean - start[0])
    assert first["inertia"] == pytest.approx(sse)
    assert first["doubling_ratio"] == pytest.approx(np.sqrt(sse / (8 * 7)) / p)
    np.testing.assert_allclose(first["_centers"][0], mean)
    np.testing.assert_array_equal(index, np.arange(64))
    # a tiny rho doubles at every iteration
    fast = nested_minibatch(
        array,
        start,
        nested_plan(array, 1, seed=7, initial_batch_size=8, rho=1e-12, doubling_quantile=0.0, bounds="none"),
    )
    assert [r["batch_size"] for r in fast.history][:4] == [8, 16, 32, 64]


def _first_rows(batch, size):
    """Global indices of the first ``size`` rows of a batch's shuffled order."""
    rows = []
    for chunk, a, b in batch._pieces(0, size):
        offset = int(batch.offsets[chunk])
        order = chunk_order(batch.row_key, offset, int(batch.chunk_sizes[chunk]))
        rows.extend(offset + order[a:b])
    return np.array(rows)


# -- the batch on the workers: nesting, one sample one vote, balance ---------------------------------------------
def test_one_sample_one_vote_invariants_after_every_iteration():
    X, _, _ = make_blobs(n=5000, d=5, k=7, spread=2.0, seed=11, dtype=np.float32)
    array = da.from_array(X, chunks=(700, 5))
    start = X[:7].copy()
    snapshots = []

    def check(record):
        batch = record["_batch"]
        index, labels, dist2, lower = batch.content()
        snapshots.append(np.sort(index))
        previous = start if len(snapshots) == 1 else check.centers
        # every sample of the batch once, assigned exactly to the centers of this iteration
        assert len(np.unique(index)) == len(index) == record["batch_size"]
        ref_labels, ref_d2, _ = ref_assign(X[index], previous)
        np.testing.assert_array_equal(labels, ref_labels)
        np.testing.assert_allclose(dist2, ref_d2, rtol=1e-12)
        # S, v and SSE hold each active sample's current assignment exactly once
        sums, counts, sse = record["_sums"], record["_counts"], record["_sse"]
        ref_sums, ref_counts, ref_sse = ref_deltas(X[index], np.empty(0, int), np.empty(0), labels, dist2, 7)
        np.testing.assert_allclose(sums, ref_sums, rtol=1e-9, atol=1e-6)
        np.testing.assert_array_equal(counts, ref_counts)
        np.testing.assert_allclose(sse, ref_sse, rtol=1e-9, atol=1e-6)
        assert record["energy"] == pytest.approx(ref_sse.sum() / len(index))
        check.centers = record["_centers"]

    plan = nested_plan(array, len(start), seed=3, initial_batch_size=300, rho=5.0, bounds="yinyang", min_block_rows=200)
    result = nested_minibatch(array, start, plan, RunContext(callback=check))
    assert len(snapshots) == result.n_iter >= 5
    for smaller, larger in zip(snapshots, snapshots[1:]):
        assert np.isin(smaller, larger).all()  # nested batches
    assert result.history[-1]["batch_size"] == 5000
    assert result.stop_reason == "converged"
    # converged at the full batch: the final inertia is exact
    _, ref_d2, _ = ref_assign(X, result.centers)
    assert result.inertia == pytest.approx(ref_d2.sum(), rel=1e-9)


def test_state_blocks_hold_equal_shares_of_every_growth():
    X, _, _ = make_blobs(n=6000, d=3, k=4, seed=2)
    array = da.from_array(X, chunks=(1000, 3))  # 6 chunks, 6 lanes
    groups = nested_groups.make_groups(X[:4], "hamerly", 1)
    batch = NestedBatch(array, 5, groups, min_block_rows=256)
    centers = X[:4]
    for size in (600, 1200, 2400, 4800, 6000):
        batch.step(centers, np.zeros(4), size)
        sizes = batch.block_sizes()
        assert sum(sizes) == size and max(sizes) - min(sizes) <= 2 * len(sizes)
        index = batch.content()[0]
        # the first rows mix every lane (chunk) from the start
        per_chunk = np.bincount(index // 1000, minlength=6)
        assert per_chunk.min() >= size // 6 - 1
    assert len(sizes) == 6  # split up to one state block per data block


# -- bounds never change a result; schedulers, workers and chunking ------------------------------------------------
@pytest.mark.slow
def test_labels_with_bounds_are_the_labels_without_them():
    X, _, _ = make_blobs(n=4000, d=6, k=30, spread=3.0, seed=5, dtype=np.float32)
    runs = {}
    for bounds in ("none", "hamerly", "yinyang", "elkan", "auto"):
        model = NestedMiniBatchKMeans(
            30, init=X[:30], initial_batch_size=500, bounds=bounds, random_state=1, chunk_rows=800, tol=0.0
        ).fit(X)
        runs[bounds] = model
    reference = runs["none"]
    for model in runs.values():
        np.testing.assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
        np.testing.assert_array_equal(model.labels_, reference.labels_)
        assert [h["changed"] for h in model.history_] == [h["changed"] for h in reference.history_]
        assert [h["batch_size"] for h in model.history_] == [h["batch_size"] for h in reference.history_]
    computed = {b: sum(h["distances_computed"] for h in m.history_) for b, m in runs.items()}
    skipped = {b: sum(h["distances_skipped"] for h in m.history_) for b, m in runs.items()}
    assert skipped["none"] == 0
    assert computed["elkan"] < computed["yinyang"] < computed["none"]
    assert computed["hamerly"] < computed["none"]
    assert runs["auto"].bounds_ == "yinyang" and runs["elkan"].bounds_ == "elkan"


@pytest.mark.slow
def test_same_seed_same_result_on_every_scheduler_and_worker_count(cluster_client):
    """The same fit on the synchronous and threaded schedulers and on worker processes, with the batch stepped on
    the workers from the start (``driver_rows=0``), on the driver until it passes 2,000 rows, or on the driver
    throughout (``"auto"`` at this size): the same centers, counters and inertia to the last bit."""
    X, _, _ = make_blobs(n=6000, d=6, k=8, spread=2.5, seed=4, dtype=np.float32)
    params = dict(n_clusters=8, random_state=123, initial_batch_size=700, max_iter=60, init="k-means++")
    counters = ("batch_size", "changed", "distances_computed", "inertia")
    for chunks in (900, 1700):
        array = da.from_array(X, chunks=(chunks, 6))
        with dask.config.set(scheduler="sync"):
            sync = NestedMiniBatchKMeans(**params).fit(array)
        with dask.config.set(scheduler="threads"):
            threads = NestedMiniBatchKMeans(**params).fit(array)
        distributed = {
            rows: NestedMiniBatchKMeans(**params, driver_rows=rows, client=cluster_client).fit(array)
            for rows in (0, 2000, "auto")
        }
        sizes = [h["batch_size"] for h in sync.history_]
        assert sizes[0] <= 2000 < sizes[-1] == 6000  # the middle setting moves the batch to the workers mid-fit
        for other in (threads, *distributed.values()):
            np.testing.assert_array_equal(other.cluster_centers_, sync.cluster_centers_)
            assert [[h[c] for c in counters] for h in other.history_] == [
                [h[c] for c in counters] for h in sync.history_
            ]
            assert other.inertia_ == sync.inertia_
        assert sync.stop_reason_ in ("converged", "tol")
        for model in distributed.values():
            np.testing.assert_array_equal(np.asarray(model.labels_), np.asarray(sync.labels_))


def test_result_is_close_to_lloyd_on_blobs_and_models_round_trip(tmp_path):
    X, labels, centers = make_blobs(n=5000, d=4, k=6, spread=0.4, seed=8)
    model = NestedMiniBatchKMeans(6, random_state=0, initial_batch_size=500).fit(X)
    from sklearn.metrics import adjusted_rand_score

    assert adjusted_rand_score(labels, model.labels_) == 1.0
    assert model.stop_reason_ in ("converged", "tol")
    np.testing.assert_array_equal(model.predict(X), model.labels_)
    assert model.score(X) == pytest.approx(-model.inertia_)
    assert model.history_[-1]["batch_size"] == 5000 and model.history_[-1]["new_samples"] == 0
    assert model.history_[-1]["passes"] >= 1.0
    model.save(tmp_path / "m.zarr")
    back = load(tmp_path / "m.zarr")
    assert isinstance(back, NestedMiniBatchKMeans) and back.bounds_ == model.bounds_
    np.testing.assert_array_equal(back.predict(X), model.labels_)
    assert make_estimator("nmbatch", n_clusters=3).n_clusters == 3


def test_stops_at_max_iter_and_max_time():
    X, _, _ = make_blobs(n=3000, d=4, k=5, spread=3.0, seed=9)
    capped = NestedMiniBatchKMeans(5, random_state=0, max_iter=3, initial_batch_size=200).fit(X)
    assert capped.stop_reason_ == "max_iter" and capped.n_iter_ == 3
    assert capped.inertia_ == pytest.approx(-capped.score(X))
    timed = NestedMiniBatchKMeans(5, random_state=0, max_time=1e-6, initial_batch_size=200).fit(X)
    # the budget ended during the seeding: the first step is cut, and the fit keeps the seeds
    assert timed.stop_reason_ == "max_time" and timed.n_iter_ == 0 and timed.history_ == []
    assert timed.inertia_ == pytest.approx(-timed.score(X))


@pytest.mark.slow
def test_real_descriptors_bounds_skip_most_distances():
    path = SHARED_DATA / "cifar_dsift.npz"
    if not path.exists():
        pytest.skip(f"{path} is not present")
    X = np.load(path)["X"][:40_000].astype(np.float32)
    init = X[np.random.default_rng(0).choice(len(X), 200, replace=False)]
    model = NestedMiniBatchKMeans(200, init=init, random_state=0, max_iter=25, rho=1.0, initial_batch_size=4000).fit(X)
    computed = sum(h["distances_computed"] for h in model.history_)
    skipped = sum(h["distances_skipped"] for h in model.history_)
    assert skipped > computed
    from sklearn.cluster import KMeans as SKKMeans

    reference = SKKMeans(200, init=init, n_init=1, max_iter=10).fit(X)
    assert model.history_[-1]["batch_size"] == len(X)
    assert model.inertia_ < 1.02 * reference.inertia_


# -- out of core ---------------------------------------------------------------------------------------------
def _bytes_spilled(dask_worker):
    metrics = getattr(dask_worker.data, "cumulative_metrics", {})
    return sum(value for (label, unit), value in metrics.items() if label == "disk-write" and unit == "bytes")


@pytest.mark.slow
def test_out_of_core_under_a_worker_memory_limit(tmp_path):
    from distributed import Client, LocalCluster

    n, d, k = 300_000, 128, 4
    rng = np.random.default_rng(0)
    truth = rng.uniform(-20, 20, size=(k, d)).astype(np.float32)
    store = zarr.open_array(str(tmp_path / "big.zarr"), mode="w", shape=(n, d), chunks=(25_000, d), dtype="f4")
    for start in range(0, n, 25_000):
        labels = rng.integers(0, k, 25_000)
        store[start : start + 25_000] = truth[labels] + rng.standard_normal((25_000, d), dtype=np.float32)
    data_bytes = n * d * 4
    limit = 100 * 2**20
    assert data_bytes > 1.4 * limit
    # the limit is below the data (and below a worker's own footprint): the workers must spill the batch to disk
    config = {"distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}
    with dask.config.set(config):
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=limit
        )
        client = Client(cluster, set_as_default=False)
        try:
            # every step on the workers (the driver would hold this batch); their free memory holds no cached rows
            model = NestedMiniBatchKMeans(
                k,
                init=truth + 0.5,
                random_state=0,
                client=client,
                chunk_rows=25_000,
                initial_batch_size=20_000,
                driver_rows=0,
            ).fit(str(tmp_path / "big.zarr"))
            written = client.run(_bytes_spilled)
        finally:
            client.close()
            cluster.close()
    assert model.stop_reason_ == "converged"
    assert model.history_[-1]["batch_size"] == n
    assert np.abs(np.sort(model.cluster_centers_, axis=0) - np.sort(truth, axis=0)).max() < 0.05
    # a worker's own footprint is above its limit, so everything it holds goes to its disk: the batch's state (its
    # rows re-read from the store each step, their labels and bounds kept), all n rows of it at the end
    assert (model.batch_rows_, model.fit_plan_.batch_rows) == ("reread", "reread")
    state = n * state_bytes_per_row(d, 4 if model.bounds_ == "elkan" else 1, 4, cached=False)
    assert sum(written.values()) >= state, (written, state)


# -- bad parameters ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params, message",
    [
        ({"rho": 0.0}, "rho must be > 0"),
        ({"rho": -1.0}, "rho must be > 0"),
        ({"doubling_quantile": -0.1}, "doubling_quantile must be >= 0"),
        ({"doubling_quantile": 1.5}, "doubling_quantile must be <= 1"),
        ({"doubling_quantile": "median"}, "doubling_quantile must be a number"),
        ({"initial_batch_size": 0}, "initial_batch_size must be >= 1"),
        ({"initial_batch_size": -5}, "initial_batch_size must be >= 1"),
        ({"bounds": "kd-tree"}, "bounds must be one of"),
        ({"max_iter": 0}, "max_iter must be >= 1"),
        ({"tol": -1.0}, "tol must be >= 0"),
        ({"max_time": 0}, "max_time must be > 0"),
        ({"driver_rows": -1}, "driver_rows must be >= 0"),
        ({"driver_rows": "all"}, 'driver_rows must be "auto" or an integer >= 0'),
        ({"driver_rows": 2.5}, "driver_rows must be an integer"),
    ],
)
def test_bad_parameters_fail_before_any_work(params, message):
    never_computed = da.random.random((10**10, 4), chunks=(10**6, 4))
    with pytest.raises(InvalidParameterError, match=message):
        NestedMiniBatchKMeans(3, **params).fit(never_computed)


# -- sample weights --------------------------------------------------------------------------------------------
def test_weighted_sums_hold_each_sample_once_with_its_weight():
    X, _, _ = make_blobs(n=4000, d=4, k=6, spread=2.0, seed=12, dtype=np.float32)
    weights = np.random.default_rng(1).random(4000) * 3
    weights[::7] = 0.0
    array = da.from_array(X, chunks=(600, 4))
    start = X[:6].copy()

    def check(record):
        index, labels, dist2, _ = record["_batch"].content()
        w = weights[index]
        ref_sums, ref_counts, ref_sse = ref_deltas(X[index], np.empty(0, int), np.empty(0), labels, dist2, 6, w)
        np.testing.assert_allclose(record["_sums"], ref_sums, rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(record["_counts"], ref_counts, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(record["_sse"], ref_sse, rtol=1e-9, atol=1e-6)
        np.testing.assert_array_equal(record["_members"], np.bincount(labels, minlength=6))
        assert record["energy"] == pytest.approx(ref_sse.sum() / w.sum())

    context = RunContext(callback=check, weights=da.from_array(weights, chunks=(600,)))
    plan = nested_plan(
        array, len(start), seed=4, initial_batch_size=400, bounds="yinyang", min_block_rows=200, keep_batch=True
    )
    result = nested_minibatch(array, start, plan, context)
    assert result.stop_reason == "converged" and result.history[-1]["batch_size"] == 4000
    # converged: every center is the weighted mean of its cluster
    index, labels, _, _ = result.batch.content()
    for j in range(6):
        mine = labels == j
        expected = np.average(X[index[mine]].astype(np.float64), axis=0, weights=weights[index[mine]])
        np.testing.assert_allclose(result.centers[j], expected, rtol=1e-5)


def test_unit_weights_give_the_unweighted_fit_bit_for_bit():
    X, _, _ = make_blobs(n=3000, d=3, k=5, seed=13, dtype=np.float32)
    plain = NestedMiniBatchKMeans(5, init=X[:5], initial_batch_size=500, random_state=0, chunk_rows=500).fit(X)
    unit = NestedMiniBatchKMeans(5, init=X[:5], initial_batch_size=500, random_state=0, chunk_rows=500).fit(
        X, sample_weight=np.ones(3000)
    )
    np.testing.assert_array_equal(plain.cluster_centers_, unit.cluster_centers_)
    assert [r["energy"] for r in plain.history_] == [r["energy"] for r in unit.history_]
    assert plain.inertia_ == unit.inertia_


def test_fits_a_lightweight_coreset():
    from daskmeans import lightweight_coreset

    X, _, truth = make_blobs(n=20000, d=4, k=5, spread=0.3, seed=14)
    points, weights = lightweight_coreset(X, 2000, random_state=0)
    model = NestedMiniBatchKMeans(5, random_state=0, initial_batch_size=500).fit(points, sample_weight=weights)
    found = np.sort(model.cluster_centers_, axis=0)
    np.testing.assert_allclose(found, np.sort(truth, axis=0), atol=0.1)
    assert model.inertia_ == pytest.approx(-model.score(points, sample_weight=weights), rel=1e-6)


@pytest.mark.parametrize("name", ["nmbatch", "minibatch"])
def test_center_snapshots_for_the_benchmark(name):
    from daskmeans.registry import make_estimator

    X = np.random.default_rng(0).normal(size=(3000, 4)).astype(np.float32)
    model = make_estimator(name, n_clusters=5, random_state=0, snapshot_centers=True, max_iter=5).fit(X)
    snaps = model.center_snapshots_
    assert snaps[0]["iteration"] == 0 and len(snaps) >= 2
    times = [s["wall_time"] for s in snaps]
    assert times == sorted(times)
    np.testing.assert_array_equal(snaps[-1]["centers"], model.cluster_centers_)
    with pytest.raises(InvalidParameterError, match="snapshot_centers"):
        make_estimator(name, n_clusters=5, snapshot_centers="yes").fit(X)


def _steps_with_running_sums(batch, centers, sizes):
    """Step ``batch`` to each size in turn, moving the centers to the running sums' means as nmbatch does; the steps'
    deltas and the last centers."""
    results = []
    shift = np.zeros(centers.shape[0])
    sums, counts = 0.0, 0.0
    for size in sizes:
        deltas = batch.step(centers, shift, size)
        results.append(deltas)
        sums, counts = sums + deltas[0], counts + deltas[1]
        new = centers_from_sums(sums, counts, centers).astype(np.float32)
        shift = np.sqrt(((new.astype(np.float64) - centers) ** 2).sum(axis=1)) * (1 + 1e-9)
        centers = new
    return results, centers


@pytest.mark.slow
@pytest.mark.parametrize("on_cluster", [False, True])
def test_a_batch_of_uint8_rows_keeps_them_as_stored_and_steps_as_their_float32_values(
    on_cluster, cluster_client, tmp_path
):
    """A nested batch over uint8 data keeps its rows as uint8 (a quarter of float32's bytes), on threads and on
    worker processes, with the sums, counts, SSE and counters of the same batch over the float32 values; its
    checkpoint keeps them as uint8 and restores them (a checkpoint holding float32 rows, as written before, too)."""
    from daskmeans.engine.client import compute_now
    from daskmeans.engine.graph import map_blocks_delayed
    from daskmeans.storage.io import open_input

    client = cluster_client if on_cluster else None
    rng = np.random.default_rng(21)
    X8 = rng.integers(0, 256, size=(3000, 16)).astype(np.uint8)
    centers = X8[rng.choice(3000, 12, replace=False)].astype(np.float32)
    groups = nested_groups.make_groups(centers, "yinyang", 3)
    batches, steps = {}, {}
    for name, X in (("uint8", X8), ("float32", X8.astype(np.float32))):
        batches[name] = NestedBatch(open_input(X, chunk_rows=500).array, 5, groups, client=client)
        steps[name], final_centers = _steps_with_running_sums(batches[name], centers, (1000, 2500, 3000, 3000))
    for a, b in zip(steps["uint8"], steps["float32"]):
        for x, y in zip(a[:4], b[:4]):
            np.testing.assert_array_equal(x, y)
        assert a[4] == b[4]
    assert batches["uint8"].rows_dtype == np.uint8

    def rows_dtypes(batch):
        parts = map_blocks_delayed(_rows_dtype, "test-rows-dtype", [[o] for o in batch.outputs])
        return set(compute_now(*parts, client=client))

    assert rows_dtypes(batches["uint8"]) == {"|u1"} and rows_dtypes(batches["float32"]) == {"<f4"}
    written = {}
    for name, batch in batches.items():
        written[name] = batch.write_checkpoint(str(tmp_path / name / "blocks"), str(tmp_path / name / "layout"))
    expected = batches["uint8"].step(final_centers, np.zeros(12), 3000)
    for name, batch in batches.items():
        restored = NestedBatch(open_input(X8, chunk_rows=500).array, 5, groups, client=client)
        restored.restore_checkpoint(
            written[name],
            str(tmp_path / name / "blocks"),
            str(tmp_path / name / "layout"),
            batch.layout_id,
            batch.size,
            batch.rows_read,
        )
        assert rows_dtypes(restored) == {"|u1" if name == "uint8" else "<f4"}
        again = restored.step(final_centers, np.zeros(12), 3000)
        for x, y in zip(again[:4], expected[:4]):
            np.testing.assert_array_equal(x, y)
        assert again[4] == expected[4]
    # rows of any other dtype are refused as damaged, before any step
    from daskmeans.exceptions import CheckpointError
    from daskmeans.storage.zarr_safe import read_group, write_group

    layout = str(tmp_path / "uint8" / "layout" / "00000")
    arrays = read_group(layout, ["rows", "index", "weights"])
    write_group(layout, {**arrays, "rows": arrays["rows"].astype(np.int32)})
    restored = NestedBatch(open_input(X8, chunk_rows=500).array, 5, groups, client=client)
    with pytest.raises(CheckpointError, match="damaged: rows is int32"):
        restored.restore_checkpoint(
            written["uint8"],
            str(tmp_path / "uint8" / "blocks"),
            str(tmp_path / "uint8" / "layout"),
            batches["uint8"].layout_id,
            batches["uint8"].size,
            batches["uint8"].rows_read,
        )


def _rows_dtype(output):
    return output.block.rows.dtype.str
