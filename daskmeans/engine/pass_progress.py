"""How far the pass under way has got: chunks done of its chunks, rows per second and the time left.

At a hundred million rows one pass over the data takes minutes, and a bar that moves once per iteration says
nothing meanwhile. While a :class:`PassWatch` is active (a fit with ``progress=True``), every block task that
:func:`daskmeans.engine.graph.map_blocks_delayed` builds reports, when it ends, that it ended and how many rows its
block held:

- on a ``distributed`` worker in another process, as an event on the scheduler's topic :data:`TOPIC`
  (``Worker.log_event``), which the driver's client subscribes to. The task only leaves its report behind; the
  worker's event loop sends it once the task has finished (:class:`BlockReports`, a worker plugin the watch
  installs once per client), together with the task's own completion: sent from the task's thread, each report
  would wake the event loop while the task still holds the GIL;
- in the driver's own process (the threaded scheduler, or workers that are threads of it), by a direct call.

The watch counts them against the block tasks it submitted (:func:`daskmeans.engine.client.compute_now` and
``persist_now`` tell it what they submit), and draws a bar per pass: chunks done out of the pass's chunks,
rows per second, and tqdm's estimate of the time left. The bar appears only for passes longer than
:data:`daskmeans.config.PASS_BAR_DELAY_SECONDS`, so that small data shows no flicker. Without a watch, tasks
report nothing and cost nothing extra; the results never depend on it.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
import weakref

from distributed.diagnostics.plugin import WorkerPlugin

from .. import config

#: The scheduler topic that block tasks on worker processes report on.
TOPIC = "daskmeans-pass-progress"

_ACTIVE: contextvars.ContextVar[PassWatch | None] = contextvars.ContextVar("daskmeans_pass_watch", default=None)

#: Bar layout when the total is known (a pass's chunks, and the progress bars of :mod:`daskmeans.progress`): the
#: bar, the count and total in their unit, the time spent and left, then the postfix (rows/s, energy).
KNOWN_TOTAL_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}{postfix}]"
#: Watches of this process by the pass names they submitted, for tasks that run in this process.
_LOCAL_WATCHES: dict[str, PassWatch] = {}
_LOCAL_LOCK = threading.Lock()


def active_watch() -> PassWatch | None:
    """The watch of the fit under way in this context, or None."""
    return _ACTIVE.get()


def rows_of(block) -> int:
    """Rows of a block task's first argument: a data block (its length), a state holding ``rows``, or a tuple
    whose first item is one of those; else 0."""
    if isinstance(block, tuple) and block:
        block = block[0]
    shape = getattr(block, "shape", None)
    if shape is None:
        shape = getattr(getattr(block, "rows", None), "shape", None)
    return int(shape[0]) if shape else 0


#: Reports of block tasks that ended on this worker, by task key, for :class:`BlockReports` to send.
_PENDING_REPORTS: dict = {}
#: Whether this worker process runs :class:`BlockReports` (else a task sends its report itself).
_REPORTS_BY_PLUGIN = threading.Event()
#: Clients whose cluster has :class:`BlockReports` installed.
_CLIENTS_WITH_PLUGIN: weakref.WeakSet = weakref.WeakSet()


class BlockReports(WorkerPlugin):
    """A worker plugin that sends the report a block task left (:func:`report_block`) from the worker's event
    loop, when the task's state leaves ``executing``."""

    name = "daskmeans-block-reports"
    idempotent = True
    #: Reports sent by the plugin in this worker process.
    sent = 0

    def setup(self, worker):
        self.worker = worker
        _REPORTS_BY_PLUGIN.set()

    def teardown(self, worker):
        _REPORTS_BY_PLUGIN.clear()

    def transition(self, key, start, finish, **kwargs):
        if start == "executing":
            message = _PENDING_REPORTS.pop(key, None)
            if message is not None:
                self.worker.log_event(TOPIC, message)
                BlockReports.sent += 1


def install_block_reports(client):
    """Install :class:`BlockReports` on ``client``'s workers (once per client; the scheduler gives it to workers
    that join later)."""
    if client in _CLIENTS_WITH_PLUGIN:
        return
    client.register_plugin(BlockReports(), name=BlockReports.name)
    _CLIENTS_WITH_PLUGIN.add(client)


