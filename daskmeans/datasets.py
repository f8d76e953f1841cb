"""Synthetic data written straight to chunked Zarr stores, of any size in bounded memory: Gaussian blobs, and real
rows resampled with noise (descriptors that look like real ones, at any scale).

The values depend on the seed and the shape only, never on ``chunk_rows``, the scheduler or the number of
workers: the noise of row ``i`` comes from a generator keyed by the fixed *generation block* holding ``i``
(a size that depends on ``n_features`` only), and the label (or source row) of row ``i`` from the counter-based
:func:`daskmeans.engine.random.row_uniforms`.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import zarr

from . import config
from ._validation import check_choice, check_float, check_int
from .engine.graph import map_blocks_delayed, shared
from .engine.random import row_uniforms, seed_from_random_state, stage_generator, stage_key
from .engine.writes import compute_writes
from .exceptions import InvalidParameterError
from .storage.publish import atomic_output, zarr_options
from .storage.remote import check_storage_options

#: dtypes ``make_blobs_zarr`` can write; uint8 mimics SIFT-like descriptors (values clipped to 0..255).
BLOB_DTYPES = ("float32", "float64", "uint8")

_DEFAULT_STD = {"float32": 1.0, "float64": 1.0, "uint8": 12.0}
_DEFAULT_BOX = {"float32": (-10.0, 10.0), "float64": (-10.0, 10.0), "uint8": (24.0, 232.0)}


def default_chunk_rows(n_samples: int, n_features: int) -> int:
    """Rows per Zarr chunk: :data:`~daskmeans.config.TARGET_CHUNK_BYTES` of float32 (at least 1024 rows), never
    more than ``n_samples``."""
    rows = max(1024, config.TARGET_CHUNK_BYTES // (4 * n_features))
    return int(min(rows, n_samples))


def generation_block_rows(n_features: int) -> int:
    """Rows per generation block: :data:`~daskmeans.config.GENERATION_BLOCK_VALUES` noise values, so memory stays
    bounded for any width."""
    return max(1, config.GENERATION_BLOCK_VALUES // n_features)


def blob_rows(seed: int, centers: np.ndarray, cluster_std: float, dtype: str, start: int, stop: int):
    """Rows ``start .. stop - 1`` of the blobs data set and their true labels.

    Parameters
    ----------
    seed : int
        Root seed (from :func:`daskmeans.engine.random.seed_from_random_state`).
    centers : ndarray (k, d)
        True centers.
    cluster_std : float
        Standard deviation of the Gaussian noise around each center.
    dtype : {"float32", "float64", "uint8"}
    start, stop : int
        Global row range.

    Returns
    -------
    values : ndarray (stop - start, d) of ``dtype``
    labels : ndarray (stop - start,) of int32
    """
    n_clusters, n_features = centers.shape
    count = stop - start
    labels = np.floor(row_uniforms(stage_key(seed, "make-blobs-labels"), start, count) * n_clusters)
    labels = np.minimum(labels.astype(np.int32), n_clusters - 1)

    noise = _standard_normal_rows(seed, "make-blobs-noise", n_features, dtype, start, stop)
    noise *= noise.dtype.type(cluster_std)
    noise += centers[labels].astype(noise.dtype, copy=False)
    return _as_stored(noise, dtype), labels


def _standard_normal_rows(seed: int, stage: str, n_features: int, dtype: str, start: int, stop: int) -> np.ndarray:
    """Standard normal values for rows ``start .. stop - 1`` of a stage (float64 for float64 data, else float32),
    the same whatever range is asked: each generation block has its own generator."""
    noise_dtype = np.float64 if dtype == "float64" else np.float32
    noise = np.empty((stop - start, n_features), dtype=noise_dtype)
    block_rows = generation_block_rows(n_features)
    row = start
    while row < stop:
        block = row // block_rows
        block_start = block * block_rows
        needed_end = min(stop, block_start + block_rows)
        # A generator fills row-major, so drawing only the prefix up to ``needed_end`` gives the same rows
        # as drawing the whole block: the values never depend on where the chunks fall.
        rng = np.random.default_rng(stage_key(seed, stage, block))
        drawn = rng.standard_normal((needed_end - block_start, n_features), dtype=noise_dtype)
        noise[row - start : needed_end - start] = drawn[row - block_start :]
        row = needed_end
    return noise


def _as_stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float values in the stored ``dtype``: uint8 rounded and clipped to 0..255."""
    if dtype == "uint8":
        np.rint(values, out=values)
        np.clip(values, 0, 255, out=values)
        return values.astype(np.uint8)
    return values.astype(dtype, copy=False)


