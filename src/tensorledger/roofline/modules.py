"""Predicted time by module, repeated modules folded: ``blocks.{0..11}.mlp.up`` ×12 in one row.

A pure function of the per-module totals of a prediction (each op in the innermost module that
ran it): names cut to ``depth`` components are summed, then modules that differ only in an
integer path component and have the same figures are summed into one group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tensorledger.roofline.model import TimeTotal
from tensorledger.trace.modules import group_repeats, truncate

__all__ = ["ModuleTime", "module_times"]


@dataclass(frozen=True)
class ModuleTime:
    """Predicted time of ``count`` modules summed (one module: ``count`` 1)."""

    name: str  # "blocks.{0..11}.mlp.up"; "" for ops outside every module
    count: int
    members: tuple[str, ...]
    ops: int
    flops: int
    bytes: int
    time_s: float
    share_of_step: float
    compute_bound_ops: int
    memory_bound_ops: int
    overhead_bound_ops: int
    ideal_time_s: float  # the roofline bound


def _sum(name: str, members: Sequence[str], counts: Sequence[int],
         totals: Sequence[TimeTotal]) -> ModuleTime:
    return ModuleTime(name=name, count=sum(counts), members=tuple(members),
                      ops=sum(t.ops for t in totals), flops=sum(t.flops for t in totals),
                      bytes=sum(t.bytes for t in totals), time_s=sum(t.time_s for t in totals),
                      share_of_step=sum(t.share_of_step for t in totals),
                      compute_bound_ops=sum(t.compute_bound_ops for t in totals),
                      memory_bound_ops=sum(t.memory_bound_ops for t in totals),
                      overhead_bound_ops=sum(t.overhead_bound_ops for t in totals),
                      ideal_time_s=sum(t.ideal_time_s for t in totals))


def module_times(by_module: Sequence[TimeTotal], depth: int | None = None,
                 group: bool = True) -> tuple[ModuleTime, ...]:
    """``by_module`` cut to ``depth`` path components (``None``: as recorded), repeated
    modules grouped (unless ``group`` is false), slowest first.

    >>> t = [TimeTotal(f"h.{i}.mlp", 2, 10, 4, 1.0, 0.25, 1, 1, 0, 0.5) for i in range(4)]
    >>> [(m.name, m.count, m.time_s) for m in module_times(t)]
    [('h.{0..3}.mlp', 4, 4.0)]
    """
    cut: dict[str, list[TimeTotal]] = {}
    for total in by_module:
        cut.setdefault(truncate(total.name, depth), []).append(total)
    merged = [_sum(name, [name], [1], totals) for name, totals in cut.items()]
    if not group:
        return tuple(sorted(merged, key=lambda m: -m.time_s))
    signatures = [m.flops for m in merged]  # ops and bytes may differ (see group_modules)
    grouped = []
    for label, positions in group_repeats([m.name for m in merged], signatures):
        members = [merged[p] for p in positions]
        grouped.append(_sum(label, [m.name for m in members], [m.count for m in members],
                            [_as_total(m) for m in members]))
    return tuple(sorted(grouped, key=lambda m: -m.time_s))


def _as_total(m: ModuleTime) -> TimeTotal:
    return TimeTotal(m.name, m.ops, m.flops, m.bytes, m.time_s, m.share_of_step,
                     m.compute_bound_ops, m.memory_bound_ops, m.overhead_bound_ops,
                     m.ideal_time_s)
