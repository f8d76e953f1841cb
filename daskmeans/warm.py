"""Compile (or load from Numba's on-disk cache) every kernel a fit runs, before the first fit.

daskmeans' kernels are Numba functions, compiled on first use for each combination of argument types and kept in
Numba's on-disk cache (:mod:`daskmeans._numba_cache`). Without a warm-up, the first fit after installing compiles
the kernels on its code path inside ``fit``, past any ``max_time``, and the first fit of
each new process loads them from the cache. :func:`warm_up` does both ahead of time: it runs the worker preload's
kernels (:func:`daskmeans.preload.warm_kernels`) and small fits of every algorithm along each of its code paths
(bound schemes, seeding methods, kernels, input dtypes) on Dask's threaded scheduler in this process, which run the
same kernels with the same argument types as the driver and the workers of a cluster do; given a ``client``, each
worker does the same in a task of its own.

Run ``daskmeans warm`` once after installing (the container image does it when it is built), and
``daskmeans.warm_up(client)`` at the start of a session whose first fit has a tight ``max_time``.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from dataclasses import dataclass, field

import dask
import numpy as np
from numba.core.dispatcher import Dispatcher

from . import preload
from .engine.slabs import compute_dtype
from .estimators.kernel import MiniBatchKernelKMeans
from .estimators.kernel_full import KernelKMeans
from .estimators.kmeans import KMeans
from .estimators.minibatch import MiniBatchKMeans, NestedMiniBatchKMeans
from .estimators.mixture import CoresetGaussianMixture
from .estimators.vrkm import VRKMeans
from .exceptions import InputDataError

#: The input dtypes warmed by default: float32 and float64, computed as they are, and uint8 (image descriptors),
#: which the kernels read as stored and compute in float32. Every other stored dtype (int8, int16, float16, ...) is
#: read as stored too, so its kernels are compiled for it: name it in ``dtypes`` where the data comes in it.
INPUT_DTYPES = ("float32", "float64", "uint8")

#: Rows of the small data the warm-up fits (enough for every seeding method and a few iterations of each path).
WARM_ROWS = 2000

#: The kernels of kernel k-means, with parameters that suit the small data.
KERNELS = (
    ("rbf", {"kappa": 1.0}),
    ("laplacian", {"kappa": 1.0}),
    ("polynomial", {"degree": 2, "gamma": 0.1, "coef0": 1.0}),
)


@dataclass
class WarmReport:
    """What :func:`warm_up` did.

    Attributes
    ----------
    seconds : float
        Wall time of the warm-up in this process.
    kernels : int
        daskmeans kernels (Numba dispatchers) with at least one compiled signature in this process.
    compiled : int
        Signatures compiled (not found in the cache) during the warm-up; 0 once the cache is warm.
    loaded : int
        Signatures loaded from the on-disk cache during the warm-up.
    cache_dir : str or None
        Where Numba caches the kernels.
    workers : dict
        Worker address -> seconds its warm-up took (empty without a client).

    Examples
    --------
    >>> from daskmeans import WarmReport
    >>> report = WarmReport(seconds=2.5, kernels=40, compiled=0, loaded=77, cache_dir="/var/cache/numba")
    >>> print(report.summary())
    warmed 40 kernels in 2.5 s: 0 signatures compiled, 77 loaded from the cache (cache: /var/cache/numba)
    """

    seconds: float
    kernels: int
    compiled: int
    loaded: int
    cache_dir: str | None
    workers: dict = field(default_factory=dict)

    def summary(self) -> str:
        """One line for people."""
        where = f" (cache: {self.cache_dir})" if self.cache_dir else ""
        text = (
            f"warmed {self.kernels} kernels in {self.seconds:.1f} s: {self.compiled} signatures compiled, "
            f"{self.loaded} loaded from the cache{where}"
        )
        if self.workers:
            text += f"; {len(self.workers)} workers warmed in at most {max(self.workers.values()):.1f} s"
        return text


def kernel_dispatchers() -> dict[str, Dispatcher]:
    """The Numba kernels of every daskmeans module imported so far, by qualified name."""
    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "daskmeans" or name.startswith("daskmeans.")):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Dispatcher):
                found[f"{value.py_func.__module__}.{value.py_func.__qualname__}"] = value
    return found


def compiled_kernels() -> list[str]:
    """The names of the daskmeans kernels with at least one signature compiled or loaded in this process."""
    return sorted(name for name, dispatcher in kernel_dispatchers().items() if dispatcher.signatures)


def cache_statistics() -> dict[str, tuple[int, int]]:
    """Kernel name -> ``(compiled, loaded)``: the signatures of that kernel this process compiled (not found in the
    on-disk cache) and loaded from the cache so far; kernels with neither are left out."""
    statistics = {}
    for name, dispatcher in kernel_dispatchers().items():
        stats = dispatcher.stats
        counts = (sum(stats.cache_misses.values()), sum(stats.cache_hits.values()))
        if any(counts):
            statistics[name] = counts
    return statistics


def cache_counts() -> tuple[int, int]:
    """``(compiled, loaded)`` summed over :func:`cache_statistics`."""
    statistics = cache_statistics().values()
    return sum(compiled for compiled, _ in statistics), sum(loaded for _, loaded in statistics)


def _small_data(dtype, n_features, seed=0):
    """``WARM_ROWS`` rows of ``dtype`` around 12 centers, in 0..100 (which every real dtype holds)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(20.0, 80.0, size=(12, n_features))
    rows = centers[rng.integers(0, 12, WARM_ROWS)] + rng.normal(0.0, 5.0, size=(WARM_ROWS, n_features))
    return np.clip(rows, 0, 100).astype(dtype)


