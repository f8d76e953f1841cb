"""The benchmark suite: one entry per published record, each a ``daskmeans bench`` command writing into its own
folder, and ``daskmeans bench suite`` to run them all and rebuild the benchmarks page.

An entry names its workloads and options; the command it runs (and that its records print in their header) is
built from the entry (:func:`entry_arguments`; :func:`daskmeans.bench.command.suite_command` renders it as the
records do), so that the suite and the records agree by construction::

    daskmeans bench suite --data-dir ../shared/data --out docs/benchmarks
    daskmeans bench suite --quick --out /tmp/bench-smoke            # every entry at tiny sizes
    daskmeans bench suite --only descriptors,sizing --data-dir ../shared/data --out docs/benchmarks
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

from ..exceptions import InvalidParameterError
from . import coreset_tradeoff, kernel_quality, report, sizing, sweep
from .common import output_paths, refuse_existing
from .reference import DEFAULT_CACHE_NAME
from .workloads import SIZING, WORKLOADS

#: The word that asks ``daskmeans bench`` for the suite instead of a workload.
SUITE_NAME = "suite"
#: The Markdown page the suite writes into its output folder.
PAGE_NAME = "index.md"
#: Where the suite's Zarr stores go unless ``--work-dir`` says otherwise (ignored by git).
DEFAULT_WORK_DIR = "bench-results/data"
#: Options a quick run leaves out, so that each workload takes its quick variant's size, k and time budget.
QUICK_DROPS = ("-k", "--n-clusters", "--n-samples", "--time-budget", "--sizes", "--seeds")
#: Options of a local cluster, left out when the suite runs on ``--scheduler``.
LOCAL_CLUSTER_OPTIONS = ("--workers", "--threads-per-worker", "--local-workers", "--memory-limit")
#: Workloads whose data is written to Zarr stores (in ``--work-dir``).
STORED_WORKLOADS = ("out-of-core", "descriptors-at-scale", SIZING)


@dataclass(frozen=True)
class Entry:
    """One record of the suite: a ``daskmeans bench`` command and the folder it writes.

    Attributes
    ----------
    name : str
        The record's folder under the suite's output folder.
    title : str
        Its heading on the benchmarks page.
    workloads : tuple of str
        The workloads of the command (one record file each).
    options : tuple of str
        The command's other options, as words (``--out``, ``--data-dir``, ``--work-dir`` and
        ``--reference-cache`` are added by the suite).
    summary : str
        One or two sentences for the page: what the record measures, and anything a reader must know to use it.
    """

    name: str
    title: str
    workloads: tuple
    options: tuple
    summary: str = ""

    @property
    def kind(self) -> str:
        """``"energy"`` (energy over time), ``"sweep"`` (energy over time in a grid of n and k), ``"quality"``
        (ARI/NMI), ``"vc-gmm"`` (the error-vs-speedup study) or ``"sizing"``."""
        if SIZING in self.workloads:
            return "sizing"
        if "--sweep-n" in self.options:
            return "sweep"
        if "--quality" in self.options:
            return "quality"
        algorithms = _option_value(self.options, "--algorithms") or ""
        return "vc-gmm" if coreset_tradeoff.NAME in algorithms.split(",") else "energy"

    @property
    def yardstick(self) -> str | None:
        """E* of an energy or sweep record: ``"lloyd"`` (the converged Lloyd energy) or ``"best"`` (the older
        yardstick)."""
        if self.kind not in ("energy", "sweep"):
            return None
        return _option_value(self.options, "--reference") or "lloyd"

    def record_names(self, quick=False) -> list:
        """The file names (without extension) of the entry's records in its folder."""
        if self.kind == "sizing":
            return [sizing.output_name(quick)]
        names = [f"{workload}-quick" if quick else workload for workload in self.workloads]
        if self.kind == "quality":
            return [kernel_quality.output_name(name) for name in names]
        if self.kind == "vc-gmm":
            return [coreset_tradeoff.output_name(name) for name in names]
        if self.kind == "sweep":
            return [sweep.output_name(name) for name in names]
        return names

    def plots(self) -> dict:
        """The plots each record of the entry has (see :func:`.common.output_paths`)."""
        plots = {"energy": report.PLOTS, "sweep": sweep.PLOTS, "vc-gmm": coreset_tradeoff.PLOTS, "sizing": sizing.PLOTS}
        return plots.get(self.kind, {})

    def needs_data_files(self) -> bool:
        """Whether a workload reads a dataset file from ``--data-dir``."""
        return any(workload in WORKLOADS and WORKLOADS[workload][0].file for workload in self.workloads)

    def needs_work_dir(self) -> bool:
        """Whether a workload writes its data to Zarr stores (``--work-dir``)."""
        return any(workload in STORED_WORKLOADS for workload in self.workloads)


