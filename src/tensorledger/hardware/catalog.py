"""Load and validate hardware descriptions (the packaged catalog or a user's TOML file)."""

from __future__ import annotations

import datetime
import itertools
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import ConfigError, InputError, TensorLedgerError, UnknownNameError
from tensorledger.files import parse_toml_text, read_text_file
from tensorledger.summary import show_bytes, summary
from tensorledger.units import parse_bandwidth, parse_bytes, parse_duration, parse_flop_rate

__all__ = [
    "COMPUTE_KEYS",
    "LOCAL",
    "MAX_DEVICES_PER_NODE",
    "MAX_HARDWARE_FILE_BYTES",
    "MAX_HOP_LATENCY_S",
    "MAX_OP_OVERHEAD_S",
    "MAX_QUANTITY",
    "Calibration",
    "Efficiency",
    "Hardware",
    "catalog",
    "get_hardware",
    "interpolate",
    "is_hardware_path",
    "load_hardware_file",
    "local_profile_path",
    "parse_hardware_toml",
]

#: The largest hardware TOML file read (a probed profile is a few KiB).
MAX_HARDWARE_FILE_BYTES = 1 * 2**20
#: Every bytes, bytes/s and FLOP/s figure of a chip (and each point of its curves) lies in
#: [1, MAX_QUANTITY] of its unit: a billion times beyond any chip, far below a float's overflow.
MAX_QUANTITY = 1e30
#: The largest per-op overhead a chip may state.
MAX_OP_OVERHEAD_S = 3600.0

#: The keys a chip's peak table may use: one per arithmetic the hardware has a rate for.
COMPUTE_KEYS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8", "int4")

_REQUIRED = ("name", "memory", "memory_bandwidth", "dense")
_OPTIONAL = ("vendor", "aliases", "interconnect", "interconnect_kind", "source", "sparse",
             "sources", "notes", "op_overhead", "curves", "expected", "unreliable",
             "calibration", "compute_capability")
_EXPECTED_KEYS = ("matmul", "attention", "memory_bandwidth", "op_overhead", "source", "sources")
#: The node topology of a chip (each optional; a collective needs the ones its group uses):
#: bandwidths are per device and per direction, latencies per hop of a ring.
_TOPOLOGY = ("devices_per_node", "node_kind", "intra_node_bandwidth", "inter_node_bandwidth",
             "inter_node_kind", "intra_node_latency", "inter_node_latency", "topology_source")
#: The most devices a node may state.
MAX_DEVICES_PER_NODE = 2**16
#: The longest hop latency a chip may state.
MAX_HOP_LATENCY_S = 1.0

#: The name under which ``tensorledger probe`` saves this machine's measured profile.
LOCAL = "local"
#: The phase groups with a time between ops of their own (``Calibration.group``).
BETWEEN_GROUPS = ("forward-backward", "optimizer")


def local_profile_path() -> Path:
    """Where ``tensorledger probe`` saves, and ``--hardware local`` reads, the profile:
    ``$TENSORLEDGER_HOME/local.toml``, else ``$XDG_CACHE_HOME/tensorledger/local.toml``."""
    home = os.environ.get("TENSORLEDGER_HOME")
    if home:
        return Path(home) / "local.toml"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tensorledger" / "local.toml"


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
    elementwise op, the bytes a matmul moves: ``roofline.model.pieces``),
    plus the cost of entering any op (``entry``: ``op_cost_s``, or by the step's footprint;
    a view's times its op's ``view_weights``, ``view_entry``);
    between ops the framework spends ``between_ops_s[phase]`` (Python, module code, autograd,
    the optimizer's loop), growing as entering an op does with the footprint of the ops of
    its phase group (``between``): ``forward`` and ``backward`` share one figure and one
    footprint (the activations they stream), ``optimizer`` has its own (the parameters and
    their state).
    The class of an op is its category, or a finer one (``roofline.model.cost_class``:
    ``elementwise-costly``, ``elementwise-dividing``, ``elementwise-optimizer``,
    ``normalization-fused``).
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
    vendor: str = ""
    # NVIDIA's compute capability ("9.0"): which kernels PyTorch runs there (hardware.target)
    compute_capability: str | None = None
    aliases: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)
    origin: str = "catalog"
    notes: str = ""
    op_overhead_s: float = 0.0  # fixed cost per op (launch, dispatch); measured by the probe
    # Measured rates by problem size, from the probe: "matmul.fp32" → ((flops, flop_per_s),
    # ...), "attention.fp32" likewise, "bandwidth" → ((bytes, bytes_per_s), ...).  Small
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


