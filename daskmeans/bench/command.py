"""The ``daskmeans bench`` command (a click command; the main CLI adds it with ``main.add_command(bench)``)."""

from __future__ import annotations

import shlex

import click

from ..cli.common import USER_ERRORS, cluster_options
from .reference import DEFAULT_CACHE_NAME, REFERENCE_MAX_ITER, REFERENCES
from .runner import BenchOptions, run_benchmark
from .workloads import STORAGES


def _names(text):
    return None if text is None else tuple(part.strip() for part in text.split(",") if part.strip())


def _sizes(text):
    if text is None:
        return None
    try:
        return tuple(int(float(part)) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise click.BadParameter(f"write row counts separated by commas, e.g. 250000,1e6; got {text!r}") from error


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
@click.option("--out", "out_dir", default="bench-results", show_default=True, type=click.Path(file_okay=False),
              help="Folder for NAME.json, NAME.md and NAME.png of each workload.")
@click.option("--algorithms", help="daskmeans algorithms to run, comma-separated (default: every registered k-means "
                                   "algorithm; kernel k-means with --quality; 'none').")
@click.option("--peers", help="Peers to run, comma-separated: sklearn-lloyd, sklearn-elkan, sklearn-minibatch, "
                              "sklearn-intelex, faiss (its default subsample), faiss-all (every row), "
                              "faiss-two-level (faiss's large-k clustering), dask-ml (default: the workload's; "
                              "'none').")
@click.option("--data", "data_path", type=click.Path(), help="Your data: a .npy/.npz file or a Zarr store (needs -k).")
@click.option("-k", "--n-clusters", "k", type=int, help="Number of clusters (with --data; overrides the workloads' k).")
@click.option("--seeds", default=1, show_default=True, type=int,
              help="Seeds 0..N-1; each draws its own initial centers, shared by every algorithm.")
@click.option("--time-budget", type=float, help="Seconds each run may take (default: the workload's).")
@click.option("--data-dir", type=click.Path(file_okay=False),
              help="Folder holding the built-in datasets (cifar_dsift.npz, mnist.npz, pendigits.npz, kddcup04_bio.npz); "
                   "default ./data.")
@click.option("--work-dir", type=click.Path(file_okay=False), help="Where Zarr stores are written (default OUT/data).")
@click.option("--n-samples", type=int, help="Rows: size of synthetic data, or a subsample of a dataset.")
@click.option("--n-features", type=int, help="Columns of synthetic data (synthetic, out-of-core, sizing).")
@click.option("--storage", type=click.Choice(STORAGES),
              help="memory: data persisted on the workers; zarr: read from a Zarr store at every pass.")
@click.option("--batch-size", type=int, help="Batch size of the MiniBatchKMeans peer (default 1024).")
@click.option("--sizes", help="Row counts of the sizing workload, comma-separated (e.g. 250000,1e6,2e6).")
@click.option("--max-points", default=10, show_default=True, type=int,
              help="Energies evaluated per run before refinement around the 1% and 2% targets.")
@click.option("--refine/--no-refine", default=True, show_default=True,
              help="Resolve the times to 1% and 2% of E* by bisection (ladder peers run extra rungs).")
@click.option("--reference", type=click.Choice(REFERENCES), default="lloyd", show_default=True,
              help="E*: 'lloyd' is the converged Lloyd energy from each seed's initial centers (daskmeans KMeans, tol=0, "
                   f"at most {REFERENCE_MAX_ITER} iterations; cached), or the lowest energy any run reached if lower; "
                   "'best' is the lowest energy any run reached.")
@click.option("--reference-cache", type=click.Path(dir_okay=False),
              help=f"JSON file keeping the converged Lloyd energies between runs (default OUT/{DEFAULT_CACHE_NAME}).")
@click.option("--param", "params", multiple=True, metavar="ALGORITHM:NAME=VALUE",
              help="A parameter of a daskmeans algorithm's estimator, e.g. --param kmeans:tol=0 (repeatable; the "
                   "bench sets n_clusters, init, max_time and random_state itself).")
@click.option("--versus", help="Runs every run is also timed against, comma-separated: NAME (its final energy) or "
                               "NAME@ITERATION (its energy after that many iterations, e.g. faiss-all@25 for faiss's "
                               "default); the table gets a column 'time to NAME's energy (speedup)' for each.")
@click.option("--versus-within", type=float, default=0.0, show_default=True, metavar="REL",
              help="Count a run as having reached a --versus energy once within this relative distance of it "
                   "(e.g. 1e-4: 0.01%).")
@click.option("--driver-memory", help="Memory the driver may use for the data (default half of what is free).")
@click.option("--overwrite", is_flag=True, help="Replace the outputs of an earlier run in --out.")
@click.option("--quality", is_flag=True,
              help="Score clusterings against the true labels (ARI, NMI) and time them, for labelled workloads "
                   "(pendigits, mnist): kernel k-means (truncated at the defaults and at the paper's settings, "
                   "'kernel-minibatch-paper'; untruncated; full batch) and linear k-means by default, each "
                   "mini-batch run also stopped after 1/6, 1/3 and 2/3 of its steps. Writes OUT/NAME-quality.json "
                   "and .md.")
@cluster_options
def bench(workloads, quick, out_dir, algorithms, peers, data_path, k, seeds, time_budget, data_dir, work_dir,
          n_samples, n_features, storage, batch_size, sizes, max_points, refine, reference, reference_cache,
          params, versus, versus_within, driver_memory, overwrite, quality, cluster):
    """Benchmark the daskmeans algorithms against scikit-learn, scikit-learn-intelex, faiss and dask-ml.

    WORKLOAD is any of: descriptors (cifar_dsift, k=1000), mnist (k=50), pendigits (k=10), kdd (k=200),
    out-of-core (synthetic descriptors in Zarr), synthetic (blobs), sizing (pass time against n, extrapolated to
    1e9 rows). With --quality, the labelled ones (pendigits, mnist) are scored by ARI and NMI instead.
    All runs of a workload start from the same initial centers; energies are exact on all rows and evaluated
    outside the timed region. E* is the converged Lloyd energy (unless a run goes lower; see --reference). Writes OUT/NAME.json (everything), OUT/NAME.md (table) and OUT/NAME.png.

    \b
    Examples:
      daskmeans bench synthetic --quick
      daskmeans bench descriptors --data-dir ../shared/data --peers sklearn-lloyd,faiss
      daskmeans bench --data my.zarr -k 500 --time-budget 120
      daskmeans bench pendigits --quality --data-dir ../shared/data --seeds 10
    """
    options = BenchOptions(
        workloads=tuple(workloads), quick=quick, out_dir=out_dir, algorithms=_names(algorithms), peers=_names(peers),
        data_path=data_path, k=k, seeds=seeds, time_budget=time_budget, data_dir=data_dir, work_dir=work_dir,
        cluster=cluster, n_samples=n_samples, n_features=n_features, storage=storage, batch_size=batch_size, sizes=_sizes(sizes),
        max_points=max_points, refine=refine, reference=reference, reference_cache=reference_cache,
        params=tuple(params), versus=_names(versus), versus_within=versus_within, driver_memory=driver_memory, overwrite=overwrite, quality=quality,
        command_line=_command_line(click.get_current_context()),
    )
    written = run_benchmark(options, echo=click.echo)
    click.echo("wrote " + ", ".join(written))


def _command_line(ctx) -> str:
    """The command as a shell line rebuilt from the parsed options (whatever way it was invoked)."""
    words = ["daskmeans", "bench", *ctx.params["workloads"]]
    for param in ctx.command.params:
        if param.name == "workloads" or (param.name == "scheduler" and ctx.params.get(param.name)):
            continue  # a scheduler address is this session's, not part of the recipe
        value = ctx.params.get(param.name)
        # only what was given: a default (click 8.2+ marks an unset flag's default as UNSET) is not recorded
        if value is None or ctx.get_parameter_source(param.name) in (click.core.ParameterSource.DEFAULT,
                                                                     click.core.ParameterSource.DEFAULT_MAP):
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
