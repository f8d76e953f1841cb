"""Workloads: which data, which k, how long each run may take, and how the data reaches the algorithms.

A workload's data is held in two forms: a NumPy float32 array in the driver (for the in-memory peers and the
exact energy evaluation), when it fits, and what the daskmeans algorithms are given: a dask array persisted on
the cluster (``storage="memory"``) or a Zarr store on disk that every pass reads again (``storage="zarr"``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace

import dask.array as da
import numpy as np
import zarr
from dask.utils import parse_bytes

from ..engine.client import compute_now
from ..engine.random import stage_generator
from ..exceptions import InputDataError, InvalidParameterError
from ..storage.io import chosen_block_rows, open_input, spread_on_workers
from .stores import ensure_blobs, ensure_resampled, write_array_zarr

STORAGES = ("memory", "zarr")


@dataclass(frozen=True)
class Workload:
    """One benchmark set-up.

    Attributes
    ----------
    name : str
        Name on the command line (``descriptors``, ``mnist``, ...); the outputs are named after it.
    description : str
    k : int
        Number of clusters.
    time_budget : float
        Seconds each run (one algorithm, one seed) may take.
    source : str
        ``"file"`` (a built-in dataset file in the data folder), ``"user"`` (``--data PATH``), ``"synthetic"``
        (Gaussian blobs) or ``"resampled"`` (the rows of a built-in dataset file drawn with replacement, plus noise:
        :func:`daskmeans.datasets.make_resampled_zarr`, seed 0).
    file : str or None
        File name in the data folder (``source="file"`` or ``"resampled"``) or the user's path (``source="user"``).
    n_samples : int or None
        Rows: the size of synthetic or resampled data, or a cap on the rows of a file (a seeded uniform subsample).
    n_features : int or None
        Columns of synthetic data.
    storage : str
        ``"memory"`` or ``"zarr"``.
    synthetic_dtype : str
        dtype of synthetic data as stored (``uint8`` descriptors or ``float32`` blobs).
    n_blobs : int or None
        Gaussian blobs of synthetic data (default ``k``).
    peers : tuple of str
        Peers run when ``--peers`` is not given.
    worker_memory : str or None
        Memory limit of each local worker (``"2GiB"``) unless ``--memory-limit`` says otherwise; None for
        Dask's default.
    minibatch_batch_size : int
        Batch size of the scikit-learn ``MiniBatchKMeans`` peer.
    quick : bool
    labels : str or None
        Name of the array of true labels in the dataset file (``--quality`` scores ARI and NMI against it).
    """

    name: str
    description: str
    k: int
    time_budget: float
    source: str
    file: str | None = None
    n_samples: int | None = None
    n_features: int | None = None
    storage: str = "memory"
    synthetic_dtype: str = "float32"
    n_blobs: int | None = None
    peers: tuple = (
        "sklearn-lloyd",
        "sklearn-elkan",
        "sklearn-minibatch",
        "sklearn-intelex",
        "faiss",
        "faiss-all",
        "dask-ml",
    )
    worker_memory: str | None = None
    minibatch_batch_size: int = 1024
    quick: bool = False
    labels: str | None = None

    @property
    def output_name(self) -> str:
        return f"{self.name}-quick" if self.quick else self.name


#: name -> (full workload, quick workload). ``sizing`` is a workload of its own kind (see sizing.py).
WORKLOADS: dict[str, tuple[Workload, Workload]] = {
    "descriptors": (
        Workload(
            "descriptors",
            "cifar_dsift: 960,000 x 128 dense SIFT descriptors",
            k=1000,
            time_budget=60.0,
            source="file",
            file="cifar_dsift.npz",
        ),
        Workload(
            "descriptors",
            "cifar_dsift, 30,000 rows sampled",
            k=100,
            time_budget=2.0,
            source="file",
            file="cifar_dsift.npz",
            n_samples=30_000,
            quick=True,
        ),
    ),
    "mnist": (
        Workload(
            "mnist", "MNIST: 70,000 x 784 digits", k=50, time_budget=30.0, source="file", file="mnist.npz", labels="y"
        ),
        Workload(
            "mnist",
            "MNIST, 10,000 rows sampled",
            k=50,
            time_budget=2.0,
            source="file",
            file="mnist.npz",
            n_samples=10_000,
            quick=True,
            labels="y",
        ),
    ),
    "pendigits": (
        Workload(
            "pendigits",
            "PenDigits: 10,992 x 16 pen trajectories of 10 digits",
            k=10,
            time_budget=10.0,
            source="file",
            file="pendigits.npz",
            labels="y",
        ),
        Workload(
            "pendigits",
            "PenDigits, 3,000 rows sampled",
            k=10,
            time_budget=1.0,
            source="file",
            file="pendigits.npz",
            n_samples=3_000,
            quick=True,
            labels="y",
        ),
    ),
    "kdd": (
        Workload(
            "kdd", "KDD Cup 2004 bio: 145,751 x 74", k=200, time_budget=30.0, source="file", file="kddcup04_bio.npz"
        ),
        Workload(
            "kdd",
            "KDD Cup 2004 bio, 20,000 rows sampled",
            k=50,
            time_budget=2.0,
            source="file",
            file="kddcup04_bio.npz",
            n_samples=20_000,
            quick=True,
        ),
    ),
    "out-of-core": (
        Workload(
            "out-of-core",
            "synthetic uint8 descriptors in Zarr, larger than the workers' memory",
            k=1000,
            time_budget=300.0,
            source="synthetic",
            n_samples=20_000_000,
            n_features=128,
            storage="zarr",
            synthetic_dtype="uint8",
            worker_memory="2GiB",
        ),
        Workload(
            "out-of-core",
            "synthetic uint8 descriptors in Zarr (small)",
            k=20,
            time_budget=2.0,
            source="synthetic",
            n_samples=60_000,
            n_features=32,
            storage="zarr",
            synthetic_dtype="uint8",
            worker_memory="2GiB",
            quick=True,
        ),
    ),
    "descriptors-at-scale": (
        Workload(
            "descriptors-at-scale",
            "cifar_dsift rows resampled with N(0, 2^2) noise per value, uint8 in Zarr",
            k=1000,
            time_budget=600.0,
            source="resampled",
            file="cifar_dsift.npz",
            n_samples=20_000_000,
            storage="zarr",
            synthetic_dtype="uint8",
            worker_memory="4GiB",
            peers=("faiss-sample",),
        ),
        Workload(
            "descriptors-at-scale",
            "cifar_dsift rows resampled with noise, uint8 in Zarr (small)",
            k=20,
            time_budget=2.0,
            source="resampled",
            file="cifar_dsift.npz",
            n_samples=60_000,
            storage="zarr",
            synthetic_dtype="uint8",
            worker_memory="2GiB",
            quick=True,
            peers=("faiss-sample",),
        ),
    ),
    "synthetic": (
        Workload(
            "synthetic",
            "Gaussian blobs in memory",
            k=100,
            time_budget=20.0,
            source="synthetic",
            n_samples=200_000,
            n_features=32,
        ),
        Workload(
            "synthetic",
            "Gaussian blobs in memory (tiny)",
            k=8,
            time_budget=1.5,
            source="synthetic",
            n_samples=4_000,
            n_features=8,
            quick=True,
        ),
    ),
}

SIZING = "sizing"


def workload_names() -> list[str]:
    """Names accepted on the command line."""
    return [*WORKLOADS, SIZING]


def _parse_memory(text) -> int:
    try:
        return int(parse_bytes(text))
    except (ValueError, TypeError) as error:
        raise InvalidParameterError(
            f"Cannot read {text!r} as an amount of memory; write e.g. '2GiB' or '500MB'."
        ) from error


def resolve_workloads(
    names,
    *,
    quick=False,
    data_path=None,
    k=None,
    data_dir=None,
    n_samples=None,
    n_features=None,
    time_budget=None,
    storage=None,
    batch_size=None,
):
    """The workloads to run, with the command line's overrides applied, checked before any work starts.

    Parameters
    ----------
    names : sequence of str
        Built-in workload names (``sizing`` is left to the caller).
    quick : bool
    data_path : str, optional
        The user's data (``.npy``, ``.npz`` or a Zarr store); needs ``k``.
    k : int, optional
        Number of clusters (required with ``data_path``; overrides the workloads' own k otherwise).
    data_dir : str, optional
        Folder holding the built-in datasets (``cifar_dsift.npz`` ...).
    n_samples, n_features, time_budget, storage, batch_size : optional overrides

    Returns
    -------
    list of Workload

    Raises
    ------
    InvalidParameterError
        Unknown names, missing ``k``, bad values.
    FileNotFoundError
        A dataset file that a workload needs is absent.
    """
    unknown = [n for n in names if n not in WORKLOADS and n != SIZING]
    if unknown:
        raise InvalidParameterError(
            f"Unknown workload(s) {', '.join(map(repr, unknown))}; choose from {', '.join(workload_names())} "
            "(or pass your own data with --data PATH -k K)."
        )
    if data_path is not None and k is None:
        raise InvalidParameterError("--data needs the number of clusters: add -k K.")
    if k is not None and (not isinstance(k, int) or k < 1):
        raise InvalidParameterError(f"-k must be a positive integer, got {k!r}.")
    for value, label in ((n_samples, "--n-samples"), (n_features, "--n-features"), (batch_size, "--batch-size")):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise InvalidParameterError(f"{label} must be a positive integer, got {value!r}.")
    if time_budget is not None and not (
        isinstance(time_budget, (int, float)) and math.isfinite(time_budget) and time_budget > 0
    ):
        raise InvalidParameterError(f"--time-budget must be a positive number of seconds, got {time_budget!r}.")
    if storage is not None and storage not in STORAGES:
        raise InvalidParameterError(f"--storage must be one of {', '.join(STORAGES)}; got {storage!r}.")

    chosen = []
    for name in names:
        if name == SIZING:
            continue
        workload = WORKLOADS[name][1 if quick else 0]
        changes = {}
        if k is not None:
            changes["k"] = k
        if n_samples is not None:
            changes["n_samples"] = n_samples
        if n_features is not None:
            if workload.source != "synthetic":
                raise InvalidParameterError(
                    f"--n-features sets the width of synthetic data; the {name!r} workload reads a file."
                )
            changes["n_features"] = n_features
        if time_budget is not None:
            changes["time_budget"] = float(time_budget)
        if storage is not None:
            changes["storage"] = storage
        if batch_size is not None:
            changes["minibatch_batch_size"] = batch_size
        workload = replace(workload, **changes)
        if workload.source in ("file", "resampled"):
            folder = data_dir if data_dir is not None else "data"
            path = os.path.join(folder, workload.file)
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"The {name!r} workload needs the dataset file {workload.file!r}, which is not in the data "
                    f"folder {os.path.abspath(folder)!r}. Put it there, point to the folder holding it with "
                    "--data-dir DIR, or benchmark your own file with --data PATH -k K."
                )
            workload = replace(workload, file=os.path.abspath(path))
        chosen.append(workload)

    if data_path is not None:
        path = os.fspath(data_path)
        if not os.path.exists(path) and "://" not in path:
            raise FileNotFoundError(f"--data {path!r} does not exist; give a .npy/.npz file or a Zarr store.")
        is_zarr = not path.lower().rstrip("/").endswith((".npy", ".npz"))
        stem = os.path.splitext(os.path.basename(path.rstrip("/")))[0] or "data"
        chosen.append(
            Workload(
                name=f"data-{stem}",
                description=f"user data {path}",
                k=k,
                time_budget=float(time_budget) if time_budget is not None else (3.0 if quick else 60.0),
                source="user",
                file=path,
                n_samples=n_samples,
                storage=storage or ("zarr" if is_zarr else "memory"),
                minibatch_batch_size=batch_size or 1024,
                quick=quick,
            )
        )
    return chosen


# -- data --------------------------------------------------------------------------------------------------------
@dataclass
class BenchData:
    """A workload's data, ready for the runs.

    Attributes
    ----------
    X : ndarray (n, d) float32 or None
        The data in the driver (None when it does not fit there).
    array : dask.array.Array
        The same data on the cluster: held by the workers as stored (memory storage; float32 as computed) or read
        from Zarr at every pass.
    fit_input : dask array or str
        What the daskmeans estimators are given: the persisted dask array or the Zarr path.
    location : str or None
        Zarr path (zarr storage).
    source_dtype : str
    in_driver_reason : str or None
        Why ``X`` is None.
    """

    X: np.ndarray | None
    array: da.Array
    fit_input: object
    location: str | None
    source_dtype: str
    in_driver_reason: str | None = None

    @property
    def n_samples(self) -> int:
        return int(self.array.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.array.shape[1])

    def rows(self, index, client=None) -> np.ndarray:
        """The rows ``index`` (in that order) as float32."""
        index = np.asarray(index, dtype=np.int64)
        if self.X is not None:
            return np.ascontiguousarray(self.X[index], dtype=np.float32)
        order = np.argsort(index, kind="stable")
        (picked,) = compute_now(self.array[index[order]], client=client)
        rows = np.empty_like(np.asarray(picked, dtype=np.float32))
        rows[order] = picked
        return rows


def block_rows(n_samples, n_features) -> int:
    """Rows per block: those an estimator chooses for the same rows as float32 in memory
    (:func:`daskmeans.storage.io.chosen_block_rows`)."""
    return chosen_block_rows(n_samples, n_features, 4)


def subsample_index(n_total, n_samples) -> np.ndarray:
    """A seeded uniform subsample of rows, in increasing order (the same on every run)."""
    rng = stage_generator(0, "bench", "subsample")
    return np.sort(rng.choice(n_total, n_samples, replace=False))


def scatter_rows(X, rows, client) -> da.Array:
    """``X`` (as stored: a uint8 file stays uint8) held by the workers in blocks of ``rows``, as a user's NumPy
    input is (:func:`daskmeans.storage.io.spread_on_workers`): sent to the workers once, never inside a graph,
    and every pass starts from the blocks themselves. Without a client (Dask's threaded scheduler) the blocks are
    views of ``X`` in this process, as a fit from Python without a client reads a NumPy input."""
    array = open_input(X, chunk_rows=int(rows)).array
    return array if client is None else spread_on_workers(array, client)


def _load_file(path):
    """A .npz (array ``X``) or .npy file as it is stored."""
    if path.lower().endswith(".npz"):
        with np.load(path, allow_pickle=False) as archive:
            if "X" not in archive.files:
                raise InputDataError(f"{path!r} has no array named 'X'; it holds {sorted(archive.files)}.")
            return archive["X"]
    return np.load(path, mmap_mode="r", allow_pickle=False)


def load_data(workload: Workload, *, client, work_dir, driver_memory) -> BenchData:
    """Read or generate the workload's data and place it where the runs need it.

    Parameters
    ----------
    workload : Workload
    client : distributed.Client
    work_dir : str
        Folder for Zarr stores written by the harness.
    driver_memory : int
        Bytes the driver may use for a float32 copy of the data (twice the data must fit: the peers copy it).

    Raises
    ------
    InputDataError
        The data cannot be clustered as it is, has fewer rows than k, or memory storage was asked for data
        that does not fit in the driver.
    """
    fits = None

    def check_fits(n, d):
        need = 2 * n * d * 4
        if need > driver_memory:
            return (
                f"the data needs {need / 2**30:.1f} GiB in the driver (float32, twice: the peers copy it); "
                f"the limit is {driver_memory / 2**30:.1f} GiB (--driver-memory)"
            )
        return None

    source_dtype = None
    location = None
    X = None
    stored = None  # the rows as stored, for the daskmeans runs (the peers get X, float32)
    from_file = workload.source == "file" or (
        workload.source == "user" and workload.file.lower().rstrip("/").endswith((".npy", ".npz"))
    )
    if from_file:
        raw = _load_file(workload.file)
        if raw.ndim != 2 or raw.shape[0] == 0 or raw.shape[1] == 0:
            raise InputDataError(
                f"{workload.file!r} holds an array of shape {raw.shape}; a 2-D (n, d) array "
                "with rows and columns is needed."
            )
        open_input(raw[:1])  # dtype check with daskmeans's own message
        source_dtype = str(raw.dtype)
        if workload.n_samples is not None and workload.n_samples < raw.shape[0]:
            raw = raw[subsample_index(raw.shape[0], workload.n_samples)]
        fits = check_fits(*raw.shape)
        if fits is not None and workload.storage == "memory":
            raise InputDataError(
                f"{workload.name}: {fits}. Use --storage zarr (data read from disk at each pass) "
                "or raise --driver-memory."
            )
        n, d = raw.shape
        rows = block_rows(n, d)
        if workload.storage == "zarr":
            location = os.path.join(work_dir, f"{workload.output_name}-n{n}.zarr")
            write_array_zarr(
                location, np.asarray(raw), rows, {"source": os.path.abspath(workload.file), "n_samples": int(n)}
            )
        if fits is None:
            X = np.ascontiguousarray(raw, dtype=np.float32)
            stored = raw
    elif workload.source == "resampled":
        source_rows = _load_file(workload.file)
        open_input(source_rows[:1])
        n, d = int(workload.n_samples), source_rows.shape[1]
        source_dtype = str(source_rows.dtype)
        fits = check_fits(n, d)
        if fits is not None and workload.storage == "memory":
            raise InputDataError(f"{workload.name}: {fits}. Use --storage zarr or fewer --n-samples.")
        store = ensure_resampled(
            os.path.join(work_dir, f"{workload.output_name}-n{n}.zarr"),
            source_rows,
            n,
            chunk_rows=block_rows(n, d),
            client=client,
        )
        if workload.storage == "zarr":
            location = store["array"]
        if fits is None:
            stored = zarr.open_array(store=store["array"], mode="r")[...]
            X = np.ascontiguousarray(stored, dtype=np.float32)
    elif workload.source == "user":
        opened = open_input(workload.file)
        source_dtype = str(opened.source_dtype)
        n, d = opened.n_samples, opened.n_features
        if workload.n_samples is not None and workload.n_samples < n:
            raise InvalidParameterError("--n-samples cannot subsample a Zarr store; pass a .npy/.npz file instead.")
        fits = check_fits(n, d)
        if fits is not None and workload.storage == "memory":
            raise InputDataError(f"{workload.name}: {fits}. Use --storage zarr or raise --driver-memory.")
        if workload.storage == "zarr":
            location = workload.file
        if fits is None:
            (X,) = compute_now(opened.array, client=client)
            X = np.ascontiguousarray(X, dtype=np.float32)
    else:
        n, d = workload.n_samples, workload.n_features
        dtype = np.dtype(workload.synthetic_dtype)
        source_dtype = str(dtype)
        rows = block_rows(n, d)
        blobs = workload.n_blobs or workload.k
        fits = check_fits(n, d)
        if fits is not None and workload.storage == "memory":
            raise InputDataError(f"{workload.name}: {fits}. Use --storage zarr or fewer --n-samples.")
        store = ensure_blobs(
            os.path.join(work_dir, f"blobs-{dtype}-n{n}-d{d}-c{blobs}.zarr"),
            n,
            d,
            blobs,
            dtype,
            chunk_rows=rows,
            client=client,
        )
        if workload.storage == "zarr":
            location = store["array"]
        if fits is None:
            X = np.ascontiguousarray(zarr.open_array(store=store["array"], mode="r")[...], dtype=np.float32)

    if n < workload.k:
        raise InputDataError(f"{workload.name}: the data has {n} rows but k={workload.k}; lower -k.")
    rows = block_rows(n, d)
    if location is not None:
        opened = open_input(location)
        array = opened.array
        fit_input = location
    else:
        array = scatter_rows(X if stored is None else stored, rows, client)
        fit_input = array
    return BenchData(
        X=X, array=array, fit_input=fit_input, location=location, source_dtype=source_dtype, in_driver_reason=fits
    )
