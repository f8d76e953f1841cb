"""The group-at-a-time dot products of a revisit (kernels/group_dots.py) against NumPy, and the revisit that uses
them (kernels/revisit.py ``_revisit_by_groups``) against the one-dot-product-at-a-time revisit."""

import numpy as np
import pytest

from daskmeans import config
from daskmeans.algorithms.lloyd import center_displacement
from daskmeans.kernels import exact_assign as ka
from daskmeans.kernels import revisit as kr
from daskmeans.kernels.group_dots import LANES, ROWS_PER_STEP, rows_dots, transposed_groups
from daskmeans.kernels.nested_groups import CenterGroups, make_groups
from daskmeans.kernels.packed_bounds import unpack_bounds


def reference_rows_dots(rows, pair_row, start, stop, centers, slot_center, chunk):
    """``rows_dots`` in NumPy, float64: the dot product of each pair's row with each center of the chunk (0 for an
    empty lane)."""
    out = np.zeros((stop - start, LANES))
    lanes = slot_center[chunk * LANES : (chunk + 1) * LANES]
    for q in range(start, stop):
        for lane, j in enumerate(lanes):
            if j >= 0:
                out[q - start, lane] = rows[pair_row[q]].astype(np.float64) @ centers[j].astype(np.float64)
    return out


