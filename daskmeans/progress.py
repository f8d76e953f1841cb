"""Progress of a fit, one bar per phase (tqdm.auto: terminals and notebooks alike), or a function of each history
record; the spans of the phases; and the center snapshots of a fit, taken from the same records.

A fit has up to three phases: **seeding** (a bar over the passes of k-means||, the sample pass of k-means++ or the
passes of AFK-MC2, with its total), **iterations** (a bar whose unit is the algorithm's own: iterations, epochs,
steps; its total is ``max_iter``, an upper bound, so the bar shows "of at most" and no remaining-time estimate)
and a **final pass** where the estimator makes one (the inertia of the final centers). Every bar shows the
current energy and the rows read per second; a phase that cannot count its work shows one line that says what
runs. A pass over the data that runs longer than :data:`~daskmeans.config.PASS_BAR_DELAY_SECONDS` gets a bar of
its own below: chunks done of the pass's chunks, rows per second, the time left and (exact k-means' passes) the
energy of the rows done so far (:mod:`daskmeans.engine.pass_progress`). Each history record gets
``rows_per_second``: the rows the passes since the previous record read, over the seconds those passes took.
"""

from __future__ import annotations

import time

import numpy as np

from .engine.pass_progress import KNOWN_TOTAL_FORMAT, PassWatch

#: Bar layout while the total is not known yet.
COUNT_FORMAT = "{desc}: {n_fmt} {unit} [{elapsed}{postfix}]"
#: Bar layout when the total is only an upper bound: no bar, no remaining time (it would assume the bound is met).
CAP_FORMAT = "{desc}: {n_fmt} of at most {total_fmt} {unit}{budget} [{elapsed}{postfix}]"
#: Layout of a phase that counts nothing (one line that says what runs, and for how long).
LINE_FORMAT = "{desc} [{elapsed}{postfix}]"


def _format_energy(value) -> str:
    return f"{float(value):.6g}"


class Phase:
    """One phase of a fit: its span on the fit's clock and, when shown, one bar.

    Parameters
    ----------
    name : str
        ``"seeding"``, ``"iterations"`` or ``"final pass"``.
    clock : Clock
        The fit's clock (the span is measured on it).
    show : bool
        Show a bar (tqdm.auto writes to stderr, or a widget in a notebook).
    desc : str
        The bar's label.
    unit : str, optional
        What the bar counts (``passes``, ``iterations``, ``epochs``, ``steps``); None: a line without a count.
    total : int, optional
        How many ``unit`` the phase takes (with ``cap``: at most).
    cap : bool
        ``total`` is an upper bound (``max_iter``): shown as "of at most", without a remaining time.
    budget : float, optional
        The ``max_time`` budget in seconds, shown with a capped total.
    note : str, optional
        What runs, shown after the count.
    """

    def __init__(self, name, clock, *, show, desc, unit=None, total=None, cap=False, budget=None, note=None):
        self.name, self.clock, self.desc, self.unit, self.cap = name, clock, desc, unit, cap
        self.total = total
        self.count = 0
        self.energy = None
        self.rows_per_second = None
        self.note = note
        self.start = clock.elapsed()
        self.started_at = time.perf_counter()
        self.end = None
        self.bar = None
        if show:
            from tqdm.auto import tqdm

            if unit is None:
                bar_format = LINE_FORMAT
            elif cap and total is not None:
                bar_format = CAP_FORMAT.replace("{budget}", "" if budget is None else f", max_time {budget:g} s")
            elif total is not None:
                bar_format = KNOWN_TOTAL_FORMAT
            else:
                bar_format = COUNT_FORMAT
            self.bar = tqdm(total=total, desc=desc, unit=unit or "it", leave=True, bar_format=bar_format)
            if note:
                self._show(refresh=True)

    def _show(self, refresh):
        if self.bar is None:
            return
        postfix = {}
        if self.energy is not None:
            postfix["energy"] = _format_energy(self.energy)
        if self.rows_per_second is not None:
            postfix["rows/s"] = f"{self.rows_per_second:.3g}"
        if self.note:
            postfix["now"] = self.note
        self.bar.set_postfix(postfix, refresh=refresh)

    def advance_to(self, count, *, total=None, energy=None, note=None, rows_per_second=None):
        """Set the count to ``count`` (cumulative), and optionally the total, the energy, the rows read per second
        and what runs now."""
        if total is not None and total != self.total:
            self.total = total
            if self.bar is not None:
                if self.bar.total is None and not self.cap:
                    self.bar.bar_format = KNOWN_TOTAL_FORMAT
                self.bar.total = total
        if energy is not None:
            self.energy = energy
        if rows_per_second is not None:
            self.rows_per_second = rows_per_second
        if note is not None:
            self.note = note
        count, before = int(count), self.count
        self.count = count
        self._show(refresh=False)
        if self.bar is not None:
            if count != before:
                self.bar.update(count - before)  # redraws at most every tqdm ``mininterval``
            else:
                self.bar.refresh()

    def seeding_callback(self):
        """``on_progress(done, total, note)`` for the seeding functions (:mod:`daskmeans.algorithms.init`)."""

        def on_progress(done, total, note=None):
            self.advance_to(done, total=total, note=note)

        return on_progress

    def close(self):
        """End the phase (its span ends now) and close its bar; a second call does nothing."""
        if self.end is not None:
            return
        self.end = self.clock.elapsed()
        if self.bar is not None:
            if not self.cap and self.unit is not None and self.total is not None and self.count < self.total:
                self.bar.total = self.count  # a phase that needed less than its total: it is complete
            self.note = None
            self._show(refresh=False)
            self.bar.close()

    def span(self) -> dict:
        """The phase as a record of ``fit_phases_``."""
        return {
            "phase": self.name,
            "start": self.start,
            "end": self.end,
            "unit": self.unit,
            "count": self.count,
            "total": self.total,
            "total_is_cap": self.cap,
            "energy": self.energy,
        }

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def centers_in_record(record):
    """The centers an algorithm reported with ``record`` (None when it reported none)."""
    return record.get("_centers")


