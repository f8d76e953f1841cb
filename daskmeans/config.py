"""Every tunable of daskmeans in one place: slab and block sizes, pool sizes, driver limits, default rules.

These are not parameters of any estimator: they bound memory per task and set the grain of the work, and no
result depends on them beyond floating-point summation order where said. Each is documented where it is set.
Modules read them at import time (``from daskmeans.config import NAME``); to change one for a run, set it
before importing the module that uses it.
"""

from __future__ import annotations

# -- engine: task graphs ------------------------------------------------------------------------------------------

# -- storage: input blocks and outputs ----------------------------------------------------------------------------

# -- kernels: memory per call -------------------------------------------------------------------------------------

# -- passes: per-task work ----------------------------------------------------------------------------------------

# -- algorithms ---------------------------------------------------------------------------------------------------

# -- estimators: defaults derived from the data -------------------------------------------------------------------

# -- datasets and memory model ------------------------------------------------------------------------------------
