"""``daskmeans bench --sweep-n N,... --sweep-k K,...``: one energy benchmark per (n, k) cell on a real cluster, one
record whose table says, cell by cell, how the fastest daskmeans algorithm stands against the fastest peer.

No timing is asserted: the tests check which cells ran, at which sizes and budgets, and that the table is what the
cells' own records say.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from daskmeans.bench import sweep
from daskmeans.bench.command import bench
from daskmeans.bench.records import TABLES
from daskmeans.bench.report import time_to_reach
from daskmeans.bench.suite import Entry, entry_arguments
from daskmeans.bench.workloads import WORKLOADS
from daskmeans.exceptions import InvalidParameterError


def invoke(*args):
    return CliRunner().invoke(bench, list(map(str, args)))


# -- the grid ---------------------------------------------------------------------------------------------------------
def test_the_grid_is_sorted_and_each_list_needs_the_other():
    assert sweep.check_grid((300, 100, 300), (8, 4)) == ((100, 300), (4, 8))
    assert sweep.check_grid(None, None) == (None, None)
    with pytest.raises(InvalidParameterError, match="--sweep-n and --sweep-k go together"):
        sweep.check_grid((100,), None)
    with pytest.raises(InvalidParameterError, match="--sweep-k takes positive integers"):
        sweep.check_grid((100,), (0, 4))
    with pytest.raises(InvalidParameterError, match="below every row count"):
        sweep.check_grid((100, 1000), (4, 100))


def test_the_largest_cell_gets_the_budget_and_the_others_a_share_by_n_times_k_with_a_floor():
    cells = sweep.sweep_cells(WORKLOADS["synthetic"][0], (10_000, 100_000), (10, 100))
    assert [(c.n_samples, c.k) for c in cells] == [(10_000, 10), (10_000, 100), (100_000, 10), (100_000, 100)]
    budget = WORKLOADS["synthetic"][0].time_budget
    assert cells[-1].time_budget == budget
    assert cells[1].time_budget == cells[2].time_budget == max(sweep.MIN_CELL_BUDGET, budget / 10)
    assert cells[0].time_budget == sweep.MIN_CELL_BUDGET
    # a budget below the floor is every cell's budget
    assert sweep.cell_budget(1.0, 10, 10, 10**6) == 1.0


def test_a_quick_sweep_keeps_the_corners_scaled_to_the_quick_workload():
    quick = WORKLOADS["descriptors"][1]
    sizes, clusters = sweep.quick_grid(quick, (100_000, 300_000, 960_000), (64, 256, 1000, 4096))
    assert sizes[-1] == quick.n_samples and clusters[-1] == quick.k
    assert len(sizes) == len(clusters) == 2
    assert clusters[0] >= 2 and all(4 * k <= sizes[0] for k in clusters)


def test_a_lead_is_finite_and_a_bound_where_no_peer_reached():
    algorithms = {"faiss": {"kind": "peer", "ok": 1, "fit_seconds": {"median": 3.0}}}
    assert sweep.lead({"time": 0.5}, {"time": 1.0}, algorithms) == {"ratio": 2.0, "at_least": False}
    assert sweep.lead({"time": 0.5}, None, algorithms) == {"ratio": 6.0, "at_least": True}
    assert sweep.lead(None, {"time": 1.0}, algorithms) == {"ratio": None, "at_least": False}
    assert sweep.lead({"time": 0.0}, {"time": 1.0}, algorithms)["ratio"] == 1.0 / sweep.SHORTEST_TIME


def _cell_with_lloyd(stop_reason, speedup):
    """A cell's record as :func:`sweep.cell_summary` reads it: KMeans timed against scikit-learn's Lloyd, whose one
    run stopped for ``stop_reason`` after 12 iterations."""
    never = {"median": None}
    kmeans = {
        "kind": "daskmeans",
        "ok": 1,
        "time_to": {"0.02": {"median": 0.5}, "0.01": {"median": 1.0}},
        "final_relative": {"median": 1.0},
        "versus": {"sklearn-lloyd": {"time": {"median": 1.0}, "speedup": {"median": speedup}}},
    }
    lloyd = {"kind": "peer", "ok": 1, "time_to": {"0.02": never, "0.01": never}, "fit_seconds": {"median": 9.0}}
    return {
        "workload": {"n_samples": 1000, "k": 8, "time_budget": 5.0},
        "summary": {"E_star": 1.0, "algorithms": {"kmeans": kmeans, "sklearn-lloyd": lloyd}},
        "runs": [{"name": "sklearn-lloyd", "status": "ok", "stop_reason": stop_reason, "n_iter": 12}],
    }


def test_kmeans_over_lloyd_counts_only_against_a_lloyd_that_converged():
    """A Lloyd stopped by the cell's time budget ended above its converged energy: the goal is then not shown,
    whatever the speedup to the energy it ended with, and the table says so."""
    converged = sweep.cell_summary(_cell_with_lloyd("converged", 2.5))
    assert converged["short_of"] == [] and converged["over_lloyd"]["lloyd_converged"]
    assert sweep.cell_summary(_cell_with_lloyd("converged", 1.5))["short_of"] == ["KMeans over Lloyd"]
    cut_short = sweep.cell_summary(_cell_with_lloyd("time_budget", 12.0))
    assert cut_short["short_of"] == ["KMeans over Lloyd (Lloyd not converged)"]
    assert (
        sweep._lloyd_text(cut_short["over_lloyd"]) == "1 s (12.00x); Lloyd not converged, stopped after 12 iterations"
    )


# -- bad input: refused before any work, nothing written -------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--sweep-n", "1000,2000"], "go together"),
        (["--sweep-n", "1000", "--sweep-k", "4", "-k", "8"], "drop --n-samples and -k"),
        (["--sweep-n", "1000", "--sweep-k", "4", "--n-samples", "500"], "drop --n-samples and -k"),
        (["--sweep-n", "1000", "--sweep-k", "4000"], "below every row count"),
        (["--sweep-n", "1000,many", "--sweep-k", "4"], "--sweep-n: write whole numbers"),
        (["--sweep-n", "1000", "--sweep-k", "4", "--algorithms", "vc-gmm"], "make energy records"),
    ],
)
def test_a_bad_grid_is_refused_before_anything_runs(tmp_path, args, message):
    out = tmp_path / "out"
    result = invoke("synthetic", "--out", out, *args)
    assert result.exit_code != 0
    assert message in " ".join(result.output.split())
    assert not out.exists() or not any(out.iterdir())


# -- a whole sweep on the cluster -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def swept(cluster_client, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    result = invoke(
        "synthetic",
        "--sweep-n",
        "3000,1500",
        "--sweep-k",
        "8,4",
        "--time-budget",
        "1",
        "--algorithms",
        "kmeans,nmbatch",
        "--peers",
        "sklearn-lloyd,faiss",
        "--versus",
        "sklearn-lloyd",
        "--versus-within",
        "1e-4",
        "--max-points",
        "4",
        "--scheduler",
        cluster_client.scheduler.address,
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "synthetic-sweep.json").read_text())


@pytest.mark.slow
def test_a_sweep_runs_every_cell_and_writes_one_record(swept):
    out, record = swept
    assert sorted(p.name for p in out.iterdir() if p.suffix != "" and "reference" not in p.name) == [
        "synthetic-sweep.json",
        "synthetic-sweep.md",
        "synthetic-sweep.png",
    ]
    assert record["schema"] == sweep.SCHEMA
    assert record["grid"] == {"n": [1500, 3000], "k": [4, 8]}
    shapes = [(c["workload"]["n_samples"], c["workload"]["k"]) for c in record["cells"]]
    assert shapes == [(1500, 4), (1500, 8), (3000, 4), (3000, 8)]
    for cell in record["cells"]:
        assert {run["name"] for run in cell["runs"]} == {"kmeans", "nmbatch", "sklearn-lloyd", "faiss"}
        assert all("history" not in run for run in cell["runs"])
        assert cell["reference"]["method"] == "lloyd"
    assert "--sweep-n 3000,1500 --sweep-k 8,4" in record["command"]
    assert (out / "synthetic-sweep.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_each_row_of_the_table_is_what_its_cells_runs_reached(swept):
    _, record = swept
    for cell, row in zip(record["cells"], record["summary"]["cells"]):
        e_star = cell["summary"]["E_star"]
        for target in ("0.02", "0.01"):
            times = {
                run["name"]: time_to_reach(run["points"], e_star * (1 + float(target)))
                for run in cell["runs"]
                if run["status"] == "ok"
            }
            for kind, names in (("daskmeans", ("kmeans", "nmbatch")), ("peer", ("sklearn-lloyd", "faiss"))):
                reached = {name: times[name] for name in names if times.get(name) is not None}
                fastest = row[target][kind]
                if reached:
                    assert fastest["time"] == min(reached.values())
                    assert reached[fastest["name"]] == fastest["time"]
                else:
                    assert fastest is None
            ours, peer = row[target]["daskmeans"], row[target]["peer"]
            if ours is not None and peer is not None:
                assert row[target]["lead"]["ratio"] == pytest.approx(peer["time"] / ours["time"])
        assert row["over_lloyd"] is not None
        assert bool(row["short_of"]) == (f"n = {row['n']:,}, k = {row['k']}" in record["summary"]["short"])


@pytest.mark.slow
def test_the_report_has_the_table_and_each_cells_own_section(swept):
    out, record = swept
    report = (out / "synthetic-sweep.md").read_text()
    table = "\n".join(TABLES["sweep"](record))
    assert table in report
    assert f"Regenerate with: `{record['command']}`." in report
    for n, k in ((1500, 4), (1500, 8), (3000, 4), (3000, 8)):
        assert f"\n## n = {n:,}, k = {k}\n" in report
    assert report == sweep.markdown_table(record)


# -- the suite --------------------------------------------------------------------------------------------------------
def test_a_suite_entry_with_a_grid_makes_a_sweep_record_measured_against_converged_lloyd():
    entry = Entry("grid", "A grid", ("descriptors",), ("--sweep-n", "1000,2000", "--sweep-k", "4,8"))
    assert entry.kind == "sweep"
    assert entry.yardstick == "lloyd"
    assert entry.record_names() == ["descriptors-sweep"]
    assert entry.record_names(quick=True) == ["descriptors-quick-sweep"]
    assert set(entry.plots()) == set(sweep.PLOTS)
    args = entry_arguments(entry, "docs/benchmarks", quick=True)
    assert "--sweep-n" in args and "--reference-cache" in args
