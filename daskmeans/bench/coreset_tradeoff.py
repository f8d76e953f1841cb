"""vc-GMM's error-against-speedup trade-off, beside the simple baselines it improves on.

``daskmeans bench WORKLOAD --algorithms vc-gmm`` runs, on the workload's data:

- the reference: scikit-learn ``KMeans(init="k-means++", n_init=1)`` on all rows (in the driver);
- vc-GMM (:class:`daskmeans.CoresetGaussianMixture`) at several coreset sizes, all its other parameters at their
  defaults: 10, 20, 50 and 100 rows per cluster, its default size (``coreset_size="auto"``) and the size of the
  former default rule (:data:`PREVIOUS_AUTO_PER_COMPONENT` rows per cluster), so that a change of defaults is judged
  in the same run;
- three baselines, each a ladder of sample sizes (:func:`baseline_sizes`) by iteration limits
  (:data:`BASELINE_MAX_ITER`): scikit-learn ``KMeans`` (its default k-means++ seeding) on a lightweight coreset
  (:func:`daskmeans.lightweight_coreset`, its weights as ``sample_weight``: "lwcs") and on a uniform sample of rows
  (with replacement: "uniform"); and ``KMeans(init="random")`` on a uniform sample ("uniform-random"), the cheapest
  seeding there is. A ladder stops at the first size whose shortest run takes longer than
  :data:`LADDER_TIME_FACTOR` times the slowest vc-GMM run, and a size's iteration limits stop where a run already
  converged or took that long.

Every run but the reference includes, inside its timed region, its sampling and the one pass over all rows that
labels them (the quantization error comes from that pass); the reference's own fit labels all rows. Relative error
is ``E / E_ref - 1`` with ``E`` the sum of squared distances of all rows to their nearest center, evaluated the same
way for every run (a daskmeans assign pass, float64 sums). "At equal time" is the lowest error a baseline reached
with a run that took no longer than the vc-GMM run (none: no run of its ladder was that fast).

Distance evaluations (training only, the final labelling pass excluded; ``n`` rows, ``m`` sample rows, ``k``
clusters): k-means++ seeding of scikit-learn ``n k (2 + ln k)``, random seeding none, each Lloyd iteration ``n k``;
a coreset ``n``; vc-GMM the AFK-MC2 chains and its E-steps as counted (:attr:`CoresetGaussianMixture.history_`).
"""

from __future__ import annotations

import gc
import math
import time

import numpy as np

from .._version import __version__
from ..algorithms.lloyd import final_inertia
from ..engine.client import compute_now
from ..engine.slabs import compute_dtype
from ..estimators.coreset import lightweight_coreset
from ..estimators.mixture import CoresetGaussianMixture, auto_coreset_size
from ..passes.sampling import finish_gather, gather_rows_graph, uniform_indices_with_replacement
from .common import code_commit, created, load_average, machine_text, provenance_lines, table_lines, write_report

#: The algorithm name that asks for this study.
NAME = "vc-gmm"
#: Rows per cluster of ``coreset_size="auto"`` before the current rule (:func:`~daskmeans.estimators.mixture.
#: auto_coreset_size`), with the same floor of 10,000 rows: its run stands for the former defaults.
PREVIOUS_AUTO_PER_COMPONENT = 20
#: Iteration limits of each baseline sample size (scikit-learn's own default, 300, last).
BASELINE_MAX_ITER = (3, 6, 12, 25, 300)
#: A baseline ladder goes on while its runs take at most this multiple of the slowest vc-GMM run.
LADDER_TIME_FACTOR = 1.25
#: The baselines: (how the sample is drawn, scikit-learn's ``init``).
BASELINES = {
    "lwcs": ("lwcs", "k-means++"),
    "uniform": ("uniform", "k-means++"),
    "uniform-random": ("uniform", "random"),
}


