"""``daskmeans bench --quality``: clustering quality against true labels (ARI, NMI) and time, per algorithm.

For workloads whose dataset has labels (``pendigits``, ``mnist``). Made for kernel k-means, as the mini-batch
kernel k-means paper measures it: truncated and untruncated mini-batch kernel k-means, exact (full-batch) kernel
k-means and linear k-means, each seed drawing its own seeding, k = the number of classes. Every kernel algorithm
gets the same Gaussian kernel; its ``kappa`` is ``kappa_scale`` times the data-driven default (the mean squared
distance between random pairs of rows, on all rows), as the paper starts from a heuristic and tunes by hand.
Times are wall-clock seconds of ``fit`` plus the labels of every row; ratios to the full batch are taken seed by
seed from the same run, so that a shared, noisy machine affects both sides alike.

Writes ``OUT/NAME-quality.json`` (everything) and ``OUT/NAME-quality.md`` (the table).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..engine.client import compute_now
from ..exceptions import InputDataError, InvalidParameterError
from ..kernels.kernel_functions import auto_kappa
from ..registry import ALGORITHMS, make_estimator
from .common import (
    check_out_dir,
    check_seeds,
    code_commit,
    created,
    machine_info,
    machine_text,
    output_paths,
    provenance_lines,
    refuse_existing,
    split_names,
    table_lines,
    write_report,
)
from .workloads import block_rows, resolve_workloads, scatter_rows, subsample_index

SCHEMA = "daskmeans-bench-quality/1"
#: Algorithms compared when ``--algorithms`` is not given.
DEFAULT_ALGORITHMS = (
    "kernel-minibatch",
    "kernel-minibatch-paper",
    "kernel-minibatch-untruncated",
    "kernel-kmeans",
    "kmeans",
)
#: The exact baseline the speed-ups are measured against.
BASELINE = "kernel-kmeans"
#: Runs ``--quality`` knows beside the registry's algorithms: name -> (algorithm, the parameters the name fixes).
VARIANTS = {
    # the paper's experimental settings, beside the estimator's defaults (b = 128, tau = 25, 150 steps)
    "kernel-minibatch-paper": ("kernel-minibatch", {"batch_size": 1024, "tau": 200, "max_iter": 200}),
}
#: Shorter runs of each mini-batch algorithm, as fractions of its ``max_iter``: the same seed draws the same
#: batches, so a run of fewer steps is the start of the full run, and its ARI, NMI and time (its own seeding and
#: labels included) trace quality against time.
CURVE_FRACTIONS = (1 / 6, 1 / 3, 2 / 3)
#: Budget of each algorithm's untimed warm-up fit (it compiles the kernels; settings fixed by a name still apply).
WARM_UP_SECONDS = 2.0


@dataclass(frozen=True)
class QualitySettings:
    """How one labelled workload is clustered for ``--quality``.

    Attributes
    ----------
    max_rows : int or None
        Cap on the rows (a seeded uniform subsample): full-batch kernel k-means holds the n x n kernel matrix
        (4 n^2 bytes; 19.6 GB for all 70,000 MNIST digits), so MNIST is capped at 10,000 rows.
    kappa_scale : float
        ``kappa`` = this times the data-driven default; picked from {1, 0.3, 0.1} on seed 0 (0.3 was best for
        the kernel algorithms on both datasets).
    batch_size, tau, max_iter : int or None
        Mini-batch settings; None: the estimator's defaults (b = 128, tau = 25, 150 steps), or the paper's b = 1024,
        tau = 200, 200 steps for ``kernel-minibatch-paper``.
    """

    max_rows: int | None = None
    kappa_scale: float = 0.3
    batch_size: int | None = None
    tau: int | None = None
    max_iter: int | None = None


SETTINGS = {
    "pendigits": (QualitySettings(), QualitySettings(batch_size=256, tau=100, max_iter=30)),
    "mnist": (QualitySettings(max_rows=10_000), QualitySettings(max_rows=2_000, batch_size=256, tau=100, max_iter=30)),
}


def output_name(workload_name) -> str:
    """The name of a labelled workload's outputs: ``NAME-quality``."""
    return f"{workload_name}-quality"


