"""Helpers for the per-rule tests: run one aten op under the recorder, and torch's
FlopCounterMode beside it as the oracle where torch has a formula."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from tensorledger.costs.registry import Rule, lookup
from tensorledger.trace import Recorder
from tensorledger.trace.records import OpRecord

aten = torch.ops.aten


def rule_test_name(op: str) -> str:
    """The name of the test that pins the rule of ``op``: ``aten.mm`` → ``test_rule_aten_mm``."""
    return "test_rule_" + op.replace(".", "_")


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised meta tensor: shapes and dtypes only, nothing allocated."""
    return torch.empty(shape, dtype=dtype, device="meta")


def rule(op: str) -> Rule:
    found = lookup(op)
    assert found is not None, f"no rule for {op}"
    return found


def packet(record: OpRecord) -> str:
    """``aten.add_.Tensor`` → ``aten.add_``."""
    return record.op.rsplit(".", 1)[0]


def record_op(op: str, step: Callable[[], Any]) -> OpRecord:
    """Run ``step`` under the recorder and return the one record of op packet ``op`` (or of
    its in-place form ``op_``)."""
    with Recorder() as recorder:
        step()
    found = [r for r in recorder.trace.records if packet(r) in (op, op + "_")]
    assert len(found) == 1, [r.op for r in recorder.trace.records]
    return found[0]


def record_with_oracle(op: str, step: Callable[[], Any]) -> tuple[OpRecord, int]:
    """The record of ``op`` and FlopCounterMode's total for the same call."""
    with FlopCounterMode(display=False) as counter:
        record = record_op(op, step)
    return record, int(counter.get_total_flops())


def direct(op: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None,
           out: Any = None) -> int:
    """FLOPs of ``op``'s rule called directly: for ops that cannot run on this machine
    (CUDA-only kernels with no meta function, composites the dispatcher never shows)."""
    return int(rule(op).flops(args, kwargs or {}, out))
