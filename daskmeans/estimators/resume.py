"""The one path by which an estimator starts a fit afresh or resumes it from a checkpoint."""

from __future__ import annotations

from ..algorithms.init import initial_centers
from ..engine.random import seed_from_random_state, stage_key


def _seed_or_resume(estimator, data, weights, client, checkpoint, clock):
    """Root seed, checkpoint hook and initial centers of a fit with the shared seeding parameters.

    A fit that resumes from a checkpoint takes its centers from the algorithm's saved state: ``centers`` is then
    None and ``passes`` 0.
    """
    seed, hook = _resume_point(checkpoint, estimator.random_state, clock)
    centers, passes = None, 0
    if hook is None or hook.resume is None:
        centers, passes = initial_centers(
            data.array, estimator.n_clusters, estimator.init, stage_key(seed, "init", 0), weights=weights,
            client=client, rounds=estimator.init_rounds, oversampling_factor=estimator.oversampling_factor,
            sample_size=estimator.init_sample_size,
        )
    return seed, hook, centers, passes


def _resume_point(checkpoint, random_state, clock):
    """The root seed and the algorithm's checkpoint hook (None without a checkpoint).

    A resumed fit takes the seed and the elapsed time from the checkpoint; the algorithm's own state is under
    ``"algorithm"``.
    """
    if checkpoint is None:
        return seed_from_random_state(random_state), None
    from ..algorithms.result import restore_clock

    saved = checkpoint.state
    if saved is None:
        seed = seed_from_random_state(random_state)
    else:
        seed = saved["seed"]
        restore_clock(clock, saved["elapsed"])
    hook = checkpoint.hook(None if saved is None else saved["algorithm"],
                           wrap=lambda state: {"seed": seed, "elapsed": clock.elapsed(), "algorithm": state})
    return seed, hook
