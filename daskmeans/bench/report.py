"""The energy-over-time report of a workload: figures, table and plots, computed from its JSON record only (so
they can be rebuilt from it)."""

from __future__ import annotations

import json
import math
import os

import numpy as np

from .common import (
    gib,
    machine_text,
    output_paths,
    provenance_lines,
    record_json,
    table_lines,
    write_plots,
    write_report,
    write_text,
)
from .record_plots import plot_energy, plot_excess
from .reference import describe

# -- figures -----------------------------------------------------------------------------------------------------------
#: Points that are what a user holds when ``fit`` returns (a snapshot is not).
WHOLE_FITS = ("init", "final", "fit", "rung")


def refitted(points) -> bool:
    """Whether a run's points include whole fits made again (kind ``"fit"``)."""
    return any(p.get("kind") == "fit" for p in points)


def time_to_reach(points, threshold, snapshots=False):
    """First time at which an evaluated point has ``energy <= threshold`` (None when never).

    A run fitted again (points of kind ``"fit"``) is timed by its whole fits only, call to return;
    ``snapshots=True`` counts its snapshots too.
    """
    if not snapshots and refitted(points):
        points = [p for p in points if p.get("kind") in WHOLE_FITS]
    times = [p["time"] for p in points if p["energy"] is not None and p["energy"] <= threshold]
    return min(times) if times else None


def _spread(values):
    """Median, min and max of values where None means 'not reached' (counted as +infinity)."""
    finite = sorted(v for v in values if v is not None)
    infinite = len(values) - len(finite)
    ordered = finite + [math.inf] * infinite
    if not ordered:
        return {"median": None, "min": None, "max": None, "values": values, "not_reached": 0}
    median = float(np.median(ordered))

    def as_value(v):
        return None if v is None or not math.isfinite(v) else v

    return {
        "median": as_value(median),
        "min": as_value(ordered[0]),
        "max": as_value(ordered[-1]),
        "values": values,
        "not_reached": infinite,
    }


#: The run whose final energy is the "batch k-means' final loss" other runs are timed against.
KMEANS_REFERENCE = "kmeans"


def kmeans_reference(record) -> dict:
    """Per seed, the final energy of the daskmeans ``kmeans`` run and the time it first reached it.

    This is the yardstick of the VRKM paper: how much sooner an algorithm reaches the loss batch k-means ends
    with, from the same initial centers. Empty when the workload ran no ``kmeans``.
    """
    reference = {}
    for run in record["runs"]:
        if run["name"] == KMEANS_REFERENCE and run["status"] == "ok" and run["points"]:
            final = min(p["energy"] for p in run["points"] if p["energy"] is not None)
            reference[run["seed"]] = {
                "energy": final,
                "time": time_to_reach(run["points"], final),
                "stop_reason": run.get("stop_reason"),
            }
    return reference


def versus_key(spec) -> str:
    return spec["name"] if spec["iteration"] is None else f"{spec['name']}@{spec['iteration']}"


def versus_reference(record, spec) -> dict:
    """Per seed, the energy run ``spec["name"]`` ended with (or had after ``spec["iteration"]`` iterations) and the
    time it first had it: the yardstick of ``--versus`` (e.g. faiss on every row after its default 25 iterations).

    A seed whose run failed, or stopped before that iteration, has no reference (its entry says why).
    """
    reference = {}
    for run in record["runs"]:
        if run["name"] != spec["name"]:
            continue
        if run["status"] != "ok" or not run["points"]:
            reference[run["seed"]] = {"energy": None, "time": None, "missing": f"the run {run['status']}"}
            continue
        if spec["iteration"] is None:
            energy = min(p["energy"] for p in run["points"] if p["energy"] is not None)
        else:
            at = [
                p["energy"]
                for p in run["points"]
                if p.get("iteration") == spec["iteration"] and p["energy"] is not None
            ]
            if not at:
                reached = max((p.get("iteration") or 0) for p in run["points"])
                reference[run["seed"]] = {
                    "energy": None,
                    "time": None,
                    "missing": f"the run stopped at iteration {reached}",
                }
                continue
            energy = at[0]
        reference[run["seed"]] = {"energy": energy, "time": time_to_reach(run["points"], energy)}
    return reference


