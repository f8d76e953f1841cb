"""After every run of a workload: pin down, by bisection between evaluated candidates (or extra ladder rungs),
when each run first reached each target of E* and each reference energy (k-means' final, ``--versus``)."""

from __future__ import annotations

from . import report
from .traces import evaluate, refine


def refine_all(runs, energy, budget, targets, lloyd_energies=(), versus=()):
    """Pin down when each run first came within each target of E*, twice (E* may drop on the way)."""
    for _ in range(2):
        best = best_energy(runs, lloyd_energies)
        if best is None:
            return
        for run in runs:
            if run.trace is None:
                continue
            for target in targets:
                ladder = run.trace.extend is not None
                try:
                    refine(run.trace, best * (1 + target), energy, max_steps=3 if ladder else 6, ladder_budget=budget)
                except Exception as exc:  # noqa: BLE001 - a rung failing during refinement ends refinement
                    run.trace.notes.append(f"refinement stopped: {type(exc).__name__}: {exc}")
                    run.trace.extend = None
        if best_energy(runs, lloyd_energies) == best:
            break
    for spec in ({"name": report.KMEANS_REFERENCE, "iteration": None}, *versus):
        refine_to_reference(runs, energy, budget, spec)


def references_by_seed(runs, spec) -> dict:
    """Per seed, the energy the run ``spec["name"]`` ended with (or had after ``spec["iteration"]`` iterations)."""
    reference = {}
    for run in runs:
        if run.name == spec["name"] and run.trace is not None:
            energies = [
                c.energy
                for c in run.trace.candidates
                if c.energy is not None and (spec["iteration"] is None or c.iteration == spec["iteration"])
            ]
            if energies:
                reference[run.seed] = min(energies)
    return reference


def refine_to_reference(runs, energy, budget, spec):
    """Pin down when each run first reached (within ``spec["within"]``) the energy the run ``spec["name"]`` of its
    seed ended with (or had after ``spec["iteration"]`` iterations)."""
    reference = references_by_seed(runs, spec)
    for run in runs:
        if run.trace is None or run.seed not in reference:
            continue
        try:
            refine(
                run.trace,
                report.reach_threshold(reference[run.seed], spec.get("within", 0.0)),
                energy,
                max_steps=3 if run.trace.extend is not None else 6,
                ladder_budget=budget,
            )
        except Exception as exc:  # noqa: BLE001 - a rung failing during refinement ends refinement
            run.trace.notes.append(f"refinement stopped: {type(exc).__name__}: {exc}")
            run.trace.extend = None


def fit_exact_to_yardsticks(runs, energy, versus):
    """Fit exact k-means once more where its run, cut by the workload's budget, did not reach the final energy of a
    ``--versus`` run (within its ``within``): with ``max_time`` the time that run took to that energy.

    Exact k-means takes Lloyd's iterates, so such a fit times it to a converged Lloyd's energy however long
    convergence takes; a k-means slower than the yardstick shows by not reaching it within that time.
    """
    for spec in versus:
        if spec["iteration"] is not None:
            continue
        yardsticks = {run.seed: run.trace for run in runs if run.name == spec["name"] and run.trace is not None}
        for run in runs:
            trace = run.trace
            if run.name != report.KMEANS_REFERENCE or trace is None or trace.refit is None:
                continue
            yardstick = yardsticks.get(run.seed)
            final = min(yardstick.evaluated(), key=lambda c: (c.energy, c.time), default=None) if yardstick else None
            if final is None:
                continue
            threshold = report.reach_threshold(final.energy, spec.get("within", 0.0))
            if any(c.energy <= threshold for c in trace.evaluated()):
                continue
            try:
                _refit_reaches(trace, threshold, energy, final.time)
            except Exception as exc:  # noqa: BLE001 - a failing fit leaves the yardstick not reached
                trace.notes.append(f"not fitted to {spec['name']}'s final energy: {type(exc).__name__}: {exc}")


def best_energy(runs, lloyd_energies=()):
    """E*: the lowest energy any run reached, or a converged Lloyd energy if lower."""
    energies = [
        c.energy for run in runs if run.trace is not None for c in run.trace.candidates if c.energy is not None
    ] + list(lloyd_energies)
    return min(energies) if energies else None


