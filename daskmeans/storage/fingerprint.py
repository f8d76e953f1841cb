"""What identifies a fit, so that a checkpoint is resumed by that fit only.

A fingerprint is a JSON document: the estimator class, its parameters (arrays as digests), the data's shape,
dtype and row chunking, and, once the summary pass has run, a digest of its statistics and its hash of every
row (:func:`content_digest`). :mod:`daskmeans.storage.checkpoint` stores it in every version and compares it with
the fingerprint of the fit that opens the checkpoint. Changing what goes into it makes every checkpoint written
before refused as "written by another fit": raise ``daskmeans.storage.checkpoint.FORMAT_VERSION`` with it, so that
those are refused as "written by an older format" instead.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .zarr_safe import to_jsonable

#: Parameters that change neither the result nor the state (where and how a fit is shown, exact k-means'
#: ``algorithm``: with bounds or without, and ``driver_rows``: iterations on the driver or on the workers, the same
#: iterates to the last bit; a checkpoint resumes either way).
UNTRACKED_PARAMS = ("client", "progress", "snapshot_centers", "algorithm", "driver_rows")


def digest(*parts) -> str:
    """A short SHA-256 hex digest of arrays (their bytes) and other values (their ``repr``)."""
    sha = hashlib.sha256()
    for part in parts:
        sha.update(np.ascontiguousarray(part).tobytes() if isinstance(part, np.ndarray) else repr(part).encode())
        sha.update(b"|")
    return sha.hexdigest()[:32]


def _param_object(value):
    """A parameter that is not a number, string or list: an array by its digest, anything else by its type."""
    if isinstance(value, np.ndarray):
        return {"array": list(value.shape), "dtype": str(value.dtype), "sha256": digest(value)}
    return {"object": type(value).__name__}


def fit_fingerprint(estimator, data, weights) -> dict:
    """What identifies a fit before reading the data: estimator, parameters, shape, dtype and chunking.

    Parameters
    ----------
    estimator : ClusteringEstimator
    data : daskmeans.storage.io.Dataset
    weights : dask.array.Array or None

    Returns
    -------
    dict
    """
    chunks = tuple(int(c) for c in data.array.chunks[0])
    params = {
        name: to_jsonable(value, convert=_param_object)
        for name, value in sorted(estimator.get_params().items())
        if name not in UNTRACKED_PARAMS
    }
    return {
        "estimator": type(estimator).__name__,
        "params": params,
        "shape": [data.n_samples, data.n_features],
        "dtype": str(data.dtype),
        "source_dtype": str(np.dtype(data.source_dtype)),
        "row_chunks": {"count": len(chunks), "largest": max(chunks), "sha256": digest(chunks)},
        "weighted": weights is not None,
    }


def content_digest(summary) -> dict:
    """What the summary pass, which every fit makes anyway, tells of the data's values.

    ``statistics``: a digest of the mean, variance, extremes, total weight and n; ``rows``: the pass's
    :func:`~daskmeans.passes.summary.row_hash` (16 hex digits), which changes with any row's value or position
    (rows permuted, values swapped within a column) and is the same for any chunking of the rows.

    Returns
    -------
    dict
    """
    return {
        "statistics": digest(
            np.asarray(summary.mean, dtype=np.float64),
            np.asarray(summary.variance, dtype=np.float64),
            float(summary.max_abs),
            float(summary.total_weight),
            int(summary.n_samples),
        ),
        "rows": f"{int(summary.row_hash):016x}",
    }


def content_differences(saved, current: dict) -> str:
    """How the data of a checkpoint (``saved`` :func:`content_digest`) differs from the data now, in words."""
    if not isinstance(saved, dict):
        return "its data fingerprint is of an older format"
    if saved.get("statistics") != current["statistics"]:
        return (
            "its values or their order differ (statistics digest "
            f"{saved.get('statistics')!r} in the checkpoint, {current['statistics']!r} now; row hash "
            f"{saved.get('rows')!r} in the checkpoint, {current['rows']!r} now)"
        )
    return (
        "the rows differ with the same mean, variance, extremes and weight: rows permuted, values moved within "
        f"a column or weights reordered (row hash {saved.get('rows')!r} in the checkpoint, {current['rows']!r} "
        "now)"
    )


def differences(saved: dict, current: dict) -> list[str]:
    """What differs between two fingerprints, one phrase per difference (parameters one by one)."""
    found = []
    for key in sorted(set(saved) | set(current)):
        if key == "params" and isinstance(saved.get(key), dict) and isinstance(current.get(key), dict):
            for name in sorted(set(saved[key]) | set(current[key])):
                if saved[key].get(name) != current[key].get(name):
                    found.append(
                        f"parameter {name}: {saved[key].get(name)!r} in the checkpoint, {current[key].get(name)!r} now"
                    )
        elif saved.get(key) != current.get(key):
            found.append(f"{key}: {saved.get(key)!r} in the checkpoint, {current.get(key)!r} now")
    return found
