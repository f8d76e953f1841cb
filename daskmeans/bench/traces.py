"""What a run leaves behind: centers at known times (candidates), some of them evaluated exactly.

Two kinds of runs give candidates:

- *snapshot* runs (daskmeans algorithms, mini-batch peers) run once and keep copies of their centers at
  several moments; evaluating more of them afterwards costs evaluation time only;
- *ladder* runs (scikit-learn KMeans, faiss, dask-ml) have no way to hand out intermediate centers, so they
  are run from the same initial centers with a growing iteration limit ``m``; each rung is a complete,
  separately timed run, exactly what a user setting ``max_iter=m`` gets.

After E* is known, :func:`refine` bisects between the last candidate above a target and the first one below
it, so the time to reach the target is resolved to one snapshot (or one iteration for ladders). A snapshot is not
what a user gets, though: a daskmeans run is then fitted again with ``max_time`` set to the snapshot's time
(:func:`daskmeans.bench.refinement.confirm_wall_times`), and that fit's wall time, from the call to its return,
is the run's time to the target (candidates of kind ``"fit"``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

#: Iteration limits tried by ladder runs (about x1.5 apart).
LADDER = (1, 2, 3, 4, 6, 8, 12, 18, 27, 40, 60, 90, 135, 200, 300)
#: The most iterations a ladder runs (scikit-learn's default ``max_iter``).
LADDER_MAX_ITER = 300


@dataclass
class Candidate:
    """Centers that a run had at ``time`` seconds after its start.

    Attributes
    ----------
    step : int
        Snapshot index (snapshot runs) or iteration limit (ladder runs); orders the candidates.
    time : float
        Seconds since the start of the timed region until a user could hold these centers as the result
        of the fit (a snapshot plus the work the fit does after its last iteration).
    centers : ndarray or None
        Dropped once evaluated.
    iteration : int or None
    passes : float or None
        Full passes over the data spent so far (fractional for sampling methods).
    kind : str
        ``"init"``, ``"snapshot"``, ``"rung"``, ``"final"`` or ``"fit"`` (a whole fit with a ``max_time``,
        timed from the call to its return).
    energy : float or None
        Exact energy on the full data, once evaluated.
    available_time : float or None
        When the centers first existed in the run, if earlier than ``time``.
    max_iter : int or None
        A ``"fit"`` stopped after that many iterations (else it was stopped by its ``max_time``).
    """

    step: int
    time: float
    centers: np.ndarray | None
    iteration: int | None = None
    passes: float | None = None
    kind: str = "snapshot"
    energy: float | None = None
    eval_seconds: float | None = None
    available_time: float | None = None
    max_iter: int | None = None

    def as_record(self) -> dict:
        limit = {} if self.max_iter is None else {"max_iter": self.max_iter}
        return {
            **limit,
            "step": self.step,
            "time": self.time,
            "energy": self.energy,
            "iteration": self.iteration,
            "passes": self.passes,
            "kind": self.kind,
            "eval_seconds": self.eval_seconds,
            "available_time": self.time if self.available_time is None else self.available_time,
        }


@dataclass
class Trace:
    """The outcome of one run.

    Attributes
    ----------
    candidates : list of Candidate
        Ordered by ``step``.
    fit_seconds : float
        Timed seconds of the result the run ends with (for ladders: the last rung).
    timed_seconds : float
        All timed seconds the run spent (ladders: every rung together).
    extend : callable, optional
        Ladder runs: ``extend(m) -> Candidate`` runs one more rung (timed) for refinement.
    refit : callable, optional
        daskmeans runs: ``refit(max_time, max_iter=None) -> Candidate`` fits again with that budget (None: the
        run's), and at most ``max_iter`` iterations when given (a ``"fit"`` candidate).
    n_iter, passes, stop_reason : final figures of the run
    history : list of dict
        The algorithm's own per-iteration records (daskmeans algorithms), without arrays.
    notes : list of str
    """

    candidates: list
    fit_seconds: float
    timed_seconds: float
    extend: Callable[[int], Candidate] | None = None
    refit: Callable[..., Candidate] | None = None
    n_iter: int | None = None
    passes: float | None = None
    stop_reason: str | None = None
    history: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    params: dict = field(default_factory=dict)

    def final(self) -> Candidate:
        return max(self.candidates, key=lambda c: (c.step, c.time))

    def evaluated(self) -> list:
        return [c for c in self.candidates if c.energy is not None]


def drop_repeats(candidates) -> list:
    """Keep the earliest of consecutive candidates holding identical centers."""
    kept = []
    for candidate in candidates:
        if (
            kept
            and kept[-1].centers is not None
            and candidate.centers is not None
            and np.array_equal(kept[-1].centers, candidate.centers)
        ):
            if candidate.kind == "final":
                kept[-1].kind = "final"
            continue
        kept.append(candidate)
    for step, candidate in enumerate(kept):
        candidate.step = step
    return kept


def select_spread(candidates, count) -> list:
    """About ``count`` candidates spread evenly in log(time), always the first and the last."""
    if len(candidates) <= count:
        return list(candidates)
    times = np.array([c.time for c in candidates])
    positive = times[times > 0]
    chosen = {0, len(candidates) - 1}
    if positive.size:
        for target in np.geomspace(positive.min(), times.max(), max(count - 2, 1)):
            chosen.add(int(np.argmin(np.abs(np.log(np.maximum(times, 1e-9)) - math.log(target)))))
    return [candidates[i] for i in sorted(chosen)]


def evaluate(candidates, energy):
    """Evaluate the candidates that have no energy yet, outside any timed region, and drop their centers."""
    for candidate in candidates:
        if candidate.energy is None and candidate.centers is not None:
            start = time.perf_counter()
            candidate.energy = float(energy(candidate.centers))
            candidate.eval_seconds = time.perf_counter() - start


def release_centers(trace: Trace):
    """Forget the centers of evaluated candidates (they are no longer needed)."""
    for candidate in trace.candidates:
        if candidate.energy is not None:
            candidate.centers = None


def refine(trace: Trace, threshold: float, energy, *, max_steps=6, ladder_budget=None):
    """Resolve when the run first reached ``energy <= threshold``, by bisection between candidates.

    Snapshot runs evaluate stored snapshots; ladder runs run intermediate rungs, each a timed run, as long as
    the rung is expected to take at most ``ladder_budget`` seconds.

    Returns
    -------
    int
        Candidates evaluated (or rungs run).
    """
    done = 0
    while done < max_steps:
        evaluated = sorted(trace.evaluated(), key=lambda c: c.step)
        reached = [c for c in evaluated if c.energy <= threshold]
        if not reached:
            return done
        upper = reached[0]
        below = [c for c in evaluated if c.step < upper.step]
        lower_step = below[-1].step if below else None
        if trace.extend is None:
            between = [
                c
                for c in trace.candidates
                if c.energy is None
                and c.centers is not None
                and (lower_step is None or c.step > lower_step)
                and c.step < upper.step
            ]
            if not between:
                return done
            middle = between[len(between) // 2]
            evaluate([middle], energy)
        else:
            low = lower_step if lower_step is not None else 0
            if upper.step - low <= 1:
                return done
            step = (low + upper.step) // 2
            expected = upper.time * step / max(upper.step, 1)
            if ladder_budget is not None and expected > ladder_budget:
                return done
            candidate = trace.extend(step)
            trace.candidates.append(candidate)
            trace.candidates.sort(key=lambda c: c.step)
            evaluate([candidate], energy)
        done += 1
    return done


def run_ladder(fit_rung, budget, *, max_iter=LADDER_MAX_ITER, total_factor=2.5):
    """Run rungs ``m = 1, 2, 3, 4, 6, ...`` until convergence or ``max_iter``, while the next rung is expected
    to take at most ``budget`` seconds and all rungs together at most ``total_factor * budget``.

    Parameters
    ----------
    fit_rung : callable
        ``fit_rung(m) -> (centers, n_iter, seconds, converged, passes)``; times only the algorithm.
    budget : float
        Seconds one rung may be expected to take.

    Returns
    -------
    list of Candidate, total timed seconds, stop reason
    """
    candidates = []
    total = 0.0
    stop_reason = "time_budget"
    steps = [m for m in LADDER if m < max_iter] + [max_iter]
    for position, m in enumerate(steps):
        centers, n_iter, seconds, converged, passes = fit_rung(m)
        total += seconds
        candidates.append(
            Candidate(step=m, time=seconds, centers=centers, iteration=n_iter, passes=passes, kind="rung")
        )
        if converged:
            stop_reason = "converged"
            break
        if position + 1 == len(steps):
            stop_reason = "max_iter"
            break
        expected = seconds * steps[position + 1] / m
        if expected > budget or total + expected > total_factor * budget:
            break
    return candidates, total, stop_reason


def ladder_trace(fit_rung, budget, params: dict, notes: list, converge=False) -> Trace:
    """The :class:`Trace` of a peer run as a ladder (:func:`run_ladder`): every rung a candidate, the last one its
    result, and :func:`ladder_extender` to run more rungs when the bench refines it.

    ``converge``: where the budget stopped the ladder, one more rung of :data:`LADDER_MAX_ITER` iterations runs,
    whatever it costs, so that the run's result is its converged fit (as a ``--versus`` yardstick needs)."""
    candidates, total, stop = run_ladder(fit_rung, budget)
    if converge and stop == "time_budget":
        # the yardstick is the converged fit: one more rung without an iteration limit below the ladder's
        centers, n_iter, seconds, converged, passes = fit_rung(LADDER_MAX_ITER)
        total += seconds
        candidates.append(
            Candidate(step=LADDER_MAX_ITER, time=seconds, centers=centers, iteration=n_iter, passes=passes, kind="rung")
        )
        stop = "converged" if converged else "max_iter"
        notes = [*notes, f"its last rung ran to {'convergence' if converged else 'max_iter'} beyond the time budget"]
    last = candidates[-1]
    return Trace(
        candidates=candidates,
        fit_seconds=last.time,
        timed_seconds=total,
        extend=ladder_extender(fit_rung),
        n_iter=last.iteration,
        passes=last.passes,
        stop_reason=stop,
        params=params,
        notes=notes,
    )


def ladder_extender(fit_rung):
    """``extend(m)`` for :func:`refine`: one more timed rung as a Candidate."""

    def extend(m):
        centers, n_iter, seconds, _, passes = fit_rung(m)
        return Candidate(step=m, time=seconds, centers=centers, iteration=n_iter, passes=passes, kind="rung")

    return extend
