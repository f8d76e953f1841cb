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
import uuid
from contextlib import contextmanager

from dask.callbacks import Callback

_END = contextvars.ContextVar("daskmeans_budget_end", default=None)
_STOP = contextvars.ContextVar("daskmeans_budget_stop", default=None)
#: Least seconds between two looks of a group task at its budget's stop signal (each a round trip to the scheduler).
STOP_CHECK_SECONDS = 0.1


class BudgetSpent(Exception):  # noqa: N818 - a stop, not a failure: the fit returns normally
    """The ``max_time`` budget ended while a pass was under way; the pass was dropped."""

    def __init__(self):
        super().__init__("the max_time budget ended while a pass was under way")


@contextmanager
def budget_until(end):
    """Stop the passes computed in the block at ``end`` (a ``time.perf_counter()`` time; None: never)."""
    token = _END.set(end)
    stop = _STOP.set(None if end is None else f"daskmeans-stop-{uuid.uuid4().hex}")
    try:
        yield
    finally:
        _STOP.reset(stop)
        _END.reset(token)


class GivenUp:
    """What a group task returns when it stops because the driver gave up its pass (:class:`StopCheck`): the tasks
    after it hand it on without work (:func:`handed_on`), since nobody uses their results either."""

    def __repr__(self):
        return "GivenUp()"


def handed_on(values):
    """The :class:`GivenUp` among ``values``, if any (None otherwise)."""
    return next((value for value in values if isinstance(value, GivenUp)), None)


def stop_signal():
    """The name of the budget's stop signal (a :class:`distributed.Event`), for the group tasks of the passes built
    in it; None without an end."""
    return _STOP.get()


class StopCheck:
    """Whether the driver has given up the pass of a group task (its budget's stop signal is set), asked on a
    worker between two blocks, at most every :data:`STOP_CHECK_SECONDS`: a task that works through many blocks
    then stops after the block it was on when the budget ended, instead of finishing a pass nobody waits for, and
    returns a :class:`GivenUp`.

    Parameters
    ----------
    name : str or None
        :func:`stop_signal` where the pass was built (None: never stop).
    """

    def __init__(self, name):
        self.name = name
        self.last = time.perf_counter()

    def __call__(self) -> bool:
        if self.name is None or time.perf_counter() - self.last < STOP_CHECK_SECONDS:
            return False
        self.last = time.perf_counter()
        from distributed import Event, get_client

        try:
            client = get_client()
        except ValueError:  # not in a task of a distributed worker: nothing sets the signal
            return False
        return Event(self.name, client=client).is_set()


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
    drops them, the scheduler releases what only they held, and the budget's stop signal is set, so that the
    group tasks still running stop after their block)."""
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
        signal_stop(futures[0].client)
        raise BudgetSpent


def signal_stop(client):
    """Set the budget's stop signal on ``client``'s scheduler, from a thread of its own: the driver does not wait for
    it, nor fail with it (it only spares the workers work; a scheduler that is gone has no workers to spare). For
    a run that stops while a pass it submitted ahead is under way: its group tasks stop after their block."""
    name = stop_signal()
    if name is None:
        return

    def send():
        from distributed import Event

        try:
            Event(name, client=client).set()
        except Exception:  # noqa: BLE001 - see above
            pass

    threading.Thread(target=send, name="daskmeans-stop-signal", daemon=True).start()


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