def check_quality_options(options):
    """Check the workloads (labelled ones only), algorithms and outputs before any work.

    Raises
    ------
    InvalidParameterError, FileNotFoundError, OutputExistsError
    """
    if options.data_path is not None:
        raise InvalidParameterError(
            "--quality needs true labels: name a labelled workload (pendigits, mnist), not --data."
        )
    if not options.workloads:
        raise InvalidParameterError("--quality needs a labelled workload: e.g. 'daskmeans bench pendigits --quality'.")
    unlabelled = [name for name in options.workloads if name not in SETTINGS]
    if unlabelled:
        raise InvalidParameterError(
            f"--quality scores clusterings against true labels, which {', '.join(map(repr, unlabelled))} "
            f"lack(s); choose from {', '.join(SETTINGS)}."
        )
    algorithms = split_names(options.algorithms, [*ALGORITHMS, *VARIANTS], "algorithm(s)")
    options.algorithms = DEFAULT_ALGORITHMS if algorithms is None else algorithms
    if not options.algorithms:
        raise InvalidParameterError("--quality needs at least one algorithm.")
    check_seeds(options.seeds)
    options.resolved = resolve_workloads(
        options.workloads,
        quick=options.quick,
        k=options.k,
        data_dir=options.data_dir,
        n_samples=options.n_samples,
        time_budget=options.time_budget,
    )
    check_out_dir(options.out_dir)
    if not options.overwrite:
        refuse_existing(
            path
            for workload in options.resolved
            for path in output_paths(options.out_dir, output_name(workload.output_name)).values()
        )
    return options


def load_labelled(workload, settings: QualitySettings, n_samples_override=None):
    """The workload's rows (float32), true labels and total row count: a seeded uniform subsample of
    ``n_samples_override`` rows, else ``settings.max_rows``, else the workload's own cap (quick variants)."""
    with np.load(workload.file, allow_pickle=False) as archive:
        if workload.labels not in archive.files:
            raise InputDataError(
                f"{workload.file!r} has no label array {workload.labels!r}; it holds {sorted(archive.files)}."
            )
        X, y = archive["X"], archive[workload.labels]
    n_total = X.shape[0]
    cap = next(
        (value for value in (n_samples_override, settings.max_rows, workload.n_samples) if value is not None), None
    )
    if cap is not None and cap < X.shape[0]:
        index = subsample_index(X.shape[0], cap)
        X, y = X[index], y[index]
    return np.ascontiguousarray(X, dtype=np.float32), np.asarray(y), n_total


def estimator_params(name, settings: QualitySettings, kappa, k, seed, budget, client):
    """Parameters of one run: the shared kernel for kernel algorithms, the workload's mini-batch settings (except
    those a :data:`VARIANTS` name fixes, as ``kernel-minibatch-paper`` fixes the paper's)."""
    params = {"n_clusters": k, "random_state": seed, "client": client, "progress": False, "max_time": budget}
    if name.startswith("kernel-"):
        params["kernel_params"] = {"kappa": kappa}
    if name.startswith("kernel-minibatch"):
        params.update(
            {
                key: value
                for key, value in (
                    ("batch_size", settings.batch_size),
                    ("tau", settings.tau),
                    ("max_iter", settings.max_iter),
                )
                if value is not None
            }
        )
    params.update(VARIANTS.get(name, (name, {}))[1])
    return params


def make_run_estimator(name, params):
    """The estimator of one run: a registry algorithm, or the algorithm a :data:`VARIANTS` name stands for."""
    return make_estimator(VARIANTS.get(name, (name, {}))[0], **params)


def curve_steps(max_iter) -> list:
    """The step counts of the shorter runs (:data:`CURVE_FRACTIONS` of ``max_iter``, distinct, below it)."""
    return sorted({max(1, round(fraction * max_iter)) for fraction in CURVE_FRACTIONS} - {max_iter})


def _run_one(name, params, fit_input):
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score  # noqa: F401  (checked early)

    estimator = make_run_estimator(name, params)
    start = time.perf_counter()
    estimator.fit(fit_input)
    fit_seconds = time.perf_counter() - start
    labels = estimator.labels_
    if not isinstance(labels, np.ndarray):
        (labels,) = compute_now(labels, client=params["client"])
    seconds = time.perf_counter() - start
    return estimator, np.asarray(labels), fit_seconds, seconds


def _spread(values):
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {
        "median": float(np.median(values)),
        "min": float(min(values)),
        "max": float(max(values)),
        "values": [float(v) for v in values],
    }


