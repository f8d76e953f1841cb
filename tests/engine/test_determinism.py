"""What is reproducible across chunkings and input forms (the README's "Reproducibility" section).

Schedulers and worker counts are covered by each algorithm's own tests (test_kmeans, test_minibatch, test_nested,
test_vrkm, test_vc_gmm, test_kernel_kmeans: bitwise identical centers), worker loss by test_worker_loss; this
module covers the chunking and the input form.
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest
import zarr
from conftest import make_blobs

from daskmeans import MiniBatchKMeans, NestedMiniBatchKMeans, VRKMeans
from daskmeans.estimators.kernel import MiniBatchKernelKMeans
from daskmeans.estimators.kernel_full import KernelKMeans
from daskmeans.estimators.mixture import CoresetGaussianMixture
from daskmeans.storage.io import open_input

CHUNKINGS = (6000, 1000, 777)


@pytest.fixture(scope="module")
def X():
    return make_blobs(n=6000, d=5, k=7, spread=1.5, seed=11)[0]


@pytest.fixture(autouse=True)
def threads():
    with dask.config.set({"scheduler": "threads", "scheduler-address": None}):
        yield


@pytest.mark.parametrize("variant", ["vrkm", "vrkm++"])
def test_vrkm_across_chunkings_agrees_to_float64_rounding(X, variant):
    """The draws are per row (chunking-free); only the order of the float64 sums of the epoch pass changes."""
    fits = [
        VRKMeans(7, variant=variant, max_epochs=4, tol=0.0, random_state=2).fit(da.from_array(X, chunks=(c, 5)))
        for c in CHUNKINGS
    ]
    for other in fits[1:]:
        np.testing.assert_allclose(other.cluster_centers_, fits[0].cluster_centers_, rtol=1e-10, atol=1e-10)
        assert [r["inner_steps"] for r in other.history_] == [r["inner_steps"] for r in fits[0].history_]
        assert [r["changed"] for r in other.history_] == [r["changed"] for r in fits[0].history_]


def test_minibatch_is_bitwise_identical_across_chunkings_and_input_forms(X, tmp_path):
    params = dict(n_clusters=7, batch_size=300, max_iter=3, max_no_improvement=None, random_state=5)
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store, shape=X.shape, chunks=(500, 5), dtype=X.dtype)[:] = X
    reference = MiniBatchKMeans(**params).fit(X)
    for data in [da.from_array(X, chunks=(c, 5)) for c in CHUNKINGS] + [store]:
        np.testing.assert_array_equal(MiniBatchKMeans(**params).fit(data).cluster_centers_, reference.cluster_centers_)


@pytest.mark.slow
def test_nmbatch_is_bitwise_identical_for_one_chunking_whatever_the_input_form(X, tmp_path):
    """The shuffle permutes the row blocks and the rows inside each block: the chunking is part of the seed."""
    params = dict(n_clusters=7, initial_batch_size=1000, max_iter=30, random_state=4)
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store, shape=X.shape, chunks=(1000, 5), dtype=X.dtype)[:] = X
    forms = [X, da.from_array(X, chunks=(1000, 5)), store, open_input(store, chunk_rows=1000)]
    fits = [NestedMiniBatchKMeans(**params, chunk_rows=1000).fit(data) for data in forms]
    for other in fits[1:]:
        np.testing.assert_array_equal(other.cluster_centers_, fits[0].cluster_centers_)
        assert [r["batch_size"] for r in other.history_] == [r["batch_size"] for r in fits[0].history_]
    # another chunking is another shuffle: another (equally valid) run, not a rounding difference
    other_chunking = NestedMiniBatchKMeans(**params, chunk_rows=777).fit(X)
    first_batch = [r["energy"] for r in other_chunking.history_[:1]]
    assert first_batch != [r["energy"] for r in fits[0].history_[:1]]
    assert other_chunking.inertia_ == pytest.approx(fits[0].inertia_, rel=0.05)


def test_vc_gmm_is_bitwise_identical_for_one_chunking_whatever_the_input_form(X, tmp_path):
    """The lightweight coreset is drawn block by block: like nmbatch, the chunking is part of the seed."""
    params = dict(n_components=7, coreset_size=1500, max_iter=10, random_state=3)
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store, shape=X.shape, chunks=(1000, 5), dtype=X.dtype)[:] = X
    forms = [da.from_array(X, chunks=(1000, 5)), store, open_input(store, chunk_rows=1000)]
    fits = [CoresetGaussianMixture(**params, chunk_rows=1000).fit(data) for data in forms]
    fits.append(CoresetGaussianMixture(**params, chunk_rows=1000).fit(X))
    for other in fits[1:]:
        np.testing.assert_array_equal(other.means_, fits[0].means_)
        assert other.covariance_ == fits[0].covariance_ and other.lower_bound_ == fits[0].lower_bound_
        assert other.inertia_ == fits[0].inertia_
    other_chunking = CoresetGaussianMixture(**params, chunk_rows=777).fit(X)
    assert not np.array_equal(other_chunking.means_, fits[0].means_)  # another coreset, not a rounding difference
    assert other_chunking.inertia_ == pytest.approx(fits[0].inertia_, rel=0.05)


def test_kernel_kmeans_is_bitwise_identical_across_chunkings_and_input_forms(X, tmp_path):
    """Batch rows are drawn by global row index and gathered in draw order; exact kernel k-means reads all rows."""
    store = str(tmp_path / "X.zarr")
    zarr.create_array(store, shape=X.shape, chunks=(500, 5), dtype=X.dtype)[:] = X
    forms = [X, store] + [da.from_array(X, chunks=(c, 5)) for c in CHUNKINGS]
    params = dict(n_clusters=7, batch_size=100, max_iter=10, init_sample_size=500, random_state=3)
    fits = [MiniBatchKernelKMeans(**params).fit(data) for data in forms]
    small = X[:1500]  # exact kernel k-means holds the n x n kernel matrix: fewer rows
    full = [
        KernelKMeans(7, max_iter=10, init_sample_size=500, random_state=3).fit(data)
        for data in (small, da.from_array(small, chunks=(777, 5)), da.from_array(small, chunks=(100, 5)))
    ]
    for same in (fits, full):
        for other in same[1:]:
            for name in ("support_rows_", "support_coef_", "support_owner_", "support_index_", "center_norms_"):
                np.testing.assert_array_equal(getattr(other, name), getattr(same[0], name))