def _toml_type(value: Any) -> str:
    """What a TOML value is, in TOML's words."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, datetime.date | datetime.time):
        return "a date or time"
    if isinstance(value, str):
        return "a string"
    return "a number"


def _number(chip: str, key: str, value: Any, parse: Callable[[Any], float], where: str,
            *, low: float = 1.0, high: float = MAX_QUANTITY, example: str = '"80GB"') -> float:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ConfigError(f"{where}: [{chip}] {key} must be a quantity such as {example}, not "
                          f"{_toml_type(value)}")
    try:
        number = parse(value)
    except TensorLedgerError as error:
        raise ConfigError(f"{where}: [{chip}] {key}: {error}") from None
    if not low <= number <= high:
        raise ConfigError(f"{where}: [{chip}] {key} = {_short(value)} is out of range; it must "
                          f"be positive, from {low:g} to {high:g} in its unit, such as {example}")
    return number


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:30] + "…"


def _text(chip: str, key: str, value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{where}: [{chip}] {key} must be a string, not {_toml_type(value)}")
    return value


def _peaks(chip: str, table: Any, what: str, where: str) -> dict[str, float]:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: [{chip}.{what}] must be a table such as "
                          "{ bf16 = \"989.5TFLOP/s\" }")
    unknown = sorted(set(table) - set(COMPUTE_KEYS))
    if unknown:
        raise ConfigError(f"{where}: [{chip}.{what}] has unknown dtype {_short(unknown[0])}; "
                          f"known: {', '.join(COMPUTE_KEYS)}")
    return {k: _number(chip, f"{what}.{k}", v, parse_flop_rate, where, example='"989.5TFLOP/s"')
            for k, v in table.items()}


def _point_value(value: Any) -> bool:
    """A point of a curve: a finite number (not a boolean) from 1 to ``MAX_QUANTITY``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        return False
    return math.isfinite(number) and 1.0 <= number <= MAX_QUANTITY