def run_quality_workload(workload, options, client, machine, echo=print) -> dict:
    """Every algorithm on every seed of one labelled workload; returns the JSON record."""
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    began = time.perf_counter()

    def say(text):
        echo(f"  [{time.perf_counter() - began:6.1f} s] {text}")

    settings = SETTINGS[workload.name][1 if workload.quick else 0]
    X, y, n_total = load_labelled(workload, settings, options.n_samples)
    k = options.k if options.k is not None else int(np.unique(y).size)
    kappa_default = auto_kappa("rbf", X, np.random.default_rng(0))
    kappa = settings.kappa_scale * kappa_default
    array = scatter_rows(X, block_rows(X.shape[0], X.shape[1]), client)
    say(f"data ready: {X.shape[0]:,} x {X.shape[1]}, k={k}, kappa={kappa:.6g} ({settings.kappa_scale} x default)")
    budget = options.time_budget
    # warm-up (untimed): compile the kernels in the driver and on the workers
    warm = array[: min(2000, X.shape[0])]
    for name in options.algorithms:
        params = estimator_params(
            name, QualitySettings(batch_size=64, tau=20, max_iter=2), kappa, min(k, 4), 0, WARM_UP_SECONDS, client
        )
        make_run_estimator(name, params).fit(warm).labels_  # noqa: B018 - the labels pass compiles its kernels too
    say("warmed up")
    runs = []
    for seed in range(options.seeds):
        for name in options.algorithms:
            params = estimator_params(name, settings, kappa, k, seed, budget, client)
            run = {"name": name, "seed": seed, "status": "ok", "reason": None}
            try:
                estimator, labels, fit_seconds, seconds = _run_one(name, params, array)
            except Exception as error:  # noqa: BLE001 - a failing run is a result (e.g. too large for the full batch)
                run.update(status="failed", reason=f"{type(error).__name__}: {error}")
                runs.append(run)
                say(f"{name} seed {seed}: failed: {run['reason']}")
                continue
            run.update(
                {
                    "ari": float(adjusted_rand_score(y, labels)),
                    "nmi": float(normalized_mutual_info_score(y, labels)),
                    "fit_seconds": fit_seconds,
                    "seconds": seconds,
                    "n_iter": int(estimator.n_iter_),
                    "stop_reason": estimator.stop_reason_,
                    "support_rows": int(getattr(estimator, "support_rows_", np.empty(0)).shape[0]) or None,
                    "gamma": getattr(estimator, "gamma_", None),
                }
            )
            say(
                f"{name} seed {seed}: ARI {run['ari']:.3f}, NMI {run['nmi']:.3f}, {seconds:.2f} s "
                f"({run['n_iter']} iterations, {run['stop_reason']})"
            )
            if name.startswith("kernel-minibatch"):
                run["curve"] = []
                for steps in curve_steps(estimator.max_iter):
                    _, labels, _, seconds = _run_one(name, {**params, "max_iter": steps}, array)
                    run["curve"].append(
                        {
                            "steps": steps,
                            "seconds": seconds,
                            "ari": float(adjusted_rand_score(y, labels)),
                            "nmi": float(normalized_mutual_info_score(y, labels)),
                        }
                    )
                say(
                    f"{name} seed {seed}: "
                    + ", ".join(
                        f"{point['steps']} steps ARI {point['ari']:.3f} in {point['seconds']:.2f} s"
                        for point in run["curve"]
                    )
                )
            runs.append(run)
    record = {
        "schema": SCHEMA,
        "created": created(),
        **code_commit(),
        "command": options.command_line,
        "workload": {
            **asdict(workload),
            "output_name": workload.output_name,
            "n_samples": int(X.shape[0]),
            "n_features": int(X.shape[1]),
            "k": k,
            "n_total": int(n_total),
        },
        "settings": asdict(settings),
        "kernel": {"name": "rbf", "kappa": kappa, "kappa_default": kappa_default},
        "machine": machine,
        "cluster": {"workers": len(client.nthreads()), "threads": sum(client.nthreads().values())},
        "seeds": list(range(options.seeds)),
        "runs": runs,
    }
    record["summary"] = summarize(record)
    return record


def summarize(record) -> dict:
    """Per algorithm: median and range of ARI, NMI and seconds, and the speed-up over the full batch.

    The speed-up of a run is the full batch's seconds on the same seed divided by the run's seconds. The shorter
    runs of a mini-batch algorithm (its ``curve``) follow it as ``NAME@STEPS``.
    """
    baseline = {r["seed"]: r["seconds"] for r in record["runs"] if r["name"] == BASELINE and r["status"] == "ok"}

    def entry(runs, ok):
        return {
            "runs": len(runs),
            "ok": len(ok),
            "ari": _spread([r["ari"] for r in ok]),
            "nmi": _spread([r["nmi"] for r in ok]),
            "seconds": _spread([r["seconds"] for r in ok]),
            "speedup": _spread([baseline[r["seed"]] / r["seconds"] for r in ok if r["seed"] in baseline]),
        }

    out = {}
    for name in dict.fromkeys(r["name"] for r in record["runs"]):
        mine = [r for r in record["runs"] if r["name"] == name]
        ok = [r for r in mine if r["status"] == "ok"]
        out[name] = {
            **entry(mine, ok),
            "support_rows": _spread([r["support_rows"] for r in ok if r.get("support_rows")]),
        }
        for steps in dict.fromkeys(point["steps"] for r in ok for point in r.get("curve", ())):
            points = [{**point, "seed": r["seed"]} for r in ok for point in r["curve"] if point["steps"] == steps]
            out[f"{name}@{steps}"] = entry(points, points)
    return out


