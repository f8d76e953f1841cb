"""The benchmarks page (``index.md`` in the suite's output folder), rendered from the records alone: how the
figures are obtained, the one command that makes them all again, one table per record, and the papers' claims
beside our figures. ``daskmeans bench suite`` writes it; a test checks the committed page against this code."""

from __future__ import annotations

import os
import statistics

from . import coreset_tradeoff
from . import records as rec
from .common import machine_text, table_lines, write_text
from .reference import REFERENCE_MAX_ITER
from .suite import PAGE_NAME, SUITE_NAME

INTRO = """\
Every figure on this page is read from a record in this folder: a JSON file holding every run, with a Markdown
report and plots beside it, made by the `daskmeans bench` command its header prints. The tables below are
generated from those records by `daskmeans bench suite`, which also runs every record's command again."""

METHOD = f"""\
- **E\\*** is the energy (mean squared distance of the rows to their nearest center) that times are measured
  against. By default (`--reference lloyd`) it is the energy Lloyd's algorithm converges to from the seed's initial
  centers (daskmeans `KMeans`, Lloyd's iterates with distance bounds, `tol=0`, at most {REFERENCE_MAX_ITER}
  iterations), or the lowest energy any run reached where that is lower. It is computed once per workload, size,
  k and seed and kept in `reference-energies.json`. Records on the older yardstick (`--reference best`) take the
  lowest energy any of their runs reached, which is easier to come within 1% or 2% of; their tables say so.
- **Initial centers** are shared: each seed draws k distinct rows, and every daskmeans run and every peer of that
  seed starts from them. A run given `--param ALGORITHM:init=two-level`, the `faiss-two-level` peer and the
  SuperKMeans peers (which take no initial centers) seed themselves, and their times include the seeding.
- **Energies** are exact, on all rows, and computed outside every timed region.
- **Times** are the wall time of the call, from the start of a fit until its centers could be returned. A
  daskmeans fit hands out its centers after every iteration; a snapshot's time counts the closing pass the fit
  makes after its last iteration. In records that time whole fits, the first snapshot within a target only
  says how to fit again: first with `max_iter` its iteration (the same iterates end there, as a peer's rung of
  that many iterations), and where that fit's result is not within the target, with the snapshot's time as
  `max_time`, longer until it is (records made before the `max_iter` fits took only the latter; their notes say
  which). The time shown is that fit's, from the call to its return, with the snapshot's beside it when that was
  earlier. scikit-learn
  `KMeans`, scikit-learn-intelex, faiss on its default subsample, faiss `SuperKMeans` and dask-ml run as ladders of
  complete fits with growing iteration limits, each point a fit of its own. faiss on every row (`faiss-all`) and
  on a sample (`faiss-sample`) make one iteration per `train` call from the centroids the last call left: the
  iterates of one fit of that many iterations. scikit-learn's `MiniBatchKMeans` counts the time spent in
  `partial_fit`. Times to 1% and 2% of E\\* are refined by bisection between evaluated points, except in records
  made with `--no-refine`, where they are upper bounds.
- **Peers** run in the driver process on every core: scikit-learn `KMeans` (Lloyd) and `MiniBatchKMeans` (batches
  of 1,024 rows), scikit-learn-intelex's oneDAL `KMeans` (scikit-learn left unpatched), faiss `Kmeans` on its
  default subsample of 256 rows per centroid, on every row, or on the largest sample of whole chunks the driver's
  memory holds, faiss's two-level clustering for large k (round(sqrt(k)) coarse centroids), and faiss's
  `SuperKMeans` (faiss-cpu 1.15 or later: distances pruned on a prefix of rotated dimensions; at least 32
  features) on its default subsample (`superkmeans`) or on every row (`superkmeans-all`). dask-ml's `KMeans` runs on
  the cluster.
- **A sweep** (`--sweep-n` and `--sweep-k`) runs a workload's subsamples at several sizes, each into several k:
  every cell is an energy benchmark of its own, with its own E\\*, the largest cell gets the time budget and every
  other cell a share proportional to its n x k (at least 5 s). Its table compares, cell by cell, the fastest
  daskmeans algorithm with the fastest peer, and flags the cells that fall short of a goal.
- **A yardstick run** (`--versus NAME`, e.g. scikit-learn's Lloyd) that runs as a ladder goes on past the time
  budget to its converged fit (at most 300 iterations), so that its final energy is the converged one; exact
  k-means, where its own run did not reach that energy, is fitted once more with the yardstick's time as its
  `max_time`.
- **Ratios are taken within one record**, seed by seed: both runs made by one command on one machine. Times of
  different records (other days, machines or loads) do not compare.
- **The machine** of each record is named in the table below and in the record's header, with the code's commit,
  the date and the command."""