def reach_threshold(energy, within=0.0):
    """The energy a run must reach to count as having reached ``energy`` (within ``within`` of it, relative; at
    least a slack far below any difference the table shows, so the reference itself counts as reached)."""
    return energy * (1 + max(within, 1e-12))


def _time_and_speedup(points, reference, within=0.0):
    """When a run first reached a reference energy (same seed; within ``within`` of it) and the reference's time
    over that time; a run that never reached it counts as no speedup (0), so medians over seeds order correctly."""
    reached = time_to_reach(points, reach_threshold(reference["energy"], within))
    if reached is None:
        return None, 0.0
    return reached, reference["time"] / reached if reached > 0 else None


def lloyd_references(record) -> dict:
    """Per seed (as a string), the converged Lloyd reference of a ``--reference lloyd`` record (see
    :mod:`.reference`); a failed one holds ``"error"``. Empty for ``--reference best`` and older records."""
    reference = record.get("reference") or {}
    return dict(reference.get("seeds") or {}) if reference.get("method") == "lloyd" else {}


def summarize(record) -> dict:
    """E*, and per run and per algorithm: time to each target, final energy relative to E*, memory, passes,
    and (when ``kmeans`` ran) time to k-means' final energy with the speedup over k-means.

    E* is the lowest energy any run reached, or the lowest converged Lloyd energy of the record's seeds where
    that is lower (or equal); ``E_star_source`` says which (``"lloyd"`` or ``"run"``).
    """
    ok = [r for r in record["runs"] if r["status"] == "ok"]
    best = None
    for run in ok:
        for point in run["points"]:
            if best is None or point["energy"] < best[0]:
                best = (point["energy"], run["name"], run["seed"])
    lloyd = [
        (entry["energy"], int(seed))
        for seed, entry in lloyd_references(record).items()
        if entry.get("energy") is not None
    ]
    lowest_lloyd = min(lloyd) if lloyd else None
    summary = {
        "E_star": None,
        "E_star_source": None,
        "E_star_run": None,
        "E_star_lloyd": None,
        "runs": [],
        "algorithms": {},
    }
    if best is not None:
        summary["E_star_run"] = {"name": best[1], "seed": best[2], "energy": best[0]}
    if lowest_lloyd is not None:
        summary["E_star_lloyd"] = {"seed": lowest_lloyd[1], "energy": lowest_lloyd[0]}
    if lowest_lloyd is not None and (best is None or lowest_lloyd[0] <= best[0]):
        e_star, summary["E_star_source"] = lowest_lloyd[0], "lloyd"
    elif best is not None:
        e_star, summary["E_star_source"] = best[0], "run"
    else:
        return summary
    summary["E_star"] = e_star
    targets = record.get("targets", [0.01, 0.02])
    reference = kmeans_reference(record)
    summary["kmeans_reference"] = {str(seed): ref for seed, ref in reference.items()}
    versus = {versus_key(spec): (spec, versus_reference(record, spec)) for spec in record.get("versus", [])}
    summary["versus"] = {
        key: {**spec, "seeds": {str(seed): ref for seed, ref in refs.items()}} for key, (spec, refs) in versus.items()
    }
    by_name = {}
    for run in record["runs"]:
        entry = {"name": run["name"], "seed": run["seed"], "status": run["status"]}
        if run["status"] == "ok":
            entry["time_to"] = {str(t): time_to_reach(run["points"], e_star * (1 + t)) for t in targets}
            if refitted(run["points"]):
                entry["snapshot_time_to"] = {
                    str(t): time_to_reach(run["points"], e_star * (1 + t), snapshots=True) for t in targets
                }
            ref = reference.get(run["seed"])
            if ref is not None:
                entry["time_to_kmeans_final"], entry["speedup_vs_kmeans"] = _time_and_speedup(run["points"], ref)
            entry["versus"] = {}
            for key, (_, refs) in versus.items():
                ref = refs.get(run["seed"])
                if ref is not None and ref["energy"] is not None:
                    time_to, speedup = _time_and_speedup(run["points"], ref, versus[key][0].get("within", 0.0))
                    entry["versus"][key] = {"time": time_to, "speedup": speedup}
            entry["final_relative"] = run["final_energy"] / e_star if run["final_energy"] is not None else None
            entry["best_relative"] = min(p["energy"] for p in run["points"]) / e_star
        summary["runs"].append(entry)
        by_name.setdefault(run["name"], []).append((run, entry))
    for name, pairs in by_name.items():
        ok_pairs = [(r, e) for r, e in pairs if r["status"] == "ok"]
        first = pairs[0][0]
        algorithm = {
            "label": first["label"],
            "kind": first["kind"],
            "runs": len(pairs),
            "ok": len(ok_pairs),
            "statuses": sorted({r["status"] for r, _ in pairs}),
            "reasons": sorted({r["reason"] for r, _ in pairs if r["reason"]}),
        }
        if ok_pairs:
            runs = [r for r, _ in ok_pairs]
            entries = [e for _, e in ok_pairs]
            algorithm["time_to"] = {str(t): _spread([e["time_to"][str(t)] for e in entries]) for t in targets}
            if all("snapshot_time_to" in e for e in entries):
                algorithm["snapshot_time_to"] = {
                    str(t): _spread([e["snapshot_time_to"][str(t)] for e in entries]) for t in targets
                }
            if reference:
                algorithm["time_to_kmeans_final"] = _spread([e.get("time_to_kmeans_final") for e in entries])
                algorithm["speedup_vs_kmeans"] = _spread([e.get("speedup_vs_kmeans") for e in entries])
            algorithm["versus"] = {
                key: {
                    "time": _spread([e["versus"][key]["time"] for e in entries if key in e["versus"]]),
                    "speedup": _spread([e["versus"][key]["speedup"] for e in entries if key in e["versus"]]),
                }
                for key in versus
                if any(key in e["versus"] for e in entries)
            }
            algorithm["final_relative"] = _spread([e["final_relative"] for e in entries])
            algorithm["best_relative"] = _spread([e["best_relative"] for e in entries])
            algorithm["fit_seconds"] = _spread([r["fit_seconds"] for r in runs])
            algorithm["timed_seconds"] = _spread([r["timed_seconds"] for r in runs])
            algorithm["n_iter"] = _spread([r["n_iter"] for r in runs])
            algorithm["passes"] = _spread([r["passes"] for r in runs])
            algorithm["driver_peak_rss"] = max(r["memory"]["driver_peak_rss"] for r in runs)
            workers = [
                r["memory"]["worker_peak_rss"]
                for r in runs
                if r.get("uses_cluster", True) and r["memory"].get("worker_peak_rss")
            ]
            algorithm["worker_peak_rss"] = max(workers) if workers else None
            algorithm["notes"] = sorted({note for r in runs for note in r.get("notes", [])})
        summary["algorithms"][name] = algorithm
    return summary


