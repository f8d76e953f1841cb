"""The bytes an object held on a worker takes, as Dask should count them.

A worker reports the size of every task result to the scheduler (``dask.sizeof.sizeof``), and the scheduler uses
it to place the next tasks beside their largest inputs, to decide whether moving a task to an idle worker (work
stealing) costs less than waiting, and to count the managed memory it may spill. An object of a class that Dask
does not know counts as its bare ``sys.getsizeof``: a per-row state of tens of megabytes counted as a few dozen
bytes. Then the scheduler moves such states freely (nested mini-batch steps ran beside a small copy of the
centers instead of their state, and each moved state cost a transfer of tens of megabytes), and spilling never
sees them.
"""

from __future__ import annotations

from dask.sizeof import sizeof


class SizedSlots:
    """Counts an object with ``__slots__`` as the sum of its slots' sizes (arrays by their buffers), except the slots
    named in ``UNSIZED`` (shared by several objects: counted by none)."""

    __slots__ = ()

    #: Slots not counted.
    UNSIZED: tuple = ()

    def __sizeof__(self):
        return object.__sizeof__(self) + sum(
            sizeof(getattr(self, name)) for name in self.__slots__ if name not in self.UNSIZED and hasattr(self, name)
        )
