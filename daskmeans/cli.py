"""The ``daskmeans`` command line: make-data, fit, predict, info, demo (and bench where installed).

Also reachable as ``python -m daskmeans`` and ``dask daskmeans``. Every mistake a user can make (a missing
input, a bad k, an existing output, a scheduler that does not answer, a file that is not a model) ends the
command with exit status 1 and one line that says what is wrong, before any expensive work where possible.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import time

import click
import numpy as np
import zarr
from dask.utils import format_bytes

from . import __version__
from .datasets import make_blobs_zarr
from .demo import check_demo_outputs, run_demo
from .engine.client import ClusterSpec
from .exceptions import DaskmeansError, InputDataError, InvalidParameterError
from .registry import ALGORITHMS, algorithm_names, make_estimator
from .storage.io import open_input, write_labels
from .storage.model import FORMAT, load
from .storage.zarr_safe import prepare_output

#: Errors a user causes; they end the command with a one-line message instead of a traceback.
USER_ERRORS = (DaskmeansError, FileNotFoundError, FileExistsError, PermissionError, NotADirectoryError,
               IsADirectoryError)

#: Commands that live in optional modules: name -> (module, attribute). Imported only when used.
LAZY_COMMANDS = {"bench": ("daskmeans.bench.command", "bench")}


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _module_exists(module: str) -> bool:
    """Whether ``module`` can be imported; only a missing ``module`` (or parent package) counts as absent."""
    parts = module.split(".")
    missing_names = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError as error:
        if error.name in missing_names:
            return False
        raise


class DaskmeansGroup(click.Group):
    """A click group that loads optional commands on demand and turns user errors into one-line messages."""

    def list_commands(self, ctx):
        names = set(super().list_commands(ctx))
        names.update(name for name, (module, _) in LAZY_COMMANDS.items() if _module_exists(module))
        return sorted(names)

    def get_command(self, ctx, name):
        command = super().get_command(ctx, name)
        if command is None and name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[name]
            if _module_exists(module):
                command = getattr(importlib.import_module(module), attribute)
        return command

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except USER_ERRORS as error:
            raise click.ClickException(_one_line(error)) from error


@click.group(name="daskmeans", cls=DaskmeansGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="daskmeans")
def main():
    """Cluster data too large for one machine: chunked Zarr arrays on a Dask cluster.

    \b
    Start with `daskmeans demo`, or:
      daskmeans make-data blobs.zarr --samples 1000000 --features 64 --clusters 50
      daskmeans fit blobs.zarr --array X -k 50 --out model.zarr --labels blobs.zarr/labels
      daskmeans predict model.zarr blobs.zarr --array X --labels blobs.zarr/labels --overwrite
      daskmeans info model.zarr
    """


# -- the Dask cluster the commands run on ------------------------------------------------------------------


def cluster_options(command):
    """Add ``--scheduler``, ``--connect-timeout``, ``--workers``, ``--threads-per-worker``, ``--memory-limit``;
    the command receives them checked, as ``cluster=ClusterSpec(...)``."""

    @functools.wraps(command)
    def wrapper(*args, scheduler, connect_timeout, workers, threads_per_worker, memory_limit, **kwargs):
        spec = ClusterSpec(scheduler, connect_timeout, workers, threads_per_worker, memory_limit)
        return command(*args, cluster=spec.validate(), **kwargs)

    options = [
        click.option("--scheduler", envvar="DASK_SCHEDULER_ADDRESS", metavar="ADDRESS",
                     help="Run on this Dask scheduler (tcp://host:port; default $DASK_SCHEDULER_ADDRESS). "
                          "Without it, a local cluster of worker processes is started for the command."),
        click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=10.0,
                     show_default=True, help="Seconds to wait for --scheduler before giving up."),
        click.option("--workers", type=click.IntRange(min=1), help="Worker processes of the local cluster."),
        click.option("--threads-per-worker", type=click.IntRange(min=1), help="Threads per local worker."),
        click.option("--memory-limit", metavar="SIZE",
                     help="Memory limit per local worker: 4GiB, 0.5 (of the machine), or auto (default)."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


# -- helpers ---------------------------------------------------------------------------------------------------


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _open_data(path: str, array: str | None):
    """Open an input (metadata only), with a clear message for a plain file that is not a data file."""
    if _is_local(path):
        local = path[len("file://"):] if path.startswith("file://") else path
        if os.path.isfile(local) and not local.lower().endswith((".npy", ".npz")):
            raise InputDataError(
                f"{path!r} is a file, not a Zarr store; daskmeans reads Zarr stores (directories), .npy and "
                ".npz files."
            )
    return open_input(path, array=array)


def _same_path(a: str, b: str) -> bool:
    if not (_is_local(a) and _is_local(b)):
        return a.rstrip("/") == b.rstrip("/")
    return os.path.abspath(a) == os.path.abspath(b)


def _check_outputs(outputs: dict, overwrite: bool, inputs: list):
    """Check every output of a command before any work: may be written, distinct, and not an input."""
    given = {option: path for option, path in outputs.items() if path is not None}
    options = list(given)
    for i, first in enumerate(options):
        for second in options[i + 1:]:
            if _same_path(given[first], given[second]):
                raise InvalidParameterError(f"{first} and {second} name the same path {given[first]!r}; "
                                            "give them different paths.")
    for option, path in given.items():
        for source in inputs:
            if source is not None and _same_path(path, source):
                raise InvalidParameterError(f"{option} {path!r} is the input itself; write it somewhere else.")
        prepare_output(path, overwrite)


def _emit(summary: dict, as_json: bool, lines: list[str]):
    if as_json:
        click.echo(json.dumps(summary, default=_json_default))
    else:
        click.echo("\n".join(lines))


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _shape_text(dataset) -> str:
    return f"{dataset.n_samples:,} x {dataset.n_features} {dataset.source_dtype}"


def _where(dataset, path: str) -> str:
    return dataset.location or path


# -- make-data ----------------------------------------------------------------------------------------------------


@main.command("make-data", short_help="Write synthetic Gaussian blobs to a Zarr store.")
@click.argument("out", type=click.Path(dir_okay=True, file_okay=False))
@click.option("--samples", "n_samples", type=click.IntRange(min=1), required=True, help="Rows to write.")
@click.option("--features", "n_features", type=click.IntRange(min=1), required=True, help="Columns.")
@click.option("--clusters", "n_clusters", type=click.IntRange(min=1), required=True, help="Gaussian blobs.")
@click.option("--chunk-rows", type=click.IntRange(min=1), help="Rows per Zarr chunk (default: about 8 MiB).")
@click.option("--dtype", type=click.Choice(["float32", "float64", "uint8"]), default="float32", show_default=True,
              help="uint8 gives SIFT-like descriptors (0..255).")
@click.option("--cluster-std", type=click.FloatRange(min=0), help="Noise around each center (1.0; 12 for uint8).")
@click.option("--seed", type=click.IntRange(min=0), help="Random seed (default: fresh; stored in the output).")
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def make_data(out, n_samples, n_features, n_clusters, chunk_rows, dtype, cluster_std, seed, overwrite, as_json):
    """Write Gaussian blobs to the Zarr group OUT: data X, true labels y, true centers.

    The data is generated and written one chunk at a time by local threads, so any size fits in memory;
    the values depend on --seed only, not on --chunk-rows.
    """
    start = time.perf_counter()
    make_blobs_zarr(out, n_samples, n_features, n_clusters, chunk_rows=chunk_rows, dtype=dtype,
                    cluster_std=cluster_std, random_state=seed, overwrite=overwrite)
    seconds = time.perf_counter() - start
    group = zarr.open_group(store=out, mode="r")
    attrs = dict(group.attrs["daskmeans"])
    summary = {"command": "make-data", "out": out, "array": "X", **attrs, "chunks": list(group["X"].chunks),
               "seconds": seconds}
    _emit(summary, as_json, [
        f"Wrote {n_samples:,} x {n_features} {dtype} blobs ({n_clusters} clusters, seed {attrs['seed']}) "
        f"to {out} in {seconds:.1f} s",
        f"  arrays: X (data, chunks {tuple(group['X'].chunks)}), y (true labels), centers (true centers)",
    ])


# -- fit ------------------------------------------------------------------------------------------------------------


@main.command("fit", short_help="Cluster a data set; write the model and labels.")
@click.argument("input_path", metavar="INPUT")
@click.option("-k", "--clusters", "n_clusters", type=click.IntRange(min=1), required=True, help="Number of clusters.")
@click.option("--array", metavar="NAME", help="Array inside a Zarr group or .npz file (e.g. X).")
@click.option("--algorithm", type=click.Choice(algorithm_names()), default="kmeans", show_default=True)
@click.option("--init", metavar="METHOD", help="Seeding: k-means|| (default), k-means++, afk-mc2, random.")
@click.option("--max-iter", type=click.IntRange(min=1), help="Most iterations (default: the algorithm's).")
@click.option("--max-time", type=click.FloatRange(min=0, min_open=True), help="Wall-clock budget in seconds.")
@click.option("--seed", type=click.IntRange(min=0), help="Random seed; same seed, same result on any cluster.")
@click.option("--out", "model_path", metavar="MODEL", help="Write the fitted model (a Zarr group) here.")
@click.option("--labels", "labels_path", metavar="OUT", help="Write the label of every row (a Zarr array) here.")
@click.option("--overwrite", is_flag=True, help="Replace existing outputs.")
@click.option("--checkpoint", "checkpoint_path", metavar="DIR",
              help="Save the fit's state here after every iteration; run the same command again to resume.")
@cluster_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def fit(input_path, n_clusters, array, algorithm, init, max_iter, max_time, seed, model_path, labels_path,
        overwrite, checkpoint_path, cluster, quiet, as_json):
    """Cluster INPUT (a Zarr store, .npy or .npz file) into k clusters.

    Outputs are checked before any work: an existing --out or --labels is an error unless --overwrite.
    With --checkpoint DIR the state is saved after every iteration; if the command dies, the same command
    resumes from DIR and gives the same result as an uninterrupted run (a DIR of another fit is refused).
    """
    dataset = _open_data(input_path, array)
    if n_clusters > dataset.n_samples:
        raise InvalidParameterError(
            f"-k {n_clusters} is more than the {dataset.n_samples:,} rows of {input_path!r}; choose k <= n."
        )
    estimator = make_estimator(algorithm, n_clusters=n_clusters, random_state=seed, progress=not quiet)
    options = {"init": init, "max_iter": max_iter, "max_time": max_time}
    accepted = estimator.get_params()
    for name, value in options.items():
        if value is not None and name not in accepted:
            raise InvalidParameterError(f"--{name.replace('_', '-')} does not apply to --algorithm {algorithm}.")
    estimator.set_params(**{name: value for name, value in options.items() if value is not None})
    estimator._validate_params()
    _check_outputs({"--out": model_path, "--labels": labels_path}, overwrite,
                   [input_path, dataset.location])
    if checkpoint_path is not None:
        from .storage.checkpoint import open_checkpoint

        for option, other in {"INPUT": input_path, "--out": model_path, "--labels": labels_path}.items():
            if other is not None and _same_path(checkpoint_path, other):
                raise InvalidParameterError(f"--checkpoint {checkpoint_path!r} is {option} too; give the "
                                            "checkpoint a directory of its own.")
        open_checkpoint(checkpoint_path, estimator, dataset, None)  # a damaged or foreign one is refused now

    with cluster.client(announce=not quiet) as client:
        estimator.set_params(client=client)
        start = time.perf_counter()
        estimator.fit(dataset, checkpoint=checkpoint_path)
        fit_seconds = time.perf_counter() - start
        if labels_path is not None:
            write_labels(estimator.labels_, labels_path, overwrite=overwrite, client=client)
        if model_path is not None:
            estimator.save(model_path, overwrite=overwrite)
        workers = len(client.nthreads())

    inertia = float(estimator.inertia_)
    summary = {
        "command": "fit",
        "input": _where(dataset, input_path),
        "algorithm": algorithm,
        "n_samples": dataset.n_samples,
        "n_features": dataset.n_features,
        "n_clusters": n_clusters,
        "random_state": seed,
        "inertia": inertia,
        "energy": inertia / dataset.n_samples,
        "n_iter": int(estimator.n_iter_),
        "stop_reason": estimator.stop_reason_,
        "fit_seconds": fit_seconds,
        "workers": workers,
        "model": model_path,
        "labels": labels_path,
        "checkpoint": checkpoint_path,
    }
    lines = [
        f"{algorithm}: k={n_clusters} on {summary['input']} ({_shape_text(dataset)}), {workers} Dask workers",
        f"  energy       {summary['energy']:.6g}  (mean squared distance to the nearest center)",
        f"  inertia      {inertia:.6g}",
        f"  iterations   {summary['n_iter']}  (stopped: {summary['stop_reason']})",
        f"  time         {fit_seconds:.2f} s",
    ]
    if model_path is not None:
        lines.append(f"  model        {model_path}")
    if labels_path is not None:
        lines.append(f"  labels       {labels_path}")
    if checkpoint_path is not None:
        lines.append(f"  checkpoint   {checkpoint_path}")
    _emit(summary, as_json, lines)


# -- predict --------------------------------------------------------------------------------------------------------


@main.command("predict", short_help="Label a data set with a saved model.")
@click.argument("model_path", metavar="MODEL")
@click.argument("input_path", metavar="INPUT")
@click.option("--labels", "labels_path", metavar="OUT", required=True, help="Write the labels (a Zarr array) here.")
@click.option("--array", metavar="NAME", help="Array inside a Zarr group or .npz file (e.g. X).")
@click.option("--overwrite", is_flag=True, help="Replace an existing OUT.")
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def predict(model_path, input_path, labels_path, array, overwrite, cluster, as_json):
    """Label every row of INPUT with the nearest center of MODEL and write the labels to OUT."""
    model = load(model_path)
    dataset = _open_data(input_path, array)
    if dataset.n_features != model.n_features_in_:
        raise InputDataError(
            f"{input_path!r} has {dataset.n_features} features but the model {model_path!r} was fitted on "
            f"{model.n_features_in_}; use the same kind of data (or --array to pick another array)."
        )
    _check_outputs({"--labels": labels_path}, overwrite, [input_path, dataset.location, model_path])

    with cluster.client() as client:
        start = time.perf_counter()
        write_labels(model.predict(dataset), labels_path, overwrite=overwrite, client=client)
        seconds = time.perf_counter() - start

    summary = {"command": "predict", "model": model_path, "input": _where(dataset, input_path),
               "labels": labels_path, "n_samples": dataset.n_samples, "n_clusters": int(model.n_clusters),
               "seconds": seconds}
    _emit(summary, as_json, [
        f"Labelled {dataset.n_samples:,} rows of {summary['input']} with {model.n_clusters} clusters of "
        f"{model_path} in {seconds:.2f} s -> {labels_path}"
    ])


# -- info -------------------------------------------------------------------------------------------------------------


def _model_info(path: str, attrs: dict) -> dict:
    model = load(path)
    algorithm = next((name for name, (_, cls_name, _) in ALGORITHMS.items() if cls_name == type(model).__name__),
                     None)
    history = attrs.get("history") or []
    return {
        "kind": "model",
        "path": path,
        "estimator": type(model).__name__,
        "algorithm": algorithm,
        "n_clusters": int(model.cluster_centers_.shape[0]),
        "n_features": int(model.cluster_centers_.shape[1]),
        "centers_dtype": str(model.cluster_centers_.dtype),
        "inertia": getattr(model, "inertia_", None),
        "n_iter": getattr(model, "n_iter_", None),
        "stop_reason": getattr(model, "stop_reason_", None),
        "fit_seconds": history[-1].get("wall_time") if history else None,
        "params": attrs.get("params", {}),
        "daskmeans_version": attrs.get("daskmeans_version"),
        "format_version": attrs.get("format_version"),
    }


def _array_info(name: str, array) -> dict:
    shape = tuple(int(s) for s in array.shape)
    dtype = np.dtype(array.dtype)
    chunks = array.chunks
    chunks = [int(c) for c in (chunks if isinstance(chunks[0], int) else [max(c) for c in chunks])]
    return {"name": name, "shape": list(shape), "dtype": str(dtype), "chunks": chunks,
            "nbytes": int(np.prod(shape, dtype=np.int64)) * dtype.itemsize}


def _stored_bytes(path: str) -> int | None:
    if not _is_local(path) or not os.path.isdir(path):
        return None
    total = 0
    for folder, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(folder, name)) for name in files)
    return total


def _data_info(path: str, node, array: str | None) -> dict:
    if node is None or array is not None and isinstance(node, zarr.Group) and array not in node.array_keys():
        dataset = _open_data(path, array)  # .npy, .npz, or a missing array name: open_input says what is wrong
        arrays = [_array_info(array or "X", dataset.array)]
        arrays[0]["dtype"] = str(dataset.source_dtype)
    elif isinstance(node, zarr.Group):
        names = [array] if array is not None else sorted(node.array_keys())
        arrays = [_array_info(name, node[name]) for name in names]
    else:
        if array is not None:
            raise InputDataError(f"{path!r} is a Zarr array, not a group; drop --array {array}.")
        arrays = [_array_info(os.path.basename(path.rstrip("/")), node)]
    info = {"kind": "data", "path": path, "arrays": arrays, "stored_bytes": _stored_bytes(path)}
    if isinstance(node, zarr.Group) and isinstance(node.attrs.get("daskmeans"), dict):
        info["generator"] = dict(node.attrs["daskmeans"])
    return info


@main.command("info", short_help="Describe a model or a data set.")
@click.argument("path", metavar="MODEL|INPUT")
@click.option("--array", metavar="NAME", help="Describe only this array of a Zarr group.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def info(path, array, as_json):
    """Describe a model (estimator, parameters, k, d, inertia, ...) or a data set (shape, dtype, chunks, size)."""
    if _is_local(path) and not os.path.exists(path):
        raise FileNotFoundError(f"Nothing at {path!r}. Check the path.")
    node = None
    if not path.lower().rstrip("/").endswith((".npy", ".npz")):
        if _is_local(path) and os.path.isfile(path):
            raise InputDataError(f"{path!r} is a file, not a Zarr store, a model, a .npy or a .npz file.")
        try:
            node = zarr.open(store=path, mode="r")
        except (zarr.errors.NodeNotFoundError, FileNotFoundError) as error:
            raise InputDataError(f"{path!r} is neither a daskmeans model nor a Zarr store: {error}") from error
    if isinstance(node, zarr.Group) and node.attrs.get("format") == FORMAT:
        if array is not None:
            raise InvalidParameterError(f"{path!r} is a model; --array applies to data only.")
        details = _model_info(path, dict(node.attrs))
        lines = [f"{path}: daskmeans model ({details['estimator']}, format {details['format_version']}, "
                 f"written by daskmeans {details['daskmeans_version']})"]
        for key in ("algorithm", "n_clusters", "n_features", "centers_dtype", "inertia", "n_iter", "stop_reason",
                    "fit_seconds"):
            value = details[key]
            lines.append(f"  {key:<14}{value:.6g}" if isinstance(value, float) else f"  {key:<14}{value}")
        shown = {k: v for k, v in details["params"].items() if v is not None}
        lines.append("  params        " + ", ".join(f"{k}={v}" for k, v in sorted(shown.items())))
    else:
        details = _data_info(path, node, array)
        stored = details["stored_bytes"]
        lines = [f"{path}: data" + (f" ({format_bytes(stored)} on disk)" if stored is not None else "")]
        for item in details["arrays"]:
            shape = " x ".join(f"{s:,}" for s in item["shape"])
            lines.append(f"  {item['name']:<10}{shape} {item['dtype']}, chunks {tuple(item['chunks'])}, "
                         f"{format_bytes(item['nbytes'])} uncompressed")
        if "generator" in details:
            gen = details["generator"]
            lines.append(f"  made by daskmeans make-data: {gen.get('n_clusters')} blobs, seed {gen.get('seed')}, "
                         f"cluster_std {gen.get('cluster_std')}")
    _emit(details, as_json, lines)


# -- demo -------------------------------------------------------------------------------------------------------------


@main.command("demo", short_help="Make data, cluster it, plot the energy: a quick tour.")
@click.option("--out", "out_dir", default="daskmeans-demo", show_default=True, metavar="DIR",
              help="Folder for the data, labels, model and plot.")
@click.option("--samples", "n_samples", type=click.IntRange(min=1), default=200_000, show_default=True)
@click.option("--features", "n_features", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--clusters", "n_clusters", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--cluster-std", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Noise around each true center; try 4 for overlapping clusters and a longer run.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace the outputs of an earlier demo in DIR.")
@cluster_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def demo(out_dir, n_samples, n_features, n_clusters, cluster_std, seed, overwrite, cluster, quiet, as_json):
    """Make synthetic blobs in a local Zarr store, cluster them on a Dask cluster, and plot the energy."""
    if n_clusters > n_samples:
        raise InvalidParameterError(f"--clusters {n_clusters} is more than --samples {n_samples}; lower it.")
    check_demo_outputs(out_dir, overwrite)
    with cluster.client(announce=not quiet) as client:
        summary = run_demo(out_dir, n_samples=n_samples, n_features=n_features, n_clusters=n_clusters,
                           cluster_std=cluster_std, random_state=seed, client=client, overwrite=overwrite,
                           progress=not quiet)
    _emit(summary, as_json, [
        f"daskmeans demo: k-means with k={n_clusters} on {n_samples:,} x {n_features} float32 blobs",
        f"  data         {summary['data']}  (written in {summary['data_seconds']:.1f} s)",
        f"  energy       {summary['energy']:.6g}  (the true centers give about {summary['expected_energy']:.6g})",
        f"  recovered    {summary['recovered_centers']} of {n_clusters} true centers (within one noise std)",
        f"  iterations   {summary['n_iter']}  (stopped: {summary['stop_reason']})",
        f"  fit time     {summary['fit_seconds']:.2f} s",
        f"  labels       {summary['labels']}",
        f"  model        {summary['model']}",
        f"  plot         {summary['plot']}",
    ])

