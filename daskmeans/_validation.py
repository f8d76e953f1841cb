"""Parameter checks with messages that say the fix."""

from __future__ import annotations

import numbers

import numpy as np

from .exceptions import InvalidParameterError


def check_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None, allow_none=False):
    """Return ``value`` as an int after checking its type and range."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InvalidParameterError(f"{name} must be an integer, got {value!r} ({type(value).__name__}).")
    value = int(value)
    if minimum is not None and value < minimum:
        raise InvalidParameterError(f"{name} must be >= {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(f"{name} must be <= {maximum}, got {value}.")
    return value


def check_float(value, name: str, *, minimum=None, maximum=None, strict_minimum=False, allow_none=False):
    """Return ``value`` as a float after checking its type, finiteness and range."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidParameterError(f"{name} must be a number, got {value!r} ({type(value).__name__}).")
    value = float(value)
    if not np.isfinite(value):
        raise InvalidParameterError(f"{name} must be finite, got {value}.")
    if minimum is not None:
        if strict_minimum and value <= minimum:
            raise InvalidParameterError(f"{name} must be > {minimum}, got {value}.")
        if not strict_minimum and value < minimum:
            raise InvalidParameterError(f"{name} must be >= {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(f"{name} must be <= {maximum}, got {value}.")
    return value


def check_choice(value, name: str, choices):
    """Check that ``value`` is one of ``choices`` (strings)."""
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise InvalidParameterError(f"{name} must be one of {options}; got {value!r}.")
    return value


def check_max_time(value):
    """``max_time`` is a wall-clock budget in seconds, or None for no budget."""
    return check_float(value, "max_time", minimum=0.0, strict_minimum=True, allow_none=True)


def check_driver_rows(value, name, estimator=None):
    """``driver_rows``: ``"auto"`` or a number of rows (0: every iteration on the workers)."""
    if isinstance(value, str):
        if value != "auto":
            raise InvalidParameterError(f'{name} must be "auto" or an integer >= 0 (rows), got {value!r}.')
    else:
        check_int(value, name, minimum=0)
