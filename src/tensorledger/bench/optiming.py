"""Time the aten ops of a step: through the profiler, or by dispatch timing.

``profile_calls`` asks torch's profiler for each call's own time (on the CPU its self CPU
time, on CUDA its kernels' device time), in call order, step by step (``profile_ops`` sums
them per op name), each step with its span (:class:`ProfiledStep`): the profiler's cost on
every call makes a profiled step slower than the step (by 5–17% on a 2-core VM), so
``roofline.compare`` takes a profiled step's calls as shares of its span.  ``time_ops``
brackets each op with the clock inside a dispatch mode (and synchronises an asynchronous
device around it); every op then also carries the cost of the mode's call, some
microseconds, so it suits large ops.  Either way the whole-step time comes from
``measure``; what it holds beyond the ops' own times is framework time between kernels
(Python, autograd, module code).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tensorledger.bench import harness
from tensorledger.bench.harness import Measurement, synchronize
from tensorledger.costs import packet

__all__ = ["OpTime", "ProfiledStep", "profile_calls", "profile_ops", "time_ops", "timed_round"]


@dataclass(frozen=True)
class OpTime:
    op: str  # "aten.mm.default" as the trace names it, or "aten.mm" for every overload
    time_s: float


class ProfiledStep(tuple[OpTime, ...]):
    """One profiled step: its calls in order, and ``span_s``, the wall time from the start
    of its first call to the end of its last (``None`` where the calls' times are a device's
    and the span would be the host's).  The step's share outside its calls' own times,
    ``1 − Σ time_s / span_s``, is the time between ops measured inside the step itself.

    >>> step = ProfiledStep([OpTime("aten.mm", 3e-3), OpTime("aten.add", 1e-3)], 5e-3)
    >>> len(step), step.span_s
    (2, 0.005)
    """

    span_s: float | None

    def __new__(cls, calls: Iterable[OpTime] = (), span_s: float | None = None
                ) -> ProfiledStep:
        step = super().__new__(cls, calls)
        step.span_s = span_s
        return step


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


def profile_calls(step: Callable[[], Any], device: str | torch.device = "cpu", *,
                  repeats: int = 5, traced: Collection[str] | None = None
                  ) -> tuple[ProfiledStep, ...]:
    """Each aten call's own time, in the order the step made the calls: one
    :class:`ProfiledStep` per step (with its span from the first call to the end of the last,
    on the CPU), ``repeats`` steps each profiled on its own (``aten.mm``: the profiler does not
    name overloads).

    ``traced``: the op names a trace of the step records (``aten.mm.default``; the overload
    is dropped to match the profiler's names).  The profiler also times the ops a kernel calls
    inside itself (``_to_copy`` and ``copy_`` inside an optimizer's op, ``as_strided`` inside
    ``transpose``), which a trace does not see: a mode sees the outermost op of each call.
    Each op's own time is then counted with its outermost caller of a traced name, the call
    the trace prices, so measured and predicted calls cover the same work and line up one by
    one (``roofline.compare`` matches them by position).  An op with no traced caller is a
    call of its own name.
    """
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device(device)
    activities = [ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    names = None if traced is None else {packet(op) for op in traced}
    runs = []
    for _ in range(repeats):
        synchronize(dev)
        with _native_stderr_silenced(), profile(activities=activities) as profiler:
            step()
            synchronize(dev)
        calls: dict[int, tuple[float, str]] = {}  # the owning call → (its start, its name)
        own: dict[int, float] = defaultdict(float)
        ends: dict[int, float] = {}  # the owning call → its end
        for event in profiler.events():
            if not event.name.startswith("aten::"):
                continue
            owner = event
            if names is not None:  # the outermost traced op around it: the one the trace saw
                caller = event
                while caller is not None:
                    if _name(caller.name) in names:
                        owner = caller
                    caller = caller.cpu_parent
            calls[owner.id] = (owner.time_range.start, _name(owner.name))
            ends[owner.id] = owner.time_range.end
            own[owner.id] += (event.self_device_time_total if dev.type == "cuda"
                              else event.self_cpu_time_total)
        span = ((max(ends.values()) - min(start for start, _ in calls.values())) / 1e6
                if calls and dev.type != "cuda" else None)
        runs.append(ProfiledStep((OpTime(calls[key][1], own[key] / 1e6)
                                  for key in sorted(calls, key=lambda k: calls[k][0])), span))
    return tuple(runs)


def timed_round(step: Callable[[], Any], device: str | torch.device, traced: Collection[str],
                *, budget_s: float, name: str = "", profiled: int = 1, **options: Any
                ) -> tuple[Measurement, tuple[ProfiledStep, ...]]:
    """One round of a step timed both ways: whole steps for ``budget_s`` (``measure``, with
    ``options``), then ``profiled`` steps call by call (:func:`profile_calls`).  Callers take
    rounds in turn, so that a spell when the machine runs slower falls on the whole step and
    on its calls alike."""
    whole = harness.measure(step, device=device, budget_s=budget_s, name=name, **options)
    return whole, profile_calls(step, device, repeats=profiled, traced=traced)


def profile_ops(step: Callable[[], Any], device: str | torch.device = "cpu", *,
                repeats: int = 5, traced: Collection[str] | None = None) -> tuple[OpTime, ...]:
    """Each op name's own time per step, summed over its calls and averaged over ``repeats``
    steps: :func:`profile_calls` by name, slowest first."""
    totals: dict[str, float] = defaultdict(float)
    for run in profile_calls(step, device, repeats=repeats, traced=traced):
        for call in run:
            totals[call.op] += call.time_s / repeats
    return tuple(sorted((OpTime(name, t) for name, t in totals.items()), key=lambda t: -t.time_s))


def _name(profiled: str) -> str:
    """The trace's name of a profiled op, without the overload: ``aten::mm`` → ``aten.mm``."""
    return profiled.replace("::", ".")
