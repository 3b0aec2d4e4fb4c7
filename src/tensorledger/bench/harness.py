"""An honest timer: warm up, synchronise, repeat, report the median and the spread.

Asynchronous devices return from a kernel launch long before the kernel ends, so the device is
synchronised before the clock starts and after it stops; on CUDA the time comes from CUDA
events recorded in the stream.  Each sample runs the function ``number`` times, chosen so a
sample lasts at least ``min_sample_s`` (short functions are otherwise dominated by the timer).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tensorledger.errors import DeviceError, InputError
from tensorledger.summary import show_time, summary

__all__ = ["HIGH_SPREAD", "Measurement", "measure", "pooled", "synchronize"]

#: Interquartile range above this fraction of the median earns a warning.
HIGH_SPREAD = 0.10


def synchronize(device: str | torch.device) -> None:
    """Wait for every queued kernel of ``device`` (a no-op on the CPU)."""
    kind = torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()
    elif kind == "xpu":
        torch.xpu.synchronize(device)
    elif kind not in ("cpu", "meta"):
        raise DeviceError(f"cannot synchronise device kind {kind!r}; known: cpu, cuda, mps, xpu")


@dataclass(frozen=True)
class Measurement:
    """Per-call times of one function; all statistics are in seconds per call."""

    name: str
    device: str
    timer: str  # "cuda-events" or "perf_counter"
    warmup: int
    number: int  # calls per sample
    samples_s: tuple[float, ...]
    median_s: float
    min_s: float
    max_s: float
    q1_s: float
    q3_s: float
    iqr_s: float
    spread: float  # iqr / median
    warning: str | None

    def __repr__(self) -> str:
        return summary("Measurement", repr(self.name), f"median {show_time(self.median_s)}",
                       f"IQR {show_time(self.iqr_s)}", f"{len(self.samples_s)} samples",
                       f"on {self.device}", "spread warning" if self.warning else "")


def _statistics(name: str, device: str, timer: str, warmup: int, number: int,
                samples: list[float]) -> Measurement:
    ordered = sorted(samples)
    median = statistics.median(ordered)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    iqr = q3 - q1
    spread = iqr / median if median > 0 else 0.0
    warning = None
    if spread > HIGH_SPREAD:
        warning = (f"high spread: the interquartile range is {spread:.0%} of the median; the "
                   "machine may be busy or the function too short to time reliably")
    return Measurement(name=name, device=device, timer=timer, warmup=warmup, number=number,
                       samples_s=tuple(samples), median_s=median, min_s=ordered[0],
                       max_s=ordered[-1], q1_s=q1, q3_s=q3, iqr_s=iqr, spread=spread,
                       warning=warning)


def pooled(parts: Sequence[Measurement]) -> Measurement:
    """One measurement of the samples of ``parts`` (of one function, taken in rounds with
    other work between them), with its statistics over them all."""
    if not parts:
        raise InputError("pooled needs at least one measurement")
    first = parts[0]
    return _statistics(first.name, first.device, first.timer, first.warmup,
                       min(part.number for part in parts),
                       [sample for part in parts for sample in part.samples_s])


def measure(fn: Callable[[], Any], *, device: str | torch.device = "cpu", name: str = "",
            warmup: int = 3, min_repeats: int = 5, max_repeats: int = 200,
            budget_s: float = 1.0, min_sample_s: float = 1e-3,
            clock: Callable[[], float] = time.perf_counter, warmup_s: float = 0.0,
            calibration_calls: int = 1) -> Measurement:
    """Time ``fn()`` on ``device``; never prints.

    Runs ``warmup`` calls (and more until ``warmup_s`` has passed on ``clock``), calibrates
    ``number`` calls per sample so a sample lasts at least ``min_sample_s``, then takes samples
    until ``budget_s`` has passed and at least ``min_repeats`` were taken, or ``max_repeats``
    were.  ``number`` is set by the fastest of ``calibration_calls`` single calls: one call
    that waited (for a thread descheduled by another process, say) would otherwise leave every
    sample a single call, each exposed to the same wait.
    """
    if (warmup < 0 or min_repeats < 1 or max_repeats < min_repeats or budget_s < 0
            or warmup_s < 0 or calibration_calls < 1):
        raise InputError("measure needs warmup >= 0, warmup_s >= 0, calibration_calls >= 1, "
                         "1 <= min_repeats <= max_repeats and budget_s >= 0")
    dev = torch.device(device)
    use_events = dev.type == "cuda" and clock is time.perf_counter
    for _ in range(warmup):
        fn()
    synchronize(dev)
    if warmup_s > 0:
        warm_until = clock() + warmup_s
        while clock() < warm_until:
            fn()
            synchronize(dev)

    def sample(number: int) -> float:
        if use_events:
            start_event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end_event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            synchronize(dev)
            start_event.record()
            for _ in range(number):
                fn()
            end_event.record()
            synchronize(dev)
            return float(start_event.elapsed_time(end_event)) / 1e3
        synchronize(dev)
        start = clock()
        for _ in range(number):
            fn()
        synchronize(dev)
        return clock() - start

    number = 1
    first = min(sample(1) for _ in range(calibration_calls))
    while first * number < min_sample_s and number < 1_000_000:
        number *= 10 if first * number < min_sample_s / 10 else 2
    # the fastest of several calls is no fair sample of them
    samples: list[float] = [] if number > 1 or calibration_calls > 1 else [first]
    started = clock()
    while len(samples) < max_repeats:
        if len(samples) >= min_repeats and clock() - started >= budget_s:
            break
        samples.append(sample(number) / number)
    return _statistics(name, str(dev), "cuda-events" if use_events else "perf_counter", warmup,
                       number, samples)
