"""The benchmark harness works: records complete and well formed, tables and plots written, skips and
failures recorded with their reasons, bad input refused early. No timing is asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SHARED_DATA

from daskmeans import KMeans
from daskmeans.bench import graph_overhead, report, sizing
from daskmeans.bench.command import bench
from daskmeans.bench.common import output_paths
from daskmeans.bench.peers import PEERS, PeerContext, availability
from daskmeans.bench.runner import _guarded
from daskmeans.exceptions import InvalidParameterError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def scheduler(cluster_client):
    """The address of the session's LocalCluster: the harness connects to it instead of starting its own."""
    return cluster_client.scheduler.address


def invoke(*args):
    result = CliRunner().invoke(bench, [str(a) for a in args], catch_exceptions=False)
    return result


def load_record(out, name):
    paths = output_paths(str(out), name, report.PLOTS)
    for path in paths.values():
        assert os.path.getsize(path) > 0, path
    for image in (paths["png"], paths["excess"]):
        with open(image, "rb") as f:
            assert f.read(8) == PNG_SIGNATURE
    with open(paths["json"]) as f:
        record = json.load(f)
    with open(paths["md"]) as f:
        table = f.read()
    return record, table


def check_record(record, table):
    """Schema-like checks that hold for any workload record."""
    for key in (
        "schema",
        "created",
        "command",
        "workload",
        "machine",
        "cluster",
        "gemm",
        "assign_pass",
        "seeds",
        "targets",
        "evaluation",
        "runs",
        "reference",
        "summary",
    ):
        assert key in record, key
    assert record["schema"] == "daskmeans-bench/1"
    assert record["command"].startswith("daskmeans bench")
    workload = record["workload"]
    for key in ("name", "output_name", "k", "time_budget", "n_samples", "n_features", "storage", "source_dtype"):
        assert key in workload, key
    assert record["gemm"]["all_threads_gflops"] > 0
    assert record["assign_pass"]["flop"] == 2.0 * workload["n_samples"] * workload["k"] * workload["n_features"]
    assert record["assign_pass"]["median_seconds"] > 0
    assert record["cluster"]["n_workers"] >= 1 or record["cluster"]["scheduler"] == "threads"
    energies = []
    for run in record["runs"]:
        for key in ("name", "label", "kind", "seed", "status", "reason", "memory"):
            assert key in run, key
        assert run["status"] in ("ok", "skipped", "failed")
        if run["status"] != "ok":
            assert run["reason"], run
            continue
        for key in (
            "fit_seconds",
            "timed_seconds",
            "points",
            "final_energy",
            "n_iter",
            "passes",
            "history",
            "stop_reason",
            "notes",
            "params",
        ):
            assert key in run, key
        points = run["points"]
        own_seeding = isinstance(run["params"].get("init"), str)
        # the shared initial centers come first (unless the run seeded itself); a run that ended on them (its
        # budget spent in its first pass, as on a busy machine) marks them as its final point
        if not own_seeding:
            assert points[0]["kind"] in ("init", "final") and points[0]["time"] == 0.0
            assert points[0]["kind"] == "init" or len(points) == 1
        assert [p["time"] for p in points] == sorted(p["time"] for p in points)
        assert all(math.isfinite(p["energy"]) and p["energy"] >= 0 for p in points)
        assert run["final_energy"] in [p["energy"] for p in points]
        assert run["timed_seconds"] >= run["fit_seconds"] > 0
        assert run["memory"]["driver_peak_rss"] >= run["memory"]["driver_baseline_rss"] > 0
        energies.extend(p["energy"] for p in points)
    # every run of one seed starts from the same centers
    for seed in record["seeds"]:
        starts = {
            run["points"][0]["energy"]
            for run in record["runs"]
            if run["status"] == "ok" and run["seed"] == seed and not isinstance(run["params"].get("init"), str)
        }
        assert len(starts) <= 1
    summary = record["summary"]
    # E*: the lowest energy any run reached, or the converged Lloyd energy of a seed where that is lower
    lloyd = report.lloyd_references(record)
    if "--reference best" in record["command"]:
        assert record["reference"]["method"] == "best" and not lloyd
    else:
        assert record["reference"]["method"] == "lloyd"
        assert sorted(map(int, lloyd)) == record["seeds"]
        for entry in lloyd.values():
            assert entry["max_iter"] == 300 and 1 <= entry["n_iter"] <= 300 and entry["energy"] > 0
            assert f"Converged Lloyd energy (seed {entry['seed']}): {entry['energy']:,.6g}" in table
    lloyd_energies = [entry["energy"] for entry in lloyd.values()]
    assert summary["E_star"] == min(energies + lloyd_energies)
    assert summary["E_star_source"] == ("lloyd" if lloyd_energies and min(lloyd_energies) <= min(energies) else "run")
    for entry in summary["runs"]:
        if entry["status"] == "ok":
            assert entry["final_relative"] >= 1.0
            for value in entry["time_to"].values():
                assert value is None or value >= 0
    assert f"E* = {summary['E_star']:,.6g}" in table
    for algorithm in summary["algorithms"].values():
        assert algorithm["label"] in table
    kmeans_runs = {run["seed"]: run for run in record["runs"] if run["name"] == "kmeans" and run["status"] == "ok"}
    assert set(map(int, summary["kmeans_reference"])) == set(kmeans_runs)
    for entry in summary["runs"]:
        if entry["status"] == "ok" and entry["seed"] in kmeans_runs:
            reference = summary["kmeans_reference"][str(entry["seed"])]
            assert reference["energy"] == min(p["energy"] for p in kmeans_runs[entry["seed"]]["points"])
            if entry["name"] == "kmeans":
                assert entry["speedup_vs_kmeans"] == 1.0
    # the table is rebuilt from the JSON alone
    assert report.markdown_table(record) == table


