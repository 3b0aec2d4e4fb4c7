"""Probe this device's ceilings and write them as a hardware profile.

- matmul FLOP/s per dtype: square matmuls over a sweep of sizes, best median taken as the
  peak (2·n³ FLOPs each, the house convention for an n×n×n matmul);
- memory bandwidth: copy (reads and writes each byte once: 2·size bytes) and triad
  a = b + s·c (3·size bytes) on warm buffers several times the last-level cache; then the
  same kernels as the ops of a training step run them, over a sweep of sizes: each writes a
  new tensor and reads inputs last touched long before (rotating through twice the
  last-level cache).  That sweep is the bandwidth curve the roofline uses (for every op but
  an optimizer's elementwise updates in place: ``roofline.cost_classes.updates_in_place``);
- per-op overhead: the time per aten op of a training step on tiny tensors (the reference
  Transformer at width 8, forward and backward: ``OVERHEAD_MODEL``), where the kernels cost
  nothing and what is left is dispatch, autograd, module calls and einops; apart, per op of
  its forward under no_grad (what prefill and decode run); beside them the bare cost of one
  op.

The profile is TOML in the catalog's own format, so ``load_hardware_file`` reads it back.

Noise: every figure is timed as repeated samples.  The matmul sweep is timed in ``rounds``
rounds taken in turn over every size, their samples pooled, so that a spell when the machine
runs slower falls on every size alike rather than bending the curve at one (one 256² point at
a third of its neighbours' rate once set a calibration's matmul scale to 0.71 against 1.02).
A round whose median is wildly off the figure's fastest round is dropped and taken again, and
on a CPU each figure is checked against the same call on one thread (a thread team that
waits for a thread another process holds reads a floor of milliseconds a call):
``bench.probe_noise``.  Any figure whose spread (interquartile range over the median) is wider
than ``max_spread`` is measured again, up to ``retries`` times (not a figure slower than
``slow_call_s`` per call), then once ``probe_noise.LONGER`` times as long, and the tightest
attempt kept.  A figure that stays wide (or stalled) is *set aside*: a matmul, attention or
eager-bandwidth point is left out of the profile (never a peak, never a point of a curve) and
named in ``ProbeResult.set_aside`` with its reason; a figure the profile cannot do without (the
per-op overhead; the DRAM bandwidth when both its kernels stay wide) is kept, named in the
profile's ``unreliable`` list, and every prediction made against the profile says so.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from tensorledger.bench.harness import Measurement, measure, pooled
from tensorledger.bench.probe_noise import (
    LONGER,
    STALL_CHECK_S,
    SetAside,
    figure_of,
    one_thread,
    settle_rounds,
    stall_reason,
    stalled,
)
from tensorledger.bench.probe_pages import PAGE_LABEL, FreshPages, fresh_pages
from tensorledger.bench.probe_profile import profile_toml  # re-exported: the probe's file
from tensorledger.devices import resolve_device
from tensorledger.dtypes import resolve_dtype
from tensorledger.errors import DeviceError
from tensorledger.napkin.transformer import get_preset
from tensorledger.summary import show_bytes, show_time, summary

if TYPE_CHECKING:
    from tensorledger.bench.probe_kernels import KernelPlan, KernelProbe

__all__ = ["BandwidthPoint", "MatmulPoint", "ProbeResult", "SetAside", "matmul_curve",
           "matmul_round", "matmul_sizes", "probe", "profile_toml"]

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
    # per op of a forward under no_grad (prefill, decode): module calls and dispatch; 0: not
    # measured (a result made before this figure was)
    inference_op_overhead_s: float = 0.0
    matmul: tuple[MatmulPoint, ...] = field(default=())
    attention: tuple[MatmulPoint, ...] = field(default=())  # n is the sequence length
    bandwidth: tuple[BandwidthPoint, ...] = field(default=())
    skipped: tuple[str, ...] = field(default=())  # dtypes the device cannot multiply
    curves: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # figures whose samples stayed too spread after the retries, with their spread
    unreliable: tuple[str, ...] = field(default=())
    max_spread: float = 0.0  # the spread allowed
    # figures measured but left out of the profile (no peak, no curve point), with the reason
    set_aside: tuple[SetAside, ...] = field(default=())
    # attention by dtype and direction, bf16 elementwise ops, casts (bench.probe_kernels)
    kernels: KernelProbe | None = None
    # a CPU's new tensors mapped anew (bench.probe_pages): None where none are, or unmeasured
    fresh_pages: FreshPages | None = None

    def __repr__(self) -> str:
        return summary("ProbeResult", self.name, f"{len(self.matmul)} matmul / "
                       f"{len(self.attention)} attention / {len(self.bandwidth)} bandwidth points",
                       f"{show_bytes(self.memory_bandwidth_bytes_per_s)}/s",
                       f"overhead {show_time(self.op_overhead_s)}",
                       f"{len(self.unreliable)} unreliable" if self.unreliable else "",
                       f"{len(self.set_aside)} set aside" if self.set_aside else "")


@dataclass
class _Timer:
    """``measure`` with the probe's clock, re-measuring a figure whose samples spread wider
    than ``max_spread`` (``retries`` times, then once ``longer`` times its budget) and
    recording the figures that stay wide."""

    device: torch.device
    clock: Callable[[], float]
    max_spread: float
    retries: int
    slow_call_s: float = 1.0  # a figure this slow per call is not measured again
    unreliable: list[str] = field(default_factory=list)
    longer: float = LONGER
    # why each figure in ``unreliable`` stayed wide (what a set-aside figure's output says)
    why: dict[str, str] = field(default_factory=dict)
    team: bool = False  # a CPU thread team, each figure checked against one thread

    def stall(self, fn: Callable[[], Any], label: str, result: Measurement,
              options: Mapping[str, Any]) -> str:
        """Why ``result`` is a thread team's that waited for a descheduled thread (the same
        call on one thread far faster: ``probe_noise.stalled``), or ``""``."""
        if not self.team or result.median_s >= STALL_CHECK_S:
            return ""
        with one_thread():
            alone = measure(fn, device=self.device, clock=self.clock,
                            name=f"{label} on one thread",
                            **{**options, "budget_s": options.get("budget_s", 1.0) / 2})
        return (stall_reason(result.median_s, alone.median_s)
                if stalled(result.median_s, alone.median_s) else "")

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
        best_stall = ""
        attempts = 1 + self.retries
        taken = 0
        for attempt in range(attempts + 1):
            if attempt == attempts:  # still wide after the retries: once more, longer
                options = {**options, "budget_s": options.get("budget_s", 1.0) * self.longer}
            result = measure(fn, device=self.device, clock=self.clock, name=label, **options)
            taken += 1
            stall = self.stall(fn, label, result, options)
            if (best is None or (best_stall and not stall)
                    or (bool(stall) == bool(best_stall) and result.spread < best.spread)):
                best, best_stall = result, stall
            if not stall and (result.spread <= self.max_spread
                              or result.median_s > self.slow_call_s):
                break
        assert best is not None
        if best_stall:  # a team that stayed stalled: what it read is not this machine's
            self.why[label] = f"{best_stall}; after {taken} measurements"
            self.unreliable.append(f"{label} (stalled)")
            return best
        if best.spread > self.max_spread:
            tries = (f"the tightest of {taken}, the last {self.longer:g}× longer"
                     if taken > attempts else f"{taken} measurement(s): too slow a call to "
                     "take again" if taken < attempts else f"the tightest of {taken}")
            self.why[label] = f"spread {best.spread:.0%}, limit {self.max_spread:.0%}; {tries}"
        return self.judge(best, label)

    def kept(self, label: str) -> bool:
        """Whether figure ``label`` is steady enough to enter the profile."""
        return label not in self.why


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


def _matmul_call(device: torch.device, dtype: str, n: int,
                 cold_bytes: int = 0) -> Callable[[], Any]:
    """An n×n×n matmul whose left operand rotates through ``cold_bytes`` of copies, so it
    comes from memory as an activation does in a training step, not from a warm cache."""
    torch_dtype = getattr(torch, resolve_dtype(dtype).torch_name or "float32")
    operand_bytes = n * n * torch.empty((), dtype=torch_dtype).element_size()
    # one block of copies of one random operand, cut apart: each copy its own memory, and
    # the block written at the memory's speed (random numbers for twice the last-level cache
    # took a fifth of a second a round; a small n wants thousands of copies)
    count = max(1, -(-cold_bytes // operand_bytes))
    one = torch.randn(n, n, device=device).to(torch_dtype)
    lefts = torch.empty(count, n, n, device=device, dtype=torch_dtype).copy_(
        one.expand(count, n, n)).unbind(0)
    b = torch.randn(n, n, device=device).to(torch_dtype)
    turn = itertools.cycle(lefts)
    return lambda: next(turn) @ b


def _matmul_round(timer: _Timer, dtype: str, n: int, budget_s: float,
                  cold_bytes: int = 0, warmup_s: float = 0.0) -> Measurement:
    """One round of an n×n×n matmul (:func:`_matmul_call`); ``warmup_s``: seconds of calls
    before the first sample (a figure's first round: the thread team awake, the operands'
    pages touched).  The calls per sample are set by the fastest of three single calls, so a
    call that waited sets no sample's size."""
    return timer.once(_matmul_call(timer.device, dtype, n, cold_bytes), f"matmul {dtype} {n}",
                      budget_s=budget_s, min_repeats=3, warmup=2, warmup_s=warmup_s,
                      calibration_calls=3)


