"""The suite's records read back: each entry's JSON records, the compact table the benchmarks page shows for each,
and the README's headline table, all rendered from the records alone.

A record is the JSON file a ``daskmeans bench`` run writes (:mod:`.report`, :mod:`.kernel_quality`,
:mod:`.coreset_tradeoff`, :mod:`.sizing`); the suite keeps each entry's records in ``ROOT/NAME/``.
"""

from __future__ import annotations

import json
import math
import os
import posixpath

from . import coreset_tradeoff, kernel_quality, report, sizing, sweep
from .common import machine_text, table_lines
from .suite import SUITE, entry_named

#: The entry whose record the README's headline table is read from.
HEADLINE_ENTRY = "descriptors"
#: The targets of the headline table, as relative distances to E*.
HEADLINE_TARGETS = (0.02, 0.01)


# -- reading --------------------------------------------------------------------------------------------------------
def entry_records(root, entry, quick=False) -> list:
    """``[(file name without extension, record)]`` of an entry's records present under ``ROOT/NAME``."""
    found = []
    for name in entry.record_names(quick):
        path = os.path.join(root, entry.name, f"{name}.json")
        if os.path.exists(path):
            with open(path) as f:
                found.append((name, json.load(f)))
    return found


def all_records(root, quick=False) -> list:
    """``[(entry, [(name, record)])]`` for every entry of the suite with at least one record under ``root``."""
    found = [(entry, entry_records(root, entry, quick)) for entry in SUITE]
    return [(entry, records) for entry, records in found if records]


def record_link(root, entry, name) -> str:
    """The path of a record's Markdown report, relative to the folder holding ``root``'s page (``root`` itself
    when ``root`` is ``""``)."""
    return posixpath.join(root, entry.name, f"{name}.md") if root else posixpath.join(entry.name, f"{name}.md")


# -- what a record says in one line ----------------------------------------------------------------------------------
def cluster_text(record) -> str:
    """How the daskmeans runs of an energy record were spread: worker processes, threads or no cluster."""
    c = record["cluster"]
    if c.get("scheduler") == "threads":
        return f"Dask's threaded scheduler in one process ({c['threads']} threads)"
    threads = "/".join(map(str, c["threads_per_worker"]))
    kind = "threaded workers" if c.get("in_process") else "worker processes"
    return f"{c['n_workers']} {kind} x {threads} thread{'' if threads == '1' else 's'}"


def e_star_text(record) -> str:
    """E* of an energy record and where it comes from."""
    s = record["summary"]
    if s["E_star"] is None:
        return "no E* (no run finished)"
    if s.get("E_star_source") == "lloyd":
        entry = report.lloyd_references(record).get(str(s["E_star_lloyd"]["seed"]), {})
        if entry.get("converged") is False:
            return (
                f"E* = {s['E_star']:,.6g}, Lloyd's energy from the same initial centers after its cap of "
                f"{entry['n_iter']} iterations"
            )
        return f"E* = {s['E_star']:,.6g}, the converged Lloyd energy"
    run = s.get("E_star_run") or {}
    if report.lloyd_references(record):
        return (
            f"E* = {s['E_star']:,.6g}, the lowest energy any run reached ({run.get('name')}), below the "
            "converged Lloyd energy"
        )
    return (
        f"E* = {s['E_star']:,.6g}, the lowest energy any run reached ({run.get('name')}): the older "
        "yardstick, `--reference best`"
    )


def energy_caption(record) -> str:
    """Data, machine and E* of an energy record, in a sentence."""
    w = record["workload"]
    seeds = len(record["seeds"])
    refined = (
        ""
        if "--no-refine" not in (record.get("command") or "")
        else " Times are those of the first evaluated point past each target (`--no-refine`): upper bounds."
    )
    return (
        f"{w['n_samples']:,} x {w['n_features']}, k = {w['k']:,}, {w['time_budget']:g} s per run, "
        f"{seeds} seed{'s' if seeds > 1 else ''}; {machine_text(record['machine'])}; daskmeans on "
        f"{cluster_text(record)}; {e_star_text(record)}.{refined}"
    )


