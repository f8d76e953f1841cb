"""The commands that make data, fit, predict and run the demo. Each imports what it needs when it runs."""

from __future__ import annotations

import inspect
import time

import click

from ..exceptions import InputDataError, InvalidParameterError
from ..registry import algorithm_names, make_estimator
from .common import (
    algorithm_params,
    check_free_space,
    check_outputs,
    check_writable,
    cluster_options,
    compute_bytes,
    emit,
    labels_bytes,
    model_bytes,
    open_data,
    overlap,
    shape_text,
    storage_option,
    where,
    writing,
)


def say(quiet: bool, message: str):
    """One line on stderr about the phase that starts (nothing with --quiet)."""
    if not quiet:
        click.echo(message, err=True)


# -- make-data ----------------------------------------------------------------------------------------------------


@click.command("make-data", short_help="Write synthetic Gaussian blobs to a Zarr store.")
@click.argument("out", type=click.Path(dir_okay=True, file_okay=False))
@click.option("--n-samples", "--samples", "n_samples", type=click.IntRange(min=1), required=True, help="Rows to write.")
@click.option("--n-features", "--features", "n_features", type=click.IntRange(min=1), required=True, help="Columns.")
@click.option(
    "-k", "--n-clusters", "--clusters", "n_clusters", type=click.IntRange(min=1), required=True, help="Gaussian blobs."
)
@click.option("--chunk-rows", type=click.IntRange(min=1), help="Rows per Zarr chunk (default: about 8 MiB).")
@click.option(
    "--dtype",
    type=click.Choice(["float32", "float64", "uint8"]),
    default="float32",
    show_default=True,
    help="uint8 gives SIFT-like descriptors (0..255).",
)
@click.option("--cluster-std", type=click.FloatRange(min=0), help="Noise around each center (1.0; 12 for uint8).")
@click.option(
    "--random-state",
    "--seed",
    "seed",
    type=click.IntRange(min=0),
    help="Random seed (default: fresh; stored in the output).",
)
@click.option("--overwrite", is_flag=True, help="Replace OUT if it exists.")
@storage_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def make_data(
    out, n_samples, n_features, n_clusters, chunk_rows, dtype, cluster_std, seed, overwrite, storage_options, as_json
):
    """Write Gaussian blobs to the Zarr group OUT: data X, true labels y, true centers.

    The data is generated and written one chunk at a time by local threads, so any size fits in memory;
    the values depend on --seed only, not on --chunk-rows. OUT may be a URL (s3://bucket/blobs.zarr), written
    with --storage-option.
    """
    import numpy as np
    import zarr

    from ..datasets import make_blobs_zarr
    from ..storage.publish import is_local, zarr_options

    np_dtype = np.dtype(dtype)
    out_bytes = (
        n_samples * n_features * np_dtype.itemsize
        + labels_bytes(n_samples)
        + n_clusters * n_features * np_dtype.itemsize
    )
    if not is_local(out):
        check_writable("OUT", out, storage_options)  # a store that cannot be reached, before any work
    warning = check_free_space("OUT", out, out_bytes)
    if warning:
        click.echo(f"Warning: {warning}", err=True)
    start = time.perf_counter()
    with writing("OUT", out):
        make_blobs_zarr(
            out,
            n_samples,
            n_features,
            n_clusters,
            chunk_rows=chunk_rows,
            dtype=dtype,
            cluster_std=cluster_std,
            random_state=seed,
            overwrite=overwrite,
            storage_options=storage_options,
        )
    seconds = time.perf_counter() - start
    group = zarr.open_group(store=out, mode="r", storage_options=zarr_options(out, storage_options))
    attrs = dict(group.attrs["daskmeans"])
    summary = {
        "command": "make-data",
        "out": out,
        "array": "X",
        **attrs,
        "chunks": list(group["X"].chunks),
        "seconds": seconds,
    }
    emit(
        summary,
        as_json,
        [
            f"Wrote {n_samples:,} x {n_features} {dtype} blobs ({n_clusters} clusters, seed {attrs['seed']}) "
            f"to {out} in {seconds:.1f} s",
            f"  arrays: X (data, chunks {tuple(group['X'].chunks)}), y (true labels), centers (true centers)",
        ],
    )


