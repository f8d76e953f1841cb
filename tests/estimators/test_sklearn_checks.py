"""scikit-learn's estimator checks on every public estimator.

``parametrize_with_checks`` runs scikit-learn's API and legacy checks (54 per estimator with scikit-learn 1.9; the
array API check is skipped unless ``SCIPY_ARRAY_API`` is set); the clustering checks, which scikit-learn runs only on
subclasses of its ``ClusterMixin``, are run by ``test_sklearn_clustering_checks``. Every estimator passes them all
(``CoresetGaussianMixture`` included, whose coreset of a small dataset is every row once with its weight) but
``check_sample_weight_equivalence_on_dense_data``, which fits once with integer sample weights and once with each
row repeated that many times, and asks for the same model. daskmeans draws its random numbers per stored row (keyed
by the seed and the row's index), so a row of weight 2 is one draw where its two copies are two: the weighted and the
repeated fits start from different seeds (or batches) and reach different local optima. ``EXPECTED_FAILURES`` says
where each estimator draws; the last tests show that once the draws are taken out (given initial centers, a fixed
kernel width, no coreset), weights do equal repeated rows.
"""

from __future__ import annotations

import inspect
import warnings
from functools import partial

import numpy as np
import pytest
from sklearn.utils import shuffle
from sklearn.utils.estimator_checks import (
    check_clustering,
    check_estimators_partial_fit_n_features,
    check_sample_weight_equivalence_on_dense_data,
    parametrize_with_checks,
)

from daskmeans import (
    CoresetGaussianMixture,
    KernelKMeans,
    KMeans,
    MiniBatchKernelKMeans,
    MiniBatchKMeans,
    NestedMiniBatchKMeans,
    VRKMeans,
)

WEIGHT_CHECK = "check_sample_weight_equivalence_on_dense_data"

SEEDING = (
    "k-means|| seeding draws per stored row, so a row of weight 2 is one draw where its two copies are two "
    "and the seeds differ"
)

#: check name -> why it fails, per estimator class
EXPECTED_FAILURES = {
    KMeans: {WEIGHT_CHECK: SEEDING + "; Lloyd's iterations after it weigh rows exactly"},
    VRKMeans: {
        WEIGHT_CHECK: SEEDING + "; each epoch also draws its inner steps (epoch_size times the stored rows) "
        "over the stored rows"
    },
    NestedMiniBatchKMeans: {
        WEIGHT_CHECK: SEEDING + "; the nested batches are drawn from the stored rows, one vote "
        "per row whatever its weight"
    },
    MiniBatchKMeans: {
        WEIGHT_CHECK: SEEDING + "; mini-batches draw stored rows uniformly and weights only scale "
        "their share, as in scikit-learn's MiniBatchKMeans"
    },
    # passes: on data of at most 10,000 rows, coreset_size='auto' takes every row once with its weight
    CoresetGaussianMixture: {},
    MiniBatchKernelKMeans: {
        WEIGHT_CHECK: "the seeding sample (which also sets the RBF width kappa='auto') is drawn "
        "from the stored rows, and mini-batches draw stored rows uniformly with "
        "weights scaling each step"
    },
    KernelKMeans: {
        WEIGHT_CHECK: "the seeding sample, drawn from the stored rows, sets both the k-means++ seeds and "
        "the RBF width kappa='auto', and repeated rows change both"
    },
}

#: one instance per public estimator, with parameters that keep each check to a fraction of a second
ESTIMATORS = [
    KMeans(n_clusters=3, max_iter=20, random_state=0),
    VRKMeans(n_clusters=3, max_epochs=10, random_state=0),
    NestedMiniBatchKMeans(n_clusters=3, max_iter=20, random_state=0),
    MiniBatchKMeans(n_clusters=3, max_iter=20, random_state=0),
    CoresetGaussianMixture(n_components=3, max_iter=20, random_state=0),
    MiniBatchKernelKMeans(n_clusters=3, max_iter=20, random_state=0),
    KernelKMeans(n_clusters=3, max_iter=20, random_state=0),
]


