"""Counter-based random numbers, so that draws depend on the seed and the row, never on chunking.

Every random decision about row ``i`` in a stage of an algorithm comes from ``row_uniforms(key, i)``: a
SplitMix64 hash of the stage key and the global row index. Blocks, workers and schedulers therefore see the
same numbers for the same rows, whatever the chunking.
"""

from __future__ import annotations

import numbers

import numba
import numpy as np

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def seed_from_random_state(random_state) -> int:
    """Turn a scikit-learn style ``random_state`` into one 64-bit root seed.

    Parameters
    ----------
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        ``None`` draws fresh entropy; an integer is used as is; a generator gives one draw.

    Returns
    -------
    int
        A non-negative integer below 2**63.
    """
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> np.uint64(1))
    if isinstance(random_state, (bool, np.bool_)):
        raise TypeError("random_state must be None, an int or a numpy Generator/RandomState, not a bool.")
    if isinstance(random_state, numbers.Integral):
        if random_state < 0:
            raise ValueError(f"random_state must be a non-negative integer, got {random_state}.")
        return int(random_state)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    raise TypeError(
        f"random_state must be None, an int or a numpy Generator/RandomState, not {type(random_state).__name__}."
    )


def stage_key(seed: int, *path: int | str) -> int:
    """Derive an independent 64-bit key for one stage of an algorithm.

    Parameters
    ----------
    seed : int
        The root seed from :func:`seed_from_random_state`.
    *path : int or str
        Names and numbers of the stage, e.g. ``("kmeans||", round)``.
    """
    words = []
    for part in path:
        if isinstance(part, str):
            words.extend(part.encode())
        else:
            words.append(int(part) & 0xFFFFFFFF)
            words.append((int(part) >> 32) & 0xFFFFFFFF)
    sequence = np.random.SeedSequence(entropy=seed, spawn_key=tuple(words))
    return int(sequence.generate_state(1, np.uint64)[0])


def stage_generator(seed: int, *path: int | str) -> np.random.Generator:
    """A NumPy generator for draws made on the driver in one stage (never per block)."""
    return np.random.default_rng(stage_key(seed, *path))


@numba.njit(cache=True, nogil=True)
def _splitmix64(z):
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, nogil=True)
def _row_uniforms(key, start, count):
    out = np.empty(count, dtype=np.float64)
    mixed_key = _splitmix64(np.uint64(key))
    for i in range(count):
        bits = _splitmix64(mixed_key ^ _splitmix64(np.uint64(start + i)))
        # 53 random bits -> a double in (0, 1): never exactly 0, so logs and powers stay finite.
        out[i] = ((bits >> np.uint64(11)) + 0.5) * (1.0 / 9007199254740992.0)
    return out


def row_uniforms(key: int, start: int, count: int) -> np.ndarray:
    """Uniform numbers in (0, 1) for the rows ``start .. start + count - 1`` of a stage.

    Parameters
    ----------
    key : int
        The stage key from :func:`stage_key`.
    start : int
        Global index of the first row.
    count : int
        Number of rows.
    """
    return _row_uniforms(np.uint64(key), np.uint64(start), count)