def report_block(function, pass_name, energy_of, *args):
    """Run ``function(*args)`` (a block task), then report its end and its rows to the watch of ``pass_name``, with
    ``energy_of(result)`` (the block's weighted sum of squared distances and its weight) when given."""
    result = function(*args)
    message = _block_message(pass_name, energy_of, args[0] if args else None, result)
    if _reported_here(message):
        return result
    worker = _this_worker()
    if worker is None:
        return result
    key = getattr(_thread_state(), "key", None)
    if _REPORTS_BY_PLUGIN.is_set() and key is not None:
        _PENDING_REPORTS[key] = message
    else:
        worker.log_event(TOPIC, message)
    return result


def report_group_block(pass_name, energy_of, block, result):
    """Report one block of a group task (:func:`daskmeans.engine.grouped.run_group`) as it ends: a group task
    runs many blocks, so its reports go out one by one while it runs, not with its end."""
    message = _block_message(pass_name, energy_of, block, result)
    if not _reported_here(message):
        worker = _this_worker()
        if worker is not None:
            worker.log_event(TOPIC, message)


def _block_message(pass_name, energy_of, block, result) -> dict:
    sse, weight = energy_of(result) if energy_of is not None else (0.0, 0.0)
    return {"pass": pass_name, "rows": rows_of(block), "sse": float(sse), "weight": float(weight)}


def _reported_here(message) -> bool:
    """Give ``message`` to a watch of this process (threads of the driver's process); False when there is none."""
    watch = _LOCAL_WATCHES.get(message["pass"])
    if watch is None:
        return False
    watch.block_done(message["pass"], message["rows"], message["sse"], message["weight"])
    return True


def _this_worker():
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def _thread_state():
    from distributed.worker import thread_state

    return thread_state


