"""The one path by which every estimator starts a fit afresh or resumes it from its checkpoint.

The state a fit saves is ``{"seed", "elapsed", <the estimator's own fields>..., <key>: <the algorithm's state>}``:
the root seed (so that a resumed fit draws what the interrupted one would have), the wall time spent (so that
``max_time`` and the history's times continue), what the estimator made before the algorithm started (the
resolved kernel, the coreset, the best of the finished ``n_init`` runs) and, under ``"algorithm"`` (KMeans:
``"run_state"``), the algorithm's own state (:mod:`daskmeans.storage.checkpoint`).
"""

from __future__ import annotations

from ..algorithms.init import initial_centers, seeding_plan
from ..algorithms.plan import SeedingPlan
from ..algorithms.result import RunContext, restore_clock
from ..engine.random import seed_from_random_state, stage_key


class FitStart:
    """Where a fit starts: afresh, or from its checkpoint's last state.

    Parameters
    ----------
    checkpoint : Checkpoint or None
        The open checkpoint of this fit (None: no checkpoint).
    random_state : int, numpy Generator or None
        The estimator's, for a fit that starts afresh.
    clock : Clock
        The fit's clock; a resumed fit continues it from the time saved.

    Attributes
    ----------
    seed : int
        The root seed of the fit.
    saved : dict or None
        The state saved last (None: the fit starts afresh).
    """

    def __init__(self, checkpoint, random_state, clock):
        self.checkpoint = checkpoint
        self.clock = clock
        self.saved = None if checkpoint is None else checkpoint.state
        if self.saved is None:
            self.seed = seed_from_random_state(random_state)
        else:
            self.seed = self.saved["seed"]
            restore_clock(clock, self.saved["elapsed"])

    @property
    def resuming(self) -> bool:
        """Whether the fit continues from a saved state."""
        return self.saved is not None

    def state(self, **fields) -> dict:
        """The state to save: the seed, the time spent and ``fields``."""
        return {"seed": self.seed, "elapsed": self.clock.elapsed(), **fields}

    def save(self, **fields):
        """Save :meth:`state` of ``fields`` (between two runs of an algorithm)."""
        self.checkpoint.save(self.state(**fields))

    def hook(self, key="algorithm", fresh=False, **fields):
        """The algorithm's :class:`~daskmeans.storage.checkpoint.CheckpointHook`, None without a checkpoint.

        The algorithm resumes from the saved state's ``key`` (unless ``fresh``: a run the checkpoint had not
        started yet) and saves its state there, next to the seed, the time spent and ``fields``.
        """
        if self.checkpoint is None:
            return None
        resume = None if fresh or self.saved is None else self.saved[key]
        return self.checkpoint.hook(resume, wrap=lambda algorithm_state: self.state(**fields, **{key: algorithm_state}))


def plan_seeding(estimator, data, client) -> SeedingPlan:
    """The seeding's choices for ``data`` by the estimator's seeding options (``init``, ``init_rounds``,
    ``oversampling_factor``, ``init_sample_size``; :func:`daskmeans.algorithms.init.seeding_plan`)."""
    return seeding_plan(
        data.array,
        estimator.n_clusters,
        estimator.init,
        client,
        rounds=estimator.init_rounds,
        oversampling_factor=estimator.oversampling_factor,
        sample_size=estimator.init_sample_size,
    )


def seed_centers(estimator, data, weights, client, seed, *, plan, run=0, recorder=None):
    """The initial centers of run ``run`` by the estimator's ``init`` and the seeding ``plan`` (:func:`plan_seeding`):
    ``(centers, passes)``.

    With a :class:`~daskmeans.progress.SnapshotRecorder`, the seeding is its seeding phase (a bar over the passes)
    and the initial centers its first snapshot.
    """
    key = stage_key(seed, "init", run)
    if recorder is None:
        where = RunContext(client=client, weights=weights)
        return initial_centers(data.array, estimator.n_clusters, estimator.init, key, context=where, plan=plan)
    # on the fit's clock: k-means|| starts no round that would end past max_time, nor reclusters once it is spent
    options = dict(context=RunContext(clock=recorder.clock, client=client, weights=weights), plan=plan)
    with recorder.seeding(estimator.init) as phase:
        centers, passes = initial_centers(
            data.array, estimator.n_clusters, estimator.init, key, on_progress=phase.seeding_callback(), **options
        )
    recorder.start(centers)
    return centers, passes
