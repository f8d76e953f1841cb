"""Run workloads: start (or join) a cluster, run every algorithm and peer per seed, evaluate, write outputs."""

from __future__ import annotations

import gc
import os
import time
import warnings
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import psutil

from .._version import __version__
from ..engine.cluster import ClusterSpec
from ..exceptions import InvalidParameterError
from ..registry import ALGORITHMS, energy_algorithm_names
from . import coreset_tradeoff, report, sizing, sweep
from .common import (
    check_out_dir,
    check_seeds,
    cluster_info,
    code_commit,
    created,
    load_average,
    machine_info,
    output_paths,
    refuse_existing,
    settle,
    split_names,
    warm_up,
)
from .energy import DaskEnergy, InMemoryEnergy, measure_assign_pass, measure_sgemm
from .estimator_runs import run_daskmeans, warning_texts
from .kernel_quality import run_quality
from .monitor import MemoryMonitor, worker_processes
from .peers import PEERS, PeerContext, availability, run_peer
from .reference import DEFAULT_CACHE_NAME, check_reference, describe, reference_energies, reference_or_failure
from .refinement import confirm_wall_times, fit_exact_to_yardsticks, refine_all
from .run_options import check_params, check_versus
from .traces import Candidate, Trace, drop_repeats, evaluate, release_centers, select_spread
from .workloads import SIZING, Workload, _parse_memory, load_data, resolve_workloads, scatter_rows

SCHEMA = "daskmeans-bench/1"
#: Relative distances to E* whose first-reach times the tables report.
TARGETS = (0.01, 0.02)


@dataclass
class BenchOptions:
    """What ``daskmeans bench`` was asked to do (see :mod:`daskmeans.bench.command` for each option)."""

    workloads: tuple = ()
    quick: bool = False
    out_dir: str = "bench-results"
    algorithms: tuple | None = None
    peers: tuple | None = None
    data_path: str | None = None
    k: int | None = None
    seeds: int = 1
    time_budget: float | None = None
    data_dir: str | None = None
    work_dir: str | None = None
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    n_samples: int | None = None
    n_features: int | None = None
    storage: str | None = None
    batch_size: int | None = None
    sizes: tuple | None = None
    sweep_n: tuple | None = None
    sweep_k: tuple | None = None
    max_points: int = 10
    refine: bool = True
    driver_memory: str | None = None
    overwrite: bool = False
    quality: bool = False
    reference: str = "lloyd"
    reference_cache: str | None = None
    versus: tuple | None = None
    versus_within: float = 0.0
    params: tuple | dict = ()
    command_line: str = ""
    resolved: list = field(default_factory=list)


#: Above this many distances per pass (rows x centers: 10,000,000 rows at k = 1000, or 960,000 rows at
#: k = 65,536, minutes either way) the assign pass is timed once instead of three times, and the algorithms get no
#: untimed run on the data (:func:`warm_up_on_data`).
LONG_PASS_DISTANCES = 10_000_000 * 1000
#: The budget of each algorithm's untimed run on the data before the timed ones (:func:`warm_up_on_data`).
DATA_WARM_UP_SECONDS = 1.0


