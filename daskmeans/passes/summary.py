"""The summary pass: n, mean, variance, the data checks and a hash of every row, all in the first read of the data."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.graph import block_args, map_blocks_delayed, reduce_in_tree, tree_reduce
from ..engine.slabs import slabs
from ..exceptions import InputDataError
from ..kernels.stats import column_moments


@dataclass
class Summary:
    """What one read of the data tells.

    Attributes
    ----------
    n_samples : int
    mean : float64 (d,)
        Per-feature mean.
    variance : float64 (d,)
        Per-feature variance (population).
    n_nonfinite : int
        NaN and inf values.
    first_nonfinite_row : int
        Global index of the first row holding one (-1 when none).
    max_abs : float
        Largest absolute finite value.
    total_weight : float
        Sum of the sample weights (n without weights).
    n_bad_weights : int
        Negative or non-finite weights.
    first_bad_weight_row : int
    row_hash : int
        :func:`row_hash` of the data (and weights): 64 bits that change with any row's value or position.
    """

    n_samples: int
    mean: np.ndarray
    variance: np.ndarray
    n_nonfinite: int
    first_nonfinite_row: int
    max_abs: float
    total_weight: float
    n_bad_weights: int
    first_bad_weight_row: int
    row_hash: int = 0

    @property
    def mean_variance(self) -> float:
        """Mean of the per-feature variances: the scale of scikit-learn's relative tolerance."""
        return float(np.mean(self.variance))


#: Constants of the splitmix64 finalizer (Steele, Lea & Flood 2014), a bijective 64-bit mixer.
_MIX_A, _MIX_B = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
#: Rows hashed at once (bounds the temporaries of a block's hash to a few MB per feature).
_HASH_ROWS = 1 << 15


def _mix64(words):
    """splitmix64's finalizer applied in place to a uint64 array (wrapping arithmetic)."""
    words ^= words >> np.uint64(30)
    words *= _MIX_A
    words ^= words >> np.uint64(27)
    words *= _MIX_B
    words ^= words >> np.uint64(31)
    return words


def row_hash(block, offset, weights=None) -> int:
    """A 64-bit hash of the rows ``offset, offset + 1, ...`` of the data: the wrapping sum over rows of
    ``mix(mix(row index) + sum over columns of (value bits xor key_j) * odd multiplier_j)``.

    Every value enters as the bits of its float64 (the same for any input dtype and byte order), mixed with its
    column and its row's global index, so moving a row, swapping two values of a column or changing any bit of a
    value changes the hash (but for a 2**-64 chance). Sums of per-row hashes are associative and commutative:
    the hash of the whole data is the sum of the hashes of its blocks, whatever the chunking. Not cryptographic:
    it tells other data apart, it does not resist forgery.

    Parameters
    ----------
    block : ndarray (n, d)
    offset : int
        Global index of the block's first row.
    weights : ndarray (n,), optional
        Sample weights, hashed as one more column.

    Returns
    -------
    int
        In ``[0, 2**64)``.
    """
    block = np.asarray(block)
    n = block.shape[0]
    d = block.shape[1] + (weights is not None)
    keys = _mix64(np.arange(1, d + 1, dtype=np.uint64) * _GOLDEN)
    multipliers = _mix64(keys.copy()) | np.uint64(1)  # odd: multiplying by one is a bijection of the 64-bit words
    total = 0
    for start in range(0, n, _HASH_ROWS):
        stop = min(n, start + _HASH_ROWS)
        values = np.empty((stop - start, d), dtype=np.float64)
        values[:, : block.shape[1]] = block[start:stop]
        if weights is not None:
            values[:, -1] = np.asarray(weights)[start:stop]
        words = values.view(np.uint64)
        words ^= keys
        words *= multipliers
        rows = words.sum(axis=1, dtype=np.uint64)
        rows += _mix64(np.arange(offset + start + 1, offset + stop + 1, dtype=np.uint64) * _GOLDEN)
        total = (total + int(_mix64(rows).sum(dtype=np.uint64))) % 2**64
    return total


def _summarize_slab(rows, offset, weights, with_row_hash):
    n, mean, m2, n_nonfinite, first, max_abs = column_moments(np.ascontiguousarray(rows))
    first = offset + first if n_nonfinite else -1
    if weights is None:
        total_weight, n_bad, first_bad = float(rows.shape[0]), 0, -1
    else:
        bad = ~np.isfinite(weights) | (weights < 0)
        n_bad = int(bad.sum())
        first_bad = int(offset + np.argmax(bad)) if n_bad else -1
        total_weight = float(weights[~bad].sum())
    hashed = row_hash(rows, offset, weights) if with_row_hash else 0
    return n, mean, m2, n_nonfinite, first, max_abs, total_weight, n_bad, first_bad, hashed


def _summarize_block(block, offset, weights, with_row_hash=True):
    return _combine(
        [
            _summarize_slab(rows, offset + start, w, with_row_hash)
            for start, rows, w in slabs(block, weights, reuse=True)
        ]
    )


def _first(a, b):
    if a < 0:
        return b
    if b < 0:
        return a
    return min(a, b)


def _combine(parts):
    n, mean, m2, nonfinite, first, max_abs, weight, n_bad, first_bad, hashed = parts[0]
    for other in parts[1:]:
        n_b, mean_b, m2_b = other[0], other[1], other[2]
        total = n + n_b
        if n_b:
            delta = mean_b - mean
            mean = mean + delta * (n_b / total)
            m2 = m2 + m2_b + delta**2 * (n * n_b / total)
        n = total
        nonfinite += other[3]
        first = _first(first, other[4])
        max_abs = max(max_abs, other[5])
        weight += other[6]
        n_bad += other[7]
        first_bad = _first(first_bad, other[8])
        hashed = (hashed + other[9]) % 2**64
    return n, mean, m2, nonfinite, first, max_abs, weight, n_bad, first_bad, hashed


