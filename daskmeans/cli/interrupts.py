"""Ctrl-C in a command: stop the run, close the cluster, and never hang while doing so.

A Ctrl-C raises ``KeyboardInterrupt`` in the main thread, as Python's own handler does, and the command unwinds:
partial outputs are removed and its local cluster is closed. Closing a cluster waits on its worker processes,
and a ``KeyboardInterrupt`` that lands inside Dask's own bookkeeping can leave that wait without an end. So the
first Ctrl-C also starts a deadline: if the command is still running :data:`INTERRUPT_GRACE_SECONDS` later, it
reports the interruption as it would have, kills its own child processes (the cluster's nannies and workers) and
exits with :data:`INTERRUPTED_EXIT_STATUS` at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

#: Exit status of a command stopped by Ctrl-C (SIGINT): 128 + 2, as shells report a process a SIGINT ended.
INTERRUPTED_EXIT_STATUS = 130
#: Seconds a command may take to stop after Ctrl-C (remove partial outputs, close its cluster) before it stops
#: at once.
INTERRUPT_GRACE_SECONDS = 15.0
#: What an interrupted command says.
INTERRUPTED_MESSAGE = "interrupted (Ctrl-C); the run stopped and wrote no output."


@contextlib.contextmanager
def interrupts_with_deadline(report, grace_seconds=INTERRUPT_GRACE_SECONDS):
    """Within the block, Ctrl-C raises ``KeyboardInterrupt`` and gives the process ``grace_seconds`` to end.

    Parameters
    ----------
    report : callable
        ``report(note)`` writes the command's one-line interruption message (``note``: why it stopped at once);
        called only if the deadline passes.
    grace_seconds : float

    Outside the main thread (where signal handlers cannot be set) the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    deadline = []

    def on_interrupt(signum, frame):
        if not deadline:
            timer = threading.Timer(grace_seconds, stop_now, args=(report, grace_seconds))
            timer.daemon = True
            timer.start()
            deadline.append(timer)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        for timer in deadline:
            timer.cancel()


def stop_now(report, grace_seconds):
    """Report the interruption, kill this process's children (and theirs) and exit with status 130."""
    try:
        report(f"its cluster did not close within {grace_seconds:g} s, so its processes were stopped")
        sys.stdout.flush()
        sys.stderr.flush()
        kill_children()
    finally:
        os._exit(INTERRUPTED_EXIT_STATUS)


def kill_children():
    """SIGKILL every descendant process of this one (psutil lists them; a process gone already is skipped)."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()
