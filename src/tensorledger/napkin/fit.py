"""What fits: the largest model on some devices, or the devices a model needs.

:func:`largest_model` and :func:`devices_needed` count only per-parameter memory (parameters,
gradients, master copy, optimizer state); activations grow with batch and sequence length and
are excluded, so both answers are bounds: the largest model is an upper bound and the device
count a lower bound.  :func:`largest_model_with_activations` adds the activations of a stated
batch and sequence for a GPT-3-shaped family of models, and answers below the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.errors import InputError
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

__all__ = ["ACTIVATIONS_CAVEAT", "ACTIVATION_BYTES_PER_ELEMENT", "ASPECT", "DevicesNeeded",
           "LargestModel", "LargestModelWithActivations", "devices_needed", "largest_model",
           "largest_model_with_activations"]

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
    active_params: float | None = None  # a mixture of experts: what a token runs of it

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        b = self.breakdown
        return summary("LargestModel", f"{self.count:,} × {self.hardware}",
                       f"{b.precision} + {b.optimizer} at {b.total_bytes_per_param:g} bytes "
                       "per parameter", f"{format_count(self.params)} params")


def largest_model(hardware: Hardware, count: int, precision: str, optimizer: str,
                  experts: int = 1, top_k: int = 1) -> LargestModel:
    """Parameters that fit: count × device memory / bytes per parameter.

    A mixture of ``experts`` E with ``top_k`` k holds every expert's state, so the total is the
    same; a token runs (4 + 8·k) / (4 + 8·E) of it in a family whose layer has attention 4·d²
    and E MLPs of 8·d² (embeddings left out).

    >>> from tensorledger.hardware import get_hardware
    >>> round(largest_model(get_hardware("h100"), 8, "lecture", "adamw").params / 1e9, 1)
    53.3
    >>> round(largest_model(get_hardware("h100"), 8, "lecture", "adamw", 8, 2).active_params
    ...       / 1e9, 1)                         # 53.3B · 20 / 68
    15.7
    """
    check_count("count", count)
    _check_routing(experts, top_k)
    breakdown = bytes_per_param(precision, optimizer)
    memory = check_result("memory of all devices", hardware.memory_bytes * count)
    params = check_result("largest model", memory / breakdown.total_bytes_per_param)
    steps: tuple[Step, ...] = (
        Step("memory of all devices", "count × memory per device", memory, "bytes"),
        Step("bytes per parameter", "params + grads + master + optimizer state",
             breakdown.total_bytes_per_param, "bytes_per_param"),
        Step("largest model", "memory / bytes per parameter", params, "params"),
    )
    active = None
    if experts > 1:
        share = _layer_params(top_k) / _layer_params(experts)
        active = params * share
        steps += (Step("active per token", f"params × (4 + 8·{top_k}) / (4 + 8·{experts})",
                       active, "params"),)
    return LargestModel(hardware=hardware.id, count=count, memory_bytes=memory,
                        breakdown=breakdown, params=params, caveat=ACTIVATIONS_CAVEAT,
                        steps=steps, active_params=active)


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


# ------------------------------------------------------------------ with activations

#: d_model / n_layers of the model family the activation-aware answer scales: GPT-3 175B's
#: 12288 / 96 = 128.
ASPECT = 128
#: Activation bytes per token per layer per unit of width (Korthikanti et al. 2022, 16-bit, flash
#: attention: no s² scores): 34 with nothing recomputed, 2 (the layer input) with every block
#: checkpointed.
ACTIVATION_BYTES_PER_ELEMENT = {"none": 34, "full": 2}
#: Of the 34 kept with nothing recomputed, the MLP's (Korthikanti et al. 2022, §4.1: its input
#: 2, the 4d hidden 8, the activation's output 8, the dropout mask 1): a mixture of experts
#: keeps them once for each of a token's k experts.
MLP_ACTIVATION_BYTES_PER_ELEMENT = 19


def _check_routing(experts: int, top_k: int) -> None:
    check_count("experts", experts)
    check_count("top_k", top_k)
    if top_k > experts:
        raise InputError(f"--top-k ({top_k:,}) is more experts than the model has "
                         f"(--experts {experts:,})")


def _layer_params(experts: int) -> int:
    """Parameters of a family layer per d²: attention 4, and E MLPs of 8 (12 when dense)."""
    return 4 + 8 * experts


@dataclass(frozen=True)
class LargestModelWithActivations:
    """The largest model of a GPT-3-shaped family that fits beside the activations of a batch.

    The family: d_model = ``aspect`` · n_layers, parameters 12·L·d² (attention 4·d², a 4d MLP
    8·d²; embeddings and norms left out).  Activations per layer (Korthikanti et al. 2022,
    flash attention, 16-bit): c·s·B·d bytes, c = 34 with nothing recomputed, 2 with every block
    checkpointed (its input kept; the one layer being recomputed is left out).  Memory is
    pooled over the devices, as ZeRO-3 with data parallelism over the B sequences pools it:
    count · memory = bytes/param · 12·a²·L³ + c·s·B·a·L², solved for L.

    A mixture of ``experts`` E MLPs of which a token runs ``top_k`` k: parameters
    (4 + 8·E)·L·d² (every expert's state is held), active (4 + 8·k)·L·d², and with nothing
    recomputed c = 15 + 19·k (the MLP's 19 kept for each of a token's k experts; the router's
    scores left out).  E = k = 1 is the dense family.
    """

    hardware: str
    count: int
    memory_bytes: float
    breakdown: BytesPerParam
    batch: int
    seq_len: int
    checkpoint: str
    aspect: int
    n_layers: float  # real: the family is continuous
    d_model: float
    params: float
    states_bytes: float
    activations_bytes: float
    params_without_activations: float  # largest_model's answer, activations ignored
    steps: tuple[Step, ...]
    experts: int = 1
    top_k: int = 1
    active_params: float | None = None  # a mixture of experts: what a token runs

    @property
    def layer_params_per_d2(self) -> int:
        """A layer's parameters over d²: 4 (attention) + 8 for each expert's MLP."""
        return _layer_params(self.experts)

    def __repr__(self) -> str:  # pragma: no mutate block (presentation: the summary line)
        return summary("LargestModelWithActivations", f"{self.count:,} × {self.hardware}",
                       f"batch {self.batch} × {self.seq_len}",
                       f"{format_count(self.params)} params "
                       f"(without activations {format_count(self.params_without_activations)})")


def largest_model_with_activations(hardware: Hardware, count: int, precision: str,
                                   optimizer: str, *, batch: int, seq_len: int,
                                   checkpoint: str = "none", aspect: int = ASPECT,
                                   experts: int = 1, top_k: int = 1
                                   ) -> LargestModelWithActivations:
    """The lecture's largest model, with the activations of ``batch`` sequences of ``seq_len``.

    >>> from tensorledger.hardware import get_hardware
    >>> m = largest_model_with_activations(get_hardware("h100"), 8, "lecture", "adamw",
    ...                                    batch=8, seq_len=4096)
    >>> round(m.params / 1e9, 1), round(m.params_without_activations / 1e9, 1)
    (24.0, 53.3)
    >>> moe = largest_model_with_activations(get_hardware("h100"), 8, "lecture", "adamw",
    ...                                      batch=8, seq_len=4096, experts=8, top_k=2)
    >>> round(moe.params / 1e9, 1), round(moe.active_params / 1e9, 1)
    (34.9, 10.3)
    """
    check_count("count", count)
    _check_routing(experts, top_k)
    check_count("batch", batch)
    check_count("seq_len", seq_len)
    check_count("aspect", aspect)
    if checkpoint not in ACTIVATION_BYTES_PER_ELEMENT:
        raise InputError(f"unknown checkpoint {checkpoint!r}; known: "
                         f"{', '.join(ACTIVATION_BYTES_PER_ELEMENT)}")
    upper = largest_model(hardware, count, precision, optimizer)
    k = upper.breakdown.total_bytes_per_param
    memory = upper.memory_bytes
    c = ACTIVATION_BYTES_PER_ELEMENT[checkpoint]
    if checkpoint == "none":
        c += MLP_ACTIVATION_BYTES_PER_ELEMENT * (top_k - 1)
    per_layer = _layer_params(experts)  # params per L·d²: 12 dense
    cubic = k * per_layer * aspect * aspect  # bytes per L³
    square = float(c) * seq_len * batch * aspect  # bytes per L²

    def used(layers: float) -> float:
        return cubic * layers ** 3 + square * layers ** 2

    low, high = 0.0, (memory / cubic) ** (1 / 3)  # activations only lower the answer
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if used(middle) <= memory else (low, middle)
    layers = low
    if layers < 1:
        raise InputError(f"not even one layer fits: the activations of {batch:,} × {seq_len:,} "
                         f"tokens take the {memory / 1e9:g} GB of {count:,} × {hardware.id}; "
                         "use a smaller batch or sequence, or checkpoint full")
    params = check_result("largest model", float(per_layer) * aspect * aspect * layers ** 3)
    states, activations = k * params, square * layers ** 2
    sparse = experts > 1
    active = _layer_params(top_k) * aspect * aspect * layers ** 3 if sparse else None
    steps = (
        Step("memory of all devices", "count × memory per device", memory, "bytes"),
        Step("bytes per parameter", "params + grads + master + optimizer state", k,
             "bytes_per_param"),
        Step("family", f"d_model = {aspect}·L, params = {per_layer}·L·d²"
             + (f" (attention 4, {experts} experts of 8)" if sparse else ""), aspect,
             "d_model/layer"),
        Step("activations per layer", f"{c}·s·B·d ({checkpoint} recompute, flash attention"
             + (f", top-{top_k} experts" if sparse else "") + ")",
             c * seq_len * batch * aspect * layers, "bytes"),
        Step("layers", f"solve {k:g}·{per_layer}·{aspect}²·L³ + {c}·s·B·{aspect}·L² = memory",
             layers, "layers"),
        Step("parameter state", "bytes per parameter × params", states, "bytes"),
        Step("activations", f"L × {c}·s·B·d", activations, "bytes"),
        Step("largest model", f"{per_layer}·L·d²", params, "params"),
        *((Step("active per token", f"{_layer_params(top_k)}·L·d² (top-{top_k} of {experts})",
                active, "params"),) if active is not None else ()),
        Step("without activations", "memory / bytes per parameter", upper.params, "params"),
    )
    return LargestModelWithActivations(
        hardware=hardware.id, count=count, memory_bytes=memory, breakdown=upper.breakdown,
        batch=batch, seq_len=seq_len, checkpoint=checkpoint, aspect=aspect, n_layers=layers,
        d_model=aspect * layers, params=params, states_bytes=states,
        activations_bytes=activations, params_without_activations=upper.params, steps=steps,
        experts=experts, top_k=top_k, active_params=active)