@pytest.mark.parametrize("d", [1, 3, 4, 7, 128, 131])
@pytest.mark.parametrize("group_size", [3, LANES, LANES + 5])
def test_rows_dots_are_the_dot_products_of_each_row_with_the_chunks_centers(d, group_size):
    rng = np.random.default_rng(d + group_size)
    k = 3 * group_size
    centers = rng.standard_normal((k, d)).astype(np.float32)
    groups = CenterGroups(rng.permutation(np.arange(k) % 3), "yinyang")
    transposed, slot_center, chunks_per_group = transposed_groups(centers, groups)
    assert chunks_per_group == -(-group_size // LANES)
    rows = rng.standard_normal((40, d)).astype(np.float32)
    # pairs in any row order, a row repeated; ranges of every length around the step of ROWS_PER_STEP rows
    pair_row = rng.integers(0, 40, size=30).astype(np.int64)
    for start, stop in [(0, 30), (0, 1), (3, 3 + ROWS_PER_STEP), (5, 5 + ROWS_PER_STEP + 3), (29, 30), (7, 7)]:
        for chunk in range(transposed.shape[0]):
            out = np.full(30 * LANES, np.nan, dtype=np.float32)
            rows_dots(rows, pair_row, start, stop, transposed, chunk, out)
            got = out.reshape(30, LANES)[start:stop]
            expected = reference_rows_dots(rows, pair_row, start, stop, centers, slot_center, chunk)
            # float32 products in some order: within gamma_d sum |x_f c_f|
            scale = np.abs(rows[pair_row[start:stop]]).astype(np.float64) @ np.abs(transposed[chunk].astype(np.float64))
            np.testing.assert_array_less(np.abs(got - expected), (d + 2) * 2.0**-24 * scale + 1e-30)
            assert np.all(np.isnan(out.reshape(30, LANES)[:start])) and np.all(np.isnan(out.reshape(30, LANES)[stop:]))


def test_transposed_groups_put_each_groups_centers_side_by_side_in_member_order():
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((45, 6)).astype(np.float32)
    groups = make_groups(centers, "yinyang", 2)  # groups of 22 and 23
    transposed, slot_center, chunks_per_group = transposed_groups(centers, groups)
    chunks = -(-23 // LANES)  # the machine's vector width sets the lanes: 8 with AVX2, 16 with AVX-512
    assert chunks_per_group == chunks and transposed.shape == (2 * chunks, 6, LANES)
    for g in range(2):
        members = groups.members[groups.ptr[g] : groups.ptr[g + 1]]
        lanes = slot_center[g * chunks * LANES : (g + 1) * chunks * LANES]
        np.testing.assert_array_equal(lanes[: members.size], members)
        assert np.all(lanes[members.size :] == -1)
        block = np.concatenate([transposed[g * chunks + c] for c in range(chunks)], axis=1).T
        np.testing.assert_array_equal(block[: members.size], centers[members])
        assert np.all(block[members.size :] == 0)


def moved_problem(rows_as, k, n_groups, move, seed):
    rng = np.random.default_rng(seed)
    X8 = rng.integers(0, 256, size=(900, 12)).astype(np.uint8)
    X = X8.astype(np.float32)
    C = X[rng.choice(900, k, replace=False)] + np.float32(0.25)
    C[5] = C[7]  # a duplicate center: exact ties
    groups = make_groups(C, "yinyang", n_groups)
    labels, dist2, lower, _ = ka.assign_with_bounds(X, C, groups)
    C2 = (C + move * rng.standard_normal(C.shape)).astype(np.float32)
    C2[3] = C2[11]
    shift = center_displacement(C2, C) * (1 + 1e-12)
    return (X8 if rows_as == "uint8" else X), X, C2, groups, labels, dist2, lower, shift


@pytest.mark.parametrize("rows_as", ["float32", "uint8"])
@pytest.mark.parametrize("k, n_groups", [(40, 5), (60, 2)])  # groups of 8; groups of 30 (two chunks)
@pytest.mark.parametrize("move", [0.5, 4.0, 30.0])  # most bounds hold; many rows move; most groups fail
@pytest.mark.parametrize("block_rows", [None, 32, 100])
def test_revisit_by_groups_gives_the_labels_of_one_dot_product_at_a_time(
    rows_as, k, n_groups, move, block_rows, monkeypatch
):
    """The same labels and exact distances as the revisit that scores one candidate at a time; bounds valid (their
    rounding may differ, as the dot products' order does), blocks of rows of any size."""
    X, X32, C2, groups, labels, dist2, lower, shift = moved_problem(rows_as, k, n_groups, move, seed=k + int(move))
    assert kr.scores_by_groups(np.float32, groups)
    if block_rows is not None:
        monkeypatch.setattr(config, "REVISIT_BLOCK_ROWS", block_rows)
    # every row scored from the groups (none reassigned against all centers): small k would send most rows there
    by_groups = kr.revisit_with_bounds(
        X, C2, labels, lower, shift, groups, dist2=dist2, probe_rows=64, scalar_limit=10**6, give_up=1.0
    )
    monkeypatch.setattr(kr, "scores_by_groups", lambda dtype, groups: False)
    one_by_one = kr.revisit_with_bounds(
        X, C2, labels, lower, shift, groups, dist2=dist2, probe_rows=64, scalar_limit=10**6, give_up=1.0
    )
    np.testing.assert_array_equal(by_groups[0], one_by_one[0])
    np.testing.assert_array_equal(by_groups[1], one_by_one[1])
    d2 = ((X32[:, None, :].astype(np.float64) - C2[None].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_array_equal(by_groups[0], np.argmin(d2, axis=1))
    others = np.sqrt(d2)
    others[np.arange(len(X)), by_groups[0]] = np.inf
    minima = np.stack([others[:, groups.group_of == g].min(axis=1) for g in range(groups.n_groups)], axis=1)
    assert np.all(unpack_bounds(by_groups[2]) <= minima)
    assert np.mean(by_groups[2] == one_by_one[2]) > 0.95


def test_revisit_by_groups_keeps_bounds_valid_over_many_moves(monkeypatch):
    monkeypatch.setattr(config, "REVISIT_BLOCK_ROWS", 64)
    _, X, C, groups, _, _, _, _ = moved_problem("float32", 40, 5, 0.0, seed=9)
    labels, _, lower, _ = ka.assign_with_bounds(X, C, groups)
    rng = np.random.default_rng(3)
    computed = []
    for _ in range(20):
        C2 = (C + 0.3 * rng.standard_normal(C.shape)).astype(np.float32)
        shift = center_displacement(C2, C) * (1 + 1e-12)
        labels, _, lower, n = kr.revisit_with_bounds(X, C2, labels, lower, shift, groups, scalar_limit=10**6)
        computed.append(n)
        C = C2
        d2 = ((X[:, None, :].astype(np.float64) - C[None].astype(np.float64)) ** 2).sum(-1)
        np.testing.assert_array_equal(labels, np.argmin(d2, axis=1))
        others = np.sqrt(d2)
        others[np.arange(len(X)), labels] = np.inf
        minima = np.stack([others[:, groups.group_of == g].min(axis=1) for g in range(groups.n_groups)], axis=1)
        assert np.all(unpack_bounds(lower) <= minima)
    assert max(computed) < 0.5 * len(X) * C.shape[0]  # small moves: the bounds rule out most centers


def test_revisit_scores_by_groups_only_float32_groups_that_fill_the_lanes():
    centers = np.random.default_rng(0).standard_normal((40, 6)).astype(np.float32)
    yinyang = make_groups(centers, "yinyang", 40 // (LANES // 2))
    assert kr.scores_by_groups(np.float32, yinyang)
    assert not kr.scores_by_groups(np.float64, yinyang)
    assert not kr.scores_by_groups(np.float32, make_groups(centers, "elkan", 40))  # one center a group
    assert not kr.scores_by_groups(np.float32, make_groups(centers, "hamerly", 1))