def _one_thread_round(timer: _Timer, dtype: str, n: int, budget_s: float,
                      cold_bytes: int) -> Measurement:
    """The same matmul on one thread: what a thread team's time is checked against."""
    with one_thread():
        return timer.once(_matmul_call(timer.device, dtype, n, cold_bytes),
                          f"matmul {dtype} {n} on one thread", budget_s=budget_s,
                          min_repeats=3, warmup=1, calibration_calls=3)


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
                  say: Callable[[str], None]
                  ) -> tuple[list[MatmulPoint], list[str], list[SetAside]]:
    """Every dtype's matmuls over ``sizes``, in ``rounds`` rounds taken in turn over all of
    them (``budget_s / rounds`` each), their samples pooled: a spell when the machine runs
    slower falls on every size alike rather than bending the curve at one.  A dtype the
    device has no kernel for is skipped; sizes beyond one slower than ``slow_call_s`` a call
    are left out, as they would only take longer.  Each size's rounds are then settled
    (``probe_noise.settle_rounds``): wild rounds taken again, a stalled thread team or a wide
    spread measured again and longer, and a size that stays so set aside."""
    parts: dict[tuple[str, int], list[Measurement]] = {}
    skipped: list[str] = []
    round_s = budget_s / rounds
    for dtype in dtypes:  # the first round, which decides what the others take
        for n in sorted(sizes):
            say(f"matmul {dtype} {n}×{n}")
            try:
                result = _matmul_round(timer, dtype, n, round_s, cold_bytes,
                                       warmup_s=round_s / 10)
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
            parts[dtype, n].append(_matmul_round(timer, dtype, n, round_s, cold_bytes))
    # a thread team can stall only where there is one: a CPU's, of more than one thread
    team = timer.device.type == "cpu" and torch.get_num_threads() > 1
    points: list[MatmulPoint] = []
    set_aside: list[SetAside] = []
    for (dtype, n), found in parts.items():
        label = f"matmul {dtype} {n}"
        if found[0].median_s > slow_call_s:  # measured once: judged, not taken again
            result, out = pooled(found), None
            if result.spread > timer.max_spread:
                out = SetAside(label, f"spread {result.spread:.0%}, limit "
                               f"{timer.max_spread:.0%}; too slow a call to take again")
        else:
            result, out = _settle_matmul(timer, dtype, n, found, round_s, cold_bytes, team, say)
        if out is not None:
            set_aside.append(out)
            continue
        flops = 2 * n**3
        points.append(MatmulPoint(dtype, n, flops, result.median_s, flops / result.median_s))
    return points, skipped, set_aside


