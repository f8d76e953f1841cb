"""``daskmeans info``: what a model or a data set says of itself, from metadata only (no chunk is read)."""

from __future__ import annotations

import os

import click

from ..exceptions import InputDataError, InvalidParameterError
from ..registry import ALGORITHMS
from .common import emit, format_bytes, storage_option

# -- info -------------------------------------------------------------------------------------------------------------


def _model_info(path: str, group) -> dict:
    """What a model file says of itself: its JSON attributes and its arrays' metadata (no chunk is read)."""
    attrs = dict(group.attrs)
    estimator = attrs.get("estimator")
    params = attrs.get("params") or {}
    scalars = attrs.get("scalars") or {}
    if not isinstance(params, dict) or not isinstance(scalars, dict) or not isinstance(estimator, str):
        raise InputDataError(f"{path!r} is a damaged daskmeans model: its attributes are not what a model holds.")
    algorithm = next((name for name, (_, cls_name, _) in ALGORITHMS.items() if cls_name == estimator), None)
    centers = next((group[name] for name in ("cluster_centers", "means") if name in group.array_keys()), None)
    history = attrs.get("history") or []
    return {
        "kind": "model",
        "path": path,
        "estimator": estimator,
        "algorithm": algorithm,
        "n_clusters": params.get("n_clusters", params.get("n_components")),
        "n_features": scalars.get("n_features_in_"),
        "centers_dtype": None if centers is None else str(centers.dtype),
        "inertia": scalars.get("inertia_"),
        "n_iter": scalars.get("n_iter_"),
        "stop_reason": scalars.get("stop_reason_"),
        "fit_seconds": history[-1].get("wall_time") if history and isinstance(history[-1], dict) else None,
        "params": params,
        "daskmeans_version": attrs.get("daskmeans_version"),
        "format_version": attrs.get("format_version"),
    }


def _array_info(name: str, array) -> dict:
    import numpy as np

    shape = tuple(int(s) for s in array.shape)
    dtype = np.dtype(array.dtype)
    chunks = getattr(array, "chunks", shape)  # a .npy or .npz array is one chunk
    chunks = [int(c) for c in chunks]
    return {
        "name": name,
        "shape": list(shape),
        "dtype": str(dtype),
        "chunks": chunks,
        "nbytes": int(np.prod(shape, dtype=np.int64)) * dtype.itemsize,
    }


def _data_info(path: str, node, array: str | None, storage_options: dict | None = None) -> dict:
    import zarr

    from ..storage.sources import array_paths, open_source, stored_bytes

    if node is None or array is not None and isinstance(node, zarr.Group):
        # .npy, .npz, or a missing array name: open_source says what is wrong
        source, _ = open_source(path, array, storage_options)
        arrays = [_array_info(array or "X", source)]
    elif isinstance(node, zarr.Group):
        arrays = [_array_info(name, node[name]) for name in array_paths(node)]
    else:
        if array is not None:
            raise InputDataError(f"{path!r} is a Zarr array, not a group; drop --array {array}.")
        arrays = [_array_info(os.path.basename(path.rstrip("/")), node)]
    info = {"kind": "data", "path": path, "arrays": arrays, "stored_bytes": stored_bytes(path)}
    if isinstance(node, zarr.Group) and isinstance(node.attrs.get("daskmeans"), dict):
        info["generator"] = dict(node.attrs["daskmeans"])
    return info


@click.command("info", short_help="Describe a model or a data set.")
@click.argument("path", metavar="MODEL|INPUT")
@click.option("--array", metavar="NAME", help="Describe only this array of a Zarr group (its path: X, or sub/X).")
@storage_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of text.")
def info(path, array, storage_options, as_json):
    """Describe a model (estimator, parameters, k, d, inertia, ...) or a data set (shape, dtype, chunks, size).

    MODEL|INPUT may be a URL (s3://bucket/data.zarr), read with --storage-option.
    """
    import zarr

    from ..storage.model import FORMAT
    from ..storage.publish import check_complete, is_local, zarr_options
    from ..storage.remote import missing_bucket, store_error

    if is_local(path) and not os.path.exists(path):
        raise FileNotFoundError(f"Nothing at {path!r}. Check the path.")
    node = None
    if not path.lower().rstrip("/").endswith((".npy", ".npz")):
        if is_local(path) and os.path.isfile(path):
            raise InputDataError(f"{path!r} is a file, not a Zarr store, a model, a .npy or a .npz file.")
        try:
            node = zarr.open(store=path, mode="r", storage_options=zarr_options(path, storage_options))
        except (zarr.errors.NodeNotFoundError, FileNotFoundError) as error:
            if not is_local(path):
                missing = missing_bucket(path, storage_options)
                if missing is not None:
                    raise missing from error
                check_complete(path, repr(path), InputDataError, storage_options)  # nothing there, or a part
            raise InputDataError(f"{path!r} is neither a daskmeans model nor a Zarr store: {error}") from error
        except Exception as error:
            raised = error if is_local(path) else store_error(path, error, storage_options)
            if raised is error:
                raise
            raise raised from error
    if isinstance(node, zarr.Group) and node.attrs.get("format") == FORMAT:
        if array is not None:
            raise InvalidParameterError(f"{path!r} is a model; --array applies to data only.")
        details = _model_info(path, node)
        lines = [
            f"{path}: daskmeans model ({details['estimator']}, format {details['format_version']}, "
            f"written by daskmeans {details['daskmeans_version']})"
        ]
        for key in (
            "algorithm",
            "n_clusters",
            "n_features",
            "centers_dtype",
            "inertia",
            "n_iter",
            "stop_reason",
            "fit_seconds",
        ):
            value = details[key]
            lines.append(f"  {key:<14}{value:.6g}" if isinstance(value, float) else f"  {key:<14}{value}")
        shown = {k: v for k, v in details["params"].items() if v is not None}
        lines.append("  params        " + ", ".join(f"{k}={v}" for k, v in sorted(shown.items())))
    else:
        details = _data_info(path, node, array, storage_options)
        stored = details["stored_bytes"]
        lines = [f"{path}: data" + (f" ({format_bytes(stored)} on disk)" if stored is not None else "")]
        for item in details["arrays"]:
            shape = " x ".join(f"{s:,}" for s in item["shape"])
            lines.append(
                f"  {item['name']:<10}{shape} {item['dtype']}, chunks {tuple(item['chunks'])}, "
                f"{format_bytes(item['nbytes'])} uncompressed"
            )
        if "generator" in details:
            gen = details["generator"]
            lines.append(
                f"  made by daskmeans make-data: {gen.get('n_clusters')} blobs, seed {gen.get('seed')}, "
                f"cluster_std {gen.get('cluster_std')}"
            )
    emit(details, as_json, lines)