def expected_failures(estimator):
    """The checks ``estimator`` is known to fail, with the reason (``parametrize_with_checks``'s callback)."""
    return EXPECTED_FAILURES[type(estimator)]


# an expected failure that passes fails the test (scikit-learn >= 1.8), so that no stale reason stays listed
_STRICT = {"xfail_strict": True} if "xfail_strict" in inspect.signature(parametrize_with_checks).parameters else {}

with warnings.catch_warnings():
    # the estimators implement scikit-learn's API on a base class of their own, not sklearn.base.BaseEstimator
    warnings.filterwarnings("ignore", message="Estimator .* does not inherit from `sklearn.base.BaseEstimator`")
    _checks = parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures, **_STRICT)


@pytest.mark.slow
@_checks
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


#: the checks scikit-learn runs only on subclasses of ``sklearn.base.ClusterMixin`` (daskmeans does not depend on
#: scikit-learn, so its estimators do not inherit from it); all pass
CLUSTERING_CHECKS = {
    "check_clustering": check_clustering,
    "check_clustering(readonly_memmap=True)": partial(check_clustering, readonly_memmap=True),
    "check_estimators_partial_fit_n_features": check_estimators_partial_fit_n_features,
}


@pytest.mark.parametrize("check_name", CLUSTERING_CHECKS)
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda estimator: type(estimator).__name__)
def test_sklearn_clustering_checks(estimator, check_name):
    CLUSTERING_CHECKS[check_name](type(estimator).__name__, estimator)


def test_every_public_estimator_is_checked():
    import daskmeans

    public = {getattr(daskmeans, name) for name in daskmeans.__all__}
    estimators = {cls for cls in public if isinstance(cls, type) and hasattr(cls, "fit")}
    assert estimators == {type(e) for e in ESTIMATORS} == set(EXPECTED_FAILURES)


def _weighted_and_repeated_fits(make_estimator):
    """Fit on integer-weighted rows (shuffled) and on the rows repeated, as scikit-learn's weight check does."""
    rng = np.random.RandomState(42)
    X = rng.rand(15, 30)
    weights = rng.randint(0, 5, size=15)
    repeated = make_estimator(X[[0, 5, 10]].copy()).fit(X.repeat(weights, axis=0))
    X_weighted, weights = shuffle(X, weights, random_state=0)
    weighted = make_estimator(X[[0, 5, 10]].copy()).fit(X_weighted, sample_weight=weights)
    return X, weighted, repeated


@pytest.mark.parametrize(
    "make_estimator",
    [
        lambda init: KMeans(3, init=init, max_iter=20, random_state=0),
        lambda init: KernelKMeans(3, init=init, kernel_params={"kappa": 1.0}, max_iter=20, random_state=0),
        # no coreset, and n_truncated >= n_components: full EM, with no random draw
        lambda init: CoresetGaussianMixture(3, init=init, coreset_size=None, max_iter=20, random_state=0),
    ],
    ids=["KMeans", "KernelKMeans", "CoresetGaussianMixture"],
)
def test_weights_equal_repeated_rows_once_nothing_is_drawn(make_estimator):
    X, weighted, repeated = _weighted_and_repeated_fits(make_estimator)
    np.testing.assert_array_equal(weighted.predict(X), repeated.predict(X))
    # distances near zero come from a difference of squares: compare them to an absolute tolerance
    np.testing.assert_allclose(weighted.transform(X), repeated.transform(X), rtol=1e-6, atol=1e-6)


def test_the_weight_check_passes_for_kmeans_given_initial_centers():
    rng = np.random.RandomState(42)  # the check's own data: its first 15 x 30 uniform draws
    init = rng.rand(15, 30)[[0, 5, 10]]
    check_sample_weight_equivalence_on_dense_data("KMeans", KMeans(3, init=init, max_iter=20, random_state=0))
