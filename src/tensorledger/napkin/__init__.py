"""Closed forms that need no trace and no torch: time, budgets, bytes per parameter, fit.

Each answer is a frozen dataclass whose ``steps`` spell out the arithmetic, so the CLI can show
the working the way the lecture does on its slides.
"""

from __future__ import annotations

from tensorledger.napkin.arithmetic import Step
from tensorledger.napkin.fit import DevicesNeeded, LargestModel, devices_needed, largest_model
from tensorledger.napkin.recipes import (
    OPTIMIZERS,
    PRECISIONS,
    BytesPerParam,
    Optimizer,
    Precision,
    bytes_per_param,
    resolve_optimizer,
    resolve_precision,
)
from tensorledger.napkin.tensor import TensorMemory, tensor_memory
from tensorledger.napkin.training import (
    DevicesForDuration,
    FlopBudget,
    TrainingTime,
    devices_for_duration,
    flop_budget,
    training_flops,
    training_time,
)

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "BytesPerParam",
    "DevicesForDuration",
    "DevicesNeeded",
    "FlopBudget",
    "LargestModel",
    "Optimizer",
    "Precision",
    "Step",
    "TensorMemory",
    "TrainingTime",
    "bytes_per_param",
    "devices_for_duration",
    "devices_needed",
    "flop_budget",
    "largest_model",
    "resolve_optimizer",
    "resolve_precision",
    "tensor_memory",
    "training_flops",
    "training_time",
]
