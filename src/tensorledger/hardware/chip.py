"""What a chip is, as the rest of the house reads it: :class:`Hardware` (peaks, memory,
bandwidth, topology, each number with a source), :class:`Efficiency` (the published fractions
of those figures that eager PyTorch attains), :class:`Calibration` (a probed machine's fit of
whole eager steps) and :func:`interpolate`, the log-log curve reading they share.

Loading and validating these from TOML (the packaged catalog, a user's file, the probed local
profile) is :mod:`tensorledger.hardware.catalog`.  Nothing here imports torch.

Size 10 lies halfway, in logs, from 1 to 100, so its value lies halfway from 10 to 1000:

>>> round(interpolate(((1.0, 10.0), (100.0, 1000.0)), 10.0), 9)
100.0
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import InputError
from tensorledger.summary import show_bytes, summary

__all__ = ["BETWEEN_GROUPS", "COMPUTE_KEYS", "Calibration", "Efficiency", "Hardware",
           "interpolate"]


#: The keys a chip's peak table may use: one per arithmetic the hardware has a rate for.
COMPUTE_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8", "int4")
#: The phase groups with a time between ops of their own (``Calibration.group``).
BETWEEN_GROUPS = ("forward-backward", "optimizer")


def interpolate(points: tuple[tuple[float, float], ...], size: float) -> float:
    """The value at ``size`` of a curve of (size, value) points: log-log interpolation
    between points, flat beyond the first and the last."""
    if size <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if size <= x1:
            t = math.log(size / x0) / math.log(x1 / x0)
            return float(math.exp(math.log(y0) + t * math.log(y1 / y0)))
    return points[-1][1]


@dataclass(frozen=True)
class Efficiency:
    """What eager PyTorch attains on a chip, as fractions of its datasheet figures.

    The *expected* time of an op divides its FLOPs by ``peak × matmul fraction`` (matrix ops,
    by problem size), its bytes by ``bandwidth × memory_bandwidth``, and adds ``op_overhead_s``
    (kernel launch and eager dispatch, per op).  Each figure has its published source.
    """

    #: compute key (``bf16``, ``fp8``, ...; ``default`` for the others) → ((FLOPs of one
    #: matmul, fraction of the dense peak), ...) with sizes increasing
    matmul: Mapping[str, tuple[tuple[float, float], ...]]
    #: fraction of the matrix peak a fused attention kernel attains, its work counted with
    #: causal masking halved as FlashAttention's papers count it; None: the matmul fraction
    attention: float | None
    memory_bandwidth: float  # fraction of the datasheet bandwidth a streaming kernel attains
    op_overhead_s: float  # per op of an eager step: kernel launch and dispatch
    sources: Mapping[str, str] = field(default_factory=dict)  # per figure; "*" for all

    def matmul_fraction(self, key: str, flops: float) -> float:
        """The fraction of the ``key`` peak a matmul of ``flops`` attains."""
        points = self.matmul.get(key) or self.matmul.get("default")
        if not points:
            return 1.0
        return interpolate(points, flops) if flops > 0 else points[0][1]

    def source(self, key: str) -> str:
        return self.sources.get(key) or self.sources.get("*", "")


@dataclass(frozen=True)
class Calibration:
    """How this machine runs a whole eager step, fitted by ``tensorledger probe`` on
    calibration models (never on the workloads it is judged on).

    An op of a step costs ``scale[class] × max(compute, memory)`` (its kernel, at the probed
    rates: a kernel in a step runs slower than in an isolated loop, strided copies and norms
    slower than a stream), plus ``call_cost_s[class]`` (a kernel's own fixed cost: setting up
    its loops and threads) and ``piece_cost_s[class]`` for each of its pieces (the rows a copy
    writes, the batch × heads × query blocks of an attention, the FLOPs of a costly
    elementwise op, the bytes a matmul moves: ``roofline.cost_classes.pieces``; none for an
    op the profile prices from its own kernel's curves, ``kernel_rates.own_kernel_curve``),
    plus the cost of entering any op (``entry``: ``op_cost_s``, or by the step's footprint;
    a view's times its op's ``view_weights``, ``view_entry``);
    between ops the framework spends ``between_ops_s[phase]`` (Python, module code, autograd,
    the optimizer's loop), growing as entering an op does with the footprint of the ops of
    its phase group (``between``): ``forward`` and ``backward`` share one figure and one
    footprint (the activations they stream), ``optimizer`` has its own (the parameters and
    their state).
    The class of an op is its category, or a finer one (``roofline.cost_classes.cost_class``:
    ``elementwise-costly``, ``elementwise-dividing``, ``elementwise-optimizer``,
    ``normalization-fused``, ``normalization-reduction``, ``normalization-dividing``,
    ``attention-backward``; a forward matmul, norm, elementwise op or copy its class with
    ``-forward``, as ``matmul-forward``).
    """

    scale: Mapping[str, float]
    op_cost_s: float
    between_ops_s: Mapping[str, float]  # "forward-backward" and "optimizer"
    source: str = ""
    # calibration steps whose rounds disagreed: the machine's speed changed while they ran
    unreliable: tuple[str, ...] = ()
    # the cost of entering an op by the step's footprint, ((mean bytes an op of the step
    # moves, seconds), ...): entering an op costs more in a step whose kernels stream more
    # through the caches; it replaces ``op_cost_s`` where a step's footprint is known
    op_cost_by_footprint: tuple[tuple[float, float], ...] = ()
    call_cost_s: Mapping[str, float] = field(default_factory=dict)  # class → s an op
    piece_cost_s: Mapping[str, float] = field(default_factory=dict)  # class → s a piece
    # a view op ("aten.t") → its cost of entering against an average view's: views differ by
    # op (an unbind makes several tensors, a detach one); a view not named costs 1
    view_weights: Mapping[str, float] = field(default_factory=dict)
    # the fit of the low-precision recipes' steps (mixed-bf16, bf16), which prices every op
    # of a step that runs any op in bf16 or fp16 (``roofline.model.calibrated_for``); None:
    # this one prices every step
    low_precision: Calibration | None = None

    def factor(self, kind: str, category: str) -> float:
        """The factor on the kernel time of an op of class ``kind`` (its category's where the
        class has none)."""
        return self.scale.get(kind, self.scale.get(category, 1.0))

    def entry(self, footprint: float | None) -> float:
        """The cost of entering an op of a step whose ops move ``footprint`` bytes on
        average (``None``: not known)."""
        if self.op_cost_by_footprint and footprint is not None and footprint > 0:
            return interpolate(self.op_cost_by_footprint, footprint)
        return self.op_cost_s

    def view_entry(self, op: str, footprint: float | None) -> float:
        """The cost of entering a view op ``op`` (``"aten.t"``, no overload): ``entry``
        times the op's weight."""
        return self.entry(footprint) * self.view_weights.get(op, 1.0)

    @staticmethod
    def group(phase: str) -> str:
        """The phase group an op of ``phase`` spends its time between ops in:
        ``"optimizer"``, else ``"forward-backward"`` (``BETWEEN_GROUPS``)."""
        fb, optimizer = BETWEEN_GROUPS
        return optimizer if phase == optimizer else fb

    def between(self, phase: str, footprint: float | None = None) -> float:
        """The framework's time before an op of ``phase`` where the ops of its phase group
        (``group``) move ``footprint`` bytes on average: ``between_ops_s`` of the group where
        entering an op costs ``op_cost_s``, in proportion to ``entry(footprint)`` elsewhere
        (the framework's code and data, like an op's entry, are evicted by kernels that
        stream more: the optimizer's loop by the parameters and their state it streams, not
        by the activations the forward and backward stream)."""
        return self.between_ops_s.get(self.group(phase), 0.0) * self.footprint_ratio(footprint)

    def footprint_ratio(self, footprint: float | None) -> float:
        """``entry(footprint) / op_cost_s``: 1 where either is not known."""
        return self.entry(footprint) / self.op_cost_s if self.op_cost_s > 0 else 1.0


@dataclass(frozen=True)
class Hardware:
    """One accelerator.  Peaks are dense (no sparsity); ``sources`` covers every number."""

    id: str
    name: str
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    dense_flop_per_s: Mapping[str, float]
    sparse_flop_per_s: Mapping[str, float] = field(default_factory=dict)
    interconnect_bytes_per_s: float | None = None
    interconnect_kind: str | None = None
    # The link between the host (CPU memory) and the device, per direction: what offloading
    # (parameters, optimizer state, activations to the host) moves its bytes over
    host_link_bytes_per_s: float | None = None
    host_link_kind: str | None = None  # e.g. "PCIe 5.0 x16", "NVLink-C2C"
    vendor: str = ""
    # NVIDIA's compute capability ("9.0"): which kernels PyTorch runs there (hardware.target)
    compute_capability: str | None = None
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    origin: str = "catalog"
    notes: str = ""
    op_overhead_s: float = 0.0  # fixed cost per op (launch, dispatch); measured by the probe
    # the same, per op of a forward under no_grad (prefill, decode), where no autograd graph
    # is recorded; measured by the probe; 0: ``op_overhead_s`` throughout
    inference_op_overhead_s: float = 0.0
    # a CPU's new tensors of ``fresh_pages_from_bytes`` or more are mapped anew (glibc's mmap
    # threshold): their pages faulted in and unmapped again cost their bytes at
    # ``fresh_page_bytes_per_s`` beyond what the op moves; measured by the probe; 0: none
    fresh_pages_from_bytes: float = 0.0
    fresh_page_bytes_per_s: float = 0.0
    # Measured rates by problem size, from the probe: "matmul.fp32" → ((flops, flop_per_s),
    # ...), "attention.fp32" likewise, "bandwidth" → ((bytes, bytes_per_s), ...); the
    # kernels a recipe runs beyond them by dtype in ``hardware.kernels``' names.  Small
    # problems reach less than the peak (and small buffers more than DRAM bandwidth, from
    # cache); catalog chips have none and use their peaks throughout.
    curves: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # Achievable fractions of the datasheet figures (catalog chips, with sources); None when
    # the chip states none.  A probed profile needs none: its curves are what was attained.
    efficiency: Efficiency | None = None
    # Figures of a probed profile whose repeated measurements spread too widely to trust.
    unreliable: tuple[str, ...] = ()
    # A probed profile's fit of whole steps (category scales, time between ops by phase).
    calibration: Calibration | None = None
    # Node topology, for pricing collectives (roofline.collectives).  Bandwidths are per device
    # and per direction (what nccl-tests' bus bandwidth is compared with): NVLink 4's "900 GB/s"
    # is 450 here.  ``interconnect_bytes_per_s`` above is the datasheet figure as displayed.
    devices_per_node: int | None = None
    node_kind: str | None = None  # e.g. "DGX H100: NVLink 4 through four NVSwitch chips"
    intra_node_bytes_per_s: float | None = None  # NVLink / NVSwitch / PCIe, per direction
    inter_node_bytes_per_s: float | None = None  # the NIC share of one device, per direction
    inter_node_kind: str | None = None  # e.g. "InfiniBand NDR 400 Gb/s, one per GPU"
    intra_node_latency_s: float | None = None  # per ring hop inside a node
    inter_node_latency_s: float | None = None  # per ring hop between nodes

    @property
    def expected_basis(self) -> str:
        """What the expected time of an op rests on: measured curves, published
        efficiencies, or nothing beyond the datasheet (expected = the roofline bound)."""
        if self.curves:
            return "probed"
        if self.efficiency is not None:
            return "efficiencies"
        return "datasheet"

    @property
    def ideal_bandwidth_bytes_per_s(self) -> float:
        """The fastest streaming rate known: the datasheet (or probed DRAM) bandwidth, or a
        probed cache-resident rate above it."""
        curve = self.curves.get("bandwidth", ())
        return max([self.memory_bandwidth_bytes_per_s, *(rate for _, rate in curve)])

    def expected_flop_rate(self, curve: str, key: str, flops: float) -> float:
        """FLOP/s a matrix op of ``flops`` at the ``key`` peak attains: the probed rate at its
        size, else the peak times the published fraction, else the peak."""
        peak = self.dense_flop_per_s[key]
        if curve in self.curves or f"matmul.{key}" in self.curves:
            return self.attainable(curve if curve in self.curves else f"matmul.{key}", flops,
                                   peak)
        if self.efficiency is not None:
            return peak * self.efficiency.matmul_fraction(key, flops)
        return peak

    def expected_bandwidth(self, moved: float, *, in_place: bool = False) -> float:
        """Bytes/s an op moving ``moved`` bytes attains; ``in_place``: it writes into tensors
        that exist, so where the probe's curve by size was timed on new outputs (whose fresh
        pages cost more than the bytes at the sizes between the caches and the largest), it
        streams at the warm buffers' bandwidth instead."""
        if "bandwidth" in self.curves:
            if in_place:
                return self.memory_bandwidth_bytes_per_s
            return self.attainable("bandwidth", moved, self.memory_bandwidth_bytes_per_s)
        if self.efficiency is not None:
            return self.memory_bandwidth_bytes_per_s * self.efficiency.memory_bandwidth
        return self.memory_bandwidth_bytes_per_s

    @property
    def expected_op_overhead_s(self) -> float:
        """The fixed cost per op: probed or stated, else the published one, else 0."""
        if self.op_overhead_s > 0 or self.efficiency is None:
            return self.op_overhead_s
        return self.efficiency.op_overhead_s

    def fresh_pages_s(self, created: Iterable[int]) -> float:
        """Seconds the new tensors of bytes ``created`` cost in fresh pages (those of the
        threshold's size or more); 0 where the profile has no such figure.

        >>> chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
        ...                 dense_flop_per_s={"fp32": 1.0}, fresh_pages_from_bytes=32e6,
        ...                 fresh_page_bytes_per_s=4e9)
        >>> chip.fresh_pages_s([8_000_000, 40_000_000, 160_000_000])  # (40 + 160) MB / 4 GB/s
        0.05
        """
        if self.fresh_page_bytes_per_s <= 0:
            return 0.0
        fresh = sum(size for size in created if size >= self.fresh_pages_from_bytes)
        return fresh / self.fresh_page_bytes_per_s

    def op_overhead_for(self, *, inference: bool) -> float:
        """:attr:`expected_op_overhead_s`, or of an ``inference`` step (a forward under
        no_grad) the probed :attr:`inference_op_overhead_s` where there is one.

        >>> chip = Hardware(id="x", name="x", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0,
        ...                 dense_flop_per_s={"fp32": 1.0}, op_overhead_s=2.5e-6,
        ...                 inference_op_overhead_s=2e-6)
        >>> chip.op_overhead_for(inference=True), chip.op_overhead_for(inference=False)
        (2e-06, 2.5e-06)
        """
        if inference and self.inference_op_overhead_s > 0:
            return self.inference_op_overhead_s
        return self.expected_op_overhead_s

    def __repr__(self) -> str:
        return summary("Hardware", repr(self.id), self.name, show_bytes(self.memory_bytes),
                       f"{show_bytes(self.memory_bandwidth_bytes_per_s)}/s",
                       f"{len(self.dense_flop_per_s)} dense peaks", self.origin)

    def compute_key(self, dtype: str) -> str:
        """The peak-table key for a dtype name: ``bfloat16`` → ``bf16``, ``e4m3`` → ``fp8``."""
        key = dtype.strip().lower()
        return key if key in COMPUTE_KEYS else resolve_dtype(key).compute

    def peak_flop_per_s(self, dtype: str) -> float:
        """Dense peak FLOP/s for arithmetic in ``dtype``; an error if the chip has none."""
        key = self.compute_key(dtype)
        if key not in self.dense_flop_per_s:
            raise InputError(f"{self.id} lists no dense {key} peak for dtype {dtype!r}; it lists: "
                             f"{', '.join(self.dense_flop_per_s)}")
        return self.dense_flop_per_s[key]

    def intensity_flop_per_byte(self, dtype: str) -> float:
        """The accelerator's intensity (the roofline's ridge point): peak / memory bandwidth."""
        return self.peak_flop_per_s(dtype) / self.memory_bandwidth_bytes_per_s

    def attainable(self, curve: str, size: float, ceiling: float) -> float:
        """The rate measured for a problem of ``size`` on ``curve`` (log-log interpolation
        between probed points, flat beyond them), or ``ceiling`` when there is no curve."""
        points = self.curves.get(curve)
        if not points or size <= 0:
            return ceiling
        return interpolate(points, size)

    def source(self, key: str) -> str:
        """Where a number comes from: ``memory``, ``memory_bandwidth``, ``bf16``, ...;
        ``*`` is the chip's own source, which covers every number not named otherwise."""
        return self.sources.get(key) or self.sources.get("*", "")

    def specific_source(self, key: str) -> str:
        """The source named for this number alone, or ``""`` when the chip's source covers it."""
        return self.sources.get(key, "") if key != "*" else ""
