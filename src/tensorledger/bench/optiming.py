"""Time the aten ops of a step: through the profiler, or by dispatch timing.

``profile_ops`` asks torch's profiler for each op's own time (on the CPU its self CPU time, on
CUDA its kernels' device time), summed per op name over a few steps: the profiler's cost per
op is small and stays outside the ops' own times.  ``time_ops`` brackets each op with the
clock inside a dispatch mode (and synchronises an asynchronous device around it); every op
then also carries the cost of the mode's call, some microseconds, so it suits large ops.
Either way the whole-step time comes from ``measure``; what it holds beyond the ops' own
times is framework time between kernels (Python, autograd, module code).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tensorledger.bench.harness import synchronize

__all__ = ["OpTime", "profile_ops", "time_ops"]


@dataclass(frozen=True)
class OpTime:
    op: str  # "aten.mm.default" as the trace names it, or "aten.mm" for every overload
    time_s: float


class _Timer(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, device: torch.device) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.device = device
        self.times: list[OpTime] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        synchronize(self.device)
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        synchronize(self.device)
        self.times.append(OpTime(str(func), time.perf_counter() - start))
        return out


def time_ops(step: Callable[[], Any], device: str | torch.device = "cpu", *,
             repeats: int = 5) -> tuple[tuple[OpTime, ...], ...]:
    """Run ``step`` ``repeats`` times under the op timer; one tuple of op times per run."""
    dev = torch.device(device)
    runs = []
    for _ in range(repeats):
        timer = _Timer(dev)
        with timer:
            step()
        runs.append(tuple(timer.times))
    return tuple(runs)


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """The profiler's native library writes start/stop notes straight to file descriptor 2;
    keep them off a command's stderr, which is for errors."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profile_ops(step: Callable[[], Any], device: str | torch.device = "cpu", *,
                repeats: int = 5) -> tuple[OpTime, ...]:
    """Each aten op's own time per step (averaged over ``repeats`` steps), by op name
    (``aten.mm``: the profiler does not name overloads)."""
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device(device)
    activities = [ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    synchronize(dev)
    with _native_stderr_silenced(), profile(activities=activities) as profiler:
        for _ in range(repeats):
            step()
        synchronize(dev)
    times = []
    for event in profiler.key_averages():
        if not event.key.startswith("aten::"):
            continue
        own_us = (event.self_device_time_total if dev.type == "cuda"
                  else event.self_cpu_time_total)
        times.append(OpTime(event.key.replace("::", "."), own_us / 1e6 / repeats))
    return tuple(sorted(times, key=lambda t: -t.time_s))
