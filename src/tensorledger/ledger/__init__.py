"""Pipelines: a workload → its traced step → the analyses (trace summary, memory, roofline).

The analyses are pure functions of a trace; this package is where a workload is traced (or
measured) and handed to them, once.
"""

from __future__ import annotations

from tensorledger.ledger.account import Ledger, RunCost, account_workload
from tensorledger.ledger.memory import memory_report, step_facts
from tensorledger.ledger.roofline import RooflineRun, StepTiming, roofline_report
from tensorledger.ledger.trace import TraceReport, trace_report

__all__ = [
           "Ledger",
           "RooflineRun",
           "RunCost",
           "StepTiming",
           "TraceReport",
           "account_workload",
           "memory_report",
           "roofline_report",
           "step_facts",
           "trace_report",
]