# -- the page's table of each kind -----------------------------------------------------------------------------------
def energy_table(record) -> list:
    """Time to 2% and 1% of E*, to each ``--versus`` energy (or k-means' final energy), final energy / E*."""
    summary = record["summary"]
    many = len(record["seeds"]) > 1
    versus = summary.get("versus") or {}
    with_kmeans = bool(summary.get("kmeans_reference")) and not versus
    columns = (
        ["algorithm", "time to 2% of E*", "time to 1% of E*"]
        + (["time to k-means' final energy (speedup)"] if with_kmeans else [])
        + [report.versus_column(v) for v in versus.values()]
        + ["final energy / E*", "iterations"]
    )
    rows = []
    for a in summary["algorithms"].values():
        if not a["ok"]:
            reason = "; ".join(a["reasons"]).replace("|", "/").replace("\n", " ")
            rows.append([a["label"], f"{'/'.join(a['statuses'])}: {reason}"] + [""] * (len(columns) - 2))
            continue
        cells = [a["label"]] + [
            report.spread_text(a["time_to"][str(t)], report.seconds_text, many) for t in (0.02, 0.01)
        ]
        if with_kmeans:
            cells.append(report.kmeans_reference_cell(a, many))
        cells += [report.versus_cell(a, key, many) for key in versus]
        cells += [
            report.spread_text(a["final_relative"], report.ratio_text, many),
            report.number_text(a["n_iter"]["median"]),
        ]
        rows.append(cells)
    return table_lines(columns, rows)


def quality_table(record) -> list:
    """ARI, NMI, time and speed-up over the full batch (median [min, max] over the seeds)."""
    return table_lines(kernel_quality.QUALITY_COLUMNS, kernel_quality.quality_rows(record))


def tradeoff_table(record) -> list:
    """vc-GMM's relative error against its speedup, with each baseline's error in the same time."""
    if record.get("skipped"):
        return [f"Skipped: {record['skipped']}"]
    many = coreset_tradeoff.several_seeds(record)
    rows = [
        [
            coreset_tradeoff.method_label(run, many),
            f"{run['size']:,}",
            f"{run['seconds']:.2f} s",
            f"{run['speedup']:.1f}x",
            f"{100 * run['error']:.1f}%",
            coreset_tradeoff.baselines_at_time(run),
        ]
        for run in record["runs"]
        if run["method"] in ("k-means++", "vc-gmm")
    ]
    return table_lines(
        [
            "method",
            "rows",
            "time",
            "speedup",
            "relative error",
            "in that time, k-means++ on LWCS / on a uniform sample; random-seeded k-means on a uniform sample",
        ],
        rows,
        right=(1, 2, 3, 4),
    )


def sizing_table(record) -> list:
    """The measured sizes, then the extrapolation to a billion rows."""
    return sizing.sizes_lines(record) + [""] + sizing.extrapolation_lines(record)


TABLES = {
    "energy": energy_table,
    "sweep": sweep.sweep_table,
    "quality": quality_table,
    "vc-gmm": tradeoff_table,
    "sizing": sizing_table,
}


# -- the README's headline -------------------------------------------------------------------------------------------
def _fastest(entries, target):
    """The entry of ``entries`` (summary algorithms) that reached ``target`` first (None when none did)."""
    reached = [
        (a["time_to"][str(target)]["median"], name)
        for name, a in entries.items()
        if a.get("ok") and a["time_to"][str(target)]["median"] is not None
    ]
    return min(reached)[1] if reached else None


