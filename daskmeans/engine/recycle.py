"""Arrays handed from a state that dies to the state that replaces it, instead of back to the operating system.

An iterative pass that keeps per-row state on the workers (labels, distances and bounds of exact k-means with
bounds: hundreds of megabytes per worker on large data) makes a new state every iteration and drops the one
before. Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, so glibc returns every freed array over
128 KiB to the kernel at once, and the next iteration's arrays are fresh pages, which cost a page fault each to
touch again (many times the cost of pages the process kept on a virtual machine that hands idle memory back to its
host). A :class:`Recycler` shared by the states of one chain takes the arrays of a state as it is freed and gives
them to the next state made, so the chain's arrays stay touched.

Safety: an array is kept only when nothing but the dying state refers to it (its reference count, which views of
it raise too) and it owns its memory; it is handed out once. A recycler pickles as an empty one (a state moved to
another worker starts a new set), and the arrays it holds are freed with it when the chain's last state dies.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from .sizes import SizedSlots


def _reference_counts(arrays) -> list:
    return [sys.getrefcount(array) for array in arrays]


class _Holder:
    __slots__ = ("array",)


def _only_one_holder() -> int:
    """What :func:`_reference_counts` reports for an array that one object's attribute alone refers to (found at
    import, not assumed: the count of the call's own references differs between Python versions)."""
    holder = _Holder()
    holder.array = np.empty(1)
    (count,) = _reference_counts((holder.array,))
    return count


#: The count of an array that the dying state alone holds, seen from :meth:`Recycler.keep`.
_ONLY_THE_STATE = _only_one_holder()


class Recycler:
    """Arrays of freed states, by shape and dtype, for the next state of the same chain.

    Parameters
    ----------
    max_per_kind : int
        Arrays of one shape and dtype held at most (more are freed): one state's worth is what a chain reuses.
    """

    def __init__(self, max_per_kind: int = 1):
        self.max_per_kind = int(max_per_kind)
        self.handed_out = 0  # arrays given for reuse so far
        self._held: dict[tuple, list] = {}
        self._lock = threading.Lock()

    def __reduce__(self):
        return (Recycler, (self.max_per_kind,))

    def keep(self, *arrays) -> int:
        """Hold the ``arrays`` of a state being freed, where nothing else refers to them; returns how many were kept.

        Arrays held of other shapes and dtypes than these are dropped: a chain whose states grow (the nested
        batch) keeps only the last size, not one set per size it went through.
        """
        kinds = {(array.shape, array.dtype.str) for array in arrays if isinstance(array, np.ndarray)}
        with self._lock:
            for kind in [kind for kind in self._held if kind not in kinds]:
                del self._held[kind]
        kept = 0
        for array, count in zip(arrays, _reference_counts(arrays)):
            if (
                not isinstance(array, np.ndarray)
                or array.base is not None
                or not array.flags.owndata
                or count > _ONLY_THE_STATE
            ):
                continue
            kind = (array.shape, array.dtype.str)
            with self._lock:
                held = self._held.setdefault(kind, [])
                if len(held) < self.max_per_kind:
                    held.append(array)
                    kept += 1
        return kept

    def empty(self, shape, dtype) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` with undefined contents: a held one if there is one, else new."""
        shape = tuple(int(size) for size in np.atleast_1d(shape))
        kind = (shape, np.dtype(dtype).str)
        with self._lock:
            held = self._held.get(kind)
            if held:
                self.handed_out += 1
                return held.pop()
        return np.empty(shape, dtype=dtype)

    def held_bytes(self) -> int:
        """Bytes of the arrays held now."""
        with self._lock:
            return sum(array.nbytes for held in self._held.values() for array in held)


class RecycledState(SizedSlots):
    """A per-row state (``labels``, ``dist2``, ``lower`` and a ``recycler`` among its slots) whose three arrays go
    to its chain's recycler when it is freed, and whose successor takes its arrays from there. Dask counts it as the
    arrays it holds (:class:`~daskmeans.engine.sizes.SizedSlots`; the recycler, shared by the chain, is not)."""

    __slots__ = ()
    UNSIZED = ("recycler",)

    def __del__(self):
        try:
            self.recycler.keep(self.labels, self.dist2, self.lower)
        except Exception:  # noqa: BLE001 - at interpreter exit the modules it needs may be gone: nothing to keep
            pass

    def empty_like_state(self):
        """``(labels, dist2, lower)`` for the next state: arrays of a freed state of the chain, or new ones."""
        m, n_groups = self.lower.shape
        return (
            self.recycler.empty(m, np.int32),
            self.recycler.empty(m, np.float64),
            self.recycler.empty((m, n_groups), self.lower.dtype),
        )