def _curves(chip: str, raw: Any, where: str) -> dict[str, tuple[tuple[float, float], ...]]:
    """``[curves]`` of a profile: each a list of [size, rate] pairs with sizes increasing."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{chip}.curves] must be a table of [[size, rate], ...]")
    curves = {}
    for name, points in raw.items():
        ok = isinstance(points, list) and len(points) >= 1 and all(
            isinstance(p, list) and len(p) == 2 and all(_point_value(v) for v in p)
            for p in points)
        sizes = [float(p[0]) for p in points] if ok else []
        if not ok or sizes != sorted(set(sizes)):
            raise ConfigError(f"{where}: [{chip}.curves] {_short(name)} must be [[size, rate], "
                              f"...] with finite numbers from 1 to {MAX_QUANTITY:g} and sizes "
                              "increasing")
        curves[str(name)] = tuple((float(x), float(y)) for x, y in points)
    return curves


def _sources(chip: str, raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ConfigError(f"{where}: [{chip}.sources] must be a table of strings such as "
                          "{ memory = \"the datasheet\" }")
    return dict(raw)


def _fraction(chip: str, key: str, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{where}: [{chip}.expected] {key} must be a fraction above 0 and at "
                          f"most 1, such as 0.8, not {_short(value)}")
    return float(value)


def _efficiency(chip: str, raw: Any, where: str) -> Efficiency:
    """``[chip.expected]``: published fractions of the datasheet figures, each sourced."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{chip}.expected] must be a table")
    unknown = sorted(set(raw) - set(_EXPECTED_KEYS))
    missing = [k for k in ("matmul", "memory_bandwidth", "op_overhead") if k not in raw]
    if unknown or missing:
        raise ConfigError(f"{where}: [{chip}.expected] " + (
            f"has unknown key {_short(unknown[0])}" if unknown else
            f"lacks {', '.join(missing)}") + f"; it takes {', '.join(_EXPECTED_KEYS)}")
    table = raw["matmul"]
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{where}: [{chip}.expected.matmul] must be a table such as "
                          "{ bf16 = [[2.1e9, 0.5], [1.1e12, 0.8]] } (FLOPs of one matmul, "
                          "fraction of the dense peak)")
    matmul = {}
    for name, points in table.items():
        if name not in (*COMPUTE_KEYS, "default"):
            raise ConfigError(f"{where}: [{chip}.expected.matmul] has unknown dtype "
                              f"{_short(name)}; known: {', '.join(COMPUTE_KEYS)}, default")
        ok = isinstance(points, list) and len(points) >= 1 and all(
            isinstance(p, list) and len(p) == 2 and _point_value(p[0]) for p in points)
        if not ok:
            raise ConfigError(f"{where}: [{chip}.expected.matmul] {name} must be [[FLOPs, "
                              "fraction], ...] with sizes increasing")
        sizes = [float(p[0]) for p in points]
        if sizes != sorted(set(sizes)):
            raise ConfigError(f"{where}: [{chip}.expected.matmul] {name}: sizes must increase")
        matmul[name] = tuple((float(p[0]), _fraction(chip, f"matmul.{name}", p[1], where))
                             for p in points)
    sources = _sources(f"{chip}.expected", raw.get("sources", {}), where)
    sources["*"] = _text(chip, "expected.source", raw.get("source", ""), where)
    return Efficiency(
        matmul=matmul,
        attention=None if "attention" not in raw else _fraction(chip, "attention",
                                                               raw["attention"], where),
        memory_bandwidth=_fraction(chip, "memory_bandwidth", raw["memory_bandwidth"], where),
        op_overhead_s=_number(chip, "expected.op_overhead", raw["op_overhead"], parse_duration,
                              where, low=1e-12, high=MAX_OP_OVERHEAD_S, example='"5us"'),
        sources=sources)