def test_time_to_the_kmeans_final_energy_and_speedup():
    """The VRKM paper's yardstick: when each run first reached the energy k-means ended with (same seed)."""

    def run(name, seed, points):
        return {
            "name": name,
            "label": name,
            "kind": "daskmeans",
            "seed": seed,
            "status": "ok",
            "reason": None,
            "points": [{"time": t, "energy": e} for t, e in points],
            "final_energy": points[-1][1],
            "fit_seconds": points[-1][0],
            "timed_seconds": points[-1][0],
            "n_iter": 1,
            "passes": 1,
            "memory": {"driver_peak_rss": 1, "worker_peak_rss": 1},
            "stop_reason": "max_time",
        }

    record = {
        "targets": [0.01],
        "runs": [
            run("kmeans", 0, [(0.0, 10.0), (4.0, 2.0), (8.0, 1.5)]),
            run("vrkm", 0, [(0.0, 10.0), (2.0, 1.6), (3.0, 1.4)]),
            run("kmeans", 1, [(0.0, 9.0), (6.0, 3.0)]),
            run("vrkm", 1, [(0.0, 9.0), (5.0, 3.5)]),
        ],
    }
    summary = report.summarize(record)
    assert summary["kmeans_reference"] == {
        "0": {"energy": 1.5, "time": 8.0, "stop_reason": "max_time"},
        "1": {"energy": 3.0, "time": 6.0, "stop_reason": "max_time"},
    }
    by_run = {(e["name"], e["seed"]): e for e in summary["runs"]}
    assert by_run[("vrkm", 0)]["time_to_kmeans_final"] == 3.0
    assert by_run[("vrkm", 0)]["speedup_vs_kmeans"] == 8.0 / 3.0
    assert by_run[("vrkm", 1)]["time_to_kmeans_final"] is None
    assert by_run[("vrkm", 1)]["speedup_vs_kmeans"] == 0.0  # not reached: no speedup
    assert summary["algorithms"]["vrkm"]["speedup_vs_kmeans"]["values"] == [8.0 / 3.0, 0.0]
    assert summary["algorithms"]["kmeans"]["speedup_vs_kmeans"]["median"] == 1.0