def _write_rows(start, stop, path, array_name, seed, centers, cluster_std, dtype, storage_options=None):
    values, labels = blob_rows(seed, centers, cluster_std, dtype, start, stop)
    options = zarr_options(path, storage_options)
    zarr.open_array(store=path, path=array_name, mode="r+", storage_options=options)[start:stop] = values
    zarr.open_array(store=path, path="y", mode="r+", storage_options=options)[start:stop] = labels


def _check_blob_params(n_samples, n_features, n_clusters, chunk_rows, dtype, cluster_std, center_box, array_name):
    n_samples = check_int(n_samples, "n_samples", minimum=1)
    n_features = check_int(n_features, "n_features", minimum=1)
    n_clusters = check_int(n_clusters, "n_clusters", minimum=1)
    chunk_rows = check_int(chunk_rows, "chunk_rows", minimum=1, allow_none=True)
    dtype = check_choice(str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype, "dtype", BLOB_DTYPES)
    cluster_std = _DEFAULT_STD[dtype] if cluster_std is None else cluster_std
    cluster_std = check_float(cluster_std, "cluster_std", minimum=0.0)
    low, high = _DEFAULT_BOX[dtype] if center_box is None else center_box
    low = check_float(low, "center_box[0]")
    high = check_float(high, "center_box[1]")
    if not low < high:
        raise InvalidParameterError(f"center_box must be (low, high) with low < high, got {(low, high)}.")
    if not isinstance(array_name, str) or not array_name or "/" in array_name or array_name in ("y", "centers"):
        raise InvalidParameterError(
            f"array_name must be a plain name other than 'y' and 'centers' (which hold the truth), got {array_name!r}."
        )
    return n_samples, n_features, n_clusters, chunk_rows, dtype, cluster_std, (low, high)