def _chip(chip: str, raw: Any, where: str, origin: str) -> Hardware:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [{chip}] must be a table")
    missing = [k for k in _REQUIRED if k not in raw]
    if missing:
        raise ConfigError(f"{where}: [{chip}] lacks {', '.join(missing)}; a chip needs "
                          f"{', '.join(_REQUIRED)}")
    unknown = sorted(set(raw) - set(_REQUIRED) - set(_OPTIONAL) - set(_TOPOLOGY))
    if unknown:
        raise ConfigError(f"{where}: [{chip}] has unknown key {unknown[0]!r}; known: "
                          f"{', '.join(_REQUIRED + _OPTIONAL + _TOPOLOGY)}")
    dense = _peaks(chip, raw["dense"], "dense", where)
    if not dense:
        raise ConfigError(f"{where}: [{chip}.dense] needs at least one peak")
    sparse = _peaks(chip, raw.get("sparse", {}), "sparse", where)
    sources = _sources(chip, raw.get("sources", {}), where)
    default_source = _text(chip, "source", raw.get("source", ""), where)
    sources["*"] = default_source or f"user file {origin}"
    interconnect = raw.get("interconnect")
    interconnect_kind = raw.get("interconnect_kind")
    topology = _topology(chip, raw, where, sources)
    calibration = None if "calibration" not in raw else _calibration(
        chip, raw["calibration"], where)
    aliases = raw.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ConfigError(f"{where}: [{chip}] aliases must be an array of strings such as "
                          "[\"h100\"], not " + _toml_type(aliases))
    return Hardware(
        id=chip,
        name=_text(chip, "name", raw["name"], where),
        vendor=_text(chip, "vendor", raw.get("vendor", ""), where),
        compute_capability=_capability(chip, raw.get("compute_capability"), where),
        aliases=tuple(a.lower() for a in aliases),
        memory_bytes=_number(chip, "memory", raw["memory"], parse_bytes, where),
        memory_bandwidth_bytes_per_s=_number(chip, "memory_bandwidth", raw["memory_bandwidth"],
                                             parse_bandwidth, where, example='"3.35TB/s"'),
        interconnect_bytes_per_s=None if interconnect is None else _number(
            chip, "interconnect", interconnect, parse_bandwidth, where, example='"900GB/s"'),
        interconnect_kind=None if interconnect_kind is None else _text(
            chip, "interconnect_kind", interconnect_kind, where),
        dense_flop_per_s=dense,
        sparse_flop_per_s=sparse,
        sources=sources,
        origin=origin,
        notes=_text(chip, "notes", raw.get("notes", ""), where),
        op_overhead_s=0.0 if "op_overhead" not in raw else _number(
            chip, "op_overhead", raw["op_overhead"], parse_duration, where, low=1e-12,
            high=MAX_OP_OVERHEAD_S, example='"5us"'),
        curves=_curves(chip, raw.get("curves", {}), where),
        efficiency=None if "expected" not in raw else _efficiency(chip, raw["expected"], where),
        unreliable=_unreliable(chip, raw.get("unreliable", []), where) + (
            calibration.unreliable if calibration is not None else ()),
        calibration=calibration,
        **topology,
    )


def _capability(chip: str, raw: Any, where: str) -> str | None:
    """``compute_capability``: NVIDIA's "major.minor" (``"9.0"``), or absent."""
    if raw is None:
        return None
    parts = raw.split(".") if isinstance(raw, str) else []
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) <= 2 for p in parts):
        raise ConfigError(f"{where}: [{chip}] compute_capability must be NVIDIA's "
                          f"\"major.minor\" such as \"9.0\", not {_short(raw)}")
    return str(raw)


def _calibration(chip: str, raw: Any, where: str) -> Calibration:
    """``[calibration]`` of a probed profile: ``scale`` (cost class → factor), ``call_cost``
    and ``piece_cost`` (cost class → duration), ``op_cost`` and ``op_cost_by_footprint``, and
    ``between_ops`` (``forward-backward``, ``optimizer`` → duration), ``view_weights`` (view
    op → factor)."""
    if not isinstance(raw, dict) or set(raw) - {"scale", "op_cost", "between_ops", "source",
                                                "call_cost", "piece_cost", "unreliable",
                                                "op_cost_by_footprint", "view_weights"}:
        raise ConfigError(f"{where}: [{chip}.calibration] takes scale, op_cost, call_cost, "
                          "piece_cost, op_cost_by_footprint, view_weights, between_ops, source "
                          "and unreliable (a profile from an older tensorledger: run "
                          "`tensorledger probe` again)")
    scales = _factors(chip, raw, "scale", "{ matmul = 1.2 }", where)
    weights = _factors(chip, raw, "view_weights", '{ "aten.t" = 2.0 }', where)
    between = raw.get("between_ops", {})
    if not isinstance(between, dict) or set(between) - {"forward-backward", "optimizer"}:
        raise ConfigError(f"{where}: [{chip}.calibration] between_ops must be a table with "
                          "forward-backward and optimizer durations, such as "
                          '{ optimizer = "4us" }')
    costs = {}
    for key in ("call_cost", "piece_cost"):
        table = raw.get(key, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: [{chip}.calibration] {key} must be a table of "
                              f'durations by class, such as {{ copy = "20us" }}')
        costs[key] = {str(k): _number(chip, f"calibration.{key}.{k}", v, parse_duration,
                                      where, low=0.0, high=MAX_OP_OVERHEAD_S, example='"20us"')
                      for k, v in table.items()}
    return Calibration(
        scale=scales,
        call_cost_s=costs["call_cost"], piece_cost_s=costs["piece_cost"],
        op_cost_s=0.0 if "op_cost" not in raw else _number(
            chip, "calibration.op_cost", raw["op_cost"], parse_duration, where, low=0.0,
            high=MAX_OP_OVERHEAD_S, example='"2us"'),
        between_ops_s={k: _number(chip, f"calibration.between_ops.{k}", v, parse_duration,
                                  where, low=0.0, high=MAX_OP_OVERHEAD_S, example='"3us"')
                       for k, v in between.items()},
        source=_text(chip, "calibration.source", raw.get("source", ""), where),
        unreliable=_unreliable(chip, raw.get("unreliable", []), where),
        op_cost_by_footprint=_footprint_curve(chip, raw.get("op_cost_by_footprint", []), where),
        view_weights=weights)