# -- fit ------------------------------------------------------------------------------------------------------------


@click.command("fit", short_help="Cluster a data set; write the model and labels.")
@click.argument("input_path", metavar="INPUT")
@click.option(
    "-k",
    "--n-clusters",
    "--clusters",
    "n_clusters",
    type=click.IntRange(min=1),
    required=True,
    help="Number of clusters.",
)
@click.option(
    "--array", metavar="NAME", help="Array inside a Zarr group (its path: X, or sub/X in a subgroup) or .npz file."
)
@click.option("--algorithm", type=click.Choice(algorithm_names()), default="kmeans", show_default=True)
@click.option(
    "--init", metavar="METHOD", help="Seeding: k-means|| (default), k-means++, afk-mc2, two-level (large k), random."
)
@click.option(
    "--max-iter", type=click.IntRange(min=1), help="Most iterations (epochs for vrkm/vrkm++; default: the algorithm's)."
)
@click.option("--max-time", type=click.FloatRange(min=0, min_open=True), help="Wall-clock budget in seconds.")
@click.option(
    "--param",
    "params",
    metavar="NAME=VALUE",
    multiple=True,
    help="Any other parameter of the algorithm's estimator (repeatable), e.g. --param tol=1e-3 "
    "--param batch_size=4096; an unknown name lists the algorithm's parameters.",
)
@click.option(
    "--random-state",
    "--seed",
    "seed",
    type=click.IntRange(min=0),
    help="Random seed; same seed, same result on any cluster.",
)
@click.option("--out", "model_path", metavar="MODEL", help="Write the fitted model (a Zarr group) here.")
@click.option("--labels", "labels_path", metavar="OUT", help="Write the label of every row (a Zarr array) here.")
@click.option("--overwrite", is_flag=True, help="Replace existing outputs.")
@click.option(
    "--checkpoint",
    "checkpoint_path",
    metavar="DIR",
    help="Save the fit's state here (a directory, or a URL such as s3://bucket/run.ckpt) after every iteration; "
    "run the same command again to resume.",
)
@storage_option
@cluster_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def fit(
    input_path,
    n_clusters,
    array,
    algorithm,
    init,
    max_iter,
    max_time,
    params,
    seed,
    model_path,
    labels_path,
    overwrite,
    checkpoint_path,
    storage_options,
    cluster,
    quiet,
    as_json,
):
    """Cluster INPUT (a Zarr store, .npy or .npz file; a store may be a URL: s3://bucket/data.zarr) into k clusters.

    Outputs are checked before any work: an existing --out or --labels is an error unless --overwrite.
    With --checkpoint DIR the state is saved after every iteration; if the command dies, the same command
    resumes from DIR and gives the same result as an uninterrupted run (a DIR of another fit is refused).
    """
    from ..storage.checkpoint import open_checkpoint
    from ..storage.io import write_labels
    from ..storage.publish import publication

    chosen = algorithm_params(algorithm, {"init": init, "max_iter": max_iter, "max_time": max_time}, params)
    dataset = open_data(input_path, array, storage_options)
    if n_clusters > dataset.n_samples:
        raise InvalidParameterError(
            f"-k {n_clusters} is more than the {dataset.n_samples:,} rows of {input_path!r}; choose k <= n."
        )
    estimator = make_estimator(algorithm, n_clusters=n_clusters, random_state=seed, progress=not quiet, **chosen)
    estimator._validate_params()
    check_outputs(
        {"--out": model_path, "--labels": labels_path},
        overwrite,
        {"input data": dataset.location or input_path},
        {"--out": model_bytes(n_clusters, dataset.n_features), "--labels": labels_bytes(dataset.n_samples)},
        storage_options,
    )
    if checkpoint_path is not None:
        for option, other in {
            "INPUT": dataset.location or input_path,
            "--out": model_path,
            "--labels": labels_path,
        }.items():
            relation = None if other is None else overlap(checkpoint_path, other)
            if relation is not None:
                raise InvalidParameterError(
                    f"--checkpoint {checkpoint_path!r} {relation} {option} {other!r}; give "
                    "the checkpoint a directory of its own."
                )
        # a damaged or foreign one is refused now
        open_checkpoint(checkpoint_path, estimator, dataset, None, storage_options)

    with cluster.client(announce=not quiet, input_bytes=compute_bytes(dataset)) as client:
        estimator.set_params(client=client)
        start = time.perf_counter()
        estimator.fit(dataset, checkpoint=checkpoint_path, storage_options=storage_options)
        inertia = float(estimator.inertia_)  # may need one more pass: while the cluster is up
        fit_seconds = time.perf_counter() - start
        # the outputs are published together once both are written, or none is (storage.publish.publication)
        with publication(overwrite, storage_options=storage_options) as outputs:
            if labels_path is not None:
                say(quiet, f"labelling {dataset.n_samples:,} rows -> {labels_path} (one pass)")
                with writing("--labels", labels_path):
                    write_labels(
                        estimator.labels_,
                        outputs.output(labels_path),
                        client=client,
                        storage_options=storage_options,
                    )
            if model_path is not None:
                say(quiet, f"saving the model -> {model_path}")
                with writing("--out", model_path):
                    estimator.save(outputs.output(model_path), storage_options=storage_options)
        workers = None if client is None else len(client.nthreads())  # None: Dask's threaded scheduler

    summary = {
        "command": "fit",
        "input": where(dataset, input_path),
        "algorithm": algorithm,
        "n_samples": dataset.n_samples,
        "n_features": dataset.n_features,
        "n_clusters": n_clusters,
        "random_state": seed,
        "params": chosen,
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
        f"{algorithm}: k={n_clusters} on {summary['input']} ({shape_text(dataset)}), "
        + ("Dask's threaded scheduler" if workers is None else f"{workers} Dask workers"),
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
    emit(summary, as_json, lines)


# -- predict --------------------------------------------------------------------------------------------------------


@click.command("predict", short_help="Label a data set with a saved model.")
@click.argument("model_path", metavar="MODEL")
@click.argument("input_path", metavar="INPUT")
@click.option("--labels", "labels_path", metavar="OUT", required=True, help="Write the labels (a Zarr array) here.")
@click.option(
    "--array", metavar="NAME", help="Array inside a Zarr group (its path: X, or sub/X in a subgroup) or .npz file."
)
@click.option(
    "--n-probe",
    type=click.IntRange(min=1),
    metavar="N",
    help="Approximate labels for large k: search only the centers of the N lists (of about sqrt(k), "
    "grouped by a k-means of the centers) nearest to each row; default: the exact nearest center.",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing OUT.")
@storage_option
@cluster_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def predict(model_path, input_path, labels_path, array, n_probe, overwrite, storage_options, cluster, as_json):
    """Label every row of INPUT with the nearest center of MODEL and write the labels to OUT (each may be a URL:
    s3://bucket/model.zarr)."""
    from ..storage.io import write_labels
    from ..storage.model import load

    model = load(model_path, storage_options=storage_options if "://" in model_path else None)
    dataset = open_data(input_path, array, storage_options)
    if dataset.n_features != model.n_features_in_:
        raise InputDataError(
            f"{input_path!r} has {dataset.n_features} features but the model {model_path!r} was fitted on "
            f"{model.n_features_in_}; use the same kind of data (or --array to pick another array)."
        )
    if n_probe is not None and "n_probe" not in inspect.signature(model.predict).parameters:
        raise InvalidParameterError(
            f"--n-probe searches lists of centers, but {model_path!r} holds a {type(model).__name__}, whose centers "
            "live in the kernel's feature space; leave --n-probe out to label with it."
        )
    check_outputs(
        {"--labels": labels_path},
        overwrite,
        {"input data": dataset.location or input_path, "model": model_path},
        {"--labels": labels_bytes(dataset.n_samples)},
        storage_options,
    )

    with cluster.client(input_bytes=compute_bytes(dataset)) as client:
        start = time.perf_counter()
        with writing("--labels", labels_path):
            labels = model.predict(dataset) if n_probe is None else model.predict(dataset, n_probe=n_probe)
            write_labels(labels, labels_path, overwrite=overwrite, client=client, storage_options=storage_options)
        seconds = time.perf_counter() - start

    summary = {
        "command": "predict",
        "model": model_path,
        "input": where(dataset, input_path),
        "labels": labels_path,
        "n_samples": dataset.n_samples,
        "n_clusters": int(model.n_clusters),
        "n_probe": n_probe,
        "seconds": seconds,
    }
    emit(
        summary,
        as_json,
        [
            f"Labelled {dataset.n_samples:,} rows of {summary['input']} with {model.n_clusters} clusters of "
            f"{model_path} in {seconds:.2f} s -> {labels_path}"
        ],
    )


# -- demo -------------------------------------------------------------------------------------------------------------


@click.command("demo", short_help="Make data, cluster it, plot the energy: a quick tour.")
@click.option(
    "--out",
    "out_dir",
    default="daskmeans-demo",
    show_default=True,
    metavar="DIR",
    help="Folder for the data, labels, model and plot.",
)
@click.option("--n-samples", "--samples", "n_samples", type=click.IntRange(min=1), default=200_000, show_default=True)
@click.option("--n-features", "--features", "n_features", type=click.IntRange(min=1), default=32, show_default=True)
@click.option(
    "-k", "--n-clusters", "--clusters", "n_clusters", type=click.IntRange(min=1), default=20, show_default=True
)
@click.option(
    "--cluster-std",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Noise around each true center; try 4 for overlapping clusters and a longer run.",
)
@click.option("--random-state", "--seed", "seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace the outputs of an earlier demo in DIR.")
@cluster_options
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def demo(out_dir, n_samples, n_features, n_clusters, cluster_std, seed, overwrite, cluster, quiet, as_json):
    """Make synthetic blobs in a local Zarr store, cluster them on a Dask cluster, and plot the energy."""
    from ..demo import check_demo_outputs, run_demo

    if n_clusters > n_samples:
        raise InvalidParameterError(f"--n-clusters {n_clusters} is more than --n-samples {n_samples}; lower it.")
    check_demo_outputs(out_dir, overwrite)
    with cluster.client(announce=not quiet, input_bytes=n_samples * n_features * 4) as client:
        summary = run_demo(
            out_dir,
            n_samples=n_samples,
            n_features=n_features,
            n_clusters=n_clusters,
            cluster_std=cluster_std,
            random_state=seed,
            client=client,
            overwrite=overwrite,
            progress=not quiet,
        )
    emit(
        summary,
        as_json,
        [
            f"daskmeans demo: k-means with k={n_clusters} on {n_samples:,} x {n_features} float32 blobs",
            f"  data         {summary['data']}  (written in {summary['data_seconds']:.1f} s)",
            f"  energy       {summary['energy']:.6g}  (the true centers give about {summary['expected_energy']:.6g})",
            f"  recovered    {summary['recovered_centers']} of {n_clusters} true centers (within one noise std)",
            f"  iterations   {summary['n_iter']}  (stopped: {summary['stop_reason']})",
            f"  fit time     {summary['fit_seconds']:.2f} s",
            f"  labels       {summary['labels']}",
            f"  model        {summary['model']}",
            f"  plot         {summary['plot']}",
        ],
    )