def summary_graph(array, weights=None, with_row_hash=True):
    """The delayed summary of ``array`` (one read of every block).

    ``with_row_hash=False`` leaves :attr:`Summary.row_hash` at 0: the hash is a third of the pass's work and only
    checkpoints use it.
    """
    parts = map_blocks_delayed(
        _summarize_block, "summary", block_args(array, weights), bool(with_row_hash), reads_data=True
    )
    return tree_reduce(parts, _combine, "summary")


def summary_on_driver(driver, with_row_hash=True):
    """The summary's raw result (as :func:`summary_graph` computes it) of the blocks a
    :class:`~daskmeans.engine.driver.DriverCopy` holds, on the driver's threads: the same block function and the
    same tree, so the same values to the last bit, without a round trip to the workers."""
    with driver.threads():
        parts = driver.map(_summarize_block, driver.block_args, bool(with_row_hash))
    return reduce_in_tree(parts, _combine)


def finish_summary(result, n_total: int) -> Summary:
    n, mean, m2, nonfinite, first, max_abs, weight, n_bad, first_bad, hashed = result
    variance = m2 / n if n else np.zeros_like(mean)
    return Summary(n_total, mean, variance, nonfinite, first, max_abs, weight, n_bad, first_bad, hashed)


def check_summary(summary: Summary, dtype, name: str = "X") -> None:
    """Raise a clear error for values that cannot be clustered.

    Raises
    ------
    InputDataError
        NaN/inf values, bad sample weights, all-zero weights, or values whose squared distances cannot be
        computed: they overflow ``dtype`` (values too large), underflow it (values so small that their squares are
        below its smallest normal number, where the rows would look alike), or are lost in float64 rounding
        (rows that differ by little around a large common offset).
    """
    if summary.n_nonfinite:
        raise InputDataError(
            f"Input {name} contains {summary.n_nonfinite} non-finite value(s) (NaN or infinity); the first is in "
            f"row {summary.first_nonfinite_row}. Remove or impute them before clustering."
        )
    if summary.n_bad_weights:
        raise InputDataError(
            f"sample_weight has {summary.n_bad_weights} negative or non-finite value(s); the first is at row "
            f"{summary.first_bad_weight_row}. Weights must be finite and >= 0."
        )
    if summary.total_weight <= 0:
        raise InputDataError("sample_weight sums to zero; at least one sample needs a positive weight.")
    limit = float(np.finfo(dtype).max)
    spread = 2.0 * summary.max_abs
    if spread * spread * max(1, summary.mean.shape[0]) >= limit:
        raise InputDataError(
            f"Input {name} has values up to {summary.max_abs:.3g} in absolute value: squared distances would "
            f"overflow {np.dtype(dtype).name}. Rescale the data (e.g. divide by {summary.max_abs:.3g}) "
            "or pass float64."
        )
    check_tiny_magnitudes(summary, dtype, name)
    check_offset_precision(summary, name)


def check_tiny_magnitudes(summary: Summary, dtype, name: str = "X") -> None:
    """Refuse values so small that squared distances underflow ``dtype``: the scale guard of the small end.

    The values' squares, and so the squared distances that the kernels sum, must be normal numbers of ``dtype``
    with its full precision: the largest absolute value must be at least ``sqrt(tiny / eps)`` (about 3e-16 for
    float32, 1e-146 for float64). Below, squares are subnormal or zero and distinct rows look alike. All-zero
    data is fine (one distinct row).
    """
    info = np.finfo(dtype)
    smallest = float(np.sqrt(float(info.tiny) / float(info.eps)))
    if 0.0 < summary.max_abs < smallest:
        raise InputDataError(
            f"Input {name} has values of at most {summary.max_abs:.3g} in absolute value: their squared distances "
            f"underflow {np.dtype(dtype).name} (below its smallest normal number {float(info.tiny):.3g}), so "
            f"distinct rows would look alike. Rescale the data (e.g. multiply by {1 / summary.max_abs:.3g})"
            + (" or pass float64." if np.dtype(dtype).itemsize < 8 else ".")
        )


def check_offset_precision(summary: Summary, name: str = "X") -> None:
    """Refuse rows that differ so little around a large common offset that float64 rounding hides the difference.

    Squared distances on the driver (seeding, reclustering) are formed as ``|x|^2 - 2 x.c + |c|^2`` in float64,
    whose rounding error grows with the values' magnitude: about ``2 * max_abs**2 * eps`` per feature. When that
    reaches the typical squared spread (the mean per-feature variance), rows are indistinguishable. Subtracting
    the offset loses nothing and fixes it. Constant data (zero variance) is fine.
    """
    rounding = 2.0 * summary.max_abs**2 * float(np.finfo(np.float64).eps)
    spread = summary.mean_variance
    if spread > 0 and rounding >= spread:
        raise InputDataError(
            f"Input {name} has values up to {summary.max_abs:.6g} in absolute value that vary by only about "
            f"{np.sqrt(spread):.3g} (standard deviation) around them: float64 rounding at that magnitude "
            f"({rounding:.3g} per squared feature) is as large as the squared distances between rows, so rows "
            "would look alike. Subtract the offset first, e.g. X - X.mean(axis=0) (or X - X.min(axis=0) for "
            "unsigned integers), and add it back to the centers."
        )
