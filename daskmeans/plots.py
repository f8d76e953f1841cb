"""Figures from fit histories (PNG through Matplotlib's Agg canvas; the global backend is left alone): energy
against wall time, with the phases of a fit (input check, seeding, iterations, final pass) shaded and labelled."""

from __future__ import annotations

import os
import uuid

#: The energy axis is logarithmic when the curves span more than this factor.
LOG_SCALE_RATIO = 20.0
#: Shading of each phase of a fit, by name.
PHASE_COLORS = {
    "input check": "#bbbbbb",
    "seeding": "#f4a582",
    "loading": "#fddbc7",
    "iterations": "#92c5de",
    "final pass": "#b8e186",
}


def energy_timeline(model, fit_started=None) -> dict:
    """The energy of a fitted model's centers against the time since the start of its fit, and its phases.

    Parameters
    ----------
    model : daskmeans estimator
        Fitted (its ``history_`` and ``fit_phases_``).
    fit_started : float, optional
        ``time.perf_counter()`` taken before ``fit``: times are then counted from it. Default: from the call to
        ``fit``, the start of the fit's own clock (``history_``'s ``wall_time`` and ``max_time`` count from there
        too). The input check (the summary pass ``fit`` makes before seeding) is the first phase.

    Returns
    -------
    dict
        ``{"points": [{"wall_time", "energy"}...], "phases": [{"phase", "start", "end"}...]}``. For estimators
        whose records hold the energy of the centers an iteration started from (k-means, VRKM), the first point
        is the seeds' energy at the end of seeding and each point holds the centers from the moment they exist,
        up to the final centers (their energy once ``inertia_`` is known); otherwise each energy is placed at the
        time it was reported.
    """
    history = list(getattr(model, "history_", []))
    phases = list(getattr(model, "fit_phases_", []))
    clock = getattr(model, "_fit_clock", None)
    offset = 0.0 if fit_started is None or clock is None else clock.start - fit_started
    checked = min((p["start"] for p in phases), default=0.0) + offset
    spans = [{"phase": "input check", "start": 0.0, "end": checked}] if checked > 0 else []
    spans += [
        {"phase": p["phase"], "start": p["start"] + offset, "end": p["end"] + offset}
        for p in phases
        if p["end"] is not None
    ]
    if getattr(model, "_energy_before_update", False) and history:
        first = history[0]["wall_time"]
        seeding_ends = [p["end"] for p in phases if p["phase"] == "seeding" and p["end"] <= first]
        times = [seeding_ends[-1] if seeding_ends else 0.0] + [r["wall_time"] for r in history]
        energies = [r["energy"] for r in history]
        inertia = getattr(model, "_inertia", None)
        last = history[-1]
        if inertia is not None and last.get("inertia"):
            energies.append(inertia * last["energy"] / last["inertia"])  # inertia / total weight
        else:
            times.pop()
    else:
        times = [r["wall_time"] for r in history]
        energies = [r["energy"] for r in history]
    points = [{"wall_time": t + offset, "energy": float(e)} for t, e in zip(times, energies)]
    return {"points": points, "phases": spans}


def draw_phases(axes, phases):
    """Shade each phase span on ``axes`` and label it at the top (one legend entry per phase name)."""
    from matplotlib.transforms import blended_transform_factory

    top = blended_transform_factory(axes.transData, axes.transAxes)
    named = set()
    for span in phases:
        color = PHASE_COLORS.get(span["phase"], "#dddddd")
        label = None if span["phase"] in named else span["phase"]
        named.add(span["phase"])
        axes.axvspan(span["start"], span["end"], color=color, alpha=0.35, linewidth=0, label=label)
        if span["phase"] != "iterations":
            axes.text(
                (span["start"] + span["end"]) / 2,
                0.98,
                span["phase"],
                transform=top,
                rotation=90,
                ha="center",
                va="top",
                fontsize="x-small",
            )


def plot_energy_curves(curves: dict, path, title: str, phases=None) -> str:
    """Plot the energy (mean squared distance to the nearest center) of each run against wall time.

    Parameters
    ----------
    curves : dict of str to list of dict
        Run name -> its ``history_`` records; each record needs ``energy`` and ``wall_time`` (seconds since
        the start of the fit).
    path : str or os.PathLike
        Where the PNG goes. Written under a temporary name and moved into place when complete.
    title : str
        Figure title.
    phases : list of dict, optional
        Spans ``{"phase", "start", "end"}`` (seconds, same axis) shaded and labelled (:func:`energy_timeline`).

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    ValueError
        ``curves`` is empty, or a record lacks ``energy`` or ``wall_time``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not curves:
        raise ValueError("plot_energy_curves needs at least one curve; got an empty dict.")
    figure = Figure(figsize=(7.0, 4.5), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    if phases:
        draw_phases(axes, phases)
    lowest, highest = float("inf"), float("-inf")
    for name, records in curves.items():
        records = list(records)
        for record in records:
            if "energy" not in record or "wall_time" not in record:
                raise ValueError(f"Curve {name!r} has a record without 'energy' or 'wall_time': {record!r}.")
        times = [float(record["wall_time"]) for record in records]
        energies = [float(record["energy"]) for record in records]
        lowest, highest = min([lowest, *energies]), max([highest, *energies])
        axes.plot(
            times,
            energies,
            marker="o",
            markersize=3,
            linewidth=1.5,
            label=f"{name} ({len(records)} points)",
            drawstyle="steps-post" if phases else "default",
        )
    if lowest > 0 and highest / lowest > LOG_SCALE_RATIO:
        from matplotlib.ticker import ScalarFormatter

        axes.set_yscale("log")
        axes.yaxis.set_major_formatter(ScalarFormatter())
    axes.set_xlabel("wall time since the start of the fit (s)")
    if phases:
        axes.set_xlim(left=0.0)
    axes.set_ylabel("energy (mean squared distance to nearest center)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="best" if phases else "upper right", fontsize="small")
    figure.tight_layout()

    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        figure.savefig(tmp, format="png")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return path