def check_options(options: BenchOptions) -> BenchOptions:
    """Check every option and the files the workloads need, before any expensive work.

    Raises
    ------
    InvalidParameterError, FileNotFoundError, OutputExistsError
    """
    if not options.workloads and options.data_path is None:
        raise InvalidParameterError(
            "Name at least one workload (e.g. 'daskmeans bench descriptors --quick') or pass your data with "
            "--data PATH -k K."
        )
    options.algorithms = split_names(options.algorithms, list(ALGORITHMS), "algorithm(s)")
    options.peers = split_names(options.peers, list(PEERS), "peer(s)")
    check_seeds(options.seeds)
    options.versus = check_versus(options.versus, options.algorithms, options.peers, options.versus_within)
    options.params = check_params(options.params, options.algorithms)
    if not isinstance(options.max_points, int) or options.max_points < 2:
        raise InvalidParameterError(f"--max-points must be an integer >= 2, got {options.max_points!r}.")
    if options.driver_memory is not None:
        _parse_memory(options.driver_memory)
    if options.sizes is not None:
        if SIZING not in options.workloads:
            raise InvalidParameterError("--sizes applies to the 'sizing' workload; add 'sizing' to the workloads.")
        if not options.sizes or any(not isinstance(s, int) or s < 2 for s in options.sizes):
            raise InvalidParameterError(f"--sizes must be row counts >= 2, e.g. 250000,1000000; got {options.sizes!r}.")
    options.sweep_n, options.sweep_k = sweep.check_grid(options.sweep_n, options.sweep_k)
    if _sweep_asked(options):
        _check_sweep(options)
    options.resolved = resolve_workloads(
        options.workloads,
        quick=options.quick,
        data_path=options.data_path,
        k=options.k,
        data_dir=options.data_dir,
        n_samples=options.n_samples,
        n_features=options.n_features,
        time_budget=options.time_budget,
        storage=options.storage,
        batch_size=options.batch_size,
    )
    check_out_dir(options.out_dir)
    if options.reference_cache is None:
        options.reference_cache = os.path.join(options.out_dir, DEFAULT_CACHE_NAME)
    check_reference(options.reference, options.reference_cache)
    outputs = [(w.output_name, report.PLOTS) for w in options.resolved if _regular_runs(options, w)]
    if _sweep_asked(options):
        outputs = [(sweep.output_name(w.output_name), sweep.PLOTS) for w in options.resolved]
    if _tradeoff_asked(options):
        outputs += [(coreset_tradeoff.output_name(w.output_name), coreset_tradeoff.PLOTS) for w in options.resolved]
    if SIZING in options.workloads:
        outputs.append((sizing.output_name(options.quick), sizing.PLOTS))
    if not options.overwrite:
        refuse_existing(path for name, plots in outputs for path in output_paths(options.out_dir, name, plots).values())
    return options


def _sweep_asked(options: BenchOptions) -> bool:
    """``--sweep-n`` and ``--sweep-k`` were given: each workload runs as a grid of cells (see :mod:`.sweep`)."""
    return options.sweep_n is not None


def _check_sweep(options: BenchOptions):
    """Refuse what a sweep cannot combine with: a single size or k, and the other kinds of benchmark."""
    if options.n_samples is not None or options.k is not None:
        raise InvalidParameterError(
            "A sweep takes its sizes and k from --sweep-n and --sweep-k; drop --n-samples and -k."
        )
    if options.quality or SIZING in options.workloads or _tradeoff_asked(options):
        raise InvalidParameterError(
            "--sweep-n and --sweep-k make energy records; run --quality, 'sizing' and vc-gmm's study without them."
        )


def _tradeoff_asked(options: BenchOptions) -> bool:
    """``--algorithms`` names vc-gmm: its error-vs-speedup study runs (see :mod:`.coreset_tradeoff`)."""
    return options.algorithms is not None and coreset_tradeoff.NAME in options.algorithms


def _regular_runs(options: BenchOptions, workload) -> bool:
    """Whether the energy-over-time runs have anything to run besides the vc-gmm study."""
    if not _tradeoff_asked(options):
        return True
    others = [name for name in options.algorithms if name != "vc-gmm"]
    peers = list(workload.peers) if options.peers is None else list(options.peers)
    return bool(others or peers)


# -- machine and cluster ---------------------------------------------------------------------------------------------
def cluster_for(options: BenchOptions, workload_memory=None) -> ClusterSpec:
    """The cluster of a workload: ``--scheduler``, or a local cluster whose workers get the workload's memory
    limit unless ``--memory-limit`` gave one."""
    spec = options.cluster
    if spec.scheduler or spec.memory_limit is not None or workload_memory is None:
        return spec
    return replace(spec, memory_limit=_parse_memory(workload_memory))


def warm_up_on_data(algorithms, data, init, k, client, params):
    """Run each daskmeans algorithm on the workload's data for :data:`DATA_WARM_UP_SECONDS`, untimed: the first fit
    on fresh worker processes pays page faults on memory they never had; the peers' process is warm."""
    for name in algorithms:
        try:
            run_daskmeans(name, data, init, k, 0, DATA_WARM_UP_SECONDS, client, params.get(name))
        except Exception:  # noqa: BLE001 - a failing algorithm is recorded by its real run
            pass
        gc.collect()