def kmeans_fits(n_clusters, init):
    """Exact k-means with each bound scheme (from the centers ``init``) and each seeding method."""
    fits = [
        KMeans(n_clusters, init=init, algorithm=algorithm, max_iter=6)
        for algorithm in ("auto", "lloyd", "elkan", "yinyang", "hamerly")
    ]
    seedings = ("k-means||", "k-means++", "random", "afk-mc2", "two-level")
    return fits + [KMeans(n_clusters, init=seeding, max_iter=2) for seeding in seedings]


def minibatch_fits(n_clusters, init):
    """Nested mini-batch k-means with each bound scheme, mini-batch k-means with each sampling, VRKM and VRKM++."""
    fits = [
        NestedMiniBatchKMeans(n_clusters, init=init, bounds=bounds, initial_batch_size=200, max_iter=12)
        for bounds in ("auto", "elkan", "yinyang", "hamerly", "none")
    ]
    fits += [MiniBatchKMeans(n_clusters, init=init, sampling=sampling, max_iter=3) for sampling in ("rows", "chunks")]
    fits += [VRKMeans(n_clusters, init=init, variant=variant, max_epochs=2) for variant in ("vrkm", "vrkm++")]
    return fits


def other_fits(n_clusters, init):
    """vc-GMM (E-steps on the driver and on the workers, seeded by itself) and kernel k-means with each kernel."""
    fits = [
        CoresetGaussianMixture(n_clusters, coreset_size=500, max_iter=3, estep_on=placement)
        for placement in ("driver", "workers")
    ]
    for kernel, params in KERNELS:
        common = {"init": init, "kernel": kernel, "kernel_params": params, "max_iter": 3}
        fits.append(MiniBatchKernelKMeans(n_clusters, batch_size=200, **common))
        fits.append(KernelKMeans(n_clusters, max_samples=WARM_ROWS, **common))
    return fits


#: (features, clusters, fits): small k on few features (the direct loops, two yinyang groups), k in the hundreds on
#: more features (BLAS distances, many yinyang groups, panel scans).
SHAPES = (
    (8, 20, (kmeans_fits, minibatch_fits, other_fits)),
    (32, 300, (kmeans_fits, minibatch_fits)),
)