class PassWatch:
    """Counts the block tasks of the passes a fit submits, and shows each pass as a bar.

    Use as a context manager around the fit; graph builders ask :func:`active_watch` whether to make their block
    tasks report (:meth:`register`), and the submitting functions call :meth:`submitted` and :meth:`finished`.

    Parameters
    ----------
    desc : str
        Label of the bars (the algorithm's name).
    show : bool
        Draw bars (tqdm.auto); False only counts.
    delay : float, optional
        Seconds a pass runs before its bar appears (default :data:`daskmeans.config.PASS_BAR_DELAY_SECONDS`, read
        when the watch is made).

    Attributes
    ----------
    passes : list of dict
        One per pass that ended: ``names`` (the block maps it ran), ``chunks``, ``rows``, ``seconds``,
        ``rows_per_second`` and ``energy`` (the mean squared distance to the pass's centers, for passes that
        measure it: assign and bounded k-means; else None).
    """

    def __init__(self, desc="daskmeans", *, show=True, delay=None):
        self.desc, self.show = desc, show
        self.delay = config.PASS_BAR_DELAY_SECONDS if delay is None else delay
        self.passes = []
        self._lock = threading.Condition()
        self._names = set()
        self._group_blocks: dict[str, int] = {}
        self._client = None
        self._token = None
        self._reset()

    def _reset(self):
        self.total = 0
        self.done = 0
        self.rows = 0
        self.sse = 0.0
        self.weight = 0.0
        self.started = None
        self.current_names = []
        self.bar = None

    # -- the fit ------------------------------------------------------------------------------------------------
    def __enter__(self):
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc):
        self.finished()
        _ACTIVE.reset(self._token)
        with _LOCAL_LOCK:
            for name in self._names:
                if _LOCAL_WATCHES.get(name) is self:
                    del _LOCAL_WATCHES[name]
        if self._client is not None:
            with contextlib.suppress(Exception):  # a client already closed has nothing to unsubscribe
                self._client.unsubscribe_topic(TOPIC)
            self._client = None
        return False

    def register(self, pass_name: str, blocks: int | None = None):
        """Make tasks of this process that report for ``pass_name`` report here; ``blocks``: the pass's tasks are
        group tasks (:func:`daskmeans.engine.grouped.map_reduce_blocks`) that report this many blocks in all."""
        with _LOCAL_LOCK:
            _LOCAL_WATCHES[pass_name] = self
        self._names.add(pass_name)
        if blocks is not None:
            self._group_blocks[pass_name] = int(blocks)

    # -- what the submitting functions tell ---------------------------------------------------------------------
    def submitted(self, graph, client=None):
        """The reporting block tasks of ``graph`` (a submitted graph before fusion: keys to tasks) join the pass
        under way (or start one); results already computed (futures) do not count."""
        mine = [
            key
            for key, value in graph.items()
            if getattr(value, "func", None) is report_block and isinstance(key, tuple) and key[0] in self._names
        ]
        groups = {key[0] for key in graph if isinstance(key, tuple) and key[0] in self._group_blocks}
        if not mine and not groups:
            return
        if client is not None and self._client is None:
            install_block_reports(client)
            client.subscribe_topic(TOPIC, self._on_event)
            self._client = client
        with self._lock:
            if self.started is None:
                self.started = time.perf_counter()
            self.total += len(mine) + sum(self._group_blocks.pop(name) for name in groups)
            for name in [*dict.fromkeys(key[0] for key in mine), *sorted(groups)]:
                if name not in self.current_names:
                    self.current_names.append(name)
            if self.bar is not None:
                self.bar.total = self.total
                self.bar.refresh()

    def finished(self):
        """The pass under way ended (its results are in the driver): record it and close its bar.

        Reports from worker processes travel through the scheduler ahead of the tasks' completion, so they are
        normally all here; a straggler is awaited at most
        :data:`daskmeans.config.LATE_REPORT_SECONDS`."""
        with self._lock:
            if self.started is None:
                return
            if self._client is not None:
                self._lock.wait_for(lambda: self.done >= self.total, timeout=config.LATE_REPORT_SECONDS)
            seconds = time.perf_counter() - self.started
            self.passes.append(
                {
                    "names": [self._short(name) for name in self.current_names],
                    "chunks": self.total,
                    "rows": self.rows,
                    "seconds": seconds,
                    "rows_per_second": self.rows / seconds if seconds > 0 else None,
                    "energy": self._energy(),
                }
            )
            if self.bar is not None:
                self.bar.close()
            self._reset()

    # -- the tasks' reports -------------------------------------------------------------------------------------
    def _on_event(self, event):
        _, message = event
        self.block_done(message["pass"], int(message["rows"]), message["sse"], message["weight"])

    def block_done(self, pass_name, rows, sse=0.0, weight=0.0):
        """One block task of ``pass_name`` ended, having read ``rows`` rows (and, for a pass that measures it, found
        ``sse`` as their weighted sum of squared distances for ``weight`` in all)."""
        with self._lock:
            if self.started is None or pass_name not in self.current_names:
                return  # a late report of a pass already recorded
            self.done += 1
            self.rows += rows
            self.sse += sse
            self.weight += weight
            self._draw()
            self._lock.notify_all()

    def _energy(self):
        """The mean squared distance over the rows done so far (None for a pass that does not measure it)."""
        return self.sse / self.weight if self.weight > 0 else None

    def _draw(self):
        if not self.show:
            return
        if self.bar is None:
            from tqdm.auto import tqdm

            elapsed = time.perf_counter() - self.started
            if elapsed < self.delay:
                return
            names = ", ".join(self._short(name) for name in self.current_names)
            self.bar = tqdm(
                total=self.total,
                desc=f"{self.desc} pass ({names})",
                unit="chunks",
                leave=False,
                bar_format=KNOWN_TOTAL_FORMAT,
                smoothing=0,
            )
            self.bar.start_t -= elapsed  # elapsed time, rate and time left: the average since the pass started
        elapsed = time.perf_counter() - self.started
        postfix = {"rows/s": f"{self.rows / elapsed:.3g}"}
        energy = self._energy()
        if energy is not None:
            postfix["energy"] = f"{energy:.6g}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(self.done - self.bar.n)  # redraws at most every tqdm ``mininterval``

    @staticmethod
    def _short(name):
        """``daskmeans-assign-<token>`` -> ``assign``."""
        return name.removeprefix("daskmeans-").rsplit("-", 1)[0]