def test_time_to_a_versus_run_energy_after_an_iteration_or_at_its_end():
    """``--versus faiss-all@2``: when each run first reached the energy faiss had after 2 iterations (same seed);
    a seed where faiss stopped sooner has no reference and says so."""

    def run(name, seed, points, kind="daskmeans"):
        return {
            "name": name,
            "label": name,
            "kind": kind,
            "seed": seed,
            "status": "ok",
            "reason": None,
            "points": [{"time": t, "energy": e, "iteration": i} for i, (t, e) in enumerate(points)],
            "final_energy": points[-1][1],
            "fit_seconds": points[-1][0],
            "timed_seconds": points[-1][0],
            "n_iter": 1,
            "passes": 1,
            "memory": {"driver_peak_rss": 1, "worker_peak_rss": 1},
            "stop_reason": "max_time",
        }

    record = {
        "targets": [0.01],
        "versus": [{"name": "faiss-all", "iteration": 2}, {"name": "faiss-all", "iteration": None}],
        "runs": [
            run("faiss-all", 0, [(0.0, 10.0), (4.0, 3.0), (8.0, 2.0), (12.0, 1.8)], kind="peer"),
            run("kmeans", 0, [(0.0, 10.0), (1.0, 2.5), (2.0, 1.9), (3.0, 1.7)]),
            run("nmbatch", 0, [(0.0, 10.0), (5.0, 4.0)]),
            run("faiss-all", 1, [(0.0, 9.0), (4.0, 3.0)], kind="peer"),
            run("kmeans", 1, [(0.0, 9.0), (1.0, 2.0)]),
        ],
    }
    summary = report.summarize(record)
    at_two = summary["versus"]["faiss-all@2"]["seeds"]
    assert at_two["0"] == {"energy": 2.0, "time": 8.0}
    assert at_two["1"]["energy"] is None and "stopped at iteration 1" in at_two["1"]["missing"]
    assert summary["versus"]["faiss-all"]["seeds"]["1"] == {"energy": 3.0, "time": 4.0}
    by_run = {(e["name"], e["seed"]): e for e in summary["runs"]}
    assert by_run[("kmeans", 0)]["versus"]["faiss-all@2"] == {"time": 2.0, "speedup": 4.0}
    assert by_run[("kmeans", 0)]["versus"]["faiss-all"] == {"time": 3.0, "speedup": 4.0}
    assert by_run[("nmbatch", 0)]["versus"]["faiss-all@2"] == {"time": None, "speedup": 0.0}
    assert by_run[("faiss-all", 0)]["versus"]["faiss-all@2"]["speedup"] == 1.0
    assert "faiss-all@2" not in by_run[("kmeans", 1)]["versus"]
    assert by_run[("kmeans", 1)]["versus"]["faiss-all"] == {"time": 1.0, "speedup": 4.0}
    assert summary["algorithms"]["kmeans"]["versus"]["faiss-all"]["speedup"]["values"] == [4.0, 4.0]
    # --versus-within: reached once within that relative distance (2.5 is within 30% of 2.0; the reference's own
    # time stays the time it had its energy)
    record["versus"] = [{"name": "faiss-all", "iteration": 2, "within": 0.3}]
    loose = {(e["name"], e["seed"]): e for e in report.summarize(record)["runs"]}
    assert loose[("kmeans", 0)]["versus"]["faiss-all@2"] == {"time": 1.0, "speedup": 8.0}
    assert loose[("nmbatch", 0)]["versus"]["faiss-all@2"] == {"time": None, "speedup": 0.0}
    assert loose[("faiss-all", 0)]["versus"]["faiss-all@2"] == {"time": 8.0, "speedup": 1.0}


