"""make_resampled_zarr: real rows resampled with noise into a Zarr store, the same values whatever the chunks or
scheduler, checked against a NumPy transcription of its definition; clear errors before anything is written."""

from __future__ import annotations

import os

import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

from daskmeans import InvalidParameterError, OutputExistsError
from daskmeans.datasets import generation_block_rows, make_resampled_zarr, resampled_attrs, resampled_rows
from daskmeans.engine.random import stage_key


@pytest.fixture(scope="module")
def source():
    rng = np.random.default_rng(5)
    rows = rng.integers(0, 256, size=(300, 16)).astype(np.uint8)
    rows[:10] = 0  # values at the clip limits
    rows[10:20] = 255
    return rows


def read(path):
    group = zarr.open_group(store=str(path), mode="r")
    return group["X"][...], dict(group.attrs)["daskmeans"]


def test_rows_are_source_rows_plus_rounded_clipped_noise(source):
    """A NumPy transcription of the definition: uniform picks from the counter-based uniforms, then N(0, s^2) per
    value from the generation blocks' generators, rounded and clipped."""
    seed, start, stop, std = 11, 1000, 9000, 3.0
    values, picks = resampled_rows(seed, source, std, start, stop)
    block_rows = generation_block_rows(source.shape[1])
    first, last = start // block_rows, (stop - 1) // block_rows
    noise = np.concatenate(
        [
            np.random.default_rng(stage_key(seed, "resample-noise", b)).standard_normal(
                (block_rows, source.shape[1]), dtype=np.float32
            )
            for b in range(first, last + 1)
        ]
    )
    noise = noise[start - first * block_rows : stop - first * block_rows]
    expected = np.clip(np.rint(source[picks].astype(np.float32) + noise * np.float32(std)), 0, 255).astype(np.uint8)
    assert values.dtype == np.uint8 and values.shape == (stop - start, 16)
    np.testing.assert_array_equal(values, expected)
    assert picks.min() >= 0 and picks.max() < source.shape[0]
    counts = np.bincount(picks, minlength=source.shape[0])
    assert counts.min() > 0 and counts.max() < 3 * counts.mean()  # drawn uniformly
    residual = values.astype(np.float64) - source[picks]
    inside = (source[picks] > 20) & (source[picks] < 235)  # away from the clip limits
    assert residual[inside].std() == pytest.approx(np.sqrt(std**2 + 1 / 12), rel=0.03)


@pytest.mark.slow
def test_values_depend_on_seed_not_on_chunks_or_scheduler(tmp_path, source):
    make_resampled_zarr(tmp_path / "a.zarr", source, 20_000, random_state=4)
    make_resampled_zarr(tmp_path / "b.zarr", source, 20_000, random_state=4, chunk_rows=1_777)
    make_resampled_zarr(tmp_path / "c.zarr", source, 20_000, random_state=5, chunk_rows=1_777)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        make_resampled_zarr(tmp_path / "d.zarr", source, 20_000, random_state=4, chunk_rows=3_000, client=client)
    (a, attrs), (b, _), (c, _), (d, _) = (read(tmp_path / name) for name in ("a.zarr", "b.zarr", "c.zarr", "d.zarr"))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, d)
    assert not np.array_equal(a, c)
    assert zarr.open_array(store=str(tmp_path / "b.zarr"), path="X", mode="r").chunks == (1_777, 16)
    np.testing.assert_array_equal(a[5_000:7_000], resampled_rows(4, source, 2.0, 5_000, 7_000)[0])
    assert attrs["kind"] == "resampled" and attrs["seed"] == 4 and attrs["noise_std"] == 2.0
    assert attrs["source_rows"] == 300 and attrs["dtype"] == "uint8" and len(attrs["source_sha256"]) == 64
    assert attrs == resampled_attrs(source, 20_000, 2.0, 4)  # what the bench compares to reuse a store


def test_float_sources_keep_their_dtype(tmp_path):
    source = np.random.default_rng(0).normal(size=(50, 4))
    make_resampled_zarr(tmp_path / "f.zarr", source, 1_000, noise_std=0.0, random_state=1)
    values, _ = read(tmp_path / "f.zarr")
    assert values.dtype == np.float64
    assert {tuple(row) for row in values} <= {tuple(row) for row in source}  # no noise: source rows only


def test_refuses_to_overwrite_unless_asked(tmp_path, source):
    path = tmp_path / "r.zarr"
    make_resampled_zarr(path, source, 500, random_state=0)
    before, _ = read(path)
    with pytest.raises(OutputExistsError):
        make_resampled_zarr(path, source, 500, random_state=1)
    np.testing.assert_array_equal(read(path)[0], before)
    make_resampled_zarr(path, source, 500, random_state=1, overwrite=True)
    assert not np.array_equal(read(path)[0], before)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"source": np.zeros((0, 4), np.uint8)}, "non-empty 2-D"),
        ({"source": np.zeros(10, np.uint8)}, "non-empty 2-D"),
        ({"source": np.zeros((10, 4), np.int16)}, "source dtype"),
        ({"source": np.array([[1.0, np.nan], [0.0, 1.0]])}, "NaN or infinite"),
        ({"n_samples": 0}, "n_samples"),
        ({"noise_std": -1.0}, "noise_std"),
        ({"chunk_rows": 0}, "chunk_rows"),
        ({"array_name": "a/b"}, "array_name"),
    ],
)
def test_bad_parameters_fail_before_writing(tmp_path, source, kwargs, message):
    arguments = {"source": source, "n_samples": 100, **kwargs}
    with pytest.raises(InvalidParameterError, match=message):
        make_resampled_zarr(tmp_path / "bad.zarr", **arguments)
    assert os.listdir(tmp_path) == []