# -- text --------------------------------------------------------------------------------------------------------------
def seconds_text(value):
    """Seconds as the tables print them (``6.85 s``, ``302 s``); ``not reached`` for None."""
    if value is None:
        return "not reached"
    return f"{value:.3g} s" if value < 100 else f"{value:.0f} s"


def _g(value):
    """A rate or size with three significant digits (no exponent for large values)."""
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def spread_text(spread, formatter, many):
    """A median (and, over ``many`` seeds, its range and how many seeds never reached it), each value through
    ``formatter``: ``0.425 s (0.4 s to 0.5 s)``."""
    text = formatter(spread["median"])
    if many and spread["min"] is not None:
        high = formatter(spread["max"]) if spread["max"] is not None else "not reached"
        text += f" ({formatter(spread['min'])} to {high})"
    if spread.get("not_reached") and spread["median"] is not None:
        text += f", {spread['not_reached']} not reached"
    return text


def speedup_text(value):
    """A speedup as ``2.94x`` (empty for None)."""
    return "" if value is None else f"{value:.2f}x"


def time_to_cell(algorithm, target, many):
    """Time to a target: the whole fit's wall time, and beside it the first snapshot's when that was earlier."""
    text = spread_text(algorithm["time_to"][target], seconds_text, many)
    snapshot = (algorithm.get("snapshot_time_to") or {}).get(target)
    if (
        snapshot is not None
        and snapshot["median"] is not None
        and snapshot["median"] != algorithm["time_to"][target]["median"]
    ):
        text += f" (snapshot {spread_text(snapshot, seconds_text, many)})"
    return text


