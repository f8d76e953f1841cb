"""The end of a fit's ``max_time`` budget, at which the pass under way stops.

An algorithm runs its iterations inside :func:`budget_until`. While the budget has an end, every pass the engine
computes stops there: on the local threaded scheduler and on the driver's threads no further block task is started
and the driver waits only for the tasks already running (one block per thread); on a cluster the driver stops
waiting at once and drops the pass's futures (the tasks running on the workers finish there, their results unused).
The pass then raises :class:`BudgetSpent`, and the algorithm returns the last iterate it completed.

Examples
--------
>>> import time
>>> with budget_until(time.perf_counter() + 60.0):
...     0.0 < seconds_left() <= 60.0
True
>>> seconds_left() is None
True
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
import time
from contextlib import contextmanager

from dask.callbacks import Callback

_END = contextvars.ContextVar("daskmeans_budget_end", default=None)


class BudgetSpent(Exception):  # noqa: N818 - a stop, not a failure: the fit returns normally
    """The ``max_time`` budget ended while a pass was under way; the pass was dropped."""

    def __init__(self):
        super().__init__("the max_time budget ended while a pass was under way")


@contextmanager
def budget_until(end):
    """Stop the passes computed in the block at ``end`` (a ``time.perf_counter()`` time; None: never)."""
    token = _END.set(end)
    try:
        yield
    finally:
        _END.reset(token)


def seconds_left():
    """Seconds until the budget ends (negative once it has), or None without an end."""
    end = _END.get()
    return None if end is None else end - time.perf_counter()


def check_budget():
    """Raise :class:`BudgetSpent` when the budget has ended."""
    left = seconds_left()
    if left is not None and left <= 0:
        raise BudgetSpent


def _before_a_task(key, dsk, state):
    check_budget()


#: Stops the local scheduler at the budget's end: raised before a task starts, the error leaves the tasks already
#: running to finish on their threads, and the driver does not wait for them.
_STOP_AT_THE_END = Callback(pretask=_before_a_task)


def local_callbacks():
    """The callbacks of a computation on the local scheduler, as ``dask.compute(..., callbacks=)`` takes them: None
    without a budget (Dask's active callbacks, such as a progress bar, as usual), else those and one that stops the
    computation at the budget's end (callbacks given explicitly replace the active ones)."""
    if _END.get() is None:
        return None
    return [*Callback.active, _STOP_AT_THE_END._callback]


def wait_for_futures(futures):
    """Wait for a cluster's ``futures`` until they are done or the budget ends (:class:`BudgetSpent`: the caller
    drops them, and the scheduler releases what only they held)."""
    left = seconds_left()
    if left is None:
        return
    futures = list(futures)
    all_done, lock, waiting = threading.Event(), threading.Lock(), [len(futures)]

    def one_done(_):
        with lock:
            waiting[0] -= 1
            if waiting[0] == 0:
                all_done.set()

    if not futures:
        return
    for future in futures:  # a future of any client (distributed.wait would take the default client's)
        future.add_done_callback(one_done)
    if not all_done.wait(max(left, 0.0)):
        raise BudgetSpent


def map_within_budget(pool, function, items) -> list:
    """``[function(item) for item in items]`` on the thread ``pool``, in order; none is started once the budget has
    ended, and at its end the items not started are cancelled and :class:`BudgetSpent` is raised (those running
    finish on their threads)."""
    check_budget()
    futures = [pool.submit(function, item) for item in items]
    left = seconds_left()
    if left is not None:
        _, pending = concurrent.futures.wait(futures, timeout=max(left, 0.0))
        if pending:
            for future in pending:
                future.cancel()
            raise BudgetSpent
    return [future.result() for future in futures]
