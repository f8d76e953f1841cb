"""vc-GMM's error-against-speedup trade-off, beside the two simple baselines it improves on.

``daskmeans bench WORKLOAD --algorithms vc-gmm`` runs, on the workload's data:

- the reference: scikit-learn ``KMeans(init="k-means++", n_init=1)`` on all rows (in the driver);
- vc-GMM (:class:`daskmeans.CoresetGaussianMixture`) for several coreset sizes, at its defaults and at its
  previous defaults (:data:`PREVIOUS_DEFAULTS`: plain AFK-MC2, ``G = 5``), so that a change of defaults is judged
  in the same run;
- "LWCS": scikit-learn k-means++ ``KMeans`` on a lightweight coreset (:func:`daskmeans.lightweight_coreset`,
  coreset weights as ``sample_weight``), for a ladder of coreset sizes;
- "uniform": the same on a uniform sample of rows (with replacement), for a ladder of sample sizes.

Every run but the reference includes, inside its timed region, the one pass over all rows that labels them
(the quantization error comes from that pass); the reference's own fit labels all rows. Relative error is
``E / E_ref - 1`` with ``E`` the sum of squared distances of all rows to their nearest center, evaluated the same
way for every run (a daskmeans assign pass, float64 sums). The baselines run over a ladder of sizes so that their
error is known as a function of wall time; "at equal time" is the lowest error a baseline reached with a run that
took no longer than the vc-GMM run (none: no run of the ladder was that fast).

Distance evaluations (training only, the final labelling pass excluded; ``n`` rows, ``m`` coreset rows, ``k``
clusters): k-means++ seeding of scikit-learn ``n k (2 + ln k)``, each Lloyd iteration ``n k``; a coreset ``n``;
vc-GMM the AFK-MC2 chains and its E-steps as counted (:attr:`CoresetGaussianMixture.history_`).
"""

from __future__ import annotations

import math
import time

import numpy as np

from .._version import __version__
from ..algorithms.lloyd import final_inertia
from ..engine.client import compute_now
from ..estimators.coreset import lightweight_coreset
from ..estimators.mixture import CoresetGaussianMixture
from ..passes.sampling import finish_gather, gather_rows_graph, uniform_indices_with_replacement
from .common import code_commit, created, load_average, machine_text, provenance_lines, table_lines, write_report

#: The algorithm name that asks for this study.
NAME = "vc-gmm"
#: vc-GMM's former defaults (plain AFK-MC2 seeding, 5 neighbour clusters), run beside the defaults so that each
#: study compares the two.
PREVIOUS_DEFAULTS = {"search_size": 5, "oversampling": 1.0}


