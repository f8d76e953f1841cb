"""The ``daskmeans bench`` command (a click command; the main CLI adds it with ``main.add_command(bench)``)."""

from __future__ import annotations

import posixpath
import shlex

import click

from ..cli.common import USER_ERRORS, cluster_options
from ..exceptions import InvalidParameterError
from .page import write_page
from .reference import DEFAULT_CACHE_NAME, REFERENCE_MAX_ITER, REFERENCES
from .runner import BenchOptions, run_benchmark
from .suite import DEFAULT_WORK_DIR, SUITE_NAME, check_suite, chosen_entries, entry_arguments
from .workloads import STORAGES

#: Options ``daskmeans bench suite`` takes; every other one belongs to an entry's own command.
SUITE_OPTIONS = (
    "workloads",
    "quick",
    "out_dir",
    "data_dir",
    "work_dir",
    "overwrite",
    "only",
    "scheduler",
    "connect_timeout",
)
#: Options a record's command line leaves out: where the run happened and whether old outputs were replaced are
#: not part of the recipe.
NOT_RECORDED = ("workloads", "scheduler", "overwrite", "only")


def _names(text):
    return None if text is None else tuple(part.strip() for part in text.split(",") if part.strip())


def _sizes(text, option="--sizes"):
    """Whole numbers separated by commas (``250000,1e6``) as a tuple of int."""
    if text is None:
        return None
    try:
        return tuple(int(float(part)) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise click.BadParameter(
            f"{option}: write whole numbers separated by commas, e.g. 250000,1e6; got {text!r}"
        ) from error


class BenchCommand(click.Command):
    """Ends on a user's mistake with a one-line message (exit status 1), also when run on its own."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except USER_ERRORS as error:
            raise click.ClickException(" ".join(str(error).split())) from error


@click.command("bench", cls=BenchCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("workloads", nargs=-1, metavar="WORKLOAD...")
@click.option("--quick", is_flag=True, help="Small variant of each workload (each under a minute), for smoke tests.")
@click.option(
    "--out",
    "out_dir",
    default="bench-results",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder for NAME.json, NAME.md and NAME.png of each workload.",
)
@click.option(
    "--algorithms",
    help="daskmeans algorithms to run, comma-separated (default: every registered k-means "
    "algorithm; kernel k-means with --quality; 'none').",
)
@click.option(
    "--peers",
    help="Peers to run, comma-separated: sklearn-lloyd, sklearn-elkan, sklearn-minibatch, "
    "sklearn-intelex, faiss (its default subsample), faiss-all (every row), "
    "faiss-two-level (faiss's large-k clustering), superkmeans (faiss SuperKMeans, its default subsample), "
    "superkmeans-all (every row), dask-ml (default: the workload's; "
    "'none').",
)
@click.option("--data", "data_path", type=click.Path(), help="Your data: a .npy/.npz file or a Zarr store (needs -k).")
@click.option("-k", "--n-clusters", "k", type=int, help="Number of clusters (with --data; overrides the workloads' k).")
@click.option(
    "--seeds",
    default=1,
    show_default=True,
    type=int,
    help="Seeds 0..N-1; each draws its own initial centers, shared by every algorithm.",
)
@click.option("--time-budget", type=float, help="Seconds each run may take (default: the workload's).")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    help="Folder holding the built-in datasets (cifar_dsift.npz, mnist.npz, pendigits.npz, "
    "kddcup04_bio.npz); default ./data.",
)
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False),
    help=f"Where Zarr stores are written (default OUT/data; with 'suite', {DEFAULT_WORK_DIR}).",
)
@click.option("--n-samples", type=int, help="Rows: size of synthetic data, or a subsample of a dataset.")
@click.option("--n-features", type=int, help="Columns of synthetic data (synthetic, out-of-core, sizing).")
@click.option(
    "--storage",
    type=click.Choice(STORAGES),
    help="memory: data persisted on the workers; zarr: read from a Zarr store at every pass.",
)
@click.option("--batch-size", type=int, help="Batch size of the MiniBatchKMeans peer (default 1024).")
@click.option(
    "--sweep-n",
    help="Sweep: row counts, comma-separated (with --sweep-k); each workload runs once per (n, k) cell and writes "
    "one record NAME-sweep.",
)
@click.option("--sweep-k", help="Sweep: numbers of clusters, comma-separated (with --sweep-n).")
@click.option("--sizes", help="Row counts of the sizing workload, comma-separated (e.g. 250000,1e6,2e6).")
@click.option(
    "--max-points",
    default=10,
    show_default=True,
    type=int,
    help="Energies evaluated per run before refinement around the 1% and 2% targets.",
)
@click.option(
    "--refine/--no-refine",
    default=True,
    show_default=True,
    help="Resolve the times to 1% and 2% of E* by bisection (ladder peers run extra rungs).",
)
@click.option(
    "--reference",
    type=click.Choice(REFERENCES),
    default="lloyd",
    show_default=True,
    help="E*: 'lloyd' is the converged Lloyd energy from each seed's initial centers (daskmeans KMeans, "
    f"tol=0, at most {REFERENCE_MAX_ITER} iterations; cached), or the lowest energy any run reached "
    "if lower; 'best' is the lowest energy any run reached.",
)
@click.option(
    "--reference-cache",
    type=click.Path(dir_okay=False),
    help=f"JSON file keeping the converged Lloyd energies between runs (default OUT/{DEFAULT_CACHE_NAME}).",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="ALGORITHM:NAME=VALUE",
    help="A parameter of a daskmeans algorithm's estimator, e.g. --param kmeans:tol=0 (repeatable; the "
    "bench sets n_clusters, init, max_time and random_state itself).",
)
@click.option(
    "--versus",
    help="Runs every run is also timed against, comma-separated: NAME (its final energy) or "
    "NAME@ITERATION (its energy after that many iterations, e.g. faiss-all@25 for faiss's "
    "default); the table gets a column 'time to NAME's energy (speedup)' for each. A peer named by NAME "
    "alone that runs as a ladder of fits (scikit-learn, scikit-learn-intelex, dask-ml) runs on past the time "
    "budget to convergence (or 300 iterations), and exact k-means, where its run did not reach that energy, is "
    "fitted once more with the peer's time as its max_time.",
)
@click.option(
    "--versus-within",
    type=float,
    default=0.0,
    show_default=True,
    metavar="REL",
    help="Count a run as having reached a --versus energy once within this relative distance of it (e.g. 1e-4: 0.01%).",
)
@click.option("--driver-memory", help="Memory the driver may use for the data (default half of what is free).")
@click.option("--overwrite", is_flag=True, help="Replace the outputs of an earlier run in --out.")
@click.option(
    "--only",
    metavar="NAME[,NAME]",
    help="With 'suite': run only these entries of the suite, comma-separated (e.g. descriptors,sizing).",
)
@click.option(
    "--quality",
    is_flag=True,
    help="Score clusterings against the true labels (ARI, NMI) and time them, for labelled workloads "
    "(pendigits, mnist): kernel k-means (truncated at the defaults and at the paper's settings, "
    "'kernel-minibatch-paper'; untruncated; full batch) and linear k-means by default, each "
    "mini-batch run also stopped after 1/6, 1/3 and 2/3 of its steps. Writes OUT/NAME-quality.json "
    "and .md.",
)
@cluster_options
def bench(
    workloads,
    quick,
    out_dir,
    algorithms,
    peers,
    data_path,
    k,
    seeds,
    time_budget,
    data_dir,
    work_dir,
    n_samples,
    n_features,
    storage,
    batch_size,
    sweep_n,
    sweep_k,
    sizes,
    max_points,
    refine,
    reference,
    reference_cache,
    params,
    versus,
    versus_within,
    driver_memory,
    overwrite,
    only,
    quality,
    cluster,
):
    """Benchmark the daskmeans algorithms against scikit-learn, scikit-learn-intelex, faiss and dask-ml.

    WORKLOAD is any of: descriptors (cifar_dsift, k=1000), mnist (k=50), pendigits (k=10), kdd (k=200),
    out-of-core (synthetic descriptors in Zarr), descriptors-at-scale (resampled descriptors in Zarr), synthetic
    (blobs), sizing (pass time against n, extrapolated to 1e9 rows). With --quality, the labelled ones (pendigits,
    mnist) are scored by ARI and NMI instead.
    All runs of a workload start from the same initial centers; energies are exact on all rows and evaluated
    outside the timed region. E* is the converged Lloyd energy (unless a run goes lower; see --reference).
    Writes OUT/NAME.json (everything), OUT/NAME.md (table) and OUT/NAME.png.

    'daskmeans bench suite' runs every published record instead, each into OUT/NAME with the command its record
    prints, and writes the benchmarks page OUT/index.md; it takes --out, --data-dir, --work-dir, --quick (every
    entry at tiny sizes), --only, --overwrite and --scheduler.

    \b
    Examples:
      daskmeans bench synthetic --quick
      daskmeans bench descriptors --data-dir ../shared/data --peers sklearn-lloyd,faiss
      daskmeans bench --data my.zarr -k 500 --time-budget 120
      daskmeans bench pendigits --quality --data-dir ../shared/data --seeds 10
      daskmeans bench suite --data-dir ../shared/data --out docs/benchmarks
    """
    ctx = click.get_current_context()
    if SUITE_NAME in workloads:
        return _suite_from_command_line(ctx, cluster)
    if only is not None:
        raise InvalidParameterError("--only picks entries of the suite: 'daskmeans bench suite --only NAME'.")
    options = BenchOptions(
        workloads=tuple(workloads),
        quick=quick,
        out_dir=out_dir,
        algorithms=_names(algorithms),
        peers=_names(peers),
        data_path=data_path,
        k=k,
        seeds=seeds,
        time_budget=time_budget,
        data_dir=data_dir,
        work_dir=work_dir,
        cluster=cluster,
        n_samples=n_samples,
        n_features=n_features,
        storage=storage,
        batch_size=batch_size,
        sizes=_sizes(sizes),
        sweep_n=_sizes(sweep_n, "--sweep-n"),
        sweep_k=_sizes(sweep_k, "--sweep-k"),
        max_points=max_points,
        refine=refine,
        reference=reference,
        reference_cache=reference_cache,
        params=tuple(params),
        versus=_names(versus),
        versus_within=versus_within,
        driver_memory=driver_memory,
        overwrite=overwrite,
        quality=quality,
        command_line=recorded_command_line(ctx),
    )
    written = run_benchmark(options, echo=click.echo)
    click.echo("wrote " + ", ".join(written))
    return written


def recorded_command_line(ctx) -> str:
    """The command as a shell line rebuilt from the parsed options (whatever way it was invoked), as a record
    prints it: only the options given, without :data:`NOT_RECORDED`."""
    words = ["daskmeans", "bench", *ctx.params["workloads"]]
    for param in ctx.command.params:
        if param.name in NOT_RECORDED:
            continue
        value = ctx.params.get(param.name)
        # only what was given: a default (click 8.2+ marks an unset flag's default as UNSET) is not recorded
        if value is None or ctx.get_parameter_source(param.name) in (
            click.core.ParameterSource.DEFAULT,
            click.core.ParameterSource.DEFAULT_MAP,
        ):
            continue
        if param.name == "refine":
            words.append("--no-refine")
        elif param.is_flag:
            words.append(param.opts[-1])
        elif param.multiple:
            for item in value:
                words += [param.opts[-1], str(item)]
        else:
            words += [param.opts[-1], str(value)]
    return shlex.join(words)


# -- the suite --------------------------------------------------------------------------------------------------------
def suite_command(
    entry, out="docs/benchmarks", *, data_dir="../shared/data", work_dir=DEFAULT_WORK_DIR, quick=False
) -> str:
    """The command line the records of a suite entry print (:func:`recorded_command_line` of its arguments)."""
    args = entry_arguments(entry, out, quick=quick, data_dir=data_dir, work_dir=work_dir)
    with bench.make_context("bench", args) as ctx:
        return recorded_command_line(ctx)


def _suite_from_command_line(ctx, cluster) -> list:
    """``daskmeans bench suite ...``: check that only the suite's options were given, then run it."""
    if ctx.params["workloads"] != (SUITE_NAME,):
        raise InvalidParameterError(f"'{SUITE_NAME}' runs every entry of the suite; name no workload beside it.")
    given = [
        param
        for param in ctx.command.params
        if param.name not in SUITE_OPTIONS
        and ctx.get_parameter_source(param.name)
        not in (click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)
    ]
    if given:
        raise InvalidParameterError(
            f"{given[0].opts[-1]} does not apply to 'daskmeans bench {SUITE_NAME}': each entry sets its own "
            "options; the suite takes --out, --data-dir, --work-dir, --quick, --only, --overwrite and --scheduler."
        )
    written = run_suite(
        ctx.params["out_dir"],
        quick=ctx.params["quick"],
        only=ctx.params["only"],
        data_dir=ctx.params["data_dir"],
        work_dir=ctx.params["work_dir"] or DEFAULT_WORK_DIR,
        scheduler=cluster.scheduler,
        overwrite=ctx.params["overwrite"],
        echo=click.echo,
    )
    click.echo("wrote " + ", ".join(written))
    return written


def run_suite(
    out,
    *,
    quick=False,
    only=None,
    data_dir=None,
    work_dir=DEFAULT_WORK_DIR,
    scheduler=None,
    overwrite=False,
    echo=print,
) -> list:
    """Run the chosen entries of the suite, each into ``OUT/NAME``, then write the benchmarks page
    ``OUT/index.md`` from every record present.

    An entry that fails is reported at the end; the others still run.

    Returns
    -------
    list of str
        The paths written.

    Raises
    ------
    InvalidParameterError
        An unknown entry, or (after the others ran) the entries that failed.
    FileNotFoundError, OutputExistsError
        Before anything runs: a dataset an entry needs is missing, or a record would be replaced without
        ``--overwrite``.
    """
    out = posixpath.normpath(out)
    entries = chosen_entries(only)
    check_suite(entries, out, data_dir=data_dir, overwrite=overwrite, quick=quick)
    written, failed = [], []
    for entry in entries:
        args = entry_arguments(
            entry, out, quick=quick, data_dir=data_dir, work_dir=work_dir, scheduler=scheduler, overwrite=overwrite
        )
        echo(f"suite entry {entry.name}: daskmeans bench {shlex.join(args)}")
        try:
            with bench.make_context("bench", args) as entry_ctx:
                written += bench.invoke(entry_ctx) or []
        except Exception as error:  # noqa: BLE001 - one entry's failure must not lose the others' records
            failed.append(f"{entry.name} ({' '.join(str(error).split())})")
            echo(f"suite entry {entry.name} failed: {type(error).__name__}: {error}")
    written.append(write_page(out, quick=quick))
    if failed:
        raise InvalidParameterError("These suite entries failed, their records not written: " + "; ".join(failed))
    return written