def warm_fits(dtypes):
    """Fit every path of :data:`SHAPES` on rows of each of ``dtypes``, and predict and transform with each fit."""
    for dtype in dtypes:
        for n_features, n_clusters, families in SHAPES:
            X = _small_data(dtype, n_features)
            init = np.asarray(X[:: WARM_ROWS // n_clusters][:n_clusters], dtype=np.float64)
            for family in families:
                for estimator in family(n_clusters, init):
                    estimator.set_params(random_state=0)
                    estimator.fit(X)
                    estimator.predict(X[:50])
                    if hasattr(estimator, "transform"):
                        estimator.transform(X[:50])


def warm_here(dtypes) -> float:
    """The preload's kernels and :func:`warm_fits` in this process (the driver, or a worker's thread); its seconds."""
    start = time.perf_counter()
    preload.warm_kernels()
    with dask.config.set(scheduler="threads"):
        warm_fits(dtypes)
    return time.perf_counter() - start


def warm_workers(client, dtypes) -> dict:
    """Worker address -> future of :func:`warm_here` run as a task on that worker (on its threads, so that its event
    loop keeps answering the scheduler while the kernels compile)."""
    token = uuid.uuid4().hex
    return {
        address: client.submit(
            warm_here, dtypes, key=f"daskmeans-warm-{token}-{i}", workers=[address], allow_other_workers=False
        )
        for i, address in enumerate(client.scheduler_info(n_workers=-1)["workers"])
    }


def check_dtypes(dtypes) -> list:
    """``dtypes`` (a sequence of dtypes, or one) as NumPy dtypes, each one daskmeans computes with.

    Raises
    ------
    InputDataError
        A name that is not a NumPy dtype, a dtype that is not a real number, or no dtype at all.
    """
    if isinstance(dtypes, (str, np.dtype, type)):
        dtypes = [dtypes]  # one dtype, not a sequence of them (a string is not a sequence of one-letter codes)
    checked = []
    for dtype in dtypes:
        try:
            compute_dtype(np.dtype(dtype))
        except (TypeError, InputDataError) as error:
            raise InputDataError(
                f"Cannot warm the kernels for the dtype {dtype!r}: daskmeans clusters real numbers (floats and "
                "integers), stored as a NumPy dtype such as 'float32', 'uint8' or 'int16'."
            ) from error
        checked.append(np.dtype(dtype))
    if not checked:
        raise InputDataError("No dtype to warm the kernels for: name at least one, such as 'float32'.")
    return checked


def warm_up(client=None, dtypes=INPUT_DTYPES) -> WarmReport:
    """Compile (or load from the cache) every daskmeans kernel in this process, and on ``client``'s workers.

    Parameters
    ----------
    client : distributed.Client, optional
        Also warm every kernel on each of its workers, in a task of its own there, while this process warms its
        own (``--preload daskmeans.preload`` warms a worker's pass kernels when it starts, for float32, float64 and
        uint8 rows).
    dtypes : dtype or sequence of dtypes, default :data:`INPUT_DTYPES`
        The dtypes the data comes in (as stored): each takes kernels compiled for it.

    Returns
    -------
    WarmReport

    Raises
    ------
    InputDataError
        One of ``dtypes`` is not a real-number NumPy dtype.

    Notes
    -----
    Its own fits run on Dask's threaded scheduler, chosen by the Dask setting ``scheduler``, which holds for the
    whole process while they run: call it before fitting, not beside a fit in another thread.

    Examples
    --------
    >>> import daskmeans
    >>> report = daskmeans.warm_up()  # doctest: +SKIP
    >>> report.compiled  # doctest: +SKIP
    0
    """
    dtypes = check_dtypes(dtypes)
    start = time.perf_counter()
    compiled, loaded = cache_counts()
    on_workers = warm_workers(client, dtypes) if client is not None else {}
    warm_here(dtypes)
    workers = dict(zip(on_workers, client.gather(list(on_workers.values())))) if on_workers else {}
    now_compiled, now_loaded = cache_counts()
    dispatchers = kernel_dispatchers()
    with_signatures = [dispatchers[name] for name in compiled_kernels()]
    return WarmReport(
        seconds=time.perf_counter() - start,
        kernels=len(with_signatures),
        compiled=now_compiled - compiled,
        loaded=now_loaded - loaded,
        cache_dir=os.path.commonpath([d.stats.cache_path for d in with_signatures]) if with_signatures else None,
        workers=workers,
    )
