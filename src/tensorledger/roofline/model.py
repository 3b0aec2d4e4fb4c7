"""Predicted time per op and per step from FLOPs, bytes and a chip's ceilings: two figures.

- The **roofline bound** (``ideal_time_s``): FLOPs at the dense peak, bytes at the datasheet
  bandwidth, whichever takes longer, nothing else.  No real step is this fast.
- The **expected** time (``time_s``): the same work at what eager PyTorch attains.  On a catalog
  chip, published fractions of the peak (matmuls, by size and dtype; fused attention), of the
  bandwidth, and a fixed cost per op (kernel launch and dispatch) — ``Hardware.efficiency``,
  each figure with its source.  On a probed profile (``tensorledger probe``), the rates measured
  on this machine by problem size and its measured per-op cost replace them.

Which peak applies: matrix work (categories ``matmul`` and ``attention``) runs on the matrix
units at the dense peak of its input dtype (bf16, fp16, tf32, fp8, or fp32 when the chip lists
no better); everything else (elementwise, reductions, norms, copies) runs on the vector units,
for which the chip's fp32 peak stands in.  Compute and memory traffic overlap (time is the max
of the two, not the sum), as the lecture has it.  The per-op cost: on a probed (synchronous)
device it is added to every op, views included, since a view launches no kernel but still costs
a trip through the dispatcher; on a catalog GPU it is the launch floor between kernels, so
views, which launch none, cost nothing (their dispatch overlaps queued kernels).

Causal attention: a fused kernel skips the masked half, so on a catalog chip both figures
price the causal-halved count, at the attention fraction FlashAttention's papers report on that
count.  A probed attention curve was measured against the full count and is used with it.

Kernels by dtype on a probed profile (:mod:`tensorledger.roofline.kernel_rates`): an attention
op reads the curves of its dtype, direction (forward or backward) and nearest head width (a
head's rate, and a call's own cost where probed); a
matrix product the curve of a linear layer's product with both operands cold
(``linear.<dtype>``); a cast (autocast's ``_to_copy``) its cast's bandwidth curve; an op whose
every floating tensor is bf16 the bf16 bandwidth curve, or its strided curve where its kernel
runs in short inner loops; an op the probe timed by name (GELU, log-softmax, the embedding's
backward, in bf16) its own curve.  A profile without them prices those ops as before.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tensorledger.costs import packet
from tensorledger.errors import InputError
from tensorledger.hardware import Hardware
from tensorledger.hardware.kernels import linear_curve
from tensorledger.roofline.collectives import CollectiveKind, collective_time
from tensorledger.roofline.cost_classes import cost_class, pieces, updates_in_place
from tensorledger.roofline.kernel_rates import (
    attention_rate,
    decode_product,
    op_precision,
    own_kernel_curve,
    stream_rate,
)
from tensorledger.summary import show_bytes, show_count, show_flops, show_time, summary

__all__ = [
    "BASES",
    "TENSOR_CORE_CATEGORIES",
    "OpLike",
    "OpPrediction",
    "RooflinePrediction",
    "TimeTotal",
    "calibrated_for",
    "ceiling",
    "compute_key_for",
    "predict",
    "predict_op",
]

#: What the expected time of a chip rests on, by ``Hardware.expected_basis``.
BASES = {
    "probed": "rates and per-op cost measured on this machine by `tensorledger probe`",
    "efficiencies": "published efficiencies of eager PyTorch on this chip (`tensorledger "
                    "hardware <chip>` lists them with their sources)",
    "datasheet": "the datasheet alone: the chip states no efficiencies, so expected = bound",
}

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
    @property
    def flops_causal_halved(self) -> int: ...
    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]: ...  # a decode product's operands


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
    time_s: float  # expected: compute or memory at attainable rates, plus the per-op cost
    attained_flop_per_s: float  # flops / time: the op's height on a roofline plot
    bound: str  # "compute", "memory", "overhead" or "free"
    ideal_time_s: float  # the roofline bound: at the peak and the datasheet bandwidth
    ideal_bound: str  # "compute", "memory" or "free" at the roofline bound: the lecture's split
    between_ops_s: float = 0.0  # of overhead_s, the framework's time before the op (calibrated)
    link_time_s: float = 0.0  # a collective's time on the links (ring formula); 0 otherwise

    def __repr__(self) -> str:
        return summary("OpPrediction", f"#{self.index} {self.op}", f"{self.bound}-bound",
                       f"{show_time(self.time_s)} expected",
                       f"bound {show_time(self.ideal_time_s)}", show_flops(self.flops),
                       show_bytes(self.bytes))


#: The collective kinds priced on the links (every kind the cost rules record).
_LINK_KINDS = frozenset(kind.value for kind in CollectiveKind)


def ranks_per_node(group_size: int, rank_stride: int, devices_per_node: int) -> int:
    """Ranks of a group on each node when its ranks lie ``rank_stride`` apart in a world
    packed node by node: 8 consecutive ranks on 8-device nodes share one node; the group of
    ranks 0, 8, 16, ... has one rank per node.

    >>> ranks_per_node(8, 1, 8), ranks_per_node(8, 8, 8), ranks_per_node(16, 4, 8)
    (8, 1, 2)
    """
    per = min(group_size, max(1, devices_per_node // max(rank_stride, 1)))
    while group_size % per:
        per -= 1
    return per


def _pair_per_node(collective: Any, hardware: Hardware) -> int | None:
    """1 when a send's two ends lie on different nodes, 2 when on one; from the recorded ends
    (world ranks, nodes filled in order), else from the group's stride."""
    per = hardware.devices_per_node
    if per is None:
        return None
    ends: tuple[int, ...] = tuple(getattr(collective, "ends", ()))
    if len(ends) == 2:
        return 2 if ends[0] // per == ends[1] // per else 1
    return ranks_per_node(2, collective.rank_stride, per)


