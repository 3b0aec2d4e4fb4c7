"""A step of napkin arithmetic, and the checks its inputs go through."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tensorledger.errors import InputError

__all__ = ["MAX_COUNT", "Step", "check_count", "check_fraction", "check_positive",
           "check_result", "whole_devices"]

#: The most devices (or any other count) a napkin answer takes or gives: int64's largest.
MAX_COUNT = 2**63 - 1


@dataclass(frozen=True)
class Step:
    """One line of working: what it is, the symbolic formula, its value and the value's unit.

    ``unit`` is one of the house's unit words (``flops``, ``flop_per_s``, ``bytes``, ``s``,
    ``days``, ``devices``, ``params``, ``bytes_per_param``, ``flops_per_day``); the report
    formats the value by it.
    """

    label: str
    formula: str
    value: float
    unit: str


def check_positive(name: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{name} must be a positive number, got {value!r}")
    return value


def check_fraction(name: str, value: float) -> float:
    if not math.isfinite(value) or not 0 < value <= 1:
        raise InputError(f"{name} must be in (0, 1], got {value!r}")
    return value


def check_count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        shown = repr(value) if len(repr(value)) <= 30 else f"a number of {len(str(value))} digits"
        raise InputError(f"{name} must be a whole number from 1 to 2^63 - 1, got {shown}")
    return value


def check_result(label: str, value: float) -> float:
    """An answer that is still a finite number; inputs at the edges of their ranges can push a
    product past a float's range (about 1.8e308) or a quotient to infinity."""
    if not math.isfinite(value):
        raise InputError(f"the {label} overflows a float (about 1.8e308): the inputs are too "
                         "far apart in size for a meaningful answer; give values nearer a real "
                         "training run")
    return value


def whole_devices(label: str, exact: float) -> int:
    """``ceil(exact)`` devices, at least one, forgiving float noise of one part in 1e9; more
    than :data:`MAX_COUNT` is refused."""
    check_result(label, exact)
    if exact > MAX_COUNT:
        raise InputError(f"the {label} is {exact:.4g}, more than 2^63 - 1 devices; give a "
                         "smaller model or more time")
    return max(1, math.ceil(exact - 1e-9 * exact))
