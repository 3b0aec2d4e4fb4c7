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
    QUANTIZATION_BLOCK,
    BytesPerParam,
    Optimizer,
    Precision,
    RecipeBytes,
    bytes_per_param,
    recipe_bytes,
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
from tensorledger.napkin.transformer import (
    ATTENTION_CONVENTIONS,
    PRESETS,
    ForwardFlops,
    ModelParams,
    ParameterCount,
    PresetSummary,
    TrainingFlops,
    TransformerConfig,
    forward_flops_per_token,
    get_preset,
    parameter_count,
    preset_params,
    preset_summaries,
    transformer_training_flops,
)

__all__ = [
    "ATTENTION_CONVENTIONS",
    "OPTIMIZERS",
    "PRECISIONS",
    "PRESETS",
    "QUANTIZATION_BLOCK",
    "BytesPerParam",
    "DevicesForDuration",
    "DevicesNeeded",
    "FlopBudget",
    "ForwardFlops",
    "LargestModel",
    "ModelParams",
    "Optimizer",
    "ParameterCount",
    "Precision",
    "PresetSummary",
    "RecipeBytes",
    "Step",
    "TensorMemory",
    "TrainingFlops",
    "TrainingTime",
    "TransformerConfig",
    "bytes_per_param",
    "devices_for_duration",
    "devices_needed",
    "flop_budget",
    "forward_flops_per_token",
    "get_preset",
    "largest_model",
    "parameter_count",
    "preset_params",
    "preset_summaries",
    "recipe_bytes",
    "resolve_optimizer",
    "resolve_precision",
    "tensor_memory",
    "training_flops",
    "training_time",
    "transformer_training_flops",
]
