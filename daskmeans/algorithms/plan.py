"""The plan of one fit: every data-dependent choice an estimator makes, made once before the work starts.

An estimator's ``fit`` opens the data, then resolves each choice that depends on it (the bounds kept between
iterations, whether the iterations run on the driver or on the workers, sample and batch sizes, where the blocks
run) in one place, into one immutable plan: a frozen dataclass of the values chosen, with a short reason for
each. The algorithm reads its plan and never decides again what the plan decided; the fitted estimator keeps it
as ``fit_plan_``. Each algorithm module defines its own plan (:class:`FitPlan`'s subclasses).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class FitPlan:
    """The base of every algorithm's plan: its fields are the choices, ``reasons`` says why each was made.

    Attributes
    ----------
    reasons : dict
        ``{field name: why that value}``, for the fields chosen from the data or the cluster (a field given as a
        parameter and used as it is has no reason).
    """

    reasons: dict = field(default_factory=dict, compare=False)

    def choices(self) -> dict:
        """The chosen values, ``{field name: value}``, in the order the plan declares them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "reasons"}

    def as_dict(self) -> dict:
        """The plan as plain data: ``{"plan": class name, field name: value, ..., "reasons": {...}}`` (a plan
        within it, such as the seeding's, as a dict of its own)."""
        choices = {
            name: value.as_dict() if isinstance(value, FitPlan) else value for name, value in self.choices().items()
        }
        return {"plan": type(self).__name__, **choices, "reasons": dict(self.reasons)}

    def summary(self) -> str:
        """The chosen values on one line, ``name=value`` each (a plan within it in parentheses)."""
        return " ".join(
            f"{name}=({value.summary()})" if isinstance(value, FitPlan) else f"{name}={value}"
            for name, value in self.choices().items()
        )

    def __str__(self) -> str:
        lines = [f"{type(self).__name__}:"]
        for name, value in self.choices().items():
            if isinstance(value, FitPlan):
                lines.append(f"  {name} = " + str(value).replace("\n", "\n  "))
                continue
            reason = self.reasons.get(name)
            lines.append(f"  {name} = {value!r}" + (f"  ({reason})" if reason else ""))
        return "\n".join(lines)


@dataclass(frozen=True, kw_only=True)
class SeedingPlan(FitPlan):
    """How a fit draws its initial centers (:func:`daskmeans.algorithms.init.initial_centers`).

    Attributes
    ----------
    init : str
        The seeding method, or ``"given"`` for centers given as an array.
    rounds : int
        Rounds of k-means||.
    oversampling_factor : float
        k-means|| draws about ``oversampling_factor * n_clusters`` candidates per round.
    sample_rows : int or None
        Rows the seeding looks at (k-means||: every row when it is the data's number of rows, else a uniform
        sample of about that many; k-means++: a uniform sample of that many); None for the other methods.
    """

    init: str = "k-means||"
    rounds: int = 5
    oversampling_factor: float = 2.0
    sample_rows: int | None = None