def _predict_collective(index: int, op: OpLike, collective: Any, hardware: Hardware
                        ) -> OpPrediction:
    """A collective priced on the links (:func:`collective_time`, ring), not on memory; a
    chip without topology keys is refused there, in one line."""
    kind = CollectiveKind(collective.kind)
    per_node = (None if hardware.devices_per_node is None else
                ranks_per_node(collective.group_size, collective.rank_stride,
                               hardware.devices_per_node))
    size = collective.size_bytes
    ranks = collective.group_size
    if kind is CollectiveKind.SEND_RECV and ranks > 1:
        # one message between two ranks: the link between them, one device's NVLink inside
        # a node or its own NIC between nodes, whatever else the group spans
        ranks, per_node = 2, _pair_per_node(collective, hardware)
    busier = max(collective.bytes_sent, collective.bytes_received)
    if kind is CollectiveKind.ALL_TO_ALL and ranks > 1 and (
            abs(busier * ranks - size * (ranks - 1)) >= ranks):  # past an even split's rounding
        # uneven splits (a permutation: ring attention's gradient pass sends its whole buffer
        # to one rank; experts' token-slots split as the routing says): priced as the even
        # all-to-all whose rank sends and receives as much as this one's busier direction
        size = busier * ranks / (ranks - 1)
    priced = collective_time(kind, size, ranks, hardware,
                             ranks_per_node=per_node)
    bound = "link" if priced.time_s > 0 else "free"
    return OpPrediction(
        index=index, op=op.op, module=op.module, phase=op.phase, category=op.category,
        compute_key="", flops=0, bytes=0, intensity_flop_per_byte=math.inf,
        ridge_flop_per_byte=0.0, compute_time_s=0.0, memory_time_s=0.0, overhead_s=0.0,
        time_s=priced.time_s, attained_flop_per_s=0.0, bound=bound,
        ideal_time_s=priced.time_s, ideal_bound=bound, link_time_s=priced.time_s)