def _settle_matmul(timer: _Timer, dtype: str, n: int, rounds: Sequence[Measurement],
                   round_s: float, cold_bytes: int, team: bool, say: Callable[[str], None]
                   ) -> tuple[Measurement, SetAside | None]:
    """``probe_noise.settle_rounds`` for one size's rounds; ``team``: check the thread team
    against one thread."""

    def again(budget_s: float) -> Measurement:
        return _matmul_round(timer, dtype, n, budget_s, cold_bytes)

    def alone() -> Measurement:
        return _one_thread_round(timer, dtype, n, round_s / 2, cold_bytes)

    return settle_rounds(f"matmul {dtype} {n}", rounds, again, round_s,
                         max_spread=timer.max_spread, retries=timer.retries,
                         alone=alone if team else None,
                         say=lambda why: say(f"matmul {dtype} {n}×{n}, again ({why})"))


#: The model the per-op overhead is timed on: the reference Transformer (einops, RoPE,
#: RMSNorm, SwiGLU, GQA) at widths where no kernel costs anything, so its time per op is
#: what a real model's code adds to each op: the module calls, einops' rearranges and
#: dispatch.  A stack of small Linear and ReLU layers (this probe's first design) ran at 1.5
#: µs an op on a 2-core EPYC where this model's forward and backward ran at 2.5 µs.
OVERHEAD_MODEL = replace(get_preset("tiny"), name="probe-overhead", vocab_size=16,
                         context_length=8, d_model=8, n_layers=2, n_heads=2, n_kv_heads=1,
                         head_dim=4, d_ff=16)


