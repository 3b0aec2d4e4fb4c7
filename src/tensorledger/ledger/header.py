"""The workload a result describes, once: what every result of a traced step begins with.

:class:`~tensorledger.ledger.trace.TraceReport`, :class:`~tensorledger.ledger.roofline.
RooflineRun` and :class:`~tensorledger.ledger.account.Ledger` are :class:`WorkloadHeader`\\ s
with their own figures after it; :func:`header_of` fills it from a workload.

>>> from tensorledger.workload import resolve_workload
>>> header_of(resolve_workload("tiny", batch=2, seq=16, precision="fp32"))["optimizer"]
'adamw'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tensorledger.workload import Workload

__all__ = ["WorkloadHeader", "header_of"]


@dataclass(frozen=True)
class WorkloadHeader:
    """What was traced: the model, how it was built, the step and its sizes, the recipe."""

    model: str
    built_by: str
    step: str
    batch: int
    seq: int
    device: str  # where the step was traced
    precision: str
    optimizer: str | None  # None when the step has no optimizer step
    # a mixture of experts: the tokens each routed expert receives, in words ('' without)
    routing: str = field(default="", kw_only=True)


def header_of(work: Workload) -> dict[str, Any]:
    """The header's fields for ``work``, to pass on to a result's constructor."""
    return {"model": work.model, "built_by": work.source.built_by, "step": work.step.name,
            "batch": work.batch, "seq": work.seq, "device": work.device,
            "precision": work.precision.name,
            "optimizer": work.optimizer.name if work.step.optimizer else None,
            "routing": work.routing_note}
