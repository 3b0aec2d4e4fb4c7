"""Time every aten op of a step as it runs (dispatch timing).

Each op is bracketed by the clock (and by device synchronisation on asynchronous devices), so
the per-op times include the kernel and the dispatcher below the mode, not the Python above
it.  Synchronising after every op serialises an asynchronous device: use the whole-step time
of ``measure`` for the total and these times for the split between ops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tensorledger.bench.harness import synchronize

__all__ = ["OpTime", "time_ops"]


@dataclass(frozen=True)
class OpTime:
    op: str  # "aten.mm.default", as the trace names it
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
