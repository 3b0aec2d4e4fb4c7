"""Probe this device's ceilings and write them as a hardware profile.

- matmul FLOP/s per dtype: square matmuls over a sweep of sizes, best median taken as the
  peak (2·n³ FLOPs each, the house convention for an n×n×n matmul);
- memory bandwidth: copy (reads and writes each byte once: 2·size bytes) and triad
  a = b + s·c (3·size bytes) on warm buffers several times the last-level cache; then the
  same kernels as the ops of a training step run them, over a sweep of sizes: each writes a
  new tensor and reads inputs last touched long before (rotating through twice the
  last-level cache).  That sweep is the bandwidth curve the roofline uses (for every op but
  an optimizer's elementwise updates in place: ``roofline.model.updates_in_place``);
- per-op overhead: the time per aten op of a training step on tiny tensors (a stack of 4×4
  linear layers and ReLUs, forward and backward), where the kernels cost nothing and what is
  left is dispatch, autograd and module calls; beside it the bare cost of one op.

The profile is TOML in the catalog's own format, so ``load_hardware_file`` reads it back.

Noise: every figure is timed as repeated samples.  The matmul sweep is timed in ``rounds``
rounds taken in turn over every size, their samples pooled, so that a spell when the machine
runs slower falls on every size alike rather than bending the curve at one (one 256² point at
a third of its neighbours' rate once set a calibration's matmul scale to 0.71 against 1.02).
Any other figure whose spread (interquartile range over the median) is wider than
``max_spread`` is measured again, up to ``retries`` times (not a figure slower than
``slow_call_s`` per call), and the tightest attempt kept.  A
figure that stays wide is named in the profile's ``unreliable`` list, and every prediction made
against the profile says so.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tensorledger.bench.harness import Measurement, measure, pooled
from tensorledger.devices import resolve_device
from tensorledger.dtypes import resolve_dtype
from tensorledger.summary import show_bytes, show_time, summary

if TYPE_CHECKING:
    from tensorledger.bench.collectives import CollectiveProbe
    from tensorledger.bench.probe_kernels import KernelPlan, KernelProbe

__all__ = ["BandwidthPoint", "MatmulPoint", "ProbeResult", "matmul_curve", "matmul_round",
           "matmul_sizes", "probe", "profile_toml"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class MatmulPoint:
    dtype: str
    n: int
    flops: int
    median_s: float
    flop_per_s: float


@dataclass(frozen=True)
class BandwidthPoint:
    kernel: str  # "copy" or "triad"
    buffer_bytes: int
    bytes_moved: int
    median_s: float
    bytes_per_s: float
    fresh_output: bool  # True: each run writes a new tensor, as eager ops do


@dataclass(frozen=True)
class ProbeResult:
    """What the probe measured; the peaks are the best points of each sweep."""

    device: str
    name: str
    memory_bytes: int
    dense_flop_per_s: dict[str, float]
    memory_bandwidth_bytes_per_s: float
    op_overhead_s: float  # per op of a training step: dispatch, autograd, module calls
    bare_op_overhead_s: float  # one op on a one-element tensor, no autograd
    matmul: tuple[MatmulPoint, ...] = field(default=())
    attention: tuple[MatmulPoint, ...] = field(default=())  # n is the sequence length
    bandwidth: tuple[BandwidthPoint, ...] = field(default=())
    skipped: tuple[str, ...] = field(default=())  # dtypes the device cannot multiply
    curves: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # figures whose samples stayed too spread after the retries, with their spread
    unreliable: tuple[str, ...] = field(default=())
    max_spread: float = 0.0  # the spread allowed
    # attention by dtype and direction, bf16 elementwise ops, casts (bench.probe_kernels)
    kernels: KernelProbe | None = None

    def __repr__(self) -> str:
        return summary("ProbeResult", self.name, f"{len(self.matmul)} matmul / "
                       f"{len(self.attention)} attention / {len(self.bandwidth)} bandwidth points",
                       f"{show_bytes(self.memory_bandwidth_bytes_per_s)}/s",
                       f"overhead {show_time(self.op_overhead_s)}",
                       f"{len(self.unreliable)} unreliable" if self.unreliable else "")


@dataclass
class _Timer:
    """``measure`` with the probe's clock, re-measuring a figure whose samples spread wider
    than ``max_spread`` and recording the figures that stay wide."""

    device: torch.device
    clock: Callable[[], float]
    max_spread: float
    retries: int
    slow_call_s: float = 1.0  # a figure this slow per call is not measured again
    unreliable: list[str] = field(default_factory=list)

    def once(self, fn: Callable[[], Any], label: str, **options: Any) -> Measurement:
        """One measurement, neither repeated nor judged (a round of a sweep)."""
        return measure(fn, device=self.device, clock=self.clock, name=label, **options)

    def judge(self, result: Measurement, label: str) -> Measurement:
        """Name ``label`` among the unreliable figures if ``result`` spreads too wide."""
        if result.spread > self.max_spread:
            self.unreliable.append(f"{label} (spread {result.spread:.0%})")
        return result

    def __call__(self, fn: Callable[[], Any], label: str, **options: Any) -> Measurement:
        best: Measurement | None = None
        for _ in range(1 + self.retries):
            result = measure(fn, device=self.device, clock=self.clock, name=label, **options)
            if best is None or result.spread < best.spread:
                best = result
            if result.spread <= self.max_spread or result.median_s > self.slow_call_s:
                break
        assert best is not None
        return self.judge(best, label)


def _device_name(device: torch.device) -> tuple[str, int]:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return props.name, int(props.total_memory)
    name = "cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return f"{name} ({torch.get_num_threads()} threads)", int(memory)


def _last_level_cache_bytes() -> int:
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = index.read_text().strip()
        factor = {"K": 2**10, "M": 2**20}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KM")) * factor)
    return max(sizes, default=32 * 2**20)


def _matmul_round(timer: _Timer, dtype: str, n: int, budget_s: float,
                  cold_bytes: int = 0) -> Measurement:
    """One round of an n×n×n matmul; the left operand rotates through ``cold_bytes`` of
    copies, so it comes from memory as an activation does in a training step, not from a warm
    cache."""
    device = timer.device
    torch_dtype = getattr(torch, resolve_dtype(dtype).torch_name or "float32")
    operand_bytes = n * n * torch.empty((), dtype=torch_dtype).element_size()
    lefts = [torch.randn(n, n, device=device).to(torch_dtype)
             for _ in range(max(1, -(-cold_bytes // operand_bytes)))]
    b = torch.randn(n, n, device=device).to(torch_dtype)
    turn = itertools.cycle(lefts)
    return timer.once(lambda: next(turn) @ b, f"matmul {dtype} {n}", budget_s=budget_s,
                      min_repeats=3, warmup=2)


def matmul_round(n: int, budget_s: float, *, device: str = "cpu",
                 clock: Callable[[], float] = time.perf_counter) -> Measurement:
    """One round of the probe's fp32 n×n×n matmul (its left operand from memory, as in the
    probe's sweep), neither repeated nor judged: for a caller that times the sweep in rounds
    of its own, beside other work (``CalibrationRounds(sweep=True)``), and pools them with
    :func:`matmul_curve`."""
    dev = resolve_device(device, ("cpu", "cuda"))
    cold = 0 if dev.type == "cuda" else 2 * _last_level_cache_bytes()
    return _matmul_round(_Timer(dev, clock, 0.0, 0), "fp32", n, budget_s, cold)


def matmul_sizes(curve: Sequence[tuple[float, float]]) -> tuple[int, ...]:
    """The n of each point of a probed matmul curve, (2·n³ FLOPs, FLOP/s) by size: the sizes
    to time again with :func:`matmul_round`.

    >>> matmul_sizes(((2 * 64**3, 3e10), (2 * 128**3, 7e10)))
    (64, 128)
    """
    return tuple(round((flops / 2) ** (1 / 3)) for flops, _ in curve)


def matmul_curve(rounds: Mapping[int, Sequence[Measurement]]
                 ) -> tuple[tuple[float, float], ...]:
    """The matmul curve, (FLOPs, FLOP/s) by size, of :func:`matmul_round`'s rounds of each
    size n pooled (2·n³ FLOPs over the pooled median)."""
    return tuple(sorted((2.0 * n**3, 2.0 * n**3 / pooled(found).median_s)
                        for n, found in rounds.items() if found))


def _matmul_sweep(timer: _Timer, dtypes: Sequence[str], sizes: Sequence[int],
                  budget_s: float, rounds: int, cold_bytes: int, slow_call_s: float,
                  say: Callable[[str], None]) -> tuple[list[MatmulPoint], list[str]]:
    """Every dtype's matmuls over ``sizes``, in ``rounds`` rounds taken in turn over all of
    them (``budget_s / rounds`` each), their samples pooled: a spell when the machine runs
    slower falls on every size alike rather than bending the curve at one.  A dtype the
    device has no kernel for is skipped; sizes beyond one slower than ``slow_call_s`` a call
    are left out, as they would only take longer."""
    parts: dict[tuple[str, int], list[Measurement]] = {}
    skipped: list[str] = []
    for dtype in dtypes:  # the first round, which decides what the others take
        for n in sorted(sizes):
            say(f"matmul {dtype} {n}×{n}")
            try:
                result = _matmul_round(timer, dtype, n, budget_s / rounds, cold_bytes)
            except RuntimeError:  # the device has no kernel for this dtype
                skipped.append(dtype)
                break
            parts[dtype, n] = [result]
            if result.median_s > slow_call_s:
                break
    # a size slower than slow_call_s a call is not measured again (fp16 on a CPU without
    # fp16 units runs a thousand times slower than fp32)
    again = [key for key, (first,) in parts.items() if first.median_s <= slow_call_s]
    for index in range(1, rounds):
        for dtype, n in again:
            say(f"matmul {dtype} {n}×{n}, round {index + 1} of {rounds}")
            parts[dtype, n].append(_matmul_round(timer, dtype, n, budget_s / rounds,
                                                 cold_bytes))
    points = []
    for (dtype, n), found in parts.items():
        result = timer.judge(pooled(found), f"matmul {dtype} {n}")
        flops = 2 * n**3
        points.append(MatmulPoint(dtype, n, flops, result.median_s, flops / result.median_s))
    return points, skipped


def _attention_point(timer: _Timer, seq: int, budget_s: float) -> MatmulPoint:
    """Causal attention forward and backward at (batch 4, heads 8, seq, head dim 64), fp32.

    Its FLOPs are counted by the trace's own rules (attention counted in full, the backward
    2.5× the forward), so the rate is on the scale the roofline divides traced FLOPs by.
    """
    from torch.nn.functional import scaled_dot_product_attention

    from tensorledger.trace import trace

    device = timer.device
    q, k, v = (torch.randn(4, 8, seq, 64, device=device, requires_grad=True) for _ in range(3))
    grad = torch.randn(4, 8, seq, 64, device=device)

    def step() -> None:
        out = scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)  # type: ignore[no-untyped-call]

    flops = sum(r.flops for r in trace(step).records if r.category == "attention")
    result = timer(step, f"attention fp32 {seq}", budget_s=budget_s, min_repeats=3, warmup=1)
    return MatmulPoint("fp32", seq, flops, result.median_s, flops / result.median_s)


def _step_overhead(timer: _Timer, budget_s: float) -> float:
    """Seconds per traced op of a forward+backward step whose kernels cost next to nothing."""
    from tensorledger.trace import trace

    device = timer.device
    layers: list[torch.nn.Module] = []
    for _ in range(8):
        layers += [torch.nn.Linear(4, 4, device=device), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    x = torch.randn(2, 4, device=device)

    def step() -> None:
        model(x).sum().backward()
        for parameter in model.parameters():
            parameter.grad = None

    ops = len(trace(step).records)
    return timer(step, "per-op overhead", budget_s=budget_s).median_s / ops


def _bandwidth_points(timer: _Timer, buffer_bytes: int, budget_s: float, *,
                      fresh: bool, cold_bytes: int = 0) -> tuple[BandwidthPoint, ...]:
    """Copy and triad over ``buffer_bytes``.

    ``fresh``: each run writes a new tensor and reads inputs that rotate through at least
    ``cold_bytes`` of buffers, as the ops of a training step do (their inputs were written
    long before, their outputs are new); else the kernels reread the same inputs and write
    into a warm buffer (the memory system's own bandwidth).
    """
    device = timer.device
    elements = max(buffer_bytes // 4, 1)
    size = elements * 4
    label = f"{'eager ' if fresh else ''}bandwidth {size} B"
    if fresh:
        pairs = [(torch.rand(elements, device=device), torch.rand(elements, device=device))
                 for _ in range(max(1, -(-cold_bytes // (2 * size))))]
        turn = itertools.cycle(pairs)
        copy = timer(lambda: next(turn)[0].clone(), f"copy {label}", budget_s=budget_s,
                     min_repeats=3)
        triad = timer(lambda: torch.add(*next(turn), alpha=3.0), f"triad {label}",
                      budget_s=budget_s, min_repeats=3)
    else:
        a = torch.empty(elements, device=device)
        b = torch.rand(elements, device=device)
        c = torch.rand(elements, device=device)
        copy = timer(lambda: a.copy_(b), f"copy {label}", budget_s=budget_s, min_repeats=3)
        triad = timer(lambda: torch.add(b, c, alpha=3.0, out=a), f"triad {label}",
                      budget_s=budget_s, min_repeats=3)
    return (BandwidthPoint("copy", size, 2 * size, copy.median_s, 2 * size / copy.median_s,
                           fresh),
            BandwidthPoint("triad", size, 3 * size, triad.median_s, 3 * size / triad.median_s,
                           fresh))


def _curve(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Points sorted by size, one per size (the best rate at that size)."""
    best: dict[float, float] = {}
    for size, rate in points:
        best[size] = max(best.get(size, 0.0), rate)
    return tuple(sorted(best.items()))


def probe(device: str = "cpu", *, dtypes: Sequence[str] = ("fp32", "bf16", "fp16"),
          sizes: Sequence[int] | None = None, buffer_bytes: int | None = None,
          budget_s: float = 0.5, slow_call_s: float = 1.0, bandwidth_sweep: bool = True,
          attention_seqs: Sequence[int] | None = None,
          progress: Progress | None = None, max_spread: float = 0.10, retries: int = 2,
          rounds: int = 3, clock: Callable[[], float] = time.perf_counter,
          kernels: KernelPlan | None = None) -> ProbeResult:
    """Measure the ceilings of ``device``.  ``progress`` is told each step as it starts.

    A dtype's sweep stops early once one call takes longer than ``slow_call_s`` (fp16 on a
    CPU without fp16 units runs a thousand times slower than fp32).  ``bandwidth_sweep`` adds
    a sweep of buffer sizes, each kernel writing a new tensor as eager ops do, as the
    profile's bandwidth curve (small buffers stream from cache; new outputs cost page faults);
    ``attention_seqs`` are the sequence lengths at which causal attention (forward and
    backward) is measured (``()`` for none; by default a sweep that suits the device).
    ``max_spread``, ``retries`` and ``rounds``: see the module docstring; ``clock`` times the
    samples (a test passes a fake one).  ``kernels``: what a recipe runs beyond the matmul
    (``bench.probe_kernels.KernelPlan``; by default ``default_plan``).
    """
    dev = resolve_device(device, ("cpu", "cuda"))
    timer = _Timer(dev, clock, max_spread, retries, slow_call_s)
    say = progress or (lambda _: None)
    name, memory = _device_name(dev)
    if sizes is None:
        sizes = ((256, 512, 1024, 2048, 4096, 8192) if dev.type == "cuda"
                 else (64, 128, 256, 512, 1024, 2048))
    # inputs rotate through twice the last-level cache, as a step's activations do; a GPU's
    # cache is small beside its tensors, so there the same buffers serve
    cold = 0 if dev.type == "cuda" else 2 * _last_level_cache_bytes()
    points, skipped = _matmul_sweep(timer, dtypes, sizes, budget_s, max(1, rounds), cold,
                                    slow_call_s, say)
    attention: list[MatmulPoint] = []
    if attention_seqs is None:
        attention_seqs = (128, 256, 512, 1024) if dev.type == "cpu" else (512, 1024, 2048, 4096)
    if attention_seqs:
        for seq in sorted(attention_seqs):
            say(f"attention fp32, sequence {seq}")
            attention.append(_attention_point(timer, seq, budget_s))
            if attention[-1].median_s > slow_call_s:
                break
    if buffer_bytes is None:
        buffer_bytes = 2**30 if dev.type == "cuda" else max(4 * _last_level_cache_bytes(),
                                                            64 * 2**20)
    say(f"memory bandwidth, {buffer_bytes / 2**20:.0f} MiB buffers")
    bandwidth = _bandwidth_points(timer, buffer_bytes, budget_s, fresh=False)
    eager: list[BandwidthPoint] = []
    if bandwidth_sweep:
        for size in sorted({2**16, 2**18, 2**20, 2**22, 2**24, buffer_bytes}):
            if size <= buffer_bytes:
                say(f"eager-op bandwidth, {size / 2**10:.0f} KiB buffers, new outputs")
                eager.extend(_bandwidth_points(timer, size, budget_s / 2, fresh=True,
                                               cold_bytes=cold))
    from tensorledger.bench.probe_kernels import default_plan, probe_kernels

    plan = kernels or default_plan(dev.type, dtypes, attention_seqs)
    measured = probe_kernels(timer, plan, budget_s=budget_s / 4, cold_bytes=cold,
                             max_elements=buffer_bytes // 4, slow_call_s=slow_call_s, say=say)
    say("per-op overhead")
    tiny = torch.ones(1, device=dev)
    bare = timer(lambda: torch.add(tiny, tiny), "one bare op", budget_s=budget_s / 2,
                 min_sample_s=1e-4).median_s
    overhead = _step_overhead(timer, budget_s / 2)
    peaks: dict[str, float] = {}
    for point in points:
        peaks[point.dtype] = max(peaks.get(point.dtype, 0.0), point.flop_per_s)
    curves = {f"matmul.{resolve_dtype(dtype).compute}": _curve(
        [(p.flops, p.flop_per_s) for p in points if p.dtype == dtype]) for dtype in peaks}
    if attention:
        curves["attention.fp32"] = _curve([(p.flops, p.flop_per_s) for p in attention])
    if eager:
        curves["bandwidth"] = _curve([(p.bytes_moved, p.bytes_per_s) for p in eager])
    curves.update(measured.curves)
    return ProbeResult(device=str(dev), name=name, memory_bytes=memory,
                       dense_flop_per_s={resolve_dtype(k).compute: v for k, v in peaks.items()},
                       memory_bandwidth_bytes_per_s=max(p.bytes_per_s for p in bandwidth),
                       op_overhead_s=overhead, bare_op_overhead_s=bare, matmul=tuple(points),
                       attention=tuple(attention),
                       bandwidth=(*bandwidth, *eager), skipped=(*skipped, *measured.skipped),
                       curves=curves, unreliable=tuple(timer.unreliable),
                       max_spread=max_spread, kernels=measured)


def profile_toml(result: ProbeResult, chip_id: str = "local", calibration: str = "",
                 collectives: CollectiveProbe | None = None) -> str:
    """The probe as a hardware file in the catalog's format (``load_hardware_file`` reads it);
    ``calibration``: a ``[calibration]`` table to append (``ledger.calibrate``);
    ``collectives``: the measured collectives, written as this machine's node (its ranks as
    ``devices_per_node``, the fitted link as ``intra_node_bandwidth`` and
    ``intra_node_latency``, so ``collective_time`` prices collectives as measured) and each
    kind's bus bandwidth by size as a ``busbw.<kind>`` curve."""
    lines = [
        f"# measured by `tensorledger probe` on {result.device}",
        f'id = "{chip_id}"',
        f'name = "{result.name} (probed)"',
        f'memory = "{result.memory_bytes}B"',
        f'memory_bandwidth = "{result.memory_bandwidth_bytes_per_s!r}B/s"',
        f'op_overhead = "{result.op_overhead_s * 1e9!r}ns"',
        f'source = "measured by tensorledger probe on {result.device}: best median of a matmul '
        'sweep; bandwidth from copy and triad"',
    ]
    curves = dict(result.curves)
    unreliable = list(result.unreliable)
    if collectives is not None:
        fit = collectives.fit
        lines += [
            f"devices_per_node = {collectives.ranks}",
            f'node_kind = "this machine: {collectives.ranks} ranks over {collectives.backend} '
            f'on {collectives.device} (measured)"',
            f'intra_node_bandwidth = "{fit.bandwidth_bytes_per_s!r}B/s"',
            f'intra_node_latency = "{fit.latency_s * 1e9!r}ns"',
            f'topology_source = "fitted by tensorledger probe --collectives: t = alpha * ring '
            f'steps + bytes sent / B over {fit.points} timed all-reduce, all-gather and '
            f'reduce-scatter points (rms error {fit.rms_relative_error:.1%})"',
        ]
        curves.update(collectives.busbw_curves())
        unreliable += collectives.unreliable
    if unreliable:
        spread = max(result.max_spread, collectives.max_spread if collectives else 0.0)
        lines.append("# these figures' repeated measurements stayed more spread than "
                     f"{spread:.0%} of their median: probe again on a quiet machine")
        lines.append("unreliable = [" + ", ".join(f'"{u}"' for u in unreliable) + "]")
    lines.append("[dense]")
    lines += [f'{key} = "{value!r}FLOP/s"' for key, value in result.dense_flop_per_s.items()]
    if curves:
        lines.append("[curves]  # [size, rate]: FLOPs and FLOP/s, or bytes moved and bytes/s; "
                     "busbw: S and bus bytes/s")
        for name, points in curves.items():
            pairs = ", ".join(f"[{size!r}, {rate!r}]" for size, rate in points)
            lines.append(f'"{name}" = [{pairs}]')
    return "\n".join(lines) + "\n" + calibration