def regenerate_text(out) -> str:
    """The commands that make every record again, and a quick smoke run."""
    return f"""\
The peers need the `bench` extra (`pip install -e ".[bench]"`); `--data-dir` names the folder holding
`cifar_dsift.npz`, `mnist.npz`, `pendigits.npz` and `kddcup04_bio.npz`. Each entry writes into its own folder,
with the command its records print; the whole suite takes several hours on two cores.

```bash
daskmeans bench {SUITE_NAME} --data-dir ../shared/data --out {out} --overwrite
daskmeans bench {SUITE_NAME} --only descriptors,sizing --data-dir ../shared/data --out {out} --overwrite
daskmeans bench {SUITE_NAME} --quick --data-dir ../shared/data --out bench-results/smoke   # every entry, tiny sizes
```"""


# -- the index of records --------------------------------------------------------------------------------------------
def _made(record) -> str:
    commit = record.get("commit")
    date = record["created"][:10]
    return f"`{commit}`, {date}" if commit else date


def _yardstick(entry) -> str:
    """What an entry's figures are measured against."""
    return {
        "lloyd": "E*: converged Lloyd",
        "best": "E*: lowest energy reached (older)",
        None: {"quality": "true labels (ARI, NMI)", "vc-gmm": "k-means++ on all rows", "sizing": "time and memory"}.get(
            entry.kind, ""
        ),
    }[entry.yardstick]


def index_table(found) -> list:
    """One row per record: entry, machine, commit and date, E*."""
    rows = []
    for entry, records in found:
        for name, record in records:
            machine = machine_text(record["machine"]) if record.get("machine") else ""
            rows.append(
                [
                    f"[{entry.name}/{name}]({rec.record_link('', entry, name)})",
                    machine,
                    _made(record),
                    _yardstick(entry),
                ]
            )
    return table_lines(["record", "machine", "made at (commit, date)", "measured against"], rows)


# -- one section per entry -------------------------------------------------------------------------------------------
def _record_caption(entry, record) -> str:
    if entry.kind == "energy":
        return rec.energy_caption(record)
    machine = machine_text(record["machine"]) if record.get("machine") else "machine not recorded"
    seeds = len(record.get("seeds") or {run.get("seed") for run in record.get("runs", ())}) or 1
    return f"{machine}; {seeds} seed{'s' if seeds > 1 else ''}."


def entry_section(entry, records) -> list:
    """An entry's heading, what it measures, and each record's caption and table."""
    lines = [f"## {entry.title}", "", entry.summary, ""]
    for name, record in records:
        if len(records) > 1:
            lines += [f"### {name}", ""]
        lines += [f"{_record_caption(entry, record)} Full report: [{name}]({rec.record_link('', entry, name)}).", ""]
        lines += rec.TABLES[entry.kind](record) + [""]
    return lines


# -- the papers' claims ----------------------------------------------------------------------------------------------
def _records_of(found, name) -> list:
    return next((records for entry, records in found if entry.name == name), [])


def _links(found, *entry_names) -> str:
    """Links to the records of the named entries."""
    return ", ".join(
        f"[{entry.name}/{name}]({rec.record_link('', entry, name)})"
        for entry, records in found
        if entry.name in entry_names
        for name, _ in records
    )


def _pretty(name) -> str:
    return {"mnist": "MNIST", "kdd": "KDD", "descriptors": "descriptors", "pendigits": "PenDigits"}.get(
        name.split("-")[0], name
    )