LABELS = {
    "kernel-minibatch": "truncated mini-batch kernel k-means",
    "kernel-minibatch-paper": "truncated mini-batch kernel k-means, the paper's b = 1024, tau = 200, 200 steps",
    "kernel-minibatch-untruncated": "untruncated mini-batch kernel k-means",
    "kernel-kmeans": "full-batch kernel k-means",
    "kmeans": "linear k-means (Lloyd)",
}


def _cell(spread, fmt):
    if spread is None:
        return "n/a"
    return f"{fmt(spread['median'])} [{fmt(spread['min'])}, {fmt(spread['max'])}]"


def _minibatch_settings(settings) -> str:
    if settings["batch_size"] is None and settings["tau"] is None and settings["max_iter"] is None:
        return (
            "the estimator's defaults (b = 128, tau = 25, 150 steps, tol = 0); the paper's settings (b = 1024, "
            "tau = 200, 200 steps) where named"
        )
    return (
        f"b = {settings['batch_size'] or 'default'}, tau = {settings['tau'] or 'default'}, at most "
        f"{settings['max_iter'] or 'the default'} steps"
    )


def markdown_table(record) -> str:
    """The record as a Markdown table: median [min, max] over the seeds."""
    workload, settings, kernel = record["workload"], record["settings"], record["kernel"]
    lines = [
        f"# {workload['output_name']}: {workload['description']}",
        "",
        f"Machine: {machine_text(record['machine'])}.",
        *provenance_lines(record),
        "",
        *(
            [
                f"A seeded uniform sample of {workload['n_samples']:,} of the {workload['n_total']:,} rows (full-batch "
                "kernel k-means holds the n x n kernel matrix, 4 n^2 bytes).",
                "",
            ]
            if workload.get("n_total", workload["n_samples"]) > workload["n_samples"]
            else []
        ),
        f"n = {workload['n_samples']:,}, d = {workload['n_features']}, k = {workload['k']}, {len(record['seeds'])} "
        f"seed(s); Gaussian kernel exp(-||x-y||^2 / kappa), kappa = {kernel['kappa']:.4g} ({settings['kappa_scale']} "
        f"x the default {kernel['kappa_default']:.4g}); mini-batch: {_minibatch_settings(settings)}. "
        f"Time: fit + labels of every row, {record['cluster']['workers']} workers. Median [min, max] over seeds; "
        'speed-up = full-batch time / time, seed by seed. "Stopped after N steps": the same seeds run with '
        "max_iter = N (the start of the full run: quality against time).",
        "",
    ]
    lines += table_lines(QUALITY_COLUMNS, quality_rows(record))
    return "\n".join(lines) + "\n"


#: The columns of :func:`quality_rows`.
QUALITY_COLUMNS = ["algorithm", "ARI", "NMI", "time (s)", "speed-up vs full batch"]


def quality_rows(record) -> list:
    """One row per algorithm (and per shorter run of a mini-batch algorithm): median [min, max] over the seeds."""
    rows = []
    for key, entry in record["summary"].items():
        name, _, steps = key.partition("@")
        label = LABELS.get(name, name) + (f", stopped after {steps} steps" if steps else "")
        failed = "" if entry["ok"] == entry["runs"] else f" ({entry['runs'] - entry['ok']} failed)"
        rows.append(
            [
                f"{label}{failed}",
                _cell(entry["ari"], lambda v: f"{v:.3f}"),
                _cell(entry["nmi"], lambda v: f"{v:.3f}"),
                _cell(entry["seconds"], lambda v: f"{v:.2f}"),
                _cell(entry["speedup"], lambda v: f"{v:.2f}x"),
            ]
        )
    return rows


def write_outputs(record, out_dir) -> list:
    """Write ``NAME-quality.json`` and ``NAME-quality.md``."""
    return write_report(out_dir, output_name(record["workload"]["output_name"]), record, markdown_table(record))


def run_quality(options, echo=print) -> list:
    """Check the options, run every labelled workload and write its record and table; return the paths."""
    options = check_quality_options(options)
    try:
        import sklearn.metrics  # noqa: F401 - only checks that scikit-learn is installed
    except ImportError as error:
        raise InvalidParameterError(
            "--quality needs scikit-learn for ARI and NMI: pip install -e '.[bench]'."
        ) from error
    os.makedirs(options.out_dir, exist_ok=True)
    machine = machine_info()
    written = []
    for workload in options.resolved:
        echo(f"workload {workload.output_name} (quality): {workload.description}")
        with options.cluster.client() as client:
            record = run_quality_workload(workload, options, client, machine, echo=echo)
        written.extend(write_outputs(record, options.out_dir))
        echo(markdown_table(record))
    return written
