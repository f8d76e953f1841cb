"""The k-means++ choice kernels and the row hashes against plain NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

from daskmeans.kernels.plusplus_choice import candidate_potentials, choose_candidate, choose_in_batch
from daskmeans.kernels.row_hashes import row_hashes


def expanded(rows, candidates):
    """NumPy's expansion: ``((-2 c.x) + |c|^2) + |x|^2`` in the rows' dtype, clipped at zero."""
    squares = np.einsum("ij,ij->i", rows, rows)
    d2 = (rows[candidates] * rows.dtype.type(-2)) @ rows.T
    d2 += squares[candidates][:, None]
    d2 += squares[None, :]
    return np.maximum(d2, 0)


def problem(dtype, seed=0, m=500, d=6, t=5):
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(m, d)).astype(dtype)
    candidates = rng.choice(m, t, replace=False)
    closest = (((rows - rows[rng.integers(m)]) ** 2).sum(1) * rng.uniform(0.2, 1.0, m)).astype(dtype)
    squares = np.einsum("ij,ij->i", rows, rows)
    return rows, candidates, closest, squares, (rows[candidates] * rows.dtype.type(-2)) @ rows.T


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_potentials_and_choice_match_numpy(dtype):
    rows, candidates, closest, squares, dots = problem(dtype)
    reference = np.minimum(expanded(rows, candidates), closest[None, :])
    potentials = reference.sum(axis=1, dtype=np.float64)
    np.testing.assert_allclose(candidate_potentials(dots, squares, candidates, closest), potentials, rtol=1e-5)
    updated = closest.copy()
    best = choose_candidate(dots, squares, candidates, updated)
    assert best == int(np.argmin(potentials))
    expected = reference[best].copy()
    expected[candidates[best]] = 0
    np.testing.assert_array_equal(updated, expected)


def test_the_first_center_sets_every_distance():
    rows, _, _, squares, _ = problem(np.float32)
    first = np.array([7])
    closest = np.full(len(rows), np.inf, dtype=np.float32)
    choose_candidate((rows[first] * np.float32(-2)) @ rows.T, squares, first, closest)
    expected = expanded(rows, first)[0]
    expected[7] = 0
    np.testing.assert_array_equal(closest, expected)


def reference_batch(rows, candidates, keep, drawn_from, closest, chosen):
    """The batch loop plainly: each center's candidates thinned, stop at the first not all kept."""
    trials = len(candidates) // len(chosen)
    for j in range(len(chosen)):
        own = candidates[j * trials : (j + 1) * trials]
        if j > 0 and not np.all(keep[(j - 1) * trials : j * trials] * drawn_from[own] < closest[own]):
            return j
        options = np.minimum(expanded(rows, own), closest[None, :])
        best = int(np.argmin(options.sum(axis=1, dtype=np.float64)))
        chosen[j] = own[best]
        closest[:] = options[best]
        closest[chosen[j]] = 0
    return len(chosen)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_batch_is_chosen_as_the_plain_loop_chooses_it(seed):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 20, size=(400, 3)).astype(np.float32)  # distances exact in float32
    squares = np.einsum("ij,ij->i", rows, rows)
    drawn_from = ((rows - rows[0]) ** 2).sum(1)
    drawn_from[0] = 0
    n_centers, trials = 6, 4
    candidates = rng.choice(400, n_centers * trials, p=drawn_from / drawn_from.sum())
    keep = rng.random((n_centers - 1) * trials)
    dots = (rows[candidates] * np.float32(-2)) @ rows.T
    closest, expected_closest = drawn_from.copy(), drawn_from.copy()
    chosen, expected = np.full(n_centers, -1), np.full(n_centers, -1)
    stop = choose_in_batch(dots, candidates, keep, drawn_from, squares, closest, 0, chosen)
    assert stop == reference_batch(rows, candidates, keep, drawn_from, expected_closest, expected)
    np.testing.assert_array_equal(chosen, expected)
    np.testing.assert_array_equal(closest, expected_closest)


def test_a_batch_stops_at_the_first_center_whose_candidates_are_thinned():
    rows = np.arange(12, dtype=np.float32).reshape(-1, 1)
    squares = rows[:, 0] ** 2
    drawn_from = squares.copy()  # a center at 0
    candidates = np.array([11, 10, 9, 4])  # two centers of two candidates; the first picks 10
    dots = (rows[candidates] * np.float32(-2)) @ rows.T
    keep = np.array([0.99, 0.0])  # 9 now lies 1 from 10: 0.99 * 81 < 1 fails
    closest, chosen = drawn_from.copy(), np.full(2, -1)
    assert choose_in_batch(dots, candidates, keep, drawn_from, squares, closest, 0, chosen) == 1
    assert chosen.tolist() == [10, -1]
    chosen[1] = 4  # the caller chooses the thinned center; the batch goes on after it
    assert choose_in_batch(dots, candidates, keep, drawn_from, squares, closest, 2, chosen) == 2


def reference_hashes(rows):
    """The hash plainly: zero-padded 8-byte words times the fixed odd multipliers, summed modulo 2**64."""
    values = rows + rows.dtype.type(0) if rows.dtype.kind == "f" else rows
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(len(rows), -1)
    padded = np.zeros((len(rows), -(-raw.shape[1] // 8) * 8), dtype=np.uint8)
    padded[:, : raw.shape[1]] = raw
    words = padded.view(np.uint64)
    multipliers = np.random.default_rng(0x5EED).integers(1, 2**63, size=words.shape[1], dtype=np.uint64) | 1
    with np.errstate(over="ignore"):
        return (words * multipliers).sum(axis=1, dtype=np.uint64)


@pytest.mark.parametrize(
    "rows",
    [
        np.random.default_rng(0).normal(size=(50, 16)).astype(np.float32),  # whole words
        np.random.default_rng(1).normal(size=(50, 3)),  # float64
        np.random.default_rng(2).integers(0, 256, size=(50, 13)).astype(np.uint8),  # padded
        np.array([[-0.0, 1.0], [0.0, 1.0]], dtype=np.float32),
    ],
)
def test_row_hashes_match_numpy(rows):
    hashes = row_hashes(rows)
    np.testing.assert_array_equal(hashes, reference_hashes(rows))
    if rows.shape == (2, 2):
        assert hashes[0] == hashes[1], "-0.0 and 0.0 hash equal"