def coreset_sizes(n, k):
    """vc-GMM coreset sizes: 10, 25, 50, 100 and 200 rows per cluster (at most ``n / 2``)."""
    return sorted({int(min(n // 2, f * k)) for f in (10, 25, 50, 100, 200)})


def baseline_sizes(n, k):
    """Ladder of sample sizes of the baselines: 5 to 400 rows per cluster (at most ``n / 2``)."""
    return sorted({int(min(n // 2, f * k)) for f in (5, 10, 25, 50, 100, 200, 400)})


def kmeanspp_distances(n, k, n_iter):
    """Distance evaluations of scikit-learn's greedy k-means++ seeding and ``n_iter`` Lloyd iterations."""
    return int(n * k * (2 + int(math.log(k))) + n * k * n_iter)


def _sklearn_kmeans(k, seed):
    from sklearn.cluster import KMeans as SKLearnKMeans

    return SKLearnKMeans(k, init="k-means++", n_init=1, random_state=seed)


def run_reference(X, k, seed):
    """scikit-learn k-means++ + Lloyd on all rows: ``(centers, seconds, n_iter)``."""
    model = _sklearn_kmeans(k, seed)
    start = time.perf_counter()
    model.fit(X)
    return model.cluster_centers_, time.perf_counter() - start, int(model.n_iter_)


def run_vc_gmm(array, k, m, seed, client, **params):
    """vc-GMM with coreset size ``m`` (and ``params``); returns the record fields, timed with the labelling pass
    that gives its quantization error (``inertia_``), as the baselines are."""
    model = CoresetGaussianMixture(k, coreset_size=m, random_state=seed, client=client, **params)
    start = time.perf_counter()
    model.fit(array)
    inertia = float(model.inertia_)
    seconds = time.perf_counter() - start
    em_distances = sum(r["distances"] + r["initial_distances"] for r in model.history_)
    return {
        "centers": model.means_,
        "seconds": seconds,
        "inertia": inertia,
        "n_iter": int(model.n_iter_),
        "stop_reason": model.stop_reason_,
        "distances": int(array.shape[0] + model.seeding_distances_ + em_distances),
        "em_distances_per_iteration": em_distances / max(1, model.n_iter_),
        "sigma2": float(model.covariance_),
    }


def run_baseline(kind, array, k, m, seed, client):
    """k-means++ (scikit-learn) on a lightweight coreset (``"lwcs"``) or a uniform sample (``"uniform"``) of ``m``
    rows, then one labelling pass over all rows, all timed."""
    start = time.perf_counter()
    if kind == "lwcs":
        points, weights = lightweight_coreset(array, m, random_state=seed, client=client)
        extra_distances = array.shape[0]
    else:
        index = uniform_indices_with_replacement(array.shape[0], m, seed, "bench-uniform")
        unique, inverse = np.unique(index, return_inverse=True)
        (raw,) = compute_now(gather_rows_graph(array, unique), client=client)
        points = finish_gather(raw, len(unique), array.shape[1], array.dtype)[inverse]
        weights = None
        extra_distances = 0
    model = _sklearn_kmeans(k, seed).fit(points, sample_weight=weights)
    centers = model.cluster_centers_.astype(array.dtype)
    inertia = final_inertia(array, centers, None, client)
    seconds = time.perf_counter() - start
    return {
        "centers": centers,
        "seconds": seconds,
        "inertia": float(inertia),
        "n_iter": int(model.n_iter_),
        "distances": int(extra_distances + kmeanspp_distances(m, k, int(model.n_iter_))),
    }


def at_time(points, seconds):
    """The best relative error a baseline reached in at most ``seconds`` (None: no run of its ladder was done
    by then)."""
    done = [p["error"] for p in points if p["seconds"] <= seconds]
    return min(done) if done else None


def run_tradeoff(workload, data, client, machine, seeds=(0,), echo=print, sizes=None):
    """Run the whole study on one workload; returns its JSON record."""
    began = time.perf_counter()

    def say(text):
        echo(f"  [{time.perf_counter() - began:6.1f} s] vc-gmm study: {text}")

    k, n = workload.k, data.n_samples
    record = {
        "schema": "daskmeans-bench-vc-gmm/1",
        "created": created(),
        **code_commit(),
        "workload": {
            "name": workload.output_name,
            "description": workload.description,
            "k": k,
            "n_samples": n,
            "n_features": data.n_features,
        },
        "machine": machine,
        "daskmeans_version": __version__,
        "runs": [],
    }
    if data.X is None:
        record["skipped"] = (
            f"the reference (scikit-learn on all rows) needs the data in the driver: {data.in_driver_reason}"
        )
        return record
    sizes = sizes or coreset_sizes(n, k)
    ladder = baseline_sizes(n, k)
    # compile the kernels and import scikit-learn before anything is timed
    run_vc_gmm(data.array[: 20 * 8], 8, 100, 0, client)
    run_baseline("lwcs", data.array[: 20 * 8], 8, 50, 0, client)
    run_baseline("uniform", data.array[: 20 * 8], 8, 50, 0, client)
    for seed in seeds:
        centers, ref_seconds, ref_iter = run_reference(data.X, k, seed)
        ref_inertia = final_inertia(data.array, centers.astype(data.array.dtype), None, client)
        ref_distances = kmeanspp_distances(n, k, ref_iter)
        record["runs"].append(
            {
                "method": "k-means++",
                "seed": seed,
                "size": n,
                "seconds": ref_seconds,
                "load_average_after": load_average(),
                "inertia": ref_inertia,
                "error": 0.0,
                "speedup": 1.0,
                "n_iter": ref_iter,
                "distances": ref_distances,
                "distance_speedup": 1.0,
            }
        )
        say(f"k-means++ on all rows (seed {seed}): {ref_seconds:.1f} s, {ref_iter} iterations")

        def add(method, size, result):
            result.pop("centers")
            result["load_average_after"] = load_average()
            result.update(
                {
                    "method": method,
                    "seed": seed,
                    "size": size,
                    "error": result["inertia"] / ref_inertia - 1.0,
                    "speedup": ref_seconds / result["seconds"],
                    "distance_speedup": ref_distances / max(1, result["distances"]),
                }
            )
            record["runs"].append(result)
            say(f"{method} size {size}: {result['seconds']:.2f} s, error {100 * result['error']:.2f}%")

        for m in sizes:
            add("vc-gmm", m, run_vc_gmm(data.array, k, m, seed, client))
            add("vc-gmm-previous", m, run_vc_gmm(data.array, k, m, seed, client, **PREVIOUS_DEFAULTS))
        for kind in ("lwcs", "uniform"):
            for m in ladder:
                add(kind, m, run_baseline(kind, data.array, k, m, seed, client))
        for run in record["runs"]:
            if run["method"] == "vc-gmm" and run["seed"] == seed:
                for kind in ("lwcs", "uniform"):
                    ladder_points = [r for r in record["runs"] if r["method"] == kind and r["seed"] == seed]
                    run[f"{kind}_error_at_same_time"] = at_time(ladder_points, run["seconds"])
    return record


# -- outputs -----------------------------------------------------------------------------------------------------------
LABELS = {
    "k-means++": "k-means++ (all rows)",
    "vc-gmm": "vc-GMM",
    "vc-gmm-previous": "vc-GMM, previous defaults (G = 5, plain AFK-MC2)",
    "lwcs": "LWCS + k-means++",
    "uniform": "uniform sample + k-means++",
}


def output_name(workload_name) -> str:
    """The name of the study's outputs: ``NAME-vc-gmm``."""
    return f"{workload_name}-vc-gmm"


def _percent(value):
    return "n/a" if value is None else f"{100 * value:.2f}%"


def markdown_table(record) -> str:
    """The study as a Markdown table (one row per run) with a verdict line per vc-GMM run."""
    workload = record["workload"]
    lines = [
        f"# vc-GMM on {workload['name']}: {workload['description']}, k={workload['k']}",
        "",
        f"Machine: {machine_text(record['machine'])}.",
        *provenance_lines(record),
        "",
    ]
    if record.get("skipped"):
        return "\n".join(lines + [f"Skipped: {record['skipped']}", ""])
    columns = [
        "method",
        "size",
        "time (s)",
        "speedup",
        "rel. error",
        "EM/Lloyd iterations",
        "distance evals",
        "distance speedup",
        "LWCS error at same time",
        "uniform error at same time",
    ]
    rows = [
        [
            LABELS[run["method"]],
            f"{run['size']:,}",
            f"{run['seconds']:.2f}",
            f"{run['speedup']:.1f}x",
            _percent(run["error"]),
            f"{run['n_iter']}",
            f"{run['distances']:.3g}",
            f"{run['distance_speedup']:.1f}x",
            _percent(run.get("lwcs_error_at_same_time")) if run["method"] == "vc-gmm" else "",
            _percent(run.get("uniform_error_at_same_time")) if run["method"] == "vc-gmm" else "",
        ]
        for run in record["runs"]
    ]
    lines += table_lines(columns, rows, right=range(1, len(columns)))
    lines.append("")
    for run in record["runs"]:
        if run["method"] != "vc-gmm":
            continue
        others = [run.get("lwcs_error_at_same_time"), run.get("uniform_error_at_same_time")]
        if all(o is None or run["error"] < o for o in others):
            verdict = "lower error than both baselines at the same time"
            if any(o is None for o in others):
                verdict += " (a baseline has no run that fast)"
        else:
            verdict = "NOT below both baselines at the same time"
        lines.append(
            f"- vc-GMM, coreset {run['size']:,}: {_percent(run['error'])} at {run['speedup']:.1f}x: {verdict}."
        )
    lines += previous_defaults_verdicts(record["runs"])
    return "\n".join(lines) + "\n"


def baselines_at_time(run) -> str:
    """The lowest error of the LWCS and uniform-sample baselines in no more time than a vc-GMM run, as
    ``5.8% / 12.5%`` (``none that fast`` where a baseline has no run that fast)."""
    if run["method"] != "vc-gmm":
        return ""
    values = [run.get("lwcs_error_at_same_time"), run.get("uniform_error_at_same_time")]
    return " / ".join("none that fast" if value is None else f"{100 * value:.1f}%" for value in values)


def previous_defaults_verdicts(runs) -> list:
    """One line per coreset size: the defaults against the previous defaults (error, time), and against the
    previous defaults' error at the same time (the lowest error a previous-defaults run reached in no more
    time; linear interpolation would flatter neither)."""
    lines = []
    previous = [r for r in runs if r["method"] == "vc-gmm-previous"]
    for run in runs:
        if run["method"] != "vc-gmm":
            continue
        same = [r for r in previous if r["size"] == run["size"] and r["seed"] == run["seed"]]
        if not same:
            continue
        at_same_time = at_time([r for r in previous if r["seed"] == run["seed"]], run["seconds"])
        lines.append(
            f"- defaults vs previous defaults, coreset {run['size']:,}: {_percent(run['error'])} in "
            f"{run['seconds']:.2f} s against {_percent(same[0]['error'])} in {same[0]['seconds']:.2f} s; "
            f"previous defaults' best error in that time: {_percent(at_same_time)}."
        )
    return lines


def plot(record, path):
    """Relative error against wall-clock speedup, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for method, style in (("vc-gmm", "o-"), ("vc-gmm-previous", "o:"), ("lwcs", "s--"), ("uniform", "^:")):
        runs = sorted((r for r in record["runs"] if r["method"] == method), key=lambda r: r["speedup"])
        if runs:
            axes.plot([r["speedup"] for r in runs], [100 * r["error"] for r in runs], style, label=LABELS[method])
            for r in runs:
                axes.annotate(
                    f"{r['size']:,}",
                    (r["speedup"], 100 * r["error"]),
                    fontsize=7,
                    textcoords="offset points",
                    xytext=(3, 3),
                )
    axes.set_xscale("log")
    axes.set_xlabel("wall-clock speedup over k-means++ on all rows (scikit-learn)")
    axes.set_ylabel("relative quantization error (%)")
    workload = record["workload"]
    axes.set_title(f"{workload['name']} (n={workload['n_samples']:,}, k={workload['k']}): error vs speedup")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


#: The plot of the study: ``NAME-vc-gmm.png`` (relative error against speedup).
PLOTS = {"png": plot}


def write_outputs(record, out_dir) -> list:
    """Write the JSON record, the Markdown table and (unless the study was skipped) the plot."""
    return write_report(
        out_dir,
        output_name(record["workload"]["name"]),
        record,
        markdown_table(record),
        None if record.get("skipped") else PLOTS,
    )
