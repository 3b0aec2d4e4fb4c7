"""The checkpointing pipeline: trace a step once without checkpointing, predict every policy
from it (:mod:`tensorledger.plan.checkpoint`), then trace the step with a policy applied and
set what it really kept, peaked at and recomputed beside the prediction.

>>> from tensorledger.plan.checkpoint import sqrt_segments
>>> check, = deep_network_checks(16, 4, 8, "gelu", [sqrt_segments(4)])
>>> check.traced_recompute_flops == check.prediction.recompute_flops
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tensorledger.hardware import Hardware
from tensorledger.memory.timeline import build_timeline
from tensorledger.plan.checkpoint import (
    CheckpointPolicy,
    CheckpointPrediction,
    CheckpointProfile,
    kept_for_backward_bytes,
    predict_policy,
    profile_blocks,
)
from tensorledger.roofline.model import predict_op
from tensorledger.workload.checkpointing import (
    PolicyTrace,
    trace_deep_network,
    trace_workload_with_policy,
)
from tensorledger.workload.spec import Workload

__all__ = ["PolicyCheck", "check_policies", "checkpoint_profile", "deep_network_checks",
           "traced_figures", "workload_checks"]

Tracer = Callable[[CheckpointPolicy | None], PolicyTrace]


@dataclass(frozen=True)
class PolicyCheck:
    """A policy's prediction and what the trace of the step with it applied measured."""

    prediction: CheckpointPrediction
    traced_saved_bytes: int  # kept for backward as backward starts
    traced_peak_bytes: int
    traced_recompute_flops: int  # the step's FLOPs less the un-checkpointed step's

    @property
    def saved_error(self) -> float:
        """Relative error of the predicted saved bytes (traced / predicted − 1)."""
        return self.traced_saved_bytes / max(self.prediction.saved_bytes, 1) - 1

    @property
    def peak_error(self) -> float:
        """Relative error of the predicted peak (traced / predicted − 1)."""
        return self.traced_peak_bytes / max(self.prediction.peak_bytes, 1) - 1


def checkpoint_profile(plain: PolicyTrace, hardware: Hardware | None = None
                       ) -> CheckpointProfile:
    """Profile the blocks of an un-checkpointed step, op times from the roofline of
    ``hardware`` (none: times 0, policies compared by FLOPs)."""
    times = None
    if hardware is not None:
        times = [predict_op(r.index, r, hardware).time_s for r in plain.trace.records]
    return profile_blocks(plain.trace, plain.tags, times,
                          hardware=hardware.id if hardware is not None else "")


def traced_figures(plain: PolicyTrace, run: PolicyTrace) -> tuple[int, int, int]:
    """(kept for backward, peak, recompute FLOPs) of ``run``, ``plain`` being the same step
    without checkpointing: recomputation adds forward ops and changes nothing else."""
    return (kept_for_backward_bytes(run.trace, run.tags),
            build_timeline(run.trace, run.tags).peak_bytes, run.trace.flops - plain.trace.flops)


def check_policies(trace_with: Tracer, policies: Sequence[CheckpointPolicy],
                   hardware: Hardware | None = None) -> tuple[PolicyCheck, ...]:
    """Trace the plain step, predict each policy, trace the step with each applied."""
    plain = trace_with(None)
    profile = checkpoint_profile(plain, hardware)
    checks = []
    for policy in policies:
        saved, peak, recompute = traced_figures(plain, trace_with(policy))
        checks.append(PolicyCheck(predict_policy(profile, policy), saved, peak, recompute))
    return tuple(checks)


def workload_checks(work: Workload, policies: Sequence[CheckpointPolicy],
                    hardware: Hardware | None = None) -> tuple[PolicyCheck, ...]:
    """:func:`check_policies` of a reference model's workload (one device, fake or real
    tensors: torch's checkpoint compares recomputed metadata, which meta tensors lack)."""
    return check_policies(lambda policy: trace_workload_with_policy(work, policy), policies,
                          hardware)


def deep_network_checks(d_model: int, n_layers: int, batch: int, activation: str,
                        policies: Sequence[CheckpointPolicy], hardware: Hardware | None = None,
                        device: str = "meta") -> tuple[PolicyCheck, ...]:
    """:func:`check_policies` of the lecture's deep network (loss: mean of squared outputs)."""
    return check_policies(
        lambda policy: trace_deep_network(d_model, n_layers, batch, activation, policy,
                                          device),
        policies, hardware)
