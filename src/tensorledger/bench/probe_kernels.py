"""The probe's kernels beyond the matmul and the fp32 stream: what a precision recipe's step
runs and the matmul curve does not tell.

- fused causal attention, its forward and its backward timed apart, in each dtype, over
  sequence lengths and head widths, at two head counts
  (:mod:`tensorledger.bench.probe_attention`);
- elementwise ops in bf16: copy and triad writing new tensors from inputs that rotate through
  memory, as the fp32 eager sweep (``probe._bandwidth_points``) but in bf16;
- a linear layer's product, tokens × width against a weight of 4·width × width stored as
  ``nn.Linear`` stores it, both operands rotating through memory beyond the caches, as a
  training step reads a weight and an activation last touched a whole step ago, in fp32 and
  bf16 over widths: on a 2-core EPYC such products of 256 tokens in bf16 ran 4–20% under the
  probe's square matmuls of the same FLOPs, and GPT-2's in its step 8–15% under (issue 43);
- a fused layer norm in bf16 (``native_layer_norm``, with weight and bias) over
  (tokens, width), its forward and its backward timed apart: a CPU's bf16 norm kernel runs
  far below the bf16 copy (GPT-2's layer norms in bf16 took 16.9 ms of a step where their
  bytes at the copy's rate take 3.7, issue 43);
- elementwise ops in bf16 whose operands' layouts cut the kernel into short inner loops (an
  add of a head-split view to a contiguous tensor: loops of the head width), by loop length
  (:mod:`tensorledger.trace.layout`);
- GELU, log-softmax and the embedding's backward in bf16, each kernel replayed alone
  (:mod:`tensorledger.bench.probe_ops`);
- autocast's casts, fp32 → bf16 (weights before their matmuls) and bf16 → fp32 (gradients
  after), a new tensor each time;
- the decode step's matrix products, a few rows (the batch's tokens) against a weight, in
  each dtype: the rate the weight streams at, warm (one weight, again and again) and cold
  (weights that rotate through a working set larger than the caches, as a decode step reads
  each of a model's weights once).  A CPU's kernel for these runs far below both its matmul
  curve and its copy bandwidth: on a 2-core EPYC, one row against 768 × 3072 fp32 weights
  streamed at 17 GB/s cold and 78 GB/s warm, four rows at 12 and 25 GB/s, where a copy
  reads and writes at 80 GB/s (issue 39).

Each figure is timed with the probe's timer (its repeats and its judgement of spread).  The
curves' names are :mod:`tensorledger.hardware.kernels`'.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from tensorledger.bench.probe_attention import (
    AttentionPoint,
    attention_label,
    attention_points,
    few_heads_label,
    without_team_check,
)
from tensorledger.bench.probe_ops import OP_KINDS, OpPoint, op_label, op_points
from tensorledger.bench.probe_tensors import by_direction, copies, torch_dtype
from tensorledger.dtypes import resolve_dtype
from tensorledger.hardware.kernels import (
    attention_call_curve,
    attention_curve,
    cast_curve,
    linear_curve,
    matvec_curve,
    norm_curve,
    op_curve,
    stream_curve,
    strided_curve,
)

if TYPE_CHECKING:
    from tensorledger.bench.probe import _Timer

__all__ = ["AttentionPoint", "KernelPlan", "KernelProbe", "LinearPoint", "LoopPoint",
           "MatvecPoint", "NormPoint", "OpPoint", "StreamPoint", "default_plan",
           "probe_attention", "probe_kernels"]

#: The low-precision dtypes whose elementwise ops and casts from and to fp32 are timed.
_LOW = ("bf16",)
#: A linear layer's weight, as a transformer's MLP has it: out features per in feature.
_LINEAR_OUTPUTS = 4


@dataclass(frozen=True)
class KernelPlan:
    """What :func:`probe_kernels` times.  ``buffers``: elements of the tensors the
    elementwise ops and casts write; ``matvec_*``: the decode products' dtypes, rows, weight
    (in features, out features) and the working set their weights rotate through cold."""

    attention_dtypes: tuple[str, ...] = ("fp32", "bf16", "fp16")
    seqs: tuple[int, ...] = (64, 128, 256, 512)
    head_dims: tuple[int, ...] = (16, 32, 64, 128)
    batch: int = 2
    heads: int = 8  # attention's heads a call, and a second call's fewer heads: a head's
    few_heads: int = 1  # time apart from the call's own (probe_attention)
    stream_dtypes: tuple[str, ...] = ("bf16",)
    casts: tuple[tuple[str, str], ...] = (("fp32", "bf16"), ("bf16", "fp32"))
    buffers: tuple[int, ...] = (2**14, 2**16, 2**18, 2**20, 2**22)
    matvec_dtypes: tuple[str, ...] = ()
    matvec_rows: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    matvec_weight: tuple[int, int] = (1024, 1024)
    matvec_cold_bytes: int = 2**27
    loops: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256)  # inner loops of strided ops
    loop_elements: int = 2**19  # of the tensors a strided op adds
    linear_dtypes: tuple[str, ...] = ()  # a linear layer's product, both operands cold
    linear_widths: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    linear_tokens: int = 256
    norm_width: int = 256  # a layer norm's (tokens, width), in each of stream_dtypes
    norm_tokens: tuple[int, ...] = (64, 256, 1024, 4096)
    op_kinds: tuple[str, ...] = OP_KINDS  # ops timed by name (probe_ops), in stream_dtypes
    op_width: int = 1024
    op_rows: tuple[int, ...] = (16, 64, 256, 1024, 4096)

    @classmethod
    def quick(cls) -> KernelPlan:
        """A plan of a few seconds (``probe --quick``)."""
        return cls(seqs=(64, 128), head_dims=(16, 64), buffers=(2**14, 2**18, 2**21),
                   matvec_dtypes=("fp32", "bf16"), matvec_rows=(1, 4, 16),
                   loops=(4, 16, 64, 256), linear_dtypes=("fp32", "bf16"),
                   linear_widths=(64, 256, 1024), norm_tokens=(256, 4096),
                   op_rows=(64, 1024))

    @classmethod
    def none(cls) -> KernelPlan:
        """Nothing timed."""
        return cls(attention_dtypes=(), seqs=(), head_dims=(), stream_dtypes=(), casts=(),
                   buffers=(), loops=(), norm_tokens=(), op_rows=())


def default_plan(device_type: str, dtypes: Sequence[str],
                 seqs: Sequence[int] | None = None) -> KernelPlan:
    """The plan for a probe of ``dtypes`` (attention in each; bf16 elementwise ops and casts
    where bf16 is among them; decode products in fp32 and bf16) on ``device_type``; ``seqs``:
    the attention sequence lengths (by default a sweep that suits the device).

    >>> default_plan("cpu", ("fp32",)).casts, default_plan("cpu", ("fp32", "bf16")).matvec_dtypes
    ((), ('fp32', 'bf16'))
    >>> default_plan("cpu", ("fp32", "bf16"), (16,)).seqs
    (16,)
    """
    names = tuple(resolve_dtype(d).compute for d in dtypes)
    low = tuple(d for d in _LOW if d in names)
    products = tuple(d for d in names if d in ("fp32", *low))
    plan = KernelPlan(attention_dtypes=names, stream_dtypes=low,
                      casts=tuple(pair for d in low for pair in (("fp32", d), (d, "fp32"))),
                      matvec_dtypes=products, linear_dtypes=products)
    if device_type == "cuda":
        plan = replace(plan, seqs=(512, 1024, 2048, 4096), head_dims=(64, 128), batch=4,
                       heads=16, buffers=(2**20, 2**22, 2**24, 2**26, 2**28),
                       matvec_weight=(4096, 4096), matvec_cold_bytes=2**30,
                       linear_widths=(256, 512, 1024, 2048, 4096), linear_tokens=4096,
                       norm_width=4096, norm_tokens=(1024, 4096, 16384, 65536))
    return plan if seqs is None else replace(plan, seqs=tuple(seqs))


@dataclass(frozen=True)
class StreamPoint:
    kernel: str  # "copy", "triad" or "cast"
    dtype: str  # "bf16"; a cast's "fp32-bf16"
    elements: int
    bytes_moved: int
    median_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class NormPoint:
    dtype: str
    direction: str  # "forward" or "backward"
    tokens: int
    width: int
    bytes_moved: int  # of this direction's op, by the trace's rules
    median_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class LinearPoint:
    dtype: str
    tokens: int
    width: int  # the weight is 4·width × width
    flops: int  # 2 · tokens · width · 4·width
    median_s: float
    flop_per_s: float

    @property
    def outputs(self) -> int:
        """The product's output features: the weight's rows, 4·width."""
        return _LINEAR_OUTPUTS * self.width


@dataclass(frozen=True)
class LoopPoint:
    dtype: str
    loop: int  # elements of the kernel's inner loop
    bytes_moved: int  # read and written: 3 × one tensor's bytes
    median_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class MatvecPoint:
    dtype: str
    rows: int  # the tokens: a decode step's batch
    working_set: int  # bytes of the weights the timed calls rotate through
    weight_bytes: int  # of one weight, read once a call
    median_s: float
    bytes_per_s: float  # the weight's bytes / the call's time


@dataclass(frozen=True)
class KernelProbe:
    attention: tuple[AttentionPoint, ...]
    streams: tuple[StreamPoint, ...]
    skipped: tuple[str, ...]  # what the device has no kernel for
    set_aside: tuple[str, ...] = ()  # figures still noisy after their retries: in no curve
    matvec: tuple[MatvecPoint, ...] = ()
    loops: tuple[LoopPoint, ...] = ()
    linear: tuple[LinearPoint, ...] = ()
    norms: tuple[NormPoint, ...] = ()
    ops: tuple[OpPoint, ...] = ()

    @property
    def curves(self) -> dict[str, tuple[tuple[float, float], ...]]:
        """The profile's curves of these points (:mod:`tensorledger.hardware.kernels`),
        sorted by size, the best rate where two points share a size."""
        found: dict[str, dict[float, float]] = {}

        def add(name: str, size: float, rate: float) -> None:
            points = found.setdefault(name, {})
            points[size] = max(points.get(size, 0.0), rate)

        for a in self.attention:  # a head's rate, and a call's own cost as calls a second
            add(attention_curve(a.dtype, a.direction, a.head_dim), a.head_flops,
                a.head_flop_per_s)
            if 0 < a.call_s <= 1:
                add(attention_call_curve(a.dtype, a.direction, a.head_dim), a.head_flops,
                    1 / a.call_s)
        for s in self.streams:
            name = (cast_curve(*s.dtype.split("-")) if s.kernel == "cast"
                    else stream_curve(s.dtype))
            add(name, float(s.bytes_moved), s.bytes_per_s)
        for m in self.matvec:
            add(matvec_curve(m.dtype, m.rows), float(m.working_set), m.bytes_per_s)
        for lp in self.loops:
            add(strided_curve(lp.dtype), float(lp.loop), lp.bytes_per_s)
        for li in self.linear:
            add(linear_curve(li.dtype), float(li.flops), li.flop_per_s)
        for n in self.norms:
            add(norm_curve(n.dtype, n.direction), float(n.bytes_moved), n.bytes_per_s)
        for o in self.ops:
            add(op_curve(o.dtype, o.op, o.variant), float(o.bytes_moved), o.bytes_per_s)
        return {name: tuple(sorted(points.items())) for name, points in found.items()}


def _stream_label(dtype: str, size_bytes: int) -> str:
    return f"eager {dtype} bandwidth {size_bytes} B"


def _cast_label(source: str, target: str, read_bytes: int) -> str:
    return f"cast {source}-{target} {read_bytes} B"


def _matvec_label(dtype: str, rows: int, working_set: int) -> str:
    return f"matvec {dtype} m{rows} {working_set} B"


def _loop_label(dtype: str, loop: int) -> str:
    return f"strided {dtype} add, inner loop {loop}"


def _linear_label(dtype: str, tokens: int, width: int) -> str:
    return f"linear {dtype} {tokens} × {width} → {_LINEAR_OUTPUTS * width}, cold"


def _norm_label(dtype: str, tokens: int, width: int) -> str:
    return f"layer norm {dtype} {tokens} × {width}"


Point = (AttentionPoint | StreamPoint | MatvecPoint | LoopPoint | LinearPoint | NormPoint
         | OpPoint)


def _point_label(point: Point) -> str:
    """The timer's label of the figure ``point`` came from."""
    if isinstance(point, OpPoint):
        return op_label(point.kind, point.dtype, point.rows, point.width, point.direction)
    if isinstance(point, NormPoint):
        return f"{_norm_label(point.dtype, point.tokens, point.width)} {point.direction}"
    if isinstance(point, LinearPoint):
        return _linear_label(point.dtype, point.tokens, point.width)
    if isinstance(point, LoopPoint):
        return _loop_label(point.dtype, point.loop)
    if isinstance(point, MatvecPoint):
        return _matvec_label(point.dtype, point.rows, point.working_set)
    if isinstance(point, AttentionPoint):
        return attention_label(point.dtype, point.seq, point.head_dim, point.direction)
    if point.kernel == "cast":
        source, target = point.dtype.split("-")
        read = point.elements * torch.empty((), dtype=torch_dtype(source)).element_size()
        return _cast_label(source, target, read)
    size = point.elements * torch.empty((), dtype=torch_dtype(point.dtype)).element_size()
    return f"{point.kernel} {_stream_label(point.dtype, size)}"