def warm_up_peers(peers, client):
    """Run each peer once on tiny data, untimed, so that no run pays for imports or first-call set-up."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 4), dtype=np.float32)
    array = scatter_rows(X, 150, client)
    for peer in peers:
        if availability(peer)[0]:
            context = PeerContext(
                X=X, array=array, client=client, init=X[:3].copy(), k=3, seed=0, budget=0.05, batch_size=64
            )
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    run_peer(peer, context)
            except Exception:  # noqa: BLE001 - a failing peer is recorded by its real run
                pass


# -- runs --------------------------------------------------------------------------------------------------------------
def _guarded(function, monitor_args):
    """Run ``function()`` under a memory monitor, catching its warnings and failures."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        monitor = MemoryMonitor(*monitor_args)
        try:
            with monitor:
                trace = function()
            error = None
        except Exception as exc:  # noqa: BLE001 - a failing run (out of memory too) is a result, not a crash
            trace, error = None, f"{type(exc).__name__}: {exc}"
    return trace, error, monitor.result, warning_texts(caught)


@dataclass
class Run:
    """One algorithm on one seed: its trace (when it ran) and everything the record says about it."""

    name: str
    label: str
    kind: str
    seed: int
    status: str
    reason: str | None = None
    version: str | None = None
    trace: Trace | None = None
    memory: dict | None = None
    warnings: list = field(default_factory=list)
    uses_cluster: bool = True
    load_average: float | None = None

    def as_record(self) -> dict:
        record = {
            "name": self.name,
            "label": self.label,
            "kind": self.kind,
            "seed": self.seed,
            "status": self.status,
            "reason": self.reason,
            "version": self.version,
            "memory": self.memory,
            "uses_cluster": self.uses_cluster,
            "load_average_at_start": self.load_average,
            "warnings": self.warnings,
        }
        trace = self.trace
        if trace is not None:
            points = sorted(
                (c.as_record() for c in trace.candidates if c.energy is not None), key=lambda p: (p["time"], p["step"])
            )
            record.update(
                {
                    "fit_seconds": trace.fit_seconds,
                    "timed_seconds": trace.timed_seconds,
                    "n_iter": trace.n_iter,
                    "passes": trace.passes,
                    "stop_reason": trace.stop_reason,
                    "params": trace.params,
                    "notes": trace.notes,
                    "points": points,
                    "final_energy": trace.final().energy,
                    "final_time": trace.final().time,
                    "candidates_total": len(trace.candidates),
                    "history": trace.history,
                }
            )
        return record


