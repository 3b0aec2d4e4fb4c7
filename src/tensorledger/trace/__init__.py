"""Trace a PyTorch step into op records: FLOPs, bytes, module and phase of every aten op.

>>> import torch
>>> from tensorledger.trace import trace, by_category
>>> a, b = torch.ones(4, 8, device="meta"), torch.ones(8, 2, device="meta")
>>> result = trace(lambda x, y: x @ y, a, b)
>>> [(c.category, c.flops) for c in by_category(result)]  # 2 * 4 * 2 * 8
[('matmul', 128)]
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

from tensorledger.trace.aggregate import (
    CategoryTotal,
    ModuleNode,
    PhaseTotal,
    SixND,
    TraceSummary,
    backward_forward_ratio,
    by_category,
    by_module,
    by_phase,
    summarize,
    versus_6nd,
)
from tensorledger.trace.recorder import Recorder, trace
from tensorledger.trace.records import ATTENTION_CONVENTIONS, PHASES, ROOT, OpRecord, Trace

__all__ = [
    "ATTENTION_CONVENTIONS",
    "PHASES",
    "ROOT",
    "CategoryTotal",
    "ModuleNode",
    "OpRecord",
    "PhaseTotal",
    "Recorder",
    "SixND",
    "Trace",
    "TraceSummary",
    "backward_forward_ratio",
    "by_category",
    "by_module",
    "by_phase",
    "summarize",
    "trace",
    "versus_6nd",
]


class _CallableModule(types.ModuleType):
    """``tensorledger.trace(step, *args)`` calls :func:`trace` (the package shares its name)."""

    def __call__(self, step: Callable[..., Any], *args: Any, **kwargs: Any) -> Trace:
        return trace(step, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