#: The factors a profile's calibration may hold (``scale``, ``view_weights``).
FACTOR_RANGE = (0.01, 100.0)


def _factors(chip: str, raw: dict[str, Any], key: str, example: str, where: str
             ) -> dict[str, float]:
    """``[calibration] key``: a table of factors within ``FACTOR_RANGE``."""
    table = raw.get(key, {})
    low, high = FACTOR_RANGE
    if not isinstance(table, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and low <= v <= high
            for v in table.values()):
        raise ConfigError(f"{where}: [{chip}.calibration] {key} must be a table of factors "
                          f"from {low:g} to {high:g}, such as {example}")
    return {str(k): float(v) for k, v in table.items()}


def _footprint_curve(chip: str, raw: Any, where: str) -> tuple[tuple[float, float], ...]:
    """``op_cost_by_footprint``: [[bytes, seconds], ...], bytes increasing, each cost above 0
    and at most ``MAX_OP_OVERHEAD_S``."""
    ok = isinstance(raw, list) and all(
        isinstance(p, list) and len(p) == 2 and _point_value(p[0]) and isinstance(
            p[1], int | float) and not isinstance(p[1], bool) and 0 < p[1] <= MAX_OP_OVERHEAD_S
        for p in raw)
    sizes = [float(p[0]) for p in raw] if ok else []
    if not ok or sizes != sorted(set(sizes)):
        raise ConfigError(f"{where}: [{chip}.calibration] op_cost_by_footprint must be "
                          "[[bytes, seconds], ...] with bytes increasing and each cost above 0 "
                          f"and at most {MAX_OP_OVERHEAD_S:g} s")
    return tuple((float(x), float(y)) for x, y in raw)


def _unreliable(chip: str, raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise ConfigError(f"{where}: [{chip}] unreliable must be an array of strings naming "
                          "figures, such as [\"matmul fp32 256\"]")
    return tuple(raw)


def _topology(chip: str, raw: dict[str, Any], where: str, sources: dict[str, str]
              ) -> dict[str, Any]:
    """The node topology keys of a chip as :class:`Hardware` fields; ``topology_source``
    becomes the source of each topology number that ``[sources]`` does not name itself."""
    fields: dict[str, Any] = {}
    count = raw.get("devices_per_node")
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int) or not (
                1 <= count <= MAX_DEVICES_PER_NODE):
            raise ConfigError(f"{where}: [{chip}] devices_per_node must be a whole number from "
                              f"1 to {MAX_DEVICES_PER_NODE}, such as 8, not {_short(count)}")
        fields["devices_per_node"] = count
    for key in ("intra_node_bandwidth", "inter_node_bandwidth"):
        if key in raw:
            fields[key.replace("bandwidth", "bytes_per_s")] = _number(
                chip, key, raw[key], parse_bandwidth, where, example='"450GB/s"')
    for key in ("intra_node_latency", "inter_node_latency"):
        if key in raw:
            fields[key + "_s"] = _number(chip, key, raw[key], parse_duration, where, low=1e-12,
                                         high=MAX_HOP_LATENCY_S, example='"2.7us"')
    for key in ("node_kind", "inter_node_kind"):
        if key in raw:
            fields[key] = _text(chip, key, raw[key], where)
    if "inter_node_bandwidth" in raw and count is None:
        raise ConfigError(f"{where}: [{chip}] inter_node_bandwidth needs devices_per_node (how "
                          "many devices share a node before a group crosses the network)")
    source = _text(chip, "topology_source", raw.get("topology_source", ""), where)
    if source:
        for key in _TOPOLOGY[:-1]:
            if key in raw:
                sources.setdefault(key, source)
    return fields


