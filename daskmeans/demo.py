"""The demo: synthetic blobs in a local Zarr store, clustered on a Dask cluster, with a summary and a plot."""

from __future__ import annotations

import os
import time

import numpy as np
import zarr

from ._validation import check_float
from .datasets import make_blobs_zarr
from .estimators.kmeans import KMeans
from .plots import energy_timeline, plot_energy_curves
from .storage.io import open_input, write_labels
from .storage.publish import prepare_output

DEFAULT_DEMO_DIR = "daskmeans-demo"


def demo_paths(out_dir) -> dict:
    """Where the demo writes: the data group, the labels (an array beside ``X`` in that group), model, plot."""
    out_dir = os.fspath(out_dir)
    data = os.path.join(out_dir, "data.zarr")
    return {
        "out_dir": out_dir,
        "data": data,
        "labels": os.path.join(data, "labels"),
        "model": os.path.join(out_dir, "model.zarr"),
        "plot": os.path.join(out_dir, "energy.png"),
    }


def check_demo_outputs(out_dir, overwrite: bool) -> dict:
    """Check, before any work, that the demo may write into ``out_dir``; return :func:`demo_paths`.

    Raises
    ------
    OutputExistsError
        One of the outputs exists and ``overwrite`` is False.
    FileNotFoundError
        The folder holding ``out_dir`` does not exist.
    """
    paths = demo_paths(out_dir)
    prepare_output(paths["out_dir"], overwrite=True)  # the folder may exist already; its parent must
    if os.path.exists(paths["out_dir"]):
        if not os.path.isdir(paths["out_dir"]):
            raise NotADirectoryError(f"The demo folder {paths['out_dir']!r} is a file; choose another --out.")
        for key in ("data", "model", "plot"):
            prepare_output(paths[key], overwrite)
    return paths


def recovered_centers(true_centers: np.ndarray, found_centers: np.ndarray, radius: float) -> int:
    """How many true centers have a found center within ``radius`` (each found center matched once)."""
    distances = np.sqrt(((true_centers[:, None, :] - found_centers[None, :, :]) ** 2).sum(axis=2))
    matched = 0
    free = np.ones(found_centers.shape[0], dtype=bool)
    for true_index in np.argsort(distances.min(axis=1)):
        candidates = np.where(free, distances[true_index], np.inf)
        nearest = int(np.argmin(candidates))
        if candidates[nearest] <= radius:
            free[nearest] = False
            matched += 1
    return matched


def run_demo(
    out_dir=DEFAULT_DEMO_DIR,
    *,
    n_samples=200_000,
    n_features=32,
    n_clusters=20,
    cluster_std=1.0,
    random_state=0,
    client=None,
    overwrite=False,
    progress=False,
) -> dict:
    """Make blobs in ``out_dir/data.zarr``, fit k-means on ``client``, write labels, model and energy plot.

    Parameters
    ----------
    out_dir : str or os.PathLike
        Folder for the outputs (created when missing).
    n_samples, n_features, n_clusters : int
        Size of the synthetic data; k-means looks for ``n_clusters`` clusters.
    cluster_std : float
        Noise around each true center (centers lie in a box of side 20): larger values make the clusters
        overlap, so k-means needs more iterations and may settle in a local optimum.
    random_state : int
        Seed of the data and of the fit.
    client : distributed.Client, optional
        Cluster that writes the data and runs the fit.
    overwrite : bool
        Replace the outputs of an earlier demo in ``out_dir``.
    progress : bool
        Show a bar per phase of the fit (seeding, iterations, final pass).

    Returns
    -------
    dict
        Paths written and the figures of the run (JSON-able).
    """
    check_float(cluster_std, "cluster_std", minimum=0.0, strict_minimum=True)
    paths = check_demo_outputs(out_dir, overwrite)
    model = KMeans(n_clusters=n_clusters, random_state=random_state, client=client, progress=progress)
    model._validate_params()
    os.makedirs(paths["out_dir"], exist_ok=True)

    start = time.perf_counter()
    make_blobs_zarr(
        paths["data"],
        n_samples,
        n_features,
        n_clusters,
        cluster_std=cluster_std,
        random_state=random_state,
        overwrite=overwrite,
        client=client,
    )
    data_seconds = time.perf_counter() - start
    group = zarr.open_group(store=paths["data"], mode="r")
    true_centers = np.asarray(group["centers"][...])

    dataset = open_input(paths["data"], array="X")
    start = time.perf_counter()
    model.fit(dataset)
    inertia = model.inertia_  # the final pass, if the last iteration moved the centers
    fit_seconds = time.perf_counter() - start
    write_labels(model.labels_, paths["labels"], client=client)  # a fresh group: no labels yet
    model.save(paths["model"], overwrite=overwrite)
    timeline = energy_timeline(model, fit_started=start)
    plot_energy_curves(
        {"k-means (Lloyd)": timeline["points"]},
        paths["plot"],
        f"daskmeans demo: k-means, k={n_clusters}, {n_samples:,} x {n_features} blobs (std {cluster_std:g})",
        phases=timeline["phases"],
    )
    return {
        "command": "demo",
        **paths,
        "n_samples": n_samples,
        "n_features": n_features,
        "n_clusters": n_clusters,
        "cluster_std": cluster_std,
        "random_state": random_state,
        "energy": inertia / n_samples,
        "expected_energy": n_features * cluster_std**2,
        "inertia": inertia,
        "n_iter": model.n_iter_,
        "stop_reason": model.stop_reason_,
        "recovered_centers": recovered_centers(true_centers, model.cluster_centers_, cluster_std),
        "data_seconds": data_seconds,
        "fit_seconds": fit_seconds,
        "phases": timeline["phases"],
    }
