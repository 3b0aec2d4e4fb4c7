"""Any result as the tables the CLI prints: ``render(result)`` for ``rich.print``.

The result types' ``__rich__`` methods reach :func:`render` through :mod:`tensorledger.display`
(registered in :mod:`tensorledger.report.views`, imported when first rendered), so
``rich.print(ledger.memory)`` shows what ``tensorledger memory`` shows.  Formats; never
computes a figure.

>>> import torch
>>> from tensorledger.hardware import get_hardware
>>> from tensorledger.roofline import predict
>>> from tensorledger.trace import trace
>>> step = trace(lambda x: x @ x, torch.ones(4, 4, device="meta"))
>>> view = render(predict(step.records, get_hardware("h100")))
>>> [type(part).__name__ for part in view.renderables][:3]  # by category, phase, module
['Table', 'Table', 'Table']
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType

from tensorledger.ledger.account import Ledger
from tensorledger.ledger.roofline import RooflineRun
from tensorledger.ledger.trace import TraceReport
from tensorledger.memory.ledger import MemoryLedger
from tensorledger.report.account import account_view
from tensorledger.report.memory import memory_view
from tensorledger.report.roofline import prediction_view, roofline_run_view
from tensorledger.report.trace import flops_notes, flops_table, module_table, trace_view
from tensorledger.roofline.model import RooflinePrediction
from tensorledger.trace.aggregate import TraceSummary

__all__ = ["render", "summary_view"]

View = list[RenderableType | str]


def summary_view(s: TraceSummary) -> View:
    """FLOPs by category, by phase and by module, and the notes (6·N·D, uncovered ops)."""
    return [flops_table("By category", "category", s.by_category),
            flops_table("By phase", "phase", s.by_phase), module_table(s.modules),
            *flops_notes(s)]


def render(result: Any) -> Group:
    """The terminal view of a :class:`Ledger`, :class:`TraceReport`, :class:`MemoryLedger`,
    :class:`RooflineRun`, :class:`RooflinePrediction` or :class:`TraceSummary`."""
    view: View
    if isinstance(result, Ledger):
        view = account_view(result)
    elif isinstance(result, TraceReport):
        view = trace_view(result)
    elif isinstance(result, MemoryLedger):
        view = memory_view(result)
    elif isinstance(result, RooflineRun):
        view = roofline_run_view(result)
    elif isinstance(result, RooflinePrediction):
        view = prediction_view(result)
    elif isinstance(result, TraceSummary):
        view = summary_view(result)
    else:
        from tensorledger.errors import InputError

        raise InputError(f"no terminal view for {type(result).__name__}; known: Ledger, "
                         "TraceReport, MemoryLedger, RooflineRun, RooflinePrediction, "
                         "TraceSummary")
    return Group(*view)
