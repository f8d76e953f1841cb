"""Mini-batch k-means (Sculley 2010) on one batch: per-center learning rates and the center update.

The learning-rate functions are shared with the other stochastic algorithms (mini-batch kernel k-means uses
``"beta"``): they only see per-cluster counts.
"""

from __future__ import annotations

import numpy as np

from .assign import nearest_centers
from .stats import cluster_stats

#: Learning-rate rules accepted by ``learning_rate=``.
LEARNING_RATES = ("sklearn", "beta")


def learning_rates(kind, batch_counts, batch_size, seen_counts=None):
    """Step size of each center for one mini-batch update ``c_j <- c_j + alpha_j (mean_j - c_j)``.

    Parameters
    ----------
    kind : {"sklearn", "beta"}
        ``"sklearn"``: ``alpha_j = b_j / (v_j + b_j)`` with ``v_j`` the weight the center has seen before,
        so that each center is the running mean of every sample ever assigned to it (Sculley 2010,
        scikit-learn). ``"beta"``: ``alpha_j = sqrt(b_j / b)``, constant in time (Schwartzman 2023, "Mini-batch
        k-means terminates within O(d/epsilon) iterations").
    batch_counts : ndarray (k,)
        Weight ``b_j`` of the batch assigned to each center.
    batch_size : float
        Total weight ``b`` of the batch.
    seen_counts : ndarray (k,), optional
        Weight ``v_j`` each center received before this batch (``"sklearn"`` only).

    Returns
    -------
    float64 (k,)
        Zero for centers without samples in the batch.
    """
    batch_counts = np.asarray(batch_counts, dtype=np.float64)
    if kind == "sklearn":
        if seen_counts is None:
            raise ValueError("learning_rates('sklearn', ...) needs seen_counts, the weight seen by each center.")
        total = np.asarray(seen_counts, dtype=np.float64) + batch_counts
        return np.divide(batch_counts, total, out=np.zeros_like(batch_counts), where=batch_counts > 0)
    if kind == "beta":
        if batch_size <= 0:
            return np.zeros_like(batch_counts)
        return np.sqrt(np.clip(batch_counts / float(batch_size), 0.0, 1.0))
    raise ValueError(f"learning rate must be one of {LEARNING_RATES}, got {kind!r}.")


def minibatch_update(centers, batch_sums, batch_counts, rates):
    """Move each center towards the mean of its batch samples by its rate.

    Parameters
    ----------
    centers : ndarray (k, d)
    batch_sums : float64 (k, d)
        Weighted sums of the batch samples assigned to each center.
    batch_counts : float64 (k,)
    rates : float64 (k,)

    Returns
    -------
    ndarray (k, d)
        New centers, dtype of ``centers``; centers without batch samples do not move.
    """
    moved = batch_counts > 0
    new = np.array(centers, dtype=np.float64)
    means = batch_sums[moved] / batch_counts[moved, None]
    new[moved] += rates[moved, None] * (means - new[moved])
    return new.astype(np.asarray(centers).dtype)


class EarlyStopping:
    """scikit-learn's stopping rule for mini-batch k-means, step by step.

    An exponentially weighted average (EWA) of the batch inertia per sample is tracked with weight
    ``alpha = min(1, 2 b / (n + 1))``; the run stops when it has not improved for ``max_no_improvement``
    steps (``None`` disables) or when the squared center move of a step is at most ``tol``. The first step
    is not judged (its inertia belongs to the initial centers).
    """

    def __init__(self, n_samples, batch_size, max_no_improvement=10, tol=0.0):
        self.alpha = min(1.0, 2.0 * batch_size / (n_samples + 1))
        self.max_no_improvement = max_no_improvement
        self.tol = tol
        self.ewa = None
        self.ewa_min = None
        self.no_improvement = 0
        self.steps = 0

    def update(self, batch_inertia_per_sample, center_shift):
        """Fold one step in; return the stop reason (``"converged"``, ``"no_improvement"``) or None."""
        self.steps += 1
        if self.ewa is None:
            self.ewa = batch_inertia_per_sample
        else:
            self.ewa = self.ewa * (1 - self.alpha) + batch_inertia_per_sample * self.alpha
        if self.steps == 1:
            return None
        if self.tol > 0 and center_shift <= self.tol:
            return "converged"
        if self.ewa_min is None or self.ewa < self.ewa_min:
            self.no_improvement = 0
            self.ewa_min = self.ewa
        else:
            self.no_improvement += 1
        if self.max_no_improvement is not None and self.no_improvement >= self.max_no_improvement:
            return "no_improvement"
        return None


