"""A 64-bit hash of every row's bytes, for counting distinct rows without sorting them."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _weighted_word_sums(words, multipliers):
    hashes = np.zeros(words.shape[0], dtype=np.uint64)
    for i in range(words.shape[0]):
        total = np.uint64(0)
        for j in range(words.shape[1]):
            total += words[i, j] * multipliers[j]  # modulo 2**64
        hashes[i] = total
    return hashes


def row_hashes(rows):
    """A 64-bit hash of each row's bytes: the sum, modulo 2**64, of its 8-byte words (zero-padded) times fixed odd
    multipliers. Floats have -0.0 made 0.0 first, so that equal values hash equal; equal rows hash equal.

    Parameters
    ----------
    rows : ndarray (n, d)

    Returns
    -------
    uint64 ndarray (n,)

    Examples
    --------
    >>> import numpy as np
    >>> h = row_hashes(np.array([[1.0, -0.0], [1.0, 0.0], [2.0, 0.0]]))
    >>> bool(h[0] == h[1]), bool(h[0] == h[2])
    (True, False)
    """
    rows = np.asarray(rows)
    values = rows + rows.dtype.type(0) if rows.dtype.kind == "f" else rows
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(len(rows), -1)
    if raw.shape[1] % 8:
        padded = np.zeros((len(rows), -(-raw.shape[1] // 8) * 8), dtype=np.uint8)
        padded[:, : raw.shape[1]] = raw
        raw = padded
    words = raw.view(np.uint64)
    multipliers = np.random.default_rng(0x5EED).integers(1, 2**63, size=words.shape[1], dtype=np.uint64) | 1
    return _weighted_word_sums(words, multipliers)