class SnapshotRecorder:
    """The progress of one fit, the spans of its phases and, with ``snapshot_centers=True``, copies of the centers.

    Used as the algorithm's callback (:class:`~daskmeans.algorithms.result.RunContext`): every record advances the
    iterations bar (opened by :meth:`iterations`, else on the first record) and, with ``progress=callable``, is
    handed to that callable (a copy without the ``_`` keys; only history records, never phases); every record that
    carries centers adds a snapshot. The estimator adds the initial centers with :meth:`start` and keeps the
    snapshots and the phases with :meth:`keep`.

    Parameters
    ----------
    estimator : daskmeans estimator
        Its ``progress`` and ``snapshot_centers`` parameters decide what is shown and kept.
    clock : Clock
        The fit's clock (a snapshot's ``wall_time`` and the phases' spans are on it).
    total : int, optional
        Upper bound on the iterations bar's count (``max_iter``).
    desc : str
        The algorithm's name, the label of every bar.
    centers_of : callable, optional
        ``centers_of(record)``: the centers in input space that ``cluster_centers_`` will show, or None when
        the record carries none (default: the record's ``"_centers"``).
    unit : str
        What the iterations bar counts: ``"iterations"``, ``"epochs"`` or ``"steps"``.
    count_key : str
        The record key whose value is the bar's count after that record (``"iteration"``; mini-batch k-means:
        ``"steps"``, so that the bar advances by the steps each record covers).
    """

    def __init__(
        self,
        estimator,
        clock,
        *,
        total=None,
        desc="daskmeans",
        centers_of=centers_in_record,
        unit="iterations",
        count_key="iteration",
    ):
        self.passes_seen = 0
        self.snapshots = [] if estimator.snapshot_centers else None
        self.clock = clock
        progress = estimator.progress
        self.function = progress if callable(progress) else None
        self.show = bool(progress) and self.function is None
        self.desc = desc
        self.total = total
        self.unit = unit
        self.count_key = count_key
        self.centers_of = centers_of
        self.phases = []
        self.current = None
        self.watch = PassWatch(desc, show=self.show)

    # -- phases ------------------------------------------------------------------------------------------------
    def begin(self, name, *, unit=None, total=None, cap=False, note=None, label=None) -> Phase:
        """Open phase ``name`` (the phase open before, if any, ends now); use it as a context manager or close it."""
        self.end_phase()
        budget = self.clock.max_time if cap else None
        desc = f"{self.desc} {label or name}"
        self.current = Phase(
            name, self.clock, show=self.show, desc=desc, unit=unit, total=total, cap=cap, budget=budget, note=note
        )
        self.phases.append(self.current)
        return self.current

    def seeding(self, init, *, counted=True) -> Phase:
        """Open the seeding phase of ``init`` (a method name, or given centers): a bar over its passes, or with
        ``counted=False`` one line (seedings that report no passes)."""
        method = init if isinstance(init, str) else "given centers"
        return self.begin("seeding", unit="passes" if counted else None, label=f"seeding ({method})")

    def iterations(self, total=None, *, label=None) -> Phase:
        """Open the iterations phase: the estimator's unit, ``total`` (default the recorder's) as an upper bound."""
        total = self.total if total is None else total
        self.passes_seen = len(self.watch.passes)  # the first record's rate covers the iterations' passes only
        return self.begin("iterations", unit=self.unit, total=total, cap=total is not None, label=label or self.unit)

    def final_pass(self, what="inertia of the final centers") -> Phase:
        """Open the final pass over the data (one line: what runs and for how long)."""
        return self.begin("final pass", label=f"final pass ({what})")

    def end_phase(self):
        """Close the phase that is open, if any."""
        if self.current is not None:
            self.current.close()
            self.current = None

    # -- the algorithm's callback ----------------------------------------------------------------------------
    def __enter__(self):
        self.watch.__enter__()
        return self

    def __exit__(self, *exc):
        self.end_phase()
        self.watch.__exit__(*exc)
        return False

    def start(self, centers):
        """Snapshot of the initial centers (a fit that starts afresh)."""
        self._add(0, centers)

    def __call__(self, record):
        passes = self.watch.passes[self.passes_seen :]
        self.passes_seen = len(self.watch.passes)
        seconds = sum(p["seconds"] for p in passes)
        if passes and seconds > 0:
            record["rows_per_second"] = sum(p["rows"] for p in passes) / seconds
        if self.function is not None:
            self.function({key: value for key, value in record.items() if not key.startswith("_")})
        if self.current is None or self.current.name != "iterations":
            self.iterations()
        self.current.advance_to(
            record.get(self.count_key, self.current.count + 1),
            energy=record["energy"],
            rows_per_second=record.get("rows_per_second"),
        )
        if self.snapshots is not None:
            centers = self.centers_of(record)
            if centers is not None:
                self._add(record["iteration"], centers)

    def _add(self, iteration, centers):
        if self.snapshots is not None:
            self.snapshots.append(
                {
                    "iteration": iteration,
                    "wall_time": self.clock.elapsed(),
                    "perf_counter": time.perf_counter(),
                    "centers": np.array(centers, copy=True),
                }
            )

    def keep(self, estimator):
        """Set ``estimator.fit_phases_`` (the phases' spans, on the clock of ``history_``) and, with
        ``snapshot_centers=True``, ``estimator.center_snapshots_``."""
        self.end_phase()
        estimator.fit_phases_ = [phase.span() for phase in self.phases]
        estimator._fit_clock = self.clock
        if self.snapshots is not None:
            estimator.center_snapshots_ = self.snapshots


class LazyFinalPass:
    """The final pass that ``inertia_`` makes on first access, shown and added to ``fit_phases_`` like the others.

    Parameters
    ----------
    estimator : daskmeans estimator
        A fitted one (its ``progress`` decides whether a line is shown).
    """

    def __init__(self, estimator):
        self.estimator = estimator
        self.phase = None

    def __enter__(self):
        clock = getattr(self.estimator, "_fit_clock", None)
        progress = getattr(self.estimator, "progress", False)
        if clock is not None:
            name = type(self.estimator).__name__
            self.phase = Phase(
                "final pass",
                clock,
                show=bool(progress) and not callable(progress),
                desc=f"{name} final pass (inertia_ of the final centers)",
            )
        return self

    def __exit__(self, *exc):
        if self.phase is not None:
            self.phase.close()
            phases = getattr(self.estimator, "fit_phases_", None)
            if phases is not None and exc[0] is None:
                phases.append(self.phase.span())
        return False