def run_workload(workload: Workload, options: BenchOptions, client, machine, sgemm, echo=print) -> dict:
    """Every algorithm and peer on every seed of one workload; returns the complete JSON record."""
    began = time.perf_counter()

    def say(text):
        echo(f"  [{time.perf_counter() - began:6.1f} s] {text}")

    cluster = cluster_info(client)
    data = _load_data(workload, options, client)
    say(f"data ready: {data.n_samples:,} x {data.n_features}")
    algorithms = energy_algorithm_names() if options.algorithms is None else list(options.algorithms)
    peer_names = list(workload.peers) if options.peers is None else list(options.peers)
    warm_up(client, algorithms, data.n_features, data.array.dtype, workload.k)
    warm_up_peers([PEERS[name] for name in peer_names], client)
    say("warmed up")
    energy = InMemoryEnergy(data.X) if data.X is not None else DaskEnergy(data.array, client)
    processes = worker_processes(client)
    seeds = list(range(options.seeds))
    k = workload.k

    init0 = data.rows(np.random.default_rng(0).choice(data.n_samples, k, replace=False), client)
    # the best of three passes, but a single one where a pass takes minutes (tens of millions of rows, or large k)
    long_passes = workload.quick or data.n_samples * k > LONG_PASS_DISTANCES
    assign_pass = measure_assign_pass(data.array, init0, client, repeats=1 if long_passes else 3)
    say(f"assign pass {assign_pass['median_seconds']:.3g} s")
    if not long_passes:
        warm_up_on_data(algorithms, data, init0, k, client, options.params)
        say("each algorithm run once on the data, untimed")

    runs = []
    references = {}
    for seed in seeds:
        index = np.random.default_rng(seed).choice(data.n_samples, k, replace=False)
        init = init0 if seed == 0 else data.rows(index, client)
        init_energy = float(energy(init))
        if options.reference == "lloyd":
            references[seed] = reference_or_failure(
                workload.output_name, data, init, seed, client, energy, options.reference_cache
            )
            say(f"converged Lloyd energy (seed {seed}): {describe(references[seed])}")
        for name in algorithms:
            load = load_average()
            trace, error, memory, caught = _guarded(
                lambda: run_daskmeans(
                    name, data, init, k, seed, workload.time_budget, client, options.params.get(name)
                ),
                (client, 0.05, processes),
            )
            run = Run(
                name=name,
                label=f"daskmeans {name}",
                kind="daskmeans",
                seed=seed,
                status="ok" if trace else "failed",
                reason=error,
                version=__version__,
                trace=trace,
                memory=memory,
                warnings=caught,
                load_average=load,
            )
            _finish_trace(run, init, init_energy, energy, options.max_points, options.versus)
            runs.append(run)
            say(_progress_line(run))
            gc.collect()
        for name in peer_names:
            peer = PEERS[name]
            ok, version = availability(peer)
            run = Run(
                name=name,
                label=peer.label,
                kind="peer",
                seed=seed,
                status="skipped",
                version=version if ok else None,
                uses_cluster=not peer.in_memory,
                load_average=load_average(),
            )
            if not ok:
                run.reason = version
            elif peer.in_memory and data.X is None:
                run.reason = f"in-memory peer: {data.in_driver_reason}"
            else:
                named = [spec["iteration"] for spec in options.versus if spec["name"] == name]
                context = PeerContext(
                    X=data.X,
                    array=data.array,
                    client=client,
                    init=init,
                    k=k,
                    seed=seed,
                    budget=workload.time_budget,
                    batch_size=workload.minibatch_batch_size,
                    max_iter=max(named) if named and None not in named else None,
                    driver_memory=_driver_memory(options),
                    converge=None in named,
                )
                settle(client)
                trace, error, memory, caught = _guarded(lambda: run_peer(peer, context), (client, 0.05, processes))
                run.status, run.reason, run.trace, run.memory, run.warnings = (
                    "ok" if trace else "failed",
                    error,
                    trace,
                    memory,
                    caught,
                )
                _finish_trace(run, init, init_energy, energy, options.max_points, options.versus)
            runs.append(run)
            say(_progress_line(run))
            gc.collect()

    if options.refine:
        refine_all(runs, energy, workload.time_budget, TARGETS, reference_energies(references), options.versus)
        say("refined the times to the targets")
        confirm_wall_times(runs, energy, TARGETS, reference_energies(references), options.versus)
        fit_exact_to_yardsticks(runs, energy, options.versus)
        say("timed whole fits to the targets")
    for run in runs:
        if run.trace is not None:
            release_centers(run.trace)
            run.trace.extend = run.trace.refit = None

    record = {
        "schema": SCHEMA,
        "created": created(),
        **code_commit(),
        "command": options.command_line,
        "workload": {
            **asdict(workload),
            "output_name": workload.output_name,
            "n_samples": data.n_samples,
            "n_features": data.n_features,
            "source_dtype": data.source_dtype,
            "location": data.location,
            "in_driver": data.X is not None,
        },
        "machine": machine,
        "cluster": cluster,
        "gemm": sgemm,
        "assign_pass": assign_pass,
        "seeds": seeds,
        "targets": list(TARGETS),
        "versus": list(options.versus),
        "evaluation": {
            "method": "driver, blocked GEMM" if data.X is not None else "cluster pass",
            "seconds": energy.seconds,
            "calls": energy.calls,
            "note": "exact energy on all rows, outside every timed region",
        },
        "runs": [run.as_record() for run in runs],
        "reference": {
            "method": options.reference,
            "cache": options.reference_cache if options.reference == "lloyd" else None,
            "seeds": {str(seed): entry for seed, entry in references.items()},
        },
    }
    record["summary"] = report.summarize(record)
    return record


def _driver_memory(options: BenchOptions) -> int:
    """Bytes of data the driver may hold: ``--driver-memory``, default half of what is free now."""
    return (
        _parse_memory(options.driver_memory) if options.driver_memory else int(psutil.virtual_memory().available * 0.5)
    )


def _load_data(workload, options: BenchOptions, client):
    """The workload's data, loaded with the driver memory of ``--driver-memory`` (default: half of what is free)."""
    return load_data(
        workload,
        client=client,
        work_dir=options.work_dir or os.path.join(options.out_dir, "data"),
        driver_memory=_driver_memory(options),
    )