def kmeans_reference_cell(algorithm, many):
    """Time to k-means' final energy with the speedup over k-means, e.g. ``7.1 s (2.03x)``."""
    return _time_speedup_cell(algorithm.get("time_to_kmeans_final"), algorithm.get("speedup_vs_kmeans"), many)


def versus_cell(algorithm, key, many):
    """Time to a ``--versus`` run's energy with the speedup over that run."""
    figures = (algorithm.get("versus") or {}).get(key)
    return "" if figures is None else _time_speedup_cell(figures["time"], figures["speedup"], many)


def _time_speedup_cell(reached, speedup, many):
    if reached is None:
        return ""
    text = spread_text(reached, seconds_text, many)
    if reached["median"] is not None and speedup["median"] is not None:
        text += f" ({spread_text(speedup, speedup_text, many)})"
    return text


def ratio_text(value):
    """An energy ratio with four decimals (empty for None)."""
    return "" if value is None else f"{value:.4f}"


def number_text(value):
    """A count or median count without needless decimals (empty for None)."""
    if value is None:
        return ""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.3g}" if value < 10 else f"{value:.0f}"
    return f"{int(value)}"


def gemm_limit(record):
    """The float32 GEMM rate the cluster's threads could reach: the best of NumPy's rates measured here."""
    gemm = record["gemm"]
    threads = min(record["cluster"]["threads"] or 1, record["machine"]["cpus"] or 1)
    rates = [gemm["all_threads_gflops"]]
    if gemm.get("one_thread_gflops"):
        rates.append(gemm["one_thread_gflops"] * threads)
    return max(rates)


def _load_range(record) -> str:
    loads = [r.get("load_average_at_start") for r in record["runs"] if r.get("load_average_at_start") is not None]
    return f" ({min(loads):.1f} to {max(loads):.1f} as the runs started)" if loads else ""


