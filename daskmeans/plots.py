"""Figures from fit histories (PNG through Matplotlib's Agg canvas; the global backend is left alone)."""

from __future__ import annotations

import os
import uuid

#: The energy axis is logarithmic when the curves span more than this factor.
LOG_SCALE_RATIO = 20.0


def plot_energy_curves(curves: dict, path, title: str) -> str:
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
    lowest, highest = float("inf"), float("-inf")
    for name, records in curves.items():
        records = list(records)
        for record in records:
            if "energy" not in record or "wall_time" not in record:
                raise ValueError(f"Curve {name!r} has a record without 'energy' or 'wall_time': {record!r}.")
        times = [float(record["wall_time"]) for record in records]
        energies = [float(record["energy"]) for record in records]
        lowest, highest = min([lowest, *energies]), max([highest, *energies])
        axes.plot(times, energies, marker="o", markersize=3, linewidth=1.5, label=f"{name} ({len(records)} it.)")
    if lowest > 0 and highest / lowest > LOG_SCALE_RATIO:
        from matplotlib.ticker import ScalarFormatter

        axes.set_yscale("log")
        axes.yaxis.set_major_formatter(ScalarFormatter())
    axes.set_xlabel("wall time since the start of the fit (s)")
    axes.set_ylabel("energy (mean squared distance to nearest center)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="upper right", fontsize="small")
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
