"""Driver scripts run on a host of the multi-host cluster: ``python driver.py ACTION ...``.

Actions: ``probe`` (wait for the S3 server and the workers), ``write-data`` (seeded blobs into a Zarr store on
S3, the bucket made if missing), ``read-back`` (``daskmeans.load`` a model, print its class and centers, and
labels arrays), ``fit`` (the Python API on the cluster, storage options given once),
``workers`` (each worker's environment, working directory and the files in it). Arrays are printed as JSON with
the ``.npy`` bytes in base64, so the test process gets them bit for bit. The script imports nothing of the tests,
so it runs with the working directory of the host (which must stay empty).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import sys
import time
import urllib.error
import urllib.request

import numpy as np


def blob_data(n_samples: int, n_features: int, n_centers: int, seed: int) -> np.ndarray:
    """Gaussian blobs around ``n_centers`` random means, float64, the same for the same arguments anywhere."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(-10, 10, size=(n_centers, n_features))
    return means[rng.integers(0, n_centers, n_samples)] + rng.standard_normal((n_samples, n_features))


def encode(array) -> str:
    """``array`` as base64 of its ``.npy`` bytes (dtype and every bit kept)."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode()


def decode(text: str) -> np.ndarray:
    """The array :func:`encode` wrote."""
    return np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False)


def probe(args) -> None:
    """Wait until the S3 endpoint answers HTTP and ``--workers`` workers have joined the scheduler."""
    deadline = time.monotonic() + args.timeout
    while True:
        try:
            urllib.request.urlopen(f"{args.s3}/moto-api/", timeout=2).close()
            break
        except urllib.error.HTTPError:
            break
        except OSError as error:
            if time.monotonic() > deadline:
                sys.exit(f"the S3 server at {args.s3} did not answer within {args.timeout:.0f} s: {error}")
            time.sleep(0.2)
    from distributed import Client

    left = max(1.0, deadline - time.monotonic())
    try:
        with Client(args.scheduler, timeout=left, set_as_default=False) as client:
            client.wait_for_workers(args.workers, timeout=max(1.0, deadline - time.monotonic()))
    except (OSError, TimeoutError) as error:
        sys.exit(f"the scheduler at {args.scheduler} did not get {args.workers} workers within the time: {error}")


def write_data(args) -> None:
    """Write :func:`blob_data` to ``args.url`` as the array ``--array`` of a Zarr group, in chunks of
    ``--chunk-rows`` rows."""
    import s3fs
    import zarr

    options = json.loads(args.storage_options)
    bucket = args.url.split("://", 1)[1].split("/", 1)[0]
    filesystem = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    if not filesystem.exists(bucket):
        filesystem.mkdir(bucket)
    data = blob_data(args.rows, args.features, args.centers, args.seed)
    group = zarr.open_group(store=args.url, mode="w", storage_options=options)
    group.create_array(args.array, shape=data.shape, chunks=(args.chunk_rows, data.shape[1]), dtype=data.dtype)[:] = (
        data
    )


def read_back(args) -> None:
    """Print ``{"class", "centers", "labels"}``: the model at ``--model`` read with ``daskmeans.load`` and each
    ``--labels`` Zarr array, all with the storage options."""
    import zarr

    import daskmeans

    options = json.loads(args.storage_options)
    result: dict = {"labels": []}
    if args.model:
        model = daskmeans.load(args.model, storage_options=options)
        result.update({"class": type(model).__name__, "centers": encode(model.cluster_centers_)})
    for url in args.labels:
        result["labels"].append(encode(zarr.open_array(url, mode="r", storage_options=options)[:]))
    print(json.dumps(result))


def fit(args) -> None:
    """Fit ``--algorithm`` on the cluster through the Python API, the input opened in blocks of ``--chunk-rows``
    rows with the storage options; print ``{"centers", "workers"}`` (the workers that ran a task)."""
    from distributed import Client, get_task_stream

    import daskmeans
    from daskmeans.registry import make_estimator

    options = json.loads(args.storage_options)
    with Client(args.scheduler, set_as_default=False) as client:
        data = daskmeans.open_input(args.url, array=args.array, chunk_rows=args.chunk_rows, storage_options=options)
        estimator = make_estimator(args.algorithm, n_clusters=args.k, random_state=args.seed, progress=False)
        estimator.set_params(client=client)
        with get_task_stream(client) as stream:
            estimator.fit(data)
        workers = sorted({task["worker"] for task in stream.data})
    print(json.dumps({"centers": encode(estimator.cluster_centers_), "workers": workers}))


def workers(args) -> None:
    """Print, for each worker, its ``AWS_*`` and ``DASK_*`` variables, its working directory and the files in
    ``/tmp`` as the worker sees them."""
    from distributed import Client

    def report():
        import os

        names = {key: value for key, value in os.environ.items() if key.startswith(("AWS_", "DASK_"))}
        return {"environment": names, "cwd": os.getcwd(), "tmp": sorted(os.listdir("/tmp"))}

    with Client(args.scheduler, set_as_default=False) as client:
        print(json.dumps(client.run(report)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    command = actions.add_parser("probe")
    command.add_argument("--s3", required=True)
    command.add_argument("--scheduler", required=True)
    command.add_argument("--workers", type=int, required=True)
    command.add_argument("--timeout", type=float, default=120)
    command.set_defaults(run=probe)
    command = actions.add_parser("write-data")
    command.add_argument("url")
    command.add_argument("--storage-options", required=True, help="JSON")
    for option, default in (("rows", 20_000), ("features", 16), ("centers", 8), ("chunk-rows", 2000)):
        command.add_argument(f"--{option}", type=int, default=default)
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--array", default="X")
    command.set_defaults(run=write_data)
    command = actions.add_parser("read-back")
    command.add_argument("--model")
    command.add_argument("--labels", action="append", default=[])
    command.add_argument("--storage-options", required=True, help="JSON")
    command.set_defaults(run=read_back)
    command = actions.add_parser("fit")
    command.add_argument("url")
    command.add_argument("--storage-options", required=True, help="JSON")
    command.add_argument("--scheduler", required=True)
    command.add_argument("--algorithm", default="kmeans")
    command.add_argument("-k", type=int, default=8)
    command.add_argument("--seed", type=int, default=0)
    command.add_argument("--chunk-rows", type=int, default=2000)
    command.add_argument("--array", default="X")
    command.set_defaults(run=fit)
    command = actions.add_parser("workers")
    command.add_argument("--scheduler", required=True)
    command.set_defaults(run=workers)
    args = parser.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
