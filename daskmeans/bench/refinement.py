"""After every run of a workload: pin down, by bisection between evaluated candidates (or extra ladder rungs),
when each run first reached each target of E* and each reference energy (k-means' final, ``--versus``)."""

from __future__ import annotations

from . import report
from .traces import refine


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


def refine_to_reference(runs, energy, budget, spec):
    """Pin down when each run first reached (within ``spec["within"]``) the energy the run ``spec["name"]`` of its
    seed ended with (or had after ``spec["iteration"]`` iterations)."""
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


def best_energy(runs, lloyd_energies=()):
    """E*: the lowest energy any run reached, or a converged Lloyd energy if lower."""
    energies = [
        c.energy for run in runs if run.trace is not None for c in run.trace.candidates if c.energy is not None
    ] + list(lloyd_energies)
    return min(energies) if energies else None