def header_lines(record) -> list:
    """The lines above a workload's table: data, machine, GEMM rate, assign pass, E*."""
    w, m, c, s = record["workload"], record["machine"], record["cluster"], record["summary"]
    held = "in this process's memory" if c.get("scheduler") == "threads" else "persisted in the workers' memory"
    storage = held if w["storage"] == "memory" else f"read from Zarr at every pass ({w['location']})"
    lines = [
        f"# {w['output_name']}: {w['description']}",
        "",
        f"{w['n_samples']:,} x {w['n_features']} ({w['source_dtype']} as stored, float32 computed), k = {w['k']}, "
        f"data {storage}; {w['time_budget']:g} s per run; seeds {record['seeds']}.",
        f"Machine: {machine_text(m)}"
        + (f", load average {m['load_average'][0]:.1f} at the start" if m.get("load_average") else "")
        + _load_range(record)
        + (
            f"; Dask's threaded scheduler in this process ({c['threads']} threads, no cluster)"
            if c.get("scheduler") == "threads"
            else f"; cluster: {c['n_workers']} workers x {'/'.join(map(str, c['threads_per_worker']))} thread(s)"
            + (" in this process (threaded workers)" if c.get("in_process") else "")
        )
        + (f", {c['memory_limit_per_worker'][0] / 2**30:.1f} GiB each" if c.get("memory_limit_per_worker") else "")
        + ".",
    ]
    gemm = record["gemm"]
    one = gemm.get("one_thread_gflops")
    lines.append(
        f"float32 GEMM (NumPy, {gemm['size']}^3): "
        + (f"{_g(one)} GFLOP/s on 1 thread, " if one else "")
        + f"{_g(gemm['all_threads_gflops'])} GFLOP/s on all threads."
    )
    a = record["assign_pass"]
    limit = gemm_limit(record)
    lines.append(
        f"Assign pass ({_g(a['flop'] / 1e9)} GFLOP of distance GEMM): {seconds_text(a['median_seconds'])} = "
        f"{_g(a['gflops'])} GFLOP/s, {a['gflops'] / limit:.1%} of the GEMM limit ({_g(limit)} GFLOP/s, that is "
        f"{seconds_text(a['flop'] / limit / 1e9)} per pass)."
    )
    lines += provenance_lines(record)
    lines += e_star_lines(record)
    for seed, ref in (s.get("kmeans_reference") or {}).items():
        lines.append(
            f"k-means' final energy (seed {seed}): {ref['energy']:,.6g}, reached by daskmeans kmeans after "
            f"{seconds_text(ref['time'])} (it stopped on {ref['stop_reason'] or 'unknown'}); the speedup column is "
            "that "
            "time over the time each algorithm first reached the same energy, from the same initial centers."
        )
    for versus in (s.get("versus") or {}).values():
        for seed, ref in versus["seeds"].items():
            if ref["energy"] is None:
                lines.append(f"{_versus_title(versus)} (seed {seed}): none, {ref['missing']}.")
            else:
                lines.append(
                    f"{_versus_title(versus)} (seed {seed}): {ref['energy']:,.6g}, after {seconds_text(ref['time'])}; "
                    f"the column '{versus_column(versus)}' is that time over the time each algorithm first reached "
                    "the same energy, from the same initial centers."
                )
    return lines


def _versus_title(versus) -> str:
    within = f"within {versus['within']:.2g} of " if versus.get("within") else ""
    if versus["iteration"] is None:
        return f"{within}{versus['name']}'s final energy"
    return f"{within}{versus['name']}'s energy after {versus['iteration']} iterations"


def versus_column(versus) -> str:
    """The title of a ``--versus`` column."""
    return f"time to {_versus_title(versus)} (speedup)"


def e_star_lines(record) -> list:
    """How E* was obtained: the converged Lloyd energy of a seed, or the lowest energy a run reached (and why)."""
    s = record["summary"]
    if s["E_star"] is None:
        return []
    run = s.get("E_star_run")
    run_text = f"{run['name']}, seed {run['seed']}" if run else ""
    if s.get("E_star_source") == "lloyd":
        text = (
            f"E* = {s['E_star']:,.6g}, the converged Lloyd energy from the initial centers of seed "
            f"{s['E_star_lloyd']['seed']} (--reference lloyd)"
        )
        if run:
            text += f"; the lowest energy any run reached is {run['energy'] / s['E_star']:.4f} x E* ({run_text})"
    elif lloyd_references(record):
        text = (
            f"E* = {s['E_star']:,.6g}, the lowest energy any run reached ({run_text}), below the converged "
            "Lloyd energy (--reference lloyd)"
        )
        if s.get("E_star_lloyd"):
            text += (
                f"; the lowest converged Lloyd energy (seed {s['E_star_lloyd']['seed']}) is "
                f"{s['E_star_lloyd']['energy'] / s['E_star']:.4f} x E*"
            )
    else:
        text = (
            f"E* = {s['E_star']:,.6g}, the lowest energy any run reached ({run_text}): the older yardstick "
            "(--reference best), easier to come within 1% or 2% of than the converged Lloyd energy "
            "(--reference lloyd)"
        )
    lines = [
        text + f". Energies are exact on all rows, evaluated outside the timed region "
        f"({record['evaluation']['method']})."
    ]
    for seed, entry in lloyd_references(record).items():
        lines.append(f"Converged Lloyd energy (seed {seed}): {describe(entry)}.")
    return lines