def _option_value(words, option):
    """The word after ``option`` in ``words`` (None when absent)."""
    words = list(words)
    return words[words.index(option) + 1] if option in words else None


_PROCESSES = ("--workers", "2", "--threads-per-worker", "1", "--local-workers", "processes")
_THREADED = ("--workers", "2", "--threads-per-worker", "1", "--local-workers", "scheduler")
_TWO_WORKERS = ("--workers", "2", "--threads-per-worker", "1")
_SPEED = (
    "--algorithms",
    "kmeans,kmeans-lloyd,nmbatch",
    "--time-budget",
    "30",
    "--max-points",
    "8",
    "--versus",
    "kmeans-lloyd",
)
_SMALL = (
    "--algorithms",
    "kmeans,kmeans-lloyd",
    "--peers",
    "sklearn-lloyd,faiss",
    "--seeds",
    "3",
    "--time-budget",
    "15",
    "--max-points",
    "8",
)
_VRKM = (
    "--algorithms",
    "kmeans,kmeans-lloyd,vrkm++",
    "--peers",
    "none",
    "--max-points",
    "8",
    "--versus",
    "kmeans,kmeans-lloyd",
    "--versus-within",
    "1e-3",
)
#: Every daskmeans algorithm and every peer of a sweep, on 2 worker processes.
_SWEEP = (
    "--algorithms",
    "kmeans,nmbatch,minibatch",
    "--peers",
    "sklearn-lloyd,sklearn-minibatch,sklearn-intelex,faiss,faiss-all,superkmeans,superkmeans-all",
    "--versus",
    "sklearn-lloyd",
    "--versus-within",
    "1e-4",
    "--max-points",
    "6",
    *_PROCESSES,
)
_KERNEL = ("--quality", "--seeds", "3")
_NMBATCH = (
    "--algorithms",
    "nmbatch,minibatch,kmeans",
    "--peers",
    "sklearn-lloyd,sklearn-minibatch,faiss",
    "--reference",
    "best",
)
_LARGE_K = (
    "--n-clusters",
    "16384",
    "--n-samples",
    "300000",
    "--algorithms",
    "kmeans",
    "--peers",
    "faiss-all",
    "--time-budget",
    "1300",
    "--max-points",
    "8",
    "--reference",
    "best",
)
_AT_SCALE = (
    "--n-samples",
    "100000000",
    "--max-points",
    "2",
    "--no-refine",
    "--reference",
    "best",
    "--memory-limit",
    "4GiB",
)


def _at_scale_20m(k: str, seconds: str) -> tuple:
    """The arguments of a 20-million-row entry: nmbatch and mini-batch on 2 workers of 768 MiB against faiss on the
    largest sample a 4 GiB driver holds, ``k`` centers, ``seconds`` per run."""
    return (
        "--n-samples",
        "20000000",
        "--n-clusters",
        k,
        "--algorithms",
        "nmbatch,minibatch",
        "--peers",
        "faiss-sample",
        "--time-budget",
        seconds,
        "--max-points",
        "4",
        "--reference",
        "best",
        "--driver-memory",
        "4GiB",
        "--memory-limit",
        "768MiB",
        *_TWO_WORKERS,
    )


_AT_SCALE_20M_TEXT = (
    "20,000,000 resampled descriptors (2.56 GB of uint8 in Zarr) read from the store by 2 workers of 768 MiB, "
    "k = {k}; faiss trains on the largest sample a 4 GiB driver holds, read inside its timed region."
)

