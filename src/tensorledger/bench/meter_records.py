"""What the live meter records, and the clocks it reads: one optimizer step
(:class:`StepRecord`), an interval of steps (:class:`MeterInterval`), the run
(:class:`MeterSummary`), and the timers behind their times (a clock read after synchronising
the device, or CUDA events resolved when an interval closes).  :mod:`tensorledger.bench.meter`
makes them; they are re-exported there.

>>> timer = ClockTimer(iter([1.0, 3.5]).__next__, torch.device("cpu"), "injected clock")
>>> start, end = timer.mark(), timer.mark()
>>> timer.seconds(start, end)
2.5
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from tensorledger.bench.harness import Measurement, synchronize
from tensorledger.bench.meter_peak import Peak, StepCount
from tensorledger.bench.meter_routing import LayerRouting
from tensorledger.summary import show_time
from tensorledger.summary import summary as one_line

__all__ = ["ClockTimer", "CudaTimer", "MeterInterval", "MeterSummary", "PendingStep", "StepRecord",
           "flat_record", "peak_memory"]


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One optimizer step as the meter saw it (one JSON line of kind ``step``)."""

    step: int  # 1-based count of steps on this rank
    time_s: float  # inside the step
    outside_time_s: float | None  # since the previous step ended; None for the first
    tokens: int
    flops: int | None  # None: a shape never recorded
    peak_flop_per_s: float | None
    mfu: float | None
    recorded: bool  # ran under the recorder: slower, left out of every figure
    warmup: bool  # among the first ``warmup_steps``: left out of the summary
    # the roofline's time model on the meter's chip (bench.meter_expected); None: not priced
    expected_time_s: float | None = None
    expected_mfu: float | None = None


@dataclass(frozen=True)
class MeterInterval:
    """The figures of the steps since the previous interval (recorded steps left out)."""

    step: int  # the last step of the interval
    steps: int  # steps timed (recorded ones excluded)
    step_time_s: float | None  # mean inside a step
    outside_time_s: float | None  # mean between steps
    tokens_per_s: float | None
    flops: float  # Σ over the counted steps (the weight of this rank's MFU in the cluster's)
    flops_per_step: float | None  # mean over the counted steps
    flop_per_s: float | None
    mfu: float | None
    peak_flop_per_s: float | None
    peak_dtype: str | None
    hardware: str
    attention: str
    peak_memory_bytes: int
    memory_source: str  # "cuda-allocator" or "process-rss"
    rank: int
    world_size: int
    cluster_tokens_per_s: float | None  # sum over ranks
    cluster_mfu: float | None  # FLOP-weighted mean over ranks
    # beside the measured MFU: the same FLOPs and peak over the step time the roofline's time
    # model expects on this chip (bench.meter_expected); None where no step was priced
    expected_step_time_s: float | None = None  # mean over the counted steps
    expected_mfu: float | None = None
    expected_name: str | None = None  # "expected MFU (the catalog's expected efficiencies)"


@dataclass(frozen=True)
class MeterSummary:
    """The run on one rank (and the cluster's figures when gathered at ``close()``)."""

    hardware: str
    device: str
    timer: str  # "cuda-events", "perf_counter" or "injected clock"
    attention: str
    steps: int  # every step that ended without an error
    warmup_steps: int  # left out of the figures below
    recorded_steps: int  # ran under the recorder; left out as well
    recording_time_s: float  # their time, apart
    measured_steps: int  # the steps the figures below come from
    uncounted_steps: int  # measured steps of a shape never recorded: timed, no FLOPs
    step_time: Measurement | None  # median, quartiles and spread of the measured steps
    outside_time_median_s: float | None
    outside_share: float | None  # outside / (inside + outside), summed over measured steps
    tokens: int  # over the measured steps
    tokens_per_s: float | None  # Σ tokens / Σ step time
    tokens_per_s_median: float | None  # over steps
    flops_per_step: int | None  # the latest recording
    flops: float  # Σ FLOPs over the counted steps
    flops_per_token: float | None  # Σ FLOPs / Σ tokens over the counted steps
    flop_per_s: float | None
    mfu: float | None  # Σ (FLOPs / peak) / Σ step time over the counted steps
    mfu_median: float | None
    mfu_q1: float | None
    mfu_q3: float | None
    peak: Peak | None
    peak_memory_bytes: int
    memory_source: str
    rank: int
    world_size: int
    cluster_tokens_per_s: float | None
    cluster_mfu: float | None
    # the roofline's time model on this chip (bench.meter_expected), over the counted steps
    expected_step_time_s: float | None = None  # the latest recording's
    expected_mfu: float | None = None  # Σ (FLOPs / peak) / Σ expected step time
    expected_name: str | None = None
    expected_rests_on: str | None = None  # what the expected time rests on, in words
    # each MoE layer's routing measured in the latest recorded step (bench.meter_routing)
    routing: tuple[LayerRouting, ...] = ()

    @property
    def measured_over_expected(self) -> float | None:
        """The measured MFU over the expected one (None where either is missing)."""
        if self.mfu is None or not self.expected_mfu:
            return None
        return self.mfu / self.expected_mfu

    def __repr__(self) -> str:
        median = "" if self.step_time is None else (
            f"median {show_time(self.step_time.median_s)} per step")
        rate = "" if self.tokens_per_s is None else f"{self.tokens_per_s:,.0f} tokens/s"
        mfu = "" if self.mfu is None else f"MFU {self.mfu:.3f}"
        return one_line("MeterSummary", f"{self.measured_steps:,} steps measured on "
                       f"{self.hardware}", median, rate, mfu)


# ---------------------------------------------------------------------------------- timers

def flat_record(record: StepRecord | MeterInterval) -> dict[str, Any]:
    # dataclasses.asdict deep-copies every value: ten times slower for these flat records
    names = _FIELDS.get(type(record))
    if names is None:
        names = _FIELDS[type(record)] = tuple(f.name for f in fields(record))
    return {name: getattr(record, name) for name in names}


_FIELDS: dict[type, tuple[str, ...]] = {}


class ClockTimer:
    """Readings of a clock after synchronising the device (a no-op on the CPU)."""

    def __init__(self, clock: Callable[[], float], device: torch.device, name: str) -> None:
        self.clock = clock
        self.name = name
        self._sync = device.type not in ("cpu", "meta")
        self._device = device

    def mark(self) -> Any:
        if self._sync:
            synchronize(self._device)
        return self.clock()

    def resolve(self, last: Any) -> None:
        return None

    @staticmethod
    def seconds(start: Any, end: Any) -> float:
        return float(end - start)


class CudaTimer:
    """CUDA events on the current stream; resolved by waiting for the last one."""

    name = "cuda-events"

    def mark(self) -> Any:
        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        event.record()
        return event

    def resolve(self, last: Any) -> None:
        last.synchronize()

    @staticmethod
    def seconds(start: Any, end: Any) -> float:
        return float(start.elapsed_time(end)) / 1e3


def peak_memory(device: torch.device) -> tuple[int, str]:
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "cuda-allocator"
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return 0, "unavailable"
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    # Linux reports KiB, macOS bytes
    return (peak if sys.platform == "darwin" else peak * 1024), "process-rss"


@dataclass
class PendingStep:
    """A step timed whose record is not made yet: its timer marks, its tokens, the shapes it
    ran and its count, if it was counted."""

    index: int
    start: Any
    end: Any
    previous_end: Any
    tokens: int
    key: Any  # meter_inputs.ShapeKey
    count: StepCount | None
    recorded: bool
