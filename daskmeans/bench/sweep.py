"""The n x k sweep: one workload subsampled to several sizes and clustered into several numbers of clusters, every
algorithm and peer in each cell, and one table saying in which cells daskmeans is ahead.

Each cell is an energy benchmark of its own (:func:`daskmeans.bench.runner.run_workload`: the same initial
centers for every run, E* the converged Lloyd energy, times of whole fits); the sweep's record keeps every cell's
record and, per cell, the fastest daskmeans algorithm and the fastest peer at 2% and 1% of E*::

    daskmeans bench descriptors --sweep-n 100000,300000,960000 --sweep-k 64,256,1000,4096 \\
        --versus sklearn-lloyd --time-budget 120

The largest cell gets the time budget; every other cell a share proportional to its ``n x k`` (the cost of a
pass), at least :data:`MIN_CELL_BUDGET` seconds.
"""

from __future__ import annotations

from dataclasses import replace

from ..exceptions import InvalidParameterError
from .common import code_commit, created, machine_text, provenance_lines, table_lines, write_report
from .report import markdown_table as cell_markdown
from .report import ratio_text, seconds_text

SCHEMA = "daskmeans-bench-sweep/1"
#: The least time budget of a cell, in seconds (the workload's own budget when that is smaller).
MIN_CELL_BUDGET = 5.0
#: How much sooner than the fastest peer the fastest daskmeans algorithm should come within 1% of E*.
LEAD_AT_1 = 2.0
#: ... and within 2% of E* (sooner than every peer).
LEAD_AT_2 = 1.0
#: How much sooner than scikit-learn's Lloyd the default ``KMeans`` should reach Lloyd's final energy.
LEAD_OVER_LLOYD = 2.0
#: The most the best daskmeans algorithm's final energy may lie above E*.
FINAL_WITHIN = 0.005
#: The shortest time a lead is divided by, in seconds.
SHORTEST_TIME = 1e-6
#: The ``--versus`` run the default ``KMeans`` is timed against.
LLOYD_PEER = "sklearn-lloyd"
#: The daskmeans algorithm held to :data:`LEAD_OVER_LLOYD`.
DEFAULT_ALGORITHM = "kmeans"


def output_name(workload_output_name) -> str:
    """The file name (without extension) of a workload's sweep record."""
    return f"{workload_output_name}-sweep"


def check_grid(sizes, clusters) -> tuple:
    """``(sizes, clusters)`` as sorted tuples of distinct positive integers.

    Raises
    ------
    InvalidParameterError
        One list given without the other, an empty list, a value below 1, or a k not below its smallest size.
    """
    if (sizes is None) != (clusters is None):
        raise InvalidParameterError("--sweep-n and --sweep-k go together: give the row counts and the values of k.")
    if sizes is None:
        return None, None
    for values, option in ((sizes, "--sweep-n"), (clusters, "--sweep-k")):
        if not values or any(not isinstance(v, int) or v < 1 for v in values):
            raise InvalidParameterError(f"{option} takes positive integers separated by commas; got {values!r}.")
    sizes, clusters = tuple(sorted(set(sizes))), tuple(sorted(set(clusters)))
    if clusters[-1] >= sizes[0]:
        raise InvalidParameterError(
            f"Every k of --sweep-k must be below every row count of --sweep-n (k = {clusters[-1]} against "
            f"n = {sizes[0]}); drop the largest k or the smallest n."
        )
    return sizes, clusters


