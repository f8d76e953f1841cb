"""Greedy k-means++'s choice of one center among its candidates, from the candidates' dot products with every row.

Greedy k-means++ keeps, among a center's candidates, the one whose squared distances (each row's
``min(closest, d2)``) sum to the smallest potential. Written with NumPy, that is the expansion
``|c|^2 + |x|^2 - 2 c.x`` of every candidate against every row, clipped at zero, its minimum with ``closest``
and a sum per candidate: five passes over a ``(candidates x rows)`` array, each as slow as the GEMM that made the
dot products. Here one loop reads the dot products once per candidate and once more for the winner, and writes
nothing but ``closest``.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, fastmath={"reassoc", "nsz", "contract"})
def candidate_potentials(scaled_dots, squares, candidates, closest):
    """Each candidate's potential: the sum over the rows of ``min(closest, its squared distance)``, in float64.

    The squared distance of candidate ``c`` to row ``i`` is ``scaled_dots[j, i] + squares[c] + squares[i]``
    clipped at zero, added in the arrays' dtype in any order (the loop is vectorized, and its sum too).
    """
    n_candidates, m = scaled_dots.shape
    potentials = np.empty(n_candidates, dtype=np.float64)
    for j in range(n_candidates):
        own = squares[candidates[j]]
        total = 0.0
        for i in range(m):
            total += max(min(scaled_dots[j, i] + own + squares[i], closest[i]), 0.0)
        potentials[j] = total
    return potentials


@numba.njit(cache=True, nogil=True)
def choose_candidate(scaled_dots, squares, candidates, closest):
    """Index (into ``candidates``) of the candidate that leaves the smallest potential; ``closest`` lowered to it.

    The potentials are :func:`candidate_potentials`'; the first of equal potentials wins. ``closest`` becomes the
    winner's squared distances (``(scaled_dots[best, i] + squares[c]) + squares[i]``, clipped at zero) where they
    are smaller, and exactly 0 at the winner's own row.

    Parameters
    ----------
    scaled_dots : ndarray (t, m), float32 or float64
        ``-2 * candidate_rows @ rows.T``: the scaling by -2 is exact, so its GEMM gives the same values as
        scaling its product.
    squares : ndarray (m,), same dtype
        The rows' squared norms.
    candidates : int ndarray (t,)
        The candidates' row indices.
    closest : ndarray (m,), same dtype
        Each row's squared distance to its nearest center so far (``inf`` before the first); updated in place.

    Returns
    -------
    int

    Examples
    --------
    >>> import numpy as np
    >>> rows = np.array([[0.0], [1.0], [10.0]])
    >>> closest = np.array([0.0, 1.0, 100.0])  # a center at 0
    >>> candidates = np.array([1, 2])
    >>> choose_candidate(-2.0 * rows[candidates] @ rows.T, (rows**2).sum(1), candidates, closest)
    1
    >>> closest.tolist()
    [0.0, 1.0, 0.0]
    """
    best = np.argmin(candidate_potentials(scaled_dots, squares, candidates, closest))
    own = squares[candidates[best]]
    for i in range(closest.shape[0]):
        d2 = (scaled_dots[best, i] + own) + squares[i]
        if d2 < closest[i]:
            closest[i] = d2 if d2 > 0 else 0.0
    closest[candidates[best]] = 0.0
    return best


@numba.njit(cache=True, nogil=True)
def choose_in_batch(scaled_dots, candidates, keep, drawn_from, squares, closest, start, chosen):
    """Choose the centers of a batch from ``start`` on, each by :func:`choose_candidate` among its own candidates
    (``len(chosen)`` centers, ``len(candidates) / len(chosen)`` candidates each), until one whose candidates do
    not all pass thinning.

    Center ``j > 0``'s candidate ``c`` (drawn from ``drawn_from``) passes when ``keep[(j - 1) * trials + t] *
    drawn_from[c] < closest[c]``: such a center is left to the caller, who replaces the candidates that do not
    pass with new draws.

    Parameters
    ----------
    scaled_dots : IN ndarray (len(candidates), m)
        ``-2 * rows[candidates] @ rows.T``.
    candidates : IN int ndarray
        Every center's candidates, center after center.
    keep : IN float64 ndarray ((len(chosen) - 1) * trials,)
        The thinning's uniforms.
    drawn_from, squares : IN ndarray (m,)
        The squared distances the candidates were drawn from, and the rows' squared norms.
    closest : IN-OUT ndarray (m,)
        The current squared distances, lowered as centers are chosen.
    start : IN int
    chosen : OUT int64 ndarray
        The row of each center chosen, filled from ``start`` on.

    Returns
    -------
    int
        The first center not chosen (``len(chosen)`` when all are).
    """
    trials = candidates.shape[0] // chosen.shape[0]
    for j in range(start, chosen.shape[0]):
        first = j * trials
        if j > 0:
            for t in range(trials):
                c = candidates[first + t]
                if not keep[first - trials + t] * drawn_from[c] < closest[c]:
                    return j
        own = candidates[first : first + trials]
        chosen[j] = own[choose_candidate(scaled_dots[first : first + trials], squares, own, closest)]
    return chosen.shape[0]
