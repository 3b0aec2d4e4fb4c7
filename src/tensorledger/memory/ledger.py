"""The memory ledger of one training step: state, activations, peak, and whether it fits.

One traced step (see :mod:`.timeline`) gives every figure: the per-parameter state at the end
of the step, the saved activations at their high point (the end of forward), and the peak with
its op and phase.  Beside them sit the closed forms they are checked against — napkin's recipe
bytes and activation memory — and, for ``checkpointed`` steps, the deep-network figures that
explain why checkpointing pays off with GELU and hardly with ReLU.
"""

from __future__ import annotations

from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.hardware import get_hardware
from tensorledger.memory.precision import param_dtype
from tensorledger.memory.timeline import MemoryTimeline, trace_step_memory
from tensorledger.models.build import build_model
from tensorledger.napkin.activations import (
    ActivationMemory,
    DeepActivations,
    activation_memory,
    deep_network_activations,
)
from tensorledger.napkin.recipes import RecipeBytes, recipe_bytes
from tensorledger.napkin.transformer import TransformerConfig

__all__ = ["Fit", "MemoryLedger", "memory_ledger"]


@dataclass(frozen=True)
class Fit:
    """Whether the step's peak fits on ``count`` devices of ``hardware``."""

    hardware: str
    count: int
    device_memory_bytes: float
    # Data parallel: every device holds a whole replica and its peak.
    replica_peak_bytes: int
    fits_replicated: bool
    # Fully sharded (ZeRO-3): parameters, gradients and optimizer state split over devices,
    # activations and temporaries not.
    sharded_peak_bytes: int
    fits_sharded: bool


@dataclass(frozen=True)
class MemoryLedger:
    """Everything ``tensorledger memory`` reports about one step."""

    model: str
    batch: int
    seq_len: int
    optimizer: str
    precision: str
    device: str
    checkpointed: bool
    params_bytes: int
    grads_bytes: int
    optimizer_state_bytes: int  # the master copy of bf16-master included
    saved_activation_bytes: int  # the high point, at the end of forward
    peak_bytes: int
    peak_op: str
    peak_phase: str
    peak_module: str
    recipe: RecipeBytes  # napkin's prediction of the state
    activations_closed_form: ActivationMemory | None  # None under autocast (not modelled)
    timeline: MemoryTimeline
    fit: Fit | None
    deep_relu: DeepActivations | None  # the checkpointing explanation, when asked
    deep_gelu: DeepActivations | None


def memory_ledger(config: TransformerConfig, batch: int, seq_len: int, optimizer: str = "adamw",
                  precision: str = "mixed-bf16", device: str = "fake",
                  checkpointed: bool = False, hardware: str | None = None, count: int = 1
                  ) -> MemoryLedger:
    """Trace one training step of ``config`` and account its memory.

    >>> from tensorledger.napkin.transformer import get_preset
    >>> ledger = memory_ledger(get_preset("tiny"), 1, 8, "adamw", "fp32", "meta")
    >>> ledger.params_bytes + ledger.grads_bytes + ledger.optimizer_state_bytes == (
    ...     ledger.recipe.total_bytes)
    True
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InputError(f"count must be a whole number >= 1, got {count!r}")
    if config.positions == "learned" and seq_len > config.context_length:
        raise InputError(f"seq {seq_len} is longer than {config.name}'s context of "
                         f"{config.context_length} (learned positions)")
    chip = get_hardware(hardware) if hardware is not None else None
    trace, timeline = trace_step_memory(config, batch, seq_len, optimizer, precision, device,
                                        checkpointed)
    del trace
    end = timeline.points[-1]
    saved = max(p.saved_activation_bytes for p in timeline.points)
    numels = [p.numel() for p in build_model(config, "meta").parameters()]
    recipe = recipe_bytes(precision, optimizer, numels)
    closed = None
    if recipe.precision != "mixed-bf16":
        width = 4 if str(param_dtype(precision)) == "torch.float32" else 2
        closed = activation_memory(config, batch, seq_len, width, checkpointed)
    fit = None
    peak = timeline.peak
    if chip is not None:
        state = peak.parameter_bytes + peak.gradient_bytes + peak.optimizer_state_bytes
        sharded = peak.total_bytes - state + -(-state // count)
        fit = Fit(hardware=chip.name, count=count, device_memory_bytes=chip.memory_bytes,
                  replica_peak_bytes=peak.total_bytes,
                  fits_replicated=peak.total_bytes <= chip.memory_bytes,
                  sharded_peak_bytes=sharded, fits_sharded=sharded <= chip.memory_bytes)
    deep = {}
    if checkpointed:
        for activation in ("relu", "gelu"):
            deep[activation] = deep_network_activations(config.d_model, config.n_layers,
                                                        batch * seq_len, activation)
    return MemoryLedger(model=config.name, batch=batch, seq_len=seq_len,
                        optimizer=recipe.optimizer, precision=recipe.precision, device=device,
                        checkpointed=checkpointed, params_bytes=end.parameter_bytes,
                        grads_bytes=end.gradient_bytes,
                        optimizer_state_bytes=end.optimizer_state_bytes,
                        saved_activation_bytes=saved, peak_bytes=peak.total_bytes,
                        peak_op=peak.op, peak_phase=peak.phase, peak_module=peak.module,
                        recipe=recipe, activations_closed_form=closed, timeline=timeline,
                        fit=fit, deep_relu=deep.get("relu"), deep_gelu=deep.get("gelu"))
