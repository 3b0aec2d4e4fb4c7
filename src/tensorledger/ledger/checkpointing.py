"""The checkpointing pipeline: trace a step once without checkpointing, predict every policy
from it (:mod:`tensorledger.plan.checkpoint`), then trace the step with a policy applied and
set what it really kept, peaked at and recomputed beside the prediction.

>>> from tensorledger.plan.checkpoint import sqrt_segments
>>> check, = deep_network_checks(16, 4, 8, "gelu", [sqrt_segments(4)])
>>> check.traced_recompute_flops == check.prediction.recompute_flops
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.memory.timeline import build_timeline
from tensorledger.napkin.activations import DeepActivations, deep_network_activations
from tensorledger.plan.checkpoint import (
    CheckpointPolicy,
    CheckpointPrediction,
    CheckpointProfile,
    kept_for_backward_bytes,
    optimal_under_budget,
    predict_policy,
    profile_blocks,
    standard_policies,
)
from tensorledger.roofline.model import calibrated_for, predict_op
from tensorledger.workload.checkpointing import (
    PolicyTrace,
    trace_deep_network,
    trace_workload_with_policy,
)
from tensorledger.workload.spec import Workload

__all__ = ["CheckpointStudy", "PolicyCheck", "PolicyRow", "check_policies", "checkpoint_profile",
           "deep_network_checks", "deep_network_study", "policy_row", "study_policies",
           "traced_figures", "workload_checks", "workload_study"]

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

    @property
    def recompute_flops_error(self) -> float:
        """Relative error of the predicted recompute FLOPs (0 when both are 0)."""
        return self.traced_recompute_flops / max(self.prediction.recompute_flops, 1) - (
            1 if self.prediction.recompute_flops else 0)


def checkpoint_profile(plain: PolicyTrace, hardware: Hardware | None = None
                       ) -> CheckpointProfile:
    """Profile the blocks of an un-checkpointed step, op times from the roofline of
    ``hardware`` (none: times 0, policies compared by FLOPs)."""
    times = None
    if hardware is not None:
        priced = calibrated_for(hardware, plain.trace.records)  # its recipe's calibration
        times = [predict_op(r.index, r, priced).time_s for r in plain.trace.records]
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


# ---- the study behind ``tensorledger checkpoint`` --------------------------------------------
@dataclass(frozen=True)
class PolicyRow:
    """One policy's figures as the command shows them: the prediction, whether its peak fits
    the budget (None: no budget), and with ``verify`` the traced figures and their relative
    errors (traced / predicted − 1)."""

    policy: str
    segments: tuple[tuple[int, int, str], ...]  # (first block, stop, mode) of each segment
    checkpointed_blocks: int
    saved_bytes: int
    peak_bytes: int
    recompute_flops: int
    recompute_time_s: float
    fits: bool | None = None
    traced_saved_bytes: int | None = None
    traced_peak_bytes: int | None = None
    traced_recompute_flops: int | None = None
    saved_error: float | None = None
    peak_error: float | None = None
    recompute_flops_error: float | None = None

    @property
    def n_segments(self) -> int:
        return len(self.segments)


def policy_row(prediction: CheckpointPrediction, budget_bytes: int | None = None,
               check: PolicyCheck | None = None) -> PolicyRow:
    """The row of ``prediction``; ``check`` (of the same prediction) adds the traced figures."""
    policy = prediction.policy
    traced: dict[str, int | float] = {}
    if check is not None:
        if check.prediction != prediction:
            raise InputError(f"the check is of {check.prediction.policy.name!r}, the row of "
                             f"{policy.name!r}")
        traced = {"traced_saved_bytes": check.traced_saved_bytes,
                  "traced_peak_bytes": check.traced_peak_bytes,
                  "traced_recompute_flops": check.traced_recompute_flops,
                  "saved_error": check.saved_error, "peak_error": check.peak_error,
                  "recompute_flops_error": check.recompute_flops_error}
    return PolicyRow(
        policy=policy.name,
        segments=tuple((s.start, s.stop, s.mode) for s in policy.segments),
        checkpointed_blocks=len(policy.checkpointed_blocks),
        saved_bytes=prediction.saved_bytes, peak_bytes=prediction.peak_bytes,
        recompute_flops=prediction.recompute_flops,
        recompute_time_s=prediction.recompute_time_s,
        fits=None if budget_bytes is None else prediction.peak_bytes <= budget_bytes,
        **traced)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CheckpointStudy:
    """Every standard policy of one step (and the budget's optimum), predicted from one trace
    of the step without checkpointing and, when ``verified``, traced with each applied."""

    model: str  # what was traced: the workload, or the deep network
    n_blocks: int
    every_k: int
    hardware: str  # the chip whose roofline prices the recomputation
    budget_bytes: int | None
    verified: bool
    rows: tuple[PolicyRow, ...]
    no_fit: str | None = None  # why there is no budget optimum, when nothing fits
    # the lecture's deep network: what its activation keeps, and what checkpointing leaves
    deep: DeepActivations | None = None

    @property
    def sqrt_segment_blocks(self) -> int:
        """Blocks in a segment of the √L policy: ⌈√L⌉ (:func:`~tensorledger.plan.checkpoint.
        sqrt_segments`)."""
        return math.isqrt(self.n_blocks - 1) + 1 if self.n_blocks > 1 else 1

    @property
    def optimal(self) -> PolicyRow | None:
        """The budget's optimum, when a budget was given and something fits."""
        if self.budget_bytes is None or self.no_fit is not None:
            return None
        return self.rows[-1]


def study_policies(trace_with: Tracer, model: str, hardware: Hardware, every_k: int = 2,
                   budget_bytes: int | None = None, verify: bool = False,
                   progress: Callable[[str], None] | None = None) -> CheckpointStudy:
    """Trace the plain step, predict the standard policies (every ``every_k``-th block among
    them) and, with ``budget_bytes``, the fastest policy under it; with ``verify``, trace the
    step with each applied."""
    say = progress or (lambda stage: None)
    if isinstance(every_k, bool) or not isinstance(every_k, int) or every_k < 1:
        raise InputError(f"--every must be a whole number >= 1, got {every_k!r}")
    if budget_bytes is not None and (isinstance(budget_bytes, bool)
                                     or not isinstance(budget_bytes, int) or budget_bytes < 0):
        raise InputError(f"--budget must be a whole number of bytes >= 0, got {budget_bytes!r}")
    say("tracing the step without checkpointing")
    plain = trace_with(None)
    profile = checkpoint_profile(plain, hardware)
    n_blocks = len(profile.blocks)
    if every_k > n_blocks:
        raise InputError(f"--every {every_k} is more than the {n_blocks} blocks of {model}; "
                         f"give 1 to {n_blocks}")
    predictions = [predict_policy(profile, p) for p in standard_policies(n_blocks, every_k)]
    no_fit = None
    if budget_bytes is not None:
        try:
            predictions.append(optimal_under_budget(profile, budget_bytes))
        except InputError as error:
            no_fit = str(error)
    rows = []
    for prediction in predictions:
        check = None
        if verify:
            say(f"tracing the step with {prediction.policy.name}")
            saved, peak, recompute = traced_figures(plain, trace_with(prediction.policy))
            check = PolicyCheck(prediction, saved, peak, recompute)
        rows.append(policy_row(prediction, budget_bytes, check))
    return CheckpointStudy(model=model, n_blocks=n_blocks, every_k=every_k,
                           hardware=hardware.id, budget_bytes=budget_bytes, verified=verify,
                           rows=tuple(rows), no_fit=no_fit)


def workload_study(work: Workload, hardware: Hardware, every_k: int = 2,
                   budget_bytes: int | None = None, verify: bool = False,
                   progress: Callable[[str], None] | None = None) -> CheckpointStudy:
    """:func:`study_policies` of a reference model's step (one device, not checkpointed)."""
    if work.source.builder != "reference":
        # a factory's or transformers' module has no .blocks chain the policies can wrap
        raise InputError(f"checkpointing policies wrap the .blocks of a reference model; "
                         f"{work.model!r} is built by {work.source.builder}, not one (give a "
                         "preset such as tiny or gpt2)")
    if not work.step.backward:
        raise InputError(f"a {work.step.name} step has no backward pass, so nothing to "
                         "checkpoint; give --step forward-backward or train")
    recipe = (f"{work.precision.name}, {work.optimizer.name}" if work.step.optimizer
              else work.precision.name)
    label = (f"{work.model}, {work.step.name}, batch {work.batch} × seq {work.seq}, {recipe}, "
             f"on {work.device}")
    return study_policies(lambda policy: trace_workload_with_policy(work, policy), label,
                          hardware, every_k, budget_bytes, verify, progress)


def deep_network_study(d_model: int, n_layers: int, batch: int, activation: str,
                       hardware: Hardware, every_k: int = 2, budget_bytes: int | None = None,
                       verify: bool = False, device: str = "meta",
                       progress: Callable[[str], None] | None = None) -> CheckpointStudy:
    """:func:`study_policies` of the lecture's deep network."""
    label = (f"deep network: {n_layers} blocks of D = {d_model}, {activation}, batch {batch}, "
             f"fp32 on {device}")
    study = study_policies(
        lambda policy: trace_deep_network(d_model, n_layers, batch, activation, policy,
                                          device),
        label, hardware, every_k, budget_bytes, verify, progress)
    # what the activation keeps is this network's explanation of checkpointing, not a
    # Transformer's: it is said here and nowhere else
    return dataclasses.replace(study, deep=deep_network_activations(d_model, n_layers, batch,
                                                                    activation))