def headline_table(root="docs/benchmarks", entry_name=HEADLINE_ENTRY) -> str:
    """The README's headline: the fastest daskmeans algorithm and every peer of the descriptors record, their time
    to 2% and 1% of E* and final energy, with the daskmeans algorithm's speedup over the fastest peer.

    Parameters
    ----------
    root : str
        The suite's output folder, as the README links it (``docs/benchmarks``).
    entry_name : str
        The entry whose (single) record is read.

    Returns
    -------
    str
        A Markdown table and one line naming the data, the machine and the record.
    """
    entry = entry_named(entry_name)
    ((name, record),) = entry_records(root, entry)[:1]
    algorithms = record["summary"]["algorithms"]
    ours = {n: a for n, a in algorithms.items() if a["kind"] == "daskmeans"}
    peers = {n: a for n, a in algorithms.items() if a["kind"] == "peer" and a["ok"]}
    best = _fastest(ours, 0.01) or _fastest(ours, 0.02)
    budget = record["workload"]["time_budget"]
    rows = []
    for key, a in [(best, ours[best]), *peers.items()]:
        cells = [a["label"]]
        for target in HEADLINE_TARGETS:
            seconds = a["time_to"][str(target)]["median"]
            text = report.seconds_text(seconds) if seconds is not None else f"not within {budget:g} s"
            fastest_peer = _fastest(peers, target)
            if key == best and seconds and fastest_peer:
                ratio = peers[fastest_peer]["time_to"][str(target)]["median"] / seconds
                text += (
                    f" ({ratio:.2f}x sooner than the fastest peer)"
                    if ratio >= 1
                    else f" (behind the fastest peer: {1 / ratio:.2f}x its time)"
                )
            cells.append(text)
        cells.append(report.ratio_text(a["final_relative"]["median"]))
        rows.append(cells)
    columns = ["algorithm or peer", "time to 2% of E*", "time to 1% of E*", f"final energy / E* ({budget:g} s)"]
    lines = table_lines(columns, rows)
    w, seeds = record["workload"], len(record["seeds"])
    lines += [
        "",
        (
            f"{w['description']}, k = {w['k']:,}, {seeds} seed{'s' if seeds > 1 else ''}; "
            f"{machine_text(record['machine'])}; daskmeans on "
            f"{cluster_text(record)}, the peers in the driver on every core; {e_star_text(record)}. Record: "
            f"[{entry.name}]({record_link(root, entry, name)})."
        ),
    ]
    return "\n".join(lines) + "\n"


# -- ratios for the papers' claims -----------------------------------------------------------------------------------
def time_within(run, energy, within) -> float | None:
    """When ``run`` first had an evaluated energy within ``within`` (relative) of ``energy``."""
    times = [
        p["time"] for p in run.get("points") or () if p["energy"] is not None and p["energy"] <= energy * (1 + within)
    ]
    return min(times) if times else None


def symmetric_speedups(record, name, reference, within) -> list:
    """Per seed, ``reference``'s time over ``name``'s, each to within ``within`` of the energy ``reference`` ended
    with: both sides held to the same target (None where ``name`` never got there)."""
    runs = {(r["name"], r["seed"]): r for r in record["runs"] if r["status"] == "ok"}
    ratios = []
    for seed in record["seeds"]:
        ours, theirs = runs.get((name, seed)), runs.get((reference, seed))
        if ours is None or theirs is None:
            ratios.append(None)
            continue
        target = theirs["final_energy"]
        mine, its = time_within(ours, target, within), time_within(theirs, target, within)
        ratios.append(its / mine if mine and its else None)
    return ratios


def ratio_list(ratios) -> str:
    """``1.38x, 1.32x, not reached``."""
    return ", ".join("not reached" if r is None or not math.isfinite(r) else f"{r:.2f}x" for r in ratios)


def time_to(record, name, target) -> float | None:
    """The median time an algorithm of an energy record took to ``target`` of E* (None: not reached)."""
    algorithm = record["summary"]["algorithms"].get(name)
    return algorithm["time_to"][str(target)]["median"] if algorithm and algorithm.get("ok") else None
