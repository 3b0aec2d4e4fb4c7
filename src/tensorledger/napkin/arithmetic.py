"""A step of napkin arithmetic, and the checks its inputs go through."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tensorledger.errors import InputError

__all__ = ["Step", "check_count", "check_fraction", "check_positive"]


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
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a whole number >= 1, got {value!r}")
    return value
