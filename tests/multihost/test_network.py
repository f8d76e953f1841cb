"""The bytes an iteration exchanges between the hosts do not grow with the number of rows (S3 reads apart).

The workers read blocks from the S3 host; what they exchange with the scheduler, the client and each other in an
iteration is task messages and partial statistics (sums, counts, a few far rows: ``k x d`` values each). Each
worker's traffic is counted by peer (the S3 host apart from the others) with traffic control on its interface and
bridge port, after each iteration of a fit paused by its progress callback (:mod:`measure_network`, which makes the
record's tables the same way); an iteration's bytes are the median over the iterations after the first.

nmbatch keeps its growing batch in the workers' memory and exchanges the same bytes per iteration at any n with
the same chunk size. Exact k-means reads its blocks at each pass in a few tasks per worker thread, each combining
the statistics of its blocks where it ran (:mod:`daskmeans.engine.grouped`): with Zarr chunks of a fixed size, 4x
the rows are 4x the blocks but not more tasks or partial statistics. With the blocks fixed and the rows in a block
grown, no per-block cost can grow either.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from .measure_network import ClientProcess, classify_by_peer, fit_params, measured_fit, per_iteration

pytestmark = pytest.mark.slow

ROWS, FEATURES, BLOBS, K, ITERATIONS, SEED = 20_000, 16, 400, 8, 5, 0
#: The rows of the larger input: 4x the smaller one.
GROWTH = 4
#: Bytes per iteration of the larger input at most this times those of the smaller one.
MOST = 1.5
CHUNK_ROWS = 2_500


@pytest.fixture(scope="module")
def measuring(multihost, tmp_path_factory):
    """``(client process, {(rows, chunk rows): url})``: the data on S3 at both sizes in chunks of
    :data:`CHUNK_ROWS` rows and in 8 chunks, the workers' traffic counted by peer, a fit's process on the client
    host."""
    bucket = f"s3://network-{uuid.uuid4().hex[:10]}"
    urls = {}
    for rows in (ROWS, GROWTH * ROWS):
        for chunk_rows in (CHUNK_ROWS, rows // 8):
            url = urls[rows, chunk_rows] = f"{bucket}/data-{rows}-{chunk_rows}.zarr"
            args = ["write-data", url, "--storage-options", json.dumps(multihost.storage_options())]
            args += ["--rows", str(rows), "--features", str(FEATURES), "--centers", str(BLOBS)]
            multihost.driver("client", [*args, "--chunk-rows", str(chunk_rows), "--seed", str(SEED)], timeout=600)
    for worker in multihost.worker_names:
        classify_by_peer(multihost, worker, "s3")
    client = ClientProcess(multihost, Path(tmp_path_factory.mktemp("network")) / "client.log")
    try:
        for (_, chunk_rows), url in urls.items():  # the workers' first reads of each store
            client.fit("kmeans", url, fit_params("kmeans", K, 1, SEED), chunk_rows)
        yield client, urls
    finally:
        client.close()
        for worker in multihost.worker_names:
            multihost.restore(worker)


def bytes_per_iteration(cluster, client, algorithm: str, url: str, chunk_rows: int) -> dict:
    """The median bytes per iteration of both workers with the cluster (``cluster``) and with S3 (``s3``)."""
    fit = measured_fit(cluster, client, algorithm, url, fit_params(algorithm, K, ITERATIONS, SEED), chunk_rows)
    assert "error" not in fit, fit.get("error")
    entry = per_iteration(fit, ITERATIONS)
    assert entry["complete"], f"{algorithm} stopped after {entry['iterations']} of {ITERATIONS} iterations"
    total = entry["total"]
    return {"cluster": total["cluster_tx"] + total["cluster_rx"], "s3": total["s3_rx"], "entry": entry}


def growth(cluster, client, urls, algorithm: str, blocks_fixed: bool) -> tuple[float, dict]:
    """Bytes per iteration with the cluster of the larger input over those of the smaller one."""
    measured = {}
    for rows in (ROWS, GROWTH * ROWS):
        chunk_rows = rows // 8 if blocks_fixed else CHUNK_ROWS
        measured[rows] = bytes_per_iteration(cluster, client, algorithm, urls[rows, chunk_rows], chunk_rows)
    small, large = measured[ROWS], measured[GROWTH * ROWS]
    assert small["cluster"] > 0, f"no bytes counted for {algorithm}: {small['entry']}"
    return large["cluster"] / small["cluster"], measured


@pytest.mark.parametrize(
    ("algorithm", "blocks_fixed"),
    [
        ("nmbatch", False),
        ("kmeans", True),
        ("kmeans", False),
    ],
    ids=["nmbatch-same-chunks", "kmeans-same-blocks", "kmeans-same-chunks"],
)
def test_bytes_per_iteration_between_hosts_do_not_grow_with_the_rows(multihost, measuring, algorithm, blocks_fixed):
    client, urls = measuring
    ratio, measured = growth(multihost, client, urls, algorithm, blocks_fixed)
    summary = {rows: {"cluster kB": m["cluster"] / 1e3, "S3 MB": m["s3"] / 1e6} for rows, m in measured.items()}
    assert ratio < MOST, f"{algorithm}: {GROWTH}x the rows, {ratio:.2f}x the bytes per iteration: {summary}"