def test_quick_synthetic_with_peers_and_seeds(scheduler, tmp_path):
    result = invoke(
        "synthetic",
        "--quick",
        "--scheduler",
        scheduler,
        "--out",
        tmp_path,
        "--seeds",
        2,
        "--time-budget",
        0.5,
        "--peers",
        "sklearn-lloyd,sklearn-minibatch,sklearn-intelex,faiss,faiss-all,dask-ml",
        "--versus",
        "faiss-all@2",
        "--param",
        "kmeans:tol=0",
        "--param",
        "nmbatch:initial_batch_size=500",
        "--param",
        "vrkm:init=two-level",
    )
    assert result.exit_code == 0, result.output
    record, table = load_record(tmp_path, "synthetic-quick")
    check_record(record, table)
    runs = record["runs"]
    # --param reaches the estimators, and the recorded command repeats it
    assert all(r["params"]["tol"] == 0 for r in runs if r["name"] == "kmeans")
    assert all(r["params"]["initial_batch_size"] == 500 for r in runs if r["name"] == "nmbatch")
    assert "--param kmeans:tol=0 --param nmbatch:initial_batch_size=500" in record["command"]
    # a run seeded by itself has no point at the shared initial centers, and says so
    own = [r for r in runs if r["name"] == "vrkm"]
    assert all(r["params"]["init"] == "two-level" and r["points"][0]["time"] > 0 for r in own)
    assert all(any("seeded by itself" in note for note in r["notes"]) for r in own)
    assert all(r["points"][0]["kind"] == "init" for r in runs if r["name"] == "kmeans")
    if availability(PEERS["faiss-all"])[0]:
        # the iterate --versus names is evaluated, and every run is timed against it
        assert record["versus"] == [{"name": "faiss-all", "iteration": 2, "within": 0.0}]
        faiss_runs = [r for r in runs if r["name"] == "faiss-all"]
        assert all(any(p["iteration"] == 2 and p["energy"] is not None for p in r["points"]) for r in faiss_runs)
        assert all(max(p["iteration"] for p in r["points"]) == 2 for r in faiss_runs)  # faiss stops there
        assert "time to faiss-all's energy after 2 iterations (speedup)" in table
        assert set(record["summary"]["versus"]["faiss-all@2"]["seeds"]) == {"0", "1"}
        assert record["summary"]["algorithms"]["faiss-all"]["versus"]["faiss-all@2"]["speedup"]["median"] == 1.0
    from daskmeans.registry import energy_algorithm_names

    assert sorted({r["name"] for r in runs}) == sorted(
        [
            *energy_algorithm_names(),
            "sklearn-lloyd",
            "sklearn-minibatch",
            "sklearn-intelex",
            "faiss",
            "faiss-all",
            "dask-ml",
        ]
    )
    assert record["seeds"] == [0, 1] and all(sum(r["name"] == n for r in runs) == 2 for n in {r["name"] for r in runs})
    for run in runs:
        installed = run["name"] not in PEERS or availability(PEERS[run["name"]])[0]
        if installed:
            assert run["status"] == "ok", (run["name"], run["reason"])
        else:  # CI installs the test extra only: a peer that is not installed is skipped, with the reason
            assert run["status"] == "skipped" and "not installed" in run["reason"]
    kmeans = [r for r in runs if r["name"] == "kmeans"]
    # daskmeans KMeans hands out a snapshot per iteration: more than the start and the end are known
    assert all(r["candidates_total"] > 2 and r["history"] for r in kmeans)
    spread = record["summary"]["algorithms"]["kmeans"]["final_relative"]
    assert spread["min"] <= spread["median"] <= spread["max"] and len(spread["values"]) == 2
    assert record["workload"]["time_budget"] == 0.5


def test_out_of_core_zarr_skips_in_memory_peers_with_reason(scheduler, tmp_path):
    result = invoke(
        "out-of-core",
        "--quick",
        "--scheduler",
        scheduler,
        "--out",
        tmp_path,
        "--n-samples",
        6000,
        "--n-features",
        8,
        "-k",
        5,
        "--time-budget",
        0.5,
        "--algorithms",
        "kmeans",
        "--peers",
        "sklearn-lloyd,dask-ml",
        "--driver-memory",
        "64KB",
    )
    assert result.exit_code == 0, result.output
    record, table = load_record(tmp_path, "out-of-core-quick")
    check_record(record, table)
    assert record["workload"]["storage"] == "zarr" and record["workload"]["in_driver"] is False
    assert os.path.isdir(record["workload"]["location"])
    assert record["evaluation"]["method"] == "cluster pass"
    by_name = {r["name"]: r for r in record["runs"]}
    assert by_name["sklearn-lloyd"]["status"] == "skipped"
    reason = by_name["sklearn-lloyd"]["reason"]
    assert "in-memory peer" in reason and "--driver-memory" in reason
    for name in ("dask-ml", "kmeans"):
        assert by_name[name]["status"] == "ok", (name, by_name[name]["reason"])
    assert "skipped" in table and "in-memory peer" in table


def test_user_npy_file(scheduler, tmp_path):
    X = np.random.default_rng(0).normal(size=(3000, 5)).astype(np.float32)
    np.save(tmp_path / "points.npy", X)
    out = tmp_path / "out"
    result = invoke(
        "--data",
        tmp_path / "points.npy",
        "-k",
        4,
        "--quick",
        "--scheduler",
        scheduler,
        "--out",
        out,
        "--time-budget",
        0.5,
        "--algorithms",
        "kmeans",
        "--peers",
        "sklearn-elkan",
        "--no-refine",
        "--reference",
        "best",
    )
    assert result.exit_code == 0, result.output
    record, table = load_record(out, "data-points-quick")
    check_record(record, table)
    assert record["workload"]["n_samples"] == 3000 and record["workload"]["k"] == 4
    assert "--no-refine" in record["command"] and "--reference best" in table
    assert not (out / "reference-energies.json").exists()