def predict_op(index: int, op: OpLike, hardware: Hardware,
               footprint: float | None = None,
               group_footprint: float | None = None, *, inference: bool = False,
               reread_bytes: float = 0.0) -> OpPrediction:
    """One op's prediction; ``footprint``: the mean bytes an op of its step moves, which a
    calibrated profile prices the cost of entering an op by; ``group_footprint``: the mean
    bytes an op of its phase group moves (``Calibration.group``), which it prices the time
    between ops by (``footprint`` where not given); ``inference``: the op is of a forward
    under no_grad, whose per-op cost a probed profile measures apart
    (``Hardware.op_overhead_for``), and whose products of a few rows with a weight stream it
    at the probed decode rate (``kernel_rates.decode_product``) of a weight last read
    ``reread_bytes`` ago."""
    collective = getattr(op, "collective", None)
    if collective is not None and collective.kind in _LINK_KINDS:
        return _predict_collective(index, op, collective, hardware)
    key = compute_key_for(op, hardware)
    peak = hardware.dense_flop_per_s[key]
    moved = op.bytes_read + op.bytes_written
    work = ideal_work = op.flops  # the FLOPs each figure prices
    rate = peak
    in_place = updates_in_place(op.category, op.phase)
    if op.category == "attention":
        ideal_work = op.flops_causal_halved  # a fused kernel skips the masked half
        curve = f"attention.{key}"
        probed = attention_rate(op, hardware, key)  # its direction and head width's curve
        if probed is None and curve not in hardware.curves:
            work = ideal_work  # a probed curve was measured on the full count
        efficiency = hardware.efficiency
        if probed is not None:
            rate = probed
        elif curve in hardware.curves or efficiency is None or efficiency.attention is None:
            rate = hardware.expected_flop_rate(curve, key, work)
        else:
            rate = peak * efficiency.attention
    elif op.category in TENSOR_CORE_CATEGORIES:
        # a linear layer's product with its operands cold, where probed; else the matmul curve
        cold = linear_curve(key)
        rate = hardware.expected_flop_rate(
            cold if cold in hardware.curves else f"{op.category}.{key}", key, work)
    compute = work / rate
    streamed = (None if in_place or op.category in TENSOR_CORE_CATEGORIES
                else stream_rate(op, hardware, moved))  # a cast's, a bf16 op's own curve
    memory = moved / (streamed or hardware.expected_bandwidth(moved, in_place=in_place))
    decode = (decode_product(op, hardware, key, reread_bytes)
              if inference and op.category == "matmul" else None)
    if decode is not None:  # its kernel's own rate, the weight cold or warm
        memory = decode[0] / decode[1]
    overhead = hardware.op_overhead_for(inference=inference)
    between = 0.0
    if op.category == "view" and hardware.expected_basis == "efficiencies":
        overhead = 0.0  # no kernel to launch; its dispatch overlaps the GPU's queued work
    calibration = hardware.calibration
    if calibration is not None:  # a probed machine's fit of whole steps (Calibration)
        precision = op_precision(op)
        for kind in (cost_class(op.op, op.category, op.phase, precision),
                     # a profile fitted before the forward ops were split off
                     cost_class(op.op, op.category, op.phase, precision, forward_apart=False),
                     # before a norm's reductions and divisions and an attention's backward
                     # were split off
                     cost_class(op.op, op.category, op.phase, precision, split=False),
                     # fitted on fp32 steps alone: the fp32 class
                     cost_class(op.op, op.category, op.phase),
                     cost_class(op.op, op.category, op.phase, forward_apart=False),
                     cost_class(op.op, op.category, op.phase, split=False),
                     # a profile fitted before the optimizer's class was split off
                     cost_class(op.op, op.category)):
            if kind in calibration.scale:
                break
        factor = calibration.factor(kind, op.category)
        # a decode product streams at the rate probed in its own regime: the fit over
        # training steps' matmuls neither scales its weight's time nor adds their bytes' cost
        compute = compute * factor
        memory = memory if decode is not None else memory * factor
        # nor counts the pieces of an op priced from its own kernel's curves
        parts = (0.0 if decode is not None or own_kernel_curve(op, hardware, key)
                 else pieces(op))
        between = calibration.between(
            op.phase, footprint if group_footprint is None else group_footprint)
        entry = (calibration.view_entry(packet(op.op), footprint) if op.category == "view"
                 else calibration.entry(footprint))
        overhead = (entry + calibration.call_cost_s.get(kind, 0.0)
                    + calibration.piece_cost_s.get(kind, 0.0) * parts + between)
    # its new tensors mapped anew (a CPU's large ones): their pages faulted in and unmapped,
    # a cost of the allocation beside the kernel's
    overhead += hardware.fresh_pages_s(size for _, size in getattr(op, "storages_created", ()))
    if overhead == 0 and moved == 0 and op.flops == 0:
        bound = "free"
    elif overhead > max(compute, memory):
        bound = "overhead"
    else:
        bound = "compute" if compute >= memory else "memory"
    ideal_compute = ideal_work / peak
    ideal_memory = moved / hardware.ideal_bandwidth_bytes_per_s
    # a calibration factor below 1 never takes an op below its roofline bound
    time_s = max(compute, memory, ideal_compute, ideal_memory) + overhead
    return OpPrediction(
        index=index, op=op.op, module=op.module, phase=op.phase, category=op.category,
        compute_key=key, flops=op.flops, bytes=moved,
        intensity_flop_per_byte=op.flops / moved if moved else math.inf,
        ridge_flop_per_byte=peak / hardware.memory_bandwidth_bytes_per_s,
        compute_time_s=compute, memory_time_s=memory, overhead_s=overhead,
        time_s=time_s,
        attained_flop_per_s=op.flops / time_s if op.flops else 0.0,
        bound=bound,
        ideal_time_s=max(ideal_compute, ideal_memory),
        ideal_bound="free" if ideal_work == 0 and moved == 0 else (
            "compute" if ideal_compute >= ideal_memory else "memory"),
        between_ops_s=between)