def _step_overhead(timer: _Timer, budget_s: float) -> tuple[float, float]:
    """Seconds per traced op of a tiny Transformer's forward and backward (a training step),
    and of its forward under ``no_grad`` (prefill and decode: no autograd graph recorded),
    whose kernels cost next to nothing (:data:`OVERHEAD_MODEL`)."""
    from tensorledger.models import build_model
    from tensorledger.trace import trace

    model = build_model(OVERHEAD_MODEL, timer.device)
    tokens = torch.zeros(1, 4, dtype=torch.long, device=timer.device)

    def step() -> None:
        model(tokens).sum().backward()
        for parameter in model.parameters():
            parameter.grad = None

    def forward() -> None:
        with torch.no_grad():
            model(tokens)

    per_op = []
    for name, run in (("per-op overhead", step), ("per-op overhead, inference", forward)):
        ops = len(trace(run).records)
        per_op.append(timer(run, name, budget_s=budget_s / 2).median_s / ops)
    return per_op[0], per_op[1]


def _bandwidth_label(point: BandwidthPoint) -> str:
    """How the probe names a bandwidth figure: ``"copy eager bandwidth 65536 B"``."""
    eager = "eager " if point.fresh_output else ""
    return f"{point.kernel} {eager}bandwidth {point.buffer_bytes} B"


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
    label = f"{'eager ' if fresh else ''}bandwidth {size} B"  # as _bandwidth_label names it
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
    timer = _Timer(dev, clock, max_spread, retries, slow_call_s,
                   team=dev.type == "cpu" and torch.get_num_threads() > 1)
    say = progress or (lambda _: None)
    name, memory = _device_name(dev)
    if sizes is None:
        sizes = ((256, 512, 1024, 2048, 4096, 8192) if dev.type == "cuda"
                 else (64, 128, 256, 512, 1024, 2048))
    # inputs rotate through twice the last-level cache, as a step's activations do; a GPU's
    # cache is small beside its tensors, so there the same buffers serve
    cold = 0 if dev.type == "cuda" else 2 * _last_level_cache_bytes()
    from tensorledger.bench.probe_attention import attention_sweep
    from tensorledger.bench.probe_kernels import default_plan, probe_attention, probe_kernels

    if attention_seqs is None:
        attention_seqs = ((32, 64, 128, 256, 512, 1024) if dev.type == "cpu"
                          else (512, 1024, 2048, 4096))
    plan = kernels or default_plan(dev.type, dtypes, attention_seqs)
    # attention first, before any one-thread check changes the thread count (a CPU's fused
    # attention runs slower for the rest of the process after that: probe_attention)
    attention = attention_sweep(timer, attention_seqs, budget_s, slow_call_s, say)
    fused = probe_attention(timer, plan, budget_s=budget_s / 4, slow_call_s=slow_call_s,
                            say=say)
    points, skipped, set_aside = _matmul_sweep(timer, dtypes, sizes, budget_s, max(1, rounds),
                                               cold, slow_call_s, say)
    # fp32 prices every op outside a matmul (and any matmul of a dtype left out): a profile
    # without it would price them at whatever dtype stayed, fp16's emulation on a CPU
    if not points or ("fp32" in dtypes and "fp32" not in skipped
                      and not any(p.dtype == "fp32" for p in points)):
        raise DeviceError(f"the probe's {'fp32 ' if points else ''}matmul figures stayed too "
                          f"noisy to use (spread above {max_spread:.0%} of the median, or a "
                          "stalled thread team): " + "; ".join(map(str, set_aside))
                          + "; probe again on a quieter machine, or allow a wider spread")
    for dtype in dict.fromkeys(dtypes):
        if dtype not in skipped and not any(p.dtype == dtype for p in points):
            set_aside.append(SetAside(f"matmul {dtype}", "every size set aside, so no peak "
                                      "and no curve: its matmuls are priced at fp32's"))
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
    measured = probe_kernels(timer, plan, budget_s=budget_s / 4, cold_bytes=cold,
                             max_elements=buffer_bytes // 4, slow_call_s=slow_call_s, say=say,
                             attention=fused)
    pages = fresh_pages(timer, budget_s=budget_s / 4, say=say) if bandwidth_sweep else None
    say("per-op overhead")
    tiny = torch.ones(1, device=dev)
    bare = timer(lambda: torch.add(tiny, tiny), "one bare op", budget_s=budget_s / 2,
                 min_sample_s=1e-4).median_s
    overhead, inference = _step_overhead(timer, budget_s / 2)
    # a wide attention or eager-bandwidth point is left out of its curve; of the DRAM
    # bandwidth's two kernels the steady one is kept, or both where both stay wide (the
    # profile cannot do without one), marked unreliable as the overheads are
    warm = [p for p in bandwidth if timer.kept(_bandwidth_label(p))] or list(bandwidth)
    kept_warm = {_bandwidth_label(p) for p in warm}
    set_aside += [SetAside(label, timer.why[label]) for label in (
        *(f"attention fp32 {seq}" for seq in sorted(attention_seqs)),
        *map(_bandwidth_label, (*bandwidth, *eager)), *measured.set_aside,
        *(label for label in timer.why if label.startswith(PAGE_LABEL)))
        if label in timer.why
        and label not in kept_warm]
    # an eager buffer mapped anew costs its fresh pages, which the profile prices apart
    eager = [p for p in eager if timer.kept(_bandwidth_label(p))
             and (pages is None or p.buffer_bytes < pages.from_bytes)]
    left_out = {s.figure for s in set_aside}
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
                       memory_bandwidth_bytes_per_s=max(p.bytes_per_s for p in warm),
                       op_overhead_s=overhead, bare_op_overhead_s=bare,
                       inference_op_overhead_s=inference, matmul=tuple(points),
                       attention=tuple(attention),
                       bandwidth=(*warm, *eager), skipped=(*skipped, *measured.skipped),
                       curves=curves,
                       unreliable=tuple(u for u in timer.unreliable
                                        if figure_of(u) not in left_out),
                       max_spread=max_spread, set_aside=tuple(set_aside), kernels=measured,
                       fresh_pages=pages)