def quick_grid(workload, sizes, clusters) -> tuple:
    """The grid of a quick run: the smallest and largest of each list, scaled so that the largest cell is the
    quick workload's own size and k (at least 2 clusters, and at least 4 rows per cluster)."""
    sizes, clusters = sorted({sizes[0], sizes[-1]}), sorted({clusters[0], clusters[-1]})
    n_scale, k_scale = workload.n_samples / sizes[-1], workload.k / clusters[-1]
    small_n = [max(1, round(n * n_scale)) for n in sizes]
    small_k = [max(2, round(k * k_scale)) for k in clusters]
    small_k = [min(k, small_n[0] // 4) for k in small_k]
    return tuple(sorted(set(small_n))), tuple(sorted(set(small_k)))


def cell_budget(time_budget, n, k, largest) -> float:
    """A cell's seconds per run: ``time_budget`` for the largest cell (``largest`` = its ``n x k``), a share
    proportional to ``n x k`` for the others, never below :data:`MIN_CELL_BUDGET` (or ``time_budget`` if smaller)."""
    return max(min(MIN_CELL_BUDGET, time_budget), time_budget * n * k / largest)


def sweep_cells(workload, sizes, clusters) -> list:
    """The workload of every cell, sizes outer and k inner (quick workloads get :func:`quick_grid`)."""
    if workload.quick:
        sizes, clusters = quick_grid(workload, sizes, clusters)
    largest = sizes[-1] * clusters[-1]
    return [
        replace(workload, n_samples=n, k=k, time_budget=cell_budget(workload.time_budget, n, k, largest))
        for n in sizes
        for k in clusters
    ]


def compact(record) -> dict:
    """A cell's record without the runs' per-iteration histories (the points evaluated on all rows are kept)."""
    runs = [{key: value for key, value in run.items() if key != "history"} for run in record["runs"]]
    return {**record, "runs": runs}


def run_sweep(workload, sizes, clusters, run_cell, echo=print) -> dict:
    """Run every cell of the grid and return the sweep's record.

    Parameters
    ----------
    workload : Workload
        The workload every cell subsamples.
    sizes, clusters : sequence of int
        The grid (see :func:`check_grid`).
    run_cell : callable
        ``run_cell(cell_workload) -> dict``: one cell's complete energy record.
    echo : callable
    """
    cells = []
    for cell in sweep_cells(workload, sizes, clusters):
        echo(f"cell n = {cell.n_samples:,}, k = {cell.k}: {cell.time_budget:.3g} s per run")
        cells.append(compact(run_cell(cell)))
    first = cells[0]
    record = {
        "schema": SCHEMA,
        "created": created(),
        **code_commit(),
        "command": first["command"],
        "workload": {"name": workload.name, "output_name": workload.output_name, "description": workload.description},
        "grid": {
            "n": sorted({c["workload"]["n_samples"] for c in cells}),
            "k": sorted({c["workload"]["k"] for c in cells}),
        },
        "machine": first["machine"],
        "cluster": first["cluster"],
        "gemm": first["gemm"],
        "seeds": first["seeds"],
        "goals": {
            "lead_at_1": LEAD_AT_1,
            "lead_at_2": LEAD_AT_2,
            "lead_over_lloyd": LEAD_OVER_LLOYD,
            "final_within": FINAL_WITHIN,
        },
        "cells": cells,
    }
    record["summary"] = summarize(record)
    return record


# -- what each cell says ---------------------------------------------------------------------------------------------
def _fastest(algorithms, kind, target):
    """``(name, median time)`` of the algorithm of ``kind`` first within ``target`` of E*, or None when none was."""
    times = [
        (a["time_to"][target]["median"], name)
        for name, a in algorithms.items()
        if a["kind"] == kind and a["ok"] and a["time_to"][target]["median"] is not None
    ]
    return None if not times else {"name": min(times)[1], "time": min(times)[0]}


def _longest_peer_run(algorithms) -> float | None:
    """The longest a peer ran (its median fit seconds): the bound a lead is at least when no peer reached."""
    seconds = [a["fit_seconds"]["median"] for a in algorithms.values() if a["kind"] == "peer" and a["ok"]]
    return max(seconds) if seconds else None


def lead(ours, peer, algorithms) -> dict:
    """How much sooner daskmeans reached a target than the fastest peer: ``{"ratio", "at_least"}``.

    ``at_least`` is True where no peer reached the target, the ratio then being the longest peer run over
    daskmeans' time; the ratio is None where daskmeans did not reach it.
    """
    if ours is None:
        return {"ratio": None, "at_least": False}
    if peer is None:
        longest = _longest_peer_run(algorithms)
        return {"ratio": None if longest is None else longest / ours["time"], "at_least": True}
    # a run can be within the target at time 0 (its initial centers): the ratio stays finite for the JSON record
    return {"ratio": peer["time"] / max(ours["time"], SHORTEST_TIME), "at_least": False}


def _lloyd_lead(cell) -> dict | None:
    """The default KMeans' speedup over scikit-learn's Lloyd to the energy Lloyd ended with, and whether Lloyd
    ended converged (every seed's run stopped by its own tolerance: as a ``--versus`` run it runs on past the
    cell's time budget, but not past its ``max_iter``) and after how many iterations at most (None when the cell
    ran without ``--versus sklearn-lloyd`` or without KMeans)."""
    algorithm = cell["summary"]["algorithms"].get(DEFAULT_ALGORITHM)
    figures = ((algorithm or {}).get("versus") or {}).get(LLOYD_PEER)
    if figures is None:
        return None
    lloyd = [run for run in cell["runs"] if run["name"] == LLOYD_PEER and run["status"] == "ok"]
    return {
        "time": figures["time"]["median"],
        "speedup": figures["speedup"]["median"],
        "lloyd_converged": bool(lloyd) and all(run.get("stop_reason") == "converged" for run in lloyd),
        "lloyd_iterations": max((run["n_iter"] for run in lloyd), default=None),
    }


def _best_final(algorithms) -> float | None:
    """The lowest final energy / E* of the daskmeans algorithms (the median over seeds of each)."""
    finals = [a["final_relative"]["median"] for a in algorithms.values() if a["kind"] == "daskmeans" and a["ok"]]
    finals = [f for f in finals if f is not None]
    return min(finals) if finals else None


def cell_summary(cell) -> dict:
    """One row of the sweep: the cell's size, E*, fastest runs at 2% and 1% of E*, leads and what falls short."""
    summary, workload = cell["summary"], cell["workload"]
    algorithms = summary["algorithms"]
    row = {
        "n": workload["n_samples"],
        "k": workload["k"],
        "time_budget": workload["time_budget"],
        "E_star": summary["E_star"],
    }
    short = []
    for target, goal in (("0.02", LEAD_AT_2), ("0.01", LEAD_AT_1)):
        ours, peer = _fastest(algorithms, "daskmeans", target), _fastest(algorithms, "peer", target)
        ahead = lead(ours, peer, algorithms)
        row[target] = {"daskmeans": ours, "peer": peer, "lead": ahead}
        if ahead["ratio"] is None or (not ahead["at_least"] and ahead["ratio"] < goal):
            short.append(f"{float(target):.0%} of E*")
    row["over_lloyd"] = over = _lloyd_lead(cell)
    if over is not None and not over["lloyd_converged"]:
        short.append("KMeans over Lloyd (Lloyd not converged)")
    elif over is not None and (over["speedup"] or 0.0) < LEAD_OVER_LLOYD:
        short.append("KMeans over Lloyd")
    row["best_final"] = _best_final(algorithms)
    if row["best_final"] is None or row["best_final"] > 1 + FINAL_WITHIN:
        short.append("final energy")
    row["short_of"] = short
    return row


def summarize(record) -> dict:
    """Every cell's row (:func:`cell_summary`) and the cells that fall short of a goal."""
    rows = [cell_summary(cell) for cell in record["cells"]]
    return {"cells": rows, "short": [f"n = {r['n']:,}, k = {r['k']}" for r in rows if r["short_of"]]}


# -- text -------------------------------------------------------------------------------------------------------------
def _run_text(found) -> str:
    return "not reached" if found is None else f"{found['name']} {seconds_text(found['time'])}"


def lead_text(ahead) -> str:
    """``2.31x``, ``> 4.5x`` (no peer reached), or ``-`` (daskmeans did not reach)."""
    if ahead["ratio"] is None:
        return "-"
    return f"> {ahead['ratio']:.2g}x" if ahead["at_least"] else f"{ahead['ratio']:.2f}x"


def _lloyd_text(over) -> str:
    if over is None:
        return ""
    reached = "not reached" if over["time"] is None else f"{seconds_text(over['time'])} ({over['speedup']:.2f}x)"
    if over.get("lloyd_converged", True):
        return reached
    iterations = over["lloyd_iterations"]
    return f"{reached}; Lloyd not converged, stopped after {iterations} iteration{'' if iterations == 1 else 's'}"


def sweep_table(record) -> list:
    """The sweep's table: one row per cell, its shortfalls flagged in bold."""
    columns = [
        "n",
        "k",
        "s per run",
        "to 2%: daskmeans",
        "fastest peer",
        "lead",
        "to 1%: daskmeans",
        "fastest peer",
        "lead",
        f"KMeans to {LLOYD_PEER}'s energy",
        "best final / E*",
        "short of",
    ]
    rows = []
    for row in record["summary"]["cells"]:
        rows.append(
            [
                f"{row['n']:,}",
                str(row["k"]),
                f"{row['time_budget']:.3g}",
                _run_text(row["0.02"]["daskmeans"]),
                _run_text(row["0.02"]["peer"]),
                lead_text(row["0.02"]["lead"]),
                _run_text(row["0.01"]["daskmeans"]),
                _run_text(row["0.01"]["peer"]),
                lead_text(row["0.01"]["lead"]),
                _lloyd_text(row["over_lloyd"]),
                ratio_text(row["best_final"]),
                "**" + ", ".join(row["short_of"]) + "**" if row["short_of"] else "",
            ]
        )
    return table_lines(columns, rows)


def goals_text(record) -> str:
    goals = record["goals"]
    return (
        f"A cell is short of a goal where the fastest daskmeans algorithm comes within 1% of E* less than "
        f"{goals['lead_at_1']:g}x sooner than the fastest peer, or within 2% of E* not sooner than every peer; where "
        f"the default KMeans reaches the energy scikit-learn's Lloyd ended with less than "
        f"{goals['lead_over_lloyd']:g}x sooner than Lloyd did, or Lloyd did not converge (within its max_iter, or "
        "within the cell's time budget where its ladder stopped there): the goal is then not shown, the energy "
        "being that of Lloyd's last run, not its converged one; or "
        "where no daskmeans algorithm ends within "
        f"{goals['final_within']:.1%} of E*. A lead written '> x' is a bound: no peer reached the target, and "
        "x is the longest peer run over daskmeans' time."
    )


def markdown_table(record) -> str:
    """The sweep's report: what was run, the table of cells, then each cell's own table."""
    w = record["workload"]
    lines = [
        f"# {output_name(w['output_name'])}: {w['description']}, n x k",
        "",
        f"Rows n = {', '.join(f'{n:,}' for n in record['grid']['n'])} (seeded uniform subsamples) crossed with "
        f"k = {', '.join(map(str, record['grid']['k']))}; seeds {record['seeds']}.",
        f"Machine: {machine_text(record['machine'])}.",
        *provenance_lines(record),
        "",
        *sweep_table(record),
        "",
        goals_text(record),
        "",
        "Times are whole fits from the call to its return (daskmeans) or complete runs (peers); each cell's "
        "report below says how each time was obtained.",
    ]
    for cell in record["cells"]:
        title, _, body = cell_markdown(cell).partition("\n")
        lines += ["", f"## n = {cell['workload']['n_samples']:,}, k = {cell['workload']['k']}", body.rstrip("\n")]
    return "\n".join(lines) + "\n"


# -- plot and files ---------------------------------------------------------------------------------------------------
def plot(record, path):
    """The lead at 1% and 2% of E* over the grid (one heat map each, n down, k across), each cell annotated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    sizes, clusters = record["grid"]["n"], record["grid"]["k"]
    figure, panels = plt.subplots(1, 2, figsize=(10, 0.9 * len(sizes) + 2.2), layout="constrained")
    for axes, target, goal in zip(panels, ("0.02", "0.01"), (LEAD_AT_2, LEAD_AT_1)):
        grid = np.full((len(sizes), len(clusters)), np.nan)
        labels = {}
        for row in record["summary"]["cells"]:
            at = (sizes.index(row["n"]), clusters.index(row["k"]))
            ahead = row[target]["lead"]
            grid[at] = np.nan if ahead["ratio"] is None else ahead["ratio"]
            labels[at] = lead_text(ahead)
        image = axes.imshow(np.log2(grid), cmap="RdYlGn", vmin=-2, vmax=2, aspect="auto")
        for (i, j), text in labels.items():
            axes.text(j, i, text, ha="center", va="center", fontsize=8)
        axes.set_xticks(range(len(clusters)), [str(k) for k in clusters])
        axes.set_yticks(range(len(sizes)), [f"{n:,}" for n in sizes])
        axes.set_xlabel("k")
        axes.set_ylabel("n")
        axes.set_title(f"lead to {float(target):.0%} of E* (goal {goal:g}x)")
    figure.colorbar(image, ax=list(panels), label="log2 of the lead over the fastest peer")
    figure.suptitle(f"{record['workload']['output_name']}: fastest daskmeans against the fastest peer")
    figure.savefig(path, dpi=110)
    plt.close(figure)


#: The sweep's plot: ``NAME-sweep.png``.
PLOTS = {"png": plot}


def write_outputs(record, out_dir) -> list:
    """Write ``NAME-sweep.json``, ``NAME-sweep.md`` and ``NAME-sweep.png``."""
    return write_report(out_dir, output_name(record["workload"]["output_name"]), record, markdown_table(record), PLOTS)