def coreset_sizes(n, k, row_bytes):
    """vc-GMM coreset sizes: 10, 20, 50 and 100 rows per cluster, the default and the former default size (all at
    most ``n / 2``, except a default that takes every row)."""
    sizes = {int(min(n // 2, f * k)) for f in (10, 20, 50, 100)}
    return sorted(sizes | {auto_coreset_size(n, k, row_bytes), previous_default_size(n, k)})


def previous_default_size(n, k):
    """The coreset size of the former ``coreset_size="auto"``: ``max(10000, 20 k)``, at most ``n``."""
    return int(min(n, max(10_000, PREVIOUS_AUTO_PER_COMPONENT * k)))


def baseline_sizes(n, k):
    """Ladder of sample sizes of the baselines: 5 to 400 rows per cluster (at most ``n / 2``)."""
    return sorted({int(min(n // 2, f * k)) for f in (5, 10, 25, 50, 100, 200, 400)})


def kmeanspp_distances(n, k, n_iter, init="k-means++"):
    """Distance evaluations of scikit-learn's seeding (greedy k-means++, or none for random) and ``n_iter`` Lloyd
    iterations."""
    seeding = n * k * (2 + int(math.log(k))) if init == "k-means++" else 0
    return int(seeding + n * k * n_iter)


def _start_clock():
    """``time.perf_counter()`` after a full garbage collection, so that no timed run pays for collecting what the runs
    before it left (the energy runs collect between runs too)."""
    gc.collect()
    return time.perf_counter()


def _sklearn_kmeans(k, seed, init="k-means++", max_iter=300):
    from sklearn.cluster import KMeans as SKLearnKMeans

    return SKLearnKMeans(k, init=init, n_init=1, max_iter=max_iter, random_state=seed)


def run_reference(X, k, seed):
    """scikit-learn k-means++ + Lloyd on all rows: ``(centers, seconds, n_iter)``."""
    model = _sklearn_kmeans(k, seed)
    start = _start_clock()
    model.fit(X)
    return model.cluster_centers_, time.perf_counter() - start, int(model.n_iter_)


def run_vc_gmm(array, k, m, seed, client):
    """vc-GMM at its defaults with coreset size ``m`` (``"auto"``: the default size); returns the record fields,
    timed with the labelling pass that gives its quantization error (``inertia_``), as the baselines are."""
    model = CoresetGaussianMixture(k, coreset_size=m, random_state=seed, client=client)
    start = _start_clock()
    model.fit(array)
    inertia = float(model.inertia_)
    seconds = time.perf_counter() - start
    em_distances = sum(r["distances"] + r["initial_distances"] for r in model.history_)
    return {
        "centers": model.means_,
        "size": int(model.coreset_size_),
        "seconds": seconds,
        "inertia": inertia,
        "n_iter": int(model.n_iter_),
        "stop_reason": model.stop_reason_,
        "distances": int(array.shape[0] + model.seeding_distances_ + em_distances),
        "em_distances_per_iteration": em_distances / max(1, model.n_iter_),
        "sigma2": float(model.covariance_),
    }


def run_baseline(method, array, k, m, seed, client, max_iter=300):
    """A baseline (:data:`BASELINES`) on ``m`` sampled rows with at most ``max_iter`` Lloyd iterations, then one
    labelling pass over all rows, all timed."""
    sampling, init = BASELINES[method]
    start = _start_clock()
    if sampling == "lwcs":
        points, weights = lightweight_coreset(array, m, random_state=seed, client=client)
        extra_distances = array.shape[0]
    else:
        index = uniform_indices_with_replacement(array.shape[0], m, seed, "bench-uniform")
        unique, inverse = np.unique(index, return_inverse=True)
        (raw,) = compute_now(gather_rows_graph(array, unique), client=client)
        points = finish_gather(raw, len(unique), array.shape[1], array.dtype)[inverse]
        weights = None
        extra_distances = 0
    model = _sklearn_kmeans(k, seed, init, max_iter).fit(points, sample_weight=weights)
    centers = model.cluster_centers_.astype(array.dtype)
    inertia = final_inertia(array, centers, None, client)
    seconds = time.perf_counter() - start
    return {
        "centers": centers,
        "seconds": seconds,
        "inertia": float(inertia),
        "n_iter": int(model.n_iter_),
        "max_iter": int(max_iter),
        "distances": int(extra_distances + kmeanspp_distances(m, k, int(model.n_iter_), init)),
    }


def run_ladder(method, sizes, time_limit, run):
    """Run baseline ``method`` over ``sizes`` by :data:`BASELINE_MAX_ITER`, as far as ``time_limit`` allows (see the
    module docstring); ``run(method, size, max_iter)`` makes and records one run and returns it."""
    for size in sizes:
        for position, max_iter in enumerate(BASELINE_MAX_ITER):
            result = run(method, size, max_iter)
            if result["seconds"] > time_limit and position == 0:
                return
            if result["seconds"] > time_limit or result["n_iter"] < max_iter:
                break


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
        "schema": "daskmeans-bench-vc-gmm/2",
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
    row_bytes = data.n_features * compute_dtype(data.array.dtype).itemsize
    default_size = auto_coreset_size(n, k, row_bytes)
    sizes = sizes or coreset_sizes(n, k, row_bytes)
    # compile the kernels and import scikit-learn before anything is timed
    run_vc_gmm(data.array[: 20 * 8], 8, 100, 0, client)
    for method in BASELINES:
        run_baseline(method, data.array[: 20 * 8], 8, 50, 0, client, max_iter=2)
    for seed in seeds:
        reference = run_reference_record(data, k, seed, client)
        record["runs"].append(reference)
        say(f"k-means++ on all rows (seed {seed}): {reference['seconds']:.1f} s, {reference['n_iter']} iterations")

        def add(method, size, result):
            result.pop("centers")
            result["load_average_after"] = load_average()
            result.setdefault("size", size)
            result.update(
                {
                    "method": method,
                    "seed": seed,
                    "error": result["inertia"] / reference["inertia"] - 1.0,
                    "speedup": reference["seconds"] / result["seconds"],
                    "distance_speedup": reference["distances"] / max(1, result["distances"]),
                }
            )
            record["runs"].append(result)
            limit = f" (max_iter {result['max_iter']})" if "max_iter" in result else ""
            say(f"{method} size {size}{limit}: {result['seconds']:.2f} s, error {100 * result['error']:.2f}%")
            return result

        for m in sizes:
            run = add("vc-gmm", m, run_vc_gmm(data.array, k, "auto" if m == default_size else m, seed, client))
            run["default"] = m == default_size
            run["previous_default"] = m == previous_default_size(n, k)
        time_limit = LADDER_TIME_FACTOR * max(r["seconds"] for r in record["runs"] if r["method"] == "vc-gmm")
        for method in BASELINES:
            run_ladder(
                method,
                baseline_sizes(n, k),
                time_limit,
                lambda method, size, max_iter: add(
                    method, size, run_baseline(method, data.array, k, size, seed, client, max_iter)
                ),
            )
        compare_at_same_time(record["runs"], seed)
    return record


def run_reference_record(data, k, seed, client):
    """The reference run (:func:`run_reference`) as a record entry, its energy evaluated as every other run's."""
    centers, seconds, n_iter = run_reference(data.X, k, seed)
    inertia = final_inertia(data.array, centers.astype(data.array.dtype), None, client)
    return {
        "method": "k-means++",
        "seed": seed,
        "size": data.n_samples,
        "seconds": seconds,
        "load_average_after": load_average(),
        "inertia": inertia,
        "error": 0.0,
        "speedup": 1.0,
        "n_iter": n_iter,
        "distances": kmeanspp_distances(data.n_samples, k, n_iter),
        "distance_speedup": 1.0,
    }


def compare_at_same_time(runs, seed):
    """Give every vc-GMM run of ``seed`` each baseline's lowest error in no more time
    (``METHOD_error_at_same_time``, with ``-`` as ``_`` in ``METHOD``)."""
    for run in runs:
        if run["method"] == "vc-gmm" and run["seed"] == seed:
            for method in BASELINES:
                ladder = [r for r in runs if r["method"] == method and r["seed"] == seed]
                run[same_time_key(method)] = at_time(ladder, run["seconds"])


def same_time_key(method):
    """The record key of baseline ``method``'s error at a vc-GMM run's time."""
    return f"{method.replace('-', '_')}_error_at_same_time"


# -- outputs -----------------------------------------------------------------------------------------------------------
LABELS = {
    "k-means++": "k-means++ (all rows)",
    "vc-gmm": "vc-GMM",
    "lwcs": "LWCS + k-means++",
    "uniform": "uniform sample + k-means++",
    "uniform-random": "uniform sample + k-means (random init)",
}
#: The baselines vc-GMM's claim is judged against (the paper's): a lightweight coreset and a uniform sample, each
#: clustered by scikit-learn's k-means at its default seeding.
CLAIM_BASELINES = ("lwcs", "uniform")


def output_name(workload_name) -> str:
    """The name of the study's outputs: ``NAME-vc-gmm``."""
    return f"{workload_name}-vc-gmm"


def _percent(value):
    return "n/a" if value is None else f"{100 * value:.2f}%"


def method_label(run, with_seed=False) -> str:
    """The table's name of a run: its method, for vc-GMM whether it is the default (or former default) size, and
    its seed where the record has several."""
    label = LABELS[run["method"]]
    marks = [name for key, name in (("default", "default"), ("previous_default", "former default")) if run.get(key)]
    return label + (f" ({', '.join(marks)} size)" if marks else "") + (f", seed {run['seed']}" if with_seed else "")


def several_seeds(record) -> bool:
    """Whether the record holds the study for more than one seed."""
    return len({run["seed"] for run in record["runs"]}) > 1


def vc_gmm_by_size(record) -> dict:
    """The vc-GMM runs of every seed, by coreset size (smallest first)."""
    sizes = {}
    for run in record["runs"]:
        if run["method"] == "vc-gmm":
            sizes.setdefault(run["size"], []).append(run)
    return dict(sorted(sizes.items()))


def size_means(runs) -> tuple:
    """``(mean error, mean speedup)`` of one coreset size's runs over the seeds."""
    return float(np.mean([r["error"] for r in runs])), float(np.mean([r["speedup"] for r in runs]))


def seed_summary(record) -> list:
    """One line per vc-GMM coreset size over the seeds: the mean error and speedup, and in how many seeds it was
    ahead of the claim's baselines and of random-seeded k-means at the same time."""
    lines = []
    for runs in vc_gmm_by_size(record).values():
        error, speedup = size_means(runs)
        claim = sum(ahead_of(run, CLAIM_BASELINES) for run in runs)
        random_init = sum(ahead_of(run, ("uniform-random",)) for run in runs)
        name = method_label(runs[0]).replace("vc-GMM", f"vc-GMM, coreset {runs[0]['size']:,}")
        lines.append(
            f"{name}, over {len(runs)} seeds: mean error {_percent(error)} at a mean speedup of {speedup:.1f}x; lower "
            f"error than both k-means++ baselines at the same time in {claim} of {len(runs)} seeds, below k-means "
            f"with random seeding on a uniform sample in {random_init}."
        )
    return lines


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
    many = several_seeds(record)
    columns = [
        "method",
        "size",
        "max_iter",
        "time (s)",
        "speedup",
        "rel. error",
        "EM/Lloyd iterations",
        "distance evals",
        "distance speedup",
        *(f"{LABELS[method]} error at same time" for method in BASELINES),
    ]
    rows = [
        [
            method_label(run, many),
            f"{run['size']:,}",
            f"{run.get('max_iter', '')}",
            f"{run['seconds']:.2f}",
            f"{run['speedup']:.1f}x",
            _percent(run["error"]),
            f"{run['n_iter']}",
            f"{run['distances']:.3g}",
            f"{run['distance_speedup']:.1f}x",
            *(_percent(run.get(same_time_key(m))) if run["method"] == "vc-gmm" else "" for m in BASELINES),
        ]
        for run in record["runs"]
    ]
    lines += table_lines(columns, rows, right=range(1, len(columns)))
    lines.append("")
    lines += [f"- {verdict(run, many)}" for run in record["runs"] if run["method"] == "vc-gmm"]
    if many:
        lines += ["", *(f"- {line}" for line in seed_summary(record))]
    return "\n".join(lines) + "\n"


def ahead_of(run, methods) -> bool:
    """Whether a vc-GMM run's error is below each of ``methods``' lowest error in no more time (a baseline with no
    run that fast counts as behind)."""
    return all(run.get(same_time_key(m)) is None or run["error"] < run[same_time_key(m)] for m in methods)


def verdict(run, with_seed=False) -> str:
    """One line on a vc-GMM run: its error and speedup, against the claim's baselines and against k-means with random
    seeding on a uniform sample, at the same time (``with_seed``: its seed named)."""
    claim = "lower error than" if ahead_of(run, CLAIM_BASELINES) else "NOT lower error than"
    random_init = "below" if ahead_of(run, ("uniform-random",)) else "NOT below"
    slow = [LABELS[m] for m in BASELINES if run.get(same_time_key(m)) is None]
    name = method_label(run, with_seed).replace("vc-GMM", f"vc-GMM, coreset {run['size']:,}")
    return (
        f"{name}: {_percent(run['error'])} "
        f"at {run['speedup']:.1f}x: {claim} both k-means++ baselines at the same time; {random_init} k-means with "
        f"random seeding on a uniform sample" + (f" (no run that fast: {', '.join(slow)})" if slow else "") + "."
    )


def baselines_at_time(run) -> str:
    """The lowest error of each baseline in no more time than a vc-GMM run, as ``5.8% / 12.5% / 3.1%``
    (:data:`BASELINES` order; ``none that fast`` where a baseline has no run that fast)."""
    if run["method"] != "vc-gmm":
        return ""
    values = [run.get(same_time_key(method)) for method in BASELINES]
    return " / ".join("none that fast" if value is None else f"{100 * value:.1f}%" for value in values)


def best_by_time(runs):
    """The lowest error reached in at most each run's time: ``(seconds, error)`` pairs, fastest first."""
    envelope, best = [], math.inf
    for run in sorted(runs, key=lambda r: r["seconds"]):
        best = min(best, run["error"])
        envelope.append((run["seconds"], best))
    return envelope


def plot(record, path):
    """Relative error against wall-clock speedup: vc-GMM by coreset size (the mean over the seeds, each seed's run as a
    dot), each baseline as the lowest error its ladder reached in each time, one line per seed (its runs as faint
    marks)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    figure, axes = plt.subplots(figsize=(7, 4.5))
    by_size = vc_gmm_by_size(record)
    means = [size_means(runs) for runs in by_size.values()]
    many = several_seeds(record)
    line = axes.plot([s for _, s in means], [100 * e for e, _ in means], "o-", label=LABELS["vc-gmm"])
    for runs, (error, speedup) in zip(by_size.values(), means):
        text = f"{runs[0]['size']:,}" + (" (default)" if runs[0].get("default") else "")
        axes.annotate(text, (speedup, 100 * error), fontsize=7, textcoords="offset points", xytext=(3, 3))
        if many:
            axes.plot([r["speedup"] for r in runs], [100 * r["error"] for r in runs], ".", color=line[0].get_color())
    for method, style in zip(BASELINES, ("s--", "^:", "v-.")):
        runs = [r for r in record["runs"] if r["method"] == method]
        if runs:
            reference = {r["seed"]: r["seconds"] for r in record["runs"] if r["method"] == "k-means++"}
            for number, seed in enumerate(sorted({r["seed"] for r in runs})):
                envelope = best_by_time([r for r in runs if r["seed"] == seed])
                line = axes.plot(
                    [reference[seed] / t for t, _ in envelope],
                    [100 * e for _, e in envelope],
                    style,
                    label=None if number else LABELS[method],
                    **({"color": line[0].get_color()} if number else {}),
                )
            axes.plot(
                [r["speedup"] for r in runs],
                [100 * r["error"] for r in runs],
                ".",
                color=line[0].get_color(),
                alpha=0.3,
            )
    axes.set_xscale("log")
    axes.set_yscale("log")
    plain = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")
    for axis in (axes.xaxis, axes.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    axes.set_xlabel("wall-clock speedup over k-means++ on all rows (scikit-learn)")
    axes.set_ylabel("relative quantization error (%)")
    workload = record["workload"]
    axes.set_title(f"{workload['name']} (n={workload['n_samples']:,}, k={workload['k']}): error vs speedup")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
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
