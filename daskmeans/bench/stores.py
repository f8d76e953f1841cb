"""The bench's Zarr stores: generated data (blobs, resampled descriptors) and files written as stored, each kept
and reused while its attributes say it holds the same data."""

from __future__ import annotations

import os

import numpy as np
import zarr

from ..datasets import (
    _DEFAULT_BOX,
    _DEFAULT_STD,
    RESAMPLE_NOISE_STD,
    make_blobs_zarr,
    make_resampled_zarr,
    resampled_attrs,
)
from ..storage.publish import atomic_output


def _zarr_matches(path, key, attrs) -> bool:
    """Whether a Zarr node at ``path`` exists and its attribute ``key`` is ``attrs`` (then it is reused)."""
    try:
        node = zarr.open(store=path, mode="r")
    except Exception:  # noqa: BLE001 - anything unreadable is rewritten
        return False
    return dict(node.attrs).get(key) == attrs


def ensure_blobs(path, n_samples, n_features, n_blobs, dtype, *, chunk_rows, client=None) -> dict:
    """Synthetic blobs (:func:`daskmeans.datasets.make_blobs_zarr`, seed 0) at ``path``, kept when already there.

    Returns
    -------
    dict
        ``{"path", "array", "reused", "bytes"}``; ``array`` is the path of the data array in the group.
    """
    dtype = str(np.dtype(dtype))
    attrs = {
        "kind": "blobs",
        "data": "X",
        "n_samples": int(n_samples),
        "n_features": int(n_features),
        "n_clusters": int(n_blobs),
        "cluster_std": _DEFAULT_STD[dtype],
        "center_box": list(_DEFAULT_BOX[dtype]),
        "dtype": dtype,
        "seed": 0,
    }
    reused = _zarr_matches(path, "daskmeans", attrs)
    if not reused:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        make_blobs_zarr(
            path,
            n_samples,
            n_features,
            n_blobs,
            chunk_rows=chunk_rows,
            dtype=dtype,
            random_state=0,
            overwrite=True,
            client=client,
        )
    return {
        "path": path,
        "array": os.path.join(path, "X"),
        "reused": reused,
        "bytes": int(n_samples) * int(n_features) * np.dtype(dtype).itemsize,
    }


def ensure_resampled(path, source_rows, n_samples, *, chunk_rows, client=None) -> dict:
    """``n_samples`` rows resampled from ``source_rows`` with the default noise (:func:`make_resampled_zarr`, seed
    0) at ``path``, kept when a store made from the same source, size and noise is already there.

    Returns
    -------
    dict
        ``{"path", "array", "reused", "bytes"}`` as :func:`ensure_blobs`.
    """
    attrs = resampled_attrs(source_rows, n_samples, RESAMPLE_NOISE_STD, 0)
    reused = _zarr_matches(path, "daskmeans", attrs)
    if not reused:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        make_resampled_zarr(
            path, source_rows, n_samples, chunk_rows=chunk_rows, random_state=0, overwrite=True, client=client
        )
    return {
        "path": path,
        "array": os.path.join(path, "X"),
        "reused": reused,
        "bytes": int(n_samples) * int(source_rows.shape[1]) * source_rows.dtype.itemsize,
    }


def write_array_zarr(path, X, chunk_rows, attrs):
    """Write a NumPy array (kept in its dtype, as a user would store it) to a Zarr array at ``path``."""
    if _zarr_matches(path, "daskmeans_bench", attrs):
        return path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_output(path, overwrite=True) as tmp:
        target = zarr.open_array(store=tmp, mode="w", shape=X.shape, chunks=(chunk_rows, X.shape[1]), dtype=X.dtype)
        target.attrs["daskmeans_bench"] = attrs
        for start in range(0, X.shape[0], chunk_rows):
            target[start : start + chunk_rows] = X[start : start + chunk_rows]
    return path