#: Every record of the benchmarks page, in the page's order.
SUITE = (
    Entry(
        "descriptors",
        "Descriptors, k = 1000: time to a good clustering, peers in the same run",
        ("descriptors",),
        (*_SPEED, "--peers", "sklearn-lloyd,faiss,faiss-all,superkmeans,superkmeans-all", *_PROCESSES),
        "The library's main case: 960,000 real SIFT descriptors held by 2 worker processes; the peers run in the "
        "driver on every core.",
    ),
    Entry(
        "sweep",
        "Descriptors at every size: n x k, every peer in the same run",
        ("descriptors",),
        ("--sweep-n", "100000,300000,960000", "--sweep-k", "64,256,1000,4096", *_SWEEP, "--time-budget", "45"),
        "Seeded uniform subsamples of the descriptors at three sizes, each clustered into four k, every daskmeans "
        "algorithm and peer in each cell; the cells where daskmeans is not ahead are flagged.",
    ),
    Entry(
        "sweep-seeds",
        "Descriptors at two sizes of the sweep, three seeds each",
        ("descriptors",),
        ("--sweep-n", "300000", "--sweep-k", "256,1000", "--seeds", "3", *_SWEEP, "--time-budget", "5"),
        "Two cells of the sweep (300,000 rows, k = 256 and 1,000) from three seeds' initial centers: the medians "
        "and the spread over seeds of the times the sweep gives from one seed.",
    ),
    Entry(
        "descriptors-threaded",
        "Descriptors, k = 1000, on Dask's threaded scheduler, with every peer",
        ("descriptors",),
        (*_SPEED, "--peers", "sklearn-lloyd,sklearn-intelex,sklearn-minibatch,faiss,faiss-all", *_THREADED),
        "The same workload without a cluster (a fit from Python without a client), with every in-memory peer.",
    ),
    Entry(
        "small-data",
        "MNIST and KDD, three seeds: small data on worker processes",
        ("mnist", "kdd"),
        (*_SMALL, *_PROCESSES),
        "Data of 70,000 and 146,000 rows, where a pass's scheduling weighs most; medians and ranges over 3 seeds.",
    ),
    Entry(
        "small-data-threaded",
        "MNIST and KDD, three seeds, on Dask's threaded scheduler",
        ("mnist", "kdd"),
        (*_SMALL, *_THREADED),
        "The same runs without a cluster.",
    ),
    Entry(
        "vrkm",
        "VRKM++ against KMeans and Lloyd: MNIST and KDD, three seeds",
        ("mnist", "kdd"),
        (*_VRKM, "--seeds", "3", "--time-budget", "15", *_PROCESSES),
        "Time to within 0.1% of the final energy of KMeans and of Lloyd without bounds (kmeans-lloyd), the VRKM "
        "paper's yardstick. A column's speedup is the reference run's time to its own final energy over the time "
        "each run came within 0.1% of it; the papers' claims above hold both runs to the same 0.1%.",
    ),
    Entry(
        "vrkm-descriptors",
        "VRKM++ against KMeans and Lloyd: descriptors",
        ("descriptors",),
        (*_VRKM, "--time-budget", "40", *_PROCESSES),
        "The same comparison on the descriptors, one seed.",
    ),
    Entry(
        "kernel",
        "Kernel k-means: quality against time, at the defaults",
        ("pendigits", "mnist"),
        (*_KERNEL, "--algorithms", "kernel-minibatch,kernel-kmeans,kmeans", *_TWO_WORKERS),
        "Truncated mini-batch kernel k-means at its defaults against the full batch and linear k-means: ARI and "
        "NMI against the true labels, speed-up over the full batch seed by seed.",
    ),
    Entry(
        "kernel-paper-settings",
        "Kernel k-means at the paper's settings (b = 1024, tau = 200)",
        ("pendigits", "mnist"),
        (*_KERNEL, "--algorithms", "kernel-minibatch,kernel-minibatch-paper,kernel-kmeans,kmeans", *_TWO_WORKERS),
        "The same, with the mini-batch paper's experimental settings beside the defaults.",
    ),
    Entry(
        "vc-gmm-kdd",
        "vc-GMM: error against speedup on KDD",
        ("kdd",),
        ("--algorithms", "vc-gmm", "--peers", "none", "--seeds", "3"),
        "vc-GMM at several coreset sizes against k-means++ on all rows, with scikit-learn's k-means on a "
        "lightweight coreset and on a uniform sample (sizes and iteration limits searched) as baselines, "
        "three seeds.",
    ),
    Entry(
        "vc-gmm-descriptors",
        "vc-GMM: error against speedup on the descriptors",
        ("descriptors",),
        ("--algorithms", "vc-gmm", "--peers", "none", *_PROCESSES),
        "The same study at k = 1000.",
    ),
    Entry(
        "vc-gmm-mnist",
        "vc-GMM: error against speedup on MNIST",
        ("mnist",),
        ("--algorithms", "vc-gmm", "--peers", "none", "--seeds", "3"),
        "The same study on MNIST's 784 pixels, k = 50, three seeds.",
    ),
    Entry(
        "nmbatch-descriptors",
        "nmbatch against mini-batch k-means: descriptors",
        ("descriptors",),
        (*_NMBATCH, "--time-budget", "40", *_TWO_WORKERS),
        "Nested mini-batch k-means against mini-batch k-means, the nmbatch paper's comparison, on the older "
        "yardstick; made when nmbatch's doubling threshold rho defaulted to 1 (it is 2 now).",
    ),
    Entry(
        "nmbatch-mnist",
        "nmbatch against mini-batch k-means: MNIST, three seeds",
        ("mnist",),
        (*_NMBATCH, "--seeds", "3", "--time-budget", "15", "--max-points", "8", *_TWO_WORKERS),
        "The same on MNIST, on the older yardstick, with rho = 1 then.",
    ),
    Entry(
        "large-k-16384",
        "k = 16,384 against faiss's 25 iterations, same initial centers",
        ("descriptors",),
        (*_LARGE_K, "--param", "kmeans:tol=0", "--versus", "faiss-all@25", *_TWO_WORKERS),
        "300,000 descriptors, KMeans run to convergence against faiss on every row for its default 25 "
        "iterations, both from the same random rows.",
    ),
    Entry(
        "large-k-16384-two-level",
        "k = 16,384 with two-level seeding against faiss's 25 iterations",
        ("descriptors",),
        (
            *_LARGE_K,
            "--param",
            "kmeans:init=two-level",
            "--param",
            "kmeans:tol=0",
            "--versus",
            "faiss-all@25",
            *_TWO_WORKERS,
        ),
        'The same, KMeans seeding itself with init="two-level" (its times include the seeding).',
    ),
    Entry(
        "large-k-65536",
        "k = 65,536 on all descriptors against faiss's two-level clustering",
        ("descriptors",),
        (
            "--n-clusters",
            "65536",
            "--algorithms",
            "kmeans",
            "--peers",
            "faiss-two-level,faiss-all,superkmeans",
            "--time-budget",
            "30",
            "--max-points",
            "3",
            "--reference",
            "best",
            "--param",
            "kmeans:init=two-level",
            "--param",
            "kmeans:tol=0",
            "--versus",
            "faiss-two-level",
            *_TWO_WORKERS,
        ),
        'All 960,000 descriptors at k = 65,536: KMeans(init="two-level") against faiss\'s two-level clustering, '
        "and flat faiss and SuperKMeans on every row for as many iterations as the budget allows (one).",
    ),
    Entry(
        "descriptors-at-scale-20m",
        "20 million descriptors out of core on small workers",
        ("descriptors-at-scale",),
        _at_scale_20m("256", "60"),
        _AT_SCALE_20M_TEXT.format(k="256"),
    ),
    Entry(
        "descriptors-at-scale-20m-k1000",
        "20 million descriptors out of core on small workers, k = 1,000",
        ("descriptors-at-scale",),
        _at_scale_20m("1000", "120"),
        _AT_SCALE_20M_TEXT.format(k="1,000"),
    ),
    Entry(
        "descriptors-at-scale-100m",
        "100 million descriptors out of core",
        ("descriptors-at-scale",),
        (
            *_AT_SCALE,
            "--algorithms",
            "nmbatch,minibatch,kmeans",
            "--peers",
            "faiss-sample",
            "--time-budget",
            "240",
            "--driver-memory",
            "4GiB",
            *_TWO_WORKERS,
        ),
        "100,000,000 resampled descriptors (8.7 GB of uint8 in Zarr, 51 GB as float32) read from the store at "
        "every pass by 2 workers of 4 GiB; faiss trains on the sample the driver holds.",
    ),
    Entry(
        "minibatch-reads-100m",
        "Mini-batch reads at 100 million rows",
        ("descriptors-at-scale",),
        (
            *_AT_SCALE,
            "--algorithms",
            "minibatch,minibatch-rows",
            "--peers",
            "none",
            "--time-budget",
            "120",
            *_TWO_WORKERS,
        ),
        "What each mini-batch step reads from the store: pools of whole blocks (the default) against rows drawn "
        "uniformly from all blocks.",
    ),
    Entry(
        "sizing",
        "Sizing: a pass against n, and a billion rows",
        ("sizing",),
        ("--sizes", "1048576,4194304", *_TWO_WORKERS),
        "The assign pass and a KMeans iteration on synthetic descriptors read from Zarr, and their extrapolation "
        "to 1,000,000,000 rows.",
    ),
)