@pytest.mark.skipif(not (SHARED_DATA / "kddcup04_bio.npz").exists(), reason="shared datasets not present")
def test_quick_slice_of_a_shared_dataset(scheduler, tmp_path):
    result = invoke(
        "kdd",
        "--quick",
        "--data-dir",
        SHARED_DATA,
        "--n-samples",
        2000,
        "-k",
        10,
        "--scheduler",
        scheduler,
        "--out",
        tmp_path,
        "--time-budget",
        0.5,
        "--algorithms",
        "kmeans",
        "--peers",
        "sklearn-lloyd",
    )
    assert result.exit_code == 0, result.output
    record, table = load_record(tmp_path, "kdd-quick")
    check_record(record, table)
    assert record["workload"]["n_samples"] == 2000 and record["workload"]["n_features"] == 74


def test_sizing_quick(scheduler, tmp_path):
    result = invoke(
        "sizing",
        "--quick",
        "--sizes",
        "4000,8000",
        "--n-features",
        8,
        "-k",
        4,
        "--scheduler",
        scheduler,
        "--out",
        tmp_path,
    )
    assert result.exit_code == 0, result.output
    paths = output_paths(str(tmp_path), sizing.output_name(quick=True), sizing.PLOTS)
    with open(paths["json"]) as f:
        record = json.load(f)
    assert [s["n_samples"] for s in record["sizes"]] == [4000, 8000]
    for size in record["sizes"]:
        assert size["assign_seconds"] > 0 and size["iteration_seconds"] > 0 and size["n_iter"] == 2
        assert os.path.isdir(size["path"])
    assert record["model"]["b_per_thread"] > 0 and record["model"]["tau"] > 0
    assert [row["workers"] for row in record["extrapolation"]] == [1, 4, 16, 64, 256]
    assert all(row["kmeans_seconds"] > row["pass_seconds"] > 0 for row in record["extrapolation"])
    graph = record["graph"]
    assert graph["n_blocks"] == 512 and graph["rows_per_block"] == 8
    for name in ("kmeans", "nmbatch"):
        assert graph[name]["n_iter"] == 4 and graph[name]["iteration_seconds"] > 0
        assert graph[name]["driver_cpu_seconds_per_iteration"] > 0
    assert [row["algorithm"] for row in record["graph_projection"]] == ["kmeans", "nmbatch"]
    for row in record["graph_projection"]:
        assert [i["workers"] for i in row["iterations"]] == [16, 64, 256]
        assert all(i["seconds"] > 0 for i in row["iterations"])
    # the projection is the model applied to this record's own measurements (at these tiny sizes the fitted
    # per-row cost is noise, so whether more workers project a shorter iteration is not fixed)
    expected = graph_overhead.project(
        graph,
        record["iteration_model"]["b_per_thread"],
        record["model"]["threads_per_worker"],
        record["target_rows"],
        record["model"]["tau"],
    )
    assert record["graph_projection"] == json.loads(json.dumps(expected))
    with open(paths["md"]) as f:
        report = f.read()
    assert "1,000,000,000 rows" in report and "## A pass over 512 blocks" in report
    with open(paths["png"], "rb") as f:
        assert f.read(8) == PNG_SIGNATURE


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "Name at least one workload"),
        (["nope"], "Unknown workload"),
        (["--data", "x.npy"], "-k"),
        (["--data", "missing.npy", "-k", "3"], "does not exist"),
        (["synthetic", "--peers", "sklearn,faiss"], "Unknown peer"),
        (["synthetic", "--algorithms", "nope"], "Unknown algorithm"),
        (["synthetic", "--seeds", "0"], "--seeds"),
        (["synthetic", "--time-budget", "-1"], "--time-budget"),
        (["synthetic", "-k", "0"], "-k"),
        (["descriptors", "--n-features", "3"], "--n-features"),
        (["synthetic", "--memory-limit", "lots"], "not a memory size"),
        (["synthetic", "--sizes", "10,20"], "sizing"),
        (["synthetic", "--reference", "lowest"], "--reference"),
        (["synthetic", "--versus", "faiss-every"], "neither a daskmeans algorithm nor a peer"),
        (["synthetic", "--peers", "faiss", "--versus", "faiss-all@25"], "add it to --peers"),
        (["synthetic", "--algorithms", "nmbatch", "--versus", "kmeans"], "add it to --algorithms"),
        (["synthetic", "--versus", "faiss-all@0"], "positive integer"),
        (["synthetic", "--versus", "faiss-all@x"], "positive integer"),
        (["synthetic", "--peers", "faiss-two-level", "--versus", "faiss-two-level@2"], "name it without '@'"),
        (["synthetic", "--param", "tol=0"], "ALGORITHM:NAME=VALUE"),
        (["synthetic", "--versus-within", "1e-4"], "name one"),
        (["synthetic", "--versus", "faiss-all", "--versus-within", "-0.1"], "--versus-within must be"),
        (["synthetic", "--versus", "faiss-all", "--versus-within", "1"], "--versus-within must be"),
        (["synthetic", "--param", "kmeans:nope=1"], "no parameter 'nope'"),
        (["synthetic", "--param", "kmeans:random_state=3"], "no parameter 'random_state' that the bench leaves free"),
        (["synthetic", "--param", "kmeans:init=[[0, 1]]"], "init may name a seeding method"),
        (["synthetic", "--param", "kmeans:init=nope"], "--param for kmeans: init"),
        (["synthetic", "--algorithms", "nmbatch", "--param", "kmeans:tol=0"], "add it to --algorithms"),
        (["synthetic", "--param", "kmeans:tol=-1"], "--param for kmeans: tol"),
        (["synthetic", "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], "--scheduler"),
    ],
)
def test_bad_input_is_refused_before_any_work(tmp_path, args, message):
    result = CliRunner().invoke(bench, [*args, "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert message in result.output
    assert not (tmp_path / "out").exists()


def test_missing_dataset_names_the_file_and_the_fix(tmp_path):
    result = CliRunner().invoke(bench, ["descriptors", "--data-dir", str(tmp_path), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0
    assert "cifar_dsift.npz" in result.output and "--data-dir" in result.output


def test_existing_outputs_are_kept_without_overwrite(tmp_path):
    (tmp_path / "synthetic-quick.md").write_text("earlier results")
    result = CliRunner().invoke(bench, ["synthetic", "--quick", "--out", str(tmp_path)])
    assert result.exit_code != 0 and "--overwrite" in result.output
    assert (tmp_path / "synthetic-quick.md").read_text() == "earlier results"


def test_memory_storage_larger_than_the_driver_limit_is_refused(scheduler, tmp_path):
    result = CliRunner().invoke(
        bench, ["synthetic", "--quick", "--scheduler", scheduler, "--driver-memory", "1KB", "--out", str(tmp_path)]
    )
    assert result.exit_code != 0 and "--storage zarr" in result.output
    assert not (tmp_path / "synthetic-quick.json").exists()


def test_a_failing_peer_is_recorded_with_its_reason():
    X = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
    context = PeerContext(X=X, array=None, client=None, init=X[:4, :2].copy(), k=4, seed=0, budget=0.2)
    trace, error, memory, _ = _guarded(lambda: PEERS["sklearn-lloyd"].run(context), (None, 0.05, {}))
    assert trace is None
    assert error.startswith("ValueError") and "shape" in error
    assert memory["driver_peak_rss"] > 0


def test_module_entry_point():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    ok = subprocess.run([sys.executable, "-m", "daskmeans.bench", "--help"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and "WORKLOAD" in ok.stdout and "--time-budget" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "daskmeans.bench", "nope"], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "Unknown workload" in bad.stderr
    main = subprocess.run(
        [sys.executable, "-m", "daskmeans", "bench", "--help"], capture_output=True, text=True, env=env
    )
    assert main.returncode == 0 and "--peers" in main.stdout


def test_kmeans_center_snapshots():
    X = np.random.default_rng(1).normal(size=(500, 3)).astype(np.float32)
    init = X[:4].copy()
    model = KMeans(4, init=init, max_iter=5, tol=0.0, snapshot_centers=True).fit(X)
    snapshots = model.center_snapshots_
    assert [s["iteration"] for s in snapshots] == list(range(model.n_iter_ + 1))
    np.testing.assert_array_equal(snapshots[0]["centers"], init)
    np.testing.assert_array_equal(snapshots[-1]["centers"], model.cluster_centers_)
    walls = [s["wall_time"] for s in snapshots]
    assert walls == sorted(walls)
    # snapshot i holds the centers whose energy the algorithm reports at iteration i + 1
    for snapshot, record in zip(snapshots[:-1], model.history_):
        labels_energy = np.min(((X[:, None, :] - snapshot["centers"][None]) ** 2).sum(-1), axis=1).mean()
        assert record["energy"] == pytest.approx(labels_energy, rel=1e-5)
    assert not hasattr(KMeans(4, init=init, max_iter=2).fit(X), "center_snapshots_")
    with pytest.raises(InvalidParameterError, match="snapshot_centers"):
        KMeans(4, snapshot_centers="yes").fit(X)


@pytest.mark.parametrize(
    "args, expected",
    [
        (["synthetic", "--quick"], "daskmeans bench synthetic --quick"),
        (["synthetic"], "daskmeans bench synthetic"),
        (
            ["descriptors", "--no-refine", "--seeds", "3", "--peers", "faiss"],
            "daskmeans bench descriptors --peers faiss --seeds 3 --no-refine",
        ),
        (
            ["mnist", "--reference", "best", "--peers", "faiss-all,sklearn-intelex"],
            "daskmeans bench mnist --peers faiss-all,sklearn-intelex --reference best",
        ),
        (
            ["kdd", "--overwrite", "--scheduler", "tcp://127.0.0.1:8786", "--seeds", "2"],
            "daskmeans bench kdd --seeds 2",
        ),
    ],
)
def test_the_recorded_command_line_holds_only_what_was_given(args, expected):
    from daskmeans.bench.command import bench, recorded_command_line

    with bench.make_context("bench", list(args)) as ctx:
        recorded = recorded_command_line(ctx)
    assert sorted(recorded.split()) == sorted(expected.split())
    assert recorded.startswith("daskmeans bench " + args[0])


def test_every_algorithm_and_peer_on_the_threaded_scheduler(tmp_path):
    """``--local-workers scheduler``: no cluster at all, the runs and the peers on Dask's threaded scheduler in this
    process (the setting of a fit from Python without a client)."""
    result = invoke(
        "synthetic",
        "--quick",
        "--local-workers",
        "scheduler",
        "--workers",
        1,
        "--threads-per-worker",
        2,
        "--out",
        tmp_path,
        "--time-budget",
        0.5,
        "--peers",
        "sklearn-lloyd,dask-ml",
    )
    assert result.exit_code == 0, result.output
    record, table = load_record(tmp_path, "synthetic-quick")
    check_record(record, table)
    assert record["cluster"] == {
        "in_process": True,
        "scheduler": "threads",
        "n_workers": 0,
        "threads": 2,
        "threads_per_worker": [],
        "memory_limit_per_worker": [],
    }
    assert "Dask's threaded scheduler in this process (2 threads, no cluster)" in table
    from daskmeans.registry import energy_algorithm_names

    runs = {r["name"]: r for r in record["runs"]}
    assert set(energy_algorithm_names()) <= set(runs)
    for name, run in runs.items():
        installed = name not in PEERS or availability(PEERS[name])[0]
        assert run["status"] == ("ok" if installed else "skipped"), (name, run["reason"])


def test_a_peer_and_its_refining_rungs_get_every_core_inside_the_fits_blas_limit():
    """The bench's in-process modes hold BLAS at one thread for daskmeans' tasks; a peer's run and the rungs its
    trace adds later run with every pool at one thread per core (:func:`~daskmeans.engine.blas.machine_threads`)."""
    from dask.system import CPU_COUNT as cores
    from threadpoolctl import threadpool_info

    from daskmeans.bench.peers import Peer, run_peer
    from daskmeans.bench.traces import Candidate, Trace
    from daskmeans.engine.blas import one_blas_thread

    seen = []

    def rung(m):
        seen.append({info["num_threads"] for info in threadpool_info()})
        return Candidate(step=m, time=0.1 * m, centers=np.zeros((1, 1), np.float32), iteration=m, passes=float(m))

    def run(ctx):
        return Trace(candidates=[rung(1)], fit_seconds=0.1, timed_seconds=0.1, extend=rung)

    peer = Peer(name="probe", label="probe", module="numpy", in_memory=True, run=run)
    with one_blas_thread():
        trace = run_peer(peer, None)
        trace.extend(2)
    assert seen == [{cores}, {cores}]