def _stream_points(timer: _Timer, dtype: str, elements: int, cold_bytes: int,
                   budget_s: float) -> tuple[StreamPoint, StreamPoint]:
    """Copy (a clone: 2 × size bytes) and triad (b + 3·c: 3 × size) on ``dtype`` tensors of
    ``elements``, each writing a new tensor from inputs that rotate through ``cold_bytes``."""
    device = timer.device
    kind = torch_dtype(dtype)
    size = elements * torch.empty((), dtype=kind).element_size()
    pairs = [(torch.rand(elements, device=device).to(kind),
              torch.rand(elements, device=device).to(kind))
             for _ in range(copies(2 * size, cold_bytes))]
    turn = itertools.cycle(pairs)
    label = _stream_label(dtype, size)
    copy = timer(lambda: next(turn)[0].clone(), f"copy {label}", budget_s=budget_s,
                 min_repeats=3)
    triad = timer(lambda: torch.add(*next(turn), alpha=3.0), f"triad {label}",
                  budget_s=budget_s, min_repeats=3)
    return (StreamPoint("copy", dtype, elements, 2 * size, copy.median_s,
                        2 * size / copy.median_s),
            StreamPoint("triad", dtype, elements, 3 * size, triad.median_s,
                        3 * size / triad.median_s))