def entry_named(name) -> Entry:
    """The suite's entry called ``name``."""
    for entry in SUITE:
        if entry.name == name:
            return entry
    raise InvalidParameterError(f"The suite has no entry {name!r}; choose from {', '.join(e.name for e in SUITE)}.")


def chosen_entries(only=None) -> list:
    """The entries ``--only`` names (comma-separated, in the suite's order), or every entry."""
    if not only:
        return list(SUITE)
    names = [name.strip() for name in only.split(",") if name.strip()]
    wanted = {entry_named(name).name for name in names}
    return [entry for entry in SUITE if entry.name in wanted]


def entry_arguments(
    entry, out, *, quick=False, data_dir=None, work_dir=DEFAULT_WORK_DIR, scheduler=None, overwrite=False
) -> list:
    """The ``daskmeans bench`` arguments of an entry writing into ``OUT/NAME``.

    Parameters
    ----------
    entry : Entry
    out : str
        The suite's output folder.
    quick : bool
        Each workload's quick variant: its own size, k and time budget, one seed.
    data_dir, work_dir : str, optional
        The datasets' folder (for entries that read one) and the folder of Zarr stores (for entries that write
        them).
    scheduler : str, optional
        A running scheduler: the entry's local-cluster options are left out.
    overwrite : bool
    """
    options = list(entry.options)
    drops = (QUICK_DROPS if quick else ()) + (LOCAL_CLUSTER_OPTIONS if scheduler else ())
    kept = []
    while options:
        word = options.pop(0)
        if word in drops:
            if options and not options[0].startswith("-"):
                options.pop(0)
            continue
        kept.append(word)
    args = [*entry.workloads, *kept, "--out", posixpath.join(out, entry.name)]
    if quick:
        args.append("--quick")
    if data_dir is not None and entry.needs_data_files():
        args += ["--data-dir", data_dir]
    if entry.needs_work_dir():
        args += ["--work-dir", work_dir]
    if entry.yardstick == "lloyd":
        args += ["--reference-cache", posixpath.join(out, DEFAULT_CACHE_NAME)]
    if scheduler:
        args += ["--scheduler", scheduler]
    if overwrite:
        args.append("--overwrite")
    return args


def expected_outputs(entries, out, quick=False) -> list:
    """Every file the entries write (their JSON records, Markdown tables and plots)."""
    paths = []
    for entry in entries:
        for name in entry.record_names(quick):
            paths += output_paths(os.path.join(out, entry.name), name, entry.plots()).values()
    return paths


def check_suite(entries, out, *, data_dir, overwrite, quick=False) -> None:
    """Refuse, before anything runs, a dataset file that is missing or an earlier record that would be replaced.

    Raises
    ------
    FileNotFoundError, OutputExistsError
    """
    folder = data_dir if data_dir is not None else "data"
    for entry in entries:
        for workload in entry.workloads:
            file = WORKLOADS[workload][0].file if workload in WORKLOADS else None
            if file and not os.path.exists(os.path.join(folder, file)):
                raise FileNotFoundError(
                    f"The suite's entry {entry.name!r} needs {os.path.join(folder, file)!r}; give the folder that "
                    "holds the datasets with --data-dir (or leave the entry out with --only)."
                )
    if not overwrite:
        refuse_existing(expected_outputs(entries, out, quick))
