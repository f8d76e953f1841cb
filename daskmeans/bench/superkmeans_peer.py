"""faiss's SuperKMeans as a peer: Lloyd's iterations with most distances pruned on a prefix of rotated dimensions.

``faiss.SuperKMeans`` (faiss-cpu 1.15 and later) computes, after a first full iteration, each row's distances on
the first ``d_prime`` dimensions of a randomly rotated space by GEMM and prunes the centers that cannot be nearest
before it looks at the other dimensions (ADSampling). Its Python wrapper takes no initial centers (centroids set
before ``train`` are ignored): it seeds itself, so its times include its seeding and it does not start from the
shared initial centers. It runs as a ladder of iteration limits, each rung a fit of its own with the same seed: at
its defaults it trains on faiss's default subsample (``max_points_per_centroid`` rows per center), and on every row
as ``superkmeans-all``.
"""

from __future__ import annotations

import time

import numpy as np

from .traces import Trace, ladder_trace


def _parameters(ctx, n_iterations: int, every_row: bool):
    import faiss

    parameters = faiss.SuperKMeansParameters()
    parameters.niter = int(n_iterations)
    parameters.seed = int(ctx.seed)
    parameters.verbose = False
    if every_row:
        parameters.max_points_per_centroid = ctx.X.shape[0] // ctx.k + 1
    return parameters


def superkmeans_peer(every_row: bool):
    """The run function of the SuperKMeans peer: at faiss's default subsample, or on every row with
    ``every_row``."""

    def run(ctx) -> Trace:
        import faiss

        n, d = ctx.X.shape
        defaults = _parameters(ctx, 1, every_row)
        if d < 2 * defaults.d_prime_min:
            raise ValueError(
                f"faiss.SuperKMeans needs at least {2 * defaults.d_prime_min} features (2 x its d_prime_min); "
                f"this data has {d}. Leave the superkmeans peers out for such data."
            )
        n_train = min(n, ctx.k * defaults.max_points_per_centroid)
        X = np.ascontiguousarray(ctx.X, dtype=np.float32)

        def fit_rung(m):
            model = faiss.SuperKMeans(d, ctx.k, _parameters(ctx, m, every_row))
            start = time.perf_counter()
            model.train(X)
            seconds = time.perf_counter() - start
            centers = faiss.vector_to_array(model.centroids).reshape(ctx.k, d).astype(np.float32)
            return centers, m, seconds, False, m * n_train / n

        where = f"all {n:,} rows" if every_row else f"{n_train:,} of {n:,} rows (faiss default subsample)"
        trace = ladder_trace(
            fit_rung,
            ctx.budget,
            {
                "init": f"its own (SuperKMeansParameters.init_method={defaults.init_method})",
                "max_points_per_centroid": defaults.max_points_per_centroid,
                "training_rows": n_train,
                "d_prime_fraction": defaults.d_prime_fraction,
                "threads": faiss.omp_get_max_threads(),
            },
            [
                f"faiss.SuperKMeans at its defaults, trained on {where}; seeds itself (it takes no initial "
                "centers); each rung a fit of its own; passes = iterations x the fraction trained on"
            ],
        )
        trace.params["niter"] = trace.n_iter
        return trace

    return run