def _cast_point(timer: _Timer, source: str, target: str, elements: int, cold_bytes: int,
                budget_s: float) -> StreamPoint:
    """``x.to(target)`` of ``elements`` in ``source``: reads them in one dtype, writes a new
    tensor in the other."""
    device = timer.device
    kind, into = torch_dtype(source), torch_dtype(target)
    read = elements * torch.empty((), dtype=kind).element_size()
    moved = read + elements * torch.empty((), dtype=into).element_size()
    inputs = [torch.rand(elements, device=device).to(kind)
              for _ in range(copies(read, cold_bytes))]
    turn = itertools.cycle(inputs)
    result = timer(lambda: next(turn).to(into), _cast_label(source, target, read),
                   budget_s=budget_s, min_repeats=3)
    return StreamPoint("cast", f"{source}-{target}", elements, moved, result.median_s,
                       moved / result.median_s)


def _matvec_points(timer: _Timer, plan: KernelPlan, dtype: str, rows: int,
                   budget_s: float) -> tuple[MatvecPoint, MatvecPoint]:
    """``rows`` tokens against a weight stored as ``nn.Linear`` stores it (out × in, read
    transposed: ``addmm`` as a decode step's linear layers trace), warm (the same weight each
    call) and cold (each call the next of weights filling ``plan.matvec_cold_bytes``)."""
    device = timer.device
    kind = torch_dtype(dtype)
    features, outputs = plan.matvec_weight
    weight_bytes = features * outputs * torch.empty((), dtype=kind).element_size()
    count = copies(weight_bytes, plan.matvec_cold_bytes, at_least=2)
    weights = [torch.randn(outputs, features, device=device).to(kind) for _ in range(count)]
    bias = torch.zeros(outputs, device=device).to(kind)
    x = torch.randn(rows, features, device=device).to(kind)
    turn = itertools.cycle(weights)
    points = []
    for working_set, call in (
            (weight_bytes, lambda: torch.addmm(bias, x, weights[0].t())),
            (count * weight_bytes, lambda: torch.addmm(bias, x, next(turn).t()))):
        result = timer(call, _matvec_label(dtype, rows, working_set), budget_s=budget_s,
                       min_repeats=3, warmup=1)
        points.append(MatvecPoint(dtype, rows, working_set, weight_bytes, result.median_s,
                                  weight_bytes / result.median_s))
    return points[0], points[1]