@dataclass(frozen=True)
class TimeTotal:
    """Predicted time of a group of ops (a category, module or phase)."""

    name: str
    ops: int
    flops: int
    bytes: int
    time_s: float  # expected
    share_of_step: float  # this group's expected time / the step's
    compute_bound_ops: int
    memory_bound_ops: int
    overhead_bound_ops: int
    ideal_time_s: float  # the roofline bound


@dataclass(frozen=True)
class RooflinePrediction:
    hardware: str
    ops: tuple[OpPrediction, ...]
    flops: int
    bytes: int
    time_s: float  # expected step time (see ``basis``)
    by_category: tuple[TimeTotal, ...]
    by_module: tuple[TimeTotal, ...]
    by_phase: tuple[TimeTotal, ...]
    tokens: int | None
    tokens_per_s: float | None
    mfu_peak_key: str  # the peak that MFU is taken against
    mfu: float  # FLOPs / expected time / peak: the MFU this prediction implies
    ideal_time_s: float  # the roofline bound of the step: no real step is faster
    ideal_mfu: float  # FLOPs / ideal time / peak
    ideal_tokens_per_s: float | None
    basis: str  # what the expected figure rests on: see ``BASES``
    bound_bandwidth: str = "datasheet bandwidth"  # the bandwidth the bound streams at
    communication_s: float = 0.0  # of time_s, the collectives' time on the links
    overlapped_time_s: float = 0.0  # each phase's compute and communication fully overlapped
    # of ``flops``, those a checkpoint's recomputed forward ran again (0 without checkpointing)
    recomputed_flops: int = 0

    @property
    def model_flops(self) -> int:
        """The FLOPs the model needs: those that ran less the recomputed forward."""
        return self.flops - self.recomputed_flops

    @property
    def model_mfu(self) -> float:
        """Model FLOPs utilisation at the expected time: :attr:`mfu` counts every FLOP that
        ran (the hardware FLOPs utilisation when the step recomputes), this the model's."""
        return self.mfu * self.model_flops / self.flops if self.flops else 0.0

    @property
    def ideal_model_mfu(self) -> float:
        """:attr:`model_mfu` at the roofline bound."""
        return self.ideal_mfu * self.model_flops / self.flops if self.flops else 0.0

    def __repr__(self) -> str:
        return summary("RooflinePrediction",
                       f"{show_count(len(self.ops), 'ops')} on {self.hardware}",
                       f"{show_time(self.time_s)} per step expected",
                       f"bound {show_time(self.ideal_time_s)}", show_flops(self.flops),
                       f"MFU {self.mfu:.3f} ({self.mfu_peak_key})")


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
                        overhead_bound_ops=sum(o.bound == "overhead" for o in group),
                        ideal_time_s=sum(o.ideal_time_s for o in group))
              for name, group in groups.items()]
    return tuple(sorted(totals, key=lambda t: -t.time_s))