def _progress_line(run) -> str:
    if run.trace is None:
        return f"{run.label} (seed {run.seed}): {run.status}: {run.reason}"
    final = run.trace.final()
    return (
        f"{run.label} (seed {run.seed}): {run.trace.fit_seconds:.3g} s, final energy {final.energy:.6g}, "
        f"{run.trace.timed_seconds:.3g} s timed in all"
    )


def _finish_trace(run: Run, init, init_energy, energy, max_points, versus=()):
    """Add the shared initial centers at time 0 (unless the run seeded itself), drop repeated centers, evaluate a
    spread of candidates (and the iteration a ``--versus`` spec names in this run)."""
    trace = run.trace
    if trace is None:
        return
    # a run seeded by itself never held the shared centers
    starts = (
        []
        if isinstance(trace.params.get("init"), str)
        else [
            Candidate(
                step=0,
                time=0.0,
                centers=init,
                iteration=0,
                passes=0.0,
                kind="init",
                energy=init_energy,
                eval_seconds=0.0,
            )
        ]
    )
    if trace.extend is None:
        trace.candidates = drop_repeats([*starts, *trace.candidates])
    else:
        trace.candidates = [*starts, *trace.candidates]
    evaluate(select_spread(trace.candidates, max_points), energy)
    final = trace.final()
    if final.energy is None:
        evaluate([final], energy)
    named = {spec["iteration"] for spec in versus if spec["name"] == run.name and spec["iteration"] is not None}
    for iteration in sorted(named):
        at = [c for c in trace.candidates if c.iteration == iteration]
        if at and at[0].energy is None:
            evaluate(at[:1], energy)


def _run_tradeoff(workload, options: BenchOptions, machine, echo) -> list:
    """vc-GMM's error-vs-speedup study on one workload, beside its LWCS and uniform-sample baselines."""
    with cluster_for(options, workload.worker_memory).client() as client:
        cluster = cluster_info(client)
        data = _load_data(workload, options, client)
        record = coreset_tradeoff.run_tradeoff(
            workload, data, client, machine, seeds=tuple(range(options.seeds)), echo=echo
        )
    record["command"] = options.command_line
    record["cluster"] = cluster
    echo(coreset_tradeoff.markdown_table(record))
    return coreset_tradeoff.write_outputs(record, options.out_dir)


def _run_sweep(workload, options: BenchOptions, machine, sgemm, echo) -> list:
    """The n x k sweep of one workload, each cell on a cluster of its own."""

    def run_cell(cell):
        with cluster_for(options, cell.worker_memory).client() as client:
            return run_workload(cell, options, client, machine, sgemm, echo=echo)

    record = sweep.run_sweep(workload, options.sweep_n, options.sweep_k, run_cell, echo=echo)
    echo("\n".join(sweep.sweep_table(record)))
    return sweep.write_outputs(record, options.out_dir)


# -- the whole command -------------------------------------------------------------------------------------------------
def run_benchmark(options: BenchOptions, echo=print) -> list:
    """Check the options, run every workload and write its JSON record, Markdown table and plot.

    Returns
    -------
    list of str
        Paths written.
    """
    if options.quality:
        return run_quality(options, echo=echo)
    options = check_options(options)
    os.makedirs(options.out_dir, exist_ok=True)
    machine = machine_info()
    echo("measuring the float32 GEMM rate ...")
    sgemm = measure_sgemm(size=1024 if options.quick else 2048)
    written = []
    for workload in options.resolved:
        echo(
            f"workload {workload.output_name}: {workload.description}, k={workload.k}, "
            f"{workload.time_budget:g} s per run"
        )
        if _tradeoff_asked(options):
            written.extend(_run_tradeoff(workload, options, machine, echo))
        if not _regular_runs(options, workload):
            continue
        if _sweep_asked(options):
            written.extend(_run_sweep(workload, options, machine, sgemm, echo))
            continue
        with cluster_for(options, workload.worker_memory).client() as client:
            record = run_workload(workload, options, client, machine, sgemm, echo=echo)
        written.extend(report.write_outputs(record, options.out_dir))
        echo(report.markdown_table(record))
    if SIZING in options.workloads:
        echo("workload sizing")
        with options.cluster.client() as client:
            record = sizing.run_sizing(options, client, machine, sgemm)
        written.extend(sizing.write_outputs(record, options.out_dir))
        echo(sizing.markdown_table(record))
    return written