#: A fit again with ``max_time`` this much longer, when the last one stopped short of the target.
REFIT_GROWTH = 1.25
#: Fits tried per target and run.
REFIT_TRIES = 4
#: A run's final centers held by a snapshot before this fraction of the run's time are fitted again from the
#: snapshot's time: the run spent the rest in closing work that returned nothing new (a pass the budget cut).
LATE_FINAL = 0.8


def timed_by_its_fit(candidate) -> bool:
    """Whether a candidate's time is that of a whole fit returning it as early as a fit can: the points of whole
    fits, except a run's final centers that a snapshot already held well before the run returned."""
    if candidate.kind not in report.WHOLE_FITS:
        return False
    held = candidate.available_time
    return not (candidate.kind == "final" and held is not None and held < LATE_FINAL * candidate.time)


def confirm_wall_times(runs, energy, targets, lloyd_energies=(), versus=()):
    """For every run that can be fitted again (daskmeans): the wall time of a whole fit, call to return, that
    reaches each target of E* and each reference energy (k-means' final, ``--versus``).

    The first snapshot within a target gives the first ``max_time`` to try; a fit that stops short of the target
    is tried again with a budget :data:`REFIT_GROWTH` times longer, at most :data:`REFIT_TRIES` times. The run's
    own fit, with the workload's budget, is the last resort: its final point is a whole fit too. The targets are
    timed from the loosest to the tightest (a reference energy such as one Lloyd iteration can be looser than 2%
    of E*).
    """
    best = best_energy(runs, lloyd_energies)
    if best is None:
        return
    thresholds = {None: [best * (1 + target) for target in sorted(targets, reverse=True)]}
    for spec in ({"name": report.KMEANS_REFERENCE, "iteration": None}, *versus):
        for seed, reference in references_by_seed(runs, spec).items():
            thresholds.setdefault(seed, []).append(report.reach_threshold(reference, spec.get("within", 0.0)))
    for run in runs:
        if run.trace is None or run.trace.refit is None:
            continue
        # loosest target first: a fit made for a looser target that is within a tighter one times both, while a fit
        # made for a tighter target is later than the looser one needs
        for threshold in sorted(thresholds[None] + thresholds.get(run.seed, []), reverse=True):
            try:
                fit_until_reached(run.trace, threshold, energy)
            except Exception as exc:  # noqa: BLE001 - a failing fit ends the confirmation of this run
                run.trace.notes.append(f"wall times not confirmed: {type(exc).__name__}: {exc}")
                break


def fit_until_reached(trace, threshold, energy):
    """Fit ``trace``'s run again until a whole fit's result is within ``threshold`` (its candidates join the trace):
    first with ``max_iter`` the iteration of its first snapshot within it (as the peers' ladders stop theirs after
    a given number of iterations; the same iterates end there), then with ``max_time`` from that snapshot's time
    (when it was taken in the run), longer until the fit's result is within it. Nothing is fitted when the first
    point within it is a whole fit (:func:`timed_by_its_fit`), or when a fit made again for a looser target is
    within it too."""
    reached = sorted((c for c in trace.evaluated() if c.energy <= threshold), key=lambda c: c.time)
    if not reached or timed_by_its_fit(reached[0]) or any(c.kind == "fit" for c in reached):
        return
    first = reached[0]
    if first.iteration:
        if _refit_reaches(trace, threshold, energy, None, max_iter=first.iteration):
            return
    # from when the snapshot existed: its time also counts the fit's closing work after its last iteration, which
    # is long when that work was a pass the budget cut (a fit seeded at large k stops in its first pass)
    seconds = first.time if first.available_time is None else first.available_time
    for _ in range(REFIT_TRIES):
        if seconds >= trace.fit_seconds:
            return  # the run's own fit is that fit
        if _refit_reaches(trace, threshold, energy, seconds):
            return
        seconds *= REFIT_GROWTH


def _refit_reaches(trace, threshold, energy, max_time, max_iter=None) -> bool:
    """Fit ``trace``'s run again (:attr:`~daskmeans.bench.traces.Trace.refit`), evaluate the fit and add it to the
    trace; whether its result is within ``threshold``."""
    candidate = trace.refit(max_time, max_iter=max_iter)
    evaluate([candidate], energy)
    trace.candidates.append(candidate)
    trace.timed_seconds += candidate.time
    return candidate.energy <= threshold