def _norm_points(timer: _Timer, dtype: str, tokens: int, width: int, budget_s: float
                 ) -> tuple[NormPoint, NormPoint]:
    """A layer norm of (``tokens``, ``width``) with weight and bias in ``dtype``: the
    forward (its input requiring grad, so it keeps its statistics, as in a training step)
    and the backward alone (the graph of one forward, run again); the bytes each direction's
    op moves are the trace's own."""
    from torch.nn.functional import layer_norm

    device = timer.device
    kind = torch_dtype(dtype)
    x = torch.randn(tokens, width, device=device).to(kind).requires_grad_()
    weight = torch.ones(width, device=device).to(kind).requires_grad_()
    bias = torch.zeros(width, device=device).to(kind).requires_grad_()
    grad = torch.randn(tokens, width, device=device).to(kind)

    def step() -> None:
        layer_norm(x, (width,), weight, bias).backward(grad)  # type: ignore[no-untyped-call]

    moved = by_direction(step, "normalization", "bytes", (x, weight, bias))
    label = _norm_label(dtype, tokens, width)
    forward = timer(lambda: layer_norm(x, (width,), weight, bias), f"{label} forward",
                    budget_s=budget_s, min_repeats=3, warmup=1)
    out = layer_norm(x, (width,), weight, bias)
    backward = timer(lambda: torch.autograd.grad(out, (x, weight, bias), grad,
                                                 retain_graph=True),
                     f"{label} backward", budget_s=budget_s, min_repeats=3, warmup=1)
    return (NormPoint(dtype, "forward", tokens, width, moved["forward"], forward.median_s,
                      moved["forward"] / forward.median_s),
            NormPoint(dtype, "backward", tokens, width, moved["backward"], backward.median_s,
                      moved["backward"] / backward.median_s))


