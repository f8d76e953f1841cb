"""E*'s reference: the energy Lloyd's algorithm converges to from a seed's initial centers, computed once and
cached.

The times in a workload's table are times to come within 1% and 2% of E*. Were E* only the lowest energy any
run reached, a benchmark of peers that all stop early would flatter them; with ``--reference lloyd`` (the
default) E* is the lower of that and the energy of Lloyd's algorithm run from the same initial centers until no
label changes (``tol=0``), or :data:`REFERENCE_MAX_ITER` iterations at most. Lloyd runs as daskmeans
``KMeans(algorithm="auto")`` on the cluster: Lloyd's iterates to the last bit (tested against
``algorithm="lloyd"``), with distance bounds that make the many late iterations of a run to convergence cheap;
its energy is evaluated like every run's, exactly on all rows.

The result is kept in a small JSON cache (``--reference-cache``, default ``OUT/reference-energies.json``) under a
key naming the workload, its shape, ``k``, the seed, a hash of the initial centers and the iteration cap, so that
a converged run of minutes is paid once per (workload, n, k, seed).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

from .._version import __version__
from ..exceptions import InvalidParameterError
from ..registry import make_estimator
from .common import created, write_text

#: ``--reference`` values: the converged Lloyd energy (or lower, if a run goes lower), or the best run only.
REFERENCES = ("lloyd", "best")
#: Iterations the converged Lloyd reference may take before it is taken as it is (and marked not converged).
REFERENCE_MAX_ITER = 300
#: File name of the cache in the output folder unless ``--reference-cache`` names another.
DEFAULT_CACHE_NAME = "reference-energies.json"
CACHE_SCHEMA = "daskmeans-bench-reference/1"


def check_reference(reference, cache_path):
    """Check ``--reference`` and the cache it would read, before any work.

    Raises
    ------
    InvalidParameterError
        An unknown reference, a cache path that is a folder, or a file that is not a readable cache.
    """
    if reference not in REFERENCES:
        raise InvalidParameterError(f"--reference must be one of {', '.join(REFERENCES)}; got {reference!r}.")
    if reference == "lloyd":
        read_cache(cache_path)


def read_cache(path) -> dict:
    """The cache's entries ``{key: entry}`` (empty when the file does not exist yet).

    Raises
    ------
    InvalidParameterError
        ``path`` is a folder, or a file that is not a cache this module wrote.
    """
    if os.path.isdir(path):
        raise InvalidParameterError(f"--reference-cache {path!r} is a folder; name a JSON file.")
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            cache = json.load(f)
    except (OSError, ValueError) as error:
        raise InvalidParameterError(
            f"--reference-cache {path!r} cannot be read as JSON ({error}); delete it (it is rebuilt) or name "
            "another file."
        ) from error
    if not isinstance(cache, dict) or cache.get("schema") != CACHE_SCHEMA or not isinstance(cache.get("entries"), dict):
        raise InvalidParameterError(
            f"--reference-cache {path!r} is not a cache of converged Lloyd energies (schema {CACHE_SCHEMA!r}); "
            "delete it (it is rebuilt) or name another file."
        )
    return cache["entries"]


def cache_key(workload_name, n_samples, n_features, k, seed, init, max_iter=REFERENCE_MAX_ITER) -> str:
    """The cache key of one reference: workload, shape, k, seed, the initial centers' SHA-256 and the cap."""
    digest = hashlib.sha256(np.ascontiguousarray(init, dtype=np.float32).tobytes()).hexdigest()[:16]
    return f"{workload_name} n={n_samples} d={n_features} k={k} seed={seed} init={digest} max_iter={max_iter}"


