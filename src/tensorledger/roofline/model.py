"""Predicted time per op and per step from FLOPs, bytes and a chip's ceilings.

Which peak applies: matrix work (categories ``matmul`` and ``attention``) runs on the
matrix units at the dense peak of its input dtype (bf16, fp16, tf32, fp8, or fp32 when the
chip lists no better); everything else (elementwise, reductions, norms, copies) runs on the
vector units, for which the chip's fp32 peak stands in.  Times assume compute and memory
traffic overlap perfectly (time is the max of the two, not the sum), as the lecture does; a
measured per-op overhead (kernel launch, dispatch) is added to every op, views included: a
view launches no kernel but still costs a trip through the dispatcher.

A probed profile (``tensorledger probe``) also carries measured rates by problem size: matrix
FLOP/s for small problems fall short of the peak, and small working sets stream from cache
faster than DRAM bandwidth.  Where a chip has such curves, an op's ceiling is the rate measured
at its size (``Hardware.attainable``); catalog chips use their datasheet peaks throughout.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tensorledger.errors import InputError
from tensorledger.hardware import Hardware

__all__ = [
    "TENSOR_CORE_CATEGORIES",
    "OpLike",
    "OpPrediction",
    "RooflinePrediction",
    "TimeTotal",
    "ceiling",
    "compute_key_for",
    "predict",
    "predict_op",
]

#: Categories whose FLOPs run on matrix units at the dtype's dense peak.
TENSOR_CORE_CATEGORIES = frozenset({"matmul", "attention"})


class OpLike(Protocol):
    """What the roofline reads of an op record (``tensorledger.trace.OpRecord`` has it)."""

    @property
    def op(self) -> str: ...
    @property
    def module(self) -> str: ...
    @property
    def phase(self) -> str: ...
    @property
    def category(self) -> str: ...
    @property
    def input_dtypes(self) -> tuple[str, ...]: ...
    @property
    def output_dtypes(self) -> tuple[str, ...]: ...
    @property
    def flops(self) -> int: ...
    @property
    def bytes_read(self) -> int: ...
    @property
    def bytes_written(self) -> int: ...


_FLOATING = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4")


def compute_key_for(op: OpLike, hardware: Hardware) -> str:
    """The peak-table key an op computes at (see the module docstring)."""
    if op.category in TENSOR_CORE_CATEGORIES:
        for dtype in (*op.input_dtypes, *op.output_dtypes):
            try:
                key = hardware.compute_key(dtype)
            except InputError:
                continue
            if key in _FLOATING and key in hardware.dense_flop_per_s:
                return key
    if "fp32" in hardware.dense_flop_per_s:
        return "fp32"
    # chips that list only matrix peaks (TPUs): their slowest listed floating rate stands in
    floating = [k for k in _FLOATING if k in hardware.dense_flop_per_s]
    if not floating:
        raise InputError(f"{hardware.id} lists no floating-point peak to predict with")
    return min(floating, key=lambda k: hardware.dense_flop_per_s[k])


@dataclass(frozen=True)
class OpPrediction:
    index: int
    op: str
    module: str
    phase: str
    category: str
    compute_key: str
    flops: int
    bytes: int
    intensity_flop_per_byte: float  # inf when an op moves no bytes
    ridge_flop_per_byte: float  # the chip's intensity for this op's peak
    compute_time_s: float
    memory_time_s: float
    overhead_s: float
    time_s: float
    attained_flop_per_s: float  # flops / time: the op's height on a roofline plot
    bound: str  # "compute", "memory", "overhead" or "free"


def predict_op(index: int, op: OpLike, hardware: Hardware) -> OpPrediction:
    key = compute_key_for(op, hardware)
    peak = hardware.dense_flop_per_s[key]
    moved = op.bytes_read + op.bytes_written
    rate = peak
    if op.category in TENSOR_CORE_CATEGORIES:
        curve = f"{op.category}.{key}" if f"{op.category}.{key}" in hardware.curves else (
            f"matmul.{key}")
        rate = hardware.attainable(curve, op.flops, peak)
    compute = op.flops / rate
    memory = moved / hardware.attainable("bandwidth", moved, hardware.memory_bandwidth_bytes_per_s)
    overhead = hardware.op_overhead_s  # views too: they cost a dispatch, if no kernel
    if overhead == 0 and moved == 0 and op.flops == 0:
        bound = "free"
    elif overhead > max(compute, memory):
        bound = "overhead"
    else:
        bound = "compute" if compute >= memory else "memory"
    return OpPrediction(
        index=index, op=op.op, module=op.module, phase=op.phase, category=op.category,
        compute_key=key, flops=op.flops, bytes=moved,
        intensity_flop_per_byte=op.flops / moved if moved else math.inf,
        ridge_flop_per_byte=peak / hardware.memory_bandwidth_bytes_per_s,
        compute_time_s=compute, memory_time_s=memory, overhead_s=overhead,
        time_s=max(compute, memory) + overhead,
        attained_flop_per_s=op.flops / (max(compute, memory) + overhead) if op.flops else 0.0,
        bound=bound)


@dataclass(frozen=True)
class TimeTotal:
    """Predicted time of a group of ops (a category, module or phase)."""

    name: str
    ops: int
    flops: int
    bytes: int
    time_s: float
    share_of_step: float  # this group's time / the step's time
    compute_bound_ops: int
    memory_bound_ops: int
    overhead_bound_ops: int


@dataclass(frozen=True)
class RooflinePrediction:
    hardware: str
    ops: tuple[OpPrediction, ...]
    flops: int
    bytes: int
    time_s: float
    by_category: tuple[TimeTotal, ...]
    by_module: tuple[TimeTotal, ...]
    by_phase: tuple[TimeTotal, ...]
    tokens: int | None
    tokens_per_s: float | None
    mfu_peak_key: str  # the peak that MFU is taken against
    mfu: float  # FLOPs / time / peak: the MFU this prediction implies


def _totals(ops: Sequence[OpPrediction], key: Callable[[OpPrediction], str]
            ) -> tuple[TimeTotal, ...]:
    groups: dict[str, list[OpPrediction]] = defaultdict(list)
    for op in ops:
        groups[key(op)].append(op)
    step_s = sum(o.time_s for o in ops)
    totals = [TimeTotal(name=name, ops=len(group), flops=sum(o.flops for o in group),
                        bytes=sum(o.bytes for o in group), time_s=sum(o.time_s for o in group),
                        share_of_step=sum(o.time_s for o in group) / step_s if step_s else 0.0,
                        compute_bound_ops=sum(o.bound == "compute" for o in group),
                        memory_bound_ops=sum(o.bound == "memory" for o in group),
                        overhead_bound_ops=sum(o.bound == "overhead" for o in group))
              for name, group in groups.items()]
    return tuple(sorted(totals, key=lambda t: -t.time_s))


def predict(records: Iterable[OpLike], hardware: Hardware, *, tokens: int | None = None,
            mfu_dtype: str | None = None) -> RooflinePrediction:
    """Predicted time of every op and of the step; MFU against ``mfu_dtype``'s peak (by
    default the matrix peak most of the step's matmul FLOPs ran at)."""
    ops = tuple(predict_op(i, r, hardware) for i, r in enumerate(records))
    time_s = sum(o.time_s for o in ops)
    flops = sum(o.flops for o in ops)
    if mfu_dtype is not None:
        key = hardware.compute_key(mfu_dtype)
    else:
        matrix: dict[str, int] = defaultdict(int)
        for o in ops:
            if o.category in TENSOR_CORE_CATEGORIES:
                matrix[o.compute_key] += o.flops
        key = max(matrix, key=lambda k: matrix[k]) if matrix else compute_key_for_default(
            hardware)
    peak = hardware.peak_flop_per_s(key)
    return RooflinePrediction(
        hardware=hardware.id, ops=ops, flops=flops, bytes=sum(o.bytes for o in ops),
        time_s=time_s,
        by_category=_totals(ops, lambda o: o.category),
        by_module=_totals(ops, lambda o: o.module),
        by_phase=_totals(ops, lambda o: o.phase),
        tokens=tokens,
        tokens_per_s=None if tokens is None or time_s == 0 else tokens / time_s,
        mfu_peak_key=key,
        mfu=flops / time_s / peak if time_s > 0 else 0.0)


def ceiling(hardware: Hardware, key: str, intensities: Sequence[float]) -> tuple[float, ...]:
    """The roof at each intensity: min(peak, intensity × bandwidth), in FLOP/s."""
    peak = hardware.peak_flop_per_s(key)
    return tuple(min(peak, x * hardware.memory_bandwidth_bytes_per_s) for x in intensities)


def compute_key_for_default(hardware: Hardware) -> str:
    """The key MFU uses when a step has no matrix ops: bf16 if listed, else fp32."""
    for key in ("bf16", "fp32"):
        if key in hardware.dense_flop_per_s:
            return key
    return next(iter(hardware.dense_flop_per_s))