def vrkm_claim(found) -> list | None:
    """VRKM++ to within the record's ``--versus-within`` of KMeans' and of Lloyd's final energy."""
    records = _records_of(found, "vrkm") + _records_of(found, "vrkm-descriptors")
    if not records:
        return None
    parts = {}
    for reference in ("kmeans", "kmeans-lloyd"):
        texts = []
        for name, record in records:
            within = next((v.get("within", 0.0) for v in record.get("versus", []) if v["name"] == reference), 0.0)
            ratios = rec.symmetric_speedups(record, "vrkm++", reference, within)
            texts.append(f"{_pretty(name)} {rec.ratio_list(ratios)}")
        parts[reference] = (within, "; ".join(texts))
    within = parts["kmeans"][0]
    return [
        "Zhao et al., VRKM / VRKM++",
        "about 2x (VRKM) and 4x (VRKM++) sooner than batch k-means to the loss batch k-means ends with",
        (
            f"time to within {within:.1%} of `KMeans`' final energy, `KMeans`' time over VRKM++'s, seed by seed: "
            f"{parts['kmeans'][1]}. Against Lloyd without bounds (`kmeans-lloyd`, the paper's batch k-means): "
            f"{parts['kmeans-lloyd'][1]}"
        ),
        _links(found, "vrkm", "vrkm-descriptors"),
    ]


def _seed_ratio(record, numerator, denominator, target) -> float | None:
    """The median over seeds of ``numerator``'s time to ``target`` over ``denominator``'s (seeds where both got
    there)."""
    times = {(e["name"], e["seed"]): (e.get("time_to") or {}).get(str(target)) for e in record["summary"]["runs"]}
    ratios = [
        times[(numerator, s)] / times[(denominator, s)]
        for s in record["seeds"]
        if times.get((numerator, s)) and times.get((denominator, s))
    ]
    return statistics.median(ratios) if ratios else None


def nmbatch_claim(found) -> list | None:
    """nmbatch against mini-batch k-means to 2% of E*."""
    texts = []
    entry_names = ("descriptors-threaded", "nmbatch-descriptors", "nmbatch-mnist")
    for entry_name in entry_names:
        for name, record in _records_of(found, entry_name):
            seeds = len(record["seeds"])
            for other in ("sklearn-minibatch", "minibatch"):
                ratio = _seed_ratio(record, other, "nmbatch", 0.02)
                if other in record["summary"]["algorithms"] and ratio is not None:
                    label = record["summary"]["algorithms"][other]["label"]
                    texts.append(
                        f"{_pretty(name)}, {label}: {ratio:.2f}x"
                        + (f", median of {seeds} seeds" if seeds > 1 else "")
                        + f" ({entry_name})"
                    )
    if not texts:
        return None
    return [
        "Newling & Fleuret, nested mini-batch k-means",
        "within 2% of E* 10x to 100x sooner than mini-batch k-means (three dense datasets)",
        "time to 2% of E*, mini-batch's over nmbatch's: "
        + "; ".join(texts)
        + (
            ". The nmbatch-* records use the older yardstick and nmbatch's former rho = 1"
            if _records_of(found, "nmbatch-descriptors") or _records_of(found, "nmbatch-mnist")
            else ""
        ),
        _links(found, *entry_names),
    ]


#: The suite's entries of the vc-GMM study.
VC_GMM_ENTRIES = ("vc-gmm-descriptors", "vc-gmm-mnist", "vc-gmm-kdd")


def _size_text(runs) -> str:
    """One coreset size's mean relative error at its mean speedup (over the seeds), as the claim line says it."""
    error, speedup = coreset_tradeoff.size_means(runs)
    seeds = f", over {len(runs)} seeds" if len(runs) > 1 else ""
    return f"{100 * error:.1f}% at {speedup:.1f}x" + (" (default" + seeds + ")" if runs[0].get("default") else "")


