"""The plots of a benchmark record: energy over wall time, and energy relative to E* over wall time. Each curve is
one run's own course (its snapshots, rungs and final point); the separate fits that time its targets are left
out."""

from __future__ import annotations

from ..plots import plot_energy_curves


def _run_curve_name(run, record):
    return run["label"] if len(record["seeds"]) == 1 else f"{run['label']}, seed {run['seed']}"


def plot_energy(record, path):
    """Energy over wall time, one line per run on shared axes (:func:`daskmeans.plots.plot_energy_curves`).

    The shared initial centers (time 0) are left out so that the scale shows the runs.
    """
    curves = {
        _run_curve_name(run, record): [
            {"energy": p["energy"], "wall_time": p["time"]} for p in run["points"] if p["kind"] not in ("init", "fit")
        ]
        for run in record["runs"]
        if run["status"] == "ok" and len(run["points"]) > 1
    }
    w = record["workload"]
    title = f"{w['output_name']}: {w['n_samples']:,} x {w['n_features']}, k = {w['k']}"
    if not curves:
        curves = {"no run finished": [{"energy": 0.0, "wall_time": 0.0}]}
    plot_energy_curves(curves, path, title)


def plot_excess(record, path):
    """Energy relative to E* (``E / E* - 1``, log scale) over wall time (log scale), with the 1% and 2% targets.

    One color per algorithm, a line per seed; the shared initial centers are drawn at the left edge.
    """
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    e_star = record["summary"]["E_star"]
    runs = [r for r in record["runs"] if r["status"] == "ok" and r["points"]]
    positive = [p["time"] for r in runs for p in r["points"] if p["time"] > 0]
    floor = min(positive) / 2 if positive else 1e-3
    figure = Figure(figsize=(8.0, 5.0), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colors = colormaps["tab10"]
    names = []
    for run in runs if e_star else []:
        if run["name"] not in names:
            names.append(run["name"])
        own = [p for p in run["points"] if p["kind"] != "fit"]
        times = [max(p["time"], floor) for p in own]
        excess = [max(p["energy"] / e_star - 1, 1e-6) for p in own]
        axes.step(
            times,
            excess,
            where="post",
            color=colors(names.index(run["name"]) % 10),
            marker="o",
            markersize=3,
            label=run["label"] if run["seed"] == record["seeds"][0] else None,
        )
    for target in record.get("targets", []):
        axes.axhline(target, color="grey", linewidth=0.8, linestyle="--")
        axes.annotate(
            f"{target:.0%} ", (1.0, target), xycoords=("axes fraction", "data"), ha="right", va="bottom", color="grey"
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("wall time since the start of the fit (s)")
    axes.set_ylabel("energy / E* - 1")
    axes.grid(True, alpha=0.3, which="both")
    if names:
        axes.legend(fontsize=8)
    w = record["workload"]
    star = f"E* = {e_star:,.6g}" if e_star else "no energy"
    axes.set_title(f"{w['output_name']}: {w['n_samples']:,} x {w['n_features']}, k = {w['k']}; {star}")
    figure.tight_layout()
    figure.savefig(path, format="png")
