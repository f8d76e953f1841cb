"""k-means|| on a uniform sample of rows held by the workers, for data with many more rows than its candidates need:
the sample is a NumPy transcription of its definition (independent of chunking and scheduler, stored dtype and
weights kept), the seeding on it is k-means|| on exactly those rows, and a sample that misses a rare distinct row
makes k-means|| look at every row."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import zarr

from daskmeans import InputDataError, KMeans, config, open_input
from daskmeans.algorithms.init import kmeans_parallel, kmeans_parallel_bounded, kmeans_parallel_rows, seeding_plan
from daskmeans.algorithms.result import RunContext
from daskmeans.config import KMEANS_PARALLEL_MIN_ROWS, KMEANS_PARALLEL_ROWS_PER_CENTER
from daskmeans.engine.capacity import cluster_memory_bytes
from daskmeans.engine.random import row_uniforms, stage_key
from daskmeans.engine.slabs import stored_form
from daskmeans.passes.row_sample import sampled_rows


@pytest.fixture(scope="module")
def uint8_store(tmp_path_factory):
    """60,000 x 6 uint8 rows around 5 centers, in a Zarr store of 7,000-row chunks."""
    rng = np.random.default_rng(4)
    centers = rng.integers(30, 220, size=(5, 6))
    values = np.clip(centers[rng.integers(0, 5, 60_000)] + rng.normal(0, 6, size=(60_000, 6)), 0, 255)
    path = tmp_path_factory.mktemp("sample") / "u8.zarr"
    zarr.create_array(store=str(path), data=values.astype(np.uint8), chunks=(7_000, 6))
    return str(path), values.astype(np.uint8), centers


def test_the_rows_kmeans_parallel_looks_at():
    assert kmeans_parallel_rows(10**8, 1000) == max(KMEANS_PARALLEL_MIN_ROWS, KMEANS_PARALLEL_ROWS_PER_CENTER * 1000)
    assert kmeans_parallel_rows(10**8, 65_536) == KMEANS_PARALLEL_ROWS_PER_CENTER * 65_536
    assert kmeans_parallel_rows(960_000, 1000) == 960_000, "descriptors: every row, as before"
    assert kmeans_parallel_rows(10**8, 1000, sample_size=5000) == 5000
    assert kmeans_parallel_rows(300, 10, sample_size=5000) == 300
    wide = 784 * 4 + 12  # a float32 MNIST row and its state
    assert kmeans_parallel_rows(10**8, 100, row_bytes=wide, memory_bytes=2**30) == 2**30 // 8 // wide, (
        "the sample fills an eighth of the workers' memory at most"
    )
    assert kmeans_parallel_rows(10**6, 100, row_bytes=wide, memory_bytes=2**30) == 10**6, "no sample: no rows held"
    assert kmeans_parallel_rows(10**8, 100, 5000, row_bytes=wide, memory_bytes=2**30) == 5000, "asked for"


def test_the_sample_is_bounded_by_the_workers_memory(uint8_store, cluster_client, monkeypatch):
    path = uint8_store[0]
    data = open_input(path)
    monkeypatch.setattr(config, "KMEANS_PARALLEL_MIN_ROWS", 20_000)
    memory = cluster_memory_bytes(cluster_client)
    fraction = 3_000 * (6 + 12) / memory  # room for 3,000 rows of 6 uint8 values and their state
    monkeypatch.setattr(config, "KMEANS_PARALLEL_MEMORY_FRACTION", fraction)
    rows = kmeans_parallel_rows(60_000, 5, row_bytes=18, memory_bytes=memory)
    assert 2_990 <= rows <= 3_000
    seeded, passes = kmeans_parallel_bounded(data.array, 5, 21, context=RunContext(client=cluster_client))
    sample, _ = sampled_rows(data.array, None, rows / 60_000, stage_key(21, "k-means||", "sample"))
    np.testing.assert_array_equal(seeded, kmeans_parallel(sample, 5, 21)[0])


@pytest.mark.parametrize("chunk_rows", [7_000, 13_000])
def test_the_sample_is_the_rows_whose_uniform_is_below_the_probability(uint8_store, chunk_rows, cluster_client):
    path, values, _ = uint8_store
    data = open_input(path, chunk_rows=chunk_rows)
    weights = np.arange(60_000, dtype=np.float64)
    key = stage_key(3, "k-means||", "sample")
    chunked_weights = da.from_array(weights, chunks=(data.array.chunks[0],))
    sample, sample_weights = sampled_rows(data.array, chunked_weights, 0.05, key, cluster_client)
    expected = np.flatnonzero(row_uniforms(key, 0, 60_000) < 0.05)
    assert stored_form(sample).dtype == np.uint8 and sample.dtype == np.float32, "kept as stored, computed as data"
    assert max(sample.chunks[0]) <= 2**16
    np.testing.assert_array_equal(cluster_client.compute(stored_form(sample)).result(), values[expected])
    np.testing.assert_array_equal(cluster_client.compute(sample_weights).result(), weights[expected])
    on_threads, _ = sampled_rows(data.array, None, 0.05, key)
    np.testing.assert_array_equal(on_threads.compute(), values[expected].astype(np.float32))


def test_a_sample_of_nothing_is_an_empty_array(uint8_store):
    data = open_input(uint8_store[0])
    sample, weights = sampled_rows(data.array, None, 1e-9, 11)
    assert sample.shape == (0, 6) and weights is None


def test_kmeans_parallel_on_a_sample_is_kmeans_parallel_on_those_rows(uint8_store, cluster_client):
    path, values, centers = uint8_store
    data = open_input(path)
    plan = seeding_plan(data.array, 5, client=cluster_client, sample_size=4_000)
    seeded, passes = kmeans_parallel_bounded(data.array, 5, 21, plan, context=RunContext(client=cluster_client))
    sample, _ = sampled_rows(data.array, None, 4_000 / 60_000, stage_key(21, "k-means||", "sample"))
    on_sample, sample_passes = kmeans_parallel(sample, 5, 21)
    np.testing.assert_array_equal(seeded, on_sample)
    assert passes == pytest.approx(1 + sample_passes * sample.shape[0] / 60_000)
    assert passes < 2, "one pass to draw the sample, the rounds on a fifteenth of the rows"
    found = np.abs(seeded[:, None, :] - centers[None]).max(axis=2).min(axis=0)
    assert found.max() < 10, "a seed near every true center"


def test_kmeans_from_a_sampled_seeding_is_the_same_on_threads_and_processes(uint8_store, cluster_client):
    path = uint8_store[0]
    params = dict(n_clusters=5, random_state=8, init_sample_size=3_000, max_iter=3)
    on_threads = KMeans(**params).fit(path)
    on_processes = KMeans(client=cluster_client, **params).fit(path)
    np.testing.assert_array_equal(on_threads.cluster_centers_, on_processes.cluster_centers_)
    seeding = [p for p in on_threads.fit_phases_ if p["phase"] == "seeding"]
    assert seeding, "the seeding is a phase of the fit"


#: 4 distinct rows: 3 common (20,000 copies each) and 1 rare (one copy), 60,001 rows in all.
DISTINCT = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [50.0, 50.0]])
RARE = np.repeat(DISTINCT, [20_000, 20_000, 20_000, 1], axis=0)


def test_a_sample_that_misses_a_rare_distinct_row_makes_kmeans_parallel_look_at_every_row():
    data = open_input(RARE)
    key = stage_key(0, "k-means||", "sample")
    assert not (row_uniforms(key, 60_000, 1) < 1_000 / 60_001).any(), "the sample misses the rare row"
    centers, passes = kmeans_parallel_bounded(data.array, 4, 0, seeding_plan(data.array, 4, sample_size=1_000))
    np.testing.assert_array_equal(np.unique(centers, axis=0), np.unique(DISTINCT, axis=0))
    assert passes > 2, "the sample pass, then every row"


def test_fewer_distinct_rows_than_clusters_is_blamed_on_the_data_not_the_sample():
    with pytest.raises(InputDataError, match=r"The data has only 4 distinct row\(s\).*n_clusters=5"):
        array = open_input(RARE).array
        kmeans_parallel_bounded(array, 5, 0, seeding_plan(array, 5, sample_size=1_000))


def test_a_sample_smaller_than_the_clusters_makes_kmeans_parallel_look_at_every_row(uint8_store):
    data = open_input(uint8_store[0])
    kept = (row_uniforms(stage_key(0, "k-means||", "sample"), 0, 60_000) < 2 / 60_000).sum()
    assert kept == 1, "seed 0 keeps one row of the 60,000"
    centers, passes = kmeans_parallel_bounded(data.array, 5, 0, seeding_plan(data.array, 5, sample_size=2))
    every_row, every_passes = kmeans_parallel(data.array, 5, 0)
    np.testing.assert_array_equal(centers, every_row)
    assert passes == 1 + every_passes