class Reassignment:
    """scikit-learn's random reassignment of starved centers, step by step.

    Every ``10 k`` samples (or as soon as a center has received nothing), the centers whose weight is below
    ``ratio`` times the largest are moved onto rows of the current batch drawn with probability
    proportional to their weight (at most half the batch); their weight becomes the smallest weight of the
    others. Rows are drawn from a generator keyed by the seed and the step, so runs are reproducible.
    """

    def __init__(self, ratio, n_clusters, seed):
        self.ratio = float(ratio)
        self.n_clusters = int(n_clusters)
        self.seed = int(seed)
        self.samples_since = 0

    def apply(self, step, rows, weights, centers, seen_counts):
        """Reassign in place after step ``step``; return the number of centers moved."""
        if self.ratio <= 0:
            return 0
        self.samples_since += rows.shape[0]
        if not (seen_counts == 0).any() and self.samples_since < 10 * self.n_clusters:
            return 0
        self.samples_since = 0
        starved = seen_counts < self.ratio * seen_counts.max()
        if starved.sum() > 0.5 * rows.shape[0]:
            starved[np.argsort(seen_counts, kind="stable")[int(0.5 * rows.shape[0]) :]] = False
        n_moved = int(starved.sum())
        if n_moved == 0:
            return 0
        p = None if weights is None else weights / weights.sum()
        rng = np.random.default_rng([self.seed, step])
        picks = rng.choice(rows.shape[0], size=n_moved, replace=False, p=p)
        centers[starved] = rows[picks]
        seen_counts[starved] = np.min(seen_counts[~starved])
        return n_moved


def run_steps(
    batches,
    centers,
    seen_counts,
    learning_rate,
    stopping=None,
    time_left=None,
    batch_weights=None,
    reassignment=None,
    first_step=0,
):
    """Mini-batch steps, one per batch, in order; stops early when ``stopping`` or the time budget says so.

    Parameters
    ----------
    batches : list of ndarray (b, d)
    centers : ndarray (k, d)
    seen_counts : float64 (k,)
        Weight each center has received so far (updated copy returned).
    learning_rate : {"sklearn", "beta"}
    stopping : EarlyStopping, optional
        Updated in place.
    time_left : float, optional
        Seconds left in the budget; checked after each step.
    batch_weights : list of float64 (b,), optional
        Sample weights of each batch.
    reassignment : Reassignment, optional
        Updated in place.
    first_step : int
        Global index of the first step (keys the reassignment draws).

    Returns
    -------
    centers : ndarray (k, d)
    seen_counts : float64 (k,)
    records : list of (batch_inertia, center_shift)
    stop_reason : str or None
    """
    import time

    start = time.perf_counter()
    centers = np.array(centers, copy=True)
    seen_counts = np.array(seen_counts, dtype=np.float64, copy=True)
    k = centers.shape[0]
    records = []
    stop_reason = None
    for t, rows in enumerate(batches):
        weights = None if batch_weights is None else batch_weights[t]
        labels, dist2 = nearest_centers(rows, centers)
        sums, counts, sse = cluster_stats(rows, labels, dist2, k, weights)
        batch_total = float(counts.sum())
        rates = learning_rates(learning_rate, counts, batch_total, seen_counts)
        new_centers = minibatch_update(centers, sums, counts, rates)
        shift = float(np.sum((new_centers.astype(np.float64) - centers) ** 2))
        seen_counts += counts
        centers = new_centers
        if reassignment is not None:
            reassignment.apply(first_step + t, rows, weights, centers, seen_counts)
        inertia = float(sse.sum())
        records.append((inertia, shift))
        if stopping is not None:
            stop_reason = stopping.update(inertia / max(batch_total, 1e-300), shift)
            if stop_reason is not None:
                break
        if time_left is not None and time.perf_counter() - start >= time_left:
            stop_reason = "max_time"
            break
    return centers, seen_counts, records, stop_reason
