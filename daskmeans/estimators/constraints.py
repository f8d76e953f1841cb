"""The constraints an estimator's parameters are checked against, once per fit
(:meth:`~daskmeans.estimators.base.ClusteringEstimator._validate_params`): one object per kind of value, each with
``check(value, name, estimator)``."""

from __future__ import annotations

import numpy as np

from .._validation import check_choice, check_float, check_int, check_max_time
from ..algorithms.init import INIT_METHODS, check_init
from ..engine.random import seed_from_random_state
from ..exceptions import InvalidParameterError


# -- parameter constraints ------------------------------------------------------------------------------------------
class Integer:
    """An integer in ``[minimum, maximum]`` (or None when ``none``); ``label`` names it in messages."""

    def __init__(self, minimum=None, maximum=None, *, none=False, label=None):
        self.minimum, self.maximum, self.none, self.label = minimum, maximum, none, label

    def check(self, value, name, estimator):
        check_int(value, self.label or name, minimum=self.minimum, maximum=self.maximum, allow_none=self.none)


class Real:
    """A finite number in ``[minimum, maximum]`` (``(minimum, maximum]`` when ``strict``), or None when ``none``."""

    def __init__(self, minimum=None, maximum=None, *, strict=False, none=False, label=None):
        self.minimum, self.maximum, self.strict, self.none, self.label = minimum, maximum, strict, none, label

    def check(self, value, name, estimator):
        check_float(
            value,
            self.label or name,
            minimum=self.minimum,
            maximum=self.maximum,
            strict_minimum=self.strict,
            allow_none=self.none,
        )


class Options:
    """One of the strings ``choices``."""

    def __init__(self, choices):
        self.choices = choices

    def check(self, value, name, estimator):
        check_choice(value, name, self.choices)


class Boolean:
    """True or False."""

    def check(self, value, name, estimator):
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidParameterError(f"{name} must be True or False, got {value!r}.")


class MaxTime:
    """A wall-clock budget in seconds (> 0), or None."""

    def check(self, value, name, estimator):
        check_max_time(value)


class RandomState:
    """None, a non-negative int or a numpy Generator/RandomState."""

    def check(self, value, name, estimator):
        try:
            seed_from_random_state(0 if value is None else value)
        except (TypeError, ValueError) as error:
            raise InvalidParameterError(str(error)) from error


class Init:
    """A seeding method of ``methods``, or an array of ``n_clusters`` points (its width is checked with the data)."""

    def __init__(self, methods=INIT_METHODS):
        self.methods = methods

    def check(self, value, name, estimator):
        check_init(value, estimator.n_clusters, methods=self.methods)


class Rule:
    """A check written as a function ``rule(value, name, estimator)`` (values with several accepted forms)."""

    def __init__(self, rule):
        self.rule = rule

    def check(self, value, name, estimator):
        self.rule(value, name, estimator)


#: Not checked (where and how a fit is shown).
UNCHECKED = None

#: The seeding options of the k-means family (k-means||, k-means++ on a sample).
SEEDING_CONSTRAINTS = {
    "init_rounds": Integer(1),
    "oversampling_factor": Real(0.0, strict=True),
    "init_sample_size": Integer(1, none=True),
}