def converged_lloyd(data, init, seed, client, max_iter=REFERENCE_MAX_ITER) -> dict:
    """Lloyd's algorithm from ``init`` until no label changes or ``max_iter`` iterations.

    Returns
    -------
    dict
        ``{"centers", "implementation", "version", "n_iter", "max_iter", "converged", "seconds"}``.
    """
    k = init.shape[0]
    start = time.perf_counter()
    model = make_estimator(
        "kmeans",
        n_clusters=k,
        init=init,
        algorithm="auto",
        max_iter=max_iter,
        tol=0.0,
        random_state=seed,
        client=client,
        progress=False,
    ).fit(data.fit_input)
    n_iter = int(model.n_iter_)
    converged = model.stop_reason_ == "converged"
    implementation = f"daskmeans KMeans(algorithm='auto' -> {model.algorithm_!r}, tol=0) on the cluster"
    version = __version__
    return {
        "centers": np.asarray(model.cluster_centers_, dtype=np.float32),
        "implementation": implementation,
        "version": version,
        "n_iter": n_iter,
        "max_iter": max_iter,
        "converged": bool(converged),
        "seconds": time.perf_counter() - start,
    }


def lloyd_reference(workload_name, data, init, seed, client, energy, cache_path, max_iter=REFERENCE_MAX_ITER) -> dict:
    """The converged Lloyd energy of one seed: from the cache, or computed (and added to the cache).

    Parameters
    ----------
    workload_name : str
        The workload's output name (``descriptors``, ``mnist-quick``, ``data-points``, ...).
    data : BenchData
    init : ndarray (k, d) float32
        The seed's initial centers, shared by every run.
    seed : int
    client : distributed.Client
    energy : callable
        The bench's exact energy on all rows.
    cache_path : str

    Returns
    -------
    dict
        ``{"seed", "energy", "implementation", "version", "n_iter", "max_iter", "converged", "seconds",
        "created", "key", "cache", "from_cache"}``.
    """
    key = cache_key(workload_name, data.n_samples, data.n_features, init.shape[0], seed, init, max_iter)
    cached = read_cache(cache_path).get(key)
    if cached is not None:
        return {**cached, "seed": seed, "key": key, "cache": cache_path, "from_cache": True}
    run = converged_lloyd(data, init, seed, client, max_iter)
    entry = {name: value for name, value in run.items() if name != "centers"}
    entry.update(energy=float(energy(run["centers"])), created=created())
    entries = read_cache(cache_path)  # again: another workload of this command may have added its own
    entries[key] = entry
    folder = os.path.dirname(os.path.abspath(cache_path))
    os.makedirs(folder, exist_ok=True)
    write_text(cache_path, json.dumps({"schema": CACHE_SCHEMA, "entries": entries}, indent=1, sort_keys=True))
    return {**entry, "seed": seed, "key": key, "cache": cache_path, "from_cache": False}


def reference_or_failure(workload_name, data, init, seed, client, energy, cache_path) -> dict:
    """:func:`lloyd_reference`, or ``{"seed", "error"}`` where it fails (out of memory, say): the runs are still
    worth recording, E* is then the lowest energy any run reached, and the report says why."""
    try:
        return lloyd_reference(workload_name, data, init, seed, client, energy, cache_path)
    except Exception as exc:  # noqa: BLE001 - recorded with its reason
        return {"seed": seed, "error": f"{type(exc).__name__}: {exc}"}


def reference_energies(references) -> list:
    """The energies of the references ``{seed: entry}`` that did not fail."""
    return [entry["energy"] for entry in references.values() if entry.get("energy") is not None]


def describe(entry) -> str:
    """One seed's reference in words, e.g. ``40,991 (scikit-learn ..., converged after 57 iterations, cached)``."""
    if entry.get("error"):
        return f"failed ({entry['error']})"
    ending = (
        f"converged after {entry['n_iter']} iterations"
        if entry["converged"]
        else f"not converged: stopped at the cap of {entry['max_iter']} iterations"
    )
    source = (
        f"read from the cache {entry['cache']}"
        if entry["from_cache"]
        else f"computed in {entry['seconds']:.3g} s and cached in {entry['cache']}"
    )
    return f"{entry['energy']:,.6g} ({entry['implementation']} {entry['version']}, {ending}; {source})"