def _parse_toml(text: str, where: str) -> dict[str, Any]:
    return parse_toml_text(text, where=where)


@cache
def catalog() -> dict[str, Hardware]:
    """Every chip of the packaged catalog, by id."""
    text = resources.files("tensorledger.hardware").joinpath("catalog.toml").read_text("utf-8")
    data = _parse_toml(text, "catalog.toml")
    return {chip: _chip(chip, raw, "catalog.toml", "catalog") for chip, raw in data.items()}


def load_hardware_file(path: str | Path) -> Hardware:
    """A user's chip from a TOML file: either one chip's keys at the top level (the id is the
    file's stem, or ``id = ...``) or exactly one ``[chip-id]`` table."""
    path = Path(path)
    text = read_text_file(path, what="hardware file", max_bytes=MAX_HARDWARE_FILE_BYTES)
    return parse_hardware_toml(text, str(path), path.stem)


def parse_hardware_toml(text: str, where: str, stem: str = "file") -> Hardware:
    """A chip from the text of a hardware file (see :func:`load_hardware_file`); ``stem`` is
    its id when the text names none."""
    data = _parse_toml(text, where)
    if "dense" in data or "memory" in data:
        chip = _text("file", "id", data.pop("id", stem), where)
        return _chip(chip, data, where, where)
    tables = {k: v for k, v in data.items() if isinstance(v, dict)}
    if len(tables) != 1 or len(data) != 1:
        raise ConfigError(f"{where}: expected one chip (keys name, memory, memory_bandwidth and a "
                          "[dense] table), or exactly one [chip-id] table")
    ((chip, raw),) = tables.items()
    return _chip(chip, raw, where, where)


def is_hardware_path(spec: str) -> bool:
    """Whether ``spec`` names a file rather than a chip: it holds a path separator or ends in
    ``.toml``.  A file named ``h100`` in the working folder is not read for ``h100``."""
    separators = {"/", os.sep, os.altsep or "/"}
    return any(sep in spec for sep in separators) or spec.strip().lower().endswith(".toml")


def get_hardware(spec: str) -> Hardware:
    """A chip by catalog id or alias (``h100`` → ``h100-sxm``), from a path (one with a
    separator, or ending in ``.toml``), or ``local``: this machine's profile as measured by
    ``tensorledger probe``."""
    if spec.strip().lower() == LOCAL:
        path = local_profile_path()
        try:
            present = path.is_file()
        except OSError:
            present = False
        if not present:
            raise ConfigError(f"no local hardware profile at {path}; run `tensorledger probe` "
                              "first (or pass a catalog chip or a TOML file)")
        return load_hardware_file(path)
    if is_hardware_path(spec):
        return load_hardware_file(spec)
    key = spec.strip().lower()
    chips = catalog()
    if key in chips:
        return chips[key]
    for chip in chips.values():
        if key in chip.aliases:
            return chip
    raise UnknownNameError("hardware", spec, chips)

