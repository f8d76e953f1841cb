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
        """The plan as plain data: ``{"plan": class name, field name: value, ..., "reasons": {...}}``."""
        return {"plan": type(self).__name__, **self.choices(), "reasons": dict(self.reasons)}

    def __str__(self) -> str:
        lines = [f"{type(self).__name__}:"]
        for name, value in self.choices().items():
            reason = self.reasons.get(name)
            lines.append(f"  {name} = {value!r}" + (f"  ({reason})" if reason else ""))
        return "\n".join(lines)