def vc_gmm_claim(found) -> list | None:
    """vc-GMM's relative error at its speedup over k-means++, per coreset size (means over the seeds)."""
    texts = []
    for entry_name in VC_GMM_ENTRIES:
        for name, record in _records_of(found, entry_name):
            by_size = coreset_tradeoff.vc_gmm_by_size(record)
            if by_size:
                texts.append(
                    f"{_pretty(name)} (k = {record['workload']['k']}): "
                    + ", ".join(_size_text(runs) for runs in by_size.values())
                )
    if not texts:
        return None
    return [
        "Hirschberger, Forster & Lücke, vc-GMM",
        ("relative quantization error of 7% to 11% at 33x to 1300x the speed of k-means++ (KDD: 10.8% at 91.5x)"),
        "relative error at the speedup over scikit-learn's k-means++ on all rows, by coreset size: " + "; ".join(texts),
        _links(found, *VC_GMM_ENTRIES),
    ]


def kernel_claim(found) -> list | None:
    """Truncated mini-batch kernel k-means' speed-up over the full batch, and its ARI beside the full batch's."""
    texts = []
    for entry_name, algorithm in (("kernel", "kernel-minibatch"), ("kernel-paper-settings", "kernel-minibatch-paper")):
        for name, record in _records_of(found, entry_name):
            summary = record["summary"]
            ours, full = summary.get(algorithm), summary.get("kernel-kmeans")
            if not ours or not ours["speedup"] or not full or not full["ari"]:
                continue
            setting = "at the defaults" if algorithm == "kernel-minibatch" else "at the paper's b = 1024, tau = 200"
            texts.append(
                f"{_pretty(name)} ({record['workload']['n_samples']:,} rows) {setting}: "
                f"{ours['speedup']['median']:.2f}x ({ours['speedup']['min']:.2f}x to "
                f"{ours['speedup']['max']:.2f}x), ARI {ours['ari']['median']:.3f} against the full "
                f"batch's {full['ari']['median']:.3f}"
            )
    if not texts:
        return None
    return [
        "Jourdan & Schwartzman, truncated mini-batch kernel k-means",
        "10x to 100x faster than full-batch kernel k-means at similar quality",
        "speed-up over the full batch, seed by seed in the same run (median, range over 3 seeds): " + "; ".join(texts),
        _links(found, "kernel", "kernel-paper-settings"),
    ]


CLAIMS = (vrkm_claim, nmbatch_claim, vc_gmm_claim, kernel_claim)


def claims_table(found) -> list:
    """One row per paper whose record is present: its claim, our figure, where."""
    rows = [row for row in (claim(found) for claim in CLAIMS) if row is not None]
    if not rows:
        return ["No record of a paper's claim is present."]
    return table_lines(["paper", "its claim", "our figure", "record"], rows)


# -- the page --------------------------------------------------------------------------------------------------------
def render_page(root, quick=False, out=None) -> str:
    """The benchmarks page for the records under ``root``.

    Parameters
    ----------
    root : str
        The suite's output folder, where the records are read.
    quick : bool
        Read the quick variants' records (``daskmeans bench suite --quick``).
    out : str, optional
        The folder the page's commands name (default ``root``).
    """
    found = rec.all_records(root, quick)
    lines = [
        "# Benchmarks",
        "",
        INTRO,
        "",
        "## How the figures are obtained",
        "",
        METHOD,
        "",
        "## Regenerate them",
        "",
        regenerate_text(out or root),
        "",
        "## The records",
        "",
    ]
    lines += index_table(found) if found else ["No record is present."]
    lines += ["", "## The papers' claims against our figures", ""] + claims_table(found) + [""]
    for entry, records in found:
        lines += entry_section(entry, records)
    documents = [f"{entry.name}/{name}" for entry, records in found for name, _ in records]
    if documents:
        lines += ["```{toctree}", ":hidden:", "", *documents, "```", ""]
    return "\n".join(lines)


def write_page(root, quick=False) -> str:
    """Write ``ROOT/index.md`` from the records under ``root``; return its path."""
    path = os.path.join(root, PAGE_NAME)
    write_text(path, render_page(root, quick))
    return path
