"""The peers: other k-means implementations, run on the same data from the same initial centers.

Each peer is timed around its own fit call only; data preparation, center copies and energy evaluation
are outside the timed region. Peers without a way to report intermediate centers run as ladders
(see :mod:`daskmeans.bench.traces`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import time
from collections.abc import Callable
from dataclasses import dataclass

import dask
import numpy as np
from dask.system import CPU_COUNT
from distributed import futures_of

from ..algorithms.two_level import default_coarse_clusters
from ..engine.blas import machine_threads
from ..engine.client import compute_now
from ..engine.random import stage_generator
from .superkmeans_peer import superkmeans_peer
from .traces import LADDER, Candidate, Trace, ladder_trace

#: Snapshots a streaming (mini-batch) peer keeps, spread evenly in log(time) over its budget.
STREAM_SNAPSHOTS = 64


@dataclass
class PeerContext:
    """Everything a peer run gets.

    Attributes
    ----------
    X : ndarray (n, d) float32 or None
        The data in the driver (None when it does not fit there).
    array : dask.array.Array
        The data on the cluster (persisted, or read from Zarr).
    client : distributed.Client
    init : ndarray (k, d) float32
        The initial centers shared by every run of this seed.
    k : int
    seed : int
    budget : float
        Seconds the run may take.
    batch_size : int
        Mini-batch size (mini-batch peers).
    max_iter : int, optional
        Most iterations of faiss on every row (e.g. faiss's default 25, where ``--versus faiss-all@25`` asks for
        it); None: as many as the budget allows, at most ``FAISS_MAX_ITER``.
    driver_memory : int
        Bytes the driver may use for data (``--driver-memory``): bounds the sample ``faiss-sample`` reads.
    converge : bool
        Run to convergence whatever the budget (a ladder of fits that report convergence: its last rung without
        an iteration limit below its ``max_iter``): ``--versus NAME`` takes this run's final energy as the
        yardstick, which must then be its converged one.
    """

    X: np.ndarray | None
    array: object
    client: object
    init: np.ndarray
    k: int
    seed: int
    budget: float
    batch_size: int = 1024
    max_iter: int | None = None
    driver_memory: int = 2**30
    converge: bool = False


@dataclass(frozen=True)
class Peer:
    """A peer: its name, what it needs and how it runs.

    Attributes
    ----------
    name : str
        Name on the command line.
    label : str
        Name in tables and plots.
    module : str
        Module that must be importable.
    in_memory : bool
        Needs the whole data as a NumPy array in the driver.
    run : callable
        ``run(context) -> Trace``.
    distribution : str, optional
        The package whose installed version is reported, where the module's ``__version__`` does not say it
        (``sklearnex`` reports a placeholder).
    iterates : bool
        Its candidates are numbered iterates (``--versus NAME@ITERATION`` can name one).
    attribute : str, optional
        A name the module must have (a class that only newer versions ship).
    """

    name: str
    label: str
    module: str
    in_memory: bool
    run: Callable[[PeerContext], Trace]
    distribution: str | None = None
    iterates: bool = True
    attribute: str | None = None


def availability(peer: Peer) -> tuple[bool, str]:
    """Whether the peer can run here: ``(True, version)`` or ``(False, reason)``."""
    try:
        module = importlib.import_module(peer.module)
    except ImportError as error:
        return False, f"{peer.module} is not installed ({error}); install it (pip install daskmeans[bench])."
    version = str(getattr(module, "__version__", "unknown"))
    if peer.distribution is not None:
        try:
            version = importlib.metadata.version(peer.distribution)
        except importlib.metadata.PackageNotFoundError:
            pass
    if peer.attribute is not None and not hasattr(module, peer.attribute):
        return False, f"{peer.module} {version} has no {peer.attribute}; a newer {peer.module} has it (pip install -U)."
    return True, version


def run_peer(peer: Peer, context: PeerContext) -> Trace:
    """``peer.run(context)`` with the threads a process of its own would give it
    (:func:`~daskmeans.engine.blas.machine_threads`), and so the rungs its trace's ``extend`` runs later to refine
    it: where daskmeans' tasks run in this process the bench holds BLAS at one thread, and that limit must not
    reach the peers."""
    with machine_threads():
        trace = peer.run(context)
    if trace.extend is not None:
        trace.extend = _with_machine_threads(trace.extend)
    return trace


def _with_machine_threads(function):
    def run(*args, **kwargs):
        with machine_threads():
            return function(*args, **kwargs)

    return run


def _timed_fit(function):
    start = time.perf_counter()
    result = function()
    return result, time.perf_counter() - start


# -- scikit-learn KMeans (lloyd / elkan): ladder ------------------------------------------------------------------
def _sklearn_kmeans(algorithm):
    def run(ctx: PeerContext) -> Trace:
        from sklearn.cluster import KMeans

        def fit_rung(m):
            model = KMeans(
                n_clusters=ctx.k, init=ctx.init, n_init=1, max_iter=m, algorithm=algorithm, random_state=ctx.seed
            )
            _, seconds = _timed_fit(lambda: model.fit(ctx.X))
            n_iter = int(model.n_iter_)
            return (np.array(model.cluster_centers_, dtype=np.float32), n_iter, seconds, n_iter < m, float(n_iter + 1))

        return ladder_trace(
            fit_rung,
            ctx.budget,
            {"algorithm": algorithm, "tol": 1e-4, "n_init": 1},
            ["passes = iterations + the final labelling pass"],
            converge=ctx.converge,
        )

    return run


# -- scikit-learn MiniBatchKMeans: snapshots of partial_fit on random batches -------------------------------------
def _sklearn_minibatch(ctx: PeerContext) -> Trace:
    from sklearn.cluster import MiniBatchKMeans

    # scikit-learn needs a batch of at least as many rows as clusters
    batch = max(ctx.batch_size, ctx.k)
    model = MiniBatchKMeans(n_clusters=ctx.k, init=ctx.init, n_init=1, batch_size=batch, random_state=ctx.seed)
    rng = np.random.default_rng(ctx.seed)
    n = ctx.X.shape[0]
    marks = np.geomspace(min(0.02, ctx.budget / 100), ctx.budget, STREAM_SNAPSHOTS)
    candidates = []
    elapsed = 0.0
    steps = 0
    mark = 0
    while elapsed < ctx.budget:
        start = time.perf_counter()
        model.partial_fit(ctx.X[rng.integers(0, n, batch)])
        elapsed += time.perf_counter() - start
        steps += 1
        if elapsed >= marks[mark] or elapsed >= ctx.budget:
            candidates.append(
                Candidate(
                    step=steps,
                    time=elapsed,
                    centers=model.cluster_centers_.astype(np.float32),
                    iteration=steps,
                    passes=steps * batch / n,
                    kind="snapshot",
                )
            )
            while mark < len(marks) - 1 and marks[mark] <= elapsed:
                mark += 1
    candidates[-1].kind = "final"
    return Trace(
        candidates=candidates,
        fit_seconds=elapsed,
        timed_seconds=elapsed,
        n_iter=steps,
        passes=steps * batch / n,
        stop_reason="time_budget",
        params={"batch_size": batch, "method": "partial_fit on uniform random batches"},
        notes=[f"batch {batch}{' (raised to k)' if batch > ctx.batch_size else ''}; passes = rows seen / n"],
    )


# -- scikit-learn-intelex KMeans (oneDAL): ladder -----------------------------------------------------------------
def _sklearnex_kmeans(ctx: PeerContext) -> Trace:
    # oneDAL's KMeans as a class of its own: scikit-learn is not patched, so the scikit-learn peers of the same
    # process still run scikit-learn's own code
    from sklearnex.cluster import KMeans

    def fit_rung(m):
        model = KMeans(n_clusters=ctx.k, init=ctx.init, n_init=1, max_iter=m, algorithm="lloyd", random_state=ctx.seed)
        _, seconds = _timed_fit(lambda: model.fit(ctx.X))
        if not hasattr(model, "_onedal_estimator"):
            raise RuntimeError(
                "scikit-learn-intelex handed this fit to scikit-learn's own KMeans instead of oneDAL (run it with "
                "the 'sklearnex' logger at INFO level to see why); the sklearn-lloyd peer already measures that."
            )
        n_iter = int(model.n_iter_)
        return (np.array(model.cluster_centers_, dtype=np.float32), n_iter, seconds, n_iter < m, float(n_iter + 1))

    return ladder_trace(
        fit_rung,
        ctx.budget,
        {"algorithm": "lloyd", "tol": 1e-4, "n_init": 1, "backend": "oneDAL"},
        [
            "sklearnex.cluster.KMeans (oneDAL), scikit-learn left unpatched; passes = iterations + the "
            "final labelling pass"
        ],
        converge=ctx.converge,
    )


# -- faiss Kmeans: ladder over niter on faiss's default subsample; iteration by iteration on every row --------------
#: faiss's default number of iterations (``faiss.Kmeans(niter=25)``, and per level of its two-level clustering).
FAISS_DEFAULT_NITER = 25
#: Most iterations the stepped faiss run makes (as many as a ladder may).
FAISS_MAX_ITER = 300
#: Centroids the stepped faiss run keeps of every iteration, until they take this many bytes; after that only
#: those of the ladder's iteration counts (and the last).
FAISS_SNAPSHOT_BYTES = 1 << 30


def _faiss_default_subsample(ctx: PeerContext) -> Trace:
    import faiss

    n, d = ctx.X.shape

    def fit_rung(m):
        model = faiss.Kmeans(d, ctx.k, niter=m, seed=ctx.seed, verbose=False)
        _, seconds = _timed_fit(lambda: model.train(ctx.X, init_centroids=ctx.init))
        n_train = min(n, ctx.k * model.cp.max_points_per_centroid)
        return np.array(model.centroids, dtype=np.float32), m, seconds, False, m * n_train / n

    # faiss trains on a random subsample of k * max_points_per_centroid rows when the data has more; each rung
    # draws it again, so the rungs cannot be chained
    probe = faiss.Kmeans(d, ctx.k)
    n_train = min(n, ctx.k * probe.cp.max_points_per_centroid)
    trace = ladder_trace(
        fit_rung,
        ctx.budget,
        {
            "max_points_per_centroid": probe.cp.max_points_per_centroid,
            "training_rows": n_train,
            "threads": faiss.omp_get_max_threads(),
        },
        [f"trains on {n_train:,} of {n:,} rows (faiss default subsample); passes = iterations x that fraction"],
    )
    trace.params["niter"] = trace.n_iter
    return trace


def _faiss_every_row(ctx: PeerContext) -> Trace:
    """faiss on every row, one iteration per ``train`` call, each starting from the centroids the last one left.

    Without a subsample, faiss's ``train(niter=m)`` is m such calls in a row, bit for bit (its empty-cluster
    splits draw from a generator seeded anew in every iteration; tested), so the run costs the time of one fit of
    m iterations, not the sum of a ladder's rungs, and every iterate is a candidate timed as the sum of the calls
    up to it (what ``niter=m`` takes, plus one call's set-up per iteration).
    """
    n = ctx.X.shape[0]
    return _faiss_chained(
        ctx,
        ctx.X,
        0.0,
        1.0,
        [f"trains on all {n:,} rows, one iteration per train call (the same iterates as niter=m); passes = iterations"],
    )


def _faiss_chained(ctx: PeerContext, X, elapsed, fraction, notes) -> Trace:
    """faiss on every row of ``X`` (a ``fraction`` of the data), one ``train`` call per iteration (see
    :func:`_faiss_every_row`), its clock starting at ``elapsed`` seconds."""
    import faiss

    n, d = X.shape
    options = {"max_points_per_centroid": n // ctx.k + 1}
    centers = np.ascontiguousarray(ctx.init, dtype=np.float32)
    candidates = []
    stop = "max_iter"
    max_iter = FAISS_MAX_ITER if ctx.max_iter is None else ctx.max_iter
    for iteration in range(1, max_iter + 1):
        model = faiss.Kmeans(d, ctx.k, niter=1, seed=ctx.seed, verbose=False, **options)
        _, seconds = _timed_fit(lambda: model.train(X, init_centroids=centers))
        elapsed += seconds
        previous, centers = centers, np.array(model.centroids, dtype=np.float32)
        if candidates and candidates[-1].kind == "passing":
            candidates.pop()
        kept = len(candidates) * centers.nbytes < FAISS_SNAPSHOT_BYTES or iteration in LADDER
        candidates.append(
            Candidate(
                step=iteration,
                time=elapsed,
                centers=centers,
                iteration=iteration,
                passes=iteration * fraction,
                kind="snapshot" if kept else "passing",
            )
        )
        if np.array_equal(previous, centers):
            stop = "converged"
            break
        if iteration < max_iter and elapsed + seconds > ctx.budget:
            stop = "time_budget"
            break
    candidates[-1].kind = "final"
    return Trace(
        candidates=candidates,
        fit_seconds=elapsed,
        timed_seconds=elapsed,
        n_iter=len(candidates),
        passes=len(candidates) * fraction,
        stop_reason=stop,
        params={
            "niter": len(candidates),
            "max_points_per_centroid": options["max_points_per_centroid"],
            "training_rows": n,
            "threads": faiss.omp_get_max_threads(),
            "method": "train(niter=1) chained from the last centroids",
        },
        notes=notes,
    )


def sample_chunks(chunk_rows, rows_wanted, seed) -> list:
    """Whole chunks in a seeded random order until they hold ``rows_wanted`` rows: ``(chunk, rows)`` pairs, the
    last one possibly a prefix of its chunk."""
    order = stage_generator(seed, "bench", "faiss-sample").permutation(len(chunk_rows))
    chosen, total = [], 0
    for chunk in order:
        if total >= rows_wanted:
            break
        take = int(min(chunk_rows[chunk], rows_wanted - total))
        chosen.append((int(chunk), take))
        total += take
    return chosen


def _read_sample(ctx: PeerContext, chosen, rows) -> np.ndarray:
    """The rows ``chosen`` (``(chunk, rows)`` pairs) of ``ctx.array`` as one float32 array of ``rows`` rows.

    An array read from a store is read in this process, as a faiss user without a cluster reads it: a few chunks at a
    time on this machine's threads, each copied into the sample as it arrives (the workers, which may have little
    memory, hold none of it). An array whose blocks the workers hold comes from them.
    """
    blocks = [ctx.array.blocks[chunk][:taken] for chunk, taken in chosen]
    on_workers = ctx.client is not None and bool(futures_of(ctx.array))
    groups = [blocks] if on_workers else [blocks[i : i + CPU_COUNT] for i in range(0, len(blocks), CPU_COUNT)]

    def compute(*parts):
        if on_workers:
            return compute_now(*parts, client=ctx.client)
        return dask.compute(*parts, scheduler="threads", num_workers=CPU_COUNT)

    X = np.empty((rows, ctx.array.shape[1]), dtype=np.float32)
    position = 0
    for group in groups:
        for part in compute(*group):
            X[position : position + part.shape[0]] = part
            position += part.shape[0]
    return X


def _faiss_sample(ctx: PeerContext) -> Trace:
    """faiss on the largest sample of the data the driver can hold, read as whole chunks of the store.

    Where the data does not fit in the driver (out of core), the best a faiss user can do is train on a sample:
    as many rows as ``ctx.driver_memory`` holds (as stored and as float32), whole chunks picked in a seeded random
    order (sequential reads; on data whose rows are in random order, a uniform sample), read by this process
    (:func:`_read_sample`). Reading the sample is inside the timed region; then one ``train`` call per iteration on
    all sampled rows.
    """
    n, d = (int(s) for s in ctx.array.shape)
    itemsize = ctx.array.dtype.itemsize
    rows_wanted = int(min(n, max(ctx.k, ctx.driver_memory // (d * (4 + itemsize)))))
    chosen = sample_chunks(ctx.array.chunks[0], rows_wanted, ctx.seed)
    start = time.perf_counter()
    X = _read_sample(ctx, chosen, rows_wanted)
    read_seconds = time.perf_counter() - start
    trace = _faiss_chained(
        ctx,
        X,
        read_seconds,
        rows_wanted / n,
        [
            f"trains on a sample of {rows_wanted:,} of {n:,} rows ({len(chosen)} whole chunks in a seeded random "
            f"order, the most the driver memory budget holds), read in {read_seconds:.1f} s inside the timed "
            "region; one iteration per train call; passes = iterations x the sample's fraction"
        ],
    )
    trace.params.update(
        {"sample_rows": rows_wanted, "sample_chunks": len(chosen), "read_seconds": round(read_seconds, 3)}
    )
    return trace


def _faiss_two_level(ctx: PeerContext) -> Trace:
    """faiss's two-level clustering for large k (``faiss.contrib.clustering.two_level_clustering``), on every row.

    A coarse k-means with ``round(sqrt(k))`` centroids, then each coarse cluster's rows clustered into a number of
    centroids proportional to its size (``rebalance=True``), each level with faiss's default 25 iterations. It
    seeds itself (random rows of each sub-problem), so it does not start from the shared initial centers; one
    candidate: the centroids it returns.
    """
    import faiss
    from faiss.contrib.clustering import two_level_clustering

    n, d = ctx.X.shape
    n_coarse = default_coarse_clusters(ctx.k)
    (centroids, _), seconds = _timed_fit(
        lambda: two_level_clustering(
            ctx.X, n_coarse, ctx.k, rebalance=True, clustering_niter=FAISS_DEFAULT_NITER, seed=ctx.seed, verbose=False
        )
    )
    centroids = np.ascontiguousarray(centroids, dtype=np.float32)
    if centroids.shape != (ctx.k, d):
        raise RuntimeError(f"faiss two-level clustering returned {centroids.shape[0]} centroids, not {ctx.k}")
    final = Candidate(step=1, time=seconds, centers=centroids, iteration=None, passes=None, kind="final")
    return Trace(
        candidates=[final],
        fit_seconds=seconds,
        timed_seconds=seconds,
        stop_reason="max_iter",
        params={
            "init": "two-level (faiss.contrib.clustering)",
            "coarse_centroids": n_coarse,
            "niter_per_level": FAISS_DEFAULT_NITER,
            "training_rows": n,
            "threads": faiss.omp_get_max_threads(),
        },
        notes=[
            f"faiss.contrib.clustering.two_level_clustering: {n_coarse} coarse centroids (max 2000 "
            "training rows each), then every coarse cluster's rows into centroids in proportion to its "
            f"size; {FAISS_DEFAULT_NITER} iterations per level; seeds itself"
        ],
    )


# -- dask-ml KMeans: ladder on the cluster -----------------------------------------------------------------------------
def _dask_ml(ctx: PeerContext) -> Trace:
    from dask_ml.cluster import KMeans

    def fit_rung(m):
        model = KMeans(n_clusters=ctx.k, init=ctx.init, max_iter=m, random_state=ctx.seed)
        _, seconds = _timed_fit(lambda: model.fit(ctx.array))
        n_iter = int(model.n_iter_)
        return np.array(model.cluster_centers_, dtype=np.float32), n_iter, seconds, n_iter < m, float(n_iter + 1)

    return ladder_trace(
        fit_rung, ctx.budget, {"tol": 1e-4}, ["on the same cluster and dask array as daskmeans"], converge=ctx.converge
    )


PEERS: dict[str, Peer] = {
    "sklearn-lloyd": Peer("sklearn-lloyd", "scikit-learn KMeans (lloyd)", "sklearn", True, _sklearn_kmeans("lloyd")),
    "sklearn-elkan": Peer("sklearn-elkan", "scikit-learn KMeans (elkan)", "sklearn", True, _sklearn_kmeans("elkan")),
    "sklearn-minibatch": Peer("sklearn-minibatch", "scikit-learn MiniBatchKMeans", "sklearn", True, _sklearn_minibatch),
    "sklearn-intelex": Peer(
        "sklearn-intelex",
        "scikit-learn-intelex KMeans (oneDAL)",
        "sklearnex",
        True,
        _sklearnex_kmeans,
        distribution="scikit-learn-intelex",
    ),
    "faiss": Peer("faiss", "faiss Kmeans (default subsample)", "faiss", True, _faiss_default_subsample),
    "faiss-all": Peer("faiss-all", "faiss Kmeans (all rows)", "faiss", True, _faiss_every_row),
    "faiss-sample": Peer(
        "faiss-sample", "faiss Kmeans (largest sample the driver holds)", "faiss", False, _faiss_sample
    ),
    "faiss-two-level": Peer(
        "faiss-two-level", "faiss two-level clustering", "faiss", True, _faiss_two_level, iterates=False
    ),
    "superkmeans": Peer(
        "superkmeans",
        "faiss SuperKMeans (default subsample)",
        "faiss",
        True,
        superkmeans_peer(every_row=False),
        attribute="SuperKMeans",
    ),
    "superkmeans-all": Peer(
        "superkmeans-all",
        "faiss SuperKMeans (all rows)",
        "faiss",
        True,
        superkmeans_peer(every_row=True),
        attribute="SuperKMeans",
    ),
    "dask-ml": Peer("dask-ml", "dask-ml KMeans", "dask_ml", False, _dask_ml),
}
