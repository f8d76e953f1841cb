"""The plain result every algorithm returns, and the per-iteration history records."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class FitResult:
    """Outcome of one run of an algorithm.

    Attributes
    ----------
    centers : ndarray (k, d)
    inertia : float or None
        Weighted sum of squared distances to the nearest center, for ``centers``; None when the algorithm
        stopped without a pass over the final centers (the estimator's ``inertia_`` then makes that pass
        on first access).
    n_iter : int
    history : list of dict
        One record per iteration; every record has ``iteration``, ``energy``, ``wall_time`` and ``passes``.
    stop_reason : str
        ``"converged"``, ``"max_iter"``, ``"max_time"`` or an algorithm-specific reason.
    passes : int
        Full passes over the data.
    counts : ndarray (k,), optional
        Weight of each cluster for ``centers``, where the algorithm knows it.
    """

    centers: np.ndarray
    inertia: float
    n_iter: int
    history: list = field(default_factory=list)
    stop_reason: str = "max_iter"
    passes: int = 0
    counts: np.ndarray | None = None


class Clock:
    """Wall time since the start of a fit, and the ``max_time`` budget."""

    def __init__(self, max_time=None):
        self.start = time.perf_counter()
        self.max_time = max_time

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def out_of_time(self) -> bool:
        return self.max_time is not None and self.elapsed() >= self.max_time


def restore_clock(clock, elapsed):
    """Continue ``clock`` from ``elapsed`` seconds (the time the run had spent before it was stopped)."""
    clock.start = time.perf_counter() - float(elapsed)
    return clock


def result_to_state(result) -> dict:
    """A :class:`~daskmeans.algorithms.result.FitResult` as checkpoint state."""
    state = {"centers": result.centers, "inertia": result.inertia, "n_iter": int(result.n_iter),
             "history": result.history, "stop_reason": result.stop_reason, "passes": result.passes}
    for name in ("n_steps", "seen_counts"):
        if hasattr(result, name):
            state[name] = getattr(result, name)
    return state


def result_from_state(state):
    """Inverse of :func:`result_to_state`."""
    from .result import FitResult

    result = FitResult(state["centers"], state["inertia"], state["n_iter"], list(state["history"]),
                       state["stop_reason"], state["passes"], None)
    for name in ("n_steps", "seen_counts"):
        if name in state:
            setattr(result, name, state[name])
    return result
