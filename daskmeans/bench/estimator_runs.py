"""The daskmeans side of a bench run: one estimator fitted from the shared initial centers, its center snapshots
turned into the candidates whose exact energies the bench evaluates."""

from __future__ import annotations

import time

import numpy as np

from ..registry import make_estimator
from ..storage.zarr_safe import to_jsonable
from .common import settle
from .traces import Candidate, Trace


def warning_texts(caught) -> list:
    """The distinct warnings a run raised, as text, at most five."""
    texts = []
    for w in caught:
        text = f"{w.category.__name__}: {w.message}"
        if text not in texts:
            texts.append(text)
    return texts[:5]


def run_daskmeans(name, data, init, k, seed, budget, client, params=None) -> Trace:
    """Fit a daskmeans algorithm from ``init`` (with the estimator parameters ``params`` besides its defaults);
    its center snapshots become the candidates."""
    params = {"init": init, **(params or {})}

    def estimator_with(max_time):
        return make_estimator(
            name, n_clusters=k, max_time=max_time, random_state=seed, client=client, progress=False, **params
        )

    def refit(max_time, max_iter=None) -> Candidate:
        """The whole fit again with ``max_time`` (None: the run's budget) and, when given, ``max_iter``, timed from
        the call to its return."""
        again = estimator_with(budget if max_time is None else max_time)
        if max_iter is not None:
            again.set_params(max_iter=max_iter)
        settle(client)
        started = time.perf_counter()
        again.fit(data.fit_input)
        seconds = time.perf_counter() - started
        centers = np.asarray(again.cluster_centers_)
        iteration = getattr(again, "n_iter_", None)
        return Candidate(step=-1, time=seconds, centers=centers, iteration=iteration, kind="fit", max_iter=max_iter)

    estimator = estimator_with(budget)
    snapshots_supported = "snapshot_centers" in estimator.get_params()
    if snapshots_supported:
        estimator.set_params(snapshot_centers=True)
    settle(client)
    start = time.perf_counter()
    estimator.fit(data.fit_input)
    fit_seconds = time.perf_counter() - start
    history = getattr(estimator, "history_", [])
    candidates = [
        Candidate(
            step=0,
            time=snap["perf_counter"] - start,
            centers=snap["centers"],
            iteration=snap["iteration"],
            kind="snapshot",
        )
        for snap in getattr(estimator, "center_snapshots_", None) or []
    ]
    # A fit that stops after some iteration still runs its closing work (the final statistics pass) before
    # it returns: a snapshot counts as delivered that much later, as the ladder peers' rungs include theirs.
    tail = fit_seconds - max((c.time for c in candidates), default=fit_seconds)
    for candidate in candidates:
        candidate.available_time = candidate.time
        candidate.time += tail
    candidates.append(
        Candidate(
            step=0,
            time=fit_seconds,
            centers=np.asarray(estimator.cluster_centers_),
            iteration=getattr(estimator, "n_iter_", None),
            kind="final",
        )
    )
    passes = [r.get("passes") for r in history if r.get("passes") is not None]
    by_iteration = {r.get("iteration"): r.get("passes") for r in history}
    for candidate in candidates:
        candidate.passes = by_iteration.get(candidate.iteration)
    notes = (
        []
        if snapshots_supported
        else ["no center snapshots: exact energy known at the end only (history energies are in the record)"]
    )
    if passes:
        notes.append("passes as counted by the algorithm; fit adds one summary pass and one final statistics pass")
    notes += reads_notes(history)
    if candidates[:-1]:
        notes.append(f"snapshot times include the {tail:.3g} s the fit spent after its last iteration")
    if isinstance(params["init"], str):
        notes.append(
            f"seeded by itself (init={params['init']!r}), not from the shared initial centers; its times "
            "include the seeding"
        )
    return Trace(
        candidates=candidates,
        fit_seconds=fit_seconds,
        timed_seconds=fit_seconds,
        refit=refit,
        n_iter=getattr(estimator, "n_iter_", None),
        passes=max(passes) if passes else None,
        stop_reason=getattr(estimator, "stop_reason_", None),
        history=to_jsonable(list(history)),
        notes=notes,
        params={
            key: value
            for key, value in estimator.get_params().items()
            if isinstance(value, (int, float, str, bool)) or value is None
        },
    )


def reads_notes(history) -> list:
    """What a mini-batch fit read, from its pools' ``blocks_read`` and ``bytes_read`` (none for other fits)."""
    pools = [r for r in history if r.get("bytes_read") is not None]
    if not pools:
        return []
    total = sum(r["bytes_read"] for r in pools)
    steps = max(1, int(pools[-1]["steps"]))
    return [
        f"read {len(pools)} pools of {np.mean([r['blocks_read'] for r in pools]):.3g} blocks, "
        f"{total / len(pools) / 2**20:,.1f} MiB a pool as stored ({total / steps / 2**10:,.1f} KiB a step)"
    ]