def _linear_point(timer: _Timer, dtype: str, tokens: int, width: int, cold_bytes: int,
                  budget_s: float) -> LinearPoint:
    """``x @ w.t()``: ``tokens`` × ``width`` activations against a 4·``width`` × ``width``
    weight, each call the next pair of those filling ``cold_bytes``."""
    device = timer.device
    kind = torch_dtype(dtype)
    outputs = _LINEAR_OUTPUTS * width
    pair_bytes = (tokens + outputs) * width * torch.empty((), dtype=kind).element_size()
    pairs = [(torch.randn(tokens, width, device=device).to(kind),
              torch.randn(outputs, width, device=device).to(kind))
             for _ in range(copies(pair_bytes, cold_bytes, at_least=2))]
    turn = itertools.cycle(pairs)

    def call() -> torch.Tensor:
        x, w = next(turn)
        return x @ w.t()

    flops = 2 * tokens * width * outputs
    result = timer(call, _linear_label(dtype, tokens, width), budget_s=budget_s,
                   min_repeats=3, warmup=1)
    return LinearPoint(dtype, tokens, width, flops, result.median_s, flops / result.median_s)


def _loop_point(timer: _Timer, dtype: str, loop: int, elements: int, cold_bytes: int,
                budget_s: float) -> LoopPoint:
    """An add of a (rows, 4, ``loop``) tensor read as (4, rows, ``loop``), a head-split
    view, to a contiguous one: the kernel walks the output in the view's order and the
    contiguous operand cuts it into loops of ``loop`` elements; inputs rotate through
    ``cold_bytes``."""
    device = timer.device
    kind = torch_dtype(dtype)
    rows = max(1, elements // (4 * loop))
    size = rows * 4 * loop * torch.empty((), dtype=kind).element_size()
    pairs = [(torch.rand(rows, 4, loop, device=device).to(kind).transpose(0, 1),
              torch.rand(4, rows, loop, device=device).to(kind))
             for _ in range(copies(2 * size, cold_bytes))]
    turn = itertools.cycle(pairs)
    result = timer(lambda: torch.add(*next(turn)), _loop_label(dtype, loop), budget_s=budget_s,
                   min_repeats=3)
    return LoopPoint(dtype, loop, 3 * size, result.median_s, 3 * size / result.median_s)


def probe_attention(timer: _Timer, plan: KernelPlan, *, budget_s: float, slow_call_s: float,
                    say: Callable[[str], None]) -> tuple[list[AttentionPoint], list[str]]:
    """Time ``plan``'s attention kernels, ``budget_s`` each, without the one-thread check
    (``probe_attention.without_team_check``): the points, and the dtypes the device has no
    attention kernel for.  A head width's sequence sweep stops after a call slower than
    ``slow_call_s``."""
    attention: list[AttentionPoint] = []
    skipped: list[str] = []
    with without_team_check(timer):
        for dtype in plan.attention_dtypes:
            try:
                for head_dim in sorted(plan.head_dims):
                    for seq in sorted(plan.seqs):
                        say(f"attention {dtype}, sequence {seq}, head width {head_dim}")
                        pair = attention_points(timer, dtype, seq, head_dim,
                                                batch=plan.batch, heads=plan.heads,
                                                few_heads=plan.few_heads, budget_s=budget_s)
                        attention.extend(pair)
                        if max(p.median_s for p in pair) > slow_call_s:
                            break
            except RuntimeError:  # no kernel for this dtype on this device
                skipped.append(f"attention {dtype}")
    return attention, skipped


def probe_kernels(timer: _Timer, plan: KernelPlan, *, budget_s: float, cold_bytes: int,
                  max_elements: int, slow_call_s: float, say: Callable[[str], None],
                  attention: tuple[list[AttentionPoint], list[str]] | None = None
                  ) -> KernelProbe:
    """Time ``plan``'s kernels, ``budget_s`` each (its attention by :func:`probe_attention`
    unless ``attention`` holds what that returned).  Buffers above ``max_elements`` are
    left out."""
    timed, skipped = attention or probe_attention(timer, plan, budget_s=budget_s,
                                                  slow_call_s=slow_call_s, say=say)
    streams: list[StreamPoint] = []
    buffers: Sequence[int] = sorted(n for n in plan.buffers if n <= max_elements)
    for dtype in plan.stream_dtypes:
        for elements in buffers:
            say(f"eager-op bandwidth in {dtype}, {elements} elements, new outputs")
            streams.extend(_stream_points(timer, dtype, elements, cold_bytes, budget_s))
    loops: list[LoopPoint] = []
    for dtype in plan.stream_dtypes:
        for loop in sorted(plan.loops):
            say(f"elementwise {dtype} in inner loops of {loop} elements")
            loops.append(_loop_point(timer, dtype, loop, plan.loop_elements, cold_bytes,
                                     budget_s))
    for source, target in plan.casts:
        for elements in buffers:
            say(f"cast {source} → {target}, {elements} elements")
            streams.append(_cast_point(timer, source, target, elements, cold_bytes, budget_s))
    matvec: list[MatvecPoint] = []
    for dtype in plan.matvec_dtypes:
        for rows in sorted(plan.matvec_rows):
            say(f"decode product in {dtype}, {rows} row{'s' if rows > 1 else ''}, warm and "
                "cold weights")
            matvec.extend(_matvec_points(timer, plan, dtype, rows, budget_s))
    norms: list[NormPoint] = []
    for dtype in plan.stream_dtypes:
        for tokens in sorted(plan.norm_tokens):
            say(f"layer norm in {dtype}, {tokens} tokens × {plan.norm_width}")
            norms.extend(_norm_points(timer, dtype, tokens, plan.norm_width, budget_s))
    ops: list[OpPoint] = []
    for dtype in plan.stream_dtypes:
        for kind in plan.op_kinds:
            for rows in sorted(plan.op_rows):
                say(f"{kind} in {dtype}, {rows} × {plan.op_width}")
                ops.extend(op_points(timer, kind, dtype, rows, plan.op_width, budget_s))
    linear: list[LinearPoint] = []
    for dtype in plan.linear_dtypes:
        for width in sorted(plan.linear_widths):
            say(f"linear layer in {dtype}, {plan.linear_tokens} tokens × {width}, cold")
            linear.append(_linear_point(timer, dtype, plan.linear_tokens, width,
                                        plan.matvec_cold_bytes, budget_s))
    # a figure the timer set aside (still noisy after its retries) enters no curve
    points: list[Point] = [*timed, *streams, *matvec, *loops, *linear, *norms, *ops]
    labels = [label for p in points for label in (
        (_point_label(p), few_heads_label(p)) if isinstance(p, AttentionPoint) and p.few_heads
        else (_point_label(p),))]
    # an attention point whose smaller call was set aside keeps its call's mean a head
    timed = [p if not p.few_heads or timer.kept(few_heads_label(p))
             else replace(p, few_heads=0, few_s=0.0) for p in timed]
    return KernelProbe(tuple(p for p in timed if timer.kept(_point_label(p))),
                       tuple(p for p in streams if timer.kept(_point_label(p))),
                       tuple(skipped),
                       set_aside=tuple(label for label in labels if not timer.kept(label)),
                       matvec=tuple(p for p in matvec if timer.kept(_point_label(p))),
                       loops=tuple(p for p in loops if timer.kept(_point_label(p))),
                       linear=tuple(p for p in linear if timer.kept(_point_label(p))),
                       norms=tuple(p for p in norms if timer.kept(_point_label(p))),
                       ops=tuple(p for p in ops if timer.kept(_point_label(p))))