def make_blobs_zarr(
    path,
    n_samples,
    n_features,
    n_clusters,
    *,
    chunk_rows=None,
    dtype="float32",
    cluster_std=None,
    center_box=None,
    random_state=None,
    array_name="X",
    overwrite=False,
    client=None,
    storage_options=None,
) -> str:
    """Write isotropic Gaussian blobs to a chunked Zarr group, one chunk at a time.

    The group holds the data ``array_name`` ``(n_samples, n_features)``, the true labels ``y``
    ``(n_samples,)`` int32 and the true centers ``centers`` ``(n_clusters, n_features)`` float64. Each row
    belongs to a cluster drawn uniformly at random. The group is written under a temporary name and moved
    into place when complete, so a failure leaves nothing behind.

    Parameters
    ----------
    path : str or os.PathLike
        Where the Zarr group goes (a local directory, or an fsspec URL zarr accepts).
    n_samples, n_features, n_clusters : int
    chunk_rows : int, optional
        Rows per Zarr chunk; default about 8 MiB of float32 per chunk. Does not change the values.
    dtype : {"float32", "float64", "uint8"}, default "float32"
        ``"uint8"`` gives SIFT-like descriptors: values rounded and clipped to 0..255.
    cluster_std : float, optional
        Noise standard deviation; default 1.0 for floats, 12.0 for uint8.
    center_box : (float, float), optional
        Centers are drawn uniformly in this box; default (-10, 10) for floats, (24, 232) for uint8.
    random_state : int, numpy Generator or None
        Same value, same data (whatever ``chunk_rows`` and ``client``). The seed used is stored in the
        group's attributes.
    array_name : str, default "X"
        Name of the data array in the group.
    overwrite : bool, default False
        Replace an existing output at ``path``.
    client : distributed.Client, optional
        Write the chunks in parallel on this cluster (its workers must see ``path``, or reach its object store
        with ``storage_options``). Without it the chunks are written by local threads.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL ``path`` (``s3://bucket/blobs.zarr``:
        ``{"endpoint_url": ..., "key": ..., "secret": ...}``); they go with every chunk's write. Ignored for a
        local path.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    InvalidParameterError
        A size, dtype or other parameter is invalid.
    OutputExistsError
        ``path`` exists and ``overwrite`` is False.
    """
    n_samples, n_features, n_clusters, chunk_rows, dtype, cluster_std, center_box = _check_blob_params(
        n_samples, n_features, n_clusters, chunk_rows, dtype, cluster_std, center_box, array_name
    )
    seed = seed_from_random_state(random_state)
    chunk_rows = min(chunk_rows or default_chunk_rows(n_samples, n_features), n_samples)
    centers = stage_generator(seed, "make-blobs-centers").uniform(*center_box, size=(n_clusters, n_features))
    storage_options = check_storage_options(storage_options)

    with atomic_output(path, overwrite, storage_options=storage_options) as tmp:
        group = zarr.open_group(store=tmp, mode="w", zarr_format=3, storage_options=zarr_options(tmp, storage_options))
        # dimension names: xarray.open_zarr reads the group (and the labels daskmeans writes beside X)
        group.create_array(
            array_name,
            shape=(n_samples, n_features),
            chunks=(chunk_rows, n_features),
            dtype=dtype,
            dimension_names=("sample", "feature"),
        )
        group.create_array("y", shape=(n_samples,), chunks=(chunk_rows,), dtype="int32", dimension_names=("sample",))
        group.create_array(
            "centers",
            shape=centers.shape,
            chunks=centers.shape,
            dtype="float64",
            dimension_names=("cluster", "feature"),
        )[...] = centers
        group.attrs["daskmeans"] = {
            "kind": "blobs",
            "data": array_name,
            "n_samples": n_samples,
            "n_features": n_features,
            "n_clusters": n_clusters,
            "cluster_std": cluster_std,
            "center_box": list(center_box),
            "dtype": dtype,
            "seed": seed,
        }
        ranges = [[start, min(start + chunk_rows, n_samples)] for start in range(0, n_samples, chunk_rows)]
        writes = map_blocks_delayed(
            _write_rows,
            "make-blobs",
            ranges,
            tmp,
            array_name,
            seed,
            shared(centers, "blob-centers"),
            cluster_std,
            dtype,
            storage_options,
        )
        compute_writes(writes, client)
    return os.fspath(path)


#: Default noise of :func:`make_resampled_zarr`, per value, in the data's units (uint8 SIFT values are 0..255).
RESAMPLE_NOISE_STD = 2.0


def resampled_rows(seed: int, source: np.ndarray, noise_std: float, start: int, stop: int):
    """Rows ``start .. stop - 1`` of a resampled data set: source rows drawn uniformly (with replacement), each
    plus Gaussian noise, in the source's dtype (uint8 rounded and clipped to 0..255).

    Returns
    -------
    values : ndarray (stop - start, d) of the source's dtype
    source_rows : int64 (stop - start,)
        Which source row each row was drawn from.
    """
    count = stop - start
    picks = np.floor(row_uniforms(stage_key(seed, "resample-rows"), start, count) * source.shape[0])
    picks = np.minimum(picks.astype(np.int64), source.shape[0] - 1)
    dtype = str(source.dtype)
    noise = _standard_normal_rows(seed, "resample-noise", source.shape[1], dtype, start, stop)
    noise *= noise.dtype.type(noise_std)
    noise += source[picks].astype(noise.dtype, copy=False)
    return _as_stored(noise, dtype), picks


def resampled_attrs(source, n_samples, noise_std, seed, array_name="X") -> dict:
    """The attributes :func:`make_resampled_zarr` records (under ``"daskmeans"``): equal attributes, equal data."""
    source = np.ascontiguousarray(source)
    return {
        "kind": "resampled",
        "data": array_name,
        "n_samples": int(n_samples),
        "n_features": int(source.shape[1]),
        "source_rows": int(source.shape[0]),
        "source_sha256": hashlib.sha256(source.data).hexdigest(),
        "noise_std": float(noise_std),
        "dtype": str(source.dtype),
        "seed": int(seed),
    }


def _write_resampled(start, stop, path, array_name, seed, source, noise_std, storage_options=None):
    values, _ = resampled_rows(seed, source, noise_std, start, stop)
    options = zarr_options(path, storage_options)
    zarr.open_array(store=path, path=array_name, mode="r+", storage_options=options)[start:stop] = values


