"""What fits: the largest model on some devices, or the devices a model needs.

Only per-parameter memory counts here (parameters, gradients, master copy, optimizer state);
activations grow with batch and sequence length and are excluded, so both answers are bounds:
the largest model is an upper bound and the device count a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.hardware import Hardware
from tensorledger.napkin.arithmetic import (
    Step,
    check_count,
    check_positive,
    check_result,
    whole_devices,
)
from tensorledger.napkin.recipes import BytesPerParam, bytes_per_param
from tensorledger.summary import summary
from tensorledger.units import format_count

__all__ = ["ACTIVATIONS_CAVEAT", "DevicesNeeded", "LargestModel", "devices_needed",
           "largest_model"]

ACTIVATIONS_CAVEAT = ("activations are excluded (they grow with batch × sequence length), so this "
                      "is an upper bound on the model size and a lower bound on devices")


@dataclass(frozen=True)
class LargestModel:
    hardware: str
    count: int
    memory_bytes: float
    breakdown: BytesPerParam
    params: float
    caveat: str
    steps: tuple[Step, ...]

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        b = self.breakdown
        return summary("LargestModel", f"{self.count:,} × {self.hardware}",
                       f"{b.precision} + {b.optimizer} at {b.total_bytes_per_param:g} bytes "
                       "per parameter", f"{format_count(self.params)} params")


def largest_model(hardware: Hardware, count: int, precision: str, optimizer: str
                  ) -> LargestModel:
    """Parameters that fit: count × device memory / bytes per parameter.

    >>> from tensorledger.hardware import get_hardware
    >>> round(largest_model(get_hardware("h100"), 8, "lecture", "adamw").params / 1e9, 1)
    53.3
    """
    check_count("count", count)
    breakdown = bytes_per_param(precision, optimizer)
    memory = check_result("memory of all devices", hardware.memory_bytes * count)
    params = check_result("largest model", memory / breakdown.total_bytes_per_param)
    steps = (
        Step("memory of all devices", "count × memory per device", memory, "bytes"),
        Step("bytes per parameter", "params + grads + master + optimizer state",
             breakdown.total_bytes_per_param, "bytes_per_param"),
        Step("largest model", "memory / bytes per parameter", params, "params"),
    )
    return LargestModel(hardware=hardware.id, count=count, memory_bytes=memory,
                        breakdown=breakdown, params=params, caveat=ACTIVATIONS_CAVEAT,
                        steps=steps)


@dataclass(frozen=True)
class DevicesNeeded:
    hardware: str
    params: float
    breakdown: BytesPerParam
    total_bytes: float
    devices: int
    caveat: str
    steps: tuple[Step, ...]

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        b = self.breakdown
        return summary("DevicesNeeded", f"{format_count(self.params)} params",
                       f"{b.precision} + {b.optimizer} at {b.total_bytes_per_param:g} bytes "
                       "per parameter", f"{self.devices:,} × {self.hardware}")


def devices_needed(hardware: Hardware, params: float, precision: str, optimizer: str
                   ) -> DevicesNeeded:
    """Devices = ceil(params × bytes per parameter / memory per device)."""
    check_positive("params", params)
    breakdown = bytes_per_param(precision, optimizer)
    total = check_result("memory for the model", params * breakdown.total_bytes_per_param)
    devices = whole_devices("number of devices", total / hardware.memory_bytes)
    steps = (
        Step("bytes per parameter", "params + grads + master + optimizer state",
             breakdown.total_bytes_per_param, "bytes_per_param"),
        Step("memory for the model", "params × bytes per parameter", total, "bytes"),
        Step("devices needed", "ceil(memory / memory per device)", devices, "devices"),
    )
    return DevicesNeeded(hardware=hardware.id, params=params, breakdown=breakdown,
                         total_bytes=total, devices=devices, caveat=ACTIVATIONS_CAVEAT,
                         steps=steps)
