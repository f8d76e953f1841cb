"""Mini-batch pools drawn from whole blocks (``sampling="chunks"``): each pool reads a few blocks, a sweep of pools
reads every block once, the rows are uniform over the pool's blocks, and a fit depends only on the seed and the
chunking (not on the scheduler)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskmeans import InvalidParameterError, MiniBatchKMeans, open_input
from daskmeans.bench.estimator_runs import reads_notes
from daskmeans.config import MIN_POOL_BLOCKS, POOL_ROWS
from daskmeans.engine.random import seed_from_random_state, stage_key
from daskmeans.passes.minibatch_pool import (
    blocks_per_pool,
    choose_sampling,
    chunk_step_indices,
    draw_pieces,
    pool_blocks,
    step_indices,
)


def test_blocks_per_pool_hold_twice_the_pool_and_at_least_eight():
    assert blocks_per_pool([65_536] * 1526, POOL_ROWS) == MIN_POOL_BLOCKS  # 100M rows in 64k-row chunks
    assert blocks_per_pool([10_000] * 100, 50_000) == 10  # 2 x 50,000 rows in blocks of 10,000
    assert blocks_per_pool([10_000] * 5, 50_000) == 5  # never more than there are


def test_auto_takes_whole_blocks_only_where_uniform_draws_read_many_more():
    assert choose_sampling("auto", [65_536] * 1526, POOL_ROWS) == "chunks"
    assert choose_sampling("auto", [131_072] * 8, POOL_ROWS) == "rows"  # 1M rows: a pool reads every block anyway
    assert choose_sampling("auto", [1000] * 200, POOL_ROWS) == "rows"  # small blocks: twice the pool is all of them
    assert choose_sampling("rows", [65_536] * 1526, POOL_ROWS) == "rows"
    assert choose_sampling("chunks", [100] * 3, POOL_ROWS) == "chunks"


@pytest.mark.parametrize("n_blocks, per_pool", [(40, 8), (37, 8), (5, 8)])
def test_pools_sweep_a_permutation_of_the_blocks(n_blocks, per_pool):
    per_pool = min(per_pool, n_blocks)
    pools = [pool_blocks(n_blocks, per_pool, 7, p) for p in range(-(-3 * n_blocks // per_pool))]
    assert all(len(p) == len(np.unique(p)) and np.all((p >= 0) & (p < n_blocks)) for p in pools)
    counts = np.bincount(np.concatenate(pools[: n_blocks // per_pool]), minlength=n_blocks)
    assert counts.max() == 1, "within a sweep no block is read twice"
    reads = np.bincount(np.concatenate(pools), minlength=n_blocks)
    assert reads.min() >= 3 and reads.max() <= 4, "over three sweeps every block is read three times (or four)"
    if per_pool < n_blocks:
        assert not np.array_equal(pools[0], pool_blocks(n_blocks, per_pool, 8, 0)), "another seed, other blocks"


def test_chunk_step_indices_are_uniform_over_the_pools_blocks():
    block_rows = np.array([1000, 2500, 500, 3000, 1000, 2000] * 4)
    offsets = np.concatenate([[0], np.cumsum(block_rows)[:-1]])
    indices = chunk_step_indices(block_rows, 4096, 11, 64, 32, 32, 4)
    blocks = pool_blocks(len(block_rows), 4, 11, 2)
    assert indices.shape == (32, 4096)
    owner = np.searchsorted(offsets, indices.ravel(), side="right") - 1
    assert set(np.unique(owner)) == set(blocks), "every row comes from the pool's blocks, every block is drawn"
    # each block gets draws in proportion to its rows (chi-square-like check, 131,072 draws)
    observed = np.bincount(owner, minlength=len(block_rows))[blocks]
    expected = block_rows[blocks] / block_rows[blocks].sum() * indices.size
    assert np.all(np.abs(observed - expected) < 5 * np.sqrt(expected))
    # the same generator as uniform sampling, mapped onto the pool's rows
    local = step_indices(int(block_rows[blocks].sum()), 4096, 11, 64, 32)
    np.testing.assert_array_equal(np.argsort(local.ravel(), kind="stable"), np.argsort(indices.ravel(), kind="stable"))


@pytest.fixture(scope="module")
def many_blocks():
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=10, size=(8, 8))
    X = (centers[rng.integers(0, 8, 2_000_000)] + rng.normal(size=(2_000_000, 8))).astype(np.float32)
    return X, centers


@pytest.mark.slow
def test_a_pool_of_whole_blocks_reads_five_times_fewer_blocks(many_blocks):
    X, _ = many_blocks
    data = open_input(X, chunk_rows=25_000)  # 80 blocks
    block_rows = data.array.chunks[0]
    per_pool = blocks_per_pool(block_rows, POOL_ROWS)
    uniform = step_indices(len(X), 1024, 3, 0, POOL_ROWS // 1024)
    whole = chunk_step_indices(block_rows, 1024, 3, 0, POOL_ROWS // 1024, POOL_ROWS // 1024, per_pool)
    read_uniform, read_whole = len(draw_pieces(data.array, uniform)), len(draw_pieces(data.array, whole))
    assert read_uniform == 80 and read_whole == per_pool == 11
    assert read_uniform >= 5 * read_whole, "7.3x fewer bytes read per pool"


@pytest.mark.slow
@pytest.mark.parametrize("sampling", ["rows", "chunks"])
def test_each_pool_records_the_whole_blocks_it_read_and_their_bytes_as_stored(tmp_path, sampling):
    values = np.random.default_rng(1).integers(0, 256, size=(400_000, 8), dtype=np.uint8)
    zarr.create_array(store=str(tmp_path / "u8.zarr"), data=values, chunks=(10_000, 8))
    model = MiniBatchKMeans(
        4, sampling=sampling, random_state=0, max_iter=1, max_no_improvement=None, batch_size=1024, chunk_rows=10_000
    ).fit(str(tmp_path / "u8.zarr"))
    data = open_input(str(tmp_path / "u8.zarr"), chunk_rows=10_000)
    block_rows = data.array.chunks[0]
    assert len(block_rows) == 40 and data.array.dtype == np.float32
    steps, seed = POOL_ROWS // 1024, stage_key(seed_from_random_state(0), "minibatch")
    for pool, record in enumerate(model.history_):
        first = pool * steps
        n_steps = min(steps, record["steps"] - first)
        indices = (
            step_indices(400_000, 1024, seed, first, n_steps)
            if sampling == "rows"
            else chunk_step_indices(
                block_rows, 1024, seed, first, n_steps, steps, blocks_per_pool(block_rows, POOL_ROWS)
            )
        )
        assert record["blocks_read"] == len(draw_pieces(data.array, indices))
        assert record["bytes_read"] == record["blocks_read"] * 10_000 * 8, "one byte a uint8 value, not four"
    blocks = [r["blocks_read"] for r in model.history_]
    if sampling == "rows":
        assert blocks == [40] * 4, "a pool of 131,072 uniform rows touches every block"
    else:  # a pool that spans two sweeps may take a block twice (read once)
        assert blocks[0] == max(blocks) == blocks_per_pool(block_rows, POOL_ROWS) == 27
    (note,) = reads_notes(model.history_)
    per_step = sum(r["bytes_read"] for r in model.history_) / model.n_steps_ / 2**10
    assert (
        note == f"read 4 pools of {np.mean(blocks):.3g} blocks, {np.mean(blocks) * 80_000 / 2**20:,.1f} MiB a "
        f"pool as stored ({per_step:,.1f} KiB a step)"
    )


@pytest.mark.slow
def test_a_chunk_sampled_fit_is_as_good_and_depends_only_on_seed_and_chunking(many_blocks, cluster_client):
    X, centers = many_blocks
    params = dict(n_clusters=8, random_state=0, max_iter=1, max_no_improvement=None, chunk_rows=50_000)
    chunks = MiniBatchKMeans(**params).fit(X)
    rows = MiniBatchKMeans(sampling="rows", **params).fit(X)
    assert chunks.sampling_ == "chunks" and rows.sampling_ == "rows", "auto: 40 blocks of 50,000 rows"
    assert chunks.inertia_ <= 1.01 * rows.inertia_
    found = np.sqrt(((chunks.cluster_centers_[:, None] - centers[None]) ** 2).sum(-1)).min(0)
    assert found.max() < 0.2, "every true center found"
    on_processes = MiniBatchKMeans(client=cluster_client, **params).fit(X)
    np.testing.assert_array_equal(on_processes.cluster_centers_, chunks.cluster_centers_)
    other_chunking = MiniBatchKMeans(**{**params, "chunk_rows": 40_000}).fit(X)
    assert not np.array_equal(other_chunking.cluster_centers_, chunks.cluster_centers_)


def test_an_unknown_sampling_is_refused_before_any_work():
    with pytest.raises(InvalidParameterError, match="sampling"):
        MiniBatchKMeans(2, sampling="blocks").fit(np.zeros((10, 2)))