def make_resampled_zarr(
    path,
    source,
    n_samples,
    *,
    noise_std=RESAMPLE_NOISE_STD,
    chunk_rows=None,
    random_state=None,
    array_name="X",
    overwrite=False,
    client=None,
    storage_options=None,
) -> str:
    """Write ``n_samples`` rows resampled from real ones, with noise, to a chunked Zarr group, a chunk at a time.

    Row ``i`` is a source row drawn uniformly at random (with replacement) plus independent Gaussian noise of
    standard deviation ``noise_std`` on every value, stored in the source's dtype (uint8 rounded and clipped to
    0..255). Resampled SIFT descriptors keep the real data's cluster structure at any size (a clustering's energy
    on them is about the source's plus ``d x noise_std**2``), which blobs do not. The group is written under a
    temporary name and moved into place when complete; its attributes record the source's shape, dtype and
    SHA-256, the noise and the seed.

    Parameters
    ----------
    path : str or os.PathLike
    source : ndarray (m, d) of uint8, float32 or float64
        The real rows (held by every task that writes a chunk: keep it to a few hundred MB).
    n_samples : int
    noise_std : float, default 2.0
    chunk_rows : int, optional
        Rows per Zarr chunk; default about 8 MiB of float32 per chunk. Does not change the values.
    random_state : int, numpy Generator or None
        Same value and source, same data (whatever ``chunk_rows`` and ``client``).
    array_name : str, default "X"
    overwrite : bool, default False
    client : distributed.Client, optional
        Write the chunks in parallel on this cluster (its workers must see ``path``, or reach its object store
        with ``storage_options``); else local threads.
    storage_options : dict, optional
        Options of the fsspec filesystem of a URL ``path`` (as for :func:`make_blobs_zarr`); they go with every
        chunk's write. Ignored for a local path.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    InvalidParameterError
        ``source`` is not a non-empty 2-D array of a supported dtype, or a size or the noise is invalid.
    OutputExistsError
        ``path`` exists and ``overwrite`` is False.
    """
    source = np.asarray(source)
    if source.ndim != 2 or source.shape[0] == 0 or source.shape[1] == 0:
        raise InvalidParameterError(f"source must be a non-empty 2-D array (rows, features), got shape {source.shape}.")
    check_choice(str(source.dtype), "source dtype", BLOB_DTYPES)
    if source.dtype.kind == "f" and not np.isfinite(source).all():
        raise InvalidParameterError("source holds NaN or infinite values; drop or fill those rows first.")
    n_samples = check_int(n_samples, "n_samples", minimum=1)
    chunk_rows = check_int(chunk_rows, "chunk_rows", minimum=1, allow_none=True)
    noise_std = check_float(noise_std, "noise_std", minimum=0.0)
    if not isinstance(array_name, str) or not array_name or "/" in array_name:
        raise InvalidParameterError(f"array_name must be a plain name, got {array_name!r}.")
    source = np.ascontiguousarray(source)
    seed = seed_from_random_state(random_state)
    n_features = source.shape[1]
    chunk_rows = min(chunk_rows or default_chunk_rows(n_samples, n_features), n_samples)
    storage_options = check_storage_options(storage_options)

    with atomic_output(path, overwrite, storage_options=storage_options) as tmp:
        group = zarr.open_group(store=tmp, mode="w", zarr_format=3, storage_options=zarr_options(tmp, storage_options))
        group.create_array(
            array_name,
            shape=(n_samples, n_features),
            chunks=(chunk_rows, n_features),
            dtype=source.dtype,
            dimension_names=("sample", "feature"),
        )
        group.attrs["daskmeans"] = resampled_attrs(source, n_samples, noise_std, seed, array_name)
        ranges = [[start, min(start + chunk_rows, n_samples)] for start in range(0, n_samples, chunk_rows)]
        # on a cluster, sent to every worker once, not inside the graph
        held = source if client is None else client.scatter([source], broadcast=True, hash=False)[0]
        writes = map_blocks_delayed(
            _write_resampled, "make-resampled", ranges, tmp, array_name, seed, held, noise_std, storage_options
        )
        compute_writes(writes, client)
    return os.fspath(path)