def predict(records: Iterable[OpLike], hardware: Hardware, *, tokens: int | None = None,
            mfu_dtype: str | None = None) -> RooflinePrediction:
    """Predicted time of every op and of the step; MFU against ``mfu_dtype``'s peak (by
    default the matrix peak most of the step's matmul FLOPs ran at).  A step of forward ops
    alone is an inference step (the workload runs it under no_grad), its ops priced at the
    profile's per-op cost of inference."""
    records = tuple(records)
    hardware = calibrated_for(hardware, records)
    inference = all(r.phase == "forward" for r in records)
    # an inference step reads each weight once: between two reads of one, the step's bytes
    reread = float(sum(r.bytes_read for r in records)) if inference else 0.0
    footprint: float | None = None
    by_phase: dict[str, float | None] = {}  # a phase → the footprint of its group's ops
    if hardware.calibration is not None:
        group = hardware.calibration.group
        footprint = step_footprint(r.bytes_read + r.bytes_written for r in records)
        moved: dict[str, list[float]] = defaultdict(list)
        for r in records:
            moved[group(r.phase)].append(r.bytes_read + r.bytes_written)
        by_group = {name: step_footprint(found) for name, found in moved.items()}
        by_phase = {phase: by_group[group(phase)] for phase in {r.phase for r in records}}
    ops = tuple(predict_op(i, r, hardware, footprint, by_phase.get(r.phase),
                           inference=inference, reread_bytes=reread)
                for i, r in enumerate(records))
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
    ideal_s = sum(o.ideal_time_s for o in ops)
    communication_s = sum(o.link_time_s for o in ops)
    return RooflinePrediction(
        hardware=hardware.id, ops=ops, flops=flops, bytes=sum(o.bytes for o in ops),
        time_s=time_s,
        by_category=_totals(ops, lambda o: o.category),
        by_module=_totals(ops, lambda o: o.module),
        by_phase=_totals(ops, lambda o: o.phase),
        tokens=tokens,
        tokens_per_s=None if tokens is None or time_s == 0 else tokens / time_s,
        mfu_peak_key=key,
        mfu=flops / time_s / peak if time_s > 0 else 0.0,
        ideal_time_s=ideal_s, ideal_mfu=flops / ideal_s / peak if ideal_s > 0 else 0.0,
        ideal_tokens_per_s=None if tokens is None or ideal_s == 0 else tokens / ideal_s,
        basis=BASES[hardware.expected_basis],
        bound_bandwidth="the fastest bandwidth measured (from cache where a buffer fits)"
        if hardware.curves.get("bandwidth") else "datasheet bandwidth",
        communication_s=communication_s, overlapped_time_s=overlapped(ops),
        recomputed_flops=sum(r.flops for r in records if getattr(r, "recomputed", False)))


def calibrated_for(hardware: Hardware, records: Sequence[OpLike]) -> Hardware:
    """``hardware`` with the calibration that prices a step of ``records``: its
    low-precision recipes' fit (``Calibration.low_precision``) where any op runs in bf16 or
    fp16 (every op of such a step, its fp32 ones too), else its own.  The framework's cost
    of an op differs by recipe, not by the bytes an op moves: on one 2-core VM, the smallest
    calibration model's views (entering an op, no kernel) took 0.97 µs each in fp32, 1.17 µs
    in mixed-bf16 and 1.33 to 1.45 µs in bf16, and its time between ops 2.2 to 2.4 µs an op
    against 2.9 to 3.0, where its ops moved 61 to 68 kB in fp32 and 34 to 50 kB in the
    others; one fit over all three recipes priced that model's fp32 step 5% to 20% over
    (three calibrations) and its bf16 steps 17% and 20% under (one of them)."""
    calibration = hardware.calibration
    if (calibration is None or calibration.low_precision is None
            or not any(op_precision(r) for r in records)):
        return hardware
    return dataclasses.replace(hardware, calibration=calibration.low_precision)


def step_footprint(moved: Iterable[float]) -> float | None:
    """The mean bytes an op of the step moves, from each op's bytes moved, over the ops that
    move any (``None`` when none does).

    >>> step_footprint([150, 0, 50])
    100.0
    """
    moving = [m for m in moved if m > 0]
    return sum(moving) / len(moving) if moving else None


def overlapped(ops: Sequence[OpPrediction]) -> float:
    """The step's time with each phase's communication hidden under its compute as far as
    it can be (FSDP's prefetch, DDP's buckets, at best): the sum over phases of the larger
    of the two.  The serial time (their sum) is the other bound; the gap is the exposed
    communication at worst.

    >>> ops = [OpPrediction(0, "mm", "", "forward", "matmul", "fp32", 1, 1, 1.0, 1.0, 3.0, 1.0,
    ...                     0.0, 3.0, 1.0, "compute", 3.0, "compute"),
    ...        OpPrediction(1, "ag", "", "forward", "communication", "", 0, 0, math.inf, 0.0, 0.0,
    ...                     0.0, 0.0, 2.0, 0.0, "link", 2.0, "link", link_time_s=2.0)]
    >>> overlapped(ops)     # max(3, 2): the gather hides under the matmul
    3.0
    """
    compute: dict[str, float] = defaultdict(float)
    link: dict[str, float] = defaultdict(float)
    for o in ops:
        link[o.phase] += o.link_time_s
        compute[o.phase] += o.time_s - o.link_time_s
    return sum(max(compute[p], link[p]) for p in compute.keys() | link.keys())


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