def markdown_table(record) -> str:
    """The workload's Markdown section: header lines and one row per algorithm."""
    summary = record["summary"]
    many = len(record["seeds"]) > 1
    targets = record.get("targets", [0.01, 0.02])
    order = sorted(targets, reverse=True)
    with_reference = bool(summary.get("kmeans_reference"))
    versus = summary.get("versus") or {}
    columns = (
        ["algorithm", "status"]
        + [f"time to {t:.0%} of E*" for t in order]
        + (["time to k-means' final energy (speedup)"] if with_reference else [])
        + [versus_column(v) for v in versus.values()]
        + ["final energy / E*", "time used", "iterations", "passes", "driver peak RSS", "worker peak RSS", "notes"]
    )
    rows = []
    for a in summary["algorithms"].values():
        if not a["ok"]:
            status = "/".join(a["statuses"])
            reason = "; ".join(a["reasons"]).replace("|", "/").replace("\n", " ")
            cells = [a["label"], status] + [""] * (len(columns) - 3) + [reason]
        else:
            status = "ok" if a["ok"] == a["runs"] else f"{a['ok']}/{a['runs']} ok"
            cells = [a["label"], status]
            cells += [time_to_cell(a, str(t), many) for t in order]
            if with_reference:
                cells.append(kmeans_reference_cell(a, many))
            cells += [versus_cell(a, key, many) for key in versus]
            cells += [
                spread_text(a["final_relative"], ratio_text, many),
                spread_text(a["fit_seconds"], seconds_text, many),
                number_text(a["n_iter"]["median"]),
                number_text(a["passes"]["median"]),
                gib(a["driver_peak_rss"]),
                gib(a["worker_peak_rss"]),
                "; ".join(a["notes"] + a["reasons"]).replace("|", "/"),
            ]
        rows.append(cells)
    lines = header_lines(record) + [""] + table_lines(columns, rows)
    lines += ["", times_note(record)]
    return "\n".join(lines) + "\n"


def times_note(record) -> str:
    """What the times of a record's table are (a record whose daskmeans runs were fitted again says so)."""
    points = [point for run in record["runs"] for point in run.get("points", [])]
    by_iterations = any(point.get("max_iter") is not None for point in points)
    daskmeans = (
        "a daskmeans time is that of a whole fit, from the call to its return, "
        + (
            "stopped after the iteration of the run's first snapshot within the target, or else given the "
            "max_time at which that snapshot was taken"
            if by_iterations
            else "given the max_time at which a snapshot of the run first was within the target"
        )
        + " (longer until the fit's result was), with the snapshot's time beside it when that was earlier"
        if refitted(points)
        else "a daskmeans snapshot counts the closing pass the fit makes after its last iteration"
    )
    return (
        f"Times are seconds from the start of a fit until its centers could be returned: {daskmeans}; a "
        "scikit-learn KMeans, scikit-learn-intelex KMeans, faiss or dask-ml point is a complete run with that "
        "iteration limit; a MiniBatchKMeans point is the time spent in partial_fit so far. Time used: the timed "
        "seconds of the result each run ended with."
    )


# -- files ------------------------------------------------------------------------------------------------------------
#: The plots of a workload: ``NAME.png`` (energy over wall time), ``NAME-excess.png`` (energy relative to E*).
PLOTS = {"png": plot_energy, "excess": plot_excess}


def write_outputs(record, out_dir) -> list:
    """Write ``NAME.json``, ``NAME.md``, ``NAME.png`` and ``NAME-excess.png``; each file appears complete or not
    at all."""
    return write_report(out_dir, record["workload"]["output_name"], record, markdown_table(record), PLOTS)


def rebuild(json_path, out_dir=None) -> list:
    """Rebuild the summary, table and plots of a workload from its JSON record alone (the summary is recomputed
    from the runs' evaluated points, so figures added to the report since the run appear too)."""
    with open(json_path) as f:
        record = json.load(f)
    record["summary"] = summarize(record)
    write_text(json_path, record_json(record))
    out_dir = out_dir or os.path.dirname(os.path.abspath(json_path))
    paths = output_paths(out_dir, record["workload"]["output_name"], PLOTS)
    write_text(paths["md"], markdown_table(record))
    return [paths["md"], *write_plots(record, paths, PLOTS)]
